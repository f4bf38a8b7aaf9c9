//! Credentials on every call (issue 17): no, bad, revoked and expired
//! credentials are UNAUTHENTICATED; a realm's credential acting on another
//! realm, or beyond its role, is PERMISSION_DENIED; and none of these
//! changes anything.

use crate::common;

use common::{code, printed_token};
use tabos_client::{proto, Client};
use tabos_store::testing::TempDir;
use tonic::Code;

/// Creates realm `name` as the operator; returns its admin's client.
async fn realm(n: &common::Running, name: &str) -> (Client, String) {
    let mut op = n.client().await;
    let created = op.create_realm(name, proto::Scheduler::Fifo).await.unwrap();
    assert_eq!(created.admin_token.len(), 87, "tabos_<16 hex>_<64 hex>");
    (
        n.client_with(&created.admin_token).await,
        created.admin_token,
    )
}

async fn token(c: &mut Client, role: proto::Role, user: &str, ttl_ms: u64) -> proto::CreatedToken {
    c.create_token(proto::CreateTokenRequest {
        realm: String::new(),
        user: user.into(),
        role: role.into(),
        ttl_ms,
        note: "test".into(),
        scope: String::new(),
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_good_credential_are_unauthenticated_and_change_nothing() {
    let dir = TempDir::new("auth-none");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    op.name_set("default", "/kept", b"v1".to_vec(), None, None)
        .await
        .unwrap();

    for bad in [
        "",
        "garbage",
        "tabos_0123456789abcdef_0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let mut c = n.client_with(bad).await;
        let e = c.status().await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated, "{bad:?}: {e}");
        let e = c.sql("SELECT 1", vec![]).await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c
            .name_set("default", "/kept", b"v2".to_vec(), None, None)
            .await
            .unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c.fs_stat("default", "/").await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c.peek("default", "nobody", 1).await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c.proc_status("default", "p1").await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c.procedure_list("default").await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c.who_am_i().await.unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
        let e = c
            .create_realm("sneaky", proto::Scheduler::Fifo)
            .await
            .unwrap_err();
        assert_eq!(code(&e), Code::Unauthenticated);
    }
    // Nothing changed.
    assert_eq!(op.name_get("default", "/kept").await.unwrap().data, b"v1");
    let e = op.who_am_i().await.unwrap();
    assert_eq!((e.role(), e.realm.as_str()), (proto::Role::Operator, ""));
    let r = op
        .sql("SELECT count(*) FROM realm WHERE realm = 'sneaky'", vec![])
        .await
        .unwrap();
    assert_eq!(r.rows[0][0], Some(tabos_client::Value::Int(0)));
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realm_credential_acts_for_its_realm_only() {
    let dir = TempDir::new("auth-realms");
    let n = common::start(&dir, "n1").await;
    let (mut a, _) = realm(&n, "alice-co").await;
    let (mut b, _) = realm(&n, "bob-co").await;

    let me = a.who_am_i().await.unwrap();
    assert_eq!(
        (me.realm.as_str(), me.user.as_str(), me.role()),
        ("alice-co", "root", proto::Role::Admin)
    );

    // Each realm's admin works in its own realm, naming it or not.
    a.name_set("", "/a", b"mine".to_vec(), None, None)
        .await
        .unwrap();
    b.name_set("bob-co", "/secret", b"bob's".to_vec(), None, None)
        .await
        .unwrap();
    b.fs_write("", "", "/secret.txt", 0, b"bob's file".to_vec(), true)
        .await
        .unwrap();
    b.create_mailbox("", "inbox", 0, None).await.unwrap();
    b.send("", "", "inbox", b"for bob".to_vec()).await.unwrap();
    assert_eq!(a.name_get("", "/a").await.unwrap().data, b"mine");

    // Realm A's credential naming realm B: refused, whatever the service.
    let denied = |e: tabos_client::Error| {
        assert_eq!(code(&e), Code::PermissionDenied, "{e}");
        assert!(e.to_string().contains("acts for realm alice-co"), "{e}");
    };
    denied(a.name_get("bob-co", "/secret").await.unwrap_err());
    denied(
        a.name_set("bob-co", "/secret", b"owned".to_vec(), None, None)
            .await
            .unwrap_err(),
    );
    denied(a.name_readdir("bob-co", "/").await.unwrap_err());
    denied(a.fs_stat("bob-co", "/secret.txt").await.unwrap_err());
    denied(
        a.fs_read("bob-co", "", "/secret.txt", 0, 100)
            .await
            .unwrap_err(),
    );
    denied(
        a.fs_write("bob-co", "", "/secret.txt", 0, b"x".to_vec(), false)
            .await
            .unwrap_err(),
    );
    denied(a.peek("bob-co", "inbox", 10).await.unwrap_err());
    denied(a.recv("bob-co", "inbox", 10, 0).await.unwrap_err());
    denied(
        a.send("bob-co", "", "inbox", b"spam".to_vec())
            .await
            .unwrap_err(),
    );
    denied(a.proc_status("bob-co", "p1").await.unwrap_err());
    denied(a.wait_exit("bob-co", "p1").await.unwrap_err());
    denied(a.evict("bob-co", "p1").await.unwrap_err());
    denied(
        a.logs("bob-co", "p1", proto::LogStream::Stdout)
            .await
            .unwrap_err(),
    );
    denied(a.procedure_list("bob-co").await.unwrap_err());
    denied(
        a.procedure_call("bob-co", "anything", Vec::new())
            .await
            .unwrap_err(),
    );
    denied(a.list_tokens("bob-co", false).await.unwrap_err());
    let e = a
        .create_token(proto::CreateTokenRequest {
            realm: "bob-co".into(),
            role: proto::Role::Admin.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    denied(e);

    // Only operators create realms.
    let e = a
        .create_realm("carol-co", proto::Scheduler::Fifo)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    // A realm's admin reads its own realm's OS state in SQL, nobody else's.
    let realms_of = |r: tabos_client::QueryResult| -> Vec<String> {
        r.rows.iter().map(|row| common::text(&row[0])).collect()
    };
    let mine = a
        .sql("SELECT DISTINCT realm FROM name_entry", vec![])
        .await
        .unwrap();
    assert_eq!(realms_of(mine), ["alice-co"]);
    let none = a
        .sql("SELECT realm FROM message WHERE realm = 'bob-co'", vec![])
        .await
        .unwrap();
    assert!(none.rows.is_empty());
    let e = a.sql_in("bob-co", "SELECT 1", vec![], 0).await.unwrap_err();
    denied(e);
    let e = a
        .sql("SELECT token_hash FROM credential", vec![])
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    // A member may not: SQL reads past files' and names' modes.
    let member = token(&mut a, proto::Role::Member, "alice", 0).await;
    let mut m = n.client_with(&member.token).await;
    let e = m.sql("SELECT 1", vec![]).await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    // An operator sees every realm, or one as its admin does.
    let mut op = n.client().await;
    let every = op
        .sql(
            "SELECT DISTINCT realm FROM name_entry ORDER BY realm",
            vec![],
        )
        .await
        .unwrap();
    assert!(realms_of(every).len() >= 2);
    let as_bob = op
        .sql_in("bob-co", "SELECT DISTINCT realm FROM name_entry", vec![], 0)
        .await
        .unwrap();
    assert_eq!(realms_of(as_bob), ["bob-co"]);

    // Realm B is as it was: one entry, one file, one queued message.
    assert_eq!(b.name_get("", "/secret").await.unwrap().data, b"bob's");
    assert_eq!(
        b.fs_read("", "", "/secret.txt", 0, 100).await.unwrap(),
        b"bob's file"
    );
    assert_eq!(b.peek("", "inbox", 10).await.unwrap().len(), 1);
    // A realm's admin sees its own credentials only.
    let listed = a.list_tokens("", false).await.unwrap();
    assert!(listed.iter().all(|t| t.realm == "alice-co"), "{listed:?}");
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_users_revocation_and_expiry() {
    let dir = TempDir::new("auth-roles");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "team").await;
    // Writable by every user of the realm (names check modes too).
    let shared = tabos_client::names::CreateOptions {
        mode: 0o666,
        ..Default::default()
    };
    admin
        .name_create("", "/cfg", proto::NameKind::File, b"v1".to_vec(), shared)
        .await
        .unwrap();

    // A reader reads and changes nothing.
    let reader = token(&mut admin, proto::Role::Reader, "", 0).await;
    let info = reader.info.clone().unwrap();
    assert_eq!(
        (info.role(), info.user.as_str()),
        (proto::Role::Reader, "reader")
    );
    let mut r = n.client_with(&reader.token).await;
    assert_eq!(r.name_get("", "/cfg").await.unwrap().data, b"v1");
    let e = r
        .name_set("", "/cfg", b"v2".to_vec(), None, None)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    assert!(e.to_string().contains("needs member"), "{e}");

    // A member changes state but manages no credentials, and acts as its
    // own fs user only.
    let member = token(&mut admin, proto::Role::Member, "alice", 0).await;
    let mut m = n.client_with(&member.token).await;
    m.name_set("", "/cfg", b"v2".to_vec(), None, None)
        .await
        .unwrap();
    let e = m
        .create_token(proto::CreateTokenRequest {
            role: proto::Role::Reader.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let e = m.fs_readdir("", "root", "/").await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    assert!(e.to_string().contains("acts as user alice"), "{e}");
    // Files it makes are its user's, in a directory made for them (/ is
    // root's, 0755).
    let e = m
        .fs_write("", "", "/alice.txt", 0, b"hi".to_vec(), true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    admin.fs_mkdir("", "", "/home", 0o1777).await.unwrap();
    m.fs_write("", "", "/home/alice.txt", 0, b"hi".to_vec(), true)
        .await
        .unwrap();
    assert_eq!(
        m.fs_stat("", "/home/alice.txt").await.unwrap().owner,
        "alice"
    );

    // An admin cannot mint an operator.
    let e = admin
        .create_token(proto::CreateTokenRequest {
            role: proto::Role::Operator.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");

    // Revoked: unauthenticated from then on, on this node at once.
    admin
        .revoke_token(&member.info.as_ref().unwrap().id)
        .await
        .unwrap();
    let e = m.name_get("", "/cfg").await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated, "{e}");
    let listed = admin.list_tokens("", false).await.unwrap();
    let revoked = listed
        .iter()
        .find(|t| t.id == member.info.as_ref().unwrap().id)
        .unwrap();
    assert!(revoked.revoked_us.is_some());
    // Another realm's credential cannot be revoked from here (and is not
    // told apart from an unknown one).
    let (mut other, _) = realm(&n, "other").await;
    let theirs = token(&mut other, proto::Role::Member, "", 0).await;
    let e = admin
        .revoke_token(&theirs.info.as_ref().unwrap().id)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let mut t = n.client_with(&theirs.token).await;
    t.who_am_i().await.unwrap();

    // Expired: a credential of 1 ms, used after it lapsed.
    let brief = token(&mut admin, proto::Role::Member, "", 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let mut b = n.client_with(&brief.token).await;
    let e = b.name_get("", "/cfg").await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated, "{e}");

    // Bad requests change nothing and say why.
    // 9: no role has this number.
    for (role, ttl) in [(9, 0), (proto::Role::Member as i32, u64::MAX)] {
        let e = admin
            .create_token(proto::CreateTokenRequest {
                role,
                ttl_ms: ttl,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    }
    let e = admin.revoke_token("not-an-id").await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    // The table holds hashes, never tokens.
    let mut op = n.client().await;
    let rows = op
        .sql("SELECT token_hash FROM credential", vec![])
        .await
        .unwrap();
    for row in &rows.rows {
        let Some(tabos_client::Value::Text(h)) = &row[0] else {
            panic!("{row:?}")
        };
        assert_eq!(h.len(), 64);
        assert!(!h.starts_with("tabos_"));
    }
    assert_eq!(admin.name_get("", "/cfg").await.unwrap().data, b"v2");
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_survives_a_restart_and_its_revocation_too() {
    let dir = TempDir::new("auth-restart");
    let (keep, gone) = {
        let n = common::start(&dir, "n1").await;
        let (mut admin, _) = realm(&n, "r").await;
        let keep = token(&mut admin, proto::Role::Member, "", 0).await;
        let gone = token(&mut admin, proto::Role::Member, "", 0).await;
        admin
            .revoke_token(&gone.info.as_ref().unwrap().id)
            .await
            .unwrap();
        n.shut_down().await;
        (keep.token, gone.token)
    };
    let n = common::start(&dir, "n1").await;
    n.client_with(&keep).await.who_am_i().await.unwrap();
    let e = n.client_with(&gone).await.who_am_i().await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated);
    n.shut_down().await;
}

/// Names enforce owner and mode as fs does: `/` is root's 0755, a sticky
/// shared directory lets users remove only their own entries, and a
/// session is renewed, closed or used only by its opener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_enforce_owners_modes_and_session_owners() {
    use tabos_client::names::CreateOptions;
    let dir = TempDir::new("auth-names");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "team").await;
    let dir_mode = |mode| CreateOptions {
        mode,
        ..Default::default()
    };
    admin
        .name_create(
            "",
            "/shared",
            proto::NameKind::Dir,
            vec![],
            dir_mode(0o1777),
        )
        .await
        .unwrap();
    admin
        .name_create(
            "",
            "/private",
            proto::NameKind::Dir,
            vec![],
            dir_mode(0o700),
        )
        .await
        .unwrap();
    admin
        .name_set("", "/cfg", b"v1".to_vec(), None, None)
        .await
        .unwrap();
    let alice = token(&mut admin, proto::Role::Member, "alice", 0).await;
    let bob = token(&mut admin, proto::Role::Member, "bob", 0).await;
    let (mut a, mut b) = (
        n.client_with(&alice.token).await,
        n.client_with(&bob.token).await,
    );
    let denied = |e: tabos_client::Error| assert_eq!(code(&e), Code::PermissionDenied, "{e}");

    assert_eq!(a.name_get("", "/cfg").await.unwrap().data, b"v1");
    denied(
        a.name_set("", "/cfg", b"v2".to_vec(), None, None)
            .await
            .unwrap_err(),
    );
    denied(
        a.name_set("", "/top", b"x".to_vec(), None, None)
            .await
            .unwrap_err(),
    );
    denied(a.name_readdir("", "/private").await.unwrap_err());
    // In the shared sticky directory: alice's entry is alice's, whatever
    // the request claims.
    let claims_root = CreateOptions {
        owner: "root".into(),
        ..Default::default()
    };
    a.name_create(
        "",
        "/shared/a",
        proto::NameKind::File,
        b"mine".to_vec(),
        claims_root,
    )
    .await
    .unwrap();
    assert_eq!(a.name_get("", "/shared/a").await.unwrap().owner, "alice");
    denied(
        b.name_remove("", "/shared/a", None, None)
            .await
            .unwrap_err(),
    );
    denied(
        b.name_set("", "/shared/a", b"bob's".to_vec(), None, None)
            .await
            .unwrap_err(),
    );
    denied(
        b.name_rename("", "/shared/a", "/shared/b", None)
            .await
            .unwrap_err(),
    );
    b.name_set("", "/shared/b", b"bob's".to_vec(), None, None)
        .await
        .unwrap();
    denied(
        b.name_rename("", "/shared/b", "/shared/a", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(a.name_get("", "/shared/a").await.unwrap().data, b"mine");

    // Sessions are their opener's.
    let s = a
        .open_session("", "alice-s", "root", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    denied(b.renew_session("", &s.session).await.unwrap_err());
    denied(b.close_session("", &s.session).await.unwrap_err());
    let ephemeral = CreateOptions {
        session: Some(s.session.clone()),
        ..Default::default()
    };
    denied(
        b.name_create(
            "",
            "/shared/e",
            proto::NameKind::File,
            vec![],
            ephemeral.clone(),
        )
        .await
        .unwrap_err(),
    );
    a.name_create("", "/shared/e", proto::NameKind::File, vec![], ephemeral)
        .await
        .unwrap();
    a.renew_session("", &s.session).await.unwrap();
    assert_eq!(a.close_session("", &s.session).await.unwrap(), 1);
    // Root may do anything, and alice removes her own.
    admin
        .name_remove("", "/shared/b", None, None)
        .await
        .unwrap();
    a.name_remove("", "/shared/a", None, None).await.unwrap();
    n.shut_down().await;
}

/// A stored procedure's file calls act for its caller's user: it never has
/// more rights than whoever calls it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_acts_for_its_caller() {
    let dir = TempDir::new("auth-proc-user");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "team").await;
    admin
        .fs_write("", "", "/secret.txt", 0, b"root only".to_vec(), true)
        .await
        .unwrap();
    admin.fs_chmod("", "", "/secret.txt", 0o600).await.unwrap();
    admin
        .procedure_install(
            "",
            "peek",
            "js",
            b"function main() { return tabos.read('/secret.txt'); }".to_vec(),
            tabos_client::procedures::ProcedureLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        admin
            .procedure_call("", "peek", vec![])
            .await
            .unwrap()
            .result,
        b"root only"
    );
    let alice = token(&mut admin, proto::Role::Member, "alice", 0).await;
    let mut a = n.client_with(&alice.token).await;
    let e = a.procedure_call("", "peek", vec![]).await.unwrap_err();
    assert_eq!(code(&e), Code::Aborted, "{e}");
    assert!(e.to_string().contains("EACCES"), "{e}");
    n.shut_down().await;
}

/// One node serves every realm: a realm created while it runs gets a
/// worker there at once, and its admin's procs run as that realm's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_realm_is_served_by_the_running_node() {
    let dir = TempDir::new("auth-realm-procs");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "fresh").await;
    let s = admin
        .spawn(
            "",
            proto::ProcDescriptor {
                program: "/bin/sh".into(),
                args: vec!["-c".into(), "echo $TABOS_REALM".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let done = admin.wait_exit("", &s.pid).await.unwrap();
    assert_eq!((done.state().name(), done.exit_status), ("exited", Some(0)));
    let out = admin
        .logs("", &s.pid, proto::LogStream::Stdout)
        .await
        .unwrap();
    assert_eq!(out.data, b"fresh\n");
    // Another realm's admin does not see it.
    let (mut other, _) = realm(&n, "other").await;
    let e = other.proc_status("fresh", &s.pid).await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied);
    let e = other.proc_status("", &s.pid).await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    n.shut_down().await;
}

/// Quotas on live procs, cores and memory: set by an operator, checked in
/// the spawn's own transaction with an error naming quota and usage, and
/// nothing spawned past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_quotas_are_checked_at_spawn() {
    let dir = TempDir::new("auth-quota");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "q").await;
    let mut op = n.client().await;
    let set = |procs, cores, clear: Vec<&str>| proto::SetRealmRequest {
        realm: "q".into(),
        procs,
        cores,
        mem_mb: None,
        clear: clear.into_iter().map(String::from).collect(),
        ..Default::default()
    };
    let e = admin
        .set_realm(set(Some(5), None, vec![]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let info = op.set_realm(set(Some(1), Some(1), vec![])).await.unwrap();
    assert_eq!((info.quota_procs, info.quota_cores), (Some(1), Some(1)));
    let sleeper = |pid: &str, cores: i64| proto::ProcDescriptor {
        pid: pid.into(),
        program: "sleep".into(),
        args: vec!["600".into()],
        cores: Some(cores),
        ..Default::default()
    };
    admin.spawn("", sleeper("s1", 1)).await.unwrap();
    let e = admin.spawn("", sleeper("s2", 1)).await.unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert!(
        e.to_string()
            .contains("realm q is over its procs quota: 1 used of 1"),
        "{e}"
    );
    let e = admin.proc_status("", "s2").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "nothing was spawned");
    // Raise procs, keep cores at 1: now the cores quota refuses.
    op.set_realm(set(Some(10), None, vec![])).await.unwrap();
    let e = admin.spawn("", sleeper("s3", 1)).await.unwrap_err();
    assert!(e.to_string().contains("over its cores quota"), "{e}");
    // The quota, use and limit as types (issue 37, item 3).
    match e.detail().and_then(|d| d.more) {
        Some(tabos_client::fault::More::OverQuota(q)) => {
            assert_eq!((q.quota.as_str(), q.used, q.limit), ("cores", 2, 1))
        }
        other => panic!("an over-quota detail, not {other:?}"),
    }
    // Usage as the realm sees it (its own realm only).
    let seen = admin.list_realms().await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].realm.as_str(), seen[0].live_procs, seen[0].cores),
        ("q", 1, 1)
    );
    assert!(op.list_realms().await.unwrap().len() >= 2);
    // Cleared: room again.
    op.set_realm(set(None, None, vec!["cores"])).await.unwrap();
    admin.spawn("", sleeper("s4", 1)).await.unwrap();
    for pid in ["s1", "s4"] {
        admin.evict("", pid).await.unwrap();
        admin.wait_exit("", pid).await.unwrap();
    }
    let e = op.set_realm(set(Some(-1), None, vec![])).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    n.shut_down().await;
}

/// Storage and mailbox quotas over the API: the change that would pass one
/// is RESOURCE_EXHAUSTED naming quota and usage, and nothing changes; then
/// `realm rm`: operators only, refused while a proc lives, and afterwards
/// the realm's credentials are dead, nothing of it is left, and the node
/// serves the name again once it is created anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_quotas_and_realm_removal() {
    let dir = TempDir::new("auth-storage");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "sq").await;
    let mut op = n.client().await;
    let info = op
        .set_realm(proto::SetRealmRequest {
            realm: "sq".into(),
            storage_mb: Some(1),
            mailbox_mb: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (info.quota_storage_mb, info.quota_mailbox_mb),
        (Some(1), Some(1))
    );
    let chunk = vec![7u8; 600 << 10];
    admin
        .fs_write("", "", "/a", 0, chunk.clone(), true)
        .await
        .unwrap();
    let e = admin
        .fs_write("", "", "/b", 0, chunk.clone(), true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert!(
        e.to_string()
            .contains("realm sq is over its storage quota: 0.6 MiB used of 1 MiB"),
        "{e}"
    );
    let e = admin.fs_stat("", "/b").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "nothing was created");
    let e = admin
        .name_set("", "/n", chunk.clone(), None, None)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    // Queued mail is stored bytes too: room is made for it.
    op.set_realm(proto::SetRealmRequest {
        realm: "sq".into(),
        storage_mb: Some(2),
        mailbox_mb: Some(1),
        ..Default::default()
    })
    .await
    .unwrap();
    admin
        .create_mailbox("", "box", 8 << 20, None)
        .await
        .unwrap();
    admin.send("", "", "box", chunk.clone()).await.unwrap();
    let e = admin.send("", "", "box", chunk.clone()).await.unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert!(e.to_string().contains("over its mailbox quota"), "{e}");
    let seen = admin.list_realms().await.unwrap();
    assert_eq!(seen[0].mailbox_bytes, 600 << 10);
    assert!(seen[0].stored_bytes >= 600 << 10);

    // Removal.
    let e = admin.remove_realm("sq").await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let sleeper = proto::ProcDescriptor {
        pid: "s".into(),
        program: "sleep".into(),
        args: vec!["600".into()],
        ..Default::default()
    };
    admin.spawn("", sleeper.clone()).await.unwrap();
    let e = op.remove_realm("sq").await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    admin.fs_stat("", "/a").await.unwrap();
    admin.evict("", "s").await.unwrap();
    admin.wait_exit("", "s").await.unwrap();
    assert!(op.remove_realm("sq").await.unwrap() > 5);
    let e = admin.fs_stat("", "/a").await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated, "{e}");
    let e = op.remove_realm("sq").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let rows = op
        .sql(
            "SELECT (SELECT count(*) FROM directory WHERE realm = 'sq') \
             + (SELECT count(*) FROM message WHERE realm = 'sq') \
             + (SELECT count(*) FROM proc WHERE realm = 'sq') \
             + (SELECT count(*) FROM credential WHERE realm = 'sq') \
             + (SELECT count(*) FROM realm WHERE realm = 'sq')",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        rows.rows[0][0],
        Some(tabos_client::proto::value::Kind::Int(0))
    );
    // The name again, from nothing: the node serves it (the spawn runs).
    let (mut again, _) = realm(&n, "sq").await;
    let e = again.fs_stat("", "/a").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let quick = proto::ProcDescriptor {
        pid: "t".into(),
        program: "true".into(),
        ..Default::default()
    };
    again.spawn("", quick).await.unwrap();
    let done = again.wait_exit("", "t").await.unwrap();
    assert_eq!(done.exit_status, Some(0));
    n.shut_down().await;
}

fn outgoing(to: &str, payload: &[u8]) -> proto::Outgoing {
    proto::Outgoing {
        to: to.into(),
        payload: payload.to_vec(),
        message_id: String::new(),
    }
}

/// A scoped credential — made by `token create` or given to a proc at
/// spawn — sends and receives where its scope says and is refused
/// everything else, in a batch too; what it was refused changed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_credential_reaches_only_its_mailboxes() {
    use proto::batch_call::Call;
    let dir = TempDir::new("auth-scope");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "sc").await;
    for m in ["in", "out", "other"] {
        admin.create_mailbox("", m, 0, None).await.unwrap();
    }
    admin.send("", "", "in", b"hello".to_vec()).await.unwrap();
    admin
        .send("", "", "other", b"theirs".to_vec())
        .await
        .unwrap();

    // Bad scopes are refused.
    for bad in ["names:/x", "send:a/b", "send:", "recv"] {
        let e = admin
            .create_token(proto::CreateTokenRequest {
                role: proto::Role::Member.into(),
                scope: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{bad:?}: {e}");
    }
    let e = admin
        .spawn(
            "",
            proto::ProcDescriptor {
                kind: proto::ProcKind::Wasm.into(),
                program: "/nonexistent.wasm".into(),
                scope: "send:out".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        code(&e),
        Code::InvalidArgument,
        "a wasm proc is not scoped: {e}"
    );

    let made = admin
        .create_token(proto::CreateTokenRequest {
            role: proto::Role::Admin.into(),
            scope: "send:out  recv:in".into(),
            note: "scoped".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(made.info.as_ref().unwrap().scope, "send:out recv:in");
    let listed = admin.list_tokens("", false).await.unwrap();
    assert!(listed
        .iter()
        .any(|t| t.note == "scoped" && t.scope == "send:out recv:in"));
    let mut sc = n.client_with(&made.token).await;

    // Its mailboxes.
    sc.send("", "", "out", b"mine".to_vec()).await.unwrap();
    let got = sc.recv("", "in", 10, 0).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, b"hello");
    sc.mailbox("", "out").await.unwrap();
    sc.mailbox("", "in").await.unwrap();

    // Everything else, even as an admin.
    let denied = |r: Result<(), tabos_client::Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(code(&e), Code::PermissionDenied, "{what}: {e}");
    };
    denied(
        sc.send("", "", "other", b"x".to_vec()).await.map(drop),
        "send elsewhere",
    );
    denied(
        sc.send_many("", "", vec![outgoing("out", b"ok"), outgoing("in", b"no")])
            .await
            .map(drop),
        "a send with one message elsewhere",
    );
    denied(
        sc.recv("", "other", 10, 0).await.map(drop),
        "recv elsewhere",
    );
    denied(
        sc.recv("", "out", 10, 0).await.map(drop),
        "recv where it may only send",
    );
    denied(sc.peek("", "other", 10).await.map(drop), "peek elsewhere");
    denied(
        sc.mailbox("", "other").await.map(drop),
        "look at another mailbox",
    );
    denied(
        sc.create_mailbox("", "new", 0, None).await.map(drop),
        "create a mailbox",
    );
    denied(
        sc.remove_mailbox("", "in").await.map(drop),
        "remove a mailbox",
    );
    denied(sc.name_get("", "/").await.map(drop), "read the namespace");
    denied(
        sc.name_set("", "/planted", b"x".to_vec(), None, None)
            .await
            .map(drop),
        "write the namespace",
    );
    denied(sc.fs_stat("", "/").await.map(drop), "the files");
    denied(sc.sql("SELECT 1", vec![]).await.map(drop), "SQL");
    denied(sc.status().await.map(drop), "the node's status");
    denied(sc.who_am_i().await.map(drop), "the tokens service");
    denied(
        sc.create_token(proto::CreateTokenRequest {
            role: proto::Role::Admin.into(),
            ..Default::default()
        })
        .await
        .map(drop),
        "an unscoped credential of its own",
    );
    denied(sc.procedure_list("").await.map(drop), "procedures");
    denied(
        sc.spawn(
            "",
            proto::ProcDescriptor {
                program: "true".into(),
                ..Default::default()
            },
        )
        .await
        .map(drop),
        "spawn",
    );
    // In a batch, every kind of call but its own mailboxes' is refused —
    // by the kernel operation each reaches, as when it comes alone.
    let results = sc
        .batch(vec![
            Call::NamesGet(proto::NameRequest {
                path: "/".into(),
                ..Default::default()
            }),
            Call::Send(proto::SendRequest {
                messages: vec![outgoing("out", b"batched")],
                ..Default::default()
            }),
            Call::Send(proto::SendRequest {
                messages: vec![outgoing("other", b"no")],
                ..Default::default()
            }),
            Call::NamesSet(proto::SetNameRequest {
                path: "/batched".into(),
                data: b"x".to_vec(),
                ..Default::default()
            }),
            Call::NamesRemove(proto::RemoveNameRequest {
                path: "/".into(),
                ..Default::default()
            }),
            Call::ProcedureCall(proto::CallProcedureRequest {
                name: "anything".into(),
                ..Default::default()
            }),
            Call::ProcStatus(proto::PidRequest {
                pid: "p1".into(),
                ..Default::default()
            }),
            Call::FsStat(proto::FsPathRequest {
                path: "/".into(),
                ..Default::default()
            }),
            Call::FsRead(proto::FsReadRequest {
                path: "/".into(),
                len: 10,
                ..Default::default()
            }),
            Call::FsWrite(proto::FsWriteRequest {
                path: "/batched.txt".into(),
                data: b"x".to_vec(),
                ..Default::default()
            }),
            Call::Spawn(proto::SpawnRequest {
                proc: Some(proto::ProcDescriptor {
                    pid: "batched".into(),
                    program: "true".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        ])
        .await
        .unwrap();
    let codes: Vec<_> = results.iter().map(|r| r.as_ref().err().map(code)).collect();
    let mut expected = vec![Some(Code::PermissionDenied); 11];
    expected[1] = None;
    assert_eq!(codes, expected);
    let e = admin.name_get("", "/batched").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let e = admin.fs_stat("", "/batched.txt").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let e = admin.proc_status("", "batched").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");

    // Nothing it was refused happened.
    let out: Vec<_> = admin
        .recv("", "out", 10, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.payload)
        .collect();
    assert_eq!(out, [b"mine".to_vec(), b"batched".to_vec()]);
    let other = admin.recv("", "other", 10, 0).await.unwrap();
    assert_eq!(other.len(), 1, "only the admin's message");
    let in_left = admin.recv("", "in", 10, 0).await.unwrap();
    assert!(in_left.is_empty());
    let e = admin.name_get("", "/planted").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    admin.mailbox("", "in").await.unwrap();

    // A proc spawned with a scope gets a credential with that scope: it
    // prints its token (for the test to act with), then waits.
    admin
        .spawn(
            "",
            proto::ProcDescriptor {
                pid: "p1".into(),
                program: "sh".into(),
                args: vec![
                    "-c".into(),
                    r#"printf %s "$TABOS_TOKEN"; exec sleep 600"#.into(),
                ],
                scope: "recv:proc/p1 send:out".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    admin.wait_start("", "p1").await.unwrap();
    let token = printed_token(&mut admin, "", "p1").await;
    let procs = admin.list_tokens("", true).await.unwrap();
    let own = procs
        .iter()
        .find(|t| t.pid == "p1")
        .expect("p1's credential");
    assert_eq!(own.scope, "send:out recv:proc/p1");
    let mut p1 = n.client_with(&token).await.acting_for("p1");
    admin
        .send("", "", "proc/p1", b"for p1".to_vec())
        .await
        .unwrap();
    let got = p1.recv("", "proc/p1", 10, 0).await.unwrap();
    assert_eq!(got[0].payload, b"for p1");
    p1.send("", "proc/p1", "out", b"from p1".to_vec())
        .await
        .unwrap();
    denied(p1.name_get("", "/").await.map(drop), "the proc reads names");
    denied(p1.fs_stat("", "/").await.map(drop), "the proc reads files");
    denied(
        p1.spawn(
            "",
            proto::ProcDescriptor {
                program: "true".into(),
                ..Default::default()
            },
        )
        .await
        .map(drop),
        "the proc spawns",
    );
    denied(
        p1.recv("", "in", 10, 0).await.map(drop),
        "the proc takes another mailbox's messages",
    );
    admin.evict("", "p1").await.unwrap();
    admin.wait_exit("", "p1").await.unwrap();
    n.shut_down().await;
}

/// A proc's own credential is honoured by every node of the cluster (a
/// MapReduce task's proc may reach another node than its own): a node
/// that has not seen it looks it up when first shown it, and its
/// revocation — at the proc's end, or by an operator on any node — reaches
/// every node that took it. No node but the minting one is told of it
/// before (issue 35, item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procs_credential_works_on_every_node_and_ends_with_it() {
    if tabos_store::pg_cluster::find_bindir().is_none() {
        return; // no PostgreSQL server binaries here
    }
    let (pg, url) = tokio::task::spawn_blocking(|| {
        let pg = tabos_store::pg_cluster::TempCluster::start(&Default::default()).unwrap();
        let url = pg.create_database("proccred").unwrap();
        (pg, url)
    })
    .await
    .unwrap();
    let config = tabos_store::Config::postgres(url).with_partitions(2);
    let (d1, d2) = (TempDir::new("pc-1"), TempDir::new("pc-2"));
    let n1 = common::start_on(&d1, "n1", &config, Default::default()).await;
    let n2 = common::start_on(&d2, "n2", &config, Default::default()).await;
    let mut op = n1.client().await;
    op.create_realm("loc", proto::Scheduler::Fifo)
        .await
        .unwrap();
    for pid in ["p1", "p2"] {
        op.spawn("loc", common::token_printer(pid)).await.unwrap();
    }
    // Whichever node runs a proc (placed or stolen) is `runs`, the other
    // `not`.
    let nodes_of = |started: &proto::ProcStatus| match started.worker.split('.').next() {
        Some("n1") => (&n1, &n2),
        Some("n2") => (&n2, &n1),
        _ => panic!("run by {}", started.worker),
    };
    let started = op.wait_start("loc", "p1").await.unwrap();
    let (runs, not) = nodes_of(&started);
    let token = printed_token(&mut op, "loc", "p1").await;
    let me = runs.client_with(&token).await.who_am_i().await.unwrap();
    assert_eq!((me.realm.as_str(), me.pid.as_str()), ("loc", "p1"));
    // The other node takes it the first time it is shown it.
    let mut at_not = not.client_with(&token).await;
    let me = at_not.who_am_i().await.unwrap();
    assert_eq!(me.pid, "p1");
    op.evict("loc", "p1").await.unwrap();
    op.wait_exit("loc", "p1").await.unwrap();
    let e = runs.client_with(&token).await.who_am_i().await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated, "ended with its proc: {e}");
    // The other node is told on the credential's channel (after the
    // commit, so it is waited for).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while at_not.who_am_i().await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the other node still takes it"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Revoked by an operator through the node that does not run it: the
    // node that minted it and follows it is told.
    let started = op.wait_start("loc", "p2").await.unwrap();
    let (runs, not) = nodes_of(&started);
    let token = printed_token(&mut op, "loc", "p2").await;
    let mut at_runs = runs.client_with(&token).await;
    let me = at_runs.who_am_i().await.unwrap();
    let mut op_not = not.client().await;
    op_not.revoke_token(&me.id).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while at_runs.who_am_i().await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the minting node still takes a revoked credential"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let e = not.client_with(&token).await.who_am_i().await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated, "{e}");
    op.evict("loc", "p2").await.unwrap();
    op.wait_exit("loc", "p2").await.unwrap();
    n1.shut_down().await;
    n2.shut_down().await;
    drop(pg);
}

/// A realm's retention (issue 43, item 2): set and cleared by an operator
/// only, shown with the realm, refused out of range; once set, the node
/// removes the realm's ended procs as they grow older than it, and keeps
/// its live ones and every other realm's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realms_retention_is_enforced_by_the_node() {
    let dir = TempDir::new("auth-retention");
    let n = common::start(&dir, "n1").await;
    let (mut admin, _) = realm(&n, "brief").await;
    let (mut other, _) = realm(&n, "kept").await;
    let mut op = n.client().await;
    let set = |retention_s, clear: Vec<&str>| proto::SetRealmRequest {
        realm: "brief".into(),
        retention_s,
        clear: clear.into_iter().map(String::from).collect(),
        ..Default::default()
    };
    let e = admin.set_realm(set(Some(1), vec![])).await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    for bad in [0, -5, i64::MAX] {
        let e = op.set_realm(set(Some(bad), vec![])).await.unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{bad}: {e}");
    }
    let e = op
        .set_realm(set(Some(60), vec!["retention"]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert_eq!(admin.list_realms().await.unwrap()[0].retention_s, None);
    let proc = |pid: &str, program: &str, args: &[&str]| proto::ProcDescriptor {
        pid: pid.into(),
        program: program.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    admin
        .spawn("", proc("live", "sleep", &["600"]))
        .await
        .unwrap();
    for c in [&mut admin, &mut other] {
        for pid in ["t1", "t2"] {
            c.spawn("", proc(pid, "true", &[])).await.unwrap();
            c.wait_exit("", pid).await.unwrap();
        }
    }
    let info = op.set_realm(set(Some(1), vec![])).await.unwrap();
    assert_eq!(info.retention_s, Some(1));
    // The reaper looks every second: the ended procs go within a few.
    let pids = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            // A realm's SQL sees its own procs only.
            let rows = c
                .sql("SELECT pid FROM proc ORDER BY pid", vec![])
                .await
                .unwrap();
            rows.rows
                .iter()
                .map(|r| common::text(&r[0]))
                .collect::<Vec<_>>()
        }
    };
    let mut left = Vec::new();
    for _ in 0..300 {
        left = pids(&mut admin).await;
        if left == ["live"] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        left,
        ["live"],
        "the ended procs are gone, the live one stays"
    );
    assert_eq!(pids(&mut other).await, ["t1", "t2"]);
    // Cleared: shown as none, and a proc that ends now stays.
    let info = op.set_realm(set(None, vec!["retention"])).await.unwrap();
    assert_eq!(info.retention_s, None);
    admin.evict("", "live").await.unwrap();
    admin.wait_exit("", "live").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert_eq!(pids(&mut admin).await, ["live"]);
    n.shut_down().await;
}
