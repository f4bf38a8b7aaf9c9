//! WebAssembly stored procedures: the calling convention, the context pool
//! and the procedure host calls.
//!
//! A procedure module exports `memory` and `main(arg_len: i32) -> i32`, and
//! may import any of the `tabos` and WASI functions a proc gets (send, recv,
//! fs_read, fs_write, fs_stat, …; see [`crate::host`]) plus these:
//!
//! ```text
//! args(buf, cap) -> errno              copies the call's arguments (arg_len
//!                                      bytes) to buf; E2BIG if cap is less
//! result(ptr, len) -> errno            sets the call's result (last one wins)
//! log(ptr, len) -> errno               adds a line to the call's log
//! nop() -> i32                         does nothing in the host (returns 0)
//! kv_get(key, key_len, buf, cap, len_out) -> errno
//!     the value at key into buf, its length (u32) at len_out; ENOENT when
//!     absent; E2BIG (length at len_out) when it does not fit
//! kv_put(key, key_len, val, val_len) -> errno
//! kv_delete(key, key_len) -> errno     ENOENT when absent
//! kv_scan(start, start_len, end, end_len, flags, buf, cap, out) -> errno
//!     entries from start (flags & AFTER (1): after it) up to end (end_len
//!     0: no end), written into buf as many as fit, each as
//!     [key_len u32][value_len u32][key][value]; at out two u32: the count
//!     and the bytes used. A count of 0 is the end. E2BIG (its size in the
//!     second u32) when not even the first entry fits. Continue with the
//!     last key and AFTER.
//! sql_query(sql, sql_len, params, params_len, buf, cap, len_out) -> errno
//!     one read-only statement over the realm's own tables; params is a
//!     JSON array (params_len 0: none); the result, JSON
//!     {"columns": [...], "rows": [[...], ...]} (blobs as arrays of bytes),
//!     goes to buf with its length at len_out (E2BIG: the length needed)
//! sql_exec(sql, sql_len, params, params_len, changed_out) -> errno
//!     one statement that may write the realm's own tables; the number of
//!     rows changed (u64) at changed_out
//! ```
//!
//! `main` returns 0 for success; anything else fails the call (and rolls
//! back its transaction) with that status.
//!
//! Scans are the paper's scatter-gather: one host call fills the guest's
//! buffer with as many records as fit, instead of one call per record.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::{Caller, Linker, Store, StoreLimitsBuilder, TypedFunc};

use super::{
    CallIo, CallOutput, FailureKind, Lend, ProcError, ProcSpec, ScopedHost, SCAN_ROWS_MAX,
    SQL_BYTES_MAX,
};
use crate::host::{
    fail, host_calls, text, HostError, SqlValue, E2BIG, EFAULT, EINVAL, ENOENT, ENOSYS, MODULE,
};
use crate::wasi::{self, memory, put_u32, range};
use crate::{Host, Program, RunState, Sandbox};

/// `kv_scan` flag: start after the given key.
pub const AFTER: i32 = 1;
/// Idle contexts kept in a sandbox's pool, over all procedures.
pub const IDLE_CONTEXTS_MAX: usize = 256;
/// Largest linear memory a context may have and still be kept for reuse
/// after its call: a call that grew its memory past this gives it back
/// (linear memory never shrinks, so the instance is dropped) rather than
/// hold it while idle — four finished 960 MiB calls once left a node at
/// 4 GiB.
pub const IDLE_MEMORY_BYTES_MAX: usize = 16 << 20;
/// Longest key a call takes (the kernel's limit).
const KEY_BYTES_MAX: u32 = 1_024;
/// Largest value a call writes (the kernel's limit).
const VALUE_BYTES_MAX: u32 = 1 << 20;

type Key = (String, String, u64);

/// One instantiated procedure, between calls.
struct Context {
    store: Store<RunState>,
    main: TypedFunc<i32, i32>,
    /// What the module wrote to stdout and stderr.
    output: Arc<Mutex<Vec<u8>>>,
    memory_bytes: usize,
    /// The instance's exported linear memory, if it has one.
    memory: Option<wasmtime::Memory>,
}

impl Context {
    /// Bytes of linear memory the instance holds now.
    fn memory_size(&self) -> usize {
        self.memory.map_or(0, |m| m.data_size(&self.store))
    }
}

/// Idle contexts, by procedure.
#[derive(Default)]
pub(crate) struct Pool {
    idle: HashMap<Key, Vec<Context>>,
    /// Keys in the order contexts came back, for dropping the oldest.
    order: VecDeque<Key>,
    len: usize,
}

impl Pool {
    fn take(&mut self, key: &Key) -> Option<Context> {
        let list = self.idle.get_mut(key)?;
        let ctx = list.pop();
        if list.is_empty() {
            self.idle.remove(key);
        }
        if ctx.is_some() {
            self.len -= 1;
        }
        ctx
    }

    fn put(&mut self, key: Key, ctx: Context) {
        let list = self.idle.entry(key.clone()).or_default();
        if list.is_empty() {
            self.order.push_back(key);
        }
        list.push(ctx);
        self.len += 1;
        // Over the bound: drop a context of the procedure that has had idle
        // contexts longest.
        while self.len > IDLE_CONTEXTS_MAX {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(list) = self.idle.get_mut(&old).filter(|l| !l.is_empty()) {
                list.remove(0);
                self.len -= 1;
                if list.is_empty() {
                    self.idle.remove(&old);
                } else {
                    self.order.push_back(old);
                }
            }
        }
        // `order` gains a key each time a procedure's last idle context is
        // taken and given back; compact it now and then (amortized O(1)).
        if self.order.len() > 2 * IDLE_CONTEXTS_MAX + self.idle.len() {
            let idle = &self.idle;
            let mut seen = std::collections::HashSet::new();
            self.order
                .retain(|k| idle.contains_key(k) && seen.insert(k.clone()));
        }
        debug_assert!(self.len <= IDLE_CONTEXTS_MAX);
    }
}

fn lock(sandbox: &Sandbox) -> std::sync::MutexGuard<'_, Pool> {
    sandbox.procs.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn idle(sandbox: &Sandbox) -> usize {
    lock(sandbox).len
}

/// Compiles (or finds) `code` and checks it is a procedure module.
pub(crate) fn check(sandbox: &Sandbox, code: &[u8]) -> Result<Program, ProcError> {
    sandbox
        .compiled(code, &|module| {
            match module.get_export("main") {
                Some(wasmtime::ExternType::Func(f))
                    if f.params().len() == 1
                        && f.results().len() == 1
                        && f.params().all(|t| t.is_i32())
                        && f.results().all(|t| t.is_i32()) => {}
                _ => {
                    return Err(crate::Error::InvalidModule(
                        "a wasm procedure exports `main` of type [i32] -> [i32]".into(),
                    ))
                }
            }
            match module.get_export("memory") {
                Some(wasmtime::ExternType::Memory(_)) => Ok(()),
                _ => Err(crate::Error::InvalidModule(
                    "a wasm procedure exports its `memory`".into(),
                )),
            }
        })
        .map_err(|e| ProcError::new(FailureKind::Invalid, e.to_string()))
}

/// A sink shared between the module's WASI stdout/stderr and the context.
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded like the log it ends up in.
        let room = (super::LOG_LINES_MAX * super::LOG_LINE_BYTES_MAX).saturating_sub(out.len());
        out.extend_from_slice(&buf[..buf.len().min(room)]);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn instantiate(
    sandbox: &Sandbox,
    program: &Program,
    memory_bytes: usize,
) -> Result<Context, ProcError> {
    let output = Arc::new(Mutex::new(Vec::new()));
    let (mut store, instance) = instantiate_with(
        sandbox,
        program,
        memory_bytes,
        Box::new(Shared(output.clone())),
        Box::new(Shared(output.clone())),
    )?;
    let main = instance
        .get_typed_func::<i32, i32>(&mut store, "main")
        .map_err(|e| ProcError::new(FailureKind::Invalid, format!("{e:#}")))?;
    let memory = instance.get_memory(&mut store, "memory");
    Ok(Context {
        store,
        main,
        output,
        memory_bytes,
        memory,
    })
}

/// Turns a failed call into its kind and message.
fn classify(e: &wasmtime::Error, late: bool, memory_bytes: usize) -> ProcError {
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        return match trap {
            wasmtime::Trap::Interrupt if late => ProcError::new(
                FailureKind::Timeout,
                "the procedure ran past its time limit",
            ),
            wasmtime::Trap::StackOverflow => {
                ProcError::new(FailureKind::StackOverflow, format!("wasm trap: {trap}"))
            }
            _ => ProcError::new(FailureKind::Trap, format!("wasm trap: {e:#}")),
        };
    }
    if let Some(wasi::Exit(code)) = e.downcast_ref::<wasi::Exit>() {
        return ProcError::new(
            FailureKind::Status(*code),
            format!("the procedure called proc_exit({code})"),
        );
    }
    let text = format!("{e:#}");
    if text.contains("growing memory") {
        return ProcError::new(
            FailureKind::OutOfMemory,
            format!("linear memory past the limit of {memory_bytes} bytes ({text})"),
        );
    }
    ProcError::new(FailureKind::Trap, text)
}

pub(crate) fn call(
    sandbox: &Sandbox,
    spec: &ProcSpec<'_>,
    lend: &mut dyn Lend,
    args: &[u8],
    deadline: Instant,
) -> Result<CallOutput, ProcError> {
    let memory_bytes = spec.limits.memory_bytes;
    // The hot path: the context this thread used last, no lock, no
    // allocation.
    let held = HELD.with(|h| {
        let mut h = h.borrow_mut();
        let same = h.as_ref().is_some_and(|(id, k, c)| {
            *id == sandbox.id
                && k.2 == spec.code_hash
                && k.0 == spec.tenant
                && k.1 == spec.name
                && c.memory_bytes == memory_bytes
        });
        if same {
            h.take()
        } else {
            None
        }
    });
    let (key, mut ctx) = match held {
        Some((_, key, ctx)) => (key, ctx),
        None => {
            let key: Key = (
                spec.tenant.to_string(),
                spec.name.to_string(),
                spec.code_hash,
            );
            let taken = lock(sandbox).take(&key);
            let ctx = match taken {
                Some(c) if c.memory_bytes == memory_bytes => c,
                _ => {
                    let code = lend.load()?;
                    let program = check(sandbox, &code)?;
                    instantiate(sandbox, &program, memory_bytes)?
                }
            };
            (key, ctx)
        }
    };
    let state = ctx.store.data_mut();
    state.call.start(args);
    state.deadline = Some(deadline);
    // SAFETY: cleared below, before `host`'s borrow ends, on this thread;
    // `host` is not touched while the guest runs.
    state.scoped = Some(unsafe { ScopedHost::new(lend.host()) });
    let ran = ctx.main.call(&mut ctx.store, args.len() as i32);
    let state = ctx.store.data_mut();
    // Its deadline as it ended: the host may have brought it forward.
    let deadline = state.deadline_now().unwrap_or(deadline);
    state.scoped = None;
    state.deadline = None;
    let mut log = {
        let mut out = ctx.output.lock().unwrap_or_else(|p| p.into_inner());
        if out.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut *out)
        }
    };
    let mut lines = Vec::new();
    if !log.is_empty() {
        if log.last() == Some(&b'\n') {
            log.pop();
        }
        lines = String::from_utf8_lossy(&log)
            .lines()
            .map(str::to_string)
            .collect();
    }
    for l in &lines {
        state.call.log(l);
    }
    let out = match ran {
        Ok(0) => Ok(CallOutput {
            result: std::mem::take(&mut state.call.result),
            log: state.call.take_log(),
        }),
        Ok(status) => Err(ProcError {
            kind: FailureKind::Status(status),
            message: format!("`main` returned status {status}"),
            log: state.call.take_log(),
        }),
        Err(e) => {
            let late = Instant::now() >= deadline;
            let mut err = classify(&e, late, memory_bytes);
            err.log = state.call.take_log();
            // A trapped instance may be in any state: never reuse it.
            return Err(err);
        }
    };
    state.call.args.clear();
    if ctx.memory_size() > IDLE_MEMORY_BYTES_MAX {
        // Too big to hold while idle: give its memory back.
        drop(ctx);
        return out;
    }
    // Keep it for this thread's next call; the one held before goes back to
    // its pool (or is dropped, if its sandbox is another).
    let before = HELD.with(|h| h.borrow_mut().replace((sandbox.id, key, ctx)));
    if let Some((id, k, c)) = before {
        if id == sandbox.id {
            lock(sandbox).put(k, c);
        }
    }
    out
}

thread_local! {
    /// The context this thread called last, with its sandbox's id.
    static HELD: std::cell::RefCell<Option<(u64, Key, Context)>> =
        const { std::cell::RefCell::new(None) };
}

// ---- host calls -------------------------------------------------------

/// A guest text argument: UTF-8, at most `max` bytes, non-empty.
fn text_arg(
    caller: &mut Caller<'_, RunState>,
    ptr: i32,
    len: i32,
    max: u32,
) -> Result<String, i32> {
    let Some((mem, _)) = memory(caller) else {
        return Err(EFAULT);
    };
    match text(mem, ptr, len, max)? {
        Some(t) => Ok(t.to_string()),
        None => Err(EINVAL),
    }
}

fn host_call<T>(
    state: &mut RunState,
    call: &str,
    f: impl FnOnce(&mut dyn Host) -> Result<T, HostError>,
) -> Result<T, i32> {
    let Some(host) = state.host_mut() else {
        return Err(ENOSYS);
    };
    f(host).map_err(|e| fail(state, call, &e))
}

fn args(caller: &mut Caller<'_, RunState>, buf: i32, cap: i32) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let n = state.call.args.len();
    if (cap as u32 as usize) < n {
        return E2BIG;
    }
    let Some(r) = range(mem, buf, n as u32) else {
        return EFAULT;
    };
    mem[r].copy_from_slice(&state.call.args);
    0
}

fn result(caller: &mut Caller<'_, RunState>, ptr: i32, len: i32) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let Some(r) = range(mem, ptr, len as u32) else {
        return EFAULT;
    };
    match state.call.set_result(&mem[r]) {
        Ok(()) => 0,
        Err(_) => EINVAL,
    }
}

fn log(caller: &mut Caller<'_, RunState>, ptr: i32, len: i32) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let Some(r) = range(mem, ptr, len as u32) else {
        return EFAULT;
    };
    let line = String::from_utf8_lossy(&mem[r]).into_owned();
    state.call.log(&line);
    0
}

fn kv_get(
    caller: &mut Caller<'_, RunState>,
    key: i32,
    key_len: i32,
    buf: i32,
    cap: i32,
    len_out: i32,
) -> i32 {
    let key = match text_arg(caller, key, key_len, KEY_BYTES_MAX) {
        Ok(k) => k,
        Err(e) => return e,
    };
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let (Some(buf_r), Some(_)) = (range(mem, buf, cap as u32), range(mem, len_out, 4)) else {
        return EFAULT;
    };
    let value = match host_call(state, "kv_get", |h| h.kv_get(&key)) {
        Ok(Some(v)) => v,
        Ok(None) => return ENOENT,
        Err(e) => return e,
    };
    answer(mem, buf_r, len_out, &value)
}

/// Puts a host call's answer into the module's buffer `buf` (checked
/// with its length word `len_out` before the call) and its length at
/// `len_out`: E2BIG, with the length needed there, when it does not fit.
fn answer(mem: &mut [u8], buf: std::ops::Range<usize>, len_out: i32, bytes: &[u8]) -> i32 {
    put_u32(mem, len_out, bytes.len() as u32);
    if bytes.len() > buf.len() {
        return E2BIG;
    }
    mem[buf.start..buf.start + bytes.len()].copy_from_slice(bytes);
    0
}

fn kv_put(
    caller: &mut Caller<'_, RunState>,
    key: i32,
    key_len: i32,
    val: i32,
    val_len: i32,
) -> i32 {
    let key = match text_arg(caller, key, key_len, KEY_BYTES_MAX) {
        Ok(k) => k,
        Err(e) => return e,
    };
    if val_len as u32 > VALUE_BYTES_MAX {
        return EINVAL;
    }
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let Some(r) = range(mem, val, val_len as u32) else {
        return EFAULT;
    };
    let Some(host) = state.host_mut() else {
        return ENOSYS;
    };
    match host.kv_put(&key, &mem[r]) {
        Ok(()) => 0,
        Err(e) => fail(state, "kv_put", &e),
    }
}

fn kv_delete(caller: &mut Caller<'_, RunState>, key: i32, key_len: i32) -> i32 {
    let key = match text_arg(caller, key, key_len, KEY_BYTES_MAX) {
        Ok(k) => k,
        Err(e) => return e,
    };
    match host_call(caller.data_mut(), "kv_delete", |h| h.kv_delete(&key)) {
        Ok(true) => 0,
        Ok(false) => ENOENT,
        Err(e) => e,
    }
}

#[allow(clippy::too_many_arguments)]
fn kv_scan(
    caller: &mut Caller<'_, RunState>,
    start: i32,
    start_len: i32,
    end: i32,
    end_len: i32,
    flags: i32,
    buf: i32,
    cap: i32,
    out: i32,
) -> i32 {
    if flags & !AFTER != 0 {
        return EINVAL;
    }
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let (start, end) = match (
        text(mem, start, start_len, KEY_BYTES_MAX),
        text(mem, end, end_len, KEY_BYTES_MAX),
    ) {
        (Ok(s), Ok(e)) => (s.unwrap_or("").to_string(), e.map(str::to_string)),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let (Some(buf_r), Some(_)) = (range(mem, buf, cap as u32), range(mem, out, 8)) else {
        return EFAULT;
    };
    // Never fetch more entries than could fit (each takes at least 9 bytes).
    let max = (buf_r.len() / 9).clamp(1, SCAN_ROWS_MAX);
    let entries = match host_call(state, "kv_scan", |h| {
        h.kv_scan(&start, end.as_deref(), flags & AFTER != 0, max)
    }) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let mut at = buf_r.start;
    let mut count = 0u32;
    for (k, v) in &entries {
        let need = 8 + k.len() + v.len();
        if at + need > buf_r.end {
            if count == 0 {
                put_u32(mem, out, 0);
                put_u32(mem, out + 4, need as u32);
                return E2BIG;
            }
            break;
        }
        mem[at..at + 4].copy_from_slice(&(k.len() as u32).to_le_bytes());
        mem[at + 4..at + 8].copy_from_slice(&(v.len() as u32).to_le_bytes());
        mem[at + 8..at + 8 + k.len()].copy_from_slice(k.as_bytes());
        mem[at + 8 + k.len()..at + need].copy_from_slice(v);
        at += need;
        count += 1;
    }
    put_u32(mem, out, count);
    put_u32(mem, out + 4, (at - buf_r.start) as u32);
    0
}

fn json_of(v: &SqlValue) -> serde_json::Value {
    match v {
        SqlValue::Null => serde_json::Value::Null,
        SqlValue::Int(i) => (*i).into(),
        SqlValue::Real(r) => {
            serde_json::Number::from_f64(*r).map_or(serde_json::Value::Null, Into::into)
        }
        SqlValue::Text(t) => t.clone().into(),
        SqlValue::Blob(b) => b.iter().map(|&x| serde_json::Value::from(x)).collect(),
    }
}

/// SQL parameters from a JSON array.
pub(crate) fn params_of(json: &str) -> Result<Vec<SqlValue>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("params: {e}"))?;
    let serde_json::Value::Array(items) = v else {
        return Err("params must be a JSON array".into());
    };
    items
        .into_iter()
        .map(|i| match i {
            serde_json::Value::Null => Ok(SqlValue::Null),
            serde_json::Value::Bool(b) => Ok(SqlValue::Int(i64::from(b))),
            serde_json::Value::Number(n) => Ok(n
                .as_i64()
                .map(SqlValue::Int)
                .unwrap_or_else(|| SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)))),
            serde_json::Value::String(s) => Ok(SqlValue::Text(s)),
            other => Err(format!(
                "a parameter is null, a number or a string, not {other}"
            )),
        })
        .collect()
}

/// The statement and parameters of a SQL call.
fn sql_args(
    caller: &mut Caller<'_, RunState>,
    sql: i32,
    sql_len: i32,
    params: i32,
    params_len: i32,
) -> Result<(String, Vec<SqlValue>), i32> {
    let sql = text_arg(caller, sql, sql_len, SQL_BYTES_MAX as u32)?;
    let Some((mem, state)) = memory(caller) else {
        return Err(EFAULT);
    };
    let params = match text(mem, params, params_len, SQL_BYTES_MAX as u32)? {
        None => Vec::new(),
        Some(p) => params_of(p).map_err(|m| fail(state, "sql", &HostError::Invalid(m)))?,
    };
    Ok((sql, params))
}

#[allow(clippy::too_many_arguments)]
fn sql_query(
    caller: &mut Caller<'_, RunState>,
    sql: i32,
    sql_len: i32,
    params: i32,
    params_len: i32,
    buf: i32,
    cap: i32,
    len_out: i32,
) -> i32 {
    let (sql, params) = match sql_args(caller, sql, sql_len, params, params_len) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let (Some(buf_r), Some(_)) = (range(mem, buf, cap as u32), range(mem, len_out, 4)) else {
        return EFAULT;
    };
    let got = match host_call(state, "sql_query", |h| h.sql(&sql, &params, false)) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let json = serde_json::json!({
        "columns": got.columns,
        "rows": got.rows.iter().map(|r| r.iter().map(json_of).collect::<Vec<_>>()).collect::<Vec<_>>(),
    })
    .to_string();
    answer(mem, buf_r, len_out, json.as_bytes())
}

fn sql_exec(
    caller: &mut Caller<'_, RunState>,
    sql: i32,
    sql_len: i32,
    params: i32,
    params_len: i32,
    changed_out: i32,
) -> i32 {
    let (sql, params) = match sql_args(caller, sql, sql_len, params, params_len) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let Some(out_r) = range(mem, changed_out, 8) else {
        return EFAULT;
    };
    match host_call(state, "sql_exec", |h| h.sql(&sql, &params, true)) {
        Ok(r) => {
            mem[out_r].copy_from_slice(&r.changed.to_le_bytes());
            0
        }
        Err(e) => e,
    }
}

/// Adds the procedure functions to `linker` (module `tabos`).
pub(crate) fn add_to_linker(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    host_calls!(linker, c;
        args(buf: i32, cap: i32);
        result(p: i32, n: i32);
        log(p: i32, n: i32);
        nop() = match c.data_mut().host_mut() {
            Some(h) => h.nop() as i32,
            None => ENOSYS,
        };
        kv_get(k: i32, kl: i32, b: i32, cap: i32, out: i32);
        kv_put(k: i32, kl: i32, v: i32, vl: i32);
        kv_delete(k: i32, kl: i32);
        kv_scan(s: i32, sl: i32, e: i32, el: i32, flags: i32, b: i32, cap: i32, out: i32);
        sql_query(s: i32, sl: i32, p: i32, pl: i32, b: i32, cap: i32, out: i32);
        sql_exec(s: i32, sl: i32, p: i32, pl: i32, out: i32);
    );
    Ok(())
}

/// A module instantiated outside the procedure calling convention, for
/// measurements that drive its exported functions directly (the paper's
/// Figure 2 queries): the same engine, linker, memory limit and epoch
/// checks as a procedure, no time limit, no host.
pub struct RawInstance {
    store: Store<RunState>,
    instance: wasmtime::Instance,
}

impl std::fmt::Debug for RawInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawInstance").finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Compiles and instantiates `code` with `memory_bytes` of memory.
    pub fn raw_instance(&self, code: &[u8], memory_bytes: usize) -> Result<RawInstance, ProcError> {
        let program = self
            .compiled(code, &|_| Ok(()))
            .map_err(|e| ProcError::new(FailureKind::Invalid, e.to_string()))?;
        let (store, instance) = instantiate_with(
            self,
            &program,
            memory_bytes,
            Box::new(std::io::sink()),
            Box::new(std::io::sink()),
        )?;
        Ok(RawInstance { store, instance })
    }
}

impl RawInstance {
    /// Calls export `name` with i64/i32/f64 arguments (as `Val`s) and
    /// returns its results.
    pub fn call(
        &mut self,
        name: &str,
        args: &[wasmtime::Val],
        results: usize,
    ) -> Result<Vec<wasmtime::Val>, ProcError> {
        let f = self
            .instance
            .get_func(&mut self.store, name)
            .ok_or_else(|| ProcError::new(FailureKind::Invalid, format!("no export {name}")))?;
        let mut out = vec![wasmtime::Val::I32(0); results];
        f.call(&mut self.store, args, &mut out)
            .map_err(|e| classify(&e, false, 0))?;
        Ok(out)
    }

    /// Copies `bytes` into linear memory at `offset`.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<(), ProcError> {
        let mem = self
            .instance
            .get_memory(&mut self.store, "memory")
            .ok_or_else(|| ProcError::new(FailureKind::Invalid, "no exported memory"))?;
        mem.write(&mut self.store, offset, bytes)
            .map_err(|e| ProcError::new(FailureKind::Trap, e.to_string()))
    }
}

/// A store for `program` with `memory_bytes` of memory (growth past it
/// traps), stdout and stderr going to the sinks, and no host or deadline
/// until a call sets them; the instance in it.
fn instantiate_with(
    sandbox: &Sandbox,
    program: &Program,
    memory_bytes: usize,
    stdout: Box<dyn std::io::Write + Send>,
    stderr: Box<dyn std::io::Write + Send>,
) -> Result<(Store<RunState>, wasmtime::Instance), ProcError> {
    let state = RunState {
        wasi: wasi::Ctx::new(vec!["procedure".into()], Vec::new(), stdout, stderr),
        host: None,
        scoped: None,
        call: CallIo::default(),
        limits: StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .instances(1)
            .trap_on_grow_failure(true)
            .build(),
        stop: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        deadline: None,
        wf_kept: None,
    };
    let mut store = sandbox.new_store(state);
    let instance = program
        .pre
        .instantiate(&mut store)
        .map_err(|e| classify(&e, false, memory_bytes))?;
    Ok((store, instance))
}
