//! The budget of partly received request bytes, node-wide and per
//! connection, and the call count each connection's idle limit needs.
//!
//! A unary call's message is buffered until it is whole, so a client that
//! sends most of many large messages and then stalls makes the node hold
//! all of them (257 half-sent 16 MiB messages on one connection once held
//! 4.1 GiB). [`RequestBytes`] wraps every request's body and counts the
//! bytes it has delivered against the node's budget,
//! [`REQUEST_BYTES_MAX`], and its connection's share,
//! [`crate::conn::Limits::connection_request_bytes`], until the body is
//! dropped — which tonic does as soon as the message is decoded. A frame
//! that would take either past its limit fails its request with
//! RESOURCE_EXHAUSTED instead of being held, and so does a request whose
//! next bytes do not come for [`crate::conn::Limits::request_stall`];
//! other requests, and the next ones, go on.
//!
//! The same layer counts each connection's open calls, from a request's
//! headers to the end of its response ([`crate::conn::ConnState`]), so that
//! only a connection with none is closed as idle — and runs each call in a
//! `tracing` span (target [`RPC_TARGET`], level debug) carrying its method
//! and realm, which ends with an event giving its gRPC code and duration
//! once the response's last byte is sent. With the target filtered out
//! (the default) a call pays for one check of the filter.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::Service;

use crate::conn::{CallGuard, ConnInfo, ConnState};

/// Most bytes of requests not yet decoded the node holds at once, over
/// every connection: sixteen largest messages.
pub const REQUEST_BYTES_MAX: usize = 16 * tabos_client::MESSAGE_BYTES_MAX;

/// The `tracing` target of the per-call spans and events
/// (`RUST_LOG=tabos::rpc=debug`).
pub const RPC_TARGET: &str = "tabos::rpc";

/// The node-wide budget, shared by every connection of its servers.
#[derive(Clone, Debug)]
pub struct RequestBytes {
    held: Arc<AtomicUsize>,
    max: usize,
    /// Where each call's method, code and duration are counted.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl RequestBytes {
    pub fn new(max: usize) -> RequestBytes {
        RequestBytes {
            held: Arc::new(AtomicUsize::new(0)),
            max,
            metrics: None,
        }
    }

    /// These budgets, each call counted in `metrics` as it ends.
    pub fn observed_by(mut self, metrics: Arc<crate::metrics::Metrics>) -> RequestBytes {
        self.metrics = Some(metrics);
        self
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

impl<S> tower_layer::Layer<S> for RequestBytes {
    type Service = Budgeted<S>;
    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            budget: self.clone(),
        }
    }
}

/// A service whose requests' bodies count against the budget.
#[derive(Clone, Debug)]
pub struct Budgeted<S> {
    inner: S,
    budget: RequestBytes,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<http::Request<Body>> for Budgeted<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let budget = self.budget.clone();
        // Served from `conn::incoming`, every request knows its connection;
        // the plain TCP info goes in too, for tonic's `remote_addr`.
        let conn = request.extensions().get::<ConnInfo>().cloned();
        // Its realm's share of calls first: a call past it is refused
        // before anything is read or held.
        let realm_call = match conn.as_ref().map(ConnInfo::realm_call) {
            Some(Err(why)) => {
                let refused = tonic::Status::resource_exhausted(why).into_http();
                return Box::pin(async move { Ok(refused) });
            }
            Some(Ok(taken)) => taken,
            None => None,
        };
        let call = conn.as_ref().map(|c| (c.state.call(), realm_call));
        let state = conn.as_ref().map(|c| c.state.clone());
        if let Some(c) = conn {
            request.extensions_mut().insert(c.tcp);
        }
        let traced = tracing::enabled!(target: RPC_TARGET, tracing::Level::DEBUG);
        let metrics = self.budget.metrics.clone();
        let trace = (traced || metrics.is_some())
            .then(|| Trace::start(request.uri().path(), state.clone(), traced, metrics));
        let stall = state.as_ref().map(|s| s.limits.request_stall);
        let request = request.map(|body| {
            Body::new(Counted {
                body,
                budget,
                conn: state,
                own: 0,
                stall,
                stall_timer: None,
            })
        });
        let Some(mut trace) = trace else {
            let response = self.inner.call(request);
            return Box::pin(async move {
                let response = response.await?;
                // The call stays open until its response's last byte is sent.
                Ok(match call {
                    Some(call) => response.map(|body| {
                        Body::new(Tracked {
                            body,
                            _call: Some(call),
                            trace: None,
                        })
                    }),
                    None => response,
                })
            });
        };
        let response = trace.span.in_scope(|| self.inner.call(request));
        let span = trace.span.clone();
        // (A disabled span costs nothing to enter.)
        Box::pin(tracing::Instrument::instrument(
            async move {
                let response = response.await?;
                // A call refused at once says so in its headers
                // (trailers-only); one answered, in its trailers.
                trace.saw(response.headers());
                Ok(response.map(|body| {
                    Body::new(Tracked {
                        body,
                        _call: call,
                        trace: Some(trace),
                    })
                }))
            },
            span,
        ))
    }
}

/// One call's span (disabled unless traced), and what its end says: an
/// event in the span, and a count in the metrics.
struct Trace {
    span: tracing::Span,
    traced: bool,
    method: String,
    started: std::time::Instant,
    conn: Option<Arc<ConnState>>,
    code: Option<i32>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Trace {
    fn start(
        method: &str,
        conn: Option<Arc<ConnState>>,
        traced: bool,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Trace {
        let span = if traced {
            tracing::debug_span!(
                target: RPC_TARGET,
                "rpc",
                method,
                realm = tracing::field::Empty
            )
        } else {
            tracing::Span::none()
        };
        if let Some(realm) = conn.as_ref().and_then(|c| c.realm.get()) {
            span.record("realm", &**realm);
        }
        Trace {
            span,
            traced,
            method: method.to_string(),
            started: std::time::Instant::now(),
            conn,
            code: None,
            metrics,
        }
    }

    fn saw(&mut self, headers: &http::HeaderMap) {
        if let Some(code) = headers
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
        {
            self.code = Some(code);
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        let code = tonic::Code::from_i32(self.code.unwrap_or(tonic::Code::Unknown as i32));
        if let Some(m) = &self.metrics {
            m.observe_call(&self.method, code, took.as_secs_f64());
        }
        if !self.traced {
            return;
        }
        // The first call of a connection signs it in: its realm is known
        // only now.
        if let Some(realm) = self.conn.as_ref().and_then(|c| c.realm.get()) {
            self.span.record("realm", &**realm);
        }
        tracing::debug!(
            target: RPC_TARGET,
            parent: &self.span,
            code = ?code,
            duration_us = took.as_micros() as u64,
            "call ended"
        );
    }
}

/// A response body that keeps its call counted (on its connection, and
/// against its realm) until it is dropped.
struct Tracked {
    body: Body,
    _call: Option<(CallGuard, Option<crate::doors::Taken>)>,
    /// Its span's end, when calls are traced.
    trace: Option<Trace>,
}

impl http_body::Body for Tracked {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let me = self.get_mut();
        let frame = Pin::new(&mut me.body).poll_frame(cx);
        if let (Some(trace), Poll::Ready(Some(Ok(f)))) = (&mut me.trace, &frame) {
            if let Some(trailers) = f.trailers_ref() {
                trace.saw(trailers);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body whose delivered bytes are counted until it is dropped.
struct Counted {
    body: Body,
    budget: RequestBytes,
    /// Its connection's state (none when served without `conn::incoming`).
    conn: Option<Arc<ConnState>>,
    /// What this body has added to the budget (and to its connection's).
    own: usize,
    /// The stall limit (none when served without `conn::incoming`).
    stall: Option<std::time::Duration>,
    /// Fires `stall` after the last frame; made the first time the body
    /// has to wait (a small request arrives whole and never needs one).
    stall_timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Counted {
    /// Counts `n` more bytes; the error says which limit they would pass.
    fn take(&mut self, n: usize) -> Result<(), tonic::Status> {
        let before = self.budget.held.fetch_add(n, Ordering::AcqRel);
        let conn_before = self
            .conn
            .as_ref()
            .map(|c| c.held.fetch_add(n, Ordering::AcqRel));
        self.own += n;
        if before + n > self.budget.max {
            return Err(tonic::Status::resource_exhausted(format!(
                "the node holds {before} bytes of requests still arriving, and this one's next \
                 {n} would pass its limit of {}; retry when fewer large requests are in flight",
                self.budget.max
            )));
        }
        if let (Some(c), Some(held)) = (&self.conn, conn_before) {
            let max = c.limits.connection_request_bytes;
            if held + n > max {
                return Err(tonic::Status::resource_exhausted(format!(
                    "this connection's requests still arriving hold {held} bytes, and this \
                     one's next {n} would pass a connection's limit of {max}; finish sending \
                     the others first, or use another connection"
                )));
            }
        }
        Ok(())
    }
}

impl http_body::Body for Counted {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(limit), Some(timer)) = (this.stall, &mut this.stall_timer) {
                    timer.as_mut().reset(tokio::time::Instant::now() + limit);
                }
                if let Some(data) = frame.data_ref() {
                    if let Err(e) = this.take(data.len()) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            Poll::Pending => {
                if let Some(limit) = this.stall {
                    let timer = this
                        .stall_timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Some(Err(tonic::Status::resource_exhausted(format!(
                            "no bytes of this request came for {limit:?} (after {} bytes); \
                             it was dropped and what it held given back",
                            this.own
                        )))));
                    }
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let before = self.budget.held.fetch_sub(self.own, Ordering::AcqRel);
        debug_assert!(before >= self.own, "the budget gives back what it took");
        if let Some(c) = &self.conn {
            let before = c.held.fetch_sub(self.own, Ordering::AcqRel);
            debug_assert!(before >= self.own, "the connection gives back what it took");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    fn counted(text: &str, budget: &RequestBytes) -> Counted {
        Counted {
            body: Body::new(text.to_string()),
            budget: budget.clone(),
            conn: None,
            own: 0,
            stall: None,
            stall_timer: None,
        }
    }

    async fn next(c: &mut Counted) -> Option<Result<usize, tonic::Status>> {
        std::future::poll_fn(|cx| Pin::new(&mut *c).poll_frame(cx))
            .await
            .map(|f| f.map(|f| f.data_ref().map_or(0, |d| d.len())))
    }

    #[tokio::test]
    async fn past_the_budget_a_request_fails_and_gives_back_what_it_held() {
        let budget = RequestBytes::new(10);
        let mut a = counted("hello", &budget);
        assert_eq!(next(&mut a).await.unwrap().unwrap(), 5);
        assert_eq!(budget.held(), 5);
        let mut b = counted("0123456789", &budget);
        let e = next(&mut b).await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("limit of 10"), "{e:?}");
        drop(b);
        assert_eq!(budget.held(), 5);
        // What fits still passes, and everything is given back at the end.
        let mut c = counted("abcde", &budget);
        assert_eq!(next(&mut c).await.unwrap().unwrap(), 5);
        drop((a, c));
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn one_connection_holds_at_most_its_share() {
        let budget = RequestBytes::new(100);
        let limits = crate::conn::Limits {
            connection_request_bytes: 8,
            ..Default::default()
        };
        let (one, other) = (
            Arc::new(ConnState::new(limits, crate::conn::Source::Local(0))),
            Arc::new(ConnState::new(limits, crate::conn::Source::Local(0))),
        );
        let on = |text: &str, conn: &Arc<ConnState>| {
            let mut c = counted(text, &budget);
            c.conn = Some(conn.clone());
            c
        };
        let mut a = on("hello", &one);
        assert_eq!(next(&mut a).await.unwrap().unwrap(), 5);
        let mut b = on("abcd", &one);
        let e = next(&mut b).await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("a connection's limit of 8"), "{e:?}");
        // Another connection has its own share of the node's budget.
        let mut c = on("abcd", &other);
        assert_eq!(next(&mut c).await.unwrap().unwrap(), 4);
        drop(b);
        assert_eq!(one.held.load(Ordering::Relaxed), 5);
        assert_eq!(budget.held(), 9);
        drop((a, c));
        assert_eq!(budget.held(), 0);
        assert_eq!(one.held.load(Ordering::Relaxed), 0);
        assert_eq!(other.held.load(Ordering::Relaxed), 0);
    }
}
