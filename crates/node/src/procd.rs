//! procd: runs the procs the schedulers assign to this node's worker.
//!
//! A procd owns one worker of one realm. It subscribes to the worker's
//! change-feed channel *before* it first claims, so an assignment that
//! commits between a claim and the wait still wakes it; it never polls.
//!
//! * `native` procs are Linux processes: program, args and env from the
//!   descriptor, plus `TABOS_PID`, `TABOS_REALM` and `TABOS_ADDR` so that the
//!   proc can call the API. stdout and stderr are shipped into the
//!   cluster's log ([`crate::proclog`]; the newest [`LOG_BYTES_MAX`] of
//!   each kept), all of it before the proc's end is recorded.
//!   The exit status is recorded (128 + signal number for a signal). A
//!   native proc runs in its own process group; it has exited when its
//!   main process has (waitpid, not the end of its output), and whatever
//!   it left running in its group is then killed. Evict sends SIGTERM to
//!   the group, then SIGKILL after [`EVICT_GRACE`].
//! * `wasm` procs are WASI commands run in-process by the node's
//!   [`Sandbox`] on its task's thread, blocking in place (`blocking`), its
//!   program's check and run in one go: the module comes from the
//!   node's compile cache (the Spawn RPC already compiled it), stdout and
//!   stderr are shipped as a native proc's are, the exit status is `proc_exit`'s, a trap fails
//!   the proc with the trap's message, and Evict stops it at once through
//!   epoch interruption (there is nothing to clean up, so no grace period).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tabos_kernel::auth::Role;
use tabos_kernel::ids::{Pid, WorkerId};
use tabos_kernel::logs::Stream;
use tabos_kernel::procs::{self, Admission, Class, Kind, ProcInfo, State};
use tabos_sandbox::{Outcome, RunSpec, Sandbox, StopHandle};

use crate::host::ProcHost;
use tabos_store::Store;

/// Bytes of stdout (and of stderr) kept per proc, its newest: half the
/// gRPC message limit, so that `tabos logs` can always return what was
/// kept (the kernel's bound, [`tabos_kernel::logs::STREAM_BYTES_MAX`]).
pub const LOG_BYTES_MAX: u64 = (tabos_client::MESSAGE_BYTES_MAX / 2) as u64;
const _: () = assert!(LOG_BYTES_MAX < tabos_client::MESSAGE_BYTES_MAX as u64);
const _: () = assert!(LOG_BYTES_MAX == tabos_kernel::logs::STREAM_BYTES_MAX as u64);
/// Bytes of procs' logs the cluster keeps per realm by default
/// ([`Policy::logs_per_realm_max`]): past it, the realm's oldest output is
/// dropped first, so a realm's chatty procs cannot fill the database.
pub const LOGS_PER_REALM_MAX: u64 = tabos_kernel::logs::REALM_BYTES_DEFAULT as u64;
/// Time an evicted proc gets to exit after SIGTERM before SIGKILL.
pub const EVICT_GRACE: Duration = Duration::from_secs(2);
/// How long a native proc's output is still read after it exited and its
/// process group was killed (a process that left the group may hold the
/// pipe open; its further output is lost).
pub const LOG_DRAIN_MAX: Duration = Duration::from_secs(1);
/// How often a procd measures what its running native procs use.
pub const USAGE_INTERVAL: Duration = Duration::from_secs(2);
/// Procs claimed per claim transaction.
const CLAIM_BATCH_MAX: i64 = 64;

/// One worker's procd.
pub struct Procd {
    pub store: Store,
    /// The filesystem wasm procs' file calls use.
    pub files: tabos_kernel::fs::files::Files,
    /// The realms' stored procedures, which a wasm workflow's procedure
    /// steps call.
    pub procedures: tabos_kernel::procedures::Procedures,
    pub realm: String,
    pub worker: WorkerId,
    pub logs: PathBuf,
    /// Where the node serves its API: passed to procs as TABOS_ADDR.
    pub addr: NodeAddr,
    sandbox: Sandbox,
    policy: Policy,
    /// Memory the worker offers (registered again after a lapse).
    mem_mb: i64,
    /// The node this procd's worker belongs to.
    node_id: String,
    /// Mints each native proc's credential, usable on this node at once.
    auth: crate::auth::Auth,
    running: Mutex<HashMap<Pid, Running>>,
    /// Cores of the procs the node's procds run now (claimed and not yet
    /// ended), shared by the procds of every realm the node serves: BE
    /// admission and room are the node's.
    busy_cores: Arc<AtomicI64>,
    /// The node's measured CPU use: what BE admission goes by.
    load: Arc<crate::load::Load>,
    /// The last claim left BE procs waiting for admission: the claim loop
    /// then also wakes when a measurement opens admission.
    be_waiting: std::sync::atomic::AtomicBool,
    /// How native procs are confined (uid, cgroups).
    confine: Arc<crate::confine::Confine>,
    /// Signalled when one of its procs ends.
    freed: tokio::sync::Notify,
    /// The node is stopping: procs it stopped are given back by the node
    /// (`procs::hand_back`), not recorded as ended here.
    stopping: std::sync::atomic::AtomicBool,
    /// Procs claimed by an exit transaction whose assignment notification
    /// has not been read yet: that notification needs no claim of its own.
    claimed_on_exit: Mutex<std::collections::HashSet<String>>,
    /// In an elastic realm, the cores granted to this worker (changed by
    /// the node as the cluster manager decides): what room and BE
    /// admission go by, against this procd's own busy cores. `None`: a
    /// static realm, sharing the node's cores and measured load.
    grant: Option<Arc<AtomicI64>>,
    /// Procs it runs that a shrinking grant may evict, oldest first, with
    /// their cores: its BE procs, and in a BE realm every proc.
    preemptible: Mutex<Vec<(Pid, i64)>>,
    /// Its realm is a BE realm: all of it is best effort (σOS), so a grant
    /// taken back evicts its LC-class procs too (MapReduce's mappers).
    be_realm: bool,
    /// The node's cores as LC reservations, shared by the procds of every
    /// static realm it serves: an LC proc runs only once it holds its
    /// cores here, so the LC procs running on a node never hold more cores
    /// than it has, whatever realms they belong to (each realm's worker
    /// offers all of the node's cores). `None`: a granted worker, whose
    /// grants the cluster manager keeps within the node's cores.
    lc_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Where its procs' ends are counted (`/metrics`).
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The node's copies of uploaded code.
    code: Option<Arc<crate::code::Cache>>,
    /// Which programs on the node its procs may run.
    programs: Arc<crate::programs::Programs>,
    /// Its running procs that are restartable (what it stops itself when
    /// its node has been cut off from the database past its grace).
    restartable: Mutex<std::collections::HashSet<Pid>>,
    /// Procs it stopped that way: their ends are not recorded (the node
    /// queues them again once it reaches the database, or finds the
    /// cluster did).
    fenced: Mutex<std::collections::HashSet<Pid>>,
}

/// A procd, as the node holds it.
pub type ProcdRef = Arc<Procd>;

/// What a node shares between the procds of its realms.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Cores of the procs they run now (claimed and not yet ended).
    pub busy_cores: Arc<AtomicI64>,
    /// The node's cores as LC reservations (see [`Procd`]); `None` for a
    /// granted worker.
    pub lc_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Where procs' ends are counted (`/metrics`).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The node's copies of uploaded code.
    pub code: Option<Arc<crate::code::Cache>>,
    /// Which programs on the node its procs may run.
    pub programs: Arc<crate::programs::Programs>,
}

impl Shared {
    /// The sharing of a static node with `cores` cores.
    pub fn node(cores: i64) -> Shared {
        Shared {
            busy_cores: Arc::new(AtomicI64::new(0)),
            lc_slots: Some(Arc::new(tokio::sync::Semaphore::new(
                cores.clamp(1, i64::from(u32::MAX >> 3)) as usize,
            ))),
            metrics: None,
            code: None,
            programs: Arc::new(crate::programs::Programs::new(&[], &[])),
        }
    }

    /// A granted worker's own: its grant bounds it.
    pub fn granted() -> Shared {
        Shared {
            busy_cores: Arc::new(AtomicI64::new(0)),
            lc_slots: None,
            metrics: None,
            code: None,
            programs: Arc::new(crate::programs::Programs::new(&[], &[])),
        }
    }
}

/// First and longest pause between attempts to record a proc's end while
/// the database cannot be reached.
const EXIT_RETRY_PAUSE_MIN: std::time::Duration = std::time::Duration::from_millis(100);
const EXIT_RETRY_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Longest a stopping procd waits for the procs it killed to end.
const STOP_WAIT_MAX: Duration = Duration::from_secs(5);

/// Bound on `claimed_on_exit`.
const CLAIMED_ON_EXIT_MAX: usize = 4096;

/// How a procd admits and steals work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The worker's cores.
    pub cores: i64,
    /// BE procs are admitted while the node's measured busy cores are under
    /// this percentage of `cores` (σOS Figure 3-5). 100: fill the idle cores.
    pub be_util_pct: u32,
    /// A proc placed on another worker and still unclaimed this long after
    /// may be stolen (σOS Figure 3-6).
    pub steal_after: Duration,
    /// Bound and logging of the mailboxes of the procs this procd runs.
    pub mailbox: tabos_kernel::ipc::MailboxOptions,
    /// Bytes of the realm's procs' logs kept ([`LOGS_PER_REALM_MAX`] by
    /// default); the oldest go first. Enforced by the appends this node
    /// makes.
    pub logs_per_realm_max: u64,
}

/// Most a BE utilization target may be, in percent (oversubscription of 4×).
pub const BE_UTIL_PCT_MAX: u32 = 400;

/// How to stop a running proc.
#[derive(Debug, Clone)]
enum Running {
    /// A Linux process id, and what reads its usage.
    Native(u32, crate::confine::Probe),
    /// A wasm run's stop handle, and the notify that ends a host call's wait.
    Wasm(StopHandle, Arc<tokio::sync::Notify>),
}

/// Where the node serves its API.
#[derive(Debug, Clone)]
pub struct NodeAddr {
    /// The TCP address, `host:port`.
    pub tcp: String,
    /// The node's local Unix socket, when it serves one: what a native
    /// proc on the node reaches it by.
    pub local: Option<PathBuf>,
}

impl NodeAddr {
    /// The TABOS_ADDR of a native proc: the local socket — bound into its
    /// jail at [`crate::jail::NODE_SOCKET`], or at its own path for a proc
    /// running as the node's own user (who may enter the data directory) —
    /// else TCP.
    fn for_native(&self, jailed: bool, own_user: bool) -> String {
        match &self.local {
            Some(_) if jailed => {
                format!("{}{}", tabos_client::UNIX_SCHEME, crate::jail::NODE_SOCKET)
            }
            Some(p) if own_user => format!("{}{}", tabos_client::UNIX_SCHEME, p.display()),
            _ => self.tcp.clone(),
        }
    }
}

impl Procd {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        files: tabos_kernel::fs::files::Files,
        procedures: tabos_kernel::procedures::Procedures,
        realm: &str,
        spec: tabos_kernel::sched::WorkerSpec,
        logs: PathBuf,
        addr: NodeAddr,
        sandbox: Sandbox,
        policy: Policy,
        auth: crate::auth::Auth,
        shared: Shared,
        load: Arc<crate::load::Load>,
        confine: Arc<crate::confine::Confine>,
        grant: Option<Arc<AtomicI64>>,
        be_realm: bool,
    ) -> Arc<Procd> {
        assert!(policy.cores > 0 && policy.be_util_pct <= BE_UTIL_PCT_MAX);
        Arc::new(Procd {
            store,
            files,
            procedures,
            realm: realm.to_string(),
            worker: spec.worker_id,
            mem_mb: spec.mem_mb,
            node_id: spec.node_id,
            logs,
            addr,
            sandbox,
            policy,
            auth,
            running: Mutex::new(HashMap::new()),
            busy_cores: shared.busy_cores,
            load,
            be_waiting: Default::default(),
            confine,
            freed: tokio::sync::Notify::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            claimed_on_exit: Mutex::new(Default::default()),
            grant,
            preemptible: Mutex::new(Vec::new()),
            be_realm,
            lc_slots: shared.lc_slots,
            metrics: shared.metrics,
            code: shared.code,
            programs: shared.programs,
            restartable: Mutex::new(Default::default()),
            fenced: Mutex::new(Default::default()),
        })
    }

    /// Its node has failed to renew its lease for its grace (cut off from
    /// the database): stops every restartable proc it runs, at once,
    /// recording nothing — the cluster will queue them again elsewhere once
    /// the grace and a margin have passed, so they must not run here too.
    /// Returns their pids, for the node to queue again itself should it
    /// reach the database first.
    pub fn fence(&self) -> Vec<Pid> {
        let restartable: Vec<Pid> = self
            .restartable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        let mut stopped = Vec::new();
        for pid in restartable {
            if let Some(r) = running.get(&pid) {
                fenced.insert(pid.clone());
                match r {
                    Running::Native(os_pid, _) => signal_group(*os_pid, libc::SIGKILL),
                    Running::Wasm(stop, woken) => {
                        stop.stop();
                        woken.notify_one();
                    }
                }
                stopped.push(pid);
            }
        }
        stopped
    }

    /// The worker's cores now: its grant in an elastic realm.
    fn cores(&self) -> i64 {
        match &self.grant {
            Some(g) => g.load(Ordering::SeqCst),
            None => self.policy.cores,
        }
    }

    /// Its grant changed (the node updated it and registered the worker
    /// with it): preemptible procs beyond it are evicted, newest first —
    /// σOS's eviction when the cluster manager takes cores back — and the
    /// claim loop looks again (the grant may have grown).
    pub async fn regranted(self: &Arc<Self>) {
        let cores = self.cores();
        let mut busy = self.busy_cores.load(Ordering::SeqCst);
        let victims: Vec<Pid> = if cores == 0 {
            // Withdrawn: the node no longer serves the realm; everything it
            // runs here goes, procs of no cores too (a job's coordinator),
            // so the worker can stop.
            self.running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned()
                .collect()
        } else {
            let be = self.preemptible.lock().unwrap_or_else(|e| e.into_inner());
            let mut out = Vec::new();
            for (pid, c) in be.iter().rev() {
                if busy <= cores {
                    break;
                }
                if *c > 0 {
                    busy -= c;
                    out.push(pid.clone());
                }
            }
            out
        };
        for pid in victims {
            // Through the kernel, so the proc ends as evicted (and its
            // waiters and job see why).
            if let Err(e) = procs::evict(&self.store, &self.realm, &pid).await {
                tracing::warn!(worker = %self.worker, "cannot evict {pid}: {e}");
            }
        }
        self.freed.notify_one();
    }

    /// Waits (at most `max`) until what it ran has ended — killed procs
    /// reaped, wasm runs returned — so that a node that stops gives its
    /// procs back only once no copy of them runs here.
    async fn until_idle(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        while !self.idle() && tokio::time::Instant::now() < deadline {
            // In memory only: the run tasks untrack as they reap.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !self.idle() {
            tracing::warn!(
                worker = %self.worker, "{} proc(s) still ending after {max:?}", self.running.lock().unwrap_or_else(|e| e.into_inner()).len());
        }
    }

    /// Whether it runs nothing now.
    pub fn idle(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Stops every proc this procd runs, at once: native ones' process
    /// groups get SIGKILL, wasm ones end at their next back-edge or host
    /// call (they run on the node's threads, which the runtime waits for).
    /// For a node that stops, and for a worker declared lost. Returns how
    /// many.
    fn kill_all(&self) -> usize {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        for r in running.values() {
            match r {
                Running::Native(os_pid, _) => signal_group(*os_pid, libc::SIGKILL),
                Running::Wasm(stop, woken) => {
                    stop.stop();
                    woken.notify_one();
                }
            }
        }
        running.len()
    }

    fn track(&self, pid: &Pid, r: Running) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid.clone(), r);
    }

    fn untrack(&self, pid: &Pid) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pid);
    }

    fn tracked(&self, pid: &Pid) -> Option<Running> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(pid)
            .cloned()
    }

    /// Whether `pid` was claimed by an exit transaction (and forgets it).
    fn forget_claimed(&self, pid: &str) -> bool {
        self.claimed_on_exit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pid)
    }

    /// What BE admission allows now: the node's measured busy cores
    /// against the target (σOS Figure 3-5).
    fn admission(&self) -> Admission {
        let target_cores = self.cores() as f64 * f64::from(self.policy.be_util_pct) / 100.0;
        match &self.grant {
            // Its own cores: what its procs hold, not the node's measured
            // load, which other realms' workers share.
            Some(_) => {
                Admission::declared(self.busy_cores.load(Ordering::SeqCst) as f64, target_cores)
            }
            None => Admission::measured(self.load.busy_cores(), target_cores),
        }
    }

    /// Whether this procd could take another proc: a core free, or BE
    /// admission open.
    fn has_room(&self) -> bool {
        self.busy_cores.load(Ordering::SeqCst) < self.cores() || self.admission().admits()
    }

    /// Runs what a claim took, and remembers whether it left BE procs
    /// waiting.
    fn launch_claimed(self: &Arc<Self>, claimed: procs::Claimed) {
        self.be_waiting.store(claimed.be_waiting, Ordering::SeqCst);
        self.launch(claimed.procs);
    }

    fn launch(self: &Arc<Self>, procs: Vec<ProcInfo>) {
        for p in procs {
            self.busy_cores.fetch_add(p.cores, Ordering::SeqCst);
            self.load.launched(&self.realm, p.pid.as_str(), p.cores);
            if p.class == Class::Be || self.be_realm {
                self.preemptible
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((p.pid.clone(), p.cores));
            }
            tokio::spawn(self.clone().run_proc(p));
        }
    }

    /// Claims and runs assigned procs until `shutdown` resolves.
    ///
    /// Woken by: an assignment or eviction on the worker's channel; one of
    /// its procs ending (BE admission may open); a new measurement of the
    /// node's load that opens BE admission while BE procs wait for it; a
    /// placement on another worker (a [`procs::STEAL_HINT`] on this
    /// worker's channel, sent to a few idle workers per placement), which
    /// arms a timer to steal that proc if it is still unclaimed
    /// `steal_after` later (σOS Figure 3-6). Nothing here polls.
    pub async fn run(self: Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        tokio::spawn(self.clone().measure(shutdown.clone()));
        let mut shutdown = shutdown;
        let worker_channel = procs::worker_channel(&self.realm, &self.worker);
        let mut sub = self.store.subscribe(&worker_channel);
        let mut load = self.load.subscribe();
        // Procs left unclaimed on other workers before this procd started
        // (or while it was busy) are looked for right away.
        let mut steal_at = Some(tokio::time::Instant::now());
        let mut missed_placements = false;
        loop {
            match procs::claim(
                &self.store,
                &self.realm,
                &self.worker,
                CLAIM_BATCH_MAX,
                self.admission(),
            )
            .await
            {
                Ok(claimed) => self.launch_claimed(claimed),
                Err(e) => tracing::warn!(worker = %self.worker, "claim failed: {e}"),
            }
            if missed_placements && self.has_room() {
                missed_placements = false;
                steal_at = Some(tokio::time::Instant::now());
            }
            // Wait for the next reason to claim.
            loop {
                let timer = async {
                    match steal_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = shutdown.changed() => {
                        self.stopping.store(true, Ordering::SeqCst);
                        self.kill_all();
                        self.until_idle(STOP_WAIT_MAX).await;
                        return;
                    }
                    note = sub.recv() => match note {
                        Ok(n) if n.payload == tabos_kernel::sched::LAPSED => {
                            self.rejoin().await;
                            break;
                        }
                        Ok(n) if n.payload.starts_with(procs::STEAL_HINT) => {
                            if self.has_room() {
                                let at = tokio::time::Instant::now() + self.policy.steal_after;
                                steal_at = Some(steal_at.map_or(at, |t| t.min(at)));
                            } else {
                                missed_placements = true;
                            }
                        }
                        Ok(n) => match n.payload.strip_prefix("evict ") {
                            Some(pid) => self.evict(pid).await,
                            // Already claimed by the exit that assigned it.
                            None if self.forget_claimed(&n.payload) => {}
                            None => break,
                        },
                        Err(tabos_store::Error::Lagged(_)) => {
                            // Hints may have been among what was missed.
                            sub = self.store.subscribe(&worker_channel);
                            missed_placements = true;
                            break;
                        }
                        Err(_) => return,
                    },
                    () = self.freed.notified() => break,
                    changed = load.changed(), if self.be_waiting.load(Ordering::SeqCst) => {
                        if changed.is_err() {
                            return; // the node is gone
                        }
                        if self.admission().admits() {
                            break;
                        }
                    }
                    () = timer => {
                        steal_at = None;
                        self.steal(&mut steal_at).await;
                    }
                }
            }
        }
    }

    /// Measures its running native procs every [`USAGE_INTERVAL`] until
    /// `stop` changes: their CPU time, the cores they used since the last
    /// measurement and their memory, written in one transaction (a batch
    /// of at most [`procs::LIVE_USAGE_BATCH_MAX`]) for `tabos top`, and
    /// their memory summed into the node's [`Load`](crate::load::Load) for
    /// its heartbeat. A measurement on a clock, as the node's load is:
    /// nothing in the database changes when a proc's use does.
    async fn measure(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(USAGE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Each proc's CPU time at the last measurement, and when.
        let mut last: HashMap<Pid, (tokio::time::Instant, i64)> = HashMap::new();
        let key = self.worker.to_string();
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    self.load.record_procs_memory(&key, 0);
                    return;
                }
                _ = ticks.tick() => {}
            }
            let probes: Vec<(Pid, crate::confine::Probe)> = self
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter_map(|(pid, r)| match r {
                    Running::Native(_, probe) => Some((pid.clone(), probe.clone())),
                    Running::Wasm(..) => None,
                })
                .collect();
            if probes.is_empty() {
                last.clear();
                self.load.record_procs_memory(&key, 0);
                continue;
            }
            let now = tokio::time::Instant::now();
            let samples = tokio::task::spawn_blocking(move || {
                probes
                    .into_iter()
                    .map(|(pid, probe)| (pid, probe.sample()))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            let mut next = HashMap::with_capacity(samples.len());
            let mut memory = 0i64;
            let mut live = Vec::with_capacity(samples.len());
            for (pid, s) in samples {
                let cores = match (s.cpu_us, last.get(&pid)) {
                    (Some(cpu), Some(&(then, before))) => {
                        let wall = now.duration_since(then).as_secs_f64();
                        (wall > 0.0).then(|| ((cpu - before) as f64 / 1e6 / wall).max(0.0))
                    }
                    _ => None,
                };
                if let Some(cpu) = s.cpu_us {
                    next.insert(pid.clone(), (now, cpu));
                }
                memory = memory.saturating_add(s.mem_bytes.unwrap_or(0));
                let usage = procs::LiveUsage {
                    cpu_us: s.cpu_us,
                    cpu_cores: cores,
                    mem_bytes: s.mem_bytes,
                };
                live.push((pid, usage));
            }
            last = next;
            self.load.record_procs_memory(&key, memory);
            for batch in live.chunks(procs::LIVE_USAGE_BATCH_MAX) {
                if let Err(e) =
                    procs::record_live_usage(&self.store, &self.realm, batch.to_vec()).await
                {
                    tracing::debug!(worker = %self.worker, "cannot record procs' usage: {e}");
                }
            }
        }
    }

    /// Steals what is stealable now and re-arms the timer for the next
    /// proc that will become stealable.
    async fn steal(self: &Arc<Self>, steal_at: &mut Option<tokio::time::Instant>) {
        if !self.has_room() {
            return;
        }
        let after_us = self.policy.steal_after.as_micros() as i64;
        match procs::steal(
            &self.store,
            &self.realm,
            &self.worker,
            self.admission(),
            after_us,
        )
        .await
        {
            Ok(stolen) => {
                self.launch(stolen.procs);
                if let Some(next_us) = stolen.next_us {
                    let wait = (next_us - tabos_store::now_us()).max(0) as u64;
                    *steal_at = Some(tokio::time::Instant::now() + Duration::from_micros(wait));
                }
            }
            Err(e) => tracing::warn!(worker = %self.worker, "steal failed: {e}"),
        }
    }

    /// Records the end of `p` (called exactly once per proc) and, in the
    /// same transaction, claims what may run next on the freed cores; wakes
    /// the claim loop only if nothing was claimed (there may be room to
    /// steal into).
    async fn record_exit(
        self: &Arc<Self>,
        p: &ProcInfo,
        state: State,
        status: Option<i64>,
        error: Option<String>,
    ) {
        self.record_end(p, state, status, error, None, false).await
    }

    /// Revokes proc `pid`'s credentials on their own (when its end is not
    /// recorded, which revokes them in the same transaction).
    async fn revoke(&self, pid: &Pid) {
        match tabos_kernel::auth::revoke_pid(&self.store, &self.realm, pid).await {
            Ok(ids) => ids.iter().for_each(|id| self.auth.forget(id)),
            Err(e) => tracing::warn!(
                worker = %self.worker, "cannot revoke {pid}'s credential: {e}"),
        }
    }

    /// [`record_exit`](Self::record_exit) of a proc that ran, with what it
    /// used (`usage`), recorded in the same transaction as its end; `ran`:
    /// it ran to its end, and an eviction requested meanwhile makes that
    /// end `evicted` ([`procs::ran_to_end`]).
    async fn record_end(
        self: &Arc<Self>,
        p: &ProcInfo,
        mut state: State,
        status: Option<i64>,
        mut error: Option<String>,
        usage: Option<crate::confine::Usage>,
        ran: bool,
    ) {
        let left = self.busy_cores.fetch_sub(p.cores, Ordering::SeqCst) - p.cores;
        debug_assert!(left >= 0, "busy cores went negative");
        // As `launch` counted it.
        self.load.ended(&self.realm, p.pid.as_str());
        if p.class == Class::Be || self.be_realm {
            self.preemptible
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(pid, _)| *pid != p.pid);
        }
        // The proc's credential dies with it (a wasm proc has none): with
        // its end's record below, or here when its end is not recorded.
        let revoke = p.kind == Kind::Native;
        self.restartable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&p.pid);
        let fenced = || {
            self.fenced
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&p.pid)
        };
        // Stopped with the node, which gives it back: not its end. Or
        // stopped because the node was cut off: queued again, not ended.
        let (stopping, fenced) = (self.stopping.load(Ordering::SeqCst), fenced());
        if stopping || fenced {
            if let Some(u) = usage {
                let (cpu, mem) = (u.cpu_us, u.peak_mem_bytes);
                if let Err(e) =
                    procs::record_usage(&self.store, &self.realm, &p.pid, cpu, mem).await
                {
                    tracing::warn!(
                        worker = %self.worker, "cannot record {}'s usage: {e}", p.pid);
                }
            }
            if revoke {
                self.revoke(&p.pid).await;
            }
            if fenced {
                self.freed.notify_one();
            }
            return;
        }
        let mut spent = procs::Spent {
            cpu_us: usage.and_then(|u| u.cpu_us),
            peak_mem_bytes: usage.and_then(|u| u.peak_mem_bytes),
            revoke,
            ran,
        };
        if p.env
            .iter()
            .any(|(k, _)| k == tabos_kernel::workflows::PROC_ENV)
        {
            // Its workflow is told its end before the end is recorded (so
            // that a crash between them leaves nothing stuck): the
            // eviction is read here, and the end recorded as told.
            if ran {
                let evicted = procs::status(&self.store, &self.realm, &p.pid)
                    .await
                    .is_ok_and(|i| i.evict_requested);
                (state, error) = procs::ran_to_end(state, error, evicted);
                spent.ran = false;
            }
            self.end_workflow(p, state, status, error.as_deref()).await;
        }
        // The database away (a failover, a cut-off node): the end is
        // recorded once it is back — never lost, and never recorded for a
        // proc the cluster has given back meanwhile (the kernel records an
        // end only for a live proc this worker holds).
        let mut pauses =
            tabos_client::retry::Backoff::new(EXIT_RETRY_PAUSE_MIN, EXIT_RETRY_PAUSE_MAX);
        let next = loop {
            let next = procs::exited_and_claim(
                &self.store,
                &self.realm,
                &p.pid,
                state,
                status,
                error.clone(),
                spent,
                &self.worker,
                CLAIM_BATCH_MAX,
                self.admission(),
            )
            .await;
            match next {
                Err(tabos_kernel::Error::Store(e))
                    if e.is_unavailable() && !self.stopping.load(Ordering::SeqCst) =>
                {
                    pauses.wait().await;
                }
                other => break other,
            }
        };
        let next = next.map(|ended| {
            ended.revoked.iter().for_each(|id| self.auth.forget(id));
            if let (Some(m), Some(state)) = (&self.metrics, ended.state) {
                m.proc_ended(&self.realm, p.kind.as_str(), state.as_str());
            }
            ended.claimed
        });
        match next {
            Ok(claimed) if !claimed.procs.is_empty() => {
                let mut set = self
                    .claimed_on_exit
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if set.len() >= CLAIMED_ON_EXIT_MAX {
                    // Entries whose notification was read before they were
                    // added; dropping them costs at most one empty claim.
                    set.clear();
                }
                set.extend(claimed.procs.iter().map(|p| p.pid.to_string()));
                drop(set);
                self.launch_claimed(claimed)
            }
            Ok(claimed) => {
                self.be_waiting.store(claimed.be_waiting, Ordering::SeqCst);
                self.freed.notify_one()
            }
            Err(e) => {
                tracing::error!(
                    worker = %self.worker, "cannot record the end of {}: {e}", p.pid);
                // Its credential goes all the same.
                if revoke {
                    self.revoke(&p.pid).await;
                }
                self.freed.notify_one();
            }
        }
    }

    /// `p`, which runs a workflow of its own, has ended for good: the
    /// workflow, unless it finished it, fails with the proc's end (tried
    /// again while the database is away, as the end itself is).
    async fn end_workflow(
        &self,
        p: &ProcInfo,
        state: State,
        status: Option<i64>,
        error: Option<&str>,
    ) {
        let state = state.as_str();
        let why = match (status, error) {
            (_, Some(e)) => format!("{state}: {e}"),
            (Some(s), None) => format!("{state} with status {s}"),
            (None, None) => state.to_string(),
        };
        let mut pauses =
            tabos_client::retry::Backoff::new(EXIT_RETRY_PAUSE_MIN, EXIT_RETRY_PAUSE_MAX);
        loop {
            let (pid, why, realm) = (p.pid.clone(), why.clone(), self.realm.clone());
            let ended = tabos_kernel::call(&self.store, &self.realm, move |tx| {
                tabos_kernel::workflows::proc_ended_tx(
                    tx,
                    &realm,
                    &pid,
                    &why,
                    tabos_store::now_us(),
                )
            })
            .await;
            match ended {
                Err(tabos_kernel::Error::Store(e))
                    if e.is_unavailable() && !self.stopping.load(Ordering::SeqCst) =>
                {
                    pauses.wait().await;
                }
                Err(e) => {
                    tracing::error!(
                        worker = %self.worker, "cannot end the workflow of {}: {e}", p.pid);
                    return;
                }
                Ok(_) => return,
            }
        }
    }

    async fn run_proc(self: Arc<Self>, p: ProcInfo) {
        // An LC proc holds its cores of the node while it runs (see
        // `lc_slots`); it waits here, claimed, while other realms' LC procs
        // hold them.
        let _cores = match (&self.lc_slots, p.class) {
            (Some(slots), Class::Lc) if p.cores > 0 => {
                let n = u32::try_from(p.cores).unwrap_or(u32::MAX);
                match slots.clone().acquire_many_owned(n).await {
                    Ok(permit) => Some(permit),
                    // Closed: the node is stopping.
                    Err(_) => return,
                }
            }
            _ => None,
        };
        if p.restartable {
            self.restartable
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(p.pid.clone());
        }
        match p.kind {
            Kind::Native => self.run_native(p).await,
            Kind::Wasm => self.run_wasm(p).await,
        }
    }

    /// Starts shipping `p`'s stdout and stderr into the cluster's log.
    fn ship_logs(&self, p: &ProcInfo) -> [(crate::proclog::Sink, crate::proclog::Shipped); 2] {
        let limits = tabos_kernel::logs::Limits {
            stream_max: tabos_kernel::logs::STREAM_BYTES_MAX,
            realm_max: i64::try_from(self.policy.logs_per_realm_max).unwrap_or(i64::MAX),
        };
        [Stream::Stdout, Stream::Stderr].map(|stream| {
            crate::proclog::ship(
                self.store.clone(),
                self.realm.clone(),
                p.pid.clone(),
                stream,
                limits,
            )
        })
    }

    async fn run_native(self: Arc<Self>, p: ProcInfo) {
        // The proc's own credential: its realm, its spawner's user, role
        // member, and its pid; revoked when the proc ends (record_exit).
        let spec = tabos_kernel::auth::Spec {
            pid: Some(p.pid.clone()),
            note: "proc credential".into(),
            scope: p.scope.clone(),
            ..tabos_kernel::auth::Spec::realm(&self.realm, &p.user, Role::Member)
        };
        // Its code, copied from the realm's files into the node's cache
        // (held until it ends: not evicted while it runs).
        let lease = match self.lease_code(&p).await {
            Ok(l) => l,
            Err(msg) => return self.record_exit(&p, State::Failed, None, Some(msg)).await,
        };
        // The program rule (file system calls) and cgroupfs writes are
        // system calls: off the runtime's threads, in one hop.
        let rule = self.may_run(&p, lease.as_ref());
        let (confine, realm, pid) = (self.confine.clone(), self.realm.clone(), p.pid.clone());
        let (cores, mem_mb) = (p.cores, p.mem_mb);
        let (program, host_paths) = (p.program.clone(), p.host_paths.clone());
        let socket = self.addr.local.clone();
        let host_network = p.host_network;
        let code = lease.as_ref().map(|l| (l.dir.clone(), l.file.is_none()));
        let prepare = tokio::task::spawn_blocking(move || {
            rule()?;
            let placement = crate::confine::Placement {
                program: &program,
                host_paths: &host_paths,
                node_socket: socket.as_deref(),
                host_network,
                code: code.as_ref().map(|(d, _)| d.as_path()),
                code_is_cwd: code.as_ref().is_some_and(|(_, cwd)| *cwd),
            };
            confine
                .prepare(&realm, pid.as_str(), cores, mem_mb, &placement)
                .map_err(|e| format!("cannot confine the proc (cgroups, jail): {e}"))
        });
        // The credential's transaction and the confinement's system calls
        // at once: both are on the way to the exec, and neither needs the
        // other. (Refused, its credential goes with the end recorded.)
        let (token, prepared) = tokio::join!(self.auth.create(spec), prepare);
        let prepared = prepared.unwrap_or_else(|e| Err(e.to_string()));
        let token = match token {
            Ok((m, _)) => m.token,
            Err(e) => {
                if let Ok(confined) = prepared {
                    let _ = tokio::task::spawn_blocking(move || confined.finish()).await;
                }
                let msg = format!("cannot make the proc's credential: {e}");
                return self.record_exit(&p, State::Failed, None, Some(msg)).await;
            }
        };
        let mut confined = match prepared {
            Ok(c) => c,
            Err(msg) => return self.record_exit(&p, State::Failed, None, Some(msg)).await,
        };
        let mut cmd =
            tokio::process::Command::new(program_of(&p, lease.as_ref(), confined.jailed()));
        cmd.args(&p.args)
            .envs(p.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("TABOS_PID", p.pid.as_str())
            .env("TABOS_REALM", &self.realm)
            .env("TABOS_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group (pgid = its pid): eviction and the
            // clean-up after its exit reach every process it started.
            .process_group(0)
            .kill_on_drop(true);
        // Unjailed, a tree it was spawned with is its working directory
        // where the node keeps it (a jail has it at CODE_DIR).
        if let (Some(l), false) = (&lease, confined.jailed()) {
            if l.file.is_none() {
                cmd.current_dir(&l.dir);
            }
        }
        cmd.env(
            "TABOS_ADDR",
            self.addr.for_native(confined.jailed(), confined.own_user()),
        );
        confined.apply(&mut cmd);
        let spawned = confined.spawn(&mut cmd).await;
        confined.spawned();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = tokio::task::spawn_blocking(move || confined.finish()).await;
                let msg = format!("cannot start {}: {e}", p.program);
                return self.record_exit(&p, State::Failed, None, Some(msg)).await;
            }
        };
        let tracked = child.id().inspect(|&os_pid| {
            self.track(&p.pid, Running::Native(os_pid, confined.probe(os_pid)));
        });
        // Its output into the cluster's log (each sink held by its pipe's
        // reader only: the shipper ends when the reader does).
        let [(out_sink, out_ship), (err_sink, err_ship)] = self.ship_logs(&p);
        let [out, err] = child.take_output();
        let out = out.map(|s| tokio::spawn(crate::proclog::pipe(s, out_sink)));
        let err = err.map(|s| tokio::spawn(crate::proclog::pipe(s, err_sink)));
        // Its start recorded; the same transaction says whether an
        // eviction was requested before it was tracked (which found
        // nothing to signal then). One requested later finds it tracked.
        match procs::started(&self.store, &self.realm, &p.pid).await {
            Ok(early) => {
                if early && tracked.is_some() {
                    self.clone().evict(p.pid.as_str()).await;
                }
            }
            Err(e) => tracing::warn!(worker = %self.worker, "cannot mark {} started: {e}", p.pid),
        }
        // The proc is its main process: its exit is the child's (waitpid),
        // not the end of its output. What it left running in its group
        // goes with it; output is then drained for a bounded time (a
        // process that left the group may hold the pipe open).
        let status = child.wait().await;
        if let Ok(s) = &status {
            confined.reaped(s);
        }
        if let Some(os_pid) = child.id().or(match self.tracked(&p.pid) {
            Some(Running::Native(pid, _)) => Some(pid),
            _ => None,
        }) {
            signal_group(os_pid, libc::SIGKILL);
        }
        let mut readers: Vec<_> = [out, err].into_iter().flatten().collect();
        let drained = async {
            for h in &mut readers {
                let _ = h.await;
            }
        };
        let _ = tokio::time::timeout(LOG_DRAIN_MAX, drained).await;
        // A reader still held open past that lets go of its sink.
        readers.iter().for_each(tokio::task::JoinHandle::abort);
        // Its output appended before its end is recorded.
        out_ship.finish().await;
        err_ship.finish().await;
        // What is left in its cgroups goes too; then what it used.
        let usage = tokio::task::spawn_blocking(move || confined.finish())
            .await
            .unwrap_or_default();
        self.untrack(&p.pid);
        // It ran to its end: exited, or failed for memory — unless an
        // eviction was requested, which the end's transaction reads
        // (`procs::ran_to_end`).
        match status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                let code = s
                    .code()
                    .map(i64::from)
                    .or_else(|| s.signal().map(|sig| 128 + i64::from(sig)));
                let (state, msg) = match usage.oom_killed {
                    true => (
                        State::Failed,
                        Some(format!(
                            "killed for memory: over its limit of {} MiB",
                            usage.mem_limit.unwrap_or(0) >> 20
                        )),
                    ),
                    false => (State::Exited, None),
                };
                self.record_end(&p, state, code, msg, Some(usage), true)
                    .await;
            }
            Err(e) => {
                let msg = format!("waiting for the process failed: {e}");
                self.record_end(&p, State::Failed, None, Some(msg), Some(usage), false)
                    .await;
            }
        }
    }

    async fn run_wasm(self: Arc<Self>, p: ProcInfo) {
        // Claiming a wasm proc marked it running (Kind::starts_when_claimed).
        debug_assert_eq!(p.state, State::Running);
        let stop = self.sandbox.stop_handle();
        let woken = Arc::new(tokio::sync::Notify::new());
        self.track(&p.pid, Running::Wasm(stop.clone(), woken.clone()));
        let rt = tokio::runtime::Handle::current();
        let evicted = stop.clone();
        let me = self.clone();
        let proc_ = p.clone();
        let [(out_sink, out_ship), (err_sink, err_ship)] = self.ship_logs(&p);
        let lease = match self.lease_code(&p).await {
            Ok(l) => l,
            Err(msg) => {
                out_ship.finish().await;
                err_ship.finish().await;
                self.untrack(&p.pid);
                return self.record_exit(&p, State::Failed, None, Some(msg)).await;
            }
        };
        let rule = self.may_run(&p, lease.as_ref());
        let module = program_of(&p, lease.as_ref(), false);
        // A tree it was spawned with: its preopened `.`, read-only.
        let preopen = lease
            .as_ref()
            .filter(|l| l.file.is_none())
            .map(|l| l.dir.clone());
        // The check, the compile-cache lookup and the run, all blocking,
        // in one go on this thread (see `blocking`).
        let run = move || {
            rule()?;
            let program = me
                .sandbox
                .compile_file(&module)
                .map_err(|e| format!("wasm program {}: {e}", proc_.program))?;
            let mut args = vec![proc_.program.clone()];
            args.extend(proc_.args.iter().cloned());
            let mut env = proc_.env.clone();
            env.push(("TABOS_PID".into(), proc_.pid.to_string()));
            env.push(("TABOS_REALM".into(), me.realm.clone()));
            env.push(("TABOS_ADDR".into(), me.addr.tcp.clone()));
            // The claim that started it made who it acts as.
            let caller = proc_
                .caller
                .clone()
                .ok_or_else(|| format!("{} was not started by a claim", proc_.pid))?;
            let host = ProcHost::new(
                me.store.clone(),
                me.files.clone(),
                me.procedures.clone(),
                me.node_id.to_string(),
                caller,
                me.policy.mailbox,
                rt,
                stop.clone(),
                woken,
            )
            .map_err(|e| e.to_string())?;
            let spec = RunSpec {
                args,
                env,
                stdin: None,
                stdout: Box::new(crate::proclog::ShipWriter::new(out_sink)),
                stderr: Box::new(crate::proclog::ShipWriter::new(err_sink)),
                memory_bytes: wasm_memory_bytes(proc_.mem_mb),
                host: Some(Box::new(host)),
                preopen,
            };
            me.sandbox
                .run(&program, spec, &stop)
                .map_err(|e| e.to_string())
        };
        let ran = blocking(run)
            .await
            .unwrap_or_else(|e| Err(format!("the wasm worker thread failed: {e}")));
        drop(lease);
        // Its output appended before its end is recorded.
        out_ship.finish().await;
        err_ship.finish().await;
        self.untrack(&p.pid);
        match ran {
            // Asked to leave, it exited by itself (a host call it was
            // blocked in returned ECANCELED): evicted, like a native proc
            // that exits on SIGTERM.
            Ok(Outcome::Exited(code)) if evicted.is_stopped() => {
                self.record_exit(&p, State::Evicted, Some(i64::from(code)), None)
                    .await
            }
            Ok(Outcome::Exited(code)) => {
                self.record_exit(&p, State::Exited, Some(i64::from(code)), None)
                    .await
            }
            Ok(Outcome::Stopped) => {
                let msg = "stopped by evict".to_string();
                self.record_exit(&p, State::Evicted, None, Some(msg)).await
            }
            Ok(Outcome::Trapped(msg)) | Err(msg) => {
                self.record_exit(&p, State::Failed, None, Some(msg)).await
            }
        }
    }

    /// Whether `p`'s program may run here: its code (`lease`), or a
    /// program on the node that this node's rule allows
    /// ([`crate::programs`]); the error is the proc's failure. The check
    /// reads the file system (the program's real path): the returned
    /// closure is run where blocking is allowed.
    fn may_run(
        &self,
        p: &ProcInfo,
        lease: Option<&crate::code::Lease>,
    ) -> impl FnOnce() -> Result<(), String> + Send + 'static {
        let check = lease.is_none().then(|| {
            (
                self.programs.clone(),
                p.kind,
                p.program.clone(),
                p.host_paths.clone(),
            )
        });
        move || {
            let Some((programs, kind, program, host_paths)) = check else {
                return Ok(());
            };
            let program = match kind {
                Kind::Native => crate::procs::resolve_program(&program)?,
                Kind::Wasm => PathBuf::from(&program),
            };
            programs
                .check(&program, &host_paths)
                .map(drop)
                .map_err(|e| e.to_string())
        }
    }

    /// A lease on `p`'s code — a tree it was spawned with, or the file of
    /// its `fs:` program — copied from the realm's files as its user; `None`
    /// for a program on the node. The error is the proc's failure.
    async fn lease_code(&self, p: &ProcInfo) -> Result<Option<crate::code::Lease>, String> {
        use crate::code::Source;
        let source = match (&p.code, tabos_kernel::procs::fs_program(&p.program)) {
            (Some(h), _) => Source::Tree(h.clone()),
            (None, Some(path)) => Source::File(path.to_string()),
            (None, None) => return Ok(None),
        };
        let cache = self
            .code
            .as_ref()
            .ok_or("this node keeps no code cache: its code cannot run here")?;
        // Read as its user, unscoped: what its spawner's user may read.
        let who = tabos_kernel::auth::Caller::of_started_proc(&self.realm, &p.pid, &p.user, None)
            .map_err(|e| e.to_string())?;
        cache
            .lease(&self.files, &who, &source)
            .await
            .map(Some)
            .map_err(|e| format!("its code: {e}"))
    }

    /// This worker was declared lost while it was silent (its node stalled,
    /// or lost the database): its procs were failed or placed again
    /// elsewhere, so what it still runs are second copies. They are killed
    /// at once (their ends, reported as usual, change nothing recorded: the
    /// procs are no longer this worker's), and the worker registers again
    /// to take new work.
    async fn rejoin(self: &Arc<Self>) {
        let copies = self.kill_all();
        tracing::warn!(
            worker = %self.worker, "declared lost while silent; killed {} proc(s) it still ran, registering again", copies);
        let spec = tabos_kernel::sched::WorkerSpec {
            worker_id: self.worker.clone(),
            node_id: self.node_id.clone(),
            cores: self.cores().max(1),
            mem_mb: self.mem_mb,
        };
        let (store, realm) = (self.store.clone(), self.realm.clone());
        match tokio::task::spawn_blocking(move || {
            tabos_kernel::procs::register_worker(&store, &realm, &spec)
        })
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(worker = %self.worker, "cannot register again: {e}"),
            Err(e) => tracing::error!(worker = %self.worker, "cannot register again: {e}"),
        }
    }

    /// A native proc gets SIGTERM now and SIGKILL after the grace period if
    /// it is still running; a wasm proc is stopped at its next epoch check.
    async fn evict(self: &Arc<Self>, pid: &str) {
        let Ok(pid) = Pid::new(pid) else { return };
        let os_pid = match self.tracked(&pid) {
            None => return,
            Some(Running::Wasm(stop, woken)) => {
                stop.stop();
                woken.notify_one();
                return;
            }
            Some(Running::Native(os_pid, _)) => os_pid,
        };
        signal_group(os_pid, libc::SIGTERM);
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(EVICT_GRACE).await;
            if let Some(Running::Native(still, _)) = me.tracked(&pid) {
                if still == os_pid {
                    signal_group(os_pid, libc::SIGKILL);
                }
            }
        });
    }
}

/// Signals every process of a native proc's group (its pgid is its main
/// process's pid).
fn signal_group(pgid: u32, sig: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return; // never the whole system or init's group
    }
    // SAFETY: kill takes no pointers. The group is one this procd made for
    // a proc it still tracks (or has just reaped, whose group lives on only
    // while members of it do), so the signal reaches only that proc's
    // processes.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Linear memory a wasm proc may use: its `mem_mb`, or the sandbox's
/// default when it asked for none.
/// The program to run for `p`: a file of its code (in the jail's view
/// when `jailed`, else where the node keeps it), or its own.
fn program_of(p: &ProcInfo, lease: Option<&crate::code::Lease>, jailed: bool) -> PathBuf {
    let Some(l) = lease else {
        return PathBuf::from(&p.program);
    };
    let base = if jailed {
        PathBuf::from(crate::jail::CODE_DIR)
    } else {
        l.dir.clone()
    };
    match &l.file {
        Some(name) => base.join(name),
        None if crate::code::in_code(p.kind, true, &p.program) => {
            base.join(p.program.trim_start_matches("./"))
        }
        None => PathBuf::from(&p.program),
    }
}

/// Runs blocking `f` — a wasm proc, up to its end — on the calling
/// thread where the runtime allows (a multi-threaded one, which hands this
/// worker's other tasks to another thread meanwhile), else on the blocking
/// pool. A hand-off to the pool and the wake back cost a wasm proc's run
/// two thread switches, more than a no-op proc's run itself (measured:
/// ~100 µs of a ~650 µs cycle per proc in a burst). A panic in `f` is an
/// error either way (the proc fails; its end is still recorded).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    if tabos_kernel::may_block_in_place() {
        tokio::task::block_in_place(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
            .map_err(|_| "it panicked".to_string())
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| e.to_string())
    }
}

fn wasm_memory_bytes(mem_mb: i64) -> usize {
    if mem_mb <= 0 {
        WASM_MEMORY_DEFAULT
    } else {
        (mem_mb as usize).saturating_mul(1 << 20)
    }
}

/// Linear memory of a wasm proc that asked for no memory (mem_mb 0).
pub const WASM_MEMORY_DEFAULT: usize = 256 << 20;
