//! Sequence numbers of spawns and proc events, handed out from memory
//! (issue 18, item 1: "sequence numbers without `UPDATE … RETURNING`").
//!
//! Table `seq_block(p_key, next_seq)` (migration 019), one row per
//! partition: the first number not yet reserved. A transaction that needs
//! numbers takes them from this process's block for its partition — no
//! statement at all — and only when the block is used up reserves the next
//! one with one `UPDATE … RETURNING` ([`SEQ_BLOCK_SQLITE`] or
//! [`SEQ_BLOCK_POSTGRES`] numbers). The reserved block becomes this
//! process's after that transaction commits (an after-commit hook): a
//! transaction that rolls back leaves neither the row nor the cache
//! changed. Numbers taken by a transaction that rolls back are skipped, so
//! the numbers are unique and increasing within a partition — in taking
//! order — but not gap-free, which nothing needs: they only order a realm's
//! spawns (the FIFO) and a proc's events.
//!
//! On PostgreSQL each node holds its own block, so two nodes' spawns are
//! ordered by block before time: a spawn on one node may sort before an
//! earlier one on another by at most a block, which is why that block is
//! small. Being the partition's, a counter survives a realm's removal and
//! re-creation: no number is given out twice.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

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
    blocks: Mutex<HashMap<PKey, Block>>,
}

/// Numbers `next..end`, reserved and committed, not yet handed out.
#[derive(Debug, Clone, Copy)]
struct Block {
    next: i64,
    end: i64,
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
    if let Some(first) = seqs.take_held(pk, n) {
        return Ok(first);
    }
    let size = match tx.dialect() {
        Dialect::Sqlite => SEQ_BLOCK_SQLITE,
        Dialect::Postgres => SEQ_BLOCK_POSTGRES,
    };
    // A partition's first reservation makes its row (numbers from 1).
    let start: i64 = tx
        .query_one(
            "INSERT INTO seq_block (p_key, next_seq) VALUES ($1, 1 + $2) \
             ON CONFLICT (p_key) DO UPDATE SET next_seq = seq_block.next_seq + $2 \
             RETURNING next_seq - $2",
            params![i64::from(pk.0), size],
        )?
        .get(0)?;
    let rest = Block {
        next: start + n,
        end: start + size,
    };
    debug_assert!(rest.next <= rest.end);
    tx.after_commit(Box::new(move || seqs.install(pk, rest)))?;
    Ok(start)
}

impl Seqs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PKey, Block>> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `n` numbers from the partition's block, if it has them.
    fn take_held(&self, pk: PKey, n: i64) -> Option<i64> {
        let mut blocks = self.lock();
        let b = blocks.get_mut(&pk)?;
        if b.end - b.next < n {
            return None;
        }
        let first = b.next;
        b.next += n;
        Some(first)
    }

    /// Makes a committed reservation's rest the partition's block — unless
    /// the block there is newer (two reservations of one group commit).
    fn install(&self, pk: PKey, rest: Block) {
        let mut blocks = self.lock();
        match blocks.get(&pk) {
            Some(b) if b.end >= rest.end => {}
            _ => {
                blocks.insert(pk, rest);
            }
        }
    }
}
