//! The node's side of the local transport ([`tabos_client::local`]): the
//! API on the local socket in length-prefixed frames, served by the very
//! services, interceptor and budget layer the gRPC door has — a frame
//! becomes the HTTP request tonic would have made of it, so every check
//! and bound applies unchanged.
//!
//! Each connection of the local socket is told by its first eight bytes:
//! [`MAGIC`] is the local transport, HTTP/2's preface goes to the gRPC
//! server with those bytes given back, anything else is closed.
//!
//! Per connection: one task, its reader, with its calls polled in the same
//! task (a task per call would wake another of the runtime's threads per
//! call, which costs more than most calls do). A call's response is
//! written as its frames are ready, all that is ready in one write (a
//! unary answer's `HEADERS`, `DATA` and `END` go out together). Bounds:
//! [`conn::STREAMS_PER_CONNECTION_MAX`] calls run at once, up to
//! [`PENDING_CALLS_MAX`] more holding at most [`PENDING_BYTES_MAX`] wait
//! their turn (past either a call is refused RESOURCE_EXHAUSTED, and the
//! connection reads on), a large request that starts at once is decoded
//! before the next frame is read, a stream runs at most [`WINDOW`] frames ahead of its reader,
//! and a peer that takes no bytes for [`WRITE_STALL_MAX`] loses the
//! connection. The connection's idle and sign-in limits are the
//! [`Conn`]'s own. A call's `grpc-timeout` is honoured as gRPC's server
//! does. When the node stops, a connection says `GOAWAY`, takes
//! no new call, and closes once its calls have ended.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use tabos_client::local::{
    decode_headers, encode_headers, put_frame, put_frame_header, FrameReader, Kind, DATA_BYTES_MAX,
    FRAME_BYTES_MAX, FRAME_HEADER_BYTES, MAGIC, PATH_BYTES_MAX, PING_BYTES_MAX, WINDOW,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::Connected;
use tower::ServiceExt;

use crate::conn::{self, Conn, ConnInfo};

/// Most calls of one connection waiting for one of its
/// [`conn::STREAMS_PER_CONNECTION_MAX`] to end; a call past it is refused.
pub const PENDING_CALLS_MAX: usize = 256;
/// Most bytes (frames as read: path, headers, message) the calls waiting
/// on one connection may hold; a call past it is refused. Waiting calls
/// are not yet under the node's request-bytes budget, which counts a
/// call's bytes once it runs, so this is their bound — a connection's
/// share of the budget, as HTTP/2's windows bound gRPC's.
pub const PENDING_BYTES_MAX: usize = conn::CONNECTION_REQUEST_BYTES_MAX;
/// A request larger than this that starts at once is decoded before the
/// connection's next frame is read, so one connection holds at most one
/// large running request the node has not decoded yet. A waiting one
/// does not stop the reader — that could hold back the credit its running
/// streams wait for — it counts toward [`PENDING_BYTES_MAX`] instead.
pub const LARGE_REQUEST_BYTES: usize = 64 << 10;
/// A connection whose peer takes none of a response's bytes for this long
/// is closed, with its calls.
pub const WRITE_STALL_MAX: Duration = conn::REQUEST_STALL_MAX;
/// What a new connection is told by (it has until its [`Conn`]'s wait
/// for a credential to send them).
const SNIFF_BYTES: usize = MAGIC.len();

/// The HTTP/2 connection preface's first eight bytes.
const H2_PREFACE: &[u8; 8] = b"PRI * HT";

/// The service every frame's request goes to: the gRPC door's routes
/// under its budget layer.
pub trait Api:
    tower::Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static
{
}

impl<S> Api for S where
    S: tower::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future: Send,
        > + Clone
        + Send
        + 'static
{
}

/// Serves the local socket's connections from `incoming` until `stopping`
/// is raised and every connection has closed: the local transport's here,
/// gRPC's handed to `grpc` (the gRPC server reading that channel).
pub async fn serve<A: Api>(
    incoming: impl tokio_stream::Stream<Item = std::io::Result<Conn>>,
    api: A,
    grpc: mpsc::Sender<std::io::Result<Conn>>,
    stopping: watch::Receiver<bool>,
) {
    let mut incoming = std::pin::pin!(incoming);
    let mut conns = JoinSet::new();
    let stop = stopping.clone();
    loop {
        tokio::select! {
            c = incoming.next() => {
                let Some(Ok(conn)) = c else { break };
                let (api, grpc, stopping) = (api.clone(), grpc.clone(), stopping.clone());
                conns.spawn(async move {
                    if let Some(conn) = tell(conn, &grpc).await {
                        serve_conn(conn, api, stopping).await;
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = raised(stop.clone()) => break,
        }
    }
    drop(grpc);
    while conns.join_next().await.is_some() {}
}

/// Reads a new connection's first bytes: the local transport's comes back
/// to be served here, gRPC's goes to the gRPC server, anything else is
/// closed.
async fn tell(mut conn: Conn, grpc: &mpsc::Sender<std::io::Result<Conn>>) -> Option<Conn> {
    let mut first = [0u8; SNIFF_BYTES];
    // Ends at the connection's wait for a credential at the latest (the
    // Conn reads as closed then).
    conn.read_exact(&mut first).await.ok()?;
    if &first == MAGIC {
        return Some(conn);
    }
    if &first == H2_PREFACE {
        conn.unread(Bytes::copy_from_slice(&first));
        let _ = grpc.send(Ok(conn)).await;
    }
    None
}

/// A call read and not yet started.
struct Pending {
    id: u32,
    request: http::Request<Body>,
    /// Its frame's payload, as counted toward [`PENDING_BYTES_MAX`].
    bytes: usize,
    /// When its `grpc-timeout`, counted from when it was read, ends.
    deadline: Option<tokio::time::Instant>,
}

/// One connection's open calls, as its reader keeps them.
struct Open {
    /// By call id: what cancels it and its stream's credit.
    calls: HashMap<u32, (AbortHandle, Arc<Semaphore>)>,
    /// The calls running, each ending with its id. They run within the
    /// connection's task, not a task each: a spawn would wake another of
    /// the runtime's threads for every call, which costs more than most
    /// calls do (the node's work is on its store's threads anyway).
    running: FuturesUnordered<BoxFuture<'static, u32>>,
    waiting: VecDeque<Pending>,
    /// The bytes of `waiting`'s calls.
    waiting_bytes: usize,
}

impl Open {
    /// Whether a call read now would run at once (none waits before it:
    /// waiting calls start as soon as there is room).
    fn has_room(&self) -> bool {
        self.calls.len() < conn::STREAMS_PER_CONNECTION_MAX as usize
    }

    /// Takes the waiting call `id` out, if it waits.
    fn forget_waiting(&mut self, id: u32) {
        if let Some(i) = self.waiting.iter().position(|p| p.id == id) {
            if let Some(p) = self.waiting.remove(i) {
                self.waiting_bytes -= p.bytes;
            }
        }
    }
}

/// Serves one local-transport connection to its end.
async fn serve_conn<A: Api>(conn: Conn, api: A, stopping: watch::Receiver<bool>) {
    let info = conn.connect_info();
    let (read, write) = tokio::io::split(conn);
    let writer = Writer::new(write);
    let mut frames = FrameReader::new(read, FRAME_BYTES_MAX);
    let mut open = Open {
        calls: HashMap::new(),
        running: FuturesUnordered::new(),
        waiting: VecDeque::new(),
        waiting_bytes: 0,
    };
    let mut last_id = 0u32;
    let mut going_away = false;
    let mut large: Option<tokio::sync::oneshot::Receiver<()>> = None;
    let dead = writer.dead.clone();
    loop {
        if going_away && open.calls.is_empty() && open.waiting.is_empty() {
            break;
        }
        tokio::select! {
            // A large request's body is decoded before the next frame is
            // read (its call runs meanwhile, below).
            _ = async { if let Some(rx) = large.as_mut() { let _ = rx.await; } }, if large.is_some() => {
                large = None;
            }
            f = frames.next(), if large.is_none() => {
                let frame = match f {
                    Ok(Some(f)) => f,
                    // The peer closed, the connection idled out, or it
                    // broke the protocol.
                    _ => break,
                };
                match frame.kind {
                    Kind::Call if going_away => {} // the client resends it elsewhere
                    Kind::Call => {
                        if frame.id <= last_id || open.calls.contains_key(&frame.id) {
                            break; // ids only go up
                        }
                        last_id = frame.id;
                        let bytes = frame.payload.len();
                        let starts_now = open.has_room();
                        let is_large = starts_now && bytes > LARGE_REQUEST_BYTES;
                        let Some((request, consumed)) = request_of(frame.payload, &info, is_large)
                        else {
                            break;
                        };
                        if !starts_now {
                            if let Some(status) = queue_full(&open, bytes) {
                                writer.refuse(frame.id, status).await;
                                continue;
                            }
                        }
                        // One past what the clock can hold is none.
                        let deadline = grpc_timeout(request.headers())
                            .and_then(|t| tokio::time::Instant::now().checked_add(t));
                        open.waiting.push_back(Pending { id: frame.id, request, bytes, deadline });
                        open.waiting_bytes += bytes;
                        start_waiting(&mut open, &api, &writer);
                        debug_assert_eq!(starts_now, !open.waiting.iter().any(|p| p.id == frame.id));
                        // Decoded (or refused) before the next frame is read.
                        large = consumed;
                    }
                    Kind::Cancel => {
                        if let Some((abort, _)) = open.calls.remove(&frame.id) {
                            abort.abort();
                        } else {
                            open.forget_waiting(frame.id);
                        }
                        start_waiting(&mut open, &api, &writer);
                    }
                    Kind::Credit => {
                        let n = (&frame.payload[..]).try_get_u32_le().unwrap_or(0);
                        if let Some((_, credit)) = open.calls.get(&frame.id) {
                            // Never more than a window, whatever the peer says.
                            let room = (WINDOW as usize).saturating_sub(credit.available_permits());
                            credit.add_permits((n as usize).min(room));
                        }
                    }
                    // Answered at once, whatever else waits: the client
                    // gives a connection up when a ping goes unanswered.
                    Kind::Ping if frame.payload.len() <= PING_BYTES_MAX => {
                        let mut buf = Vec::with_capacity(FRAME_HEADER_BYTES + PING_BYTES_MAX);
                        put_frame(&mut buf, frame.id, Kind::Pong, &frame.payload);
                        writer.write(buf).await;
                    }
                    // A client never sends these.
                    Kind::Ping | Kind::Pong | Kind::Headers | Kind::Data | Kind::End | Kind::GoAway => break,
                }
            }
            Some(id) = open.running.next(), if !open.running.is_empty() => {
                open.calls.remove(&id);
                start_waiting(&mut open, &api, &writer);
            }
            () = raised(stopping.clone()), if !going_away => {
                going_away = true;
                open.waiting.clear();
                open.waiting_bytes = 0;
                let mut buf = Vec::with_capacity(16);
                put_frame(&mut buf, 0, Kind::GoAway, &last_id.to_le_bytes());
                writer.write(buf).await;
            }
            () = raised(dead.clone()) => break,
        }
    }
    // Whatever is still open goes with the connection (dropped with
    // `open`).
}

/// Ends once `flag` is raised (or its sender is gone).
async fn raised(mut flag: watch::Receiver<bool>) {
    let _ = flag.wait_for(|f| *f).await;
}

/// Why a call of `bytes` that cannot start at once may not wait either,
/// if it may not.
fn queue_full(open: &Open, bytes: usize) -> Option<tonic::Status> {
    if open.waiting.len() >= PENDING_CALLS_MAX {
        return Some(tonic::Status::resource_exhausted(format!(
            "{} calls open and {PENDING_CALLS_MAX} waiting on one connection, the most it may have",
            open.calls.len()
        )));
    }
    if open.waiting_bytes + bytes > PENDING_BYTES_MAX {
        return Some(tonic::Status::resource_exhausted(format!(
            "{} calls open and {} waiting with {} bytes on one connection; this call's {bytes} \
             would pass the {PENDING_BYTES_MAX} bytes its waiting calls may hold",
            open.calls.len(),
            open.waiting.len(),
            open.waiting_bytes
        )));
    }
    None
}

/// Starts waiting calls while fewer than the most run.
fn start_waiting<A: Api>(open: &mut Open, api: &A, writer: &Writer) {
    while open.has_room() {
        let Some(p) = open.waiting.pop_front() else {
            return;
        };
        open.waiting_bytes -= p.bytes;
        let credit = Arc::new(Semaphore::new(WINDOW as usize));
        let (abort, registration) = AbortHandle::new_pair();
        let call = Abortable::new(
            run_call(p.request, api.clone(), writer.clone(), credit.clone(), p.id),
            registration,
        );
        let id = p.id;
        let (deadline, writer) = (p.deadline, writer.clone());
        open.running.push(Box::pin(async move {
            match deadline {
                None => {
                    let _ = call.await;
                }
                // As tonic's server does for gRPC: past its deadline the
                // call is dropped (and with it what it was waiting for).
                Some(at) => {
                    if tokio::time::timeout_at(at, call).await.is_err() {
                        let status = tonic::Status::deadline_exceeded(
                            "the call's deadline (grpc-timeout) passed",
                        );
                        writer.refuse(id, status).await;
                    }
                }
            }
            id
        }));
        open.calls.insert(p.id, (abort, credit));
    }
}

/// The `grpc-timeout` of a call's headers, as gRPC defines it (at most
/// eight digits and a unit); `None` without one or for one that is not
/// well formed, which tonic's server ignores too.
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The HTTP request a `CALL` frame's payload makes, as tonic's server
/// would have made it (with the connection in its extensions); for a
/// `large` one, also what fires once its body is decoded. `None` for a
/// payload the protocol does not allow.
fn request_of(
    mut payload: Bytes,
    info: &ConnInfo,
    large: bool,
) -> Option<(
    http::Request<Body>,
    Option<tokio::sync::oneshot::Receiver<()>>,
)> {
    if payload.remaining() < 2 {
        return None;
    }
    let path_len = payload.get_u16_le() as usize;
    if path_len > PATH_BYTES_MAX || payload.remaining() < path_len {
        return None;
    }
    let path = payload.split_to(path_len);
    let uri = http::Uri::from_maybe_shared(path).ok()?;
    if uri.scheme().is_some() || uri.authority().is_some() {
        return None; // a path, nothing else
    }
    let mut headers = decode_headers(&mut payload).ok()?;
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    let (body, consumed) = if large {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Body::new(Once {
                data: Some(payload),
                _consumed: Some(tx),
            }),
            Some(rx),
        )
    } else {
        (
            Body::new(Once {
                data: Some(payload),
                _consumed: None,
            }),
            None,
        )
    };
    let mut request = http::Request::new(body);
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = uri;
    *request.version_mut() = http::Version::HTTP_2;
    *request.headers_mut() = headers;
    request.extensions_mut().insert(info.clone());
    Some((request, consumed))
}

/// A request body: its bytes at once; dropped (which tells the reader)
/// once the node has decoded it.
struct Once {
    data: Option<Bytes>,
    _consumed: Option<tokio::sync::oneshot::Sender<()>>,
}

impl http_body::Body for Once {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(
            self.get_mut()
                .data
                .take()
                .map(|d| Ok(http_body::Frame::data(d))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }
}

/// The connection's write half, shared by its calls; each write is whole
/// frames.
#[derive(Clone)]
struct Writer {
    io: Arc<tokio::sync::Mutex<Out>>,
    /// Raised when a write fails or stalls: the connection is closed.
    dead: watch::Receiver<bool>,
    kill: Arc<watch::Sender<bool>>,
}

impl Writer {
    fn new(io: WriteHalf<Conn>) -> Writer {
        let (kill, dead) = watch::channel(false);
        Writer {
            io: Arc::new(tokio::sync::Mutex::new(Out {
                io,
                rest: Vec::new(),
                at: 0,
            })),
            dead,
            kill: Arc::new(kill),
        }
    }

    /// Writes `buf` whole, or marks the connection dead.
    async fn write(&self, buf: Vec<u8>) {
        if buf.is_empty() || *self.dead.borrow() {
            return;
        }
        let wrote = tokio::time::timeout(WRITE_STALL_MAX, async {
            self.io.lock().await.write(buf).await
        })
        .await;
        if !matches!(wrote, Ok(Ok(()))) {
            self.kill.send_replace(true);
        }
    }

    /// Ends call `id` with `status` before it ran.
    async fn refuse(&self, id: u32, status: tonic::Status) {
        let mut buf = Vec::new();
        put_end(&mut buf, id, &status.into_http::<()>().headers().clone());
        self.write(buf).await;
    }
}

/// The write half and what a write dropped part-way left of its frames.
///
/// A call's future can be dropped at any await — cancelled by its
/// client, past its deadline — and one dropped in the middle of a write
/// would leave half a frame on the wire, which the peer would read as the
/// start of the next: so what a write has not yet written stays here, and
/// the next write finishes it first.
struct Out {
    io: WriteHalf<Conn>,
    rest: Vec<u8>,
    /// How much of `rest` is written.
    at: usize,
}

impl Out {
    /// Writes what an earlier write left, then `buf`, whole.
    async fn write(&mut self, buf: Vec<u8>) -> std::io::Result<()> {
        self.finish().await?;
        self.rest = buf;
        self.at = 0;
        self.finish().await
    }

    async fn finish(&mut self) -> std::io::Result<()> {
        while self.at < self.rest.len() {
            match self.io.write(&self.rest[self.at..]).await? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => self.at += n,
            }
        }
        // Not kept: a buffer can be a whole largest message.
        self.rest = Vec::new();
        self.at = 0;
        Ok(())
    }
}

/// Appends an `END` frame carrying `trailers`.
fn put_end(buf: &mut Vec<u8>, id: u32, trailers: &http::HeaderMap) {
    let t = encode_headers(trailers, &[]).unwrap_or_else(|_| {
        let mut m = http::HeaderMap::new();
        m.insert("grpc-status", http::HeaderValue::from_static("13"));
        encode_headers(&m, &[]).unwrap_or_default()
    });
    put_frame(buf, id, Kind::End, &t);
}

/// Serves one call: its request through the API, its response back as
/// frames.
async fn run_call<A: Api>(
    request: http::Request<Body>,
    api: A,
    writer: Writer,
    credit: Arc<Semaphore>,
    id: u32,
) {
    use futures::FutureExt;
    use http_body_util::BodyExt;
    let Ok(response) = api.oneshot(request).await;
    let (parts, mut body) = response.into_parts();
    let mut buf = Vec::with_capacity(256);
    if parts.headers.contains_key("grpc-status") {
        // Trailers only: an error before any message.
        put_end(&mut buf, id, &parts.headers);
        writer.write(buf).await;
        return;
    }
    let headers = encode_headers(&parts.headers, &[]).unwrap_or_default();
    put_frame(&mut buf, id, Kind::Headers, &headers);
    loop {
        // What is ready goes out together; the rest is waited for with
        // nothing held back.
        let next = match body.frame().now_or_never() {
            Some(f) => f,
            None => {
                writer.write(std::mem::take(&mut buf)).await;
                body.frame().await
            }
        };
        match next {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    for piece in data.chunks(DATA_BYTES_MAX) {
                        let permit = match credit.try_acquire() {
                            Ok(p) => p,
                            Err(_) => {
                                writer.write(std::mem::take(&mut buf)).await;
                                match credit.acquire().await {
                                    Ok(p) => p,
                                    Err(_) => return,
                                }
                            }
                        };
                        permit.forget();
                        put_frame_header(&mut buf, id, Kind::Data, piece.len());
                        buf.extend_from_slice(piece);
                    }
                }
                Err(frame) => {
                    let trailers = frame.into_trailers().unwrap_or_default();
                    put_end(&mut buf, id, &trailers);
                    writer.write(buf).await;
                    return;
                }
            },
            Some(Err(status)) => {
                put_end(&mut buf, id, &status.into_http::<()>().headers().clone());
                writer.write(buf).await;
                return;
            }
            None => {
                // A gRPC body always ends with trailers; one that did not
                // is the server's fault.
                let status = tonic::Status::internal("the response ended without a status");
                put_end(&mut buf, id, &status.into_http::<()>().headers().clone());
                writer.write(buf).await;
                return;
            }
        }
    }
}
