//! The cluster's nodes (issue 19, item 1): a serving node registers with
//! its address, cores and labels, renews its lease with its measured load,
//! and records a clean stop; listing is scoped to the caller's realm;
//! removing is the operator's, and only of a node that is not up.

mod common;

use common::code;
use tabos_store::testing::TempDir;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_register_list_leave_and_are_removed() {
    let dir = TempDir::new("nodes");
    let n = common::start(&dir, "n1").await;
    let mut op = n.client().await;
    let nodes = op.list_nodes().await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let me = &nodes[0];
    assert_eq!((me.node_id.as_str(), me.state.as_str()), ("n1", "up"));
    assert_eq!(me.address, n.addr, "registered with its API's address");
    assert_eq!((me.cores, me.left_us), (4, 0));
    assert!(me.heartbeat_age_ms < 60_000);
    assert!(
        me.realms
            .iter()
            .any(|r| r.realm == "default" && r.cores == 4),
        "{:?}",
        me.realms
    );

    // A realm's member sees the node, and no realm but its own on it.
    let created = op.create_realm("acme", "fifo").await.unwrap();
    let mut acme = n.client_with(&created.admin_token).await;
    let seen = acme.list_nodes().await.unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].realms.iter().all(|r| r.realm == "acme"),
        "{:?}",
        seen[0].realms
    );

    // Removing: the operator's, of a node that is not up; nothing changes
    // otherwise.
    let e = acme.remove_node("n1").await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied, "{e}");
    let e = op.remove_node("n1").await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    let e = op.remove_node("nope").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
    let e = op.remove_node("../bad id").await.unwrap_err();
    assert!(
        matches!(code(&e), Code::NotFound | Code::InvalidArgument),
        "{e}"
    );
    assert_eq!(op.list_nodes().await.unwrap()[0].state, "up");
    drop((op, acme));

    // A clean stop is recorded as such, not as a loss.
    n.shut_down().await;
    let n = common::start(&dir, "n2").await;
    let mut op = n.client().await;
    let nodes = op.list_nodes().await.unwrap();
    let states: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n.state.as_str()))
        .collect();
    assert_eq!(states, [("n1", "left"), ("n2", "up")]);
    assert!(nodes[0].left_us >= nodes[0].started_us && nodes[0].left_us > 0);
    op.remove_node("n1").await.unwrap();
    let ids: Vec<String> = op
        .list_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(ids, ["n2"]);
    drop(op);
    n.shut_down().await;
}
