//! Credentials in the kernel, on SQLite and on PostgreSQL: created (for an
//! existing realm only), loaded as live, looked up one by one, listed,
//! revoked (by id, within a realm, and a proc's by pid), expired; the
//! table keeps hashes, never tokens.

use tabos_kernel::auth::{self, Role, Spec, TokenHash};
use tabos_kernel::ids::Pid;
use tabos_kernel::sched::Scheduler;
use tabos_kernel::{realms, Error};

use crate::common;
use common::Backend;

both!(
    credentials_live_and_die,
    quotas_and_usage,
    a_credential_is_never_more_than_its_maker
);

/// Quotas set and read back with the realm's usage, on both backends.
fn quotas_and_usage(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, common::rt());
    realms::create(s, "r", Scheduler::Fifo).unwrap();
    realms::create(s, "t", Scheduler::Fifo).unwrap();
    let q = realms::Quota {
        procs: Some(3),
        cores: None,
        mem_mb: Some(512),
        ..realms::Quota::default()
    };
    rt.block_on(realms::set_quota(s, "r", q)).unwrap();
    let one = realms::usage(s, Some("r")).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].live_procs, one[0].quota), (0, q));
    assert_eq!(realms::usage(s, None).unwrap().len(), 2);
    let bad = realms::Quota {
        procs: Some(-1),
        ..q
    };
    assert!(matches!(
        rt.block_on(realms::set_quota(s, "r", bad)),
        Err(Error::Invalid(_))
    ));
}

fn credentials_live_and_die(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, common::rt());
    realms::create(s, "r", Scheduler::Fifo).unwrap();

    let mut broadcast = s.subscribe(auth::CHANGES_CHANNEL);
    let op = rt
        .block_on(auth::create(s, Spec::operator("test")))
        .unwrap()
        .0;
    let member = rt
        .block_on(auth::create(s, Spec::realm("r", "alice", Role::Member)))
        .unwrap()
        .0;
    let proc_spec = Spec {
        pid: Some(Pid::new("p1").unwrap()),
        ..Spec::realm("r", "alice", Role::Member)
    };
    let for_proc = rt.block_on(auth::create(s, proc_spec)).unwrap().0;
    let mut its_own = s.subscribe(&auth::proc_channel(&for_proc.id));
    let brief = Spec {
        expires_us: Some(tabos_store::now_us() - 1),
        ..Spec::realm("r", "bob", Role::Reader)
    };
    let expired = rt.block_on(auth::create(s, brief)).unwrap().0;
    // A realm that does not exist has no credentials.
    let e = rt
        .block_on(auth::create(s, Spec::realm("nope", "x", Role::Admin)))
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");

    // Every node is told of credentials that are not procs', none of a
    // proc's (issue 35, item 4).
    // The next `n` payloads (PostgreSQL delivers after the commit, so
    // they are waited for); notifications are in commit order, so one not
    // sent shows as the next one in its place.
    let told = |sub: &mut tabos_store::Subscription, n: usize| -> Vec<String> {
        rt.block_on(async {
            let mut ids = Vec::new();
            for _ in 0..n {
                let next = tokio::time::timeout(std::time::Duration::from_secs(10), sub.recv());
                ids.push(next.await.expect("told within 10 s").unwrap().payload);
            }
            ids
        })
    };
    let ids_of =
        |ms: &[&auth::Minted]| -> Vec<String> { ms.iter().map(|m| m.id.to_string()).collect() };
    assert_eq!(told(&mut broadcast, 3), ids_of(&[&op, &member, &expired]));

    let now = tabos_store::now_us();
    let live = auth::load(s, now).unwrap();
    let hashes: Vec<TokenHash> = live.iter().map(|(h, _)| *h).collect();
    for m in [&op, &member] {
        assert!(hashes.contains(&TokenHash::of(&m.token)));
    }
    assert!(!hashes.contains(&expired.hash), "expired");
    assert!(
        !hashes.contains(&for_proc.hash),
        "a proc's credential is looked up when shown, not loaded"
    );
    let (h, p) = auth::load_one(s, &for_proc.id, now).unwrap().unwrap();
    assert_eq!((h, p.pid().map(Pid::as_str)), (for_proc.hash, Some("p1")));
    let (_, p) = auth::load_one(s, &member.id, now).unwrap().unwrap();
    assert_eq!(
        (p.realm(), p.user(), p.role()),
        ("r", "alice", Role::Member)
    );
    assert!(auth::load_one(s, &expired.id, now).unwrap().is_none());

    // Listing: the realm's, procs' only when asked, never a token.
    let listed = auth::list(s, Some("r"), false).unwrap();
    assert_eq!(listed.len(), 2, "member and expired, not the proc's");
    assert_eq!(auth::list(s, Some("r"), true).unwrap().len(), 3);
    let rows = s.query("SELECT token_hash FROM credential", &[]).unwrap();
    for r in rows.iter() {
        let h: String = r.get(0).unwrap();
        assert!(!h.starts_with(auth::TOKEN_PREFIX));
    }

    // Revoking: not across realms, and once for good.
    let e = rt
        .block_on(auth::revoke(s, &member.id, Some("other")))
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    rt.block_on(auth::revoke(s, &member.id, Some("r"))).unwrap();
    assert!(auth::load_one(s, &member.id, now).unwrap().is_none());
    let ids = rt
        .block_on(auth::revoke_pid(s, "r", &Pid::new("p1").unwrap()))
        .unwrap();
    assert_eq!(ids, vec![for_proc.id.clone()]);
    // The member's revocation went to every node, the proc's only to the
    // nodes following it.
    rt.block_on(auth::revoke(s, &expired.id, None)).unwrap();
    assert_eq!(told(&mut broadcast, 2), ids_of(&[&member, &expired]));
    assert_eq!(told(&mut its_own, 1), ids_of(&[&for_proc]));
    let live: Vec<_> = auth::load(s, tabos_store::now_us())
        .unwrap()
        .into_iter()
        .map(|(_, p)| p.id().clone())
        .collect();
    assert_eq!(live, vec![op.id.clone()]);
}

/// What a caller may grant, revoke and list (issue 37): never more than
/// itself — its realm, its role — and an operator credential only by an
/// operator; another realm's credential is not found to an admin.
fn a_credential_is_never_more_than_its_maker(b: Backend) {
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, common::rt());
    realms::create(s, "r", Scheduler::Fifo).unwrap();
    realms::create(s, "q", Scheduler::Fifo).unwrap();
    let make = |spec: Spec| rt.block_on(auth::create(s, spec)).unwrap();
    let (_, admin) = make(Spec::realm("r", "root", Role::Admin));
    let (_, member) = make(Spec::realm("r", "alice", Role::Member));
    let (other, _) = make(Spec::realm("q", "bob", Role::Member));
    let admin = admin.act("", "", "r").unwrap();
    let member = member.act("", "", "r").unwrap();
    let denied = |r: tabos_kernel::Result<_>| match r {
        Err(Error::Denied(_)) => {}
        Err(e) => panic!("not denied: {e}"),
        Ok(_) => panic!("granted"),
    };
    denied(
        rt.block_on(auth::create_for(s, &admin, Spec::operator("x")))
            .map(|_| ()),
    );
    denied(
        rt.block_on(auth::create_for(
            s,
            &admin,
            Spec::realm("q", "x", Role::Reader),
        ))
        .map(|_| ()),
    );
    denied(
        rt.block_on(auth::create_for(
            s,
            &member,
            Spec::realm("r", "x", Role::Reader),
        ))
        .map(|_| ()),
    );
    denied(
        rt.block_on(auth::list_for(s, &member, false, false))
            .map(|_| ()),
    );
    let (made, p) = rt
        .block_on(auth::create_for(
            s,
            &admin,
            Spec::realm("r", "carol", Role::Member),
        ))
        .unwrap();
    assert_eq!((p.realm(), p.role()), ("r", Role::Member));
    // An admin sees its realm's only, whatever it asks.
    let seen: Vec<_> = rt
        .block_on(auth::list_for(s, &admin, true, false))
        .unwrap()
        .into_iter()
        .map(|i| i.principal.realm().to_string())
        .collect();
    assert!(seen.len() >= 3 && seen.iter().all(|r| r == "r"), "{seen:?}");
    let e = rt
        .block_on(auth::revoke_for(s, &admin, &other.id))
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    rt.block_on(auth::revoke_for(s, &admin, &made.id)).unwrap();
}
