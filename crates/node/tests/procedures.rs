//! The Procedures service over gRPC on an in-process node: install, list,
//! call and remove; bad code refused at install; a failing call is ABORTED
//! and changes nothing while the node serves on; chase in one call.

use crate::common;

use common::{code, start};
use tabos_client::procedures::ProcedureLimits;
use tabos_client::Client;
use tabos_sandbox::procedure::examples;
use tabos_store::testing::TempDir;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedures_over_grpc() {
    let dir = TempDir::new("proc-grpc");
    let n = start(&dir, "proc-node").await;
    let mut c = Client::connect(&n.addr, &n.token).await.unwrap();
    let none = ProcedureLimits::default();
    let info = c
        .procedure_install("t", "chase", "js", examples::JS_CHASE.into(), none)
        .await
        .unwrap();
    assert_eq!((info.language.as_str(), info.timeout_ms), ("js", 1000));
    c.procedure_install("t", "wchase", "wasm", examples::WASM_CHASE.into(), none)
        .await
        .unwrap();
    tabos_kernel::kv::put(&n.node.store, "t", "a", b"b").unwrap();
    tabos_kernel::kv::put(&n.node.store, "t", "b", b"found").unwrap();
    for name in ["chase", "wchase"] {
        let out = c.procedure_call("t", name, b"a".to_vec()).await.unwrap();
        assert_eq!(out.result, b"found");
    }
    let names: Vec<String> = c
        .procedure_list("t")
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["chase", "wchase"]);

    // Bad code, bad language, bad limits: refused, nothing installed.
    let e = c
        .procedure_install("t", "bad", "js", b"function (".to_vec(), none)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    assert!(e.to_string().contains("SyntaxError"), "{e}");
    let e = c
        .procedure_install("t", "bad", "lua", b"x".to_vec(), none)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let e = c
        .procedure_install(
            "t",
            "bad",
            "js",
            examples::JS_ECHO.into(),
            ProcedureLimits {
                memory_bytes: 0,
                timeout_ms: 3_600_000,
                read_only: false,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    // Nothing may hold its partition's executor (every realm's there)
    // longer than TIMEOUT_MAX.
    let over = tabos_sandbox::procedure::TIMEOUT_MAX.as_millis() as u32 + 1;
    let e = c
        .procedure_install(
            "t",
            "long",
            "js",
            examples::JS_ECHO.into(),
            ProcedureLimits {
                memory_bytes: 0,
                timeout_ms: over,
                read_only: false,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert_eq!(c.procedure_list("t").await.unwrap().len(), 2);

    // A failing call is ABORTED with its log, writes nothing, and the node
    // goes on serving.
    c.procedure_install(
        "t",
        "fail",
        "js",
        b"function main() { tabos.put('x', '1'); console.log('wrote x'); throw new Error('no'); }"
            .to_vec(),
        none,
    )
    .await
    .unwrap();
    let e = c.procedure_call("t", "fail", Vec::new()).await.unwrap_err();
    assert_eq!(code(&e), Code::Aborted);
    assert!(e.to_string().contains("log: wrote x"), "{e}");
    assert_eq!(
        tabos_kernel::kv::get(&n.node.store, "t", "x").unwrap(),
        None
    );
    let out = c.procedure_call("t", "chase", b"a".to_vec()).await.unwrap();
    assert_eq!(out.result, b"found");

    let e = c.procedure_call("t", "nope", Vec::new()).await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    c.procedure_remove("t", "fail").await.unwrap();
    let e = c.procedure_remove("t", "fail").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    n.shut_down().await;
}
