//! Word count and grep through splits, mappers, combiners and reducers
//! equal the direct single-process computation, however the inputs are cut.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tabos_mr::job::Kind;
use tabos_mr::split::{plan, Split, LINE_BYTES_MAX, SPLIT_BYTES_MIN};
use tabos_mr::{direct, format, task};

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!(
            "tabos-mr-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the job the MapReduce way, in this process.
fn mapreduce(
    kind: &Kind,
    inputs: &[PathBuf],
    split_bytes: u64,
    reducers: usize,
) -> BTreeMap<Vec<u8>, u64> {
    let splits = plan(inputs, split_bytes).unwrap();
    let mut per_reducer: Vec<Vec<Vec<u8>>> = vec![Vec::new(); reducers];
    for s in &splits {
        for (r, run) in task::map_split(kind, s, reducers)
            .unwrap()
            .into_iter()
            .enumerate()
        {
            per_reducer[r].push(run);
        }
    }
    let mut out = BTreeMap::new();
    for (r, runs) in per_reducer.iter().enumerate() {
        for (k, c) in format::decode(&task::reduce(runs).unwrap()).unwrap() {
            assert_eq!(
                tabos_mr::job::partition(&k, reducers),
                r,
                "a key in the wrong partition"
            );
            assert!(out.insert(k, c).is_none(), "a key in two partitions");
        }
    }
    out
}

fn corpus(dir: &Dir) -> Vec<PathBuf> {
    let d = &dir.0;
    std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
    std::fs::write(d.join("empty.txt"), b"").unwrap();
    std::fs::write(
        d.join("a.txt"),
        b"the quick brown fox\njumps over the lazy dog\nthe end",
    )
    .unwrap();
    std::fs::write(
        d.join("sub/nonutf8.bin"),
        b"caf\xe9 caf\xe9\n\xff\xfe the\r\n\tthe\x00end\n",
    )
    .unwrap();
    // One huge line: several MiB of words with no newline at all, and a
    // word longer than a line piece.
    let mut huge = Vec::new();
    let mut i = 0u64;
    while huge.len() < 3 * LINE_BYTES_MAX {
        huge.extend_from_slice(format!("w{} the ", i % 997).as_bytes());
        i += 1;
    }
    huge.extend(std::iter::repeat_n(b'x', LINE_BYTES_MAX + 17));
    huge.extend_from_slice(b" tail the");
    std::fs::write(d.join("sub/deeper/huge.txt"), &huge).unwrap();
    let mut many = Vec::new();
    for i in 0..40_000 {
        many.extend_from_slice(format!("line {i} has the word {}\n", i % 13).as_bytes());
        if i % 1000 == 0 {
            many.extend_from_slice(b"\n\n");
        }
    }
    std::fs::write(d.join("sub/many.txt"), &many).unwrap();
    vec![d.clone()]
}

#[test]
fn wordcount_and_grep_equal_the_direct_computation() {
    let dir = Dir::new("jobs");
    let inputs = corpus(&dir);
    for kind in [
        Kind::WordCount,
        Kind::grep(b"the").unwrap(),
        Kind::grep(b"word 7\n").unwrap(), // never inside one line
        Kind::grep(b"x tail").unwrap(),   // spans line pieces
        Kind::grep(b"\xe9 c").unwrap(),
    ] {
        let want = direct::run(&kind, &inputs).unwrap();
        // Small splits cut the huge line many times (each split then skips to
        // its end): a few hundred KiB keeps that bounded in a debug build.
        for (split_bytes, reducers) in [(300_007, 3), (1 << 20, 7), (64 << 20, 2)] {
            let got = mapreduce(&kind, &inputs, split_bytes, reducers);
            assert_eq!(
                got, want,
                "{kind:?} split {split_bytes} reducers {reducers}"
            );
        }
    }
    let wc = direct::run(&Kind::WordCount, &inputs).unwrap();
    assert!(wc[&b"the".to_vec()] > 40_000);
    assert_eq!(wc[&b"caf\xe9".to_vec()], 2);
}

#[test]
fn every_line_is_read_by_exactly_one_split() {
    let dir = Dir::new("lines");
    let p = dir.0.join("f");
    let mut data = Vec::new();
    for i in 0..5_000 {
        data.extend_from_slice(format!("{i}\n").as_bytes());
        if i % 7 == 0 {
            data.extend(std::iter::repeat_n(b'y', 3_000 + i % 5_000));
            data.push(b'\n');
        }
    }
    std::fs::write(&p, &data).unwrap();
    let want: Vec<Vec<u8>> = data.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let want = &want[..want.len() - 1];
    for split_bytes in [SPLIT_BYTES_MIN, 4_097, 65_536] {
        let mut got = Vec::new();
        for s in plan(std::slice::from_ref(&p), split_bytes).unwrap() {
            tabos_mr::split::read_lines(&s, |piece, ends| {
                assert!(ends, "short lines come whole");
                got.push(piece.to_vec());
            })
            .unwrap();
        }
        assert_eq!(got, want, "split {split_bytes}");
    }
    let one = Split {
        path: p,
        offset: 0,
        len: data.len() as u64,
    };
    assert_eq!(
        plan(std::slice::from_ref(&one.path), 1 << 30).unwrap(),
        vec![one]
    );
}

/// A word count's reader hands over exactly the bytes of the lines a
/// split owns, '\n's included, from a file and from fetched bytes alike.
#[test]
fn every_owned_byte_is_read_by_exactly_one_split() {
    let dir = Dir::new("owned");
    let mut files = Vec::new();
    let mut lines = Vec::new();
    for i in 0..3_000 {
        lines.extend_from_slice(format!("{i} w{}\n", i % 11).as_bytes());
        if i % 5 == 0 {
            lines.extend(std::iter::repeat_n(b'y', 2_000 + i % 7_000));
            lines.push(b'\n');
        }
    }
    for (name, data) in [
        ("lines", lines.clone()),
        ("no_last_newline", [&lines[..], b"tail"].concat()),
        ("one_line", vec![b'z'; 3 * LINE_BYTES_MAX + 5]),
        ("newlines", vec![b'\n'; 20_000]),
    ] {
        let p = dir.0.join(name);
        std::fs::write(&p, &data).unwrap();
        files.push((p, data));
    }
    for (p, data) in &files {
        for split_bytes in [SPLIT_BYTES_MIN, 4_097, 65_536, 1 << 22] {
            let (mut got, mut fetched) = (Vec::new(), Vec::new());
            for s in plan(std::slice::from_ref(p), split_bytes).unwrap() {
                tabos_mr::split::read_owned(&s, |piece| got.extend_from_slice(piece)).unwrap();
                let from = tabos_mr::split::first_byte(&s) as usize;
                tabos_mr::split::read_owned_in(&data[from..], &s, |piece| {
                    fetched.extend_from_slice(piece)
                })
                .unwrap();
            }
            assert!(got == *data, "{} split {split_bytes}", p.display());
            assert!(fetched == *data, "{} split {split_bytes}", p.display());
        }
    }
}

#[test]
fn bad_inputs_are_refused() {
    assert!(plan(&[PathBuf::from("/nonexistent/input")], 1 << 20).is_err());
    assert!(plan(&[PathBuf::from("/")], 1).is_err());
    assert!(Kind::grep(b"").is_err());
    assert!(tabos_mr::job::Combiner::new(0).is_err());
    assert!(format::decode(b"\x05\x00\x00\x00ab").is_err());
    let mut out = Vec::new();
    format::put(&mut out, b"b", 1);
    format::put(&mut out, b"a", 1);
    assert!(format::decode(&out).is_err(), "out of order");
}

/// The combiner's counts and order equal a plain ordered map's, for keys
/// kept in their slot and in the arena alike: lengths around the inline
/// bound, keys that are others' prefixes, zero and high bytes (which a
/// zero-padded key must not confuse with a shorter one), across
/// partitions; and its encoding is the format's.
#[test]
fn combiner_counts_and_orders_like_a_map() {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for len in [1usize, 2, 7, 8, 15, 16, 17, 24, 40, 300] {
        for fill in [b'a', 0u8, 0xff] {
            let mut k = vec![fill; len];
            keys.push(k.clone());
            k[0] = b'z';
            keys.push(k.clone());
            k.push(0);
            keys.push(k.clone());
            k.pop();
            k.pop();
            keys.push(k);
        }
    }
    keys.retain(|k| !k.is_empty());
    for reducers in [1usize, 3] {
        let mut c = tabos_mr::job::Combiner::new(reducers).unwrap();
        let mut want: Vec<BTreeMap<Vec<u8>, u64>> = vec![BTreeMap::new(); reducers];
        for (i, k) in keys.iter().enumerate() {
            let n = (i % 5 + 1) as u64;
            for _ in 0..(i % 3 + 1) {
                c.emit(k, n);
                *want[tabos_mr::job::partition(k, reducers)]
                    .entry(k.clone())
                    .or_default() += n;
            }
        }
        let want: Vec<Vec<(Vec<u8>, u64)>> =
            want.into_iter().map(|m| m.into_iter().collect()).collect();
        let mut again = tabos_mr::job::Combiner::new(reducers).unwrap();
        for (k, n) in want.iter().flatten() {
            again.emit(k, *n);
        }
        let encoded: Vec<Vec<u8>> = want.iter().map(|r| format::encode(r)).collect();
        assert_eq!(c.into_parts(), want, "{reducers} reducers");
        assert_eq!(again.into_encoded(), encoded, "{reducers} reducers");
    }
}

#[test]
fn planning_many_files_as_a_uid_checks_each_with_its_identity_in_name_order() {
    use std::os::unix::fs::PermissionsExt;
    use tabos_mr::split::{plan_as, Reader};
    if !tabos_store::testing::is_root() {
        eprintln!("skipped: not root, so planning cannot take another uid");
        return;
    }
    // Enough files that the opens are checked on several threads.
    let dir = Dir::new("plan-uid");
    let mut want_kept = Vec::new();
    let mut want_skipped = Vec::new();
    for i in 0..6_000 {
        let sub = dir.0.join(format!("d{}", i % 7));
        std::fs::create_dir_all(&sub).unwrap();
        let path = sub.join(format!("f{i:05}"));
        std::fs::write(&path, format!("word{i}\n")).unwrap();
        if i % 997 == 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            want_skipped.push(path);
        } else {
            want_kept.push(path);
        }
    }
    // A directory the uid may not enter: skipped whole, as itself.
    let private = dir.0.join("d3").join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("inside"), b"x\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    want_skipped.push(private.clone());
    want_kept.sort();
    want_skipped.sort();

    let input = std::slice::from_ref(&dir.0);
    let planned = plan_as(input, 1 << 20, false, Reader::Uid(65_534)).unwrap();
    let kept: Vec<PathBuf> = planned.splits.iter().map(|s| s.path.clone()).collect();
    assert_eq!(kept, want_kept, "kept, in name order");
    let mut skipped: Vec<PathBuf> = planned.skipped.iter().map(|s| s.path.clone()).collect();
    skipped.sort();
    assert_eq!(skipped, want_skipped);
    assert!(planned.skipped.iter().all(|s| s.why == "permission denied"));
    // Root itself reads every one, in the same order as the whole walk.
    let mine = plan_as(input, 1 << 20, false, Reader::Me).unwrap();
    assert!(mine.skipped.is_empty());
    assert_eq!(mine.splits, plan(input, 1 << 20).unwrap());
    assert_eq!(mine.splits.len(), 6_001);
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
}
