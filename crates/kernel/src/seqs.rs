//! Sequence numbers of spawns and proc events, handed out from memory
//! (issue 18, item 1: "sequence numbers without `UPDATE … RETURNING`").
//!
//! Table `seq_block(p_key, next_seq)` (migration 019), one row per
//! partition: the first number not yet reserved. A transaction that needs
//! numbers takes them from this process's block for its partition — no
//! statement at all — and only when the block is used up reserves the next
//! one with one `UPDATE … RETURNING` ([`SEQ_BLOCK_SQLITE`] or
//! [`SEQ_BLOCK_POSTGRES`] numbers). Until that transaction commits, the
//! rest of the block serves only it (and the procedures of its group
//! commit, on its thread); it becomes the process's when the transaction
//! commits (an after-commit hook), and is dropped if it rolls back, so a
//! transaction that rolls back leaves neither the row nor the cache
//! changed. Numbers taken by a transaction that rolls back are skipped, so
//! the numbers are unique and increasing within a partition — in taking
//! order — but not gap-free, which nothing needs: they only order a realm's
//! spawns (the FIFO) and a proc's events.
//!
//! On PostgreSQL the blocks come from a sequence (`seq_blocks`, migration
//! 029) rather than the row: several nodes updating one row per partition
//! serialised on it and deadlocked with their own row locks. `nextval`
//! takes no lock and is never rolled back, so there a transaction that
//! rolls back skips the block it reserved (the row's "rolled back, nothing
//! changed" holds on SQLite only); one sequence serves every partition.
//! Each node holds its own block, so two nodes' spawns are
//! ordered by block before time: a spawn on one node may sort before an
//! earlier one on another by at most a block, which is why that block is
//! small. Being the partition's (or the database's), a counter survives a
//! realm's removal and re-creation: no number is given out twice.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;

use tabos_store::{params, Dialect, PKey, Tx};

use crate::{Error, Result};

/// Numbers reserved at once on SQLite: one process writes each partition.
pub(crate) const SEQ_BLOCK_SQLITE: i64 = 1_024;
/// Numbers reserved at once on PostgreSQL, where several nodes take blocks
/// (see the module doc for why it is small).
pub(crate) const SEQ_BLOCK_POSTGRES: i64 = 16;
/// Most numbers one call takes.
pub(crate) const SEQ_TAKE_MAX: i64 = 16;

/// This process's unused reserved numbers, per partition.
#[derive(Default)]
pub(crate) struct Seqs {
    blocks: Mutex<Blocks>,
}

#[derive(Default)]
struct Blocks {
    /// Reserved by committed transactions: anyone's.
    committed: HashMap<PKey, Block>,
    /// Reserved by a transaction not yet committed, usable only on the
    /// thread that runs it — a procedure runs on one thread, and so do the
    /// procedures of its group commit, which commit or roll back with it
    /// (one that rolls back alone drops its reservation first: see
    /// [`Reserved`]).
    tentative: HashMap<(PKey, ThreadId), Block>,
}

/// Numbers `next..end`, reserved and not yet handed out.
#[derive(Debug, Clone, Copy)]
struct Block {
    next: i64,
    end: i64,
}

impl Block {
    fn take(&mut self, n: i64) -> Option<i64> {
        if self.end - self.next < n {
            return None;
        }
        let first = self.next;
        self.next += n;
        Some(first)
    }
}

/// Takes `n` consecutive numbers of the transaction's partition and returns
/// the first.
pub(crate) fn take(tx: &mut dyn Tx, n: i64) -> Result<i64> {
    if !(1..=SEQ_TAKE_MAX).contains(&n) {
        return Err(Error::Invalid(format!(
            "a transaction takes 1..={SEQ_TAKE_MAX} sequence numbers at once, not {n}"
        )));
    }
    let seqs = tx.local::<Seqs>()?;
    let pk = tx.p_key();
    let thread = std::thread::current().id();
    if let Some(first) = seqs.take_held(pk, thread, n) {
        return Ok(first);
    }
    let size = match tx.dialect() {
        Dialect::Sqlite => SEQ_BLOCK_SQLITE,
        Dialect::Postgres => SEQ_BLOCK_POSTGRES,
    };
    let start: i64 = match tx.dialect() {
        // A partition's first reservation makes its row (numbers from 1).
        Dialect::Sqlite => tx
            .query_one(
                "INSERT INTO seq_block (p_key, next_seq) VALUES ($1, 1 + $2) \
                 ON CONFLICT (p_key) DO UPDATE SET next_seq = seq_block.next_seq + $2 \
                 RETURNING next_seq - $2",
                params![i64::from(pk.0), size],
            )?
            .get(0)?,
        // The sequence moves by `SEQ_BLOCK_POSTGRES` (migration 029): its
        // value is the block's first number.
        Dialect::Postgres => tx
            .query_one("SELECT nextval('seq_blocks')", params![])?
            .get(0)?,
    };
    let rest = Block {
        next: start + n,
        end: start + size,
    };
    debug_assert!(rest.next <= rest.end);
    seqs.lock().tentative.insert((pk, thread), rest);
    let reserved = Reserved {
        seqs,
        pk,
        thread,
        end: rest.end,
        committed: false,
    };
    tx.after_commit(Box::new(move || reserved.commit()))?;
    Ok(start)
}

/// A transaction's reservation: what is left of it becomes anyone's when
/// the transaction commits; dropped uncommitted (it rolled back), it goes.
struct Reserved {
    seqs: std::sync::Arc<Seqs>,
    pk: PKey,
    thread: ThreadId,
    end: i64,
    committed: bool,
}

impl Reserved {
    fn commit(mut self) {
        self.committed = true;
        let mut b = self.seqs.lock();
        // A later reservation of the same transaction replaced this one.
        let Some(rest) = b.tentative.get(&(self.pk, self.thread)).copied() else {
            return;
        };
        if rest.end != self.end {
            return;
        }
        b.tentative.remove(&(self.pk, self.thread));
        match b.committed.get(&self.pk) {
            // Another transaction's newer block is already there.
            Some(held) if held.end >= rest.end => {}
            _ => {
                b.committed.insert(self.pk, rest);
            }
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let mut b = self.seqs.lock();
        let key = (self.pk, self.thread);
        if b.tentative.get(&key).is_some_and(|r| r.end == self.end) {
            b.tentative.remove(&key);
        }
    }
}

impl Seqs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `n` numbers from this thread's uncommitted reservation, else from
    /// the partition's committed block, if either has them.
    fn take_held(&self, pk: PKey, thread: ThreadId, n: i64) -> Option<i64> {
        let mut b = self.lock();
        if let Some(first) = b.tentative.get_mut(&(pk, thread)).and_then(|r| r.take(n)) {
            return Some(first);
        }
        b.committed.get_mut(&pk).and_then(|r| r.take(n))
    }
}
