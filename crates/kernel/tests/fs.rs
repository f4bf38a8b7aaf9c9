//! The filesystem in tables on SQLite and on PostgreSQL: POSIX-like
//! semantics table-driven, permissions, path refusals.

use tabos_kernel::fs::{self, Caller, FileType, Stat, BLOCK_BYTES_LOCAL};
use tabos_kernel::Error;
use tabos_store::{Store, Tx};

use crate::common;
use common::Backend;

both!(
    posix_semantics,
    reads_and_writes_across_blocks_holes_and_truncation,
    private_files_and_permissions,
    bad_paths_and_arguments_change_nothing,
);

const R: &str = "r";

/// Runs a procedure on the realm's partition, blocking.
fn run<T: Send + 'static>(
    s: &Store,
    f: impl FnMut(&mut dyn Tx) -> tabos_kernel::Result<T> + Send + 'static,
) -> tabos_kernel::Result<T> {
    common::call_in(s, R, f)
}

fn now() -> i64 {
    tabos_store::now_us()
}

fn user(name: &str) -> Caller {
    common::as_user(R, name)
}

fn create(s: &Store, who: &Caller, path: &str, mode: i64) -> tabos_kernel::Result<Stat> {
    let (w, p) = (who.clone(), path.to_string());
    run(s, move |tx| fs::create_tx(tx, &w, &p, mode, now()))
}

fn mkdir(s: &Store, who: &Caller, path: &str, mode: i64) -> tabos_kernel::Result<Stat> {
    let (w, p) = (who.clone(), path.to_string());
    run(s, move |tx| fs::mkdir_tx(tx, &w, &p, mode, now()))
}

fn write(s: &Store, who: &Caller, path: &str, off: i64, data: &[u8]) -> tabos_kernel::Result<i64> {
    let (w, p, d) = (who.clone(), path.to_string(), data.to_vec());
    run(s, move |tx| fs::write_tx(tx, &w, &p, off, &d, now()))
}

fn read(
    s: &Store,
    who: &Caller,
    path: &str,
    off: i64,
    len: usize,
) -> tabos_kernel::Result<Vec<u8>> {
    let (w, p) = (who.clone(), path.to_string());
    run(s, move |tx| fs::read_tx(tx, &w, &p, off, len))
}

fn stat(s: &Store, path: &str) -> tabos_kernel::Result<Stat> {
    let p = path.to_string();
    run(s, move |tx| {
        fs::stat_tx(tx, &common::as_user(R, "root"), &p)
    })
}

fn unlink(s: &Store, who: &Caller, path: &str) -> tabos_kernel::Result<()> {
    let (w, p) = (who.clone(), path.to_string());
    run(s, move |tx| fs::unlink_tx(tx, &w, &p, now())).map(|_| ())
}

fn rmdir(s: &Store, who: &Caller, path: &str) -> tabos_kernel::Result<()> {
    let (w, p) = (who.clone(), path.to_string());
    run(s, move |tx| fs::rmdir_tx(tx, &w, &p, now()))
}

fn rename(s: &Store, who: &Caller, from: &str, to: &str) -> tabos_kernel::Result<()> {
    let (w, a, b) = (who.clone(), from.to_string(), to.to_string());
    run(s, move |tx| fs::rename_tx(tx, &w, &a, &b, now())).map(|_| ())
}

fn truncate(s: &Store, who: &Caller, path: &str, size: i64) -> tabos_kernel::Result<()> {
    let (w, p) = (who.clone(), path.to_string());
    run(s, move |tx| fs::truncate_tx(tx, &w, &p, size, now()))
}

fn names(s: &Store, who: &Caller, dir: &str) -> tabos_kernel::Result<Vec<String>> {
    let (w, d) = (who.clone(), dir.to_string());
    let (entries, _) = run(s, move |tx| fs::readdir_tx(tx, &w, &d))?;
    Ok(entries.into_iter().map(|e| e.path).collect())
}

/// What a step must give.
#[derive(Debug)]
enum Want {
    Ok,
    Exists,
    NotFound,
    Invalid,
    Denied,
    NotEmpty,
    NotADirectory,
    IsADirectory,
}

fn check(step: &str, got: tabos_kernel::Result<()>, want: Want) {
    let ok = match (&got, &want) {
        (Ok(()), Want::Ok) => true,
        (Err(Error::AlreadyExists(_)), Want::Exists) => true,
        (Err(Error::NotFound(_)), Want::NotFound) => true,
        (Err(Error::Invalid(_)), Want::Invalid) => true,
        (Err(Error::Denied(m)), Want::Denied) => !m.is_empty(),
        (Err(Error::NotEmpty(p)), Want::NotEmpty) => !p.is_empty(),
        (Err(Error::NotADirectory(p)), Want::NotADirectory) => !p.is_empty(),
        (Err(Error::IsADirectory(p, _)), Want::IsADirectory) => !p.is_empty(),
        _ => false,
    };
    assert!(ok, "{step}: want {want:?}, got {got:?}");
}

/// One step of a table-driven test.
type Step<'a> = Box<dyn Fn() -> tabos_kernel::Result<()> + 'a>;

fn posix_semantics(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let root = user("root");
    let drop_ok = |r: tabos_kernel::Result<Stat>| r.map(drop);
    let steps: Vec<(&str, Step, Want)> = vec![
        (
            "mkdir /home",
            Box::new(|| drop_ok(mkdir(s, &root, "/home", 0o755))),
            Want::Ok,
        ),
        (
            "mkdir /home again",
            Box::new(|| drop_ok(mkdir(s, &root, "/home", 0o755))),
            Want::Exists,
        ),
        (
            "create /home/a",
            Box::new(|| drop_ok(create(s, &root, "/home/a", 0o644))),
            Want::Ok,
        ),
        (
            "create over an existing name",
            Box::new(|| drop_ok(create(s, &root, "/home/a", 0o644))),
            Want::Exists,
        ),
        (
            "create in a missing directory",
            Box::new(|| drop_ok(create(s, &root, "/nope/a", 0o644))),
            Want::NotFound,
        ),
        (
            "create under a file",
            Box::new(|| drop_ok(create(s, &root, "/home/a/x", 0o644))),
            Want::NotADirectory,
        ),
        (
            "unlink of a directory",
            Box::new(|| unlink(s, &root, "/home")),
            Want::IsADirectory,
        ),
        (
            "rmdir of a file",
            Box::new(|| rmdir(s, &root, "/home/a")),
            Want::NotADirectory,
        ),
        (
            "rmdir of a non-empty directory",
            Box::new(|| rmdir(s, &root, "/home")),
            Want::NotEmpty,
        ),
        (
            "unlink of a missing file",
            Box::new(|| unlink(s, &root, "/home/zz")),
            Want::NotFound,
        ),
        (
            "write a",
            Box::new(|| write(s, &root, "/home/a", 0, b"aaaa").map(drop)),
            Want::Ok,
        ),
        (
            "create b",
            Box::new(|| drop_ok(create(s, &root, "/home/b", 0o644))),
            Want::Ok,
        ),
        (
            "write b",
            Box::new(|| write(s, &root, "/home/b", 0, b"bb").map(drop)),
            Want::Ok,
        ),
        (
            "rename over an existing file",
            Box::new(|| rename(s, &root, "/home/a", "/home/b")),
            Want::Ok,
        ),
        (
            "mkdir /home/d",
            Box::new(|| drop_ok(mkdir(s, &root, "/home/d", 0o755))),
            Want::Ok,
        ),
        (
            "rename a file over a directory",
            Box::new(|| rename(s, &root, "/home/b", "/home/d")),
            Want::IsADirectory,
        ),
        (
            "rename a directory into itself",
            Box::new(|| rename(s, &root, "/home", "/home/d/x")),
            Want::Invalid,
        ),
        (
            "create /home/d/f",
            Box::new(|| drop_ok(create(s, &root, "/home/d/f", 0o644))),
            Want::Ok,
        ),
        (
            "write /home/d/f",
            Box::new(|| write(s, &root, "/home/d/f", 0, b"in d").map(drop)),
            Want::Ok,
        ),
        (
            "rename a directory with its files",
            Box::new(|| rename(s, &root, "/home/d", "/home/e")),
            Want::Ok,
        ),
        (
            "rename a missing file",
            Box::new(|| rename(s, &root, "/home/zz", "/home/yy")),
            Want::NotFound,
        ),
        (
            "rmdir of the root",
            Box::new(|| rmdir(s, &root, "/")),
            Want::Invalid,
        ),
    ];
    for (name, step, want) in steps {
        check(name, step(), want);
    }
    // After the renames: b holds a's data, a is gone, e/f moved with e.
    assert_eq!(read(s, &root, "/home/b", 0, 100).unwrap(), b"aaaa");
    assert!(matches!(stat(s, "/home/a"), Err(Error::NotFound(_))));
    assert_eq!(read(s, &root, "/home/e/f", 0, 100).unwrap(), b"in d");
    assert!(matches!(stat(s, "/home/d/f"), Err(Error::NotFound(_))));
    assert_eq!(names(s, &root, "/home").unwrap(), ["/home/b", "/home/e"]);
    let st = stat(s, "/home/b").unwrap();
    assert_eq!((st.file_type, st.size, st.mode), (FileType::File, 4, 0o644));
    // Unlink frees the blocks with the entry (the file's last name).
    assert_eq!(st.nlink, 1);
    unlink(s, &root, "/home/b").unwrap();
    let left: i64 = s
        .query(
            "SELECT count(*) FROM localized_file WHERE f_id = $1",
            tabos_store::params![st.id.as_str()],
        )
        .unwrap()
        .iter()
        .next()
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(left, 0);
    rmdir(s, &root, "/home/e").unwrap_err();
    unlink(s, &root, "/home/e/f").unwrap();
    rmdir(s, &root, "/home/e").unwrap();
}

fn reads_and_writes_across_blocks_holes_and_truncation(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let root = user("root");
    let bs = BLOCK_BYTES_LOCAL as usize;
    create(s, &root, "/f", 0o644).unwrap();
    // A model file beside it: every operation is checked against it.
    let mut model: Vec<u8> = Vec::new();
    let pattern = |n: usize, seed: u8| -> Vec<u8> {
        (0..n).map(|i| seed.wrapping_add((i % 251) as u8)).collect()
    };
    let ops: Vec<(i64, Vec<u8>)> = vec![
        (0, pattern(10, 1)),                // inside block 0
        (5, pattern(bs, 2)),                // across blocks 0 and 1
        (3 * bs as i64 + 7, pattern(3, 3)), // past the end: blocks 2.. are a hole
        (bs as i64, pattern(bs, 4)),        // exactly block 1
        (0, pattern(5 * bs + 13, 5)),       // everything, and more
        (9 * bs as i64, pattern(1, 6)),     // a far hole
    ];
    for (off, data) in ops {
        let end = off as usize + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data);
        assert_eq!(
            write(s, &root, "/f", off, &data).unwrap(),
            model.len() as i64
        );
        assert_eq!(read(s, &root, "/f", 0, 1 << 20).unwrap(), model);
    }
    // Reads at odd offsets, past the end, and of zero length.
    for (off, len) in [
        (0usize, 1usize),
        (bs - 1, 2),
        (3 * bs + 5, 2 * bs),
        (model.len() - 1, 10),
    ] {
        let end = (off + len).min(model.len());
        assert_eq!(
            read(s, &root, "/f", off as i64, len).unwrap(),
            &model[off..end]
        );
    }
    assert!(read(s, &root, "/f", model.len() as i64 + 5, 10)
        .unwrap()
        .is_empty());
    assert!(read(s, &root, "/f", 0, 0).unwrap().is_empty());
    // Truncate down (mid-block), then up: the cut bytes read as zeros.
    for size in [2 * bs + 100, 2 * bs, 7, 0, 3 * bs + 1] {
        truncate(s, &root, "/f", size as i64).unwrap();
        model.resize(size, 0);
        assert_eq!(stat(s, "/f").unwrap().size, size as i64);
        assert_eq!(read(s, &root, "/f", 0, 1 << 20).unwrap(), model);
    }
}

fn private_files_and_permissions(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let (root, alice, bob) = (user("root"), user("alice"), user("bob"));
    mkdir(s, &root, "/home", 0o755).unwrap();
    mkdir(s, &root, "/home/alice", 0o755).unwrap();
    let chown = |p: &str, u: &str, who: &Caller| {
        let (p, u, w) = (p.to_string(), u.to_string(), who.clone());
        run(s, move |tx| fs::chown_tx(tx, &w, &p, &u, now()))
    };
    let chmod = |p: &str, m: i64, who: &Caller| {
        let (p, w) = (p.to_string(), who.clone());
        run(s, move |tx| fs::chmod_tx(tx, &w, &p, m, now()))
    };
    check(
        "chown by a user",
        chown("/home/alice", "alice", &alice),
        Want::Denied,
    );
    chown("/home/alice", "alice", &root).unwrap();
    create(s, &alice, "/home/alice/diary", 0o600).unwrap();
    write(s, &alice, "/home/alice/diary", 0, b"secret").unwrap();
    create(s, &alice, "/home/alice/notes", 0o644).unwrap();
    write(s, &alice, "/home/alice/notes", 0, b"public").unwrap();
    // Bob reads only what alice lets others read, and changes nothing.
    check(
        "bob reads a private file",
        read(s, &bob, "/home/alice/diary", 0, 10).map(drop),
        Want::Denied,
    );
    assert_eq!(
        read(s, &bob, "/home/alice/notes", 0, 10).unwrap(),
        b"public"
    );
    check(
        "bob writes a 0644 file",
        write(s, &bob, "/home/alice/notes", 0, b"x").map(drop),
        Want::Denied,
    );
    check(
        "bob creates in alice's 0755 dir",
        create(s, &bob, "/home/alice/x", 0o644).map(drop),
        Want::Denied,
    );
    check(
        "bob unlinks in alice's dir",
        unlink(s, &bob, "/home/alice/notes"),
        Want::Denied,
    );
    check(
        "bob renames alice's file",
        rename(s, &bob, "/home/alice/notes", "/home/notes"),
        Want::Denied,
    );
    check(
        "bob chmods alice's file",
        chmod("/home/alice/diary", 0o644, &bob),
        Want::Denied,
    );
    check(
        "bob truncates",
        truncate(s, &bob, "/home/alice/notes", 0),
        Want::Denied,
    );
    assert_eq!(
        read(s, &alice, "/home/alice/notes", 0, 10).unwrap(),
        b"public"
    );
    // A 0700 directory cannot be listed by others.
    chmod("/home/alice", 0o700, &alice).unwrap();
    check(
        "bob lists a 0700 dir",
        names(s, &bob, "/home/alice").map(drop),
        Want::Denied,
    );
    assert_eq!(names(s, &alice, "/home/alice").unwrap().len(), 2);
    // Root reads anything.
    assert_eq!(
        read(s, &root, "/home/alice/diary", 0, 10).unwrap(),
        b"secret"
    );
    // The root directory is root's, 0755: users create in directories
    // made for them.
    check(
        "bob creates in /",
        create(s, &bob, "/bobs", 0o644).map(drop),
        Want::Denied,
    );
    assert_eq!(stat(s, "/").unwrap().mode, 0o755);
    // A shared sticky directory: everyone creates, only owners remove.
    mkdir(s, &root, "/tmp", 0o1777).unwrap();
    create(s, &alice, "/tmp/a", 0o666).unwrap();
    create(s, &bob, "/tmp/b", 0o666).unwrap();
    check(
        "bob unlinks alice's file in /tmp",
        unlink(s, &bob, "/tmp/a"),
        Want::Denied,
    );
    check(
        "bob renames alice's file in /tmp",
        rename(s, &bob, "/tmp/a", "/tmp/c"),
        Want::Denied,
    );
    check(
        "bob replaces alice's file in /tmp",
        rename(s, &bob, "/tmp/b", "/tmp/a"),
        Want::Denied,
    );
    write(s, &bob, "/tmp/a", 0, b"shared").unwrap(); // 0666: writable by all
    unlink(s, &alice, "/tmp/a").unwrap();
    unlink(s, &root, "/tmp/b").unwrap();
    assert_eq!(names(s, &root, "/tmp").unwrap().len(), 0);
}

fn bad_paths_and_arguments_change_nothing(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let root = user("root");
    let long = format!("/{}", "x".repeat(300));
    for bad in [
        "",
        "rel",
        "/a/../b",
        "/a//b",
        "/a/",
        "/a/./b",
        "/a\0b",
        long.as_str(),
    ] {
        assert!(
            matches!(create(s, &root, bad, 0o644), Err(Error::Invalid(_))),
            "{bad:?}"
        );
        assert!(
            matches!(mkdir(s, &root, bad, 0o755), Err(Error::Invalid(_))),
            "{bad:?}"
        );
        assert!(matches!(stat(s, bad), Err(Error::Invalid(_))), "{bad:?}");
    }
    create(s, &root, "/f", 0o644).unwrap();
    // Permission bits and the sticky bit, nothing more.
    assert!(matches!(
        create(s, &root, "/g", 0o2777),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        write(s, &root, "/f", -1, b"x"),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        read(s, &root, "/f", 0, fs::IO_BYTES_MAX + 1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        truncate(s, &root, "/f", -1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        common::caller(R, "bad user!"),
        Err(Error::Invalid(_))
    ));
    let too_big = vec![0u8; fs::IO_BYTES_MAX + 1];
    assert!(matches!(
        write(s, &root, "/f", 0, &too_big),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        write(s, &root, "/f", fs::FILE_BYTES_MAX, b"x"),
        Err(Error::Full(_))
    ));
    assert_eq!(stat(s, "/f").unwrap().size, 0);
    assert_eq!(names(s, &root, "/").unwrap(), ["/f"]);
}
