//! Stored procedures: tenant code called by name, next to the data, in
//! WebAssembly ([`wasm`]) or JavaScript ([`js`]).
//!
//! The embedder (the kernel) runs [`Sandbox::call_procedure`] inside a store
//! transaction and lends it a [`Host`] over that transaction; every host
//! call the procedure makes goes through it, so everything a procedure reads
//! and writes commits or rolls back with the call. The sandbox only runs the
//! code, enforces its limits, and turns every way it can go wrong into a
//! [`ProcError`] — never a panic.
//!
//! Contexts are kept between calls, keyed by tenant, procedure name and code
//! hash (so a reinstalled procedure never meets its old context):
//!
//! * wasm: one wasmtime Store and instance per context, in a bounded pool
//!   shared by all threads; a call checks one out, runs `main`, and puts it
//!   back — unless the call trapped, which drops it.
//! * js: a QuickJS runtime per worker thread (per sandbox), holding a
//!   bounded number of contexts, one per tenant procedure. The runtime's
//!   memory is shared by its contexts; a context that ran out of memory or
//!   time is dropped.
//!
//! The per-call state (arguments, result, log lines) lives in [`CallIo`].
//! Native Rust procedures ([`Sandbox::call_native`]) go through the same
//! dispatch, for comparisons.

pub mod examples;
pub mod js;
pub mod wasm;

use std::fmt;
use std::time::{Duration, Instant};

use crate::{Host, Sandbox};

/// Longest arguments of one call, in bytes.
pub const ARGS_BYTES_MAX: usize = 1 << 20;
/// Longest result of one call, in bytes.
pub const RESULT_BYTES_MAX: usize = 4 << 20;
/// Log lines one call keeps (later ones are counted, not kept).
pub const LOG_LINES_MAX: usize = 100;
/// Longest log line kept, in bytes (longer ones are cut).
pub const LOG_LINE_BYTES_MAX: usize = 4 << 10;
/// Largest procedure source or module, in bytes.
pub const CODE_BYTES_MAX: usize = 16 << 20;
/// Time limit of a call unless the procedure sets its own.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(1);
/// Shortest time limit a procedure may set.
pub const TIMEOUT_MIN: Duration = Duration::from_millis(1);
/// Longest time limit a procedure may set. A call runs on its realm's
/// partition executor, which serves every realm on that partition: this
/// is how long one tenant's call may hold the others' calls, sends and
/// name changes there (issue 17).
pub const TIMEOUT_MAX: Duration = Duration::from_secs(1);
/// Memory a wasm procedure may use unless it sets its own.
pub const MEMORY_BYTES_DEFAULT: usize = 64 << 20;
/// Memory of one tenant's JavaScript runtime on a worker thread by default.
pub const JS_RUNTIME_BYTES_DEFAULT: usize = 64 << 20;
/// Most entries one scan returns.
pub const SCAN_ROWS_MAX: usize = 10_000;
/// Most rows one SQL call returns.
pub const SQL_ROWS_MAX: usize = 10_000;
/// Longest SQL statement, in bytes.
pub const SQL_BYTES_MAX: usize = 64 << 10;
/// Longest procedure name, in bytes.
pub const NAME_BYTES_MAX: usize = 128;

/// The language of a procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// A WebAssembly module exporting `main: [i32] -> [i32]` and `memory`.
    Wasm,
    /// A script defining `function main(arg)`.
    Js,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Wasm => "wasm",
            Language::Js => "js",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Language {
    type Err = String;
    fn from_str(s: &str) -> Result<Language, String> {
        match s {
            "wasm" | "webassembly" => Ok(Language::Wasm),
            "js" | "javascript" => Ok(Language::Js),
            _ => Err(format!(
                "unknown procedure language {s:?}: expected wasm or js"
            )),
        }
    }
}

/// What one call may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// wasm: linear memory of the context. JS: the heap of the tenant's
    /// runtime on the worker during the call (shared by its contexts).
    pub memory_bytes: usize,
    /// Wall time of one call, at most [`TIMEOUT_MAX`].
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: MEMORY_BYTES_DEFAULT,
            timeout: TIMEOUT_DEFAULT,
        }
    }
}

/// Which procedure a call runs.
#[derive(Debug, Clone, Copy)]
pub struct ProcSpec<'a> {
    /// The tenant (realm) the procedure belongs to; contexts are never
    /// shared between tenants.
    pub tenant: &'a str,
    pub name: &'a str,
    pub language: Language,
    /// [`code_hash`] of the code.
    pub code_hash: u64,
    pub limits: Limits,
}

/// The content hash that keys compiled code and contexts.
pub fn code_hash(code: &[u8]) -> u64 {
    crate::content_hash(code)
}

/// What a call returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOutput {
    pub result: Vec<u8>,
    /// What the procedure logged (`log`, and for wasm stdout and stderr).
    pub log: Vec<String>,
}

/// How a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The code does not compile, or lacks its entry point.
    Invalid,
    /// A wasm trap (unreachable, out-of-bounds access, …).
    Trap,
    /// An uncaught JavaScript exception.
    Exception,
    /// The call ran past its time limit.
    Timeout,
    /// The call ran out of memory.
    OutOfMemory,
    StackOverflow,
    /// `main` returned a non-zero status (wasm).
    Status(i32),
    /// Arguments or result over their limits.
    Limit,
    /// The runtime itself failed.
    Runtime,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::Invalid => f.write_str("invalid procedure"),
            FailureKind::Trap => f.write_str("trap"),
            FailureKind::Exception => f.write_str("uncaught exception"),
            FailureKind::Timeout => f.write_str("time limit exceeded"),
            FailureKind::OutOfMemory => f.write_str("out of memory"),
            FailureKind::StackOverflow => f.write_str("stack overflow"),
            FailureKind::Status(s) => write!(f, "failed with status {s}"),
            FailureKind::Limit => f.write_str("limit exceeded"),
            FailureKind::Runtime => f.write_str("runtime failure"),
        }
    }
}

/// A failed call: the procedure's transaction must be rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcError {
    pub kind: FailureKind,
    pub message: String,
    /// What the procedure logged before it failed.
    pub log: Vec<String>,
}

impl ProcError {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> ProcError {
        ProcError {
            kind,
            message: message.into(),
            log: Vec::new(),
        }
    }
}

impl fmt::Display for ProcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ProcError {}

/// A native procedure, for comparisons: the same dispatch, no sandbox.
pub type NativeFn = fn(&mut dyn Host, &[u8]) -> Result<Vec<u8>, String>;

/// One call's arguments, result and log.
#[derive(Debug, Default)]
pub(crate) struct CallIo {
    pub(crate) args: Vec<u8>,
    pub(crate) result: Vec<u8>,
    pub(crate) log: Vec<String>,
    /// Lines past [`LOG_LINES_MAX`].
    pub(crate) dropped: usize,
}

impl CallIo {
    pub(crate) fn start(&mut self, args: &[u8]) {
        self.args.clear();
        self.args.extend_from_slice(args);
        self.result.clear();
        self.log.clear();
        self.dropped = 0;
    }

    pub(crate) fn log(&mut self, line: &str) {
        if self.log.len() >= LOG_LINES_MAX {
            self.dropped += 1;
            return;
        }
        let mut end = line.len().min(LOG_LINE_BYTES_MAX);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        self.log.push(line[..end].to_string());
    }

    pub(crate) fn set_result(&mut self, bytes: &[u8]) -> Result<(), ProcError> {
        if bytes.len() > RESULT_BYTES_MAX {
            return Err(ProcError::new(
                FailureKind::Limit,
                format!("result of {} bytes exceeds {RESULT_BYTES_MAX}", bytes.len()),
            ));
        }
        self.result.clear();
        self.result.extend_from_slice(bytes);
        Ok(())
    }

    /// The log, with a note of what was dropped.
    pub(crate) fn take_log(&mut self) -> Vec<String> {
        let mut log = std::mem::take(&mut self.log);
        if self.dropped > 0 {
            log.push(format!("({} more log lines dropped)", self.dropped));
        }
        log
    }
}

/// A host lent to a stored procedure for one call.
///
/// The host borrows the caller's open transaction, so it cannot be
/// `'static` as wasmtime's store data and QuickJS's functions need; the
/// pointer erases that lifetime. Invariant (upheld by the callers in this
/// module, the only ones that make one): it is set just before the call into
/// the guest and cleared right after it returns, on the same thread, while
/// the borrow it came from is still alive and not used by anyone else — so
/// the guest can reach the host only inside the call.
pub(crate) struct ScopedHost(*mut (dyn Host + 'static));

// SAFETY: the pointer is only dereferenced during the call, on the thread
// that lent the host (see above); a store parked in the pool between calls
// holds no ScopedHost.
unsafe impl Send for ScopedHost {}

impl ScopedHost {
    /// # Safety
    /// The caller must drop the result before `host`'s borrow ends and must
    /// not use `host` while it lives.
    pub(crate) unsafe fn new(host: &mut dyn Host) -> ScopedHost {
        let p: *mut (dyn Host + '_) = host;
        // SAFETY: only the lifetime bound changes; see the type's invariant.
        ScopedHost(unsafe {
            std::mem::transmute::<*mut (dyn Host + '_), *mut (dyn Host + 'static)>(p)
        })
    }

    pub(crate) fn get(&mut self) -> &mut dyn Host {
        // SAFETY: the type's invariant: the borrow is alive and exclusive.
        unsafe { &mut *self.0 }
    }

    pub(crate) fn get_ref(&self) -> &dyn Host {
        // SAFETY: as for `get`; shared, for as long as `self` is.
        unsafe { &*self.0 }
    }
}

/// The host and the code loader of one call, handed to the runtimes as
/// one object: loading and the calls both go through the host, never at
/// the same time.
pub(crate) trait Lend {
    fn load(&mut self) -> Result<Vec<u8>, ProcError>;
    fn host(&mut self) -> &mut dyn Host;
}

struct Lender<'a, H: Host> {
    host: &'a mut H,
    load: &'a mut dyn FnMut(&mut H) -> Result<Vec<u8>, String>,
}

impl<H: Host> Lend for Lender<'_, H> {
    fn load(&mut self) -> Result<Vec<u8>, ProcError> {
        (self.load)(self.host).map_err(|m| ProcError::new(FailureKind::Invalid, m))
    }
    fn host(&mut self) -> &mut dyn Host {
        self.host
    }
}

fn check_args(args: &[u8]) -> Result<(), ProcError> {
    if args.len() > ARGS_BYTES_MAX {
        return Err(ProcError::new(
            FailureKind::Limit,
            format!("arguments of {} bytes exceed {ARGS_BYTES_MAX}", args.len()),
        ));
    }
    Ok(())
}

fn check_limits(limits: &Limits) -> Result<(), ProcError> {
    if limits.timeout < TIMEOUT_MIN || limits.timeout > TIMEOUT_MAX {
        return Err(ProcError::new(
            FailureKind::Limit,
            format!("a time limit is {TIMEOUT_MIN:?} ..= {TIMEOUT_MAX:?}"),
        ));
    }
    if limits.memory_bytes == 0 || limits.memory_bytes > crate::MEMORY_BYTES_MAX {
        return Err(ProcError::new(
            FailureKind::Limit,
            format!("a memory limit is 1 ..= {} bytes", crate::MEMORY_BYTES_MAX),
        ));
    }
    Ok(())
}

/// Checks a procedure name: 1..=[`NAME_BYTES_MAX`] of `A-Z a-z 0-9 _ . -`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "procedure name {name:?} must be 1..={NAME_BYTES_MAX} characters of A-Z a-z 0-9 _ . -"
        ))
    }
}

impl Sandbox {
    /// Checks that `code` is a procedure this sandbox can run: compiles a
    /// wasm module (and checks its exports and imports) or evaluates a
    /// script in a scratch context (its top level may not call the host)
    /// and checks it defines `main`. The error carries the compiler's
    /// message.
    pub fn check_procedure(
        &self,
        language: Language,
        code: &[u8],
        limits: &Limits,
    ) -> Result<(), ProcError> {
        check_limits(limits)?;
        if code.len() > CODE_BYTES_MAX {
            return Err(ProcError::new(
                FailureKind::Limit,
                format!("code of {} bytes exceeds {CODE_BYTES_MAX}", code.len()),
            ));
        }
        match language {
            Language::Wasm => wasm::check(self, code).map(|_| ()),
            Language::Js => js::check(self, code, limits),
        }
    }

    /// Runs procedure `spec` with `args`, lending it `host`. `load` returns
    /// the code (through the host, which may own what holds it) when no
    /// context for it exists yet; a miss costs a compile, served from the
    /// module cache for wasm.
    pub fn call_procedure<H: Host>(
        &self,
        spec: &ProcSpec<'_>,
        host: &mut H,
        load: &mut dyn FnMut(&mut H) -> Result<Vec<u8>, String>,
        args: &[u8],
    ) -> Result<CallOutput, ProcError> {
        check_limits(&spec.limits)?;
        check_args(args)?;
        let deadline = Instant::now() + spec.limits.timeout;
        let mut lender = Lender { host, load };
        match spec.language {
            Language::Wasm => wasm::call(self, spec, &mut lender, args, deadline),
            Language::Js => js::call(self, spec, &mut lender, args, deadline),
        }
    }

    /// Runs a native procedure through the same dispatch (limits, result and
    /// log handling) as [`call_procedure`](Sandbox::call_procedure).
    pub fn call_native(
        &self,
        f: NativeFn,
        limits: &Limits,
        host: &mut dyn Host,
        args: &[u8],
    ) -> Result<CallOutput, ProcError> {
        check_limits(limits)?;
        check_args(args)?;
        let result = f(host, args).map_err(|m| ProcError::new(FailureKind::Exception, m))?;
        let mut io = CallIo::default();
        io.set_result(&result)?;
        let log = io.take_log();
        Ok(CallOutput {
            result: io.result,
            log,
        })
    }

    /// Idle wasm procedure contexts in the pool.
    pub fn idle_procedure_contexts(&self) -> usize {
        wasm::idle(self)
    }
}
