//! The on-device format: a superblock in block 0, then the free-block
//! bitmap, then the segment table, then the data blocks (BAIO section 4).
//!
//! ```text
//! block 0                  superblock (first 100 bytes used, CRC-32 at 96)
//! [bitmap_start, +n)       one bit per data block, 1 = allocated
//! [table_start, +n)        segment entries, 128 bytes each, CRC-32 each
//! [data_start, total)      data blocks; segment blocks are data-relative
//! ```
//!
//! All integers are little-endian. The segment table is the authority on
//! what is allocated: a segment is created by writing its bitmap bits first
//! and its entry last, and deleted by clearing its entry first, so a crash
//! can leave bits set that no entry owns (repaired on open) but never an
//! entry whose blocks look free.

use crate::{Error, Result};

pub(crate) const MAGIC: &[u8; 8] = b"TABOSBIO";
pub(crate) const VERSION: u32 = 1;
/// Bytes of one segment table entry.
pub(crate) const ENTRY_BYTES: usize = 128;
/// Longest segment name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Longest owner name, in bytes.
pub const OWNER_BYTES_MAX: usize = 32;
/// Fewest segment table entries a device has (BAIO: one per 1,000 blocks).
pub(crate) const ENTRIES_MIN: u64 = 64;
/// Smallest and largest block size.
pub const BLOCK_BYTES_MIN: u32 = 512;
pub const BLOCK_BYTES_MAX: u32 = 65_536;

/// CRC-32 (IEEE 802.3, reflected), table-driven.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for &b in data {
        c = TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Block 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub block_size: u32,
    pub total_blocks: u64,
    pub bitmap_start: u64,
    pub bitmap_blocks: u64,
    pub table_start: u64,
    pub table_blocks: u64,
    pub data_start: u64,
    pub data_blocks: u64,
    pub entries: u64,
    /// Where the next search for free blocks starts (data-relative).
    pub free_hint: u64,
    /// Random at format: tells one block store from another.
    pub device_id: u64,
}

const SB_CRC_AT: usize = 96;

impl Superblock {
    /// The layout of a device of `total_blocks` blocks of `block_size`.
    pub(crate) fn layout(block_size: u32, total_blocks: u64) -> Result<Superblock> {
        if !block_size.is_power_of_two()
            || !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block_size)
        {
            return Err(Error::Invalid(format!(
                "block size {block_size} is not a power of two in {BLOCK_BYTES_MIN}..={BLOCK_BYTES_MAX}"
            )));
        }
        let bs = u64::from(block_size);
        let mut data = total_blocks.saturating_sub(1);
        // The metadata's size depends on the data's and back: two rounds
        // settle it (each shrinks data by less than the last).
        let (mut bm, mut tbl) = (0, 0);
        for _ in 0..3 {
            bm = data.div_ceil(bs * 8);
            let entries = (data / 1000).max(ENTRIES_MIN);
            tbl = (entries * ENTRY_BYTES as u64).div_ceil(bs);
            data = total_blocks.saturating_sub(1 + bm + tbl);
        }
        // Fill the table's last block with entries.
        let entries = tbl * bs / ENTRY_BYTES as u64;
        if data < 1 {
            return Err(Error::Invalid(format!(
                "{total_blocks} blocks of {block_size} bytes leave no room for data"
            )));
        }
        let sb = Superblock {
            block_size,
            total_blocks,
            bitmap_start: 1,
            bitmap_blocks: bm,
            table_start: 1 + bm,
            table_blocks: tbl,
            data_start: 1 + bm + tbl,
            data_blocks: data,
            entries,
            free_hint: 0,
            device_id: 0,
        };
        sb.check()?;
        Ok(sb)
    }

    /// The invariants every superblock satisfies.
    fn check(&self) -> Result<()> {
        let bs = u64::from(self.block_size);
        let ok = self.block_size.is_power_of_two()
            && (BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&self.block_size)
            && self.bitmap_start == 1
            && self.bitmap_blocks * bs * 8 >= self.data_blocks
            && self.table_start == self.bitmap_start + self.bitmap_blocks
            && self.table_blocks * bs >= self.entries * ENTRY_BYTES as u64
            && self.data_start == self.table_start + self.table_blocks
            && self.data_start.checked_add(self.data_blocks) == Some(self.total_blocks)
            && self.free_hint < self.data_blocks.max(1);
        if !ok {
            return Err(Error::Corrupt(format!(
                "superblock fields are inconsistent: {self:?}"
            )));
        }
        Ok(())
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.block_size as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        for (i, v) in [
            self.total_blocks,
            self.bitmap_start,
            self.bitmap_blocks,
            self.table_start,
            self.table_blocks,
            self.data_start,
            self.data_blocks,
            self.entries,
            self.free_hint,
            self.device_id,
        ]
        .iter()
        .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32(&b[..SB_CRC_AT]);
        b[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and verifies block 0 (at least its first 100 bytes).
    pub(crate) fn decode(b: &[u8]) -> Result<Superblock> {
        if b.len() < SB_CRC_AT + 4 || &b[0..8] != MAGIC {
            return Err(Error::Corrupt(
                "no tabos blockio superblock (bad magic): not formatted, or overwritten".into(),
            ));
        }
        let (stored, computed) = (u32_at(b, SB_CRC_AT), crc32(&b[..SB_CRC_AT]));
        if stored != computed {
            return Err(Error::Corrupt(format!(
                "superblock checksum mismatch: stored {stored:08x}, computed {computed:08x}"
            )));
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(Error::Corrupt(format!(
                "superblock version {version}, this build reads {VERSION}"
            )));
        }
        let f = |i: usize| u64_at(b, 16 + 8 * i);
        let sb = Superblock {
            block_size: u32_at(b, 12),
            total_blocks: f(0),
            bitmap_start: f(1),
            bitmap_blocks: f(2),
            table_start: f(3),
            table_blocks: f(4),
            data_start: f(5),
            data_blocks: f(6),
            entries: f(7),
            free_hint: f(8),
            device_id: f(9),
        };
        sb.check()?;
        Ok(sb)
    }
}

/// One segment table entry: a named, owned, contiguous run of data blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Bumped on every create and delete of this slot, so a capability to
    /// a deleted segment never matches its successor.
    pub generation: u32,
    pub used: bool,
    /// First data block (data-relative) and length in blocks.
    pub start: u64,
    pub blocks: u64,
    pub owner: String,
    pub name: String,
}

const ENTRY_CRC_AT: usize = 124;

impl Entry {
    pub(crate) fn encode(&self) -> [u8; ENTRY_BYTES] {
        debug_assert!(self.name.len() <= NAME_BYTES_MAX && self.owner.len() <= OWNER_BYTES_MAX);
        let mut b = [0u8; ENTRY_BYTES];
        b[0..4].copy_from_slice(&u32::from(self.used).to_le_bytes());
        b[4..8].copy_from_slice(&self.generation.to_le_bytes());
        b[8..16].copy_from_slice(&self.start.to_le_bytes());
        b[16..24].copy_from_slice(&self.blocks.to_le_bytes());
        b[24..24 + self.owner.len()].copy_from_slice(self.owner.as_bytes());
        b[56..56 + self.name.len()].copy_from_slice(self.name.as_bytes());
        let crc = crc32(&b[..ENTRY_CRC_AT]);
        b[ENTRY_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes entry `index`; an all-zero entry (never written) is free.
    pub(crate) fn decode(index: u64, b: &[u8]) -> Result<Entry> {
        debug_assert_eq!(b.len(), ENTRY_BYTES);
        if b.iter().all(|&x| x == 0) {
            return Ok(Entry {
                generation: 0,
                used: false,
                start: 0,
                blocks: 0,
                owner: String::new(),
                name: String::new(),
            });
        }
        let (stored, computed) = (u32_at(b, ENTRY_CRC_AT), crc32(&b[..ENTRY_CRC_AT]));
        if stored != computed {
            return Err(Error::Corrupt(format!(
                "segment table entry {index}: checksum mismatch (stored {stored:08x}, computed {computed:08x})"
            )));
        }
        let text = |lo: usize, hi: usize| {
            let raw = &b[lo..hi];
            let end = raw.iter().position(|&x| x == 0).unwrap_or(raw.len());
            String::from_utf8(raw[..end].to_vec()).map_err(|_| {
                Error::Corrupt(format!("segment table entry {index}: a name is not UTF-8"))
            })
        };
        Ok(Entry {
            used: u32_at(b, 0) == 1,
            generation: u32_at(b, 4),
            start: u64_at(b, 8),
            blocks: u64_at(b, 16),
            owner: text(24, 56)?,
            name: text(56, ENTRY_CRC_AT)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn layouts_are_consistent_and_round_trip() {
        for (bs, total) in [(4096, 5), (4096, 262_145), (512, 10_000), (65_536, 100)] {
            let sb = Superblock::layout(bs, total).unwrap();
            assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
            assert!(sb.entries >= ENTRIES_MIN);
        }
        assert!(Superblock::layout(4096, 4).is_err());
        assert!(Superblock::layout(3000, 100).is_err());
    }

    #[test]
    fn entries_round_trip_and_detect_damage() {
        let e = Entry {
            generation: 7,
            used: true,
            start: 12,
            blocks: 34,
            owner: "realm:alice".into(),
            name: "fs/abc".into(),
        };
        let mut b = e.encode();
        assert_eq!(Entry::decode(0, &b).unwrap(), e);
        b[60] ^= 1;
        assert!(matches!(Entry::decode(0, &b), Err(Error::Corrupt(_))));
    }
}
