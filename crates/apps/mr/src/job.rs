//! The built-in jobs as map and reduce functions over bytes.
//!
//! * Word count: a word is a maximal run of bytes that are not ASCII
//!   whitespace (so any encoding, and bytes that are not UTF-8, count);
//!   the output is each word with its number of occurrences.
//! * Grep: the output is each input file with the number of its lines that
//!   contain the pattern (a byte string), like `grep -r -c` without the
//!   files that have none.
//!
//! Mappers see lines in pieces (see [`crate::split::read_lines`]; a word
//! count sees its split's bytes in pieces cut anywhere,
//! [`crate::split::read_owned`]) and keep what crosses a piece boundary:
//! the unfinished word, or the last `pattern.len() - 1` bytes. Map output is combined in the mapper (one
//! count per key and reducer) before it is written.

use std::path::Path;

use crate::{Error, Result};

/// Longest word counted; a longer run of non-space bytes counts as
/// several words of this length and a rest.
pub const WORD_BYTES_MAX: usize = 1 << 20;
/// Longest grep pattern.
pub const PATTERN_BYTES_MAX: usize = 4 << 10;
/// Most reducers of one job.
pub const REDUCERS_MAX: usize = 1_024;

/// A built-in job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    WordCount,
    Grep { pattern: Vec<u8> },
}

impl Kind {
    pub fn grep(pattern: &[u8]) -> Result<Kind> {
        if pattern.is_empty() || pattern.len() > PATTERN_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a pattern is 1..={PATTERN_BYTES_MAX} bytes"
            )));
        }
        Ok(Kind::Grep {
            pattern: pattern.to_vec(),
        })
    }

    /// Whether its mapper needs a split's lines one by one ([`Mapper::piece`]
    /// with `ends` at each line's end); a word count does not ('\n' is
    /// whitespace like any other), and takes the split's bytes in pieces
    /// cut anywhere, with one `ends` at the split's end.
    pub fn sees_lines(&self) -> bool {
        match self {
            Kind::WordCount => false,
            Kind::Grep { .. } => true,
        }
    }

    /// A mapper for the lines of `path`.
    pub fn mapper(&self, path: &Path) -> Mapper {
        match self {
            Kind::WordCount => Mapper::Words {
                partial: Vec::new(),
            },
            Kind::Grep { pattern } => Mapper::Grep {
                pattern: pattern.clone(),
                key: path.as_os_str().as_encoded_bytes().to_vec(),
                tail: Vec::new(),
                matched: false,
            },
        }
    }
}

/// FNV-1a's 64-bit offset basis: the hash of nothing.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over `bytes`, continuing from hash `h` ([`FNV_OFFSET`] to start):
/// the one FNV of the crate — partitions, the combiner's tables and the
/// last fold of the intermediate files' seal.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The reducer a key goes to: FNV-1a of the key, modulo the reducers.
pub fn partition(key: &[u8], reducers: usize) -> usize {
    debug_assert!(reducers > 0);
    (fnv1a(FNV_OFFSET, key) % reducers.max(1) as u64) as usize
}

/// Map output, combined: one count per key, per reducer. A key's FNV-1a
/// is computed once, for its partition and its place in that partition's
/// table alike (the table takes it with its halves swapped: within a
/// partition the low bits are what chose the partition). FNV-1a is
/// several times faster than SipHash for short keys like words; it is not
/// collision-resistant, but the keys come from the job's own input, so an
/// input made of colliding keys slows down only its own job.
#[derive(Debug)]
pub struct Combiner {
    /// Per reducer: its keys and their counts.
    parts: Vec<Part>,
}

/// Keys up to this long are kept in their table slot; longer ones in
/// their partition's arena. Most words are this short: a lookup then
/// compares the slot it probes with two integer comparisons, and a new
/// key costs no allocation of its own — with millions of distinct words
/// (the Linux source's 12 million), a key behind a pointer of its own
/// was a cache miss per lookup and an allocation per key.
const INLINE_KEY_BYTES: usize = 16;

/// One key of a [`Part`] and its count.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// The key's table hash.
    hash: u64,
    count: u64,
    len: u32,
    /// The key, zero-padded, if it is at most [`INLINE_KEY_BYTES`] long;
    /// else its offset in the arena (little-endian, first eight bytes).
    key: [u8; INLINE_KEY_BYTES],
}

impl Slot {
    fn inline(&self) -> bool {
        self.len as usize <= INLINE_KEY_BYTES
    }

    fn at(&self) -> usize {
        let mut at = [0u8; 8];
        at.copy_from_slice(&self.key[..8]);
        u64::from_le_bytes(at) as usize
    }
}

/// One reducer's share of a combiner: a table of slots, and the bytes of
/// its long keys.
#[derive(Debug, Default)]
struct Part {
    table: hashbrown::HashTable<Slot>,
    arena: Vec<u8>,
}

impl Part {
    fn key<'a>(&'a self, s: &'a Slot) -> &'a [u8] {
        let len = s.len as usize;
        if s.inline() {
            &s.key[..len]
        } else {
            &self.arena[s.at()..s.at() + len]
        }
    }

    /// Its slots, sorted by key (byte order). What is sorted is a compact
    /// record per slot holding its key's first [`INLINE_KEY_BYTES`] as a
    /// big-endian integer (a long key's read from the arena once, here):
    /// a comparison reads neither slots nor arena unless two long keys
    /// share those bytes — in the Linux source most distinct words are
    /// long, and comparing them in the arena was a third of the sort.
    fn sorted(&mut self) -> Vec<Slot> {
        let slots: Vec<Slot> = std::mem::take(&mut self.table).into_iter().collect();
        let mut order: Vec<SortKey> = slots
            .iter()
            .enumerate()
            .map(|(at, s)| {
                let mut leading = [0u8; INLINE_KEY_BYTES];
                let key = self.key(s);
                let n = key.len().min(INLINE_KEY_BYTES);
                leading[..n].copy_from_slice(&key[..n]);
                SortKey {
                    leading: u128::from_be_bytes(leading),
                    len: s.len,
                    at,
                }
            })
            .collect();
        // Zero-padded, equal leading bytes mean equal keys up to the
        // shorter one's length: the shorter is a prefix of the other (and
        // first), unless both are long — then the rest decides.
        order.sort_unstable_by(|a, b| {
            a.leading.cmp(&b.leading).then_with(|| {
                let long = |k: &SortKey| k.len as usize > INLINE_KEY_BYTES;
                if long(a) && long(b) {
                    let rest = |k: &SortKey| &self.key(&slots[k.at])[INLINE_KEY_BYTES..];
                    rest(a).cmp(rest(b))
                } else {
                    a.len.cmp(&b.len)
                }
            })
        });
        order.iter().map(|k| slots[k.at]).collect()
    }
}

/// What [`Part::sorted`] sorts: a slot's key's leading bytes, its length,
/// and where the slot is.
struct SortKey {
    leading: u128,
    len: u32,
    at: usize,
}

impl Combiner {
    pub fn new(reducers: usize) -> Result<Combiner> {
        if reducers == 0 || reducers > REDUCERS_MAX {
            return Err(Error::Invalid(format!(
                "a job has 1..={REDUCERS_MAX} reducers"
            )));
        }
        Ok(Combiner {
            parts: (0..reducers).map(|_| Part::default()).collect(),
        })
    }

    pub fn emit(&mut self, key: &[u8], n: u64) {
        debug_assert!(key.len() <= WORD_BYTES_MAX);
        let h = fnv1a(FNV_OFFSET, key);
        // As `partition` computes it, from the same hash.
        let r = (h % self.parts.len() as u64) as usize;
        debug_assert_eq!(r, partition(key, self.parts.len()));
        let th = h.rotate_left(32);
        let Part { table, arena } = &mut self.parts[r];
        let len = key.len();
        let inline = len <= INLINE_KEY_BYTES;
        let mut padded = [0u8; INLINE_KEY_BYTES];
        if inline {
            padded[..len].copy_from_slice(key);
        }
        let want = u128::from_ne_bytes(padded);
        let found = if inline {
            table.find_mut(th, |s| {
                s.len as usize == len && u128::from_ne_bytes(s.key) == want
            })
        } else {
            table.find_mut(th, |s| {
                s.len as usize == len && &arena[s.at()..s.at() + len] == key
            })
        };
        if let Some(s) = found {
            s.count += n;
            return;
        }
        if !inline {
            padded[..8].copy_from_slice(&(arena.len() as u64).to_le_bytes());
            arena.extend_from_slice(key);
        }
        let slot = Slot {
            hash: th,
            count: n,
            len: len as u32,
            key: padded,
        };
        table.insert_unique(th, slot, |s| s.hash);
    }

    /// Each reducer's records, sorted by key.
    pub fn into_parts(self) -> Vec<Vec<(Vec<u8>, u64)>> {
        self.parts
            .into_iter()
            .map(|mut p| {
                let slots = p.sorted();
                slots.iter().map(|s| (p.key(s).to_vec(), s.count)).collect()
            })
            .collect()
    }

    /// Each reducer's records, sorted by key and encoded
    /// ([`format::encode`](crate::format::encode)'s bytes) — what a
    /// mapper writes, without a copy of each key on the way.
    pub fn into_encoded(self) -> Vec<Vec<u8>> {
        self.parts
            .into_iter()
            .map(|mut p| {
                let slots = p.sorted();
                let bytes = slots.iter().map(|s| s.len as usize + 12).sum();
                let mut out = Vec::with_capacity(bytes);
                for s in &slots {
                    crate::format::put(&mut out, p.key(s), s.count);
                }
                out
            })
            .collect()
    }
}

/// The map side of a job over one file's lines.
#[derive(Debug)]
pub enum Mapper {
    Words {
        /// The word the last piece ended in.
        partial: Vec<u8>,
    },
    Grep {
        pattern: Vec<u8>,
        key: Vec<u8>,
        /// The end of the line so far that a match may start in.
        tail: Vec<u8>,
        matched: bool,
    },
}

impl Mapper {
    /// Takes the next piece of a line; `ends` on the line's last piece.
    pub fn piece(&mut self, bytes: &[u8], ends: bool, out: &mut Combiner) {
        match self {
            Mapper::Words { partial } => {
                let mut rest = bytes;
                loop {
                    let start = rest
                        .iter()
                        .position(|b| !b.is_ascii_whitespace())
                        .unwrap_or(rest.len());
                    if start > 0 && !partial.is_empty() {
                        out.emit(partial, 1);
                        partial.clear();
                    }
                    rest = &rest[start..];
                    if rest.is_empty() {
                        break;
                    }
                    let end = rest
                        .iter()
                        .position(|b| b.is_ascii_whitespace())
                        .unwrap_or(rest.len());
                    let word = &rest[..end];
                    if end < rest.len() {
                        if partial.is_empty() {
                            emit_word(out, word);
                        } else {
                            partial.extend_from_slice(word);
                            let w = std::mem::take(partial);
                            emit_word(out, &w);
                        }
                    } else {
                        // Runs to the end of the piece: may go on.
                        partial.extend_from_slice(word);
                        while partial.len() >= WORD_BYTES_MAX {
                            out.emit(&partial[..WORD_BYTES_MAX], 1);
                            partial.drain(..WORD_BYTES_MAX);
                        }
                    }
                    rest = &rest[end..];
                }
                if ends && !partial.is_empty() {
                    out.emit(partial, 1);
                    partial.clear();
                }
            }
            Mapper::Grep {
                pattern,
                key,
                tail,
                matched,
            } => {
                if !*matched {
                    tail.extend_from_slice(bytes);
                    if find(tail, pattern) {
                        *matched = true;
                    } else {
                        let keep = pattern.len() - 1;
                        if tail.len() > keep {
                            tail.drain(..tail.len() - keep);
                        }
                    }
                }
                if ends {
                    if *matched {
                        out.emit(key, 1);
                    }
                    *matched = false;
                    tail.clear();
                }
            }
        }
    }
}

fn emit_word(out: &mut Combiner, word: &[u8]) {
    let mut w = word;
    while w.len() > WORD_BYTES_MAX {
        out.emit(&w[..WORD_BYTES_MAX], 1);
        w = &w[WORD_BYTES_MAX..];
    }
    if !w.is_empty() {
        out.emit(w, 1);
    }
}

/// Whether `needle` occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    let first = needle[0];
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..=hay.len() - needle.len()]
            .iter()
            .position(|&b| b == first)
        {
            None => return false,
            Some(p) => {
                i += p;
                if &hay[i..i + needle.len()] == needle {
                    return true;
                }
                i += 1;
            }
        }
    }
    false
}
