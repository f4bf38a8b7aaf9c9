//! The node's gRPC API, served in-process on port 0 over an embedded store.

use tabos_client::proto::{self, value::Kind};
use tabos_client::{Bearer, Client, Endpoint, Error as ClientError, Value};
use tabos_store::{Config, PKey};

use tabos_store::testing::TempDir;

/// A node serving on a free loopback port until the returned sender fires.
async fn start(config: &Config) -> (tabos_node::Node, Endpoint, tokio::sync::oneshot::Sender<()>) {
    let node = tabos_node::Node::open(config).unwrap();
    let token = node.operator_credential("test").await.unwrap().token;
    let listener = tabos_node::bind("127.0.0.1:0").await.unwrap();
    let addr = tabos_node::local_addr(&listener).unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tabos_node::serve(node.clone(), listener, async {
        let _ = stopped.await;
    });
    tokio::spawn(async move {
        // A node that fails to start drops its listener, and a client
        // sees only a reset connection: say why, in the test's output.
        if let Err(e) = served.await {
            panic!("the node stopped serving: {e}");
        }
    });
    (node, Endpoint::new(addr, token), stop)
}

fn code(e: &ClientError) -> tonic::Code {
    match e {
        ClientError::Status(s) => s.code(),
        other => panic!("expected a status, got {other}"),
    }
}

fn seed(node: &tabos_node::Node) {
    for (i, realm) in ["alpha", "beta"].iter().enumerate() {
        tabos_kernel::kv::put(
            &node.store,
            realm,
            "greeting",
            format!("hello {i}").as_bytes(),
        )
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_queries_run_and_bad_input_is_refused_without_change() {
    let dir = TempDir::new("sql");
    let (node, addr, stop) = start(&Config::sqlite(dir.path()).with_partitions(2)).await;
    let n2 = node.clone();
    tokio::task::spawn_blocking(move || seed(&n2))
        .await
        .unwrap();
    let mut client = addr.connect().await.unwrap();

    let r = client
        .sql(
            "SELECT realm, CAST(value AS TEXT) AS v FROM kv WHERE key = $1 ORDER BY realm",
            vec![Value::Text("greeting".into())],
        )
        .await
        .unwrap();
    assert_eq!(r.columns, vec!["realm", "v"]);
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.rows[0][0], Some(Kind::Text("alpha".into())));
    assert_eq!(r.rows[1][1], Some(Kind::Text("hello 1".into())));
    assert!(!r.truncated);

    // Truncation is reported.
    let r = client
        .sql_limited("SELECT key FROM kv", vec![], 1)
        .await
        .unwrap();
    assert_eq!(r.rows.len(), 1);
    assert!(r.truncated);

    // Writes are refused, and change nothing.
    for w in [
        "DELETE FROM kv",
        "UPDATE kv SET value = x'00'",
        "DROP TABLE kv",
    ] {
        let e = client.sql(w, vec![]).await.unwrap_err();
        assert_eq!(code(&e), tonic::Code::PermissionDenied, "{w}: {e}");
        assert!(e.to_string().contains("read-only"), "{e}");
    }
    // A syntax error names the position.
    let e = client.sql("SELECT * FORM kv", vec![]).await.unwrap_err();
    assert_eq!(code(&e), tonic::Code::InvalidArgument);
    assert!(e.to_string().contains("at byte"), "{e}");
    // Empty and oversized statements, a parameter without a value.
    assert_eq!(
        code(&client.sql("  ", vec![]).await.unwrap_err()),
        tonic::Code::InvalidArgument
    );
    let huge = format!("SELECT '{}'", "x".repeat(tabos_node::sql::SQL_BYTES_MAX));
    assert_eq!(
        code(&client.sql(&huge, vec![]).await.unwrap_err()),
        tonic::Code::InvalidArgument
    );

    let n: i64 = match &client
        .sql("SELECT count(*) FROM kv", vec![])
        .await
        .unwrap()
        .rows[0][0]
    {
        Some(Kind::Int(n)) => *n,
        other => panic!("{other:?}"),
    };
    assert_eq!(n, 2, "nothing changed");

    let status = client.status().await.unwrap();
    assert_eq!(status.backend, "sqlite");
    assert_eq!(status.partitions, 2);
    assert_eq!(status.durability, "normal");
    assert!(status.procedures_committed >= 2);
    let _ = stop.send(());
}

/// A request whose bytes do not decode as a SqlRequest, and one that decodes
/// but has a parameter with no value: both are refused with a clear status,
/// and the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_a_clear_error() {
    let dir = TempDir::new("malformed");
    let (_node, addr, stop) = start(&Config::sqlite(dir.path()).with_partitions(1)).await;

    // Field 1 of SqlRequest is a string; send a varint there instead.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Garbage {
        #[prost(uint64, tag = "1")]
        sql: u64,
    }
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", addr.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/tabos.v1.Sql/Query");
    let codec: tonic_prost::ProstCodec<Garbage, proto::SqlResponse> =
        tonic_prost::ProstCodec::default();
    let mut garbage = tonic::Request::new(Garbage { sql: 42 });
    garbage.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", addr.token).parse().unwrap(),
    );
    let status = grpc.unary(garbage, path, codec).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("malformed message"), "{status:?}");

    let mut sql =
        proto::sql_client::SqlClient::with_interceptor(channel, Bearer::new(&addr.token).unwrap());
    let status = sql
        .query(proto::SqlRequest {
            sql: "SELECT $1".into(),
            params: vec![proto::Value { kind: None }],
            max_rows: 0,
            realm: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("$1 has no value"), "{status:?}");

    // Still serving.
    let mut client = addr.connect().await.unwrap();
    client.sql("SELECT 1", vec![]).await.unwrap();
    let _ = stop.send(());
}

/// Raw bytes as a gRPC message, both ways: what a fuzzer or a client with
/// the wrong schema sends.
#[derive(Clone, Default)]
struct RawCodec;

struct RawCoder;

impl tonic::codec::Encoder for RawCoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = bytes::Buf::remaining(buf);
        Ok(Some(bytes::Buf::copy_to_bytes(buf, n).to_vec()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCoder;
    type Decoder = RawCoder;
    fn encoder(&mut self) -> RawCoder {
        RawCoder
    }
    fn decoder(&mut self) -> RawCoder {
        RawCoder
    }
}

/// Random and truncated bytes sent to the API's reads are refused as
/// INVALID_ARGUMENT (when they do not decode) or answered by the operation
/// (when they happen to decode as a message) — never INTERNAL or UNKNOWN,
/// which would say the node failed — and the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_messages_are_the_senders_error() {
    const MESSAGES: usize = 500;
    let dir = TempDir::new("fuzz");
    let (node, addr, stop) = start(&Config::sqlite(dir.path()).with_partitions(1)).await;
    seed(&node);
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", addr.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    // Methods that only read (a message that decodes by chance changes
    // nothing): one per service.
    const PATHS: [&str; 7] = [
        "/tabos.v1.Sql/Query",
        "/tabos.v1.Procs/Status",
        "/tabos.v1.Ipc/Peek",
        "/tabos.v1.Names/Get",
        "/tabos.v1.Fs/Stat",
        "/tabos.v1.Fs/Read",
        "/tabos.v1.Node/ListNodes",
    ];
    // A deterministic generator, so a failure can be replayed.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut refused = 0;
    for i in 0..MESSAGES {
        let len = (next() % 64) as usize + 1;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 5 == 0 {
            // A length-delimited field whose length runs past the end.
            bytes = vec![0x0a, 0x7f, b'x'];
        }
        let path = PATHS[i % PATHS.len()];
        let mut request = tonic::Request::new(bytes.clone());
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", addr.token).parse().unwrap(),
        );
        grpc.ready().await.unwrap();
        let answer = grpc
            .unary(
                request,
                http::uri::PathAndQuery::from_static(path),
                RawCodec,
            )
            .await;
        if let Err(status) = answer {
            assert!(
                !matches!(status.code(), tonic::Code::Internal | tonic::Code::Unknown),
                "{path} given {bytes:02x?}: {status:?}"
            );
            if status.code() == tonic::Code::InvalidArgument {
                refused += 1;
            }
            if i % 5 == 0 {
                assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            }
        } else {
            assert!(i % 5 != 0, "a truncated message was taken for one");
        }
    }
    assert!(refused >= MESSAGES / 5, "only {refused} refused");
    // Still serving.
    let mut client = addr.connect().await.unwrap();
    client.sql("SELECT 1", vec![]).await.unwrap();
    let _ = stop.send(());
}

#[tokio::test]
async fn connecting_to_nothing_says_how_to_fix_it() {
    let e = Client::connect("127.0.0.1:1", "").await.unwrap_err();
    assert!(e.to_string().contains("tabos up"), "{e}");
}

#[test]
fn unknown_partition_maps_to_not_found() {
    let e = tabos_store::Error::UnknownPartition {
        p_key: 9,
        partitions: 2,
    };
    assert_eq!(tabos_node::status_of(&e).code(), tonic::Code::NotFound);
    let _ = PKey(0);
}

/// Hostile SQL through the Sql service: an endless recursive CTE is
/// stopped at the deadline, a huge value or result is refused or cut, a
/// PRAGMA is refused (so a pooled reader stays read-only), and the node
/// serves throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_queries_are_bounded_and_change_nothing() {
    let dir = TempDir::new("hostile-sql");
    let settings = tabos_node::NodeSettings {
        query_time_max: std::time::Duration::from_millis(300),
        // The tests' programs and modules: in temporary directories and
        // the build's target directory (an operator's --program-dir).
        program_dirs: vec![
            std::env::temp_dir(),
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
        ],
        ..tabos_node::NodeSettings::defaults()
    };
    let node =
        tabos_node::Node::open_with(&Config::sqlite(dir.path()).with_partitions(2), settings)
            .unwrap();
    let n = tabos_node::Embedded::start(node).await.unwrap();
    let mut c = n.client().await.unwrap();

    // Several endless queries at once: each is stopped; none holds a reader.
    let endless = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) \
                   SELECT count(*) FROM r";
    let mut running = Vec::new();
    for _ in 0..6 {
        let mut c = c.clone();
        running.push(tokio::spawn(async move { c.sql(endless, vec![]).await }));
    }
    for r in running {
        let e = r.await.unwrap().unwrap_err();
        assert_eq!(code(&e), tonic::Code::DeadlineExceeded, "{e}");
    }
    c.sql("SELECT 1", vec![]).await.unwrap();

    // One value larger than any reply: refused before it is built.
    let e = c
        .sql("SELECT randomblob(250000000)", vec![])
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("too big"), "{e}");
    // Many large rows: cut at the byte limit, and said so.
    let r = c
        .sql(
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 64) \
             SELECT i, randomblob(1000000) FROM r",
            vec![],
        )
        .await
        .unwrap();
    assert!(r.truncated);
    assert!(r.rows.len() < 64 && !r.rows.is_empty(), "{}", r.rows.len());

    // PRAGMA is refused, and a write is still refused afterwards on every
    // pooled reader.
    for _ in 0..4 {
        let e = c.sql("PRAGMA query_only = 0", vec![]).await.unwrap_err();
        assert_ne!(code(&e), tonic::Code::Ok);
    }
    for _ in 0..4 {
        let e = c
            .sql("DELETE FROM schema_version", vec![])
            .await
            .unwrap_err();
        assert_eq!(code(&e), tonic::Code::PermissionDenied, "{e}");
    }
    let r = c
        .sql("SELECT count(*) FROM schema_version", vec![])
        .await
        .unwrap();
    assert_eq!(
        r.rows[0][0],
        Some(Kind::Int(2 * tabos_kernel::MIGRATIONS.len() as i64))
    );
    n.stop().await.unwrap();
}
