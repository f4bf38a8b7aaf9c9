//! Server streams (file and name watches, FollowLogs, RecvStream): the half
//! a node task sends on, and the half tonic serves.
//!
//! A stream's task must end when its client goes away *or* when the node
//! begins to stop — a graceful shutdown waits for every open call, and a
//! client that has stopped reading would otherwise hold it for ever with
//! the task parked in a send on a full buffer. So every wait in [`Out`]
//! is also a wait for the node's stop, and a stream's last word (an error,
//! or "the node is shutting down") is never a send that can block: it is
//! kept beside the buffer and given after whatever the buffer still holds.
//! A client that reads on thus sees every item sent, then the error —
//! never a clean end it could take for "the log is complete".

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::{mpsc, watch};
use tonic::Status;

/// Most watches (of files or of names) one realm's callers hold open at
/// once on this node; a watch past it is RESOURCE_EXHAUSTED. Operators'
/// are counted, not capped. Each holds a change-feed subscription of up
/// to [`tabos_store::feed::SUBSCRIBER_QUEUE_BYTES_MAX`] unread plus its
/// stream's buffer: this bounds what a realm's unread watches can hold of
/// the node's memory, which the calls a realm may hold open
/// ([`crate::conn::CALLS_PER_REALM_MAX`]) alone would not.
pub const WATCHES_PER_REALM_MAX: usize = 64;

/// A new count of the watches each realm holds ([`WATCHES_PER_REALM_MAX`]).
pub fn watches() -> Arc<crate::doors::PerRealm> {
    crate::doors::PerRealm::new(WATCHES_PER_REALM_MAX)
}

/// One more watch for `who`'s realm on this node, held until the watch
/// ends (dropped with its task), or why not.
pub fn take_watch(
    node: &crate::Node,
    who: &tabos_kernel::auth::Caller,
) -> Result<crate::doors::Taken, Status> {
    let realm = if who.is_operator() {
        ""
    } else {
        who.realm().as_str()
    };
    node.watches.take(realm).map_err(|full| {
        Status::resource_exhausted(format!(
            "realm {} holds {} watches open on this node, the most one realm may \
             ({WATCHES_PER_REALM_MAX}); end one first",
            full.realm, full.held
        ))
    })
}

/// Why a stream's task is to stop sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The client went away (closed the call or its connection).
    Gone,
    /// The node is shutting down; the stream's last item says so.
    Stopping,
}

/// The sending half of a server stream.
pub struct Out<T> {
    tx: mpsc::Sender<Result<T, Status>>,
    last: Arc<Mutex<Option<Status>>>,
    stopping: watch::Receiver<bool>,
}

/// The half tonic serves: the buffered items, then the last word if any.
pub struct Streamed<T> {
    rx: mpsc::Receiver<Result<T, Status>>,
    last: Arc<Mutex<Option<Status>>>,
}

/// A server stream holding at most `buffer` items the client has not
/// taken, whose task ends when `stopping` is raised.
pub fn channel<T>(buffer: usize, stopping: watch::Receiver<bool>) -> (Out<T>, Streamed<T>) {
    let (tx, rx) = mpsc::channel(buffer);
    let last = Arc::new(Mutex::new(None));
    (
        Out {
            tx,
            last: last.clone(),
            stopping,
        },
        Streamed { rx, last },
    )
}

/// What a stream says last when the node stops under it.
pub fn shutting_down() -> Status {
    Status::unavailable("the node is shutting down; call again on another node or after restart")
}

impl<T> Out<T> {
    fn keep_last(&self, status: Status) {
        // Only an Option is set under the lock: nothing to leave half-done.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get_or_insert(status);
    }

    fn stopped(&self) -> Ended {
        self.keep_last(shutting_down());
        Ended::Stopping
    }

    /// Waits until the client goes away or the node begins to stop (for a
    /// `select!` beside what the task waits for); on a stop the stream's
    /// last item is [`shutting_down`].
    pub async fn ended(&self) -> Ended {
        let mut stopping = self.stopping.clone();
        tokio::select! {
            () = self.tx.closed() => Ended::Gone,
            _ = stopping.wait_for(|s| *s) => self.stopped(),
        }
    }

    /// Sends `item`, waiting for room, unless the client goes away or the
    /// node begins to stop first.
    pub async fn send(&self, item: T) -> Result<(), Ended> {
        let permit = self.reserve().await?;
        permit.send(Ok(item));
        Ok(())
    }

    /// Room for one item, taken before the item is made (a message taken
    /// from a mailbox only once it has somewhere to go), unless the client
    /// goes away or the node begins to stop first.
    pub async fn reserve(&self) -> Result<mpsc::Permit<'_, Result<T, Status>>, Ended> {
        if *self.stopping.borrow() {
            return Err(self.stopped());
        }
        let mut stopping = self.stopping.clone();
        tokio::select! {
            permit = self.tx.reserve() => permit.map_err(|_| Ended::Gone),
            _ = stopping.wait_for(|s| *s) => Err(self.stopped()),
        }
    }

    /// Ends the stream with `status`, given after what the buffer holds.
    pub fn finish(self, status: Status) {
        self.keep_last(status);
    }
}

impl<T> tokio_stream::Stream for Streamed<T> {
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) => {
                let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).take();
                Poll::Ready(last.map(Err))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn a_stop_ends_a_send_the_client_does_not_read_and_is_said_last() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (out, mut streamed) = channel::<u32>(1, stop_rx);
        out.send(1).await.unwrap();
        let task = tokio::spawn(async move { out.send(2).await });
        tokio::task::yield_now().await;
        assert!(!task.is_finished(), "waits for room");
        stop_tx.send(true).unwrap();
        assert_eq!(task.await.unwrap(), Err(Ended::Stopping));
        assert_eq!(streamed.next().await.unwrap().unwrap(), 1);
        let last = streamed.next().await.unwrap().unwrap_err();
        assert_eq!(last.code(), tonic::Code::Unavailable);
        assert!(streamed.next().await.is_none());
    }

    #[tokio::test]
    async fn a_finish_comes_after_what_was_sent_and_a_plain_end_is_clean() {
        let (_stop, stop_rx) = watch::channel(false);
        let (out, mut streamed) = channel::<u32>(4, stop_rx.clone());
        out.send(7).await.unwrap();
        out.finish(Status::data_loss("behind"));
        assert_eq!(streamed.next().await.unwrap().unwrap(), 7);
        assert_eq!(
            streamed.next().await.unwrap().unwrap_err().code(),
            tonic::Code::DataLoss
        );
        let (out, mut streamed) = channel::<u32>(4, stop_rx);
        out.send(8).await.unwrap();
        drop(out);
        assert_eq!(streamed.next().await.unwrap().unwrap(), 8);
        assert!(streamed.next().await.is_none());
    }

    #[tokio::test]
    async fn a_client_gone_ends_the_wait() {
        let (_stop, stop_rx) = watch::channel(false);
        let (out, streamed) = channel::<u32>(1, stop_rx);
        drop(streamed);
        assert_eq!(out.ended().await, Ended::Gone);
        assert_eq!(out.send(1).await, Err(Ended::Gone));
    }
}
