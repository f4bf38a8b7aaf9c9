//! Named pipes (σOS Figure 4-1: procs make "files, directories, symlinks,
//! pipes" in the namespace; Plan 9's pipes in the namespace): a FIFO is an
//! entry of the filesystem, made by [`mkfifo_tx`] (or the mount's mkfifo),
//! named, permitted and opened like a file, whose bytes are a queue.
//!
//! Tables (migration `043_fifo`): `fs_fifo_data` holds the chunks written
//! and not yet read, in order (a write is one chunk; a read takes from the
//! head and leaves a partly read chunk's rest); the FIFO's `fs_inode.f_size`
//! is how many bytes they hold — so the realm's storage quota counts them;
//! `fs_fifo` counts the read and write ends ever opened; `fs_open.fifo_mark`
//! keeps what a handle's end-of-file or broken pipe is measured against.
//!
//! Semantics, as a Linux pipe's where they can be:
//!
//! * **Byte stream with back-pressure.** At most [`FIFO_BYTES_MAX`] bytes
//!   wait in a FIFO; a write takes what fits and waits for room for the
//!   rest, and a write of at most [`PIPE_BUF`] bytes goes in whole or
//!   waits (POSIX's atomic writes). A read takes up to what it asks from
//!   the head, or waits for bytes.
//! * **End of file.** A read of an empty FIFO returns no bytes — EOF —
//!   once no write end is open and one has been opened since the reader's
//!   own end was (or was open then); before any writer came it waits, as
//!   open(2) of a FIFO waits for the other end. A read end opened when no
//!   writer is open but bytes wait (their writers came and went: a
//!   durable FIFO's writer does not wait for a reader) reads them, then
//!   EOF — `echo hi > p; cat p` prints `hi` and ends; on an empty FIFO it
//!   waits for a writer, as open(2) would.
//! * **Broken pipe.** A write with no read end open, after a reader that
//!   came since the writer's end was opened has gone, fails with
//!   [`Error::BrokenPipe`] (EPIPE). Before any reader came, writes fill the
//!   FIFO and then wait — the bytes stay, for whoever opens it next (the
//!   FIFO is durable: unlike a kernel pipe, what is written and not read
//!   outlives its writers, and a node's restart).
//! * **By path or by handle.** A handle's end is counted from
//!   [`super::open_tx`] until its close or its session's end, so a writer
//!   that dies gives its readers EOF when its session lapses. A call by
//!   path has no end of its own: a read by path of an empty FIFO with no
//!   writer open returns EOF once any writer has ever opened it (to wait
//!   for the next writer instead, open a handle); a write by path takes
//!   its mark when it starts, so it fails only if a reader came and went
//!   while it waited.
//!
//! Every change to a FIFO (bytes in or out, an end opened or closed)
//! notifies its channel ([`channel`]) in the same transaction; a waiting
//! reader or writer ([`waiting`]) sleeps on that channel, never polls, and
//! tries again when woken — across nodes, as the change feed goes. A wait
//! is bounded by [`FIFO_WAIT_MAX`] (then UNAVAILABLE: call again). A read
//! whose caller goes away while its transaction is on its way (which then
//! commits all the same) puts what it took back at the head ([`unread`]),
//! as a mailbox's receive does.

use std::sync::Arc;
use std::time::Duration;

use tabos_store::{params, Store, Tx};

use super::{
    acting, insert_entry, p_key, resolve, validate_realm, Access, Caller, Error, FileRef, FileType,
    Layout, Need, Result, Role, Stat, BLOCK_BYTES_LOCAL,
};

/// Most bytes waiting in one FIFO (Linux's default pipe capacity).
pub const FIFO_BYTES_MAX: i64 = 64 << 10;
/// Writes of at most this many bytes go in whole or not at all (POSIX
/// PIPE_BUF, Linux's 4 KiB).
pub const PIPE_BUF: usize = 4_096;
/// Longest one read or write waits for the other end; then UNAVAILABLE.
pub const FIFO_WAIT_MAX: Duration = Duration::from_secs(3_600);
/// Most chunks one read takes (a FIFO of many tiny writes is read in
/// several calls).
const CHUNKS_PER_READ_MAX: i64 = 1_024;

/// The change-feed channel of FIFO `id`: every change to it is told here.
pub fn channel(realm: &str, id: &str) -> String {
    crate::bounded_channel(&format!("fifo/{realm}/"), id)
}

/// What one attempt at a read or write came to.
#[derive(Debug)]
pub enum Step<T> {
    Done(T),
    /// Nothing to do yet: wait for the FIFO to change, then try again with
    /// this mark (the call's end, for a call by path).
    Wait(i64),
}

/// Procedure body: makes an empty FIFO at `path` with `mode` (exclusive).
pub fn mkfifo_tx(
    tx: &mut dyn Tx,
    who: &Caller,
    path: &str,
    mode: i64,
    now_us: i64,
) -> Result<Stat> {
    let realm = acting(who, Role::Member)?;
    validate_realm(realm)?;
    let layout = Layout::Local {
        block_size: BLOCK_BYTES_LOCAL,
    };
    let st = insert_entry(tx, realm, path, FileType::Fifo, &layout, who, mode, now_us)?;
    tx.execute(
        "INSERT INTO fs_fifo (p_key, realm, f_id) VALUES ($1, $2, $3)",
        params![p_key(tx), realm, st.id.as_str()],
    )?;
    Ok(st)
}

/// How many read and write ends of `id` are open now.
fn ends_open(tx: &mut dyn Tx, realm: &str, id: &str) -> Result<(i64, i64)> {
    let r = tx.query_one(
        "SELECT COALESCE(SUM(CASE WHEN access IN (4, 6) THEN 1 ELSE 0 END), 0), \
         COALESCE(SUM(CASE WHEN access IN (2, 6) THEN 1 ELSE 0 END), 0) \
         FROM fs_open WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, id],
    )?;
    Ok((r.get(0)?, r.get(1)?))
}

/// How many read and write ends of `id` were ever opened, and the next
/// chunk's seq.
fn counters(tx: &mut dyn Tx, realm: &str, id: &str) -> Result<(i64, i64, i64)> {
    let r = tx
        .query_opt(
            "SELECT reader_opens, writer_opens, next_seq FROM fs_fifo \
             WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![p_key(tx), realm, id],
        )?
        .ok_or_else(|| Error::NotFound(format!("fifo {id}: gone")))?;
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

/// For [`super::open_tx`], before the handle's row goes in: counts the
/// end opened and returns the handle's mark — for a read end, the write
/// ends opened before it that were not open then (so EOF needs a writer
/// that came after, or one open now to close); for a write end, the same
/// of readers. A read end opened on bytes `held` by writers all gone is
/// measured from before the last of them, so it reads those bytes and
/// then EOF: with a durable FIFO the writer did not wait for a reader
/// (`echo hi > p; cat p` prints `hi` and ends), where a kernel pipe's
/// writer would have waited in open(2) for `cat`.
pub(super) fn opened_tx(
    tx: &mut dyn Tx,
    realm: &str,
    id: &str,
    held: i64,
    access: Access,
) -> Result<i64> {
    let (readers, writers) = ends_open(tx, realm, id)?;
    let (reader_opens, writer_opens, _) = counters(tx, realm, id)?;
    let (reads, writes) = match access {
        Access::Read => (1, 0),
        Access::Write => (0, 1),
        Access::ReadWrite => (1, 1),
    };
    tx.execute(
        "UPDATE fs_fifo SET reader_opens = reader_opens + $4, writer_opens = writer_opens + $5 \
         WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, id, reads, writes],
    )?;
    tx.notify(&channel(realm, id), "open")?;
    Ok(match access {
        Access::Write => reader_opens - readers,
        _ if writers == 0 && held > 0 && writer_opens > 0 => writer_opens - 1,
        _ => writer_opens - writers,
    })
}

/// For whatever closes a FIFO's handles (a close, a session's end): wakes
/// its waiters, who look again for EOF or a broken pipe.
pub(super) fn closed_tx(tx: &mut dyn Tx, realm: &str, id: &str) -> Result<()> {
    tx.notify(&channel(realm, id), "close")?;
    Ok(())
}

/// For a FIFO's last name and handle going: its bytes and counters go.
pub(super) fn remove_tx(tx: &mut dyn Tx, realm: &str, id: &str) -> Result<()> {
    let pk = p_key(tx);
    for sql in [
        "DELETE FROM fs_fifo_data WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        "DELETE FROM fs_fifo WHERE p_key = $1 AND realm = $2 AND f_id = $3",
    ] {
        tx.execute(sql, params![pk, realm, id])?;
    }
    closed_tx(tx, realm, id)
}

/// The mark a call on `target` is measured against: its handle's, or for a
/// call by path the one its first attempt took (`mark`), or now's.
fn mark_of(
    tx: &mut dyn Tx,
    realm: &str,
    target: &FileRef,
    mark: Option<i64>,
    now: impl FnOnce() -> i64,
) -> Result<i64> {
    match target {
        FileRef::Handle(h) => Ok(tx
            .query_opt(
                "SELECT fifo_mark FROM fs_open WHERE p_key = $1 AND realm = $2 AND handle = $3",
                params![p_key(tx), realm, h.as_str()],
            )?
            .map(|r| r.get::<Option<i64>>(0))
            .transpose()?
            .flatten()
            .unwrap_or(0)),
        FileRef::Path(_) => Ok(mark.unwrap_or_else(now)),
    }
}

/// The FIFO `target` names, for `who` to `need` (by path: its mode; by
/// handle: the handle's access).
fn the_fifo(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    target: &FileRef,
    need: Need,
) -> Result<Stat> {
    let st = resolve(tx, realm, who, target, Some(need))?;
    if st.file_type != FileType::Fifo {
        return Err(Error::Invalid(format!("{target} is no longer a FIFO")));
    }
    Ok(st)
}

/// One attempt at reading up to `len` bytes of the FIFO `target` names.
pub(super) fn read_step(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    target: &FileRef,
    mark: Option<i64>,
    len: usize,
) -> Result<(Stat, Step<Vec<u8>>)> {
    let st = the_fifo(tx, realm, who, target, Need::Read)?;
    let id = st.id.as_str();
    let pk = p_key(tx);
    if len == 0 {
        return Ok((st, Step::Done(Vec::new())));
    }
    let chunks = tx.query(
        "SELECT seq, data FROM fs_fifo_data WHERE p_key = $1 AND realm = $2 AND f_id = $3 \
         ORDER BY seq LIMIT $4",
        params![pk, realm, id, CHUNKS_PER_READ_MAX],
    )?;
    let mut out = Vec::new();
    let mut taken_to = None;
    for c in chunks.iter() {
        let (seq, data): (i64, Vec<u8>) = (c.get(0)?, c.get(1)?);
        let room = len - out.len();
        if data.len() <= room {
            out.extend_from_slice(&data);
            taken_to = Some(seq);
            if data.len() == room {
                break;
            }
        } else {
            out.extend_from_slice(&data[..room]);
            tx.execute(
                "UPDATE fs_fifo_data SET data = $5 \
                 WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND seq = $4",
                params![pk, realm, id, seq, data[room..].to_vec()],
            )?;
            break;
        }
    }
    if let Some(last) = taken_to {
        tx.execute(
            "DELETE FROM fs_fifo_data WHERE p_key = $1 AND realm = $2 AND f_id = $3 AND seq <= $4",
            params![pk, realm, id, last],
        )?;
    }
    if !out.is_empty() {
        tx.execute(
            "UPDATE fs_inode SET f_size = f_size - $4 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![pk, realm, id, out.len() as i64],
        )?;
        debug_assert!(out.len() as i64 <= st.size, "read more than the FIFO held");
        tx.notify(&channel(realm, id), "read")?;
        return Ok((st, Step::Done(out)));
    }
    let (_, writers) = ends_open(tx, realm, id)?;
    let (_, writer_opens, _) = counters(tx, realm, id)?;
    // A call by path has no end to measure from: EOF once any writer has
    // been and none is left (a reader that would wait for the next writer
    // opens a handle).
    let mark = mark_of(tx, realm, target, mark, || 0)?;
    if writers == 0 && writer_opens > mark {
        return Ok((st, Step::Done(Vec::new()))); // EOF
    }
    Ok((st, Step::Wait(mark)))
}

/// One attempt at writing `data` (or as much of it as fits) to the FIFO
/// `target` names; done with how many bytes went in. Also returns the
/// call's mark, for the next part of a call by path.
pub(super) fn write_step(
    tx: &mut dyn Tx,
    realm: &str,
    who: &Caller,
    target: &FileRef,
    mark: Option<i64>,
    data: &[u8],
    now_us: i64,
) -> Result<(Stat, Step<usize>, i64)> {
    let st = the_fifo(tx, realm, who, target, Need::Write)?;
    let id = st.id.clone();
    let (readers, _) = ends_open(tx, realm, &id)?;
    let (reader_opens, _, seq) = counters(tx, realm, &id)?;
    let mark = mark_of(tx, realm, target, mark, || reader_opens - readers)?;
    if readers == 0 && reader_opens > mark {
        return Err(Error::BrokenPipe(format!(
            "{target}: no reader left (every read end opened since this one was is closed)"
        )));
    }
    // A write by path is a write end opened and closed by the call: it
    // counts as one when its last byte goes in (or at once, if it has
    // none), so readers by path see EOF after it.
    let ends_the_call = |tx: &mut dyn Tx, wrote: usize| -> Result<()> {
        if matches!(target, FileRef::Path(_)) && wrote == data.len() {
            tx.execute(
                "UPDATE fs_fifo SET writer_opens = writer_opens + 1 \
                 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
                params![p_key(tx), realm, id.as_str()],
            )?;
        }
        Ok(())
    };
    if data.is_empty() {
        ends_the_call(tx, 0)?;
        tx.notify(&channel(realm, &id), "write")?;
        return Ok((st, Step::Done(0), mark));
    }
    let room = (FIFO_BYTES_MAX - st.size).max(0) as usize;
    if room == 0 || (data.len() <= PIPE_BUF && room < data.len()) {
        return Ok((st, Step::Wait(mark), mark));
    }
    let n = room.min(data.len());
    let chunk = data[..n].to_vec();
    crate::realms::metered(tx, realm, |tx| {
        let pk = p_key(tx);
        tx.execute(
            "INSERT INTO fs_fifo_data (p_key, realm, f_id, seq, data) VALUES ($1, $2, $3, $4, $5)",
            params![pk, realm, id.as_str(), seq, chunk],
        )?;
        tx.execute(
            "UPDATE fs_fifo SET next_seq = next_seq + 1 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![pk, realm, id.as_str()],
        )?;
        tx.execute(
            "UPDATE fs_inode SET f_size = f_size + $4, mtime_us = $5, ctime_us = $5 \
             WHERE p_key = $1 AND realm = $2 AND f_id = $3",
            params![pk, realm, id.as_str(), n as i64, now_us],
        )?;
        Ok(())
    })?;
    debug_assert!(
        st.size + n as i64 <= FIFO_BYTES_MAX,
        "past the FIFO's capacity"
    );
    ends_the_call(tx, n)?;
    tx.notify(&channel(realm, &id), "write")?;
    Ok((st, Step::Done(n), mark))
}

/// What becomes of a finished attempt whose caller went away before it
/// was answered (its transaction commits all the same): a read's bytes are
/// put back at the head ([`unread`]); a write's stay written.
pub(super) type Orphaned<T> = Option<Arc<dyn Fn(T) + Send + Sync>>;

/// One attempt's transaction, awaited; dropped unanswered, its result goes
/// to its [`Orphaned`] once it commits.
struct Attempt<T: Send + 'static> {
    pending: Option<tabos_store::Pending<Step<T>, Error>>,
    orphaned: Orphaned<T>,
}

impl<T: Send + 'static> std::future::Future for Attempt<T> {
    type Output = Result<Step<T>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let pending = self.pending.as_mut().expect("polled after it was answered");
        let got = std::task::ready!(std::pin::Pin::new(pending).poll(cx));
        self.pending = None;
        std::task::Poll::Ready(got)
    }
}

impl<T: Send + 'static> Drop for Attempt<T> {
    fn drop(&mut self) {
        let (Some(pending), Some(orphaned)) = (self.pending.take(), self.orphaned.take()) else {
            return;
        };
        let done = move |got: Result<Step<T>>| {
            if let Ok(Step::Done(v)) = got {
                orphaned(v);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(async move { done(pending.await) })),
            Err(_) => drop(std::thread::spawn(move || done(pending.wait()))),
        }
    }
}

/// The [`Orphaned`] of a read of FIFO `id`: its bytes go back to the head,
/// in a transaction of their own.
pub(super) fn unread(store: &Store, realm: &str, id: &str) -> Orphaned<Vec<u8>> {
    let (store, realm, id) = (store.for_realm(realm), realm.to_string(), id.to_string());
    Some(Arc::new(move |data: Vec<u8>| {
        if data.is_empty() {
            return;
        }
        let Ok(pk) = crate::partition(&store, &realm) else {
            return;
        };
        let (r, i) = (realm.clone(), id.clone());
        drop(store.submit(pk, move |tx| unread_tx(tx, &r, &i, &data)));
    }))
}

/// Procedure body: puts `data` back at the head of FIFO `id` (gone: nothing).
fn unread_tx(tx: &mut dyn Tx, realm: &str, id: &str, data: &[u8]) -> Result<()> {
    let pk = p_key(tx);
    let head = tx.query_opt(
        "SELECT COALESCE((SELECT MIN(seq) FROM fs_fifo_data \
         WHERE p_key = $1 AND realm = $2 AND f_id = $3), f.next_seq) \
         FROM fs_fifo f WHERE f.p_key = $1 AND f.realm = $2 AND f.f_id = $3",
        params![pk, realm, id],
    )?;
    let Some(head) = head else {
        return Ok(());
    };
    let seq = head.get::<i64>(0)? - 1;
    tx.execute(
        "INSERT INTO fs_fifo_data (p_key, realm, f_id, seq, data) VALUES ($1, $2, $3, $4, $5)",
        params![pk, realm, id, seq, data.to_vec()],
    )?;
    tx.execute(
        "UPDATE fs_inode SET f_size = f_size + $4 WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![pk, realm, id, data.len() as i64],
    )?;
    tx.notify(&channel(realm, id), "unread")?;
    Ok(())
}

/// Runs `attempt` (one transaction on the realm's writer) until it is
/// done, sleeping on FIFO `id`'s channel between attempts — subscribed
/// before each attempt, so a change committed after it wakes the wait.
/// At most [`FIFO_WAIT_MAX`] in all (then UNAVAILABLE). Dropped while an
/// attempt's transaction is on its way, what it did goes to `orphaned`.
pub(super) async fn waiting<T, F>(
    store: &Store,
    realm: &str,
    id: &str,
    orphaned: Orphaned<T>,
    attempt: F,
) -> Result<T>
where
    T: Send + 'static,
    F: Fn(&mut dyn Tx, Option<i64>) -> Result<Step<T>> + Clone + Send + 'static,
{
    let chan = channel(realm, id);
    let pk = crate::partition(store, realm)?;
    let deadline = tokio::time::Instant::now() + FIFO_WAIT_MAX;
    let mut mark = None;
    let mut sub = store.subscribe(&chan);
    loop {
        let once = attempt.clone();
        let attempt = Attempt {
            pending: Some(store.for_realm(realm).run(pk, move |tx| once(tx, mark))),
            orphaned: orphaned.clone(),
        };
        match attempt.await? {
            Step::Done(v) => return Ok(v),
            Step::Wait(m) => mark = Some(m),
        }
        match tokio::time::timeout_at(deadline, sub.recv()).await {
            Err(_) => {
                return Err(Error::Unavailable(format!(
                    "waited {}s for the other end of a FIFO: call again",
                    FIFO_WAIT_MAX.as_secs()
                )))
            }
            // Cut off (a subscriber that fell behind): subscribe afresh;
            // the next attempt sees whatever it missed.
            Ok(Err(_)) => sub = store.subscribe(&chan),
            // Woken: whatever else is queued is seen by the next attempt.
            Ok(Ok(_)) => while let Ok(Some(_)) = sub.try_recv() {},
        }
    }
}
