//! Crash consistency of the filesystem in tables: a child process (this test
//! binary re-executed) rewrites files in a loop on an embedded store and is
//! killed with SIGKILL; after reopening, every file's metadata and blocks
//! agree, each file holds exactly one whole write, and no write the child
//! saw committed is lost.

use std::io::BufRead;

use tabos_kernel::fs::{self, BLOCK_BYTES_LOCAL};
use tabos_store::testing::TempDir;
use tabos_store::{Config, Store};

use crate::common;

const REALM: &str = "r";
const FILES: u64 = 4;

/// The content of write `k`: its number, then a pattern; 1..~20 KB, so
/// writes span one to ten blocks and shrink as often as they grow.
fn content(k: u64) -> Vec<u8> {
    let len = 8 + (k * 7_919) % 20_000;
    let mut v = k.to_le_bytes().to_vec();
    v.extend((0..len - 8).map(|i| (i.wrapping_mul(31).wrapping_add(k) % 251) as u8));
    v
}

fn open(dir: &std::path::Path) -> Store {
    tabos_kernel::open(&Config::sqlite(dir).with_partitions(2)).unwrap()
}

fn run<T: Send + 'static>(
    s: &Store,
    f: impl FnMut(&mut dyn tabos_store::Tx) -> tabos_kernel::Result<T> + Send + 'static,
) -> tabos_kernel::Result<T> {
    common::call_in(s, REALM, f)
}

/// The child: rewrites /f<k % FILES> with write k (create if needed,
/// write, truncate to the new length — one transaction) and prints k after
/// each commit. Runs only when started by the test below.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var("TABOS_FS_CRASH_DIR") else {
        return;
    };
    println!();
    let s = open(std::path::Path::new(&dir));
    for k in 1u64.. {
        let path = format!("/f{}", k % FILES);
        let data = content(k);
        run(&s, move |tx| {
            let (root, now) = (common::as_user(REALM, "root"), tabos_store::now_us());
            if let Err(tabos_kernel::Error::NotFound(_)) = fs::stat_tx(tx, &root, &path) {
                fs::create_tx(tx, &root, &path, 0o644, now)?;
            }
            fs::write_tx(tx, &root, &path, 0, &data, now)?;
            fs::truncate_tx(tx, &root, &path, data.len() as i64, now)
        })
        .unwrap();
        println!("committed {k}");
    }
}

#[test]
fn files_survive_sigkill_whole_and_consistent() {
    let dir = TempDir::new("fs-crash");
    drop(open(dir.path())); // migrate before the child starts
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            common::test_name(module_path!(), "crash_child_writer").as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TABOS_FS_CRASH_DIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut last = 0u64;
    for line in out.lines() {
        if let Some(k) = line.unwrap().strip_prefix("committed ") {
            last = k.parse().unwrap();
            if last >= 60 {
                break;
            }
        }
    }
    // Killed mid-loop, most likely inside a transaction.
    // SAFETY: kill(2) on our own, not yet reaped, child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();
    assert!(last >= 60, "the child stopped early");

    let s = open(dir.path());
    // Metadata and blocks agree: no block past a file's size, none longer
    // than its block size, the last one no longer than the size allows.
    let bad = s
        .query(
            "SELECT b.f_id, b.block_no FROM localized_file b JOIN fs_inode d \
             ON d.p_key = b.p_key AND d.realm = b.realm AND d.f_id = b.f_id \
             WHERE b.block_no * d.block_size >= d.f_size \
             OR length(b.bytes) > d.block_size \
             OR b.block_no * d.block_size + length(b.bytes) > d.f_size",
            &[],
        )
        .unwrap();
    assert_eq!(bad.len(), 0, "blocks disagree with their files");
    let orphans = s
        .query(
            "SELECT f_id FROM localized_file b WHERE NOT EXISTS (SELECT 1 FROM fs_inode d \
             WHERE d.p_key = b.p_key AND d.realm = b.realm AND d.f_id = b.f_id)",
            &[],
        )
        .unwrap();
    assert_eq!(orphans.len(), 0, "blocks without a file");
    // Each file is one whole write, and not older than the last committed
    // write to it that the child reported.
    for f in 0..FILES {
        let path = format!("/f{f}");
        let p = path.clone();
        let data = run(&s, move |tx| {
            fs::read_tx(tx, &common::as_user(REALM, "root"), &p, 0, fs::IO_BYTES_MAX)
        })
        .unwrap();
        let k = u64::from_le_bytes(data[..8].try_into().unwrap());
        assert_eq!(k % FILES, f, "{path} holds write {k}");
        assert!(data == content(k), "{path} is not write {k} whole");
        // The last reported write to this file.
        let reported = (1..=last).rev().find(|j| j % FILES == f).unwrap();
        assert!(
            k >= reported,
            "{path}: committed write {reported} lost (has {k})"
        );
        assert!(
            data.len() as i64 <= 10 * BLOCK_BYTES_LOCAL,
            "{path} larger than any write"
        );
    }
}
