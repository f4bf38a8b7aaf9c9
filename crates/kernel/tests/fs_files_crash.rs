//! Crash consistency of files in block segments and parallel files: a child
//! process (this test binary re-executed) appends to files through `Files`
//! and is killed with SIGKILL; after reopening and `recover`, every file's
//! extents name segments that exist and cover its size, no `fs/` segment is
//! left that no extent names, every file holds exactly the whole appends
//! its size counts, and no append the child saw committed is lost.

use std::io::BufRead;

use tabos_blockio::{Device, FormatOptions};
use tabos_kernel::fs::files::{Files, FsSettings, SEGMENT_OWNER, SEGMENT_PREFIX};
use tabos_kernel::fs::Storage;
use tabos_store::testing::TempDir;
use tabos_store::{Config, Store};

use crate::common;

const REALM: &str = "r";
const PATHS: [&str; 3] = ["/s0", "/s1", "/p"];
/// Not a multiple of any block size, so appends straddle blocks.
const CHUNK: usize = 20_000;

fn open(dir: &std::path::Path) -> (Store, Files) {
    let store = tabos_kernel::open(&Config::sqlite(dir.join("db")).with_partitions(2)).unwrap();
    let dev_path = dir.join("blocks.dev");
    if !dev_path.exists() {
        Device::format(
            &dev_path,
            &FormatOptions {
                blocks: Some(65_536),
                block_size: 4096,
            },
        )
        .unwrap();
    }
    let dev = Device::open(&dev_path, 256).unwrap();
    let settings = FsSettings {
        segment_threshold: 64 << 10,
        ..FsSettings::default()
    };
    let files = Files::new(store.clone(), Some(dev), settings).unwrap();
    (store, files)
}

/// Chunk `j` of a file: every byte is `j % 251`, and the first 8 the index.
fn chunk(j: u64) -> Vec<u8> {
    let mut v = vec![(j % 251) as u8; CHUNK];
    v[..8].copy_from_slice(&j.to_le_bytes());
    v
}

/// The child: appends chunk after chunk to the files in turn and prints
/// `committed PATH SIZE` after each. Runs only when started by the test.
#[test]
fn crash_child_appender() {
    let Ok(dir) = std::env::var("TABOS_FILES_CRASH_DIR") else {
        return;
    };
    println!();
    let (_store, files) = open(std::path::Path::new(&dir));
    common::rt().block_on(async {
        let root = common::as_user(REALM, "root");
        files.create(&root, "/p", 0o644, true, None).await.unwrap();
        let mut sizes = [0i64; 3];
        for k in 0usize.. {
            let i = k % PATHS.len();
            let j = (sizes[i] as usize / CHUNK) as u64;
            let size = files
                .write(&root, PATHS[i], sizes[i], chunk(j), true, None)
                .await
                .unwrap();
            sizes[i] = size;
            println!("committed {} {size}", PATHS[i]);
        }
    });
}

#[test]
fn appends_survive_sigkill_whole_and_consistent() {
    let dir = TempDir::new("files-crash");
    drop(open(dir.path())); // migrate and format before the child starts
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            common::test_name(module_path!(), "crash_child_appender").as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TABOS_FILES_CRASH_DIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut reported = std::collections::HashMap::new();
    let mut n = 0;
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("committed ") {
            let (p, size) = rest.split_once(' ').unwrap();
            reported.insert(p.to_string(), size.parse::<i64>().unwrap());
            n += 1;
            if n >= 45 {
                break;
            }
        }
    }
    // SAFETY: kill(2) on our own, not yet reaped, child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();
    assert!(n >= 45, "the child stopped early");

    let (store, files) = open(dir.path());
    let dev = files.device().unwrap().clone();
    common::rt().block_on(async {
        files.recover().await.unwrap();
        let root = common::as_user(REALM, "root");
        let mut named = Vec::new();
        for p in PATHS {
            let st = common::call_in(&store, REALM, move |tx| {
                tabos_kernel::fs::stat_tx(tx, &common::as_user(REALM, "root"), p)
            })
            .unwrap();
            // The size moves only in a commit: whole appends, none lost.
            assert_eq!(st.size % CHUNK as i64, 0, "{p}: a partial append");
            assert!(st.size >= reported[p], "{p}: a committed append lost");
            let want = if p == "/p" {
                Storage::Parallel
            } else {
                Storage::Segments
            };
            assert_eq!(st.storage, want, "{p}");
            let ext = files.extents(REALM, p).await.unwrap();
            let covered: i64 = ext.iter().map(|e| e.bytes).sum();
            if want == Storage::Segments {
                assert!(
                    covered >= st.size,
                    "{p}: extents cover {covered} of {}",
                    st.size
                );
            }
            for e in &ext {
                assert!(
                    dev.open_segment(&e.segment, SEGMENT_OWNER).is_ok(),
                    "{p}: extent {} names a missing segment",
                    e.segment
                );
            }
            named.extend(ext.into_iter().map(|e| e.segment));
            // Every chunk whole, in order.
            let mut at = 0;
            while at < st.size {
                let got = files.read(&root, p, at, CHUNK).await.unwrap();
                let j = (at as usize / CHUNK) as u64;
                assert!(got == chunk(j), "{p}: chunk {j} is not whole");
                at += CHUNK as i64;
            }
        }
        // s0 and s1 outgrew the threshold: their data is in segments.
        assert!(!named.is_empty());
        // Nothing on the device that no file names.
        for s in dev.segments() {
            if s.name.starts_with(SEGMENT_PREFIX) {
                assert!(named.contains(&s.name), "orphan segment {}", s.name);
            }
        }
    });
}
