//! The service's data commands, each once: its contract ([`Spec`]: arity,
//! whether it reads or writes, where its keys are, whether a clerk may
//! split it over groups or send it again) and what it does
//! ([`execute`]), as a pure function of its keys' state at one instant.
//!
//! The clerk routes by the contract; a kvd answers reads from memory and
//! computes a write's effects — the shard log's ops and the reply —
//! against memory plus the earlier writes of its batch, appends the ops,
//! and only then applies them and replies. Redis's rules are followed
//! where the service has the command: integers parsed as `string2ll`
//! does, deadlines in milliseconds on the kvd's clock (a key past its
//! deadline is not there for any command, at once; the kvd's reaper
//! deletes it durably soon after), `SET` discards a deadline unless
//! `KEEPTTL`, `INCR`, `APPEND` and `SETRANGE` keep it.

use crate::resp::{parse_integer, Reply};
use crate::shard::{apply_to, Fields, Op, Value};

pub use crate::shard::Stored;

/// Whether a command only reads or may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Where a command's keys are among its arguments (the command first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// None (a command about the whole keyspace: every group is asked).
    Every,
    /// The first argument.
    First,
    /// Every argument.
    All,
    /// Every other argument from the first (MSET's keys).
    Pairs,
    /// The first two arguments (RENAME's, LCS's).
    Two,
}

/// A command's contract.
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    /// Redis's arity: the exact count of words (the command's too), or
    /// at least `-arity` if negative.
    pub arity: i32,
    pub access: Access,
    pub keys: Keys,
    /// Its keys may be in several groups: the clerk sends each group its
    /// part and puts the answers together (each part atomic on its own).
    /// A command that is not split must have all its keys in one shard.
    pub split: bool,
    /// Sending it again after an unknown outcome is harmless (a read, or
    /// a SET/MSET, which shards apply once per request id).
    pub repeatable: bool,
}

const fn spec(name: &'static str, arity: i32, access: Access, keys: Keys) -> Spec {
    Spec {
        name,
        arity,
        access,
        keys,
        split: false,
        repeatable: matches!(access, Access::Read),
    }
}

const fn split(mut s: Spec) -> Spec {
    s.split = true;
    s
}

const fn once(mut s: Spec) -> Spec {
    s.repeatable = true;
    s
}

use Access::{Read, Write};
use Keys::{All, Every, First, Pairs, Two};

/// Every data command the service has.
pub static SPECS: &[Spec] = &[
    spec("GET", 2, Read, First),
    split(spec("MGET", -2, Read, All)),
    split(spec("EXISTS", -2, Read, All)),
    spec("STRLEN", 2, Read, First),
    spec("GETRANGE", 4, Read, First),
    spec("GETBIT", 3, Read, First),
    spec("LCS", -3, Read, Two),
    spec("SUBSTR", 4, Read, First),
    spec("TTL", 2, Read, First),
    spec("PTTL", 2, Read, First),
    spec("EXPIRETIME", 2, Read, First),
    spec("PEXPIRETIME", 2, Read, First),
    spec("TYPE", 2, Read, First),
    spec("DBSIZE", 1, Read, Every),
    spec("KEYS", 2, Read, Every),
    spec("RANDOMKEY", 1, Read, Every),
    spec("RENAME", 3, Write, Two),
    spec("RENAMENX", 3, Write, Two),
    spec("COPY", -3, Write, Two),
    once(spec("SET", -3, Write, First)),
    split(once(spec("MSET", -3, Write, Pairs))),
    spec("MSETNX", -3, Write, Pairs),
    spec("SETNX", 3, Write, First),
    spec("SETEX", 4, Write, First),
    spec("PSETEX", 4, Write, First),
    spec("GETSET", 3, Write, First),
    spec("GETDEL", 2, Write, First),
    spec("GETEX", -2, Write, First),
    spec("APPEND", 3, Write, First),
    spec("SETRANGE", 4, Write, First),
    spec("SETBIT", 4, Write, First),
    spec("INCR", 2, Write, First),
    spec("DECR", 2, Write, First),
    spec("INCRBY", 3, Write, First),
    spec("DECRBY", 3, Write, First),
    spec("INCRBYFLOAT", 3, Write, First),
    split(spec("DEL", -2, Write, All)),
    split(spec("UNLINK", -2, Write, All)),
    spec("EXPIRE", -3, Write, First),
    spec("PEXPIRE", -3, Write, First),
    spec("EXPIREAT", -3, Write, First),
    spec("PEXPIREAT", -3, Write, First),
    spec("PERSIST", 2, Write, First),
    spec("HSET", -4, Write, First),
    spec("HMSET", -4, Write, First),
    spec("HSETNX", 4, Write, First),
    spec("HGET", 3, Read, First),
    spec("HMGET", -3, Read, First),
    spec("HDEL", -3, Write, First),
    spec("HLEN", 2, Read, First),
    spec("HEXISTS", 3, Read, First),
    spec("HSTRLEN", 3, Read, First),
    spec("HKEYS", 2, Read, First),
    spec("HVALS", 2, Read, First),
    spec("HGETALL", 2, Read, First),
    spec("HINCRBY", 4, Write, First),
    spec("HINCRBYFLOAT", 4, Write, First),
    spec("FLUSHALL", -1, Write, Every),
    spec("FLUSHDB", -1, Write, Every),
];

/// The contract of command `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    SPECS
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

impl Spec {
    /// The arity error, if `words` (the command's too) do not fit.
    pub fn check_arity(&self, words: usize) -> Result<(), Reply> {
        let n = words as i32;
        let fits = if self.arity >= 0 {
            n == self.arity
        } else {
            n >= -self.arity
        };
        let pairs_fit = self.keys != Pairs || words % 2 == 1;
        if fits && pairs_fit {
            Ok(())
        } else {
            Err(wrong_arity(self.name))
        }
    }

    /// The positions (in `args`, the command at 0) of its keys.
    pub fn key_positions(&self, words: usize) -> Vec<usize> {
        match self.keys {
            Every => Vec::new(),
            First => vec![1],
            Two => vec![1, 2],
            All => (1..words).collect(),
            Pairs => (1..words).step_by(2).collect(),
        }
    }

    /// Words per key when the command is split (MSET's key and value).
    pub fn stride(&self) -> usize {
        if self.keys == Pairs {
            2
        } else {
            1
        }
    }
}

/// The error Redis gives a command with the wrong count of arguments.
pub fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// The keys' state a command runs against.
pub trait Keyspace {
    /// Key `k` as stored (see [`Stored`]): its value and deadline.
    fn stored(&self, k: &[u8]) -> Option<(&Value, i64)>;
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Largest value a write may leave, in bytes (as Redis's
/// `proto-max-bulk-len`, but the service's).
pub const VALUE_BYTES_MAX: usize = crate::VALUE_BYTES_MAX;

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

/// Runs data command `args` (checked against its [`Spec`]'s arity by the
/// caller) against `ks` at `now_ms`: the ops a write leaves (none for a
/// read, or a write that changes nothing) and the reply.
pub fn execute(ks: &impl Keyspace, args: &[Vec<u8>], now_ms: i64) -> (Vec<Op>, Reply) {
    let mut run = Run {
        ks,
        now_ms,
        ops: Vec::new(),
        changes: std::collections::HashMap::new(),
    };
    let cmd = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    let reply = run.command(&cmd, &args[1..]);
    (run.ops, reply)
}

/// One command's run: the keyspace, the time, the ops so far and what
/// they did (DEL k k deletes once).
struct Run<'a, K: Keyspace> {
    ks: &'a K,
    now_ms: i64,
    ops: Vec<Op>,
    changes: std::collections::HashMap<Vec<u8>, Stored>,
}

/// Where a write leaves a key's deadline.
enum Deadline {
    /// As it was (INCR, APPEND, KEEPTTL).
    Keep,
    /// None (SET, GETSET, MSET).
    Clear,
    /// This one (ms since the epoch).
    At(i64),
}

impl<K: Keyspace> Run<'_, K> {
    /// Key `k` as stored, after this run's ops so far.
    fn stored(&self, k: &[u8]) -> Option<(&Value, i64)> {
        match self.changes.get(k) {
            Some(c) => c.as_ref().map(|(v, d)| (v, *d)),
            None => self.ks.stored(k),
        }
    }

    /// Key `k` if it is there now: its value and deadline (0: none).
    fn live(&self, k: &[u8]) -> Option<(&Value, i64)> {
        self.stored(k).filter(|(_, d)| *d == 0 || *d > self.now_ms)
    }

    /// Records `op` (one with a key), and what it does (the key copied
    /// once, at its first change in this run).
    fn push(&mut self, op: Op) {
        if let Some(k) = op.key() {
            if !self.changes.contains_key(k) {
                let now = self.ks.stored(k).map(|(v, d)| (v.clone(), d));
                self.changes.insert(k.to_vec(), now);
            }
            if let Some(slot) = self.changes.get_mut(k) {
                apply_to(slot, &op);
            }
        }
        self.ops.push(op);
    }

    /// String `k` if it is there now; WRONGTYPE if it is not a string.
    fn value(&self, k: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
        match self.live(k) {
            None => Ok(None),
            Some((Value::Str(v), _)) => Ok(Some(v.clone())),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    /// Hash `k` if it is there now; WRONGTYPE if it is not a hash.
    fn hash(&self, k: &[u8]) -> Result<Option<&Fields>, Reply> {
        match self.live(k) {
            None => Ok(None),
            Some((Value::Hash(h), _)) => Ok(Some(h)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    /// Key `k`, whatever its type, if it is there now (copied).
    fn owned(&self, k: &[u8]) -> Option<(Value, i64)> {
        self.live(k).map(|(v, d)| (v.clone(), d))
    }

    /// Writes `v` (either type) at `k` with deadline `d` (0: none).
    fn put_value(&mut self, k: &[u8], v: Value, d: i64) -> Result<(), Reply> {
        match v {
            Value::Str(s) => self.put(k, s, Deadline::At(d)),
            Value::Hash(h) => {
                if self.stored(k).is_some() {
                    self.push(Op::Del(k.to_vec()));
                }
                for (f, v) in h {
                    self.push(Op::HSet(k.to_vec(), f, v));
                }
                if d != 0 {
                    self.push(Op::Expire(k.to_vec(), d));
                }
                Ok(())
            }
        }
    }

    /// Sets `k` to `v`, its deadline as `deadline` says.
    fn put(&mut self, k: &[u8], v: Vec<u8>, deadline: Deadline) -> Result<(), Reply> {
        if v.len() > VALUE_BYTES_MAX {
            return Err(too_big());
        }
        let stored = self.stored(k).map_or(0, |(_, d)| d);
        let live = self.live(k).map_or(0, |(_, d)| d);
        let want = match deadline {
            Deadline::Keep => live,
            Deadline::Clear => 0,
            Deadline::At(d) => d,
        };
        self.push(Op::Set(k.to_vec(), v));
        if want != stored {
            self.push(Op::Expire(k.to_vec(), want));
        }
        Ok(())
    }

    /// Deletes `k` if it is stored (live or past its deadline); whether
    /// it was live.
    fn delete(&mut self, k: &[u8]) -> bool {
        let live = self.live(k).is_some();
        if self.stored(k).is_some() {
            self.push(Op::Del(k.to_vec()));
        }
        live
    }

    fn command(&mut self, cmd: &str, a: &[Vec<u8>]) -> Reply {
        match self.dispatch(cmd, a) {
            Ok(reply) => reply,
            Err(e) => {
                // An error changes nothing.
                self.ops.clear();
                e
            }
        }
    }

    fn dispatch(&mut self, cmd: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        match cmd {
            "GET" => Ok(self.value(&a[0])?.map_or(Reply::Null, Reply::Bulk)),
            "MGET" => Ok(Reply::Array(
                a.iter()
                    // Not a string: nil, as Redis answers MGET.
                    .map(|k| match self.live(k) {
                        Some((Value::Str(v), _)) => Reply::Bulk(v.clone()),
                        _ => Reply::Null,
                    })
                    .collect(),
            )),
            "EXISTS" => Ok(Reply::Integer(
                a.iter().filter(|k| self.live(k).is_some()).count() as i64,
            )),
            "STRLEN" => Ok(Reply::Integer(
                self.value(&a[0])?.map_or(0, |v| v.len() as i64),
            )),
            "GETRANGE" | "SUBSTR" => self.getrange(a),
            "GETBIT" => {
                let bit = bit_offset(&a[1])?;
                let v = self.value(&a[0])?.unwrap_or_default();
                let byte = v.get((bit / 8) as usize).copied().unwrap_or(0);
                Ok(Reply::Integer(i64::from(byte >> (7 - bit % 8) & 1)))
            }
            "SETBIT" => {
                let bit = bit_offset(&a[1])?;
                let on = match a[2].as_slice() {
                    b"0" => false,
                    b"1" => true,
                    _ => return Err(Reply::err("ERR bit is not an integer or out of range")),
                };
                let at = (bit / 8) as usize;
                if at >= VALUE_BYTES_MAX {
                    return Err(too_big());
                }
                let mut v = self.value(&a[0])?.unwrap_or_default();
                if v.len() <= at {
                    v.resize(at + 1, 0);
                }
                let mask = 1u8 << (7 - bit % 8);
                let old = v[at] & mask != 0;
                if on {
                    v[at] |= mask;
                } else {
                    v[at] &= !mask;
                }
                self.put(&a[0], v, Deadline::Keep)?;
                Ok(Reply::Integer(i64::from(old)))
            }
            "LCS" => self.lcs(a),
            "COPY" => {
                let mut replace = false;
                let mut i = 2;
                while i < a.len() {
                    match a[i].to_ascii_uppercase().as_slice() {
                        b"REPLACE" => replace = true,
                        b"DB" if i + 1 < a.len() => {
                            match parse_integer(&a[i + 1]) {
                                Some(0) => {}
                                Some(_) => return Err(Reply::err("ERR DB index is out of range")),
                                None => return Err(Reply::err(NOT_INTEGER)),
                            }
                            i += 1;
                        }
                        _ => return Err(Reply::err(SYNTAX)),
                    }
                    i += 1;
                }
                if a[0] == a[1] {
                    return Err(Reply::err(
                        "ERR source and destination objects are the same",
                    ));
                }
                let Some((v, d)) = self.owned(&a[0]) else {
                    return Ok(Reply::Integer(0));
                };
                if self.live(&a[1]).is_some() && !replace {
                    return Ok(Reply::Integer(0));
                }
                self.put_value(&a[1], v, d)?;
                Ok(Reply::Integer(1))
            }
            "RENAME" | "RENAMENX" => {
                let Some((v, d)) = self.owned(&a[0]) else {
                    return Err(Reply::err("ERR no such key"));
                };
                if a[0] == a[1] {
                    return Ok(if cmd == "RENAME" {
                        Reply::ok()
                    } else {
                        Reply::Integer(0)
                    });
                }
                if cmd == "RENAMENX" && self.live(&a[1]).is_some() {
                    return Ok(Reply::Integer(0));
                }
                self.delete(&a[0]);
                self.put_value(&a[1], v, d)?;
                Ok(if cmd == "RENAME" {
                    Reply::ok()
                } else {
                    Reply::Integer(1)
                })
            }
            "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" => Ok(self.ttl(cmd, &a[0])),
            "TYPE" => Ok(Reply::Simple(
                self.live(&a[0])
                    .map_or("none", |(v, _)| v.type_name())
                    .into(),
            )),
            "HSET" | "HMSET" | "HSETNX" | "HGET" | "HMGET" | "HDEL" | "HLEN" | "HEXISTS"
            | "HSTRLEN" | "HKEYS" | "HVALS" | "HGETALL" | "HINCRBY" | "HINCRBYFLOAT" => {
                self.hash_command(cmd, a)
            }
            "SET" => self.set(a),
            "SETNX" => {
                if self.live(&a[0]).is_some() {
                    Ok(Reply::Integer(0))
                } else {
                    self.put(&a[0], a[1].clone(), Deadline::Clear)
                        .map(|()| Reply::Integer(1))
                }
            }
            "SETEX" | "PSETEX" => {
                let unit = if cmd == "SETEX" { 1_000 } else { 1 };
                let at = self.deadline_in(&a[1], unit, cmd)?;
                self.put(&a[0], a[2].clone(), Deadline::At(at))
                    .map(|()| Reply::ok())
            }
            "MSET" => {
                for p in a.chunks(2) {
                    self.put(&p[0], p[1].clone(), Deadline::Clear)?;
                }
                Ok(Reply::ok())
            }
            "MSETNX" => {
                if a.chunks(2).any(|p| self.live(&p[0]).is_some()) {
                    return Ok(Reply::Integer(0));
                }
                for p in a.chunks(2) {
                    self.put(&p[0], p[1].clone(), Deadline::Clear)?;
                }
                Ok(Reply::Integer(1))
            }
            "GETSET" => {
                let old = self.value(&a[0])?;
                self.put(&a[0], a[1].clone(), Deadline::Clear)
                    .map(|()| old.map_or(Reply::Null, Reply::Bulk))
            }
            "GETDEL" => {
                let old = self.value(&a[0])?;
                if old.is_some() {
                    self.delete(&a[0]);
                }
                Ok(old.map_or(Reply::Null, Reply::Bulk))
            }
            "GETEX" => self.getex(a),
            "APPEND" => {
                let mut v = self.value(&a[0])?.unwrap_or_default();
                v.extend_from_slice(&a[1]);
                let n = v.len() as i64;
                self.put(&a[0], v, Deadline::Keep)
                    .map(|()| Reply::Integer(n))
            }
            "SETRANGE" => self.setrange(a),
            "INCR" => self.incr_by(&a[0], 1),
            "DECR" => self.incr_by(&a[0], -1),
            "INCRBY" | "DECRBY" => match parse_integer(&a[1]) {
                Some(d) if cmd == "INCRBY" => self.incr_by(&a[0], d),
                Some(d) => match d.checked_neg() {
                    Some(d) => self.incr_by(&a[0], d),
                    None => Err(Reply::err("ERR decrement would overflow")),
                },
                None => Err(Reply::err(NOT_INTEGER)),
            },
            "INCRBYFLOAT" => self.incr_by_float(a),
            "DEL" | "UNLINK" => Ok(Reply::Integer(
                a.iter().filter(|k| self.delete(k)).count() as i64
            )),
            "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => self.expire(cmd, a),
            "PERSIST" => Ok(Reply::Integer(match self.live(&a[0]) {
                Some((_, d)) if d != 0 => {
                    self.push(Op::Expire(a[0].clone(), 0));
                    1
                }
                _ => 0,
            })),
            _ => Err(Reply::err(format!("ERR unknown command '{cmd}'"))),
        }
    }

    /// The hash commands (`a[0]` the key).
    fn hash_command(&mut self, cmd: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let k = &a[0];
        let field = |h: Option<&Fields>, f: &[u8]| h.and_then(|h| h.get(f)).cloned();
        match cmd {
            "HSET" | "HMSET" => {
                if a.len() % 2 != 1 {
                    return Err(wrong_arity(cmd));
                }
                let h = self.hash(k)?;
                let mut new = std::collections::BTreeSet::new();
                for p in a[1..].chunks(2) {
                    if h.is_none_or(|h| !h.contains_key(&p[0])) {
                        new.insert(p[0].clone());
                    }
                    if p[0].len() + p[1].len() > VALUE_BYTES_MAX {
                        return Err(too_big());
                    }
                }
                let size: usize = h.map_or(0, |h| h.iter().map(|(f, v)| f.len() + v.len()).sum());
                let added: usize = a[1..].chunks(2).map(|p| p[0].len() + p[1].len()).sum();
                if size + added > VALUE_BYTES_MAX {
                    return Err(too_big());
                }
                for p in a[1..].chunks(2) {
                    self.push(Op::HSet(k.clone(), p[0].clone(), p[1].clone()));
                }
                Ok(if cmd == "HSET" {
                    Reply::Integer(new.len() as i64)
                } else {
                    Reply::ok()
                })
            }
            "HSETNX" => {
                if field(self.hash(k)?, &a[1]).is_some() {
                    return Ok(Reply::Integer(0));
                }
                self.push(Op::HSet(k.clone(), a[1].clone(), a[2].clone()));
                Ok(Reply::Integer(1))
            }
            "HGET" => Ok(field(self.hash(k)?, &a[1]).map_or(Reply::Null, Reply::Bulk)),
            "HMGET" => {
                let h = self.hash(k)?;
                Ok(Reply::Array(
                    a[1..]
                        .iter()
                        .map(|f| field(h, f).map_or(Reply::Null, Reply::Bulk))
                        .collect(),
                ))
            }
            "HDEL" => {
                let Some(h) = self.hash(k)? else {
                    return Ok(Reply::Integer(0));
                };
                let gone: std::collections::BTreeSet<Vec<u8>> = a[1..]
                    .iter()
                    .filter(|f| h.contains_key(*f))
                    .cloned()
                    .collect();
                let n = gone.len() as i64;
                for f in gone {
                    self.push(Op::HDel(k.clone(), f));
                }
                Ok(Reply::Integer(n))
            }
            "HLEN" => Ok(Reply::Integer(self.hash(k)?.map_or(0, |h| h.len() as i64))),
            "HEXISTS" => Ok(Reply::Integer(i64::from(
                field(self.hash(k)?, &a[1]).is_some(),
            ))),
            "HSTRLEN" => Ok(Reply::Integer(
                field(self.hash(k)?, &a[1]).map_or(0, |v| v.len() as i64),
            )),
            "HKEYS" | "HVALS" => Ok(Reply::Array(
                self.hash(k)?
                    .into_iter()
                    .flatten()
                    .map(|(f, v)| Reply::Bulk(if cmd == "HKEYS" { f } else { v }.clone()))
                    .collect(),
            )),
            "HGETALL" => Ok(Reply::Map(
                self.hash(k)?
                    .into_iter()
                    .flatten()
                    .map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
                    .collect(),
            )),
            "HINCRBY" => {
                let d = parse_integer(&a[2]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
                let now = match field(self.hash(k)?, &a[1]) {
                    None => 0,
                    Some(v) => parse_integer(&v)
                        .ok_or_else(|| Reply::err("ERR hash value is not an integer"))?,
                };
                let n = now
                    .checked_add(d)
                    .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
                self.push(Op::HSet(
                    k.clone(),
                    a[1].clone(),
                    n.to_string().into_bytes(),
                ));
                Ok(Reply::Integer(n))
            }
            _ => {
                // HINCRBYFLOAT
                let d = parse_float(&a[2])
                    .ok_or_else(|| Reply::err("ERR value is not a valid float"))?;
                let now = match field(self.hash(k)?, &a[1]) {
                    None => 0.0,
                    Some(v) => parse_float(&v)
                        .ok_or_else(|| Reply::err("ERR hash value is not a float"))?,
                };
                let n = now + d;
                if !n.is_finite() {
                    return Err(Reply::err("ERR increment would produce NaN or Infinity"));
                }
                let text = format_float(n).into_bytes();
                self.push(Op::HSet(k.clone(), a[1].clone(), text.clone()));
                Ok(Reply::Bulk(text))
            }
        }
    }

    /// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
    fn set(&mut self, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let (k, v) = (&a[0], &a[1]);
        let (mut nx, mut xx, mut get) = (false, false, false);
        let mut deadline: Option<Deadline> = None;
        let mut i = 2;
        while i < a.len() {
            let opt = a[i].to_ascii_uppercase();
            let next = a.get(i + 1);
            match (opt.as_slice(), next) {
                (b"NX", _) if !xx => nx = true,
                (b"XX", _) if !nx => xx = true,
                (b"GET", _) => get = true,
                (b"KEEPTTL", _) if deadline.is_none() => deadline = Some(Deadline::Keep),
                (b"EX" | b"PX" | b"EXAT" | b"PXAT", Some(n)) if deadline.is_none() => {
                    let at = match opt.as_slice() {
                        b"EX" => self.deadline_in(n, 1_000, "set")?,
                        b"PX" => self.deadline_in(n, 1, "set")?,
                        b"EXAT" => deadline_at(n, 1_000, "set")?,
                        _ => deadline_at(n, 1, "set")?,
                    };
                    deadline = Some(Deadline::At(at));
                    i += 1;
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            i += 1;
        }
        // With GET, a key that is not a string is WRONGTYPE and nothing
        // is set; without, SET replaces a key of any type.
        let old = if get { self.value(k)? } else { None };
        let there = self.live(k).is_some();
        let reply_of = |did: bool| match (get, did) {
            (true, _) => old.clone().map_or(Reply::Null, Reply::Bulk),
            (false, true) => Reply::ok(),
            (false, false) => Reply::Null,
        };
        if (nx && there) || (xx && !there) {
            return Ok(reply_of(false));
        }
        self.put(k, v.clone(), deadline.unwrap_or(Deadline::Clear))?;
        Ok(reply_of(true))
    }

    /// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`.
    fn getex(&mut self, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let k = &a[0];
        let opt = a.get(1).map(|o| o.to_ascii_uppercase());
        let deadline = match (opt.as_deref(), &a[1.min(a.len())..]) {
            (None, _) => None,
            (Some(b"PERSIST"), [_]) => Some(0),
            (Some(b"EX"), [_, n]) => Some(self.deadline_in(n, 1_000, "getex")?),
            (Some(b"PX"), [_, n]) => Some(self.deadline_in(n, 1, "getex")?),
            (Some(b"EXAT"), [_, n]) => Some(deadline_at(n, 1_000, "getex")?),
            (Some(b"PXAT"), [_, n]) => Some(deadline_at(n, 1, "getex")?),
            _ => return Err(Reply::err(SYNTAX)),
        };
        let Some(v) = self.value(k)? else {
            return Ok(Reply::Null);
        };
        let now = self.live(k).map_or(0, |(_, d)| d);
        match deadline {
            Some(d) if d != 0 && d <= self.now_ms => {
                self.delete(k);
            }
            Some(d) if d != now => self.push(Op::Expire(k.clone(), d)),
            _ => {}
        }
        Ok(Reply::Bulk(v))
    }

    /// `GETRANGE key start end`: Redis's inclusive range, negative
    /// indexes from the end.
    fn getrange(&mut self, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let (Some(mut start), Some(mut end)) = (parse_integer(&a[1]), parse_integer(&a[2])) else {
            return Err(Reply::err(NOT_INTEGER));
        };
        let v = self.value(&a[0])?.unwrap_or_default();
        let len = v.len() as i64;
        if start < 0 && end < 0 && start > end {
            return Ok(Reply::Bulk(Vec::new()));
        }
        if start < 0 {
            start = (len + start).max(0);
        }
        if end < 0 {
            end = (len + end).max(0);
        }
        end = end.min(len - 1);
        if len == 0 || start > end {
            return Ok(Reply::Bulk(Vec::new()));
        }
        Ok(Reply::Bulk(v[start as usize..=end as usize].to_vec()))
    }

    /// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`: the
    /// longest common subsequence, its length, or its matching ranges
    /// (from the end, as Redis lists them).
    fn lcs(&mut self, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
        let mut i = 2;
        while i < a.len() {
            match a[i].to_ascii_uppercase().as_slice() {
                b"LEN" => len_only = true,
                b"IDX" => idx = true,
                b"WITHMATCHLEN" => with_len = true,
                b"MINMATCHLEN" if i + 1 < a.len() => {
                    min_len = parse_integer(&a[i + 1])
                        .ok_or_else(|| Reply::err(NOT_INTEGER))?
                        .max(0);
                    i += 1;
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            i += 1;
        }
        if idx && len_only {
            return Err(Reply::err(
                "ERR If you want both the length and indexes, please just use IDX.",
            ));
        }
        let x = self.value(&a[0])?.unwrap_or_default();
        let y = self.value(&a[1])?.unwrap_or_default();
        let (n, m) = (x.len(), y.len());
        if (n + 1).saturating_mul(m + 1) > LCS_CELLS_MAX {
            return Err(Reply::err(format!(
                "ERR LCS of strings this long needs more than {LCS_CELLS_MAX} cells"
            )));
        }
        // The classic table: at(i, j) is the LCS of x[..i] and y[..j].
        let mut table = vec![0u32; (n + 1) * (m + 1)];
        let at = |i: usize, j: usize| j + i * (m + 1);
        for i in 1..=n {
            for j in 1..=m {
                table[at(i, j)] = if x[i - 1] == y[j - 1] {
                    table[at(i - 1, j - 1)] + 1
                } else {
                    table[at(i - 1, j)].max(table[at(i, j - 1)])
                };
            }
        }
        let total = table[at(n, m)];
        if len_only {
            return Ok(Reply::Integer(i64::from(total)));
        }
        // Walked back from the end, as Redis does, ranges emitted as
        // they close.
        let mut common = vec![0u8; total as usize];
        let mut k = total as usize;
        let (mut i, mut j) = (n, m);
        let unset = n;
        let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0, 0, 0);
        let mut matches = Vec::new();
        while i > 0 && j > 0 {
            let mut emit = false;
            if x[i - 1] == y[j - 1] {
                common[k - 1] = x[i - 1];
                if a_start == unset {
                    (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
                } else if a_start == i && b_start == j {
                    a_start -= 1;
                    b_start -= 1;
                } else {
                    emit = true;
                }
                if a_start == 0 || b_start == 0 {
                    emit = true;
                }
                k -= 1;
                i -= 1;
                j -= 1;
            } else {
                if table[at(i - 1, j)] > table[at(i, j - 1)] {
                    i -= 1;
                } else {
                    j -= 1;
                }
                if a_start != unset {
                    emit = true;
                }
            }
            if emit {
                let len = (a_end - a_start + 1) as i64;
                if min_len == 0 || len >= min_len {
                    let range = |s: usize, e: usize| {
                        Reply::Array(vec![Reply::Integer(s as i64), Reply::Integer(e as i64)])
                    };
                    let mut one = vec![range(a_start, a_end), range(b_start, b_end)];
                    if with_len {
                        one.push(Reply::Integer(len));
                    }
                    matches.push(Reply::Array(one));
                }
                a_start = unset;
            }
        }
        if !idx {
            return Ok(Reply::Bulk(common));
        }
        Ok(Reply::Map(vec![
            (Reply::text("matches"), Reply::Array(matches)),
            (Reply::text("len"), Reply::Integer(i64::from(total))),
        ]))
    }

    /// `SETRANGE key offset value`.
    fn setrange(&mut self, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let offset = match parse_integer(&a[1]) {
            Some(o) if o >= 0 => o as usize,
            Some(_) => return Err(Reply::err("ERR offset is out of range")),
            None => return Err(Reply::err(NOT_INTEGER)),
        };
        let patch = &a[2];
        let old = self.value(&a[0])?;
        if patch.is_empty() {
            return Ok(Reply::Integer(old.map_or(0, |v| v.len() as i64)));
        }
        if offset.saturating_add(patch.len()) > VALUE_BYTES_MAX {
            return Err(too_big());
        }
        let mut v = old.unwrap_or_default();
        if v.len() < offset + patch.len() {
            v.resize(offset + patch.len(), 0);
        }
        v[offset..offset + patch.len()].copy_from_slice(patch);
        let n = v.len() as i64;
        self.put(&a[0], v, Deadline::Keep)?;
        Ok(Reply::Integer(n))
    }

    fn incr_by(&mut self, k: &[u8], d: i64) -> Result<Reply, Reply> {
        let now = match self.value(k)? {
            None => 0,
            Some(v) => parse_integer(&v).ok_or_else(|| Reply::err(NOT_INTEGER))?,
        };
        let n = now
            .checked_add(d)
            .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
        self.put(k, n.to_string().into_bytes(), Deadline::Keep)?;
        Ok(Reply::Integer(n))
    }

    fn incr_by_float(&mut self, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let not_float = || Reply::err("ERR value is not a valid float");
        let now = match self.value(&a[0])? {
            None => 0.0,
            Some(v) => parse_float(&v).ok_or_else(not_float)?,
        };
        let d = parse_float(&a[1]).ok_or_else(not_float)?;
        let n = now + d;
        if !n.is_finite() {
            return Err(Reply::err("ERR increment would produce NaN or Infinity"));
        }
        let text = format_float(n).into_bytes();
        self.put(&a[0], text.clone(), Deadline::Keep)?;
        Ok(Reply::Bulk(text))
    }

    /// `[P]EXPIRE[AT] key n [NX|XX|GT|LT]`.
    fn expire(&mut self, cmd: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        let name = cmd.to_ascii_lowercase();
        let unit = if cmd.starts_with('P') { 1 } else { 1_000 };
        let n = parse_integer(&a[1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for opt in &a[2..] {
            match opt.to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GT" => gt = true,
                b"LT" => lt = true,
                _ => {
                    return Err(Reply::err(format!(
                        "ERR Unsupported option {}",
                        String::from_utf8_lossy(opt)
                    )))
                }
            }
        }
        if nx && (xx || gt || lt) {
            return Err(Reply::err(
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        if gt && lt {
            return Err(Reply::err(
                "ERR GT and LT options at the same time are not compatible",
            ));
        }
        let invalid = || Reply::err(format!("ERR invalid expire time in '{name}' command"));
        let base = if cmd.ends_with("AT") { 0 } else { self.now_ms };
        let at = n
            .checked_mul(unit)
            .and_then(|ms| ms.checked_add(base))
            .ok_or_else(invalid)?;
        let Some((_, now)) = self.live(&a[0]) else {
            return Ok(Reply::Integer(0));
        };
        // A key without a deadline counts as one infinitely far.
        let current = if now == 0 { i64::MAX } else { now };
        let refused =
            (nx && now != 0) || (xx && now == 0) || (gt && at <= current) || (lt && at >= current);
        if refused {
            return Ok(Reply::Integer(0));
        }
        if at <= self.now_ms {
            self.delete(&a[0]);
        } else {
            // 0 would mean "none": a deadline at the epoch has passed.
            self.push(Op::Expire(a[0].clone(), at));
        }
        Ok(Reply::Integer(1))
    }

    /// `TTL` (seconds, rounded), `PTTL` (ms), `EXPIRETIME` (s),
    /// `PEXPIRETIME` (ms): -2 for no key, -1 for no deadline.
    fn ttl(&self, cmd: &str, k: &[u8]) -> Reply {
        let Some((_, d)) = self.live(k) else {
            return Reply::Integer(-2);
        };
        if d == 0 {
            return Reply::Integer(-1);
        }
        Reply::Integer(match cmd {
            "TTL" => (d - self.now_ms + 500) / 1_000,
            "PTTL" => d - self.now_ms,
            "EXPIRETIME" => d / 1_000,
            _ => d,
        })
    }

    /// A deadline `n` units (ms each) from now, as Redis checks one.
    fn deadline_in(&self, n: &[u8], unit: i64, cmd: &str) -> Result<i64, Reply> {
        let invalid = || {
            Reply::err(format!(
                "ERR invalid expire time in '{}' command",
                cmd.to_ascii_lowercase()
            ))
        };
        match parse_integer(n) {
            Some(n) if n > 0 => n
                .checked_mul(unit)
                .and_then(|ms| ms.checked_add(self.now_ms))
                .ok_or_else(invalid),
            Some(_) => Err(invalid()),
            None => Err(Reply::err(NOT_INTEGER)),
        }
    }
}

/// Whether `s` matches glob `p` as Redis's `stringmatchlen` has it: `*`,
/// `?`, `[abc]`, `[^a-z]`, and `\` quoting the next byte.
pub fn glob_match(p: &[u8], s: &[u8]) -> bool {
    // Redis gives up on a pattern that nests more than this many `*`
    // (stringmatchlen's guard against abusive patterns): no match.
    if p.iter().filter(|c| **c == b'*').count() > GLOB_STARS_MAX {
        return false;
    }
    // Iterative, with one backtrack point for the last `*`: linear in
    // practice, and never the exponential blow-up of naive recursion.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => match class(p, pi, s[si]) {
                    Some((true, next)) => {
                        pi = next;
                        si += 1;
                        continue;
                    }
                    // Not closed: a `[` like any other byte.
                    None if s[si] == b'[' => {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                    _ => {}
                },
                b'\\' if pi + 1 < p.len() && p[pi + 1] == s[si] => {
                    pi += 2;
                    si += 1;
                    continue;
                }
                // An escaped byte that differs: no match here.
                b'\\' if pi + 1 < p.len() => {}
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

/// Most `*` a pattern may hold and match anything, as in Redis.
pub const GLOB_STARS_MAX: usize = 1_000;

/// The class `[…]` at `p[at]` against `c`: whether it matches and where
/// the pattern goes on; `None` if it is not closed (then `[` is itself).
fn class(p: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = p.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        match p.get(i)? {
            b']' => break,
            b'\\' => {
                i += 1;
                matched |= *p.get(i)? == c;
            }
            lo if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|b| *b != b']') => {
                let hi = p[i + 2];
                let (lo, hi) = if *lo <= hi { (*lo, hi) } else { (hi, *lo) };
                matched |= (lo..=hi).contains(&c);
                i += 2;
            }
            other => matched |= *other == c,
        }
        i += 1;
    }
    Some((matched != negate, i + 1))
}

/// A deadline at `n` units (ms each) since the epoch, as Redis checks
/// one.
fn deadline_at(n: &[u8], unit: i64, cmd: &str) -> Result<i64, Reply> {
    let invalid = || Reply::err(format!("ERR invalid expire time in '{cmd}' command"));
    match parse_integer(n) {
        Some(n) if n > 0 => n.checked_mul(unit).ok_or_else(invalid),
        Some(_) => Err(invalid()),
        None => Err(Reply::err(NOT_INTEGER)),
    }
}

fn too_big() -> Reply {
    Reply::err(format!(
        "ERR string exceeds maximum allowed size ({VALUE_BYTES_MAX} bytes)"
    ))
}

/// A float as Redis reads one (`strtold`): no spaces, not empty, not
/// NaN; an infinity is read (and INCRBYFLOAT refuses to produce one).
fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.len() > 5_000 || s.trim() != s {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    (!f.is_nan()).then_some(f)
}

/// A bit offset as SETBIT and GETBIT take one: 0 to 2^32 - 1.
fn bit_offset(b: &[u8]) -> Result<u64, Reply> {
    match parse_integer(b) {
        Some(n) if (0..1 << 32).contains(&n) => Ok(n as u64),
        _ => Err(Reply::err(
            "ERR bit offset is not an integer or out of range",
        )),
    }
}

/// Most cells LCS's table may have (4 bytes each): strings of about
/// 4,000 bytes each, compared.
pub const LCS_CELLS_MAX: usize = 16 << 20;

/// A float as Redis writes one for INCRBYFLOAT: plain digits, no
/// exponent, no trailing zeros.
fn format_float(f: f64) -> String {
    let s = format!("{f}");
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

impl Keyspace for crate::shard::Contents {
    fn stored(&self, k: &[u8]) -> Option<(&Value, i64)> {
        self.pairs
            .get(k)
            .map(|v| (v, self.expires.get(k).copied().unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{apply, Contents};

    /// Runs `line` (words split on spaces) at `now`, applying its ops.
    fn run(c: &mut Contents, now: i64, line: &str) -> Reply {
        let args: Vec<Vec<u8>> = line.split(' ').map(|w| w.as_bytes().to_vec()).collect();
        let spec = lookup(&args[0]).expect("a data command");
        if let Err(e) = spec.check_arity(args.len()) {
            return e;
        }
        let (ops, reply) = execute(c, &args, now);
        for op in &ops {
            apply(c, op);
        }
        reply
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn set_takes_its_options_as_redis_does() {
        let mut c = Contents::default();
        assert_eq!(run(&mut c, 1_000, "SET k v EX 10"), Reply::ok());
        assert_eq!(run(&mut c, 1_000, "PTTL k"), Reply::Integer(10_000));
        assert_eq!(run(&mut c, 1_000, "SET k w KEEPTTL GET"), bulk("v"));
        assert_eq!(run(&mut c, 2_000, "TTL k"), Reply::Integer(9));
        assert_eq!(run(&mut c, 2_000, "SET k x"), Reply::ok());
        assert_eq!(run(&mut c, 2_000, "TTL k"), Reply::Integer(-1));
        assert_eq!(run(&mut c, 2_000, "SET k y NX"), Reply::Null);
        assert_eq!(run(&mut c, 2_000, "SET n y XX"), Reply::Null);
        assert_eq!(run(&mut c, 2_000, "SET k y XX GET"), bulk("x"));
        assert_eq!(run(&mut c, 2_000, "GET k"), bulk("y"));
        for bad in [
            "SET k v NX XX",
            "SET k v EX 1 PX 1",
            "SET k v EX",
            "SET k v FOO",
        ] {
            assert_eq!(run(&mut c, 2_000, bad), Reply::err(SYNTAX), "{bad}");
        }
        assert!(
            matches!(run(&mut c, 2_000, "SET k v EX 0"), Reply::Error(e) if e.contains("invalid expire time in 'set'"))
        );
        assert_eq!(run(&mut c, 2_000, "SET k v EX 01"), Reply::err(NOT_INTEGER));
        assert_eq!(
            run(&mut c, 2_000, "GET k"),
            bulk("y"),
            "errors change nothing"
        );
        assert_eq!(run(&mut c, 2_000, "SET k v"), Reply::ok());
        assert_eq!(run(&mut c, 2_000, "SET"), wrong_arity("SET"));
    }

    #[test]
    fn a_key_past_its_deadline_is_gone_at_once() {
        let mut c = Contents::default();
        run(&mut c, 0, "SET k 5 PX 100");
        assert_eq!(run(&mut c, 50, "INCR k"), Reply::Integer(6));
        assert_eq!(
            run(&mut c, 50, "PTTL k"),
            Reply::Integer(50),
            "INCR keeps it"
        );
        for probe in ["GET k", "TTL k", "EXISTS k", "TYPE k", "STRLEN k"] {
            let r = run(&mut c, 100, probe);
            assert!(
                matches!(&r, Reply::Null | Reply::Integer(0) | Reply::Integer(-2))
                    || r == Reply::Simple("none".into()),
                "{probe}: {r:?}"
            );
        }
        // Written again, it starts afresh: no old deadline, no old value.
        assert_eq!(run(&mut c, 100, "INCR k"), Reply::Integer(1));
        assert_eq!(run(&mut c, 100, "TTL k"), Reply::Integer(-1));
        assert_eq!(run(&mut c, 100, "EXPIRE k 5 NX"), Reply::Integer(1));
        assert_eq!(run(&mut c, 100, "EXPIRE k 9 NX"), Reply::Integer(0));
        assert_eq!(run(&mut c, 100, "EXPIRE k 9 GT"), Reply::Integer(1));
        assert_eq!(run(&mut c, 100, "EXPIRE k 7 GT"), Reply::Integer(0));
        assert_eq!(run(&mut c, 100, "EXPIRE k 7 LT"), Reply::Integer(1));
        assert_eq!(run(&mut c, 100, "PERSIST k"), Reply::Integer(1));
        assert_eq!(
            run(&mut c, 100, "EXPIRE k 7 GT"),
            Reply::Integer(0),
            "no deadline is the latest"
        );
        assert_eq!(run(&mut c, 100, "EXPIRE k -1"), Reply::Integer(1));
        assert_eq!(
            run(&mut c, 100, "EXISTS k"),
            Reply::Integer(0),
            "deleted at once"
        );
        assert!(c.pairs.is_empty());
    }

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        let mut c = Contents::default();
        for (v, ok) in [
            ("012", false),
            ("+5", false),
            ("-0", false),
            (" 1", false),
            ("0", true),
            ("-12", true),
        ] {
            run(&mut c, 0, &format!("SET n {v}"));
            let r = run(&mut c, 0, "INCR n");
            assert_eq!(matches!(r, Reply::Integer(_)), ok, "{v}: {r:?}");
        }
        run(&mut c, 0, &format!("SET n {}", i64::MAX));
        assert!(matches!(run(&mut c, 0, "INCR n"), Reply::Error(e) if e.contains("overflow")));
        assert_eq!(
            run(&mut c, 0, "DECRBY n -9223372036854775808"),
            Reply::err("ERR decrement would overflow")
        );
        assert_eq!(run(&mut c, 0, "INCRBYFLOAT f 10.5"), bulk("10.5"));
        assert_eq!(run(&mut c, 0, "INCRBYFLOAT f 0.1"), bulk("10.6"));
        assert_eq!(run(&mut c, 0, "INCRBYFLOAT f -10.6"), bulk("0"));
    }

    #[test]
    fn globs_match_as_redis_matches_them() {
        for (p, s, m) in [
            ("*", "", true),
            ("h?llo", "hello", true),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("k\\*", "k*", true),
            ("k\\*", "kx", false),
            ("*a*b", "xaxxb", true),
            ("a*", "b", false),
            ("[abc", "[abc", true),
        ] {
            assert_eq!(glob_match(p.as_bytes(), s.as_bytes()), m, "{p} {s}");
        }
        // Many stars over a long miss: still quick.
        let p = "*a".repeat(50) + "b";
        assert!(!glob_match(p.as_bytes(), &[b'a'; 5_000]));
    }

    #[test]
    fn bits_and_common_subsequences() {
        let mut c = Contents::default();
        assert_eq!(run(&mut c, 0, "SETBIT b 7 1"), Reply::Integer(0));
        assert_eq!(run(&mut c, 0, "GET b"), Reply::Bulk(vec![1]));
        assert_eq!(run(&mut c, 0, "GETBIT b 7"), Reply::Integer(1));
        assert_eq!(run(&mut c, 0, "GETBIT b 100"), Reply::Integer(0));
        assert_eq!(run(&mut c, 0, "SETBIT b 7 0"), Reply::Integer(1));
        assert!(
            matches!(run(&mut c, 0, "SETBIT b 4294967296 1"), Reply::Error(e) if e.contains("out of range"))
        );
        assert!(
            matches!(run(&mut c, 0, "SETBIT b 1 2"), Reply::Error(e) if e.contains("out of range"))
        );
        run(&mut c, 0, "SET x ohmytext");
        run(&mut c, 0, "SET y mynewtext");
        assert_eq!(run(&mut c, 0, "LCS x y"), bulk("mytext"));
        assert_eq!(run(&mut c, 0, "LCS x y LEN"), Reply::Integer(6));
        let range = |s: i64, e: i64| Reply::Array(vec![Reply::Integer(s), Reply::Integer(e)]);
        assert_eq!(
            run(&mut c, 0, "LCS x y IDX MINMATCHLEN 4 WITHMATCHLEN"),
            Reply::Map(vec![
                (
                    Reply::text("matches"),
                    Reply::Array(vec![Reply::Array(vec![
                        range(4, 7),
                        range(5, 8),
                        Reply::Integer(4)
                    ])])
                ),
                (Reply::text("len"), Reply::Integer(6)),
            ])
        );
        assert!(matches!(run(&mut c, 0, "LCS x y IDX LEN"), Reply::Error(_)));
    }

    #[test]
    fn hashes_as_redis_keeps_them() {
        let mut c = Contents::default();
        assert_eq!(run(&mut c, 0, "HSET h a 1 b 2"), Reply::Integer(2));
        assert_eq!(run(&mut c, 0, "HSET h a 3 c 4"), Reply::Integer(1));
        assert_eq!(run(&mut c, 0, "HGET h a"), bulk("3"));
        assert_eq!(
            run(&mut c, 0, "HMGET h a x"),
            Reply::Array(vec![bulk("3"), Reply::Null])
        );
        assert_eq!(run(&mut c, 0, "HLEN h"), Reply::Integer(3));
        assert_eq!(run(&mut c, 0, "TYPE h"), Reply::Simple("hash".into()));
        assert_eq!(run(&mut c, 0, "HINCRBY h a 10"), Reply::Integer(13));
        assert_eq!(run(&mut c, 0, "HSETNX h a 0"), Reply::Integer(0));
        assert_eq!(
            run(&mut c, 0, "HGETALL h"),
            Reply::Map(vec![
                (bulk("a"), bulk("13")),
                (bulk("b"), bulk("2")),
                (bulk("c"), bulk("4")),
            ])
        );
        assert_eq!(run(&mut c, 0, "GET h"), Reply::err(WRONGTYPE));
        assert_eq!(run(&mut c, 0, "INCR h"), Reply::err(WRONGTYPE));
        run(&mut c, 0, "SET s x");
        assert_eq!(run(&mut c, 0, "HSET s f v"), Reply::err(WRONGTYPE));
        assert_eq!(
            run(&mut c, 0, "MGET h s"),
            Reply::Array(vec![Reply::Null, bulk("x")])
        );
        run(&mut c, 0, "EXPIRE h 100");
        assert_eq!(run(&mut c, 0, "RENAME h g"), Reply::ok());
        assert_eq!(run(&mut c, 0, "TTL g"), Reply::Integer(100));
        assert_eq!(run(&mut c, 0, "HDEL g a b c x"), Reply::Integer(3));
        assert_eq!(
            run(&mut c, 0, "EXISTS g"),
            Reply::Integer(0),
            "an empty hash goes"
        );
        assert!(c.expires.is_empty(), "with its deadline");
        // A snapshot of a hash reads back the same.
        run(&mut c, 0, "HSET k f1 v1 f2 v2");
        let mut again = Contents::default();
        for op in crate::shard::decode(&crate::shard::encode_contents(&c)).unwrap() {
            apply(&mut again, &op);
        }
        assert_eq!(again.pairs, c.pairs);
    }

    #[test]
    fn rename_moves_the_value_and_its_deadline() {
        let mut c = Contents::default();
        run(&mut c, 0, "SET a 1 PX 500");
        assert_eq!(run(&mut c, 0, "RENAME a b"), Reply::ok());
        assert_eq!(run(&mut c, 0, "PTTL b"), Reply::Integer(500));
        assert_eq!(run(&mut c, 0, "EXISTS a"), Reply::Integer(0));
        assert_eq!(run(&mut c, 0, "RENAME a b"), Reply::err("ERR no such key"));
        run(&mut c, 0, "SET c 3");
        assert_eq!(run(&mut c, 0, "RENAMENX b c"), Reply::Integer(0));
        assert_eq!(run(&mut c, 0, "RENAME b c"), Reply::ok());
        assert_eq!(run(&mut c, 0, "GET c"), bulk("1"));
        run(&mut c, 0, "SET d 4 PX 700");
        assert_eq!(run(&mut c, 0, "COPY d c"), Reply::Integer(0), "c is there");
        assert_eq!(run(&mut c, 0, "COPY d c REPLACE"), Reply::Integer(1));
        assert_eq!(run(&mut c, 0, "PTTL c"), Reply::Integer(700));
        assert_eq!(run(&mut c, 0, "GET d"), bulk("4"), "the source stays");
        assert!(
            matches!(run(&mut c, 0, "COPY d e DB 1"), Reply::Error(e) if e.contains("out of range"))
        );
    }

    #[test]
    fn strings_and_ranges() {
        let mut c = Contents::default();
        assert_eq!(run(&mut c, 0, "APPEND s Hello"), Reply::Integer(5));
        assert_eq!(run(&mut c, 0, "APPEND s _World"), Reply::Integer(11));
        assert_eq!(run(&mut c, 0, "GETRANGE s 0 4"), bulk("Hello"));
        assert_eq!(run(&mut c, 0, "GETRANGE s -5 -1"), bulk("World"));
        assert_eq!(run(&mut c, 0, "GETRANGE s 5 3"), bulk(""));
        assert_eq!(run(&mut c, 0, "SETRANGE s 6 Redis"), Reply::Integer(11));
        assert_eq!(run(&mut c, 0, "GET s"), bulk("Hello_Redis"));
        assert_eq!(run(&mut c, 0, "SETRANGE z 2 x"), Reply::Integer(3));
        assert_eq!(run(&mut c, 0, "GET z"), Reply::Bulk(vec![0, 0, b'x']));
        assert_eq!(run(&mut c, 0, "MSETNX a 1 s 2"), Reply::Integer(0));
        assert_eq!(run(&mut c, 0, "MSETNX a 1 b 2"), Reply::Integer(1));
        assert_eq!(run(&mut c, 0, "GETDEL a"), bulk("1"));
        assert_eq!(run(&mut c, 0, "GETSET b 3"), bulk("2"));
        assert_eq!(run(&mut c, 0, "GETEX b PX 10"), bulk("3"));
        assert_eq!(run(&mut c, 0, "PTTL b"), Reply::Integer(10));
        assert_eq!(run(&mut c, 0, "GETEX b PERSIST"), bulk("3"));
        assert_eq!(run(&mut c, 0, "TTL b"), Reply::Integer(-1));
        assert_eq!(run(&mut c, 0, "DEL a b b s"), Reply::Integer(2));
    }
}
