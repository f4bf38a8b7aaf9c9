//! Procs' output, kept in the cluster (issue 42, item 4): owns `proc_log`,
//! `proc_log_stream` and `proc_log_use` (migration 035).
//!
//! A proc's node reads its stdout and stderr and appends them here in
//! chunks ([`append`]: at most [`CHUNK_BYTES_MAX`], each stamped with when
//! the node read it), one transaction each, so any node answers
//! `tabos logs` — also once the proc's node is gone — and a follower is
//! woken by the change feed ([`channel`]), never by polling.
//!
//! Bounds, enforced in the append's own transaction:
//! * per proc and stream, the newest [`STREAM_BYTES_MAX`] bytes are kept
//!   (older chunks rotate out, like `kubectl logs` after a rotation);
//! * per realm, at most the node's `logs_per_realm_max` ([`Limits`]): past
//!   it the realm's oldest chunks go first, whichever proc wrote them;
//! * what is kept is the proc's `log_bytes`, counted against its realm's
//!   storage quota: a chunk that would pass the quota is dropped (the proc
//!   runs on; [`Appended::dropped`] says so).
//!
//! A proc's chunks go when its row does (pruned, its realm removed: the
//! `proc_log_gone` trigger).

use tabos_store::{params, Row, Tx};

use crate::auth::{Caller, Role};
use crate::ids::Pid;
use crate::{Error, Result};

/// Bytes of one stream of one proc kept at most: half the API's message
/// limit, so one Logs answer always holds all of it (the node asserts
/// this against its own limit).
pub const STREAM_BYTES_MAX: i64 = 8 << 20;
/// Bytes one append carries at most.
pub const CHUNK_BYTES_MAX: usize = 64 << 10;
/// A realm's logs kept at most by default.
pub const REALM_BYTES_DEFAULT: i64 = 1 << 30;
/// Chunks a rotation deletes per statement.
const ROTATE_BATCH: i64 = 64;
/// Bytes one follow read returns at most.
pub const FOLLOW_READ_BYTES_MAX: usize = 1 << 20;
/// Lines `--tail` may ask for at most.
pub const TAIL_LINES_MAX: u32 = 1_000_000;

/// Which of a proc's outputs (the API's `LogStream` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout = 1,
    Stderr = 2,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The bounds an append enforces (see the module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Per proc and stream.
    pub stream_max: i64,
    /// Per realm, over all its procs.
    pub realm_max: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            stream_max: STREAM_BYTES_MAX,
            realm_max: REALM_BYTES_DEFAULT,
        }
    }
}

/// The change-feed channel an append to proc `pid`'s log notifies.
pub fn channel(realm: &str, pid: &Pid) -> String {
    format!("logs/{realm}/{pid}")
}

/// What [`append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    /// Kept past the realm's storage quota: not stored.
    pub dropped: bool,
    /// Bytes of older chunks (this proc's or others') let go to make room.
    pub rotated: i64,
}

/// Appends `data` (1..=[`CHUNK_BYTES_MAX`] bytes) read at `at_us` to proc
/// `pid`'s `stream` (a procd's call, for the proc it runs).
pub async fn append(
    store: &tabos_store::Store,
    realm: &str,
    pid: &Pid,
    stream: Stream,
    at_us: i64,
    data: Vec<u8>,
    limits: Limits,
) -> Result<Appended> {
    let (r, pid) = (realm.to_string(), pid.clone());
    crate::call(store, realm, move |tx| {
        append_tx(tx, &r, &pid, stream, at_us, &data, limits)
    })
    .await
}

/// Procedure body of [`append`].
pub fn append_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    stream: Stream,
    at_us: i64,
    data: &[u8],
    limits: Limits,
) -> Result<Appended> {
    if data.is_empty() || data.len() > CHUNK_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "a log chunk is 1..={CHUNK_BYTES_MAX} bytes, not {}",
            data.len()
        )));
    }
    let p = i64::from(tx.p_key().0);
    // The proc is there (its row holds what its chunks hold).
    crate::procs::get_tx(tx, realm, pid.as_str())?;
    let len = data.len() as i64;
    if crate::realms::check_room_tx(tx, realm, crate::realms::StorageClass::Logs, len).is_err() {
        return Ok(Appended {
            dropped: true,
            rotated: 0,
        });
    }
    let (seq, at_byte) = position_tx(tx, realm, pid, stream)?;
    tx.execute(
        "INSERT INTO proc_log_stream (p_key, realm, pid, stream, next_seq, end_byte) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (p_key, realm, pid, stream) DO UPDATE SET next_seq = $5, end_byte = $6",
        params![
            p,
            realm,
            pid.as_str(),
            stream as i64,
            seq + 1,
            at_byte + len
        ],
    )?;
    tx.execute(
        "INSERT INTO proc_log (p_key, realm, pid, stream, seq, at_byte, at_us, data) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        params![
            p,
            realm,
            pid.as_str(),
            stream as i64,
            seq,
            at_byte,
            at_us,
            data.to_vec()
        ],
    )?;
    let mut freed: Vec<(String, i64)> = Vec::new();
    // The stream's newest stream_max bytes: older chunks rotate out.
    let end = at_byte + len;
    loop {
        let oldest = tx.query(
            "SELECT seq, at_byte, octet_length(data) FROM proc_log \
             WHERE p_key = $1 AND realm = $2 AND pid = $3 AND stream = $4 \
             ORDER BY seq LIMIT $5",
            params![p, realm, pid.as_str(), stream as i64, ROTATE_BATCH],
        )?;
        let Some(first) = oldest.rows.first() else {
            break;
        };
        if end - first.get::<i64>(1)? <= limits.stream_max {
            break;
        }
        let mut upto = None;
        let mut gone = 0;
        for row in &oldest.rows {
            let (s, from, n) = (row.get::<i64>(0)?, row.get::<i64>(1)?, row.get::<i64>(2)?);
            // The chunk just written stays, whatever the bound.
            if s == seq || end - from <= limits.stream_max {
                break;
            }
            upto = Some(s);
            gone += n;
        }
        let Some(upto) = upto else {
            break;
        };
        tx.execute(
            "DELETE FROM proc_log WHERE p_key = $1 AND realm = $2 AND pid = $3 \
             AND stream = $4 AND seq <= $5",
            params![p, realm, pid.as_str(), stream as i64, upto],
        )?;
        freed.push((pid.as_str().to_string(), gone));
    }
    // The realm's bound: its oldest chunks first.
    let used: i64 = tx
        .query_opt(
            "SELECT bytes FROM proc_log_use WHERE p_key = $1 AND realm = $2",
            params![p, realm],
        )?
        .map(|r| r.get(0))
        .transpose()?
        .unwrap_or(0);
    let mut over = used + len - freed.iter().map(|f| f.1).sum::<i64>() - limits.realm_max;
    while over > 0 {
        let oldest = tx.query(
            "SELECT pid, stream, seq, octet_length(data) FROM proc_log \
             WHERE p_key = $1 AND realm = $2 ORDER BY at_us, pid, stream, seq LIMIT $3",
            params![p, realm, ROTATE_BATCH],
        )?;
        let mut progressed = false;
        for row in &oldest.rows {
            if over <= 0 {
                break;
            }
            let (who, st, s, n): (String, i64, i64, i64) =
                (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
            if who == pid.as_str() && st == stream as i64 && s == seq {
                continue;
            }
            tx.execute(
                "DELETE FROM proc_log WHERE p_key = $1 AND realm = $2 AND pid = $3 \
                 AND stream = $4 AND seq = $5",
                params![p, realm, who.as_str(), st, s],
            )?;
            freed.push((who, n));
            over -= n;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    // Each proc's log_bytes (metered into its realm's storage), and the
    // realm's total.
    let mut by_proc: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    *by_proc.entry(pid.as_str()).or_default() += len;
    for (who, n) in &freed {
        *by_proc.entry(who.as_str()).or_default() -= n;
    }
    for (who, delta) in &by_proc {
        if *delta != 0 {
            crate::procs::add_log_bytes_tx(tx, realm, who, *delta)?;
        }
    }
    let rotated: i64 = freed.iter().map(|f| f.1).sum();
    tx.execute(
        "INSERT INTO proc_log_use (p_key, realm, bytes) VALUES ($1, $2, $3) \
         ON CONFLICT (p_key, realm) DO UPDATE SET bytes = proc_log_use.bytes + $3",
        params![p, realm, len - rotated],
    )?;
    tx.notify(&channel(realm, pid), "")?;
    Ok(Appended {
        dropped: false,
        rotated,
    })
}

/// Stream `stream` of proc `pid`: its next chunk's seq and where that
/// chunk starts.
fn position_tx(tx: &mut dyn Tx, realm: &str, pid: &Pid, stream: Stream) -> Result<(i64, i64)> {
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT next_seq, end_byte FROM proc_log_stream \
         WHERE p_key = $1 AND realm = $2 AND pid = $3 AND stream = $4",
        params![p, realm, pid.as_str(), stream as i64],
    )?;
    Ok(match row {
        Some(r) => (r.get(0)?, r.get(1)?),
        None => (1, 0),
    })
}

/// What a read of a log returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Read {
    pub data: Vec<u8>,
    /// Where each chunk starts in `data`, and when it was read (µs).
    pub marks: Vec<(usize, i64)>,
    /// Older output is not in `data`: rotated out, or left out by
    /// `since`/`tail`.
    pub truncated: bool,
    /// The last chunk's seq (0 when none): what a follower reads after.
    pub last_seq: i64,
}

/// What to read of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// Chunks read at or after this time (µs; 0: all).
    pub since_us: i64,
    /// Only the last this many lines (0: all).
    pub tail_lines: u32,
    /// Chunks after this seq (a follower's position; 0: from the start).
    pub after_seq: i64,
    /// Bytes at most (0: all there is, at most [`STREAM_BYTES_MAX`]).
    pub max_bytes: usize,
}

/// Proc `pid`'s `stream` as kept, for `who` (role reader, its realm): any
/// node answers, whether or not the proc runs, ran here, or its node is
/// gone.
pub async fn read_for(
    store: &tabos_store::Store,
    who: &Caller,
    pid: &Pid,
    stream: Stream,
    want: Want,
) -> Result<Read> {
    who.may(Role::Reader, "read procs' logs")?;
    if want.tail_lines > TAIL_LINES_MAX {
        return Err(Error::Invalid(format!(
            "--tail is at most {TAIL_LINES_MAX} lines"
        )));
    }
    let (realm, pid) = (who.realm().to_string(), pid.clone());
    crate::read(store, who.realm(), move |tx| {
        crate::procs::get_tx(tx, &realm, pid.as_str())?;
        read_tx(tx, &realm, &pid, stream, want)
    })
    .await
}

/// Procedure body: the first `max` bytes of proc `pid`'s `stream` as kept
/// (a graph's proc task's output is its stdout).
pub fn head_tx(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    stream: Stream,
    max: usize,
) -> Result<Vec<u8>> {
    let p = i64::from(tx.p_key().0);
    let rows = tx.query(
        "SELECT data FROM proc_log WHERE p_key = $1 AND realm = $2 AND pid = $3 AND stream = $4 \
         ORDER BY seq",
        params![p, realm, pid.as_str(), stream as i64],
    )?;
    let mut out = Vec::new();
    for r in &rows.rows {
        let data: Vec<u8> = r.get(0)?;
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&data[..data.len().min(room)]);
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

fn read_tx(tx: &mut dyn Tx, realm: &str, pid: &Pid, stream: Stream, want: Want) -> Result<Read> {
    let p = i64::from(tx.p_key().0);
    let max = match want.max_bytes {
        0 => STREAM_BYTES_MAX as usize,
        n => n,
    };
    let chunks = if want.tail_lines > 0 {
        tail_chunks(tx, realm, pid, stream, want, max)?
    } else {
        let rows = tx.query(
            "SELECT seq, at_byte, at_us, data FROM proc_log \
             WHERE p_key = $1 AND realm = $2 AND pid = $3 AND stream = $4 \
             AND seq > $5 AND at_us >= $6 ORDER BY seq",
            params![
                p,
                realm,
                pid.as_str(),
                stream as i64,
                want.after_seq,
                want.since_us
            ],
        )?;
        let mut chunks = Vec::new();
        let mut bytes = 0;
        for row in &rows.rows {
            let c = chunk(row)?;
            // What fits in `max`, from the first (a follower reads on).
            if !chunks.is_empty() && bytes + c.3.len() > max {
                break;
            }
            bytes += c.3.len();
            chunks.push(c);
        }
        chunks
    };
    // Something before the first chunk read is not here: rotated out, or
    // before `since` (a follower from its position is not truncated).
    let truncated = want.after_seq == 0
        && match chunks.first() {
            Some(c) => c.1 > 0,
            None => position_tx(tx, realm, pid, stream)?.1 > 0,
        };
    let mut out = Read {
        truncated,
        ..Read::default()
    };
    for (seq, _, at_us, data) in chunks {
        out.marks.push((out.data.len(), at_us));
        out.data.extend_from_slice(&data);
        out.last_seq = seq;
    }
    if want.tail_lines > 0 {
        let cut = tail_start(&out.data, want.tail_lines as usize);
        if cut > 0 {
            out.truncated = true;
            out.data.drain(..cut);
            // Marks move with the data: the piece the cut falls in starts
            // at 0, the later ones where they were less the cut.
            let mut marks: Vec<(usize, i64)> = out
                .marks
                .iter()
                .rev()
                .find(|(at, _)| *at <= cut)
                .map(|(_, t)| (0, *t))
                .into_iter()
                .collect();
            marks.extend(
                out.marks
                    .iter()
                    .filter(|(at, _)| *at > cut)
                    .map(|(at, t)| (at - cut, *t)),
            );
            out.marks = marks;
        }
    }
    Ok(out)
}

/// The newest chunks that hold the last `want.tail_lines` lines (at most
/// `max` bytes), oldest first: read from the end in batches, never the
/// whole stream.
fn tail_chunks(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    stream: Stream,
    want: Want,
    max: usize,
) -> Result<Vec<Chunk>> {
    let p = i64::from(tx.p_key().0);
    let (mut picked, mut bytes, mut newlines) = (Vec::new(), 0, 0);
    let mut before = i64::MAX;
    'read: loop {
        let rows = tx.query(
            "SELECT seq, at_byte, at_us, data FROM proc_log \
             WHERE p_key = $1 AND realm = $2 AND pid = $3 AND stream = $4 \
             AND seq > $5 AND at_us >= $6 AND seq < $7 ORDER BY seq DESC LIMIT $8",
            params![
                p,
                realm,
                pid.as_str(),
                stream as i64,
                want.after_seq,
                want.since_us,
                before,
                ROTATE_BATCH
            ],
        )?;
        if rows.rows.is_empty() {
            break;
        }
        for row in &rows.rows {
            let c = chunk(row)?;
            before = c.0;
            if !picked.is_empty() && bytes + c.3.len() > max {
                break 'read;
            }
            bytes += c.3.len();
            newlines += c.3.iter().filter(|b| **b == b'\n').count();
            picked.push(c);
            // One newline more than the lines: the cut is in what is read.
            if newlines > want.tail_lines as usize {
                break 'read;
            }
        }
    }
    picked.reverse();
    Ok(picked)
}

/// A chunk as read: seq, where it starts in the stream, when it was
/// read, its bytes.
type Chunk = (i64, i64, i64, Vec<u8>);

fn chunk(row: &Row) -> Result<Chunk> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

/// Where the last `n` lines of `data` begin (a final line without its
/// newline counts as one).
pub fn tail_start(data: &[u8], n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    // A newline that ends the data ends the last line; it starts none.
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
}

/// Procedure body: deletes what `realm`'s logs hold (its removal; the
/// procs' rows, deleted first, took their chunks with them).
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "DELETE FROM proc_log WHERE p_key = $1 AND realm = $2",
        params![p, realm],
    )?;
    let n = n + tx.execute(
        "DELETE FROM proc_log_stream WHERE p_key = $1 AND realm = $2",
        params![p, realm],
    )?;
    let m = tx.execute(
        "DELETE FROM proc_log_use WHERE p_key = $1 AND realm = $2",
        params![p, realm],
    )?;
    Ok(n + m)
}

#[cfg(test)]
mod tests {
    use super::tail_start;

    #[test]
    fn the_tail_starts_at_the_nth_last_line() {
        assert_eq!(tail_start(b"a\nb\nc\n", 1), 4);
        assert_eq!(tail_start(b"a\nb\nc\n", 2), 2);
        assert_eq!(tail_start(b"a\nb\nc\n", 3), 0);
        assert_eq!(tail_start(b"a\nb\nc\n", 9), 0);
        assert_eq!(tail_start(b"a\nb\nc", 1), 4);
        assert_eq!(tail_start(b"", 1), 0);
        assert_eq!(tail_start(b"abc", 0), 0);
    }
}
