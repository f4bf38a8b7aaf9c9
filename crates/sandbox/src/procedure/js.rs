//! JavaScript stored procedures on QuickJS (rquickjs).
//!
//! A procedure is a script that defines `function main(arg)`. `arg` is the
//! call's arguments as a string (a `Uint8Array` when they are not UTF-8);
//! what `main` returns is the result: a string or `Uint8Array` as is,
//! `undefined`/`null` as nothing, anything else as its JSON. The script's
//! top level runs once per context, when the context is made; it may not
//! call the host.
//!
//! The host API is the global object `tabos` (the same operations as the
//! wasm imports):
//!
//! ```text
//! tabos.realm                       the tenant's realm
//! tabos.get(key)                    -> string | null   (the value as UTF-8)
//! tabos.getBytes(key)               -> Uint8Array | null
//! tabos.put(key, value)             value: string | Uint8Array
//! tabos.del(key)                    -> whether it existed
//! tabos.scan(start, end?, limit?)   -> [[key, value], ...] from start
//!                                      (inclusive) to end (exclusive)
//! tabos.query(sql, params?)         -> [{column: value, ...}, ...] read-only
//! tabos.exec(sql, params?)          -> rows changed
//! tabos.send(to, data, id?)         one message (to: an address; several
//!                                      separated by '\n')
//! tabos.recv(from?)                 -> {sender, data} | null  (never waits)
//! tabos.read(path, offset?, len?)   -> string
//! tabos.write(path, data, offset?)  -> the file's new size (creates it)
//! tabos.log(...values)              console.log is the same
//! tabos.nop()                       does nothing in the host
//! ```
//!
//! A failing host call throws an `Error` whose message starts with the call
//! and the errno name (`tabos.get: ENOENT: …`); the procedure may catch it.
//!
//! Runtimes: one per worker thread, sandbox and tenant — a tenant's
//! retained globals count against its own memory limit, never another's —
//! whose memory limit during a call is the called procedure's
//! ([`super::Limits::memory_bytes`]; the sandbox's
//! [`crate::SandboxConfig::js_runtime_bytes`] for a compile check),
//! a stack limit of [`JS_STACK_BYTES`], and an interrupt handler that stops
//! a call at its deadline. A thread keeps at most [`JS_RUNTIMES_MAX`]
//! runtimes (the least recently used goes, with its contexts), a runtime
//! at most [`JS_CONTEXTS_MAX`] contexts.
//!
//! Built-ins: QuickJS checks the interrupt handler in the interpreter and
//! in most array built-ins, but not in every C loop — `new
//! Array(2**32-1).join('')` allocates nothing and would loop for minutes
//! past any deadline. Before a tenant's script runs, [`PRELUDE`] wraps
//! every `Array.prototype` method and `Array.from` so that one called on
//! an object whose `length` exceeds [`JS_ARRAY_LENGTH_MAX`] throws a
//! `RangeError`: no dense array that long fits the memory limit, so only a
//! sparse or fake one can be that long, and walking it is the attack.
//! `JSON.stringify` is wrapped to pass a replacer function always (it
//! then calls JavaScript, which is interruptible, at every value). What
//! the built-ins build (strings, JSON) is bounded by the memory limit, and by [`DeadlineAllocator`], which fails allocations once the
//! call is past its deadline.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use rquickjs::function::{Opt, Rest};
use rquickjs::{Context, Ctx, Exception, Function, Object, Persistent, Runtime, TypedArray, Value};

use super::{
    CallIo, CallOutput, FailureKind, Lend, Limits, ProcError, ProcSpec, ScopedHost, SCAN_ROWS_MAX,
};
use crate::host::{HostError, RecvCall, SqlValue};
use crate::{Host, Sandbox};

/// Most contexts one runtime keeps (the oldest goes).
pub const JS_CONTEXTS_MAX: usize = 64;
/// Most runtimes (one per tenant) one worker thread keeps (the least
/// recently used goes).
pub const JS_RUNTIMES_MAX: usize = 8;
/// Longest array (or array-like) an `Array.prototype` built-in walks.
pub const JS_ARRAY_LENGTH_MAX: u32 = 1 << 22;

/// Runs before a tenant's script in each context: see the module doc. The
/// wrappers hold what they use in closures, so a script that replaces
/// `Object`, `Reflect` or `Number` later does not change them.
const PRELUDE: &str = r#"(() => {
  "use strict";
  const MAX = __MAX__;
  const O = Object, apply = Reflect.apply, define = Object.defineProperty;
  const describe = Object.getOwnPropertyDescriptor, names = Object.getOwnPropertyNames;
  const tooLong = (v) => v != null && (typeof v === "object" || typeof v === "function")
      && +O(v).length > MAX;
  const guard = (holder, label, name, f, checkArgs) => {
    const wrapped = { [name](...args) {
      if (tooLong(this)) throw new RangeError(`${label}.${name}: length over ${MAX}`);
      if (checkArgs) for (const a of args)
        if (tooLong(a)) throw new RangeError(`${label}.${name}: argument length over ${MAX}`);
      return apply(f, this, args);
    } }[name];
    define(holder, name, { value: wrapped, writable: true, configurable: true, enumerable: false });
  };
  for (const name of names(Array.prototype)) {
    const d = describe(Array.prototype, name);
    if (name !== "constructor" && typeof d.value === "function")
      guard(Array.prototype, "Array.prototype", name, d.value, name === "concat");
  }
  guard(Array, "Array", "from", Array.from, true);

  // JSON.stringify walks its value in C without asking the interrupt
  // handler, and goes on walking after its output buffer fails. With a
  // replacer function it calls JavaScript at every value, which is
  // interruptible: always give it one. An array replacer (a list of
  // property names) becomes a function that returns each plain object
  // reduced to the listed names in the list's order.
  const stringify = JSON.stringify, isArray = Array.isArray;
  const Num = Number, Str = String, Bool = Boolean, Big = BigInt;
  const boxed = (v) => v instanceof Num || v instanceof Str || v instanceof Bool || v instanceof Big;
  const checked = (v) => {
    if (isArray(v) && v.length > MAX) throw new RangeError(`JSON.stringify: array length over ${MAX}`);
    return v;
  };
  const toList = (replacer) => {
    const list = [];
    for (let i = 0; i < replacer.length; i++) {
      const item = replacer[i];
      if (typeof item === "string" || typeof item === "number" || item instanceof Str || item instanceof Num) {
        const key = Str(item);
        let seen = false;
        for (let j = 0; j < list.length; j++) if (list[j] === key) seen = true;
        if (!seen) list[list.length] = key;
      }
    }
    return list;
  };
  const guardedStringify = { stringify(value, replacer, space) {
    let r;
    if (typeof replacer === "function") {
      r = function (k, v) { return checked(apply(replacer, this, [k, v])); };
    } else if (isArray(replacer)) {
      checked(replacer);
      const list = toList(replacer);
      r = function (k, v) {
        checked(v);
        if (v === null || typeof v !== "object" || isArray(v) || boxed(v)) return v;
        if (typeof v.toJSON === "function") v = v.toJSON(k);
        if (v === null || typeof v !== "object" || isArray(v) || boxed(v)) return checked(v);
        const o = {};
        for (let i = 0; i < list.length; i++) {
          const key = list[i];
          const x = v[key];
          if (x !== undefined) define(o, key, { value: x, enumerable: true, writable: true, configurable: true });
        }
        return o;
      };
    } else {
      r = function (k, v) { return checked(v); };
    }
    return apply(stringify, JSON, [value, r, space]);
  } }.stringify;
  define(JSON, "stringify", { value: guardedStringify, writable: true, configurable: true, enumerable: false });
})();"#;
/// Native stack a script may use.
pub const JS_STACK_BYTES: usize = 256 << 10;
/// Entries a `scan` returns when it gives no limit.
pub const SCAN_ROWS_DEFAULT: usize = 1_000;
/// Largest message a `recv` takes.
const RECV_BYTES_MAX: usize = 1 << 20;

type Key = (String, String, u64);

// Fields drop in order: every value of a runtime must be freed before the
// runtime itself (QuickJS asserts it).
struct JsContext {
    main: Persistent<Function<'static>>,
    context: Context,
}

struct Worker {
    contexts: HashMap<Key, JsContext>,
    order: VecDeque<Key>,
    runtime: Runtime,
}

/// The host and I/O of the call running on this thread.
struct Current {
    host: ScopedHost,
    io: CallIo,
}

/// Whose runtime: a sandbox's id and a tenant.
type RuntimeKey = (u64, String);

/// A thread's runtimes, most recently used last.
#[derive(Default)]
struct Workers {
    by_key: HashMap<RuntimeKey, Worker>,
    order: VecDeque<RuntimeKey>,
}

thread_local! {
    /// This thread's runtimes, by sandbox id and tenant.
    static WORKERS: RefCell<Workers> = RefCell::new(Workers::default());
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
    /// When the running script must stop (read by the interrupt handler).
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Small allocations between two looks at the clock by [`DeadlineAllocator`].
const ALLOC_CHECK_EVERY: u32 = 32;
/// Allocations at least this large always look at the clock: a growing
/// buffer (a string being built) allocates rarely, but ever larger.
const ALLOC_CHECK_BYTES: usize = 64 << 10;

/// QuickJS's allocator: Rust's, except that once the call running on this
/// thread is past its deadline it fails allocations (one small allocation
/// in [`ALLOC_CHECK_EVERY`], and every one of [`ALLOC_CHECK_BYTES`] or
/// more, looks at the clock). A built-in's C loop that
/// allocates as it goes — `JSON.stringify` of a sparse array, an atom per
/// large index — then ends with QuickJS's out-of-memory exception, reported
/// as the time limit, instead of running on where the interrupt handler is
/// never asked.
struct DeadlineAllocator {
    inner: rquickjs::allocator::RustAllocator,
    calls: u32,
}

impl DeadlineAllocator {
    fn expired(&mut self, size: usize) -> bool {
        self.calls = self.calls.wrapping_add(1);
        (size >= ALLOC_CHECK_BYTES || self.calls.is_multiple_of(ALLOC_CHECK_EVERY)) && late()
    }
}

// SAFETY: every allocation is RustAllocator's, unchanged; this only
// returns null (which the trait allows) instead of allocating.
unsafe impl rquickjs::allocator::Allocator for DeadlineAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if self.expired(size) {
            return std::ptr::null_mut();
        }
        self.inner.alloc(size)
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        if self.expired(count.saturating_mul(size)) {
            return std::ptr::null_mut();
        }
        self.inner.calloc(count, size)
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        // SAFETY: `ptr` came from `inner` (the caller's contract).
        unsafe { self.inner.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if self.expired(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: as for `dealloc`.
        unsafe { self.inner.realloc(ptr, new_size) }
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: as for `dealloc`.
        unsafe { rquickjs::allocator::RustAllocator::usable_size(ptr) }
    }
}

fn new_worker(sandbox: &Sandbox) -> Result<Worker, ProcError> {
    let runtime = Runtime::new_with_alloc(DeadlineAllocator {
        inner: rquickjs::allocator::RustAllocator,
        calls: 0,
    })
    .map_err(|e| ProcError::new(FailureKind::Runtime, format!("JavaScript runtime: {e}")))?;
    runtime.set_memory_limit(sandbox.config.js_runtime_bytes);
    runtime.set_max_stack_size(JS_STACK_BYTES);
    runtime.set_interrupt_handler(Some(Box::new(|| {
        DEADLINE.with(|d| d.get().is_some_and(|t| Instant::now() >= t))
    })));
    Ok(Worker {
        contexts: HashMap::new(),
        order: VecDeque::new(),
        runtime,
    })
}

/// Runs `f` with this thread's runtime for `tenant` in `sandbox`.
fn with_worker<T>(
    sandbox: &Sandbox,
    tenant: &str,
    f: impl FnOnce(&mut Worker) -> Result<T, ProcError>,
) -> Result<T, ProcError> {
    WORKERS.with(|w| {
        let mut workers = w.borrow_mut();
        let workers = &mut *workers;
        let key: RuntimeKey = (sandbox.id, tenant.to_string());
        if workers.by_key.contains_key(&key) {
            workers.order.retain(|k| k != &key);
        } else {
            while workers.by_key.len() >= JS_RUNTIMES_MAX {
                let Some(old) = workers.order.pop_front() else {
                    break;
                };
                workers.by_key.remove(&old);
            }
            workers.by_key.insert(key.clone(), new_worker(sandbox)?);
        }
        workers.order.push_back(key.clone());
        debug_assert_eq!(workers.order.len(), workers.by_key.len());
        match workers.by_key.get_mut(&key) {
            Some(worker) => f(worker),
            None => Err(ProcError::new(FailureKind::Runtime, "runtime missing")),
        }
    })
}

/// Sets the deadline for the scope of one evaluation.
struct Deadline;

impl Deadline {
    fn set(at: Instant) -> Deadline {
        DEADLINE.with(|d| d.set(Some(at)));
        Deadline
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(None));
    }
}

/// The call's host and I/O installed in [`CURRENT`] for one call: taken
/// back by [`take`](Installed::take), or cleared when dropped (an unwinding
/// call), so the host pointer never outlives the borrow it came from.
struct Installed;

impl Installed {
    fn new(current: Current) -> Installed {
        CURRENT.with(|c| *c.borrow_mut() = Some(current));
        Installed
    }

    fn take(self) -> Option<Current> {
        CURRENT.with(|c| c.borrow_mut().take())
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

fn late() -> bool {
    DEADLINE.with(|d| d.get().is_some_and(|t| Instant::now() >= t))
}

/// The pending exception (or error) as a procedure failure.
fn failure(ctx: &Ctx<'_>, e: rquickjs::Error) -> ProcError {
    let text = match e {
        rquickjs::Error::Exception => {
            let v = ctx.catch();
            match v.as_exception() {
                Some(ex) => {
                    let name: Option<String> = ex.get("name").ok();
                    let msg = match name {
                        Some(n) if !n.is_empty() => {
                            format!("{n}: {}", ex.message().unwrap_or_default())
                        }
                        _ => ex.message().unwrap_or_default(),
                    };
                    match ex.stack() {
                        Some(s) if !s.trim().is_empty() => format!("{msg}\n{}", s.trim_end()),
                        _ => msg,
                    }
                }
                None => ctx
                    .json_stringify(v)
                    .ok()
                    .flatten()
                    .and_then(|s| s.to_string().ok())
                    .unwrap_or_else(|| "a value that is not an Error".into()),
            }
        }
        other => other.to_string(),
    };
    let kind = if late() {
        FailureKind::Timeout
    } else if text.contains("out of memory") {
        FailureKind::OutOfMemory
    } else if text.contains("stack overflow") || text.contains("call stack size") {
        FailureKind::StackOverflow
    } else {
        FailureKind::Exception
    };
    let message = if kind == FailureKind::Timeout {
        "the procedure ran past its time limit".to_string()
    } else {
        text
    };
    ProcError::new(kind, message)
}

/// Makes a context for `code` of `tenant`: the API, the script, `main`.
/// A context with the prelude, the API and `code` evaluated. With
/// `code_limit`, only the evaluation of `code` is timed, from its start
/// (an install's check); without, whatever deadline the caller set holds
/// throughout (a call's).
fn make_context(
    runtime: &Runtime,
    tenant: &str,
    code: &[u8],
    code_limit: Option<std::time::Duration>,
) -> Result<JsContext, ProcError> {
    let context = Context::full(runtime)
        .map_err(|e| ProcError::new(FailureKind::Runtime, format!("JavaScript context: {e}")))?;
    let main = context.with(|ctx| -> Result<_, ProcError> {
        ctx.eval::<(), _>(PRELUDE.replace("__MAX__", &JS_ARRAY_LENGTH_MAX.to_string()))
            .map_err(|e| failure(&ctx, e))?;
        install_api(&ctx, tenant).map_err(|e| failure(&ctx, e))?;
        let _limit = code_limit.map(|l| Deadline::set(Instant::now() + l));
        ctx.eval::<(), _>(code.to_vec())
            .map_err(|e| failure(&ctx, e))?;
        let main: Value = ctx.globals().get("main").map_err(|e| failure(&ctx, e))?;
        match main.into_function() {
            Some(f) => Ok(Persistent::save(&ctx, f)),
            None => Err(ProcError::new(
                FailureKind::Invalid,
                "a JavaScript procedure defines `function main(arg)`",
            )),
        }
    })?;
    Ok(JsContext { main, context })
}

pub(crate) fn check(sandbox: &Sandbox, code: &[u8], limits: &Limits) -> Result<(), ProcError> {
    // Only the script's own evaluation is timed: making this thread's
    // runtime and a context with the prelude is the node's work, which an
    // overloaded machine (or a debug build) can make slow — an install was
    // once refused "time limit exceeded" for a three-line script that way.
    let made = with_worker(sandbox, "check", |w| {
        make_context(&w.runtime, "check", code, Some(limits.timeout)).map(|_| ())
    });
    made.map_err(|mut e| {
        if matches!(e.kind, FailureKind::Exception) {
            e.kind = FailureKind::Invalid;
        }
        e
    })
}

pub(crate) fn call(
    sandbox: &Sandbox,
    spec: &ProcSpec<'_>,
    lend: &mut dyn Lend,
    args: &[u8],
    deadline: Instant,
) -> Result<CallOutput, ProcError> {
    let key: Key = (
        spec.tenant.to_string(),
        spec.name.to_string(),
        spec.code_hash,
    );
    let _deadline = Deadline::set(deadline);
    with_worker(sandbox, spec.tenant, |w| {
        // The call may use its procedure's memory (`procedure install
        // --memory-mib`), counted over the tenant's whole runtime: what
        // its other procedures' contexts retain counts too.
        w.runtime.set_memory_limit(spec.limits.memory_bytes);
        if !w.contexts.contains_key(&key) {
            let code = lend.load()?;
            let made = make_context(&w.runtime, spec.tenant, &code, None)?;
            while w.contexts.len() >= JS_CONTEXTS_MAX {
                let Some(old) = w.order.pop_front() else {
                    break;
                };
                w.contexts.remove(&old);
            }
            w.contexts.insert(key.clone(), made);
            w.order.push_back(key.clone());
        }
        let Some(jc) = w.contexts.get(&key) else {
            return Err(ProcError::new(FailureKind::Runtime, "context missing"));
        };
        let mut io = CallIo::default();
        io.start(&[]);
        // SAFETY: taken back below, before `host`'s borrow ends, on this
        // thread; `host` is not touched while the script runs.
        let current = Current {
            host: unsafe { ScopedHost::new(lend.host()) },
            io,
        };
        let installed = Installed::new(current);
        let ran = jc.context.with(|ctx| -> Result<Vec<u8>, ProcError> {
            let main = jc
                .main
                .clone()
                .restore(&ctx)
                .map_err(|e| failure(&ctx, e))?;
            let arg: Value = match std::str::from_utf8(args) {
                Ok(s) => rquickjs::String::from_str(ctx.clone(), s)
                    .map(|s| s.into_value())
                    .map_err(|e| failure(&ctx, e))?,
                Err(_) => TypedArray::<u8>::new_copy(ctx.clone(), args)
                    .map(|a| a.into_value())
                    .map_err(|e| failure(&ctx, e))?,
            };
            let ret: Value = main.call((arg,)).map_err(|e| failure(&ctx, e))?;
            result_bytes(&ctx, ret).map_err(|e| failure(&ctx, e))
        });
        let mut io = installed.take().map(|c| c.io).unwrap_or_default();
        match ran {
            Ok(result) => {
                io.set_result(&result).map_err(|mut e| {
                    e.log = io.take_log();
                    e
                })?;
                Ok(CallOutput {
                    result: std::mem::take(&mut io.result),
                    log: io.take_log(),
                })
            }
            Err(mut e) => {
                e.log = io.take_log();
                if matches!(
                    e.kind,
                    FailureKind::Timeout | FailureKind::OutOfMemory | FailureKind::StackOverflow
                ) {
                    // Its state may be half-built: start it afresh next time.
                    w.contexts.remove(&key);
                    w.order.retain(|k| k != &key);
                    w.runtime.run_gc();
                }
                Err(e)
            }
        }
    })
}

/// What `main` returned, as bytes.
fn result_bytes<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> rquickjs::Result<Vec<u8>> {
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    if let Some(s) = v.as_string() {
        return Ok(s.to_string()?.into_bytes());
    }
    if let Some(b) = bytes_of(&v) {
        return Ok(b);
    }
    let json = ctx.json_stringify(v)?;
    Ok(match json {
        Some(s) => s.to_string()?.into_bytes(),
        None => Vec::new(),
    })
}

/// The bytes of a `Uint8Array`, if `v` is one.
fn bytes_of(v: &Value<'_>) -> Option<Vec<u8>> {
    let a = TypedArray::<u8>::from_value(v.clone()).ok()?;
    let raw = a.as_raw()?;
    // SAFETY: copied at once; no JavaScript runs while the slice lives.
    Some(unsafe { raw.as_ref() }.to_vec())
}

/// A string or `Uint8Array` argument as bytes.
fn data_arg<'js>(ctx: &Ctx<'js>, call: &str, v: &Value<'js>) -> rquickjs::Result<Vec<u8>> {
    if let Some(s) = v.as_string() {
        return Ok(s.to_string()?.into_bytes());
    }
    bytes_of(v).ok_or_else(|| {
        Exception::throw_type(
            ctx,
            &format!("tabos.{call}: data is a string or a Uint8Array"),
        )
    })
}

/// Runs a host call for the script running on this thread; a failure
/// becomes a thrown `Error`.
fn with_host<'js, T>(
    ctx: &Ctx<'js>,
    call: &str,
    f: impl FnOnce(&mut dyn Host) -> Result<T, HostError>,
) -> rquickjs::Result<T> {
    let got = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.as_mut().map(|cur| {
            let got = f(cur.host.get());
            // The host may have brought the deadline forward.
            if let Some(at) = cur.host.get_ref().deadline() {
                DEADLINE.with(|d| d.set(Some(d.get().map_or(at, |own| own.min(at)))));
            }
            got
        })
    });
    match got {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => {
            let detail = e.message().map(|m| format!(": {m}")).unwrap_or_default();
            Err(Exception::throw_message(
                ctx,
                &format!("tabos.{call}: {}{detail}", e.errno_name()),
            ))
        }
        None => Err(Exception::throw_message(
            ctx,
            &format!("tabos.{call}: host calls are available only while main runs"),
        )),
    }
}

fn log_line(line: &str) {
    CURRENT.with(|c| {
        if let Some(cur) = c.borrow_mut().as_mut() {
            cur.io.log(line);
        }
    });
}

fn sql_param(v: &Value<'_>) -> Option<SqlValue> {
    if v.is_undefined() || v.is_null() {
        Some(SqlValue::Null)
    } else if let Some(b) = v.as_bool() {
        Some(SqlValue::Int(i64::from(b)))
    } else if let Some(i) = v.as_int() {
        Some(SqlValue::Int(i64::from(i)))
    } else if let Some(f) = v.as_float() {
        if f.fract() == 0.0 && f.abs() < 9.0e15 {
            Some(SqlValue::Int(f as i64))
        } else {
            Some(SqlValue::Real(f))
        }
    } else if let Some(s) = v.as_string() {
        s.to_string().ok().map(SqlValue::Text)
    } else {
        bytes_of(v).map(SqlValue::Blob)
    }
}

fn sql_value<'js>(ctx: &Ctx<'js>, v: &SqlValue) -> rquickjs::Result<Value<'js>> {
    Ok(match v {
        SqlValue::Null => Value::new_null(ctx.clone()),
        SqlValue::Int(i) => Value::new_number(ctx.clone(), *i as f64),
        SqlValue::Real(r) => Value::new_number(ctx.clone(), *r),
        SqlValue::Text(t) => rquickjs::String::from_str(ctx.clone(), t)?.into_value(),
        SqlValue::Blob(b) => TypedArray::<u8>::new_copy(ctx.clone(), b)?.into_value(),
    })
}

fn sql_params<'js>(ctx: &Ctx<'js>, params: Opt<Value<'js>>) -> rquickjs::Result<Vec<SqlValue>> {
    let Some(p) = params.0.filter(|p| !p.is_undefined() && !p.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(arr) = p.as_array() else {
        return Err(Exception::throw_type(ctx, "SQL parameters are an array"));
    };
    let mut out = Vec::with_capacity(arr.len());
    for v in arr.iter::<Value>() {
        let v = v?;
        out.push(sql_param(&v).ok_or_else(|| {
            Exception::throw_type(
                ctx,
                "a SQL parameter is null, a boolean, a number, a string or a Uint8Array",
            )
        })?);
    }
    Ok(out)
}

fn text_of(v: &Value<'_>) -> String {
    if let Some(s) = v.as_string() {
        return s.to_string().unwrap_or_default();
    }
    let ctx = v.ctx();
    ctx.json_stringify(v.clone())
        .ok()
        .flatten()
        .and_then(|s| s.to_string().ok())
        .unwrap_or_else(|| format!("{v:?}"))
}

/// Defines the global `tabos` object (and `console.log`).
fn install_api<'js>(ctx: &Ctx<'js>, tenant: &str) -> rquickjs::Result<()> {
    let api = Object::new(ctx.clone())?;
    api.set("realm", tenant)?;
    api.set(
        "get",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, key: String| {
            match with_host(&ctx, "get", |h| h.kv_get(&key))? {
                None => Ok(Value::new_null(ctx.clone())),
                Some(b) => match String::from_utf8(b) {
                    Ok(s) => Ok(rquickjs::String::from_str(ctx.clone(), &s)?.into_value()),
                    Err(_) => Err(Exception::throw_type(
                        &ctx,
                        "tabos.get: the value is not UTF-8; use getBytes",
                    )),
                },
            }
        })?,
    )?;
    api.set(
        "getBytes",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, key: String| {
            match with_host(&ctx, "getBytes", |h| h.kv_get(&key))? {
                None => Ok::<_, rquickjs::Error>(Value::new_null(ctx.clone())),
                Some(b) => Ok(TypedArray::<u8>::new(ctx.clone(), b)?.into_value()),
            }
        })?,
    )?;
    api.set(
        "put",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, key: String, value: Value<'js>| {
                let data = data_arg(&ctx, "put", &value)?;
                with_host(&ctx, "put", |h| h.kv_put(&key, &data))
            },
        )?,
    )?;
    api.set(
        "del",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, key: String| {
            with_host(&ctx, "del", |h| h.kv_delete(&key))
        })?,
    )?;
    api.set(
        "scan",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, start: String, end: Opt<Option<String>>, limit: Opt<f64>| {
                let limit = limit
                    .0
                    .unwrap_or(SCAN_ROWS_DEFAULT as f64)
                    .clamp(1.0, SCAN_ROWS_MAX as f64) as usize;
                let end = end.0.flatten();
                let entries = with_host(&ctx, "scan", |h| {
                    h.kv_scan(&start, end.as_deref(), false, limit)
                })?;
                let out = rquickjs::Array::new(ctx.clone())?;
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    let pair = rquickjs::Array::new(ctx.clone())?;
                    pair.set(0, k)?;
                    pair.set(1, String::from_utf8_lossy(&v).into_owned())?;
                    out.set(i, pair)?;
                }
                Ok::<_, rquickjs::Error>(out)
            },
        )?,
    )?;
    api.set(
        "query",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, sql: String, params: Opt<Value<'js>>| {
                let params = sql_params(&ctx, params)?;
                let got = with_host(&ctx, "query", |h| h.sql(&sql, &params, false))?;
                let out = rquickjs::Array::new(ctx.clone())?;
                for (i, row) in got.rows.iter().enumerate() {
                    let o = Object::new(ctx.clone())?;
                    for (c, v) in got.columns.iter().zip(row) {
                        o.set(c.as_str(), sql_value(&ctx, v)?)?;
                    }
                    out.set(i, o)?;
                }
                Ok::<_, rquickjs::Error>(out)
            },
        )?,
    )?;
    api.set(
        "exec",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, sql: String, params: Opt<Value<'js>>| {
                let params = sql_params(&ctx, params)?;
                let got = with_host(&ctx, "exec", |h| h.sql(&sql, &params, true))?;
                Ok::<_, rquickjs::Error>(got.changed as f64)
            },
        )?,
    )?;
    api.set(
        "send",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, to: String, data: Value<'js>, id: Opt<String>| {
                let payload = data_arg(&ctx, "send", &data)?;
                let to: Vec<&str> = to.split('\n').filter(|s| !s.is_empty()).collect();
                with_host(&ctx, "send", |h| h.send(&to, &payload, id.0.as_deref()))
            },
        )?,
    )?;
    api.set(
        "recv",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, from: Opt<String>| {
            let call = RecvCall {
                from: from.0.as_deref(),
                bytes_max: RECV_BYTES_MAX,
                timeout: Some(std::time::Duration::ZERO),
                peek: false,
            };
            match with_host(&ctx, "recv", |h| match h.recv(call) {
                Err(HostError::TimedOut | HostError::Empty) => Ok(None),
                other => other.map(Some),
            })? {
                None => Ok::<_, rquickjs::Error>(Value::new_null(ctx.clone())),
                Some(m) => {
                    let o = Object::new(ctx.clone())?;
                    o.set("sender", m.sender)?;
                    o.set("data", String::from_utf8_lossy(&m.payload).into_owned())?;
                    Ok(o.into_value())
                }
            }
        })?,
    )?;
    api.set(
        "read",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, offset: Opt<f64>, len: Opt<f64>| {
                let offset = offset.0.unwrap_or(0.0).max(0.0) as i64;
                let len = len
                    .0
                    .unwrap_or(crate::host::FS_IO_BYTES_MAX as f64)
                    .clamp(0.0, crate::host::FS_IO_BYTES_MAX as f64)
                    as usize;
                let data = with_host(&ctx, "read", |h| h.fs_read(&path, offset, len))?;
                Ok::<_, rquickjs::Error>(String::from_utf8_lossy(&data).into_owned())
            },
        )?,
    )?;
    api.set(
        "write",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, data: Value<'js>, offset: Opt<f64>| {
                let data = data_arg(&ctx, "write", &data)?;
                let offset = offset.0.unwrap_or(0.0).max(0.0) as i64;
                let size = with_host(&ctx, "write", |h| h.fs_write(&path, offset, &data, true))?;
                Ok::<_, rquickjs::Error>(size as f64)
            },
        )?,
    )?;
    let log = Function::new(ctx.clone(), |values: Rest<Value<'js>>| {
        let line: Vec<String> = values.0.iter().map(text_of).collect();
        log_line(&line.join(" "));
    })?;
    api.set("log", log.clone())?;
    api.set(
        "nop",
        Function::new(ctx.clone(), |ctx: Ctx<'js>| {
            with_host(&ctx, "nop", |h| Ok(h.nop() as f64))
        })?,
    )?;
    let console = Object::new(ctx.clone())?;
    console.set("log", log)?;
    let globals = ctx.globals();
    globals.set("console", console)?;
    globals.set("tabos", api)?;
    Ok(())
}
