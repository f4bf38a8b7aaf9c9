//! The local transport on the node's local socket (issue 40, item 1): the
//! same calls, checks and typed errors as gRPC; large messages and long
//! streams in pieces under the stream's window; a stream its caller drops
//! is cancelled at the node; gRPC clients keep working on the same socket;
//! frames the protocol does not allow close their connection only.

use std::io::{Read, Write};
use std::time::Duration;

use tabos_client::local::{put_frame, Kind, FRAME_BYTES_MAX, MAGIC, PING_BYTES_MAX, WINDOW};
use tabos_client::Client;
use tabos_store::testing::TempDir;

use crate::common;

/// A bound for a test that would otherwise hang, not a measurement.
const PATIENCE: Duration = Duration::from_secs(120);

/// A node with a local socket; its path.
async fn start(dir: &TempDir) -> (common::Running, std::path::PathBuf) {
    let socket = dir.path().join("tabos.sock");
    let options = tabos_node::ServeOptions {
        local_socket: Some(tabos_node::LocalSocket::bind(&socket).unwrap()),
        ..Default::default()
    };
    (common::start_with(dir, "n1", options).await, socket)
}

fn unix(socket: &std::path::Path) -> String {
    format!("{}{}", tabos_client::UNIX_SCHEME, socket.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_local_transport_serves_calls_streams_and_errors() {
    let dir = TempDir::new("local-calls");
    let (n, socket) = start(&dir).await;
    let mut c = Client::connect(&unix(&socket), &n.token).await.unwrap();
    assert_eq!(
        c.who_am_i().await.unwrap().role(),
        tabos_client::proto::Role::Operator
    );

    // A message larger than a DATA frame, both ways.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    c.fs_write("default", "", "/big", 0, big.clone(), true)
        .await
        .unwrap();
    let back = c
        .fs_read("default", "", "/big", 0, big.len() as u32)
        .await
        .unwrap();
    assert!(back == big, "3 MB read back as written");

    // A stream of more batches than its window: credited back as read.
    c.create_mailbox("default", "box", 0, None).await.unwrap();
    let n_msgs = 3 * WINDOW as usize;
    let mut stream = c.recv_stream("default", "box", 1).await.unwrap();
    for i in 0..n_msgs {
        c.send("default", "", "box", format!("m{i}").into_bytes())
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < n_msgs {
        let batch = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .expect("the stream went on")
            .unwrap()
            .expect("the stream did not end");
        got.extend(batch.messages.into_iter().map(|m| m.payload));
    }
    let want: Vec<Vec<u8>> = (0..n_msgs).map(|i| format!("m{i}").into_bytes()).collect();
    assert_eq!(got, want);
    drop(stream);

    // Errors keep their code and typed reason.
    let e = c.fs_read("default", "", "/nope", 0, 10).await.unwrap_err();
    assert_eq!(common::code(&e), tonic::Code::NotFound, "{e}");
    assert_eq!(
        e.reason(),
        Some(tabos_client::fault::ErrorReason::NotFound),
        "{e}"
    );
    // A stream refused at once fails at once, as over gRPC.
    let e = c
        .recv_stream("default", "no-such-box", 1)
        .await
        .unwrap_err();
    assert_eq!(common::code(&e), tonic::Code::NotFound, "{e}");

    // The credential is checked: none, or a wrong one, is refused.
    let mut anon = Client::connect(&unix(&socket), "").await.unwrap();
    let e = anon.who_am_i().await.unwrap_err();
    assert_eq!(common::code(&e), tonic::Code::Unauthenticated, "{e}");
    let mut wrong = Client::connect(&unix(&socket), "tabos_0123456789abcdef")
        .await
        .unwrap();
    let e = wrong.who_am_i().await.unwrap_err();
    assert_eq!(common::code(&e), tonic::Code::Unauthenticated, "{e}");

    // gRPC (HTTP/2) on the same socket is still served.
    let mut grpc = Client::connect_grpc_unix(&socket, &n.token).await.unwrap();
    assert_eq!(
        grpc.who_am_i().await.unwrap().role(),
        tabos_client::proto::Role::Operator
    );
    let back = grpc
        .fs_read("default", "", "/big", 0, big.len() as u32)
        .await
        .unwrap();
    assert!(back == big, "read back over gRPC on the socket");
    n.shut_down().await;
}

/// Realm "a" with a mailbox "box": an operator's client, the realm's
/// admin credential, and a client of it over the local transport.
async fn realm_with_mailbox(
    n: &common::Running,
    socket: &std::path::Path,
) -> (Client, String, Client) {
    let mut op = n.client().await;
    let admin = op
        .create_realm("a", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    let mut c = Client::connect(&unix(socket), &admin).await.unwrap();
    c.create_mailbox("", "box", 0, None).await.unwrap();
    (op, admin, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_stream_is_cancelled_at_the_node() {
    let dir = TempDir::new("local-cancel");
    let (n, socket) = start(&dir).await;
    let (mut op, _, mut c) = realm_with_mailbox(&n, &socket).await;
    let stream = c.recv_stream("", "box", 1).await.unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    while common::realm_calls(&mut op, "a").await.unwrap_or(0) != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream never opened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stream);
    while common::realm_calls(&mut op, "a").await.unwrap_or(0) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped stream stayed open at the node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing sent from now on is taken by it.
    for i in 0..3 {
        c.send("", "", "box", vec![i]).await.unwrap();
    }
    assert_eq!(c.mailbox("", "box").await.unwrap().queued, 3);
    n.shut_down().await;
}

/// A raw connection that has sent `bytes`: whether the node closed it
/// (read to its end) rather than leaving it open.
fn closed_after(socket: &std::path::Path, bytes: &[u8]) -> bool {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(bytes).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false, // the read timed out: still open
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frames_the_protocol_does_not_allow_close_their_connection_only() {
    let dir = TempDir::new("local-bad");
    let (n, socket) = start(&dir).await;
    let mut good = Client::connect(&unix(&socket), &n.token).await.unwrap();
    good.who_am_i().await.unwrap();
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("neither protocol", b"GET / HTTP/1.1\r\n\r\n".to_vec()));
    let mut unknown_kind = MAGIC.to_vec();
    unknown_kind.extend_from_slice(&6u32.to_le_bytes());
    unknown_kind.extend_from_slice(&1u32.to_le_bytes());
    unknown_kind.extend_from_slice(&[99, 0]);
    cases.push(("a frame of no known kind", unknown_kind));
    let mut too_long = MAGIC.to_vec();
    too_long.extend_from_slice(&(FRAME_BYTES_MAX as u32 + 1).to_le_bytes());
    cases.push(("a frame past its bound", too_long));
    let mut node_kind = MAGIC.to_vec();
    put_frame(&mut node_kind, 1, Kind::End, &[0, 0]);
    cases.push(("a frame only a node sends", node_kind));
    let mut bad_call = MAGIC.to_vec();
    put_frame(&mut bad_call, 1, Kind::Call, &[200, 0, b'/']);
    cases.push(("a call whose path is cut short", bad_call));
    let mut ids_down = MAGIC.to_vec();
    let mut call = Vec::new();
    call.extend_from_slice(&(b"/tabos.v1.Tokens/WhoAmI".len() as u16).to_le_bytes());
    call.extend_from_slice(b"/tabos.v1.Tokens/WhoAmI");
    call.extend_from_slice(&0u16.to_le_bytes());
    call.extend_from_slice(&[0, 0, 0, 0, 0]);
    put_frame(&mut ids_down, 5, Kind::Call, &call);
    put_frame(&mut ids_down, 5, Kind::Call, &call);
    cases.push(("a call id used again", ids_down));
    let mut big_ping = MAGIC.to_vec();
    put_frame(&mut big_ping, 0, Kind::Ping, &[0; PING_BYTES_MAX + 1]);
    cases.push(("a ping past its bound", big_ping));
    let mut client_pong = MAGIC.to_vec();
    put_frame(&mut client_pong, 0, Kind::Pong, &[]);
    cases.push(("a pong from a client", client_pong));
    for (what, bytes) in cases {
        let socket = socket.clone();
        let closed = tokio::task::spawn_blocking(move || closed_after(&socket, &bytes))
            .await
            .unwrap();
        assert!(closed, "{what}: the node closed the connection");
        // The node serves others throughout.
        assert_eq!(
            good.who_am_i().await.unwrap().role(),
            tabos_client::proto::Role::Operator,
            "{what}"
        );
    }
    n.shut_down().await;
}

/// A ping is answered with its payload at once, while a call of the same
/// connection waits (the client's keep-alive: a connection whose pings go
/// unanswered is given up).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ping_is_answered_while_a_call_waits() {
    use prost::Message as _;
    let dir = TempDir::new("local-ping");
    let (n, socket) = start(&dir).await;
    let mut op = Client::connect(&unix(&socket), &n.token).await.unwrap();
    op.create_mailbox("default", "quiet", 0, None)
        .await
        .unwrap();
    let token = n.token.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let mut raw = RawConn::open(&socket);
        // A receive on an empty mailbox: open until its wait ends.
        let recv = tabos_client::proto::RecvRequest {
            realm: "default".into(),
            mailbox: "quiet".into(),
            max: 1,
            timeout_ms: 60_000,
        };
        raw.call(1, "/tabos.v1.Ipc/Recv", &token, &recv.encode_to_vec());
        let mut ping = Vec::new();
        put_frame(&mut ping, 0, Kind::Ping, b"12345678");
        raw.0.write_all(&ping).unwrap();
        let mut head = [0u8; tabos_client::local::FRAME_HEADER_BYTES];
        raw.0
            .read_exact(&mut head)
            .expect("the node answers the ping");
        let len = u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize - 5;
        let mut payload = vec![0u8; len];
        raw.0.read_exact(&mut payload).unwrap();
        (
            head[8],
            u32::from_le_bytes(head[4..8].try_into().unwrap()),
            payload,
        )
    })
    .await
    .unwrap();
    assert_eq!(answered, (Kind::Pong as u8, 0, b"12345678".to_vec()));
    n.shut_down().await;
}

/// Calls from many tasks at once on one client share its connection:
/// each is answered (ids go out in order, so the node never refuses one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_callers_share_one_connection() {
    let dir = TempDir::new("local-many");
    let (n, socket) = start(&dir).await;
    let c = Client::connect(&unix(&socket), &n.token).await.unwrap();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let mut c = c.clone();
        callers.spawn(async move {
            for _ in 0..50 {
                c.who_am_i().await.unwrap();
            }
        });
    }
    while let Some(r) = callers.join_next().await {
        r.unwrap();
    }
    n.shut_down().await;
}

/// A raw local-transport connection's frames, as a test reads them.
struct RawConn(std::os::unix::net::UnixStream);

impl RawConn {
    fn open(socket: &std::path::Path) -> RawConn {
        let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        // A node that stops reading fails the test rather than hanging it.
        s.set_write_timeout(Some(PATIENCE)).unwrap();
        s.write_all(MAGIC).unwrap();
        RawConn(s)
    }

    /// Sends call `id` to `path` with `token`'s credential and `message`
    /// (encoded) as its request.
    fn call(&mut self, id: u32, path: &str, token: &str, message: &[u8]) {
        self.call_with(id, path, token, message, &[]);
    }

    /// [`RawConn::call`] with `extra` headers.
    fn call_with(
        &mut self,
        id: u32,
        path: &str,
        token: &str,
        message: &[u8],
        extra: &[(&'static str, &str)],
    ) {
        let mut headers = tonic::codegen::http::HeaderMap::new();
        headers.insert(
            tabos_client::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        for (name, value) in extra {
            headers.insert(*name, value.parse().unwrap());
        }
        let mut payload = Vec::new();
        payload.extend_from_slice(&(path.len() as u16).to_le_bytes());
        payload.extend_from_slice(path.as_bytes());
        payload.extend_from_slice(&tabos_client::local::encode_headers(&headers, &[]).unwrap());
        payload.push(0);
        payload.extend_from_slice(&(message.len() as u32).to_be_bytes());
        payload.extend_from_slice(message);
        let mut frame = Vec::new();
        put_frame(&mut frame, id, Kind::Call, &payload);
        self.0.write_all(&frame).unwrap();
    }

    fn cancel(&mut self, id: u32) {
        let mut frame = Vec::new();
        put_frame(&mut frame, id, Kind::Cancel, &[]);
        self.0.write_all(&frame).unwrap();
    }

    /// Reads frames until call `id` ends: its `grpc-status`. Panics if the
    /// node closes the connection or says nothing for [`PATIENCE`].
    fn status_of(&mut self, id: u32) -> i32 {
        loop {
            let mut head = [0u8; tabos_client::local::FRAME_HEADER_BYTES];
            self.0.read_exact(&mut head).expect("the node answers");
            let len = u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize - 5;
            let of = u32::from_le_bytes(head[4..8].try_into().unwrap());
            let mut payload = vec![0u8; len];
            self.0.read_exact(&mut payload).unwrap();
            if of == id && head[8] == Kind::End as u8 {
                let trailers =
                    tabos_client::local::decode_headers(&mut bytes::Bytes::from(payload)).unwrap();
                return trailers["grpc-status"].to_str().unwrap().parse().unwrap();
            }
        }
    }
}

/// Calls waiting for a running one to end hold at most
/// `PENDING_BYTES_MAX` bytes (past it a call is refused and the
/// connection reads on), and a large call that waits does not stop its
/// connection's reader — which would keep the very cancel that lets it
/// start from being read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_calls_are_bounded_in_bytes_and_never_stop_the_reader() {
    use prost::Message as _;
    let dir = TempDir::new("local-waiting");
    let (n, socket) = start(&dir).await;
    let (_, admin, mut c) = realm_with_mailbox(&n, &socket).await;
    let running = tabos_node::conn::STREAMS_PER_CONNECTION_MAX;
    let recv = tabos_client::proto::RecvRequest {
        mailbox: "box".into(),
        ..Default::default()
    }
    .encode_to_vec();
    // An Empty with an unknown field of 15 MiB: four fit under the waiting
    // calls' 64 MiB, the fifth does not.
    let big_field = 15usize << 20;
    assert!(4 * big_field < tabos_node::local::PENDING_BYTES_MAX);
    assert!(5 * big_field > tabos_node::local::PENDING_BYTES_MAX);
    let mut big = vec![(15 << 3) | 2];
    prost::encoding::encode_varint(big_field as u64, &mut big);
    big.resize(big.len() + big_field, 7);
    let statuses = tokio::task::spawn_blocking(move || {
        let mut raw = RawConn::open(&socket);
        // Every slot taken by a stream that waits for a message.
        for id in 1..=running {
            raw.call(id, "/tabos.v1.Ipc/RecvStream", &admin, &recv);
        }
        for id in running + 1..=running + 5 {
            raw.call(id, "/tabos.v1.Tokens/WhoAmI", &admin, &big);
        }
        let refused = raw.status_of(running + 5);
        // Read only if the reader still reads: it frees a slot, the first
        // large call starts and is answered.
        raw.cancel(1);
        let first = raw.status_of(running + 1);
        (refused, first)
    })
    .await
    .unwrap();
    assert_eq!(
        statuses,
        (
            tonic::Code::ResourceExhausted as i32,
            tonic::Code::Ok as i32
        ),
        "the fifth large waiting call refused, the first answered once a slot freed"
    );
    // The node serves the realm's other connections throughout.
    c.who_am_i().await.unwrap();
    n.shut_down().await;
}

/// A call's `grpc-timeout` ends it at the node, as gRPC's server does: a
/// receive that would wait a minute for a message is answered
/// DEADLINE_EXCEEDED at its 300 ms deadline, and the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_calls_grpc_timeout_ends_it_at_the_node() {
    use prost::Message as _;
    let dir = TempDir::new("local-deadline");
    let (n, socket) = start(&dir).await;
    let (_, admin, _) = realm_with_mailbox(&n, &socket).await;
    let recv = tabos_client::proto::RecvRequest {
        mailbox: "box".into(),
        timeout_ms: 60_000,
        ..Default::default()
    }
    .encode_to_vec();
    let statuses = tokio::task::spawn_blocking(move || {
        let mut raw = RawConn::open(&socket);
        raw.call_with(
            1,
            "/tabos.v1.Ipc/Recv",
            &admin,
            &recv,
            &[("grpc-timeout", "300m")],
        );
        let timed_out = raw.status_of(1);
        raw.call(2, "/tabos.v1.Tokens/WhoAmI", &admin, &[]);
        (timed_out, raw.status_of(2))
    })
    .await
    .unwrap();
    assert_eq!(
        statuses,
        (tonic::Code::DeadlineExceeded as i32, tonic::Code::Ok as i32)
    );
    n.shut_down().await;
}
