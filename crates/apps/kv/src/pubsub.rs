//! Publish/subscribe, as Redis has it (`SUBSCRIBE`, `PSUBSCRIBE`,
//! `PUBLISH`, `PUBSUB`), at most once like Redis's own.
//!
//! Every kvd is a broker for the connections subscribed at it
//! ([`Broker`]). A front end attaches each subscribing client to one
//! kvd's broker over a link of its own (`front.rs`), and `PUBLISH` goes
//! to every group's leader — as a Redis Cluster spreads a message over
//! its nodes — so every subscriber, wherever attached, gets it once, and
//! the reply counts them all. A message published while a subscriber's
//! kvd changes leader is lost to it, as one is in Redis when a node
//! fails. A subscriber that falls [`BACKLOG_MAX`] messages behind is
//! dropped, as Redis drops one past its output buffer limit.

use std::collections::{BTreeSet, HashMap};

use tokio::sync::mpsc;

use crate::command::glob_match;
use crate::resp::{Proto, Reply};

/// Messages waiting for one subscriber before it is dropped.
pub const BACKLOG_MAX: usize = 4_096;
/// Channels and patterns one connection may subscribe to.
pub const SUBSCRIPTIONS_MAX: usize = 10_000;

/// Channels or patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
}

impl Kind {
    fn verbs(self) -> (&'static str, &'static str) {
        match self {
            Kind::Channel => ("subscribe", "unsubscribe"),
            Kind::Pattern => ("psubscribe", "punsubscribe"),
        }
    }

    /// The kind and whether it subscribes, of a (P)(UN)SUBSCRIBE command.
    /// Redis Cluster's sharded forms (SSUBSCRIBE) are the plain ones here:
    /// every channel reaches every subscriber.
    pub fn of(cmd: &[u8]) -> Option<(Kind, bool)> {
        Some(match cmd.to_ascii_uppercase().as_slice() {
            b"SUBSCRIBE" | b"SSUBSCRIBE" => (Kind::Channel, true),
            b"UNSUBSCRIBE" | b"SUNSUBSCRIBE" => (Kind::Channel, false),
            b"PSUBSCRIBE" => (Kind::Pattern, true),
            b"PUNSUBSCRIBE" => (Kind::Pattern, false),
            _ => return None,
        })
    }
}

/// What one connection is subscribed to.
#[derive(Default)]
pub struct Subscriptions {
    channels: BTreeSet<Vec<u8>>,
    patterns: BTreeSet<Vec<u8>>,
}

impl Subscriptions {
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    fn set(&mut self, kind: Kind) -> &mut BTreeSet<Vec<u8>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        }
    }

    pub fn channels(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.channels.iter()
    }

    pub fn patterns(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.patterns.iter()
    }

    /// `(P)SUBSCRIBE names`: a confirmation per name (with the count after
    /// it), and the names that are new. Refused past
    /// [`SUBSCRIPTIONS_MAX`], changing nothing.
    pub fn subscribe(&mut self, kind: Kind, names: &[Vec<u8>]) -> Result<Change, Reply> {
        let new: BTreeSet<&Vec<u8>> = names
            .iter()
            .filter(|n| !self.set(kind).contains(*n))
            .collect();
        if self.count() + new.len() > SUBSCRIPTIONS_MAX {
            return Err(Reply::err(format!(
                "ERR a connection subscribes to at most {SUBSCRIPTIONS_MAX} channels and patterns"
            )));
        }
        let mut change = Change::default();
        for n in names {
            if self.set(kind).insert(n.clone()) {
                change.names.push(n.clone());
            }
            change
                .confirmations
                .push(self.confirmation(kind.verbs().0, Some(n)));
        }
        Ok(change)
    }

    /// `(P)UNSUBSCRIBE [names]` (none: all of that kind): a confirmation
    /// per name (one with no channel if there were none), and the names
    /// that were subscribed.
    pub fn unsubscribe(&mut self, kind: Kind, names: &[Vec<u8>]) -> Change {
        let names: Vec<Vec<u8>> = if names.is_empty() {
            self.set(kind).iter().cloned().collect()
        } else {
            names.to_vec()
        };
        let mut change = Change::default();
        for n in &names {
            if self.set(kind).remove(n) {
                change.names.push(n.clone());
            }
            change
                .confirmations
                .push(self.confirmation(kind.verbs().1, Some(n)));
        }
        if names.is_empty() {
            change
                .confirmations
                .push(self.confirmation(kind.verbs().1, None));
        }
        change
    }

    fn confirmation(&self, verb: &str, name: Option<&Vec<u8>>) -> Reply {
        Reply::Push(vec![
            Reply::text(verb),
            name.map_or(Reply::Null, |n| Reply::Bulk(n.clone())),
            Reply::Integer(self.count() as i64),
        ])
    }
}

/// What a (un)subscription changed.
#[derive(Default)]
pub struct Change {
    /// What the client is told, one per name.
    pub confirmations: Vec<Reply>,
    /// The names added (or removed).
    pub names: Vec<Vec<u8>>,
}

impl Change {
    pub fn reply(self) -> Reply {
        Reply::Many(self.confirmations)
    }
}

/// In RESP2, a subscribed connection may only (un)subscribe, PING, QUIT
/// and RESET, as in Redis; its PING is answered `pong` in an array.
pub fn refused_while_subscribed(req: &[Vec<u8>], proto: Proto, subscribed: usize) -> Option<Reply> {
    if subscribed == 0 || proto == Proto::Resp3 {
        return None;
    }
    let cmd = req[0].to_ascii_uppercase();
    match cmd.as_slice() {
        b"PING" if req.len() <= 2 => Some(Reply::Array(vec![
            Reply::text("pong"),
            Reply::Bulk(req.get(1).cloned().unwrap_or_default()),
        ])),
        b"QUIT" | b"RESET" => None,
        _ if Kind::of(&cmd).is_some() => None,
        _ => Some(Reply::err(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET \
             are allowed in this context",
            String::from_utf8_lossy(&req[0]).to_lowercase()
        ))),
    }
}

/// A kvd's subscribers, by channel and pattern.
#[derive(Default)]
pub struct Broker {
    /// Each subscribed connection's way to it.
    senders: HashMap<u64, mpsc::Sender<Reply>>,
    channels: HashMap<Vec<u8>, BTreeSet<u64>>,
    patterns: HashMap<Vec<u8>, BTreeSet<u64>>,
}

impl Broker {
    fn map(&mut self, kind: Kind) -> &mut HashMap<Vec<u8>, BTreeSet<u64>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        }
    }

    /// Connection `id` listens for `names` (on `tx`, given with its first
    /// subscription).
    pub fn add(
        &mut self,
        id: u64,
        tx: Option<&mpsc::Sender<Reply>>,
        kind: Kind,
        names: &[Vec<u8>],
    ) {
        if let Some(tx) = tx {
            self.senders.insert(id, tx.clone());
        }
        for n in names {
            self.map(kind).entry(n.clone()).or_default().insert(id);
        }
    }

    /// Connection `id` no longer listens for `names`.
    pub fn remove(&mut self, id: u64, kind: Kind, names: &[Vec<u8>]) {
        let map = self.map(kind);
        for n in names {
            if let Some(ids) = map.get_mut(n) {
                ids.remove(&id);
                if ids.is_empty() {
                    map.remove(n);
                }
            }
        }
    }

    /// Connection `id` is gone: all its subscriptions with it.
    pub fn forget(&mut self, id: u64) {
        self.senders.remove(&id);
        for map in [&mut self.channels, &mut self.patterns] {
            map.retain(|_, ids| {
                ids.remove(&id);
                !ids.is_empty()
            });
        }
    }

    /// `PUBLISH channel message`: sent to every subscriber of the channel
    /// and of each pattern it matches; the number sent to. A subscriber
    /// whose backlog is full is dropped (its connection then ends).
    pub fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        let mut sends: Vec<(u64, Reply)> = Vec::new();
        if let Some(ids) = self.channels.get(channel) {
            for id in ids {
                sends.push((
                    *id,
                    Reply::Push(vec![
                        Reply::text("message"),
                        Reply::Bulk(channel.to_vec()),
                        Reply::Bulk(message.to_vec()),
                    ]),
                ));
            }
        }
        for (pattern, ids) in &self.patterns {
            if glob_match(pattern, channel) {
                for id in ids {
                    sends.push((
                        *id,
                        Reply::Push(vec![
                            Reply::text("pmessage"),
                            Reply::Bulk(pattern.clone()),
                            Reply::Bulk(channel.to_vec()),
                            Reply::Bulk(message.to_vec()),
                        ]),
                    ));
                }
            }
        }
        let mut dropped = Vec::new();
        let n = sends.len() as i64;
        for (id, push) in sends {
            let sent = self
                .senders
                .get(&id)
                .is_some_and(|tx| tx.try_send(push).is_ok());
            if !sent {
                dropped.push(id);
            }
        }
        for id in dropped {
            self.forget(id);
        }
        n
    }

    /// `PUBSUB CHANNELS [pattern]`, `NUMSUB channel…`, `NUMPAT`, and
    /// `PATTERNS` (this kvd's patterns, for a front end to count them
    /// over every kvd).
    pub fn pubsub(&self, args: &[Vec<u8>]) -> Reply {
        let sub = args.first().map(|a| a.to_ascii_uppercase());
        match (sub.as_deref(), &args[args.len().min(1)..]) {
            (Some(b"CHANNELS"), rest) if rest.len() <= 1 => Reply::Array(
                self.channels
                    .keys()
                    .filter(|c| rest.first().is_none_or(|p| glob_match(p, c)))
                    .map(|c| Reply::Bulk(c.clone()))
                    .collect(),
            ),
            (Some(b"NUMSUB"), channels) => Reply::Array(
                channels
                    .iter()
                    .flat_map(|c| {
                        let n = self.channels.get(c).map_or(0, BTreeSet::len);
                        [Reply::Bulk(c.clone()), Reply::Integer(n as i64)]
                    })
                    .collect(),
            ),
            (Some(b"NUMPAT"), []) => Reply::Integer(self.patterns.len() as i64),
            (Some(b"PATTERNS"), []) => Reply::Array(
                self.patterns
                    .keys()
                    .map(|p| Reply::Bulk(p.clone()))
                    .collect(),
            ),
            _ => Reply::err("ERR unknown PUBSUB subcommand or wrong number of arguments"),
        }
    }
}

/// A front end's request to its subscriber link: a (P)(UN)SUBSCRIBE of
/// names that are new (or were there), and who waits for the kvd to have
/// taken it.
pub type LinkRequest = (Vec<Vec<u8>>, tokio::sync::oneshot::Sender<()>);

/// Pauses between a link's attempts to reach a kvd.
const LINK_PAUSE_MIN: std::time::Duration = std::time::Duration::from_millis(20);
const LINK_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(1);
/// Replies a link's reader holds before the link takes them.
const LINK_READ_AHEAD: usize = 64;

/// A front end's link for one subscribed client: keeps that client's
/// subscriptions at one kvd's broker (subscribing again after the kvd's
/// connection is lost, at the leader then), forwards the messages to
/// `out`, and acknowledges each request once the kvd confirmed it. Ends
/// when the front end drops `requests` or `out` does not keep up.
pub async fn link(
    mut clerk: crate::clerk::Clerk,
    pick: u64,
    mut requests: mpsc::Receiver<LinkRequest>,
    out: mpsc::Sender<Reply>,
) {
    // What the kvd should have: what the front end sent, in order.
    let mut subs = Subscriptions::default();
    // Acknowledged once the subscriptions are all confirmed again.
    let mut after_replay: Vec<tokio::sync::oneshot::Sender<()>> = Vec::new();
    let mut pauses = tabos_client::retry::Backoff::new(LINK_PAUSE_MIN, LINK_PAUSE_MAX);
    let mirror = |subs: &mut Subscriptions, req: &[Vec<u8>]| {
        if let Some((kind, subscribe)) = Kind::of(&req[0]) {
            if subscribe {
                let _ = subs.subscribe(kind, &req[1..]);
            } else {
                subs.unsubscribe(kind, &req[1..]);
            }
        }
    };
    loop {
        let conn = clerk.link(pick).await;
        let Ok((mut r, mut w)) = conn else {
            // Unreachable for now: take requests meanwhile.
            let pause = pauses.pause();
            let sleep = tokio::time::sleep(pause);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    req = requests.recv() => match req {
                        None => return,
                        Some((req, ack)) => {
                            mirror(&mut subs, &req);
                            after_replay.push(ack);
                        }
                    },
                }
            }
            continue;
        };
        let (tx, mut replies) = mpsc::channel(LINK_READ_AHEAD);
        let reader = tokio::spawn(async move {
            while let Ok(reply) = crate::resp::read_reply(&mut r).await {
                if tx.send(reply).await.is_err() {
                    break;
                }
            }
        });
        let _reader = AbortOnDrop(reader);
        let mut out_bytes = Vec::new();
        let channels: Vec<&[u8]> = std::iter::once(&b"SUBSCRIBE"[..])
            .chain(subs.channels().map(Vec::as_slice))
            .collect();
        let patterns: Vec<&[u8]> = std::iter::once(&b"PSUBSCRIBE"[..])
            .chain(subs.patterns().map(Vec::as_slice))
            .collect();
        for replay in [&channels, &patterns] {
            if replay.len() > 1 {
                crate::resp::encode_request(replay, &mut out_bytes);
            }
        }
        if crate::resp::write_all(&mut w, &out_bytes).await.is_err() {
            continue;
        }
        pauses.reset();
        let mut replaying = subs.count();
        if replaying == 0 {
            for ack in after_replay.drain(..) {
                let _ = ack.send(());
            }
        }
        let mut waiting: std::collections::VecDeque<(usize, tokio::sync::oneshot::Sender<()>)> =
            std::collections::VecDeque::new();
        loop {
            tokio::select! {
                req = requests.recv() => {
                    let Some((req, ack)) = req else { return };
                    mirror(&mut subs, &req);
                    let words: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
                    let mut bytes = Vec::new();
                    crate::resp::encode_request(&words, &mut bytes);
                    waiting.push_back((req.len() - 1, ack));
                    if crate::resp::write_all(&mut w, &bytes).await.is_err() {
                        break;
                    }
                }
                reply = replies.recv() => match reply {
                    None => break,
                    Some(Reply::Push(v)) if is_message(&v) => {
                        if out.try_send(Reply::Push(v)).is_err() {
                            return; // the client is gone or too slow
                        }
                    }
                    Some(Reply::Push(_)) if replaying > 0 => {
                        replaying -= 1;
                        if replaying == 0 {
                            for ack in after_replay.drain(..) {
                                let _ = ack.send(());
                            }
                        }
                    }
                    Some(Reply::Push(_)) => {
                        if let Some((left, _)) = waiting.front_mut() {
                            *left = left.saturating_sub(1);
                            if *left == 0 {
                                if let Some((_, ack)) = waiting.pop_front() {
                                    let _ = ack.send(());
                                }
                            }
                        }
                    }
                    Some(_) => {}
                },
            }
        }
        // Lost: what was waiting is confirmed by the next replay.
        after_replay.extend(waiting.into_iter().map(|(_, ack)| ack));
        tokio::time::sleep(pauses.pause()).await;
    }
}

/// Whether a push is a message (not a confirmation).
fn is_message(v: &[Reply]) -> bool {
    matches!(v.first(), Some(Reply::Bulk(b)) if b == b"message" || b == b"pmessage")
}

/// Stops a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn confirmations_count_as_redis_does() {
        let mut s = Subscriptions::default();
        let c = s
            .subscribe(Kind::Channel, &names(&["a", "a", "b"]))
            .unwrap();
        let counts: Vec<_> = c
            .confirmations
            .iter()
            .map(|r| match r {
                Reply::Push(v) => v[2].clone(),
                _ => Reply::Null,
            })
            .collect();
        assert_eq!(
            counts,
            vec![Reply::Integer(1), Reply::Integer(1), Reply::Integer(2)]
        );
        assert_eq!(c.names, names(&["a", "b"]));
        let c = s.unsubscribe(Kind::Pattern, &[]);
        assert_eq!(
            c.confirmations,
            vec![Reply::Push(vec![
                Reply::text("punsubscribe"),
                Reply::Null,
                Reply::Integer(2)
            ])]
        );
        let c = s.unsubscribe(Kind::Channel, &[]);
        assert_eq!(c.names, names(&["a", "b"]));
        assert_eq!(s.count(), 0);
    }

    #[tokio::test]
    async fn a_message_reaches_channels_and_patterns_and_a_laggard_is_dropped() {
        let mut b = Broker::default();
        let (tx1, mut rx1) = mpsc::channel(BACKLOG_MAX);
        let (tx2, mut rx2) = mpsc::channel(1);
        b.add(1, Some(&tx1), Kind::Channel, &names(&["news"]));
        b.add(2, Some(&tx2), Kind::Pattern, &names(&["n*"]));
        drop((tx1, tx2));
        assert_eq!(b.publish(b"news", b"hi"), 2);
        assert_eq!(b.publish(b"other", b"hi"), 0);
        assert!(matches!(rx1.recv().await, Some(Reply::Push(v)) if v[0] == Reply::text("message")));
        // Subscriber 2 has not read its one slot: the next message drops it.
        assert_eq!(b.publish(b"now", b"x"), 1);
        assert!(rx2.recv().await.is_some());
        assert!(
            rx2.recv().await.is_none(),
            "a dropped subscriber's stream ends"
        );
        assert_eq!(b.pubsub(&names(&["NUMPAT"])), Reply::Integer(0));
    }
}
