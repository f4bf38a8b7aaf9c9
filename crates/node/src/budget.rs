//! The node-wide budget of partly received request bytes.
//!
//! A unary call's message is buffered until it is whole, so a client that
//! sends most of many large messages and then stalls makes the node hold
//! all of them (257 half-sent 16 MiB messages on one connection once held
//! 4.1 GiB). [`RequestBytes`] wraps every request's body and counts the
//! bytes it has delivered against one node-wide budget,
//! [`REQUEST_BYTES_MAX`], until the body is dropped — which tonic does as
//! soon as the message is decoded. A frame that would take the node past
//! the budget fails its request with RESOURCE_EXHAUSTED instead of being
//! held; other requests, and the next ones, go on.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::Service;

/// Most bytes of requests not yet decoded the node holds at once, over
/// every connection: sixteen largest messages.
pub const REQUEST_BYTES_MAX: usize = 16 * tabos_client::MESSAGE_BYTES_MAX;

/// The budget, shared by every connection of one server.
#[derive(Clone, Debug)]
pub struct RequestBytes {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl RequestBytes {
    pub fn new(max: usize) -> RequestBytes {
        RequestBytes {
            held: Arc::new(AtomicUsize::new(0)),
            max,
        }
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

impl<S> Service<http::Request<Body>> for Budgeted<S>
where
    S: Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let budget = self.budget.clone();
        self.inner.call(request.map(|body| {
            Body::new(Counted {
                body,
                budget,
                own: 0,
            })
        }))
    }
}

/// A request body whose delivered bytes are counted until it is dropped.
struct Counted {
    body: Body,
    budget: RequestBytes,
    /// What this body has added to the budget.
    own: usize,
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
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                let n = data.len();
                let before = this.budget.held.fetch_add(n, Ordering::AcqRel);
                this.own += n;
                if before + n > this.budget.max {
                    return Poll::Ready(Some(Err(tonic::Status::resource_exhausted(format!(
                        "the node holds {before} bytes of requests still arriving, and this \
                         one's next {n} would pass its limit of {}; retry when fewer large \
                         requests are in flight",
                        this.budget.max
                    )))));
                }
            }
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
            own: 0,
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
}
