//! The local transport: the node's API on its local Unix socket in
//! length-prefixed frames instead of HTTP/2 (issue 40, item 1).
//!
//! The calls are the gRPC calls of `tabos.proto`, unchanged — the same
//! paths, the same credential header, the same messages in gRPC's own
//! length-prefixed encoding, the same status and typed error details at the
//! end — and the node serves them with the same services, interceptor and
//! budgets as its gRPC door. Only the framing around them is new: HTTP/2's
//! HPACK, stream states, windows and settings cost a no-op call most of its
//! 68 µs on the socket; a frame here is a 9-byte header.
//!
//! A connection starts with [`MAGIC`] (a node tells it from HTTP/2's
//! preface, so gRPC clients keep working on the same socket); from then on
//! both sides send frames, `len: u32 LE` (the bytes after it) · `id: u32
//! LE` (the call) · `kind: u8` · payload:
//!
//! | kind | from | payload |
//! |---|---|---|
//! | `CALL` | client | path (`u16` length, bytes), headers, then the request body (gRPC-framed messages) |
//! | `CANCEL` | client | — : the call's caller went away; the node drops it |
//! | `CREDIT` | client | `u32`: that many more `DATA` frames may come |
//! | `HEADERS` | node | headers: the response began |
//! | `DATA` | node | a piece of the response body (gRPC-framed messages) |
//! | `END` | node | trailers (`grpc-status`, `grpc-message`, details): the call ended |
//! | `GOAWAY` | node | `u32`: the last call id it read; it reads no more |
//! | `PING` | client | at most [`PING_BYTES_MAX`] bytes, id 0: answer me |
//! | `PONG` | node | the `PING`'s payload and id |
//!
//! Headers are `u16` count · (`u8` name length · name · `u16` value length ·
//! value)…, at most [`HEADER_BYTES_MAX`] bytes. Calls are multiplexed by id
//! (a client's ids only go up). A server stream has at most [`WINDOW`]
//! `DATA` frames unread by the client; the client credits them back as its
//! caller reads, so a slow reader slows its own stream and no other. A
//! frame the protocol does not allow closes the connection.
//!
//! A client pings a connection that has been quiet for
//! [`crate::KEEPALIVE_INTERVAL`], busy or idle, and drops it — failing its
//! calls UNAVAILABLE — when nothing comes back within
//! [`crate::KEEPALIVE_TIMEOUT`]: a node that left the connection in the
//! socket's backlog (out of descriptors) or stopped serving it is not
//! waited for forever, as over TCP. A node needs no pings of its own here:
//! a client process's end closes its socket.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::MESSAGE_BYTES_MAX;

/// What a client sends first on a connection ("TABOS local, version 1").
pub const MAGIC: &[u8; 8] = b"TABOSLT1";
/// A frame's header: its length, its call id, its kind.
pub const FRAME_HEADER_BYTES: usize = 9;
/// Most bytes of one frame's headers (HTTP/2's default header list size).
pub const HEADER_BYTES_MAX: usize = 16 << 10;
/// Most headers in one frame.
pub const HEADERS_MAX: usize = 64;
/// Longest call path (`/tabos.v1.Fs/Read`).
pub const PATH_BYTES_MAX: usize = 256;
/// Largest frame either side accepts: a whole largest message in its gRPC
/// framing, with its path and headers.
pub const FRAME_BYTES_MAX: usize =
    FRAME_HEADER_BYTES + 2 + PATH_BYTES_MAX + HEADER_BYTES_MAX + 5 + MESSAGE_BYTES_MAX;
/// The node cuts a response body into `DATA` frames of at most this many
/// bytes.
pub const DATA_BYTES_MAX: usize = 1 << 20;
/// Most `DATA` frames of one call the client has not read yet.
pub const WINDOW: u32 = 16;
/// The client credits frames back in batches of this many (a unary
/// call's one frame never needs a credit).
pub const CREDIT_BATCH: u32 = WINDOW / 2;
/// Largest `PING` payload (the node echoes it).
pub const PING_BYTES_MAX: usize = 8;

/// A frame's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Call = 1,
    Cancel = 2,
    Credit = 3,
    Headers = 4,
    Data = 5,
    End = 6,
    GoAway = 7,
    Ping = 8,
    Pong = 9,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Call,
            2 => Kind::Cancel,
            3 => Kind::Credit,
            4 => Kind::Headers,
            5 => Kind::Data,
            6 => Kind::End,
            7 => Kind::GoAway,
            8 => Kind::Ping,
            9 => Kind::Pong,
            _ => return None,
        })
    }
}

/// One frame read.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: u32,
    pub kind: Kind,
    pub payload: Bytes,
}

/// A frame the protocol does not allow: the connection is closed.
#[derive(Debug, thiserror::Error)]
#[error("local transport: {0}")]
pub struct ProtocolError(pub String);

fn bad(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, ProtocolError(why.into()))
}

/// Appends a frame's header for a payload of `len` bytes.
pub fn put_frame_header(buf: &mut Vec<u8>, id: u32, kind: Kind, len: usize) {
    debug_assert!(
        FRAME_HEADER_BYTES + len <= FRAME_BYTES_MAX,
        "a frame within its bound"
    );
    buf.put_u32_le((len + 5) as u32);
    buf.put_u32_le(id);
    buf.put_u8(kind as u8);
}

/// Appends a whole frame.
pub fn put_frame(buf: &mut Vec<u8>, id: u32, kind: Kind, payload: &[u8]) {
    put_frame_header(buf, id, kind, payload.len());
    buf.extend_from_slice(payload);
}

/// Encodes `headers` (all but those named in `skip`); `Err` past
/// [`HEADERS_MAX`] or [`HEADER_BYTES_MAX`].
pub fn encode_headers(headers: &HeaderMap, skip: &[&str]) -> Result<Vec<u8>, ProtocolError> {
    let mut out = Vec::with_capacity(64);
    let kept: Vec<_> = headers
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .collect();
    if kept.len() > HEADERS_MAX {
        return Err(ProtocolError(format!(
            "{} headers, more than the {HEADERS_MAX} a frame may carry",
            kept.len()
        )));
    }
    out.put_u16_le(kept.len() as u16);
    for (k, v) in kept {
        let (k, v) = (k.as_str().as_bytes(), v.as_bytes());
        if k.len() > u8::MAX as usize || v.len() > u16::MAX as usize {
            return Err(ProtocolError("a header too long".into()));
        }
        out.put_u8(k.len() as u8);
        out.extend_from_slice(k);
        out.put_u16_le(v.len() as u16);
        out.extend_from_slice(v);
    }
    if out.len() > HEADER_BYTES_MAX {
        return Err(ProtocolError(format!(
            "{} bytes of headers, more than the {HEADER_BYTES_MAX} a frame may carry",
            out.len()
        )));
    }
    Ok(out)
}

/// Decodes headers from the front of `buf`, advancing past them.
pub fn decode_headers(buf: &mut Bytes) -> Result<HeaderMap, ProtocolError> {
    let start = buf.len();
    let short = || ProtocolError("headers cut short".into());
    if buf.remaining() < 2 {
        return Err(short());
    }
    let n = buf.get_u16_le() as usize;
    if n > HEADERS_MAX {
        return Err(ProtocolError(format!(
            "{n} headers, more than {HEADERS_MAX}"
        )));
    }
    let mut map = HeaderMap::with_capacity(n);
    for _ in 0..n {
        if buf.remaining() < 1 {
            return Err(short());
        }
        let kl = buf.get_u8() as usize;
        if buf.remaining() < kl + 2 {
            return Err(short());
        }
        let k = buf.split_to(kl);
        let vl = buf.get_u16_le() as usize;
        if buf.remaining() < vl {
            return Err(short());
        }
        let v = buf.split_to(vl);
        let name =
            HeaderName::from_bytes(&k).map_err(|_| ProtocolError("a bad header name".into()))?;
        let value = HeaderValue::from_maybe_shared(v)
            .map_err(|_| ProtocolError("a bad header value".into()))?;
        map.append(name, value);
    }
    if start - buf.len() > HEADER_BYTES_MAX {
        return Err(ProtocolError("headers past their bound".into()));
    }
    Ok(map)
}

/// Reads frames off a byte stream, many per read when they come together.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    buf: BytesMut,
    /// Largest frame accepted.
    max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R, max: usize) -> FrameReader<R> {
        FrameReader {
            io,
            buf: BytesMut::with_capacity(64 << 10),
            max,
        }
    }

    /// The next frame; `None` at the end of the stream between frames; an
    /// `InvalidData` error for a frame the protocol does not allow.
    pub async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            if let Some(f) = self.parse()? {
                return Ok(Some(f));
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
                };
            }
        }
    }

    fn parse(&mut self) -> std::io::Result<Option<Frame>> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len < 5 || len + 4 > self.max {
            return Err(bad(format!("a frame of {len} bytes")));
        }
        if self.buf.len() < 4 + len {
            // Room for the rest of it in one go.
            self.buf.reserve(4 + len - self.buf.len());
            return Ok(None);
        }
        let mut frame = self.buf.split_to(4 + len).freeze();
        frame.advance(4);
        let id = frame.get_u32_le();
        let kind = Kind::of(frame.get_u8()).ok_or_else(|| bad("a frame of no known kind"))?;
        Ok(Some(Frame {
            id,
            kind,
            payload: frame,
        }))
    }

    /// The byte stream under it.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.io
    }
}

/// Request headers the client does not send (the node's side implies
/// them: every call is gRPC over HTTP/2 semantics).
const IMPLIED: &[&str] = &["te", "content-type", "user-agent"];

/// A connection pool of one to a node's local socket, as a tower service
/// of HTTP requests: tonic's generated clients run over it unchanged
/// ([`crate::Client::connect`] with a `unix:` address). It connects on
/// the first call and again after the connection is lost.
#[derive(Clone, Debug)]
pub struct LocalChannel {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

/// One connection: its write half and its open calls.
#[derive(Debug)]
struct Conn {
    writer: tokio::sync::Mutex<tokio::io::WriteHalf<LocalStream>>,
    calls: Mutex<Calls>,
    reader: tokio::task::AbortHandle,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// What the reader hands a call.
#[derive(Debug)]
enum Event {
    Frame(Frame),
    /// The node read no further than an earlier call: this one was never
    /// served; send it again on a new connection.
    Resend,
    /// The connection was given up, for this reason.
    Lost(&'static str),
}

#[derive(Debug, Default)]
struct Calls {
    next: u32,
    open: HashMap<u32, mpsc::UnboundedSender<Event>>,
    /// The connection is gone or going (read ended, or the node said
    /// GOAWAY): no new calls on it.
    closed: bool,
}

/// An error a call fails with, as tonic reads it: a status.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn unavailable(why: impl std::fmt::Display) -> BoxError {
    Box::new(tonic::Status::unavailable(format!(
        "the node's local socket: {why}"
    )))
}

/// How many times a call is sent again after the node said it had not
/// read it (it closed an idle connection as the call went out).
const RESENDS_MAX: usize = 3;

impl LocalChannel {
    /// A channel to the socket at `path`; connects now, so a missing node
    /// is known at once.
    pub async fn connect(path: &Path) -> std::io::Result<LocalChannel> {
        let ch = LocalChannel {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                conn: tokio::sync::Mutex::new(None),
            }),
        };
        ch.connection().await?;
        Ok(ch)
    }

    /// The open connection, or a new one.
    async fn connection(&self) -> std::io::Result<Arc<Conn>> {
        let mut slot = self.shared.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.calls.lock().unwrap_or_else(|e| e.into_inner()).closed {
                return Ok(c.clone());
            }
        }
        let stream = tokio::net::UnixStream::connect(&self.shared.path).await?;
        // What the reader shuts the socket with when it gives the
        // connection up, failing writes that wait on a node not reading.
        let socket = std::os::unix::net::UnixStream::from(
            std::os::fd::AsFd::as_fd(&stream).try_clone_to_owned()?,
        );
        let (read, mut write) = tokio::io::split(LocalStream::from_tokio(stream)?);
        write.write_all(MAGIC).await?;
        // The reader holds the calls through a weak link: a connection no
        // one holds is dropped, its reader aborted.
        let conn = Arc::new_cyclic(|weak: &std::sync::Weak<Conn>| {
            let weak = weak.clone();
            let reader = tokio::spawn(async move {
                read_frames(FrameReader::new(read, 2 * FRAME_BYTES_MAX), weak, socket).await;
            });
            Conn {
                writer: tokio::sync::Mutex::new(write),
                calls: Mutex::new(Calls::default()),
                reader: reader.abort_handle(),
            }
        });
        *slot = Some(conn.clone());
        Ok(conn)
    }
}

/// The connection's reader: hands each frame to its call, and pings the
/// node when the connection has been quiet (see the module's doc).
async fn read_frames(
    mut frames: FrameReader<tokio::io::ReadHalf<LocalStream>>,
    conn: std::sync::Weak<Conn>,
    socket: std::os::unix::net::UnixStream,
) {
    let mut heard = tokio::time::Instant::now();
    let mut pinged = false;
    let quiet = tokio::time::sleep(crate::KEEPALIVE_INTERVAL);
    tokio::pin!(quiet);
    // Why the connection was given up, when it was not simply lost.
    let mut given_up = None;
    // Ends at the connection's end, at a frame no node sends (the
    // connection is not to be trusted then), or at a ping unanswered.
    loop {
        let next = tokio::select! {
            biased;
            // Cancel-safe: what was read stays in the reader's buffer.
            f = frames.next() => f,
            () = &mut quiet => {
                let wait = if pinged { crate::KEEPALIVE_TIMEOUT } else { crate::KEEPALIVE_INTERVAL };
                if heard.elapsed() < wait {
                    quiet.as_mut().reset(heard + wait);
                } else if pinged {
                    given_up = Some("no answer to a keep-alive ping (the node does not serve its socket)");
                    break;
                } else {
                    let Some(conn) = conn.upgrade() else { return };
                    conn.send_later(0, Kind::Ping, Vec::new());
                    pinged = true;
                    quiet.as_mut().reset(tokio::time::Instant::now() + crate::KEEPALIVE_TIMEOUT);
                }
                continue;
            }
        };
        let Ok(Some(frame)) = next else {
            break;
        };
        heard = tokio::time::Instant::now();
        pinged = false;
        let Some(conn) = conn.upgrade() else { return };
        let mut calls = conn.calls.lock().unwrap_or_else(|e| e.into_inner());
        match frame.kind {
            Kind::Pong => {}
            Kind::GoAway => {
                let last = (&frame.payload[..]).try_get_u32_le().unwrap_or(0);
                calls.closed = true;
                for (id, tx) in calls.open.iter() {
                    if *id > last {
                        let _ = tx.send(Event::Resend);
                    }
                }
                calls.open.retain(|id, _| *id <= last);
            }
            Kind::Headers | Kind::Data => {
                if let Some(tx) = calls.open.get(&frame.id) {
                    let _ = tx.send(Event::Frame(frame));
                }
            }
            Kind::End => {
                if let Some(tx) = calls.open.remove(&frame.id) {
                    let _ = tx.send(Event::Frame(frame));
                }
            }
            Kind::Call | Kind::Cancel | Kind::Credit | Kind::Ping => break,
        }
    }
    // Writes waiting on a node that does not read fail now, too.
    let _ = socket.shutdown(std::net::Shutdown::Both);
    if let Some(conn) = conn.upgrade() {
        let mut calls = conn.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls.closed = true;
        // Each open call fails: told why where the connection was given
        // up, else by its sender dropped (the connection was lost).
        if let Some(why) = given_up {
            for tx in calls.open.values() {
                let _ = tx.send(Event::Lost(why));
            }
        }
        calls.open.clear();
    }
}

impl Conn {
    /// A new call's id and the events it will get; `None` when the
    /// connection takes no more calls.
    fn open(&self) -> Option<(u32, mpsc::UnboundedReceiver<Event>)> {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        if calls.closed || calls.next == u32::MAX {
            calls.closed = true;
            return None;
        }
        calls.next += 1;
        let id = calls.next;
        let (tx, rx) = mpsc::unbounded_channel();
        calls.open.insert(id, tx);
        Some((id, rx))
    }

    async fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        let r = self.writer.lock().await.write_all(bytes).await;
        if r.is_err() {
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        }
        r
    }

    /// Writes a small frame from synchronous code (a credit, a cancel).
    fn send_later(self: &Arc<Self>, id: u32, kind: Kind, payload: Vec<u8>) {
        let conn = self.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut buf = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
                put_frame(&mut buf, id, kind, &payload);
                let _ = conn.write(&buf).await;
            });
        }
    }
}

/// An open call: cancelled at the node if dropped before its end.
#[derive(Debug)]
struct OpenCall {
    conn: Arc<Conn>,
    id: u32,
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        // Still open when its reader drops it: tell the node to drop it.
        let open = self
            .conn
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .remove(&self.id)
            .is_some();
        if open {
            self.conn.send_later(self.id, Kind::Cancel, Vec::new());
        }
    }
}

/// A response body: the call's `DATA` frames, then its trailers.
struct LocalBody {
    events: mpsc::UnboundedReceiver<Event>,
    call: OpenCall,
    /// `DATA` frames read and not yet credited back.
    unacked: u32,
    done: bool,
}

impl http_body::Body for LocalBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.events.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Event::Frame(f))) => match f.kind {
                Kind::Data => {
                    this.unacked += 1;
                    if this.unacked >= CREDIT_BATCH {
                        let n = std::mem::take(&mut this.unacked);
                        this.call.conn.send_later(
                            this.call.id,
                            Kind::Credit,
                            n.to_le_bytes().to_vec(),
                        );
                    }
                    Poll::Ready(Some(Ok(http_body::Frame::data(f.payload))))
                }
                Kind::End => {
                    this.done = true;
                    let mut p = f.payload;
                    match decode_headers(&mut p) {
                        Ok(t) => Poll::Ready(Some(Ok(http_body::Frame::trailers(t)))),
                        Err(e) => Poll::Ready(Some(Err(tonic::Status::internal(e.to_string())))),
                    }
                }
                _ => {
                    this.done = true;
                    Poll::Ready(Some(Err(tonic::Status::internal(
                        "local transport: a second HEADERS frame",
                    ))))
                }
            },
            Poll::Ready(Some(Event::Lost(why))) => {
                this.done = true;
                Poll::Ready(Some(Err(tonic::Status::unavailable(format!(
                    "the node's local socket, during the call: {why}"
                )))))
            }
            Poll::Ready(Some(Event::Resend)) | Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(Some(Err(tonic::Status::unavailable(
                    "the node's local socket closed during the call",
                ))))
            }
        }
    }
}

/// The request's body, whole (a tabos call's request is one message).
async fn whole(body: tonic::body::Body) -> Result<Bytes, BoxError> {
    use http_body_util::BodyExt;
    let mut out = BytesMut::new();
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| -> BoxError { Box::new(e) })?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > 5 + MESSAGE_BYTES_MAX {
                return Err(Box::new(tonic::Status::resource_exhausted(format!(
                    "a request of more than {MESSAGE_BYTES_MAX} bytes"
                ))));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

impl tower::Service<http::Request<tonic::body::Body>> for LocalChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let ch = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let path = parts.uri.path();
            if path.len() > PATH_BYTES_MAX {
                return Err(
                    Box::new(tonic::Status::invalid_argument("a call path too long")) as BoxError,
                );
            }
            let headers = encode_headers(&parts.headers, IMPLIED)
                .map_err(|e| -> BoxError { Box::new(tonic::Status::invalid_argument(e.0)) })?;
            let body = whole(body).await?;
            let len = 2 + path.len() + headers.len() + body.len();
            let mut resends = 0;
            loop {
                let conn = ch.connection().await.map_err(unavailable)?;
                // The id is taken with the writer held, so calls go out in
                // the order of their ids (a node refuses an id lower than
                // one it has read: its GOAWAY names the last it read).
                let mut writer = conn.writer.lock().await;
                let Some((id, mut events)) = conn.open() else {
                    continue; // closed as it was taken: the next one is new
                };
                let call = OpenCall {
                    conn: conn.clone(),
                    id,
                };
                let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + len);
                put_frame_header(&mut frame, id, Kind::Call, len);
                frame.put_u16_le(path.len() as u16);
                frame.extend_from_slice(path.as_bytes());
                frame.extend_from_slice(&headers);
                frame.extend_from_slice(&body);
                let wrote = writer.write_all(&frame).await;
                drop(writer);
                if let Err(e) = wrote {
                    conn.calls.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
                    return Err(unavailable(e));
                }
                drop(frame);
                match events.recv().await {
                    Some(Event::Frame(f)) if f.kind == Kind::Headers => {
                        let mut p = f.payload;
                        let headers = decode_headers(&mut p).map_err(unavailable)?;
                        let mut response = http::Response::new(tonic::body::Body::new(LocalBody {
                            events,
                            call,
                            unacked: 0,
                            done: false,
                        }));
                        *response.headers_mut() = headers;
                        return Ok(response);
                    }
                    Some(Event::Frame(f)) if f.kind == Kind::End => {
                        // A trailers-only response: an error before any
                        // message.
                        let mut p = f.payload;
                        let headers = decode_headers(&mut p).map_err(unavailable)?;
                        let mut response = http::Response::new(tonic::body::Body::empty());
                        *response.headers_mut() = headers;
                        return Ok(response);
                    }
                    Some(Event::Resend) if resends < RESENDS_MAX => {
                        resends += 1;
                        continue;
                    }
                    Some(Event::Lost(why)) => return Err(unavailable(why)),
                    Some(_) => return Err(unavailable("the node answered out of order")),
                    None => return Err(unavailable("the connection was lost")),
                }
            }
        })
    }
}

/// A Unix stream that wakes its runtime only to read: registered for
/// readability alone, it writes straight to the socket and registers for
/// writability only while a write waits for room. (Tokio registers a
/// socket for both; on a Unix socket every message the peer reads then
/// wakes the writer's thread for nothing — twice per call, one on each
/// side, which cost more than everything else a call does.)
///
/// A read that finds nothing within [`SPIN_MAX`] of the stream's last write
/// spins on the socket until then before it sleeps: see [`Spin`].
#[derive(Debug)]
pub struct LocalStream {
    read: tokio::io::unix::AsyncFd<std::os::unix::net::UnixStream>,
    /// A duplicate of the socket registered for writability while a write
    /// waits for room.
    write_wait: Option<tokio::io::unix::AsyncFd<std::os::unix::net::UnixStream>>,
    spin: Spin,
    /// The task that last found nothing to read, woken by a write so that
    /// it spins for the answer (a client's reader is a task of its own,
    /// asleep on the socket when its caller writes).
    reader: Option<std::task::Waker>,
}

/// Which end of the local socket a stream is: each end spins within its
/// own [`spinners_max`], as the node and a client are separate processes
/// (and stay two budgets when a test or bench hosts both in one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Client,
    Node,
}

impl LocalStream {
    /// Takes over `stream` (made non-blocking) as a client's end; within a
    /// Tokio runtime.
    pub fn new(stream: std::os::unix::net::UnixStream) -> std::io::Result<LocalStream> {
        LocalStream::of(stream, End::Client)
    }

    /// Takes over `stream` (made non-blocking) as `end`; within a Tokio
    /// runtime.
    pub fn of(stream: std::os::unix::net::UnixStream, end: End) -> std::io::Result<LocalStream> {
        stream.set_nonblocking(true)?;
        Ok(LocalStream {
            read: register(stream, tokio::io::Interest::READABLE)?,
            write_wait: None,
            spin: Spin::new(end),
            reader: None,
        })
    }

    /// Takes over a Tokio Unix stream (deregistered first) as a client's
    /// end.
    pub fn from_tokio(stream: tokio::net::UnixStream) -> std::io::Result<LocalStream> {
        LocalStream::new(stream.into_std()?)
    }
}

/// How long after a stream's write its read spins for the answer before it
/// sleeps. A sleeping thread is woken by the other core in ~20 µs on this
/// kind of machine (a VM's halted CPU: a blocking Unix-socket round trip
/// between two cores took 41 µs, the same with both ends spinning 3.3 µs),
/// so the spin is held to about one wake's cost: spin-then-sleep never
/// costs more than twice the better of the two, and an answer that comes
/// within it (a call the node answers from memory, a client's next call)
/// costs no wake at all. [`SPIN_ENV`] changes it for a process.
pub const SPIN_MAX: std::time::Duration = std::time::Duration::from_micros(40);
/// The environment variable that sets a process's spin in microseconds
/// (`0`: never spin — a host where idle CPU time is not to be spent on
/// waiting), at most [`SPIN_LIMIT`]; a value that is not a number leaves
/// [`SPIN_MAX`].
pub const SPIN_ENV: &str = "TABOS_LOCAL_SPIN_US";
/// The longest spin [`SPIN_ENV`] may set.
pub const SPIN_LIMIT: std::time::Duration = std::time::Duration::from_millis(1);

/// This process's spin: [`SPIN_MAX`] or what [`SPIN_ENV`] says.
pub fn spin_max() -> std::time::Duration {
    static SPIN: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        std::env::var(SPIN_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(SPIN_MAX, |us| {
                std::time::Duration::from_micros(us).min(SPIN_LIMIT)
            })
    })
}
/// A stream spins only while at least this share of its recent spins
/// found the answer (a moving average over about the last
/// [`SPIN_MEMORY`] spins): a spin that finds nothing holds its thread for
/// all of [`SPIN_MAX`] — and, in a runtime of several threads, the tasks it
/// has just woken — so a stream whose peer answers within the spin only
/// now and then (a long poll, a stream's next message) sleeps at once.
pub const SPIN_HITS_MIN: f64 = 0.75;
/// See [`SPIN_HITS_MIN`].
pub const SPIN_MEMORY: u32 = 8;
/// A stream that does not spin still tries once in this many reads, to see
/// whether its peer has become quick.
pub const SPIN_PROBE_READS: u32 = 64;

/// Streams of each [`End`] spinning now, process-wide.
static SPINNING: [std::sync::atomic::AtomicUsize; 2] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// Most streams of one [`End`] spinning at once in a process: one less
/// than the machine's CPUs, so a spinner never takes the last CPU its
/// peer (or anything else) could run on; none on one CPU, where the peer
/// could not answer while it spins.
pub fn spinners_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        // The machine's CPUs, not `available_parallelism` (the calling
        // thread's affinity: a client pinned to one core still has a peer
        // on another).
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| cpus_in_list(s.trim()))
            .unwrap_or(1)
            .saturating_sub(1)
    })
}

/// How many CPUs a kernel CPU list (`0-3,5`) names; `None` if it is not
/// one.
fn cpus_in_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b
                .parse::<usize>()
                .ok()?
                .checked_sub(a.parse::<usize>().ok()?)?
                .checked_add(1)?,
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// A stream's spin-then-sleep state: when it last wrote, and how its
/// recent spins went.
#[derive(Debug)]
struct Spin {
    /// Its end's count of streams spinning.
    spinning: &'static std::sync::atomic::AtomicUsize,
    /// The last write not yet followed by a spin (one spin per write).
    wrote: Option<std::time::Instant>,
    /// Moving average of its spins' hits (1) and misses (0).
    hits: f64,
    /// Reads since its last spin or probe.
    skipped: u32,
}

/// A spinner's place under [`spinners_max`], given back when dropped.
struct Spinning(&'static std::sync::atomic::AtomicUsize);

impl Drop for Spinning {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Spin {
    fn new(end: End) -> Spin {
        Spin::counted_in(&SPINNING[end as usize])
    }

    fn counted_in(spinning: &'static std::sync::atomic::AtomicUsize) -> Spin {
        Spin {
            spinning,
            wrote: None,
            hits: 1.0,
            skipped: 0,
        }
    }

    /// Until when a read that found nothing now may spin, if it may.
    fn until(&mut self) -> Option<(std::time::Instant, Spinning)> {
        self.until_within(spin_max(), spinners_max())
    }

    /// [`Spin::until`] for a spin of `spin` with at most `max` spinners.
    fn until_within(
        &mut self,
        spin: std::time::Duration,
        max: usize,
    ) -> Option<(std::time::Instant, Spinning)> {
        use std::sync::atomic::Ordering;
        let wrote = self.wrote.take()?;
        if self.hits < SPIN_HITS_MIN && self.skipped < SPIN_PROBE_READS {
            self.skipped += 1;
            return None;
        }
        self.skipped = 0;
        let until = wrote + spin;
        if std::time::Instant::now() >= until {
            return None;
        }
        let count = self.spinning;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some((until, Spinning(count)))
    }

    fn found(&mut self) {
        self.hits += (1.0 - self.hits) / f64::from(SPIN_MEMORY);
    }

    fn missed(&mut self) {
        self.hits -= self.hits / f64::from(SPIN_MEMORY);
    }
}

/// One read(2) of `sock` into the unfilled part of `buf`, which is
/// advanced by what it read. Straight into memory not yet initialised:
/// `ReadBuf::initialize_unfilled` zeroed the whole room a frame reader
/// made (a large frame's, on every read) before the socket overwrote it.
fn read_into(
    sock: &std::os::unix::net::UnixStream,
    buf: &mut tokio::io::ReadBuf<'_>,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: read(2) writes at most `len` bytes at the pointer, into the
    // unfilled part (which is never de-initialised), and only the `n` it
    // reports are marked initialised and filled.
    unsafe {
        let unfilled = buf.unfilled_mut();
        let n = libc::read(
            sock.as_raw_fd(),
            unfilled.as_mut_ptr().cast(),
            unfilled.len(),
        );
        let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
        buf.assume_init(n);
        buf.advance(n);
        Ok(n)
    }
}

/// `stream` registered with the runtime for `interest` alone.
fn register(
    stream: std::os::unix::net::UnixStream,
    interest: tokio::io::Interest,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::unix::net::UnixStream>> {
    // SAFETY: a std UnixStream owns its descriptor, which stays open and
    // the same for the stream's whole life, and the AsyncFd owns the
    // stream.
    Ok(unsafe { tokio::io::unix::AsyncFd::register_with_interest(stream, interest) }?)
}

impl AsyncRead for LocalStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = match this.read.poll_read_ready(cx) {
                Poll::Ready(g) => g?,
                // Registered to be woken; spins first if it may (data read
                // meanwhile leaves the registration to a spurious wake).
                Poll::Pending => {
                    let read = this.spin_read(buf);
                    if read.is_pending() && spin_max() > std::time::Duration::ZERO {
                        match &mut this.reader {
                            Some(w) if w.will_wake(cx.waker()) => {}
                            w => *w = Some(cx.waker().clone()),
                        }
                    }
                    return read;
                }
            };
            let want = buf.remaining();
            match guard.try_io(|s| read_into(s.get_ref(), buf)) {
                Ok(Ok(n)) => {
                    // Less than asked: the socket is drained, so the next
                    // read waits for readiness instead of a failed read
                    // (as Tokio's own streams do).
                    if n > 0 && n < want {
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl LocalStream {
    /// A read after the runtime found the socket empty: spins on it until
    /// [`spin_max`] after the last write if [`Spin`] allows, else (or
    /// when the spin finds nothing) pending.
    fn spin_read(&mut self, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let Some((until, _spinning)) = self.spin.until() else {
            return Poll::Pending;
        };
        loop {
            match read_into(self.read.get_ref(), buf) {
                Ok(_) => {
                    self.spin.found();
                    return Poll::Ready(Ok(()));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if std::time::Instant::now() >= until {
                self.spin.missed();
                return Poll::Pending;
            }
            std::hint::spin_loop();
        }
    }
}

impl tokio::io::AsyncWrite for LocalStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        use std::io::Write;
        let this = self.get_mut();
        loop {
            match (&mut this.read.get_ref()).write(buf) {
                Ok(n) => {
                    this.write_wait = None;
                    this.spin.wrote = Some(std::time::Instant::now());
                    // The reader spins for the answer now, if it may.
                    if let Some(w) = this.reader.take() {
                        if !w.will_wake(cx.waker()) {
                            w.wake();
                        }
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if this.write_wait.is_none() {
                        let dup = this.read.get_ref().try_clone()?;
                        this.write_wait = Some(register(dup, tokio::io::Interest::WRITABLE)?);
                    }
                    let Some(wait) = this.write_wait.as_ref() else {
                        continue;
                    };
                    match wait.poll_write_ready(cx) {
                        // Cleared before the write is tried again, so
                        // room made after that try still wakes us.
                        Poll::Ready(g) => g?.clear_ready(),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let _ = self.read.get_ref().shutdown(std::net::Shutdown::Write);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpus_in_list("0"), Some(1));
        assert_eq!(cpus_in_list("0-1"), Some(2));
        assert_eq!(cpus_in_list("0-3,5,7-8"), Some(7));
        assert_eq!(cpus_in_list(""), None);
        assert_eq!(cpus_in_list("3-1"), None);
        assert_eq!(cpus_in_list("a-b"), None);
    }

    #[test]
    fn a_stream_spins_once_per_write_within_the_cap_while_its_spins_find_answers() {
        static NODE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        static CLIENT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        assert!(!std::ptr::eq(
            Spin::new(End::Node).spinning,
            Spin::new(End::Client).spinning
        ));
        let long = Duration::from_secs(60);
        let mut spin = Spin::counted_in(&NODE);
        assert!(spin.until_within(long, 1).is_none(), "no write, no spin");
        spin.wrote = Some(Instant::now());
        let (until, slot) = spin.until_within(long, 1).expect("spins after a write");
        assert!(until > Instant::now());
        assert!(spin.until_within(long, 1).is_none(), "once per write");
        // Another stream of the same end finds the one place taken…
        let mut other = Spin::counted_in(&NODE);
        other.wrote = Some(Instant::now());
        assert!(other.until_within(long, 1).is_none());
        // …and a stream of the other end has its own.
        let mut client = Spin::counted_in(&CLIENT);
        client.wrote = Some(Instant::now());
        assert!(client.until_within(long, 1).is_some());
        drop(slot);
        other.wrote = Some(Instant::now());
        assert!(other.until_within(long, 1).is_some(), "given back");
        // None where there is no other CPU, none once the spin has passed.
        other.wrote = Some(Instant::now());
        assert!(other.until_within(long, 0).is_none());
        other.wrote = Some(Instant::now() - Duration::from_millis(1));
        assert!(other.until_within(Duration::from_micros(1), 1).is_none());
        // Misses and hits in turn (a long poll's answer, then a quick
        // one): it stops spinning but for a probe now and then.
        for _ in 0..4 * SPIN_MEMORY {
            spin.missed();
            spin.found();
        }
        assert!(spin.hits < SPIN_HITS_MIN);
        for _ in 0..SPIN_PROBE_READS {
            spin.wrote = Some(Instant::now());
            assert!(spin.until_within(long, 1).is_none(), "not spinning");
        }
        spin.wrote = Some(Instant::now());
        assert!(spin.until_within(long, 1).is_some(), "a probe");
        // Probes that find the answer bring the spin back.
        for _ in 0..2 * SPIN_MEMORY {
            spin.found();
        }
        spin.wrote = Some(Instant::now());
        assert!(spin.until_within(long, 1).is_some());
    }

    /// Answers that come during a spin, after it (the reader asleep), and
    /// the peer's close during one are all read as they are.
    #[test]
    fn reads_are_the_same_whether_spun_or_slept() {
        use tokio::io::AsyncWriteExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (near, far) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut near = LocalStream::of(near, End::Client).unwrap();
            let echo = std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut far = far;
                let mut buf = [0u8; 4];
                for pause in [0u64, 0, 20, 0, 5] {
                    far.read_exact(&mut buf).unwrap();
                    std::thread::sleep(Duration::from_millis(pause));
                    far.write_all(&buf).unwrap();
                }
                far.read_exact(&mut buf).unwrap();
                // Closed instead of answered.
            });
            for i in 0..5u32 {
                near.write_all(&i.to_le_bytes()).await.unwrap();
                let mut buf = [0u8; 4];
                near.read_exact(&mut buf).await.unwrap();
                assert_eq!(u32::from_le_bytes(buf), i);
            }
            near.write_all(b"last").await.unwrap();
            let mut rest = Vec::new();
            near.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
            echo.join().unwrap();
        });
    }
}
