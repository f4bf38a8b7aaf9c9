//! The Fs service over gRPC on an in-process node: files end to end,
//! permissions between users, du as one query, and clear refusals.

mod common;

use common::{code, start};
use tabos_client::Client;
use tabos_store::testing::TempDir;
use tonic::Code;

const REALM: &str = "default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_over_grpc_with_owners_and_clear_refusals() {
    let dir = TempDir::new("fs-grpc");
    let n = start(&dir, "fs-node").await;
    let mut c = Client::connect(&n.addr).await.unwrap();
    c.fs_mkdir(REALM, "root", "/home", 0).await.unwrap();
    c.fs_mkdir(REALM, "root", "/home/alice", 0).await.unwrap();
    c.fs_chown(REALM, "root", "/home/alice", "alice")
        .await
        .unwrap();

    // A file bigger than one message, written and read back in chunks.
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut at = 0;
    for chunk in big.chunks(tabos_client::fs::CHUNK_BYTES) {
        let size = c
            .fs_write(REALM, "alice", "/home/alice/big", at, chunk.to_vec(), true)
            .await
            .unwrap();
        at += chunk.len() as i64;
        assert_eq!(size, at);
    }
    let mut back = Vec::new();
    let n_read = c
        .fs_read_all(REALM, "alice", "/home/alice/big", &mut back)
        .await
        .unwrap();
    assert_eq!(n_read as usize, big.len());
    assert!(back == big, "the file read back differs");
    let st = c.fs_stat(REALM, "/home/alice/big").await.unwrap();
    assert_eq!(
        (st.owner.as_str(), st.size, st.mode),
        ("alice", big.len() as i64, 0o644)
    );

    // A private file: bob can neither read nor change it.
    c.fs_create(REALM, "alice", "/home/alice/diary", 0o600)
        .await
        .unwrap();
    c.fs_write(
        REALM,
        "alice",
        "/home/alice/diary",
        0,
        b"secret".to_vec(),
        false,
    )
    .await
    .unwrap();
    let e = c
        .fs_read(REALM, "bob", "/home/alice/diary", 0, 10)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    let e = c
        .fs_unlink(REALM, "bob", "/home/alice/diary")
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");

    // du: one query over the tree.
    let (files, bytes) = c.fs_du(REALM, "/home", "alice", 20 * 1024).await.unwrap();
    assert_eq!((files, bytes), (1, big.len() as i64));
    let (files, _) = c.fs_du(REALM, "/", "", 0).await.unwrap();
    assert_eq!(files, 2);

    // Refusals, each changing nothing.
    let e = c
        .fs_mkdir(REALM, "root", "/home/../etc", 0)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let e = c.fs_create(REALM, "bad user!", "/x", 0).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let e = c.fs_rmdir(REALM, "root", "/home").await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition);
    let e = c.fs_stat(REALM, "/nope").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    let e = c
        .fs_read(REALM, "alice", "/home/alice/big", 0, 5 << 20)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    let d = c.fs_readdir(REALM, "root", "/home/alice").await.unwrap();
    let names: Vec<_> = d.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["/home/alice/big", "/home/alice/diary"]);
    // A fenced write is refused once its directory has a newer epoch.
    let fence = |epoch| tabos_client::proto::Fence {
        dir: "/jobs".into(),
        epoch,
    };
    c.fs_write_fenced(REALM, "root", "/fenced", 0, b"one".to_vec(), true, fence(2))
        .await
        .unwrap();
    let e = c
        .fs_write_fenced(REALM, "root", "/fenced", 0, b"two".to_vec(), true, fence(1))
        .await
        .unwrap_err();
    assert!(e.is_stale_epoch(), "{e}");
    assert_eq!(
        c.fs_read(REALM, "root", "/fenced", 0, 10).await.unwrap(),
        b"one"
    );
    // Other realms see nothing of this one.
    let e = c.fs_stat("other", "/home").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    n.shut_down().await;
}
