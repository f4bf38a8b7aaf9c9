//! Node leases (kernel::nodes, issue 35), on SQLite and on PostgreSQL:
//! leases written and judged on the database's clock, each node by its own
//! lease; no judging by a leader that has not been reaching the database
//! for that long; procs given back only past a node's grace and a margin,
//! once; and a lost node that renews again told what happened.

use tabos_kernel::ids::NodeId;
use tabos_kernel::nodes::{self, LeaseTerms, Registration, CLUSTER_PARTITION};
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

fn node(id: &str) -> Registration {
    Registration {
        node_id: id.into(),
        address: String::new(),
        cores: 2,
        mem_mb: 1024,
        labels: Default::default(),
        block_store: String::new(),
        elastic: false,
    }
}

const S: i64 = 1_000_000;

fn leases_are_judged_by_the_database_clock_and_each_nodes_own(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    // a: a short lease (a heartbeat of 1/3 s); slow: a long one.
    let short = LeaseTerms {
        lease_us: S,
        grace_us: 4 * S,
    };
    let long = LeaseTerms {
        lease_us: 10 * S,
        grace_us: 20 * S,
    };
    let t0 = run(&s, |tx| Ok(tx.clock_us()?)).unwrap();
    rt().block_on(nodes::register(&s, &node("a"), 7, short))
        .unwrap();
    rt().block_on(nodes::register(&s, &node("slow"), 8, long))
        .unwrap();
    let lost_at = |now: i64, healthy_since: i64| {
        run(&s, move |tx| nodes::declare_lost_tx(tx, now, healthy_since)).unwrap()
    };
    // A leader just back from an outage (healthy for less than a's lease)
    // judges no one, however lapsed a's lease looks.
    assert!(lost_at(t0 + 3 * S, t0 + 3 * S - S / 2).is_empty());
    // Healthy long enough: a is lost; slow, judged by its own lease, not.
    assert_eq!(lost_at(t0 + 3 * S, t0), ["a"]);
    assert!(lost_at(t0 + 4 * S, t0).is_empty(), "once");
    let listed = nodes::list(&s, None).unwrap();
    let a = listed.iter().find(|n| n.node_id == "a").unwrap();
    assert_eq!(a.state, nodes::NodeState::Lost);
    assert!(a.lost_us.is_some() && a.given_back_us.is_none());
    // Procs are given back only past a's grace and the margin, once.
    let due_at = |now: i64| run(&s, move |tx| nodes::due_give_back_tx(tx, now, t0)).unwrap();
    let margin = nodes::GIVE_BACK_MARGIN_LEASES * S;
    assert!(due_at(t0 + 4 * S).is_empty(), "within its grace");
    assert_eq!(due_at(t0 + 6 * S + margin), ["a"]);
    assert!(due_at(t0 + 7 * S + margin).is_empty(), "once");
    // a renews: it learns it was lost and its procs given back, and its
    // row says so; then it is up again. Each beat carries what a measured.
    let half = nodes::Measured {
        busy_cores: 0.5,
        mem_used_bytes: Some(3 << 20),
        disk_used_bytes: Some(5 << 20),
    };
    let idle = nodes::Measured::cores(0.0);
    let beat = run(&s, move |tx| nodes::heartbeat_tx(tx, "a", 7, half, short)).unwrap();
    let back = beat.returned.expect("it had been declared lost");
    assert!(back.given_back);
    assert!(beat.now_us >= t0);
    let beat = run(&s, move |tx| nodes::heartbeat_tx(tx, "a", 7, half, short)).unwrap();
    assert_eq!(beat.returned, None, "told once");
    let listed = nodes::list(&s, None).unwrap();
    let a = listed.iter().find(|n| n.node_id == "a").unwrap();
    assert_eq!(a.state, nodes::NodeState::Up);
    assert!(a.note.contains("given back"), "{}", a.note);
    assert_eq!(
        (a.busy_cores, a.mem_used_bytes, a.disk_used_bytes),
        (0.5, Some(3 << 20), Some(5 << 20))
    );
    // Another incarnation's heartbeat, and bad terms, are refused.
    let e = run(&s, move |tx| nodes::heartbeat_tx(tx, "a", 99, idle, short)).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    let bad = LeaseTerms {
        lease_us: 2 * S,
        grace_us: S,
    };
    let e = run(&s, move |tx| nodes::heartbeat_tx(tx, "a", 7, idle, bad)).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    // A node lost and back before its grace kept its procs.
    let t1 = run(&s, |tx| Ok(tx.clock_us()?)).unwrap();
    assert_eq!(lost_at(t1 + 3 * S, t0), ["a"]);
    let beat = run(&s, move |tx| nodes::heartbeat_tx(tx, "a", 7, half, short)).unwrap();
    assert_eq!(beat.returned.map(|r| r.given_back), Some(false), "{beat:?}");
}

both!(
    leases_are_judged_by_the_database_clock_and_each_nodes_own,
    the_cluster_is_steered_by_operators_only,
);

/// The cluster's calls ask their caller (issue 37): a realm's admin may
/// not create, set or remove realms, remove or drain nodes, or set
/// elastic policies, and sees only its own realm; an operator may.
fn the_cluster_is_steered_by_operators_only(b: Backend) {
    use tabos_kernel::auth::{self, Role, Spec};
    use tabos_kernel::{alloc, cluster, procs::Class, sched::Scheduler};
    let Some(f) = b.open() else { return };
    let (s, rt) = (&f.store, rt());
    let op = common::as_user("default", "root");
    let (_, p) = rt
        .block_on(cluster::create_realm(s, &op, "r", Scheduler::Fifo, None))
        .unwrap();
    assert_eq!((p.realm(), p.role()), ("r", Role::Admin));
    rt.block_on(cluster::create_realm(s, &op, "q", Scheduler::Fifo, None))
        .unwrap();
    let (_, admin) = rt
        .block_on(auth::create(s, Spec::realm("r", "root", Role::Admin)))
        .unwrap();
    let admin = admin.act("", "", "r").unwrap();
    let denied = |r: tabos_kernel::Result<()>| match r {
        Err(Error::Denied(_)) => {}
        other => panic!("not denied: {other:?}"),
    };
    let policy = alloc::Policy {
        class: Class::Be,
        min_cores: 0,
        max_cores: 1,
    };
    denied(
        rt.block_on(cluster::create_realm(s, &admin, "x", Scheduler::Fifo, None))
            .map(|_| ()),
    );
    denied(
        rt.block_on(cluster::set_realm(s, &admin, "r", Default::default()))
            .map(|_| ()),
    );
    denied(rt.block_on(cluster::remove_node(s, &admin, &NodeId::new("n1").unwrap())));
    denied(
        rt.block_on(cluster::drain_node(
            s,
            &admin,
            &NodeId::new("n1").unwrap(),
            true,
        ))
        .map(|_| ()),
    );
    denied(rt.block_on(cluster::set_elastic(s, &admin, policy)));
    let mine: Vec<_> = rt
        .block_on(cluster::realms(s, &admin))
        .unwrap()
        .into_iter()
        .map(|u| u.realm)
        .collect();
    assert_eq!(mine, ["r"]);
    let all = rt.block_on(cluster::realms(s, &op)).unwrap();
    assert!(all.iter().any(|u| u.realm == "q"), "{all:?}");
    // A change naming what cannot be cleared changes nothing.
    let three = tabos_kernel::realms::Quota {
        procs: Some(3),
        ..Default::default()
    };
    let bad = cluster::RealmChange {
        set: three,
        clear: vec!["nope".into()],
        ..Default::default()
    };
    let e = rt
        .block_on(cluster::set_realm(s, &op, "r", bad))
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let good = cluster::RealmChange {
        set: three,
        ..Default::default()
    };
    let u = rt.block_on(cluster::set_realm(s, &op, "r", good)).unwrap();
    assert_eq!(u.quota.procs, Some(3));
}
