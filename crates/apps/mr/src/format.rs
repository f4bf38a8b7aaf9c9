//! The record format of intermediate and output files: a sequence of
//! `[key_len u32 LE][key][count u64 LE]`, sorted by key, keys unique.

use crate::{Error, Result};

/// Longest key a record may carry.
pub const KEY_BYTES_MAX: usize = 1 << 20;

/// Appends one record.
pub fn put(out: &mut Vec<u8>, key: &[u8], count: u64) {
    debug_assert!(key.len() <= KEY_BYTES_MAX);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&count.to_le_bytes());
}

/// Encodes sorted records.
pub fn encode(records: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.iter().map(|(k, _)| k.len() + 12).sum());
    for (k, c) in records {
        put(&mut out, k, *c);
    }
    out
}

/// Decodes records, checking the format (lengths, order).
pub fn decode(mut bytes: &[u8]) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut out: Vec<(Vec<u8>, u64)> = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 4 {
            return Err(Error::Corrupt("a record header is cut".into()));
        }
        let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if n > KEY_BYTES_MAX || bytes.len() < 4 + n + 8 {
            return Err(Error::Corrupt(format!("a record of key length {n} is cut")));
        }
        let key = bytes[4..4 + n].to_vec();
        let mut c = [0u8; 8];
        c.copy_from_slice(&bytes[4 + n..4 + n + 8]);
        if out.last().is_some_and(|(k, _)| *k >= key) {
            return Err(Error::Corrupt("keys out of order".into()));
        }
        out.push((key, u64::from_le_bytes(c)));
        bytes = &bytes[4 + n + 8..];
    }
    Ok(out)
}

/// Merges sorted runs, summing the counts of equal keys.
pub fn merge(runs: Vec<Vec<(Vec<u8>, u64)>>) -> Vec<(Vec<u8>, u64)> {
    let mut all: Vec<(Vec<u8>, u64)> = runs.into_iter().flatten().collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(Vec<u8>, u64)> = Vec::with_capacity(all.len());
    for (k, c) in all {
        match out.last_mut() {
            Some((lk, lc)) if *lk == k => *lc += c,
            _ => out.push((k, c)),
        }
    }
    out
}
