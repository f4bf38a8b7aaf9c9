//! The Redis-protocol front end (`tabos kv serve --listen ADDR`): every
//! connection gets its own [`Clerk`], so redis-cli and redis-benchmark
//! drive the whole service — keys spread over every group — as if it were
//! one Redis server, behind the service's password (`redis-cli -a`, or
//! `HELLO 3 AUTH default PW` as redis-py sends). Commands about the
//! connection (HELLO, SELECT, CLIENT, RESET: [`resp::Session`]; PING,
//! ECHO, QUIT, COMMAND, CONFIG) are answered here; DBSIZE, FLUSHALL and
//! INFO ask every group; PUBLISH goes to every group's broker and a
//! subscribing connection gets a link to one ([`pubsub`]).

use tabos_client::Client;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::clerk::Clerk;
use crate::command;
use crate::pubsub;
use crate::resp::{self, Reply};
use crate::{Error, Result};

/// Most client connections the front end serves at once.
pub const CONNECTIONS_MAX: usize = 1_024;

/// Threads the front end serves on unless told: half the machine's cores,
/// at least one — the other half is for the kvds and the node it relays
/// to (on 2 cores, one loop: 9 % more redis-benchmark GETs than the
/// 2-worker runtime it shared, whose workers woke each other per request).
pub fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).clamp(1, crate::loops::LOOPS_MAX)
}

/// Serves `listener` until it fails (or is dropped), its connections
/// spread over `threads` event loops ([`crate::loops`], 1 ..=
/// [`crate::loops::LOOPS_MAX`]). Every connection must first give the
/// service's password (`AUTH`, as Redis's `requirepass`).
pub async fn serve(
    listener: TcpListener,
    client: Client,
    realm: String,
    svc: String,
    threads: usize,
) -> Result<()> {
    let layout = crate::config::Layout::new(&svc)?;
    let password = crate::config::read_password(&client, &realm, &layout).await?;
    resp::accept_loop(
        listener,
        CONNECTIONS_MAX,
        resp::Threads::Loops(threads),
        move |sock, standing| {
            let (client, realm, svc, password) =
                (client.clone(), realm.clone(), svc.clone(), password.clone());
            async move {
                match Clerk::new(&client, &realm, &svc).await {
                    Ok(clerk) => {
                        let mut front = Front {
                            clerk,
                            client,
                            realm,
                            svc,
                            multi: None,
                            watched: Vec::new(),
                            subs: pubsub::Subscriptions::default(),
                            link: None,
                            pushes: None,
                        };
                        resp::serve_connection(sock, &password, &mut front, standing).await;
                    }
                    Err(e) => eprintln!("kv front end: {e}"),
                }
            }
        },
    )
    .await
    .map_err(|e| Error::Invalid(format!("accept: {e}")))
}

/// The keys of a transaction's command (none for PING, ECHO, TIME).
fn transaction_keys(c: &[Vec<u8>]) -> Vec<&[u8]> {
    command::lookup(&c[0])
        .map(|spec| spec.key_positions(c.len()))
        .unwrap_or_default()
        .into_iter()
        .map(|i| c[i].as_slice())
        .collect()
}

/// One connection: its clerk, its transaction if one is open, and its
/// subscriptions.
struct Front {
    clerk: Clerk,
    client: Client,
    realm: String,
    svc: String,
    /// Between MULTI and EXEC: the commands queued.
    multi: Option<Multi>,
    /// WATCHed keys with their kvd's tokens (all in one shard).
    watched: crate::kvd::WatchedKeys,
    subs: pubsub::Subscriptions,
    /// To its subscriber link ([`pubsub::link`]), while it subscribes.
    link: Option<mpsc::Sender<pubsub::LinkRequest>>,
    /// The messages its link forwards.
    pushes: Option<mpsc::Receiver<Reply>>,
}

/// A SCAN cursor's shard is above this bit (its position below).
const SCAN_SHARD_SHIFT: u32 = 48;
/// Shards one SCAN call asks, at most.
pub const SCAN_SHARDS_PER_CALL: usize = 16;

/// Requests a front end's link holds before the front end waits.
const LINK_REQUESTS_MAX: usize = 16;

/// A transaction being queued.
#[derive(Default)]
struct Multi {
    commands: Vec<Vec<Vec<u8>>>,
    /// A command was refused while queueing: EXEC will not run it.
    failed: bool,
}

impl resp::Handler for Front {
    fn handle(&mut self, req: Vec<Vec<u8>>) -> impl std::future::Future<Output = Reply> + Send {
        self.transacting(req)
    }

    fn pushes(&mut self) -> Option<&mut mpsc::Receiver<Reply>> {
        self.pushes.as_mut()
    }

    fn subscriptions(&self) -> usize {
        self.subs.count()
    }

    fn reset(&mut self) -> impl std::future::Future<Output = ()> + Send {
        self.multi = None;
        self.watched.clear();
        self.subs = pubsub::Subscriptions::default();
        self.link = None;
        self.pushes = None;
        async {}
    }
}

/// Redis's thresholds between a type's internal encodings
/// (`hash-max-listpack-entries`, `list-max-listpack-size`, …): the service
/// keeps no such encodings, so CONFIG SET of one is accepted and changes
/// nothing, as a setting with no effect here.
fn encoding_knob(name: &[u8]) -> bool {
    let n = String::from_utf8_lossy(name).to_ascii_lowercase();
    ["hash-", "list-", "set-", "zset-"]
        .iter()
        .any(|t| n.starts_with(t))
        && ["-max-listpack-", "-max-ziplist-", "-max-intset-"]
            .iter()
            .any(|k| n.contains(k))
}

/// The names in every group's answer, once each (a channel or pattern
/// subscribed at several kvds is one).
fn distinct(names: Vec<Reply>) -> std::collections::BTreeSet<Vec<u8>> {
    names
        .into_iter()
        .filter_map(|n| match n {
            Reply::Bulk(b) => Some(b),
            _ => None,
        })
        .collect()
}

/// Commands a front end answers itself, in a transaction too.
fn front_local(cmd: &[u8]) -> bool {
    pubsub::Kind::of(cmd).is_some()
        || cmd.eq_ignore_ascii_case(b"PUBLISH")
        || cmd.eq_ignore_ascii_case(b"PUBSUB")
}

impl Front {
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH, and commands queued in a
    /// transaction; the rest to [`Front::answer`]. A transaction's keys
    /// (its commands' and the watched ones) must be in one shard — it
    /// runs on its kvd as one log entry —, else CROSSSLOT.
    async fn transacting(&mut self, req: Vec<Vec<u8>>) -> Reply {
        let cmd = String::from_utf8_lossy(&req[0]).to_ascii_uppercase();
        let arity_ok = match cmd.as_str() {
            "MULTI" | "EXEC" | "DISCARD" | "UNWATCH" => req.len() == 1,
            "WATCH" => req.len() >= 2,
            _ => true,
        };
        if !arity_ok {
            // In a transaction, it fails the transaction too.
            if let Some(m) = self.multi.as_mut() {
                m.failed = true;
            }
            return command::wrong_arity(&cmd);
        }
        match (cmd.as_str(), self.multi.is_some()) {
            // Refused, and the transaction with it (EXECABORT), as Redis 7.
            ("MULTI" | "WATCH", true) => {
                if let Some(m) = self.multi.as_mut() {
                    m.failed = true;
                }
                Reply::err(if cmd == "MULTI" {
                    "ERR MULTI calls can not be nested"
                } else {
                    "ERR WATCH inside MULTI is not allowed"
                })
            }
            ("MULTI", false) => {
                self.multi = Some(Multi::default());
                Reply::ok()
            }
            ("EXEC", false) => Reply::err("ERR EXEC without MULTI"),
            ("DISCARD", false) => Reply::err("ERR DISCARD without MULTI"),
            ("EXEC", true) => {
                let multi = self.multi.take().unwrap_or_default();
                let watched = std::mem::take(&mut self.watched);
                if multi.failed {
                    return Reply::err(
                        "EXECABORT Transaction discarded because of previous errors.",
                    );
                }
                self.exec(watched, multi.commands).await
            }
            ("DISCARD", true) => {
                self.multi = None;
                self.watched.clear();
                Reply::ok()
            }
            ("WATCH", false) => self.watch(&req[1..]).await,
            ("UNWATCH", _) => {
                self.watched.clear();
                Reply::ok()
            }
            ("QUIT", _) | (_, false) => self.answer(req).await,
            (_, true) => {
                let refused = self.queueable(&req);
                let multi = self.multi.get_or_insert_with(Multi::default);
                match refused {
                    Some(e) => {
                        multi.failed = true;
                        e
                    }
                    None => {
                        multi.commands.push(req);
                        Reply::Simple("QUEUED".into())
                    }
                }
            }
        }
    }

    /// Why `req` cannot join the open transaction, if it cannot.
    fn queueable(&self, req: &[Vec<u8>]) -> Option<Reply> {
        let keys: Vec<&[u8]> = match command::lookup(&req[0]) {
            Some(spec) => {
                if let Err(e) = spec.check_arity(req.len()) {
                    return Some(e);
                }
                if spec.keys == command::Keys::Every {
                    return Some(Reply::err(format!(
                        "ERR {} (of the whole keyspace) cannot be in a transaction here",
                        spec.name
                    )));
                }
                spec.key_positions(req.len())
                    .into_iter()
                    .map(|i| req[i].as_slice())
                    .collect()
            }
            None => match req[0].to_ascii_uppercase().as_slice() {
                _ if front_local(&req[0]) => Vec::new(),
                b"PING" if req.len() <= 2 => Vec::new(),
                b"ECHO" if req.len() == 2 => Vec::new(),
                b"TIME" if req.len() == 1 => Vec::new(),
                _ => {
                    return Some(Reply::err(format!(
                        "ERR unknown command '{}' (or one that cannot be in a transaction here)",
                        String::from_utf8_lossy(&req[0])
                    )))
                }
            },
        };
        let config = self.clerk.config();
        let mut shards = self
            .watched
            .iter()
            .map(|(k, _)| k.as_slice())
            .chain(
                self.multi
                    .iter()
                    .flat_map(|m| m.commands.iter())
                    .flat_map(|c| transaction_keys(c)),
            )
            .chain(keys)
            .map(|k| config.shard_of(k));
        let first = shards.next();
        (!shards.all(|s| Some(s) == first))
            .then(|| Reply::err("CROSSSLOT Keys in request don't hash to the same slot"))
    }

    /// WATCH `keys`: tokens from their kvd, kept until EXEC, DISCARD or
    /// UNWATCH.
    async fn watch(&mut self, keys: &[Vec<u8>]) -> Reply {
        let config = self.clerk.config();
        let mut shards = self
            .watched
            .iter()
            .map(|(k, _)| k.as_slice())
            .chain(keys.iter().map(Vec::as_slice))
            .map(|k| config.shard_of(k));
        let first = shards.next();
        if !shards.all(|s| Some(s) == first) {
            return Reply::err("CROSSSLOT Keys in request don't hash to the same slot");
        }
        let mut req: Vec<&[u8]> = vec![b"TABOS.WATCH"];
        req.extend(keys.iter().map(Vec::as_slice));
        match self.clerk.send_for(Some(&keys[0]), &req, true).await {
            Ok(Reply::Array(tokens)) if tokens.len() == keys.len() => {
                for (k, t) in keys.iter().zip(tokens) {
                    let Reply::Array(t) = t else {
                        return Reply::err("ERR a kvd answered WATCH without tokens");
                    };
                    let [Reply::Integer(tick), Reply::Integer(deadline)] = t.as_slice() else {
                        return Reply::err("ERR a kvd answered WATCH without tokens");
                    };
                    self.watched.push((k.clone(), (*tick as u64, *deadline)));
                }
                Reply::ok()
            }
            Ok(Reply::Error(e)) => Reply::Error(e),
            Ok(_) => Reply::err("ERR a kvd answered WATCH without tokens"),
            Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
            Err(e) => Reply::err(format!("ERR {e}")),
        }
    }

    /// EXEC: the transaction's data commands to the kvd of its shard, in
    /// one request; then what the front end answers itself (PUBLISH,
    /// subscriptions), the replies in the order of the commands.
    async fn exec(
        &mut self,
        watched: crate::kvd::WatchedKeys,
        commands: Vec<Vec<Vec<u8>>>,
    ) -> Reply {
        let (local, remote): (Vec<_>, Vec<_>) = commands
            .into_iter()
            .enumerate()
            .partition(|(_, c)| front_local(&c[0]));
        let mut remote_replies = if remote.is_empty() && watched.is_empty() {
            Vec::new()
        } else {
            let commands: Vec<Vec<Vec<u8>>> = remote.iter().map(|(_, c)| c.clone()).collect();
            match self.exec_at_kvd(watched, &commands).await {
                Reply::Array(replies) if replies.len() == commands.len() => replies,
                Reply::Array(_) => return Reply::err("ERR a kvd answered EXEC out of step"),
                other => return other, // aborted (a watched key changed) or failed
            }
        }
        .into_iter();
        let mut local = local.into_iter().peekable();
        let mut replies = Vec::with_capacity(remote.len() + local.len());
        for (i, _) in &remote {
            while let Some((_, c)) = local.next_if(|(j, _)| j < i) {
                replies.push(self.answer_local(c).await);
            }
            replies.push(remote_replies.next().unwrap_or(Reply::Null));
        }
        for (_, c) in local {
            replies.push(self.answer_local(c).await);
        }
        Reply::Array(replies)
    }

    /// A command [`front_local`] in a transaction: one reply (the
    /// confirmations of several channels in one array).
    async fn answer_local(&mut self, c: Vec<Vec<u8>>) -> Reply {
        match self.answer(c).await {
            Reply::Many(mut v) if v.len() == 1 => v.pop().unwrap_or(Reply::Null),
            Reply::Many(v) => Reply::Array(v),
            r => r,
        }
    }

    /// `TABOS.EXEC` of `watched` and `commands` (all in one shard).
    async fn exec_at_kvd(
        &mut self,
        watched: crate::kvd::WatchedKeys,
        commands: &[Vec<Vec<u8>>],
    ) -> Reply {
        let key: Option<Vec<u8>> = watched.first().map(|(k, _)| k.clone()).or_else(|| {
            commands
                .iter()
                .flat_map(|c| transaction_keys(c))
                .next()
                .map(<[u8]>::to_vec)
        });
        let (n, m) = (watched.len().to_string(), commands.len().to_string());
        let tokens: Vec<(String, String)> = watched
            .iter()
            .map(|(_, (tick, deadline))| (tick.to_string(), deadline.to_string()))
            .collect();
        let counts: Vec<String> = commands.iter().map(|c| c.len().to_string()).collect();
        let mut req: Vec<&[u8]> = vec![b"TABOS.EXEC", n.as_bytes()];
        for ((k, _), (tick, deadline)) in watched.iter().zip(&tokens) {
            req.push(k);
            req.push(tick.as_bytes());
            req.push(deadline.as_bytes());
        }
        req.push(m.as_bytes());
        for (c, count) in commands.iter().zip(&counts) {
            req.push(count.as_bytes());
            req.extend(c.iter().map(Vec::as_slice));
        }
        match self.clerk.send_for(key.as_deref(), &req, false).await {
            Ok(r) => r,
            Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
            Err(e) => Reply::err(format!("ERR {e}")),
        }
    }

    /// `(P)SUBSCRIBE`/`(P)UNSUBSCRIBE`: answered from the connection's own
    /// subscriptions, once its link's kvd has taken the change (so a
    /// message published after the reply reaches it); messages the link
    /// forwarded before come first, as Redis sends them.
    async fn subscription(
        &mut self,
        kind: pubsub::Kind,
        subscribe: bool,
        names: &[Vec<u8>],
    ) -> Reply {
        if subscribe && names.is_empty() {
            return command::wrong_arity(if kind == pubsub::Kind::Channel {
                "subscribe"
            } else {
                "psubscribe"
            });
        }
        let change = if subscribe {
            match self.subs.subscribe(kind, names) {
                Ok(c) => c,
                Err(e) => return e,
            }
        } else {
            self.subs.unsubscribe(kind, names)
        };
        if !change.names.is_empty() {
            if self.link.is_none() && subscribe {
                match Clerk::new(&self.client, &self.realm, &self.svc).await {
                    Ok(clerk) => {
                        let (req_tx, req_rx) = mpsc::channel(LINK_REQUESTS_MAX);
                        let (out_tx, out_rx) = mpsc::channel(pubsub::BACKLOG_MAX);
                        let pick = crate::config::random("a subscriber's group")
                            .map(u64::from_le_bytes)
                            .unwrap_or_default();
                        tokio::spawn(pubsub::link(clerk, pick, req_rx, out_tx));
                        self.link = Some(req_tx);
                        self.pushes = Some(out_rx);
                    }
                    Err(e) => {
                        // Nothing subscribed: as it was.
                        self.subs.unsubscribe(kind, &change.names);
                        return Reply::err(format!("TRYAGAIN {e}"));
                    }
                }
            }
            if let Some(link) = &self.link {
                let verb: &[u8] = match (kind, subscribe) {
                    (pubsub::Kind::Channel, true) => b"SUBSCRIBE",
                    (pubsub::Kind::Channel, false) => b"UNSUBSCRIBE",
                    (pubsub::Kind::Pattern, true) => b"PSUBSCRIBE",
                    (pubsub::Kind::Pattern, false) => b"PUNSUBSCRIBE",
                };
                let mut req = vec![verb.to_vec()];
                req.extend(change.names.iter().cloned());
                let (ack, acked) = oneshot::channel();
                // Not taken in time (the kvd is changing leader): it is
                // when the link is back.
                let _ = tokio::time::timeout(crate::clerk::CALL_TIMEOUT, async {
                    if link.send((req, ack)).await.is_ok() {
                        let _ = acked.await;
                    }
                })
                .await;
            }
        }
        let mut replies = Vec::new();
        if let Some(rx) = self.pushes.as_mut() {
            while let Ok(m) = rx.try_recv() {
                replies.push(m);
            }
        }
        if self.subs.count() == 0 {
            self.link = None;
            self.pushes = None;
        }
        replies.extend(change.confirmations);
        Reply::Many(replies)
    }

    /// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]` over every
    /// shard in turn: the cursor is the shard above its
    /// [`crate::kvd::scan_position`] (0: the start, and the end). One call
    /// goes on to the next shards until it has `count` keys or has asked
    /// [`SCAN_SHARDS_PER_CALL`] of them.
    async fn scan(&mut self, args: &[Vec<u8>]) -> Reply {
        let Some(cursor) = args.first() else {
            return command::wrong_arity("scan");
        };
        let Some(cursor) = std::str::from_utf8(cursor)
            .ok()
            .and_then(|c| c.parse::<u64>().ok())
        else {
            return Reply::err("ERR invalid cursor");
        };
        let (mut pattern, mut count, mut kind) = (Vec::new(), 10u64, Vec::new());
        let mut opts = args[1..].chunks(2);
        for opt in opts.by_ref() {
            match (opt[0].to_ascii_uppercase().as_slice(), opt.get(1)) {
                (b"MATCH", Some(p)) => pattern = p.clone(),
                (b"COUNT", Some(n)) => match resp::parse_integer(n) {
                    Some(n) if n >= 1 => count = n as u64,
                    _ => return Reply::err("ERR value is not an integer or out of range"),
                },
                (b"TYPE", Some(t)) => kind = t.clone(),
                _ => return Reply::err("ERR syntax error"),
            }
        }
        let shards = self.clerk.config().shards.len() as u64;
        let (mut s, mut pos) = (
            cursor >> SCAN_SHARD_SHIFT,
            cursor & ((1 << SCAN_SHARD_SHIFT) - 1),
        );
        if s >= shards || pos > 1 << crate::kvd::SCAN_POSITION_BITS {
            return Reply::err("ERR invalid cursor");
        }
        let mut keys = Vec::new();
        let count_text = count.min(crate::kvd::SCAN_REPLY_MAX as u64).to_string();
        for _ in 0..SCAN_SHARDS_PER_CALL {
            let (s_text, pos_text) = (s.to_string(), pos.to_string());
            let req: [&[u8]; 6] = [
                b"TABOS.SCAN",
                s_text.as_bytes(),
                pos_text.as_bytes(),
                count_text.as_bytes(),
                &pattern,
                &kind,
            ];
            match self.clerk.send_to_shard(s as u32, &req).await {
                Ok(Reply::Array(r)) => match r.as_slice() {
                    [Reply::Integer(next), Reply::Array(found)] => {
                        keys.extend(found.iter().cloned());
                        if *next >= 0 {
                            pos = *next as u64;
                        } else {
                            (s, pos) = (s + 1, 0);
                        }
                    }
                    _ => return Reply::err("ERR a kvd answered SCAN without keys"),
                },
                Ok(Reply::Error(e)) => return Reply::Error(e),
                Ok(_) => return Reply::err("ERR a kvd answered SCAN without keys"),
                Err(Error::Unavailable(e)) => return Reply::err(format!("TRYAGAIN {e}")),
                Err(e) => return Reply::err(format!("ERR {e}")),
            }
            if s == shards || keys.len() as u64 >= count {
                break;
            }
        }
        let next = if s == shards {
            0
        } else {
            (s << SCAN_SHARD_SHIFT) | pos
        };
        Reply::Array(vec![Reply::text(next.to_string()), Reply::Array(keys)])
    }

    /// `PUBSUB CHANNELS|NUMSUB|NUMPAT` over every group's broker.
    async fn pubsub(&mut self, req: &[Vec<u8>]) -> Reply {
        let sub = req.get(1).map(|a| a.to_ascii_uppercase());
        let mut ask: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
        if sub.as_deref() == Some(b"NUMPAT") && req.len() == 2 {
            ask = vec![b"PUBSUB", b"PATTERNS"];
        }
        let reply = match sub.as_deref() {
            Some(b"CHANNELS" | b"NUMSUB" | b"NUMPAT") => self.clerk.ask_every(&ask).await,
            _ => {
                return Reply::err(
                    "ERR unknown PUBSUB subcommand (tabos has CHANNELS, NUMSUB, NUMPAT)",
                )
            }
        };
        match (sub.as_deref(), reply) {
            (Some(b"CHANNELS"), Ok(Reply::Array(names))) => {
                Reply::Array(distinct(names).into_iter().map(Reply::Bulk).collect())
            }
            (Some(b"NUMPAT"), Ok(Reply::Array(names))) => {
                Reply::Integer(distinct(names).len() as i64)
            }
            (Some(b"NUMSUB"), Ok(Reply::Array(parts))) => {
                // Each group's [channel, n, …], in the order asked.
                let channels = &req[2..];
                let mut counts = vec![0i64; channels.len()];
                for (i, r) in parts.iter().enumerate() {
                    if let (1, Reply::Integer(n)) = (i % 2, r) {
                        counts[(i / 2) % channels.len().max(1)] += n;
                    }
                }
                Reply::Array(
                    channels
                        .iter()
                        .zip(counts)
                        .flat_map(|(c, n)| [Reply::Bulk(c.clone()), Reply::Integer(n)])
                        .collect(),
                )
            }
            (Some(b"NUMSUB"), Ok(Reply::Simple(_))) => Reply::Array(Vec::new()),
            (_, Ok(Reply::Error(e))) => Reply::Error(e),
            (_, Ok(r)) => Reply::err(format!("ERR unexpected answer to PUBSUB: {r:?}")),
            (_, Err(Error::Unavailable(e))) => Reply::err(format!("TRYAGAIN {e}")),
            (_, Err(e)) => Reply::err(format!("ERR {e}")),
        }
    }

    async fn answer(&mut self, req: Vec<Vec<u8>>) -> Reply {
        let cmd = String::from_utf8_lossy(&req[0]).to_ascii_uppercase();
        match (cmd.as_str(), req.len()) {
            ("PING", 1) => Reply::Simple("PONG".into()),
            ("PING", 2) | ("ECHO", 2) => Reply::Bulk(req[1].clone()),
            ("QUIT", _) => Reply::ok(),
            ("TIME", 1) => crate::resp::time_reply(),
            ("SCAN", _) => self.scan(&req[1..]).await,
            ("RANDOMKEY", 1) => match self.clerk.random_key().await {
                Ok(r) => r,
                Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
                Err(e) => Reply::err(format!("ERR {e}")),
            },
            ("PUBLISH", 3) => Reply::Integer(self.clerk.publish(&req[1], &req[2]).await),
            ("PUBLISH", _) => command::wrong_arity("publish"),
            ("PUBSUB", _) => self.pubsub(&req).await,
            (sub, _) if pubsub::Kind::of(sub.as_bytes()).is_some() => {
                let (kind, subscribe) =
                    pubsub::Kind::of(sub.as_bytes()).unwrap_or((pubsub::Kind::Channel, true));
                self.subscription(kind, subscribe, &req[1..]).await
            }
            ("COMMAND", _) => Reply::Array(Vec::new()),
            // No settings are changed from a connection: CONFIG GET finds
            // none, CONFIG SET refuses as Redis does an unknown one.
            ("CONFIG", _) => match req.get(1).map(|s| s.to_ascii_uppercase()).as_deref() {
                Some(b"GET") => Reply::Array(
                    req[2..]
                        .iter()
                        .filter(|n| encoding_knob(n))
                        .flat_map(|n| [Reply::Bulk(n.to_ascii_lowercase()), Reply::text("0")])
                        .collect(),
                ),
                Some(b"RESETSTAT") => Reply::ok(),
                Some(b"SET")
                    if req.len() >= 4
                        && req.len().is_multiple_of(2)
                        && req[2..].chunks(2).all(|kv| encoding_knob(&kv[0])) =>
                {
                    Reply::ok()
                }
                Some(b"SET") => Reply::err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                    String::from_utf8_lossy(req.get(2).map_or(&[][..], Vec::as_slice))
                )),
                _ => Reply::err("ERR unknown CONFIG subcommand (tabos has GET, SET, RESETSTAT)"),
            },
            // The service runs no functions: there are none to list or
            // flush, and none can be loaded.
            ("FUNCTION", _) => match req.get(1).map(|s| s.to_ascii_uppercase()).as_deref() {
                Some(b"FLUSH") => Reply::ok(),
                Some(b"LIST") => Reply::Array(Vec::new()),
                _ => Reply::err("ERR tabos's key-value service runs no functions"),
            },
            ("DBSIZE", 1) => match self.clerk.dbsize().await {
                Ok(n) => Reply::Integer(n),
                Err(e) => Reply::err(format!("TRYAGAIN {e}")),
            },
            ("INFO", _) => {
                let keys = self.clerk.dbsize().await.unwrap_or(-1);
                let c = self.clerk.config();
                Reply::Bulk(
                    format!(
                        "# Server\r\nredis_version:7.0.0-tabos\r\ntabos_kv_service:{}\r\n\
                         # Keyspace\r\ntabos_kv_config_epoch:{}\r\ntabos_kv_shards:{}\r\n\
                         tabos_kv_groups:{}\r\ndb0:keys={keys}\r\n",
                        self.svc,
                        c.epoch,
                        c.shards.len(),
                        c.groups.len()
                    )
                    .into_bytes(),
                )
            }
            _ => {
                let args: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
                match self.clerk.call(&args).await {
                    Ok(r) => r,
                    Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
                    Err(e) => Reply::err(format!("ERR {e}")),
                }
            }
        }
    }
}
