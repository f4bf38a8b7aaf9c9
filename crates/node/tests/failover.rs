//! The database fails over under a running cluster (issue 19, item 4): two
//! in-process nodes on a PostgreSQL primary with a synchronous standby,
//! given both in a multi-host URL. During a send/recv storm and a proc's
//! WaitExit, the primary is killed and the standby promoted: the waiters
//! wait through it, every acknowledged message arrives exactly once, and
//! any request that could not complete said UNAVAILABLE.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::code;
use tabos_client::proto;
use tabos_store::pg_cluster::{find_bindir, ClusterOptions, ReplicatedCluster};
use tabos_store::testing::TempDir;
use tonic::Code;

/// Messages in the storm.
const MESSAGES: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_and_messages_survive_a_failover() {
    if find_bindir().is_none() {
        return; // no PostgreSQL server binaries here
    }
    let rc = tokio::task::spawn_blocking(|| {
        let rc = ReplicatedCluster::start(&ClusterOptions::default()).unwrap();
        let url = rc.create_database("failover").unwrap();
        (rc, url)
    })
    .await
    .unwrap();
    let (rc, url) = rc;
    let config = tabos_store::Config::postgres(url).with_partitions(2);
    let (d1, d2) = (TempDir::new("fo-1"), TempDir::new("fo-2"));
    let n1 = common::start_on(&d1, "n1", &config, Default::default()).await;
    let n2 = common::start_on(&d2, "n2", &config, Default::default()).await;
    let mut c1 = n1.client().await;
    c1.create_mailbox("", "inbox", 0, None).await.unwrap();

    // A proc whose exit is waited for across the failover.
    let sleeper = proto::ProcDescriptor {
        pid: "sleeper".into(),
        program: "sleep".into(),
        args: vec!["3".into()],
        ..Default::default()
    };
    c1.spawn("", sleeper).await.unwrap();
    let mut w = n2.client().await;
    let exit_waiter = tokio::spawn(async move { w.wait_exit("", "sleeper").await });

    // The receiver, through n2: every message once.
    let mut r = n2.client().await;
    let receiver = tokio::spawn(async move {
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        let mut unavailable = 0;
        let t = std::time::Instant::now();
        while got.len() < MESSAGES && t.elapsed() < Duration::from_secs(120) {
            match r.recv("", "inbox", 64, 10_000).await {
                Ok(ms) => {
                    for m in ms {
                        *got.entry(String::from_utf8(m.payload).unwrap())
                            .or_default() += 1;
                    }
                }
                Err(e) => {
                    assert_eq!(code(&e), Code::Unavailable, "{e}");
                    unavailable += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        (got, unavailable)
    });

    // The sender, through n1: each message with its idempotency key, sent
    // again (the same key) while the answer is UNAVAILABLE.
    let mut s = n1.client().await;
    let sender = tokio::spawn(async move {
        let mut unavailable = 0;
        for i in 0..MESSAGES {
            let m = proto::Outgoing {
                to: "inbox".into(),
                payload: format!("m{i}").into_bytes(),
                message_id: format!("id{i}"),
            };
            loop {
                match s.send_many("", "", vec![m.clone()]).await {
                    Ok(_) => break,
                    Err(e) => {
                        assert_eq!(code(&e), Code::Unavailable, "{e}");
                        unavailable += 1;
                        assert!(unavailable < 1_000, "never acknowledged");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        unavailable
    });

    tokio::time::sleep(Duration::from_millis(700)).await;
    let rc = tokio::task::spawn_blocking(move || {
        rc.fail_over(Duration::from_millis(500)).unwrap();
        rc
    })
    .await
    .unwrap();

    let sent_unavailable = sender.await.unwrap();
    let (got, recv_unavailable) = receiver.await.unwrap();
    eprintln!("UNAVAILABLE answers: {sent_unavailable} to sends, {recv_unavailable} to receives");
    assert_eq!(got.len(), MESSAGES, "every acknowledged message arrived");
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    // The waiter did not hang, and saw the proc's real end.
    let done = tokio::time::timeout(Duration::from_secs(60), exit_waiter)
        .await
        .expect("the exit waiter hangs")
        .unwrap()
        .unwrap();
    assert_eq!((done.state().name(), done.exit_status), ("exited", Some(0)));
    drop((c1,));
    n1.shut_down().await;
    n2.shut_down().await;
    drop(rc);
}

/// How many times a proc was queued again or stolen by another worker.
async fn moves(c: &tabos_client::Client) -> Option<tabos_client::Value> {
    c.clone()
        .sql(
            "SELECT count(*) FROM proc_event WHERE event IN ('requeue', 'steal')",
            vec![],
        )
        .await
        .unwrap()
        .rows[0][0]
        .clone()
}

/// A database outage every node sees (the primary killed, the standby
/// promoted `outage` later: 5 s and 20 s, as real failovers take), shorter
/// than the nodes' grace: no node is declared lost, no proc is failed or
/// queued again, every worker stays up, and the procs run on to their own
/// ends.
async fn an_outage_fails_nothing(outage: Duration) {
    if find_bindir().is_none() {
        return; // no PostgreSQL server binaries here
    }
    let rc = tokio::task::spawn_blocking(|| {
        let rc = ReplicatedCluster::start(&ClusterOptions::default()).unwrap();
        let url = rc.create_database("outage").unwrap();
        (rc, url)
    })
    .await
    .unwrap();
    let (rc, url) = rc;
    let config = tabos_store::Config::postgres(url).with_partitions(2);
    let (d1, d2) = (TempDir::new("out-1"), TempDir::new("out-2"));
    let n1 = common::start_on(&d1, "n1", &config, Default::default()).await;
    let n2 = common::start_on(&d2, "n2", &config, Default::default()).await;
    let mut c = n1.client().await;
    // Procs that outlive the outage, on both nodes: one restartable.
    let secs = (outage.as_secs() + 15).to_string();
    for (pid, restartable) in [("p1", false), ("p2", true), ("p3", false), ("p4", true)] {
        let d = proto::ProcDescriptor {
            pid: pid.into(),
            program: "sleep".into(),
            args: vec![secs.clone()],
            restartable,
            ..Default::default()
        };
        c.spawn("", d).await.unwrap();
    }
    for pid in ["p1", "p2", "p3", "p4"] {
        c.wait_start("", pid).await.unwrap();
    }
    let placed: Vec<String> = {
        let mut v = Vec::new();
        for pid in ["p1", "p2", "p3", "p4"] {
            v.push(c.proc_status("", pid).await.unwrap().worker);
        }
        v
    };
    // Placing them may have moved one already (a worker steals a proc
    // that waits in another's queue): that is scheduling, not the outage.
    let moved_before = moves(&c).await;
    let rc = tokio::task::spawn_blocking(move || {
        rc.fail_over(outage).unwrap();
        rc
    })
    .await
    .unwrap();
    // Through the other node too: each proc runs to its own end, where it
    // was, and ends as it did.
    let mut c2 = n2.client().await;
    for (pid, worker) in ["p1", "p2", "p3", "p4"].iter().zip(&placed) {
        let done = loop {
            match c2.wait_exit("", pid).await {
                Ok(done) => break done,
                Err(e) => {
                    assert_eq!(code(&e), Code::Unavailable, "{e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        assert_eq!(
            (done.state().name(), done.exit_status, &done.worker),
            ("exited", Some(0), worker),
            "{pid} ran on where it was to its own end: {done:?}"
        );
    }
    // The outage queued nothing again and moved nothing.
    assert_eq!(moves(&c2).await, moved_before);
    for n in c2.list_nodes().await.unwrap() {
        assert_eq!(n.state().name(), "up", "{n:?}");
        assert_eq!((n.lost_us, n.note.as_str()), (0, ""), "never lost: {n:?}");
    }
    drop((c, c2));
    n1.shut_down().await;
    n2.shut_down().await;
    drop(rc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_5_s_fails_nothing() {
    an_outage_fails_nothing(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_20_s_fails_nothing() {
    an_outage_fails_nothing(Duration::from_secs(20)).await;
}
