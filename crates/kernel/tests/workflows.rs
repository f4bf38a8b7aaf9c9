//! Durable workflows (issue 22) at the kernel: steps recorded and replayed,
//! ownership and take-over after a lapsed lease, queues' limits, one-
//! transaction steps, messages, events, sleeps, and the operator's calls —
//! on both backends. Time is passed in, so leases and rate periods are
//! tested without waiting.

use crate::common;

use common::{call_in, Backend};
use tabos_kernel::ids::{ExecutorId, WorkflowId};
use tabos_kernel::workflows::{
    self as wf, Begun, Outcome, QueueLimits, StartSpec, Status, StepKind,
};
use tabos_kernel::Error;
use tabos_store::Store;

const R: &str = "acme";

/// Who the tests act as: root in realm `R`.
fn me() -> tabos_kernel::auth::Caller {
    common::as_user(R, "root")
}
const T0: i64 = 1_000_000_000;

fn eid(s: &str) -> ExecutorId {
    ExecutorId::new(s).unwrap()
}

fn wid(s: &str) -> WorkflowId {
    WorkflowId::new(s).unwrap()
}

fn exec(s: &Store, id: &str, version: &str, node: &str, lease_ms: u64, now: i64) {
    let (id, spec) = (
        eid(id),
        wf::ExecutorSpec {
            app_version: version.into(),
            functions: vec!["order".into(), "other".into()],
            node_id: node.into(),
            lease_ms,
        },
    );
    call_in(s, R, move |tx| {
        wf::register_executor_tx(tx, &me(), &id, &spec, now)
    })
    .unwrap();
}

fn start(
    s: &Store,
    id: &str,
    queue: Option<&str>,
    executor: Option<&str>,
    priority: i64,
) -> wf::Started {
    let spec = StartSpec {
        id: wid(id),
        name: "order".into(),
        app_version: "v1".into(),
        input: b"in".to_vec(),
        queue: queue.map(String::from),
        priority,
        executor: executor.map(eid),
    };
    call_in(s, R, move |tx| wf::start_tx(tx, &me(), &spec, T0)).unwrap()
}

fn begin(s: &Store, ex: &str, id: &str, step: i64, name: &str) -> tabos_kernel::Result<Begun> {
    let (ex, id, name) = (eid(ex), wid(id), name.to_string());
    call_in(s, R, move |tx| {
        wf::step_begin_tx(
            tx,
            &me(),
            &ex,
            &id,
            step,
            &name,
            StepKind::Function,
            b"",
            T0,
        )
    })
}

fn end(s: &Store, ex: &str, id: &str, step: i64, o: Outcome) -> tabos_kernel::Result<Outcome> {
    let (ex, id) = (eid(ex), wid(id));
    call_in(s, R, move |tx| {
        wf::step_end_tx(tx, &me(), &ex, &id, step, &o, true, None, T0)
    })
}

fn finish(s: &Store, ex: &str, id: &str, o: Outcome) -> tabos_kernel::Result<()> {
    let (ex, id) = (eid(ex), wid(id));
    call_in(s, R, move |tx| wf::finish_tx(tx, &me(), &ex, &id, &o, T0))
}

fn get(s: &Store, id: &str) -> wf::Workflow {
    let id = wid(id);
    call_in(s, R, move |tx| wf::get_tx(tx, &me(), &id))
        .unwrap()
        .unwrap()
}

fn dequeue(s: &Store, ex: &str, q: &str, max: usize, now: i64) -> wf::Claimed {
    let (ex, q) = (eid(ex), q.to_string());
    call_in(s, R, move |tx| wf::dequeue_tx(tx, &me(), &ex, &q, max, now)).unwrap()
}

fn ids(c: &wf::Claimed) -> Vec<&str> {
    c.claims.iter().map(|c| c.id.as_str()).collect()
}

fn precondition(r: tabos_kernel::Result<impl std::fmt::Debug>, says: &str) {
    match r {
        Err(Error::Precondition(m)) => assert!(m.contains(says), "{m}"),
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    }
}

fn steps_are_recorded_and_replayed(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    exec(s, "xa", "v1", "n1", 10_000, T0);
    let st = start(s, "w1", None, Some("xa"), 0);
    assert!(st.created);
    assert_eq!(st.workflow.status, Status::Pending);
    // A second start of the id is the first.
    let again = start(s, "w1", None, Some("xa"), 0);
    assert!(!again.created);
    assert_eq!(
        begin(s, "xa", "w1", 1, "charge").unwrap(),
        Begun::Run { attempt: 1 }
    );
    // A re-run before it was recorded: attempt 2.
    assert_eq!(
        begin(s, "xa", "w1", 1, "charge").unwrap(),
        Begun::Run { attempt: 2 }
    );
    end(s, "xa", "w1", 1, Outcome::Success(b"paid".to_vec())).unwrap();
    // Recorded: never run again, and its first outcome stays.
    assert_eq!(
        begin(s, "xa", "w1", 1, "charge").unwrap(),
        Begun::Done(Outcome::Success(b"paid".to_vec()))
    );
    assert_eq!(
        end(s, "xa", "w1", 1, Outcome::Success(b"other".to_vec())).unwrap(),
        Outcome::Success(b"paid".to_vec())
    );
    // A function that took another step there is not deterministic.
    precondition(begin(s, "xa", "w1", 1, "refund"), "not deterministic");
    // Another executor may not step it.
    exec(s, "xb", "v1", "n1", 10_000, T0);
    precondition(begin(s, "xb", "w1", 2, "ship"), "run by xa");
    finish(s, "xa", "w1", Outcome::Success(b"done".to_vec())).unwrap();
    let w = get(s, "w1");
    assert_eq!(w.status, Status::Success);
    assert_eq!(w.output.as_deref(), Some(&b"done"[..]));
    precondition(begin(s, "xa", "w1", 2, "ship"), "finished");
    // Bad input: a clear error, nothing changed.
    assert!(matches!(
        begin(s, "xa", "nope", 1, "x"),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        begin(s, "xa", "w1", 0, "x"),
        Err(Error::Invalid(_))
    ));
    let big = StartSpec {
        id: wid("big"),
        name: "order".into(),
        app_version: "v1".into(),
        input: vec![0; wf::VALUE_BYTES_MAX + 1],
        queue: Some("q".into()),
        priority: 0,
        executor: None,
    };
    assert!(call_in(s, R, move |tx| wf::start_tx(tx, &me(), &big, T0)).is_err());
    let named = StartSpec {
        id: wid("w1"),
        name: "other".into(),
        app_version: "v1".into(),
        input: Vec::new(),
        queue: None,
        priority: 0,
        executor: Some(eid("xa")),
    };
    assert!(matches!(
        call_in(s, R, move |tx| wf::start_tx(tx, &me(), &named, T0)),
        Err(Error::AlreadyExists(_))
    ));
}

fn a_lapsed_executor_is_taken_over(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    exec(s, "xa", "v1", "n1", 1_000, T0);
    exec(s, "xb", "v1", "n2", 1_000, T0);
    start(s, "w1", None, Some("xa"), 0);
    begin(s, "xa", "w1", 1, "charge").unwrap();
    end(s, "xa", "w1", 1, Outcome::Success(b"paid".to_vec())).unwrap();
    // xa is alive: nothing to take over, and when to look again.
    let c = call_in(s, R, |tx| {
        wf::recover_tx(tx, &me(), &eid("xb"), 10, T0 + 500_000)
    })
    .unwrap();
    assert!(c.claims.is_empty());
    assert_eq!(c.retry_at_us, Some(T0 + 1_000_000 + 1));
    // xb renews; xa's lease lapses.
    call_in(s, R, |tx| {
        wf::renew_executor_tx(tx, &me(), &eid("xb"), 1_000, T0 + 1_500_000)
    })
    .unwrap();
    let c = call_in(s, R, |tx| {
        wf::recover_tx(tx, &me(), &eid("xb"), 10, T0 + 1_500_000)
    })
    .unwrap();
    assert_eq!(ids(&c), ["w1"]);
    assert!(c.claims[0].recovered);
    let w = get(s, "w1");
    assert_eq!((w.executor.as_deref(), w.attempts), (Some("xb"), 2));
    // The re-run gets step 1's record; xa is refused.
    assert_eq!(
        begin(s, "xb", "w1", 1, "charge").unwrap(),
        Begun::Done(Outcome::Success(b"paid".to_vec()))
    );
    precondition(begin(s, "xa", "w1", 2, "ship"), "taken over");
    // An executor that leaves hands its workflows over at once.
    exec(s, "xc", "v1", "n1", 60_000, T0 + 1_500_000);
    call_in(s, R, |tx| {
        wf::leave_executor_tx(tx, &me(), &eid("xb"), T0 + 1_600_000)
    })
    .unwrap();
    let c = call_in(s, R, |tx| {
        wf::recover_tx(tx, &me(), &eid("xc"), 10, T0 + 1_600_000)
    })
    .unwrap();
    assert_eq!(ids(&c), ["w1"]);
    // Another version does not take it, until the operator retargets it.
    exec(s, "x2", "v2", "n1", 60_000, T0 + 1_600_000);
    call_in(s, R, |tx| {
        wf::leave_executor_tx(tx, &me(), &eid("xc"), T0 + 1_700_000)
    })
    .unwrap();
    let c = call_in(s, R, |tx| {
        wf::recover_tx(tx, &me(), &eid("x2"), 10, T0 + 1_700_000)
    })
    .unwrap();
    assert!(c.claims.is_empty());
    let moved = call_in(s, R, |tx| {
        wf::retarget_tx(tx, &me(), "v1", "v2", T0 + 1_700_000)
    })
    .unwrap();
    assert_eq!(moved, 1);
    let c = call_in(s, R, |tx| {
        wf::recover_tx(tx, &me(), &eid("x2"), 10, T0 + 1_700_000)
    })
    .unwrap();
    assert_eq!(ids(&c), ["w1"]);
}

fn queues_keep_their_limits(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    exec(s, "xa", "v1", "n1", 1_000, T0);
    let limits = QueueLimits {
        concurrency: Some(1),
        ..Default::default()
    };
    call_in(s, R, move |tx| {
        wf::set_queue_tx(tx, &me(), "q", &limits, T0)
    })
    .unwrap();
    start(s, "w1", Some("q"), None, 0);
    start(s, "w2", Some("q"), None, 0);
    start(s, "w3", Some("q"), None, -1);
    assert_eq!(get(s, "w1").status, Status::Enqueued);
    // Priority first, and one at a time.
    assert_eq!(ids(&dequeue(s, "xa", "q", 10, T0)), ["w3"]);
    assert!(dequeue(s, "xa", "q", 10, T0).claims.is_empty());
    finish(s, "xa", "w3", Outcome::Success(Vec::new())).unwrap();
    assert_eq!(ids(&dequeue(s, "xa", "q", 10, T0)), ["w1"]);
    // Its executor dies: the queue is not stuck. Another executor takes
    // w1 over (it holds the one slot), then w2.
    exec(s, "xb", "v1", "n2", 10_000, T0 + 2_000_000);
    let c = dequeue(s, "xb", "q", 10, T0 + 2_000_000);
    assert_eq!(ids(&c), ["w1"]);
    assert!(c.claims[0].recovered);
    finish(s, "xb", "w1", Outcome::Success(Vec::new())).unwrap();
    assert_eq!(ids(&dequeue(s, "xb", "q", 10, T0 + 2_000_000)), ["w2"]);
    // Limits change while it runs.
    for id in ["w4", "w5", "w6"] {
        start(s, id, Some("q"), None, 0);
    }
    assert!(dequeue(s, "xb", "q", 10, T0 + 2_000_000).claims.is_empty());
    let limits = QueueLimits {
        concurrency: Some(3),
        ..Default::default()
    };
    call_in(s, R, move |tx| {
        wf::set_queue_tx(tx, &me(), "q", &limits, T0)
    })
    .unwrap();
    assert_eq!(
        ids(&dequeue(s, "xb", "q", 10, T0 + 2_000_000)),
        ["w4", "w5"]
    );

    // A rate: 2 starts a second.
    let rate = QueueLimits {
        rate_limit: Some(2),
        rate_period_ms: Some(1_000),
        ..Default::default()
    };
    call_in(s, R, move |tx| wf::set_queue_tx(tx, &me(), "r", &rate, T0)).unwrap();
    for id in ["r1", "r2", "r3"] {
        start(s, id, Some("r"), None, 0);
    }
    let t = T0 + 2_000_000;
    assert_eq!(dequeue(s, "xb", "r", 10, t).claims.len(), 2);
    let c = dequeue(s, "xb", "r", 10, t);
    assert!(c.claims.is_empty());
    assert_eq!(c.retry_at_us, Some(t + 1_000_000 + 1));
    assert_eq!(dequeue(s, "xb", "r", 10, t + 1_000_001).claims.len(), 1);

    // Per node: one each.
    let per_node = QueueLimits {
        node_concurrency: Some(1),
        ..Default::default()
    };
    call_in(s, R, move |tx| {
        wf::set_queue_tx(tx, &me(), "n", &per_node, T0)
    })
    .unwrap();
    for id in ["n1", "n2", "n3"] {
        start(s, id, Some("n"), None, 0);
    }
    exec(s, "xc", "v1", "n1", 10_000, t);
    exec(s, "xd", "v1", "n2", 10_000, t);
    assert_eq!(dequeue(s, "xc", "n", 10, t).claims.len(), 1);
    assert_eq!(dequeue(s, "xd", "n", 10, t).claims.len(), 1);
    assert!(dequeue(s, "xd", "n", 10, t).claims.is_empty());
    // Bad limits are refused.
    let bad = QueueLimits {
        concurrency: Some(0),
        ..Default::default()
    };
    assert!(call_in(s, R, move |tx| wf::set_queue_tx(tx, &me(), "q", &bad, T0)).is_err());
    let half = QueueLimits {
        rate_limit: Some(3),
        ..Default::default()
    };
    assert!(call_in(s, R, move |tx| wf::set_queue_tx(tx, &me(), "q", &half, T0)).is_err());
    let qs = call_in(s, R, |tx| wf::queues_tx(tx, &me())).unwrap();
    assert_eq!(qs.len(), 3);
}

fn one_transaction_steps_run_once(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    exec(s, "xa", "v1", "n1", 10_000, T0);
    start(s, "w1", None, Some("xa"), 0);
    let k = tabos_kernel::realm_partition(R, s.partitions()).0 as i64;
    // The step's effect: a kv row, in the step's transaction.
    let step = move |fail: bool| {
        call_in(s, R, move |tx| {
            let mut run = |tx: &mut dyn tabos_store::Tx| {
                tx.execute(
                    "INSERT INTO kv (p_key, realm, key, value, version, updated_us) \
                     VALUES ($1, $2, $3, $4, 1, 0)",
                    tabos_store::params![k, R, "effect", b"x".to_vec()],
                )?;
                if fail {
                    return Err(Error::Invalid("it failed".into()));
                }
                Ok(b"out".to_vec())
            };
            wf::step_procedure_tx(
                tx,
                &me(),
                &eid("xa"),
                &wid("w1"),
                1,
                "tick",
                b"7",
                T0,
                &mut run,
            )
        })
    };
    // A failing run leaves nothing (its transaction is rolled back).
    assert!(step(true).is_err());
    let count = || {
        s.query("SELECT count(*) FROM kv WHERE key = 'effect'", &[])
            .unwrap()
            .rows[0]
            .get::<i64>(0)
            .unwrap()
    };
    assert_eq!(count(), 0);
    call_in(s, R, |tx| {
        wf::step_failed_tx(
            tx,
            &me(),
            &eid("xa"),
            &wid("w1"),
            1,
            "tick",
            StepKind::Procedure,
            b"7",
            "it failed",
            false,
            T0,
        )
    })
    .unwrap();
    assert_eq!(step(false).unwrap(), Outcome::Success(b"out".to_vec()));
    // Again (a re-run): recorded, not run (it would insert a duplicate).
    assert_eq!(step(false).unwrap(), Outcome::Success(b"out".to_vec()));
    assert_eq!(count(), 1);
    let (_, steps, _) = call_in(s, R, |tx| wf::show_tx(tx, &me(), &wid("w1"), 0)).unwrap();
    assert_eq!(steps[0].attempts, 2);
    // Its input is recorded with its outcome.
    assert_eq!(steps[0].input.as_deref(), Some(&b"7"[..]));
    // Past its retries, a step's error is its outcome.
    let last = call_in(s, R, |tx| {
        wf::step_failed_tx(
            tx,
            &me(),
            &eid("xa"),
            &wid("w1"),
            2,
            "bad",
            StepKind::Procedure,
            b"",
            "boom",
            true,
            T0,
        )
    })
    .unwrap();
    assert_eq!(last, Outcome::Error("boom".into()));
    let (_, steps, _) = call_in(s, R, |tx| wf::show_tx(tx, &me(), &wid("w1"), 0)).unwrap();
    assert_eq!(
        (steps[1].status.as_str(), steps[1].error.as_deref()),
        ("error", Some("boom"))
    );

    // Messages, events, sleeps.
    start(s, "w2", None, Some("xa"), 0);
    call_in(s, R, |tx| {
        wf::send_tx(tx, &me(), None, &wid("w2"), "greet", b"hi", T0)
    })
    .unwrap();
    let recv = |step: i64, give_up: bool| {
        call_in(s, R, move |tx| {
            wf::recv_tx(
                tx,
                &me(),
                &eid("xa"),
                &wid("w2"),
                step,
                "greet",
                give_up,
                T0,
            )
        })
        .unwrap()
    };
    assert_eq!(recv(1, false), Some(Some(b"hi".to_vec())));
    assert_eq!(recv(1, false), Some(Some(b"hi".to_vec())), "replayed");
    assert_eq!(recv(2, false), None, "nothing yet: the caller waits");
    assert_eq!(recv(2, true), Some(None), "its wait ended: none, recorded");
    call_in(s, R, |tx| {
        wf::send_tx(tx, &me(), None, &wid("w2"), "greet", b"late", T0)
    })
    .unwrap();
    assert_eq!(recv(2, false), Some(None), "replayed as none");
    assert!(call_in(s, R, |tx| wf::send_tx(
        tx,
        &me(),
        None,
        &wid("nope"),
        "t",
        b"x",
        T0
    ))
    .is_err());
    // From a workflow's step: once.
    let from = wf::Sender {
        executor: eid("xa"),
        workflow: wid("w2"),
        step: 3,
    };
    for _ in 0..2 {
        let from = from.clone();
        call_in(s, R, move |tx| {
            wf::send_tx(tx, &me(), Some(&from), &wid("w1"), "t", b"m", T0)
        })
        .unwrap();
    }
    let n = s
        .query(
            "SELECT count(*) FROM workflow_message WHERE workflow_id = 'w1'",
            &[],
        )
        .unwrap()
        .rows[0]
        .get::<i64>(0)
        .unwrap();
    assert_eq!(n, 1);
    call_in(s, R, |tx| {
        wf::set_event_tx(tx, &me(), &eid("xa"), &wid("w2"), 4, "stage", b"paid", T0)
    })
    .unwrap();
    let ev = call_in(s, R, |tx| wf::get_event_tx(tx, &me(), &wid("w2"), "stage")).unwrap();
    assert_eq!(ev.as_deref(), Some(&b"paid"[..]));
    let at = call_in(s, R, |tx| {
        wf::sleep_tx(tx, &me(), &eid("xa"), &wid("w2"), 5, 5_000_000, T0)
    })
    .unwrap();
    assert_eq!(at, T0 + 5_000_000);
    let again = call_in(s, R, |tx| {
        wf::sleep_tx(
            tx,
            &me(),
            &eid("xa"),
            &wid("w2"),
            5,
            5_000_000,
            T0 + 4_000_000,
        )
    })
    .unwrap();
    assert_eq!(again, at, "a re-run sleeps only what is left");
    // Each one-transaction step's input: the topic received on, the
    // message sent, the event's value, the sleep's length.
    let (_, steps, _) = call_in(s, R, |tx| wf::show_tx(tx, &me(), &wid("w2"), 0)).unwrap();
    let inputs: Vec<Option<Vec<u8>>> = steps.iter().map(|s| s.input.clone()).collect();
    assert_eq!(
        inputs,
        vec![
            Some(b"greet".to_vec()),
            Some(b"greet".to_vec()),
            Some(b"m".to_vec()),
            Some(b"paid".to_vec()),
            Some(b"5000000".to_vec()),
        ]
    );
}

fn cancel_resume_and_fork(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    exec(s, "xa", "v1", "n1", 10_000, T0);
    start(s, "w1", None, Some("xa"), 0);
    begin(s, "xa", "w1", 1, "a").unwrap();
    end(s, "xa", "w1", 1, Outcome::Success(b"1".to_vec())).unwrap();
    begin(s, "xa", "w1", 2, "b").unwrap();
    end(s, "xa", "w1", 2, Outcome::Error("b failed".into())).unwrap();
    call_in(s, R, |tx| wf::cancel_tx(tx, &me(), &wid("w1"), T0)).unwrap();
    assert_eq!(get(s, "w1").status, Status::Cancelled);
    precondition(begin(s, "xa", "w1", 3, "c"), "cancelled");
    // Resumed: its completed step stays, the failed one runs again.
    let w = call_in(s, R, |tx| wf::resume_tx(tx, &me(), &wid("w1"), None, T0)).unwrap();
    assert_eq!((w.status, w.executor), (Status::Pending, None));
    let c = call_in(s, R, |tx| wf::recover_tx(tx, &me(), &eid("xa"), 10, T0)).unwrap();
    assert_eq!(ids(&c), ["w1"]);
    assert!(matches!(
        begin(s, "xa", "w1", 1, "a").unwrap(),
        Begun::Done(_)
    ));
    assert_eq!(
        begin(s, "xa", "w1", 2, "b").unwrap(),
        Begun::Run { attempt: 1 }
    );
    end(s, "xa", "w1", 2, Outcome::Success(b"2".to_vec())).unwrap();
    finish(s, "xa", "w1", Outcome::Success(b"ok".to_vec())).unwrap();
    precondition(
        call_in(s, R, |tx| wf::cancel_tx(tx, &me(), &wid("w1"), T0)),
        "finished",
    );
    precondition(
        call_in(s, R, |tx| wf::resume_tx(tx, &me(), &wid("w1"), None, T0)),
        "succeeded",
    );
    // Forked from step 2: step 1 kept, step 2 to run.
    let w = call_in(s, R, |tx| {
        wf::fork_tx(tx, &me(), &wid("w1"), &wid("w1b"), 2, None, T0)
    })
    .unwrap();
    assert_eq!(w.forked_from.as_deref(), Some("w1"));
    // Shown from a step on.
    let (_, later, more) = call_in(s, R, |tx| wf::show_tx(tx, &me(), &wid("w1"), 1)).unwrap();
    assert_eq!((later.len(), later[0].step, more), (1, 2, false));
    let (_, steps, _) = call_in(s, R, |tx| wf::show_tx(tx, &me(), &wid("w1b"), 0)).unwrap();
    assert_eq!(steps.len(), 1);
    assert!(matches!(
        call_in(s, R, |tx| wf::fork_tx(
            tx,
            &me(),
            &wid("w1"),
            &wid("w1b"),
            2,
            None,
            T0
        )),
        Err(Error::AlreadyExists(_))
    ));
    assert!(matches!(
        call_in(s, R, |tx| wf::resume_tx(tx, &me(), &wid("nope"), None, T0)),
        Err(Error::NotFound(_))
    ));
    let list = call_in(s, R, |tx| {
        wf::list_tx(
            tx,
            &me(),
            &wf::Filter {
                status: Some(Status::Success),
                ..Default::default()
            },
        )
    })
    .unwrap();
    assert_eq!(list.len(), 1);
}

fn schedules_fire_once_each(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let t0 = 1_795_516_215 * 1_000_000; // 10:30:15
    exec(s, "xa", "v1", "n1", 600_000, t0);
    let spec = wf::Schedule {
        schedule: "tick".into(),
        name: "order".into(),
        cron: "*/10 * * * * *".into(),
        app_version: "v1".into(),
        queue: "sq".into(),
        next_us: 0,
    };
    let set = call_in(s, R, move |tx| wf::set_schedule_tx(tx, &me(), &spec, t0)).unwrap();
    assert_eq!(set.next_us, t0 + 5_000_000);
    // Not due yet.
    let (n, next) = call_in(s, R, move |tx| wf::fire_due_tx(tx, R, t0)).unwrap();
    assert_eq!((n, next), (0, Some(t0 + 5_000_000)));
    // Due: fired once, even if two nodes fire it.
    for _ in 0..2 {
        call_in(s, R, move |tx| wf::fire_due_tx(tx, R, t0 + 5_000_000)).unwrap();
    }
    let c = dequeue(s, "xa", "sq", 10, t0 + 5_000_000);
    assert_eq!(ids(&c), [format!("sched-tick-{}", t0 + 5_000_000).as_str()]);
    assert_eq!(c.claims[0].input, (t0 + 5_000_000).to_string().into_bytes());
    // Missed firings while no node was up: fired once, late.
    let (n, next) = call_in(s, R, move |tx| wf::fire_due_tx(tx, R, t0 + 60_000_000)).unwrap();
    assert_eq!((n, next), (1, Some(t0 + 65_000_000)));
    let list = call_in(s, R, |tx| wf::schedules_tx(tx, &me())).unwrap();
    assert_eq!(list.len(), 1);
    // Bad schedules are refused; removal.
    for cron in ["* * *", "0 0 30 2 *"] {
        let bad = wf::Schedule {
            schedule: "bad".into(),
            name: "order".into(),
            cron: cron.into(),
            app_version: "v1".into(),
            queue: "sq".into(),
            next_us: 0,
        };
        assert!(matches!(
            call_in(s, R, move |tx| wf::set_schedule_tx(tx, &me(), &bad, t0)),
            Err(Error::Invalid(_))
        ));
    }
    call_in(s, R, |tx| wf::remove_schedule_tx(tx, &me(), "tick")).unwrap();
    assert!(matches!(
        call_in(s, R, |tx| wf::remove_schedule_tx(tx, &me(), "tick")),
        Err(Error::NotFound(_))
    ));
}

fn a_restarted_executor_takes_its_workflows_back(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    exec(s, "xa", "v1", "n1", 60_000, T0);
    start(s, "w1", None, Some("xa"), 0);
    // The same id registers again (a restarted process): its workflows are
    // up for recovery at once, long before its old lease would lapse.
    exec(s, "xa", "v1", "n1", 60_000, T0 + 1_000);
    let c = call_in(s, R, |tx| {
        wf::recover_tx(tx, &me(), &eid("xa"), 10, T0 + 1_000)
    })
    .unwrap();
    assert_eq!(ids(&c), ["w1"]);
    assert!(c.claims[0].recovered);
}

/// Every operation checks its caller (issue 37): a reader may look but not
/// start, a scoped credential may do neither, an admin may retarget what a
/// member may not; a start records the caller's user, not one it names.
fn the_caller_is_checked_by_the_operation(b: Backend) {
    use tabos_kernel::auth::{self, Role, Scope, Spec};
    let Some(f) = b.open() else { return };
    let s = &f.store;
    tabos_kernel::realms::create(s, R, tabos_kernel::sched::Scheduler::Fifo).unwrap();
    let rt = common::rt();
    let as_role = |role: Role, scope: Option<&str>| {
        let spec = Spec {
            scope: scope.map(|t| Scope::parse(t).unwrap()),
            ..Spec::realm(R, "alice", role)
        };
        let (_, p) = rt.block_on(auth::create(s, spec)).unwrap();
        p.act("", "", R).unwrap()
    };
    let (reader, member, scoped) = (
        as_role(Role::Reader, None),
        as_role(Role::Member, None),
        as_role(Role::Member, Some("send:inbox")),
    );
    let spec = StartSpec {
        id: wid("w1"),
        name: "order".into(),
        app_version: "v1".into(),
        input: vec![],
        queue: Some("q".into()),
        priority: 0,
        executor: None,
    };
    for who in [reader.clone(), scoped.clone()] {
        let spec = spec.clone();
        let e = call_in(s, R, move |tx| wf::start_tx(tx, &who, &spec, T0)).unwrap_err();
        assert!(matches!(e, Error::Denied(_)), "{e}");
    }
    let started = call_in(s, R, move |tx| wf::start_tx(tx, &member, &spec, T0)).unwrap();
    assert_eq!(started.workflow.user, "alice");
    let r = reader.clone();
    let w = call_in(s, R, move |tx| wf::get_tx(tx, &r, &wid("w1"))).unwrap();
    assert_eq!(w.map(|w| w.id), Some("w1".to_string()));
    let e = call_in(s, R, move |tx| wf::get_tx(tx, &scoped, &wid("w1"))).unwrap_err();
    assert!(matches!(e, Error::Denied(_)), "{e}");
    let m = as_role(Role::Member, None);
    let e = call_in(s, R, move |tx| wf::retarget_tx(tx, &m, "v1", "v2", T0)).unwrap_err();
    assert!(matches!(e, Error::Denied(_)), "{e}");
    let a = as_role(Role::Admin, None);
    call_in(s, R, move |tx| wf::retarget_tx(tx, &a, "v1", "v2", T0)).unwrap();
}

/// A workflow run by a proc of its own (issue 41, item 4): started with
/// its proc in one transaction, the proc its executor (an id no client may
/// register), never taken over by a client executor of its version and
/// function, started once however often it is asked; the proc's end fails
/// it once, and only a wasm proc may run one.
fn a_workflow_run_by_its_own_proc(b: Backend) {
    use tabos_kernel::ids::Pid;
    use tabos_kernel::procs::{self, Descriptor, Kind};
    let Some(f) = b.open() else { return };
    let s = &f.store;
    tabos_kernel::realms::create(s, R, tabos_kernel::sched::Scheduler::Fifo).unwrap();
    let spec = wf::ExecutorSpec {
        app_version: "m1".into(),
        functions: vec!["order".into()],
        node_id: "n1".into(),
        lease_ms: 60_000,
    };
    let sp = spec.clone();
    let e = call_in(s, R, move |tx| {
        wf::register_executor_tx(tx, &me(), &eid("proc:p1"), &sp, T0)
    })
    .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let start = StartSpec {
        id: wid("w1"),
        name: "order".into(),
        app_version: "m1".into(),
        input: b"in".to_vec(),
        queue: None,
        priority: 0,
        executor: None,
    };
    let module = Descriptor {
        kind: Kind::Wasm,
        class: procs::Class::Be,
        cores: 0,
        restartable: true,
        ..Descriptor::native("/x/wf.wasm")
    };
    let (st, d) = (start.clone(), module.clone());
    let started = call_in(s, R, move |tx| {
        wf::start_in_proc_tx(tx, &me(), &st, &Pid::new("p1")?, &d, T0)
    })
    .unwrap();
    assert!(started.created);
    assert_eq!(started.workflow.status, Status::Pending);
    assert_eq!(started.workflow.executor.as_deref(), Some("proc:p1"));
    let p = common::rt()
        .block_on(procs::status(s, R, &Pid::new("p1").unwrap()))
        .unwrap();
    assert_eq!(p.args, ["order"]);
    assert!(p
        .env
        .contains(&(wf::PROC_ENV.to_string(), "w1".to_string())));
    // Asked again: the first, and no second proc.
    let (st, d) = (start.clone(), module.clone());
    let again = call_in(s, R, move |tx| {
        wf::start_in_proc_tx(tx, &me(), &st, &Pid::new("p2")?, &d, T0)
    })
    .unwrap();
    assert!(!again.created);
    assert!(common::rt()
        .block_on(procs::status(s, R, &Pid::new("p2").unwrap()))
        .is_err());
    // A client executor of its version and function never takes it, however
    // late it looks.
    let late = T0 + 1_000_000_000_000;
    exec(s, "xa", "m1", "n1", 60_000, late);
    let c = call_in(s, R, move |tx| {
        wf::recover_tx(tx, &me(), &eid("xa"), 10, late)
    })
    .unwrap();
    assert!(ids(&c).is_empty());
    // No client steps, renews or leaves as its proc.
    let e = begin(s, "proc:p1", "w1", 1, "x").unwrap_err();
    assert!(matches!(e, Error::Denied(_)), "{e}");
    let e = call_in(s, R, |tx| {
        wf::leave_executor_tx(tx, &me(), &eid("proc:p1"), T0)
    })
    .unwrap_err();
    assert!(matches!(e, Error::Denied(_)), "{e}");
    // Its proc's end fails it, once.
    let p1 = Pid::new("p1").unwrap();
    let ended = call_in(s, R, move |tx| {
        wf::proc_ended_tx(tx, R, &p1, "exited with status 2", T0)
    })
    .unwrap();
    assert!(ended);
    let w = get(s, "w1");
    assert_eq!(w.status, Status::Error);
    assert!(w.error.unwrap().contains("exited with status 2"));
    let p1 = Pid::new("p1").unwrap();
    let again = call_in(s, R, move |tx| wf::proc_ended_tx(tx, R, &p1, "again", T0)).unwrap();
    assert!(!again);
    // The cluster's give-back fails a proc for good (its node lost, its
    // restarts spent): its workflow fails; a proc still live is left alone.
    let (st, d) = (
        StartSpec {
            id: wid("w3"),
            ..start.clone()
        },
        module.clone(),
    );
    call_in(s, R, move |tx| {
        wf::start_in_proc_tx(tx, &me(), &st, &Pid::new("p4")?, &d, T0)
    })
    .unwrap();
    let p4 = || Pid::new("p4").unwrap();
    let n = call_in(s, R, move |tx| {
        wf::procs_failed_tx(tx, R, &[p4()], "lost", T0)
    })
    .unwrap();
    assert_eq!((n, get(s, "w3").status), (0, Status::Pending));
    call_in(s, R, move |tx| procs::evict_tx(tx, R, &p4(), T0)).unwrap();
    let n = call_in(s, R, move |tx| {
        wf::procs_failed_tx(tx, R, &[p4()], "lost", T0)
    })
    .unwrap();
    assert_eq!((n, get(s, "w3").status), (1, Status::Error));
    // Only a wasm module runs a workflow of its own.
    let st = StartSpec {
        id: wid("w2"),
        ..start
    };
    let e = call_in(s, R, move |tx| {
        wf::start_in_proc_tx(
            tx,
            &me(),
            &st,
            &Pid::new("p3")?,
            &Descriptor::native("/bin/true"),
            T0,
        )
    })
    .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

both!(
    a_workflow_run_by_its_own_proc,
    the_caller_is_checked_by_the_operation,
    schedules_fire_once_each,
    a_restarted_executor_takes_its_workflows_back,
    steps_are_recorded_and_replayed,
    a_lapsed_executor_is_taken_over,
    queues_keep_their_limits,
    one_transaction_steps_run_once,
    cancel_resume_and_fork,
);
