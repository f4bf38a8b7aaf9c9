//! A shard's pairs in memory, and their durable state in the kernel
//! database: a snapshot in tabos fs, and the ops after it in its group's
//! log in the namespace (see [`crate::config`] for the paths).
//!
//! A group's leader appends one entry per write batch to its group's log —
//! the ops of every shard the batch touched, so a batch costs one append
//! however many shards it spans — fenced by the group's log epoch, which
//! each new leader raises ([`take_group`]): a deposed leader, however slow,
//! cannot acknowledge a write its successor would not see.
//!
//! A shard's snapshot pointer ([`Pointer`]) says which group's log holds
//! the shard's ops after the snapshot, and from which entry. Whoever serves
//! a shard first *takes* it ([`take`]: a new shard epoch, which fences the
//! snapshot writes of earlier holders) and [`load`]s it: the snapshot,
//! then the entries after it in the pointer's group log, its ops only. A
//! group writes a pointer for a shard before serving it, so every shard
//! that has ops has a pointer naming the log that holds them; a mover
//! folds a moving shard into a new snapshot pointing at its new group's
//! log ([`crate::balancer::mover`]); and a group deletes the entries of its
//! log that no pointer still needs ([`trim_bound`]).
//!
//! Services written before the group logs kept a log per shard
//! (`shard/<s>/log`, pointer `"<seq> <path>"`): a load replays what is
//! left of it before the group's log, and the shard is then folded into a
//! new snapshot and its old log removed.

use std::collections::HashMap;

use tabos_client::proto::Fence;
use tabos_client::Client;

use crate::config::Layout;
use crate::{Error, Result, FS_USER};

/// By default a group snapshots its shards once its log has this many
/// entries per shard it serves ([`crate::config::Policy::compact_at`]).
pub const LOG_COMPACT_AT: u32 = 1_024;
/// Most entries a group's log grows to before its shards are snapshotted
/// (which keeps it far under one directory read).
pub const LOG_COMPACT_MAX: u32 = 4_096;
/// Most log entries one load reads (a directory read holds 10,000).
pub const LOG_READ_MAX: usize = 8_192;
/// Largest snapshot chunk written or read at once.
const SNAP_CHUNK_BYTES: usize = tabos_client::fs::CHUNK_BYTES;

/// How long a shard remembers a clerk's last request: far longer than a
/// clerk keeps sending one ([`crate::clerk::RETRY_MAX`]), so a request
/// sent again is never applied twice.
pub const REQUEST_KEEP: std::time::Duration = std::time::Duration::from_secs(600);
/// Most clerks a shard remembers (the oldest are forgotten first, at a
/// snapshot).
pub const REQUESTS_MAX: usize = 65_536;

/// A clerk's request, applied at most once per shard: the clerk's random
/// id and its sequence number, which only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub client: u64,
    pub seq: u64,
}

/// One write in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Set(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    /// The key's deadline: when (ms since the epoch, the kvd's clock) it
    /// expires; 0 takes its deadline away. A `Set` keeps the deadline a
    /// key has (INCR and APPEND do, as in Redis); a command that discards
    /// it (SET) follows its `Set` with an `Expire` of 0.
    Expire(Vec<u8>, i64),
    /// Every key of the shard goes (FLUSHALL); the requests it
    /// remembers stay.
    Clear,
    /// Field `1` of hash `0` is set to `2` (a key that is not a hash
    /// becomes one: the commands check types first).
    HSet(Vec<u8>, Vec<u8>, Vec<u8>),
    /// Field `1` of hash `0` goes; a hash left empty goes with its
    /// deadline, as in Redis.
    HDel(Vec<u8>, Vec<u8>),
    /// Request `id` is applied by this batch (at `at_us`, µs since the
    /// epoch, when it is forgotten from).
    Done {
        id: RequestId,
        at_us: i64,
    },
}

impl Op {
    /// The key the op is about (none for a done or a clear).
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Op::Set(k, _) | Op::Del(k) | Op::Expire(k, _) | Op::HSet(k, _, _) | Op::HDel(k, _) => {
                Some(k)
            }
            Op::Clear | Op::Done { .. } => None,
        }
    }
}

/// A hash's fields, in order (so that HGETALL answers the same way every
/// time).
pub type Fields = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

/// A key's value: a string or a hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Str(Vec<u8>),
    Hash(Fields),
}

impl Value {
    /// Its type's name, as TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
        }
    }
}

/// A key's value and deadline (ms since the epoch; 0: none), whether or
/// not the deadline has passed; `None`: no such key.
pub type Stored = Option<(Value, i64)>;

/// Applies `op` (one with a key) to `slot`, the state of its key.
pub fn apply_to(slot: &mut Stored, op: &Op) {
    match op {
        Op::Set(_, v) => {
            let d = slot.as_ref().map_or(0, |(_, d)| *d);
            *slot = Some((Value::Str(v.clone()), d));
        }
        Op::Del(_) => *slot = None,
        Op::Expire(_, d) => {
            if let Some((_, now)) = slot {
                *now = *d;
            }
        }
        Op::HSet(_, f, v) => match slot {
            Some((Value::Hash(h), _)) => {
                h.insert(f.clone(), v.clone());
            }
            _ => {
                let d = slot.as_ref().map_or(0, |(_, d)| *d);
                let h = std::iter::once((f.clone(), v.clone())).collect();
                *slot = Some((Value::Hash(h), d));
            }
        },
        Op::HDel(_, f) => {
            if let Some((Value::Hash(h), _)) = slot {
                h.remove(f);
                if h.is_empty() {
                    *slot = None;
                }
            }
        }
        Op::Clear | Op::Done { .. } => {}
    }
}

/// A shard's keys.
pub type Pairs = HashMap<Vec<u8>, Value>;

/// What a shard holds: its pairs, and per clerk the last request applied
/// (its sequence number and when), so a request sent again after its
/// outcome was lost — a leader killed between the append and the reply —
/// is answered, not applied a second time over the writes since.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    pub pairs: Pairs,
    /// Deadlines (ms since the epoch) of the keys that have one: a key
    /// past its deadline is not there for any command, and is deleted
    /// durably soon after (the kvd's reaper).
    pub expires: HashMap<Vec<u8>, i64>,
    pub requests: HashMap<u64, (u64, i64)>,
}

impl Contents {
    /// The value of `k` unless it is absent or past its deadline at
    /// `now_ms`, with its deadline (0: none).
    pub fn live(&self, k: &[u8], now_ms: i64) -> Option<(&Value, i64)> {
        let v = self.pairs.get(k)?;
        let deadline = self.expires.get(k).copied().unwrap_or(0);
        (deadline == 0 || deadline > now_ms).then_some((v, deadline))
    }

    /// Keys past their deadline at `now_ms`, at most `max`.
    pub fn expired(&self, now_ms: i64, max: usize) -> Vec<Vec<u8>> {
        self.expires
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .take(max)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Keys not past their deadline at `now_ms`.
    pub fn live_len(&self, now_ms: i64) -> usize {
        self.pairs.len() - self.expires.values().filter(|d| **d <= now_ms).count()
    }

    /// Whether request `id` is already applied to this shard.
    pub fn applied(&self, id: RequestId) -> bool {
        self.requests
            .get(&id.client)
            .is_some_and(|(seq, _)| *seq >= id.seq)
    }

    /// Forgets the requests older than [`REQUEST_KEEP`] before `now_us`,
    /// and the oldest past [`REQUESTS_MAX`].
    pub fn forget_old(&mut self, now_us: i64) {
        let keep_from = now_us.saturating_sub(REQUEST_KEEP.as_micros() as i64);
        self.requests.retain(|_, (_, at)| *at >= keep_from);
        if self.requests.len() > REQUESTS_MAX {
            let mut ats: Vec<i64> = self.requests.values().map(|(_, at)| *at).collect();
            ats.sort_unstable();
            let cut = ats[self.requests.len() - REQUESTS_MAX];
            self.requests.retain(|_, (_, at)| *at >= cut);
        }
    }
}

/// Applies `op` to `contents`.
pub fn apply(contents: &mut Contents, op: &Op) {
    match op {
        Op::Clear => {
            contents.pairs.clear();
            contents.expires.clear();
        }
        Op::Done { id, at_us } => {
            let e = contents.requests.entry(id.client).or_insert((0, *at_us));
            if id.seq >= e.0 {
                *e = (id.seq, *at_us);
            }
        }
        // A string set in place: no copy of what was there.
        Op::Set(k, v) => {
            contents.pairs.insert(k.clone(), Value::Str(v.clone()));
        }
        Op::HSet(k, f, v) => match contents.pairs.get_mut(k) {
            Some(Value::Hash(h)) => {
                h.insert(f.clone(), v.clone());
            }
            _ => {
                let h = std::iter::once((f.clone(), v.clone())).collect();
                contents.pairs.insert(k.clone(), Value::Hash(h));
            }
        },
        Op::HDel(k, f) => {
            if let Some(Value::Hash(h)) = contents.pairs.get_mut(k) {
                h.remove(f);
                if h.is_empty() {
                    contents.pairs.remove(k);
                    contents.expires.remove(k);
                }
            }
        }
        Op::Del(k) => {
            contents.pairs.remove(k);
            contents.expires.remove(k);
        }
        Op::Expire(k, 0) => {
            contents.expires.remove(k);
        }
        Op::Expire(k, deadline) => {
            if contents.pairs.contains_key(k) {
                contents.expires.insert(k.clone(), *deadline);
            }
        }
    }
}

/// Encodes a batch: per op a tag (1 set, 2 del, 3 done, 4 expire, 5
/// clear, 6 hash set: key, field, value; 7 hash del: key, field), then
/// for a set the key and the value, for a del the key, each
/// length-prefixed (u32 little-endian), for a done the client, the
/// sequence number and the time (8 bytes each, little-endian), and for an
/// expire the key and the deadline (8 bytes, little-endian).
pub fn encode(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    for op in ops {
        encode_op(&mut out, op);
    }
    out
}

fn encode_op(out: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Set(k, v) => encode_set(out, k, v),
        Op::Del(k) => {
            out.push(2);
            put(out, k);
        }
        Op::Done { id, at_us } => {
            out.push(3);
            out.extend_from_slice(&id.client.to_le_bytes());
            out.extend_from_slice(&id.seq.to_le_bytes());
            out.extend_from_slice(&at_us.to_le_bytes());
        }
        Op::Expire(k, deadline) => {
            out.push(4);
            put(out, k);
            out.extend_from_slice(&deadline.to_le_bytes());
        }
        Op::Clear => out.push(5),
        Op::HSet(k, f, v) => {
            out.push(6);
            put(out, k);
            put(out, f);
            put(out, v);
        }
        Op::HDel(k, f) => {
            out.push(7);
            put(out, k);
            put(out, f);
        }
    }
}

fn encode_set(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    out.push(1);
    put(out, k);
    put(out, v);
}

/// Encodes a shard's contents as a batch (a snapshot): its pairs as sets,
/// their deadlines as expires, its requests as dones.
pub fn encode_contents(contents: &Contents) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in &contents.pairs {
        match v {
            Value::Str(v) => encode_set(&mut out, k, v),
            Value::Hash(h) => {
                for (f, v) in h {
                    encode_op(&mut out, &Op::HSet(k.clone(), f.clone(), v.clone()));
                }
            }
        }
    }
    for (k, deadline) in &contents.expires {
        encode_op(&mut out, &Op::Expire(k.clone(), *deadline));
    }
    for (client, (seq, at_us)) in &contents.requests {
        let id = RequestId {
            client: *client,
            seq: *seq,
        };
        encode_op(&mut out, &Op::Done { id, at_us: *at_us });
    }
    out
}

fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Decodes a batch (or snapshot), checking every length.
pub fn decode(mut bytes: &[u8]) -> Result<Vec<Op>> {
    fn take<'a>(b: &mut &'a [u8]) -> Result<&'a [u8]> {
        let corrupt = || Error::Corrupt("a log entry is cut short".into());
        if b.len() < 4 {
            return Err(corrupt());
        }
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if b.len() < 4 + n {
            return Err(corrupt());
        }
        let out = &b[4..4 + n];
        *b = &b[4 + n..];
        Ok(out)
    }
    let mut ops = Vec::new();
    while let Some((tag, rest)) = bytes.split_first() {
        bytes = rest;
        ops.push(match tag {
            1 => {
                let k = take(&mut bytes)?.to_vec();
                Op::Set(k, take(&mut bytes)?.to_vec())
            }
            2 => Op::Del(take(&mut bytes)?.to_vec()),
            3 => {
                let Some((fixed, rest)) = bytes.split_first_chunk::<24>() else {
                    return Err(Error::Corrupt("a log entry is cut short".into()));
                };
                bytes = rest;
                let word = |i: usize| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&fixed[8 * i..8 * i + 8]);
                    w
                };
                Op::Done {
                    id: RequestId {
                        client: u64::from_le_bytes(word(0)),
                        seq: u64::from_le_bytes(word(1)),
                    },
                    at_us: i64::from_le_bytes(word(2)),
                }
            }
            4 => {
                let k = take(&mut bytes)?.to_vec();
                let Some((deadline, rest)) = bytes.split_first_chunk::<8>() else {
                    return Err(Error::Corrupt("a log entry is cut short".into()));
                };
                bytes = rest;
                Op::Expire(k, i64::from_le_bytes(*deadline))
            }
            5 => Op::Clear,
            6 => {
                let k = take(&mut bytes)?.to_vec();
                let f = take(&mut bytes)?.to_vec();
                Op::HSet(k, f, take(&mut bytes)?.to_vec())
            }
            7 => {
                let k = take(&mut bytes)?.to_vec();
                Op::HDel(k, take(&mut bytes)?.to_vec())
            }
            t => return Err(Error::Corrupt(format!("unknown op tag {t} in a log entry"))),
        });
    }
    Ok(ops)
}

/// Encodes a group log entry: per shard touched, its number (u32
/// little-endian), the length of its ops (u32 little-endian) and its ops
/// ([`encode`]).
pub fn encode_entry<'a>(parts: impl IntoIterator<Item = (u32, &'a [Op])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (s, ops) in parts {
        out.extend_from_slice(&s.to_le_bytes());
        let ops = encode(ops);
        put(&mut out, &ops);
    }
    out
}

/// A group log entry decoded: per shard touched, its ops.
pub type Entry = Vec<(u32, Vec<Op>)>;

/// Decodes a group log entry, checking every length.
pub fn decode_entry(mut bytes: &[u8]) -> Result<Entry> {
    let corrupt = || Error::Corrupt("a group log entry is cut short".into());
    let mut parts = Vec::new();
    while !bytes.is_empty() {
        let Some((head, rest)) = bytes.split_first_chunk::<8>() else {
            return Err(corrupt());
        };
        let s = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let n = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if rest.len() < n {
            return Err(corrupt());
        }
        parts.push((s, decode(&rest[..n])?));
        bytes = &rest[n..];
    }
    Ok(parts)
}

/// A group's log taken by its new leader: the fence its appends carry.
pub async fn take_group(c: &mut Client, realm: &str, layout: &Layout, g: u32) -> Result<Fence> {
    c.name_mkdir_all(realm, &layout.group_log(g)).await?;
    let epoch = c.advance_epoch(realm, &layout.group_epoch(g)).await?;
    let fence = Fence {
        dir: layout.group_log(g),
        epoch,
    };
    c.fence(realm, fence.clone()).await?;
    Ok(fence)
}

/// The entries of group `g`'s log (sequence number and data), in order;
/// none if it has no log yet.
pub async fn read_group_log(
    c: &mut Client,
    realm: &str,
    layout: &Layout,
    g: u32,
) -> Result<Vec<(u64, Vec<u8>)>> {
    read_log_dir(c, realm, &layout.group_log(g)).await
}

async fn read_log_dir(c: &mut Client, realm: &str, dir: &str) -> Result<Vec<(u64, Vec<u8>)>> {
    let entries = match c.name_readdir(realm, dir).await {
        Ok(r) => {
            if r.more || r.entries.len() > LOG_READ_MAX {
                return Err(Error::Corrupt(format!(
                    "{dir} has more than {LOG_READ_MAX} entries"
                )));
            }
            r.entries
        }
        Err(e) if e.code() == Some(tonic::Code::NotFound) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mut log = Vec::with_capacity(entries.len());
    for e in entries {
        let name = e.path.rsplit('/').next().unwrap_or_default();
        let seq: u64 = name
            .parse()
            .map_err(|_| Error::Corrupt(format!("log entry {}", e.path)))?;
        log.push((seq, e.data));
    }
    log.sort_by_key(|(seq, _)| *seq);
    Ok(log)
}

/// A group's log, read and decoded once for the loads of several shards
/// (a leader taking its shards reads it once, not once per shard).
pub struct GroupLog {
    pub group: u32,
    /// Per entry in order: its sequence number and, per shard, its ops.
    entries: Vec<(u64, Entry)>,
}

impl GroupLog {
    pub async fn read(c: &mut Client, realm: &str, layout: &Layout, g: u32) -> Result<GroupLog> {
        let entries = read_group_log(c, realm, layout, g)
            .await?
            .into_iter()
            .map(|(seq, data)| Ok((seq, decode_entry(&data)?)))
            .collect::<Result<_>>()?;
        Ok(GroupLog { group: g, entries })
    }

    /// Its last entry's sequence number (0: none).
    pub fn head(&self) -> u64 {
        self.entries.last().map_or(0, |(seq, _)| *seq)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Shard `s`'s ops in the entries after `seq`, in order.
    fn ops_after(&self, s: u32, seq: u64) -> impl Iterator<Item = &Op> {
        self.entries
            .iter()
            .filter(move |(at, _)| *at > seq)
            .flat_map(move |(_, parts)| parts.iter().filter(move |(shard, _)| *shard == s))
            .flat_map(|(_, ops)| ops.iter())
    }
}

/// The last entry of group `g`'s log (0: none).
pub async fn group_log_head(c: &mut Client, realm: &str, layout: &Layout, g: u32) -> Result<u64> {
    Ok(read_group_log(c, realm, layout, g)
        .await?
        .last()
        .map_or(0, |(seq, _)| *seq))
}

/// The entries of group `g`'s log up to which no shard's pointer needs
/// it: the least entry a pointer into that log starts after (`None`: no
/// pointer names it). Every shard of the service is asked (`shards` of
/// them), in batches.
pub async fn trim_bound(
    c: &mut Client,
    realm: &str,
    layout: &Layout,
    shards: u32,
    g: u32,
) -> Result<Option<u64>> {
    let mut bound: Option<u64> = None;
    let all: Vec<u32> = (0..shards).collect();
    for chunk in all.chunks(tabos_client::batch::BATCH_CALLS_MAX) {
        let calls = chunk
            .iter()
            .map(|s| {
                tabos_client::proto::batch_call::Call::NamesGet(tabos_client::proto::NameRequest {
                    realm: realm.into(),
                    path: layout.snap(*s),
                })
            })
            .collect();
        for r in c.batch_independent(calls).await? {
            match r {
                Ok(tabos_client::proto::batch_result::Result::NamesGet(e)) => {
                    if let Pointer::Group { group, seq, .. } = Pointer::parse(&e.data)? {
                        if group == g {
                            bound = Some(bound.map_or(seq, |b| b.min(seq)));
                        }
                    }
                }
                Ok(_) => return Err(Error::Corrupt("a get answered with another call".into())),
                Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(bound)
}

/// Removes the entries of the log in `dir` up to `upto` (all: `None`),
/// each removal carrying `fence`.
async fn remove_entries(
    c: &mut Client,
    realm: &str,
    dir: &str,
    upto: Option<u64>,
    fence: &Fence,
) -> Result<()> {
    let done: Vec<String> = read_log_dir(c, realm, dir)
        .await?
        .into_iter()
        .filter(|(seq, _)| upto.is_none_or(|u| *seq <= u))
        .map(|(seq, _)| format!("{dir}/{seq:020}"))
        .collect();
    for chunk in done.chunks(tabos_client::batch::BATCH_CALLS_MAX) {
        let calls = chunk
            .iter()
            .map(|p| {
                tabos_client::proto::batch_call::Call::NamesRemove(
                    tabos_client::proto::RemoveNameRequest {
                        realm: realm.into(),
                        path: p.clone(),
                        if_version: None,
                        fence: Some(fence.clone()),
                    },
                )
            })
            .collect();
        for r in c.batch_independent(calls).await? {
            match r {
                Ok(_) => {}
                Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Removes group `g`'s log entries up to `upto` (its leader's `fence`).
pub async fn trim_group_log(
    c: &mut Client,
    realm: &str,
    layout: &Layout,
    g: u32,
    upto: u64,
    fence: &Fence,
) -> Result<()> {
    remove_entries(c, realm, &layout.group_log(g), Some(upto), fence).await
}

/// A shard taken: the fence every write to its state carries.
#[derive(Debug, Clone)]
pub struct Taken {
    pub shard: u32,
    pub fence: Fence,
}

/// Takes shard `s`: a new epoch, and its directory fenced at it.
pub async fn take(c: &mut Client, realm: &str, layout: &Layout, s: u32) -> Result<Taken> {
    let epoch = c.advance_epoch(realm, &layout.shard_epoch(s)).await?;
    let fence = Fence {
        dir: layout.shard(s),
        epoch,
    };
    c.fence(realm, fence.clone()).await?;
    Ok(Taken { shard: s, fence })
}

/// A shard loaded from the database.
#[derive(Debug, Default)]
pub struct Loaded {
    pub contents: Contents,
    /// It has what was written before the group logs (a pointer of the
    /// old form, or entries in its own log): it is to be folded into a
    /// new snapshot before it is served.
    pub legacy: bool,
    /// The group whose log its pointer names (none: no pointer, or one of
    /// the old form).
    pub group: Option<u32>,
}

/// Where a shard's state is (its snapshot pointer's data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pointer {
    /// Written before the group logs, `"<seq> <path>"`: the snapshot
    /// holds the shard's own log up to entry `seq`.
    Legacy { seq: u64, path: String },
    /// `"g<group> <seq> <path>"` (`-`: an empty snapshot, no file): the
    /// snapshot holds the shard up to entry `seq` of group `group`'s log;
    /// its later ops are in that log's later entries.
    Group {
        group: u32,
        seq: u64,
        path: Option<String>,
    },
}

impl Pointer {
    pub fn parse(data: &[u8]) -> Result<Pointer> {
        let text =
            std::str::from_utf8(data).map_err(|_| Error::Corrupt("snapshot pointer".into()))?;
        let bad = || Error::Corrupt(format!("snapshot pointer {text:?}"));
        let words: Vec<&str> = text.splitn(3, ' ').collect();
        match words[..] {
            [g, seq, path] if g.starts_with('g') => Ok(Pointer::Group {
                group: g[1..].parse().map_err(|_| bad())?,
                seq: seq.parse().map_err(|_| bad())?,
                path: (path != "-").then(|| path.to_string()),
            }),
            [seq, ..] => {
                let (_, path) = text.split_once(' ').ok_or_else(bad)?;
                Ok(Pointer::Legacy {
                    seq: seq.parse().map_err(|_| bad())?,
                    path: path.to_string(),
                })
            }
            [] => Err(bad()),
        }
    }

    fn encode(&self) -> Vec<u8> {
        match self {
            Pointer::Legacy { seq, path } => format!("{seq} {path}"),
            Pointer::Group { group, seq, path } => {
                format!("g{group} {seq} {}", path.as_deref().unwrap_or("-"))
            }
        }
        .into_bytes()
    }

    fn path(&self) -> Option<&str> {
        match self {
            Pointer::Legacy { path, .. } => Some(path),
            Pointer::Group { path, .. } => path.as_deref(),
        }
    }
}

/// Shard `s`'s snapshot pointer, if it has one.
async fn pointer(c: &mut Client, realm: &str, layout: &Layout, s: u32) -> Result<Option<Pointer>> {
    match c.name_get(realm, &layout.snap(s)).await {
        Ok(e) => Ok(Some(Pointer::parse(&e.data)?)),
        Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Reads shard `s`'s snapshot and replays what follows it: what is left of
/// its own log (services written before the group logs), then its ops in
/// the entries of its pointer's group log after the snapshot (`known`, if
/// that is the log the pointer names and it was read since the shard was
/// last served, else read here).
pub async fn load(
    c: &mut Client,
    realm: &str,
    layout: &Layout,
    s: u32,
    known: Option<&GroupLog>,
) -> Result<Loaded> {
    let mut out = Loaded::default();
    let pointer = pointer(c, realm, layout, s).await?;
    if let Some(path) = pointer.as_ref().and_then(Pointer::path) {
        let mut bytes = Vec::new();
        c.fs_read_all(realm, FS_USER, path, &mut bytes).await?;
        for op in decode(&bytes)? {
            apply(&mut out.contents, &op);
        }
    }
    if let Some(Pointer::Group { group, .. }) = &pointer {
        out.group = Some(*group);
    }
    // Before the group logs: the shard's own log, after an old-form
    // snapshot's entry (all of it without a snapshot).
    let own_log_from = match &pointer {
        Some(Pointer::Group { .. }) => None,
        Some(Pointer::Legacy { seq, .. }) => {
            out.legacy = true;
            Some(*seq)
        }
        None => Some(0),
    };
    if let Some(from) = own_log_from {
        for (seq, data) in read_log_dir(c, realm, &layout.log(s)).await? {
            out.legacy = true;
            if seq > from {
                for op in decode(&data)? {
                    apply(&mut out.contents, &op);
                }
            }
        }
    }
    if let Some(Pointer::Group { group, seq, .. }) = pointer {
        let read;
        let log = match known.filter(|l| l.group == group) {
            Some(l) => l,
            None => {
                read = GroupLog::read(c, realm, layout, group).await?;
                &read
            }
        };
        log.ops_after(s, seq)
            .for_each(|op| apply(&mut out.contents, op));
    }
    Ok(out)
}

/// Makes sure shard `s`'s directory and the service's snapshot directory
/// exist (once, when the shard is taken, not per snapshot).
pub async fn prepare(c: &mut Client, realm: &str, layout: &Layout, s: u32) -> Result<()> {
    c.name_mkdir_all(realm, &layout.shard(s)).await?;
    for dir in ["/kv".to_string(), layout.snap_dir()] {
        match c.fs_mkdir(realm, FS_USER, &dir, 0o755).await {
            Ok(_) => {}
            Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Points shard `t.shard` at entry `seq` of group `g`'s log with an empty
/// snapshot: for a shard with no ops yet, before it is first served.
pub async fn point_empty(
    c: &mut Client,
    realm: &str,
    layout: &Layout,
    t: &Taken,
    g: u32,
    seq: u64,
) -> Result<()> {
    let p = Pointer::Group {
        group: g,
        seq,
        path: None,
    };
    c.name_set(
        realm,
        &layout.snap(t.shard),
        p.encode(),
        None,
        Some(t.fence.clone()),
    )
    .await?;
    Ok(())
}

/// Writes a new snapshot of shard `t.shard` holding `contents`, which
/// are its state up to entry `seq` of group `g`'s log: the file first,
/// then the pointer (fenced); then what the pointer no longer needs goes
/// (the old file, and a log of the shard's own from before the group
/// logs).
pub async fn snapshot(
    c: &mut Client,
    realm: &str,
    layout: &Layout,
    t: &Taken,
    g: u32,
    seq: u64,
    contents: &Contents,
) -> Result<()> {
    let s = t.shard;
    let old = pointer(c, realm, layout, s).await?;
    let tmp = layout.snap_tmp(s, t.fence.epoch);
    write_file(c, realm, &tmp, &encode_contents(contents), t).await?;
    // Into place (σOS's movers: a temporary file renamed), then pointed to.
    let path = layout.snap_file(s, g, seq);
    c.fs_rename(realm, FS_USER, &tmp, &path).await?;
    let p = Pointer::Group {
        group: g,
        seq,
        path: Some(path.clone()),
    };
    c.name_set(
        realm,
        &layout.snap(s),
        p.encode(),
        None,
        Some(t.fence.clone()),
    )
    .await?;
    if !matches!(old, Some(Pointer::Group { .. })) {
        remove_entries(c, realm, &layout.log(s), None, &t.fence).await?;
    }
    if let Some(old_path) = old.as_ref().and_then(Pointer::path).filter(|p| *p != path) {
        match c.fs_unlink(realm, FS_USER, old_path).await {
            Ok(()) => {}
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn write_file(
    c: &mut Client,
    realm: &str,
    path: &str,
    bytes: &[u8],
    t: &Taken,
) -> Result<()> {
    match c.fs_unlink(realm, FS_USER, path).await {
        Ok(()) => {}
        Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
        Err(e) => return Err(e.into()),
    }
    c.fs_create(realm, FS_USER, path, 0o600).await?;
    let mut at = 0;
    for chunk in bytes.chunks(SNAP_CHUNK_BYTES) {
        c.fs_write_fenced(
            realm,
            FS_USER,
            path,
            at as i64,
            chunk.to_vec(),
            false,
            t.fence.clone(),
        )
        .await?;
        at += chunk.len();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_corruption_is_caught() {
        let id = RequestId { client: 7, seq: 3 };
        let ops = vec![
            Op::Set(b"k".to_vec(), b"v".to_vec()),
            Op::Del(b"k".to_vec()),
            Op::Set(Vec::new(), vec![0; 300]),
            Op::Done { id, at_us: 1_000 },
            Op::Set(b"t".to_vec(), b"1".to_vec()),
            Op::Expire(b"t".to_vec(), 5_000),
            Op::Expire(b"gone".to_vec(), 5_000),
            Op::Clear,
            Op::Set(b"t".to_vec(), b"1".to_vec()),
            Op::Expire(b"t".to_vec(), 5_000),
            Op::Set(Vec::new(), vec![0; 300]),
        ];
        let bytes = encode(&ops);
        assert_eq!(decode(&bytes).unwrap(), ops);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[9]).is_err());
        let mut contents = Contents::default();
        ops.iter().for_each(|o| apply(&mut contents, o));
        assert_eq!(contents.pairs.len(), 2);
        assert_eq!(contents.expires.len(), 1, "no deadline for a key not there");
        assert_eq!(contents.live(b"t", 4_999).map(|(_, d)| d), Some(5_000));
        assert!(contents.live(b"t", 5_000).is_none(), "past its deadline");
        assert_eq!(contents.expired(5_000, 10), [b"t".to_vec()]);
        assert!(contents.applied(id));
        assert!(contents.applied(RequestId { seq: 2, ..id }));
        assert!(!contents.applied(RequestId { seq: 4, ..id }));
        let mut again: Vec<Op> = decode(&encode_contents(&contents)).unwrap();
        again[..2].sort_by_key(|o| format!("{o:?}"));
        assert_eq!(
            again,
            [
                Op::Set(b"t".to_vec(), b"1".to_vec()),
                Op::Set(Vec::new(), vec![0; 300]),
                Op::Expire(b"t".to_vec(), 5_000),
                Op::Done { id, at_us: 1_000 }
            ]
        );
    }

    #[test]
    fn group_log_entries_and_pointers_round_trip_and_corruption_is_caught() {
        let a = vec![Op::Set(b"k".to_vec(), b"v".to_vec()), Op::Clear];
        let b = vec![Op::Del(b"x".to_vec())];
        let bytes = encode_entry([(3, a.as_slice()), (1_000, b.as_slice()), (7, &[][..])]);
        assert_eq!(
            decode_entry(&bytes).unwrap(),
            [(3, a.clone()), (1_000, b.clone()), (7, Vec::new())]
        );
        assert!(decode_entry(&[]).unwrap().is_empty());
        for cut in 1..bytes.len() {
            // Every cut either ends between shards (a shorter entry, as
            // written) or is refused.
            if let Ok(parts) = decode_entry(&bytes[..cut]) {
                assert!(parts.len() < 3, "cut at {cut}");
            }
        }
        assert!(decode_entry(&bytes[..bytes.len() - 1]).is_err());
        let mut bad = bytes.clone();
        bad[4] = 0xff; // the first shard's ops longer than the entry
        assert!(decode_entry(&bad).is_err());

        for p in [
            Pointer::Group {
                group: 2,
                seq: 40,
                path: Some("/kv/t/s1.g2.00000000000000000040".into()),
            },
            Pointer::Group {
                group: 0,
                seq: 0,
                path: None,
            },
            Pointer::Legacy {
                seq: 9,
                path: "/kv/t/s1.00000000000000000009".into(),
            },
        ] {
            assert_eq!(Pointer::parse(&p.encode()).unwrap(), p);
        }
        for bad in ["", "g1 2", "gx 2 /p", "g1 x /p", "x /p", "12"] {
            assert!(Pointer::parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_older_request_does_not_move_a_clerk_back_and_old_ones_are_forgotten() {
        let mut c = Contents::default();
        let done = |client, seq, at_us| Op::Done {
            id: RequestId { client, seq },
            at_us,
        };
        apply(&mut c, &done(1, 5, 10));
        apply(&mut c, &done(1, 4, 20));
        assert_eq!(c.requests[&1], (5, 10));
        let now = REQUEST_KEEP.as_micros() as i64 + 15;
        apply(&mut c, &done(2, 1, now));
        c.forget_old(now);
        assert!(!c.requests.contains_key(&1), "kept past REQUEST_KEEP");
        assert!(c.requests.contains_key(&2));
        for client in 0..(REQUESTS_MAX as u64 + 10) {
            apply(&mut c, &done(100 + client, 1, now + client as i64));
        }
        c.forget_old(now);
        assert_eq!(c.requests.len(), REQUESTS_MAX);
        assert!(c.requests.contains_key(&(100 + REQUESTS_MAX as u64 + 9)));
        assert!(!c.requests.contains_key(&100));
    }
}
