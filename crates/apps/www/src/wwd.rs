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

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request as HttpRequest, Response as HttpResponse, StatusCode};
use tabos_client::proto;
use tabos_client::retry::Backoff;
use tabos_client::Client;
use tokio::sync::oneshot;

use crate::wire::{self, Request, ResponseHead, HEADERS_MAX, REQUEST_BODY_MAX, RESPONSE_BYTES_MAX};
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
/// The first pause before a lost mailbox stream is opened again.
pub const PAUSE_FIRST: Duration = Duration::from_millis(20);
/// The longest such pause.
pub const PAUSE_MAX: Duration = Duration::from_secs(2);

/// A response being put together from its parts.
struct Pending {
    tx: oneshot::Sender<(u16, String, Vec<u8>)>,
    head: Option<ResponseHead>,
    body: Vec<u8>,
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
}

/// Serves HTTP on `listen` until the node or the listener fails.
pub async fn run(ctx: Ctx, listen: &str) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Error::Invalid(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Invalid(e.to_string()))?;
    eprintln!("wwd {}: HTTP on {addr}", ctx.pid);
    let wwd = Arc::new(Wwd {
        client: ctx.client.clone(),
        realm: ctx.realm.clone(),
        me: format!("proc/{}", ctx.pid),
        requests: ctx.layout.requests(),
        out: wire::Batcher::start(&ctx.client, &ctx.realm, &format!("proc/{}", ctx.pid)),
        next: AtomicU64::new(1),
        pending: Mutex::new(HashMap::new()),
        peak: Default::default(),
        load: ctx.layout.load(),
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
        let (w, door) = (wwd.clone(), door.clone());
        tokio::spawn(async move {
            if let Some(slot) = door.slot(Some(SLOT_WAIT)).await {
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
                drop(slot);
            }
            door.ledger.forget(&ticket);
        });
    }
}

impl Wwd {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
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
                        self.part(&m.payload);
                    }
                }
            }
            pauses.wait().await;
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

    fn part(&self, payload: &[u8]) {
        let Ok((head, body)) = wire::decode::<ResponseHead>(payload) else {
            return;
        };
        let id = head.id;
        let mut pending = self.pending();
        let Some(p) = pending.get_mut(&id) else {
            // Its request gave up waiting.
            return;
        };
        if p.body.len() + body.len() > RESPONSE_BYTES_MAX {
            let p = pending.remove(&id).expect("present");
            let _ =
                p.tx.send((502, "text/plain".into(), b"response too large\n".to_vec()));
            return;
        }
        p.body.extend_from_slice(body);
        let last = head.last;
        p.head.get_or_insert(head);
        if last {
            let p = pending.remove(&id).expect("present");
            let head = p.head.expect("a head");
            let _ = p.tx.send((head.status, head.content_type, p.body));
        }
    }

    async fn serve(
        self: Arc<Self>,
        req: HttpRequest<hyper::body::Incoming>,
    ) -> Result<HttpResponse<Full<Bytes>>, Infallible> {
        let (status, ctype, body) = match self.ask(req).await {
            Ok(r) => r,
            Err((status, msg)) => (
                status,
                "text/plain; charset=utf-8".into(),
                format!("{msg}\n").into_bytes(),
            ),
        };
        let mut resp = HttpResponse::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        if let Ok(v) = hyper::header::HeaderValue::from_str(&ctype) {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        resp.headers_mut().insert(
            hyper::header::SERVER,
            hyper::header::HeaderValue::from_static("tabos-wwd"),
        );
        Ok(resp)
    }

    /// Sends the request to the pool and waits for its answer.
    async fn ask(
        &self,
        req: HttpRequest<hyper::body::Incoming>,
    ) -> std::result::Result<(u16, String, Vec<u8>), (u16, String)> {
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
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending();
            if pending.len() >= IN_FLIGHT_MAX {
                return Err((503, "too many requests in flight".into()));
            }
            pending.insert(
                id,
                Pending {
                    tx,
                    head: None,
                    body: Vec::new(),
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
            self.pending().remove(&id);
            return Err((503, format!("the request could not be queued: {e}")));
        }
        match tokio::time::timeout(ANSWER_WAIT, rx).await {
            Ok(Ok(r)) => Ok(r),
            _ => {
                self.pending().remove(&id);
                Err((504, "no worker answered in time".into()))
            }
        }
    }
}
