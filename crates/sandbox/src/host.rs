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
//!
//! name_get(path_ptr, path_len, buf, buf_cap, out) -> errno
//!     Reads the namespace entry at `path`: its data (a file's bytes, a
//!     symlink's target) to buf, and at `out` 16 bytes: the data length
//!     (u32), the kind (u32: 0 dir, 1 file, 2 symlink) and the version
//!     (i64). Data longer than buf_cap: E2BIG, with its length at out.
//! name_put(path_ptr, path_len, data, data_len, if_version: i64, version_out)
//!     -> errno
//!     Sets file `path` (creating it): if_version < 0 always, 0 only if it
//!     does not exist, n > 0 only at version n (EBUSY otherwise). Writes the
//!     new version (i64) at version_out.
//! name_mkdir(path_ptr, path_len) -> errno          EEXIST if anything is there
//! name_remove(path_ptr, path_len) -> errno         EBUSY for a non-empty dir
//! name_wait(path_ptr, path_len, mode, timeout_ms: i64) -> errno
//!     Waits until `path` exists (mode 0) or does not (mode 1), woken by the
//!     change feed; timeout_ms < 0 waits without limit.
//!
//! fs_read(path_ptr, path_len, offset: i64, buf, buf_cap, n_out) -> errno
//!     Reads up to buf_cap bytes (at most 4 MiB) of file `path` at offset
//!     into buf; the count (u32) goes to n_out, 0 at or past the end.
//! fs_write(path_ptr, path_len, offset: i64, data, data_len, flags,
//!          size_out) -> errno
//!     Writes data_len bytes (at most 4 MiB) at offset; with flags & CREATE
//!     (1) a missing file is created first. The file's new size (i64) goes
//!     to size_out.
//! fs_stat(path_ptr, path_len, out) -> errno
//!     At `out` 16 bytes: the size (i64), the kind (u32: 0 dir, 1 file, 2
//!     symlink, 3 FIFO — read and written by `fs_read`/`fs_write` as a pipe) and
//!     the mode (u32).
//! ```
//!
//! A proc's file calls act for its realm's administrator (`root`): realms
//! are what separates tenants; users within a realm are for its people.
//!
//! Results are WASI errno values: 0 success, `ENOENT` no such mailbox,
//! `ENOSPC` mailbox full, `EPIPE` the receiving proc has finished,
//! `EMSGSIZE` payload over the message limit, `E2BIG` buffer too small,
//! `ETIMEDOUT` nothing came in time, `EAGAIN` nothing to peek, `ECANCELED` the proc is being stopped,
//! `EINVAL` a malformed argument, `EFAULT` a pointer outside memory,
//! `EEXIST` the name exists, `EBUSY` a version or emptiness condition
//! failed, `ESTALE` a fence refused the request, `EXDEV` the path goes
//! through a mount point (a symlink: resolve it at its target), `EIO`
//! anything else (the reason goes to the proc's stderr).

use std::time::Duration;

use wasmtime::{Caller, Linker};

use crate::wasi::{memory, put_u32, range};
use crate::RunState;

pub const MODULE: &str = "tabos";

pub const E2BIG: i32 = 1;
pub const EACCES: i32 = 2;
pub const EAGAIN: i32 = 6;
pub const EBUSY: i32 = 10;
pub const ECANCELED: i32 = 11;
pub const EEXIST: i32 = 20;
pub const EFAULT: i32 = 21;
pub const EINVAL: i32 = 28;
pub const EIO: i32 = 29;
pub const EMSGSIZE: i32 = 35;
pub const ENOENT: i32 = 44;
pub const ENOSPC: i32 = 51;
pub const ENOSYS: i32 = 52;
pub const EPIPE: i32 = 64;
pub const ESTALE: i32 = 72;
pub const ETIMEDOUT: i32 = 73;
pub const EXDEV: i32 = 75;

/// Longest receiver list of one `send`, in bytes.
pub const SEND_TO_BYTES_MAX: u32 = 64 << 10;
/// Longest mailbox name or message id a call takes, in bytes.
pub const NAME_BYTES_MAX: u32 = 1 << 10;
/// Longest namespace path a call takes, in bytes (the kernel's own limit).
pub const PATH_BYTES_MAX: u32 = 1_024;
/// `recv` flag: look at the next message without taking it.
pub const PEEK: i32 = 1;
/// `fs_write` flag: create the file if it is missing.
pub const CREATE: i32 = 1;
/// Most bytes one `fs_read` or `fs_write` moves (the kernel's limit).
pub const FS_IO_BYTES_MAX: u32 = 4 << 20;

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
    /// The name already exists.
    Exists(String),
    /// A version or emptiness condition failed.
    Conflict(String),
    /// A fence refused the request.
    StaleEpoch(String),
    /// The path goes through a mount point.
    Mounted(String),
    /// Permission bits refuse the call.
    Denied(String),
    /// The embedder does not offer this call.
    Unsupported,
    Other(String),
}

impl HostError {
    pub(crate) fn errno(&self) -> i32 {
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
            HostError::Exists(_) => EEXIST,
            HostError::Conflict(_) => EBUSY,
            HostError::StaleEpoch(_) => ESTALE,
            HostError::Mounted(_) => EXDEV,
            HostError::Denied(_) => EACCES,
            HostError::Unsupported => ENOSYS,
            HostError::Other(_) => EIO,
        }
    }

    /// The errno's name, for messages (`ENOENT`, …).
    pub(crate) fn errno_name(&self) -> &'static str {
        match self.errno() {
            E2BIG => "E2BIG",
            EACCES => "EACCES",
            EAGAIN => "EAGAIN",
            EBUSY => "EBUSY",
            ECANCELED => "ECANCELED",
            EEXIST => "EEXIST",
            EINVAL => "EINVAL",
            EMSGSIZE => "EMSGSIZE",
            ENOENT => "ENOENT",
            ENOSPC => "ENOSPC",
            ENOSYS => "ENOSYS",
            EPIPE => "EPIPE",
            ESTALE => "ESTALE",
            ETIMEDOUT => "ETIMEDOUT",
            EXDEV => "EXDEV",
            _ => "EIO",
        }
    }

    pub(crate) fn message(&self) -> Option<&str> {
        match self {
            HostError::NotFound(m)
            | HostError::Full(m)
            | HostError::Closed(m)
            | HostError::PayloadTooLarge(m)
            | HostError::Invalid(m)
            | HostError::Exists(m)
            | HostError::Conflict(m)
            | HostError::StaleEpoch(m)
            | HostError::Mounted(m)
            | HostError::Denied(m)
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

/// A namespace entry as a proc sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameEntry {
    /// 0 directory, 1 file, 2 symlink.
    pub kind: u32,
    pub data: Vec<u8>,
    pub version: i64,
}

/// A file's metadata as a proc sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEntry {
    /// 0 directory, 1 file.
    pub kind: u32,
    pub mode: u32,
    pub size: i64,
}

/// What tabos does for a proc's host calls; implemented by the node. The
/// namespace and file calls default to "not offered" (`ENOSYS`).
pub trait Host {
    /// A deadline the host has set for the running call, earlier than the
    /// call's own — it began holding something others wait for (a
    /// procedure's partition write lock, `tabos_store::WRITE_HOLD_MAX`):
    /// the call stops there, as at its own. Asked after each host call and
    /// by the runtimes' interrupt checks.
    fn deadline(&self) -> Option<std::time::Instant> {
        None
    }
    /// Sends `payload` to every address in `to`, in one transaction, with
    /// an optional idempotency id.
    fn send(&mut self, to: &[&str], payload: &[u8], id: Option<&str>) -> Result<(), HostError>;
    /// Takes (or peeks at) the next message of a mailbox.
    fn recv(&mut self, call: RecvCall<'_>) -> Result<Received, HostError>;
    /// The entry at `path`.
    fn name_get(&mut self, _path: &str) -> Result<NameEntry, HostError> {
        Err(HostError::Unsupported)
    }
    /// Sets file `path`, optionally only at a version (0: only if absent);
    /// returns the new version.
    fn name_put(
        &mut self,
        _path: &str,
        _data: &[u8],
        _if_version: Option<i64>,
    ) -> Result<i64, HostError> {
        Err(HostError::Unsupported)
    }
    fn name_mkdir(&mut self, _path: &str) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    fn name_remove(&mut self, _path: &str) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    /// Waits until `path` exists (or, with `exists` false, does not).
    fn name_wait(
        &mut self,
        _path: &str,
        _exists: bool,
        _timeout: Option<Duration>,
    ) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    /// Up to `len` bytes of file `path` at `offset`.
    fn fs_read(&mut self, _path: &str, _offset: i64, _len: usize) -> Result<Vec<u8>, HostError> {
        Err(HostError::Unsupported)
    }
    /// Writes `data` at `offset` (creating the file first when `create`);
    /// returns the new size.
    fn fs_write(
        &mut self,
        _path: &str,
        _offset: i64,
        _data: &[u8],
        _create: bool,
    ) -> Result<i64, HostError> {
        Err(HostError::Unsupported)
    }
    fn fs_stat(&mut self, _path: &str) -> Result<FileEntry, HostError> {
        Err(HostError::Unsupported)
    }
    /// The value at `key` of the realm's key-value table, if any.
    fn kv_get(&mut self, _key: &str) -> Result<Option<Vec<u8>>, HostError> {
        Err(HostError::Unsupported)
    }
    fn kv_put(&mut self, _key: &str, _value: &[u8]) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    /// Deletes `key`; whether it existed.
    fn kv_delete(&mut self, _key: &str) -> Result<bool, HostError> {
        Err(HostError::Unsupported)
    }
    /// Up to `max` entries in key order from `start` (inclusive, or
    /// exclusive with `after`) to `end` (exclusive; `None`: no end).
    fn kv_scan(
        &mut self,
        _start: &str,
        _end: Option<&str>,
        _after: bool,
        _max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, HostError> {
        Err(HostError::Unsupported)
    }
    /// One statement of SQL over the realm's own tables (`write`: it may
    /// change them).
    fn sql(
        &mut self,
        _sql: &str,
        _params: &[SqlValue],
        _write: bool,
    ) -> Result<SqlResult, HostError> {
        Err(HostError::Unsupported)
    }
    /// Does nothing: the cost of crossing into the host and back.
    fn nop(&mut self) -> u64 {
        0
    }
    /// The workflow calls ([`crate::workflow`]), when this host offers them.
    fn workflow(&mut self) -> Option<&mut dyn crate::workflow::WfHost> {
        None
    }
}

/// A SQL value crossing the host boundary.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// What a SQL call returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SqlResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<SqlValue>>,
    /// Rows the statement changed.
    pub changed: u64,
}

/// Reports a failed call's reason on the proc's stderr, so a proc that only
/// sees an errno can still be debugged from its log.
pub(crate) fn fail(state: &mut RunState, call: &str, e: &HostError) -> i32 {
    if let Some(m) = e.message() {
        state.wasi.stderr_line(&format!("tabos.{call}: {m}"));
    }
    e.errno()
}

/// The text at (ptr, len), at most `max` bytes of UTF-8; `Ok(None)` for len 0.
pub(crate) fn text(mem: &[u8], ptr: i32, len: i32, max: u32) -> Result<Option<&str>, i32> {
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
    let Some(host) = state.host_mut() else {
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
    let got = match caller.data_mut().host_mut() {
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

/// The path at (ptr, len): non-empty UTF-8 of at most PATH_BYTES_MAX bytes.
fn path_arg(caller: &mut Caller<'_, RunState>, ptr: i32, len: i32) -> Result<String, i32> {
    let Some((mem, _)) = memory(caller) else {
        return Err(EFAULT);
    };
    match text(mem, ptr, len, PATH_BYTES_MAX)? {
        Some(p) => Ok(p.to_string()),
        None => Err(EINVAL),
    }
}

/// Runs a namespace call on the host and turns its error into an errno.
fn with_host<T>(
    caller: &mut Caller<'_, RunState>,
    call: &str,
    f: impl FnOnce(&mut dyn Host) -> Result<T, HostError>,
) -> Result<T, i32> {
    let state = caller.data_mut();
    let Some(host) = state.host_mut() else {
        return Err(ENOSYS);
    };
    f(host).map_err(|e| fail(state, call, &e))
}

fn name_get(
    caller: &mut Caller<'_, RunState>,
    path: i32,
    len: i32,
    buf: i32,
    cap: i32,
    out: i32,
) -> i32 {
    {
        let Some((mem, _)) = memory(caller) else {
            return EFAULT;
        };
        if range(mem, buf, cap as u32).is_none() || range(mem, out, 16).is_none() {
            return EFAULT;
        }
    }
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let e = match with_host(caller, "name_get", |h| h.name_get(&path)) {
        Ok(e) => e,
        Err(errno) => return errno,
    };
    let Some((mem, _)) = memory(caller) else {
        return EFAULT;
    };
    // Memory cannot shrink, so the ranges checked above still hold.
    put_u32(mem, out, e.data.len() as u32);
    if e.data.len() > cap as u32 as usize {
        return E2BIG;
    }
    let b = buf as u32 as usize;
    mem[b..b + e.data.len()].copy_from_slice(&e.data);
    put_u32(mem, out + 4, e.kind);
    let o = out as u32 as usize + 8;
    mem[o..o + 8].copy_from_slice(&e.version.to_le_bytes());
    0
}

#[allow(clippy::too_many_arguments)]
fn name_put(
    caller: &mut Caller<'_, RunState>,
    path: i32,
    len: i32,
    data: i32,
    data_len: i32,
    if_version: i64,
    version_out: i32,
) -> i32 {
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let (Some(data_r), Some(out_r)) = (
        range(mem, data, data_len as u32),
        range(mem, version_out, 8),
    ) else {
        return EFAULT;
    };
    let Some(host) = state.host_mut() else {
        return ENOSYS;
    };
    let cond = (if_version >= 0).then_some(if_version);
    match host.name_put(&path, &mem[data_r], cond) {
        Ok(v) => {
            mem[out_r].copy_from_slice(&v.to_le_bytes());
            0
        }
        Err(e) => fail(state, "name_put", &e),
    }
}

/// A namespace call that takes only a path (`name_mkdir`, `name_remove`).
fn name_path_call(
    caller: &mut Caller<'_, RunState>,
    call: &str,
    path: i32,
    len: i32,
    f: impl FnOnce(&mut dyn Host, &str) -> Result<(), HostError>,
) -> i32 {
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    with_host(caller, call, |h| f(h, &path)).err().unwrap_or(0)
}

fn name_wait(
    caller: &mut Caller<'_, RunState>,
    path: i32,
    len: i32,
    mode: i32,
    timeout_ms: i64,
) -> i32 {
    if !(0..=1).contains(&mode) {
        return EINVAL;
    }
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
    with_host(caller, "name_wait", |h| {
        h.name_wait(&path, mode == 0, timeout)
    })
    .err()
    .unwrap_or(0)
}

#[allow(clippy::too_many_arguments)]
fn fs_read(
    caller: &mut Caller<'_, RunState>,
    path: i32,
    len: i32,
    offset: i64,
    buf: i32,
    cap: i32,
    n_out: i32,
) -> i32 {
    {
        let Some((mem, _)) = memory(caller) else {
            return EFAULT;
        };
        if range(mem, buf, cap as u32).is_none() || range(mem, n_out, 4).is_none() {
            return EFAULT;
        }
    }
    let want = (cap as u32).min(FS_IO_BYTES_MAX) as usize;
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let data = match with_host(caller, "fs_read", |h| h.fs_read(&path, offset, want)) {
        Ok(d) => d,
        Err(errno) => return errno,
    };
    let Some((mem, _)) = memory(caller) else {
        return EFAULT;
    };
    // Memory cannot shrink, so the ranges checked above still hold.
    let n = data.len().min(want);
    let b = buf as u32 as usize;
    mem[b..b + n].copy_from_slice(&data[..n]);
    put_u32(mem, n_out, n as u32);
    0
}

#[allow(clippy::too_many_arguments)]
fn fs_write(
    caller: &mut Caller<'_, RunState>,
    path: i32,
    len: i32,
    offset: i64,
    data: i32,
    data_len: i32,
    flags: i32,
    size_out: i32,
) -> i32 {
    if flags & !CREATE != 0 || data_len as u32 > FS_IO_BYTES_MAX {
        return EINVAL;
    }
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let (Some(data_r), Some(out_r)) = (range(mem, data, data_len as u32), range(mem, size_out, 8))
    else {
        return EFAULT;
    };
    let Some(host) = state.host_mut() else {
        return ENOSYS;
    };
    match host.fs_write(&path, offset, &mem[data_r], flags & CREATE != 0) {
        Ok(size) => {
            mem[out_r].copy_from_slice(&size.to_le_bytes());
            0
        }
        Err(e) => fail(state, "fs_write", &e),
    }
}

fn fs_stat(caller: &mut Caller<'_, RunState>, path: i32, len: i32, out: i32) -> i32 {
    {
        let Some((mem, _)) = memory(caller) else {
            return EFAULT;
        };
        if range(mem, out, 16).is_none() {
            return EFAULT;
        }
    }
    let path = match path_arg(caller, path, len) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let e = match with_host(caller, "fs_stat", |h| h.fs_stat(&path)) {
        Ok(e) => e,
        Err(errno) => return errno,
    };
    let Some((mem, _)) = memory(caller) else {
        return EFAULT;
    };
    let o = out as u32 as usize;
    mem[o..o + 8].copy_from_slice(&e.size.to_le_bytes());
    put_u32(mem, out + 8, e.kind);
    put_u32(mem, out + 12, e.mode);
    0
}

/// Registers host calls in module `MODULE` of `$linker`, one line a call:
/// `name(arg: type, …);` calls the function `name` with the caller (bound to
/// `$c`) and the arguments; `name(arg: type, …) = expr;` runs `expr`
/// instead. Every call returns an errno as `i32`, passed through [`fault`],
/// so no call can forget that check.
macro_rules! host_calls {
    ($linker:ident, $c:ident; $( $name:ident ( $($arg:ident : $ty:ty),* ) $(= $body:expr)? ; )*) => {
        $(
            $linker.func_wrap(
                MODULE,
                stringify!($name),
                |mut $c: wasmtime::Caller<'_, $crate::RunState>, $($arg: $ty),*| -> wasmtime::Result<i32> {
                    let r = $crate::host::host_calls!(@call $c, $name, ($($arg),*) $(, $body)?);
                    $crate::host::fault(&$c, stringify!($name), r)
                },
            )?;
        )*
    };
    (@call $c:ident, $name:ident, ($($arg:ident),*)) => { $name(&mut $c, $($arg),*) };
    (@call $c:ident, $name:ident, ($($arg:ident),*), $body:expr) => { $body };
}
pub(crate) use host_calls;

/// In a stored procedure, a host call given a pointer or length outside
/// linear memory ends the call (and rolls back its transaction) with a
/// clear error; a wasm proc gets `EFAULT` to handle.
pub(crate) fn fault(c: &Caller<'_, RunState>, call: &str, r: i32) -> wasmtime::Result<i32> {
    if r == EFAULT && c.data().scoped.is_some() {
        return Err(wasmtime::Error::msg(format!(
            "tabos.{call}: a pointer or length outside linear memory"
        )));
    }
    Ok(r)
}

/// Adds the `tabos` functions to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    host_calls!(linker, c;
        send(to: i32, to_len: i32, data: i32, data_len: i32, id: i32, id_len: i32);
        recv(from: i32, from_len: i32, flags: i32, timeout_ms: i64, buf: i32, cap: i32,
            sender_buf: i32, sender_cap: i32, lens: i32);
        name_get(path: i32, len: i32, buf: i32, cap: i32, out: i32);
        name_put(path: i32, len: i32, data: i32, data_len: i32, if_version: i64, out: i32);
        name_mkdir(path: i32, len: i32) =
            name_path_call(&mut c, "name_mkdir", path, len, |h, p| h.name_mkdir(p));
        name_remove(path: i32, len: i32) =
            name_path_call(&mut c, "name_remove", path, len, |h, p| h.name_remove(p));
        name_wait(path: i32, len: i32, mode: i32, timeout_ms: i64);
        fs_read(path: i32, len: i32, offset: i64, buf: i32, cap: i32, n_out: i32);
        fs_write(path: i32, len: i32, offset: i64, data: i32, data_len: i32, flags: i32,
            size_out: i32);
        fs_stat(path: i32, len: i32, out: i32);
    );
    Ok(())
}
