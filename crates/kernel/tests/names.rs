//! The namespace on SQLite and on PostgreSQL.

use std::time::Duration;

use tabos_kernel::auth::Caller;
use tabos_kernel::names::{self, Entry, Fence, Kind};
use tabos_kernel::Error;
use tabos_store::Store;

use crate::common;
use common::{rt, Backend};

both!(
    entries_versions_and_refusals,
    rename_moves_subtrees_atomically,
    symlinks_are_mount_points,
    sessions_remove_their_ephemerals_and_wake_watchers,
    watches_see_each_change_once_in_order,
    epochs_and_fences,
    realms_do_not_see_each_other,
    a_realm_holds_a_bounded_number_of_sessions,
);

/// A realm opens at most SESSIONS_PER_REALM_MAX sessions at once (each may
/// hold entries and file handles); another realm is not held back, and a
/// closed one makes room.
fn a_realm_holds_a_bounded_number_of_sessions(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        let now = tabos_store::now_us();
        let w = root_in(R);
        names::call(s, R, move |tx| {
            for i in 0..names::SESSIONS_PER_REALM_MAX {
                names::open_session(tx, &w, &format!("s{i}"), 60_000_000, now)?;
            }
            Ok(())
        })
        .await
        .unwrap();
        let w = root_in(R);
        let e = names::call(s, R, move |tx| {
            names::open_session(tx, &w, "one-more", 60_000_000, now)
        })
        .await
        .unwrap_err();
        assert!(matches!(e, Error::Full(_)), "{e}");
        let o = root_in("other");
        names::call(s, "other", move |tx| {
            names::open_session(tx, &o, "mine", 60_000_000, now)
        })
        .await
        .unwrap();
        let w = root_in(R);
        names::call(s, R, move |tx| {
            names::close_session(tx, &w, "s0", now)?;
            names::open_session(tx, &w, "one-more", 60_000_000, now)
        })
        .await
        .unwrap();
    });
}

const R: &str = "r";

/// Root in `realm`: whom these tests act as (owners, modes and sessions'
/// owners are `names_enforce_owners_modes_and_session_owners`' subject, in
/// the node's tests).
fn root_in(realm: &str) -> Caller {
    common::as_user(realm, "root")
}

async fn create(
    s: &Store,
    realm: &str,
    path: &str,
    kind: Kind,
    data: &[u8],
) -> tabos_kernel::Result<i64> {
    let (who, p, d) = (root_in(realm), path.to_string(), data.to_vec());
    let now = tabos_store::now_us();
    names::call(s, realm, move |tx| {
        names::create(tx, &who, &p, kind, &d, 0, None, None, now)
    })
    .await
}

async fn get(s: &Store, realm: &str, path: &str) -> tabos_kernel::Result<Entry> {
    let (who, p) = (root_in(realm), path.to_string());
    names::call(s, realm, move |tx| names::get(tx, &who, &p)).await
}

async fn set(
    s: &Store,
    path: &str,
    data: &[u8],
    if_version: Option<i64>,
) -> tabos_kernel::Result<i64> {
    set_fenced(s, path, data, if_version, None).await
}

async fn set_fenced(
    s: &Store,
    path: &str,
    data: &[u8],
    if_version: Option<i64>,
    fence: Option<Fence>,
) -> tabos_kernel::Result<i64> {
    let (p, d) = (path.to_string(), data.to_vec());
    let now = tabos_store::now_us();
    let who = root_in(R);
    names::call(s, R, move |tx| {
        names::set(tx, &who, &p, &d, if_version, fence.as_ref(), now)
    })
    .await
}

async fn remove(s: &Store, path: &str) -> tabos_kernel::Result<()> {
    let p = path.to_string();
    let now = tabos_store::now_us();
    let who = root_in(R);
    names::call(s, R, move |tx| names::remove(tx, &who, &p, None, None, now)).await
}

async fn readdir(s: &Store, dir: &str) -> Vec<String> {
    let d = dir.to_string();
    let who = root_in(R);
    let (entries, more, _) = names::call(s, R, move |tx| names::read_dir(tx, &who, &d))
        .await
        .unwrap();
    assert!(!more);
    entries.into_iter().map(|e| e.path).collect()
}

fn entries_versions_and_refusals(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        assert_eq!(create(s, R, "/svc", Kind::Dir, b"").await.unwrap(), 1);
        assert!(matches!(
            create(s, R, "/svc", Kind::Dir, b"").await,
            Err(Error::AlreadyExists(_))
        ));
        create(s, R, "/svc/a", Kind::File, b"one").await.unwrap();
        assert_eq!(
            get(s, R, "/svc").await.unwrap().version,
            2,
            "a child bumps the dir"
        );
        assert_eq!(set(s, "/svc/a", b"two", Some(1)).await.unwrap(), 2);
        // A conditional set at a stale version is refused and changes nothing.
        let e = set(s, "/svc/a", b"three", Some(1)).await.unwrap_err();
        assert!(
            matches!(&e, Error::Conflict(m) if m.contains("version")),
            "{e}"
        );
        let a = get(s, R, "/svc/a").await.unwrap();
        assert_eq!((a.data.as_slice(), a.version), (&b"two"[..], 2));
        // Set creates; if_version 0 means "only if absent".
        assert_eq!(set(s, "/svc/b", b"new", Some(0)).await.unwrap(), 1);
        assert!(set(s, "/svc/b", b"again", Some(0)).await.is_err());
        assert_eq!(readdir(s, "/svc").await, ["/svc/a", "/svc/b"]);
        // rmdir of a non-empty directory, unknown paths, files as dirs.
        let e = remove(s, "/svc").await.unwrap_err();
        assert!(matches!(&e, Error::NotEmpty(p) if p == "/svc"), "{e}");
        assert!(matches!(get(s, R, "/nope").await, Err(Error::NotFound(_))));
        assert!(matches!(
            create(s, R, "/nope/x", Kind::File, b"").await,
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            create(s, R, "/svc/a/x", Kind::File, b"").await,
            Err(Error::Invalid(_))
        ));
        // Path validation: nothing is written.
        for bad in [
            "", "svc", "/svc/", "//x", "/a/../b", "/a/./b", "/nul\0", "/",
        ] {
            assert!(create(s, R, bad, Kind::File, b"").await.is_err(), "{bad:?}");
        }
        let deep = "/d".repeat(names::DEPTH_MAX + 1);
        assert!(create(s, R, &deep, Kind::Dir, b"").await.is_err());
        let long = format!("/{}", "x".repeat(names::PATH_BYTES_MAX));
        assert!(create(s, R, &long, Kind::File, b"").await.is_err());
        let big = vec![0u8; names::DATA_BYTES_MAX + 1];
        assert!(matches!(
            create(s, R, "/svc/big", Kind::File, &big).await,
            Err(Error::Invalid(_))
        ));
        // The /proc view is read-only.
        assert!(create(s, R, "/proc/x", Kind::File, b"").await.is_err());
        remove(s, "/svc/a").await.unwrap();
        remove(s, "/svc/b").await.unwrap();
        remove(s, "/svc").await.unwrap();
        assert!(readdir(s, "/").await.is_empty());
    });
}

fn rename_moves_subtrees_atomically(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let rename = |from: &str, to: &str| {
        let (from, to, s) = (from.to_string(), to.to_string(), s.clone());
        async move {
            let now = tabos_store::now_us();
            let who = root_in(R);
            names::call(&s, R, move |tx| {
                names::rename(tx, &who, &from, &to, None, now)
            })
            .await
        }
    };
    rt().block_on(async {
        create(s, R, "/a", Kind::Dir, b"").await.unwrap();
        create(s, R, "/a/b", Kind::Dir, b"").await.unwrap();
        create(s, R, "/a/b/c", Kind::File, b"deep").await.unwrap();
        create(s, R, "/a/f", Kind::File, b"f").await.unwrap();
        create(s, R, "/ab", Kind::File, b"sibling").await.unwrap();
        rename("/a", "/z").await.unwrap();
        assert!(matches!(get(s, R, "/a/b/c").await, Err(Error::NotFound(_))));
        assert_eq!(get(s, R, "/z/b/c").await.unwrap().data, b"deep");
        assert_eq!(readdir(s, "/z").await, ["/z/b", "/z/f"]);
        assert_eq!(readdir(s, "/z/b").await, ["/z/b/c"]);
        assert_eq!(
            get(s, R, "/ab").await.unwrap().data,
            b"sibling",
            "a sibling with the prefix stays"
        );
        // Over an existing file: replaced. Over a directory, into itself: refused.
        rename("/z/f", "/ab").await.unwrap();
        assert_eq!(get(s, R, "/ab").await.unwrap().data, b"f");
        assert!(matches!(
            rename("/ab", "/z").await,
            Err(Error::AlreadyExists(_))
        ));
        assert!(rename("/z", "/z/b/inside").await.is_err());
        assert!(matches!(
            rename("/nope", "/x").await,
            Err(Error::NotFound(_))
        ));
    });
}

fn symlinks_are_mount_points(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        create(s, R, "/kv", Kind::Symlink, b"127.0.0.1:9000")
            .await
            .unwrap();
        let e = get(s, R, "/kv/key-10").await.unwrap_err();
        match e {
            Error::Mounted { path, target, rest } => {
                assert_eq!(
                    (path.as_str(), target.as_str(), rest.as_str()),
                    ("/kv", "127.0.0.1:9000", "/key-10")
                );
            }
            other => panic!("expected a mount, got {other}"),
        }
        let link = get(s, R, "/kv").await.unwrap();
        assert_eq!(
            (link.kind, link.data.as_slice()),
            (Kind::Symlink, &b"127.0.0.1:9000"[..])
        );
    });
}

fn sessions_remove_their_ephemerals_and_wake_watchers(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        let now = tabos_store::now_us();
        let root = root_in(R);
        let w = root.clone();
        names::call(s, R, move |tx| {
            names::open_session(tx, &w, "s1", 200_000, now)
        })
        .await
        .unwrap();
        let w = root.clone();
        names::call(s, R, move |tx| {
            names::create(
                tx,
                &w,
                "/leader",
                Kind::Symlink,
                b"alice",
                0,
                Some("s1"),
                None,
                now,
            )
        })
        .await
        .unwrap();
        create(s, R, "/keep", Kind::File, b"").await.unwrap();
        // Ephemeral directories are refused; so is a dead session.
        let w = root.clone();
        assert!(names::call(s, R, move |tx| {
            names::create(tx, &w, "/d", Kind::Dir, b"", 0, Some("s1"), None, now)
        })
        .await
        .is_err());
        // A watcher waits for the leader's symlink to go.
        let watcher = {
            let s = s.clone();
            let w = root.clone();
            tokio::spawn(async move { names::wait_removed(&s, &w, "/leader").await })
        };
        // Renewal extends; nothing lapses yet.
        let later = now + 150_000;
        let w = root.clone();
        names::call(s, R, move |tx| names::renew_session(tx, &w, "s1", later))
            .await
            .unwrap();
        let at = now + 300_000;
        let ex = s
            .submit(
                tabos_kernel::realm_partition(R, s.partitions()),
                move |tx| names::expire_sessions_tx(tx, at),
            )
            .await
            .unwrap();
        assert!(ex.sessions.is_empty(), "renewed until {}", later + 200_000);
        let at = later + 200_001;
        let ex = s
            .submit(
                tabos_kernel::realm_partition(R, s.partitions()),
                move |tx| names::expire_sessions_tx(tx, at),
            )
            .await
            .unwrap();
        assert_eq!((ex.sessions.len(), ex.entries), (1, 1));
        assert!(matches!(
            get(s, R, "/leader").await,
            Err(Error::NotFound(_))
        ));
        assert!(get(s, R, "/keep").await.is_ok());
        watcher.await.unwrap().unwrap();
        // A lapsed session cannot be renewed or used.
        let w = root.clone();
        assert!(
            names::call(s, R, move |tx| names::renew_session(tx, &w, "s1", at))
                .await
                .is_err()
        );
        let w = root.clone();
        assert!(matches!(
            names::call(s, R, move |tx| {
                names::create(tx, &w, "/again", Kind::File, b"", 0, Some("s1"), None, at)
            })
            .await,
            Err(Error::Precondition(_))
        ));
        // Closing a session removes its entries at once.
        let w = root.clone();
        names::call(s, R, move |tx| {
            names::open_session(tx, &w, "s2", 60_000_000, at)
        })
        .await
        .unwrap();
        let w = root.clone();
        names::call(s, R, move |tx| {
            names::create(
                tx,
                &w,
                "/member-bob",
                Kind::File,
                b"",
                0,
                Some("s2"),
                None,
                at,
            )
        })
        .await
        .unwrap();
        let w = root.clone();
        assert_eq!(
            names::call(s, R, move |tx| names::close_session(tx, &w, "s2", at))
                .await
                .unwrap(),
            1
        );
        assert!(get(s, R, "/member-bob").await.is_err());
    });
}

fn watches_see_each_change_once_in_order(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        create(s, R, "/w", Kind::Dir, b"").await.unwrap();
        let (mut sub, v0) = names::watch_dir(s, &root_in(R), "/w").await.unwrap();
        assert_eq!(v0, 1);
        // An OpenWatch on a file that does not exist yet.
        let opener = {
            let s = s.clone();
            tokio::spawn(async move { names::wait_exists(&s, &root_in(R), "/w/w0-9").await })
        };
        let writers = 4;
        let per = 10;
        let mut tasks = Vec::new();
        for w in 0..writers {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    let path = format!("/w/w{w}-{i}");
                    create(&s, R, &path, Kind::File, b"x").await.unwrap();
                    set(&s, &path, b"y", Some(1)).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(opener.await.unwrap().unwrap().path, "/w/w0-9");
        // Every change exactly once: a create then a set per file, each
        // file's in order.
        let mut seen = std::collections::HashMap::<String, Vec<String>>::new();
        for _ in 0..writers * per * 2 {
            let n = tokio::time::timeout(Duration::from_secs(30), sub.recv())
                .await
                .expect("a change")
                .unwrap();
            let c = names::Change::parse(&n.payload).unwrap();
            seen.entry(c.path).or_default().push(c.op);
        }
        assert!(sub.try_recv().unwrap().is_none(), "no change twice");
        assert_eq!(seen.len(), writers * per);
        assert!(
            seen.values().all(|ops| ops == &["create", "set"]),
            "{seen:?}"
        );
    });
}

fn epochs_and_fences(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        create(s, R, "/svc", Kind::Dir, b"").await.unwrap();
        let advance = || {
            let s = s.clone();
            async move {
                let now = tabos_store::now_us();
                let who = root_in(R);
                names::call(&s, R, move |tx| {
                    names::advance_epoch(tx, &who, "/svc/epoch", now)
                })
                .await
            }
        };
        assert_eq!(advance().await.unwrap(), 1);
        assert_eq!(advance().await.unwrap(), 2);
        let fence = |epoch| {
            Some(Fence {
                dir: "/svc".into(),
                epoch,
            })
        };
        // Epoch 2 writes; the directory learns epoch 2; epoch 1 is stale.
        set_fenced(s, "/svc/state", b"by-2", None, fence(2))
            .await
            .unwrap();
        let e = set_fenced(s, "/svc/state", b"by-1", None, fence(1))
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::StaleEpoch { current, given, .. } if current > given),
            "{e}"
        );
        assert!(e.to_string().starts_with("stale epoch"), "{e}");
        assert_eq!(get(s, R, "/svc/state").await.unwrap().data, b"by-2");
        // A newer epoch moves the fence forward; the older one is now stale.
        set_fenced(s, "/svc/state", b"by-3", None, fence(3))
            .await
            .unwrap();
        assert!(set_fenced(s, "/svc/state", b"x", None, fence(2))
            .await
            .is_err());
        // A fence only covers its directory.
        create(s, R, "/other", Kind::Dir, b"").await.unwrap();
        assert!(matches!(
            set_fenced(s, "/other/x", b"x", None, fence(3)).await,
            Err(Error::Invalid(_))
        ));
        // Other services honour the same fence: an ipc send.
        tabos_kernel::ipc::create_mailbox(
            s,
            &common::as_user(R, "root"),
            "box",
            Default::default(),
        )
        .await
        .unwrap();
        let now = tabos_store::now_us();
        let stale = Fence {
            dir: "/svc".into(),
            epoch: 1,
        };
        let who = root_in(R);
        let e = names::call(s, R, move |tx| {
            names::fence(tx, &who, &stale, now)?;
            tabos_kernel::ipc::send_tx(
                tx,
                R,
                None,
                &[tabos_kernel::ipc::Outgoing {
                    to: tabos_kernel::ipc::Address::parse("box")?,
                    payload: b"x".to_vec(),
                    message_id: None,
                }],
                &Default::default(),
                now,
            )
        })
        .await
        .unwrap_err();
        assert!(matches!(e, Error::StaleEpoch { current, given, .. } if current > given));
        let q = s
            .query("SELECT count(*) FROM message WHERE receiver = 'box'", &[])
            .unwrap();
        assert_eq!(q.rows[0].get::<i64>(0).unwrap(), 0);
    });
}

fn realms_do_not_see_each_other(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        create(s, "alpha", "/secret", Kind::File, b"a")
            .await
            .unwrap();
        assert!(matches!(
            get(s, "beta", "/secret").await,
            Err(Error::NotFound(_))
        ));
        create(s, "beta", "/secret", Kind::File, b"b")
            .await
            .unwrap();
        assert_eq!(get(s, "alpha", "/secret").await.unwrap().data, b"a");
        // A caller in a realm that cannot exist is never made.
        assert!(matches!(
            common::caller("bad realm", "root"),
            Err(Error::Invalid(_))
        ));
    });
}
