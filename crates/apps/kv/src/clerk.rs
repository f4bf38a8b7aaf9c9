//! The clerk (σOS section 5.2): a client of the service that caches the
//! config, sends each key to the leader of its shard's group over the
//! Redis protocol, and follows the service as it changes — re-reading the
//! config on `MOVED` (its epoch is stale), the leader on a lost
//! connection, and waiting on `TRYAGAIN` (a shard moving or loading), all
//! within [`RETRY_MAX`].
//!
//! A write whose outcome is unknown (the connection was lost after it was
//! sent, or the kvd says `UNCERTAIN`) is sent again only if it is a SET or
//! an MSET: those go as `TABOS.ONCE <client> <seq> …`, the clerk's random
//! id and a sequence number of its own, which each shard records with the
//! write, so a request whose first sending was applied is answered and
//! not applied again over the writes made since (a plain SET sent twice
//! is not linearizable). A DEL or INCR fails with [`Error::Unavailable`]
//! instead, as it might have happened.
//!
//! Reads go over a [`Pipe`]: one connection to a kvd shared by every clerk
//! of the process (of its event loop, on the front end's
//! [`crate::loops`]), on which the reads of many clerks go out in one
//! write and come back, in order, in one read (as Lettuce shares a connection
//! between threads) — a read costs the kvd a share of a system call, not
//! two. The pipe's writer lets the runtime go round once before it takes
//! what is queued, so the reads of connections that became readable
//! together go in one write (redis-benchmark's 16 connections through the
//! front end: 4.8 reads a write instead of 1.9). Writes keep the clerk's
//! own connection: a kvd answers a connection's requests in turn, and a
//! write waits for its commit.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tabos_client::Client;
use tokio::io::BufReader;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::command;
use crate::config::{Config, Layout};
use crate::resp::{self, Reply};
use crate::shard::RequestId;
use crate::{Error, Result};

/// Longest one call keeps trying (leader failover, shard moves).
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// Longest one kvd round trip may take before the connection is dropped.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const PAUSE_MIN: Duration = Duration::from_millis(5);
const PAUSE_MAX: Duration = Duration::from_millis(500);
/// Most reads waiting to go out on one [`Pipe`] (a caller past it waits).
const PIPE_QUEUE_MAX: usize = 1_024;
/// Most reads, and bytes, one write of a [`Pipe`] carries.
const PIPE_BATCH_MAX: usize = 128;
const PIPE_BATCH_BYTES: usize = 256 << 10;

struct Conn {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
}

impl Conn {
    /// Sends `req` and reads its reply, within [`CALL_TIMEOUT`]: the outer
    /// error is the timeout, the inner one the connection's.
    async fn call(
        &mut self,
        req: &[&[u8]],
    ) -> Result<Result<Reply, String>, tokio::time::error::Elapsed> {
        let mut out = Vec::new();
        resp::encode_request(req, &mut out);
        let round = async {
            resp::write_all(&mut self.w, &out)
                .await
                .map_err(|e| e.to_string())?;
            resp::read_reply(&mut self.r)
                .await
                .map_err(|e| e.to_string())
        };
        tokio::time::timeout(CALL_TIMEOUT, round).await
    }
}

/// What a [`Pipe`] caller gets: the reply, or why the connection failed.
type Answer = oneshot::Sender<std::result::Result<Reply, String>>;

/// How often a pipe's watchdog looks for a read unanswered past
/// [`CALL_TIMEOUT`]: a read fails at most this long after it.
const PIPE_WATCH_PERIOD: Duration = Duration::from_millis(2_500);

/// A connection to one kvd for reads, shared by the process's clerks
/// (see the module's doc). Its writer task sends what is queued in one
/// write, its reader task hands each reply to the oldest caller waiting;
/// when either fails, every caller waiting gets the error and the pipe is
/// left for a new one. Its watchdog gives it up when a read written has
/// waited [`CALL_TIMEOUT`] for its answer, or a write that long to go out
/// (a kvd that does not answer one read answers none) — one timer a pipe,
/// not one a read: a timer set per read woke the runtime's driver each
/// time (an eventfd write, half a system call per GET through the front
/// end).
struct Pipe {
    queue: mpsc::Sender<(Vec<u8>, Answer)>,
    shared: Arc<Shared>,
}

/// What a pipe's writer, reader and watchdog share.
#[derive(Default)]
struct Shared {
    /// Callers whose reads were written, oldest first, each with when.
    waiting: Mutex<VecDeque<(Answer, tokio::time::Instant)>>,
    /// Since when the writer has been writing (`None`: it is not).
    writing_since: Mutex<Option<tokio::time::Instant>>,
    broken: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn broken(&self) -> bool {
        self.broken.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_broken(&self) {
        self.broken
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every caller waiting gets `why`.
    fn fail_waiting(&self, why: &str) {
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        for (answer, _) in waiting {
            let _ = answer.send(Err(why.to_string()));
        }
    }
}

/// Whose pipes a clerk shares: those of its event loop's clerks
/// ([`crate::loops`]: the pipe's tasks run on that loop, so a read wakes
/// no other thread), else the whole process's.
type Scope = Option<u64>;
/// Which pipe a clerk takes: by kvd address, password and scope.
#[derive(Clone, PartialEq, Eq)]
struct PipeKey {
    addr: String,
    password: String,
    scope: Scope,
}
/// The process's pipes.
static PIPES: Mutex<Vec<(PipeKey, Weak<Pipe>)>> = Mutex::new(Vec::new());
/// Per pipe key, held while that pipe is opened, so that clerks starting
/// together share one instead of each opening its own (and a kvd slow to
/// answer holds up only the clerks that want it).
type Opening = Arc<tokio::sync::Mutex<()>>;
static OPENING: Mutex<Vec<(PipeKey, Opening)>> = Mutex::new(Vec::new());

impl Pipe {
    fn usable(&self) -> bool {
        !self.shared.broken()
    }

    /// The shared pipe to `addr` (the caller's loop's, off the loops the
    /// process's), opened (and signed in) if there is none.
    async fn to(addr: &str, password: &str) -> Result<Arc<Pipe>, Failure> {
        let scope = crate::loops::current();
        let key = PipeKey {
            addr: addr.to_string(),
            password: password.to_string(),
            scope,
        };
        let opening = {
            let mut all = OPENING.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|(_, m)| Arc::strong_count(m) > 1);
            match all.iter().find(|(k, _)| *k == key) {
                Some((_, m)) => m.clone(),
                None => {
                    let m = Opening::default();
                    all.push((key.clone(), m.clone()));
                    m
                }
            }
        };
        let _opening = opening.lock().await;
        {
            let mut pipes = PIPES.lock().unwrap_or_else(|e| e.into_inner());
            pipes.retain(|(_, p)| p.upgrade().is_some_and(|p| p.usable()));
            if let Some(p) = pipes
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, p)| p.upgrade())
            {
                return Ok(p);
            }
        }
        let conn = open(addr, password).await?;
        let (queue, rx) = mpsc::channel(PIPE_QUEUE_MAX);
        let shared = Arc::new(Shared::default());
        let writer = tokio::spawn(pipe_writer(conn.w, rx, shared.clone()));
        let reader = tokio::spawn(pipe_reader(conn.r, shared.clone()));
        tokio::spawn(pipe_watchdog(
            shared.clone(),
            writer.abort_handle(),
            reader.abort_handle(),
        ));
        let pipe = Arc::new(Pipe { queue, shared });
        PIPES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, Arc::downgrade(&pipe)));
        Ok(pipe)
    }

    /// Sends read `req` and waits for its reply: within [`CALL_TIMEOUT`]
    /// and [`PIPE_WATCH_PERIOD`] (past it, the watchdog gives the pipe
    /// up).
    async fn call(&self, req: &[&[u8]]) -> std::result::Result<Reply, String> {
        let mut out = Vec::new();
        resp::encode_request(req, &mut out);
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((out, tx))
            .await
            .map_err(|_| "the connection is closed".to_string())?;
        rx.await
            .map_err(|_| "the connection is closed".to_string())?
    }
}

/// A pipe's writer: takes what is queued (at most [`PIPE_BATCH_MAX`]
/// reads, [`PIPE_BATCH_BYTES`]), records who waits in order, writes it
/// all at once. Ends when the clerks are gone or the connection fails.
async fn pipe_writer(
    mut w: OwnedWriteHalf,
    mut rx: mpsc::Receiver<(Vec<u8>, Answer)>,
    shared: Arc<Shared>,
) {
    let mut out = Vec::new();
    while let Some((first, answer)) = rx.recv().await {
        // Once round the runtime first: the reads of connections woken by
        // the same readiness join this write instead of each making one of
        // their own (a write, a kvd wake-up, a read and a reply each). An
        // idle pipe's read waits only for the tasks already ready.
        if rx.is_empty() {
            tokio::task::yield_now().await;
        }
        out.clear();
        out.extend_from_slice(&first);
        let mut answers = vec![answer];
        while answers.len() < PIPE_BATCH_MAX && out.len() < PIPE_BATCH_BYTES {
            match rx.try_recv() {
                Ok((req, answer)) => {
                    out.extend_from_slice(&req);
                    answers.push(answer);
                }
                Err(_) => break,
            }
        }
        if shared.broken() {
            break;
        }
        // Queued before the bytes go: the reader pops one per reply.
        let now = tokio::time::Instant::now();
        shared
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(answers.into_iter().map(|a| (a, now)));
        *shared
            .writing_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(now);
        let written = resp::write_all(&mut w, &out).await;
        *shared
            .writing_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        if written.is_err() {
            break;
        }
    }
    shared.set_broken();
    // The reader sees the connection end and fails who still waits.
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut w).await;
}

/// A pipe's reader: each reply to the oldest caller waiting; on a failed
/// or ended connection (or a reply nobody asked for), every caller waiting
/// gets the error.
async fn pipe_reader(mut r: BufReader<OwnedReadHalf>, shared: Arc<Shared>) {
    let why = loop {
        match resp::read_reply(&mut r).await {
            Ok(reply) => {
                let next = shared
                    .waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front();
                match next {
                    // A caller that gave up has dropped its receiver.
                    Some((answer, _)) => drop(answer.send(Ok(reply))),
                    None => break "the kvd sent a reply nobody asked for".to_string(),
                }
            }
            Err(e) => break format!("the kvd's connection failed: {e}"),
        }
    };
    shared.set_broken();
    shared.fail_waiting(&why);
}

/// A pipe's watchdog: every [`PIPE_WATCH_PERIOD`], whether the oldest
/// read written, or the write going out, is [`CALL_TIMEOUT`] old; if so
/// the pipe is given up — its writer and reader stopped (the connection
/// closes; callers still queued see it closed) and every caller waiting
/// told. Ends with the pipe.
async fn pipe_watchdog(
    shared: Arc<Shared>,
    writer: tokio::task::AbortHandle,
    reader: tokio::task::AbortHandle,
) {
    loop {
        tokio::time::sleep(PIPE_WATCH_PERIOD).await;
        if shared.broken() {
            return;
        }
        let late = |t: &tokio::time::Instant| t.elapsed() >= CALL_TIMEOUT;
        let stuck = shared
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .front()
            .is_some_and(|(_, t)| late(t))
            || shared
                .writing_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(late);
        if stuck {
            shared.set_broken();
            writer.abort();
            reader.abort();
            shared.fail_waiting(&format!("no answer within {CALL_TIMEOUT:?}"));
            return;
        }
    }
}

/// Connects to the kvd at `addr` and signs in with `password`.
async fn open(addr: &str, password: &str) -> Result<Conn, Failure> {
    let sock = tokio::time::timeout(CALL_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| Failure::Again(format!("connecting to {addr} timed out")))?
        .map_err(|e| Failure::Again(format!("cannot connect to {addr}: {e}")))?;
    let _ = sock.set_nodelay(true);
    let (r, w) = sock.into_split();
    let mut conn = Conn {
        r: BufReader::new(r),
        w,
    };
    // RESP3, so that a map (HGETALL's) comes back a map, not a list.
    let hello: [&[u8]; 5] = [b"HELLO", b"3", b"AUTH", b"default", password.as_bytes()];
    match conn.call(&hello).await {
        Ok(Ok(Reply::Map(_))) => Ok(conn),
        Ok(Ok(r)) => Err(Failure::Again(format!(
            "{addr} refused the password: {r:?}"
        ))),
        Ok(Err(e)) => Err(Failure::Again(format!("{addr}: {e}"))),
        Err(_) => Err(Failure::Again(format!("{addr} did not answer AUTH"))),
    }
}

/// A client of one service.
pub struct Clerk {
    client: Client,
    realm: String,
    layout: Layout,
    config: Config,
    conns: HashMap<u32, Conn>,
    /// Per group, the shared connection its reads go over.
    pipes: HashMap<u32, Arc<Pipe>>,
    /// The service's password, given on every new connection.
    password: String,
    /// This clerk's id in its requests (random).
    id: u64,
    /// The sequence number of its last SET or MSET.
    seq: u64,
}

/// How one attempt went wrong.
#[derive(Debug)]
enum Failure {
    /// Nothing happened; try again after re-reading the config.
    Moved,
    /// Nothing happened; try again after a pause.
    Again(String),
    /// It may have happened.
    Uncertain(String),
}

impl Clerk {
    /// A clerk of service `svc` in `realm`.
    pub async fn new(client: &Client, realm: &str, svc: &str) -> Result<Clerk> {
        let layout = Layout::new(svc)?;
        let (config, _) = crate::config::read(client, realm, &layout).await?;
        let password = crate::config::read_password(client, realm, &layout).await?;
        Ok(Clerk {
            client: client.clone(),
            realm: realm.into(),
            layout,
            config,
            conns: HashMap::new(),
            pipes: HashMap::new(),
            password,
            id: random_id()?,
            seq: 0,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    async fn reread_config(&mut self) -> Result<()> {
        let e = self
            .client
            .name_get(&self.realm, &self.layout.config())
            .await?;
        self.config = Config::from_json(&e.data)?;
        Ok(())
    }

    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.call(&[b"GET", key]).await? {
            Reply::Bulk(v) => Ok(Some(v)),
            Reply::Null => Ok(None),
            r => Err(unexpected(&r)),
        }
    }

    pub async fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        match self.call(&[b"SET", key, value]).await? {
            Reply::Simple(_) => Ok(()),
            r => Err(unexpected(&r)),
        }
    }

    pub async fn del(&mut self, key: &[u8]) -> Result<bool> {
        match self.call(&[b"DEL", key]).await? {
            Reply::Integer(n) => Ok(n > 0),
            r => Err(unexpected(&r)),
        }
    }

    pub async fn incr(&mut self, key: &[u8]) -> Result<i64> {
        match self.call(&[b"INCR", key]).await? {
            Reply::Integer(n) => Ok(n),
            r => Err(unexpected(&r)),
        }
    }

    /// Runs one request (a data command of [`command`] and its
    /// arguments), spread over the groups its keys belong to if it may be
    /// split, else refused (`CROSSSLOT`) if its keys are in several
    /// shards: errors of the service come back as `Reply::Error`, as
    /// redis-cli shows them.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply> {
        let Some(first) = args.first() else {
            return Ok(Reply::err("ERR empty command"));
        };
        let Some(spec) = command::lookup(first) else {
            return Ok(Reply::err(format!(
                "ERR unknown command '{}'",
                String::from_utf8_lossy(first)
            )));
        };
        if let Err(e) = spec.check_arity(args.len()) {
            return Ok(e);
        }
        let cmd = spec.name;
        let keys: Vec<&[u8]> = spec
            .key_positions(args.len())
            .into_iter()
            .map(|i| args[i])
            .collect();
        if !spec.split {
            let mut shards = keys.iter().map(|k| self.config.shard_of(k));
            if let Some(s) = shards.next() {
                if shards.any(|t| t != s) {
                    return Ok(Reply::err(
                        "CROSSSLOT Keys in request don't hash to the same slot",
                    ));
                }
            }
        }
        // SET k v and MSET are applied once per request id however often
        // they are sent; other writes are not sent again.
        let plain = (cmd == "SET" && args.len() == 3) || cmd == "MSET";
        let repeatable = spec.repeatable && (spec.access == command::Access::Read || plain);
        // One id for every sending of this request.
        let once = plain.then(|| {
            self.seq += 1;
            RequestId {
                client: self.id,
                seq: self.seq,
            }
        });
        let target = if spec.keys == command::Keys::Every {
            Target::Every
        } else {
            Target::Split {
                spec,
                keys: &keys,
                once,
            }
        };
        self.retrying(target, args, repeatable, cmd).await
    }

    /// Sends `req` to the leader of the group of `key` (of the first
    /// group if none), trying again as [`Clerk::call`] does; a request
    /// whose outcome is unknown is sent again only if `repeatable`.
    pub async fn send_for(
        &mut self,
        key: Option<&[u8]>,
        req: &[&[u8]],
        repeatable: bool,
    ) -> Result<Reply> {
        self.retrying(Target::One(key), req, repeatable, "the request")
            .await
    }

    /// Tries `args` at `target` until it is answered or [`RETRY_MAX`]
    /// passes: the config read again on MOVED, a pause after TRYAGAIN,
    /// and after an unknown outcome only if `repeatable` (`what` names
    /// the request in the error).
    async fn retrying(
        &mut self,
        target: Target<'_>,
        args: &[&[u8]],
        repeatable: bool,
        what: &str,
    ) -> Result<Reply> {
        let mut pauses = tabos_client::retry::Backoff::new(PAUSE_MIN, PAUSE_MAX)
            .until(tokio::time::Instant::now() + RETRY_MAX);
        loop {
            let tried = match &target {
                Target::Every => self.every(args).await,
                Target::Split { spec, keys, once } => self.attempt(spec, args, keys, *once).await,
                Target::One(_) | Target::Shard(_) => {
                    let g = match &target {
                        Target::One(Some(k)) => self.config.group_of(k),
                        Target::Shard(s) => {
                            self.config.shards.get(*s as usize).copied().unwrap_or(0)
                        }
                        _ => self.config.groups.first().copied().unwrap_or(0),
                    };
                    match self.send(g, args).await {
                        Ok(Reply::Error(e)) => match classify(e) {
                            Err(e) => Ok(Reply::Error(e)),
                            Ok(failure) => Err(failure),
                        },
                        other => other,
                    }
                }
            };
            let why = match tried {
                Ok(r) => return Ok(r),
                Err(Failure::Moved) => {
                    self.reread_config().await?;
                    continue;
                }
                Err(Failure::Again(why)) => why,
                Err(Failure::Uncertain(why)) if !repeatable => {
                    return Err(Error::Unavailable(format!(
                        "{what} may or may not have happened: {why}"
                    )))
                }
                Err(Failure::Uncertain(why)) => why,
            };
            if !pauses.wait().await {
                return Err(Error::Unavailable(format!(
                    "gave up after {RETRY_MAX:?}: {why}"
                )));
            }
            // The config may have changed while a shard moved.
            let _ = self.reread_config().await;
        }
    }

    /// One try of a command about the whole keyspace (DBSIZE, KEYS,
    /// FLUSHALL): sent to every group, integers summed, arrays joined.
    async fn every(&mut self, args: &[&[u8]]) -> Result<Reply, Failure> {
        let mut sum = None;
        let mut items: Option<Vec<Reply>> = None;
        for g in self.config.groups.clone() {
            match self.send(g, args).await? {
                Reply::Error(e) => {
                    return match classify(e) {
                        Ok(failure) => Err(failure),
                        Err(e) => Ok(Reply::Error(e)),
                    }
                }
                Reply::Integer(n) => *sum.get_or_insert(0) += n,
                Reply::Array(part) => items.get_or_insert_with(Vec::new).extend(part),
                _ => {}
            }
        }
        Ok(match (sum, items) {
            (Some(n), _) => Reply::Integer(n),
            (None, Some(items)) => Reply::Array(items),
            (None, None) => Reply::ok(),
        })
    }

    /// One try: the request split by group, each part sent to its group's
    /// leader, the answers put together.
    async fn attempt(
        &mut self,
        spec: &command::Spec,
        args: &[&[u8]],
        keys: &[&[u8]],
        once: Option<RequestId>,
    ) -> Result<Reply, Failure> {
        let once = once.map(|id| (id.client.to_string(), id.seq.to_string()));
        // Positions of the keys each group gets.
        let mut parts: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            parts.entry(self.config.group_of(k)).or_default().push(i);
        }
        let single = parts.len() <= 1;
        if parts.is_empty() {
            parts.insert(self.config.groups.first().copied().unwrap_or(0), Vec::new());
        }
        let stride = spec.stride();
        let mut replies: Vec<(Vec<usize>, Reply)> = Vec::new();
        for (g, idx) in parts {
            let mut req: Vec<&[u8]> = Vec::with_capacity(args.len() + 3);
            if let Some((client, seq)) = &once {
                req.extend([b"TABOS.ONCE".as_slice(), client.as_bytes(), seq.as_bytes()]);
            }
            if single {
                req.extend_from_slice(args);
            } else {
                req.push(args[0]);
                for i in &idx {
                    req.extend_from_slice(&args[1 + stride * i..1 + stride * i + stride]);
                }
            }
            let reply = if spec.access == command::Access::Read {
                self.read(g, &req).await?
            } else {
                self.send(g, &req).await?
            };
            if let Reply::Error(e) = reply {
                return match classify(e) {
                    Ok(e) => Err(e),
                    Err(e) => Ok(Reply::Error(e)),
                };
            }
            replies.push((idx, reply));
        }
        if single {
            return Ok(replies.pop().expect("one part").1);
        }
        Ok(match spec.name {
            "MGET" => {
                let mut out = vec![Reply::Null; keys.len()];
                for (idx, r) in replies {
                    let Reply::Array(items) = r else {
                        return Ok(Reply::err("ERR a group answered MGET with no array"));
                    };
                    for (i, item) in idx.into_iter().zip(items) {
                        out[i] = item;
                    }
                }
                Reply::Array(out)
            }
            "MSET" => Reply::ok(),
            _ => Reply::Integer(
                replies
                    .iter()
                    .map(|(_, r)| if let Reply::Integer(n) = r { *n } else { 0 })
                    .sum(),
            ),
        })
    }

    /// Sends one request to group `g`'s leader.
    async fn send(&mut self, g: u32, req: &[&[u8]]) -> Result<Reply, Failure> {
        let conn = match self.conns.remove(&g) {
            Some(c) => c,
            None => self.connect(g).await?,
        };
        let mut conn = conn;
        match conn.call(req).await {
            Ok(Ok(r)) => {
                self.conns.insert(g, conn);
                Ok(r)
            }
            Ok(Err(e)) => Err(Failure::Uncertain(format!(
                "group {g}'s leader went away: {e}"
            ))),
            Err(_) => Err(Failure::Uncertain(format!(
                "group {g} did not answer within {CALL_TIMEOUT:?}"
            ))),
        }
    }

    /// The address of group `g`'s leader.
    async fn leader(&mut self, g: u32) -> Result<String, Failure> {
        match self
            .client
            .name_get(&self.realm, &self.layout.leader(g))
            .await
        {
            Ok(e) => Ok(String::from_utf8_lossy(&e.data).into_owned()),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                Err(Failure::Again(format!("group {g} has no leader")))
            }
            Err(e) => Err(Failure::Again(format!("group {g}'s leader: {e}"))),
        }
    }

    async fn connect(&mut self, g: u32) -> Result<Conn, Failure> {
        let leader = self.leader(g).await?;
        open(&leader, &self.password).await
    }

    /// Sends read `req` to group `g`'s leader over the shared [`Pipe`].
    async fn read(&mut self, g: u32, req: &[&[u8]]) -> Result<Reply, Failure> {
        let pipe = match self.pipes.get(&g).filter(|p| p.usable()) {
            Some(p) => p.clone(),
            None => {
                let leader = self.leader(g).await?;
                let p = Pipe::to(&leader, &self.password).await?;
                self.pipes.insert(g, p.clone());
                p
            }
        };
        pipe.call(req).await.map_err(|e| {
            self.pipes.remove(&g);
            Failure::Uncertain(format!("group {g}'s leader: {e}"))
        })
    }
}

/// A clerk's id: 8 random bytes (two clerks sharing one would see each
/// other's requests as already applied).
fn random_id() -> Result<u64> {
    crate::config::random("a clerk's id").map(u64::from_le_bytes)
}

/// Where [`Clerk::retrying`] sends a request.
enum Target<'a> {
    /// Every group (a command about the whole keyspace).
    Every,
    /// Split over the groups of its keys ([`Clerk::call`]).
    Split {
        spec: &'static command::Spec,
        keys: &'a [&'a [u8]],
        once: Option<RequestId>,
    },
    /// The group of this key (the first group if none).
    One(Option<&'a [u8]>),
    /// The group that serves this shard.
    Shard(u32),
}

/// A kvd's error: `Ok` the failure to try again on (MOVED, TRYAGAIN,
/// UNCERTAIN), `Err` the error itself for the caller.
fn classify(e: String) -> Result<Failure, String> {
    match e.split(' ').next().unwrap_or_default() {
        "MOVED" => Ok(Failure::Moved),
        "TRYAGAIN" => Ok(Failure::Again(e)),
        "UNCERTAIN" => Ok(Failure::Uncertain(e)),
        _ => Err(e),
    }
}

fn unexpected(r: &Reply) -> Error {
    match r {
        Reply::Error(e) => Error::Reply(e.clone()),
        r => Error::Reply(format!("unexpected reply {r:?}")),
    }
}

impl Clerk {
    /// Keys group `g`'s leader serves now (its DBSIZE), once.
    pub async fn keys_of(&mut self, g: u32) -> Result<i64> {
        match self.send(g, &[b"DBSIZE"]).await {
            Ok(Reply::Integer(k)) => Ok(k),
            Ok(r) => Err(unexpected(&r)),
            Err(Failure::Moved) => Err(Error::Unavailable("config changed".into())),
            Err(Failure::Again(e) | Failure::Uncertain(e)) => Err(Error::Unavailable(e)),
        }
    }

    /// Keys in the whole service (DBSIZE of every group's leader).
    pub async fn dbsize(&mut self) -> Result<i64> {
        let mut n = 0;
        for g in self.config.groups.clone() {
            match self.send(g, &[b"DBSIZE"]).await {
                Ok(Reply::Integer(k)) => n += k,
                Ok(r) => return Err(unexpected(&r)),
                Err(Failure::Moved) => return Err(Error::Unavailable("config changed".into())),
                Err(Failure::Again(e) | Failure::Uncertain(e)) => {
                    return Err(Error::Unavailable(e))
                }
            }
        }
        Ok(n)
    }
}

/// A connection to one kvd of its own, for a subscriber ([`crate::pubsub`]).
pub type Link = (BufReader<OwnedReadHalf>, OwnedWriteHalf);

impl Clerk {
    /// `RANDOMKEY`: a random key of a group picked at random, or of the
    /// next one if it has none; nil if no group has any.
    pub async fn random_key(&mut self) -> Result<Reply> {
        let groups = self.config.groups.clone();
        let start = crate::config::random::<8>("a random group").map(u64::from_le_bytes)? as usize;
        for i in 0..groups.len() {
            let g = groups[start.wrapping_add(i) % groups.len()];
            match self.send(g, &[b"RANDOMKEY"]).await {
                Ok(Reply::Null) => continue,
                Ok(r) => return Ok(r),
                Err(Failure::Moved) => return Err(Error::Unavailable("config changed".into())),
                Err(Failure::Again(e) | Failure::Uncertain(e)) => {
                    return Err(Error::Unavailable(e))
                }
            }
        }
        Ok(Reply::Null)
    }

    /// A read about shard `s` (`TABOS.SCAN`), at the group that serves it,
    /// tried again as [`Clerk::call`] does.
    pub async fn send_to_shard(&mut self, s: u32, req: &[&[u8]]) -> Result<Reply> {
        self.retrying(Target::Shard(s), req, true, "the request")
            .await
    }

    /// `PUBLISH channel message` to every group's leader, once each (pub/sub
    /// is at most once: a group without a leader now misses it); the
    /// subscribers it reached.
    pub async fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        let mut n = 0;
        for g in self.config.groups.clone() {
            if let Ok(Reply::Integer(k)) = self.send(g, &[b"PUBLISH", channel, message]).await {
                n += k;
            }
        }
        n
    }

    /// A read about the whole service (`PUBSUB …`): sent to every group,
    /// arrays joined and integers summed, tried again as [`Clerk::call`].
    pub async fn ask_every(&mut self, args: &[&[u8]]) -> Result<Reply> {
        self.retrying(Target::Every, args, true, "the request")
            .await
    }

    /// A subscriber's connection to the leader of one of the groups (the
    /// one `pick` falls on, so that subscribers spread), in RESP3.
    pub async fn link(&mut self, pick: u64) -> Result<Link> {
        if let Err(e) = self.reread_config().await {
            return Err(Error::Unavailable(format!("the service's config: {e}")));
        }
        let groups = &self.config.groups;
        let Some(g) = groups
            .get((pick % groups.len().max(1) as u64) as usize)
            .copied()
        else {
            return Err(Error::Unavailable("the service has no groups".into()));
        };
        match self.connect(g).await {
            Ok(c) => Ok((c.r, c.w)),
            Err(Failure::Moved) => Err(Error::Unavailable("config changed".into())),
            Err(Failure::Again(e) | Failure::Uncertain(e)) => Err(Error::Unavailable(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A stand-in kvd on loopback: signs every connection in (HELLO), then
    /// answers its first `answered` reads with `+OK` and the rest never.
    async fn kvd(answered: usize) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (sock, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut r = BufReader::new(r);
                    let mut n = 0;
                    while let Ok(Some(req)) = resp::read_request(&mut r).await {
                        let reply = if req[0] == b"HELLO" {
                            Reply::Map(Vec::new())
                        } else if n < answered {
                            n += 1;
                            Reply::ok()
                        } else {
                            continue;
                        };
                        let mut out = Vec::new();
                        reply.encode_as(resp::Proto::Resp3, &mut out);
                        w.write_all(&out).await.unwrap();
                    }
                });
            }
        });
        addr
    }

    /// A kvd that stops answering: the read waiting fails once the
    /// watchdog sees it [`CALL_TIMEOUT`] old (within a watch period), the
    /// pipe is given up, and the next clerk gets a new one that works.
    #[tokio::test(start_paused = true)]
    async fn a_pipe_whose_kvd_stops_answering_is_given_up() {
        let addr = kvd(1).await;
        let pipe = Pipe::to(&addr, "pw").await.unwrap();
        assert!(matches!(pipe.call(&[b"GET", b"a"]).await, Ok(Reply::Simple(s)) if s == "OK"));
        let t0 = tokio::time::Instant::now();
        let e = tokio::time::timeout(CALL_TIMEOUT * 3, pipe.call(&[b"GET", b"b"]))
            .await
            .expect("the watchdog gives the pipe up")
            .unwrap_err();
        let waited = t0.elapsed();
        assert!(e.contains("no answer within"), "{e}");
        assert!(
            waited >= CALL_TIMEOUT && waited <= CALL_TIMEOUT + PIPE_WATCH_PERIOD,
            "{waited:?}"
        );
        assert!(!pipe.usable());
        // Queued after the pipe broke: told at once, never left waiting.
        assert!(pipe.call(&[b"GET", b"c"]).await.is_err());
        let again = Pipe::to(&addr, "pw").await.unwrap();
        assert!(!Arc::ptr_eq(&pipe, &again));
        assert!(matches!(
            again.call(&[b"GET", b"a"]).await,
            Ok(Reply::Simple(_))
        ));
    }

    /// Clerks off the loops share the process's pipe to a kvd; clerks on
    /// an event loop share that loop's, which no other loop uses.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clerks_share_one_pipe_per_loop() {
        let addr = kvd(usize::MAX).await;
        let p1 = Pipe::to(&addr, "pw").await.unwrap();
        let p2 = Pipe::to(&addr, "pw").await.unwrap();
        assert!(Arc::ptr_eq(&p1, &p2));
        let loops = crate::loops::Loops::start(2, "test-loop").unwrap();
        let (got_tx, mut got) = mpsc::channel(3);
        let mut releases = Vec::new();
        for _ in 0..3 {
            let (release, released) = oneshot::channel::<()>();
            releases.push(release);
            let (addr, got_tx) = (addr.clone(), got_tx.clone());
            // Held until released, so the loops' counts spread them.
            loops.spawn(move || async move {
                let pipe = Pipe::to(&addr, "pw").await.unwrap();
                let _ = got_tx.send((crate::loops::current(), pipe)).await;
                let _ = released.await;
            });
        }
        let mut on = Vec::new();
        for _ in 0..3 {
            on.push(got.recv().await.unwrap());
        }
        on.sort_by_key(|(l, _)| *l);
        let (a, b, c) = (&on[0], &on[1], &on[2]);
        assert!(a.0.is_some() && c.0.is_some());
        assert_eq!(a.0, b.0, "three connections over two loops: two share one");
        assert_ne!(b.0, c.0);
        assert!(Arc::ptr_eq(&a.1, &b.1), "one loop, one pipe");
        assert!(!Arc::ptr_eq(&b.1, &c.1), "another loop, another pipe");
        assert!(!Arc::ptr_eq(&a.1, &p1) && !Arc::ptr_eq(&c.1, &p1));
        for (_, p) in &on {
            assert!(matches!(
                p.call(&[b"GET", b"k"]).await,
                Ok(Reply::Simple(_))
            ));
        }
        drop(releases);
    }
}
