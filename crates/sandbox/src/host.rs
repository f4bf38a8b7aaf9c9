//! The tabos host functions of a wasm proc (import module `tabos`): the
//! same IPC operations a client has over gRPC, without the RPC.
//!
//! The sandbox defines the calls and checks every guest pointer; what they
//! do is the embedder's [`Host`] (the node implements it over the kernel).
//! A run without a host gets `ENOSYS` from every call.
//!
//! ```text
//! send(to_ptr, to_len, data_ptr, data_len, id_ptr, id_len) -> errno
//!     `to`: one or more receiver addresses separated by '\n' (a multicast,
//!     one transaction). `id` (id_len 0: none) is the message id that makes
//!     a resend idempotent.
//! recv(from_ptr, from_len, flags, timeout_ms: i64,
//!      buf, buf_cap, sender_buf, sender_cap, lens_out) -> errno
//!     Takes the next message of mailbox `from` (from_len 0: the proc's own),
//!     waiting up to timeout_ms (< 0: without limit). Writes the payload to
//!     buf, the sender's address to sender_buf (cut to sender_cap) and the
//!     two lengths as u32 at lens_out. A message longer than buf_cap is left
//!     in place: E2BIG, with its length at lens_out. With flags & PEEK (1)
//!     the message is only looked at, never waited for (EAGAIN if none).
//! ```
//!
//! Results are WASI errno values: 0 success, `ENOENT` no such mailbox,
//! `ENOSPC` mailbox full, `EPIPE` the receiving proc has finished,
//! `EMSGSIZE` payload over the message limit, `E2BIG` buffer too small,
//! `ETIMEDOUT` nothing came in time, `EAGAIN` nothing to peek, `ECANCELED` the proc is being stopped,
//! `EINVAL` a malformed argument, `EFAULT` a pointer outside memory, `EIO`
//! anything else (the reason goes to the proc's stderr).

use std::time::Duration;

use wasmtime::{Caller, Linker};

use crate::wasi::{memory, put_u32, range};
use crate::RunState;

pub const MODULE: &str = "tabos";

pub const E2BIG: i32 = 1;
pub const EAGAIN: i32 = 6;
pub const ECANCELED: i32 = 11;
pub const EFAULT: i32 = 21;
pub const EINVAL: i32 = 28;
pub const EIO: i32 = 29;
pub const EMSGSIZE: i32 = 35;
pub const ENOENT: i32 = 44;
pub const ENOSPC: i32 = 51;
pub const ENOSYS: i32 = 52;
pub const EPIPE: i32 = 64;
pub const ETIMEDOUT: i32 = 73;

/// Longest receiver list of one `send`, in bytes.
pub const SEND_TO_BYTES_MAX: u32 = 64 << 10;
/// Longest mailbox name or message id a call takes, in bytes.
pub const NAME_BYTES_MAX: u32 = 1 << 10;
/// `recv` flag: look at the next message without taking it.
pub const PEEK: i32 = 1;

/// Why a host call failed; each maps to one errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    NotFound(String),
    Full(String),
    /// The receiver has finished.
    Closed(String),
    PayloadTooLarge(String),
    /// The next message is this long and does not fit the buffer.
    TooBig(usize),
    TimedOut,
    /// A peek found nothing.
    Empty,
    Stopped,
    Invalid(String),
    Other(String),
}

impl HostError {
    fn errno(&self) -> i32 {
        match self {
            HostError::NotFound(_) => ENOENT,
            HostError::Full(_) => ENOSPC,
            HostError::Closed(_) => EPIPE,
            HostError::PayloadTooLarge(_) => EMSGSIZE,
            HostError::TooBig(_) => E2BIG,
            HostError::TimedOut => ETIMEDOUT,
            HostError::Empty => EAGAIN,
            HostError::Stopped => ECANCELED,
            HostError::Invalid(_) => EINVAL,
            HostError::Other(_) => EIO,
        }
    }

    fn message(&self) -> Option<&str> {
        match self {
            HostError::NotFound(m)
            | HostError::Full(m)
            | HostError::Closed(m)
            | HostError::PayloadTooLarge(m)
            | HostError::Invalid(m)
            | HostError::Other(m) => Some(m),
            _ => None,
        }
    }
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub sender: String,
    pub payload: Vec<u8>,
}

/// What a `recv` call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvCall<'a> {
    /// A mailbox address; `None` for the proc's own.
    pub from: Option<&'a str>,
    /// The next message only if it is at most this long.
    pub bytes_max: usize,
    /// How long to wait; `None`: no limit. A peek never waits.
    pub timeout: Option<Duration>,
    /// Look without taking.
    pub peek: bool,
}

/// What tabos does for a proc's host calls; implemented by the node.
pub trait Host: Send {
    /// Sends `payload` to every address in `to`, in one transaction, with
    /// an optional idempotency id.
    fn send(&mut self, to: &[&str], payload: &[u8], id: Option<&str>) -> Result<(), HostError>;
    /// Takes (or peeks at) the next message of a mailbox.
    fn recv(&mut self, call: RecvCall<'_>) -> Result<Received, HostError>;
}

/// Reports a failed call's reason on the proc's stderr, so a proc that only
/// sees an errno can still be debugged from its log.
fn fail(state: &mut RunState, call: &str, e: &HostError) -> i32 {
    if let Some(m) = e.message() {
        state.wasi.stderr_line(&format!("tabos.{call}: {m}"));
    }
    e.errno()
}

/// The text at (ptr, len), at most `max` bytes of UTF-8; `Ok(None)` for len 0.
fn text(mem: &[u8], ptr: i32, len: i32, max: u32) -> Result<Option<&str>, i32> {
    if len == 0 {
        return Ok(None);
    }
    if len as u32 > max {
        return Err(EINVAL);
    }
    let r = range(mem, ptr, len as u32).ok_or(EFAULT)?;
    std::str::from_utf8(&mem[r]).map(Some).map_err(|_| EINVAL)
}

#[allow(clippy::too_many_arguments)]
fn send(
    caller: &mut Caller<'_, RunState>,
    to: i32,
    to_len: i32,
    data: i32,
    data_len: i32,
    id: i32,
    id_len: i32,
) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let to_text = match text(mem, to, to_len, SEND_TO_BYTES_MAX) {
        Ok(Some(t)) => t,
        Ok(None) => return EINVAL,
        Err(e) => return e,
    };
    let id = match text(mem, id, id_len, NAME_BYTES_MAX) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let Some(data_r) = range(mem, data, data_len as u32) else {
        return EFAULT;
    };
    let receivers: Vec<&str> = to_text.split('\n').filter(|s| !s.is_empty()).collect();
    if receivers.is_empty() {
        return EINVAL;
    }
    let Some(host) = state.host.as_mut() else {
        return ENOSYS;
    };
    match host.send(&receivers, &mem[data_r], id) {
        Ok(()) => 0,
        Err(e) => fail(state, "send", &e),
    }
}

#[allow(clippy::too_many_arguments)]
fn recv(
    caller: &mut Caller<'_, RunState>,
    from: i32,
    from_len: i32,
    flags: i32,
    timeout_ms: i64,
    buf: i32,
    cap: i32,
    sender_buf: i32,
    sender_cap: i32,
    lens: i32,
) -> i32 {
    if flags & !PEEK != 0 {
        return EINVAL;
    }
    // Check every pointer before waiting: a message taken and then not
    // deliverable to a bad buffer would be lost.
    let from = {
        let Some((mem, _)) = memory(caller) else {
            return EFAULT;
        };
        if range(mem, buf, cap as u32).is_none()
            || range(mem, sender_buf, sender_cap as u32).is_none()
            || range(mem, lens, 8).is_none()
        {
            return EFAULT;
        }
        match text(mem, from, from_len, NAME_BYTES_MAX) {
            Ok(f) => f.map(str::to_string),
            Err(e) => return e,
        }
    };
    let call = RecvCall {
        from: from.as_deref(),
        bytes_max: cap as u32 as usize,
        timeout: (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64)),
        peek: flags & PEEK != 0,
    };
    let got = match caller.data_mut().host.as_mut() {
        None => return ENOSYS,
        Some(h) => h.recv(call),
    };
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    match got {
        Ok(m) => {
            // Memory cannot shrink, so the ranges checked above still hold.
            let n = m.payload.len().min(cap as u32 as usize);
            debug_assert_eq!(n, m.payload.len(), "the host honours bytes_max");
            let b = buf as u32 as usize;
            mem[b..b + n].copy_from_slice(&m.payload[..n]);
            let s = m.sender.len().min(sender_cap as u32 as usize);
            let sb = sender_buf as u32 as usize;
            mem[sb..sb + s].copy_from_slice(&m.sender.as_bytes()[..s]);
            put_u32(mem, lens, n as u32);
            put_u32(mem, lens + 4, s as u32);
            0
        }
        Err(HostError::TooBig(len)) => {
            put_u32(mem, lens, len as u32);
            put_u32(mem, lens + 4, 0);
            E2BIG
        }
        Err(e) => fail(state, "recv", &e),
    }
}

/// Adds the `tabos` functions to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        MODULE,
        "send",
        |mut c: Caller<'_, RunState>,
         to: i32,
         to_len: i32,
         data: i32,
         data_len: i32,
         id: i32,
         id_len: i32|
         -> i32 { send(&mut c, to, to_len, data, data_len, id, id_len) },
    )?;
    linker.func_wrap(
        MODULE,
        "recv",
        |mut c: Caller<'_, RunState>,
         from: i32,
         from_len: i32,
         flags: i32,
         timeout_ms: i64,
         buf: i32,
         cap: i32,
         sender_buf: i32,
         sender_cap: i32,
         lens: i32|
         -> i32 {
            recv(
                &mut c, from, from_len, flags, timeout_ms, buf, cap, sender_buf, sender_cap, lens,
            )
        },
    )?;
    Ok(())
}
