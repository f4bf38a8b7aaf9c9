//! wwd (σOS section 5.3): an LC proc that accepts HTTP/1.1 (hyper) and
//! does no work of its own — and cannot touch the realm's namespace, its
//! files, its procs or its SQL: its credential is scoped to three
//! mailboxes (`tabos_kernel::auth::Scope`, enforced by the node), and
//! that is all it uses. Each request becomes a message to the site's
//! request mailbox, which one of the pool's worker procs takes, and the
//! worker's answer comes back to wwd's own mailbox (`proc/<wwd>`), where
//! one reader hands each part to the request waiting for it. Every
//! [`REPORT_EVERY`] that saw requests, it tells the site's load mailbox
//! the most it had in flight, by which the site's supervisor grows and
//! shrinks the pool ([`crate::pool`]).
//!
//! Kept answers: a whole static file's answer (a worker marks it, with the
//! file it was read from) is kept in memory, and a later plain `GET` of
//! the same URL is answered from it, with no mailbox at all, while the
//! site's supervisor says it watches the realm's file changes (a lease it
//! renews; [`crate::wire::CacheNote`]). A change to the file, its name or
//! a directory above it drops the answer; so does any note that comes
//! while an answer is on its way, which is then not kept (it may have been
//! read before the change); the lease running out drops them all.
//!
//! Asked again: a worker that dies takes with it the requests it had
//! taken from the request mailbox (a message is received once, by one
//! worker). When the supervisor says a worker went on its own
//! ([`wire::WorkerGone`]), wwd sends again every request still without a
//! word of its answer whose method is idempotent (RFC 9110 section 9.2.2,
//! as nginx's `proxy_next_upstream` retries only those), under a new id —
//! an answer to the old id, from a worker that was only slow, is then
//! dropped. It cannot tell which requests the dead worker held, so a live
//! worker's may be done twice; each is asked again at most
//! [`ASK_AGAIN_MAX`] times.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request as HttpRequest, Response as HttpResponse, StatusCode};
use tabos_client::proto;
use tabos_client::retry::Backoff;
use tabos_client::Client;
use tokio::sync::{mpsc, oneshot};

use crate::wire::{self, Request, ResponseHead, HEADERS_MAX, HELD_PARTS_MAX, REQUEST_BODY_MAX};
use crate::{Ctx, Error, Result};

/// Longest a request waits for its worker's answer.
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// Most requests in flight at once (beyond it: 503).
pub const IN_FLIGHT_MAX: usize = 4_096;
/// Most connections served at once.
pub const CONNECTIONS_MAX: usize = 1_024;
/// Longest a new connection waits for a slot when every one is held:
/// meanwhile the oldest connection of the address holding the most is
/// closed (once idle) to make room (issue 36, item 2), so one client —
/// or one flood of idle connections — cannot keep the site from the
/// others. No address is refused while there is room: a proxy or a load
/// test brings many connections from one address.
pub const SLOT_WAIT: Duration = Duration::from_secs(1);
/// Longest a client may take to send a request's headers.
pub const HEADER_WAIT: Duration = Duration::from_secs(10);
/// Longest a client may take to send a request's body.
pub const BODY_WAIT: Duration = Duration::from_secs(10);
/// How often wwd reports its load (only while it has any, and once after).
pub const REPORT_EVERY: Duration = Duration::from_millis(250);
/// Most bytes of answers kept ([`Cache`]).
pub const CACHE_BYTES_MAX: usize = 64 << 20;
/// Most answers kept.
pub const CACHE_ENTRIES_MAX: usize = 16_384;
/// Largest answer kept: a sixty-fourth of the cache, so that one large
/// file cannot push out the many small ones it is for.
pub const KEPT_BYTES_MAX: usize = CACHE_BYTES_MAX / 64;
/// Longest lease on kept answers the supervisor may give: past it wwd
/// keeps nothing more until told again, however long a lease it was told.
pub const CACHE_LEASE_MAX: Duration = Duration::from_secs(60);
/// Most times one request is sent again after workers died.
pub const ASK_AGAIN_MAX: u32 = 2;
/// Largest request body kept to send again; a request with a larger one
/// is not sent again. Kept bodies are at most [`IN_FLIGHT_MAX`] times
/// this (64 MiB).
pub const ASK_AGAIN_BYTES_MAX: usize = 16 << 10;

/// The first pause before a lost mailbox stream is opened again.
pub const PAUSE_FIRST: Duration = Duration::from_millis(20);
/// The longest such pause.
pub const PAUSE_MAX: Duration = Duration::from_secs(2);

/// What makes two requests the same for a kept answer: the URL and
/// whether the client takes gzip (the worker's only choice by header).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    path: String,
    query: String,
    gzip: bool,
}

impl Key {
    /// The key of a plain `GET` — no ranges, no conditions, no body —
    /// which a kept answer may answer; `None` for any other request.
    fn of(parts: &hyper::http::request::Parts) -> Option<Key> {
        use hyper::header;
        if parts.method != hyper::Method::GET {
            return None;
        }
        let h = &parts.headers;
        let conditional = [
            header::RANGE,
            header::IF_RANGE,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_MATCH,
            header::IF_UNMODIFIED_SINCE,
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
        ];
        if conditional.iter().any(|c| h.contains_key(c)) {
            return None;
        }
        let accept = h
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        Some(Key {
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            gzip: crate::http::accepts_gzip((!accept.is_empty()).then_some(accept.as_str())),
        })
    }
}

/// A kept answer.
struct Kept {
    head: ResponseHead,
    body: Bytes,
    file: wire::CacheTag,
}

/// The answers wwd keeps, and what it was told of changes.
#[derive(Default)]
struct Cache {
    kept: HashMap<Key, Arc<Kept>>,
    bytes: usize,
    /// Moves at every note: an answer asked for before it is not kept.
    told: u64,
    /// Until when the supervisor's watch vouches for what is kept.
    until: Option<tokio::time::Instant>,
}

impl Cache {
    /// Whether kept answers hold now (dropping them all if the lease ran
    /// out).
    fn live(&mut self) -> bool {
        match self.until {
            Some(t) if tokio::time::Instant::now() < t => true,
            Some(_) => {
                self.drop_all();
                self.until = None;
                false
            }
            None => false,
        }
    }

    fn get(&mut self, key: &Key) -> Option<Arc<Kept>> {
        if !self.live() {
            return None;
        }
        self.kept.get(key).cloned()
    }

    fn drop_all(&mut self) {
        self.kept.clear();
        self.bytes = 0;
        self.told += 1;
    }

    /// Keeps an answer asked for at `told`, if nothing was told since.
    fn keep(&mut self, key: Key, told: u64, head: &ResponseHead, body: &Bytes) {
        let Some(file) = &head.cache else { return };
        if told != self.told || !self.live() || body.len() > KEPT_BYTES_MAX {
            return;
        }
        if self.kept.len() >= CACHE_ENTRIES_MAX || self.bytes + body.len() > CACHE_BYTES_MAX {
            // Full: start again rather than track what is used least.
            self.kept.clear();
            self.bytes = 0;
        }
        let mut head = head.clone();
        head.id = 0;
        let kept = Kept {
            head,
            body: body.clone(),
            file: file.clone(),
        };
        self.bytes += body.len();
        if let Some(old) = self.kept.insert(key, Arc::new(kept)) {
            self.bytes -= old.body.len();
        }
    }

    /// What the supervisor says.
    fn note(&mut self, change: wire::CacheChange) {
        use wire::CacheChange as C;
        self.told += 1;
        match change {
            C::Watching { lease_ms } => {
                let lease = Duration::from_millis(lease_ms).min(CACHE_LEASE_MAX);
                self.until = Some(tokio::time::Instant::now() + lease);
            }
            C::Changed { ids, paths } => {
                let stale = |k: &Kept| {
                    ids.contains(&k.file.id)
                        || paths.iter().any(|p| {
                            k.file.path == *p
                                || k.file
                                    .path
                                    .strip_prefix(p.as_str())
                                    .is_some_and(|r| r.starts_with('/'))
                        })
                };
                let before = self.kept.len();
                self.kept.retain(|_, k| !stale(k));
                if self.kept.len() != before {
                    self.bytes = self.kept.values().map(|k| k.body.len()).sum();
                }
            }
            C::DropAll => self.drop_all(),
            C::Off => {
                self.drop_all();
                self.until = None;
            }
        }
    }
}

/// A response whose parts are coming: its first part's head goes to the
/// request waiting for it, with the stream its body's parts follow in;
/// parts that arrive before their turn (the windows of one response may
/// come from different workers) wait, in order of their numbers.
struct Pending {
    head: Option<oneshot::Sender<(ResponseHead, mpsc::Receiver<Part>)>>,
    body: Option<mpsc::Sender<Part>>,
    next: u32,
    early: std::collections::BTreeMap<u32, (ResponseHead, Bytes)>,
    /// Where a whole answer may be kept, and the cache's count of notes
    /// when it was asked for.
    keep: Option<(Key, u64)>,
    /// The id it was first asked under, by which its asker gives up on it
    /// (it is under another once asked again).
    first: u64,
    /// The request and its body, to ask again if a worker dies; `None`
    /// when it may not be ([`may_ask_again`]).
    again: Option<(Request, Bytes)>,
    /// Times it was asked again.
    asked_again: u32,
}

/// Whether a request may be sent to a second worker: an idempotent method
/// (RFC 9110 section 9.2.2) and a body small enough to keep.
fn may_ask_again(method: &str, body: &[u8]) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    ) && body.len() <= ASK_AGAIN_BYTES_MAX
}

/// One part of a response's body.
struct Part {
    data: Bytes,
    /// The next window, to ask for as this part is read.
    more: Option<wire::Window>,
    broken: bool,
}

struct Wwd {
    client: Client,
    realm: String,
    /// `proc/<pid>`: where answers come.
    me: String,
    requests: String,
    /// Requests go out in batches.
    out: wire::Batcher,
    next: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
    /// The most requests in flight since the last load report.
    peak: std::sync::atomic::AtomicUsize,
    /// Where load reports go.
    load: String,
    cache: Mutex<Cache>,
}

/// Longest a wwd started with `--tls` waits for its certificate.
pub const TLS_WAIT: Duration = Duration::from_secs(30);

/// The certificate and key its supervisor sends first to its mailbox.
async fn tls_acceptor(client: &Client, realm: &str, me: &str) -> Result<tokio_rustls::TlsAcceptor> {
    let mut c = client.clone();
    let got = c.recv(realm, me, 1, TLS_WAIT.as_millis() as u32).await?;
    let Some(m) = got.first() else {
        return Err(Error::Invalid(format!(
            "no TLS certificate came within {TLS_WAIT:?}"
        )));
    };
    let (material, _) = wire::decode::<wire::TlsMaterial>(&m.payload)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(
        material.server_config()?,
    )))
}

/// Serves HTTP (HTTPS with `tls`) on `listen` until the node or the
/// listener fails.
pub async fn run(ctx: Ctx, listen: &str, tls: bool) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Error::Invalid(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let me = format!("proc/{}", ctx.pid);
    let tls = match tls {
        true => Some(tls_acceptor(&ctx.client, &ctx.realm, &me).await?),
        false => None,
    };
    let scheme = if tls.is_some() { "HTTPS" } else { "HTTP" };
    eprintln!("wwd {}: {scheme} on {addr}", ctx.pid);
    let wwd = Arc::new(Wwd {
        client: ctx.client.clone(),
        realm: ctx.realm.clone(),
        me: me.clone(),
        requests: ctx.layout.requests(),
        out: wire::Batcher::start(&ctx.client, &ctx.realm, &format!("proc/{}", ctx.pid)),
        next: AtomicU64::new(1),
        pending: Mutex::new(HashMap::new()),
        peak: Default::default(),
        load: ctx.layout.load(),
        cache: Default::default(),
    });
    tokio::spawn(wwd.clone().read_answers());
    tokio::spawn(wwd.clone().report_load());
    // Every visitor is anonymous: all connections count as not signed in,
    // under no per-address limit but the share taken back when full.
    let door = Arc::new(tabos_client::doors::Door::new(
        CONNECTIONS_MAX,
        tabos_client::doors::DoorLimits {
            unauthenticated: CONNECTIONS_MAX,
            unauthenticated_per_source: CONNECTIONS_MAX,
            per_realm: 0,
        },
    ));
    loop {
        let (sock, peer) = listener
            .accept()
            .await
            .map_err(|e| Error::Invalid(format!("accept: {e}")))?;
        let ticket = tabos_client::doors::Ticket::new(tabos_client::doors::Source::Ip(peer.ip()));
        if !door.ledger.admit(&ticket) {
            continue; // over its address's share: closed at once
        }
        let _ = sock.set_nodelay(true);
        let (w, door, tls) = (wwd.clone(), door.clone(), tls.clone());
        tokio::spawn(async move {
            if let Some(slot) = door.slot(Some(SLOT_WAIT)).await {
                match tls {
                    None => serve_connection(w, sock, &ticket).await,
                    // The handshake, too, within the time a client has
                    // for its headers.
                    Some(tls) => {
                        if let Ok(Ok(sock)) =
                            tokio::time::timeout(HEADER_WAIT, tls.accept(sock)).await
                        {
                            serve_connection(w, sock, &ticket).await;
                        }
                    }
                }
                drop(slot);
            }
            door.ledger.forget(&ticket);
        });
    }
}

/// Serves one connection (plain or TLS) until it ends, or is closed to
/// make room.
async fn serve_connection<I>(w: Arc<Wwd>, sock: I, ticket: &Arc<tabos_client::doors::Ticket>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(sock);
    let t = ticket.clone();
    let svc = hyper::service::service_fn(move |req| {
        let (w, busy) = (w.clone(), t.busy());
        async move {
            let answer = w.serve(req).await;
            drop(busy);
            answer
        }
    });
    // A client that never finishes its headers is dropped.
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_WAIT)
        .serve_connection(io, svc);
    tokio::select! {
        _ = served => {}
        () = ticket.clone().closing() => {} // closed to make room
    }
}

impl Wwd {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the answers from wwd's mailbox and completes their requests.
    async fn read_answers(self: Arc<Self>) {
        let mut pauses = Backoff::new(PAUSE_FIRST, PAUSE_MAX);
        loop {
            let mut c = self.client.clone();
            if let Ok(mut s) = c.recv_stream(&self.realm, &self.me, 64).await {
                pauses.reset();
                while let Ok(Some(batch)) = s.message().await {
                    for m in batch.messages {
                        if m.payload.starts_with(wire::CacheNote::PREFIX) {
                            if let Ok((n, _)) = wire::decode::<wire::CacheNote>(&m.payload) {
                                self.cache().note(n.cache);
                            }
                        } else if m.payload.starts_with(wire::WorkerGone::PREFIX) {
                            tokio::spawn(self.clone().ask_again());
                        } else {
                            self.part(&m.payload);
                        }
                    }
                }
            }
            pauses.wait().await;
        }
    }

    /// Sends again, under new ids, the requests still without a word of
    /// their answer that may be ([`Pending::again`]), at most
    /// [`ASK_AGAIN_MAX`] times each: a worker died, and may have taken
    /// them.
    async fn ask_again(self: Arc<Self>) {
        let msgs: Vec<proto::Outgoing> = {
            let mut pending = self.pending();
            let unanswered: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| {
                    p.head.is_some()
                        && p.next == 0
                        && p.early.is_empty()
                        && p.again.is_some()
                        && p.asked_again < ASK_AGAIN_MAX
                })
                .map(|(id, _)| *id)
                .collect();
            unanswered
                .into_iter()
                .filter_map(|old| {
                    let mut p = pending.remove(&old)?;
                    let id = self.next.fetch_add(1, Ordering::Relaxed);
                    let payload = p.again.as_ref().map(|(request, body)| {
                        let request = Request {
                            id,
                            ..request.clone()
                        };
                        wire::encode(&request, body)
                    });
                    p.asked_again += 1;
                    pending.insert(id, p);
                    Some(proto::Outgoing {
                        to: self.requests.clone(),
                        payload: payload?,
                        message_id: String::new(),
                    })
                })
                .collect()
        };
        if msgs.is_empty() {
            return;
        }
        eprintln!(
            "wwd: a worker is gone; asking again for {} requests",
            msgs.len()
        );
        // Not sent: they wait out their time, as they would have.
        let _ = self.out.send_all(msgs).await;
    }

    /// Gives up on the request first asked as `first`, under whatever id
    /// it is now.
    fn forget(&self, first: u64) {
        let mut pending = self.pending();
        if pending.remove(&first).is_none() {
            pending.retain(|_, p| p.first != first);
        }
    }

    /// Tells the site's supervisor, every [`REPORT_EVERY`], the most
    /// requests it had in flight — while there are any, and once more
    /// when they are gone (so the pool can shrink). A report that cannot
    /// be sent (the supervisor away, its mailbox full) is dropped: the
    /// next one says the same.
    async fn report_load(self: Arc<Self>) {
        let mut tick = tokio::time::interval(REPORT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = 0;
        loop {
            tick.tick().await;
            let now = self.pending().len();
            let peak = self.peak.swap(now, Ordering::Relaxed).max(now);
            if peak == 0 && last == 0 {
                continue;
            }
            last = peak;
            let msg = proto::Outgoing {
                to: self.load.clone(),
                payload: peak.to_string().into_bytes(),
                message_id: String::new(),
            };
            let _ = self.out.send(msg).await;
        }
    }

    /// Takes in one part of a response, in its turn.
    fn part(&self, payload: &[u8]) {
        let Ok((head, body)) = wire::decode::<ResponseHead>(payload) else {
            return;
        };
        let id = head.id;
        let mut pending = self.pending();
        let Some(p) = pending.get_mut(&id) else {
            // Its request gave up waiting, or its client went away.
            return;
        };
        if head.part != p.next {
            if p.early.len() >= HELD_PARTS_MAX || head.part < p.next {
                pending.remove(&id); // out of step: cut off
                return;
            }
            p.early
                .insert(head.part, (head, Bytes::copy_from_slice(body)));
            return;
        }
        let body = Bytes::copy_from_slice(body);
        if head.part == 0 && head.last && head.status == 200 {
            if let Some((key, told)) = p.keep.take() {
                self.cache().keep(key, told, &head, &body);
            }
        }
        let mut ready = vec![(head, body)];
        loop {
            let Some((head, data)) = ready.pop() else {
                break;
            };
            p.next += 1;
            let last = head.last;
            let part = Part {
                data,
                more: head.more.clone(),
                broken: head.broken,
            };
            if let Some(tx) = p.head.take() {
                let (body_tx, body_rx) = mpsc::channel(HELD_PARTS_MAX);
                p.body = Some(body_tx);
                let _ = tx.send((head, body_rx));
            }
            // The channel holds what a worker may send ahead: more is a
            // response out of step, cut off.
            let held = p.body.as_ref().is_some_and(|b| b.try_send(part).is_ok());
            if last || !held {
                pending.remove(&id);
                return;
            }
            if let Some(next) = p.early.remove(&p.next) {
                ready.push(next);
            }
        }
    }

    async fn serve(
        self: Arc<Self>,
        req: HttpRequest<hyper::body::Incoming>,
    ) -> Result<HttpResponse<BoxBody<Bytes, std::io::Error>>, Infallible> {
        let head_only = req.method() == hyper::Method::HEAD;
        let (parts, body) = req.into_parts();
        let key = Key::of(&parts);
        if let Some(kept) = key.as_ref().and_then(|k| self.cache().get(k)) {
            let body = Full::new(kept.body.clone())
                .map_err(|never| match never {})
                .boxed();
            let mut resp = response(&kept.head, body);
            // Said, as caching proxies say it (nginx's $upstream_cache_status).
            resp.headers_mut().insert(
                hyper::header::HeaderName::from_static("x-tabos-cache"),
                hyper::header::HeaderValue::from_static("hit"),
            );
            return Ok(resp);
        }
        let req = HttpRequest::from_parts(parts, body);
        let (head, body) = match self.clone().ask(req, key).await {
            Ok((head, mut parts)) => {
                let body = if head_only {
                    Full::new(Bytes::new())
                        .map_err(|never| match never {})
                        .boxed()
                } else if head.last && head.more.is_none() && !head.broken {
                    // The whole answer in its one part (on its way with
                    // the head): sent with its length, not in chunks.
                    let data = match parts.recv().await {
                        Some(p) if !p.broken => p.data,
                        _ => Bytes::new(),
                    };
                    Full::new(data).map_err(|never| match never {}).boxed()
                } else {
                    Streamed {
                        parts,
                        wwd: self.clone(),
                        id: head.id,
                        idle: Box::pin(tokio::time::sleep(ANSWER_WAIT)),
                    }
                    .boxed()
                };
                (head, body)
            }
            Err((status, msg)) => (
                ResponseHead::new(0, status, "text/plain; charset=utf-8"),
                Full::new(Bytes::from(format!("{msg}\n")))
                    .map_err(|never| match never {})
                    .boxed(),
            ),
        };
        Ok(response(&head, body))
    }

    /// Asks the pool for the next window of response `id`.
    async fn ask_window(self: Arc<Self>, id: u64, window: wire::Window) {
        let request = Request {
            id,
            method: "GET".into(),
            path: window.path.clone(),
            query: String::new(),
            headers: Vec::new(),
            window: Some(window),
        };
        let msg = proto::Outgoing {
            to: self.requests.clone(),
            payload: wire::encode(&request, b""),
            message_id: String::new(),
        };
        if self.out.send(msg).await.is_err() {
            self.pending().remove(&id); // its body then ends short
        }
    }

    /// Sends the request to the pool and waits for its answer.
    async fn ask(
        &self,
        req: HttpRequest<hyper::body::Incoming>,
        key: Option<Key>,
    ) -> std::result::Result<(ResponseHead, mpsc::Receiver<Part>), (u16, String)> {
        let (parts, body) = req.into_parts();
        let body = tokio::time::timeout(BODY_WAIT, Limited::new(body, REQUEST_BODY_MAX).collect())
            .await
            .map_err(|_| (408, format!("the request body took over {BODY_WAIT:?}")))?
            .map_err(|_| {
                (
                    413,
                    format!("a request body is at most {REQUEST_BODY_MAX} bytes"),
                )
            })?
            .to_bytes();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let request = Request {
            id,
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            headers: parts
                .headers
                .iter()
                .take(HEADERS_MAX)
                .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
                .collect(),
            window: None,
        };
        let again = may_ask_again(&request.method, &body).then(|| (request.clone(), body.clone()));
        let (tx, rx) = oneshot::channel();
        let keep = key.map(|k| (k, self.cache().told));
        {
            let mut pending = self.pending();
            if pending.len() >= IN_FLIGHT_MAX {
                return Err((503, "too many requests in flight".into()));
            }
            pending.insert(
                id,
                Pending {
                    head: Some(tx),
                    body: None,
                    next: 0,
                    early: Default::default(),
                    keep,
                    first: id,
                    again,
                    asked_again: 0,
                },
            );
            self.peak.fetch_max(pending.len(), Ordering::Relaxed);
        }
        let msg = proto::Outgoing {
            to: self.requests.clone(),
            payload: wire::encode(&request, &body),
            message_id: String::new(),
        };
        if let Err(e) = self.out.send(msg).await {
            self.forget(id);
            return Err((503, format!("the request could not be queued: {e}")));
        }
        match tokio::time::timeout(ANSWER_WAIT, rx).await {
            Ok(Ok(r)) => Ok(r),
            _ => {
                self.forget(id);
                Err((504, "no worker answered in time".into()))
            }
        }
    }
}

/// The HTTP response an answer's head and body make.
fn response(
    head: &ResponseHead,
    body: BoxBody<Bytes, std::io::Error>,
) -> HttpResponse<BoxBody<Bytes, std::io::Error>> {
    let mut resp = HttpResponse::new(body);
    *resp.status_mut() = StatusCode::from_u16(head.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = resp.headers_mut();
    if !head.content_type.is_empty() {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&head.content_type) {
            headers.insert(hyper::header::CONTENT_TYPE, v);
        }
    }
    for (k, v) in &head.headers {
        if let (Ok(k), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(k.as_bytes()),
            hyper::header::HeaderValue::from_str(v),
        ) {
            headers.append(k, v);
        }
    }
    // The length, so that a client knows a streamed body whole (and a
    // HEAD says what GET would send).
    if let Some(n) = head.length {
        headers.insert(
            hyper::header::CONTENT_LENGTH,
            hyper::header::HeaderValue::from(n),
        );
    }
    headers.insert(
        hyper::header::SERVER,
        hyper::header::HeaderValue::from_static("tabos-wwd"),
    );
    resp
}

/// A response's body as its parts come: the next window asked for as the
/// first part of the current one is read, so a client reading slowly
/// holds back the worker, not wwd's memory. A part that does not come
/// within [`ANSWER_WAIT`], or a response broken off, ends the connection
/// (the client sees a body shorter than its length).
struct Streamed {
    parts: mpsc::Receiver<Part>,
    wwd: Arc<Wwd>,
    id: u64,
    idle: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Streamed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<hyper::body::Frame<Bytes>, std::io::Error>>>
    {
        use std::task::Poll;
        loop {
            match self.parts.poll_recv(cx) {
                Poll::Ready(Some(part)) => {
                    if part.broken {
                        return Poll::Ready(Some(Err(std::io::Error::other(
                            "the file changed while it was being sent",
                        ))));
                    }
                    if let Some(w) = part.more {
                        tokio::spawn(self.wwd.clone().ask_window(self.id, w));
                    }
                    let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
                    self.idle.as_mut().reset(deadline);
                    if part.data.is_empty() {
                        continue;
                    }
                    return Poll::Ready(Some(Ok(hyper::body::Frame::data(part.data))));
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => {
                    return match std::future::Future::poll(self.idle.as_mut(), cx) {
                        Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "no worker sent the rest in time",
                        )))),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        // Its client went away, or it ended: nothing more is taken in.
        self.wwd.pending().remove(&self.id);
    }
}
