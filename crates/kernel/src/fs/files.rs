//! File operations that take more than one transaction, run by [`Files`]:
//!
//! * **Parallel files** (DBOS Figure 9's `Parallel_File`): block `n` of a
//!   file lives on partition `(h(id) + n) mod P`. A write checks
//!   permission and reads the size on the realm's partition (the *plan*),
//!   writes its blocks on each partition in one transaction apiece, then
//!   commits the size on the realm's partition last — if the file's
//!   version is still the plan's. A crash between leaves blocks past the
//!   committed size, never a size without blocks; a later write that
//!   extends the file first cuts what lies past the committed size, so such
//!   leftovers never show.
//! * **Files in segments**: a localized file that a write would take past
//!   the threshold ([`FsSettings::segment_threshold`]) moves its data to
//!   blockio segments; `fs_extent` maps file offsets to segments. A write
//!   plans, allocates a new extent if the file outgrows its extents (at
//!   least doubling them; a new segment reads as zeros), writes and syncs
//!   the data, then commits extents and size if the version is unchanged.
//!   Overwrites are in place (as on any POSIX filesystem, a write that has
//!   not returned may be partly visible); bytes between the old end and a
//!   write past it are zeroed before the commit, so what lies past a
//!   file's size in its extents never shows.
//! * **Reclaim**: removing a file (unlink, rename over it, a shrinking
//!   truncate) queues its segments or parallel blocks in `fs_reclaim` in
//!   the same transaction; [`Files::reclaim`] gives them back after the
//!   commit, and [`Files::recover`] at start-up gives back what a crash
//!   left queued, and any `fs/` segment no extent names (a write that
//!   crashed before its commit).
//!
//! A conflict (another change committed between a plan and its commit)
//! retries the whole operation, at most [`ATTEMPTS`] times.

use std::sync::Arc;

use tabos_blockio::{CachePolicy, Device};
use tabos_store::{params, PKey, Store, Tx};

use super::{
    assemble, check_read, check_size, check_write, fifo, insert_entry, is_file, lookup, p_key,
    read_local, release_data, resolve, set_size, write_local, Blocks, Caller, FileRef, FileType,
    Layout, Need, Stat, Storage, MODE_FILE_DEFAULT,
};
use crate::auth::Role;
use crate::ids::Pid;
use crate::names::{check_fence_if_tx, Fence};
use crate::procs::Actor;
use crate::{partition, validate_realm, Error, Result};

/// The change-feed channel on which block store `store_id`'s node is told
/// that segments of its store were let go of (payload: the realm).
pub fn reclaim_channel(store_id: &str) -> String {
    format!("fs/reclaim/{store_id}")
}

/// Owner of every segment that holds file data (tenants never hold these
/// capabilities; the fs checks their permissions itself).
pub const SEGMENT_OWNER: &str = "tabos-fs";
/// Prefix of those segments' names.
pub const SEGMENT_PREFIX: &str = "fs/";
/// Largest segment threshold: a conversion reads the whole file in one
/// transaction.
pub const SEGMENT_THRESHOLD_MAX: i64 = 64 << 20;
/// Smallest extent a file in segments grows by.
pub const EXTENT_BYTES_MIN: i64 = 1 << 20;
/// Tries of an operation that meets conflicting changes.
pub const ATTEMPTS: usize = 8;
/// Reads of at most this many bytes go through the block cache; larger
/// ones (streaming) around it.
pub const CACHED_READ_BYTES_MAX: usize = 256 << 10;
/// Zeros are written in pieces of this size.
const ZERO_PIECE_BYTES: usize = 4 << 20;
/// Reclaim entries handled per transaction.
const RECLAIM_BATCH: usize = 64;

/// The fs's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsSettings {
    /// Block size of new localized files (the paper: 2 KB).
    pub local_block: i64,
    /// Block size of new parallel files (the paper: 8 KB).
    pub parallel_block: i64,
    /// A localized file a write takes past this many bytes moves to
    /// segments (when there is a block store).
    pub segment_threshold: i64,
}

impl Default for FsSettings {
    fn default() -> Self {
        FsSettings {
            local_block: super::BLOCK_BYTES_LOCAL,
            parallel_block: super::BLOCK_BYTES_PARALLEL,
            segment_threshold: 1 << 20,
        }
    }
}

impl FsSettings {
    pub fn check(&self) -> Result<()> {
        for bs in [self.local_block, self.parallel_block] {
            Layout::Local { block_size: bs }.check()?;
        }
        if !(0..=SEGMENT_THRESHOLD_MAX).contains(&self.segment_threshold) {
            return Err(Error::Invalid(format!(
                "the segment threshold is 0..={SEGMENT_THRESHOLD_MAX} bytes"
            )));
        }
        Ok(())
    }
}

/// One extent of a file in segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub no: i64,
    pub offset: i64,
    pub bytes: i64,
    pub store_id: String,
    pub segment: String,
}

fn blocks_err(e: tabos_blockio::Error) -> Error {
    match e {
        tabos_blockio::Error::NoSpace(m) => Error::Full(format!("block store full: {m}")),
        // A segment deleted under an operation: the file was removed or
        // shrunk meanwhile; the operation's next plan sees how.
        tabos_blockio::Error::NotFound(m) => Error::Conflict(format!("{m}: {CONFLICT}")),
        e => Error::Blocks(e.to_string()),
    }
}

/// Whether each realm recorded clients' reads when last seen (its
/// `provenance`): where a client's read of it goes — on the writer, noted
/// in the read's own transaction, or on a read connection. Only a hint:
/// the transaction asks the realm itself, and a stale answer costs one
/// read a second transaction (or a writer's turn), never a note. One
/// entry a realm this process has served a client's read of.
#[derive(Debug, Default)]
struct RecordsClients(std::sync::Mutex<std::collections::HashMap<String, bool>>);

impl RecordsClients {
    fn get(&self, realm: &str) -> bool {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(realm).copied().unwrap_or(false)
    }

    fn set(&self, realm: &str, records: bool) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if seen.get(realm) != Some(&records) {
            seen.insert(realm.to_string(), records);
        }
    }
}

/// A provenance event a file operation records for whom it is done for
/// (a proc, or a client acting for none when its realm records clients:
/// [`Actor`]), in the transaction that commits the operation.
/// Its detail is `PATH @OFFSET +BYTES`, the path the file had when the
/// operation committed (also for one done through an open handle).
#[derive(Debug, Clone)]
struct Noted {
    actor: Actor,
    event: &'static str,
    offset: i64,
}

impl Noted {
    fn note_tx(
        &self,
        tx: &mut dyn Tx,
        realm: &str,
        path: &str,
        bytes: usize,
        now_us: i64,
    ) -> Result<()> {
        let detail = super::event_detail(path, self.offset, bytes);
        self.actor.note_tx(tx, realm, self.event, &detail, now_us)
    }
}

/// The fs: the store, the block store (if any) and the settings.
#[derive(Clone)]
pub struct Files {
    store: Store,
    device: Option<Device>,
    settings: Arc<FsSettings>,
    /// Held shared by everything that changes the block store (a write to
    /// segments from before its data until its commit, a reclaim), and
    /// exclusively by [`Files::freeze`].
    changing_blocks: Arc<tokio::sync::RwLock<()>>,
}

/// While held, nothing changes the block store's segments or their data
/// ([`Files::freeze`]).
pub type Frozen = tokio::sync::OwnedRwLockWriteGuard<()>;

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Files")
            .field("device", &self.device)
            .field("settings", &self.settings)
            .finish()
    }
}

/// What a file's data is, read in a plan.
#[derive(Debug, Clone)]
struct Plan {
    st: Stat,
    version: i64,
    id: String,
    extents: Vec<Extent>,
}

/// What a read's first transaction found.
enum ReadStep {
    /// The data, read in it (a localized file), and the file's path when
    /// a note is owed for it after the transaction (a client's read).
    Data(Vec<u8>, Option<String>),
    /// The plan to read it outside (parallel blocks, segments), and
    /// whether the read is to be noted after.
    Plan(Box<Plan>, bool),
    /// A named pipe, by id: read by [`fifo::waiting`].
    Fifo(String),
}

enum WriteStep {
    Done(i64),
    /// A named pipe, by id: written by [`fifo::waiting`].
    Fifo(String),
    /// Boxed: a plan is large beside a size.
    Plan(Box<Plan>, Option<Vec<u8>>),
}

fn plan(tx: &mut dyn Tx, realm: &str, st: Stat) -> Result<Plan> {
    let version: i64 = tx.query_scalar(
        "SELECT f_version FROM fs_inode WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, st.id.as_str()],
    )?;
    let id = st.id.clone();
    let extents = if st.storage == Storage::Segments {
        let rows = tx.query(
            "SELECT ext_no, file_offset, bytes, store_id, segment FROM fs_extent \
             WHERE p_key = $1 AND realm = $2 AND f_id = $3 ORDER BY ext_no",
            params![p_key(tx), realm, id.as_str()],
        )?;
        rows.iter()
            .map(|r| {
                Ok(Extent {
                    no: r.get(0)?,
                    offset: r.get(1)?,
                    bytes: r.get(2)?,
                    store_id: r.get(3)?,
                    segment: r.get(4)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    Ok(Plan {
        st,
        version,
        id,
        extents,
    })
}

/// Refuses a commit whose plan is out of date (retried by the caller).
fn still(tx: &mut dyn Tx, realm: &str, p: &Plan) -> Result<()> {
    let r = tx.query_opt(
        "SELECT f_version FROM fs_inode WHERE p_key = $1 AND realm = $2 AND f_id = $3",
        params![p_key(tx), realm, p.id.as_str()],
    )?;
    match r {
        Some(r) if r.get::<i64>(0)? == p.version => Ok(()),
        Some(_) => Err(conflict(&p.st.path)),
        None => Err(Error::NotFound(format!(
            "{}: removed during the operation",
            p.st.path
        ))),
    }
}

/// The time of a changing step, after checking its fence (if any) in the
/// same transaction.
fn fenced(tx: &mut dyn Tx, realm: &str, fence: Option<&Fence>) -> Result<i64> {
    let now = tabos_store::now_us();
    check_fence_if_tx(tx, realm, fence, now)?;
    Ok(now)
}

/// Waits before retry `attempt` of an operation that met a conflict, so
/// the writer it met can finish (1, 2, 4 … 64 ms).
async fn back_off(attempt: usize) {
    tokio::time::sleep(std::time::Duration::from_millis(1 << attempt.min(6))).await;
}

const CONFLICT: &str = "changed by another writer during the operation";

/// Runs `once` — a whole operation on `target` — again while it meets a
/// conflict, at most [`ATTEMPTS`] times: a change backs off first so the
/// writer it met can finish; a read (`pause` false) goes again at once,
/// since it only met blocks rewritten under it.
async fn settled<T, F: std::future::Future<Output = Result<T>>>(
    target: &FileRef,
    pause: bool,
    mut once: impl FnMut() -> F,
) -> Result<T> {
    for attempt in 0..ATTEMPTS {
        match once().await {
            Err(e) if is_conflict(&e) => {
                if pause {
                    back_off(attempt).await;
                }
            }
            r => return r,
        }
    }
    Err(conflict(&target.to_string()))
}

fn conflict(path: &str) -> Error {
    Error::Conflict(format!("{path}: {CONFLICT}"))
}

fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Conflict(_))
}

/// The partition of block `no` of parallel file `id`.
fn block_partition(id: &str, no: i64, partitions: u32) -> u32 {
    let base = crate::realm_partition(id, partitions).0 as i64;
    ((base + no) % i64::from(partitions)) as u32
}

/// The pieces of `[offset, offset + len)` in `extents`: (extent index,
/// offset in the extent's segment, offset in the buffer, length).
fn pieces(extents: &[Extent], offset: i64, len: i64) -> Vec<(usize, u64, usize, usize)> {
    let end = offset + len;
    extents
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let (lo, hi) = (offset.max(e.offset), end.min(e.offset + e.bytes));
            (lo < hi).then(|| {
                (
                    i,
                    (lo - e.offset) as u64,
                    (lo - offset) as usize,
                    (hi - lo) as usize,
                )
            })
        })
        .collect()
}

impl Files {
    /// The fs over `store`, keeping large files in `device` when given.
    pub fn new(store: Store, device: Option<Device>, settings: FsSettings) -> Result<Files> {
        settings.check()?;
        Ok(Files {
            store,
            device,
            settings: Arc::new(settings),
            changing_blocks: Arc::default(),
        })
    }

    /// Waits for the writes to segments under way to commit and keeps new
    /// ones (and reclaims) waiting until the guard is dropped: what a
    /// backup holds while it takes the database's point and copies the
    /// block store, so that the two agree. Reads go on.
    pub async fn freeze(&self) -> Frozen {
        self.changing_blocks.clone().write_owned().await
    }

    pub fn settings(&self) -> &FsSettings {
        &self.settings
    }

    pub fn device(&self) -> Option<&Device> {
        self.device.as_ref()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// This node's block store id as extents name it ('' without one).
    pub fn store_id(&self) -> String {
        self.device
            .as_ref()
            .map_or_else(String::new, |d| format!("{:016x}", d.id()))
    }

    fn threshold(&self) -> Option<i64> {
        self.device
            .as_ref()
            .map(|_| self.settings.segment_threshold)
    }

    /// Creates an empty file (exclusive), localized or parallel.
    pub async fn create(
        &self,
        who: &Caller,
        path: &str,
        mode: i64,
        parallel: bool,
        fence: Option<Fence>,
    ) -> Result<Stat> {
        let realm = super::acting(who, Role::Member)?;
        let layout = if parallel {
            Layout::Parallel {
                block_size: self.settings.parallel_block,
                id: super::new_id(),
            }
        } else {
            Layout::Local {
                block_size: self.settings.local_block,
            }
        };
        let (r, who, path) = (realm.to_string(), who.clone(), path.to_string());
        crate::call(&self.store, realm, move |tx| {
            let now = fenced(tx, &r, fence.as_ref())?;
            insert_entry(tx, &r, &path, FileType::File, &layout, &who, mode, now)
        })
        .await
    }

    /// Up to `len` bytes at `offset` (fewer at the end, none past it) of
    /// the file `target` names.
    pub async fn read(
        &self,
        who: &Caller,
        target: impl Into<FileRef>,
        offset: i64,
        len: usize,
    ) -> Result<Vec<u8>> {
        self.read_for(who, who.pid().cloned(), target, offset, len)
            .await
    }

    /// [`read`](Files::read) done for proc `pid` (one `who` may act for):
    /// the read is recorded as the proc's provenance event `fs_read`
    /// (`PATH @OFFSET +BYTES`) — in the read's own transaction when the data
    /// is in tables (which then runs on the partition's writer, not a read
    /// connection), in one right after it for data in segments or parallel
    /// blocks — always committed before the data is returned. A read at or
    /// past the end reads nothing and records nothing, but the proc must
    /// exist all the same (NotFound). [`read`](Files::read) is
    /// done for the proc the caller's credential is (a native proc's, or a
    /// wasm proc's own calls).
    pub async fn read_for(
        &self,
        who: &Caller,
        pid: Option<Pid>,
        target: impl Into<FileRef>,
        offset: i64,
        len: usize,
    ) -> Result<Vec<u8>> {
        let target = target.into();
        let realm = super::acting(who, Role::Reader)?;
        validate_realm(realm)?;
        target.check()?;
        check_read(offset, len)?;
        if let Some(pid) = &pid {
            who.may_act_for(pid)?;
        }
        let noted = Noted {
            actor: who.actor(pid),
            event: "fs_read",
            offset,
        };
        // A read that is recorded commits its note in its own transaction,
        // on the partition's writer: a proc's always, a client's where its
        // realm was last seen recording clients ([`RecordsClients`]). Any
        // other read takes a read connection, never queued behind writes —
        // and, should its realm turn out to record it after all, is noted
        // in a transaction right after it.
        let hints = self.store.local::<RecordsClients>();
        let on_writer = match &noted.actor {
            Actor::Proc(_) => true,
            Actor::Client(_) => hints.get(realm),
        };
        let (target, noted, hints) = (&target, &noted, &hints);
        let (data, path) = settled(target, false, || async move {
            let (r, who2, t, n, h) = (
                realm.to_string(),
                who.clone(),
                target.clone(),
                noted.clone(),
                hints.clone(),
            );
            let step = move |tx: &mut dyn Tx| {
                let st = resolve(tx, &r, &who2, &t, Some(Need::Read))?;
                if st.file_type == FileType::Fifo {
                    return Ok(ReadStep::Fifo(st.id));
                }
                let st = is_file(st)?;
                n.actor.check_tx(tx, &r)?;
                let mut recorded = n.actor.recorded_tx(tx, &r)?;
                if let Actor::Client(_) = &n.actor {
                    h.set(&r, recorded);
                }
                if st.storage == Storage::Local {
                    let data = read_local(tx, &r, &st, offset, len)?;
                    if on_writer && recorded && !data.is_empty() {
                        n.note_tx(tx, &r, &st.path, data.len(), tabos_store::now_us())?;
                        recorded = false;
                    }
                    let after = recorded.then(|| st.path.clone());
                    return Ok(ReadStep::Data(data, after));
                }
                Ok(ReadStep::Plan(Box::new(plan(tx, &r, st)?), recorded))
            };
            let step = if on_writer {
                crate::call(&self.store, realm, step).await?
            } else {
                crate::read(&self.store, realm, step).await?
            };
            let (p, recorded) = match step {
                ReadStep::Data(data, after) => return Ok((data, after)),
                ReadStep::Fifo(id) => {
                    let data = self.read_fifo(who, realm, target, &id, len, noted);
                    let data = data.await?;
                    return Ok((data, None));
                }
                ReadStep::Plan(p, recorded) => (*p, recorded),
            };
            let end = p.st.size.min(offset.saturating_add(len as i64));
            if end <= offset {
                return Ok((Vec::new(), None));
            }
            let data = match p.st.storage {
                Storage::Parallel => self.read_parallel(realm, &p, offset, end).await?,
                _ => self.read_segments(&p, offset, end).await?,
            };
            // Read outside the transaction that planned it: noted after.
            Ok((data, recorded.then_some(p.st.path)))
        })
        .await?;
        // `path`: a note owed after the read's transaction.
        if let Some(path) = path {
            if !data.is_empty() {
                let (r, bytes, n) = (realm.to_string(), data.len(), noted.clone());
                crate::call(&self.store, realm, move |tx| {
                    n.actor.check_tx(tx, &r)?;
                    n.note_tx(tx, &r, &path, bytes, tabos_store::now_us())
                })
                .await?;
            }
        }
        Ok(data)
    }

    /// Reads up to `len` bytes of FIFO `id` (which `target` named), waiting
    /// for bytes or EOF ([`fifo`]); noted for the proc in the transaction
    /// that takes them.
    async fn read_fifo(
        &self,
        who: &Caller,
        realm: &str,
        target: &FileRef,
        id: &str,
        len: usize,
        noted: &Noted,
    ) -> Result<Vec<u8>> {
        let (r, who, t, n) = (
            realm.to_string(),
            who.clone(),
            target.clone(),
            noted.clone(),
        );
        let orphaned = fifo::unread(&self.store, realm, id);
        fifo::waiting(&self.store, realm, id, orphaned, move |tx, mark| {
            n.actor.check_tx(tx, &r)?;
            let (st, step) = fifo::read_step(tx, &r, &who, &t, mark, len)?;
            if let fifo::Step::Done(data) = &step {
                if !data.is_empty() {
                    n.note_tx(tx, &r, &st.path, data.len(), tabos_store::now_us())?;
                }
            }
            Ok(step)
        })
        .await
    }

    /// Writes all of `data` to FIFO `id` (which `target` named): as much
    /// as fits a transaction at a time, waiting for room between
    /// ([`fifo`]); each part noted for the proc in its own transaction.
    /// Returns the bytes written (all of them: a broken pipe is an error,
    /// as a blocking write(2)'s EPIPE).
    async fn write_fifo(
        &self,
        who: &Caller,
        realm: &str,
        target: &FileRef,
        id: &str,
        data: &Arc<Vec<u8>>,
        noted: &Noted,
    ) -> Result<usize> {
        let mut done = 0;
        // The mark of a call by path, kept from its first part to its last.
        let mark = Arc::new(std::sync::Mutex::new(None::<i64>));
        loop {
            let (r, who, t, n, d, m) = (
                realm.to_string(),
                who.clone(),
                target.clone(),
                noted.clone(),
                data.clone(),
                mark.clone(),
            );
            done += fifo::waiting(&self.store, realm, id, None, move |tx, waited| {
                let now = tabos_store::now_us();
                n.actor.check_tx(tx, &r)?;
                let kept = *m.lock().unwrap_or_else(|e| e.into_inner());
                let (st, step, at) =
                    fifo::write_step(tx, &r, &who, &t, waited.or(kept), &d[done..], now)?;
                *m.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
                if let fifo::Step::Done(wrote) = &step {
                    if *wrote > 0 {
                        n.note_tx(tx, &r, &st.path, *wrote, now)?;
                    }
                }
                Ok(step)
            })
            .await?;
            if done >= data.len() {
                return Ok(done);
            }
        }
    }

    async fn read_parallel(&self, realm: &str, p: &Plan, offset: i64, end: i64) -> Result<Vec<u8>> {
        let bs = p.st.block_size;
        let (first, last) = (offset / bs, (end - 1) / bs);
        let parts = self.store.partitions();
        let mut pending = Vec::new();
        for part in 0..parts.min((last - first + 1) as u32) {
            let on = block_partition(&p.id, first + i64::from(part), parts);
            let (r, id) = (realm.to_string(), p.id.clone());
            // One blocking task per partition: a read-only procedure runs on
            // its caller's thread, and these may be large and should overlap.
            let store = self.store.clone();
            pending.push(tokio::task::spawn_blocking(move || {
                store
                    .read(PKey(on), move |tx| {
                        Blocks::parallel(&r, &id).range(tx, first, last)
                    })
                    .wait()
            }));
        }
        let mut out = vec![0u8; (end - offset) as usize];
        for pend in pending {
            let blocks: Vec<(i64, Vec<u8>)> = pend
                .await
                .map_err(|e| Error::Blocks(format!("read task failed: {e}")))??;
            assemble(&mut out, offset, bs, &blocks);
        }
        Ok(out)
    }

    fn device_for(&self, p: &Plan) -> Result<Device> {
        if self.device.is_none() {
            // Another node's store holds it: the request is for that node.
            if let Some(e) = p.extents.first() {
                return Err(Error::OnBlockStore {
                    path: p.st.path.clone(),
                    store_id: e.store_id.clone(),
                });
            }
        }
        let dev = self.device.clone().ok_or_else(|| {
            Error::Blocks(format!(
                "{} keeps its data in block segments, and this node has no block store",
                p.st.path
            ))
        })?;
        let mine = self.store_id();
        if let Some(e) = p.extents.iter().find(|e| e.store_id != mine) {
            return Err(Error::OnBlockStore {
                path: p.st.path.clone(),
                store_id: e.store_id.clone(),
            });
        }
        Ok(dev)
    }

    async fn read_segments(&self, p: &Plan, offset: i64, end: i64) -> Result<Vec<u8>> {
        let dev = self.device_for(p)?;
        let extents = p.extents.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = vec![0u8; (end - offset) as usize];
            let policy = if out.len() <= CACHED_READ_BYTES_MAX {
                CachePolicy::Cached
            } else {
                CachePolicy::Uncached
            };
            dev.with_queue(|q| {
                for (i, at, buf_at, n) in pieces(&extents, offset, end - offset) {
                    let seg = dev.open_segment(&extents[i].segment, SEGMENT_OWNER)?;
                    let got = q.read_bytes(&seg.capability(), at, n, policy)?;
                    out[buf_at..buf_at + n].copy_from_slice(&got);
                }
                Ok(out)
            })
            .map_err(blocks_err)
        })
        .await
        .map_err(|e| Error::Blocks(format!("read task failed: {e}")))?
    }

    /// Writes `data` at `offset` (creating the file first when `create` and
    /// it is missing); returns the file's new size.
    #[allow(clippy::too_many_arguments)]
    pub async fn write(
        &self,
        who: &Caller,
        target: impl Into<FileRef>,
        offset: i64,
        data: impl Into<Arc<Vec<u8>>>,
        create: bool,
        fence: Option<Fence>,
    ) -> Result<i64> {
        self.write_for(who, who.pid().cloned(), target, offset, data, create, fence)
            .await
    }

    /// [`write`](Files::write) done for proc `pid` (one `who` may act
    /// for): recorded as the proc's provenance event `fs_write` (`PATH
    /// @OFFSET +BYTES`) in the transaction that commits the write (an
    /// unknown proc: NotFound, and nothing is written).
    /// [`write`](Files::write) is done for the proc the caller's credential
    /// is.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_for(
        &self,
        who: &Caller,
        pid: Option<Pid>,
        target: impl Into<FileRef>,
        offset: i64,
        data: impl Into<Arc<Vec<u8>>>,
        create: bool,
        fence: Option<Fence>,
    ) -> Result<i64> {
        let target = target.into();
        let realm = super::acting(who, Role::Member)?;
        validate_realm(realm)?;
        target.check()?;
        if let Some(pid) = &pid {
            who.may_act_for(pid)?;
        }
        let data: Arc<Vec<u8>> = data.into();
        let end = check_write(&target.to_string(), offset, data.len())?;
        let noted = Noted {
            actor: who.actor(pid),
            event: "fs_write",
            offset,
        };
        let threshold = self.threshold();
        let local_block = self.settings.local_block;
        let (target, data, fence, noted) = (&target, &data, &fence, &noted);
        settled(target, true, || async move {
            let (r, who2, t, d, f, n) = (
                realm.to_string(),
                who.clone(),
                target.clone(),
                data.clone(),
                fence.clone(),
                noted.clone(),
            );
            let step = crate::call(&self.store, realm, move |tx| {
                let now = fenced(tx, &r, f.as_ref())?;
                // First: an unknown proc refuses the write before it
                // creates a file or plans one.
                n.actor.check_tx(tx, &r)?;
                let st = match &t {
                    FileRef::Path(p) if create && lookup(tx, &r, p)?.is_none() => {
                        let layout = Layout::Local {
                            block_size: local_block,
                        };
                        let mode = MODE_FILE_DEFAULT;
                        let st =
                            insert_entry(tx, &r, p, FileType::File, &layout, &who2, mode, now)?;
                        super::allowed(&st, &who2, Need::Write)?;
                        st
                    }
                    _ => {
                        let st = resolve(tx, &r, &who2, &t, Some(Need::Write))?;
                        if st.file_type == FileType::Fifo {
                            return Ok(WriteStep::Fifo(st.id));
                        }
                        is_file(st)?
                    }
                };
                // Refused before anything is written (a new file included),
                // not only when the last step commits.
                crate::realms::check_room_tx(
                    tx,
                    &r,
                    crate::realms::StorageClass::Files,
                    end - st.size,
                )?;
                match st.storage {
                    Storage::Local if threshold.is_none_or(|t| st.size.max(end) <= t) => {
                        let size = write_local(tx, &r, &st, offset, &d, now)?;
                        n.note_tx(tx, &r, &st.path, d.len(), now)?;
                        Ok(WriteStep::Done(size))
                    }
                    Storage::Local => {
                        let old = read_local(tx, &r, &st, 0, st.size as usize)?;
                        Ok(WriteStep::Plan(Box::new(plan(tx, &r, st)?), Some(old)))
                    }
                    _ => Ok(WriteStep::Plan(Box::new(plan(tx, &r, st)?), None)),
                }
            })
            .await?;
            match step {
                WriteStep::Done(size) => Ok(size),
                WriteStep::Fifo(id) => {
                    let n = self.write_fifo(who, realm, target, &id, data, noted);
                    Ok(n.await? as i64)
                }
                WriteStep::Plan(p, old) if p.st.storage == Storage::Parallel => {
                    debug_assert!(old.is_none());
                    let (d, f, n) = (data.clone(), fence.clone(), noted.clone());
                    self.write_parallel(realm, *p, offset, d, f, n).await
                }
                WriteStep::Plan(p, old) => {
                    let (d, f, n) = (data.clone(), fence.clone(), noted.clone());
                    self.write_segments(realm, *p, old, offset, d, f, n).await
                }
            }
        })
        .await
    }

    async fn write_parallel(
        &self,
        realm: &str,
        p: Plan,
        offset: i64,
        data: Arc<Vec<u8>>,
        fence: Option<Fence>,
        noted: Noted,
    ) -> Result<i64> {
        let bs = p.st.block_size;
        let (end, bytes) = (offset + data.len() as i64, data.len());
        let (old, new) = (p.st.size, p.st.size.max(end));
        let parts = self.store.partitions();
        // A write that extends the file cuts leftovers on every partition;
        // one within the file only visits the partitions of its blocks.
        let touched: std::collections::BTreeSet<u32> = if end > old {
            (0..parts).collect()
        } else {
            let (first, last) = (offset / bs, (end - 1).max(offset) / bs);
            (first..=last.min(first + i64::from(parts) - 1))
                .map(|no| block_partition(&p.id, no, parts))
                .collect()
        };
        let mut pending = Vec::new();
        for part in touched {
            let (r, id, owner, d) = (
                realm.to_string(),
                p.id.clone(),
                p.st.owner.clone(),
                data.clone(),
            );
            pending.push(self.store.for_realm(realm).submit(PKey(part), move |tx| {
                let b = Blocks::parallel(&r, &id);
                if end > old {
                    // Leftovers of a write that never committed its size.
                    b.cut(tx, bs, old)?;
                }
                b.put(tx, &owner, bs, old, new, offset, &d, |no| {
                    block_partition(&id, no, parts) == part
                })
            }));
        }
        for pend in pending {
            pend.await?;
        }
        let r = realm.to_string();
        crate::call(&self.store, realm, move |tx| {
            let now = fenced(tx, &r, fence.as_ref())?;
            still(tx, &r, &p)?;
            set_size(tx, &r, &p.id, new, now)?;
            noted.actor.check_tx(tx, &r)?;
            noted.note_tx(tx, &r, &p.st.path, bytes, now)?;
            Ok(new)
        })
        .await
    }

    /// Makes the extents cover `need` bytes: a new zeroed segment when they
    /// do not (at least doubling them). Returns it, not yet committed.
    fn grow(&self, dev: &Device, p: &Plan, id: &str, need: i64) -> Result<Option<Extent>> {
        let capacity: i64 = p.extents.iter().map(|e| e.bytes).sum();
        if need <= capacity {
            return Ok(None);
        }
        let bs = i64::from(dev.block_size());
        let no = p.extents.last().map_or(0, |e| e.no + 1);
        let segment = format!("{SEGMENT_PREFIX}{id}.{no}");
        let want = (need - capacity).max(capacity).max(EXTENT_BYTES_MIN);
        let blocks = (want + bs - 1) / bs;
        let exact = (need - capacity + bs - 1) / bs;
        let made = match dev.create_segment(&segment, SEGMENT_OWNER, blocks as u64) {
            Err(tabos_blockio::Error::NoSpace(_)) if exact < blocks => {
                dev.create_segment(&segment, SEGMENT_OWNER, exact as u64)
            }
            r => r,
        };
        let info = match made {
            Ok(i) => i,
            // Another writer is growing the same file.
            Err(tabos_blockio::Error::AlreadyExists(_)) => return Err(conflict(&p.st.path)),
            Err(e) => return Err(blocks_err(e)),
        };
        Ok(Some(Extent {
            no,
            offset: capacity,
            bytes: info.blocks as i64 * bs,
            store_id: self.store_id(),
            segment,
        }))
    }

    /// Writes `writes` (file offset, bytes) into the extents and syncs.
    fn put_segments(dev: &Device, extents: &[Extent], writes: &[(i64, &[u8])]) -> Result<()> {
        dev.with_queue(|q| {
            for (offset, bytes) in writes {
                for (i, at, buf_at, n) in pieces(extents, *offset, bytes.len() as i64) {
                    let seg = dev.open_segment(&extents[i].segment, SEGMENT_OWNER)?;
                    q.write_bytes(
                        &seg.capability(),
                        at,
                        &bytes[buf_at..buf_at + n],
                        CachePolicy::Uncached,
                    )?;
                }
            }
            q.sync_now()
        })
        .map_err(blocks_err)
    }

    /// Sets the file to `size` after `writes`, in segments: grows the
    /// extents if needed, zeroes what lies between the old size and the
    /// first write past it, writes, syncs, commits (extents, conversion,
    /// size) if the plan still holds.
    #[allow(clippy::too_many_arguments)]
    async fn commit_segments(
        &self,
        realm: &str,
        p: Plan,
        old: Option<Vec<u8>>,
        writes: Vec<(i64, Arc<Vec<u8>>)>,
        size: i64,
        fence: Option<Fence>,
        noted: Option<Noted>,
    ) -> Result<i64> {
        let _changing = self.changing_blocks.read().await;
        let bytes: usize = writes.iter().map(|w| w.1.len()).sum();
        let dev = self.device_for(&p)?;
        let id = p.id.clone();
        let (this, dev2, id2) = (self.clone(), dev.clone(), id.clone());
        let p2 = p.clone();
        let added = tokio::task::spawn_blocking(move || -> Result<Option<Extent>> {
            let added = this.grow(&dev2, &p2, &id2, size)?;
            let mut extents = p2.extents.clone();
            extents.extend(added.clone());
            let capacity: i64 = extents.iter().map(|e| e.bytes).sum();
            let mut all: Vec<(i64, &[u8])> = Vec::new();
            if let Some(old) = &old {
                all.push((0, old));
            }
            // Zeros from the old end to where the data starts, within what
            // existing extents hold (a new extent is zeroed already).
            let first = writes.iter().map(|w| w.0).min().unwrap_or(size).min(size);
            let old_capacity: i64 = p2.extents.iter().map(|e| e.bytes).sum();
            let zero_to = first.min(old_capacity);
            // In pieces of one shared buffer (the gap may be as large as
            // the extents), made only when there is a gap: zeroing it
            // cost as much as the write it came with.
            let zeros = if p2.st.size < zero_to {
                vec![0u8; ZERO_PIECE_BYTES]
            } else {
                Vec::new()
            };
            let mut at = p2.st.size;
            while at < zero_to {
                let n = (zero_to - at).min(ZERO_PIECE_BYTES as i64);
                all.push((at, &zeros[..n as usize]));
                at += n;
            }
            for (o, b) in &writes {
                all.push((*o, b.as_slice()));
            }
            debug_assert!(all.iter().all(|(o, b)| o + b.len() as i64 <= capacity));
            let r = Files::put_segments(&dev2, &extents, &all);
            if r.is_err() {
                if let Some(e) = &added {
                    let _ = dev2.delete_segment(&e.segment, SEGMENT_OWNER);
                }
            }
            r.map(|()| added)
        })
        .await
        .map_err(|e| Error::Blocks(format!("write task failed: {e}")))??;
        let (r, added2, converting) = (
            realm.to_string(),
            added.clone(),
            p.st.storage != Storage::Segments,
        );
        let committed = crate::call(&self.store, realm, move |tx| {
            let now = fenced(tx, &r, fence.as_ref())?;
            still(tx, &r, &p)?;
            let pk = p_key(tx);
            if converting {
                Blocks::local(&r, &id).cut(tx, p.st.block_size, 0)?;
                tx.execute(
                    "UPDATE fs_inode SET in_segments = 1 \
                     WHERE p_key = $1 AND realm = $2 AND f_id = $3",
                    params![pk, r.as_str(), id.as_str()],
                )?;
            }
            if let Some(e) = &added2 {
                tx.execute(
                    "INSERT INTO fs_extent (p_key, realm, f_id, ext_no, file_offset, bytes, \
                     store_id, segment) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    params![
                        pk,
                        r.as_str(),
                        id.as_str(),
                        e.no,
                        e.offset,
                        e.bytes,
                        e.store_id.as_str(),
                        e.segment.as_str()
                    ],
                )?;
            }
            set_size(tx, &r, &p.id, size, now)?;
            // None: a truncation, done for no one.
            if let Some(n) = &noted {
                n.actor.check_tx(tx, &r)?;
                n.note_tx(tx, &r, &p.st.path, bytes, now)?;
            }
            Ok(size)
        })
        .await;
        if committed.is_err() {
            if let Some(e) = &added {
                let _ = dev.delete_segment(&e.segment, SEGMENT_OWNER);
            }
        }
        committed
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_segments(
        &self,
        realm: &str,
        p: Plan,
        old: Option<Vec<u8>>,
        offset: i64,
        data: Arc<Vec<u8>>,
        fence: Option<Fence>,
        noted: Noted,
    ) -> Result<i64> {
        let size = p.st.size.max(offset + data.len() as i64);
        let writes = vec![(offset, data)];
        self.commit_segments(realm, p, old, writes, size, fence, Some(noted))
            .await
    }

    /// Sets a file's size; bytes past a shrink are gone, a grow reads as
    /// zeros.
    pub async fn truncate(
        &self,
        who: &Caller,
        target: impl Into<FileRef>,
        size: i64,
        fence: Option<Fence>,
    ) -> Result<()> {
        let target = target.into();
        let realm = super::acting(who, Role::Member)?;
        validate_realm(realm)?;
        target.check()?;
        check_size(size)?;
        let threshold = self.threshold();
        let (target, fence) = (&target, &fence);
        settled(target, true, || async move {
            let (r, who2, t, f) = (
                realm.to_string(),
                who.clone(),
                target.clone(),
                fence.clone(),
            );
            let step = crate::call(&self.store, realm, move |tx| {
                let now = fenced(tx, &r, f.as_ref())?;
                let st = resolve(tx, &r, &who2, &t, Some(Need::Write))?;
                if st.file_type == FileType::Fifo && size == 0 {
                    // open(2)'s O_TRUNC on a FIFO: nothing to cut.
                    return Ok(Err(false));
                }
                let st = is_file(st)?;
                crate::realms::check_room_tx(
                    tx,
                    &r,
                    crate::realms::StorageClass::Files,
                    size - st.size,
                )?;
                match st.storage {
                    Storage::Local if threshold.is_none_or(|t| size <= t) => {
                        if size < st.size {
                            Blocks::local(&r, &st.id).cut(tx, st.block_size, size)?;
                        }
                        set_size(tx, &r, &st.id, size, now)?;
                        Ok(Err(false))
                    }
                    Storage::Local => {
                        let old = read_local(tx, &r, &st, 0, st.size as usize)?;
                        Ok(Ok((plan(tx, &r, st)?, Some(old))))
                    }
                    // A shrink of a file in segments is one transaction:
                    // whole extents past the end are let go.
                    Storage::Segments if size <= st.size => {
                        let p = plan(tx, &r, st)?;
                        let from = p
                            .extents
                            .iter()
                            .find(|e| e.offset >= size)
                            .map(|e| e.offset);
                        let queued = match from {
                            Some(from) => release_data(tx, &r, &p.st, from)?,
                            None => 0,
                        };
                        set_size(tx, &r, &p.id, size, now)?;
                        Ok(Err(queued > 0))
                    }
                    _ => Ok(Ok((plan(tx, &r, st)?, None))),
                }
            })
            .await?;
            // Err: done in the one transaction (and whether it let go of
            // storage); Ok: a plan to carry out.
            match step {
                Err(false) => Ok(()),
                // Done; what it let go of is reclaimed (which takes rows
                // off a queue and meets no conflict).
                Err(true) => self.reclaim(realm).await,
                Ok((p, old)) if p.st.storage == Storage::Parallel => {
                    debug_assert!(old.is_none());
                    self.truncate_parallel(realm, p, size, fence.clone()).await
                }
                Ok((p, old)) => self
                    .commit_segments(realm, p, old, Vec::new(), size, fence.clone(), None)
                    .await
                    .map(|_| ()),
            }
        })
        .await
    }

    async fn truncate_parallel(
        &self,
        realm: &str,
        p: Plan,
        size: i64,
        fence: Option<Fence>,
    ) -> Result<()> {
        let (bs, cut_at) = (p.st.block_size, p.st.size.min(size));
        let mut pending = Vec::new();
        for part in 0..self.store.partitions() {
            let (r, id) = (realm.to_string(), p.id.clone());
            pending.push(self.store.for_realm(realm).submit(PKey(part), move |tx| {
                Blocks::parallel(&r, &id).cut(tx, bs, cut_at)
            }));
        }
        for pend in pending {
            pend.await?;
        }
        let r = realm.to_string();
        crate::call(&self.store, realm, move |tx| {
            let now = fenced(tx, &r, fence.as_ref())?;
            still(tx, &r, &p)?;
            set_size(tx, &r, &p.id, size, now)
        })
        .await
    }

    /// Removes a file, then gives back its storage.
    pub async fn unlink(&self, who: &Caller, path: &str, fence: Option<Fence>) -> Result<()> {
        let realm = super::acting(who, Role::Member)?;
        let (r, who, p) = (realm.to_string(), who.clone(), path.to_string());
        let queued = crate::call(&self.store, realm, move |tx| {
            let now = fenced(tx, &r, fence.as_ref())?;
            super::unlink_tx(tx, &who, &p, now)
        })
        .await?;
        if queued > 0 {
            self.reclaim(realm).await?;
        }
        Ok(())
    }

    /// Closes a handle (see [`super::close_tx`]), then gives back the
    /// storage of a file that went with it.
    pub async fn close(&self, who: &Caller, handle: &super::Handle) -> Result<()> {
        let realm = super::acting(who, Role::Reader)?;
        let (who2, h) = (who.clone(), handle.clone());
        let queued =
            crate::call(&self.store, realm, move |tx| super::close_tx(tx, &who2, &h)).await?;
        if queued > 0 {
            self.reclaim(realm).await?;
        }
        Ok(())
    }

    /// Renames (see [`super::rename_tx`]), then gives back the storage of a
    /// file it replaced.
    pub async fn rename(
        &self,
        who: &Caller,
        from: &str,
        to: &str,
        fence: Option<Fence>,
    ) -> Result<()> {
        let realm = super::acting(who, Role::Member)?;
        let (r, who, f, t) = (
            realm.to_string(),
            who.clone(),
            from.to_string(),
            to.to_string(),
        );
        let queued = crate::call(&self.store, realm, move |tx| {
            let now = fenced(tx, &r, fence.as_ref())?;
            super::rename_tx(tx, &who, &f, &t, now)
        })
        .await?;
        if queued > 0 {
            self.reclaim(realm).await?;
        }
        Ok(())
    }

    /// Gives back, until `stop`, the segments of this node's block store
    /// that changes made through any node let go of: woken by their
    /// notifications ([`reclaim_channel`]), and after being cut off from
    /// the feed, a pass over every partition. Nothing without a block store.
    pub async fn follow_reclaims(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        if self.device.is_none() {
            return;
        }
        let channel = reclaim_channel(&self.store_id());
        let mut feed = self.store.subscribe(&channel);
        loop {
            let done = tokio::select! {
                _ = stop.changed() => return,
                n = feed.recv() => match n {
                    Ok(n) => self.reclaim(&n.payload).await,
                    Err(_) => {
                        feed = self.store.subscribe(&channel);
                        let mut all = Ok(());
                        for part in 0..self.store.partitions() {
                            all = all.and(self.reclaim_on(PKey(part), None).await);
                        }
                        all
                    }
                },
            };
            if let Err(e) = done {
                eprintln!("fs: giving back segments of block store failed: {e}");
            }
        }
    }

    /// Gives back what `fs_reclaim` holds for `realm` on its partition.
    pub async fn reclaim(&self, realm: &str) -> Result<()> {
        let pk = partition(&self.store, realm)?;
        self.reclaim_on(pk, Some(realm.to_string())).await
    }

    /// Gives back what `fs_reclaim` holds on partition `pk` (for `realm`,
    /// or every realm): segments of this node's block store, and parallel
    /// files' blocks on every partition. Segments of another block store
    /// stay queued for their node.
    async fn reclaim_on(&self, pk: PKey, realm: Option<String>) -> Result<()> {
        let mine = self.store_id();
        loop {
            let (realm2, mine2) = (realm.clone(), mine.clone());
            let rows: Vec<(String, String, String, String)> = self
                .store
                .submit(pk, move |tx| {
                    const Q: &str = "SELECT realm, kind, what, store_id FROM fs_reclaim \
                         WHERE p_key = $1 AND ($2 = '' OR realm = $2) \
                         AND (kind = 'parallel' OR store_id = $3) \
                         ORDER BY realm, kind, what LIMIT 64";
                    debug_assert!(Q.ends_with(&format!("LIMIT {RECLAIM_BATCH}")));
                    let rows = tx.query(
                        Q,
                        params![p_key(tx), realm2.as_deref().unwrap_or(""), mine2.as_str()],
                    )?;
                    rows.iter()
                        .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                        .collect::<Result<Vec<_>>>()
                })
                .await?;
            if rows.is_empty() {
                return Ok(());
            }
            let _changing = self.changing_blocks.read().await;
            for (r, kind, what, _) in &rows {
                if kind == "segment" {
                    if let Some(dev) = &self.device {
                        match dev.delete_segment(what, SEGMENT_OWNER) {
                            Ok(()) | Err(tabos_blockio::Error::NotFound(_)) => {}
                            Err(e) => return Err(blocks_err(e)),
                        }
                    }
                } else {
                    let mut pending = Vec::new();
                    for part in 0..self.store.partitions() {
                        let (r, id) = (r.clone(), what.clone());
                        pending.push(self.store.submit(PKey(part), move |tx| {
                            tx.execute(
                                "DELETE FROM parallel_file WHERE p_key = $1 AND realm = $2 \
                                 AND f_id = $3",
                                params![p_key(tx), r.as_str(), id.as_str()],
                            )?;
                            Ok::<_, Error>(())
                        }));
                    }
                    for pend in pending {
                        pend.await?;
                    }
                }
            }
            let n = rows.len();
            self.store
                .submit(pk, move |tx| {
                    for (r, kind, what, _) in &rows {
                        tx.execute(
                            "DELETE FROM fs_reclaim WHERE p_key = $1 AND realm = $2 \
                             AND kind = $3 AND what = $4",
                            params![p_key(tx), r.as_str(), kind.as_str(), what.as_str()],
                        )?;
                    }
                    Ok::<_, Error>(())
                })
                .await?;
            if n < RECLAIM_BATCH {
                return Ok(());
            }
        }
    }

    /// At start-up: drops handles whose session is gone and deletes files
    /// without a name that no handle holds ([`super::sweep_tx`]), gives
    /// back everything queued for reclaim on every partition, then deletes `fs/` segments no extent names (a write that
    /// crashed between allocating and committing). Run before serving.
    pub async fn recover(&self) -> Result<usize> {
        for part in 0..self.store.partitions() {
            // Handles whose session is gone, and files without a name that
            // nothing holds open (super::sweep_tx), first: what they let go
            // of is reclaimed below.
            let now = tabos_store::now_us();
            self.store
                .submit(PKey(part), move |tx| super::sweep_tx(tx, now))
                .await?;
            self.reclaim_on(PKey(part), None).await?;
        }
        let Some(dev) = &self.device else {
            return Ok(0);
        };
        let mut named = std::collections::HashSet::new();
        for part in 0..self.store.partitions() {
            let mine = self.store_id();
            let segs: Vec<String> = self
                .store
                .submit(PKey(part), move |tx| {
                    let rows = tx.query(
                        "SELECT segment FROM fs_extent WHERE p_key = $1 AND store_id = $2",
                        params![p_key(tx), mine.as_str()],
                    )?;
                    rows.iter()
                        .map(|r| r.get(0).map_err(Error::from))
                        .collect::<Result<Vec<_>>>()
                })
                .await?;
            named.extend(segs);
        }
        let mut removed = 0;
        for s in dev.segments() {
            if s.owner == SEGMENT_OWNER
                && s.name.starts_with(SEGMENT_PREFIX)
                && !named.contains(&s.name)
            {
                dev.delete_segment(&s.name, SEGMENT_OWNER)
                    .map_err(blocks_err)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The extents of a file in segments (empty for other files).
    pub async fn extents(&self, realm: &str, path: &str) -> Result<Vec<Extent>> {
        let (r, p) = (realm.to_string(), path.to_string());
        crate::call(&self.store, realm, move |tx| {
            let st = super::a_file(tx, &r, &p)?;
            Ok(plan(tx, &r, st)?.extents)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_a_range_over_extents() {
        let ext = |no, offset, bytes| Extent {
            no,
            offset,
            bytes,
            store_id: String::new(),
            segment: String::new(),
        };
        let e = vec![ext(0, 0, 100), ext(1, 100, 200)];
        assert_eq!(pieces(&e, 50, 100), vec![(0, 50, 0, 50), (1, 0, 50, 50)]);
        assert_eq!(pieces(&e, 150, 10), vec![(1, 50, 0, 10)]);
        assert!(pieces(&e, 300, 10).is_empty());
    }

    #[test]
    fn parallel_blocks_spread_over_every_partition() {
        let mut seen = std::collections::HashSet::new();
        for no in 0..8 {
            seen.insert(block_partition("some-id", no, 4));
        }
        assert_eq!(seen.len(), 4);
    }
}
