//! Elastic realms' rows (kernel::alloc), on SQLite and on PostgreSQL: the
//! managers' leases and their fencing, wants and grants written with their
//! decisions, the invariants checked at the writing end, and a removed
//! realm forgotten.

use tabos_kernel::alloc::{self, Change, Policy, Want};
use tabos_kernel::nodes::{self, Registration, CLUSTER_PARTITION};
use tabos_kernel::procs::Class;
use tabos_kernel::Error;
use tabos_store::Store;

use crate::common;
use common::{rt, Backend};

fn run<T: Send + 'static>(
    s: &Store,
    f: impl FnMut(&mut dyn tabos_store::Tx) -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    rt().block_on(s.run(CLUSTER_PARTITION, f))
}

fn elastic_node(id: &str, cores: i64) -> Registration {
    Registration {
        node_id: id.into(),
        address: String::new(),
        cores,
        mem_mb: 1024,
        labels: Default::default(),
        block_store: String::new(),
        elastic: true,
    }
}

fn leases_fence_deposed_leaders(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    let lease = 1_000_000;
    // a leads; b is a standby until a's lease lapses.
    let a = run(&s, move |tx| alloc::campaign_tx(tx, "smgr", "a", 0, lease)).unwrap();
    let a = a.expect("a free lease is taken");
    assert_eq!(a.epoch, 1);
    let b0 = run(&s, move |tx| alloc::campaign_tx(tx, "smgr", "b", 10, lease)).unwrap();
    assert_eq!(b0, None, "held");
    // a renews (same epoch); then lapses, and b takes over (epoch 2).
    let a2 = run(&s, move |tx| alloc::campaign_tx(tx, "smgr", "a", 20, lease)).unwrap();
    assert_eq!(a2.unwrap().epoch, 1);
    let b1 = run(&s, move |tx| {
        alloc::campaign_tx(tx, "smgr", "b", 20 + lease, lease)
    })
    .unwrap()
    .unwrap();
    assert_eq!(b1.epoch, 2);
    // The deposed a writes nothing.
    let a_old = a.clone();
    let e = run(&s, move |tx| alloc::apply_tx(tx, &a_old, &[], 30)).unwrap_err();
    assert!(
        matches!(e, Error::StaleEpoch { current, given, .. } if current != given),
        "{e}"
    );
    run(&s, move |tx| alloc::check_lead_tx(tx, &b1)).unwrap();
    // A clean stop resigns at once.
    run(&s, |tx| alloc::resign_all_tx(tx, "b")).unwrap();
    let a3 = run(&s, move |tx| alloc::campaign_tx(tx, "smgr", "a", 40, lease)).unwrap();
    assert_eq!(a3.unwrap().epoch, 3);
}

fn grants_and_wants_are_rows_with_reasons(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    let r = rt();
    let terms = nodes::LeaseTerms {
        lease_us: 60_000_000,
        grace_us: 120_000_000,
    };
    r.block_on(nodes::register(&s, &elastic_node("n1", 4), 1, terms))
        .unwrap();
    let policy = Policy {
        class: Class::Be,
        min_cores: 1,
        max_cores: 8,
    };
    r.block_on(alloc::set_policy(&s, "mr", policy, true))
        .unwrap();
    let e = r
        .block_on(alloc::set_policy(&s, "mr", policy, true))
        .unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    let e = r
        .block_on(alloc::set_policy(&s, "nope", policy, false))
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    let lead = run(&s, |tx| {
        alloc::campaign_tx(tx, "rmgr/mr", "n1", 0, i64::MAX / 4)
    })
    .unwrap()
    .unwrap();
    let want = Want {
        cores: 3,
        reason: "demand 3".into(),
    };
    let l2 = lead.clone();
    run(&s, move |tx| alloc::set_want_tx(tx, &l2, "mr", &want, 5)).unwrap();
    let mr = r.block_on(alloc::get(&s, "mr")).unwrap().unwrap();
    assert_eq!((mr.want_cores, mr.want_reason.as_str()), (3, "demand 3"));

    let smgr = run(&s, |tx| {
        alloc::campaign_tx(tx, "smgr", "n1", 0, i64::MAX / 4)
    })
    .unwrap()
    .unwrap();
    let grow = vec![Change {
        node_id: "n1".into(),
        realm: "mr".into(),
        from: 0,
        to: 3,
        reason: "grow: demand 3".into(),
    }];
    let (l, g) = (smgr.clone(), grow.clone());
    run(&s, move |tx| alloc::apply_tx(tx, &l, &g, 6)).unwrap();
    // A change planned from a grant that moved meanwhile is refused, and
    // so is one that would put a node over its cores; neither writes.
    let (l, g) = (smgr.clone(), grow.clone());
    let e = run(&s, move |tx| alloc::apply_tx(tx, &l, &g, 7)).unwrap_err();
    assert!(matches!(e, Error::Precondition(_)), "{e}");
    let over = vec![Change {
        to: 5,
        from: 3,
        ..grow[0].clone()
    }];
    let l = smgr.clone();
    let e = run(&s, move |tx| alloc::apply_tx(tx, &l, &over, 8)).unwrap_err();
    assert!(matches!(e, Error::Precondition(_)), "{e}");
    let grants = r.block_on(alloc::grants_of_node(&s, "n1")).unwrap();
    assert_eq!((grants.len(), grants[0].cores), (1, 3));

    // The history: the RMGR's want, then the σMGR's grant, with reasons.
    let h = r.block_on(alloc::history(&s, Some("mr"), 10)).unwrap();
    let seen: Vec<(&str, &str, i64, i64, &str)> = h
        .iter()
        .map(|d| {
            (
                d.manager.as_str(),
                d.node_id.as_str(),
                d.cores_before,
                d.cores_after,
                d.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("rmgr", "", 1, 3, "demand 3"),
            ("smgr", "n1", 0, 3, "grow: demand 3")
        ]
    );
    // The planner's view: the elastic node, its grant, the realm.
    let v = run(&s, alloc::view_tx).unwrap();
    assert_eq!(v.pool.len(), 1);
    assert_eq!(v.grants.len(), 1);
    assert_eq!(v.realms[0].realm, "mr");

    // Settings: checked, stored, read back.
    let set = r.block_on(alloc::set_setting(&s, "idle_ms", 50)).unwrap();
    assert_eq!(set.idle_ms, 50);
    assert!(r.block_on(alloc::set_setting(&s, "idle_ms", -1)).is_err());
    assert_eq!(r.block_on(alloc::settings(&s)).unwrap().idle_ms, 50);

    // Forgetting the realm drops its policy, grants and lease.
    run(&s, |tx| alloc::forget_tx(tx, "mr")).unwrap();
    assert!(r.block_on(alloc::get(&s, "mr")).unwrap().is_none());
    assert!(r.block_on(alloc::grants(&s)).unwrap().is_empty());
    let e = run(&s, move |tx| alloc::check_lead_tx(tx, &lead)).unwrap_err();
    assert!(
        matches!(e, Error::StaleEpoch { current, given, .. } if current != given),
        "{e}"
    );
}

both!(
    leases_fence_deposed_leaders,
    grants_and_wants_are_rows_with_reasons
);
