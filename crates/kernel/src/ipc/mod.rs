//! IPC through the `message` table (DBOS section 4.3).
//!
//! Sending is an insert, receiving is a read-and-delete in one transaction,
//! so a message is durable once `send` returns, is received at most once by
//! exactly one receiver, and per mailbox comes out in the order its sends
//! committed (hence in send order per sender). A waiting receiver is woken by
//! the change feed after the sender's commit; nothing polls.
//!
//! Tables (migration `004_ipc`), all on the receiver's partition — its
//! realm's, where its procs live — so a send, a receive and a multicast to
//! mailboxes of one realm are each one single-partition transaction:
//!
//! * `mailbox(p_key, realm, address, next_seq, queued, queued_bytes,
//!   bytes_max, log_delivered, created_us)`: one row per mailbox, with the
//!   counters that enforce its bound in O(1) per send.
//! * `message(p_key, realm, receiver, seq, sender, message_id, sent_us,
//!   payload)`: messages not yet received.
//! * `message_dedup(…, sender, message_id, seq, sent_us)`: the message ids a
//!   receiver has seen from each sender in the last [`DEDUP_WINDOW_US`].
//! * `message_log(…, recv_us, payload)`: delivered messages of mailboxes
//!   created with `log_delivered`, for provenance queries.
//!
//! Addresses ([`Address`]): `proc/<pid>` is a proc's mailbox, which exists
//! while the proc does (it is made on first use; sending to a proc that has
//! finished is refused); a bare `<name>` is a named mailbox, made by
//! [`create_mailbox`] and removed by [`remove_mailbox`]. A send to, or a
//! receive on, a mailbox that does not exist fails at once with
//! [`Error::NotFound`]; a receiver waiting on a named mailbox that is removed
//! gets the same error.
//!
//! Delivery: a receive commits the deletion before the messages leave the
//! node. A receive whose caller goes away before it is answered (its future
//! dropped) still commits, and puts what it took back at the head of the
//! mailbox; only a crash of the node between that commit and the reply
//! loses what it received (at-most-once in that window, exactly-once
//! otherwise). Every send notifies [`channel`]`(realm, address)` with the
//! mailbox's last seq after commit, and removing a mailbox notifies it with
//! `removed`; receives notify nothing, so receivers never wake each other.
//!
//! Hand-over ([`handover`]): a send to an empty mailbox on which a
//! receiver of this process is waiting skips the table — its transaction
//! takes the seqs and the receiver gets the messages in memory right after
//! the commit, with no transaction of its own and no notification. A
//! message put back (above) after another was received from the mailbox
//! comes out after that one: the only reordering there is.

mod handover;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tabos_store::{params, PKey, Row, Store, Tx};

use crate::auth::{Actor, Caller, Role};
use crate::ids::Pid;
use crate::{p_key, partition, validate_realm, Error, Result};
use handover::{Claim, Waiters, Waiting};

/// Largest payload of one message, in bytes.
pub const PAYLOAD_BYTES_MAX: usize = 1 << 20;
/// Default bound on a mailbox's queued payload bytes.
pub const MAILBOX_BYTES_DEFAULT: i64 = 64 << 20;
/// Largest bound a mailbox may be given, in bytes.
pub const MAILBOX_BYTES_MAX: i64 = 1 << 30;
/// Most messages queued in one mailbox, whatever their size.
pub const MAILBOX_MESSAGES_MAX: i64 = 1_000_000;
/// Longest message id, in bytes.
pub const MESSAGE_ID_BYTES_MAX: usize = 128;
/// Most messages one receive returns. A constant so that the statement's
/// LIMIT is a literal: SQLite re-prepares a statement whose LIMIT is bound.
pub const RECV_MESSAGES_MAX: usize = 64;
/// Most payload bytes one receive returns (more than [`PAYLOAD_BYTES_MAX`],
/// so that any single message fits).
pub const RECV_BYTES_MAX: usize = 4 << 20;
/// Most messages in one `send` (a batch or a multicast).
pub const SEND_MESSAGES_MAX: usize = 1_024;
/// Most payload bytes in one `send`.
pub const SEND_BYTES_MAX: usize = 8 << 20;
/// How long a message id is remembered: a resend with the same id from the
/// same sender within this window is stored once.
pub const DEDUP_WINDOW_US: i64 = 3_600 * 1_000_000;
/// Expired message ids deleted per send, so pruning is bounded work.
const DEDUP_PRUNE_MAX: usize = 16;
/// Longest a receive may wait.
pub const RECV_WAIT_MAX: Duration = Duration::from_secs(3_600);

pub use crate::ids::Address;

/// The change-feed channel of one mailbox. Long names are hashed to keep
/// within the channel limit; two mailboxes sharing a channel only cost a
/// spurious wake-up.
pub fn channel(realm: &str, address: &Address) -> String {
    crate::bounded_channel(&format!("mail/{realm}/"), &address.to_string())
}

/// Settings of a node's IPC service, applied to mailboxes it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailboxOptions {
    /// Bound on queued payload bytes; a send past it fails with "mailbox full".
    pub bytes_max: i64,
    /// Move delivered messages to `message_log` instead of deleting them.
    pub log_delivered: bool,
}

impl Default for MailboxOptions {
    fn default() -> MailboxOptions {
        MailboxOptions {
            bytes_max: MAILBOX_BYTES_DEFAULT,
            log_delivered: false,
        }
    }
}

impl MailboxOptions {
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAILBOX_BYTES_MAX).contains(&self.bytes_max) {
            return Err(Error::Invalid(format!(
                "a mailbox bound must be 1..={MAILBOX_BYTES_MAX} bytes, not {}",
                self.bytes_max
            )));
        }
        Ok(())
    }
}

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub to: Address,
    pub payload: Vec<u8>,
    /// Idempotency key: a second send with the same id from the same sender
    /// to the same mailbox (within [`DEDUP_WINDOW_US`]) is stored once.
    pub message_id: Option<String>,
}

impl Outgoing {
    /// `payload` to each address of `to` (a host call's multicast), all
    /// with message id `id`; an address that does not parse refuses all.
    pub fn to_each(to: &[&str], payload: &[u8], id: Option<&str>) -> Result<Vec<Outgoing>> {
        to.iter()
            .map(|t| {
                Ok(Outgoing {
                    to: Address::parse(t)?,
                    payload: payload.to_vec(),
                    message_id: id.map(str::to_string),
                })
            })
            .collect()
    }
}

/// What a send did with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The message's place in its mailbox (the first send's, for a duplicate).
    pub seq: i64,
    /// A message with the same id was already sent; nothing was stored.
    pub duplicate: bool,
}

/// A received (or peeked) message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub seq: i64,
    /// The sender's address, or empty for an anonymous client.
    pub sender: String,
    pub message_id: Option<String>,
    pub sent_us: i64,
    pub payload: Vec<u8>,
}

/// The result of a receive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// In mailbox order.
    pub messages: Vec<Message>,
    /// Set when the next message is larger than the receive's byte budget:
    /// its size. Nothing was taken; receive again with a larger budget.
    pub next_bytes: Option<usize>,
    /// Messages were left in the mailbox (the receive took as many as it
    /// could, not all).
    pub more: bool,
}

/// How much one receive takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    /// 1..=[`RECV_MESSAGES_MAX`] messages.
    pub max: usize,
    /// Payload bytes, at most [`RECV_BYTES_MAX`].
    pub bytes_max: usize,
}

impl Default for Take {
    fn default() -> Take {
        Take {
            max: RECV_MESSAGES_MAX,
            bytes_max: RECV_BYTES_MAX,
        }
    }
}

impl Take {
    /// `max` messages (clamped to 1..=[`RECV_MESSAGES_MAX`], 0 meaning the
    /// most), up to [`RECV_BYTES_MAX`] bytes.
    pub fn messages(max: usize) -> Take {
        Take {
            max: if max == 0 {
                RECV_MESSAGES_MAX
            } else {
                max.min(RECV_MESSAGES_MAX)
            },
            bytes_max: RECV_BYTES_MAX,
        }
    }
}

/// A mailbox's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxInfo {
    pub address: String,
    pub queued: i64,
    pub queued_bytes: i64,
    pub bytes_max: i64,
    pub log_delivered: bool,
    pub next_seq: i64,
}

fn check_message_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MESSAGE_ID_BYTES_MAX || id.contains('\0') {
        return Err(Error::Invalid(format!(
            "a message id must be 1..={MESSAGE_ID_BYTES_MAX} bytes without NUL"
        )));
    }
    Ok(())
}

/// Checks a batch before any database work.
pub fn validate_outgoing(msgs: &[Outgoing]) -> Result<()> {
    if msgs.is_empty() || msgs.len() > SEND_MESSAGES_MAX {
        return Err(Error::Invalid(format!(
            "a send carries 1..={SEND_MESSAGES_MAX} messages, not {}",
            msgs.len()
        )));
    }
    let mut total = 0usize;
    for m in msgs {
        if m.payload.len() > PAYLOAD_BYTES_MAX {
            return Err(Error::TooLarge(format!(
                "payload of {} bytes exceeds the {PAYLOAD_BYTES_MAX}-byte message limit",
                m.payload.len()
            )));
        }
        if let Some(id) = &m.message_id {
            check_message_id(id)?;
        }
        total += m.payload.len();
    }
    if total > SEND_BYTES_MAX {
        return Err(Error::TooLarge(format!(
            "a send of {total} payload bytes exceeds {SEND_BYTES_MAX}"
        )));
    }
    Ok(())
}

/// Procedure body: creates named mailbox `name`.
pub fn create_mailbox_tx(
    tx: &mut dyn Tx,
    realm: &str,
    name: &str,
    opts: &MailboxOptions,
    now_us: i64,
) -> Result<()> {
    validate_realm(realm)?;
    let Address::Named(name) = Address::parse(name)? else {
        return Err(Error::Invalid(
            "a proc's mailbox is made with the proc; name a mailbox without '/'".into(),
        ));
    };
    opts.validate()?;
    let n = tx.execute(
        "INSERT INTO mailbox (p_key, realm, address, bytes_max, log_delivered, created_us) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (p_key, realm, address) DO NOTHING",
        params![
            p_key(tx),
            realm,
            name.as_str(),
            opts.bytes_max,
            i64::from(opts.log_delivered),
            now_us
        ],
    )?;
    if n == 0 {
        return Err(Error::AlreadyExists(format!(
            "mailbox {name:?} in realm {realm:?}"
        )));
    }
    Ok(())
}

/// Procedure body: removes named mailbox `name` and its queued messages;
/// returns how many were dropped. Waiting receivers are woken and get
/// [`Error::NotFound`].
pub fn remove_mailbox_tx(tx: &mut dyn Tx, realm: &str, name: &str) -> Result<u64> {
    validate_realm(realm)?;
    let address = Address::parse(name)?;
    if matches!(address, Address::Proc(_)) {
        return Err(Error::Invalid(
            "a proc's mailbox goes with the proc; only named mailboxes are removed".into(),
        ));
    }
    let pk = p_key(tx);
    let n = tx.execute(
        "DELETE FROM mailbox WHERE p_key = $1 AND realm = $2 AND address = $3",
        params![pk, realm, name],
    )?;
    if n == 0 {
        return Err(Error::NotFound(format!(
            "mailbox {name:?} in realm {realm:?}"
        )));
    }
    let dropped = tx.execute(
        "DELETE FROM message WHERE p_key = $1 AND realm = $2 AND receiver = $3",
        params![pk, realm, name],
    )?;
    tx.execute(
        "DELETE FROM message_dedup WHERE p_key = $1 AND realm = $2 AND receiver = $3",
        params![pk, realm, name],
    )?;
    tx.notify(&channel(realm, &address), "removed")?;
    Ok(dropped)
}

/// Makes a proc's mailbox row if the proc exists and has not finished.
fn open_proc_mailbox(
    tx: &mut dyn Tx,
    realm: &str,
    pid: &Pid,
    opts: &MailboxOptions,
    now_us: i64,
) -> Result<()> {
    proc_live(tx, realm, pid)?;
    tx.execute(
        "INSERT INTO mailbox (p_key, realm, address, bytes_max, log_delivered, created_us) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (p_key, realm, address) DO NOTHING",
        params![
            p_key(tx),
            realm,
            Address::Proc(pid.clone()).to_string(),
            opts.bytes_max,
            i64::from(opts.log_delivered),
            now_us
        ],
    )?;
    Ok(())
}

/// Fails unless `pid` exists in `realm` and has not finished.
fn proc_live(tx: &mut dyn Tx, realm: &str, pid: &Pid) -> Result<()> {
    let state = proc_state(tx, realm, pid)?;
    match state.as_deref() {
        None => Err(Error::NotFound(format!(
            "no proc {pid} in realm {realm:?}, so no mailbox proc/{pid}"
        ))),
        Some("exited" | "evicted" | "failed") => Err(Error::Precondition(format!(
            "proc {pid} has finished; its mailbox takes no more messages"
        ))),
        Some(_) => Ok(()),
    }
}

fn proc_state(tx: &mut dyn Tx, realm: &str, pid: &Pid) -> Result<Option<String>> {
    let row = tx.query_opt(
        "SELECT state FROM proc WHERE p_key = $1 AND realm = $2 AND pid = $3",
        params![p_key(tx), realm, pid.as_str()],
    )?;
    Ok(row.map(|r| r.get::<String>(0)).transpose()?)
}

/// Procedure body: sends a batch — several messages, to one or several
/// mailboxes of `realm` (a multicast is the same payload to several) — all
/// or nothing. Returns what happened to each message, in order.
pub fn send_tx(
    tx: &mut dyn Tx,
    realm: &str,
    from: Option<&Address>,
    msgs: &[Outgoing],
    opts: &MailboxOptions,
    now_us: i64,
) -> Result<Vec<Sent>> {
    let (sent, _) = send_handing_tx(tx, realm, from, None, msgs, opts, now_us, &[])?;
    Ok(sent)
}

/// [`send_tx`] done for `actor`, from no address (a procedure it
/// called): the send is its provenance.
pub fn send_for_tx(
    tx: &mut dyn Tx,
    realm: &str,
    actor: Option<&Actor>,
    msgs: &[Outgoing],
    opts: &MailboxOptions,
    now_us: i64,
) -> Result<Vec<Sent>> {
    let (sent, _) = send_handing_tx(tx, realm, None, actor, msgs, opts, now_us, &[])?;
    Ok(sent)
}

/// A mailbox whose waiting receiver a send claimed, and whom that
/// receiver acts for (its receipt's provenance).
type Hand<'a> = (&'a Address, Option<&'a Actor>);

/// [`send_tx`] done for `actor` (a proc, or a client): the send is its
/// provenance even from another address than its own. The messages to a
/// mailbox of `hand` (sorted) that is empty (see [`reserve`]) are neither
/// queued nor notified, and the second value names those mailboxes,
/// sorted: the caller owes their messages to the waiting receivers it
/// claimed.
#[allow(clippy::too_many_arguments)]
fn send_handing_tx(
    tx: &mut dyn Tx,
    realm: &str,
    from: Option<&Address>,
    actor: Option<&Actor>,
    msgs: &[Outgoing],
    opts: &MailboxOptions,
    now_us: i64,
    hand: &[Hand<'_>],
) -> Result<(Vec<Sent>, Vec<Address>)> {
    validate_realm(realm)?;
    validate_outgoing(msgs)?;
    crate::realms::metered(tx, realm, |tx| {
        send_unmetered_tx(tx, realm, from, actor, msgs, opts, now_us, hand)
    })
}

/// [`send_handing_tx`] without the realm's mailbox quota check.
#[allow(clippy::too_many_arguments)]
fn send_unmetered_tx(
    tx: &mut dyn Tx,
    realm: &str,
    from: Option<&Address>,
    actor: Option<&Actor>,
    msgs: &[Outgoing],
    opts: &MailboxOptions,
    now_us: i64,
    hand: &[Hand<'_>],
) -> Result<(Vec<Sent>, Vec<Address>)> {
    let pk = p_key(tx);
    let sender = from.map(Address::to_string).unwrap_or_default();
    let mut out: Vec<Option<Sent>> = vec![None; msgs.len()];
    // Each receiver's messages, in batch order. A receiver whose messages
    // carry no ids gets its seqs reserved in one statement; one with ids
    // goes message by message, since a duplicate takes no seq.
    let mut by_receiver: BTreeMap<&Address, Vec<usize>> = BTreeMap::new();
    for (i, m) in msgs.iter().enumerate() {
        by_receiver.entry(&m.to).or_default().push(i);
    }
    // Sorted, as `by_receiver` is: looked up by binary search.
    debug_assert!(hand.windows(2).all(|w| w[0].0 < w[1].0));
    let mut handed = Vec::new();
    for (to, idx) in &by_receiver {
        let receiver = to.to_string();
        let with_ids = idx.iter().any(|&i| msgs[i].message_id.is_some());
        // Hand-over is for one run (no ids) to a mailbox whose receiver
        // the caller claimed.
        let claimed = hand
            .binary_search_by(|(a, _)| (*a).cmp(to))
            .ok()
            .map(|at| hand[at].1);
        let hand = !with_ids && claimed.is_some();
        let runs: Vec<&[usize]> = if with_ids {
            idx.chunks(1).collect()
        } else {
            vec![&idx[..]]
        };
        let mut last_seq = None;
        for run in runs {
            if let [i] = run {
                if let Some(id) = &msgs[*i].message_id {
                    // Bounded pruning of this mailbox's expired ids, then the check.
                    prune_dedup(tx, realm, &receiver, now_us)?;
                    let seen = tx.query_opt(
                        "SELECT seq FROM message_dedup WHERE p_key = $1 AND realm = $2 \
                         AND receiver = $3 AND sender = $4 AND message_id = $5",
                        params![pk, realm, receiver.as_str(), sender.as_str(), id.as_str()],
                    )?;
                    if let Some(row) = seen {
                        out[*i] = Some(Sent {
                            seq: row.get(0)?,
                            duplicate: true,
                        });
                        continue;
                    }
                }
            }
            let bytes: usize = run.iter().map(|&i| msgs[i].payload.len()).sum();
            let (first, to_waiter) = reserve(
                tx,
                realm,
                to,
                &receiver,
                run.len(),
                bytes,
                hand,
                opts,
                now_us,
            )?;
            let last = first + run.len() as i64 - 1;
            // From a proc's own address, or by a proc (or a client) from
            // another: its send.
            let own;
            let by = match from {
                Some(Address::Proc(pid)) => {
                    own = Actor::Proc(pid.clone());
                    Some(&own)
                }
                _ => actor,
            };
            if let Some(by) = by {
                note_tx(
                    tx,
                    realm,
                    by,
                    "send",
                    &receiver,
                    (first, last),
                    bytes,
                    now_us,
                )?;
            }
            if to_waiter {
                // Received at this commit (see [`handover`]): a proc's
                // receipt — of its own mailbox, or by the claimed waiter's
                // proc — is noted here, as a receive would note it.
                let own;
                let taker = match to {
                    Address::Proc(pid) => {
                        own = Actor::Proc(pid.clone());
                        Some(&own)
                    }
                    _ => claimed.flatten(),
                };
                if let Some(taker) = taker {
                    note_tx(
                        tx,
                        realm,
                        taker,
                        "recv",
                        &receiver,
                        (first, last),
                        bytes,
                        now_us,
                    )?;
                }
                for (k, &i) in run.iter().enumerate() {
                    out[i] = Some(Sent {
                        seq: first + k as i64,
                        duplicate: false,
                    });
                }
                handed.push((*to).clone());
                continue;
            }
            for (k, &i) in run.iter().enumerate() {
                let m = &msgs[i];
                let seq = first + k as i64;
                tx.execute(
                    "INSERT INTO message (p_key, realm, receiver, seq, sender, message_id, sent_us, payload) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    params![
                        pk,
                        realm,
                        receiver.as_str(),
                        seq,
                        sender.as_str(),
                        m.message_id.as_deref(),
                        now_us,
                        m.payload.as_slice()
                    ],
                )?;
                if let Some(id) = &m.message_id {
                    tx.execute(
                        "INSERT INTO message_dedup (p_key, realm, receiver, sender, message_id, seq, sent_us) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        params![pk, realm, receiver.as_str(), sender.as_str(), id.as_str(), seq, now_us],
                    )?;
                }
                out[i] = Some(Sent {
                    seq,
                    duplicate: false,
                });
                last_seq = Some(seq);
            }
        }
        if let Some(seq) = last_seq {
            tx.notify(&channel(realm, to), &seq.to_string())?;
        }
    }
    let out: Vec<Sent> = out.into_iter().flatten().collect();
    debug_assert_eq!(out.len(), msgs.len());
    Ok((out, handed))
}

/// Takes the next `count` seqs of mailbox `to` (returning the first) and
/// accounts `bytes` more queued bytes, failing if the mailbox is missing,
/// closed or full. With `hand`, a mailbox that is empty and keeps no log
/// queues nothing — the messages go to a waiting receiver instead
/// ([`handover`]) — and the second value says so.
#[allow(clippy::too_many_arguments)]
fn reserve(
    tx: &mut dyn Tx,
    realm: &str,
    to: &Address,
    receiver: &str,
    count: usize,
    bytes: usize,
    hand: bool,
    opts: &MailboxOptions,
    now_us: i64,
) -> Result<(i64, bool)> {
    let pk = p_key(tx);
    if let Address::Proc(pid) = to {
        // A proc's mailbox closes when the proc finishes.
        proc_live(tx, realm, pid)?;
    }
    let (n, b) = (count as i64, bytes as i64);
    for attempt in 0..2 {
        // SET's right-hand sides read the row as it was: `queued = 0` is
        // "empty before this send". CAST: PostgreSQL types `$6` from it.
        let row = tx.query_opt(
            "UPDATE mailbox SET next_seq = next_seq + $4, \
             queued = CASE WHEN CAST($6 AS BIGINT) = 1 AND queued = 0 AND log_delivered = 0 \
                      THEN 0 ELSE queued + $4 END, \
             queued_bytes = CASE WHEN CAST($6 AS BIGINT) = 1 AND queued = 0 AND log_delivered = 0 \
                            THEN 0 ELSE queued_bytes + $5 END \
             WHERE p_key = $1 AND realm = $2 AND address = $3 \
             RETURNING next_seq - $4, queued, queued_bytes, bytes_max",
            params![pk, realm, receiver, n, b, i64::from(hand)],
        )?;
        let Some(row) = row else {
            match to {
                Address::Proc(pid) if attempt == 0 => {
                    open_proc_mailbox(tx, realm, pid, opts, now_us)?;
                    continue;
                }
                _ => {
                    return Err(Error::NotFound(format!(
                        "mailbox {receiver:?} in realm {realm:?} (create it first)"
                    )))
                }
            }
        };
        let (seq, queued, total, bytes_max): (i64, i64, i64, i64) =
            (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
        // Nothing queued after a send of at least one message: handed over.
        let handed = queued == 0;
        debug_assert!(hand || !handed);
        if total > bytes_max || queued > MAILBOX_MESSAGES_MAX {
            // The procedure fails, so the counters' update rolls back.
            return Err(Error::Full(format!(
                "mailbox {receiver:?} is full: {} messages of {} bytes queued, \
                 bound {bytes_max} bytes and {MAILBOX_MESSAGES_MAX} messages; \
                 {count} more of {bytes} bytes do not fit",
                queued - n,
                total - b
            )));
        }
        return Ok((seq, handed));
    }
    unreachable!("a proc mailbox exists after open_proc_mailbox")
}

fn prune_dedup(tx: &mut dyn Tx, realm: &str, receiver: &str, now_us: i64) -> Result<()> {
    // LIMIT as a literal (see RECV_MESSAGES_MAX).
    const PRUNE: &str = "DELETE FROM message_dedup WHERE p_key = $1 AND realm = $2 \
         AND receiver = $3 AND (sender, message_id) IN (SELECT sender, message_id \
         FROM message_dedup WHERE p_key = $1 AND realm = $2 AND receiver = $3 \
         AND sent_us < $4 ORDER BY sent_us LIMIT 16)";
    debug_assert!(PRUNE.ends_with(&format!("LIMIT {DEDUP_PRUNE_MAX})")));
    tx.execute(
        PRUNE,
        params![p_key(tx), realm, receiver, now_us - DEDUP_WINDOW_US],
    )?;
    Ok(())
}

/// Whether the mailbox exists: a named mailbox's row, or a proc's row.
/// Returns its `log_delivered` flag (false for a proc without a row yet).
fn mailbox_exists(tx: &mut dyn Tx, realm: &str, address: &Address) -> Result<Option<(i64, bool)>> {
    let row = tx.query_opt(
        "SELECT queued, log_delivered FROM mailbox WHERE p_key = $1 AND realm = $2 AND address = $3",
        params![p_key(tx), realm, address.to_string()],
    )?;
    if let Some(r) = row {
        return Ok(Some((r.get(0)?, r.get::<i64>(1)? != 0)));
    }
    match address {
        Address::Proc(pid) if proc_state(tx, realm, pid)?.is_some() => Ok(Some((0, false))),
        _ => Ok(None),
    }
}

fn not_found(realm: &str, address: &Address) -> Error {
    match address {
        Address::Proc(pid) => Error::NotFound(format!(
            "no proc {pid} in realm {realm:?}, so no mailbox proc/{pid}"
        )),
        Address::Named(n) => Error::NotFound(format!("mailbox {n:?} in realm {realm:?}")),
    }
}

fn check_take(take: &Take) -> Result<()> {
    if !(1..=RECV_MESSAGES_MAX).contains(&take.max) || take.bytes_max > RECV_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "a receive takes 1..={RECV_MESSAGES_MAX} messages and at most {RECV_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// How many of the head messages (seq, length) fit `take`: the count and the
/// last seq, or the size of the first if even it does not fit.
fn fit(head: &[(i64, usize)], take: &Take) -> std::result::Result<(usize, i64, usize), usize> {
    let mut bytes = 0;
    let mut n = 0;
    let mut last = 0;
    for &(seq, len) in head.iter().take(take.max) {
        if bytes + len > take.bytes_max {
            break;
        }
        bytes += len;
        n += 1;
        last = seq;
    }
    match (n, head.first()) {
        (0, Some(&(_, len))) => Err(len),
        _ => Ok((n, last, bytes)),
    }
}

fn head(tx: &mut dyn Tx, realm: &str, receiver: &str) -> Result<Vec<(i64, usize)>> {
    const HEAD: &str = "SELECT seq, length(payload) FROM message \
         WHERE p_key = $1 AND realm = $2 AND receiver = $3 ORDER BY seq LIMIT 64";
    debug_assert!(HEAD.ends_with(&format!("LIMIT {RECV_MESSAGES_MAX}")));
    let rows = tx.query(HEAD, params![p_key(tx), realm, receiver])?;
    rows.iter()
        .map(|r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)? as usize)))
        .collect()
}

fn message_from_row(r: &Row) -> Result<Message> {
    Ok(Message {
        seq: r.get(0)?,
        sender: r.get(1)?,
        message_id: r.get(2)?,
        sent_us: r.get(3)?,
        payload: r.get(4)?,
    })
}

/// Procedure body: takes the mailbox's first messages (as many as `take`
/// allows), deleting them — or moving them to `message_log` — in the same
/// transaction. Returns nothing when the mailbox is empty.
pub fn recv_tx(
    tx: &mut dyn Tx,
    realm: &str,
    address: &Address,
    take: &Take,
    now_us: i64,
) -> Result<Received> {
    recv_for_tx(tx, realm, address, take, None, now_us)
}

/// [`recv_tx`] done for `actor` (a proc, or a client): a receipt from
/// another mailbox than its own is its provenance too.
pub fn recv_for_tx(
    tx: &mut dyn Tx,
    realm: &str,
    address: &Address,
    take: &Take,
    actor: Option<&Actor>,
    now_us: i64,
) -> Result<Received> {
    validate_realm(realm)?;
    check_take(take)?;
    let receiver = address.to_string();
    let pk = p_key(tx);
    // Fast path, two statements: when everything queued fits the take,
    // zero the counters (the row tells whether to log) and take it all.
    let all = tx.query_opt(
        "UPDATE mailbox SET queued = 0, queued_bytes = 0 \
         WHERE p_key = $1 AND realm = $2 AND address = $3 \
         AND queued > 0 AND queued <= $4 AND queued_bytes <= $5 \
         RETURNING log_delivered",
        params![
            pk,
            realm,
            receiver.as_str(),
            take.max as i64,
            take.bytes_max as i64
        ],
    )?;
    if let Some(row) = all {
        let log = row.get::<i64>(0)? != 0;
        let messages = take_messages(tx, realm, &receiver, i64::MAX, log, actor, now_us)?;
        debug_assert!(!messages.is_empty() && messages.len() <= take.max);
        return Ok(Received {
            messages,
            next_bytes: None,
            more: false,
        });
    }
    let Some((queued, log)) = mailbox_exists(tx, realm, address)? else {
        return Err(not_found(realm, address));
    };
    if queued == 0 {
        return Ok(Received::default());
    }
    let head = head(tx, realm, &receiver)?;
    let (n, last, bytes) = match fit(&head, take) {
        Ok(f) => f,
        Err(len) => {
            return Ok(Received {
                messages: Vec::new(),
                next_bytes: Some(len),
                more: true,
            })
        }
    };
    let messages = take_messages(tx, realm, &receiver, last, log, actor, now_us)?;
    // The head read and the delete ran in one transaction: same rows.
    debug_assert_eq!(messages.len(), n);
    count_queued(
        tx,
        realm,
        &receiver,
        -(messages.len() as i64),
        -(bytes as i64),
    )?;
    Ok(Received {
        more: (n as i64) < queued,
        messages,
        next_bytes: None,
    })
}

/// Moves mailbox `receiver`'s counters by `count` messages of `bytes` (less
/// when negative); returns 0 if the mailbox is gone.
fn count_queued(
    tx: &mut dyn Tx,
    realm: &str,
    receiver: &str,
    count: i64,
    bytes: i64,
) -> Result<u64> {
    Ok(tx.execute(
        "UPDATE mailbox SET queued = queued + $4, queued_bytes = queued_bytes + $5 \
         WHERE p_key = $1 AND realm = $2 AND address = $3",
        params![p_key(tx), realm, receiver, count, bytes],
    )?)
}

/// Deletes (or, with `log`, moves to `message_log`) the mailbox's messages
/// up to seq `last`; returns them in order.
fn take_messages(
    tx: &mut dyn Tx,
    realm: &str,
    receiver: &str,
    last: i64,
    log: bool,
    actor: Option<&Actor>,
    now_us: i64,
) -> Result<Vec<Message>> {
    let pk = p_key(tx);
    if log {
        tx.execute(
            "INSERT INTO message_log (p_key, realm, receiver, seq, sender, message_id, sent_us, recv_us, payload) \
             SELECT p_key, realm, receiver, seq, sender, message_id, sent_us, $5, payload FROM message \
             WHERE p_key = $1 AND realm = $2 AND receiver = $3 AND seq <= $4",
            params![pk, realm, receiver, last, now_us],
        )?;
    }
    let rows = tx.query(
        "DELETE FROM message WHERE p_key = $1 AND realm = $2 AND receiver = $3 AND seq <= $4 \
         RETURNING seq, sender, message_id, sent_us, payload",
        params![pk, realm, receiver, last],
    )?;
    let mut messages = rows
        .iter()
        .map(message_from_row)
        .collect::<Result<Vec<_>>>()?;
    // RETURNING promises no order.
    messages.sort_by_key(|m| m.seq);
    // A proc's own mailbox, or a proc (or a client) taking from another:
    // its receipt.
    let own = receiver
        .strip_prefix("proc/")
        .map(|pid| Actor::Proc(Pid(pid.to_string())));
    let taker = own.as_ref().or(actor);
    if let (Some(taker), Some(a), Some(b)) = (taker, messages.first(), messages.last()) {
        let bytes = messages.iter().map(|m| m.payload.len()).sum();
        note_tx(
            tx,
            realm,
            taker,
            "recv",
            receiver,
            (a.seq, b.seq),
            bytes,
            now_us,
        )?;
    }
    Ok(messages)
}

/// Procedure body: `actor`'s provenance event `event` (`send` or `recv`;
/// a client's only where its realm records clients: [`Actor::note_tx`])
/// for the messages `seqs` (first and last) of `mailbox`,
/// `bytes` of payload in all: detail `MAILBOX #FIRST-LAST +BYTES`. A send
/// and the receipt of the same messages name the same mailbox and seqs.
#[allow(clippy::too_many_arguments)]
fn note_tx(
    tx: &mut dyn Tx,
    realm: &str,
    actor: &Actor,
    event: &str,
    mailbox: &str,
    seqs: (i64, i64),
    bytes: usize,
    now_us: i64,
) -> Result<()> {
    debug_assert!(seqs.0 <= seqs.1, "a range of messages");
    let detail = format!("{mailbox} #{}-{} +{bytes}", seqs.0, seqs.1);
    actor.note_tx(tx, realm, event, &detail, now_us)
}

/// Procedure body: the mailbox's first messages, left in place.
pub fn peek_tx(tx: &mut dyn Tx, realm: &str, address: &Address, take: &Take) -> Result<Received> {
    validate_realm(realm)?;
    check_take(take)?;
    if mailbox_exists(tx, realm, address)?.is_none() {
        return Err(not_found(realm, address));
    }
    let receiver = address.to_string();
    let head = head(tx, realm, &receiver)?;
    let (_, last) = match fit(&head, take) {
        Ok((n, last, _)) => (n, last),
        Err(len) => {
            return Ok(Received {
                messages: Vec::new(),
                next_bytes: Some(len),
                more: true,
            })
        }
    };
    let rows = tx.query(
        "SELECT seq, sender, message_id, sent_us, payload FROM message \
         WHERE p_key = $1 AND realm = $2 AND receiver = $3 AND seq <= $4 ORDER BY seq",
        params![p_key(tx), realm, receiver.as_str(), last],
    )?;
    Ok(Received {
        messages: rows
            .iter()
            .map(message_from_row)
            .collect::<Result<Vec<_>>>()?,
        next_bytes: None,
        more: false,
    })
}

/// Procedure body: a mailbox's row (a proc's mailbox not yet used reads as
/// empty with the default bound).
pub fn mailbox_tx(tx: &mut dyn Tx, realm: &str, address: &Address) -> Result<MailboxInfo> {
    validate_realm(realm)?;
    let receiver = address.to_string();
    let row = tx.query_opt(
        "SELECT queued, queued_bytes, bytes_max, log_delivered, next_seq FROM mailbox \
         WHERE p_key = $1 AND realm = $2 AND address = $3",
        params![p_key(tx), realm, receiver.as_str()],
    )?;
    match row {
        Some(r) => Ok(MailboxInfo {
            address: receiver,
            queued: r.get(0)?,
            queued_bytes: r.get(1)?,
            bytes_max: r.get(2)?,
            log_delivered: r.get::<i64>(3)? != 0,
            next_seq: r.get(4)?,
        }),
        None if mailbox_exists(tx, realm, address)?.is_some() => Ok(MailboxInfo {
            address: receiver,
            queued: 0,
            queued_bytes: 0,
            bytes_max: MailboxOptions::default().bytes_max,
            log_delivered: false,
            next_seq: 1,
        }),
        None => Err(not_found(realm, address)),
    }
}

/// Creates named mailbox `name` in the caller's realm. Needs role member,
/// unscoped.
pub async fn create_mailbox(
    store: &Store,
    who: &Caller,
    name: &str,
    opts: MailboxOptions,
) -> Result<()> {
    who.may(Role::Member, "create mailboxes")?;
    let realm = who.realm();
    let (r, n) = (realm.to_string(), name.to_string());
    let now = tabos_store::now_us();
    store
        .run(partition(store, realm)?, move |tx| {
            create_mailbox_tx(tx, &r, &n, &opts, now)
        })
        .await
}

/// Removes named mailbox `name` and its messages; returns how many were
/// dropped. Needs role member, unscoped.
pub async fn remove_mailbox(store: &Store, who: &Caller, name: &str) -> Result<u64> {
    who.may(Role::Member, "remove mailboxes")?;
    let realm = who.realm();
    let (r, n) = (realm.to_string(), name.to_string());
    store
        .run(partition(store, realm)?, move |tx| {
            remove_mailbox_tx(tx, &r, &n)
        })
        .await
}

/// Sends a batch for `who` in one transaction (see [`send_tx`]). `opts`
/// applies to proc mailboxes made by this send. Needs what
/// [`Caller::may_send_all`] does.
pub async fn send(
    store: &Store,
    who: &Caller,
    from: Option<Address>,
    msgs: Vec<Outgoing>,
    opts: MailboxOptions,
) -> Result<Vec<Sent>> {
    send_fenced(store, who, from, msgs, opts, None).await
}

/// [`send`], refused with [`Error::StaleEpoch`](crate::Error::StaleEpoch)
/// — and nothing sent — if `fence`'s directory has seen a newer epoch
/// (checked in the send's own transaction).
pub async fn send_fenced(
    store: &Store,
    who: &Caller,
    from: Option<Address>,
    msgs: Vec<Outgoing>,
    opts: MailboxOptions,
    fence: Option<crate::names::Fence>,
) -> Result<Vec<Sent>> {
    who.may_send_all(from.as_ref(), msgs.iter().map(|m| &m.to))?;
    let realm = who.realm();
    let (pk, job) = send_job(store, realm, from, Some(who.own_actor()), msgs, opts, fence)?;
    store.for_realm(realm).run(pk, job).await
}

/// [`send`] from a blocking thread (a wasm proc's host call).
pub fn send_blocking(
    store: &Store,
    who: &Caller,
    from: Option<Address>,
    msgs: Vec<Outgoing>,
    opts: MailboxOptions,
) -> Result<Vec<Sent>> {
    who.may_send_all(from.as_ref(), msgs.iter().map(|m| &m.to))?;
    let realm = who.realm();
    let (pk, job) = send_job(store, realm, from, Some(who.own_actor()), msgs, opts, None)?;
    store.for_realm(realm).run(pk, job).wait()
}

/// A send's procedure.
trait SendJob: FnMut(&mut dyn Tx) -> Result<Vec<Sent>> + Send + 'static {}
impl<F: FnMut(&mut dyn Tx) -> Result<Vec<Sent>> + Send + 'static> SendJob for F {}

/// A send's partition and procedure. For each mailbox of the batch on
/// which a receiver of this process may be waiting for exactly its part —
/// no ids, as much as one receive takes — the procedure claims that
/// receiver, and if the mailbox is empty hands it the messages right after
/// the commit ([`handover`]). A multicast hands over to each.
fn send_job(
    store: &Store,
    realm: &str,
    from: Option<Address>,
    actor: Option<Actor>,
    msgs: Vec<Outgoing>,
    opts: MailboxOptions,
    fence: Option<crate::names::Fence>,
) -> Result<(PKey, impl SendJob)> {
    validate_outgoing(&msgs)?;
    let pk = partition(store, realm)?;
    let waiters = store.local::<Waiters>();
    let hand_to = hand_over_candidates(store, pk, realm, &msgs, &waiters);
    let r = realm.to_string();
    let now = tabos_store::now_us();
    Ok((pk, move |tx: &mut dyn Tx| {
        crate::names::check_fence_if_tx(tx, &r, fence.as_ref(), now)?;
        let claims: Vec<(&Handing, Claim)> = hand_to
            .iter()
            .filter_map(|h| Some((h, waiters.claim(&h.chan, h.count, h.bytes)?)))
            .collect();
        let claimed: Vec<Hand<'_>> = claims
            .iter()
            .map(|(h, c)| (&h.address, c.actor()))
            .collect();
        let (sent, handed) = send_handing_tx(
            tx,
            &r,
            from.as_ref(),
            actor.as_ref(),
            &msgs,
            &opts,
            now,
            &claimed,
        )?;
        // A claim whose mailbox was not empty, dropped, wakes its receiver
        // to wait again.
        for (h, claim) in claims {
            if handed.binary_search(&h.address).is_err() {
                continue;
            }
            let sender = from.as_ref().map(Address::to_string).unwrap_or_default();
            let messages = msgs
                .iter()
                .zip(&sent)
                .filter(|(m, _)| m.to == h.address)
                .map(|(m, s)| Message {
                    seq: s.seq,
                    sender: sender.clone(),
                    message_id: None,
                    sent_us: now,
                    payload: m.payload.clone(),
                })
                .collect::<Vec<_>>();
            let requeue = h.requeue.clone();
            // Committed: the messages are the receiver's. One that stopped
            // waiting meanwhile gets them back in its mailbox.
            tx.after_commit(Box::new(move || {
                if let Err(messages) = claim.deliver(messages) {
                    requeue.submit(messages);
                }
            }))?;
        }
        Ok(sent)
    }))
}

/// A mailbox of a send whose receiver, waiting in this process, could take
/// the send's messages to it whole.
struct Handing {
    chan: String,
    address: Address,
    count: usize,
    bytes: usize,
    requeue: Arc<Requeue>,
}

/// The mailboxes of `msgs` that a receiver of this process waits on, in
/// address order, when none of the messages has an id (a send with ids
/// goes message by message).
fn hand_over_candidates(
    store: &Store,
    pk: PKey,
    realm: &str,
    msgs: &[Outgoing],
    waiters: &Waiters,
) -> Vec<Handing> {
    // The common case costs one look: nobody waits in this process.
    if waiters.is_empty() || msgs.iter().any(|m| m.message_id.is_some()) {
        return Vec::new();
    }
    let mut parts: BTreeMap<&Address, (usize, usize)> = BTreeMap::new();
    for m in msgs {
        let part = parts.entry(&m.to).or_default();
        part.0 += 1;
        part.1 += m.payload.len();
    }
    parts
        .into_iter()
        .filter(|(_, (count, bytes))| *count <= RECV_MESSAGES_MAX && *bytes <= RECV_BYTES_MAX)
        .filter_map(|(to, (count, bytes))| {
            let chan = channel(realm, to);
            waiters.any(&chan).then(|| Handing {
                chan,
                address: to.clone(),
                count,
                bytes,
                requeue: Arc::new(Requeue::new(store, pk, realm, to.clone())),
            })
        })
        .collect()
}

/// Puts messages handed over to a receiver that had stopped waiting back at
/// the head of its mailbox (see [`handover`]).
pub(crate) struct Requeue {
    store: Store,
    pk: PKey,
    realm: String,
    address: Address,
}

impl Requeue {
    pub(crate) fn new(store: &Store, pk: PKey, realm: &str, address: Address) -> Requeue {
        Requeue {
            store: store.for_realm(realm),
            pk,
            realm: realm.to_string(),
            address,
        }
    }

    fn job(
        &self,
        messages: Vec<Message>,
    ) -> impl FnMut(&mut dyn Tx) -> Result<u64> + Send + 'static {
        let (r, a) = (self.realm.clone(), self.address.clone());
        move |tx| requeue_tx(tx, &r, &a, &messages)
    }

    /// From a drop, which cannot wait: the transaction runs on its own.
    pub(crate) fn submit(&self, messages: Vec<Message>) {
        // It commits whether or not anyone waits for its answer.
        drop(self.store.submit(self.pk, self.job(messages)));
    }
}

/// Procedure body: queues again messages that were handed over but not
/// taken, with the seqs they were sent with (no send since has a lower one,
/// so they come out first). Returns how many; none if the mailbox is gone.
fn requeue_tx(
    tx: &mut dyn Tx,
    realm: &str,
    address: &Address,
    messages: &[Message],
) -> Result<u64> {
    let pk = p_key(tx);
    let receiver = address.to_string();
    let bytes: usize = messages.iter().map(|m| m.payload.len()).sum();
    if count_queued(tx, realm, &receiver, messages.len() as i64, bytes as i64)? == 0 {
        // Removed meanwhile, and its messages with it.
        return Ok(0);
    }
    for m in messages {
        // Not delivered after all: a logging mailbox's log forgets it.
        tx.execute(
            "DELETE FROM message_log WHERE p_key = $1 AND realm = $2 AND receiver = $3 AND seq = $4",
            params![pk, realm, receiver.as_str(), m.seq],
        )?;
        tx.execute(
            "INSERT INTO message (p_key, realm, receiver, seq, sender, message_id, sent_us, payload) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params![
                pk,
                realm,
                receiver.as_str(),
                m.seq,
                m.sender.as_str(),
                m.message_id.as_deref(),
                m.sent_us,
                m.payload.as_slice()
            ],
        )?;
    }
    if let Some(last) = messages.last() {
        tx.notify(&channel(realm, address), &last.seq.to_string())?;
    }
    Ok(messages.len() as u64)
}

/// How many receivers of this process wait on `address` for a hand-over
/// (receivers on other nodes wait on the change feed alone).
pub fn local_waiters(store: &Store, realm: &str, address: &Address) -> usize {
    store.local::<Waiters>().count(&channel(realm, address))
}

/// Receives from `address`: returns at once what is queued, or waits up to
/// `wait` for the next send to commit, woken by the change feed (never by
/// polling). Returns an empty [`Received`] when the wait ran out or `stop`
/// completed first. `stop` and the deadline are only looked at between
/// transactions, so a receive that committed is always returned. A caller
/// that receives repeatedly should keep a [`Receiver`] instead.
pub async fn recv(
    store: &Store,
    who: &Caller,
    address: &Address,
    take: Take,
    wait: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Received> {
    Receiver::new(store, who, address)?
        .recv(take, wait, stop)
        .await
}

/// A receiver that stays subscribed to its mailbox between receives, so it
/// knows when the mailbox has had no send since its last receive emptied it
/// and can wait without a transaction: a ping-pong costs one transaction per
/// message each way instead of two.
pub struct Receiver {
    store: Store,
    pk: PKey,
    realm: String,
    address: Address,
    chan: String,
    sub: tabos_store::Subscription,
    /// The mailbox may hold messages this receiver has not taken: none of
    /// its receives has emptied it since the last send it was told of.
    dirty: bool,
    /// Spin on the subscription this long before parking (blocking use
    /// only: on a thread that would otherwise sleep through a wake-up).
    spin: Duration,
    /// Where this receiver waits for hand-overs while it waits.
    waiters: Arc<Waiters>,
    /// Whom this receiver acts for (its credential's proc, else its
    /// client): its receipts are its provenance, whether taken
    /// ([`recv_for_tx`]) or handed over (the sender's transaction notes
    /// them for the claimed waiter's actor).
    actor: Option<Actor>,
    requeue: Arc<Requeue>,
}

/// A receive's transaction, awaited. Dropped before it is answered — the
/// receive's caller went away — it still commits, and what it took goes
/// back to the head of the mailbox.
struct Taking<'r> {
    pending: Option<tabos_store::Pending<Received, Error>>,
    requeue: &'r Arc<Requeue>,
}

impl std::future::Future for Taking<'_> {
    type Output = Result<Received>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Received>> {
        let pending = self.pending.as_mut().expect("polled after it was answered");
        let got = std::task::ready!(std::pin::Pin::new(pending).poll(cx));
        self.pending = None;
        std::task::Poll::Ready(got)
    }
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let requeue = self.requeue.clone();
        let put_back = move |got: Result<Received>| match got {
            Ok(got) if !got.messages.is_empty() => requeue.submit(got.messages),
            _ => {}
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(async move { put_back(pending.await) })),
            Err(_) => drop(std::thread::spawn(move || put_back(pending.wait()))),
        }
    }
}

/// What ended a receiver's wait.
enum Woke {
    /// `None`: the sender that claimed this receiver rolled back.
    Handed(Option<Vec<Message>>),
    Note(tabos_store::Result<tabos_store::Notification>),
    Over,
}

fn handed(messages: Vec<Message>) -> Received {
    Received {
        messages,
        next_bytes: None,
        more: false,
    }
}

/// The hand-over a wait may get; never, without a registration.
async fn hand_over(waiting: &mut Option<Waiting>) -> Option<Vec<Message>> {
    match waiting {
        Some(w) => w.handed().await,
        None => std::future::pending().await,
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("realm", &self.realm)
            .field("address", &self.address)
            .field("dirty", &self.dirty)
            .finish()
    }
}

impl Receiver {
    /// Subscribes to `address`'s channel for `who`, who needs role member
    /// and a scope that grants the mailbox. Whether the mailbox exists is
    /// checked by the first receive.
    pub fn new(store: &Store, who: &Caller, address: &Address) -> Result<Receiver> {
        who.require(Role::Member)?;
        who.may_recv(address)?;
        let realm = who.realm();
        let pk = partition(store, realm)?;
        let chan = channel(realm, address);
        Ok(Receiver {
            sub: store.subscribe(&chan),
            // Charged to the realm: its turn and share of the partition.
            store: store.for_realm(realm),
            pk,
            realm: realm.to_string(),
            address: address.clone(),
            chan,
            dirty: true,
            spin: Duration::ZERO,
            waiters: store.local::<Waiters>(),
            actor: Some(who.own_actor()),
            requeue: Arc::new(Requeue::new(store, pk, realm, address.clone())),
        })
    }

    /// For a receiver used from a blocking thread ([`Receiver::recv_blocking`]):
    /// check the subscription in a yield loop this long before parking.
    pub fn with_spin(mut self, spin: Duration) -> Receiver {
        self.spin = spin;
        self
    }

    /// Takes what the subscription has queued: every notification there is
    /// for a send that committed before the transaction about to run.
    fn drain(&mut self) -> Result<()> {
        loop {
            match self.sub.try_recv() {
                Ok(Some(_)) => self.dirty = true,
                Ok(None) => return Ok(()),
                Err(tabos_store::Error::Lagged(_)) => {
                    // Cut off: sends may have been missed; start again.
                    self.sub = self.store.subscribe(&self.chan);
                    self.dirty = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn job(&self, take: Take) -> impl FnMut(&mut dyn Tx) -> Result<Received> + Send + 'static {
        let (r, a, p) = (self.realm.clone(), self.address.clone(), self.actor.clone());
        move |tx| recv_for_tx(tx, &r, &a, &take, p.as_ref(), tabos_store::now_us())
    }

    /// What a transaction's result means for waiting: `Some` to return it.
    fn after(&mut self, got: Received, wait: Duration) -> Option<Received> {
        self.dirty = got.more;
        if !got.messages.is_empty() || got.next_bytes.is_some() || wait.is_zero() {
            Some(got)
        } else {
            None
        }
    }

    fn noted(&mut self, note: tabos_store::Result<tabos_store::Notification>) -> Result<()> {
        match note {
            Ok(_) => self.dirty = true,
            Err(tabos_store::Error::Lagged(_)) => {
                self.sub = self.store.subscribe(&self.chan);
                self.dirty = true;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Like [`recv`]: what is queued, or the first messages sent within
    /// `wait`; empty when the wait ran out or `stop` completed.
    pub async fn recv(
        &mut self,
        take: Take,
        wait: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Received> {
        check_take(&take)?;
        let wait = wait.min(RECV_WAIT_MAX);
        let deadline = tokio::time::Instant::now() + wait;
        let mut stop = std::pin::pin!(stop);
        loop {
            self.drain()?;
            if self.dirty {
                let taking = Taking {
                    pending: Some(self.store.run(self.pk, self.job(take))),
                    requeue: &self.requeue,
                };
                let got = taking.await?;
                if let Some(got) = self.after(got, wait) {
                    return Ok(got);
                }
            } else if wait.is_zero() {
                return Ok(Received::default());
            }
            // The mailbox was empty as of the last receive, and any send
            // since is on the subscription: wait for either.
            let mut waiting =
                self.waiters
                    .wait(&self.chan, take, &self.requeue, self.actor.clone());
            let woke = tokio::select! {
                messages = hand_over(&mut waiting) => Woke::Handed(messages),
                note = self.sub.recv() => Woke::Note(note),
                () = tokio::time::sleep_until(deadline) => Woke::Over,
                () = &mut stop => Woke::Over,
            };
            let late = match (&woke, waiting) {
                (Woke::Handed(_), _) | (_, None) => None,
                (_, Some(w)) => w.finish().await,
            };
            if let Some(got) = self.woke(woke, late)? {
                return Ok(got);
            }
        }
    }

    /// Ends a wait, given what was handed over as it ended: `Some` to
    /// return (handed-over messages, or nothing when the wait is over),
    /// `None` to go round again.
    fn woke(&mut self, woke: Woke, late: Option<Vec<Message>>) -> Result<Option<Received>> {
        match woke {
            Woke::Handed(Some(messages)) => return Ok(Some(handed(messages))),
            Woke::Handed(None) => {}
            Woke::Note(note) => self.noted(note)?,
            Woke::Over => return Ok(Some(late.map(handed).unwrap_or_default())),
        }
        // Handed over just as a send queued: return it, and receive the
        // rest next time (the note made this receiver dirty).
        Ok(late.map(handed))
    }

    /// [`Receiver::recv`] for a blocking thread (a wasm proc's): waits for
    /// transactions by spinning briefly before parking, and runs the waits
    /// on `rt`.
    pub fn recv_blocking(
        &mut self,
        rt: &tokio::runtime::Handle,
        take: Take,
        wait: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Received> {
        check_take(&take)?;
        let wait = wait.min(RECV_WAIT_MAX);
        let deadline = std::time::Instant::now() + wait;
        let mut stop = std::pin::pin!(stop);
        loop {
            self.drain()?;
            if self.dirty {
                let got = self.store.run(self.pk, self.job(take)).wait()?;
                if let Some(got) = self.after(got, wait) {
                    return Ok(got);
                }
            } else if wait.is_zero() {
                return Ok(Received::default());
            }
            let mut waiting =
                self.waiters
                    .wait(&self.chan, take, &self.requeue, self.actor.clone());
            // A reply usually comes within microseconds: look before sleeping.
            let spin_until = std::time::Instant::now() + self.spin;
            while !self.spin.is_zero() && std::time::Instant::now() < spin_until {
                if !self.sub.is_empty() || waiting.as_ref().is_some_and(Waiting::ready) {
                    break;
                }
                std::thread::yield_now();
            }
            if waiting.as_ref().is_some_and(Waiting::ready) {
                let late = waiting.and_then(|w| w.finish_blocking(rt));
                if let Some(got) = self.woke(Woke::Handed(late), None)? {
                    return Ok(got);
                }
                continue;
            }
            let deadline = tokio::time::Instant::from_std(deadline);
            let sub = &mut self.sub;
            let woke = rt.block_on(async {
                tokio::select! {
                    messages = hand_over(&mut waiting) => Woke::Handed(messages),
                    note = sub.recv() => Woke::Note(note),
                    () = tokio::time::sleep_until(deadline) => Woke::Over,
                    () = &mut stop => Woke::Over,
                }
            });
            let late = match (&woke, waiting) {
                (Woke::Handed(_), _) | (_, None) => None,
                (_, Some(w)) => w.finish_blocking(rt),
            };
            if let Some(got) = self.woke(woke, late)? {
                return Ok(got);
            }
        }
    }
}

/// The mailbox's first messages, left in place (on a read connection).
/// Needs role reader and a scope that grants receiving from it.
pub async fn peek(store: &Store, who: &Caller, address: &Address, take: Take) -> Result<Received> {
    who.require(Role::Reader)?;
    who.may_recv(address)?;
    let realm = who.realm();
    let (r, a) = (realm.to_string(), address.clone());
    crate::read(store, realm, move |tx| peek_tx(tx, &r, &a, &take)).await
}

/// A mailbox's row. Needs role reader and a scope that grants sending to
/// it or receiving from it.
pub async fn mailbox(store: &Store, who: &Caller, address: &Address) -> Result<MailboxInfo> {
    who.require(Role::Reader)?;
    if who.may_send(address).is_err() {
        who.may_recv(address)?;
    }
    let realm = who.realm();
    let (r, a) = (realm.to_string(), address.clone());
    store
        .run(partition(store, realm)?, move |tx| mailbox_tx(tx, &r, &a))
        .await
}

/// Procedure body: removes at most `limit` of `realm`'s logged messages
/// (`message_log`) received before `before_us`, oldest first (the
/// retention reaper's). Returns how many.
pub fn expire_log_tx(tx: &mut dyn Tx, realm: &str, before_us: i64, limit: usize) -> Result<usize> {
    let n = tx.execute(
        "DELETE FROM message_log WHERE (p_key, realm, receiver, seq) IN \
         (SELECT p_key, realm, receiver, seq FROM message_log \
          WHERE p_key = $1 AND realm = $2 AND recv_us < $3 ORDER BY recv_us LIMIT $4)",
        params![p_key(tx), realm, before_us, limit as i64],
    )?;
    debug_assert!(n as usize <= limit, "at most the batch is removed");
    Ok(n as usize)
}

/// Procedure body: deletes `realm`'s mailboxes with their messages, logs and
/// deduplication state (the realm's removal, [`crate::teardown`]); returns
/// the rows deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    crate::delete_realm_rows(
        tx,
        realm,
        &["message", "message_dedup", "message_log", "mailbox"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print() {
        assert_eq!(
            Address::parse("proc/p1").unwrap(),
            Address::Proc(Pid("p1".into()))
        );
        assert_eq!(Address::parse("inbox").unwrap().to_string(), "inbox");
        assert_eq!(Address::parse("proc/p1").unwrap().to_string(), "proc/p1");
        for bad in ["", "a/b", "proc/", "proc/a/b", "x y", "..", "nul\0"] {
            assert!(Address::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn channels_fit_the_feed_limit() {
        let long = Address::Named("m".repeat(crate::ids::NAME_BYTES_MAX));
        let realm = "r".repeat(crate::REALM_BYTES_MAX);
        let c = channel(&realm, &long);
        assert!(c.len() <= tabos_store::feed::CHANNEL_BYTES_MAX);
        assert_ne!(c, channel(&realm, &Address::Named("other".into())));
        let short = Address::Named("inbox".into());
        assert_eq!(channel("r", &short), "mail/r/inbox");
    }

    #[test]
    fn fit_takes_a_prefix_within_budget() {
        let head = [(1, 10), (2, 10), (3, 10)];
        let t = |max, bytes_max| Take { max, bytes_max };
        assert_eq!(fit(&head, &t(64, 100)), Ok((3, 3, 30)));
        assert_eq!(fit(&head, &t(2, 100)), Ok((2, 2, 20)));
        assert_eq!(fit(&head, &t(64, 25)), Ok((2, 2, 20)));
        assert_eq!(fit(&head, &t(64, 5)), Err(10));
        assert_eq!(fit(&[], &t(64, 5)), Ok((0, 0, 0)));
    }
}
