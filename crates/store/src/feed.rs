//! The change feed: notifications published after commit.
//!
//! A procedure calls [`Tx::notify`](crate::Tx::notify); the notification is held
//! with the transaction and handed to [`Feed::publish`] only after the commit
//! succeeded, never for a procedure that was rolled back. Subscribers of a
//! channel receive its notifications in commit order (per partition on SQLite;
//! in PostgreSQL's commit order on the cluster backend).
//!
//! Waiting is built on this and never on polling: a waiter subscribes *first*,
//! then re-reads the state it waits for, then waits on the subscription, so a
//! change that commits between the read and the wait is not missed.
//!
//! Where notifications come from a database shared with other processes
//! (PostgreSQL), the feed tells its [`Remote`] which channels have
//! subscribers here, and only those are delivered to this process: a
//! subscription to a channel not yet delivered returns once the database
//! delivers it.
//!
//! Every subscriber has a bounded queue: at most [`SUBSCRIBER_QUEUE_MAX`]
//! notifications and [`SUBSCRIBER_QUEUE_BYTES_MAX`] bytes unread. A
//! subscriber that falls that far behind is cut off rather than allowed to
//! grow memory without bound or to stall the writers; its next receive
//! returns [`Error::Lagged`] and it must re-read and subscribe again. (The
//! byte bound is what holds a long-lived subscription a tenant opens —
//! a file watch its client never reads — to a known share of memory:
//! notifications of long paths would otherwise take 65,536 × 8 KiB.)

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};

use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// Queue length of one subscriber, in notifications.
pub const SUBSCRIBER_QUEUE_MAX: usize = 65_536;
/// Most bytes one subscriber's unread notifications hold (as counted by
/// [`Notification::queued_bytes`]).
pub const SUBSCRIBER_QUEUE_BYTES_MAX: usize = 8 << 20;
/// Longest channel name, in bytes.
pub const CHANNEL_BYTES_MAX: usize = 128;
/// Largest payload, in bytes. PostgreSQL's NOTIFY takes under 8000 bytes
/// including the channel; the same bound holds on SQLite so that a procedure
/// behaves identically on both backends.
pub const NOTIFY_PAYLOAD_BYTES_MAX: usize = 7_680;

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub channel: String,
    pub payload: String,
}

impl Notification {
    /// What one queued copy holds in memory: the value and its two strings.
    pub fn queued_bytes(&self) -> usize {
        std::mem::size_of::<Notification>() + self.channel.len() + self.payload.len()
    }
}

/// Checks a channel name and payload against the limits. Channels are
/// non-empty, printable and have no newline (the PostgreSQL backend uses a
/// newline to frame the channel inside the NOTIFY payload).
pub fn validate(channel: &str, payload: &str) -> Result<()> {
    if channel.is_empty() || channel.chars().any(|c| c.is_control()) {
        return Err(Error::Invalid(format!(
            "channel name {channel:?} must be non-empty and have no control characters"
        )));
    }
    if channel.len() > CHANNEL_BYTES_MAX {
        return Err(Error::Limit {
            what: "channel name",
            limit: CHANNEL_BYTES_MAX as u64,
            detail: format!("{} bytes", channel.len()),
        });
    }
    if payload.len() > NOTIFY_PAYLOAD_BYTES_MAX {
        return Err(Error::Limit {
            what: "notification payload",
            limit: NOTIFY_PAYLOAD_BYTES_MAX as u64,
            detail: format!("{} bytes", payload.len()),
        });
    }
    Ok(())
}

/// Validates a notification and queues it with its transaction's others;
/// the backends publish the queue after the commit.
pub(crate) fn queue(notes: &mut Vec<Notification>, channel: &str, payload: &str) -> Result<()> {
    validate(channel, payload)?;
    notes.push(Notification {
        channel: channel.to_string(),
        payload: payload.to_string(),
    });
    Ok(())
}

struct Subscriber {
    id: u64,
    tx: mpsc::Sender<Notification>,
    queue: Arc<Queue>,
}

/// What a subscriber and its subscription share besides the channel: the
/// bytes unread, and whether (and how far behind) it was cut off.
#[derive(Default)]
struct Queue {
    bytes: AtomicUsize,
    /// 0 while delivered to; once cut off, 1 + the notifications unread then.
    cut_off: AtomicUsize,
}

impl Queue {
    fn cut_off(&self, unread: usize) {
        self.cut_off
            .store(unread.saturating_add(1), Ordering::Release);
    }

    /// Queues `note` for the subscriber, or cuts it off (false) when its
    /// queue is full by count or by bytes.
    fn offer(&self, tx: &mpsc::Sender<Notification>, note: &Notification) -> bool {
        let bytes = note.queued_bytes();
        let unread = SUBSCRIBER_QUEUE_MAX - tx.capacity();
        // Counted before it is sent, so the receiver never takes off more
        // than was put on.
        let before = self.bytes.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes > SUBSCRIBER_QUEUE_BYTES_MAX {
            self.bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.cut_off(unread);
            return false;
        }
        match tx.try_send(note.clone()) {
            Ok(()) => true,
            Err(e) => {
                self.bytes.fetch_sub(bytes, Ordering::AcqRel);
                if let mpsc::error::TrySendError::Full(_) = e {
                    self.cut_off(unread);
                }
                false
            }
        }
    }

    fn taken(&self, note: &Notification) {
        let prev = self.bytes.fetch_sub(note.queued_bytes(), Ordering::AcqRel);
        debug_assert!(
            prev >= note.queued_bytes(),
            "taken once, after it was counted"
        );
    }
}

/// Most a subscription waits for the database to start delivering its
/// channel ([`Remote`]). Past it (the database is away) the subscription
/// stands, and is cut off as lagged once the listener is back — so its
/// owner re-reads rather than miss a change.
pub const LISTEN_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Where notifications come from when they are not this process's own:
/// a database connection that must be told which channels to deliver
/// (PostgreSQL's LISTEN), so that a process receives the notifications of
/// the channels it has subscribers for and no others.
pub(crate) trait Remote: Send + Sync {
    /// Wakes the listener to bring its channels in line with
    /// [`Feed::take_dirty`].
    fn poke(&self);
}

#[derive(Default)]
struct State {
    channels: HashMap<String, Vec<Subscriber>>,
    /// Channels the remote delivers now (with a [`Remote`] only).
    listened: HashSet<String>,
    /// Channels taken off `listened` whose UNLISTEN the remote has not
    /// yet run: still delivered until [`Feed::unlistened`] says so.
    unlistening: HashSet<String>,
    /// Channels whose subscribers came or went since the listener last
    /// looked, and the highest ticket among the waiters for them.
    dirty: Vec<String>,
    ticket: u64,
}

/// Tickets of subscriptions waiting for their channel to be delivered,
/// and the highest the listener has seen to.
#[derive(Default)]
struct Tickets {
    done: Mutex<u64>,
    moved: Condvar,
}

/// What [`Feed::backlog`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub subscribers: usize,
    /// Notifications queued for subscribers and not yet read, in all.
    pub unread: usize,
    /// The most one subscriber has not read.
    pub unread_max: usize,
    pub unread_bytes: usize,
}

/// The in-process fan-out of committed notifications to subscribers.
#[derive(Default)]
pub struct Feed {
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Subscribers cut off for falling behind (their queue full), ever.
    cut_offs: AtomicU64,
    remote: std::sync::OnceLock<Arc<dyn Remote>>,
    tickets: Tickets,
}

impl Feed {
    pub fn new() -> Arc<Feed> {
        Arc::new(Feed::default())
    }

    /// Makes `remote` the source of this feed's notifications: from then on
    /// a subscription to a channel not yet delivered waits (at most
    /// [`LISTEN_WAIT_MAX`]) until it is.
    pub(crate) fn set_remote(&self, remote: Arc<dyn Remote>) {
        let _ = self.remote.set(remote);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes to one channel. Notifications committed after this call
    /// returns are delivered; earlier ones are not.
    pub fn subscribe(self: &Arc<Self>, channel: &str) -> Subscription {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE_MAX);
        let queue = Arc::new(Queue::default());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let wait_for = {
            let mut st = self.lock();
            st.channels
                .entry(channel.to_string())
                .or_default()
                .push(Subscriber {
                    id,
                    tx,
                    queue: queue.clone(),
                });
            match self.remote.get() {
                Some(_) if !st.listened.contains(channel) => {
                    st.dirty.push(channel.to_string());
                    st.ticket += 1;
                    Some(st.ticket)
                }
                _ => None,
            }
        };
        if let (Some(ticket), Some(remote)) = (wait_for, self.remote.get()) {
            remote.poke();
            let done = self.tickets.done.lock().unwrap_or_else(|p| p.into_inner());
            let _ = self
                .tickets
                .moved
                .wait_timeout_while(done, LISTEN_WAIT_MAX, |d| *d < ticket);
        }
        Subscription {
            rx,
            queue,
            id,
            channel: channel.to_string(),
            feed: Arc::downgrade(self),
        }
    }

    /// Delivers committed notifications, in the order given. Called by the
    /// executors after a successful commit and by the PostgreSQL listener.
    pub fn publish(&self, notes: &[Notification]) {
        if notes.is_empty() {
            return;
        }
        let mut emptied = false;
        {
            let mut st = self.lock();
            let st = &mut *st;
            for note in notes {
                let Some(subs) = st.channels.get_mut(&note.channel) else {
                    continue;
                };
                subs.retain(|s| {
                    let kept = s.queue.offer(&s.tx, note);
                    if !kept && !s.tx.is_closed() {
                        self.cut_offs.fetch_add(1, Ordering::Relaxed);
                    }
                    kept
                });
                if subs.is_empty() {
                    st.channels.remove(&note.channel);
                    if self.remote.get().is_some() {
                        st.dirty.push(note.channel.clone());
                        emptied = true;
                    }
                }
            }
        }
        if emptied {
            self.poke();
        }
    }

    /// Cuts every subscriber off as lagged: used when notifications may have
    /// been lost (the PostgreSQL listener lost its connection), so that every
    /// waiter re-reads the state it waits on. With a remote, nothing is
    /// delivered any more (`listened` empties), as after a reconnection.
    pub fn cut_off_all(&self) {
        let mut st = self.lock();
        for subs in st.channels.values() {
            for s in subs {
                s.queue.cut_off(SUBSCRIBER_QUEUE_MAX - s.tx.capacity());
            }
        }
        st.channels.clear();
        st.listened.clear();
        st.unlistening.clear();
        st.dirty.clear();
    }

    /// Subscribers cut off so far for falling behind (their queue full).
    pub fn cut_offs(&self) -> u64 {
        self.cut_offs.load(Ordering::Relaxed)
    }

    /// What subscribers have not read yet, over every channel: how far
    /// behind the change feed's readers are.
    pub fn backlog(&self) -> Backlog {
        let st = self.lock();
        let mut b = Backlog::default();
        for s in st.channels.values().flatten() {
            let unread = SUBSCRIBER_QUEUE_MAX - s.tx.capacity();
            b.subscribers += 1;
            b.unread += unread;
            b.unread_max = b.unread_max.max(unread);
            b.unread_bytes += s.queue.bytes.load(Ordering::Relaxed);
        }
        b
    }

    /// Number of live subscribers of a channel.
    pub fn subscribers(&self, channel: &str) -> usize {
        self.lock().channels.get(channel).map_or(0, Vec::len)
    }

    /// For the listener: the channels to start and to stop delivering, as
    /// `(listen, unlisten)`, marked as done in `listened` at once (so a
    /// subscriber arriving after this sees what will be true once the
    /// listener has run them), and the ticket to report with
    /// [`Feed::listened_to`] once it has.
    pub(crate) fn take_dirty(&self) -> (Vec<String>, Vec<String>, u64) {
        let mut st = self.lock();
        let st = &mut *st;
        let (mut listen, mut unlisten) = (Vec::new(), Vec::new());
        let mut seen = HashSet::new();
        for ch in std::mem::take(&mut st.dirty) {
            if !seen.insert(ch.clone()) {
                continue;
            }
            let wanted = st.channels.contains_key(&ch);
            let delivered = st.listened.contains(&ch);
            if wanted && !delivered {
                st.listened.insert(ch.clone());
                listen.push(ch);
            } else if !wanted && delivered {
                st.listened.remove(&ch);
                st.unlistening.insert(ch.clone());
                unlisten.push(ch);
            }
        }
        (listen, unlisten, st.ticket)
    }

    /// For the listener, after a (re)connection: every channel with
    /// subscribers is to be delivered again.
    pub(crate) fn mark_all_dirty(&self) {
        let mut st = self.lock();
        let st = &mut *st;
        st.listened.clear();
        st.unlistening.clear();
        st.dirty = st.channels.keys().cloned().collect();
    }

    /// For the listener, once the UNLISTENs of `channels` (from
    /// [`Feed::take_dirty`]) have run: they are no longer delivered.
    pub(crate) fn unlistened(&self, channels: &[String]) {
        let mut st = self.lock();
        for ch in channels {
            st.unlistening.remove(ch);
        }
    }

    /// For the listener: every subscription waiting with a ticket up to
    /// `ticket` may go on (its channel is delivered, or the database is
    /// away and it will be cut off when it is back).
    pub(crate) fn listened_to(&self, ticket: u64) {
        let mut done = self.tickets.done.lock().unwrap_or_else(|p| p.into_inner());
        if ticket > *done {
            *done = ticket;
        }
        self.tickets.moved.notify_all();
    }

    /// For the listener, when the database cannot be reached: the
    /// subscriptions waiting now go on (they are cut off once it is back).
    pub(crate) fn release_waiters(&self) {
        let ticket = self.lock().ticket;
        self.listened_to(ticket);
    }

    /// Whether `channel` is delivered now (tests of the remote): listened
    /// to, or its UNLISTEN not yet run.
    pub fn delivered(&self, channel: &str) -> bool {
        let st = self.lock();
        self.remote.get().is_none()
            || st.listened.contains(channel)
            || st.unlistening.contains(channel)
    }

    fn poke(&self) {
        if let Some(r) = self.remote.get() {
            r.poke();
        }
    }

    fn unsubscribe(&self, channel: &str, id: u64) {
        let mut emptied = false;
        {
            let mut st = self.lock();
            if let Some(subs) = st.channels.get_mut(channel) {
                subs.retain(|s| s.id != id);
                if subs.is_empty() {
                    st.channels.remove(channel);
                    if self.remote.get().is_some() {
                        st.dirty.push(channel.to_string());
                        emptied = true;
                    }
                }
            }
        }
        if emptied {
            self.poke();
        }
    }
}

/// A live subscription to one channel; dropping it unsubscribes.
pub struct Subscription {
    rx: mpsc::Receiver<Notification>,
    queue: Arc<Queue>,
    id: u64,
    channel: String,
    feed: Weak<Feed>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Subscription {
    pub fn channel(&self) -> &str {
        &self.channel
    }

    fn ended(&self) -> Error {
        match self.queue.cut_off.load(Ordering::Acquire) {
            0 => Error::Closed,
            n => Error::Lagged(n - 1),
        }
    }

    fn got(&self, got: Option<Notification>) -> Result<Notification> {
        match got {
            Some(n) => {
                self.queue.taken(&n);
                Ok(n)
            }
            None => Err(self.ended()),
        }
    }

    /// Waits for the next notification (async).
    pub async fn recv(&mut self) -> Result<Notification> {
        let got = self.rx.recv().await;
        self.got(got)
    }

    /// Waits for the next notification, blocking the thread.
    pub fn blocking_recv(&mut self) -> Result<Notification> {
        let got = crate::block_on(self.rx.recv());
        self.got(got)
    }

    /// Whether no notification is queued (a cut-off subscription is not
    /// empty: its next receive reports why).
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty() && !self.rx.is_closed()
    }

    /// The next notification if one is already queued.
    pub fn try_recv(&mut self) -> Result<Option<Notification>> {
        match self.rx.try_recv() {
            Ok(n) => self.got(Some(n)).map(Some),
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => Err(self.ended()),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(feed) = self.feed.upgrade() {
            feed.unsubscribe(&self.channel, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(c: &str, p: &str) -> Notification {
        Notification {
            channel: c.into(),
            payload: p.into(),
        }
    }

    #[test]
    fn delivers_in_order_only_to_the_channel_and_unsubscribes_on_drop() {
        let feed = Feed::new();
        let mut a = feed.subscribe("a");
        let b = feed.subscribe("b");
        feed.publish(&[note("a", "1"), note("b", "x"), note("a", "2")]);
        assert_eq!(a.try_recv().unwrap().unwrap().payload, "1");
        assert_eq!(a.try_recv().unwrap().unwrap().payload, "2");
        assert_eq!(a.try_recv().unwrap(), None);
        assert_eq!(feed.subscribers("b"), 1);
        drop(b);
        assert_eq!(feed.subscribers("b"), 0);
    }

    #[test]
    fn a_slow_subscriber_is_cut_off_with_lagged() {
        let feed = Feed::new();
        let mut s = feed.subscribe("c");
        let notes: Vec<_> = (0..=SUBSCRIBER_QUEUE_MAX)
            .map(|i| note("c", &i.to_string()))
            .collect();
        feed.publish(&notes);
        assert_eq!(feed.subscribers("c"), 0);
        for _ in 0..SUBSCRIBER_QUEUE_MAX {
            assert!(s.try_recv().unwrap().is_some());
        }
        assert!(matches!(s.try_recv(), Err(Error::Lagged(_))));
    }

    #[test]
    fn a_subscriber_is_cut_off_by_the_bytes_it_holds_unread() {
        let feed = Feed::new();
        let mut s = feed.subscribe("c");
        let big = "p".repeat(NOTIFY_PAYLOAD_BYTES_MAX);
        let fits = SUBSCRIBER_QUEUE_BYTES_MAX / note("c", &big).queued_bytes();
        assert!(fits < SUBSCRIBER_QUEUE_MAX, "the byte bound is the one met");
        // Taking some makes room for as many again.
        feed.publish(&vec![note("c", &big); fits]);
        for _ in 0..10 {
            assert!(s.try_recv().unwrap().is_some());
        }
        feed.publish(&vec![note("c", &big); 10]);
        assert_eq!(
            feed.subscribers("c"),
            1,
            "within its bytes: still delivered to"
        );
        feed.publish(&[note("c", &big)]);
        assert_eq!(feed.subscribers("c"), 0, "one past its bytes: cut off");
        for _ in 0..fits {
            assert!(s.try_recv().unwrap().is_some());
        }
        match s.try_recv() {
            Err(Error::Lagged(n)) => assert_eq!(n, fits),
            other => panic!("expected lagged, got {other:?}"),
        }
    }

    #[test]
    fn limits_are_checked() {
        assert!(validate("ok", "x").is_ok());
        assert!(validate("", "x").is_err());
        assert!(validate("a\nb", "x").is_err());
        assert!(validate(&"c".repeat(CHANNEL_BYTES_MAX + 1), "").is_err());
        assert!(validate("c", &"p".repeat(NOTIFY_PAYLOAD_BYTES_MAX + 1)).is_err());
    }
}
