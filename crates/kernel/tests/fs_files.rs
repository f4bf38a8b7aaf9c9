//! Parallel files and files in blockio segments (kernel::fs::files), on
//! SQLite and PostgreSQL, against an in-memory model of each file.

use tabos_blockio::{Device, FormatOptions};
use tabos_kernel::fs::files::{Files, FsSettings, SEGMENT_OWNER};
use tabos_kernel::fs::{self, Caller, Storage};
use tabos_kernel::Error;
use tabos_store::testing::TempDir;

mod common;
use common::{rt, Backend};

both!(
    parallel_files_match_a_model,
    large_files_move_to_segments_and_match_a_model,
    removed_files_give_their_storage_back,
    recovery_gives_back_what_a_crash_left,
);

const R: &str = "r";

fn root() -> Caller {
    common::as_user(R, "root")
}

/// A block store of 64 MiB in `dir`.
fn device(dir: &TempDir) -> Device {
    let path = dir.path().join("blocks.dev");
    Device::format(
        &path,
        &FormatOptions {
            blocks: Some(16_384),
            block_size: 4096,
        },
    )
    .unwrap();
    Device::open(&path, 1024).unwrap()
}

fn files(f: &common::Fixture, dev: Option<Device>) -> Files {
    let settings = FsSettings {
        local_block: 2048,
        parallel_block: 8192,
        segment_threshold: 64 << 10,
    };
    Files::new(f.store.clone(), dev, settings).unwrap()
}

/// A deterministic byte pattern.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The whole file, in reads of at most IO_BYTES_MAX.
async fn read_all(fs: &Files, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let got = fs
            .read(&root(), path, out.len() as i64, fs::IO_BYTES_MAX)
            .await
            .unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

/// Applies a scripted series of writes and truncates to `path` and to a
/// model, checking the whole file after each step.
async fn exercise(fs: &Files, path: &str, steps: &[(&str, i64, usize)]) {
    let who = root();
    let mut model: Vec<u8> = Vec::new();
    for (i, (op, at, n)) in steps.iter().enumerate() {
        match *op {
            "w" => {
                let data = bytes(i as u64 + 1, *n);
                let size = fs
                    .write(&who, path, *at, data.clone(), false, None)
                    .await
                    .unwrap();
                let end = *at as usize + n;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[*at as usize..end].copy_from_slice(&data);
                assert_eq!(size, model.len() as i64, "step {i}");
            }
            "t" => {
                fs.truncate(&who, path, *at, None).await.unwrap();
                model.resize(*at as usize, 0);
            }
            _ => unreachable!(),
        }
        let whole = read_all(fs, path).await;
        assert!(
            whole == model,
            "step {i} ({op} {at} {n}): file differs from model"
        );
        // An unaligned slice, and a read past the end.
        if model.len() > 100 {
            let got = fs.read(&who, path, 37, 5000).await.unwrap();
            assert!(got == model[37..model.len().min(5037)], "step {i}");
        }
        assert!(fs
            .read(&who, path, model.len() as i64 + 1, 10)
            .await
            .unwrap()
            .is_empty());
    }
}

fn parallel_files_match_a_model(b: Backend) {
    let Some(f) = b.open() else { return };
    let fs = files(&f, None);
    rt().block_on(async {
        let st = fs.create(&root(), "/p", 0o644, true, None).await.unwrap();
        assert_eq!(st.storage, Storage::Parallel);
        assert_eq!(st.block_size, 8192);
        exercise(
            &fs,
            "/p",
            &[
                ("w", 0, 100),
                ("w", 5000, 30_000), // across blocks and partitions
                ("w", 100_000, 10),  // a hole between
                ("t", 20_000, 0),    // down, mid-block
                ("t", 90_000, 0),    // up: zeros, no old bytes
                ("w", 8191, 2),      // across a block boundary
                ("w", 0, 200_000),   // overwrite all
                ("t", 0, 0),
                ("w", 3, 17_000),
            ],
        )
        .await;
        // Its blocks really are on both partitions.
        let parts = f
            .store
            .query(
                "SELECT count(DISTINCT p_key) FROM parallel_file WHERE realm = 'r'",
                &[],
            )
            .unwrap();
        assert_eq!(parts.rows[0].get::<i64>(0).unwrap(), 2);
        // The single-transaction procedures refuse it with a pointer.
        let e =
            common::call_in(&f.store, R, |tx| fs::read_tx(tx, &root(), "/p", 0, 10)).unwrap_err();
        assert!(e.to_string().contains("Files"), "{e}");
    });
}

fn large_files_move_to_segments_and_match_a_model(b: Backend) {
    let Some(f) = b.open() else { return };
    let dir = TempDir::new("segments");
    let dev = device(&dir);
    let fs = files(&f, Some(dev.clone()));
    rt().block_on(async {
        fs.create(&root(), "/big", 0o644, false, None)
            .await
            .unwrap();
        exercise(
            &fs,
            "/big",
            &[
                ("w", 0, 10_000),        // small: in block rows
                ("w", 60_000, 10_000),   // past 64 KiB: moves to a segment
                ("w", 3_000_000, 1_000), // past the first extent: a second one
                ("t", 2_000_000, 0),     // down: the second extent goes
                ("t", 2_500_000, 0),     // up again: zeros
                ("w", 1, 4 << 20),       // one big write over extents
                ("t", 10, 0),
                ("w", 5_000, 5), // extends: the gap reads as zeros
            ],
        )
        .await;
        let st = common::call_in(&f.store, R, |tx| {
            fs::stat_tx(tx, &common::as_user(R, "root"), "/big")
        })
        .unwrap();
        assert_eq!(st.storage, Storage::Segments);
        let ext = fs.extents(R, "/big").await.unwrap();
        assert!(!ext.is_empty());
        // No block rows are left behind by the move.
        let rows = f
            .store
            .query("SELECT count(*) FROM localized_file WHERE realm = 'r'", &[])
            .unwrap();
        assert_eq!(rows.rows[0].get::<i64>(0).unwrap(), 0);
        // Every extent is a segment of the device, and nothing else is.
        let mut names: Vec<String> = ext.iter().map(|e| e.segment.clone()).collect();
        names.sort();
        let on_dev: Vec<String> = dev.segments().into_iter().map(|s| s.name).collect();
        assert_eq!(names, on_dev);
        // A rename keeps the data; permissions hold as for any file.
        fs.rename(&root(), "/big", "/moved", None).await.unwrap();
        let back = fs.read(&root(), "/moved", 5_000, 5).await.unwrap();
        assert_eq!(back, bytes(8, 5));
        common::call_in(&f.store, R, |tx| {
            fs::chmod_tx(tx, &root(), "/moved", 0o600, 1)
        })
        .unwrap();
        let e = fs
            .read(&common::as_user(R, "eve"), "/moved", 0, 10)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{e}");
        let e = fs
            .write(
                &common::as_user(R, "eve"),
                "/moved",
                0,
                vec![1; 10],
                false,
                None,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{e}");
        // A write that creates the file, straight past the threshold.
        let data = bytes(99, 200_000);
        fs.write(&root(), "/new", 0, data.clone(), true, None)
            .await
            .unwrap();
        assert!(fs.read(&root(), "/new", 0, 300_000).await.unwrap() == data);
        // Without a block store every file stays in block rows.
        let plain = files(&f, None);
        plain
            .write(&root(), "/rows", 0, data.clone(), true, None)
            .await
            .unwrap();
        let st = common::call_in(&f.store, R, |tx| {
            fs::stat_tx(tx, &common::as_user(R, "root"), "/rows")
        })
        .unwrap();
        assert_eq!(st.storage, Storage::Local);
    });
}

fn removed_files_give_their_storage_back(b: Backend) {
    let Some(f) = b.open() else { return };
    let dir = TempDir::new("reclaim");
    let dev = device(&dir);
    let fs = files(&f, Some(dev.clone()));
    let free0 = dev.stats().free_blocks;
    rt().block_on(async {
        for p in ["/a", "/b"] {
            fs.write(&root(), p, 0, bytes(1, 3 << 20), true, None)
                .await
                .unwrap();
        }
        fs.create(&root(), "/par", 0o644, true, None).await.unwrap();
        fs.write(&root(), "/par", 0, bytes(2, 100_000), false, None)
            .await
            .unwrap();
        assert_eq!(dev.segments().len(), 2);
        // Rename over an existing file in segments: its segment goes.
        fs.rename(&root(), "/a", "/b", None).await.unwrap();
        assert_eq!(dev.segments().len(), 1);
        assert!(fs.read(&root(), "/b", 0, 3 << 20).await.unwrap() == bytes(1, 3 << 20));
        fs.unlink(&root(), "/b", None).await.unwrap();
        fs.unlink(&root(), "/par", None).await.unwrap();
        assert!(dev.segments().is_empty());
        assert_eq!(dev.stats().free_blocks, free0);
        for q in [
            "SELECT count(*) FROM parallel_file",
            "SELECT count(*) FROM fs_extent",
            "SELECT count(*) FROM fs_reclaim",
        ] {
            let n = f.store.query(q, &[]).unwrap().rows[0]
                .get::<i64>(0)
                .unwrap();
            assert_eq!(n, 0, "{q}");
        }
        // A full block store: a clear error, and the file unchanged.
        fs.write(&root(), "/c", 0, bytes(3, 1000), true, None)
            .await
            .unwrap();
        let mut last = Ok(0);
        for i in 0..40 {
            last = fs
                .write(
                    &root(),
                    "/c",
                    (i + 1) * (4 << 20),
                    bytes(4, 4 << 20),
                    false,
                    None,
                )
                .await;
            if last.is_err() {
                break;
            }
        }
        let e = last.unwrap_err();
        assert!(matches!(e, Error::Full(_)), "{e}");
        assert!(fs.read(&root(), "/c", 0, 1000).await.unwrap() == bytes(3, 1000));
    });
}

fn recovery_gives_back_what_a_crash_left(b: Backend) {
    let Some(f) = b.open() else { return };
    let dir = TempDir::new("recover");
    let dev = device(&dir);
    let fs = files(&f, Some(dev.clone()));
    rt().block_on(async {
        fs.write(&root(), "/keep", 0, bytes(1, 1 << 20), true, None)
            .await
            .unwrap();
        // A write that crashed after allocating: a segment no extent names.
        dev.create_segment("fs/orphan.0", SEGMENT_OWNER, 10)
            .unwrap();
        // Someone else's segment is not the fs's to take.
        dev.create_segment("fs/other", "someone", 10).unwrap();
        // A removal that crashed before giving back: a queued segment.
        dev.create_segment("fs/queued.0", SEGMENT_OWNER, 10)
            .unwrap();
        let id = format!("{:016x}", dev.id());
        common::call_in(&f.store, R, move |tx| {
            tx.execute(
                "INSERT INTO fs_reclaim (p_key, realm, kind, what, store_id) \
                 VALUES ($1, 'r', 'segment', 'fs/queued.0', $2)",
                &[i64::from(tx.p_key().0).into(), id.as_str().into()],
            )?;
            Ok(())
        })
        .unwrap();
        let removed = fs.recover().await.unwrap();
        assert_eq!(removed, 1);
        let left: Vec<String> = dev.segments().into_iter().map(|s| s.name).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left.contains(&"fs/other".to_string()));
        assert!(fs.read(&root(), "/keep", 0, 1 << 20).await.unwrap() == bytes(1, 1 << 20));
    });
}
