//! The shared block cache: physical block number → the block's bytes, with
//! CLOCK (second-chance) eviction, in shards so that queues on different
//! threads rarely meet on a lock. A request chooses per call whether to go
//! through it ([`crate::CachePolicy::Cached`]) or around it; a write around
//! it drops the blocks it overwrites so no stale copy is ever served.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 16;

struct Slot {
    bytes: Box<[u8]>,
    referenced: bool,
}

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Slot>,
    clock: VecDeque<u64>,
}

pub(crate) struct Cache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

impl Cache {
    /// A cache of at most `blocks` blocks (0: none is kept).
    pub(crate) fn new(blocks: usize) -> Cache {
        Cache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: blocks.div_ceil(SHARDS),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, block: u64) -> std::sync::MutexGuard<'_, Shard> {
        // A poisoned shard only means a panic elsewhere mid-update of a map
        // whose every state is valid.
        self.shards[(block as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Copies blocks `[first, first + dst.len() / bs)` into `dst` if every
    /// one is cached; otherwise copies nothing and returns false.
    pub(crate) fn read(&self, first: u64, bs: usize, dst: &mut [u8]) -> bool {
        debug_assert_eq!(dst.len() % bs, 0);
        for (i, chunk) in dst.chunks_mut(bs).enumerate() {
            let block = first + i as u64;
            let mut s = self.shard(block);
            match s.map.get_mut(&block) {
                Some(slot) => {
                    slot.referenced = true;
                    chunk.copy_from_slice(&slot.bytes);
                }
                None => {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            }
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Keeps blocks `[first, ..)` from `src`, evicting by CLOCK.
    pub(crate) fn fill(&self, first: u64, bs: usize, src: &[u8]) {
        if self.per_shard == 0 {
            return;
        }
        for (i, chunk) in src.chunks(bs).enumerate() {
            let block = first + i as u64;
            let mut s = self.shard(block);
            if let Some(slot) = s.map.get_mut(&block) {
                slot.bytes.copy_from_slice(chunk);
                slot.referenced = true;
                continue;
            }
            while s.map.len() >= self.per_shard {
                let Some(victim) = s.clock.pop_front() else {
                    break;
                };
                match s.map.get_mut(&victim) {
                    Some(slot) if slot.referenced => {
                        slot.referenced = false;
                        s.clock.push_back(victim);
                    }
                    Some(_) => {
                        s.map.remove(&victim);
                    }
                    None => {} // dropped by invalidate; its clock entry was stale
                }
            }
            s.map.insert(
                block,
                Slot {
                    bytes: chunk.into(),
                    referenced: false,
                },
            );
            s.clock.push_back(block);
        }
    }

    /// Forgets blocks `[first, first + count)`.
    pub(crate) fn invalidate(&self, first: u64, count: u64) {
        if self.per_shard == 0 {
            return;
        }
        for block in first..first + count {
            self.shard(block).map.remove(&block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_misses_eviction_and_invalidation() {
        let c = Cache::new(SHARDS); // one block per shard
        let mut buf = [0u8; 4];
        assert!(!c.read(0, 4, &mut buf));
        c.fill(0, 4, &[1, 2, 3, 4]);
        assert!(c.read(0, 4, &mut buf));
        assert_eq!(buf, [1, 2, 3, 4]);
        // Block 16 shares block 0's shard: 0 was referenced, so it gets a
        // second chance, then is evicted.
        c.fill(16, 4, &[5; 4]);
        assert!(c.read(16, 4, &mut buf));
        assert!(!c.read(0, 4, &mut buf));
        c.invalidate(16, 1);
        assert!(!c.read(16, 4, &mut buf));
        let none = Cache::new(0);
        none.fill(0, 4, &[1; 4]);
        assert!(!none.read(0, 4, &mut buf));
    }
}
