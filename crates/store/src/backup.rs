//! A consistent copy of the kernel database while it serves (SQLite).
//!
//! ```text
//!   Store::snapshot
//!     submit a hold job to every partition ── each, on its writer, inside
//!     │                                       its BEGIN IMMEDIATE: arrive,
//!     │                                       wait for the release
//!     every partition arrived (≤ HOLD_WAIT_MAX)?
//!     │  yes: open one connection per partition and begin a read
//!     │       transaction on each — no partition can commit meanwhile, so
//!     │       all of them read the same point
//!     release the holds (always, also on failure)
//!   Snapshot::write_to(dir)
//!     SQLite's online backup API, partition by partition, from those read
//!     transactions: the writers go on committing meanwhile (WAL)
//! ```
//!
//! Every partition's writer is held for as long as it takes to begin the
//! read transactions (milliseconds), never for the copy. A partition whose
//! writer is held by tenant code is waited for at most [`HOLD_WAIT_MAX`],
//! and then the snapshot fails with [`Error::Timeout`] and nothing was
//! held longer. A held writer lets go by itself after [`HOLD_MAX`], so a
//! caller that never releases cannot stall the store.
//!
//! While the copy reads, checkpoints cannot pass its read transactions
//! (they are PASSIVE: they never wait for it), so the WAL grows by what is
//! committed meanwhile and shrinks at the first checkpoint after.
//!
//! The copy is a set of ordinary partition files (`p<N>.db`), checked with
//! `PRAGMA quick_check`: a directory holding them is a store directory.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::{BackendKind, PKey, Store};

/// How long a snapshot waits for every partition's writer to be held.
pub const HOLD_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long a writer stays held at most, released or not.
pub const HOLD_MAX: Duration = Duration::from_secs(30);

/// What the hold jobs and the snapshot share.
#[derive(Default)]
struct Hold {
    state: Mutex<HoldState>,
    changed: Condvar,
}

#[derive(Default)]
struct HoldState {
    arrived: u32,
    released: bool,
}

impl Hold {
    /// On a partition's writer: counts itself in and waits for the release.
    fn arrive_and_wait(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.arrived += 1;
        self.changed.notify_all();
        let until = Instant::now() + HOLD_MAX;
        while !s.released {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits until `n` writers arrived, at most `max`; whether they did.
    fn wait_for(&self, n: u32, max: Duration) -> bool {
        let until = Instant::now() + max;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.arrived < n {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn release(&self) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .released = true;
        self.changed.notify_all();
    }
}

/// Every partition read at one point: an open read transaction per
/// partition. Dropping it ends them.
pub struct Snapshot {
    /// When the point was taken, in microseconds since the epoch.
    at_us: i64,
    /// Partition `i`'s connection, in a read transaction.
    readers: Vec<Connection>,
}

/// One partition file written by [`Snapshot::write_to`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCopy {
    pub partition: u32,
    pub path: PathBuf,
    pub bytes: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("at_us", &self.at_us)
            .field("partitions", &self.readers.len())
            .finish()
    }
}

impl Snapshot {
    pub fn at_us(&self) -> i64 {
        self.at_us
    }

    pub fn partitions(&self) -> u32 {
        self.readers.len() as u32
    }

    /// Writes every partition as it was at the point to `dir/p<N>.db`
    /// (files that must not exist yet), synced, each checked by
    /// `PRAGMA quick_check`. Blocks for the copy; the store serves on.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PartitionCopy>> {
        let io = |what: &str, path: &Path, e: std::io::Error| {
            Error::Io(format!("{what} {}: {e}", path.display()))
        };
        let mut copies = Vec::with_capacity(self.readers.len());
        for (p, src) in self.readers.iter().enumerate() {
            let path = crate::sqlite::partition_path(dir, p as u32);
            if path.exists() {
                return Err(Error::Invalid(format!(
                    "{} exists: a snapshot is written to new files only",
                    path.display()
                )));
            }
            let mut dst = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| crate::sqlite::map_err(e, "open a snapshot's file"))?;
            {
                let copy = rusqlite::backup::Backup::new(src, &mut dst)
                    .map_err(|e| crate::sqlite::map_err(e, "begin a partition's backup"))?;
                // All pages in one step: the source is a read transaction,
                // so nothing it reads changes under the copy.
                match copy
                    .step(-1)
                    .map_err(|e| crate::sqlite::map_err(e, "copy a partition"))?
                {
                    rusqlite::backup::StepResult::Done => {}
                    other => {
                        return Err(Error::Internal(format!(
                            "partition {p}'s copy stopped before its end: {other:?}"
                        )))
                    }
                }
            }
            let check: String = dst
                .query_row("PRAGMA quick_check", [], |r| r.get(0))
                .map_err(|e| crate::sqlite::map_err(e, "PRAGMA quick_check"))?;
            if check != "ok" {
                return Err(Error::Internal(format!(
                    "partition {p}'s copy fails its check: {check}"
                )));
            }
            drop(dst);
            let file = std::fs::File::open(&path).map_err(|e| io("open", &path, e))?;
            file.sync_all().map_err(|e| io("sync", &path, e))?;
            let bytes = file.metadata().map_err(|e| io("stat", &path, e))?.len();
            copies.push(PartitionCopy {
                partition: p as u32,
                path,
                bytes,
            });
        }
        Ok(copies)
    }
}

impl Store {
    /// Reads every partition at one point while the store serves (see the
    /// module's docs): what [`Snapshot::write_to`] copies. Blocks (up to
    /// [`HOLD_WAIT_MAX`]); call it from a thread that may block.
    /// SQLite only: a PostgreSQL database is copied with its own tools
    /// (`pg_basebackup`, `pg_dump`).
    pub fn snapshot(&self) -> Result<Snapshot> {
        if self.kind() != BackendKind::Sqlite {
            return Err(Error::Invalid(
                "a snapshot of a PostgreSQL database is taken with pg_basebackup or pg_dump, \
                 not by tabos"
                    .into(),
            ));
        }
        let n = self.partitions();
        let hold = Arc::new(Hold::default());
        let held: Vec<_> = (0..n)
            .map(|p| {
                let hold = hold.clone();
                self.submit(PKey(p), move |_tx| -> Result<()> {
                    hold.arrive_and_wait();
                    Ok(())
                })
            })
            .collect();
        let taken = if hold.wait_for(n, HOLD_WAIT_MAX) {
            let at_us = crate::now_us();
            self.backend
                .begin_snapshot()
                .map(|readers| Snapshot { at_us, readers })
        } else {
            Err(Error::Timeout(format!(
                "not every partition's writer could be held within {HOLD_WAIT_MAX:?} \
                 (one is busy with long tenant code): try again"
            )))
        };
        hold.release();
        for h in held {
            h.wait()?;
        }
        let snapshot = taken?;
        debug_assert_eq!(snapshot.partitions(), n);
        Ok(snapshot)
    }
}

/// Opens partition `p` of `dir` and begins a read transaction on it (SQLite;
/// called while every writer is held).
pub(crate) fn begin_read(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| crate::sqlite::map_err(e, "open a snapshot reader"))?;
    let sql = "PRAGMA query_only = 1; BEGIN";
    conn.execute_batch(sql)
        .map_err(|e| crate::sqlite::map_err(e, sql))?;
    // A read transaction begins at its first read.
    let sql = "SELECT count(*) FROM sqlite_schema";
    conn.query_row(sql, [], |r| r.get::<_, i64>(0))
        .map_err(|e| crate::sqlite::map_err(e, sql))?;
    Ok(conn)
}
