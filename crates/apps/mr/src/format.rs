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
pub fn decode(bytes: &[u8]) -> Result<Vec<(Vec<u8>, u64)>> {
    let n = check(bytes)?;
    let mut out = Vec::with_capacity(n);
    out.extend(records(bytes).map(|(k, c)| (k.to_vec(), c)));
    Ok(out)
}

/// The records of `bytes`, borrowed, assuming [`check`] passed (a cut
/// record ends the iteration).
pub fn records(mut bytes: &[u8]) -> impl Iterator<Item = (&[u8], u64)> {
    std::iter::from_fn(move || {
        if bytes.len() < 4 {
            return None;
        }
        let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if bytes.len() < 4 + n + 8 {
            return None;
        }
        let key = &bytes[4..4 + n];
        let mut c = [0u8; 8];
        c.copy_from_slice(&bytes[4 + n..4 + n + 8]);
        bytes = &bytes[4 + n + 8..];
        Some((key, u64::from_le_bytes(c)))
    })
}

/// Checks the format of encoded records (lengths, strict key order)
/// without copying them; returns how many there are.
pub fn check(bytes: &[u8]) -> Result<usize> {
    let mut at = 0usize;
    let mut last: Option<&[u8]> = None;
    let mut n = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 4 {
            return Err(Error::Corrupt("a record header is cut".into()));
        }
        let k = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if k > KEY_BYTES_MAX || rest.len() < 4 + k + 8 {
            return Err(Error::Corrupt(format!("a record of key length {k} is cut")));
        }
        let key = &rest[4..4 + k];
        if last.is_some_and(|l| l >= key) {
            return Err(Error::Corrupt("keys out of order".into()));
        }
        last = Some(key);
        at += 4 + k + 8;
        n += 1;
    }
    Ok(n)
}

/// Merges checked, encoded runs (a k-way merge over borrowed keys, summing
/// equal keys) and hands each merged record to `out`, in key order.
pub fn merge_with(runs: &[&[u8]], mut out: impl FnMut(&[u8], u64)) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut iters: Vec<_> = runs.iter().map(|r| records(r)).collect();
    let mut heap = BinaryHeap::with_capacity(iters.len());
    for (i, it) in iters.iter_mut().enumerate() {
        if let Some((k, c)) = it.next() {
            heap.push(Reverse((k, i, c)));
        }
    }
    let mut current: Option<(&[u8], u64)> = None;
    while let Some(Reverse((k, i, c))) = heap.pop() {
        match &mut current {
            Some((ck, cc)) if *ck == k => *cc += c,
            _ => {
                if let Some((ck, cc)) = current {
                    out(ck, cc);
                }
                current = Some((k, c));
            }
        }
        if let Some((k, c)) = iters[i].next() {
            heap.push(Reverse((k, i, c)));
        }
    }
    if let Some((ck, cc)) = current {
        out(ck, cc);
    }
}

/// Appends one record as a line of [`to_text`]'s format.
pub fn put_text(out: &mut Vec<u8>, key: &[u8], count: u64) {
    for &b in key {
        match b {
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => out.push(b),
        }
    }
    out.push(b'\t');
    out.extend_from_slice(count.to_string().as_bytes());
    out.push(b'\n');
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

/// The trailer of a sealed file: magic, payload length, FNV-1a-64 hash.
const SEAL_MAGIC: &[u8; 4] = b"MRv2";
/// Bytes of the trailer [`seal`] appends.
pub const SEAL_BYTES: usize = 4 + 8 + 8;

/// The seal's checksum: four lanes, each taking 8 bytes at a time through
/// an odd multiply and a rotation (both one-to-one, so any change to a
/// word changes its lane), folded with FNV-1a, which also takes the last
/// bytes. It finds damage and cuts, not an adversary (the files are the
/// job's own); FNV-1a a byte at a time took a few per cent of a word
/// count's time over every intermediate byte, twice.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [0u64, 1, 2, 3].map(|i| crate::job::FNV_OFFSET ^ i);
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *lane = (*lane ^ u64::from_le_bytes(w))
                .wrapping_mul(K)
                .rotate_left(29);
        }
    }
    let mut h = crate::job::FNV_OFFSET;
    for lane in lanes {
        h = crate::job::fnv1a(h, &lane.to_le_bytes());
    }
    crate::job::fnv1a(h, blocks.remainder())
}

/// Appends the trailer that lets a reader tell a whole intermediate file
/// from a cut or damaged one.
pub fn seal(mut payload: Vec<u8>) -> Vec<u8> {
    let (len, hash) = (payload.len() as u64, checksum(&payload));
    payload.extend_from_slice(SEAL_MAGIC);
    payload.extend_from_slice(&len.to_le_bytes());
    payload.extend_from_slice(&hash.to_le_bytes());
    payload
}

/// The payload of a sealed file, if its trailer checks.
pub fn unseal(bytes: &[u8]) -> Result<&[u8]> {
    let bad = |why: &str| Error::Corrupt(format!("intermediate file {why}"));
    if bytes.len() < SEAL_BYTES {
        return Err(bad("too short for its trailer"));
    }
    let (payload, trailer) = bytes.split_at(bytes.len() - SEAL_BYTES);
    if &trailer[..4] != SEAL_MAGIC {
        return Err(bad("has no trailer"));
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&trailer[4..12]);
    let mut h = [0u8; 8];
    h.copy_from_slice(&trailer[12..20]);
    if u64::from_le_bytes(n) != payload.len() as u64 || u64::from_le_bytes(h) != checksum(payload) {
        return Err(bad("fails its length or hash check"));
    }
    Ok(payload)
}

/// Records as text, one `key<TAB>count` line each (Hadoop's part files);
/// tab, newline, carriage return and backslash in a key are escaped as
/// `\t`, `\n`, `\r`, `\\`, other bytes are kept as they are.
pub fn to_text(records: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.iter().map(|(k, _)| k.len() + 8).sum());
    for (k, c) in records {
        put_text(&mut out, k, *c);
    }
    out
}

/// Parses [`to_text`]'s output.
pub fn from_text(text: &[u8]) -> Result<Vec<(Vec<u8>, u64)>> {
    text_records(text)
        .map(|r| r.map(|(k, c)| (k.into_owned(), c)))
        .collect()
}

/// [`to_text`]'s records, read in place: a key is copied only if it has
/// an escape to undo.
pub fn text_records(
    text: &[u8],
) -> impl Iterator<Item = Result<(std::borrow::Cow<'_, [u8]>, u64)>> {
    text.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(text_record)
}

fn text_record(line: &[u8]) -> Result<(std::borrow::Cow<'_, [u8]>, u64)> {
    let tab = line
        .iter()
        .rposition(|&b| b == b'\t')
        .ok_or_else(|| Error::Corrupt("an output line has no tab".into()))?;
    let count = std::str::from_utf8(&line[tab + 1..])
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::Corrupt("an output line's count is not a number".into()))?;
    let escaped = &line[..tab];
    if !escaped.contains(&b'\\') {
        return Ok((std::borrow::Cow::Borrowed(escaped), count));
    }
    let mut key = Vec::with_capacity(tab);
    let mut it = escaped.iter();
    while let Some(&b) = it.next() {
        if b != b'\\' {
            key.push(b);
            continue;
        }
        key.push(match it.next() {
            Some(b't') => b'\t',
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b'\\') => b'\\',
            _ => return Err(Error::Corrupt("a bad escape in an output key".into())),
        });
    }
    Ok((std::borrow::Cow::Owned(key), count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_reads_back_and_any_cut_or_changed_byte_is_found() {
        let payload: Vec<u8> = (0..1_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let sealed = seal(payload.clone());
        assert_eq!(unseal(&sealed).unwrap(), &payload[..]);
        assert_eq!(unseal(&seal(Vec::new())).unwrap(), &[] as &[u8]);
        for cut in [1, 7, SEAL_BYTES, SEAL_BYTES + 1, sealed.len()] {
            assert!(unseal(&sealed[..sealed.len() - cut]).is_err(), "cut {cut}");
        }
        // Every byte of the payload (in the 32-byte blocks and the rest)
        // and of the trailer, each bit flipped in turn at a few places.
        for at in (0..sealed.len()).step_by(13).chain([sealed.len() - 1]) {
            for bit in [0, 3, 7] {
                let mut bad = sealed.clone();
                bad[at] ^= 1 << bit;
                assert!(unseal(&bad).is_err(), "byte {at} bit {bit}");
            }
        }
        // Two words swapped between lanes.
        let mut swapped = payload.clone();
        swapped.swap(0, 8);
        assert_ne!(checksum(&swapped), checksum(&payload));
    }
}
