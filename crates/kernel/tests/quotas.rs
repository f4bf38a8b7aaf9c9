//! Storage, mailbox and procedure quotas (issue 17, item 4) and the removal
//! of a realm, on SQLite and on PostgreSQL.

use std::time::Duration;

use tabos_blockio::{Device, FormatOptions};
use tabos_kernel::fs::files::{Files, FsSettings};
use tabos_kernel::ids::WorkflowId;
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tabos_kernel::names::{self, Kind};
use tabos_kernel::procedures::{Install, Procedures};
use tabos_kernel::procs::{self, Descriptor};
use tabos_kernel::realms::{self, Quota, StorageClass};
use tabos_kernel::sched::Scheduler;
use tabos_kernel::workflows::{self as wf, StartSpec};
use tabos_kernel::{kv, teardown, Error};
use tabos_sandbox::procedure::{Language, Limits};
use tabos_sandbox::Sandbox;
use tabos_store::testing::TempDir;
use tabos_store::{params, Store};

use crate::common;
use common::{call_in, rt, Backend};

both!(
    workflows_mail_and_logs_count_by_class,
    storage_quota_refuses_growth_and_changes_nothing,
    counters_match_what_is_stored,
    mailbox_and_procedure_quotas,
    removing_a_realm_removes_everything_of_it,
);

const MIB: usize = 1 << 20;

fn quota(storage_mb: Option<i64>) -> Quota {
    Quota {
        storage_mb,
        ..Quota::default()
    }
}

fn usage(s: &Store, realm: &str) -> realms::Usage {
    realms::usage(s, Some(realm)).unwrap().pop().unwrap()
}

fn is_over(e: &Error, what: &str) -> bool {
    matches!(e, Error::OverQuota { quota, used, limit, message }
        if *quota == what && used > limit && message.contains(&format!("over its {what} quota")))
}

fn files(s: &Store, dir: &TempDir) -> Files {
    let path = dir.path().join("blocks.dev");
    Device::format(
        &path,
        &FormatOptions {
            blocks: Some(8_192),
            block_size: 4096,
        },
    )
    .unwrap();
    let dev = Device::open(&path, 256).unwrap();
    let settings = FsSettings {
        local_block: 2048,
        parallel_block: 8192,
        segment_threshold: 64 << 10,
    };
    Files::new(s.clone(), Some(dev), settings).unwrap()
}

fn set_name(s: &Store, realm: &str, path: &str, data: &[u8]) -> tabos_kernel::Result<i64> {
    let (r, p, d) = (realm.to_string(), path.to_string(), data.to_vec());
    let who = common::as_user(&r, "root");
    call_in(s, realm, move |tx| {
        names::set(tx, &who, &p, &d, None, None, tabos_store::now_us())
    })
}

fn wid(s: &str) -> WorkflowId {
    WorkflowId::new(s).unwrap()
}

fn start_workflow(s: &Store, id: &str, input: Vec<u8>) -> tabos_kernel::Result<wf::Started> {
    let spec = StartSpec {
        id: wid(id),
        name: "order".into(),
        app_version: "v1".into(),
        input,
        queue: Some("q".into()),
        priority: 0,
        executor: None,
    };
    call_in(s, "r", move |tx| {
        wf::start_tx(tx, &common::as_user("r", "root"), &spec, 1)
    })
}

/// Workflows (inputs, and their rows however small), queued mail and proc
/// logs count against the storage quota, each in its class: a workflow
/// past the quota is refused naming its class and leaves nothing; the
/// counters equal what the tables hold, class by class.
fn workflows_mail_and_logs_count_by_class(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, rt());
    realms::create(s, "r", Scheduler::Fifo).unwrap();
    rt.block_on(realms::set_quota(s, "r", quota(Some(1))))
        .unwrap();
    for i in 0..3 {
        start_workflow(s, &format!("big{i}"), vec![7; 300 << 10]).unwrap();
    }
    let before = usage(s, "r");
    assert!(
        before.stored.get(StorageClass::Workflows) >= 900 << 10,
        "{before:?}"
    );
    assert_eq!(before.stored_bytes, before.stored.total());
    let e = start_workflow(s, "big3", vec![7; 300 << 10]).unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    assert!(
        e.to_string()
            .contains("this change adds 0.3 MiB of workflows"),
        "{e}"
    );
    assert_eq!(usage(s, "r"), before, "nothing changed");
    let r = "r".to_string();
    assert!(call_in(s, "r", move |tx| wf::get_tx(
        tx,
        &common::as_user(&r, "root"),
        &wid("big3")
    ))
    .unwrap()
    .is_none());

    // Small rows are not free: a thousand empty enqueues take room.
    rt.block_on(realms::set_quota(s, "r", quota(Some(100))))
        .unwrap();
    let wf_before = usage(s, "r").stored.get(StorageClass::Workflows);
    for i in 0..1_000 {
        start_workflow(s, &format!("small{i}"), Vec::new()).unwrap();
    }
    let grown = usage(s, "r").stored.get(StorageClass::Workflows) - wf_before;
    assert!(grown >= 64 * 1_000, "{grown}");

    // Queued mail is stored bytes.
    let opts = MailboxOptions {
        bytes_max: 64 << 20,
        log_delivered: false,
    };
    rt.block_on(ipc::create_mailbox(
        s,
        &common::as_user("r", "root"),
        "inbox",
        opts,
    ))
    .unwrap();
    rt.block_on(ipc::send(
        s,
        &common::as_user("r", "root"),
        None,
        vec![Outgoing {
            to: Address::parse("inbox").unwrap(),
            payload: vec![1; 5_000],
            message_id: None,
        }],
        opts,
    ))
    .unwrap();
    assert_eq!(usage(s, "r").stored.get(StorageClass::Mail), 5_000);

    // A proc's logs, as they are appended, until the proc is pruned.
    let (pid, _) = rt
        .block_on(procs::spawn(s, "r", Descriptor::native("/bin/true")))
        .unwrap();
    for n in [12_000usize, 345] {
        let appended = rt
            .block_on(tabos_kernel::logs::append(
                s,
                "r",
                &pid,
                tabos_kernel::logs::Stream::Stdout,
                tabos_store::now_us(),
                vec![b'x'; n],
                tabos_kernel::logs::Limits::default(),
            ))
            .unwrap();
        assert!(!appended.dropped);
    }
    assert_eq!(usage(s, "r").stored.get(StorageClass::Logs), 12_345);

    // Counted equals summed, class by class.
    let counted = usage(s, "r");
    rt.block_on(realms::set_quota(s, "r", quota(None))).unwrap();
    let summed = usage(s, "r");
    assert_eq!(counted.stored, summed.stored);
    rt.block_on(realms::set_quota(s, "r", quota(Some(100))))
        .unwrap();
    assert_eq!(usage(s, "r").stored, summed.stored, "recounted");

    // Its row pruned, its logs go with it.
    let p = pid.clone();
    call_in(s, "r", move |tx| {
        tx.execute(
            "DELETE FROM proc WHERE realm = $1 AND pid = $2",
            tabos_store::params!["r", p.as_str()],
        )?;
        Ok(())
    })
    .unwrap();
    assert_eq!(usage(s, "r").stored.get(StorageClass::Logs), 0);
    let left = s
        .query("SELECT count(*) FROM proc_log WHERE realm = 'r'", &[])
        .unwrap();
    assert_eq!(left.rows[0].get::<i64>(0).unwrap(), 0);
}

/// A change that would pass the storage quota is refused with the quota's
/// name and usage in the error, and leaves nothing behind; shrinking and
/// removing pass even over quota; other realms are not limited by it.
fn storage_quota_refuses_growth_and_changes_nothing(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, rt());
    let dir = TempDir::new("quota-files");
    let files = files(s, &dir);
    for r in ["r", "other"] {
        realms::create(s, r, Scheduler::Fifo).unwrap();
    }
    rt.block_on(realms::set_quota(s, "r", quota(Some(1))))
        .unwrap();
    kv::put(s, "r", "a", &vec![1u8; 600 << 10]).unwrap();
    let e = kv::put(s, "r", "b", &vec![2u8; 600 << 10]).unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    assert!(
        e.to_string()
            .contains("realm r is over its storage quota: 1.2 MiB used of 1 MiB"),
        "{e}"
    );
    assert_eq!(kv::get(s, "r", "b").unwrap(), None, "nothing changed");
    let before = usage(s, "r").stored_bytes;
    assert!(before >= 600 << 10 && before < MIB as i64, "{before}");
    // Names and files count against the same quota.
    let e = set_name(s, "r", "/big", &vec![3u8; 500 << 10]).unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    let who = common::as_user("r", "root");
    let e = rt
        .block_on(files.write(&who, "/f", 0, vec![4u8; 500 << 10], true, None))
        .unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    assert!(matches!(
        call_in(s, "r", |tx| tabos_kernel::fs::stat_tx(
            tx,
            &common::as_user("r", "root"),
            "/f"
        )),
        Err(Error::NotFound(_))
    ));
    // A sparse file counts its size.
    let e = rt
        .block_on(files.write(&who, "/sparse", 4 * MIB as i64, vec![5], true, None))
        .unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    assert_eq!(usage(s, "r").stored_bytes, before, "nothing changed");
    // Another realm is not limited by r's quota.
    kv::put(s, "other", "b", &vec![2u8; 2 * MIB / 3]).unwrap();
    kv::put(s, "other", "c", &vec![2u8; 2 * MIB / 3]).unwrap();
    // An operator lowers the quota below what is used: shrinking and
    // removing still pass, growing does not.
    rt.block_on(realms::set_quota(s, "r", quota(Some(0))))
        .unwrap();
    kv::put(s, "r", "a", &vec![1u8; 100 << 10]).unwrap();
    let e = kv::put(s, "r", "a", &vec![1u8; 200 << 10]).unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    assert!(kv::delete(s, "r", "a").unwrap());
    assert_eq!(usage(s, "r").stored_bytes, 0);
    // Without a quota, anything goes again.
    rt.block_on(realms::set_quota(s, "r", quota(None))).unwrap();
    kv::put(s, "r", "b", &vec![2u8; 2 * MIB / 3]).unwrap();
    kv::put(s, "r", "c", &vec![2u8; 2 * MIB / 3]).unwrap();
}

/// The counters kept by the triggers equal what the tables hold, after a
/// mix of creates, updates, renames and removes in every metered table.
fn counters_match_what_is_stored(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, rt());
    let dir = TempDir::new("quota-count");
    let files = files(s, &dir);
    realms::create(s, "r", Scheduler::Fifo).unwrap();
    kv::put(s, "r", "before", b"the quota was set").unwrap();
    rt.block_on(realms::set_quota(s, "r", quota(Some(100))))
        .unwrap();
    let who = common::as_user("r", "root");
    for i in 0..20 {
        kv::put(s, "r", &format!("k{}", i % 7), &vec![i as u8; 100 * i]).unwrap();
        set_name(s, "r", &format!("/n{}", i % 5), &vec![1; 50 * i]).unwrap();
        // Local, then (past 64 KiB) segments.
        rt.block_on(files.write(
            &who,
            &format!("/f{}", i % 3),
            (i * 9_000) as i64,
            vec![7; 9_000],
            true,
            None,
        ))
        .unwrap();
    }
    kv::delete(s, "r", "k3").unwrap();
    rt.block_on(files.truncate(&who, "/f1", 10, None)).unwrap();
    rt.block_on(files.unlink(&who, "/f2", None)).unwrap();
    let (root, now) = (common::as_user("r", "root"), tabos_store::now_us());
    call_in(s, "r", move |tx| {
        // A second name, a symlink, a move: names and files counted apart.
        tabos_kernel::fs::link_tx(tx, &root, "/f0", "/f0-again", now)?;
        tabos_kernel::fs::symlink_tx(tx, &root, "a/target/of/some/length", "/ln", now)?;
        tabos_kernel::fs::rename_tx(tx, &root, "/f0", "/f0-moved-further", now)?;
        tabos_kernel::fs::unlink_tx(tx, &root, "/f0-again", now)?;
        names::create(tx, &root, "/dir", Kind::Dir, &[], 0, None, None, now)?;
        names::rename(tx, &root, "/n1", "/dir/a-much-longer-name", None, now)?;
        names::remove(tx, &root, "/n2", None, None, now)
    })
    .unwrap();
    let counted = usage(s, "r").stored_bytes;
    // Without a quota the view sums the tables themselves.
    rt.block_on(realms::set_quota(s, "r", quota(None))).unwrap();
    let summed = usage(s, "r").stored_bytes;
    assert_eq!(counted, summed);
    assert!(summed > 180_000, "{summed}");
}

/// Mailbox bytes and the number of procedures have quotas of their own;
/// a procedure that writes past the storage quota rolls back, even if it
/// swallowed the error.
fn mailbox_and_procedure_quotas(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, rt());
    realms::create(s, "r", Scheduler::Fifo).unwrap();
    let q = Quota {
        mailbox_mb: Some(1),
        procedures: Some(2),
        storage_mb: Some(1),
        ..Quota::default()
    };
    rt.block_on(realms::set_quota(s, "r", q)).unwrap();
    let opts = MailboxOptions {
        bytes_max: 64 << 20,
        log_delivered: false,
    };
    let to = Address::parse("inbox").unwrap();
    rt.block_on(ipc::create_mailbox(
        s,
        &common::as_user("r", "root"),
        "inbox",
        opts,
    ))
    .unwrap();
    let send = |n: usize| {
        rt.block_on(ipc::send(
            s,
            &common::as_user("r", "root"),
            None,
            vec![Outgoing {
                to: to.clone(),
                payload: vec![9; n],
                message_id: None,
            }],
            opts,
        ))
    };
    send(700 << 10).unwrap();
    let e = send(400 << 10).unwrap_err();
    assert!(is_over(&e, "mailbox"), "{e}");
    assert_eq!(usage(s, "r").mailbox_bytes, 700 << 10);
    // Takes one message.
    let take = || {
        let got = rt
            .block_on(ipc::recv(
                s,
                &common::as_user("r", "root"),
                &to,
                Take::messages(1),
                Duration::ZERO,
                std::future::pending(),
            ))
            .unwrap();
        assert_eq!(got.messages.len(), 1);
    };
    take();
    assert_eq!(usage(s, "r").mailbox_bytes, 0);
    send(400 << 10).unwrap();
    // Queued mail is stored bytes too (its own class), so it is taken
    // before the storage quota is filled below.
    let u = usage(s, "r");
    assert_eq!(u.stored.get(StorageClass::Mail), 400 << 10);
    assert!(u.stored_bytes >= 400 << 10, "{}", u.stored_bytes);
    take();

    let p = Procedures::new(s.clone(), Sandbox::new().unwrap());
    let install = |name: &str, code: &str| {
        rt.block_on(p.install(
            &common::as_user("r", "root"),
            Install {
                name: name.into(),
                language: Language::Js,
                code: code.as_bytes().to_vec(),
                limits: Limits {
                    memory_bytes: 64 << 20,
                    timeout: Duration::from_millis(900),
                },
                read_only: false,
            },
        ))
    };
    // Puts 600 KiB per call, swallowing any error.
    install(
        "fill",
        "function main(k) { try { tabos.put(k, 'x'.repeat(600 * 1024)); } catch (e) {} \
         return 'ok'; }",
    )
    .unwrap();
    install("two", "function main() { return 'two'; }").unwrap();
    let e = install("three", "function main() { return 'three'; }").unwrap_err();
    assert!(is_over(&e, "procedures"), "{e}");
    assert_eq!(usage(s, "r").procedures, 2);
    // Reinstalling one that exists adds none.
    install("two", "function main() { return 'again'; }").unwrap();
    let call =
        |k: &str| rt.block_on(p.call(&common::as_user("r", "root"), "fill", k.as_bytes().to_vec()));
    call("a").unwrap();
    let e = call("b").unwrap_err();
    assert!(is_over(&e, "storage"), "{e}");
    assert_eq!(kv::get(s, "r", "b").unwrap(), None, "the call rolled back");
    if s.kind() == tabos_store::BackendKind::Sqlite {
        // Tenant tables count too (measured after a call that wrote).
        install("sql", "function main(q) { tabos.exec(q); return 'done'; }").unwrap_err(); // the procedures quota: two installed
        rt.block_on(p.remove(&common::as_user("r", "root"), "two"))
            .unwrap();
        install("sql", "function main(q) { tabos.exec(q); return 'done'; }").unwrap();
        let sql = |q: &str| {
            rt.block_on(p.call(&common::as_user("r", "root"), "sql", q.as_bytes().to_vec()))
        };
        sql("CREATE TABLE \"r/t\" (b BLOB)").unwrap();
        sql("INSERT INTO \"r/t\" VALUES (zeroblob(100000))").unwrap();
        let e = sql("INSERT INTO \"r/t\" VALUES (zeroblob(400000))").unwrap_err();
        assert!(is_over(&e, "storage"), "{e}");
        let used = usage(s, "r").stored_bytes;
        assert!(used > (600 << 10) + 100_000 && used < MIB as i64, "{used}");
    }
}

/// `realm rm` deletes every row of the realm in every owning module, gives
/// back its files' segments, and leaves other realms alone; it is refused
/// while the realm has a live proc.
fn removing_a_realm_removes_everything_of_it(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, rt());
    let dir = TempDir::new("quota-rm");
    let files = files(s, &dir);
    for r in ["gone", "kept"] {
        realms::create(s, r, Scheduler::Fifo).unwrap();
        kv::put(s, r, "k", b"v").unwrap();
        set_name(s, r, "/n", b"data").unwrap();
        let who = common::as_user(r, "root");
        rt.block_on(files.write(&who, "/small", 0, vec![1; 100], true, None))
            .unwrap();
        rt.block_on(files.write(&who, "/large", 0, vec![2; 300 << 10], true, None))
            .unwrap();
        rt.block_on(files.create(&who, "/par", 0o644, true, None))
            .unwrap();
        rt.block_on(files.write(&who, "/par", 0, vec![3; 40_000], false, None))
            .unwrap();
        let logged = ipc::MailboxOptions {
            bytes_max: ipc::MAILBOX_BYTES_DEFAULT,
            log_delivered: true,
        };
        rt.block_on(ipc::create_mailbox(
            s,
            &common::as_user(r, "root"),
            "box",
            logged,
        ))
        .unwrap();
        rt.block_on(ipc::send(
            s,
            &common::as_user(r, "root"),
            None,
            vec![Outgoing {
                to: Address::parse("box").unwrap(),
                payload: b"hello".to_vec(),
                message_id: None,
            }],
            logged,
        ))
        .unwrap();
        let p = Procedures::new(s.clone(), Sandbox::new().unwrap());
        rt.block_on(p.install(
            &common::as_user(r, "root"),
            Install {
                name: "p".into(),
                language: Language::Js,
                code: b"function main() { return 1; }".to_vec(),
                limits: Limits {
                    memory_bytes: 16 << 20,
                    timeout: Duration::from_millis(300),
                },
                read_only: false,
            },
        ))
        .unwrap();
    }
    let (pid, _) = rt
        .block_on(procs::spawn(s, "gone", Descriptor::native("/bin/true")))
        .unwrap();
    let e = rt
        .block_on(teardown::remove_realm(&files, "gone"))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Precondition(m) if m.contains("1 live procs")),
        "{e}"
    );
    assert_eq!(kv::get(s, "gone", "k").unwrap(), Some(b"v".to_vec()));
    rt.block_on(procs::evict(s, "gone", &pid)).unwrap();
    let free_before = files.device().unwrap().stats().free_blocks;
    let rows = rt.block_on(teardown::remove_realm(&files, "gone")).unwrap();
    assert!(rows > 10, "{rows}");
    assert!(files.device().unwrap().stats().free_blocks > free_before);
    // No table holds a row of the removed realm (parallel blocks on the
    // other partition included).
    for t in [
        "kv",
        "realm",
        "worker",
        "proc",
        "proc_event",
        "mailbox",
        "message",
        "message_dedup",
        "message_log",
        "name_entry",
        "name_session",
        "name_fence",
        "fs_user",
        "directory",
        "localized_file",
        "parallel_file",
        "fs_extent",
        "fs_reclaim",
        "procedure",
        "credential",
    ] {
        let count = |realm: &str| -> i64 {
            s.query(
                &format!("SELECT count(*) FROM {t} WHERE realm = $1"),
                params![realm],
            )
            .unwrap()
            .rows[0]
                .get(0)
                .unwrap()
        };
        assert_eq!(count("gone"), 0, "{t} still has rows of the removed realm");
    }
    assert!(matches!(
        rt.block_on(teardown::remove_realm(&files, "gone")),
        Err(Error::NotFound(_))
    ));
    // The other realm is whole.
    assert_eq!(kv::get(s, "kept", "k").unwrap(), Some(b"v".to_vec()));
    let who = common::as_user("kept", "root");
    let large = rt
        .block_on(files.read(&who, "/large", 0, 300 << 10))
        .unwrap();
    assert_eq!(large, vec![2; 300 << 10]);
    let par = rt.block_on(files.read(&who, "/par", 0, 40_000)).unwrap();
    assert_eq!(par, vec![3; 40_000]);
    // The name can be used again, from nothing.
    realms::create(s, "gone", Scheduler::Fifo).unwrap();
    assert_eq!(kv::get(s, "gone", "k").unwrap(), None);
}
