//! Measured utilisation, for BE admission (σOS Figure 3-5).
//!
//! σOS's procd starts best-effort procs while its machine's measured CPU
//! utilisation is under a target, not while their declared cores fit: a
//! BE proc that declared a core and mostly waits leaves room for others,
//! and one that spins keeps them out. [`Load`] is that measurement for one
//! node, shared by the procds of every realm it serves: every
//! [`SAMPLE_INTERVAL`] the sampler reads the CPU time used since the last
//! sample by
//!
//! * the node's native procs — the cgroup the node makes for them
//!   (`confine`: `cpu.stat` in the unified tree where the host has one,
//!   else v1's `cpuacct`), which counts every proc's processes, including
//!   those of procs that have ended since — and
//! * the node process itself, which runs wasm and JavaScript procs on its
//!   own threads and serves every request;
//!
//! or, where the node has no `cpuacct` cgroup (not root), the machine's
//! busy time from `/proc/stat` (which includes both, and everything else
//! on the machine). The busy cores a procd's admission sees are that
//! measurement plus the declared cores of procs started too recently to be
//! in it ([`Load::busy_cores`]), so a burst of claims cannot overshoot
//! before the next sample shows what the new procs use — less what procs
//! that ended since its window began were measured using, so the cores a
//! proc gives back are free at once, not a sample later (a job's BE
//! reducers start as its last mappers end, not up to a window after).
//!
//! Sampling is a measurement on a clock, not a wait for a change the
//! change feed could announce: nothing in the database changes when a
//! proc's CPU use does.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How often the node measures its CPU use.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
/// Most running procs and recent ends remembered for [`Load::busy_cores`]
/// (each; a bound on memory: a proc past it is left to the measurement).
const LAUNCHES_MAX: usize = 4_096;

/// Where CPU time is read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The node's procs' cgroup in the unified tree (`cpu.stat`'s
    /// `usage_usec`, which keeps what ended children used) plus the node
    /// process's own CPU time.
    Unified(PathBuf),
    /// The node's procs' `cpuacct.usage` (ns) plus the node process's own
    /// CPU time.
    Cgroup(PathBuf),
    /// The machine's busy time (`/proc/stat`).
    Machine,
}

impl Source {
    /// CPU time used so far, in seconds (monotonic for one source).
    fn cpu_seconds(&self) -> Option<f64> {
        match self {
            Source::Unified(dir) => {
                let text = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
                let procs_us = crate::cgroup::keyed(&text, "usage_usec")? as f64;
                Some(procs_us / 1e6 + own_cpu_seconds()?)
            }
            Source::Cgroup(dir) => {
                let procs_ns: f64 = std::fs::read_to_string(dir.join("cpuacct.usage"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
                Some(procs_ns / 1e9 + own_cpu_seconds()?)
            }
            Source::Machine => machine_busy_seconds(),
        }
    }

    /// Says what is measured, for `tabos status`.
    pub fn describe(&self) -> String {
        match self {
            Source::Unified(_) => {
                "the CPU time of the node's procs (cgroup2 cpu.stat) and of the node".into()
            }
            Source::Cgroup(_) => {
                "the CPU time of the node's procs (cpuacct) and of the node".into()
            }
            Source::Machine => "the machine's CPU time (/proc/stat; no cpuacct cgroup)".into(),
        }
    }
}

/// The node process's user + system CPU time, in seconds.
fn own_cpu_seconds() -> Option<f64> {
    // SAFETY: getrusage writes only into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(u.ru_utime) + secs(u.ru_stime))
}

/// The node process's resident memory, from `/proc/self/statm`.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; it touches no memory.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// The machine's busy CPU time (everything but idle and iowait), seconds.
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    if ticks.len() < 5 {
        return None;
    }
    let busy: f64 = ticks.iter().sum::<f64>() - ticks[3] - ticks[4];
    // SAFETY: sysconf takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| busy / hz as f64)
}

#[derive(Debug)]
struct State {
    /// Cores busy over the last sample's window.
    measured: f64,
    /// Start of that window: a proc launched before it is in the measure.
    window_start: Instant,
    /// End of that window (when it was measured).
    window_end: Instant,
    /// Running procs by realm and pid: when each was launched and the
    /// cores it declared.
    running: std::collections::HashMap<(String, String), (Instant, f64)>,
    /// Procs ended since the window began: launched, ended, declared cores.
    ends: VecDeque<(Instant, Instant, f64)>,
    /// The declared cores of the running procs launched since the window
    /// began, and what the ends give back of the window: kept as they
    /// change and made again at each measurement, so that
    /// [`Load::busy_cores`], asked at every claim, costs the same with
    /// thousands of procs running or just ended as with none.
    pending: f64,
    gone: f64,
}

impl State {
    /// What an end gives back of the window: the proc's declared cores
    /// over the part of the window it ran in.
    fn given_back(&self, (launched, ended, cores): (Instant, Instant, f64)) -> f64 {
        let window = self
            .window_end
            .duration_since(self.window_start)
            .as_secs_f64();
        if window <= 0.0 {
            return 0.0;
        }
        let from = launched.max(self.window_start);
        let to = ended.min(self.window_end);
        cores * to.saturating_duration_since(from).as_secs_f64() / window
    }

    /// `pending` and `gone` made again from the procs (a new window).
    fn recount(&mut self) {
        self.pending = self
            .running
            .values()
            .filter(|(at, _)| *at >= self.window_start)
            .map(|(_, c)| c)
            .sum();
        self.gone = self.ends.iter().map(|e| self.given_back(*e)).sum();
    }
}

/// One node's measured load.
#[derive(Debug)]
pub struct Load {
    source: Source,
    state: Mutex<State>,
    /// Told of each new measurement (the busy cores it makes).
    changed: tokio::sync::watch::Sender<f64>,
    /// Memory each of its procds' running procs use, by worker (each
    /// procd's last measurement; see `Procd::measure`).
    procs_memory: Mutex<std::collections::HashMap<String, i64>>,
}

impl Load {
    pub fn new(source: Source) -> Load {
        Load {
            source,
            state: Mutex::new(State {
                measured: 0.0,
                window_start: Instant::now(),
                window_end: Instant::now(),
                running: std::collections::HashMap::new(),
                ends: VecDeque::new(),
                pending: 0.0,
                gone: 0.0,
            }),
            changed: tokio::sync::watch::channel(0.0).0,
            procs_memory: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Records the memory a procd's running procs use (0 forgets it).
    pub fn record_procs_memory(&self, worker: &str, bytes: i64) {
        let mut m = self.procs_memory.lock().unwrap_or_else(|e| e.into_inner());
        if bytes > 0 {
            m.insert(worker.to_string(), bytes);
        } else {
            m.remove(worker);
        }
    }

    /// Memory the node uses: its own resident memory (which holds its wasm
    /// and JavaScript procs) and its native procs' last measurement.
    pub fn memory_used_bytes(&self) -> Option<i64> {
        let own = i64::try_from(resident_bytes()?).ok()?;
        let procs: i64 = self
            .procs_memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum();
        Some(own.saturating_add(procs))
    }

    /// What is measured.
    pub fn source(&self) -> &Source {
        &self.source
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Busy cores now: the last measurement, plus the declared cores of
    /// running procs launched since its window began (not, or only partly,
    /// in it), less what procs that ended since it began added to it — their
    /// declared cores over the part of the window they ran in (at most what
    /// they used): a proc gives its cores back as it ends.
    pub fn busy_cores(&self) -> f64 {
        let s = self.state();
        (s.measured + s.pending - s.gone).max(0.0)
    }

    /// The last measurement alone (for `tabos status`).
    pub fn measured_cores(&self) -> f64 {
        self.state().measured
    }

    /// Records that proc `pid` of `realm`, declaring `cores`, was just
    /// started.
    pub fn launched(&self, realm: &str, pid: &str, cores: i64) {
        let mut s = self.state();
        if s.running.len() < LAUNCHES_MAX {
            let (at, cores) = (Instant::now(), cores.max(0) as f64);
            let before = s
                .running
                .insert((realm.to_string(), pid.to_string()), (at, cores));
            // The same proc launched again replaces its first launch.
            if let Some((was, c)) = before {
                if was >= s.window_start {
                    s.pending -= c;
                }
            }
            if at >= s.window_start {
                s.pending += cores;
            }
        }
    }

    /// Records that proc `pid` of `realm` ended (once for each launch).
    pub fn ended(&self, realm: &str, pid: &str) {
        let mut s = self.state();
        let Some((launched, cores)) = s.running.remove(&(realm.to_string(), pid.to_string()))
        else {
            return;
        };
        if launched >= s.window_start {
            s.pending -= cores;
        }
        if s.ends.len() >= LAUNCHES_MAX {
            if let Some(first) = s.ends.pop_front() {
                s.gone -= s.given_back(first);
            }
        }
        let end = (launched, Instant::now(), cores);
        s.gone += s.given_back(end);
        s.ends.push_back(end);
    }

    /// Records a measurement of `cores` busy over the window from
    /// `window_start` to now, and tells the subscribers.
    fn record(&self, cores: f64, window_start: Instant) {
        let busy = {
            let mut s = self.state();
            s.measured = cores;
            s.window_start = window_start;
            s.window_end = Instant::now().max(window_start);
            // Procs that ended before the window left no trace in it.
            while s
                .ends
                .front()
                .is_some_and(|(_, ended, _)| *ended < window_start)
            {
                s.ends.pop_front();
            }
            s.recount();
            drop(s);
            self.busy_cores()
        };
        self.changed.send_replace(busy);
    }

    /// A receiver told of every new measurement.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<f64> {
        self.changed.subscribe()
    }

    /// Measures every [`SAMPLE_INTERVAL`] until `stop` changes.
    pub async fn sample(self: std::sync::Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<(Instant, f64)> = None;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = ticks.tick() => {}
            }
            let now = Instant::now();
            let source = self.source.clone();
            let Ok(Some(cpu)) = tokio::task::spawn_blocking(move || source.cpu_seconds()).await
            else {
                continue;
            };
            if let Some((then, before)) = last {
                let wall = now.duration_since(then).as_secs_f64();
                if wall > 0.0 {
                    self.record(((cpu - before) / wall).max(0.0), then);
                }
            }
            last = Some((now, cpu));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_counts_until_a_measurement_covers_it() {
        let load = Load::new(Source::Machine);
        let before = Instant::now();
        load.launched("r", "p", 2);
        assert_eq!(load.busy_cores(), 2.0, "declared until measured");
        // A window that began before the launch saw only part of the
        // proc's run: its declared cores still count.
        load.record(0.25, before);
        assert_eq!(load.busy_cores(), 2.25);
        // A window that began after it covers it: the measure (a proc that
        // mostly waits) replaces its declared cores.
        let after = Instant::now() + Duration::from_millis(1);
        load.record(0.25, after);
        assert_eq!(load.busy_cores(), 0.25);
        assert_eq!(load.measured_cores(), 0.25);
        // (Launched after that window began: the window was set 1 ms ahead.)
        std::thread::sleep(Duration::from_millis(2));
        load.launched("r", "q", 1);
        assert_eq!(load.busy_cores(), 1.25);
    }

    #[test]
    fn an_end_gives_back_what_the_proc_added() {
        let load = Load::new(Source::Machine);
        load.launched("r", "a", 1);
        load.launched("r", "b", 1);
        std::thread::sleep(Duration::from_millis(1));
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        // Both ran through the whole window, measured busy.
        load.record(2.0, start);
        assert_eq!(load.busy_cores(), 2.0);
        load.ended("r", "a");
        let busy = load.busy_cores();
        assert!(busy > 0.99 && busy < 1.01, "{busy}");
        load.ended("r", "b");
        assert!(load.busy_cores() < 0.01);
        load.ended("r", "b");
        load.ended("r", "never");
        assert!(
            load.busy_cores() >= 0.0,
            "never below none, an end counted once"
        );
        // Launched after the window began and ended: nothing of it left.
        load.launched("r", "c", 1);
        assert!(load.busy_cores() > 0.99);
        load.ended("r", "c");
        assert!(load.busy_cores() < 0.01);
        // Another realm's proc of the same pid is another proc.
        let load = Load::new(Source::Machine);
        load.launched("x", "p", 1);
        load.launched("y", "p", 1);
        load.ended("x", "p");
        assert_eq!(load.busy_cores(), 1.0);
        // A measurement whose window began after an end covers it.
        let load = Load::new(Source::Machine);
        load.launched("r", "d", 1);
        load.ended("r", "d");
        std::thread::sleep(Duration::from_millis(1));
        load.record(0.75, Instant::now());
        assert_eq!(load.busy_cores(), 0.75);
    }

    /// What `busy_cores` keeps as procs come and go is what counting them
    /// all again gives, across launches, relaunches, ends and windows.
    #[test]
    fn the_kept_sums_are_what_a_recount_gives() {
        let load = Load::new(Source::Machine);
        let agrees = |load: &Load| {
            let kept = load.busy_cores();
            load.state().recount();
            let counted = load.busy_cores();
            assert!(
                (kept - counted).abs() < 1e-9,
                "kept {kept}, counted {counted}"
            );
        };
        for i in 0..200 {
            load.launched("r", &format!("p{i}"), i % 3);
        }
        agrees(&load);
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        for i in 0..100 {
            load.ended("r", &format!("p{i}"));
        }
        load.record(1.5, start);
        agrees(&load);
        for i in 100..150 {
            load.ended("r", &format!("p{i}"));
            load.launched("r", &format!("q{i}"), 2);
        }
        load.launched("r", "p199", 1); // launched again
        agrees(&load);
        std::thread::sleep(Duration::from_millis(2));
        load.record(0.5, Instant::now());
        for i in 150..200 {
            load.ended("r", &format!("p{i}"));
        }
        agrees(&load);
    }

    #[tokio::test]
    async fn subscribers_see_each_measurement() {
        let load = Load::new(Source::Machine);
        let mut rx = load.subscribe();
        load.record(1.5, Instant::now());
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), 1.5);
    }

    #[test]
    fn the_cpu_time_sources_read() {
        let own = own_cpu_seconds().expect("getrusage");
        assert!(own >= 0.0);
        // Busy work shows in the process's own CPU time.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(own_cpu_seconds().unwrap() > own);
        assert!(machine_busy_seconds().expect("/proc/stat") > 0.0);
    }
}
