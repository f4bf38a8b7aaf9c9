//! Hand-over: a send that finds a receiver of this process waiting on its
//! empty mailbox gives it the messages directly (issue 18, item 2).
//!
//! Without it a message crosses the database twice: the sender's
//! transaction inserts it, the change feed wakes the receiver, and the
//! receiver's own transaction deletes it. With it, the sender's transaction
//! takes the message's seq but neither queues nor notifies; after that
//! transaction commits, the message goes to the waiting receiver in memory.
//! The message is received at the sender's commit — the moment a receive's
//! deletion would otherwise have committed — so delivery keeps the
//! guarantees of [`crate::ipc`]: durable before anyone sees it, received by
//! exactly one receiver, and in order, because a sender only hands over
//! when its transaction found the mailbox empty.
//!
//! The registry is per process and per store
//! ([`tabos_store::Store::local`]): a receiver on another node is woken by
//! the change feed as before. A claimed receiver whose sender's transaction
//! rolls back is woken with nothing and waits again. A receiver that stops
//! waiting (its wait ran out, or a send queued) while claimed waits for the
//! claim's outcome — bounded by one transaction — so nothing handed to it is
//! lost or reordered. Only a receive whose caller went away (its future
//! dropped) cannot wait: what was handed to it goes back to the head of the
//! mailbox by a transaction of its own ([`Requeue`]); a message another
//! receiver took meanwhile then came out before it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::{Message, Requeue, Take};
use crate::auth::Actor;

/// Most receivers of one process waiting on one mailbox with hand-over;
/// more wait on the change feed alone, as before.
pub(crate) const WAITERS_PER_MAILBOX_MAX: usize = 1_024;

/// The receivers of this process waiting on each mailbox (by change-feed
/// channel, which names the realm and the address), oldest first.
#[derive(Default)]
pub(crate) struct Waiters {
    by_channel: Mutex<HashMap<String, VecDeque<Waiter>>>,
    next_id: AtomicU64,
}

struct Waiter {
    id: u64,
    take: Take,
    to: oneshot::Sender<Vec<Message>>,
    /// Whom the receiver acts for: a hand-over is its receipt.
    actor: Option<Actor>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, VecDeque<Waiter>>> {
        self.by_channel
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a receiver waiting on `channel` for up to `take`; `None`
    /// when the mailbox already has [`WAITERS_PER_MAILBOX_MAX`] of them.
    pub(crate) fn wait(
        self: &Arc<Self>,
        channel: &str,
        take: Take,
        requeue: &Arc<Requeue>,
        actor: Option<Actor>,
    ) -> Option<Waiting> {
        let (to, from) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        let queue = map.entry(channel.to_string()).or_default();
        if queue.len() >= WAITERS_PER_MAILBOX_MAX {
            return None;
        }
        queue.push_back(Waiter {
            id,
            take,
            to,
            actor,
        });
        Some(Waiting {
            waiters: self.clone(),
            channel: channel.to_string(),
            id,
            from,
            done: false,
            requeue: requeue.clone(),
        })
    }

    /// Whether any receiver waits on `channel` (a hint: it may stop
    /// waiting before a claim).
    pub(crate) fn any(&self, channel: &str) -> bool {
        self.count(channel) > 0
    }

    /// Whether no receiver waits on any mailbox.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// How many receivers wait on `channel`.
    pub(crate) fn count(&self, channel: &str) -> usize {
        self.lock().get(channel).map_or(0, VecDeque::len)
    }

    /// Takes the oldest receiver on `channel` that still waits and whose
    /// receive can hold `count` messages of `bytes` in all.
    pub(crate) fn claim(&self, channel: &str, count: usize, bytes: usize) -> Option<Claim> {
        let mut map = self.lock();
        let queue = map.get_mut(channel)?;
        queue.retain(|w| !w.to.is_closed());
        let at = queue
            .iter()
            .position(|w| count <= w.take.max && bytes <= w.take.bytes_max)?;
        let waiter = queue.remove(at)?;
        if queue.is_empty() {
            map.remove(channel);
        }
        Some(Claim { waiter })
    }

    /// Unregisters waiter `id`; false if a sender has claimed it.
    fn forget(&self, channel: &str, id: u64) -> bool {
        let mut map = self.lock();
        let Some(queue) = map.get_mut(channel) else {
            return false;
        };
        let Some(at) = queue.iter().position(|w| w.id == id) else {
            return false;
        };
        queue.remove(at);
        if queue.is_empty() {
            map.remove(channel);
        }
        true
    }
}

/// A receiver's registration; dropping it unregisters, and puts back what
/// was handed over but not taken with [`Waiting::finish`] (the receive's
/// caller went away).
pub(crate) struct Waiting {
    waiters: Arc<Waiters>,
    channel: String,
    id: u64,
    from: oneshot::Receiver<Vec<Message>>,
    /// `from` has answered.
    done: bool,
    requeue: Arc<Requeue>,
}

impl Waiting {
    /// The messages handed over, when they come; `None` when the sender
    /// that claimed this receiver rolled back (wait again).
    pub(crate) async fn handed(&mut self) -> Option<Vec<Message>> {
        let got = (&mut self.from).await.ok();
        self.done = true;
        got
    }

    /// Whether messages were handed over (a look, not a take).
    pub(crate) fn ready(&self) -> bool {
        self.done || !self.from.is_empty()
    }

    /// Stops waiting and returns what was handed over. A receiver a sender
    /// has claimed waits for that sender's commit or rollback: one
    /// transaction.
    pub(crate) async fn finish(mut self) -> Option<Vec<Message>> {
        if self.done || self.waiters.forget(&self.channel, self.id) {
            return None;
        }
        self.handed().await
    }

    /// [`Waiting::finish`] on a blocking thread.
    pub(crate) fn finish_blocking(self, rt: &tokio::runtime::Handle) -> Option<Vec<Message>> {
        rt.block_on(self.finish())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done || self.waiters.forget(&self.channel, self.id) {
            return;
        }
        // Claimed, and the caller went away: whatever comes goes back.
        self.from.close();
        if let Ok(messages) = self.from.try_recv() {
            self.requeue.submit(messages);
        }
    }
}

/// A waiter taken by a sender's transaction: delivered after the commit;
/// dropped undelivered (the transaction failed), it wakes its receiver
/// with nothing, which waits again.
pub(crate) struct Claim {
    waiter: Waiter,
}

impl Claim {
    /// Gives the committed messages to the receiver; gives them back if it
    /// stopped waiting.
    pub(crate) fn deliver(self, messages: Vec<Message>) -> Result<(), Vec<Message>> {
        self.waiter.to.send(messages)
    }

    /// Whom the claimed receiver acts for.
    pub(crate) fn actor(&self) -> Option<&Actor> {
        self.waiter.actor.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: i64) -> Message {
        Message {
            seq,
            sender: String::new(),
            message_id: None,
            sent_us: 0,
            payload: vec![1, 2, 3],
        }
    }

    fn take(max: usize, bytes_max: usize) -> Take {
        Take { max, bytes_max }
    }

    /// A real store for the requeue a dropped waiter may need.
    fn store() -> (tabos_store::Store, tabos_store::testing::TempDir) {
        let dir = tabos_store::testing::TempDir::new("handover");
        let config = tabos_store::Config::sqlite(dir.path());
        (crate::open(&config).unwrap(), dir)
    }

    fn requeue(store: &tabos_store::Store) -> Arc<Requeue> {
        let address = crate::ipc::Address::parse("m").unwrap();
        Arc::new(Requeue::new(store, tabos_store::PKey(0), "r", address))
    }

    #[tokio::test]
    async fn claims_go_to_the_oldest_waiter_that_fits() {
        let (store, _dir) = store();
        let w = Arc::new(Waiters::default());
        let rq = requeue(&store);
        let mut small = w.wait("c", take(1, 2), &rq, None).unwrap();
        let mut big = w.wait("c", take(64, 1 << 20), &rq, None).unwrap();
        assert_eq!(w.count("c"), 2);
        // Three bytes do not fit the first waiter's budget: the second gets them.
        let claim = w.claim("c", 1, 3).unwrap();
        claim.deliver(vec![message(7)]).unwrap();
        assert_eq!(big.handed().await.unwrap()[0].seq, 7);
        assert_eq!(w.count("c"), 1);
        assert!(w.claim("c", 2, 2).is_none(), "two messages fit no waiter");
        assert!(w.claim("other", 1, 1).is_none());
        // A claim dropped undelivered (its send rolled back) wakes its
        // receiver with nothing.
        let claim = w.claim("c", 1, 1).unwrap();
        assert_eq!(w.count("c"), 0);
        drop(claim);
        assert!(small.handed().await.is_none());
    }

    #[tokio::test]
    async fn a_claimed_receiver_that_stops_waiting_gets_what_was_handed() {
        let (store, _dir) = store();
        let w = Arc::new(Waiters::default());
        let rq = requeue(&store);
        // Not claimed: stopping returns at once with nothing.
        let waiting = w.wait("c", take(64, 1 << 20), &rq, None).unwrap();
        assert!(waiting.finish().await.is_none());
        assert_eq!(w.count("c"), 0);
        // Claimed: stopping waits for the sender's outcome and returns it.
        let waiting = w.wait("c", take(64, 1 << 20), &rq, None).unwrap();
        let claim = w.claim("c", 1, 3).unwrap();
        let deliver = tokio::spawn(async move {
            tokio::task::yield_now().await;
            claim.deliver(vec![message(9)])
        });
        let got = waiting.finish().await.expect("handed while stopping");
        assert_eq!(got[0].seq, 9);
        deliver.await.unwrap().unwrap();
        // Claimed and then dropped by a receiver that went away: the
        // sender's delivery fails, so the sender puts the messages back.
        let waiting = w.wait("c", take(64, 1 << 20), &rq, None).unwrap();
        let claim = w.claim("c", 1, 3).unwrap();
        drop(waiting);
        assert_eq!(claim.deliver(vec![message(10)]).unwrap_err()[0].seq, 10);
    }

    #[test]
    fn waiters_per_mailbox_are_bounded() {
        let (store, _dir) = store();
        let w = Arc::new(Waiters::default());
        let rq = requeue(&store);
        let held: Vec<Waiting> = (0..WAITERS_PER_MAILBOX_MAX)
            .map(|_| w.wait("c", take(1, 1), &rq, None).unwrap())
            .collect();
        assert!(w.wait("c", take(1, 1), &rq, None).is_none());
        assert!(w.wait("d", take(1, 1), &rq, None).is_some());
        drop(held);
        assert_eq!(w.count("c"), 0);
    }
}
