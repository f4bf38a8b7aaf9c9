//! What one connection can make the node hold, against a raw HTTP/2 client
//! (issue 17, items 2 and 6): half-sent messages are bounded per connection
//! and node-wide and given back when their sender stalls; a half-sent
//! message without a credential is refused before its body; a connection
//! with no call open is closed after the idle limit, one with a call open
//! stays; a connection with no credential is closed sooner; the node
//! serves other clients throughout.

use std::time::Duration;

use bytes::Bytes;
use tabos_client::MESSAGE_BYTES_MAX;
use tabos_node::conn::{Limits, CONNECTION_REQUEST_BYTES_MAX};
use tabos_store::testing::TempDir;

use crate::common;

const REALM: &str = "default";
/// Far longer than any limit below: a bound for a test that would
/// otherwise hang, not a measurement.
const PATIENCE: Duration = Duration::from_secs(120);

/// A raw HTTP/2 connection to the node.
async fn raw(addr: &str) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    // Ends when the connection closes (either side).
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    (send, driver)
}

/// Opens a Names.Get call whose message announces `announced` bytes, and
/// sends `sent` of them (the 5-byte gRPC prefix first), never ending the
/// stream. Returns the call's status, or why there was none.
async fn half_sent(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: &str,
    token: Option<&str>,
    announced: usize,
    sent: usize,
) -> tokio::task::JoinHandle<Result<tonic::Status, String>> {
    let mut req = http::Request::post(format!("http://{addr}/tabos.v1.Names/Get"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let client = client.clone();
    let mut client = client.ready().await.unwrap();
    let (response, mut body) = client.send_request(req.body(()).unwrap(), false).unwrap();
    tokio::spawn(async move {
        // Sends in the background; the sender stalls (holds the stream
        // open) once it has sent what it meant to, or stops if refused.
        let sender = tokio::spawn(async move {
            let mut prefix = vec![0u8];
            prefix.extend_from_slice(&(announced as u32).to_be_bytes());
            if body.send_data(Bytes::from(prefix), false).is_err() {
                return body;
            }
            let chunk = Bytes::from(vec![7u8; 64 * 1024]);
            let mut left = sent;
            while left > 0 {
                let n = left.min(chunk.len());
                body.reserve_capacity(n);
                let got = match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                    Some(Ok(got)) => got,
                    _ => return body, // refused: the stream is reset
                };
                let n = n.min(got);
                if body.send_data(chunk.slice(..n), false).is_err() {
                    return body;
                }
                left -= n;
            }
            body // kept: the stream stays half-sent
        });
        // A trailers-only response carries the status in its headers,
        // any other in its trailers.
        let status = match response.await {
            Ok(r) => match tonic::Status::from_header_map(r.headers()) {
                Some(s) => Ok(s),
                None => {
                    let mut b = r.into_body();
                    while b.data().await.is_some() {}
                    match b.trailers().await {
                        Ok(Some(t)) => tonic::Status::from_header_map(&t)
                            .ok_or_else(|| "no grpc-status in the trailers".to_string()),
                        other => Err(format!("no trailers: {other:?}")),
                    }
                }
            },
            Err(e) => Err(e.to_string()),
        };
        sender.abort();
        status
    })
}

/// A node served with `limits`.
async fn start_limited(dir: &TempDir, limits: Limits) -> common::Running {
    let options = tabos_node::ServeOptions {
        limits,
        ..Default::default()
    };
    common::start_with(dir, "n1", options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_sent_messages_are_bounded_and_given_back() {
    let dir = TempDir::new("conn-half");
    let limits = Limits {
        request_stall: Duration::from_secs(3),
        ..Limits::default()
    };
    let n = start_limited(&dir, limits).await;
    let mut other = n.client().await;
    other
        .name_set(REALM, "/before", b"x".to_vec(), None, None)
        .await
        .unwrap();

    // Without a credential, a half-sent message is refused before its body.
    let (mut anon, _driver) = raw(&n.addr).await;
    let refused = half_sent(&mut anon, &n.addr, None, MESSAGE_BYTES_MAX - 16, 1 << 20).await;
    let s = tokio::time::timeout(PATIENCE, refused)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");

    // With one: eight 16 MiB messages, each sent but for its last 64 KiB,
    // on one connection. The connection may hold four largest messages.
    let (mut conn, _driver) = raw(&n.addr).await;
    let announced = MESSAGE_BYTES_MAX - 16;
    let sent = announced - 64 * 1024;
    let mut calls = Vec::new();
    for _ in 0..8 {
        calls.push(half_sent(&mut conn, &n.addr, Some(&n.token), announced, sent).await);
    }
    // While they are pending, another client is served.
    other
        .name_set(REALM, "/during", b"y".to_vec(), None, None)
        .await
        .unwrap();
    assert_eq!(
        other.name_get(REALM, "/before").await.unwrap().data,
        b"x".to_vec()
    );
    let mut over_share = 0;
    let mut stalled = 0;
    for call in calls {
        let s = tokio::time::timeout(PATIENCE, call)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let msg = s.message();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
        if msg.contains("a connection's limit") {
            over_share += 1;
        } else {
            assert!(msg.contains("no bytes of this request came"), "{msg}");
            stalled += 1;
        }
        // Never more than the connection's share is held.
        assert!(n.node.request_bytes.held() <= CONNECTION_REQUEST_BYTES_MAX);
    }
    assert!(
        over_share >= 4,
        "{over_share} refused for the share, {stalled} stalled"
    );
    assert!(
        stalled >= 1,
        "{over_share} refused for the share, {stalled} stalled"
    );
    // Everything is given back, and nothing changed.
    assert_eq!(n.node.request_bytes.held(), 0);
    assert_eq!(
        other.name_get(REALM, "/during").await.unwrap().data,
        b"y".to_vec()
    );
    n.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_are_closed_and_busy_ones_kept() {
    let dir = TempDir::new("conn-idle");
    let limits = Limits {
        idle: Duration::from_secs(1),
        ..Limits::default()
    };
    let n = start_limited(&dir, limits).await;
    // A connection that never calls is closed by the node.
    let (_idle, driver) = raw(&n.addr).await;
    tokio::time::timeout(PATIENCE, driver)
        .await
        .expect("the node closes an idle connection")
        .unwrap();

    // A connection with a call open (a receive waiting for mail) stays
    // open past the idle limit: the receive gets mail sent later.
    let mut c = n.client().await;
    c.create_mailbox(REALM, "inbox", 0, None).await.unwrap();
    let mut waiting = n.client().await;
    let recv = tokio::spawn(async move { waiting.recv(REALM, "inbox", 1, 60_000).await });
    tokio::time::sleep(limits.idle * 3).await;
    c.send(REALM, "alice", "inbox", b"late".to_vec())
        .await
        .unwrap();
    let got = tokio::time::timeout(PATIENCE, recv)
        .await
        .unwrap()
        .unwrap()
        .expect("the waiting call's connection stayed open");
    assert_eq!(got[0].payload, b"late".to_vec());
    n.shut_down().await;
}

/// One complete unary call on a raw connection: Node.Status (an empty
/// message), with `token`; its grpc-status.
async fn status_call(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: &str,
    token: &str,
) -> String {
    let req = http::Request::post(format!("http://{addr}/tabos.v1.Node/Status"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap();
    let mut client = client.clone().ready().await.unwrap();
    let (response, mut body) = client.send_request(req, false).unwrap();
    // A refusal may come (and end the stream) on the headers alone, before
    // the message is sent: then there is no stream left to send it on.
    let _ = body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true);
    let response = response.await.unwrap();
    // A refusal is a trailers-only response: its status is in the headers.
    let status = |h: &http::HeaderMap| {
        h.get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string())
    };
    if let Some(s) = status(response.headers()) {
        return s;
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    status(&trailers).unwrap_or_default()
}

/// Issue 36, item 2: a connection that sends the HTTP/2 preface and no
/// credential is closed after the wait for one, long before the idle
/// limit; one whose call presented a good credential stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_without_a_credential_are_closed_soon() {
    let dir = TempDir::new("conn-auth");
    let limits = Limits {
        auth_wait: Duration::from_secs(1),
        ..Limits::default()
    };
    let n = start_limited(&dir, limits).await;
    let (_anon, anon_driver) = raw(&n.addr).await;
    let (mut signed_in, signed_in_driver) = raw(&n.addr).await;
    assert_eq!(status_call(&mut signed_in, &n.addr, &n.token).await, "0");
    tokio::time::timeout(PATIENCE, anon_driver)
        .await
        .expect("the node closes a connection with no credential")
        .unwrap();
    // Well past the wait, the signed-in connection is open and serves.
    tokio::time::sleep(limits.auth_wait * 2).await;
    assert!(
        !signed_in_driver.is_finished(),
        "the signed-in connection was closed"
    );
    assert_eq!(status_call(&mut signed_in, &n.addr, &n.token).await, "0");
    // A call with a bad credential does not sign a connection in.
    let (mut bad, bad_driver) = raw(&n.addr).await;
    assert_eq!(status_call(&mut bad, &n.addr, "tabos_nope").await, "16");
    tokio::time::timeout(PATIENCE, bad_driver)
        .await
        .expect("the node closes a connection with a bad credential")
        .unwrap();
    n.shut_down().await;
}

/// A raw HTTP/2 connection to the node from source address `from` (any
/// 127.0.0.0/8 address reaches the node's loopback listener).
async fn raw_from(
    from: std::net::Ipv4Addr,
    addr: &str,
) -> Option<(h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>)> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((from, 0).into()).unwrap();
    let tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
    // A connection the node closed at once fails its handshake or ends
    // right after it.
    let (send, conn) = h2::client::handshake(tcp).await.ok()?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    Some((send, driver))
}

/// Raises this process's open-file limit to its hard limit: the test
/// holds both ends of several hundred connections.
fn more_files() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    assert!(
        lim.rlim_cur >= 4_096,
        "the test needs 4096 files, has {}",
        lim.rlim_cur
    );
}

/// The gRPC door's line of `tabos status`.
async fn grpc_door(c: &mut tabos_client::Client) -> tabos_client::proto::DoorUse {
    let s = c.status().await.unwrap();
    s.doors
        .into_iter()
        .find(|d| d.door == "api")
        .expect("the gRPC door is shown")
}

/// Whether the node has closed the connection driven by `driver` (its
/// driver ends), within the test's patience.
async fn closed(driver: tokio::task::JoinHandle<()>) -> bool {
    tokio::time::timeout(PATIENCE, driver).await.is_ok()
}

/// Issue 36, item 2: floods of connections from one source with no
/// credential, from many sources, and of one realm's signed-in
/// connections each stop at their own cap, shown in `tabos status`, and
/// another realm is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn floods_of_connections_leave_room_for_others() {
    use tabos_node::conn::{
        CONNECTIONS_PER_REALM_MAX, UNAUTHENTICATED_MAX, UNAUTHENTICATED_PER_SOURCE_MAX,
    };
    more_files();
    let dir = TempDir::new("conn-flood");
    let n = common::start_with(&dir, "n1", Default::default()).await;
    let mut op = n.client().await;
    let a = op
        .create_realm("a", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    let b = op
        .create_realm("b", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    let mut at_b = n.client_with(&b).await;
    let served = |c: &mut tabos_client::Client| {
        let mut c = c.clone();
        async move { c.who_am_i().await.map(|me| me.realm) }
    };
    assert_eq!(served(&mut at_b).await.unwrap(), "b");

    // One source, no credential: past its cap, each new connection is
    // closed at once; the ones it holds stay (until the wait for a
    // credential, 10 s, far longer than this part).
    let flooder = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    for _ in 0..UNAUTHENTICATED_PER_SOURCE_MAX {
        held.push(raw_from(flooder, &n.addr).await.expect("admitted"));
    }
    for _ in 0..8 {
        if let Some((_, driver)) = raw_from(flooder, &n.addr).await {
            assert!(closed(driver).await, "one past the source's cap is closed");
        }
    }
    let s = grpc_door(&mut op).await;
    assert_eq!(s.unauthenticated as usize, UNAUTHENTICATED_PER_SOURCE_MAX);
    assert_eq!(
        s.unauthenticated_per_source_max as usize,
        UNAUTHENTICATED_PER_SOURCE_MAX
    );
    assert!(held.iter().all(|(_, d)| !d.is_finished()));

    // Many sources: never more than the cap of them all; the oldest go.
    let sources = UNAUTHENTICATED_MAX / UNAUTHENTICATED_PER_SOURCE_MAX + 1;
    for i in 0..sources {
        let from = std::net::Ipv4Addr::new(127, 0, 1, i as u8 + 1);
        for _ in 0..UNAUTHENTICATED_PER_SOURCE_MAX {
            held.push(raw_from(from, &n.addr).await.expect("admitted"));
        }
    }
    let s = grpc_door(&mut op).await;
    assert_eq!(s.unauthenticated as usize, UNAUTHENTICATED_MAX);
    assert_eq!(s.unauthenticated_max as usize, UNAUTHENTICATED_MAX);
    // Those past the cap were closed (the node closes them as it admits
    // newer ones; their drivers end soon after).
    let past_cap = held.len() - UNAUTHENTICATED_MAX;
    let deadline = std::time::Instant::now() + PATIENCE;
    while held.iter().filter(|(_, d)| d.is_finished()).count() < past_cap {
        assert!(
            std::time::Instant::now() < deadline,
            "older ones were not closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Realm b connects afresh (a new connection, not signed in at first)
    // and is served.
    let mut fresh_b = n.client_with(&b).await;
    assert_eq!(served(&mut fresh_b).await.unwrap(), "b");
    drop(held);

    // One realm's signed-in connections: at most its cap; the next call
    // on a new connection is RESOURCE_EXHAUSTED, and b is served.
    let mut of_a = Vec::new();
    let mut refused = None;
    for i in 0..CONNECTIONS_PER_REALM_MAX + 1 {
        let mut c = n.client_with(&a).await;
        match c.who_am_i().await {
            Ok(_) => of_a.push(c),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (i, e) = refused.expect("a realm's connections are capped");
    assert_eq!(
        i, CONNECTIONS_PER_REALM_MAX,
        "refused at the cap, not before: {e}"
    );
    assert_eq!(e.code(), Some(tonic::Code::ResourceExhausted), "{e}");
    let mut fresh_b = n.client_with(&b).await;
    assert_eq!(served(&mut fresh_b).await.unwrap(), "b");
    let s = grpc_door(&mut op).await;
    assert_eq!(
        s.by_realm.get("a").copied(),
        Some(CONNECTIONS_PER_REALM_MAX as u64)
    );
    assert_eq!(s.per_realm_max as usize, CONNECTIONS_PER_REALM_MAX);
    // A tenant's status shows its own realm's connections only.
    let s = grpc_door(&mut at_b).await;
    assert_eq!(s.by_realm.keys().collect::<Vec<_>>(), vec!["b"]);
    drop(of_a);
    n.shut_down().await;
}

/// Issue 36, item 2: one realm's open calls over all its connections are
/// capped — its waits fill the cap, its next call is RESOURCE_EXHAUSTED at
/// once, another realm is served throughout, and `tabos status` shows the
/// count (a tenant its own only); once the waits end, the realm is served
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_realms_open_calls_are_capped() {
    use tabos_node::conn::{CALLS_PER_REALM_MAX, STREAMS_PER_CONNECTION_MAX};
    more_files();
    let dir = TempDir::new("conn-calls");
    let n = common::start_with(&dir, "n1", Default::default()).await;
    let mut op = n.client().await;
    let a = op
        .create_realm("a", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    let b = op
        .create_realm("b", tabos_client::proto::Scheduler::Fifo)
        .await
        .unwrap()
        .admin_token;
    let mut at_a = n.client_with(&a).await;
    at_a.create_mailbox("", "box", 0, None).await.unwrap();
    // Connections enough for every wait, each signed in by a first call.
    let conns = CALLS_PER_REALM_MAX / STREAMS_PER_CONNECTION_MAX as usize + 1;
    let mut clients = Vec::new();
    for _ in 0..conns {
        let mut c = n.client_with(&a).await;
        c.who_am_i().await.unwrap();
        clients.push(c);
    }
    let mut waits = tokio::task::JoinSet::new();
    for i in 0..CALLS_PER_REALM_MAX {
        let mut c = clients[i % conns].clone();
        waits.spawn(async move { c.recv("", "box", 1, 60_000).await });
    }
    let deadline = std::time::Instant::now() + PATIENCE;
    while common::realm_calls(&mut op, "a").await != Some(CALLS_PER_REALM_MAX as u64) {
        assert!(
            std::time::Instant::now() < deadline,
            "the waits never all opened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e = at_a.who_am_i().await.unwrap_err();
    assert_eq!(common::code(&e), tonic::Code::ResourceExhausted, "{e}");
    assert!(e.to_string().contains("calls open on this node"), "{e}");
    let mut at_b = n.client_with(&b).await;
    assert_eq!(at_b.who_am_i().await.unwrap().realm, "b");
    // b sees its own count only (its status call is open as it is read).
    assert_eq!(common::realm_calls(&mut at_b, "a").await, None);
    assert_eq!(common::realm_calls(&mut at_b, "b").await, Some(1));
    // The waits end: a is served again.
    waits.abort_all();
    while waits.join_next().await.is_some() {}
    let deadline = std::time::Instant::now() + PATIENCE;
    while common::realm_calls(&mut op, "a").await.unwrap_or(0) >= CALLS_PER_REALM_MAX as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the waits' calls stayed counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(at_a.who_am_i().await.unwrap().realm, "a");
    n.shut_down().await;
}
