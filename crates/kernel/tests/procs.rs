//! Procs and schedulers, on SQLite and on PostgreSQL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tabos_kernel::ids::{Pid, WorkerId};
use tabos_kernel::procs::{self, Admission, Class, Descriptor, State};
use tabos_kernel::sched::{self, Scheduler, WorkerSpec};
use tabos_kernel::{auth, realms, Error};
use tabos_store::Store;

use crate::common;
use common::{rt, Backend};

fn worker(id: &str, node: &str, cores: i64) -> WorkerSpec {
    WorkerSpec {
        worker_id: WorkerId::new(id).unwrap(),
        node_id: node.to_string(),
        cores,
        mem_mb: 1024,
    }
}

fn named(pid: &str) -> Descriptor {
    Descriptor {
        pid: Some(Pid::new(pid).unwrap()),
        ..Descriptor::native("/bin/true")
    }
}

/// Admits every BE proc (the LC tests do not care).
const ANY: Admission = Admission::measured(0.0, f64::MAX);

fn unused(store: &Store, realm: &str) -> HashMap<String, i64> {
    store
        .query(
            "SELECT worker_id, unused_capacity FROM worker WHERE realm = $1",
            tabos_store::params![realm],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect()
}

fn w(s: &str) -> Option<WorkerId> {
    Some(WorkerId::new(s).unwrap())
}

/// The three schedulers differ exactly where the paper says.
fn schedulers_choose_as_the_paper_says(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        for (realm, sch) in [
            ("fifo", Scheduler::Fifo),
            ("loc", Scheduler::Locality),
            ("least", Scheduler::LeastLoaded),
        ] {
            realms::create(s, realm, sch).unwrap();
            procs::register_worker(s, realm, &worker("w1", "n1", 2)).unwrap();
            procs::register_worker(s, realm, &worker("w2", "n2", 4)).unwrap();
        }
        // FIFO: the first worker with room, until it is full.
        let (_, a) = procs::spawn(s, "fifo", named("a")).await.unwrap();
        let (_, b) = procs::spawn(s, "fifo", named("b")).await.unwrap();
        let (_, c) = procs::spawn(s, "fifo", named("c")).await.unwrap();
        assert_eq!((a, b, c), (w("w1"), w("w1"), w("w2")));
        // Least-loaded: the worker with the most unused capacity.
        let (_, a) = procs::spawn(s, "least", named("a")).await.unwrap();
        assert_eq!(a, w("w2"));
        // Locality: only the home node; deferred when it is full.
        let at_n1 = |pid: &str| Descriptor {
            home_node: Some("n1".into()),
            ..named(pid)
        };
        let (_, a) = procs::spawn(s, "loc", at_n1("a")).await.unwrap();
        let (_, b) = procs::spawn(s, "loc", at_n1("b")).await.unwrap();
        let (_, c) = procs::spawn(s, "loc", at_n1("c")).await.unwrap();
        assert_eq!((a, b, c), (w("w1"), w("w1"), None), "c waits for n1");
        assert_eq!(unused(s, "loc")["w2"], 4, "n2 stays free");
        // The exit of `a` is the transaction that assigns `c`.
        let a = Pid::new("a").unwrap();
        procs::claim(s, "loc", &WorkerId::new("w1").unwrap(), 10, ANY)
            .await
            .unwrap();
        procs::started(s, "loc", &a).await.unwrap();
        procs::exited(s, "loc", &a, State::Exited, Some(0), None)
            .await
            .unwrap();
        let c = procs::get(s, "loc", &Pid::new("c").unwrap()).unwrap();
        assert_eq!(c.worker, w("w1"));
        assert_eq!(c.state, State::Spawned);
        assert_eq!(unused(s, "loc")["w1"], 0);
        // Once the home node is lost, procs for it go wherever there is
        // room: a deferred one is placed on n2 by the transaction that
        // declares n1 lost, and so is a new spawn for n1.
        let d = Descriptor {
            restartable: true,
            ..at_n1("d")
        };
        let (_, d_at) = procs::spawn(s, "loc", d).await.unwrap();
        assert_eq!(d_at, None, "d waits for n1 while n1 is up");
        let p = tabos_kernel::realm_partition("loc", s.partitions());
        let now = tabos_store::now_us();
        let expired = s
            .submit(p, move |tx| procs::node_lost_tx(tx, "loc", "n1", now))
            .await
            .unwrap();
        assert_eq!(expired.workers, [WorkerId::new("w1").unwrap()]);
        let d = procs::get(s, "loc", &Pid::new("d").unwrap()).unwrap();
        assert_eq!(
            (d.state, d.worker),
            (State::Spawned, w("w2")),
            "placed off the lost home"
        );
        let (_, e_at) = procs::spawn(s, "loc", at_n1("e")).await.unwrap();
        assert_eq!(e_at, w("w2"));
    });
}

fn lifecycle_and_waits(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        // Spawned before any worker exists: deferred.
        let (pid, placed) = procs::spawn(&s, "r", Descriptor::native("/bin/echo"))
            .await
            .unwrap();
        assert_eq!(placed, None);
        let waiter = {
            let (s, pid) = (s.clone(), pid.clone());
            tokio::spawn(async move { procs::wait_exit(&s, "r", &pid).await })
        };
        let starter = {
            let (s, pid) = (s.clone(), pid.clone());
            tokio::spawn(async move { procs::wait_start(&s, "r", &pid).await })
        };
        // A worker registers: its registration assigns the deferred proc.
        let assigned = {
            let s = s.clone();
            tokio::task::spawn_blocking(move || {
                procs::register_worker(&s, "r", &worker("w", "n", 1))
            })
            .await
            .unwrap()
            .unwrap()
        };
        assert_eq!(
            assigned,
            vec![(pid.to_string(), WorkerId::new("w").unwrap())]
        );
        let wid = WorkerId::new("w").unwrap();
        let claimed = procs::claim(&s, "r", &wid, 10, ANY).await.unwrap().procs;
        assert_eq!(claimed.len(), 1);
        assert!(
            procs::claim(&s, "r", &wid, 10, ANY)
                .await
                .unwrap()
                .procs
                .is_empty(),
            "claimed once"
        );
        procs::started(&s, "r", &pid).await.unwrap();
        assert_eq!(starter.await.unwrap().unwrap().state, State::Running);
        procs::exited(&s, "r", &pid, State::Exited, Some(7), None)
            .await
            .unwrap();
        let info = waiter.await.unwrap().unwrap();
        assert_eq!((info.state, info.exit_status), (State::Exited, Some(7)));
        // A second exit is refused; the capacity was returned exactly once.
        assert!(procs::exited(&s, "r", &pid, State::Exited, Some(0), None)
            .await
            .is_err());
        assert_eq!(unused(&s, "r")["w"], 1);
        // Provenance and the ps view.
        let events = s
            .query(
                "SELECT event FROM proc_event WHERE realm = 'r' AND pid = $1 ORDER BY seq",
                tabos_store::params![pid.as_str()],
            )
            .unwrap();
        let events: Vec<String> = events.iter().map(|r| r.get(0).unwrap()).collect();
        assert_eq!(events, ["spawn", "assign", "claim", "start", "exited"]);
        let ps = s
            .query("SELECT pid, state FROM ps WHERE realm = 'r'", &[])
            .unwrap();
        assert_eq!(ps.len(), 1);
    });
}

fn eviction(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || procs::register_worker(&s2, "r", &worker("w", "n", 1)))
            .await
            .unwrap()
            .unwrap();
        let (running, _) = procs::spawn(&s, "r", named("running")).await.unwrap();
        let (deferred, placed) = procs::spawn(&s, "r", named("deferred")).await.unwrap();
        assert_eq!(placed, None);
        // A deferred proc is evicted at once.
        procs::evict(&s, "r", &deferred).await.unwrap();
        assert_eq!(
            procs::wait_exit(&s, "r", &deferred).await.unwrap().state,
            State::Evicted
        );
        // A placed one is asked; its procd then records the eviction.
        let waiter = {
            let (s, pid) = (s.clone(), running.clone());
            tokio::spawn(async move { procs::wait_evict(&s, "r", &pid).await })
        };
        procs::evict(&s, "r", &running).await.unwrap();
        assert!(waiter.await.unwrap().unwrap().evict_requested);
        procs::exited(
            &s,
            "r",
            &running,
            State::Evicted,
            None,
            Some("SIGTERM".into()),
        )
        .await
        .unwrap();
        assert_eq!(unused(&s, "r")["w"], 1);
    });
}

fn bad_descriptors_write_nothing(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        procs::spawn(&s, "r", named("dup")).await.unwrap();
        let before = s.query("SELECT count(*) FROM proc", &[]).unwrap().rows[0]
            .get::<i64>(0)
            .unwrap();
        let cases: Vec<(&str, Descriptor, &str)> = vec![
            (
                "r",
                Descriptor {
                    cores: 0,
                    ..named("x1")
                },
                "cores",
            ),
            (
                "r",
                Descriptor {
                    cores: -3,
                    ..named("x2")
                },
                "cores",
            ),
            (
                "r",
                Descriptor {
                    cores: 1 << 40,
                    ..named("x3")
                },
                "cores",
            ),
            (
                "r",
                Descriptor {
                    mem_mb: -1,
                    ..named("x4")
                },
                "mem_mb",
            ),
            (
                "r",
                Descriptor {
                    program: String::new(),
                    ..named("x5")
                },
                "program",
            ),
            (
                "r",
                Descriptor {
                    parent: Some(Pid::new("ghost").unwrap()),
                    ..named("x6")
                },
                "parent",
            ),
            ("r", named("dup"), "already exists"),
            ("nowhere", named("x7"), "unknown realm"),
            ("bad/realm", named("x8"), "realm name"),
            (
                "r",
                Descriptor {
                    env: vec![("A=B".into(), "1".into())],
                    ..named("x10")
                },
                "'='",
            ),
        ];
        for (realm, d, expect) in cases {
            let e = procs::spawn(&s, realm, d).await.unwrap_err();
            assert!(
                e.to_string().contains(expect),
                "expected {expect:?} in: {e}"
            );
        }
        let after = s.query("SELECT count(*) FROM proc", &[]).unwrap().rows[0]
            .get::<i64>(0)
            .unwrap();
        assert_eq!(before, after, "nothing written");
        // A pid that escapes cannot even be made, so no descriptor has one.
        let e = Pid::new("../x").unwrap_err();
        assert!(
            matches!(e, Error::Invalid(_)) && e.to_string().contains("pid"),
            "{e}"
        );
        // A burst with one bad descriptor writes none of them.
        let e = procs::spawn_burst(&s, "r", vec![named("ok1"), named("dup")])
            .await
            .unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
        assert!(procs::get(&s, "r", &Pid::new("ok1").unwrap()).is_err());
        // Bad workers.
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            assert!(procs::register_worker(&s2, "r", &worker("w", "n", 0)).is_err());
            assert!(procs::register_worker(&s2, "nowhere", &worker("w", "n", 1)).is_err());
        })
        .await
        .unwrap();
    });
}

/// Many concurrent spawners and two nodes claiming and exiting procs at
/// random: every proc is claimed exactly once, capacity never goes negative
/// (a CHECK constraint would abort the transaction) and all of it comes back.
fn no_proc_runs_twice_and_capacity_is_conserved(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    let procs_total: usize = std::env::var("TABOS_STRESS_PROCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::LeastLoaded).unwrap();
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            procs::register_worker(&s2, "r", &worker("a0", "node-a", 3)).unwrap();
            procs::register_worker(&s2, "r", &worker("b0", "node-b", 2)).unwrap();
        })
        .await
        .unwrap();
        let spawners = 8;
        let mut tasks = Vec::new();
        for t in 0..spawners {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..procs_total / spawners {
                    // Mostly LC procs of one or two cores; every fifth BE.
                    let d = Descriptor {
                        cores: 1 + ((t + i) % 2) as i64,
                        class: if (t + i) % 5 == 0 { Class::Be } else { Class::Lc },
                        ..named(&format!("p{t}-{i}"))
                    };
                    procs::spawn(&s, "r", d).await.unwrap();
                }
            }));
        }
        let exited = Arc::new(AtomicUsize::new(0));
        let all_done = Arc::new(tokio::sync::Notify::new());
        let mut nodes = Vec::new();
        for wid in ["a0", "b0"] {
            let (s, exited, all_done) = (s.clone(), exited.clone(), all_done.clone());
            nodes.push(tokio::spawn(async move {
                let wid = WorkerId::new(wid).unwrap();
                let mut sub = s.subscribe(&procs::worker_channel("r", &wid));
                let mut seed = wid.as_str().len() as u64 + 17;
                while exited.load(Ordering::SeqCst) < procs_total {
                    let mut claimed = procs::claim(&s, "r", &wid, 4, ANY).await.unwrap().procs;
                    // Now and then also steal from the other node at once.
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    if seed >> 61 == 0 {
                        claimed.extend(procs::steal(&s, "r", &wid, ANY, 0).await.unwrap().procs);
                    }
                    if claimed.is_empty() {
                        // Woken by the next assignment to this worker, or by
                        // the last exit anywhere.
                        let done = all_done.notified();
                        if exited.load(Ordering::SeqCst) >= procs_total {
                            break;
                        }
                        tokio::select! {
                            _ = sub.recv() => {}
                            _ = done => {}
                        }
                        continue;
                    }
                    for p in claimed {
                        procs::started(&s, "r", &p.pid).await.unwrap();
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                        let state = if seed >> 62 == 0 { State::Failed } else { State::Exited };
                        procs::exited(&s, "r", &p.pid, state, Some(0), None).await.unwrap();
                        if exited.fetch_add(1, Ordering::SeqCst) + 1 == procs_total {
                            all_done.notify_waiters();
                        }
                    }
                }
            }));
        }
        // Join as a set, so that a task that fails fails the test at once
        // instead of leaving the others waiting for it.
        let mut all = tokio::task::JoinSet::new();
        for t in tasks.into_iter().chain(nodes) {
            all.spawn(t);
        }
        while let Some(r) = all.join_next().await {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    all.abort_all();
                    panic!("a spawner or node task panicked: {e}");
                }
                Err(e) => {
                    all.abort_all();
                    panic!("join failed: {e}");
                }
            }
        }
        let claims = s
            .query(
                "SELECT pid, count(*) FROM proc_event WHERE realm = 'r' AND event IN ('claim', 'steal') \
                 GROUP BY pid HAVING count(*) > 1",
                &[],
            )
            .unwrap();
        assert!(claims.is_empty(), "claimed twice: {:?}", claims.rows);
        let live = s
            .query("SELECT count(*) FROM proc WHERE realm = 'r' AND state NOT IN ('exited', 'failed')", &[])
            .unwrap();
        assert_eq!(live.rows[0].get::<i64>(0).unwrap(), 0);
        let u = unused(&s, "r");
        assert_eq!((u["a0"], u["b0"]), (3, 2), "all capacity returned");
    });
}

both!(
    schedulers_choose_as_the_paper_says,
    lifecycle_and_waits,
    eviction,
    bad_descriptors_write_nothing,
    no_proc_runs_twice_and_capacity_is_conserved,
);

/// An eviction requested before a proc started is said by its start's
/// transaction (its worker had nothing to signal then); the end of a proc
/// that ran is decided in its end's transaction: `evicted` if an eviction
/// was requested, else what its worker saw — and a worker's end that is
/// not "ran to its end" is recorded as given.
fn the_start_and_the_end_read_the_eviction(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || procs::register_worker(&s2, "r", &worker("w", "n", 4)))
            .await
            .unwrap()
            .unwrap();
        let wid = WorkerId::new("w").unwrap();
        let mut pids = Vec::new();
        for name in ["early", "plain", "oom", "given"] {
            pids.push(procs::spawn(&s, "r", named(name)).await.unwrap().0);
        }
        let claimed = procs::claim(&s, "r", &wid, 10, ANY).await.unwrap().procs;
        assert_eq!(claimed.len(), 4);
        let [early, plain, oom, given] = &pids[..] else {
            unreachable!()
        };
        procs::evict(&s, "r", early).await.unwrap();
        assert!(
            procs::started(&s, "r", early).await.unwrap(),
            "evicted before"
        );
        for pid in [plain, oom, given] {
            assert!(!procs::started(&s, "r", pid).await.unwrap());
        }
        procs::evict(&s, "r", given).await.unwrap();
        let ran = procs::Spent {
            ran: true,
            ..procs::Spent::default()
        };
        let cases = [
            (early, State::Exited, None, ran, State::Evicted, None),
            (plain, State::Exited, None, ran, State::Exited, None),
            (
                oom,
                State::Failed,
                Some("memory"),
                ran,
                State::Failed,
                Some("memory"),
            ),
            (
                given,
                State::Failed,
                Some("lost"),
                procs::Spent::default(),
                State::Failed,
                Some("lost"),
            ),
        ];
        for (pid, seen, error, spent, recorded, kept) in cases {
            let ended = procs::exited_and_claim(
                &s,
                "r",
                pid,
                seen,
                Some(0),
                error.map(String::from),
                spent,
                &wid,
                8,
                ANY,
            )
            .await
            .unwrap();
            assert_eq!(ended.state, Some(recorded), "{pid}");
            let info = procs::get(&s, "r", pid).unwrap();
            assert_eq!(
                (info.state, info.error.as_deref()),
                (recorded, kept),
                "{pid}"
            );
        }
        // Ended already: a second end is not this copy's, and changes nothing.
        let again =
            procs::exited_and_claim(&s, "r", plain, State::Failed, None, None, ran, &wid, 8, ANY)
                .await
                .unwrap();
        assert_eq!(again.state, None);
        assert_eq!(procs::get(&s, "r", plain).unwrap().state, State::Exited);
    });
}
both!(the_start_and_the_end_read_the_eviction);

/// A node declared lost: its worker is marked down and its unclaimed procs
/// placed elsewhere at once; once its grace has passed its procs are given
/// back — failed (waiters woken) or, if restartable, placed again on a live
/// worker — and should it return, its procd is told to stop its copies.
fn lapsed_workers_fail_or_requeue_their_procs(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            procs::register_worker(&s2, "r", &worker("a", "node-a", 3)).unwrap();
        })
        .await
        .unwrap();
        let plain = procs::spawn(&s, "r", named("plain")).await.unwrap().0;
        let again = Descriptor {
            restartable: true,
            ..named("again")
        };
        let again = procs::spawn(&s, "r", again).await.unwrap().0;
        let wa = WorkerId::new("a").unwrap();
        procs::claim(&s, "r", &wa, 10, ANY).await.unwrap();
        procs::started(&s, "r", &plain).await.unwrap();
        let waiter = {
            let (s, pid) = (s.clone(), plain.clone());
            tokio::spawn(async move { procs::wait_exit(&s, "r", &pid).await })
        };
        // A second node registers; the first is then declared lost.
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            procs::register_worker(&s2, "r", &worker("b", "node-b", 2)).unwrap();
        })
        .await
        .unwrap();
        // Declared lost: its worker goes down, an unclaimed proc of it
        // would be placed again, but what it claimed or runs stays its.
        let unclaimed = procs::spawn(&s, "r", named("unclaimed")).await.unwrap();
        assert_eq!(unclaimed.1, w("a"));
        let lost = procs::node_lost(&s, "node-a").await.unwrap();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].1.workers, vec![wa.clone()]);
        assert_eq!(lost[0].1.requeued, vec!["unclaimed".to_string()]);
        let u = procs::get(&s, "r", &Pid::new("unclaimed").unwrap()).unwrap();
        assert_eq!((u.state, u.worker), (State::Spawned, w("b")));
        assert_eq!(
            procs::get(&s, "r", &plain).unwrap().state,
            State::Running,
            "a lost node's running proc stays until its grace has passed"
        );
        // Silent past its grace: its procs are given back, once.
        let given = procs::give_back_node(&s, "node-a", "node node-a lost (silent past its grace)")
            .await
            .unwrap();
        let expired = &given[0].1;
        assert_eq!(expired.workers, vec![wa.clone()]);
        assert_eq!(expired.failed, vec!["plain".to_string()]);
        assert_eq!(expired.requeued, vec!["again".to_string()]);
        let twice = procs::give_back_node(&s, "node-a", "again").await.unwrap();
        assert!(twice.iter().all(|(_, e)| e.workers.is_empty()), "{twice:?}");
        let done = waiter.await.unwrap().unwrap();
        assert_eq!(done.state, State::Failed);
        assert!(done.error.unwrap().contains("lost"));
        let again = procs::get(&s, "r", &again).unwrap();
        assert_eq!(
            (again.state, again.worker),
            (State::Spawned, w("b")),
            "placed on the live node"
        );
        // The lost node returns: its procd is told (LAPSED) to stop its
        // copies; its worker stays down until it registers again.
        let p = tabos_kernel::realm_partition("r", s.partitions());
        let mut told = s.subscribe(&procs::worker_channel("r", &wa));
        let now = tabos_store::now_us();
        s.submit(p, move |tx| procs::node_returned_tx(tx, "r", "node-a", now))
            .await
            .unwrap();
        assert_eq!(told.blocking_recv().unwrap().payload, sched::LAPSED);
        // What the lost worker's copies report when they end changes
        // nothing: one proc is failed, the other is b's now.
        for pid in ["plain", "again"] {
            procs::exited_and_claim(
                &s,
                "r",
                &Pid::new(pid).unwrap(),
                State::Exited,
                Some(0),
                None,
                procs::Spent::default(),
                &wa,
                8,
                ANY,
            )
            .await
            .unwrap();
        }
        assert_eq!(
            procs::get(&s, "r", &Pid::new("plain").unwrap())
                .unwrap()
                .state,
            State::Failed
        );
        let again = procs::get(&s, "r", &Pid::new("again").unwrap()).unwrap();
        assert_eq!((again.state, again.worker), (State::Spawned, w("b")));
        // Registered again, its worker is up and its give-back forgotten.
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            procs::register_worker(&s2, "r", &worker("a", "node-a", 3)).unwrap();
        })
        .await
        .unwrap();
        assert_eq!(
            procs::spawn(&s, "r", named("fresh")).await.unwrap().1,
            w("a")
        );
    });
}

/// A node that returns before its procs were given back keeps them: its
/// worker is up again and takes work; and a restartable proc it stopped
/// while cut off is queued again by it.
fn a_node_back_in_time_keeps_its_procs(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        procs::register_worker(&s, "r", &worker("a", "node-a", 2)).unwrap();
        let kept = procs::spawn(&s, "r", named("kept")).await.unwrap().0;
        let stopped = Descriptor {
            restartable: true,
            ..named("stopped")
        };
        let stopped = procs::spawn(&s, "r", stopped).await.unwrap().0;
        let wa = WorkerId::new("a").unwrap();
        procs::claim(&s, "r", &wa, 10, ANY).await.unwrap();
        procs::node_lost(&s, "node-a").await.unwrap();
        let p = tabos_kernel::realm_partition("r", s.partitions());
        let now = tabos_store::now_us();
        let (w2, st) = (wa.clone(), stopped.clone());
        let requeued = s
            .submit(p, move |tx| {
                procs::node_returned_tx(tx, "r", "node-a", now)?;
                procs::requeue_stopped_tx(tx, "r", &st, &w2, now)
            })
            .await
            .unwrap();
        assert!(requeued);
        assert_eq!(procs::get(&s, "r", &kept).unwrap().worker, w("a"));
        // Up again: the requeued proc is placed on it at once.
        let st = procs::get(&s, "r", &stopped).unwrap();
        assert_eq!((st.state, st.worker), (State::Spawned, w("a")));
        // Given back now, nothing is (the node is back).
        let given = procs::give_back_node(&s, "node-a", "late").await.unwrap();
        assert!(given.iter().all(|(_, e)| e.workers.is_empty()), "{given:?}");
        // A proc not live there is not queued again.
        let (w2, k) = (wa.clone(), kept.clone());
        let none = s
            .submit(p, move |tx| {
                procs::requeue_stopped_tx(tx, "r", &k, &w2, now)
            })
            .await
            .unwrap();
        assert!(!none, "not restartable");
    });
}

both!(a_node_back_in_time_keeps_its_procs);

both!(
    lapsed_workers_fail_or_requeue_their_procs,
    a_restartable_proc_runs_again_at_most_its_limit,
);

/// Issue 41, item 3: a restartable proc whose node is lost runs again
/// elsewhere — at most `max_restarts` times; then it fails, saying so.
/// Limits past RESTARTS_MAX are refused.
fn a_restartable_proc_runs_again_at_most_its_limit(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let bad = Descriptor {
            restartable: true,
            max_restarts: procs::RESTARTS_MAX + 1,
            ..named("bad")
        };
        let e = procs::spawn(&s, "r", bad).await.unwrap_err();
        assert!(matches!(e, tabos_kernel::Error::Invalid(_)), "{e}");
        let register = |id: &'static str, node: &'static str| {
            let s = s.clone();
            tokio::task::spawn_blocking(move || {
                procs::register_worker(&s, "r", &worker(id, node, 2)).unwrap();
            })
        };
        register("a", "node-a").await.unwrap();
        let once = Descriptor {
            restartable: true,
            max_restarts: 1,
            ..named("once")
        };
        let pid = procs::spawn(&s, "r", once).await.unwrap().0;
        // Runs on a; a is lost: queued again (its first restart), on b.
        for (here, node, next, next_node) in [
            ("a", "node-a", "b", "node-b"),
            ("b", "node-b", "c", "node-c"),
        ] {
            let wid = WorkerId::new(here).unwrap();
            procs::claim(&s, "r", &wid, 10, ANY).await.unwrap();
            procs::started(&s, "r", &pid).await.unwrap();
            register(next, next_node).await.unwrap();
            procs::node_lost(&s, node).await.unwrap();
            let given = procs::give_back_node(&s, node, &format!("{node} lost"))
                .await
                .unwrap();
            let p = procs::get(&s, "r", &pid).unwrap();
            if here == "a" {
                assert_eq!(given[0].1.requeued, vec!["once".to_string()]);
                assert_eq!((p.state, p.worker), (State::Spawned, w("b")));
            } else {
                // The second loss: its one restart is spent.
                assert_eq!(given[0].1.failed, vec!["once".to_string()]);
                assert_eq!(p.state, State::Failed);
                let why = p.error.unwrap();
                assert!(
                    why.contains("node-b lost") && why.contains("restarted 1 times"),
                    "{why}"
                );
            }
        }
    });
}

/// σOS Figure 3-5: LC procs reserve cores; BE procs reserve nothing and are
/// claimed only while the procd's utilization is under its target.
fn be_procs_are_admitted_by_utilization(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        procs::register_worker(&s, "r", &worker("w", "n", 1)).unwrap();
        let wid = WorkerId::new("w").unwrap();
        let be = |pid: &str| Descriptor {
            class: Class::Be,
            ..named(pid)
        };
        for pid in ["be1", "be2", "be3"] {
            let (_, placed) = procs::spawn(&s, "r", be(pid)).await.unwrap();
            assert_eq!(placed, w("w"), "a BE proc needs only a live worker");
        }
        assert_eq!(unused(&s, "r")["w"], 1, "BE procs reserve nothing");
        let (_, placed) = procs::spawn(&s, "r", named("lc")).await.unwrap();
        assert_eq!(placed, w("w"));
        assert_eq!(unused(&s, "r")["w"], 0);
        // Idle, target one core: the LC proc fills it, so no BE proc starts.
        let idle = Admission::measured(0.0, 1.0);
        let claimed = procs::claim(&s, "r", &wid, 10, idle).await.unwrap();
        assert!(claimed.be_waiting, "three BE procs wait for admission");
        let pids: Vec<&str> = claimed.procs.iter().map(|p| p.pid.as_str()).collect();
        assert_eq!(pids, ["lc"]);
        // One core busy, target two: exactly one more, the oldest BE proc.
        let half = Admission::measured(1.0, 2.0);
        let claimed = procs::claim(&s, "r", &wid, 10, half).await.unwrap().procs;
        let pids: Vec<&str> = claimed.iter().map(|p| p.pid.as_str()).collect();
        assert_eq!(pids, ["be1"]);
        // A BE exit gives back nothing; the LC exit gives back its core.
        let be1 = Pid::new("be1").unwrap();
        procs::exited(&s, "r", &be1, State::Exited, Some(0), None)
            .await
            .unwrap();
        assert_eq!(unused(&s, "r")["w"], 0);
        let lc = Pid::new("lc").unwrap();
        procs::exited(&s, "r", &lc, State::Exited, Some(0), None)
            .await
            .unwrap();
        assert_eq!(unused(&s, "r")["w"], 1);
        let claimed = procs::claim(&s, "r", &wid, 10, idle).await.unwrap().procs;
        let pids: Vec<&str> = claimed.iter().map(|p| p.pid.as_str()).collect();
        assert_eq!(
            pids,
            ["be2"],
            "admitted in spawn order, one under a one-core target"
        );
        // Admission open and nothing left: nothing waits, so the procd is
        // not woken when its load falls.
        let all = procs::claim(&s, "r", &wid, 10, ANY).await.unwrap();
        assert_eq!(all.procs.len(), 1, "be3");
        assert!(!all.be_waiting);
        let closed = Admission::measured(2.0, 1.0);
        let none = procs::claim(&s, "r", &wid, 10, closed).await.unwrap();
        assert!(none.procs.is_empty() && !none.be_waiting, "{none:?}");
    });
}

/// σOS Figure 3-6: a proc left unclaimed past the timeout is taken by
/// another worker; an LC proc's reservation moves with it.
fn unclaimed_procs_are_stolen_after_the_timeout(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Locality).unwrap();
        procs::register_worker(&s, "r", &worker("w1", "n1", 1)).unwrap();
        procs::register_worker(&s, "r", &worker("w2", "n2", 2)).unwrap();
        let at_n1 = |pid: &str, class| Descriptor {
            home_node: Some("n1".into()),
            class,
            ..named(pid)
        };
        procs::spawn(&s, "r", at_n1("lc", Class::Lc)).await.unwrap();
        procs::spawn(&s, "r", at_n1("be", Class::Be)).await.unwrap();
        assert_eq!(unused(&s, "r")["w1"], 0);
        let (w1, w2) = (WorkerId::new("w1").unwrap(), WorkerId::new("w2").unwrap());
        // Too young to steal: nothing taken, and the thief learns when.
        let hour = 3_600_000_000;
        let none = procs::steal(&s, "r", &w2, ANY, hour).await.unwrap();
        assert!(none.procs.is_empty());
        let next = none.next_us.expect("a deadline for the oldest unclaimed proc");
        assert!(next > tabos_store::now_us() + hour / 2);
        // Past the timeout: both are stolen.
        let stolen = procs::steal(&s, "r", &w2, ANY, 0).await.unwrap();
        let mut pids: Vec<&str> = stolen.procs.iter().map(|p| p.pid.as_str()).collect();
        pids.sort();
        assert_eq!(pids, ["be", "lc"]);
        assert!(stolen.procs.iter().all(|p| p.worker == w("w2") && p.state == State::Claimed));
        let room = unused(&s, "r");
        assert_eq!((room["w1"], room["w2"]), (1, 1), "the LC reservation moved");
        // The victim finds nothing left to claim: nothing runs twice.
        assert!(procs::claim(&s, "r", &w1, 10, ANY).await.unwrap().procs.is_empty());
        assert!(procs::steal(&s, "r", &w1, ANY, 0).await.unwrap().procs.is_empty());
        let events = s
            .query(
                "SELECT detail FROM proc_event WHERE realm = 'r' AND pid = 'lc' AND event = 'steal'",
                &[],
            )
            .unwrap();
        assert_eq!(events.rows[0].get::<String>(0).unwrap(), "w2 from w1");
        // A thief without room leaves an LC proc where it is.
        procs::spawn(&s, "r", at_n1("lc2", Class::Lc)).await.unwrap();
        procs::spawn(&s, "r", Descriptor { cores: 1, ..at_n1("lc3", Class::Lc) }).await.unwrap();
        let took = procs::steal(&s, "r", &w2, ANY, 0).await.unwrap();
        assert_eq!(took.procs.len(), 1, "w2 had one core left");
        assert_eq!(unused(&s, "r")["w2"], 0);
    });
}

/// A BE proc may declare 0 cores (a light proc that mostly waits): it is
/// still admitted only under the target, but adds nothing to the busy
/// cores, so a worker's light procs never keep its other BE procs out.
fn zero_core_be_procs_count_nothing(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        procs::register_worker(&s, "r", &worker("w", "n", 1)).unwrap();
        let wid = WorkerId::new("w").unwrap();
        let light = |pid: &str| Descriptor {
            class: Class::Be,
            cores: 0,
            ..named(pid)
        };
        for pid in ["c1", "c2", "c3"] {
            procs::spawn(&s, "r", light(pid)).await.unwrap();
        }
        let heavy = Descriptor {
            class: Class::Be,
            ..named("be")
        };
        procs::spawn(&s, "r", heavy).await.unwrap();
        let idle = Admission::measured(0.0, 1.0);
        let claimed = procs::claim(&s, "r", &wid, 10, idle).await.unwrap().procs;
        let pids: Vec<&str> = claimed.iter().map(|p| p.pid.as_str()).collect();
        assert_eq!(
            pids,
            ["c1", "c2", "c3", "be"],
            "light procs add no busy cores"
        );
        let full = Admission::measured(1.0, 1.0);
        procs::spawn(&s, "r", light("c4")).await.unwrap();
        let claimed = procs::claim(&s, "r", &wid, 10, full).await.unwrap().procs;
        assert!(
            claimed.is_empty(),
            "a full worker admits no BE proc, light or not"
        );
        // A granted worker counts declared cores: full, it still admits a
        // proc of no cores (a job's coordinator, which its reducers wait
        // for), even behind a proc of one core, and not the one-core proc.
        let heavy2 = Descriptor {
            class: Class::Be,
            ..named("be2")
        };
        procs::spawn(&s, "r", heavy2).await.unwrap();
        procs::spawn(&s, "r", light("c5")).await.unwrap();
        let granted_full = Admission::declared(1.0, 1.0);
        let claimed = procs::claim(&s, "r", &wid, 10, granted_full).await.unwrap();
        let pids: Vec<&str> = claimed.procs.iter().map(|p| p.pid.as_str()).collect();
        assert_eq!(pids, ["c4", "c5"], "light procs only");
        assert!(claimed.be_waiting, "be2 still waits for a core");
        // An LC proc must reserve at least one core.
        let lc = Descriptor {
            cores: 0,
            ..named("lc0")
        };
        let e = procs::spawn(&s, "r", lc).await.unwrap_err();
        assert!(e.to_string().contains("cores"), "{e}");
    });
}

both!(
    be_procs_are_admitted_by_utilization,
    zero_core_be_procs_count_nothing,
    unclaimed_procs_are_stolen_after_the_timeout
);

/// A freed core goes to the oldest deferred proc that fits it, looked for
/// among the oldest `DEFERRED_SCAN_MAX` — past the first few the exit's
/// transaction reads at first — and so does a BE proc, which needs no
/// core, when no core is free.
fn deferred_procs_past_the_first_look_are_still_placed(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let cores = |pid: &str, cores: i64| Descriptor {
            cores,
            ..named(pid)
        };
        // Spawned before any worker: all deferred, oldest first.
        for (pid, n) in [("run1", 1), ("run2", 1)] {
            procs::spawn(&s, "r", cores(pid, n)).await.unwrap();
        }
        for i in 0..8 {
            procs::spawn(&s, "r", cores(&format!("big{i}"), 2))
                .await
                .unwrap();
        }
        let be = Descriptor {
            class: Class::Be,
            ..named("be")
        };
        procs::spawn(&s, "r", be).await.unwrap();
        procs::spawn(&s, "r", cores("small", 1)).await.unwrap();
        // Two cores: run1 and run2 take them; the first eight deferred
        // procs are read, and no core is free after them — but a BE proc
        // behind them fits.
        let s2 = s.clone();
        let assigned = tokio::task::spawn_blocking(move || {
            procs::register_worker(&s2, "r", &worker("w", "n", 2))
        })
        .await
        .unwrap()
        .unwrap();
        let pids: Vec<&str> = assigned.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(pids, ["run1", "run2", "be"]);
        assert!(procs::status(&s, "r", &Pid::new("small").unwrap())
            .await
            .unwrap()
            .worker
            .is_none());
        // run1 ends: its core fits none of the eight procs of two cores,
        // but the one-core proc behind them.
        let wid = WorkerId::new("w").unwrap();
        let claimed = procs::claim(&s, "r", &wid, 10, ANY).await.unwrap().procs;
        assert_eq!(claimed.len(), 3);
        let run1 = Pid::new("run1").unwrap();
        procs::exited(&s, "r", &run1, State::Exited, Some(0), None)
            .await
            .unwrap();
        let small = procs::status(&s, "r", &Pid::new("small").unwrap())
            .await
            .unwrap();
        assert_eq!(small.worker, Some(wid));
        for i in 0..8 {
            let big = procs::status(&s, "r", &Pid::new(format!("big{i}")).unwrap())
                .await
                .unwrap();
            assert_eq!(big.worker, None, "big{i} needs two cores");
        }
        assert_eq!(unused(&s, "r")["w"], 0);
    });
}

both!(deferred_procs_past_the_first_look_are_still_placed);

both!(unplaced_procs_say_why);

/// The ps view says why a proc waits to be placed, and nothing once placed.
fn unplaced_procs_say_why(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    let waiting = |pid: &str| -> Option<String> {
        s.query(
            "SELECT waiting FROM ps WHERE realm = 'r' AND pid = $1",
            tabos_store::params![pid],
        )
        .unwrap()
        .rows[0]
            .get(0)
            .unwrap()
    };
    rt().block_on(async {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let big = Descriptor {
            cores: 2,
            ..named("big")
        };
        procs::spawn(&s, "r", big).await.unwrap();
        assert_eq!(
            waiting("big").as_deref(),
            Some("no live worker in the realm")
        );
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || procs::register_worker(&s2, "r", &worker("w", "n", 1)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            waiting("big").as_deref(),
            Some("larger than every live worker")
        );
        let (_, placed) = procs::spawn(&s, "r", named("fits")).await.unwrap();
        assert!(placed.is_some());
        assert_eq!(waiting("fits"), None);
        let (_, placed) = procs::spawn(&s, "r", named("queued")).await.unwrap();
        assert_eq!(placed, None);
        assert_eq!(
            waiting("queued").as_deref(),
            Some("waiting for free cores or memory")
        );
    });
}

/// Lease terms long enough that no node of a test lapses.
const TERMS: tabos_kernel::nodes::LeaseTerms = tabos_kernel::nodes::LeaseTerms {
    lease_us: 60_000_000,
    grace_us: 120_000_000,
};

fn node_row(id: &str) -> tabos_kernel::nodes::Registration {
    tabos_kernel::nodes::Registration {
        node_id: id.into(),
        address: String::new(),
        cores: 2,
        mem_mb: 1024,
        labels: Default::default(),
        block_store: String::new(),
        elastic: false,
    }
}

/// A drained node takes nothing new — no placement, no steal — its
/// unclaimed procs are placed elsewhere, what it runs stays; undone, it
/// takes work again. Only a node that is up can be drained.
fn draining_a_node_moves_its_unclaimed_procs_only(b: Backend) {
    use tabos_kernel::nodes::{self, NodeState};
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let now = tabos_store::now_us();
        nodes::register(&s, &node_row("n-a"), now, TERMS)
            .await
            .unwrap();
        nodes::register(&s, &node_row("n-b"), now, TERMS)
            .await
            .unwrap();
        let s2 = s.clone();
        tokio::task::spawn_blocking(move || {
            procs::register_worker(&s2, "r", &worker("a", "n-a", 2)).unwrap();
            procs::register_worker(&s2, "r", &worker("b", "n-b", 2)).unwrap();
        })
        .await
        .unwrap();
        let wa = WorkerId::new("a").unwrap();
        assert_eq!(procs::spawn(&s, "r", named("run")).await.unwrap().1, w("a"));
        procs::claim(&s, "r", &wa, 10, ANY).await.unwrap();
        assert_eq!(
            procs::spawn(&s, "r", named("queued")).await.unwrap().1,
            w("a")
        );

        let done = procs::drain_node(&s, "n-a", true).await.unwrap();
        assert!(done.changed);
        assert_eq!(done.moved, vec![("r".to_string(), "queued".to_string())]);
        let queued = procs::get(&s, "r", &Pid::new("queued").unwrap()).unwrap();
        assert_eq!((queued.state, queued.worker), (State::Spawned, w("b")));
        let run = procs::get(&s, "r", &Pid::new("run").unwrap()).unwrap();
        assert_eq!(run.worker, w("a"), "what it runs stays");
        // a holds only run's core now; b holds queued's.
        assert_eq!(
            unused(&s, "r"),
            HashMap::from([("a".into(), 1), ("b".into(), 1)])
        );
        // Nothing new lands on it: b fills, then procs wait.
        assert_eq!(procs::spawn(&s, "r", named("new")).await.unwrap().1, w("b"));
        assert_eq!(procs::spawn(&s, "r", named("later")).await.unwrap().1, None);
        assert!(procs::steal(&s, "r", &wa, ANY, 0)
            .await
            .unwrap()
            .procs
            .is_empty());
        let be = Descriptor {
            class: Class::Be,
            ..named("be")
        };
        assert_eq!(procs::spawn(&s, "r", be).await.unwrap().1, w("b"));
        // Listed as draining, with what it still runs.
        let s2 = s.clone();
        let listed = tokio::task::spawn_blocking(move || nodes::list(&s2, None))
            .await
            .unwrap()
            .unwrap();
        let a = listed.iter().find(|n| n.node_id == "n-a").unwrap();
        assert_eq!(a.state, NodeState::Draining);
        assert!(a.draining_us.is_some());
        assert_eq!((a.realms.len(), a.realms[0].procs), (1, 1));
        // Again: nothing changes.
        let again = procs::drain_node(&s, "n-a", true).await.unwrap();
        assert!(!again.changed && again.moved.is_empty());

        // Back in service: its free core takes the waiting proc at once.
        let back = procs::drain_node(&s, "n-a", false).await.unwrap();
        assert!(back.changed);
        let later = procs::get(&s, "r", &Pid::new("later").unwrap()).unwrap();
        assert_eq!(later.worker, w("a"));
        let s2 = s.clone();
        let listed = tokio::task::spawn_blocking(move || nodes::list(&s2, None))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(listed[0].state, NodeState::Up);
        assert_eq!(listed[0].draining_us, None);

        // Unknown, bad or not up: refused, nothing changed.
        let e = procs::drain_node(&s, "nope", true).await.unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
        let e = procs::drain_node(&s, "../x", true).await.unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        nodes::leave(&s, "n-b", now).await.unwrap();
        let e = procs::drain_node(&s, "n-b", true).await.unwrap_err();
        assert!(matches!(e, Error::Precondition(_)), "{e}");
    });
}
both!(draining_a_node_moves_its_unclaimed_procs_only);

/// Pruning forgets ended procs only: named ones (all or nothing: a live
/// one among them refuses the whole prune), or every ended one; their
/// events and their revoked credentials go too (one still live stays), and
/// a pruned pid can be spawned again.
fn pruning_forgets_ended_procs_only(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        procs::register_worker(&s, "r", &worker("w1", "n1", 4)).unwrap();
        let pid = |p: &str| Pid::new(p).unwrap();
        let mut credential = HashMap::new();
        for p in ["a", "b", "live"] {
            procs::spawn(&s, "r", named(p)).await.unwrap();
            let spec = auth::Spec {
                pid: Some(pid(p)),
                ..auth::Spec::realm("r", "root", auth::Role::Member)
            };
            let (_, made) = auth::create(&s, spec).await.unwrap();
            credential.insert(p, made.id().clone());
        }
        for p in ["a", "b"] {
            procs::exited(&s, "r", &pid(p), State::Exited, Some(0), None)
                .await
                .unwrap();
        }
        // a's credential is revoked as a native proc's is at its end; b's
        // is left live.
        auth::revoke_pid(&s, "r", &pid("a")).await.unwrap();
        let credentials = |p: &str| -> i64 {
            s.query(
                "SELECT count(*) FROM credential WHERE id = $1",
                &[credential[p].as_str().into()],
            )
            .unwrap()
            .rows[0]
                .get(0)
                .unwrap()
        };
        let e = procs::prune(&s, "r", vec![pid("a"), pid("live")], None)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Precondition(_)), "{e}");
        let e = procs::prune(&s, "r", vec![pid("nope")], None)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
        procs::get(&s, "r", &pid("a")).unwrap();
        // Ended an hour from now: none of them ended that long ago.
        let hour_ago = tabos_store::now_us() - 3_600_000_000;
        let none = procs::prune(&s, "r", vec![], Some(hour_ago)).await.unwrap();
        assert!(none.is_empty());
        let pruned = procs::prune(&s, "r", vec![pid("a"), pid("a")], None)
            .await
            .unwrap();
        assert_eq!(pruned, [pid("a")]);
        assert!(procs::get(&s, "r", &pid("a")).is_err());
        assert_eq!(credentials("a"), 0, "a's revoked credential is pruned");
        let rest = procs::prune(&s, "r", vec![], None).await.unwrap();
        assert_eq!(rest, [pid("b")]);
        assert_eq!(credentials("b"), 1, "a live credential is kept");
        assert_eq!(credentials("live"), 1);
        procs::get(&s, "r", &pid("live")).unwrap();
        let events: i64 = s
            .query(
                "SELECT count(*) FROM proc_event WHERE realm = 'r' AND pid IN ('a', 'b')",
                &[],
            )
            .unwrap()
            .rows[0]
            .get(0)
            .unwrap();
        assert_eq!(events, 0);
        procs::spawn(&s, "r", named("a")).await.unwrap();
    });
}
both!(pruning_forgets_ended_procs_only);

/// Every proc transition is also notified on its realm's channel, as
/// `<pid> <what>`, after the commit.
fn the_realm_channel_tells_every_transition(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        procs::register_worker(&s, "r", &worker("w1", "n1", 2)).unwrap();
        let mut feed = s.subscribe(&procs::procs_channel("r"));
        let mut other = s.subscribe(&procs::procs_channel("o"));
        procs::spawn(&s, "r", named("t1")).await.unwrap();
        let t1 = Pid::new("t1").unwrap();
        let w1 = WorkerId::new("w1").unwrap();
        procs::claim(&s, "r", &w1, 10, ANY).await.unwrap();
        procs::started(&s, "r", &t1).await.unwrap();
        procs::exited(&s, "r", &t1, State::Exited, Some(0), None)
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.last().map(String::as_str) != Some("t1 exited") {
            let n = tokio::time::timeout(std::time::Duration::from_secs(10), feed.recv())
                .await
                .expect("notified")
                .unwrap();
            got.push(n.payload);
        }
        let at = |what: &str| got.iter().position(|g| g == what);
        assert!(
            at("t1 spawned") < at("t1 running") && at("t1 running").is_some(),
            "{got:?}"
        );
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(100), other.recv())
                .await
                .is_err(),
            "another realm hears nothing"
        );
    });
}
both!(the_realm_channel_tells_every_transition);

/// A placement is told to the worker it is placed on and to at most
/// `STEAL_HINTS_MAX` others — never to every worker of the realm — and
/// which others rotates over the realm; a thief that cannot take all it
/// finds passes the word on (issue 35, item 4).
fn a_placement_tells_a_few_workers_not_all(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = f.store.clone();
    rt().block_on(async move {
        const WORKERS: usize = 6;
        const SPAWNS: usize = 12;
        realms::create(&s, "r", Scheduler::Fifo).unwrap();
        let ids: Vec<WorkerId> = (0..WORKERS)
            .map(|i| WorkerId::new(format!("w{i}")).unwrap())
            .collect();
        // Every worker channel's notifications, with the worker's index.
        let (heard, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (i, id) in ids.iter().enumerate() {
            procs::register_worker(&s, "r", &worker(id.as_str(), &format!("n{i}"), 1)).unwrap();
            let mut sub = s.subscribe(&procs::worker_channel("r", id));
            let heard = heard.clone();
            tokio::spawn(async move {
                while let Ok(n) = sub.recv().await {
                    if heard.send((i, n.payload)).is_err() {
                        return;
                    }
                }
            });
        }
        // BE procs reserve nothing, so FIFO places every one on w0.
        for i in 0..SPAWNS {
            let d = Descriptor {
                class: Class::Be,
                ..named(&format!("be{i}"))
            };
            let (_, placed) = procs::spawn(&s, "r", d).await.unwrap();
            assert_eq!(placed, w("w0"));
        }
        let hints_max = procs::STEAL_HINTS_MAX as usize;
        let expected = SPAWNS * (1 + hints_max);
        let mut got: Vec<(usize, String)> = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < expected {
            let n = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .expect("every placement told");
            got.push(n.expect("listening"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(rx.try_recv().is_err(), "no more than {expected}");
        let hint = |p: &String| p.starts_with(procs::STEAL_HINT);
        let to_w0: Vec<&String> = got
            .iter()
            .filter(|(i, _)| *i == 0)
            .map(|(_, p)| p)
            .collect();
        assert_eq!(
            to_w0.len(),
            SPAWNS,
            "w0 hears its assignments only: {to_w0:?}"
        );
        assert!(!to_w0.iter().any(|p| hint(p)));
        let hinted: std::collections::BTreeSet<usize> = got
            .iter()
            .filter(|(_, p)| hint(p))
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(
            got.iter().filter(|(_, p)| hint(p)).count(),
            SPAWNS * hints_max
        );
        assert!(
            hinted.len() > hints_max,
            "hints rotate over the realm: {hinted:?}"
        );
        // A thief with no admission takes nothing and tells others.
        let closed = Admission::measured(1.0, 1.0);
        let took = procs::steal(&s, "r", &ids[1], closed, 0).await.unwrap();
        assert!(took.procs.is_empty());
        let mut passed = Vec::new();
        while passed.len() < hints_max {
            let (i, n) = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                .await
                .expect("the word passed on")
                .expect("listening");
            assert!(hint(&n), "{n}");
            passed.push(i);
        }
        assert!(!passed.contains(&1), "not back to the thief: {passed:?}");
    });
}
both!(a_placement_tells_a_few_workers_not_all);

/// Who may spawn (issue 37): a member, for its own user; not a reader,
/// not a scoped credential, not a descriptor naming another user — asked
/// before anything is done on the caller's behalf.
fn only_a_member_spawns_and_as_itself(b: Backend) {
    use tabos_kernel::auth::{self, Role, Scope, Spec};
    let Some(f) = b.open() else { return };
    let (s, rt) = (f.store.clone(), rt());
    realms::create(&s, "r", Scheduler::Fifo).unwrap();
    let who = |role: Role, scope: Option<&str>| {
        let spec = Spec {
            scope: scope.map(|t| Scope::parse(t).unwrap()),
            ..Spec::realm("r", "alice", role)
        };
        let (_, p) = rt.block_on(auth::create(&s, spec)).unwrap();
        p.act("", "", "r").unwrap()
    };
    let mine = Descriptor {
        user: "alice".into(),
        ..named("p1")
    };
    let theirs = Descriptor {
        user: "bob".into(),
        ..named("p2")
    };
    let member = who(Role::Member, None);
    procs::may_spawn(&member, std::slice::from_ref(&mine)).unwrap();
    for (caller, d) in [
        (who(Role::Reader, None), &mine),
        (who(Role::Member, Some("send:inbox")), &mine),
        (member.clone(), &theirs),
    ] {
        let e = procs::may_spawn(&caller, std::slice::from_ref(d)).unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
    }
    let e = rt
        .block_on(procs::spawn_for(&s, &member, theirs, None))
        .unwrap_err();
    assert!(matches!(e, Error::Denied(_)), "{e}");
}
both!(only_a_member_spawns_and_as_itself);
