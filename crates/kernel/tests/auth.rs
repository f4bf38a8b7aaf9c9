//! Credentials in the kernel, on SQLite and on PostgreSQL: created (for an
//! existing realm only), loaded as live, looked up one by one, listed,
//! revoked (by id, within a realm, and a proc's by pid), expired; the
//! table keeps hashes, never tokens.

use tabos_kernel::auth::{self, Role, Spec, TokenHash};
use tabos_kernel::ids::Pid;
use tabos_kernel::sched::Scheduler;
use tabos_kernel::{realms, Error};

mod common;
use common::Backend;

both!(credentials_live_and_die, quotas_and_usage);

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

    let op = rt
        .block_on(auth::create(s, Spec::operator("test")))
        .unwrap();
    let member = rt
        .block_on(auth::create(s, Spec::realm("r", "alice", Role::Member)))
        .unwrap();
    let proc_spec = Spec {
        pid: Some(Pid::new("p1").unwrap()),
        ..Spec::realm("r", "alice", Role::Member)
    };
    let for_proc = rt.block_on(auth::create(s, proc_spec)).unwrap();
    let brief = Spec {
        expires_us: Some(tabos_store::now_us() - 1),
        ..Spec::realm("r", "bob", Role::Reader)
    };
    let expired = rt.block_on(auth::create(s, brief)).unwrap();
    // A realm that does not exist has no credentials.
    let e = rt
        .block_on(auth::create(s, Spec::realm("nope", "x", Role::Admin)))
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");

    let now = tabos_store::now_us();
    let live = auth::load(s, now).unwrap();
    let hashes: Vec<TokenHash> = live.iter().map(|(h, _)| *h).collect();
    for m in [&op, &member, &for_proc] {
        assert!(hashes.contains(&TokenHash::of(&m.token)));
    }
    assert!(!hashes.contains(&expired.hash), "expired");
    let (_, p) = auth::load_one(s, &member.id, now).unwrap().unwrap();
    assert_eq!(
        (p.realm.as_str(), p.user.as_str(), p.role),
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
    let live: Vec<_> = auth::load(s, tabos_store::now_us())
        .unwrap()
        .into_iter()
        .map(|(_, p)| p.id)
        .collect();
    assert_eq!(live, vec![op.id.clone()]);
}
