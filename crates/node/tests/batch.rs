//! The Batch service (issue 18, item 2): several calls in one round trip,
//! each with the checks, errors and effects it has alone; a realm's
//! credential reaches only its realm in a batch too; bad batches are
//! refused whole and change nothing.

use crate::common;

use common::code;
use tabos_client::batch::BATCH_CALLS_MAX;
use tabos_client::proto::{self, batch_call::Call, batch_result::Result as Out};
use tabos_store::testing::TempDir;
use tonic::Code;

fn put(realm: &str, path: &str, data: &[u8]) -> Call {
    Call::NamesSet(proto::SetNameRequest {
        realm: realm.into(),
        path: path.into(),
        data: data.to_vec(),
        ..Default::default()
    })
}

fn get(realm: &str, path: &str) -> Call {
    Call::NamesGet(proto::NameRequest {
        realm: realm.into(),
        path: path.into(),
    })
}

/// Realms `a` and `b` on `n`: the operator's client and `a`'s admin's.
async fn realms_a_and_b(n: &common::Running) -> (tabos_client::Client, tabos_client::Client) {
    let mut op = n.client().await;
    let admin = op
        .create_realm("a", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    op.create_realm("b", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap();
    let a = n.client_with(&admin).await;
    (op, a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_each_call_as_alone_in_order() {
    let dir = TempDir::new("batch");
    let n = common::start(&dir, "n1").await;
    let (mut op, mut a) = realms_a_and_b(&n).await;
    a.create_mailbox("", "box", 0, None).await.unwrap();

    let results = a
        .batch(vec![
            put("", "/x", b"1"),
            get("", "/x"),
            get("", "/missing"),
            Call::Send(proto::SendRequest {
                messages: vec![proto::Outgoing {
                    to: "box".into(),
                    payload: b"hello".to_vec(),
                    message_id: String::new(),
                }],
                ..Default::default()
            }),
            Call::Recv(proto::RecvRequest {
                mailbox: "box".into(),
                ..Default::default()
            }),
            // Waiting is refused for this call only.
            Call::Recv(proto::RecvRequest {
                mailbox: "box".into(),
                timeout_ms: 10,
                ..Default::default()
            }),
            // Another realm, with this realm's credential: refused.
            get("b", "/x"),
            put("b", "/y", b"2"),
            // Calls after failures still run, and see the earlier ones.
            put("", "/x", b"2"),
            get("", "/x"),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 10);
    let mut r = results.into_iter();
    assert!(matches!(r.next().unwrap().unwrap(), Out::NamesSet(v) if v.version == 1));
    assert!(matches!(r.next().unwrap().unwrap(), Out::NamesGet(e) if e.data == b"1"));
    assert_eq!(code(&r.next().unwrap().unwrap_err()), Code::NotFound);
    assert!(matches!(r.next().unwrap().unwrap(), Out::Send(s) if s.sent.len() == 1));
    assert!(
        matches!(r.next().unwrap().unwrap(), Out::Recv(m) if m.messages.len() == 1 && m.messages[0].payload == b"hello")
    );
    assert_eq!(code(&r.next().unwrap().unwrap_err()), Code::InvalidArgument);
    assert_eq!(
        code(&r.next().unwrap().unwrap_err()),
        Code::PermissionDenied
    );
    assert_eq!(
        code(&r.next().unwrap().unwrap_err()),
        Code::PermissionDenied
    );
    assert!(matches!(r.next().unwrap().unwrap(), Out::NamesSet(v) if v.version == 2));
    assert!(matches!(r.next().unwrap().unwrap(), Out::NamesGet(e) if e.data == b"2"));
    // The other realm was not written.
    let e = op.name_get("b", "/y").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);

    // Too many calls: the whole batch is refused, nothing runs.
    let many: Vec<Call> = (0..=BATCH_CALLS_MAX)
        .map(|i| put("", &format!("/many{i}"), b"x"))
        .collect();
    let e = a.batch(many).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let e = a.name_get("", "/many0").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);

    // A failed call keeps its typed reason (issue 37, item 3): a set at a
    // stale version is a conflict, not only its code's "precondition".
    let stale = Call::NamesSet(proto::SetNameRequest {
        realm: String::new(),
        path: "/x".into(),
        data: b"3".to_vec(),
        if_version: Some(1),
        ..Default::default()
    });
    let mut r = a.batch(vec![stale]).await.unwrap().into_iter();
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition);
    assert_eq!(
        e.reason(),
        Some(tabos_client::fault::ErrorReason::Conflict),
        "{e}"
    );

    // A bad credential is refused before anything runs.
    let mut bad = n.client_with("tabos_0000000000000000_0000").await;
    let e = bad.batch(vec![put("", "/z", b"1")]).await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated);
    n.shut_down().await;
}

/// A batch marked independent runs its calls at once: each still with
/// its own checks, errors and effects, the results in the calls' order —
/// and its writes share the store's group commits, where the same calls
/// in order commit one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_batch_answers_in_order_and_shares_commits() {
    let dir = TempDir::new("batch-independent");
    let n = common::start(&dir, "n1").await;
    let (mut op, mut a) = realms_a_and_b(&n).await;
    const PUTS: usize = 40;
    let once = |path: &str| {
        Call::NamesSet(proto::SetNameRequest {
            realm: String::new(),
            path: path.into(),
            data: path.as_bytes().to_vec(),
            if_version: Some(0),
            fence: None,
        })
    };
    let mut calls: Vec<Call> = (0..PUTS).map(|i| once(&format!("/i/{i}"))).collect();
    calls.push(once("/i/0")); // exists by the time it runs, or the other is refused
    calls.push(put("b", "/theirs", b"x")); // another realm's
    calls.push(get("", "/i/missing"));
    a.name_mkdir_all("", "/i").await.unwrap();
    let before = n.node.store.stats().commits;
    let results = a.batch_independent(calls).await.unwrap();
    let commits = n.node.store.stats().commits - before;
    assert_eq!(results.len(), PUTS + 3);
    // Of the two creations of /i/0, exactly one; every other path once.
    let refused_twin = [&results[0], &results[PUTS]]
        .iter()
        .filter(|r| r.is_err())
        .count();
    assert_eq!(refused_twin, 1, "{:?} / {:?}", results[0], results[PUTS]);
    for (i, r) in results[1..PUTS].iter().enumerate() {
        assert!(matches!(r, Ok(Out::NamesSet(_))), "put {}: {r:?}", i + 1);
    }
    assert_eq!(
        code(results[PUTS + 1].as_ref().unwrap_err()),
        Code::PermissionDenied
    );
    assert_eq!(
        code(results[PUTS + 2].as_ref().unwrap_err()),
        Code::NotFound
    );
    for i in 0..PUTS {
        let e = a.name_get("", &format!("/i/{i}")).await.unwrap();
        assert_eq!(e.data, format!("/i/{i}").into_bytes());
    }
    assert!(
        op.name_get("b", "/theirs").await.is_err(),
        "nothing written for the refused call"
    );
    // Shared commits: far fewer than one per write …
    assert!(
        (commits as usize) < PUTS / 2,
        "{commits} commits for {PUTS} independent writes"
    );
    // … where the same writes in order take one each.
    let calls: Vec<Call> = (0..PUTS).map(|i| once(&format!("/j/{i}"))).collect();
    a.name_mkdir_all("", "/j").await.unwrap();
    let before = n.node.store.stats().commits;
    let results = a.batch(calls).await.unwrap();
    let commits = n.node.store.stats().commits - before;
    assert!(results.iter().all(Result::is_ok));
    assert!(
        commits as usize >= PUTS,
        "{commits} commits for {PUTS} writes in order"
    );
    n.shut_down().await;
}

/// Procedure calls in an independent batch (as a www worker makes its
/// pages): each runs as if alone — one that only reads, one that writes,
/// one that fails (its write undone), one that is not there — beside name
/// writes that still share their commits, the results in the calls'
/// order; the same batch again gives the same answers (the reader's path
/// learned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedure_calls_in_an_independent_batch_run_as_alone() {
    let dir = TempDir::new("batch-procedures");
    let n = common::start(&dir, "n1").await;
    let (_op, mut a) = realms_a_and_b(&n).await;
    let js = [
        ("page", "function main(a) { return '<p>' + a + '</p>'; }"),
        (
            "count",
            "function main(a) { const n = Number(tabos.get('n') || '0') + 1; \
                   tabos.put('n', String(n)); return String(n); }",
        ),
        (
            "bad",
            "function main(a) { tabos.put('bad', 'x'); throw new Error('boom'); }",
        ),
    ];
    for (name, code) in js {
        a.procedure_install("", name, "js", code.as_bytes().to_vec(), Default::default())
            .await
            .unwrap();
    }
    let call = |name: &str, args: &str| {
        Call::ProcedureCall(proto::CallProcedureRequest {
            realm: String::new(),
            name: name.into(),
            args: args.as_bytes().to_vec(),
        })
    };
    // As many writes as the test above, whose bound this shares; the
    // batch's procedure calls commit too (the counter's, each a commit
    // of its own), and in order the writes would take one each.
    const PUTS: usize = 40;
    a.name_mkdir_all("", "/p").await.unwrap();
    for round in 0..2 {
        let mut calls = vec![
            call("page", "x"),
            call("count", ""),
            call("bad", ""),
            call("missing", ""),
            call("page", "y"),
        ];
        calls.extend((0..PUTS).map(|i| put("", &format!("/p/{round}-{i}"), b"v")));
        let before = n.node.store.stats().commits;
        let results = a.batch_independent(calls).await.unwrap();
        let commits = n.node.store.stats().commits - before;
        let result = |i: usize| match &results[i] {
            Ok(Out::ProcedureCall(o)) => String::from_utf8(o.result.clone()).unwrap(),
            other => panic!("call {i}: {other:?}"),
        };
        assert_eq!(result(0), "<p>x</p>");
        assert_eq!(result(1), (round + 1).to_string(), "counted once per call");
        assert!(results[2].is_err(), "{:?}", results[2]);
        assert_eq!(code(results[3].as_ref().unwrap_err()), Code::NotFound);
        assert_eq!(result(4), "<p>y</p>");
        assert!(results[5..]
            .iter()
            .all(|r| matches!(r, Ok(Out::NamesSet(_)))));
        assert!(
            (commits as usize) < PUTS / 2,
            "{commits} commits for {PUTS} independent writes beside the procedures"
        );
    }
    assert!(a.name_get("", "/p/1-39").await.is_ok());
}
