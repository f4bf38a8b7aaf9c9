//! A kvd (σOS section 5.2): an LC proc serving, while it leads its group,
//! the shards the config gives the group, in memory, over the Redis
//! protocol.
//!
//! * **Leading.** Every kvd of group `g` campaigns in `/kv/<svc>/groups/g`
//!   with its address as the leader symlink's target; the winner serves,
//!   the others stand by. It serves reads only while its session surely
//!   lives ([`Session::valid_until`]), so a leader paused past its TTL —
//!   whose successor may already have taken its shards — answers nothing
//!   stale when it wakes; it exits once the session is known lost.
//! * **Commands.** Each is [`command`]'s: a read runs against memory, a
//!   write's effects are computed there too. A key past its deadline is
//!   gone at once for every command; the reaper deletes it durably within
//!   [`REAP_PERIOD`] or so (deadlines are in the log, so they survive a
//!   kill and a move).
//! * **Writes.** Requests queue writes for one flusher, which computes
//!   their effects (INCR reads what earlier writes of the batch left),
//!   appends them as one entry of the group's log — whatever shards they
//!   touch — fenced by the group's log epoch, and only then applies them
//!   in memory and replies. So an acknowledged write is in the kernel
//!   database (surviving a SIGKILL of the kvd), and no read sees a write
//!   before it is durable. An append refused or with its outcome unknown
//!   drops every shard: the kvd takes its group's log again (a new epoch
//!   refuses an append still on its way) and loads its shards again (the
//!   log is the truth); one refused for a stale epoch means another kvd
//!   leads, and it exits. Every so many entries it snapshots its shards
//!   and deletes the entries no shard's pointer needs.
//! * **The config.** It watches the service's directory and, on a new
//!   config, drops the shards no longer its group's (and says so in
//!   `groups/g/applied` once no flush with their writes is on its way —
//!   the balancer waits for it before moving them), then takes and loads
//!   the shards newly its group's.
//! * **Load.** Every [`LOAD_PERIOD`] it records its requests per second in
//!   `groups/g/load`, which the balancer reads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tabos_client::names::{Election, Group, Session, WatchMode};
use tabos_client::proto::Fence;
use tabos_client::retry::Backoff;
use tabos_client::Client;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::command::{self, Keyspace};
use crate::config::{Config, Layout};
use crate::pubsub;
use crate::resp::{self, Reply};
use crate::shard::{self, Contents, Op, RequestId, Taken};
use crate::{Ctx, Error, Result};

/// The TTL of a kvd's session: how long a dead leader holds its group.
pub const SESSION_TTL: Duration = Duration::from_secs(2);
/// The first pause before a lost watch or a shard not taken is tried
/// again.
const PAUSE_FIRST: Duration = Duration::from_millis(20);
/// The longest such pause.
const PAUSE_MAX: Duration = Duration::from_secs(2);
/// Reads stop this long before the session could have expired.
const LEASE_MARGIN: Duration = Duration::from_millis(300);
/// How often a kvd records its load.
pub const LOAD_PERIOD: Duration = Duration::from_secs(1);
/// Most writes one flush takes.
pub const FLUSH_WRITES_MAX: usize = 4_096;
/// Most client connections a kvd serves at once.
pub const CONNECTIONS_MAX: usize = 1_024;
/// Event loops a kvd serves its connections on ([`crate::loops`]): one,
/// as Redis serves its clients on one thread — a group grows by groups,
/// not threads. Its reads are answered there without waking another
/// thread (its writes go to the flusher on the process's runtime): on a
/// kvd pinned to one core, 10 % more GETs and 9 % more SETs through the
/// front end than on the process's 2-worker runtime.
pub const CONNECTION_LOOPS: usize = 1;
/// Most writes waiting for a flush (requests wait for room beyond it).
const PENDING_MAX: usize = 16_384;
/// How often the reaper deletes keys past their deadline (Redis's
/// active expiry runs ten times a second too).
pub const REAP_PERIOD: Duration = Duration::from_millis(100);
/// Most keys watched at once on a kvd (`WATCH` past it is refused).
pub const WATCHES_MAX: usize = 65_536;
/// How long a `WATCH` holds without being renewed: a key watched longer
/// counts as touched (its transaction's EXEC fails, as after a write).
pub const WATCH_KEEP: Duration = Duration::from_secs(60);
/// Most commands in one transaction.
pub const MULTI_COMMANDS_MAX: usize = 1_024;
/// Most keys one kvd's answer to KEYS holds.
pub const KEYS_REPLY_MAX: usize = 100_000;
/// Keys one `SCAN` step returns at most (whatever its COUNT).
pub const SCAN_REPLY_MAX: usize = 10_000;
/// A shard is scanned in at most about this many steps: each step reads
/// every key of the shard, so a step returns at least this share of them.
pub const SCAN_STEPS_PER_SHARD: usize = 64;
/// Most keys one reaping deletes.
pub const REAP_KEYS_MAX: usize = 1_024;

/// A group's load, as its leader records it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Load {
    /// The leader's address.
    pub addr: String,
    /// Requests served per second over the last period.
    pub ops_per_s: f64,
    /// Keys in its shards.
    pub keys: u64,
    /// Shards it serves.
    pub shards: Vec<u32>,
    /// When (µs since the epoch).
    pub at_us: i64,
}

/// A shard being served.
struct Served {
    contents: Contents,
    taken: Taken,
}

/// What the kvd serves.
struct State {
    config: Config,
    shards: HashMap<u32, Served>,
    /// The fence of the group's log, taken when it began to lead (or
    /// took the log again).
    fence: Fence,
    /// The sequence number of the group log's next entry.
    next_seq: u64,
    /// Entries appended since the last snapshots.
    log_len: usize,
    /// Snapshots are being written (one round at a time).
    compacting: bool,
}

/// A write waiting for the flusher.
struct Write {
    kind: WriteKind,
    reply: oneshot::Sender<Reply>,
}

enum WriteKind {
    /// A data command (its words, the command first); with a clerk's
    /// request id, applied at most once per shard (SET and MSET).
    Command(Vec<Vec<u8>>, Option<RequestId>),
    /// Keys the reaper found past their deadline: deleted durably if
    /// they still are.
    Reap(Vec<Vec<u8>>),
    /// Every key of every shard it serves goes (FLUSHALL).
    Flush,
    /// A transaction (MULTI … EXEC), all its keys in one shard: its
    /// commands run one after another in one batch, one log entry — or
    /// none of them if a watched key was touched since its token.
    Multi {
        watched: Vec<(Vec<u8>, (u64, i64))>,
        commands: Vec<Vec<Vec<u8>>>,
    },
}

impl WriteKind {
    fn keys(&self) -> Vec<&[u8]> {
        match self {
            WriteKind::Command(args, _) => command::lookup(&args[0])
                .map(|spec| {
                    spec.key_positions(args.len())
                        .into_iter()
                        .map(|i| args[i].as_slice())
                        .collect()
                })
                .unwrap_or_default(),
            WriteKind::Reap(keys) => keys.iter().map(Vec::as_slice).collect(),
            WriteKind::Flush => Vec::new(),
            WriteKind::Multi { watched, commands } => watched
                .iter()
                .map(|(k, _)| k.as_slice())
                .chain(commands.iter().flat_map(|args| {
                    command::lookup(&args[0])
                        .map(|spec| spec.key_positions(args.len()))
                        .unwrap_or_default()
                        .into_iter()
                        .map(|i| args[i].as_slice())
                }))
                .collect(),
        }
    }
}

pub struct Kvd {
    client: Client,
    realm: String,
    layout: Layout,
    group: u32,
    addr: String,
    session: Session,
    state: Mutex<State>,
    writes: mpsc::Sender<Write>,
    ops: AtomicU64,
    /// Asks for the group's log and every shard to be taken and loaded
    /// again (an append refused or with its outcome unknown).
    resync: mpsc::UnboundedSender<()>,
    /// Held by the flusher through each flush: a config that drops shards
    /// is recorded as applied only once no flush with their writes is on
    /// its way.
    flushing: tokio::sync::Mutex<()>,
    /// Its group was taken out of service: it exits.
    retired: tokio::sync::Notify,
    /// An append was refused for a stale epoch: another kvd leads; it
    /// exits.
    deposed: tokio::sync::Notify,
    /// What every connection must give first ([`resp::Gate`]).
    password: String,
    /// Group log entries per shard served before its shards are
    /// snapshotted (the policy's, read when it began to lead).
    compact_at: usize,
    /// The watched keys (`WATCH`), each with when it was last touched.
    watches: Mutex<Watches>,
    /// Its subscribers ([`pubsub`]).
    broker: Mutex<pubsub::Broker>,
}

/// Keys watched for transactions: each with the tick of the kvd's touch
/// clock at which it last changed (or was first watched), and until when
/// the watch holds. A write to a watched key, its deadline passing and
/// being reaped, a FLUSHALL of its shard, its shard leaving or being
/// loaded again all touch it; a token from `TABOS.WATCH` that no longer
/// matches fails the EXEC.
#[derive(Default)]
struct Watches {
    clock: u64,
    keys: HashMap<Vec<u8>, Watched>,
}

struct Watched {
    touched: u64,
    until: tokio::time::Instant,
}

impl Watches {
    fn touch(&mut self, k: &[u8]) {
        if let Some(w) = self.keys.get_mut(k) {
            self.clock += 1;
            w.touched = self.clock;
        }
    }

    /// Touches every watched key of shard `s`.
    fn touch_shard(&mut self, config: &Config, s: u32) {
        let keys: Vec<Vec<u8>> = self
            .keys
            .keys()
            .filter(|k| config.shard_of(k) == s)
            .cloned()
            .collect();
        for k in keys {
            self.touch(&k);
        }
    }

    /// Whether key `k` is as it was when `token` was given.
    fn untouched(&self, k: &[u8], token: u64) -> bool {
        self.keys.get(k).is_some_and(|w| w.touched == token)
    }
}

/// Runs kvd of group `group` until its session is lost or it fails.
pub async fn run(ctx: Ctx, group: u32) -> Result<()> {
    let host = std::env::var("TABOS_KV_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let listener = TcpListener::bind((host.as_str(), 0))
        .await
        .map_err(|e| Error::Invalid(format!("cannot listen on {host}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Invalid(e.to_string()))?
        .to_string();
    let session = Session::open(&ctx.client, &ctx.realm, &ctx.pid, SESSION_TTL).await?;
    // A member of its group while it lives (the balancer counts them).
    let members = ctx.layout.members(group);
    ctx.client
        .clone()
        .name_mkdir_all(&ctx.realm, &members)
        .await?;
    Group::new(&ctx.client, &ctx.realm, &members)
        .join(&session, &ctx.pid, addr.clone().into_bytes())
        .await?;
    let dir = ctx.layout.group(group);
    let election = Election::new(&ctx.client, &ctx.realm, &dir, &dir);
    eprintln!("kvd {}: group {group} standing by at {addr}", ctx.pid);
    tokio::select! {
        won = election.campaign(&session, &addr) => { won?; }
        _ = session.lost() => return Err(Error::Invalid("the session was lost".into())),
    }
    eprintln!("kvd {}: leads group {group}", ctx.pid);
    let mut c = ctx.client.clone();
    let config = Config::from_json(&c.name_get(&ctx.realm, &ctx.layout.config()).await?.data)?;
    if !config.groups.contains(&group) {
        eprintln!("kvd {}: group {group} is no longer in service", ctx.pid);
        let _ = session.close().await;
        return Ok(());
    }
    let compact_at = match c.name_get(&ctx.realm, &ctx.layout.policy()).await {
        Ok(e) => crate::config::Policy::from_json(&e.data)?.compact_at,
        Err(e) if e.code() == Some(tonic::Code::NotFound) => shard::LOG_COMPACT_AT,
        Err(e) => return Err(e.into()),
    } as usize;
    let (writes, pending) = mpsc::channel(PENDING_MAX);
    let (resync, resyncs) = mpsc::unbounded_channel();
    // Its predecessors' appends are refused from here on.
    let fence = shard::take_group(&mut c, &ctx.realm, &ctx.layout, group).await?;
    let log = shard::GroupLog::read(&mut c, &ctx.realm, &ctx.layout, group).await?;
    let kvd = Arc::new(Kvd {
        client: ctx.client.clone(),
        realm: ctx.realm.clone(),
        layout: ctx.layout.clone(),
        group,
        addr,
        session,
        state: Mutex::new(State {
            config: config.clone(),
            shards: HashMap::new(),
            fence,
            next_seq: log.head() + 1,
            log_len: log.len(),
            compacting: false,
        }),
        writes,
        ops: AtomicU64::new(0),
        resync,
        flushing: tokio::sync::Mutex::new(()),
        retired: tokio::sync::Notify::new(),
        deposed: tokio::sync::Notify::new(),
        password: crate::config::read_password(&ctx.client, &ctx.realm, &ctx.layout).await?,
        compact_at,
        watches: Mutex::new(Watches::default()),
        broker: Mutex::new(pubsub::Broker::default()),
    });
    kvd.apply_config(config, Some(&log)).await?;
    drop(log);
    let tasks = [
        tokio::spawn(kvd.clone().flusher(pending)),
        tokio::spawn(kvd.clone().follow_config()),
        tokio::spawn(kvd.clone().resyncer(resyncs)),
        tokio::spawn(kvd.clone().report_load()),
        tokio::spawn(kvd.clone().reaper()),
    ];
    let accept = kvd.clone().accept(listener);
    let out = tokio::select! {
        _ = kvd.session.lost() => Err(Error::Invalid("the session was lost: another kvd leads".into())),
        r = accept => r,
        _ = kvd.retired.notified() => {
            eprintln!("kvd {}: group {group} is no longer in service", ctx.pid);
            Ok(())
        }
        _ = kvd.deposed.notified() => Err(Error::Invalid(
            "an append was refused for a stale epoch: another kvd leads".into(),
        )),
    };
    for t in tasks {
        t.abort();
    }
    // Its leadership and membership go at once, not after the TTL.
    let _ = c.close_session(&ctx.realm, kvd.session.id()).await;
    out
}

impl Kvd {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The broker (never held with another lock).
    fn broker(&self) -> std::sync::MutexGuard<'_, pubsub::Broker> {
        self.broker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The watches (taken after the state's lock when both are held).
    fn watches(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves `config`: drops the shards no longer the group's, records
    /// that it did, takes and loads the new ones.
    /// (`known`: the group's log, if read since these shards were last
    /// served.)
    async fn apply_config(&self, config: Config, known: Option<&shard::GroupLog>) -> Result<()> {
        let mine = config.shards_of(self.group);
        let epoch = config.epoch;
        let retired = !config.groups.contains(&self.group);
        {
            let mut st = self.lock();
            if config.epoch < st.config.epoch {
                return Ok(());
            }
            let gone: Vec<u32> = st
                .shards
                .keys()
                .filter(|s| !mine.contains(s))
                .copied()
                .collect();
            let mut watches = self.watches();
            for s in gone {
                watches.touch_shard(&st.config, s);
                st.shards.remove(&s);
            }
            drop(watches);
            st.config = config;
        }
        // A flush begun before the drop may hold their writes: it ends
        // before the balancer is told (their mover loads them after).
        drop(self.flushing.lock().await);
        if retired {
            self.retired.notify_one();
        }
        let mut c = self.client.clone();
        c.name_set(
            &self.realm,
            &self.layout.applied(self.group),
            epoch.to_string().into_bytes(),
            None,
            None,
        )
        .await?;
        for s in mine {
            if self.lock().shards.contains_key(&s) {
                continue;
            }
            self.take_shard(s, known).await?;
        }
        Ok(())
    }

    /// Takes and loads shard `s` (if the config still gives it to the
    /// group). One with no pointer into the group's log yet is given one
    /// before it is served — empty if it has no ops, else a snapshot (what
    /// was written before the group logs, or a pointer into another
    /// group's log, is folded in) — so its writes from here on are found.
    async fn take_shard(&self, s: u32, known: Option<&shard::GroupLog>) -> Result<()> {
        let mut c = self.client.clone();
        shard::prepare(&mut c, &self.realm, &self.layout, s).await?;
        let taken = shard::take(&mut c, &self.realm, &self.layout, s).await?;
        let mut loaded = shard::load(&mut c, &self.realm, &self.layout, s, known).await?;
        if loaded.group != Some(self.group) || loaded.legacy {
            // Nothing of it is in the group's log up to here.
            let upto = self.lock().next_seq - 1;
            if loaded.group.is_none() && !loaded.legacy {
                shard::point_empty(&mut c, &self.realm, &self.layout, &taken, self.group, upto)
                    .await?;
            } else {
                loaded.contents.forget_old(now_us());
                shard::snapshot(
                    &mut c,
                    &self.realm,
                    &self.layout,
                    &taken,
                    self.group,
                    upto,
                    &loaded.contents,
                )
                .await?;
            }
        }
        let served = Served {
            contents: loaded.contents,
            taken,
        };
        let mut st = self.lock();
        if st.config.serves(self.group, s) {
            // Loaded again: what was watched of it may have changed.
            self.watches().touch_shard(&st.config, s);
            st.shards.insert(s, served);
        }
        Ok(())
    }

    /// Takes the group's log again (a new epoch: an append of this kvd's
    /// still on its way is refused) and every shard of the group.
    async fn retake(&self) -> Result<()> {
        let mut c = self.client.clone();
        let fence = shard::take_group(&mut c, &self.realm, &self.layout, self.group).await?;
        let log = shard::GroupLog::read(&mut c, &self.realm, &self.layout, self.group).await?;
        let mine = {
            let mut st = self.lock();
            st.fence = fence;
            st.next_seq = log.head() + 1;
            st.log_len = log.len();
            st.config.shards_of(self.group)
        };
        for s in mine {
            if !self.lock().shards.contains_key(&s) {
                self.take_shard(s, Some(&log)).await?;
            }
        }
        Ok(())
    }

    async fn resyncer(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<()>) {
        while rx.recv().await.is_some() {
            while rx.try_recv().is_ok() {}
            let mut pauses = Backoff::new(PAUSE_FIRST, PAUSE_MAX);
            while let Err(e) = self.retake().await {
                eprintln!("kvd {}: cannot take the group's log again: {e}", self.addr);
                pauses.wait().await;
            }
        }
    }

    /// Watches the service's directory; applies each new config.
    async fn follow_config(self: Arc<Self>) {
        let mut pauses = Backoff::new(PAUSE_FIRST, PAUSE_MAX);
        loop {
            let mut c = self.client.clone();
            let stream = c
                .watch(&self.realm, self.layout.root(), WatchMode::Dir)
                .await;
            // Whatever happened while no watch was open is read now.
            self.reread_config().await;
            if let Ok(mut stream) = stream {
                pauses.reset();
                while let Ok(Some(ev)) = stream.message().await {
                    if ev.path == self.layout.config() {
                        self.reread_config().await;
                    }
                }
            }
            pauses.wait().await;
        }
    }

    async fn reread_config(&self) {
        let mut c = self.client.clone();
        let got = c.name_get(&self.realm, &self.layout.config()).await;
        let config = match got
            .map_err(Error::from)
            .and_then(|e| Config::from_json(&e.data))
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("kvd {}: cannot read the config: {e}", self.addr);
                return;
            }
        };
        if config.epoch > self.lock().config.epoch {
            if let Err(e) = self.apply_config(config, None).await {
                eprintln!("kvd {}: cannot apply the config: {e}", self.addr);
            }
        }
    }

    async fn report_load(self: Arc<Self>) {
        let mut tick = tokio::time::interval(LOAD_PERIOD);
        let mut last = 0;
        loop {
            tick.tick().await;
            let ops = self.ops.load(Ordering::Relaxed);
            let (keys, shards) = {
                let st = self.lock();
                let mut shards: Vec<u32> = st.shards.keys().copied().collect();
                shards.sort_unstable();
                (
                    st.shards
                        .values()
                        .map(|s| s.contents.live_len(now_ms()) as u64)
                        .sum(),
                    shards,
                )
            };
            let load = Load {
                addr: self.addr.clone(),
                ops_per_s: (ops - last) as f64 / LOAD_PERIOD.as_secs_f64(),
                keys,
                shards,
                at_us: now_us(),
            };
            last = ops;
            let mut c = self.client.clone();
            let data = serde_json::to_vec(&load).expect("a load serializes");
            if let Err(e) = c
                .name_set(&self.realm, &self.layout.load(self.group), data, None, None)
                .await
            {
                eprintln!("kvd {}: cannot record its load: {e}", self.addr);
            }
        }
    }

    async fn accept(self: Arc<Self>, listener: TcpListener) -> Result<()> {
        resp::accept_loop(
            listener,
            CONNECTIONS_MAX,
            resp::Threads::Loops(CONNECTION_LOOPS),
            move |sock, standing| {
                let me = self.clone();
                async move {
                    let password = me.password.clone();
                    let mut conn = Conn {
                        kvd: me,
                        id: CONN_IDS.fetch_add(1, Ordering::Relaxed),
                        subs: pubsub::Subscriptions::default(),
                        pushes: None,
                    };
                    resp::serve_connection(sock, &password, &mut conn, standing).await;
                }
            },
        )
        .await
        .map_err(|e| Error::Invalid(format!("accept: {e}")))
    }

    async fn handle(&self, req: Vec<Vec<u8>>) -> Reply {
        self.ops.fetch_add(1, Ordering::Relaxed);
        let cmd = String::from_utf8_lossy(&req[0]).to_ascii_uppercase();
        let args = &req[1..];
        match cmd.as_str() {
            "PING" => match args {
                [] => Reply::Simple("PONG".into()),
                [m] => Reply::Bulk(m.clone()),
                _ => command::wrong_arity("ping"),
            },
            "ECHO" if args.len() == 1 => Reply::Bulk(args[0].clone()),
            "ECHO" => command::wrong_arity("echo"),
            "QUIT" => Reply::ok(),
            "TIME" if args.is_empty() => resp::time_reply(),
            "COMMAND" | "CONFIG" => Reply::Array(Vec::new()),
            "INFO" => Reply::Bulk(self.info().into_bytes()),
            "PUBLISH" => match args {
                [channel, message] => Reply::Integer(self.broker().publish(channel, message)),
                _ => command::wrong_arity("publish"),
            },
            "PUBSUB" => self.broker().pubsub(args),
            // A clerk's SET or MSET, applied at most once per shard
            // however often it is sent (`TABOS.ONCE <client> <seq> SET k v`).
            "TABOS.ONCE" => match args {
                [client, seq, rest @ ..] if !rest.is_empty() => {
                    let inner = String::from_utf8_lossy(&rest[0]).to_ascii_uppercase();
                    let plain = inner == "MSET" || (inner == "SET" && rest.len() == 3);
                    match (parse_u64(client), parse_u64(seq), plain) {
                        (Some(client), Some(seq), true) => {
                            self.data(rest.to_vec(), Some(RequestId { client, seq }))
                                .await
                        }
                        (Some(_), Some(_), false) => {
                            Reply::err("ERR TABOS.ONCE takes only SET k v or MSET")
                        }
                        _ => Reply::err("ERR TABOS.ONCE takes a client id and a sequence number"),
                    }
                }
                _ => command::wrong_arity("tabos.once"),
            },
            // A front end's SCAN, one shard at a time (see [`Kvd::scan`]).
            "TABOS.SCAN" => self.scan(args),
            // A front end's WATCH: a token per key (all in shards it
            // serves), which its EXEC gives back.
            "TABOS.WATCH" if !args.is_empty() => self.watch(args),
            // A front end's EXEC (see [`parse_exec`]).
            "TABOS.EXEC" => match parse_exec(args) {
                Ok((watched, commands)) => {
                    if !self.leading() {
                        return Reply::err("TRYAGAIN this kvd's lease is running out");
                    }
                    let kind = WriteKind::Multi { watched, commands };
                    let together = {
                        let st = self.lock();
                        let mut shards = kind.keys().into_iter().map(|k| st.config.shard_of(k));
                        let first = shards.next();
                        shards.all(|s| Some(s) == first)
                    };
                    if !together {
                        return Reply::err("CROSSSLOT Keys in request don't hash to the same slot");
                    }
                    self.write(kind).await
                }
                Err(e) => e,
            },
            _ => self.data(req, None).await,
        }
    }

    /// `TABOS.WATCH key…`: registers (or renews) a watch of each key, and
    /// answers each key's token: the touch clock's tick and the key's
    /// deadline if it is there now (else 0).
    fn watch(&self, keys: &[Vec<u8>]) -> Reply {
        if !self.leading() {
            return Reply::err("TRYAGAIN this kvd's lease is running out");
        }
        let st = self.lock();
        for k in keys {
            let s = st.config.shard_of(k);
            if !st.shards.contains_key(&s) {
                return moved(&st.config, s, self.group);
            }
        }
        let mut w = self.watches();
        let now = tokio::time::Instant::now();
        w.keys.retain(|_, x| x.until > now);
        if w.keys.len() + keys.len() > WATCHES_MAX {
            return Reply::err(format!(
                "ERR more than {WATCHES_MAX} keys are watched on this kvd; try again later"
            ));
        }
        let mut tokens = Vec::with_capacity(keys.len());
        for k in keys {
            let clock = w.clock;
            let e = w.keys.entry(k.clone()).or_insert(Watched {
                touched: clock,
                until: now,
            });
            e.until = now + WATCH_KEEP;
            // With the deadline of a key there now: if it passes before
            // the EXEC, the key expired while watched, and EXEC fails.
            let deadline = Memory(&st).stored(k).map_or(0, |(_, d)| d);
            let deadline = if deadline > now_ms() { deadline } else { 0 };
            tokens.push(Reply::Array(vec![
                Reply::Integer(e.touched as i64),
                Reply::Integer(deadline),
            ]));
        }
        Reply::Array(tokens)
    }

    /// `TABOS.SCAN shard position count [pattern [type]]`: the live keys of
    /// `shard` whose [`scan_position`] is at least `position` (and that
    /// match `pattern` and are of `type`, if given; empty for any), the
    /// lowest positions first, about `count` of them but never splitting
    /// one position; with the position to go on from, or -1 when the
    /// shard is done. A key there for the whole scan is returned at least
    /// once, as Redis's SCAN guarantees, however the shard changes.
    fn scan(&self, args: &[Vec<u8>]) -> Reply {
        let bad = || Reply::err("ERR TABOS.SCAN shard position count [pattern [type]]");
        let (s, pos, count, pattern, kind) = match args {
            [s, pos, count, rest @ ..] if rest.len() <= 2 => {
                match (parse_u64(s), parse_u64(pos), parse_u64(count)) {
                    (Some(s), Some(pos), Some(count)) => (
                        s as u32,
                        pos,
                        count as usize,
                        rest.first().filter(|p| !p.is_empty()),
                        rest.get(1).filter(|t| !t.is_empty()),
                    ),
                    _ => return bad(),
                }
            }
            _ => return bad(),
        };
        if !self.leading() {
            return Reply::err("TRYAGAIN this kvd's lease is running out");
        }
        let st = self.lock();
        let Some(sh) = st.shards.get(&s) else {
            return moved(&st.config, s, self.group);
        };
        let now = now_ms();
        let live = sh.contents.live_len(now);
        let want = count
            .max(live / SCAN_STEPS_PER_SHARD)
            .clamp(1, SCAN_REPLY_MAX);
        let mut found: Vec<(u64, &Vec<u8>)> = sh
            .contents
            .pairs
            .keys()
            .filter_map(|k| {
                let p = scan_position(k);
                let (v, _) = sh.contents.live(k, now)?;
                let fits = p >= pos
                    && pattern.is_none_or(|m| command::glob_match(m, k))
                    && kind.is_none_or(|t| t.eq_ignore_ascii_case(v.type_name().as_bytes()));
                fits.then_some((p, k))
            })
            .collect();
        let next = if found.len() > want {
            // The `want` lowest positions, and every key at the last one.
            found.select_nth_unstable(want - 1);
            let last = found[want - 1].0;
            let (low, high) = found.split_at_mut(want);
            let mut keep: Vec<(u64, &Vec<u8>)> = low.to_vec();
            keep.extend(high.iter().filter(|(p, _)| *p == last));
            found = keep;
            (last + 1) as i64
        } else {
            -1
        };
        Reply::Array(vec![
            Reply::Integer(next),
            Reply::Array(
                found
                    .into_iter()
                    .map(|(_, k)| Reply::Bulk(k.clone()))
                    .collect(),
            ),
        ])
    }

    /// A data command ([`command`]): a read answered from memory, a
    /// write through the flusher.
    async fn data(&self, req: Vec<Vec<u8>>, once: Option<RequestId>) -> Reply {
        let Some(spec) = command::lookup(&req[0]) else {
            return Reply::err(format!(
                "ERR unknown command '{}'",
                String::from_utf8_lossy(&req[0])
            ));
        };
        if let Err(e) = spec.check_arity(req.len()) {
            return e;
        }
        match (spec.access, spec.name) {
            (_, "DBSIZE") => self.read_all(|st, now| {
                Reply::Integer(
                    st.shards
                        .values()
                        .map(|s| s.contents.live_len(now) as i64)
                        .sum(),
                )
            }),
            (_, "KEYS") => self.read_all(|st, now| {
                let mut keys = Vec::new();
                for sh in st.shards.values() {
                    for k in sh.contents.pairs.keys() {
                        if sh.contents.live(k, now).is_some() && command::glob_match(&req[1], k) {
                            if keys.len() == KEYS_REPLY_MAX {
                                return Reply::err(format!(
                                    "ERR KEYS matches more than {KEYS_REPLY_MAX} keys here; use SCAN"
                                ));
                            }
                            keys.push(Reply::Bulk(k.clone()));
                        }
                    }
                }
                Reply::Array(keys)
            }),
            // A live key of one of its shards, picked at random (or nil).
            (_, "RANDOMKEY") => self.read_all(|st, now| {
                let live: Vec<&Vec<u8>> = st
                    .shards
                    .values()
                    .flat_map(|sh| sh.contents.pairs.keys().filter(move |k| sh.contents.live(k, now).is_some()))
                    .collect();
                match crate::config::random::<8>("a random key").map(u64::from_le_bytes) {
                    Ok(r) if !live.is_empty() => {
                        Reply::Bulk(live[(r % live.len() as u64) as usize].clone())
                    }
                    _ => Reply::Null,
                }
            }),
            (_, "FLUSHALL" | "FLUSHDB") => match req.get(1).map(|a| a.to_ascii_uppercase()) {
                None => self.write(WriteKind::Flush).await,
                Some(m) if req.len() == 2 && (m == b"ASYNC" || m == b"SYNC") => {
                    self.write(WriteKind::Flush).await
                }
                Some(_) => Reply::err("ERR syntax error"),
            },
            (command::Access::Read, _) => self.read(&req, spec),
            (command::Access::Write, _) => self.write(WriteKind::Command(req, once)).await,
        }
    }

    /// Whether reads may be served: the session surely lives.
    fn leading(&self) -> bool {
        tokio::time::Instant::now() + LEASE_MARGIN < self.session.valid_until()
    }

    /// Runs read command `req`, all of whose keys must be in shards it
    /// serves, against memory.
    fn read(&self, req: &[Vec<u8>], spec: &command::Spec) -> Reply {
        if !self.leading() {
            return Reply::err("TRYAGAIN this kvd's lease is running out");
        }
        let st = self.lock();
        for i in spec.key_positions(req.len()) {
            let s = st.config.shard_of(&req[i]);
            if !st.shards.contains_key(&s) {
                return moved(&st.config, s, self.group);
            }
        }
        let (ops, reply) = command::execute(&Memory(&st), req, now_ms());
        debug_assert!(ops.is_empty(), "a read left ops");
        reply
    }

    /// `f` of everything it serves, at now (ms), if reads may be served.
    fn read_all(&self, f: impl FnOnce(&State, i64) -> Reply) -> Reply {
        if !self.leading() {
            return Reply::err("TRYAGAIN this kvd's lease is running out");
        }
        f(&self.lock(), now_ms())
    }

    async fn write(&self, kind: WriteKind) -> Reply {
        let (tx, rx) = oneshot::channel();
        if self.writes.send(Write { kind, reply: tx }).await.is_err() {
            return Reply::err("TRYAGAIN the kvd is stopping");
        }
        rx.await
            .unwrap_or_else(|_| Reply::err("TRYAGAIN the kvd is stopping"))
    }

    /// Deletes durably, every [`REAP_PERIOD`], the keys past their
    /// deadline (at most [`REAP_KEYS_MAX`] at a time): they are already
    /// gone for every command; this gives their memory and log back.
    /// Time is the event here, so this is a timer.
    async fn reaper(self: Arc<Self>) {
        let mut tick = tokio::time::interval(REAP_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let keys: Vec<Vec<u8>> = {
                let st = self.lock();
                let now = now_ms();
                let mut keys = Vec::new();
                for sh in st.shards.values() {
                    if keys.len() >= REAP_KEYS_MAX {
                        break;
                    }
                    keys.extend(sh.contents.expired(now, REAP_KEYS_MAX - keys.len()));
                }
                keys
            };
            if !keys.is_empty() {
                let _ = self.write(WriteKind::Reap(keys)).await;
            }
        }
    }

    fn info(&self) -> String {
        let st = self.lock();
        let mut shards: Vec<u32> = st.shards.keys().copied().collect();
        shards.sort_unstable();
        format!(
            "# Server\r\nredis_version:7.0.0-tabos\r\ntabos_kv_group:{}\r\ntabos_kv_addr:{}\r\n\
             # Keyspace\r\ntabos_kv_config_epoch:{}\r\ntabos_kv_shards:{}\r\ndb0:keys={}\r\n",
            self.group,
            self.addr,
            st.config.epoch,
            shards
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            st.shards
                .values()
                .map(|s| s.contents.live_len(now_ms()))
                .sum::<usize>(),
        )
    }

    /// Takes writes in batches: effects computed, appended durably, then
    /// applied and answered.
    async fn flusher(self: Arc<Self>, mut rx: mpsc::Receiver<Write>) {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < FLUSH_WRITES_MAX {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            let _flushing = self.flushing.lock().await;
            self.flush(batch).await;
        }
    }

    async fn flush(self: &Arc<Self>, batch: Vec<Write>) {
        // 1. Effects, against memory plus the batch's earlier writes.
        let mut by_shard: BTreeMap<u32, Vec<Op>> = BTreeMap::new();
        let mut answers: Vec<(Write, Reply, Vec<u32>)> = Vec::new();
        let append: Option<(u64, Fence, Vec<u8>)>;
        let at_us = now_us();
        let now = at_us / 1_000;
        {
            let st = self.lock();
            let mut overlay = Overlay {
                st: &st,
                changes: HashMap::new(),
                cleared: HashSet::new(),
            };
            let mut batch_ids: HashSet<(u32, RequestId)> = HashSet::new();
            for w in batch {
                let mut shards: Vec<u32> = match &w.kind {
                    WriteKind::Flush => st.shards.keys().copied().collect(),
                    kind => kind.keys().iter().map(|k| st.config.shard_of(k)).collect(),
                };
                if let Some(s) = shards.iter().find(|s| !st.shards.contains_key(s)) {
                    let r = moved(&st.config, *s, self.group);
                    let _ = w.reply.send(r);
                    continue;
                }
                let (ops, reply) = match &w.kind {
                    WriteKind::Command(args, id) => {
                        let (mut ops, reply) = command::execute(&overlay, args, now);
                        // A request sent again whose first sending was
                        // applied to a shard (its reply lost with a killed
                        // leader, or earlier in this batch) is answered,
                        // not applied there a second time.
                        if let Some(id) = id {
                            let mut touched = shards.clone();
                            touched.sort_unstable();
                            touched.dedup();
                            let mut skip: Vec<u32> = Vec::new();
                            for s in touched {
                                if st.shards[&s].contents.applied(*id)
                                    || !batch_ids.insert((s, *id))
                                {
                                    skip.push(s);
                                } else {
                                    by_shard
                                        .entry(s)
                                        .or_default()
                                        .push(Op::Done { id: *id, at_us });
                                }
                            }
                            ops.retain(|op| {
                                op.key()
                                    .is_none_or(|k| !skip.contains(&st.config.shard_of(k)))
                            });
                        }
                        (ops, reply)
                    }
                    WriteKind::Reap(keys) => {
                        let ops = keys
                            .iter()
                            .filter(|k| overlay.stored(k).is_some_and(|(_, d)| d != 0 && d <= now))
                            .map(|k| Op::Del(k.clone()))
                            .collect();
                        (ops, Reply::ok())
                    }
                    WriteKind::Flush => (Vec::new(), Reply::ok()),
                    WriteKind::Multi { watched, commands } => {
                        let watches = self.watches();
                        // Touched since the token, or by an earlier write
                        // of this batch (not applied yet): nothing runs.
                        let touched = watched.iter().any(|(k, (token, deadline))| {
                            !watches.untouched(k, *token)
                                || overlay.changes.contains_key(k)
                                || overlay.cleared.contains(&st.config.shard_of(k))
                                || (*deadline != 0 && *deadline <= now)
                        });
                        drop(watches);
                        if touched {
                            (Vec::new(), Reply::Null)
                        } else {
                            let mut ops = Vec::new();
                            let mut replies = Vec::with_capacity(commands.len());
                            for args in commands {
                                let (more, reply) = match command::lookup(&args[0]) {
                                    Some(_) => command::execute(&overlay, args, now),
                                    None => (Vec::new(), keyless(args)),
                                };
                                // The next command sees this one's effects.
                                for op in &more {
                                    overlay.apply(op);
                                }
                                ops.extend(more);
                                replies.push(reply);
                            }
                            (ops, Reply::Array(replies))
                        }
                    }
                };
                if let WriteKind::Flush = w.kind {
                    for s in &shards {
                        overlay.clear(*s);
                        by_shard.entry(*s).or_default().push(Op::Clear);
                    }
                }
                // (A transaction's ops are in the overlay already.)
                let applied = matches!(w.kind, WriteKind::Multi { .. });
                for op in ops {
                    let Some(k) = op.key() else { continue };
                    let s = st.config.shard_of(k);
                    if !shards.contains(&s) {
                        shards.push(s);
                    }
                    if !applied {
                        overlay.apply(&op);
                    }
                    by_shard.entry(s).or_default().push(op);
                }
                answers.push((w, reply, shards));
            }
            append = (!by_shard.is_empty()).then(|| {
                let entry =
                    shard::encode_entry(by_shard.iter().map(|(s, ops)| (*s, ops.as_slice())));
                (st.next_seq, st.fence.clone(), entry)
            });
        }
        // 2. One append to the group's log, whatever shards it touches.
        let mut outcome: std::result::Result<(), Reply> = Ok(());
        let mut deposed = false;
        if let Some((seq, fence, entry)) = append {
            let mut c = self.client.clone();
            let path = self.layout.group_log_entry(self.group, seq);
            match c
                .name_set(&self.realm, &path, entry, Some(0), Some(fence))
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_stale_epoch() => {
                    eprintln!("kvd {}: append refused: {e}; another kvd leads", self.addr);
                    // Taking the log again would fence out its leader.
                    deposed = true;
                    self.deposed.notify_one();
                    outcome = Err(Reply::err("TRYAGAIN this kvd no longer leads its group"));
                }
                Err(e) => {
                    eprintln!("kvd {}: append of entry {seq} failed: {e}", self.addr);
                    // Refused (nothing applied) only if the node said why.
                    outcome = Err(if e.reason().is_some() {
                        Reply::err("TRYAGAIN the shards are being reloaded")
                    } else {
                        Reply::err(
                            "UNCERTAIN the write's outcome is unknown; the shards are being reloaded",
                        )
                    });
                }
            }
        }
        // 3. Applied and answered; after a failure, every shard dropped and
        // the group's log taken again.
        let mut compact = None;
        {
            let mut st = self.lock();
            if outcome.is_ok() && !by_shard.is_empty() {
                st.next_seq += 1;
                st.log_len += 1;
                let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
                for (s, ops) in &by_shard {
                    // Dropped meanwhile (a new config): its writes are in
                    // the log, where its mover finds them.
                    let Some(sh) = st.shards.get_mut(s) else {
                        continue;
                    };
                    for op in ops {
                        match op.key() {
                            Some(k) => watches.touch(k),
                            // A clear touches the keys it deleted.
                            None if matches!(op, Op::Clear) => {
                                let watched: Vec<Vec<u8>> = watches
                                    .keys
                                    .keys()
                                    .filter(|k| sh.contents.pairs.contains_key(*k))
                                    .cloned()
                                    .collect();
                                for k in watched {
                                    watches.touch(&k);
                                }
                            }
                            None => {}
                        }
                        shard::apply(&mut sh.contents, op);
                    }
                }
                drop(watches);
                let every = self.compact_at.saturating_mul(st.shards.len().max(1));
                if st.log_len >= every.min(shard::LOG_COMPACT_MAX as usize) && !st.compacting {
                    st.compacting = true;
                    st.log_len = 0;
                    let upto = st.next_seq - 1;
                    let shards: Vec<(Taken, Contents)> = st
                        .shards
                        .values_mut()
                        .map(|sh| {
                            sh.contents.forget_old(at_us);
                            (sh.taken.clone(), sh.contents.clone())
                        })
                        .collect();
                    compact = Some((upto, st.fence.clone(), st.config.shards.len(), shards));
                }
            } else if outcome.is_err() {
                let dropped: Vec<u32> = st.shards.keys().copied().collect();
                let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
                for s in dropped {
                    watches.touch_shard(&st.config, s);
                }
                drop(watches);
                st.shards.clear();
            }
        }
        if outcome.is_err() && !deposed {
            let _ = self.resync.send(());
        }
        for (w, reply, _) in answers {
            let reply = match &outcome {
                Ok(()) => reply,
                Err(e) => e.clone(),
            };
            let _ = w.reply.send(reply);
        }
        // Snapshots are written beside the flushes, not in their way: the
        // log after `upto` keeps growing meanwhile, and a load replays it.
        if let Some((upto, fence, shards_total, shards)) = compact {
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.compact(upto, fence, shards_total, shards).await {
                    eprintln!("kvd {}: cannot snapshot its shards: {e}", me.addr);
                }
                me.lock().compacting = false;
            });
        }
    }

    /// Snapshots `shards` (their state at entry `upto` of the group's
    /// log), then deletes the entries of the log that no shard's pointer
    /// needs any more (of the service's `shards_total`).
    async fn compact(
        &self,
        upto: u64,
        fence: Fence,
        shards_total: usize,
        shards: Vec<(Taken, Contents)>,
    ) -> Result<()> {
        let mut c = self.client.clone();
        for (taken, contents) in &shards {
            shard::snapshot(
                &mut c,
                &self.realm,
                &self.layout,
                taken,
                self.group,
                upto,
                contents,
            )
            .await?;
        }
        let bound = shard::trim_bound(
            &mut c,
            &self.realm,
            &self.layout,
            shards_total as u32,
            self.group,
        )
        .await?
        .map_or(upto, |b| b.min(upto));
        shard::trim_group_log(&mut c, &self.realm, &self.layout, self.group, bound, &fence).await
    }
}

/// What a kvd serves, as the commands see it.
struct Memory<'a>(&'a State);

impl command::Keyspace for Memory<'_> {
    fn stored(&self, k: &[u8]) -> Option<(&shard::Value, i64)> {
        let s = self.0.config.shard_of(k);
        self.0.shards.get(&s).and_then(|sh| sh.contents.stored(k))
    }
}

/// Memory plus the effects of a batch's earlier writes, not yet applied.
struct Overlay<'a> {
    st: &'a State,
    /// Keys the batch changed, as they now are (`None`: deleted).
    changes: HashMap<Vec<u8>, command::Stored>,
    /// Shards the batch cleared: their keys not in `changes` are gone.
    cleared: HashSet<u32>,
}

impl command::Keyspace for Overlay<'_> {
    fn stored(&self, k: &[u8]) -> Option<(&shard::Value, i64)> {
        if let Some(c) = self.changes.get(k) {
            return c.as_ref().map(|(v, d)| (v, *d));
        }
        let s = self.st.config.shard_of(k);
        if self.cleared.contains(&s) {
            return None;
        }
        self.st.shards.get(&s).and_then(|sh| sh.contents.stored(k))
    }
}

impl Overlay<'_> {
    /// Takes in `op` (one with a key): the key copied from memory at its
    /// first change in the batch.
    fn apply(&mut self, op: &Op) {
        let Some(k) = op.key() else { return };
        if !self.changes.contains_key(k) {
            let now = self.stored(k).map(|(v, d)| (v.clone(), d));
            self.changes.insert(k.to_vec(), now);
        }
        if let Some(slot) = self.changes.get_mut(k) {
            shard::apply_to(slot, op);
        }
    }

    /// Takes in a clear of shard `s`.
    fn clear(&mut self, s: u32) {
        let config = &self.st.config;
        self.changes.retain(|k, _| config.shard_of(k) != s);
        self.cleared.insert(s);
    }
}

/// Ids of a kvd's connections, for its broker.
static CONN_IDS: AtomicU64 = AtomicU64::new(1);

/// One client connection of a kvd, and what it subscribed to.
struct Conn {
    kvd: Arc<Kvd>,
    id: u64,
    subs: pubsub::Subscriptions,
    /// Its messages, once it subscribed: the broker holds the only sender,
    /// so the stream ends when the broker drops it.
    pushes: Option<mpsc::Receiver<Reply>>,
}

impl Conn {
    fn subscription(&mut self, kind: pubsub::Kind, subscribe: bool, names: &[Vec<u8>]) -> Reply {
        if subscribe && names.is_empty() {
            return command::wrong_arity(if kind == pubsub::Kind::Channel {
                "subscribe"
            } else {
                "psubscribe"
            });
        }
        let mut broker = self.kvd.broker();
        if !subscribe {
            let change = self.subs.unsubscribe(kind, names);
            broker.remove(self.id, kind, &change.names);
            return change.reply();
        }
        match self.subs.subscribe(kind, names) {
            Ok(change) => {
                let tx = if self.pushes.is_none() {
                    let (tx, rx) = mpsc::channel(pubsub::BACKLOG_MAX);
                    self.pushes = Some(rx);
                    Some(tx)
                } else {
                    None
                };
                broker.add(self.id, tx.as_ref(), kind, &change.names);
                change.reply()
            }
            Err(e) => e,
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.kvd.broker().forget(self.id);
    }
}

impl resp::Handler for Conn {
    fn handle(&mut self, req: Vec<Vec<u8>>) -> impl std::future::Future<Output = Reply> + Send {
        let kvd = self.kvd.clone();
        let sub = pubsub::Kind::of(&req[0])
            .map(|(kind, subscribe)| self.subscription(kind, subscribe, &req[1..]));
        async move {
            match sub {
                Some(reply) => reply,
                None => kvd.handle(req).await,
            }
        }
    }

    fn pushes(&mut self) -> Option<&mut mpsc::Receiver<Reply>> {
        self.pushes.as_mut()
    }

    fn subscriptions(&self) -> usize {
        self.subs.count()
    }

    fn reset(&mut self) -> impl std::future::Future<Output = ()> + Send {
        self.kvd.broker().forget(self.id);
        self.subs = pubsub::Subscriptions::default();
        self.pushes = None;
        async {}
    }
}

/// `TABOS.EXEC` arguments: `N key1 tick1 deadline1 … M argc1 word…
/// argc2 word…` — the watched keys with their tokens, then M commands,
/// each its count of words and the words. Every command is a data
/// command of [`command`] (its arity checked) or PING, ECHO or TIME.
/// The watched keys of a transaction, each with its token (the touch
/// clock's tick, the deadline it had).
pub type WatchedKeys = Vec<(Vec<u8>, (u64, i64))>;

/// A transaction's commands, each its words.
pub type Commands = Vec<Vec<Vec<u8>>>;

pub fn parse_exec(args: &[Vec<u8>]) -> Result<(WatchedKeys, Commands), Reply> {
    let bad = || Reply::err("ERR TABOS.EXEC: malformed transaction");
    let mut it = args.iter();
    let count = |it: &mut std::slice::Iter<'_, Vec<u8>>| {
        it.next().and_then(|n| parse_u64(n)).ok_or_else(bad)
    };
    let n = count(&mut it)? as usize;
    if n > args.len() {
        return Err(bad());
    }
    let mut watched = Vec::with_capacity(n);
    for _ in 0..n {
        let k = it.next().ok_or_else(bad)?.clone();
        let tick = count(&mut it)?;
        let deadline = count(&mut it)? as i64;
        watched.push((k, (tick, deadline)));
    }
    let m = count(&mut it)? as usize;
    if m > MULTI_COMMANDS_MAX {
        return Err(Reply::err(format!(
            "ERR a transaction has at most {MULTI_COMMANDS_MAX} commands"
        )));
    }
    let mut commands = Vec::with_capacity(m);
    for _ in 0..m {
        let argc = count(&mut it)? as usize;
        if argc == 0 || argc > it.len() {
            return Err(bad());
        }
        let words: Vec<Vec<u8>> = it.by_ref().take(argc).cloned().collect();
        match command::lookup(&words[0]) {
            Some(spec) => {
                spec.check_arity(words.len())?;
                if spec.keys == command::Keys::Every {
                    return Err(Reply::err(format!(
                        "ERR {} cannot be in a transaction here",
                        spec.name
                    )));
                }
            }
            None if matches!(keyless(&words), Reply::Error(_)) => return Err(keyless(&words)),
            None => {}
        }
        commands.push(words);
    }
    if it.next().is_some() {
        return Err(bad());
    }
    Ok((watched, commands))
}

/// What a transaction's command about no key answers: PING, ECHO, TIME.
fn keyless(args: &[Vec<u8>]) -> Reply {
    let cmd = args[0].to_ascii_uppercase();
    match (cmd.as_slice(), &args[1..]) {
        (b"PING", []) => Reply::Simple("PONG".into()),
        (b"PING" | b"ECHO", [m]) => Reply::Bulk(m.clone()),
        (b"TIME", []) => resp::time_reply(),
        _ => Reply::err(format!(
            "ERR '{}' cannot be in a transaction here",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// Where a key stands in its shard's SCAN order: 47 bits of a hash of it
/// that is the same in every kvd and version (FNV-1a, then SplitMix64's
/// finaliser to spread short keys), so that a cursor stays good across
/// leader changes and shard moves. The front end puts the shard above
/// these bits.
pub fn scan_position(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    h >> (64 - SCAN_POSITION_BITS)
}

/// Bits of a [`scan_position`].
pub const SCAN_POSITION_BITS: u32 = 47;

/// The reply for a key of shard `s`, which this group does not serve.
fn moved(config: &Config, s: u32, group: u32) -> Reply {
    if config.moving.contains(&s) {
        Reply::err(format!("TRYAGAIN shard {s} is moving"))
    } else if config.serves(group, s) {
        // Ours, not loaded yet (being taken again).
        Reply::err(format!("TRYAGAIN shard {s} is loading"))
    } else {
        Reply::err(format!("MOVED {s} {}", config.epoch))
    }
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The kvd's clock in ms since the epoch: what deadlines are on.
pub(crate) fn now_ms() -> i64 {
    now_us() / 1_000
}

pub(crate) fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_transaction_is_read_whole_or_refused() {
        let (watched, commands) =
            parse_exec(&words("1 k 7 0 3 3 SET k v 1 PING 2 INCR k")).unwrap();
        assert_eq!(watched, [(b"k".to_vec(), (7, 0))]);
        assert_eq!(commands, [words("SET k v"), words("PING"), words("INCR k")]);
        let (watched, commands) = parse_exec(&words("0 0")).unwrap();
        assert!(watched.is_empty() && commands.is_empty());
        for bad in [
            "1 k 7",            // a watched key without its whole token
            "0 1 3 SET k",      // fewer words than counted
            "0 1 2 SET k",      // SET's arity
            "0 1 1 KEYS",       // the whole keyspace
            "0 1 1 LPUSH",      // unknown
            "0 1 1 PING extra", // more than the commands
            "x",
        ] {
            assert!(parse_exec(&words(bad)).is_err(), "{bad}");
        }
    }
}
