//! The node's connections: how many it holds, how long an idle one stays,
//! and what each one may make the node hold.
//!
//! [`incoming`] accepts at most [`CONNECTIONS_MAX`] connections at once
//! — over TCP and, with [`incoming_shared`], the node's local Unix socket
//! as well, one count ([`Slots`]) for both —
//! and backs off when accept fails (out of file descriptors) instead of
//! spinning. Each accepted [`Conn`] carries a [`ConnState`], which the
//! server hands to every request of the connection (in the request's
//! extensions, as its [`ConnInfo`]): the budget layer
//! ([`crate::budget`]) counts the connection's calls and the request bytes
//! it holds there. A connection with no call for [`Limits::idle`] is
//! closed — the HTTP/2 keepalive pings close a peer that is gone, this
//! closes one that is alive but unused — while one with a call open, however
//! long it waits (a receive, a watch), stays. A connection none of whose
//! calls has presented a good credential is closed sooner, after
//! [`Limits::auth_wait`]. One the server ends in good order (its side
//! shut after its last frames) is read to the peer's close for up to
//! [`LINGER_MAX`] first, so that the kernel does not reset it under the
//! peer's unread last frames.
//!
//! Who holds the slots (issue 36, item 2; [`Slots`] keeps the count): a
//! connection is *unauthenticated* from its accept until one of its calls
//! presents a good credential. At most [`UNAUTHENTICATED_PER_SOURCE_MAX`]
//! of those come from one [`Source`] (an IP address; on the local socket,
//! the peer's uid) — past it a new one is closed at once — and at most
//! [`UNAUTHENTICATED_MAX`] from all sources — past it the oldest is closed
//! — so connections that never sign in hold at most a quarter of the
//! slots, and no source can take that quarter from the others. Once
//! signed in, a connection belongs to its first credential's realm
//! (operators' together count as one, not capped): a realm holds at most
//! [`CONNECTIONS_PER_REALM_MAX`], a call that would take it past is
//! RESOURCE_EXHAUSTED (its connection stays unauthenticated, so is
//! closed after the wait for a credential). When every slot is held,
//! the node closes an idle connection of the realm holding the most —
//! never one of a realm below its share — to make room. A signed-in
//! connection's calls count against its realm too: at most
//! [`CALLS_PER_REALM_MAX`] open at once over all of the realm's
//! connections (a call past it is RESOURCE_EXHAUSTED at once), so a few
//! connections of 128 streams each cannot hold the node's tasks for one
//! realm. `tabos status` shows these limits and their use
//! ([`Slots::door`], [`Slots::calls`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::doors::Source;
use crate::doors::{Door, DoorLimits, Held};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::time::{Instant, Sleep};

/// Most connections a node holds open; past it the node accepts no more
/// until one closes (the kernel's backlog holds the rest).
pub const CONNECTIONS_MAX: usize = 1_024;
/// Most connections that have not presented a good credential yet from
/// one [`Source`]; past it a new one from that source is closed at once.
/// A client signs a connection in with its first call, so only a burst of
/// connections opened at the same moment (a job's procs starting on one
/// node, under one uid) comes near it; a quarter of the share of
/// connections not signed in.
pub const UNAUTHENTICATED_PER_SOURCE_MAX: usize = 64;
/// The gRPC door's limits: a quarter of the slots for connections that
/// have not signed in (so signed-in clients always have the rest), a
/// quarter per realm.
pub const DOOR: DoorLimits = DoorLimits::quarters(CONNECTIONS_MAX, UNAUTHENTICATED_PER_SOURCE_MAX);
/// Most connections that have not presented a good credential yet, from
/// every source together.
pub const UNAUTHENTICATED_MAX: usize = DOOR.unauthenticated;
/// Most connections one realm's credentials hold at once (operators'
/// are counted together, not capped).
pub const CONNECTIONS_PER_REALM_MAX: usize = DOOR.per_realm;
/// Most concurrent calls (HTTP/2 streams) on one connection; a client
/// opening more waits for one to end.
pub const STREAMS_PER_CONNECTION_MAX: u32 = 128;
/// Most calls one realm's signed-in connections hold open at once on this
/// node — waits, watches and receives included (operators' are counted,
/// not capped); a call past it is RESOURCE_EXHAUSTED. A sixteenth of what
/// a realm's connections could open ([`CONNECTIONS_PER_REALM_MAX`] ×
/// [`STREAMS_PER_CONNECTION_MAX`]).
pub const CALLS_PER_REALM_MAX: usize = 2_048;
/// Every so often the node pings an idle connection; one that does not
/// answer within [`KEEPALIVE_TIMEOUT`] is closed, and its calls with it.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// The first pause before accepting again when accept fails (out of file
/// descriptors).
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause before accepting again when accept fails: the pause
/// doubles from [`ACCEPT_BACKOFF_MIN`] up to this (jittered).
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long a connection with no call open stays open (gRPC's
/// MAX_CONNECTION_IDLE): a client reconnects when it calls again.
pub const IDLE_MAX: Duration = Duration::from_secs(300);
/// How long a connection may stay open before one of its calls has
/// presented a good credential (issue 36, item 2): connections that send
/// the HTTP/2 preface and nothing else hold a slot for this long, not for
/// [`IDLE_MAX`]. A client connects as it calls, so its first call carries
/// its credential within milliseconds.
pub const AUTH_WAIT_MAX: Duration = Duration::from_secs(10);
/// Most bytes of requests still arriving that one connection may make the
/// node hold: four largest messages (a quarter of the node's whole
/// [`crate::budget::REQUEST_BYTES_MAX`], so one client cannot take it all).
pub const CONNECTION_REQUEST_BYTES_MAX: usize = 4 * tabos_client::MESSAGE_BYTES_MAX;
/// A request whose next bytes do not arrive for this long fails, and what
/// it held is given back (a client that sent most of a message and
/// stalled).
pub const REQUEST_STALL_MAX: Duration = Duration::from_secs(30);
/// After the node ends a connection in good order (its last frames
/// written, its side shut), how long it goes on reading — and discarding —
/// what the peer still sends before it closes the socket. A socket closed
/// with bytes unread is reset by the kernel, and a reset peer fails its
/// next write (EPIPE) before it has read the node's last frames: a watch
/// the node's stop ended reached its client as "broken pipe" instead of
/// its status (CI of 5e40dc9). nginx's lingering close, for the same
/// reason. The peer closing its side ends the wait sooner.
pub const LINGER_MAX: Duration = Duration::from_secs(2);
/// Most bytes a lingering connection reads and discards before it is
/// closed anyway.
pub const LINGER_BYTES_MAX: usize = 1 << 20;
/// Most connections lingering at once (each holds a file descriptor,
/// though no longer a slot); past it one closes at once.
pub const LINGERING_MAX: usize = 256;

/// The limits a server applies to its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// See [`IDLE_MAX`].
    pub idle: Duration,
    /// See [`CONNECTION_REQUEST_BYTES_MAX`].
    pub connection_request_bytes: usize,
    /// See [`REQUEST_STALL_MAX`].
    pub request_stall: Duration,
    /// See [`AUTH_WAIT_MAX`].
    pub auth_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            idle: IDLE_MAX,
            connection_request_bytes: CONNECTION_REQUEST_BYTES_MAX,
            request_stall: REQUEST_STALL_MAX,
            auth_wait: AUTH_WAIT_MAX,
        }
    }
}

/// What one connection's requests share.
#[derive(Debug)]
pub struct ConnState {
    /// Bytes of this connection's requests still arriving that the node
    /// holds (counted by the budget layer).
    pub(crate) held: AtomicUsize,
    /// Calls open on the connection: from the request's headers to the
    /// end of its response.
    calls: AtomicUsize,
    /// When the last call ended (or the connection was accepted).
    idle_since: Mutex<Instant>,
    /// The connection's reader, woken when its last call ends so that it
    /// arms the idle timer.
    reader: Mutex<Option<Waker>>,
    /// When the connection was accepted.
    accepted: Instant,
    /// Whether a call on it has presented a good credential (set by the
    /// authentication interceptor); until then it is closed
    /// [`Limits::auth_wait`] after it was accepted.
    authenticated: std::sync::atomic::AtomicBool,
    /// Closed by the node (to make room) as soon as no call is open on it.
    evicted: std::sync::atomic::AtomicBool,
    /// The realm it signed in for (`""`: operators), once it has.
    pub(crate) realm: std::sync::OnceLock<Arc<str>>,
    /// Where it comes from.
    source: Source,
    pub(crate) limits: Limits,
}

impl ConnState {
    pub(crate) fn new(limits: Limits, source: Source) -> ConnState {
        ConnState {
            held: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            reader: Mutex::new(None),
            accepted: Instant::now(),
            authenticated: std::sync::atomic::AtomicBool::new(false),
            evicted: std::sync::atomic::AtomicBool::new(false),
            realm: std::sync::OnceLock::new(),
            source,
            limits,
        }
    }

    /// Counts a call open until the returned guard is dropped.
    pub(crate) fn call(self: &Arc<Self>) -> CallGuard {
        self.calls.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.clone())
    }
}

impl Held for ConnState {
    fn source(&self) -> &Source {
        &self.source
    }
    fn is_idle(&self) -> bool {
        self.calls.load(Ordering::Acquire) == 0
    }
    /// Wakes the reader, which reads the connection as closed once no
    /// call is open on it.
    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        if let Some(w) = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
    }
    fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }
}

/// One open call of a connection (see [`ConnState::call`]).
#[derive(Debug)]
pub(crate) struct CallGuard(Arc<ConnState>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        let before = self.0.calls.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a call ends once");
        if before == 1 {
            *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
            if let Some(w) = self
                .0
                .reader
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                w.wake();
            }
        }
    }
}

/// What the server knows of a connection, in each request's extensions.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The addresses of a TCP connection; both `None` on the local socket.
    pub tcp: tonic::transport::server::TcpConnectInfo,
    pub state: Arc<ConnState>,
    /// The slots it holds one of.
    slots: Slots,
}

impl ConnInfo {
    /// A call on this connection presented a good credential of `realm`
    /// (empty for an operator's): the first time, the connection leaves
    /// the unauthenticated and joins its realm's, or — when the realm
    /// holds [`CONNECTIONS_PER_REALM_MAX`] already — is refused, and stays
    /// unauthenticated (closed after [`Limits::auth_wait`] unless a later
    /// call finds room).
    pub(crate) fn signed_in(&self, realm: &str) -> Result<(), String> {
        if self.state.authenticated.load(Ordering::Acquire) {
            return Ok(());
        }
        self.slots
            .door
            .ledger
            .sign_in(&self.state, realm)
            .map_err(|e| e.to_string())?;
        let _ = self.state.realm.set(realm.into());
        self.state.authenticated.store(true, Ordering::Release);
        Ok(())
    }

    /// Counts a call of this connection against its realm's
    /// [`CALLS_PER_REALM_MAX`], once it has signed in (`None` before: the
    /// call that signs it in is bounded by the connection's streams);
    /// `Err` says why the call is refused.
    pub(crate) fn realm_call(&self) -> Result<Option<crate::doors::Taken>, String> {
        let Some(realm) = self.state.realm.get() else {
            return Ok(None);
        };
        self.slots.calls.take(realm).map(Some).map_err(|full| {
            format!(
                "realm {} has {} calls open on this node, the most one realm may; wait for \
                 some to end",
                full.realm, full.held
            )
        })
    }
}

/// An accepted connection, holding one of the node's [`CONNECTIONS_MAX`]
/// slots until it is dropped.
#[derive(Debug)]
pub struct Conn {
    /// Always `Some` but in its drop, which hands it to [`linger`].
    stream: Option<Stream>,
    /// The server shut its side (its last frames are out): see
    /// [`LINGER_MAX`].
    shut_down: bool,
    /// Bytes read off the stream to tell its protocol, given back to the
    /// server that speaks it before anything more is read.
    unread: bytes::Bytes,
    state: Arc<ConnState>,
    /// Fires [`Limits::idle`] after the last call ended.
    idle: Pin<Box<Sleep>>,
    slots: Slots,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// A connection's byte stream: TCP, or the node's local Unix socket
/// (registered to wake the node only to read: see
/// [`tabos_client::local::LocalStream`]).
type Stream = tokio_util::either::Either<TcpStream, tabos_client::local::LocalStream>;

impl AsyncRead for Conn {
    /// Reads; while no call is open, also waits out the idle limit (and,
    /// until a call has authenticated, the wait for a credential), after
    /// which the connection reads as closed by its peer (the server then
    /// drops it).
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.unread.is_empty() {
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let read = Pin::new(this.stream_mut()).poll_read(cx, buf);
        if read.is_ready() {
            return read;
        }
        // Registered before the count is read, so a call ending after the
        // read below still wakes this reader.
        {
            let mut reader = this.state.reader.lock().unwrap_or_else(|e| e.into_inner());
            if !reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *reader = Some(cx.waker().clone());
            }
        }
        if this.state.calls.load(Ordering::Acquire) > 0 {
            return Poll::Pending;
        }
        if this.state.evicted.load(Ordering::Acquire) {
            return Poll::Ready(Ok(())); // closed by the node
        }
        let since = *this
            .state
            .idle_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut deadline = since + this.state.limits.idle;
        if !this.state.authenticated.load(Ordering::Acquire) {
            deadline = deadline.min(this.state.accepted + this.state.limits.auth_wait);
        }
        if this.idle.deadline() != deadline {
            this.idle.as_mut().reset(deadline);
        }
        match this.idle.as_mut().poll(cx) {
            Poll::Ready(()) if this.state.calls.load(Ordering::Acquire) == 0 => {
                Poll::Ready(Ok(())) // end of stream: closed for being idle
            }
            _ => Poll::Pending,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(self.get_mut().stream_mut()).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.get_mut().stream_mut()).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let shut = Pin::new(this.stream_mut()).poll_shutdown(cx);
        this.shut_down |= matches!(shut, Poll::Ready(Ok(())));
        shut
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(self.get_mut().stream_mut()).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream_ref().is_write_vectored()
    }
}

impl Conn {
    fn stream_ref(&self) -> &Stream {
        self.stream
            .as_ref()
            .expect("a connection's stream is taken only as it drops")
    }
    fn stream_mut(&mut self) -> &mut Stream {
        self.stream
            .as_mut()
            .expect("a connection's stream is taken only as it drops")
    }

    /// Gives `bytes` back to be read first (what the local socket read to
    /// tell gRPC from the local transport).
    pub(crate) fn unread(&mut self, bytes: bytes::Bytes) {
        debug_assert!(self.unread.is_empty(), "bytes given back once");
        self.unread = bytes;
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        let tcp = match self.stream_ref() {
            Stream::Left(s) => s.connect_info(),
            Stream::Right(_) => tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
        };
        ConnInfo {
            tcp,
            state: self.state.clone(),
            slots: self.slots.clone(),
        }
    }
}

/// Connections currently open, over every server of this process.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// How many connections this process's servers hold open now.
pub fn open_connections() -> usize {
    OPEN.load(Ordering::Relaxed)
}

impl Drop for Conn {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
        self.slots.door.ledger.forget(&self.state);
        if let Some(stream) = self.stream.take().filter(|_| self.shut_down) {
            linger(stream);
        }
    }
}

/// Connections lingering now (see [`LINGER_MAX`]).
static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// Reads and discards what the peer of a connection the server shut
/// still sends, until it closes its side, for at most [`LINGER_MAX`] and
/// [`LINGER_BYTES_MAX`], then closes it; closes it at once when
/// [`LINGERING_MAX`] linger already or no runtime runs.
fn linger(mut stream: Stream) {
    struct Lingering;
    impl Drop for Lingering {
        fn drop(&mut self) {
            LINGERING.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if LINGERING.fetch_add(1, Ordering::Relaxed) >= LINGERING_MAX {
        LINGERING.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let lingering = Lingering;
    runtime.spawn(async move {
        let _lingering = lingering;
        let mut discard = vec![0u8; 16 << 10];
        let _ = tokio::time::timeout(LINGER_MAX, async {
            let mut read = 0;
            while read < LINGER_BYTES_MAX {
                match tokio::io::AsyncReadExt::read(&mut stream, &mut discard).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => read += n,
                }
            }
        })
        .await;
    });
}

/// [`incoming_with`] the default [`Limits`].
pub fn incoming(listener: TcpListener) -> impl tokio_stream::Stream<Item = std::io::Result<Conn>> {
    incoming_with(listener, Limits::default())
}

/// The connections of `listener`, each with Nagle's algorithm off (the
/// server's `tcp_nodelay` applies only to listeners tonic binds itself),
/// at most [`CONNECTIONS_MAX`] open at once, each under `limits`. A failed
/// accept — out of file descriptors — is not handed to the server (which
/// would retry at once, spinning): the accept loop pauses, doubling up to
/// [`ACCEPT_BACKOFF_MAX`], and tries again.
pub fn incoming_with(
    listener: TcpListener,
    limits: Limits,
) -> impl tokio_stream::Stream<Item = std::io::Result<Conn>> {
    incoming_shared(Listener::Tcp(listener), limits, Slots::new())
}

/// What a server listens on: TCP, or the node's local Unix socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// The next connection; `Ok(None)` for one accepted but unusable
    /// (dropped, closing it), which says nothing about the listener — an
    /// `Err` is a failed accept, which does.
    async fn accept(&self) -> std::io::Result<Option<(Stream, Source)>> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(|(s, peer)| {
                // Fails only on a socket already gone, which its first
                // read then reports.
                let _ = s.set_nodelay(true);
                Some((Stream::Left(s), Source::Ip(peer.ip())))
            }),
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                // The kernel vouches for the peer's uid; a socket whose
                // peer is already gone counts as an unknown local one.
                let uid = s.peer_cred().map_or(u32::MAX, |c| c.uid());
                // Registering the socket anew can fail for this socket
                // alone (the runtime's poller out of room): it is closed,
                // and the accept loop goes on without a pause.
                Ok(s.into_std()
                    .and_then(|s| {
                        tabos_client::local::LocalStream::of(s, tabos_client::local::End::Node)
                    })
                    .ok()
                    .map(|s| (Stream::Right(s), Source::Local(uid))))
            }
        }
    }
}

/// The node's [`CONNECTIONS_MAX`] connection slots, shared by the
/// servers of its listeners (TCP and the local socket): one count, and
/// who holds them (see the module's doc).
#[derive(Debug, Clone)]
pub struct Slots {
    door: Arc<Door<ConnState>>,
    /// The calls open on its connections, per realm.
    calls: Arc<crate::doors::PerRealm>,
}

impl Slots {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Slots {
        Slots {
            door: Arc::new(Door::new(CONNECTIONS_MAX, DOOR)),
            calls: crate::doors::PerRealm::new(CALLS_PER_REALM_MAX),
        }
    }

    /// The door these slots are: its limits and who holds it.
    pub fn door(&self) -> &Door<ConnState> {
        &self.door
    }

    /// The calls open on these slots' connections, per realm.
    pub fn calls(&self) -> &crate::doors::PerRealm {
        &self.calls
    }
}

/// [`incoming_with`] over any [`Listener`], its connections taking their
/// slots from `slots`.
pub fn incoming_shared(
    listener: Listener,
    limits: Limits,
    slots: Slots,
) -> impl tokio_stream::Stream<Item = std::io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let mut pauses = tabos_client::retry::Backoff::new(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
        loop {
            let slot = tokio::select! {
                () = tx.closed() => return, // the server stopped
                s = slots.door.slot(None) => match s {
                    Some(s) => s,
                    None => return,
                },
            };
            let accepted = tokio::select! {
                () = tx.closed() => return,
                a = listener.accept() => a,
            };
            match accepted {
                Ok(None) => pauses.reset(),
                Ok(Some((stream, source))) => {
                    pauses.reset();
                    let state = Arc::new(ConnState::new(limits, source));
                    if !slots.door.ledger.admit(&state) {
                        // Over its source's cap: closed at once (dropped).
                        continue;
                    }
                    OPEN.fetch_add(1, Ordering::Relaxed);
                    let conn = Conn {
                        stream: Some(stream),
                        shut_down: false,
                        unread: bytes::Bytes::new(),
                        state,
                        idle: Box::pin(tokio::time::sleep(limits.idle)),
                        slots: slots.clone(),
                        _slot: slot,
                    };
                    if tx.send(Ok(conn)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let pause = pauses.pause();
                    tracing::warn!("accept failed ({e}); pausing {pause:?}");
                    drop(slot);
                    tokio::select! {
                        () = tx.closed() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    /// The peer sent bytes the server never read, and reads the server's
    /// last bytes only after the server closed: without the lingering
    /// close the kernel resets the connection and the peer's next write
    /// fails (EPIPE) with most of them unread.
    #[tokio::test]
    async fn a_connection_the_server_shut_lingers_so_its_peer_reads_its_last_bytes() {
        const LAST: usize = 64 << 10;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = Box::pin(incoming(listener));
        let mut peer = TcpStream::connect(addr).await.unwrap();
        let mut conn = incoming.next().await.unwrap().unwrap();
        peer.write_all(b"unread by the server").await.unwrap();
        let server = tokio::spawn(async move {
            conn.write_all(&vec![7u8; LAST]).await.unwrap();
            conn.shutdown().await.unwrap();
            assert!(conn.shut_down);
            drop(conn);
        });
        // The peer reads a first piece, then nothing more until the
        // server has closed with the peer's bytes still unread.
        let mut window = vec![0u8; 4 << 10];
        let n = peer.read(&mut window).await.unwrap();
        server.await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut got = n;
        loop {
            // As an HTTP/2 peer does: credit for what it read.
            peer.write_all(b"credit")
                .await
                .unwrap_or_else(|e| panic!("a write after {got} of {LAST} bytes: {e}"));
            match peer.read(&mut window).await {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("a read after {got} of {LAST} bytes: {e}"),
            }
        }
        assert_eq!(
            got, LAST,
            "the peer read all the server's bytes, then its close"
        );
    }
}
