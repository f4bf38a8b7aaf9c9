//! Elastic realms (issue 19, item 2) on an in-process elastic node: the
//! realm managers ask for cores as demand changes, the cluster manager
//! grants them, the node's workers follow, and an LC realm takes cores back
//! from a BE realm by evicting BE procs. Every decision is a row with its
//! reason. (Waits here look at the allocation until it changes, bounded:
//! the managers decide on their own time.)

use crate::common;

use std::time::Duration;

use common::code;
use tabos_client::proto;
use tabos_store::testing::TempDir;
use tonic::Code;

async fn elastic_node(dir: &TempDir, cores: i64) -> common::Running {
    let config = tabos_store::Config::sqlite(dir.path().join("db")).with_partitions(2);
    let n = common::start_custom(dir, "e1", &config, Default::default(), |s| {
        s.elastic = true;
        s.cores = cores;
    })
    .await;
    // Quick managers: a look every 20 ms, idle after 300 ms.
    let mut op = n.client().await;
    op.alloc_settings(
        [("tick_ms".to_string(), 20), ("idle_ms".to_string(), 300)]
            .into_iter()
            .collect(),
    )
    .await
    .unwrap();
    n
}

fn policy(class: impl Into<i32>, min: i64, max: i64) -> proto::ElasticPolicy {
    proto::ElasticPolicy {
        class: class.into(),
        min_cores: min,
        max_cores: max,
    }
}

fn sleeper(pid: &str, class: proto::ProcClass) -> proto::ProcDescriptor {
    proto::ProcDescriptor {
        pid: pid.into(),
        program: "sleep".into(),
        args: vec!["600".into()],
        class: class.into(),
        cores: Some(1),
        ..Default::default()
    }
}

/// Waits for `pid` to start, failing — with its realm's allocation — after
/// [`START_WAIT`] rather than hanging the run.
async fn started(c: &mut tabos_client::Client, realm: &str, pid: &str) {
    match tokio::time::timeout(START_WAIT, c.wait_start(realm, pid)).await {
        Ok(status) => {
            status.unwrap();
        }
        Err(_) => {
            let a = c.allocation(realm, 1_000).await;
            panic!(
                "{realm}/{pid} did not start within {START_WAIT:?}; its realm's allocation: {a:#?}"
            );
        }
    }
}

/// Longest a test waits for a proc to start.
const START_WAIT: Duration = Duration::from_secs(60);

fn granted(a: &proto::RealmAllocation) -> i64 {
    a.grants.iter().map(|g| g.cores).sum()
}

/// Waits (at most 20 s) until `realm`'s allocation satisfies `done`.
async fn until(
    c: &mut tabos_client::Client,
    realm: &str,
    done: impl Fn(&proto::RealmAllocation) -> bool,
) -> proto::RealmAllocation {
    let mut last = None;
    for _ in 0..1_000 {
        let a = c.allocation(realm, 1_000).await.unwrap();
        if done(&a) {
            return a;
        }
        last = Some(a);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{realm}'s allocation never got there: {last:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_realm_grows_with_demand_and_shrinks_when_idle() {
    let dir = TempDir::new("elastic-grow");
    let n = elastic_node(&dir, 4).await;
    let mut op = n.client().await;
    let created = op
        .create_elastic_realm(
            "mr",
            proto::Scheduler::Fifo,
            policy(proto::ProcClass::Lc, 1, 4),
        )
        .await
        .unwrap();
    // Its minimum at first.
    until(&mut op, "mr", |a| granted(a) == 1).await;
    // Three one-core LC procs run at once only if it grows to three cores.
    for i in 0..3 {
        op.spawn("mr", sleeper(&format!("p{i}"), proto::ProcClass::Lc))
            .await
            .unwrap();
    }
    for i in 0..3 {
        started(&mut op, "mr", &format!("p{i}")).await;
    }
    let a = until(&mut op, "mr", |a| granted(a) == 3).await;
    assert_eq!(a.want_cores, 3);
    assert_eq!(a.live_cores, 3);
    assert!(a.elastic);
    // Each decision is a row with its reason: the RMGR's want, the σMGR's
    // grant on the node.
    let rmgr = a
        .decisions
        .iter()
        .find(|d| d.manager() == proto::AllocManager::Rmgr && d.cores_after == 3)
        .unwrap_or_else(|| panic!("{:#?}", a.decisions));
    assert!(rmgr.reason.contains("demand 3 cores"), "{}", rmgr.reason);
    let smgr = a
        .decisions
        .iter()
        .find(|d| {
            d.manager() == proto::AllocManager::Smgr && d.cores_after == 3 && d.node_id == "e1"
        })
        .unwrap_or_else(|| panic!("{:#?}", a.decisions));
    assert!(smgr.reason.starts_with("grow: "), "{}", smgr.reason);
    // A member of the realm sees its allocation, and may not change it.
    let mut member = n.client_with(&created.admin_token).await;
    assert_eq!(granted(&member.allocation("", 10).await.unwrap()), 3);
    let e = member
        .set_elastic("mr", policy(proto::ProcClass::Lc, 1, 8))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");

    // Idle: back to its minimum once its demand stayed low for idle_ms.
    for i in 0..3 {
        op.evict("mr", &format!("p{i}")).await.unwrap();
        op.wait_exit("mr", &format!("p{i}")).await.unwrap();
    }
    let a = until(&mut op, "mr", |a| granted(a) == 1).await;
    let shrink = a
        .decisions
        .iter()
        .rev()
        .find(|d| d.manager() == proto::AllocManager::Smgr)
        .unwrap();
    assert!(shrink.reason.starts_with("shrink: "), "{}", shrink.reason);

    // Its policy changes while running: a higher minimum is granted.
    let changed = op
        .set_elastic("mr", policy(proto::ProcClass::Lc, 2, 4))
        .await
        .unwrap();
    assert_eq!(changed.policy.unwrap().min_cores, 2);
    until(&mut op, "mr", |a| granted(a) == 2).await;

    // Bad input changes nothing.
    let e = op
        .set_elastic("mr", policy(proto::ProcClass::Lc, 3, 2))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    let e = op.set_elastic("mr", policy(9, 1, 2)).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    let e = op
        .set_elastic("default", policy(proto::ProcClass::Be, 1, 2))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let e = op
        .create_elastic_realm(
            "mr",
            proto::Scheduler::Fifo,
            policy(proto::ProcClass::Be, 1, 2),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::AlreadyExists, "{e}");
    let bad = [("tick_ms".to_string(), 0)].into_iter().collect();
    let e = op.alloc_settings(bad).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    let bad = [("nope".to_string(), 1)].into_iter().collect();
    let e = op.alloc_settings(bad).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    let s = op.alloc_settings(Default::default()).await.unwrap();
    assert_eq!(s.settings["tick_ms"], 20, "unchanged");
    assert!(
        s.leaders
            .iter()
            .any(|l| l.name == "smgr" && l.holder == "e1"),
        "{:?}",
        s.leaders
    );
    assert!(s.leaders.iter().any(|l| l.name == "rmgr/mr"));
    // Removing the realm forgets its policy and grants.
    op.remove_realm("mr").await.unwrap();
    let gone = op.allocation("mr", 10).await.unwrap();
    assert!(!gone.elastic && gone.grants.is_empty());
    drop((op, member));
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lc_realm_takes_cores_back_from_a_be_realm() {
    let dir = TempDir::new("elastic-lc");
    let n = elastic_node(&dir, 4).await;
    let mut op = n.client().await;
    op.create_elastic_realm(
        "batch",
        proto::Scheduler::Fifo,
        policy(proto::ProcClass::Be, 0, 4),
    )
    .await
    .unwrap();
    op.create_elastic_realm(
        "web",
        proto::Scheduler::Fifo,
        policy(proto::ProcClass::Lc, 0, 4),
    )
    .await
    .unwrap();
    // The BE realm fills the node.
    for i in 0..4 {
        op.spawn("batch", sleeper(&format!("b{i}"), proto::ProcClass::Be))
            .await
            .unwrap();
    }
    for i in 0..4 {
        started(&mut op, "batch", &format!("b{i}")).await;
    }
    until(&mut op, "batch", |a| granted(a) == 4).await;
    // The LC realm's procs start: it took two cores back.
    for i in 0..2 {
        op.spawn("web", sleeper(&format!("w{i}"), proto::ProcClass::Lc))
            .await
            .unwrap();
    }
    for i in 0..2 {
        started(&mut op, "web", &format!("w{i}")).await;
    }
    let batch = until(&mut op, "batch", |a| granted(a) == 2).await;
    assert!(
        batch
            .decisions
            .iter()
            .any(|d| d.reason.contains("taken back for LC realm web")),
        "{:#?}",
        batch.decisions
    );
    assert_eq!(granted(&op.allocation("web", 10).await.unwrap()), 2);
    // The newest BE procs were evicted; the oldest run on.
    let mut states = Vec::new();
    for i in 0..4 {
        let s = op.proc_status("batch", &format!("b{i}")).await.unwrap();
        states.push(s.state().name());
    }
    assert_eq!(states, ["running", "running", "evicted", "evicted"]);
    // The cluster's decisions, all realms.
    let all = op.decisions("", 1_000).await.unwrap();
    assert!(all.iter().any(|d| d.realm == "web") && all.iter().any(|d| d.realm == "batch"));
    drop(op);
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_grant_still_starts_procs_of_no_cores() {
    // The deadlock `tabos-bench elastic` found: a BE realm at its one
    // granted core runs a reducer (one core) that waits for its job's
    // coordinator (no cores). The grant counts declared cores, so the
    // coordinator takes none of it and must start.
    let dir = TempDir::new("elastic-zero");
    let n = elastic_node(&dir, 4).await;
    let mut op = n.client().await;
    op.create_elastic_realm(
        "batch",
        proto::Scheduler::Fifo,
        policy(proto::ProcClass::Be, 1, 1),
    )
    .await
    .unwrap();
    until(&mut op, "batch", |a| granted(a) == 1).await;
    op.spawn("batch", sleeper("reducer", proto::ProcClass::Be))
        .await
        .unwrap();
    started(&mut op, "batch", "reducer").await;
    let coordinator = proto::ProcDescriptor {
        cores: Some(0),
        ..sleeper("coordinator", proto::ProcClass::Be)
    };
    op.spawn("batch", coordinator).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        op.wait_start("batch", "coordinator"),
    )
    .await
    .expect("the coordinator of no cores never started")
    .unwrap();
    // A second one-core proc still waits for a core.
    op.spawn("batch", sleeper("reducer2", proto::ProcClass::Be))
        .await
        .unwrap();
    let waited = tokio::time::timeout(
        Duration::from_millis(500),
        op.wait_start("batch", "reducer2"),
    )
    .await;
    assert!(waited.is_err(), "a full grant admitted a one-core proc");
    assert_eq!(granted(&op.allocation("batch", 10).await.unwrap()), 1);
    for pid in ["reducer", "coordinator", "reducer2"] {
        op.evict("batch", pid).await.unwrap();
    }
    drop(op);
    n.shut_down().await;
}
