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
///
/// A loser tree picks the next record: ⌈log₂ k⌉ comparisons each, where a
/// binary heap's pop and push take about twice that, and each comparison
/// is first of the keys' leading bytes as an integer ([`Head`]) — over the
/// Linux source's 38 runs a reducer, comparing whole keys in a heap, spent
/// a quarter of its time in `memcmp`.
pub fn merge_with(runs: &[&[u8]], mut out: impl FnMut(&[u8], u64)) {
    let k = runs.len();
    let mut iters: Vec<_> = runs.iter().map(|r| records(r)).collect();
    let mut heads: Vec<Option<Head>> = iters
        .iter_mut()
        .map(|it| it.next().map(Head::new))
        .collect();
    // Run `a`'s record comes before run `b`'s: a smaller key, or the same
    // key from an earlier run; a run that has ended comes last.
    let before = |heads: &[Option<Head>], a: usize, b: usize| match (&heads[a], &heads[b]) {
        (Some(x), Some(y)) => x.cmp_key(y).then(a.cmp(&b)).is_lt(),
        (Some(_), None) => true,
        (None, _) => false,
    };
    // `tree[n]` for n in 1..k: the run that lost the match at node n (the
    // nodes of a complete binary tree whose leaves, at k..2k, are the
    // runs); `tree[0]`: the overall winner.
    let mut tree = vec![0usize; k.max(1)];
    if k > 1 {
        let mut winner = vec![0usize; 2 * k];
        for (run, w) in winner[k..].iter_mut().enumerate() {
            *w = run;
        }
        for n in (1..k).rev() {
            let (a, b) = (winner[2 * n], winner[2 * n + 1]);
            let (w, l) = if before(&heads, b, a) { (b, a) } else { (a, b) };
            winner[n] = w;
            tree[n] = l;
        }
        tree[0] = winner[1];
    }
    let mut current: Option<Head> = None;
    loop {
        let run = tree[0];
        let Some(h) = heads.get(run).copied().flatten() else {
            break;
        };
        match &mut current {
            Some(c) if c.prefix == h.prefix && c.key == h.key => c.count += h.count,
            _ => {
                if let Some(c) = current.replace(h) {
                    out(c.key, c.count);
                }
            }
        }
        heads[run] = iters[run].next().map(Head::new);
        // Replay the run's matches, from its leaf to the root.
        let mut winner = run;
        let mut n = (k + run) / 2;
        while n >= 1 {
            if before(&heads, tree[n], winner) {
                std::mem::swap(&mut tree[n], &mut winner);
            }
            n /= 2;
        }
        tree[0] = winner;
    }
    if let Some(c) = current {
        out(c.key, c.count);
    }
}

/// A run's next record in [`merge_with`], with its key's first eight bytes
/// (zero-padded) as a big-endian integer: two keys whose integers differ
/// are in that order (a shorter key that pads equal is a prefix, and
/// smaller), so only keys that share those bytes are compared in full.
#[derive(Clone, Copy)]
struct Head<'a> {
    prefix: u64,
    key: &'a [u8],
    count: u64,
}

impl<'a> Head<'a> {
    fn new((key, count): (&'a [u8], u64)) -> Head<'a> {
        let mut p = [0u8; 8];
        let n = key.len().min(8);
        p[..n].copy_from_slice(&key[..n]);
        Head {
            prefix: u64::from_be_bytes(p),
            key,
            count,
        }
    }

    fn cmp_key(&self, other: &Head) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(other.key))
    }
}

/// Appends one record as a line of [`to_text`]'s format: the key's runs
/// without escapes copied whole, the count written without an allocation.
pub fn put_text(out: &mut Vec<u8>, key: &[u8], count: u64) {
    // Most keys have nothing to escape: a pass with no early exit (which
    // the compiler vectorizes) says so; it also sends keys with other
    // control bytes the slow way, where they are kept as they are.
    let plain = !key
        .iter()
        .fold(false, |any, &b| any | (b <= b'\r') | (b == b'\\'));
    if plain {
        out.extend_from_slice(key);
    } else {
        let mut rest = key;
        while let Some((at, escaped)) = rest
            .iter()
            .enumerate()
            .find_map(|(at, &b)| escape(b).map(|e| (at, e)))
        {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(escaped);
            rest = &rest[at + 1..];
        }
        out.extend_from_slice(rest);
    }
    out.push(b'\t');
    out.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    out.push(b'\n');
}

/// How [`to_text`] writes `b` in a key, if not as itself.
fn escape(b: u8) -> Option<&'static [u8]> {
    match b {
        b'\t' => Some(b"\\t"),
        b'\n' => Some(b"\\n"),
        b'\r' => Some(b"\\r"),
        b'\\' => Some(b"\\\\"),
        _ => None,
    }
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

    /// Keys that tie on their leading eight bytes (zero bytes, prefixes of
    /// each other, long keys that differ late), dealt over `k` runs.
    fn runs_of(k: usize) -> Vec<Vec<(Vec<u8>, u64)>> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for len in [0usize, 1, 7, 8, 9, 16, 40] {
            for fill in [b'a', 0u8, 0xff] {
                let mut key = vec![fill; len];
                keys.push(key.clone());
                key.push(0);
                keys.push(key.clone());
                key.push(b'z');
                keys.push(key);
            }
        }
        let mut runs = vec![Vec::new(); k];
        for (i, key) in keys.iter().enumerate() {
            // Each key in one to three runs, with counts that differ.
            for j in 0..(i % 3 + 1).min(k) {
                runs[(i + j * 7) % k].push((key.clone(), (i * 10 + j) as u64 + 1));
            }
        }
        for r in &mut runs {
            r.sort();
            r.dedup_by(|a, b| a.0 == b.0);
        }
        runs
    }

    #[test]
    fn the_loser_tree_merges_like_a_sort() {
        for k in [0usize, 1, 2, 3, 5, 8, 38] {
            let runs = runs_of(k);
            let encoded: Vec<Vec<u8>> = runs.iter().map(|r| encode(r)).collect();
            let borrowed: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
            let mut got = Vec::new();
            merge_with(&borrowed, |key, count| got.push((key.to_vec(), count)));
            assert_eq!(got, merge(runs), "{k} runs");
        }
        // Runs of which some are empty.
        let runs = [
            Vec::new(),
            vec![(b"b".to_vec(), 2)],
            Vec::new(),
            vec![(b"a".to_vec(), 1), (b"b".to_vec(), 3)],
        ];
        let encoded: Vec<Vec<u8>> = runs.iter().map(|r| encode(r)).collect();
        let borrowed: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
        let mut got = Vec::new();
        merge_with(&borrowed, |key, count| got.push((key.to_vec(), count)));
        assert_eq!(got, vec![(b"a".to_vec(), 1), (b"b".to_vec(), 5)]);
    }

    #[test]
    fn text_escapes_what_it_must_and_reads_back() {
        let mut out = Vec::new();
        put_text(&mut out, b"plain", 0);
        put_text(&mut out, b"\ttab\nnew\rret\\slash\t", u64::MAX);
        put_text(&mut out, b"\\\\", 17);
        put_text(&mut out, b"", 1);
        assert_eq!(
            out,
            b"plain\t0\n\\ttab\\nnew\\rret\\\\slash\\t\t18446744073709551615\n\\\\\\\\\t17\n\t1\n"
        );
        let mut records = runs_of(3).concat();
        for key in [&b"\\"[..], b"\t", b"a\tb\n", b"\\n", b"\r\r", b"x\\"] {
            records.push((key.to_vec(), 3));
        }
        records.sort();
        records.dedup_by(|a, b| a.0 == b.0);
        assert_eq!(from_text(&to_text(&records)).unwrap(), records);
    }

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
