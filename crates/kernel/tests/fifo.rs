//! Named pipes (kernel::fs::fifo, issue 43 item 3), on SQLite and
//! PostgreSQL: a byte stream with back-pressure, EOF when the writers
//! close (by handle, by a session's end, by a call by path), a broken pipe
//! when the readers have gone, permissions and removal as a file's.

use std::time::Duration;

use tabos_kernel::fs::fifo::{self, FIFO_BYTES_MAX};
use tabos_kernel::fs::files::{Files, FsSettings};
use tabos_kernel::fs::{self, Access, Caller, FileType, Handle};
use tabos_kernel::Error;

use crate::common;
use common::{rt, Backend};

both!(
    a_fifo_streams_bytes_with_back_pressure,
    eof_and_broken_pipe_follow_the_ends,
    a_fifo_is_permitted_and_removed_as_a_file,
    a_read_dropped_on_its_way_loses_nothing,
);

const R: &str = "r";

fn root() -> Caller {
    common::as_user(R, "root")
}

fn files(f: &common::Fixture) -> Files {
    Files::new(f.store.clone(), None, FsSettings::default()).unwrap()
}

fn mkfifo(f: &common::Fixture, who: &Caller, path: &str, mode: i64) -> fs::Stat {
    let (w, p) = (who.clone(), path.to_string());
    common::call_in(&f.store, R, move |tx| fifo::mkfifo_tx(tx, &w, &p, mode, 1)).unwrap()
}

fn session(f: &common::Fixture, who: &Caller, s: &str) {
    let (w, s) = (who.clone(), s.to_string());
    common::call_in(&f.store, R, move |tx| {
        tabos_kernel::names::open_session(tx, &w, &s, 60_000_000, 1)
    })
    .unwrap();
}

fn open(f: &common::Fixture, who: &Caller, path: &str, access: Access, s: &str) -> Handle {
    let (w, p, s) = (who.clone(), path.to_string(), s.to_string());
    common::call_in(&f.store, R, move |tx| {
        fs::open_tx(tx, &w, &p, access, &s, None, None, 2)
    })
    .unwrap()
    .0
}

fn close(f: &common::Fixture, who: &Caller, h: &Handle) {
    let (w, h) = (who.clone(), h.clone());
    common::call_in(&f.store, R, move |tx| fs::close_tx(tx, &w, &h)).unwrap();
}

fn size(f: &common::Fixture, path: &str) -> i64 {
    let (w, p) = (root(), path.to_string());
    common::call_in(&f.store, R, move |tx| fs::stat_tx(tx, &w, &p))
        .unwrap()
        .size
}

/// A deterministic byte pattern.
fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Does `fut` finish within a short while? (A waiting read or write does
/// not; the check cannot pass by being slow, only fail.)
async fn finishes<T>(fut: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(300), fut)
        .await
        .ok()
}

/// 200,000 bytes through a FIFO that holds 64 KiB: the writer fills it and
/// waits; a reader drains it in pieces and reads EOF after the writer's
/// handle closes; what it read is what was written, in order.
fn a_fifo_streams_bytes_with_back_pressure(b: Backend) {
    let Some(f) = b.open() else { return };
    let fs = files(&f);
    let who = root();
    let st = mkfifo(&f, &who, "/p", 0o644);
    assert_eq!(st.file_type, FileType::Fifo);
    session(&f, &who, "s1");
    let w = open(&f, &who, "/p", Access::Write, "s1");
    let r = open(&f, &who, "/p", Access::Read, "s1");
    let data = bytes(200_000);
    rt().block_on(async {
        let writer = {
            let (fs, who, w, d) = (fs.clone(), who.clone(), w.clone(), data.clone());
            tokio::spawn(async move { fs.write(&who, w, 0, d, false, None).await })
        };
        // The writer fills the FIFO and waits for room.
        for _ in 0..200 {
            if size(&f, "/p") == FIFO_BYTES_MAX {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(size(&f, "/p"), FIFO_BYTES_MAX, "the writer filled it");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!writer.is_finished(), "a full FIFO holds its writer");
        let mut got = Vec::new();
        let reader = {
            let (fs, who, r) = (fs.clone(), who.clone(), r.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let piece = fs.read(&who, r.clone(), 0, 10_000).await.unwrap();
                    if piece.is_empty() {
                        return got;
                    }
                    assert!(piece.len() <= 10_000);
                    got.extend(piece);
                }
            })
        };
        let wrote = writer.await.unwrap().unwrap();
        assert_eq!(
            wrote,
            data.len() as i64,
            "a write to a FIFO returns all it wrote"
        );
        close(&f, &who, &w);
        got.extend(reader.await.unwrap());
        assert!(
            got == data,
            "read {} bytes, not what was written",
            got.len()
        );
        assert_eq!(size(&f, "/p"), 0);
    });
}

/// EOF and EPIPE as a pipe's ends give them: a reader waits until a
/// writer has come and gone (by handle, by a call by path, by its session's
/// end); a writer before any reader fills the FIFO; a writer whose readers
/// have gone gets a broken pipe.
fn eof_and_broken_pipe_follow_the_ends(b: Backend) {
    let Some(f) = b.open() else { return };
    let fs = files(&f);
    let who = root();
    mkfifo(&f, &who, "/p", 0o644);
    session(&f, &who, "s1");
    session(&f, &who, "s2");
    rt().block_on(async {
        // A reader before any writer waits (no EOF yet).
        let r = open(&f, &who, "/p", Access::Read, "s1");
        assert!(finishes(fs.read(&who, r.clone(), 0, 100)).await.is_none());
        // A write by path is a writer that came and went: its bytes, then EOF.
        fs.write(&who, "/p", 0, b"hello".to_vec(), false, None)
            .await
            .unwrap();
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"hello");
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"");
        // A reader by path also sees EOF now (a writer has been).
        assert_eq!(fs.read(&who, "/p", 0, 100).await.unwrap(), b"");
        close(&f, &who, &r);

        // A writer whose session ends gives its readers EOF.
        let r = open(&f, &who, "/p", Access::Read, "s1");
        let w = open(&f, &who, "/p", Access::Write, "s2");
        fs.write(&who, w.clone(), 0, b"abc".to_vec(), false, None)
            .await
            .unwrap();
        assert_eq!(fs.read(&who, r.clone(), 0, 2).await.unwrap(), b"ab");
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"c");
        let pending = {
            let (fs, who, r) = (fs.clone(), who.clone(), r.clone());
            tokio::spawn(async move { fs.read(&who, r, 0, 100).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!pending.is_finished(), "a writer is open: no EOF");
        let wc = who.clone();
        // As the node ends a session: its entries and its open files.
        common::call_in(&f.store, R, move |tx| {
            tabos_kernel::names::close_session(tx, &wc, "s2", 3)?;
            fs::session_ended_tx(tx, R, "s2")
        })
        .unwrap();
        assert_eq!(
            pending.await.unwrap().unwrap(),
            b"",
            "EOF when the session ended"
        );

        // Broken pipe: a writer whose readers came and went.
        session(&f, &who, "s3");
        let w = open(&f, &who, "/p", Access::Write, "s3");
        let r2 = open(&f, &who, "/p", Access::Read, "s3");
        fs.write(&who, w.clone(), 0, b"x".to_vec(), false, None)
            .await
            .unwrap();
        close(&f, &who, &r2);
        close(&f, &who, &r);
        let broken = fs
            .write(&who, w.clone(), 0, b"y".to_vec(), false, None)
            .await;
        assert!(matches!(broken, Err(Error::BrokenPipe(_))), "{broken:?}");
        close(&f, &who, &w);

        // A writer before any reader: its bytes wait in the FIFO.
        mkfifo(&f, &who, "/q", 0o644);
        let w = open(&f, &who, "/q", Access::Write, "s3");
        fs.write(&who, w.clone(), 0, b"early".to_vec(), false, None)
            .await
            .unwrap();
        close(&f, &who, &w);
        assert_eq!(size(&f, "/q"), 5);
        let r = open(&f, &who, "/q", Access::Read, "s3");
        // Its end opened after that writer closed, on its bytes: they, then
        // EOF (`echo early > q; cat q` ends).
        assert_eq!(fs.read(&who, r.clone(), 0, 2).await.unwrap(), b"ea");
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"rly");
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"");
        close(&f, &who, &r);
        // A reader opened on the empty FIFO, its writers gone, waits for
        // the next writer (open(2) would), and reads its bytes.
        let r = open(&f, &who, "/q", Access::Read, "s3");
        assert!(finishes(fs.read(&who, r.clone(), 0, 100)).await.is_none());
        let w = open(&f, &who, "/q", Access::Write, "s3");
        fs.write(&who, w.clone(), 0, b"late".to_vec(), false, None)
            .await
            .unwrap();
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"late");
        close(&f, &who, &w);
        assert_eq!(fs.read(&who, r.clone(), 0, 100).await.unwrap(), b"");
        close(&f, &who, &r);

        // A writer's handle that a crash left is swept when a node starts
        // (its session lapsed): a reader waiting on it reads EOF.
        session(&f, &who, "s4");
        let _w = open(&f, &who, "/q", Access::Write, "s4");
        let pending = {
            let (fs, who) = (fs.clone(), who.clone());
            tokio::spawn(async move { fs.read(&who, "/q", 0, 100).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!pending.is_finished(), "a writer is open: no EOF");
        common::call_in(&f.store, R, |tx| fs::sweep_tx(tx, i64::MAX / 2)).unwrap();
        assert_eq!(pending.await.unwrap().unwrap(), b"", "EOF after the sweep");
    });
}

/// A FIFO is an entry: its mode decides who reads and writes it, a
/// truncate to zero is open(2)'s O_TRUNC (nothing), and unlinking it
/// removes its bytes.
fn a_fifo_is_permitted_and_removed_as_a_file(b: Backend) {
    let Some(f) = b.open() else { return };
    let fs = files(&f);
    let who = root();
    let other = common::as_user(R, "alice");
    mkfifo(&f, &who, "/p", 0o644);
    rt().block_on(async {
        let denied = fs.write(&other, "/p", 0, b"no".to_vec(), false, None).await;
        assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");
        assert_eq!(size(&f, "/p"), 0, "a refused write changes nothing");
        fs.write(&who, "/p", 0, b"kept".to_vec(), false, None)
            .await
            .unwrap();
        fs.truncate(&who, "/p", 0, None).await.unwrap();
        assert_eq!(size(&f, "/p"), 4, "O_TRUNC does not drain a FIFO");
        assert!(matches!(
            fs.truncate(&who, "/p", 10, None).await,
            Err(Error::Invalid(_))
        ));
        assert_eq!(fs.read(&other, "/p", 0, 100).await.unwrap(), b"kept");
        fs.write(&who, "/p", 0, b"gone".to_vec(), false, None)
            .await
            .unwrap();
        fs.unlink(&who, "/p", None).await.unwrap();
        let left: i64 = f
            .store
            .query("SELECT count(*) FROM fs_fifo_data", &[])
            .unwrap()
            .rows[0]
            .get(0)
            .unwrap();
        assert_eq!(left, 0, "its bytes went with it");
        let again = mkfifo(&f, &who, "/p", 0o600);
        assert_eq!(again.size, 0);
        let denied = fs.read(&other, "/p", 0, 100).await;
        assert!(matches!(denied, Err(Error::Denied(_))), "{denied:?}");
    });
}

/// A read whose caller goes away while its transaction is on its way (a
/// client that hung up) loses nothing: its transaction commits all the
/// same, and what it took goes back to the head of the FIFO.
fn a_read_dropped_on_its_way_loses_nothing(b: Backend) {
    let Some(f) = b.open() else { return };
    let fs = files(&f);
    let who = root();
    mkfifo(&f, &who, "/p", 0o644);
    rt().block_on(async {
        let data = b"abcdefghijklmnopqrstuvwxyz".to_vec();
        fs.write(&who, "/p", 0, data.clone(), false, None)
            .await
            .unwrap();
        let mut got = Vec::new();
        // A few reads polled once, then dropped: their transactions are
        // submitted and (on PostgreSQL, where a transaction is a round
        // trip) most often not yet answered; on SQLite they may finish at
        // once. Either way nothing may go missing.
        for _ in 0..8 {
            if let Ok(piece) = tokio::time::timeout(Duration::ZERO, fs.read(&who, "/p", 0, 2)).await
            {
                got.extend(piece.unwrap());
            }
            // Let a put-back land before the next read (the order holds).
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        loop {
            let piece = fs.read(&who, "/p", 0, 100).await.unwrap();
            if piece.is_empty() {
                break;
            }
            got.extend(piece);
        }
        assert!(got == data, "{:?}", String::from_utf8_lossy(&got));
        assert_eq!(size(&f, "/p"), 0);
    });
}
