//! blockio against a real file on the test machine's filesystem, through
//! real io_uring (O_DIRECT where the filesystem allows it).

use std::os::unix::fs::FileExt;

use tabos_blockio::{AlignedBuf, CachePolicy, Capability, Device, Error, FormatOptions, Queue};

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh device of `blocks` 4 KiB blocks in a directory under the target
/// dir (not /tmp, which may be tmpfs without O_DIRECT).
fn device(name: &str, blocks: u64) -> (Dir, std::path::PathBuf) {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("blockio-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dev");
    Device::format(
        &path,
        &FormatOptions {
            blocks: Some(blocks),
            block_size: 4096,
        },
    )
    .unwrap();
    (Dir(dir), path)
}

#[test]
fn segments_round_trip_data_through_both_cache_policies() {
    let (_d, path) = device("roundtrip", 4096);
    let dev = Device::open(&path, 256).unwrap();
    let info = dev.create_segment("a", "alice", 100).unwrap();
    assert_eq!(info.blocks, 100);
    let seg = dev.open_segment("a", "alice").unwrap();
    let cap = seg.capability();
    let mut q = Queue::new(&dev, 32).unwrap();
    // A new segment reads as zeros.
    assert!(q
        .read_bytes(&cap, 0, 100 * 4096, CachePolicy::Uncached)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
    q.write_bytes(&cap, 1_234, &data, CachePolicy::Cached)
        .unwrap();
    q.sync_now().unwrap();
    for policy in [
        CachePolicy::Cached,
        CachePolicy::Uncached,
        CachePolicy::Cached,
    ] {
        assert_eq!(q.read_bytes(&cap, 1_234, data.len(), policy).unwrap(), data);
    }
    assert!(dev.stats().cache_hits > 0, "{:?}", dev.stats());
    // An uncached write over cached blocks: no stale copy is served.
    q.write_bytes(&cap, 1_234, &[9u8; 10], CachePolicy::Uncached)
        .unwrap();
    let back = q.read_bytes(&cap, 1_230, 20, CachePolicy::Cached).unwrap();
    assert_eq!(&back[4..14], &[9u8; 10]);
    assert_eq!(&back[14..], &data[10..16]);
    drop(seg);
    drop(q);
    drop(dev);
    // Reopened: the segment and its bytes are still there.
    let dev = Device::open(&path, 0).unwrap();
    assert_eq!(dev.segments().len(), 1);
    let seg = dev.open_segment("a", "alice").unwrap();
    let mut q = Queue::new(&dev, 4).unwrap();
    let back = q
        .read_bytes(
            &seg.capability(),
            1_244,
            data.len() - 10,
            CachePolicy::Uncached,
        )
        .unwrap();
    assert_eq!(back, data[10..]);
}

#[test]
fn a_batch_of_reads_completes_with_every_tag_once() {
    let (_d, path) = device("batch", 2048);
    let dev = Device::open(&path, 0).unwrap();
    dev.create_segment("s", "o", 1024).unwrap();
    let seg = dev.open_segment("s", "o").unwrap();
    let cap = seg.capability();
    let mut q = Queue::new(&dev, 32).unwrap();
    // Block i holds the byte i % 256 throughout.
    for i in 0..1024u64 {
        let mut b = AlignedBuf::zeroed(4096);
        b.fill(i as u8);
        q.write(&cap, i, b, CachePolicy::Uncached, i).unwrap();
    }
    let mut done = Vec::new();
    q.wait(q.in_flight(), &mut done).unwrap();
    assert_eq!(done.len(), 1024);
    assert!(done.iter().all(|c| c.result.is_ok()));
    done.clear();
    // 100 reads pushed through a depth-32 queue: pushes past the depth
    // reap completions to make room; each tag comes back once with its data.
    for k in 0..100u64 {
        let block = (k * 37) % 1023;
        q.read(
            &cap,
            block,
            AlignedBuf::zeroed(8192),
            CachePolicy::Uncached,
            block,
        )
        .unwrap();
    }
    while q.in_flight() > 0 {
        q.wait(1, &mut done).unwrap();
    }
    let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags.len(), 100);
    for c in &done {
        c.result.as_ref().unwrap();
        let b = c.buf.as_ref().unwrap();
        assert!(b[..4096].iter().all(|&x| x == c.tag as u8));
        assert!(b[4096..].iter().all(|&x| x == (c.tag + 1) as u8));
    }
}

#[test]
fn a_wrong_capability_is_refused() {
    let (_d, path) = device("cap", 1024);
    let dev = Device::open(&path, 0).unwrap();
    dev.create_segment("mine", "alice", 8).unwrap();
    dev.create_segment("theirs", "bob", 8).unwrap();
    let mine = dev.open_segment("mine", "alice").unwrap();
    let mut q = Queue::new(&dev, 4).unwrap();
    let forged = Capability {
        token: mine.capability().token ^ 1,
        ..mine.capability()
    };
    let e = q
        .read(
            &forged,
            0,
            AlignedBuf::zeroed(4096),
            CachePolicy::Uncached,
            0,
        )
        .unwrap_err();
    assert!(matches!(e, Error::BadCapability(_)), "{e}");
    // Another's segment cannot be opened, nor deleted.
    assert!(matches!(
        dev.open_segment("theirs", "alice"),
        Err(Error::Denied(_))
    ));
    assert!(matches!(
        dev.delete_segment("theirs", "alice"),
        Err(Error::Denied(_))
    ));
    // A closed capability is dead.
    let cap = mine.capability();
    drop(mine);
    let e = q
        .read(&cap, 0, AlignedBuf::zeroed(4096), CachePolicy::Uncached, 0)
        .unwrap_err();
    assert!(matches!(e, Error::BadCapability(_)), "{e}");
    // So is one whose segment was deleted, even once the slot is reused.
    let theirs = dev.open_segment("theirs", "bob").unwrap();
    let cap = theirs.capability();
    dev.delete_segment("theirs", "bob").unwrap();
    dev.create_segment("next", "bob", 8).unwrap();
    let e = q
        .write(&cap, 0, AlignedBuf::zeroed(4096), CachePolicy::Uncached, 0)
        .unwrap_err();
    assert!(matches!(e, Error::BadCapability(_)), "{e}");
    assert_eq!(q.in_flight(), 0, "nothing refused was queued");
}

#[test]
fn a_block_outside_the_segment_is_refused() {
    let (_d, path) = device("bounds", 1024);
    let dev = Device::open(&path, 0).unwrap();
    dev.create_segment("s", "o", 8).unwrap();
    dev.create_segment("next", "o", 8).unwrap();
    let seg = dev.open_segment("s", "o").unwrap();
    let cap = seg.capability();
    let mut q = Queue::new(&dev, 4).unwrap();
    for (block, len) in [(8u64, 4096usize), (7, 8192), (u64::MAX, 4096)] {
        let e = q
            .write(
                &cap,
                block,
                AlignedBuf::zeroed(len),
                CachePolicy::Uncached,
                0,
            )
            .unwrap_err();
        assert!(matches!(e, Error::OutOfSegment { blocks: 8, .. }), "{e}");
        assert!(e.to_string().contains("outside the segment"), "{e}");
    }
    assert!(q
        .read_bytes(&cap, 8 * 4096 - 10, 20, CachePolicy::Uncached)
        .is_err());
    // Not whole blocks.
    let e = q
        .read(&cap, 0, AlignedBuf::zeroed(100), CachePolicy::Uncached, 0)
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    // The neighbour is untouched.
    let n = dev.open_segment("next", "o").unwrap();
    assert!(q
        .read_bytes(&n.capability(), 0, 8 * 4096, CachePolicy::Uncached)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn a_corrupted_superblock_is_reported() {
    let (_d, path) = device("corrupt", 1024);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xff], 20).unwrap();
    let e = Device::open(&path, 0).unwrap_err();
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    assert!(
        e.to_string().contains("superblock checksum mismatch"),
        "{e}"
    );
    f.write_all_at(b"NOTABOS!", 0).unwrap();
    let e = Device::open(&path, 0).unwrap_err();
    assert!(e.to_string().contains("bad magic"), "{e}");
}

#[test]
fn freed_blocks_come_back_zeroed_and_leaked_bits_are_repaired() {
    let (_d, path) = device("reuse", 600);
    let dev = Device::open(&path, 16).unwrap();
    let free0 = dev.stats().free_blocks;
    dev.create_segment("x", "o", 500).unwrap();
    assert!(matches!(
        dev.create_segment("y", "o", free0),
        Err(Error::NoSpace(_))
    ));
    assert!(matches!(
        dev.create_segment("x", "o", 1),
        Err(Error::AlreadyExists(_))
    ));
    {
        let s = dev.open_segment("x", "o").unwrap();
        let mut q = Queue::new(&dev, 8).unwrap();
        q.write_bytes(
            &s.capability(),
            0,
            &vec![7u8; 500 * 4096],
            CachePolicy::Cached,
        )
        .unwrap();
    }
    dev.delete_segment("x", "o").unwrap();
    assert_eq!(dev.stats().free_blocks, free0);
    // Wraps around from the hint to the blocks x had; they read as zeros.
    dev.create_segment("z", "o", free0).unwrap();
    let s = dev.open_segment("z", "o").unwrap();
    let mut q = Queue::new(&dev, 8).unwrap();
    for policy in [CachePolicy::Cached, CachePolicy::Uncached] {
        assert!(q
            .read_bytes(&s.capability(), 0, (free0 * 4096) as usize, policy)
            .unwrap()
            .iter()
            .all(|&b| b == 0));
    }
    drop((s, q));
    dev.delete_segment("z", "o").unwrap();
    drop(dev);
    // A crash between a create's bitmap write and its entry write leaves
    // bits no segment owns; open gives them back.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xff; 8], 4096).unwrap();
    let dev = Device::open(&path, 0).unwrap();
    assert_eq!(dev.stats().free_blocks, free0);
    // Bad names and sizes.
    assert!(matches!(
        dev.create_segment("", "o", 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        dev.create_segment("a\0b", "o", 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        dev.create_segment(&"n".repeat(65), "o", 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        dev.create_segment("a", &"o".repeat(33), 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        dev.create_segment("a", "o", 0),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        dev.open_segment("nope", "o"),
        Err(Error::NotFound(_))
    ));
}

/// A copy opens as the same block store: its identity, its segments and
/// their bytes; a deleted segment's old bytes are not in it, and holes
/// stay holes.
#[test]
fn a_copy_is_the_same_block_store_without_freed_data() {
    let (d, path) = device("copy", 4096);
    let dev = Device::open(&path, 64).unwrap();
    let mut q = Queue::new(&dev, 8).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8 | 1).collect();
    for name in ["kept", "gone"] {
        dev.create_segment(name, "fs", 100).unwrap();
        let seg = dev.open_segment(name, "fs").unwrap();
        q.write_bytes(&seg.capability(), 4_096, &data, CachePolicy::Uncached)
            .unwrap();
    }
    q.sync_now().unwrap();
    let gone = dev
        .segments()
        .into_iter()
        .find(|s| s.name == "gone")
        .unwrap();
    dev.delete_segment("gone", "fs").unwrap();
    let copy_path = d.0.join("copy");
    let copy = dev.copy_to(&copy_path).unwrap();
    assert_eq!(copy.segments, 1);
    assert_eq!(copy.bytes, 4096 * 4096);
    assert!(copy.bytes_written < 2 * data.len() as u64, "{copy:?}");
    // Only to a new file.
    assert!(dev.copy_to(&copy_path).is_err());
    let raw = std::fs::File::open(&copy_path).unwrap();
    let mut old = vec![0u8; 4096];
    raw.read_exact_at(&mut old, (gone.first_block + 1) * 4096)
        .unwrap();
    assert!(
        old.iter().all(|b| *b == 0),
        "a freed segment's bytes were copied"
    );
    let back = Device::open(&copy_path, 64).unwrap();
    assert_eq!(back.id(), dev.id());
    assert_eq!(back.segments(), dev.segments());
    let seg = back.open_segment("kept", "fs").unwrap();
    let mut q2 = Queue::new(&back, 8).unwrap();
    let read = q2
        .read_bytes(
            &seg.capability(),
            0,
            4_096 + data.len(),
            CachePolicy::Uncached,
        )
        .unwrap();
    assert!(read[..4_096].iter().all(|b| *b == 0));
    assert_eq!(&read[4_096..], &data[..]);
}
