//! A proc's stdout and stderr, shipped from the node that runs it into the
//! cluster's log ([`tabos_kernel::logs`]), where any node reads them.
//!
//! ```text
//!   native: pipe ──reader task──┐
//!   wasm:   ShipWriter (Write) ─┴─► bounded queue ─► shipper task ─► logs::append
//!                                   (SHIP_QUEUE)      chunks of ≤ 64 KiB, cut at a
//!                                                     line's end when one is in
//!                                                     reach; what waits is sent
//!                                                     after FLUSH_AFTER at most
//! ```
//!
//! The queue is bounded: a proc that writes faster than the database takes
//! its output waits on its pipe (as under Docker's default, blocking log
//! mode) rather than the node holding its output in memory. While the
//! database is away (a failover), appends are retried with a back-off, so
//! nothing acknowledged is lost; a chunk over the realm's storage quota is
//! dropped (logged once per stream). A procd waits for its proc's shippers
//! to finish ([`Shipped::finish`], at most [`FINISH_MAX`]) before it records
//! the proc's end, so a proc seen ended has all its output in the log.

use std::time::Duration;

use tabos_kernel::ids::Pid;
use tabos_kernel::logs::{self, Limits, Stream, CHUNK_BYTES_MAX};
use tabos_store::Store;

/// Pieces of output queued for the shipper at most (each ≤ a pipe read,
/// 64 KiB): what a proc's output may hold of the node's memory.
pub const SHIP_QUEUE: usize = 16;
/// Output waits at most this long before it is appended.
pub const FLUSH_AFTER: Duration = Duration::from_millis(50);
/// How long a proc's end waits for its output to be appended.
pub const FINISH_MAX: Duration = Duration::from_secs(60);
/// Back-off between appends while the database is away.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(50);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);

/// Where a proc's output goes: the sending half of a shipper.
pub type Sink = tokio::sync::mpsc::Sender<Vec<u8>>;

/// A running shipper.
pub struct Shipped(tokio::task::JoinHandle<()>);

impl Shipped {
    /// Waits (at most [`FINISH_MAX`]) until everything sent before every
    /// [`Sink`] was dropped is appended.
    pub async fn finish(self) {
        let mut task = self.0;
        if tokio::time::timeout(FINISH_MAX, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Starts shipping proc `pid`'s `stream`.
pub fn ship(
    store: Store,
    realm: String,
    pid: Pid,
    stream: Stream,
    limits: Limits,
) -> (Sink, Shipped) {
    let (tx, rx) = tokio::sync::mpsc::channel(SHIP_QUEUE);
    let task = tokio::spawn(run(rx, store, realm, pid, stream, limits));
    (tx, Shipped(task))
}

async fn run(
    mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    store: Store,
    realm: String,
    pid: Pid,
    stream: Stream,
    limits: Limits,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut dropped_said = false;
    let to = Target {
        store: &store,
        realm: &realm,
        pid: &pid,
        stream,
        limits,
    };
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let got = match deadline {
            None => rx.recv().await,
            Some(at) => match tokio::time::timeout_at(at, rx.recv()).await {
                Ok(got) => got,
                Err(_) => {
                    // Waited long enough: all of it, a partial line too (a
                    // prompt is shown to a follower at once).
                    for piece in take_all(&mut buf) {
                        dropped_said = to.append(piece, dropped_said).await;
                    }
                    deadline = None;
                    continue;
                }
            },
        };
        match got {
            Some(bytes) => {
                if buf.is_empty() {
                    deadline = Some(tokio::time::Instant::now() + FLUSH_AFTER);
                }
                buf.extend_from_slice(&bytes);
                while buf.len() >= CHUNK_BYTES_MAX {
                    let piece = take_chunk(&mut buf);
                    dropped_said = to.append(piece, dropped_said).await;
                }
                if buf.is_empty() {
                    deadline = None;
                }
            }
            None => {
                for piece in take_all(&mut buf) {
                    dropped_said = to.append(piece, dropped_said).await;
                }
                return;
            }
        }
    }
}

/// Where a shipper appends.
struct Target<'a> {
    store: &'a Store,
    realm: &'a str,
    pid: &'a Pid,
    stream: Stream,
    limits: Limits,
}

impl Target<'_> {
    /// Appends `data`, retrying while the database is away; whether a
    /// drop over quota was said (`said`: before).
    async fn append(&self, data: Vec<u8>, said: bool) -> bool {
        let mut pause = tabos_client::retry::Backoff::new(RETRY_PAUSE_MIN, RETRY_PAUSE_MAX);
        let (pid, name) = (self.pid, self.stream.name());
        loop {
            let at = tabos_store::now_us();
            let appended = logs::append(
                self.store,
                self.realm,
                pid,
                self.stream,
                at,
                data.clone(),
                self.limits,
            )
            .await;
            match appended {
                Ok(a) if a.dropped && !said => {
                    tracing::warn!(
                        realm = %self.realm,
                        "{pid}'s {name}: output dropped, over the realm's storage quota"
                    );
                    return true;
                }
                Ok(_) => return said,
                Err(tabos_kernel::Error::Store(e)) if e.is_unavailable() => {
                    pause.wait().await;
                }
                Err(e) => {
                    tracing::warn!(realm = %self.realm, "{pid}'s {name}: output not kept: {e}");
                    return said;
                }
            }
        }
    }
}

/// The next chunk of a full buffer: up to a line's end within
/// [`CHUNK_BYTES_MAX`] when there is one, else exactly that many bytes.
fn take_chunk(buf: &mut Vec<u8>) -> Vec<u8> {
    debug_assert!(buf.len() >= CHUNK_BYTES_MAX);
    let window = &buf[..CHUNK_BYTES_MAX];
    let cut = window
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(CHUNK_BYTES_MAX, |i| i + 1);
    let rest = buf.split_off(cut);
    std::mem::replace(buf, rest)
}

/// Everything buffered, in chunks.
fn take_all(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let all = std::mem::take(buf);
    all.chunks(CHUNK_BYTES_MAX).map(<[u8]>::to_vec).collect()
}

/// A wasm proc's stdout or stderr: each write goes to its shipper (the
/// sandbox writes on a blocking thread, which waits when the queue is
/// full).
pub struct ShipWriter(Option<Sink>);

impl ShipWriter {
    pub fn new(sink: Sink) -> ShipWriter {
        ShipWriter(Some(sink))
    }
}

impl std::io::Write for ShipWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(sink) = &self.0 {
            if sink.blocking_send(buf.to_vec()).is_err() {
                // The shipper is gone (the node stops): the rest is dropped.
                self.0 = None;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Copies a child's stream to its shipper until the stream ends.
pub async fn pipe(mut from: impl tokio::io::AsyncRead + Unpin, sink: Sink) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; CHUNK_BYTES_MAX];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if sink.send(buf[..n].to_vec()).await.is_err() {
                    // Nobody ships any more: drain, so the child never
                    // blocks on a full pipe.
                    let _ = tokio::io::copy(&mut from, &mut tokio::io::sink()).await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_at_a_line_when_one_is_in_reach() {
        let mut buf = b"ab\n".repeat(CHUNK_BYTES_MAX / 3 + 10);
        let total = buf.len();
        let first = take_chunk(&mut buf);
        assert!(first.len() <= CHUNK_BYTES_MAX && first.ends_with(b"\n"));
        assert_eq!(first.len() + buf.len(), total);
        let mut long = vec![b'x'; CHUNK_BYTES_MAX + 5];
        assert_eq!(take_chunk(&mut long).len(), CHUNK_BYTES_MAX);
        assert_eq!(long.len(), 5);
        let mut rest = vec![1u8; CHUNK_BYTES_MAX * 2 + 1];
        let pieces = take_all(&mut rest);
        assert_eq!(
            pieces.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![CHUNK_BYTES_MAX, CHUNK_BYTES_MAX, 1]
        );
        assert!(rest.is_empty());
    }
}
