//! tabos-sandbox: the one home of the runtimes that run tenant code:
//! WebAssembly (wasmtime) for `wasm` procs and stored procedures, and
//! JavaScript (QuickJS through rquickjs) for stored procedures
//! ([`procedure`]).
//!
//! * One shared [`wasmtime::Engine`] per sandbox, with the pooling instance
//!   allocator (instance slots, memories and tables are preallocated and
//!   recycled, so instantiation is a few microseconds) and epoch
//!   interruption (so a running module can be stopped from another thread).
//! * Modules are compiled once and cached by content ([`Sandbox::compile`]):
//!   the cache key is the module's bytes, found by their hash, so two
//!   different modules can never share an entry. The cache is bounded.
//! * Each run gets its own [`wasmtime::Store`] with a memory limit, the
//!   WASI preview1 subset of [`wasi`] (arguments, environment, stdout and
//!   stderr captured into the caller's sinks, clocks, randomness,
//!   `proc_exit`), and a [`StopHandle`] that ends it at the next epoch check.
//! * The tabos host functions of [`host`] (IPC: send and receive), which the
//!   embedder implements through the [`Host`] trait.
//!
//! * Stored procedures ([`procedure`]): a wasm procedure keeps one Store
//!   per tenant invocation context, reused from call to call; a JavaScript
//!   procedure a QuickJS context per tenant in a runtime per worker thread.
//!   Both get a time limit (wasm: the epoch deadline, advanced by a ticker
//!   thread every [`EPOCH_TICK`]; JS: an interrupt handler) and a memory
//!   limit.
//!
//! Nothing a module does can panic the host: traps, bad pointers, exhausted
//! memory and stack overflows all come back as an [`Outcome`] or an
//! [`Error`].

pub mod host;
pub mod procedure;
pub mod programs;
mod wasi;
mod wasi_fs;
pub mod workflow;

pub use host::{Host, HostError, RecvCall, SqlResult, SqlValue};
pub use procedure::{CallOutput, FailureKind, Language, Limits, ProcError, ProcSpec};

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline,
};

/// Largest module file accepted, in bytes.
pub const MODULE_BYTES_MAX: usize = 64 << 20;
/// Compiled modules kept in the cache; the oldest is dropped past this.
pub const CACHE_MODULES_MAX: usize = 256;
/// Instances that may exist at once in one sandbox (pool slots).
pub const INSTANCES_MAX: u32 = 1_000;
/// Linear memory one instance may grow to, unless a run asks for less.
pub const MEMORY_BYTES_MAX: usize = 1 << 30;
/// Bytes of arguments plus environment handed to one run.
pub const ARGS_BYTES_MAX: usize = 1 << 20;
/// How often the engine's epoch advances: the granularity of wasm time
/// limits (a running module checks its deadline at each tick).
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The module is not valid WebAssembly, or not a WASI command tabos can
    /// run; the message is the compiler's or the linker's.
    #[error("invalid module: {0}")]
    InvalidModule(String),
    #[error("{0}")]
    Limit(String),
    #[error("cannot read module {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The runtime itself failed (e.g. the pool is exhausted).
    #[error("sandbox: {0}")]
    Runtime(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `_start` returned (status 0) or the module called `proc_exit(status)`.
    Exited(i32),
    /// Stopped through its [`StopHandle`].
    Stopped,
    /// A trap (unreachable, out-of-bounds access, stack overflow, …) or a
    /// failing host call; the message says which.
    Trapped(String),
}

/// A compiled module, ready to instantiate: a WASI command (`_start`).
#[derive(Clone)]
pub struct Program {
    pre: InstancePre<RunState>,
    bytes: usize,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// Stops a run from another thread: sets the run's flag and bumps the
/// engine's epoch, so the run's next epoch check (at every loop back-edge and
/// function entry) traps. Cheap to clone.
#[derive(Clone)]
pub struct StopHandle {
    flag: Arc<AtomicBool>,
    engine: Engine,
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopHandle")
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl StopHandle {
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        // Every running store reaches its deadline; only this run's callback
        // sees its flag set, the others extend their deadline and go on.
        self.engine.increment_epoch();
    }

    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// What one run gets.
pub struct RunSpec {
    /// argv, program name first.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// What the module reads from descriptor 0; `None`: at end of file
    /// from the start (a proc's stdin, like a native proc's /dev/null).
    pub stdin: Option<Box<dyn Read + Send>>,
    pub stdout: Box<dyn Write + Send>,
    pub stderr: Box<dyn Write + Send>,
    /// Linear memory limit in bytes (at most [`MEMORY_BYTES_MAX`]).
    pub memory_bytes: usize,
    /// What the tabos host functions do; `None` makes them return ENOSYS.
    pub host: Option<Box<dyn Host + Send>>,
    /// A host directory the proc sees, read-only, as its preopened `.`
    /// (descriptor 3): its uploaded code. `None`: no files at all.
    pub preopen: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSpec")
            .field("args", &self.args)
            .field("env", &self.env)
            .field("memory_bytes", &self.memory_bytes)
            .finish()
    }
}

/// Per-run state kept in the wasmtime store.
pub(crate) struct RunState {
    pub(crate) wasi: wasi::Ctx,
    pub(crate) host: Option<Box<dyn Host + Send>>,
    /// A stored procedure's host, lent for one call (see
    /// [`procedure::ScopedHost`]); takes precedence over `host`.
    pub(crate) scoped: Option<procedure::ScopedHost>,
    /// A stored procedure call's arguments, result and log.
    pub(crate) call: procedure::CallIo,
    limits: StoreLimits,
    stop: Arc<AtomicBool>,
    /// A stored procedure call's time limit.
    pub(crate) deadline: Option<Instant>,
    /// A workflow call's answer that did not fit the guest's buffer.
    pub(crate) wf_kept: Option<workflow::Kept>,
}

impl RunState {
    /// The host the tabos calls go to, if any.
    pub(crate) fn host_mut(&mut self) -> Option<&mut dyn Host> {
        if let Some(scoped) = self.scoped.as_mut() {
            return Some(scoped.get());
        }
        match self.host.as_mut() {
            Some(h) => Some(h.as_mut()),
            None => None,
        }
    }

    /// The run's deadline now: its own, or the host's if that is earlier
    /// ([`Host::deadline`]).
    pub(crate) fn deadline_now(&self) -> Option<Instant> {
        let host = match (&self.scoped, &self.host) {
            (Some(scoped), _) => scoped.get_ref().deadline(),
            (None, Some(h)) => h.deadline(),
            (None, None) => None,
        };
        match (self.deadline, host) {
            (Some(own), Some(h)) => Some(own.min(h)),
            (own, h) => own.or(h),
        }
    }

    /// Whether the epoch callback should interrupt the run.
    fn interrupted(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.deadline_now().is_some_and(|d| Instant::now() >= d)
    }
}

/// The runtimes of one node: the wasm engine, linker, module cache and
/// stored-procedure contexts, and the JavaScript settings.
#[derive(Clone)]
pub struct Sandbox {
    /// Tells apart the sandboxes of one process (the JS runtimes of a
    /// thread are kept per sandbox).
    id: u64,
    engine: Engine,
    linker: Arc<Linker<RunState>>,
    cache: Arc<Mutex<Cache>>,
    procs: Arc<Mutex<procedure::wasm::Pool>>,
    config: SandboxConfig,
}

/// Settings of a [`Sandbox`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Memory of each tenant's JavaScript runtime on a worker thread,
    /// shared by that tenant's contexts there.
    pub js_runtime_bytes: usize,
}

impl Default for SandboxConfig {
    fn default() -> SandboxConfig {
        SandboxConfig {
            js_runtime_bytes: procedure::JS_RUNTIME_BYTES_DEFAULT,
        }
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").finish_non_exhaustive()
    }
}

/// A cached program with the bytes it was compiled from.
type Cached = (Arc<[u8]>, Program);

#[derive(Default)]
struct Cache {
    /// Content hash → the modules with that hash (almost always one), each
    /// kept with its bytes so a hash collision cannot return the wrong one.
    by_hash: HashMap<u64, Vec<Cached>>,
    /// Insertion order, for dropping the oldest.
    order: std::collections::VecDeque<u64>,
    len: usize,
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl Sandbox {
    pub fn new() -> Result<Sandbox> {
        Sandbox::with_config(SandboxConfig::default())
    }

    pub fn with_config(config: SandboxConfig) -> Result<Sandbox> {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_core_instances(INSTANCES_MAX)
            .total_memories(INSTANCES_MAX)
            .total_tables(INSTANCES_MAX)
            .max_memory_size(MEMORY_BYTES_MAX);
        let mut wasm = Config::new();
        wasm.epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(|e| Error::Runtime(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        let linked = wasi::add_to_linker(&mut linker)
            .and_then(|()| host::add_to_linker(&mut linker))
            .and_then(|()| workflow::add_to_linker(&mut linker))
            .and_then(|()| procedure::wasm::add_to_linker(&mut linker));
        linked.map_err(|e| Error::Runtime(format!("{e:#}")))?;
        start_ticker(&engine)?;
        Ok(Sandbox {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            engine,
            linker: Arc::new(linker),
            cache: Arc::new(Mutex::new(Cache::default())),
            procs: Arc::new(Mutex::new(procedure::wasm::Pool::default())),
            config,
        })
    }

    /// A handle to stop one run; create it before [`Sandbox::run`].
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            flag: Arc::new(AtomicBool::new(false)),
            engine: self.engine.clone(),
        }
    }

    /// Compiles `bytes` (binary WebAssembly, or WAT text), or returns the
    /// cached program for the same bytes. Validates that it is a WASI
    /// command whose imports tabos provides.
    pub fn compile(&self, bytes: &[u8]) -> Result<Program> {
        self.compiled(bytes, &|module| match module.get_export("_start") {
            Some(wasmtime::ExternType::Func(f))
                if f.params().len() == 0 && f.results().len() == 0 =>
            {
                Ok(())
            }
            _ => Err(Error::InvalidModule(
                "not a WASI command: it exports no `_start` function of type [] -> []".into(),
            )),
        })
    }

    /// Compiles `bytes` (or finds them in the cache), links them against
    /// the host functions and checks the module with `check` (its exports)
    /// — before caching it, so nothing refused is cached.
    pub(crate) fn compiled(
        &self,
        bytes: &[u8],
        check: &dyn Fn(&Module) -> Result<()>,
    ) -> Result<Program> {
        if bytes.len() > MODULE_BYTES_MAX {
            return Err(Error::Limit(format!(
                "module of {} bytes exceeds {MODULE_BYTES_MAX}",
                bytes.len()
            )));
        }
        let hash = content_hash(bytes);
        if let Some(p) = self.lookup(hash, bytes) {
            check(p.pre.module())?;
            return Ok(p);
        }
        // Compile outside the lock: it takes milliseconds, and two threads
        // compiling the same new module at once only waste work.
        let module =
            Module::new(&self.engine, bytes).map_err(|e| Error::InvalidModule(format!("{e:#}")))?;
        check(&module)?;
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|e| Error::InvalidModule(format!("{e:#}")))?;
        let program = Program {
            pre,
            bytes: bytes.len(),
        };
        self.insert(hash, bytes, program.clone());
        Ok(program)
    }

    /// Reads and compiles a module file (see [`Sandbox::compile`]).
    pub fn compile_file(&self, path: &Path) -> Result<Program> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MODULE_BYTES_MAX as u64 {
            return Err(Error::Limit(format!(
                "module {} of {len} bytes exceeds {MODULE_BYTES_MAX}",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        self.compile(&bytes)
    }

    /// Compiled modules in the cache.
    pub fn cached_modules(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len
    }

    fn lookup(&self, hash: u64, bytes: &[u8]) -> Option<Program> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .by_hash
            .get(&hash)?
            .iter()
            .find(|(b, _)| &b[..] == bytes)
            .map(|(_, p)| p.clone())
    }

    fn insert(&self, hash: u64, bytes: &[u8], program: Program) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let entry = cache.by_hash.entry(hash).or_default();
        if entry.iter().any(|(b, _)| &b[..] == bytes) {
            return; // another thread compiled it first
        }
        entry.push((Arc::from(bytes), program));
        cache.order.push_back(hash);
        cache.len += 1;
        while cache.len > CACHE_MODULES_MAX {
            let Some(old) = cache.order.pop_front() else {
                break;
            };
            let mut dropped = 0;
            if let Some(v) = cache.by_hash.get_mut(&old) {
                if !v.is_empty() {
                    v.remove(0);
                    dropped = 1;
                }
                if v.is_empty() {
                    cache.by_hash.remove(&old);
                }
            }
            cache.len -= dropped;
        }
        debug_assert!(cache.len <= CACHE_MODULES_MAX);
    }

    /// Runs `program`'s `_start` to the end on the calling thread (a worker
    /// thread: this blocks for as long as the module runs).
    pub fn run(&self, program: &Program, spec: RunSpec, stop: &StopHandle) -> Result<Outcome> {
        let env_bytes: usize = spec.args.iter().map(|a| a.len() + 1).sum::<usize>()
            + spec
                .env
                .iter()
                .map(|(k, v)| k.len() + v.len() + 2)
                .sum::<usize>();
        if env_bytes > ARGS_BYTES_MAX {
            return Err(Error::Limit(format!(
                "arguments and environment of {env_bytes} bytes exceed {ARGS_BYTES_MAX}"
            )));
        }
        let memory = spec.memory_bytes.min(MEMORY_BYTES_MAX);
        let mut ctx = wasi::Ctx::new(spec.args, spec.env, spec.stdout, spec.stderr);
        ctx.stdin = spec.stdin;
        if let Some(dir) = &spec.preopen {
            ctx.tree = Some(wasi_fs::Tree::open(dir).map_err(|e| {
                Error::Limit(format!("the proc's directory {}: {e}", dir.display()))
            })?);
        }
        let limits = StoreLimitsBuilder::new()
            .memory_size(memory)
            .instances(1)
            .build();
        let state = RunState {
            wasi: ctx,
            host: spec.host,
            scoped: None,
            call: procedure::CallIo::default(),
            limits,
            stop: stop.flag.clone(),
            deadline: None,
            wf_kept: None,
        };
        let mut store = self.new_store(state);
        if stop.is_stopped() {
            return Ok(Outcome::Stopped);
        }
        let result = (|| {
            let instance = program.pre.instantiate(&mut store)?;
            let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
            start.call(&mut store, ())
        })();
        let outcome = match result {
            Ok(()) => Outcome::Exited(0),
            Err(e) => {
                if let Some(wasi::Exit(code)) = e.downcast_ref::<wasi::Exit>() {
                    Outcome::Exited(*code)
                } else if stop.is_stopped() {
                    Outcome::Stopped
                } else if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
                    Outcome::Trapped(format!("wasm trap: {trap}"))
                } else {
                    Outcome::Trapped(e.to_string())
                }
            }
        };
        store.data_mut().wasi.flush();
        Ok(outcome)
    }

    /// A wasmtime store for `state`: its memory limit, and an epoch deadline
    /// checked at every tick that interrupts a stopped or late run.
    pub(crate) fn new_store(&self, state: RunState) -> Store<RunState> {
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|ctx| {
            if ctx.data().interrupted() {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Continue(1))
            }
        });
        store
    }
}

/// Advances `engine`'s epoch every [`EPOCH_TICK`] until the engine is gone,
/// so that running modules check their deadlines.
fn start_ticker(engine: &Engine) -> Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("tabos-wasm-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        })
        .map(|_| ())
        .map_err(|e| Error::Runtime(format!("cannot start the epoch ticker: {e}")))
}
