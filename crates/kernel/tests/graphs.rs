//! Task graphs (kernel::graphs, issue 43 item 1), on SQLite and
//! PostgreSQL, driven as a node's scheduler drives them (claim, run,
//! record a failure): fan-out and fan-in with data between tasks, each
//! procedure task's effects exactly once — through failures, retries, a
//! node's claims given back and a run refused after them — dynamic tasks
//! making child graphs, held graphs, cancellation, realms apart, bad input.

use serde_json::json;
use tabos_kernel::graphs::{self, Claimed, GraphSpec, GraphStatus, Ran, TaskSpec, TaskStatus};
use tabos_kernel::procedures::{Install, Procedures};
use tabos_kernel::Error;
use tabos_sandbox::procedure::{Language, Limits};
use tabos_sandbox::Sandbox;

use crate::common;
use common::Backend;

both!(
    fan_out_and_fan_in_carry_outputs_once,
    failures_are_retried_then_end_the_graph,
    a_lost_nodes_claims_run_elsewhere_exactly_once,
    dynamic_tasks_make_child_graphs,
    held_graphs_take_tasks_until_closed,
    cancelling_stops_what_waits_and_refuses_what_runs,
    graphs_are_apart_by_realm_and_bad_input_changes_nothing,
    a_proc_task_spawns_its_proc_and_cancelling_evicts_it,
    claims_take_realms_in_turn,
    a_procs_graph_acts_for_it,
);

const R: &str = "g";
const NODE: &str = "n1";

struct Fx {
    f: common::Fixture,
    sandbox: Sandbox,
}

fn setup(b: Backend) -> Option<Fx> {
    let f = b.open()?;
    let sandbox = Sandbox::new().unwrap();
    let p = Procedures::new(f.store.clone(), sandbox.clone());
    let rt = common::rt();
    let js = [
        // The sum of its arguments; counts its runs in the realm's table.
        (
            "add",
            "function main(a) { const n = Number(tabos.get('runs') || '0') + 1; \
             tabos.put('runs', String(n)); \
             return String(JSON.parse(a).reduce((x, y) => x + y, 0)); }",
        ),
        // Writes, then fails: its write must never be seen.
        (
            "bad",
            "function main(a) { tabos.put('bad', 'written'); throw new Error('boom'); }",
        ),
        // A child graph summing [lo, hi) by halves, down to ranges of 2.
        (
            "split",
            r#"function main(arg) {
              const [lo, hi] = JSON.parse(arg);
              if (hi - lo <= 2) { let s = 0; for (let i = lo; i < hi; i++) s += i; return String(s); }
              const mid = Math.floor((lo + hi) / 2);
              return JSON.stringify({"$tasks": [
                {"id": "l", "procedure": "split", "dynamic": true, "args": [lo, mid]},
                {"id": "r", "procedure": "split", "dynamic": true, "args": [mid, hi]},
                {"id": "s", "procedure": "add", "args": [{"$task": "l"}, {"$task": "r"}]}],
                "$result": "s"});
            }"#,
        ),
        ("text", "function main(a) { return 'not json'; }"),
        // Copies file a[0] to a[1].
        (
            "copy",
            "function main(a) { const [from, to] = JSON.parse(a); \
             tabos.write(to, tabos.read(from)); return JSON.stringify(to); }",
        ),
        // A child graph of one copy.
        (
            "fan",
            r#"function main(a) { return JSON.stringify({"$tasks": [
                {"id": "c", "procedure": "copy", "args": JSON.parse(a)}]}); }"#,
        ),
    ];
    for realm in [R, "other"] {
        for (name, code) in js {
            rt.block_on(p.install(
                &common::as_user(realm, "root"),
                Install {
                    name: name.into(),
                    language: Language::Js,
                    code: code.as_bytes().to_vec(),
                    limits: Limits {
                        memory_bytes: 16 << 20,
                        timeout: std::time::Duration::from_millis(500),
                    },
                    read_only: false,
                },
            ))
            .unwrap();
        }
    }
    Some(Fx { f, sandbox })
}

fn who() -> tabos_kernel::auth::Caller {
    common::as_user(R, "alice")
}

fn submit(fx: &Fx, id: &str, spec: GraphSpec) -> Result<graphs::Graph, Error> {
    let (w, id) = (who(), id.to_string());
    common::call_in(&fx.f.store, R, move |tx| {
        graphs::submit_tx(tx, &w, &id, &spec, 1)
    })
}

fn claim(fx: &Fx, node: &str) -> Vec<Claimed> {
    let node = node.to_string();
    common::call_in(&fx.f.store, R, move |tx| {
        graphs::claim_tx(tx, &node, 256, "", 2)
    })
    .unwrap()
}

fn run(fx: &Fx, c: &Claimed, node: &str) -> Result<Ran, Error> {
    let (s, c, node) = (fx.sandbox.clone(), c.clone(), node.to_string());
    common::call_in(&fx.f.store, R, move |tx| {
        graphs::run_tx(tx, &s, &c, &node, 3)
    })
}

fn failed(fx: &Fx, c: &Claimed, node: &str, e: &Error) {
    let (c, node, e) = (c.clone(), node.to_string(), e.clone());
    common::call_in(&fx.f.store, R, move |tx| {
        graphs::failed_tx(tx, &c, &node, &e, 4)
    })
    .unwrap()
}

/// Runs what is ready until nothing is, as a node's scheduler would;
/// returns how many runs there were.
fn drain(fx: &Fx) -> usize {
    let mut runs = 0;
    loop {
        let claimed = claim(fx, NODE);
        if claimed.is_empty() {
            return runs;
        }
        for c in claimed {
            runs += 1;
            if let Err(e) = run(fx, &c, NODE) {
                failed(fx, &c, NODE, &e);
            }
        }
    }
}

fn show(fx: &Fx, id: &str) -> (graphs::Graph, Vec<graphs::Task>) {
    let (w, id) = (who(), id.to_string());
    common::call_in(&fx.f.store, R, move |tx| graphs::show_tx(tx, &w, &id)).unwrap()
}

fn kv(fx: &Fx, key: &str) -> Option<String> {
    let key = key.to_string();
    common::call_in(&fx.f.store, R, move |tx| {
        tabos_kernel::kv::get_tx(tx, R, &key)
    })
    .unwrap()
    .map(|v| String::from_utf8(v).unwrap())
}

fn add(id: &str, args: serde_json::Value) -> TaskSpec {
    TaskSpec::procedure(id, "add", args)
}

fn r(id: &str) -> serde_json::Value {
    json!({ "$task": id })
}

fn fan_out_and_fan_in_carry_outputs_once(b: Backend) {
    let Some(fx) = setup(b) else { return };
    // 20 leaves, a join of all of them, a last step after it.
    let mut tasks: Vec<TaskSpec> = (0..20)
        .map(|i| add(&format!("l{i}"), json!([i, 1])))
        .collect();
    let all: Vec<_> = (0..20).map(|i| r(&format!("l{i}"))).collect();
    tasks.push(add("join", serde_json::Value::Array(all)));
    tasks.push(add("last", json!([r("join"), r("l0"), 1000])));
    let g = submit(
        &fx,
        "fan",
        GraphSpec {
            tasks,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((g.status, g.tasks, g.ended), (GraphStatus::Running, 22, 0));
    // Only the leaves are ready; the join waits for all 20.
    let (_, ts) = show(&fx, "fan");
    let ready = ts.iter().filter(|t| t.status == TaskStatus::Ready).count();
    assert_eq!(ready, 20);
    assert_eq!(ts[20].deps.len(), 20);
    assert_eq!(drain(&fx), 22, "each task ran once");
    let (g, ts) = show(&fx, "fan");
    // sum(i + 1 for i < 20) = 210; 210 + 1 + 1000.
    assert_eq!(g.status, GraphStatus::Success);
    assert_eq!(g.output.as_deref(), Some(&b"1211"[..]));
    assert!(ts
        .iter()
        .all(|t| t.status == TaskStatus::Success && t.attempts == 1));
    assert_eq!(
        kv(&fx, "runs").as_deref(),
        Some("22"),
        "effects exactly once"
    );
    // A second submit of the id is the first.
    let again = submit(
        &fx,
        "fan",
        GraphSpec {
            tasks: vec![add("x", json!([1]))],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((again.status, again.tasks), (GraphStatus::Success, 22));
}

fn failures_are_retried_then_end_the_graph(b: Backend) {
    let Some(fx) = setup(b) else { return };
    let mut bad = TaskSpec::procedure("b", "bad", json!([r("a")]));
    bad.attempts_max = 2;
    submit(
        &fx,
        "f",
        GraphSpec {
            tasks: vec![
                add("a", json!([1])),
                bad,
                add("c", json!([r("b")])),
                add("d", json!([5])),
            ],
            ..Default::default()
        },
    )
    .unwrap();
    drain(&fx);
    let (g, ts) = show(&fx, "f");
    assert_eq!(g.status, GraphStatus::Error);
    assert!(
        g.error.as_deref().unwrap().contains("task b"),
        "{:?}",
        g.error
    );
    let st: Vec<_> = ts
        .iter()
        .map(|t| (t.id.as_str(), t.status, t.attempts))
        .collect();
    assert_eq!(st[1], ("b", TaskStatus::Error, 2), "tried twice");
    assert_eq!(
        st[2],
        ("c", TaskStatus::Cancelled, 0),
        "what takes it never runs"
    );
    assert_eq!(
        kv(&fx, "bad"),
        None,
        "a failed run's writes are rolled back"
    );
    // A missing procedure is not tried again; a non-JSON output a task
    // takes fails the taker.
    submit(
        &fx,
        "m",
        GraphSpec {
            tasks: vec![TaskSpec::procedure("a", "nosuch", json!([]))],
            ..Default::default()
        },
    )
    .unwrap();
    submit(
        &fx,
        "t",
        GraphSpec {
            tasks: vec![
                TaskSpec::procedure("a", "text", json!([])),
                add("b", json!([r("a")])),
            ],
            ..Default::default()
        },
    )
    .unwrap();
    drain(&fx);
    let (g, ts) = show(&fx, "m");
    assert_eq!((g.status, ts[0].attempts), (GraphStatus::Error, 1));
    let (g, ts) = show(&fx, "t");
    assert_eq!(g.status, GraphStatus::Error);
    assert!(ts[1].error.as_deref().unwrap().contains("not JSON"));
}

fn a_lost_nodes_claims_run_elsewhere_exactly_once(b: Backend) {
    let Some(fx) = setup(b) else { return };
    submit(
        &fx,
        "l",
        GraphSpec {
            tasks: vec![add("a", json!([1, 2])), add("b", json!([r("a"), 3]))],
            ..Default::default()
        },
    )
    .unwrap();
    // Node "dead" claims a and is lost before it commits a run.
    let claimed = claim(&fx, "dead");
    assert_eq!(claimed.len(), 1);
    assert!(
        claim(&fx, NODE).is_empty(),
        "a claimed task is no one else's"
    );
    let n = common::call_in(&fx.f.store, R, |tx| graphs::requeue_node_tx(tx, "dead")).unwrap();
    assert_eq!(n, 1);
    let mine = claim(&fx, NODE);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].attempt, 2);
    // The lost node comes back and tries its old claim: refused.
    let e = run(&fx, &claimed[0], "dead").unwrap_err();
    assert!(matches!(e, Error::Precondition(_)), "{e}");
    // Its failure's record changes nothing either.
    failed(&fx, &claimed[0], "dead", &e);
    assert_eq!(run(&fx, &mine[0], NODE).unwrap(), Ran::Done);
    drain(&fx);
    let (g, _) = show(&fx, "l");
    assert_eq!(
        (g.status, g.output.as_deref()),
        (GraphStatus::Success, Some(&b"6"[..]))
    );
    assert_eq!(kv(&fx, "runs").as_deref(), Some("2"));
}

fn dynamic_tasks_make_child_graphs(b: Backend) {
    let Some(fx) = setup(b) else { return };
    let mut root = TaskSpec::procedure("x", "split", json!([0, 20]));
    root.dynamic = true;
    submit(
        &fx,
        "d",
        GraphSpec {
            tasks: vec![root, add("y", json!([r("x"), 1]))],
            ..Default::default()
        },
    )
    .unwrap();
    drain(&fx);
    let (g, ts) = show(&fx, "d");
    assert_eq!(g.status, GraphStatus::Success);
    assert_eq!(g.output.as_deref(), Some(&b"191"[..]), "sum(0..20) + 1");
    assert_eq!(ts[0].child.as_deref(), Some("d:x"));
    let (child, cts) = show(&fx, "d:x");
    assert_eq!(child.parent, Some(("d".into(), "x".into())));
    assert_eq!(cts.len(), 3);
    // Without `dynamic`, the same answer is just an output.
    submit(
        &fx,
        "s",
        GraphSpec {
            tasks: vec![TaskSpec::procedure("x", "split", json!([0, 20]))],
            ..Default::default()
        },
    )
    .unwrap();
    drain(&fx);
    let (g, _) = show(&fx, "s");
    assert!(g.output.unwrap().starts_with(b"{\"$tasks\""));
}

fn held_graphs_take_tasks_until_closed(b: Backend) {
    let Some(fx) = setup(b) else { return };
    let g = submit(
        &fx,
        "h",
        GraphSpec {
            held: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(g.held);
    let add_tasks = |tasks: Vec<TaskSpec>| {
        let w = who();
        common::call_in(&fx.f.store, R, move |tx| {
            graphs::add_tasks_tx(tx, &w, "h", &tasks, 5)
        })
    };
    add_tasks(vec![add("a", json!([1, 2]))]).unwrap();
    drain(&fx);
    assert_eq!(show(&fx, "h").0.status, GraphStatus::Running, "held open");
    // A later task takes an ended one.
    add_tasks(vec![add("b", json!([r("a"), 10]))]).unwrap();
    drain(&fx);
    let w = who();
    let g = common::call_in(&fx.f.store, R, move |tx| graphs::close_tx(tx, &w, "h", 6)).unwrap();
    assert_eq!(g.status, GraphStatus::Success);
    assert_eq!(
        g.output.as_deref(),
        Some(&b"13"[..]),
        "its last task's output"
    );
    let e = add_tasks(vec![add("c", json!([]))]).unwrap_err();
    assert!(matches!(e, Error::Precondition(_)), "{e}");
}

fn cancelling_stops_what_waits_and_refuses_what_runs(b: Backend) {
    let Some(fx) = setup(b) else { return };
    submit(
        &fx,
        "c",
        GraphSpec {
            tasks: vec![add("a", json!([1])), add("b", json!([r("a")]))],
            ..Default::default()
        },
    )
    .unwrap();
    let claimed = claim(&fx, NODE);
    let w = who();
    let g = common::call_in(&fx.f.store, R, move |tx| graphs::cancel_tx(tx, &w, "c", 5)).unwrap();
    assert_eq!(g.status, GraphStatus::Cancelled);
    let e = run(&fx, &claimed[0], NODE).unwrap_err();
    assert!(matches!(e, Error::Precondition(_)), "{e}");
    assert_eq!(kv(&fx, "runs"), None);
    let (_, ts) = show(&fx, "c");
    assert!(ts.iter().all(|t| t.status == TaskStatus::Cancelled));
    assert!(claim(&fx, NODE).is_empty());
    // Cancelling again is harmless; a finished graph has nothing to cancel.
    let w = who();
    common::call_in(&fx.f.store, R, move |tx| graphs::cancel_tx(tx, &w, "c", 6)).unwrap();
}

fn graphs_are_apart_by_realm_and_bad_input_changes_nothing(b: Backend) {
    let Some(fx) = setup(b) else { return };
    submit(
        &fx,
        "mine",
        GraphSpec {
            tasks: vec![add("a", json!([1]))],
            ..Default::default()
        },
    )
    .unwrap();
    let other = common::as_user("other", "alice");
    let o = other.clone();
    let seen = common::call_in(&fx.f.store, "other", move |tx| {
        graphs::get_tx(tx, &o, "mine")
    });
    assert_eq!(seen.unwrap(), None, "another realm's graph is not there");
    let o = other.clone();
    let e = common::call_in(&fx.f.store, "other", move |tx| {
        graphs::cancel_tx(tx, &o, "mine", 1)
    })
    .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    // Bad graphs: each refused, none stored.
    let bad = [
        vec![add("a", json!([r("zz")]))],
        vec![add("a", json!([])), add("a", json!([]))],
        vec![add("a b", json!([]))],
        vec![add("a", json!({"not": "an array"}))],
        vec![add("a", json!([r("b")])), add("b", json!([r("a")]))],
        vec![],
    ];
    for (i, tasks) in bad.into_iter().enumerate() {
        let e = submit(
            &fx,
            &format!("bad{i}"),
            GraphSpec {
                tasks,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::Invalid(_) | Error::AlreadyExists(_)),
            "{i}: {e}"
        );
        let (w, id) = (who(), format!("bad{i}"));
        let g = common::call_in(&fx.f.store, R, move |tx| graphs::get_tx(tx, &w, &id)).unwrap();
        assert_eq!(g, None, "{i}: nothing stored");
    }
    assert_eq!(drain(&fx), 1, "only the good graph's task ran");
}

fn a_proc_task_spawns_its_proc_and_cancelling_evicts_it(b: Backend) {
    let Some(fx) = setup(b) else { return };
    tabos_kernel::realms::create(&fx.f.store, R, tabos_kernel::realms::Scheduler::Fifo).unwrap();
    let mut p = TaskSpec::procedure("p", "/bin/sh", json!([r("a"), "x"]));
    p.kind = graphs::Kind::Proc;
    p.argv = vec!["-c".into(), "sleep 600".into()];
    submit(
        &fx,
        "pg",
        GraphSpec {
            tasks: vec![add("a", json!([1, 2])), p],
            ..Default::default()
        },
    )
    .unwrap();
    drain(&fx);
    let (_, ts) = show(&fx, "pg");
    assert_eq!(ts[1].status, TaskStatus::Running, "{:?}", ts[1].error);
    assert_eq!(ts[1].child.as_deref(), Some("pg:p:1"), "a pid per run");
    let proc = |fx: &Fx| {
        fx.f.store
            .query(
                "SELECT state, env FROM proc WHERE realm = 'g' AND pid = 'pg:p:1'",
                &[],
            )
            .unwrap()
            .rows
            .first()
            .map(|r| (r.get::<String>(0).unwrap(), r.get::<String>(1).unwrap()))
            .unwrap()
    };
    let (state, env) = proc(&fx);
    assert_eq!(state, "spawned");
    assert!(
        env.contains("TABOS_TASK_ARGS") && env.contains("[3,\\\"x\\\"]"),
        "{env}"
    );
    // Claimed again by nobody: a proc task waits for its proc, not a node.
    assert!(claim(&fx, NODE).is_empty());
    let w = who();
    common::call_in(&fx.f.store, R, move |tx| graphs::cancel_tx(tx, &w, "pg", 9)).unwrap();
    assert_eq!(
        proc(&fx).0,
        "evicted",
        "cancelling the graph evicts its proc"
    );
    // A proc the task's user may not run is refused at submit.
    let mut bad = TaskSpec::procedure("p", "", json!([]));
    bad.kind = graphs::Kind::Proc;
    let e = submit(
        &fx,
        "nope",
        GraphSpec {
            tasks: vec![bad],
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

fn claims_take_realms_in_turn(b: Backend) {
    let Some(fx) = setup(b) else { return };
    // Three realms on R's partition, each with tasks ready.
    let here = tabos_kernel::realm_partition(R, fx.f.store.partitions());
    let realms: Vec<String> = (0..100)
        .map(|i| format!("q{i:02}"))
        .filter(|r| tabos_kernel::realm_partition(r, fx.f.store.partitions()) == here)
        .take(3)
        .collect();
    assert_eq!(realms.len(), 3);
    for realm in &realms {
        let w = common::as_user(realm, "alice");
        let spec = GraphSpec {
            tasks: (0..5).map(|i| add(&format!("t{i}"), json!([i]))).collect(),
            ..Default::default()
        };
        common::call_in(&fx.f.store, realm, move |tx| {
            graphs::submit_tx(tx, &w, "x", &spec, 1)
        })
        .unwrap();
    }
    let claim_after = |after: &str| {
        let after = after.to_string();
        common::call_in(&fx.f.store, R, move |tx| {
            graphs::claim_tx(tx, NODE, 1, &after, 2)
        })
        .unwrap()
        .into_iter()
        .map(|c| c.realm)
        .collect::<Vec<_>>()
    };
    // One task a claim: each realm in turn, then round again.
    let mut after = String::new();
    let mut order = Vec::new();
    for _ in 0..6 {
        let got = claim_after(&after);
        assert_eq!(got.len(), 1);
        after = got[0].clone();
        order.push(after.clone());
    }
    let want: Vec<String> = realms.iter().chain(realms.iter()).cloned().collect();
    assert_eq!(order, want);
}

/// Issue 43, item 2: a graph submitted with a proc's credential acts for
/// that proc — `graph.pid`, its child graphs' too — so its procedure
/// tasks' file reads and writes are the proc's `proc_event` rows, in the
/// order they ran, and the README's lineage query follows them; a graph
/// submitted by a client acting for no proc records none.
fn a_procs_graph_acts_for_it(b: Backend) {
    let Some(fx) = setup(b) else { return };
    let s = fx.f.store.clone();
    let pid = tabos_kernel::ids::Pid::new("driver").unwrap();
    let root = common::as_user(R, "root");
    common::rt().block_on(common::realm_with_proc_and_file(
        &s, R, &pid, "/in", b"input",
    ));
    let mut fan = TaskSpec::procedure("fan", "fan", json!(["/mid", "/out", r("first")]));
    fan.dynamic = true;
    let spec = GraphSpec {
        tasks: vec![
            TaskSpec::procedure("first", "copy", json!(["/in", "/mid"])),
            fan,
        ],
        ..Default::default()
    };
    let by_proc = tabos_kernel::auth::Caller::of_started_proc(R, &pid, "root", None).unwrap();
    let sp = spec.clone();
    common::call_in(&s, R, move |tx| {
        graphs::submit_tx(tx, &by_proc, "p", &sp, 1)
    })
    .unwrap();
    drain(&fx);
    let (g, _) = show(&fx, "p");
    assert_eq!(g.status, GraphStatus::Success, "{g:?}");
    let acts_for = |id: &str| -> Option<String> {
        s.query(
            "SELECT pid FROM graph WHERE realm = $1 AND graph_id = $2",
            tabos_store::params![R, id],
        )
        .unwrap()
        .rows[0]
            .get(0)
            .unwrap()
    };
    assert_eq!(acts_for("p").as_deref(), Some("driver"));
    assert_eq!(
        acts_for("p:fan").as_deref(),
        Some("driver"),
        "a child graph's too"
    );
    let events = || -> Vec<(String, String)> {
        s.query(
            "SELECT event, detail FROM proc_event WHERE realm = $1 AND pid = 'driver' \
             AND event LIKE 'fs_%' ORDER BY seq",
            tabos_store::params![R],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect()
    };
    let e = |ev: &str, d: &str| (ev.to_string(), d.to_string());
    assert_eq!(
        events(),
        [
            e("fs_read", "/in @0 +5"),
            e("fs_write", "/mid @0 +5"),
            e("fs_read", "/mid @0 +5"),
            e("fs_write", "/out @0 +5"),
        ]
    );
    // The README's lineage query, as written: /out's writer and its inputs.
    let lineage = s
        .query(
            "SELECT DISTINCT w.pid, split_part(r.detail, ' @', 1) AS input \
               FROM proc_event w JOIN proc_event r \
                 ON r.realm = w.realm AND r.pid = w.pid AND r.event = 'fs_read' AND r.seq < w.seq \
              WHERE w.event = 'fs_write' AND split_part(w.detail, ' @', 1) = '/out' \
              ORDER BY 2",
            tabos_store::params![],
        )
        .unwrap();
    let inputs: Vec<(String, String)> = lineage
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(inputs, [e("driver", "/in"), e("driver", "/mid")]);
    // The same graph by a client acting for no proc: nothing recorded.
    common::call_in(&s, R, move |tx| graphs::submit_tx(tx, &root, "q", &spec, 1)).unwrap();
    drain(&fx);
    assert_eq!(show(&fx, "q").0.status, GraphStatus::Success);
    assert_eq!(acts_for("q"), None);
    assert_eq!(events().len(), 4, "the graph of no proc noted nothing");
}
