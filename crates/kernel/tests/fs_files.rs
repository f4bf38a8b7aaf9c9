//! Parallel files and files in blockio segments (kernel::fs::files), on
//! SQLite and PostgreSQL, against an in-memory model of each file.

use tabos_blockio::{Device, FormatOptions};
use tabos_kernel::fs::files::{Files, FsSettings, SEGMENT_OWNER};
use tabos_kernel::fs::{self, Caller, Storage};
use tabos_kernel::Error;
use tabos_store::testing::TempDir;

use crate::common;
use common::{rt, Backend};

both!(
    parallel_files_match_a_model,
    large_files_move_to_segments_and_match_a_model,
    removed_files_give_their_storage_back,
    recovery_gives_back_what_a_crash_left,
    files_are_kept_by_id_while_open,
    links_and_symlinks_are_entries,
    files_made_before_inodes_keep_their_data,
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

fn count(f: &common::Fixture, q: &str) -> i64 {
    f.store.query(q, &[]).unwrap().rows[0]
        .get::<i64>(0)
        .unwrap()
}

/// Issue 39, item 3: a file removed (unlinked, or renamed over) while a
/// handle holds it open stays readable and writable through the handle —
/// in block rows, on every partition and in segments alike — and goes,
/// storage and all, with the last handle: closed, its session ended, or
/// swept after a crash left the handle without its session.
fn files_are_kept_by_id_while_open(b: Backend) {
    let Some(f) = b.open() else { return };
    let dir = TempDir::new("open");
    let dev = device(&dir);
    let fs = files(&f, Some(dev.clone()));
    let who = root();
    let w = who.clone();
    common::call_in(&f.store, R, move |tx| {
        tabos_kernel::names::open_session(tx, &w, "s1", 60_000_000, 1)
    })
    .unwrap();
    let open = |path: &str, access: fs::Access| {
        let (w, p) = (who.clone(), path.to_string());
        common::call_in(&f.store, R, move |tx| {
            fs::open_tx(tx, &w, &p, access, "s1", None, None, 2)
        })
        .unwrap()
        .0
    };
    rt().block_on(async {
        fs.write(&who, "/local", 0, bytes(1, 5000), true, None)
            .await
            .unwrap();
        fs.write(&who, "/big", 0, bytes(2, 200_000), true, None)
            .await
            .unwrap();
        fs.create(&who, "/par", 0o644, true, None).await.unwrap();
        fs.write(&who, "/par", 0, bytes(3, 50_000), false, None)
            .await
            .unwrap();
        assert_eq!(dev.segments().len(), 1);
        let handles: Vec<_> = ["/local", "/big", "/par"]
            .iter()
            .map(|p| (p.to_string(), open(p, fs::Access::ReadWrite)))
            .collect();
        for (p, _) in &handles {
            fs.unlink(&who, p.as_str(), None).await.unwrap();
            assert!(matches!(
                fs.read(&who, p.as_str(), 0, 10).await,
                Err(Error::NotFound(_))
            ));
        }
        for (i, (p, h)) in handles.iter().enumerate() {
            let h = h.clone();
            let st = common::call_in(&f.store, R, {
                let (w, h) = (who.clone(), h.clone());
                move |tx| fs::stat_ref_tx(tx, &w, &h.clone().into())
            })
            .unwrap();
            assert_eq!(st.nlink, 0, "{p}");
            let size = st.size as usize;
            let whole = fs.read(&who, h.clone(), 0, size).await.unwrap();
            assert!(whole == bytes(i as u64 + 1, size), "{p} through its handle");
            fs.write(&who, h.clone(), 10, b"after".to_vec(), false, None)
                .await
                .unwrap();
            assert_eq!(
                fs.read(&who, h.clone(), 10, 5).await.unwrap(),
                b"after",
                "{p}"
            );
        }
        // Still there: the segment of /big, the parallel blocks of /par.
        assert_eq!(dev.segments().len(), 1);
        assert!(count(&f, "SELECT count(*) FROM parallel_file") > 0);
        for (_, h) in &handles {
            fs.close(&who, h).await.unwrap();
            // Closed is closed.
            assert!(matches!(
                fs.read(&who, h.clone(), 0, 1).await,
                Err(Error::NotFound(_))
            ));
        }
        assert!(dev.segments().is_empty());
        for q in [
            "SELECT count(*) FROM parallel_file",
            "SELECT count(*) FROM localized_file",
            "SELECT count(*) FROM fs_extent",
            "SELECT count(*) FROM fs_inode",
            "SELECT count(*) FROM fs_open",
            "SELECT count(*) FROM fs_reclaim",
        ] {
            assert_eq!(count(&f, q), 0, "{q}");
        }

        // Renamed over: the handle keeps the old file, the name the new.
        fs.write(&who, "/cfg", 0, b"old".to_vec(), true, None)
            .await
            .unwrap();
        let h = open("/cfg", fs::Access::Read);
        fs.write(&who, "/cfg.tmp", 0, b"new".to_vec(), true, None)
            .await
            .unwrap();
        fs.rename(&who, "/cfg.tmp", "/cfg", None).await.unwrap();
        assert_eq!(fs.read(&who, h.clone(), 0, 10).await.unwrap(), b"old");
        assert_eq!(fs.read(&who, "/cfg", 0, 10).await.unwrap(), b"new");
        // A read-only handle does not write; another user's is not theirs;
        // an unknown one is not open.
        let e = fs
            .write(&who, h.clone(), 0, b"x".to_vec(), false, None)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
        let other = common::as_user(R, "bob");
        let e = fs.read(&other, h.clone(), 0, 1).await.unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
        let e = fs
            .read(&who, fs::Handle::parse("abc123").unwrap(), 0, 1)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
        assert!(fs::Handle::parse("../x").is_err());

        // The session ends: its handles go, and the nameless file with them.
        let w = who.clone();
        let queued = common::call_in(&f.store, R, move |tx| {
            tabos_kernel::names::close_session(tx, &w, "s1", 3)?;
            fs::session_ended_tx(tx, R, "s1")
        })
        .unwrap();
        assert_eq!(queued, 0, "a file in block rows queues nothing");
        assert_eq!(count(&f, "SELECT count(*) FROM fs_open"), 0);
        assert_eq!(
            count(&f, "SELECT count(*) FROM fs_inode WHERE nlink = 0"),
            0
        );

        // A crash between a session's end and its handles': swept at start.
        let w = who.clone();
        common::call_in(&f.store, R, move |tx| {
            tabos_kernel::names::open_session(tx, &w, "s2", 60_000_000, 4)
        })
        .unwrap();
        let (w, p) = (who.clone(), "/cfg".to_string());
        common::call_in(&f.store, R, move |tx| {
            fs::open_tx(tx, &w, &p, fs::Access::Read, "s2", None, None, 5)
        })
        .unwrap();
        fs.unlink(&who, "/cfg", None).await.unwrap();
        assert_eq!(
            count(&f, "SELECT count(*) FROM fs_inode WHERE nlink = 0"),
            1
        );
        common::call_in(&f.store, R, |tx| {
            tx.execute("DELETE FROM name_session", &[])?;
            Ok(())
        })
        .unwrap();
        let mut swept = Vec::new();
        for p in 0..f.store.partitions() {
            swept.extend(
                f.store
                    .call(tabos_store::PKey(p), |tx| fs::sweep_tx(tx, 6))
                    .unwrap(),
            );
        }
        assert!(swept.is_empty(), "nothing in segments: {swept:?}");
        assert_eq!(
            count(&f, "SELECT count(*) FROM fs_inode WHERE nlink = 0"),
            0
        );
        assert_eq!(count(&f, "SELECT count(*) FROM fs_open"), 0);
        assert_eq!(count(&f, "SELECT count(*) FROM localized_file"), 0);
        // Opening needs a live session of one's own.
        let (w, p) = (who.clone(), "/x".to_string());
        fs.write(&who, "/x", 0, b"x".to_vec(), true, None)
            .await
            .unwrap();
        let e = common::call_in(&f.store, R, move |tx| {
            fs::open_tx(tx, &w, &p, fs::Access::Read, "s2", None, None, 6)
        })
        .unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
        // Created and opened at once, its creator writes it though its mode
        // is read-only (open(2) with O_CREAT); the next opener may not.
        let w = who.clone();
        common::call_in(&f.store, R, move |tx| {
            tabos_kernel::names::open_session(tx, &w, "s3", 60_000_000, 7)
        })
        .unwrap();
        // bob: a member of the realm, not an operator acting as him.
        use tabos_kernel::auth::{self, Role, Spec};
        tabos_kernel::realms::create(&f.store, R, tabos_kernel::realms::Scheduler::Fifo).unwrap();
        let bob = auth::create(&f.store, Spec::realm(R, "bob", Role::Member))
            .await
            .unwrap()
            .1
            .act(R, "", R)
            .unwrap();
        let b = bob.clone();
        common::call_in(&f.store, R, move |tx| {
            fs::mkdir_tx(tx, &common::as_user(R, "root"), "/bob", 0o777, 8).map(|_| ())
        })
        .unwrap();
        common::call_in(&f.store, R, move |tx| {
            tabos_kernel::names::open_session(tx, &b, "sb", 60_000_000, 8)
        })
        .unwrap();
        let b = bob.clone();
        let (h, _) = common::call_in(&f.store, R, move |tx| {
            fs::open_tx(
                tx,
                &b,
                "/bob/ro",
                fs::Access::Write,
                "sb",
                Some(0o444),
                None,
                9,
            )
        })
        .unwrap();
        fs.write(&bob, h.clone(), 0, b"mine".to_vec(), false, None)
            .await
            .unwrap();
        let b = bob.clone();
        let e = common::call_in(&f.store, R, move |tx| {
            fs::open_tx(tx, &b, "/bob/ro", fs::Access::Write, "sb", None, None, 10)
        })
        .unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
        // A reader opens to read, never to write or to create.
        let rita = auth::create(&f.store, Spec::realm(R, "rita", Role::Reader))
            .await
            .unwrap()
            .1
            .act(R, "", R)
            .unwrap();
        let r2 = rita.clone();
        common::call_in(&f.store, R, move |tx| {
            tabos_kernel::names::open_session(tx, &r2, "sr", 60_000_000, 10)
        })
        .unwrap_err();
        for (access, create) in [(fs::Access::Read, Some(0o644)), (fs::Access::Write, None)] {
            let r2 = rita.clone();
            let e = common::call_in(&f.store, R, move |tx| {
                fs::open_tx(tx, &r2, "/bob/new", access, "sb", create, None, 10)
            })
            .unwrap_err();
            assert!(matches!(e, Error::Denied(_)), "{e}");
        }
        // Another user's session is not bob's to bind handles to.
        let b = bob.clone();
        let e = common::call_in(&f.store, R, move |tx| {
            fs::open_tx(tx, &b, "/bob/ro", fs::Access::Read, "s3", None, None, 11)
        })
        .unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
        fs.close(&bob, &h).await.unwrap();
    });
}

/// A procedure body answering a stat, for [`links_and_symlinks_are_entries`].
type StatStep = Box<dyn FnMut(&mut dyn tabos_store::Tx) -> tabos_kernel::Result<fs::Stat> + Send>;

/// Hard links share one file (its data, mode and times, counted once);
/// symbolic links are entries of their own whose target is text.
fn links_and_symlinks_are_entries(b: Backend) {
    let Some(f) = b.open() else { return };
    let fs = files(&f, None);
    let who = root();
    let call = |g: StatStep| common::call_in(&f.store, R, g);
    rt().block_on(async {
        fs.write(&who, "/a", 0, b"shared".to_vec(), true, None)
            .await
            .unwrap();
        let w = who.clone();
        let st = call(Box::new(move |tx| fs::link_tx(tx, &w, "/a", "/b", 7))).unwrap();
        assert_eq!(st.nlink, 2);
        let (w, w2) = (who.clone(), who.clone());
        let a = call(Box::new(move |tx| fs::stat_tx(tx, &w, "/a"))).unwrap();
        let b = call(Box::new(move |tx| fs::stat_tx(tx, &w2, "/b"))).unwrap();
        assert_eq!((a.id.as_str(), a.nlink), (b.id.as_str(), 2));
        fs.write(&who, "/b", 0, b"SH".to_vec(), false, None)
            .await
            .unwrap();
        assert_eq!(fs.read(&who, "/a", 0, 10).await.unwrap(), b"SHared");
        // Renaming one name onto the other changes nothing.
        fs.rename(&who, "/a", "/b", None).await.unwrap();
        assert_eq!(fs.read(&who, "/a", 0, 10).await.unwrap(), b"SHared");
        fs.unlink(&who, "/a", None).await.unwrap();
        assert_eq!(fs.read(&who, "/b", 0, 10).await.unwrap(), b"SHared");
        let w = who.clone();
        assert_eq!(
            call(Box::new(move |tx| fs::stat_tx(tx, &w, "/b")))
                .unwrap()
                .nlink,
            1
        );
        // A directory has one name; a name already taken is refused.
        let w = who.clone();
        call(Box::new(move |tx| fs::mkdir_tx(tx, &w, "/d", 0o755, 8))).unwrap();
        let w = who.clone();
        let e = call(Box::new(move |tx| fs::link_tx(tx, &w, "/d", "/d2", 9))).unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
        let w = who.clone();
        let e = call(Box::new(move |tx| fs::link_tx(tx, &w, "/b", "/d", 9))).unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{e}");

        let w = who.clone();
        let s = call(Box::new(move |tx| {
            fs::symlink_tx(tx, &w, "../b/x y", "/d/s", 10)
        }))
        .unwrap();
        assert_eq!(
            (s.file_type, s.size, s.mode),
            (fs::FileType::Symlink, 8, 0o777)
        );
        let w = who.clone();
        let target =
            common::call_in(&f.store, R, move |tx| fs::readlink_tx(tx, &w, "/d/s")).unwrap();
        assert_eq!(target, "../b/x y");
        let e = fs.read(&who, "/d/s", 0, 1).await.unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        let w = who.clone();
        let e = common::call_in(&f.store, R, move |tx| fs::readlink_tx(tx, &w, "/b")).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        for bad in [
            String::new(),
            "x\0y".to_string(),
            "x".repeat(fs::SYMLINK_BYTES_MAX + 1),
        ] {
            let w = who.clone();
            let e = call(Box::new(move |tx| fs::symlink_tx(tx, &w, &bad, "/bad", 11))).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{e}");
        }
        // A hard link to a symlink is a second name of the link.
        let w = who.clone();
        assert_eq!(
            call(Box::new(move |tx| fs::link_tx(tx, &w, "/d/s", "/s2", 12)))
                .unwrap()
                .file_type,
            fs::FileType::Symlink
        );
        fs.unlink(&who, "/d/s", None).await.unwrap();
        fs.unlink(&who, "/s2", None).await.unwrap();
        fs.unlink(&who, "/b", None).await.unwrap();
        let w = who.clone();
        common::call_in(&f.store, R, move |tx| fs::rmdir_tx(tx, &w, "/d", 13)).unwrap();
        for q in [
            "SELECT count(*) FROM directory",
            "SELECT count(*) FROM fs_inode",
            "SELECT count(*) FROM localized_file",
        ] {
            assert_eq!(count(&f, q), 0, "{q}");
        }
    });
}

/// A database made before migration 033 (names were files, blocks keyed by
/// path) opens with its files whole: each gets an id and one name, its
/// blocks follow it, and renames and removals work on it as on new ones.
fn files_made_before_inodes_keep_their_data(b: Backend) {
    let Some((config, _dir)) = b.place() else {
        return;
    };
    let before = tabos_store::Store::open(&config, &tabos_kernel::MIGRATIONS[..32]).unwrap();
    let pk = tabos_kernel::realm_partition(R, before.partitions());
    before
        .call(pk, move |tx| {
            let p = i64::from(pk.0);
            for (name, parent, kind, size) in [
                ("/d", "/", "dir", 0i64),
                ("/d/f", "/d", "file", 3000),
                ("/g", "/", "file", 5),
            ] {
                tx.execute(
                    "INSERT INTO directory (p_key, realm, d_name, parent, content_type, user_name, \
                     mode, f_size, layout, block_size, ctime_us, mtime_us) \
                     VALUES ($1, 'r', $2, $3, $4, 'root', 420, $5, 'local', 2048, 1, 2)",
                    &[p.into(), name.into(), parent.into(), kind.into(), size.into()],
                )?;
            }
            for (f, no, bytes) in [
                ("/d/f", 0i64, vec![b'a'; 2048]),
                ("/d/f", 1, vec![b'b'; 952]),
                ("/g", 0, b"hello".to_vec()),
                // A block no file names (a crash before 033 kept it): gone.
                ("/nobody", 0, b"stray".to_vec()),
            ] {
                tx.execute(
                    "INSERT INTO localized_file (p_key, realm, f_name, block_no, f_owner, bytes) \
                     VALUES ($1, 'r', $2, $3, 'root', $4)",
                    &[p.into(), f.into(), no.into(), bytes.into()],
                )?;
            }
            Ok::<_, tabos_store::Error>(())
        })
        .unwrap();
    drop(before);
    let store = tabos_kernel::open(&config).unwrap();
    let f = common::Fixture {
        store,
        config,
        _dir: None,
    };
    let fs = files(&f, None);
    let who = root();
    rt().block_on(async {
        let mut want = vec![b'a'; 2048];
        want.extend(vec![b'b'; 952]);
        assert!(fs.read(&who, "/d/f", 0, 4000).await.unwrap() == want);
        assert_eq!(fs.read(&who, "/g", 0, 10).await.unwrap(), b"hello");
        let w = who.clone();
        let st = common::call_in(&f.store, R, move |tx| fs::stat_tx(tx, &w, "/d/f")).unwrap();
        assert_eq!((st.nlink, st.size, st.mtime_us), (1, 3000, 2));
        assert!(!st.id.is_empty() && !st.id.contains('/'), "{}", st.id);
        assert_eq!(count(&f, "SELECT count(*) FROM localized_file"), 3);
        fs.rename(&who, "/d", "/e", None).await.unwrap();
        assert!(fs.read(&who, "/e/f", 0, 4000).await.unwrap() == want);
        fs.unlink(&who, "/e/f", None).await.unwrap();
        fs.unlink(&who, "/g", None).await.unwrap();
        assert_eq!(count(&f, "SELECT count(*) FROM localized_file"), 0);
        assert_eq!(
            count(&f, "SELECT count(*) FROM fs_inode"),
            1,
            "the directory"
        );
    });
}
