//! The Batch service (issue 18, item 2): several calls in one round trip,
//! each with the checks, errors and effects it has alone; a realm's
//! credential reaches only its realm in a batch too; bad batches are
//! refused whole and change nothing.

mod common;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_each_call_as_alone_in_order() {
    let dir = TempDir::new("batch");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    let admin = op
        .create_realm("a", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    op.create_realm("b", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap();
    let mut a = n.client_with(&admin).await;
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
