//! Confinement of native procs (issue 17, item 5; issue 34, item 2).
//!
//! When the node runs as root, each native proc runs
//!
//! * as an unprivileged uid and gid of its realm ([`uid_for`]: one per
//!   realm, from [`UID_BASE`]), with no supplementary groups — so it cannot
//!   read the node's data directory (mode 0700) or signal another realm's
//!   procs;
//! * in a cgroup of its own, in whichever hierarchies the host mounts
//!   ([`crate::cgroup`]): memory limited to its `mem_mb` (none asked: no
//!   limit), at most [`PIDS_MAX`] tasks, CPU time limited to its cores
//!   (0 cores: none). Each limit goes through the hierarchy that holds its
//!   controller: a v1 hierarchy (`memory.limit_in_bytes`, `pids.max`,
//!   `cpu.cfs_quota_us`), or the unified tree (`memory.max`, `pids.max`,
//!   `cpu.max`) on a v2 host, where the node enables those controllers for
//!   its subtree (moving itself into a leaf of its own cgroup first, as the
//!   kernel's "no internal processes" rule asks). Where there is a unified
//!   tree — on a v2 host and on a hybrid one beside the v1 hierarchies — the
//!   proc's cgroup there is also what its membership, its end (`cgroup.kill`,
//!   or `cgroup.freeze` and a signal to each on kernels without it), its
//!   CPU time (`cpu.stat`) and its pressure (PSI) go by.
//!
//! Joining: the child joins the v1 cgroups itself before exec (writing `0`
//! — itself — to each `tasks` file: `tasks`, not `cgroup.procs`, because a
//! thread moving itself skips the kernel's global threadgroup lock, whose
//! write side waits for an RCU grace period — 8 to 36 ms a spawn on this
//! kind of virtual machine, measured, against about 0.1 ms). The unified
//! tree has no such per-thread move for a process, so a jailed proc is
//! *created* in its unified cgroup instead (`clone3(CLONE_INTO_CGROUP)`),
//! which takes no lock; only an unjailed confined proc pays for writing
//! `cgroup.procs`. A jailed proc is started without forking the node
//! ([`crate::jail`]'s module doc says how, and why only its program joins
//! the memory cgroup); an unjailed one is forked by tokio's `Command`.
//!
//! After the proc ends, whatever is still in its cgroup (a process that left
//! its process group) is ended, its usage read (CPU time, peak memory,
//! whether the kernel killed it for memory) and its cgroups removed. A
//! node instance that died leaves its directories behind; the next node to
//! start on the machine ends what is left in them and removes them.
//!
//! And, where the node is root on x86-64 or aarch64 Linux, in a jail of its
//! own ([`crate::jail`]): its own mount, pid, IPC, UTS and — unless its
//! realm allows the host's network — network namespaces, seeing its working
//! directory, the system's directories read-only and the host paths its
//! realm allows, under a seccomp allow-list; and tied to the node by a
//! lifeline, so that it never outlives a node that is killed.
//! [`Confine::describe`] says what is on and what is off.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::cgroup::{self, Hierarchies, Mode};

/// First uid (and gid) of realms' procs.
pub const UID_BASE: u32 = 200_000;
/// How many uids realms' procs are spread over.
pub const UID_RANGE: u32 = 100_000;
/// Most tasks (processes and threads) one native proc may have.
pub const PIDS_MAX: i64 = 512;
/// CPU bandwidth period of a proc's CPU limit, in microseconds.
pub const CPU_PERIOD_US: i64 = 100_000;
/// After a proc ended: how many times its cgroup is looked at for
/// processes that outlived it (each ended), and the pause between looks
/// for the kernel to reap them.
const SWEEPS_MAX: usize = 8;
const SWEEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);
/// The directory each hierarchy's tabos cgroups are made in.
const TABOS_DIR: &str = "tabos";
/// The leaf a v2 node moves itself into, so that its own cgroup may hand
/// controllers to its children.
const NODE_LEAF: &str = "tabos-node";

/// The uid (and gid) of `realm`'s procs: stable on every node.
pub fn uid_for(realm: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in realm.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    UID_BASE + h % UID_RANGE
}

/// Ends and removes what node instances whose process is gone left under
/// `base` — procs that outlived their node (`unified`: by `cgroup.kill`;
/// else a signal to each process listed), then their cgroups, then the
/// instance's own directory.
fn remove_dead_instances(base: &Path, unified: bool) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // `<node-id>.<os pid>.<n>`: the os pid is the second field from the end.
        let os_pid = name.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok());
        let Some(os_pid) = os_pid else { continue };
        if Path::new(&format!("/proc/{os_pid}")).exists() {
            continue; // a live node (this one included)
        }
        if let Ok(groups) = std::fs::read_dir(e.path()) {
            for g in groups.flatten() {
                if g.file_type().is_ok_and(|t| t.is_dir()) {
                    end_all(&g.path(), unified);
                    let _ = std::fs::remove_dir(g.path());
                }
            }
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

/// Ends every process in cgroup `dir` and waits (bounded) for the kernel
/// to reap them: `cgroup.kill` where the unified tree has it; else the
/// cgroup frozen (v2) so nothing forks while each listed process gets
/// SIGKILL, then thawed.
fn end_all(dir: &Path, unified: bool) -> bool {
    let killed = unified && std::fs::write(dir.join("cgroup.kill"), "1").is_ok();
    let frozen = !killed && unified && std::fs::write(dir.join("cgroup.freeze"), "1").is_ok();
    for _ in 0..SWEEPS_MAX {
        let left = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<libc::pid_t> = left
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter(|&p| p > 1)
            .collect();
        if pids.is_empty() {
            return true;
        }
        if !killed {
            for pid in pids {
                // SAFETY: kill takes no pointers; every pid listed is in
                // this proc's own cgroup.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            if frozen {
                // A frozen process dies of SIGKILL only once thawed.
                let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
            }
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
    false
}

/// This node instance's cgroups in the unified tree.
#[derive(Debug)]
struct Unified {
    /// The instance's directory (procs' cgroups are made in it).
    dir: PathBuf,
    /// The limit controllers enabled for procs here (a v2 host's; none on
    /// a hybrid one, whose limits are v1's).
    limits: Vec<&'static str>,
}

/// What confinement this node applies.
#[derive(Debug)]
pub struct Confine {
    /// Run procs as their realm's uid (the node is root).
    uids: bool,
    mode: Mode,
    /// This node's directory under each v1 controller it may use.
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    unified: Option<Unified>,
    /// Where jails' roots and working directories are made (`None`: no
    /// jails).
    jails: Option<PathBuf>,
    /// This node instance's name (`<node-id>.<os pid>.<n>`): what its
    /// realms' kept network namespaces are filed under ([`crate::netns`]),
    /// so that two nodes in one process never trade them.
    instance: String,
    /// The root most jails share, made at the first jailed proc (`None`
    /// in it: it could not be made here, and every root is laid out for
    /// its proc).
    template: std::sync::OnceLock<Option<std::sync::Arc<crate::jail::Template>>>,
    /// The write end of the node's lifeline: held by the node alone, so
    /// that it closes — and every jailed proc's first process hears it —
    /// when the node's process ends in any way ([`crate::jail`]).
    lifeline: Option<(OwnedFd, OwnedFd)>,
    /// Why what is off is off.
    off: Vec<String>,
}

impl Confine {
    /// No confinement (a node told not to confine).
    pub fn none(why: &str) -> Confine {
        Confine {
            uids: false,
            mode: Mode::None,
            memory: None,
            pids: None,
            cpu: None,
            cpuacct: None,
            unified: None,
            jails: None,
            instance: String::new(),
            template: std::sync::OnceLock::new(),
            lifeline: None,
            off: vec![why.to_string()],
        }
    }

    /// What this machine and process allow, for node `node_id`, making
    /// jails under `run` (a directory of the node's own).
    pub fn detect(node_id: &str, run: &Path) -> Confine {
        let mut c = Confine::none("");
        c.off.clear();
        // SAFETY: geteuid takes no arguments and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            c.off.push(
                "the node is not root: native procs run as the node's user, without cgroups".into(),
            );
            return c;
        }
        c.uids = true;
        // One directory per node instance (node ids repeat across
        // processes, and within one in tests): `<node-id>.<os pid>.<n>`.
        static INSTANCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let me = format!(
            "{node_id}.{}.{}",
            std::process::id(),
            INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        c.instance = me.clone();
        let hierarchies = Hierarchies::detect();
        c.mode = hierarchies.mode();
        let mut v1 = |name: &str| -> Option<PathBuf> {
            let h = hierarchies.v1(name)?;
            let base = h.mount.join(TABOS_DIR);
            let dir = base.join(&me);
            match std::fs::create_dir_all(&dir) {
                Ok(()) => {
                    remove_dead_instances(&base, false);
                    Some(dir)
                }
                Err(e) => {
                    c.off
                        .push(format!("no {name} cgroup ({}: {e})", dir.display()));
                    None
                }
            }
        };
        let (memory, pids, cpu, cpuacct) = (v1("memory"), v1("pids"), v1("cpu"), v1("cpuacct"));
        (c.memory, c.pids, c.cpu, c.cpuacct) = (memory, pids, cpu, cpuacct);
        if let Some(h) = &hierarchies.unified {
            // Limits through the unified tree only for the controllers no
            // v1 hierarchy holds (a hybrid host keeps them in v1).
            let wanted: Vec<&'static str> = cgroup::V2_LIMIT_CONTROLLERS
                .into_iter()
                .filter(|n| hierarchies.v1(n).is_none())
                .filter(|n| hierarchies.unified_controllers.iter().any(|c| c == n))
                .collect();
            match unified_instance(h, &me, &wanted) {
                Ok(u) => {
                    if u.limits.len() < wanted.len() {
                        c.off.push(format!(
                            "no {} limits: {} would not hand those controllers to the node's \
                             cgroups (run the node in a cgroup of its own, e.g. a systemd \
                             service with Delegate=yes)",
                            wanted
                                .iter()
                                .filter(|w| !u.limits.contains(w))
                                .copied()
                                .collect::<Vec<_>>()
                                .join(", "),
                            h.own.display()
                        ));
                    }
                    c.unified = Some(u);
                }
                Err(e) => c.off.push(format!(
                    "no cgroups in the unified tree ({}: {e})",
                    h.own.display()
                )),
            }
        }
        match crate::jail::unavailable() {
            Some(why) => c.off.push(why),
            None => {
                // Runs of an earlier instance of this node may have left roots
                // and working directories behind.
                let _ = std::fs::remove_dir_all(run);
                match std::fs::create_dir_all(run).and_then(|()| lifeline()) {
                    Ok(pipe) => {
                        c.jails = Some(run.to_path_buf());
                        c.lifeline = Some(pipe);
                    }
                    Err(e) => c.off.push(format!("no jail ({}: {e})", run.display())),
                }
            }
        }
        c
    }

    /// Where the node's measured CPU use comes from: its procs' cgroup
    /// (unified `cpu.stat`, else v1 `cpuacct`), plus its own process; or
    /// the machine's busy time.
    pub fn load_source(&self) -> crate::load::Source {
        match (&self.unified, &self.cpuacct) {
            (Some(u), _) => crate::load::Source::Unified(u.dir.clone()),
            (None, Some(dir)) => crate::load::Source::Cgroup(dir.clone()),
            (None, None) => crate::load::Source::Machine,
        }
    }

    /// The uid `realm`'s native procs run as here; `None`: the node's own.
    pub fn uid_of(&self, realm: &str) -> Option<u32> {
        self.uids.then(|| uid_for(realm))
    }

    /// The jails' shared root ([`crate::jail::Template`]), made by the
    /// first call — with the node socket's mount point if `with_socket`
    /// — or `None` if it cannot be made here (said once in the log).
    fn template(
        &self,
        run: &Path,
        with_socket: bool,
    ) -> Option<&std::sync::Arc<crate::jail::Template>> {
        self.template
            .get_or_init(|| match crate::jail::Template::make(run, with_socket) {
                Ok(t) => Some(std::sync::Arc::new(t)),
                Err(e) => {
                    tracing::warn!("each jail's root is laid out for its proc: no template ({e})");
                    None
                }
            })
            .as_ref()
    }

    /// Whether native procs run jailed.
    pub fn jailed(&self) -> bool {
        self.jails.is_some()
    }

    /// How the host mounts cgroups.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The pressure (PSI, "some" over the last ten seconds) the node's
    /// procs are under, per resource — `None` without a unified tree.
    pub fn pressure(&self) -> Option<Vec<(&'static str, f64)>> {
        let u = self.unified.as_ref()?;
        let mut out = Vec::new();
        for r in ["cpu", "memory", "io"] {
            let text = std::fs::read_to_string(u.dir.join(format!("{r}.pressure"))).ok();
            if let Some(avg) = text.as_deref().and_then(cgroup::pressure_avg10) {
                out.push((r, avg));
            }
        }
        Some(out)
    }

    /// One line per protection: what is on, and what is off and why.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.uids {
            lines.push(format!(
                "native procs run as their realm's uid ({UID_BASE}..{})",
                UID_BASE + UID_RANGE
            ));
        }
        let v1: Vec<&str> = [
            ("memory", self.memory.is_some()),
            ("pids", self.pids.is_some()),
            ("cpu", self.cpu.is_some()),
            ("cpuacct", self.cpuacct.is_some()),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect();
        if self.uids {
            let mut parts = Vec::new();
            if !v1.is_empty() {
                parts.push(format!("limits through v1 ({})", v1.join(", ")));
            }
            if let Some(u) = &self.unified {
                if !u.limits.is_empty() {
                    parts.push(format!("limits through v2 ({})", u.limits.join(", ")));
                }
                parts.push(format!(
                    "membership, kill, freeze, CPU time and pressure through the unified \
                     tree ({})",
                    u.dir.parent().unwrap_or(&u.dir).display()
                ));
            }
            if !parts.is_empty() {
                lines.push(format!(
                    "in cgroups of their own, host cgroups {}: {}",
                    self.mode,
                    parts.join("; ")
                ));
            }
        }
        if self.jails.is_some() {
            lines.push(format!(
                "in their own mount, pid, IPC, UTS and network namespaces (loopback only, \
                 unless their realm allows the host network): they see their working \
                 directory ({}), the system's directories read-only and the host paths their \
                 realm allows",
                crate::jail::WORK_DIR
            ));
            lines.push(format!(
                "under a seccomp allow-list of {} system calls ({})",
                crate::jail::allowed().len(),
                std::env::consts::ARCH
            ));
            lines.push("ended within moments if the node's process dies (a lifeline)".into());
            if let Some(Some(_)) = self.template.get() {
                lines.push(
                    "jails without host paths, code or a program of their own copy one root \
                     made once (a template)"
                        .into(),
                );
            }
        }
        lines.extend(self.off.iter().cloned());
        lines
    }

    /// Makes the cgroups of proc `pid` of `realm` with its limits, and opens
    /// what the child joins them through.
    pub fn prepare(
        &self,
        realm: &str,
        pid: &str,
        cores: i64,
        mem_mb: i64,
        placement: &Placement<'_>,
    ) -> std::io::Result<Prepared> {
        let name = format!("{realm}.{pid}");
        let uid = self.uids.then(|| uid_for(realm));
        let jail = match &self.jails {
            Some(run) => Some(std::sync::Arc::new(crate::jail::Plan::new(
                run,
                &name,
                uid,
                placement,
                self.template(run, placement.node_socket.is_some()),
            )?)),
            None => None,
        };
        let mut p = Prepared {
            network_key: format!("{}/{realm}", self.instance),
            jail,
            netns: None,
            uid,
            dirs: Vec::new(),
            tasks: Vec::new(),
            memory_tasks: None,
            unified: None,
            unified_dir_fd: None,
            unified_procs: None,
            lifeline: self
                .lifeline
                .as_ref()
                .map(|(r, w)| (r.as_raw_fd(), w.as_raw_fd())),
            memory: None,
            pids: None,
            cpuacct: None,
            mem_limit: None,
            v2_memory: false,
            launch: None,
        };
        let mut group = |base: &Option<PathBuf>| -> std::io::Result<Option<PathBuf>> {
            let Some(base) = base else { return Ok(None) };
            let dir = make_dir(&base.join(&name))?;
            p.dirs.push(dir.clone());
            Ok(Some(dir))
        };
        let memory = group(&self.memory)?;
        let pids = group(&self.pids)?;
        let cpu = group(&self.cpu)?;
        // A proc's CPU time comes from its unified cgroup where there is
        // one (`cpu.stat`): a v1 cpuacct cgroup would be made, joined (a
        // migration) and removed for a number never read.
        let cpuacct = match &self.unified {
            Some(_) => None,
            None => group(&self.cpuacct)?,
        };
        let bytes = (mem_mb > 0).then(|| mem_mb.saturating_mul(1 << 20));
        let quota = (cores > 0).then(|| cores * CPU_PERIOD_US);
        if let (Some(m), Some(bytes)) = (&memory, bytes) {
            std::fs::write(m.join("memory.limit_in_bytes"), bytes.to_string())?;
        }
        if let Some(d) = &pids {
            std::fs::write(d.join("pids.max"), PIDS_MAX.to_string())?;
        }
        if let (Some(d), Some(quota)) = (&cpu, quota) {
            std::fs::write(d.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string())?;
            std::fs::write(d.join("cpu.cfs_quota_us"), quota.to_string())?;
        }
        for d in p.dirs.clone() {
            let f = OwnedFd::from(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("tasks"))?,
            );
            if memory.as_ref() == Some(&d) {
                p.memory_tasks = Some(f);
            } else {
                p.tasks.push(f);
            }
        }
        if let Some(u) = &self.unified {
            let dir = make_dir(&u.dir.join(&name))?;
            // The v2 limits (kernel documentation, cgroup-v2.rst): each only
            // where this tree holds its controller.
            if u.limits.contains(&"memory") {
                if let Some(bytes) = bytes {
                    std::fs::write(dir.join("memory.max"), bytes.to_string())?;
                    // No swap to spill into past it (v1 leaves memsw alone,
                    // but there swap is off unless memsw is accounted).
                    let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                }
                p.v2_memory = true;
            }
            if u.limits.contains(&"pids") {
                std::fs::write(dir.join("pids.max"), PIDS_MAX.to_string())?;
            }
            if let (true, Some(quota)) = (u.limits.contains(&"cpu"), quota) {
                std::fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"))?;
            }
            if p.jail.is_some() {
                // A jailed proc's program is cloned straight into it.
                let fd = std::fs::File::open(&dir)?;
                p.unified_dir_fd = Some(OwnedFd::from(fd));
            } else {
                // Without a jail, the child moves itself in.
                let procs = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))?;
                p.unified_procs = Some(OwnedFd::from(procs));
            }
            p.unified = Some(dir);
        }
        if bytes.is_some() && (memory.is_some() || p.v2_memory) {
            p.mem_limit = bytes;
        }
        p.memory = memory;
        p.pids = pids;
        p.cpuacct = cpuacct;
        Ok(p)
    }
}

/// Makes cgroup directory `dir` (an existing one is reused: a proc run
/// again under its pid).
fn make_dir(dir: &Path) -> std::io::Result<PathBuf> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(dir.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(dir.to_path_buf()),
        Err(e) => Err(e),
    }
}

/// Hands `controllers` to `dir`'s children (its `cgroup.subtree_control`);
/// those it could hand over.
fn enable(dir: &Path, controllers: &[&'static str]) -> Vec<&'static str> {
    controllers
        .iter()
        .copied()
        .filter(|c| std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}")).is_ok())
        .collect()
}

/// This node instance's directory in the unified tree `h`, with the limit
/// controllers of `wanted` handed down to it where the tree lets them be:
/// `<own cgroup>/tabos/<instance>`. A cgroup that holds processes cannot
/// hand controllers to its children (unless it is the root), so the node
/// first moves itself into a leaf of its own, `<own cgroup>/tabos-node`.
fn unified_instance(
    h: &cgroup::Hierarchy,
    me: &str,
    wanted: &[&'static str],
) -> std::io::Result<Unified> {
    let base = &h.own;
    let mut limits = Vec::new();
    if !wanted.is_empty() {
        limits = enable(base, wanted);
        if limits.len() < wanted.len() && base != &h.mount {
            let leaf = make_dir(&base.join(NODE_LEAF))?;
            std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())?;
            limits = enable(base, wanted);
        }
    }
    let tabos = make_dir(&base.join(TABOS_DIR))?;
    limits = enable(&tabos, &limits);
    let dir = make_dir(&tabos.join(me))?;
    limits = enable(&dir, &limits);
    remove_dead_instances(&tabos, true);
    Ok(Unified { dir, limits })
}

/// The node's lifeline: a pipe whose write end only the node holds
/// (close-on-exec, and closed by every jailed proc's first process before
/// anything else), and whose read end each jailed proc's first process
/// polls: it hangs up when the node's process ends.
fn lifeline() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors this process
    // now owns, each once.
    Ok(unsafe {
        (
            std::os::fd::FromRawFd::from_raw_fd(fds[0]),
            std::os::fd::FromRawFd::from_raw_fd(fds[1]),
        )
    })
}

impl Drop for Confine {
    /// The node's own cgroup directories go with it (once its procs' are
    /// gone: a directory with children or tasks refuses, and stays for the
    /// next node to remove), and its realms' kept network namespaces.
    fn drop(&mut self) {
        if !self.instance.is_empty() {
            crate::netns::forget(&format!("{}/", self.instance));
        }
        for d in [&self.memory, &self.pids, &self.cpu, &self.cpuacct]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_dir(d);
        }
        if let Some(u) = &self.unified {
            let _ = std::fs::remove_dir(&u.dir);
        }
    }
}

/// What a proc's jail holds besides the system: its program, the host
/// paths its spawn asked for (and its realm allows), the node's socket,
/// and whether it shares the host's network.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub program: &'a str,
    pub host_paths: &'a [String],
    /// The node's local socket, bound into the jail at
    /// [`crate::jail::NODE_SOCKET`].
    pub node_socket: Option<&'a std::path::Path>,
    /// Its realm allows it the host's network; otherwise it gets a network
    /// namespace with loopback only.
    pub host_network: bool,
    /// The node's copy of its uploaded code ([`crate::code`]), bound
    /// read-only at [`crate::jail::CODE_DIR`].
    pub code: Option<&'a std::path::Path>,
    /// That code is its working directory (a tree it was spawned with, not
    /// the one file of an `fs:` program).
    pub code_is_cwd: bool,
}

/// A proc's cgroups, uid and jail, ready for its child.
#[derive(Debug)]
pub struct Prepared {
    /// Its node instance and realm: whose procs its network namespace may
    /// go to after it ([`crate::netns`]).
    network_key: String,
    jail: Option<std::sync::Arc<crate::jail::Plan>>,
    /// The network namespace a jailed proc joined, given back to its
    /// realm's pool once nothing of it is left ([`crate::netns`]).
    netns: Option<OwnedFd>,
    uid: Option<u32>,
    /// Its v1 cgroups.
    dirs: Vec<PathBuf>,
    /// `tasks` of each, open for the child to write itself into (see the
    /// module doc for why not `cgroup.procs`); the memory hierarchy's
    /// apart (a jailed proc's program joins it alone: see jail::launch).
    tasks: Vec<OwnedFd>,
    memory_tasks: Option<OwnedFd>,
    /// Its cgroup in the unified tree, the directory open (for a jailed
    /// proc's `clone3`) or its `cgroup.procs` open (for an unjailed child,
    /// which joins by itself).
    unified: Option<PathBuf>,
    unified_dir_fd: Option<OwnedFd>,
    unified_procs: Option<OwnedFd>,
    /// The node's lifeline (read end, write end), as raw descriptors the
    /// child uses: they stay open as long as the node's `Confine`.
    lifeline: Option<(RawFd, RawFd)>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    mem_limit: Option<i64>,
    /// Its memory is accounted in the unified tree (a v2 host).
    v2_memory: bool,
    /// A jailed proc's started processes' memory ([`crate::jail::Launch`]).
    launch: Option<crate::jail::Launch>,
}

/// What a proc used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_us: Option<i64>,
    pub peak_mem_bytes: Option<i64>,
    /// The kernel killed a task of it for passing its memory limit.
    pub oom_killed: bool,
    pub mem_limit: Option<i64>,
}

/// Reads what a running proc uses now from its cgroups, or — where it has
/// none (the node is not root) — from its main process's `/proc` entry.
#[derive(Debug, Clone)]
pub struct Probe {
    unified: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    memory: Option<PathBuf>,
    v2_memory: bool,
    /// Its main process, for the fallback.
    os_pid: u32,
}

/// What a running proc uses at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// CPU time so far, µs.
    pub cpu_us: Option<i64>,
    /// Memory in use, bytes.
    pub mem_bytes: Option<i64>,
}

impl Probe {
    /// Reads the proc's usage now (blocking: cgroupfs and procfs reads).
    pub fn sample(&self) -> Sample {
        let read = |dir: &Option<PathBuf>, file: &str| -> Option<String> {
            dir.as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
        };
        let number = |text: Option<String>| text.and_then(|s| s.trim().parse::<i64>().ok());
        let cpu_us = read(&self.unified, "cpu.stat")
            .and_then(|s| cgroup::keyed(&s, "usage_usec"))
            .or_else(|| number(read(&self.cpuacct, "cpuacct.usage")).map(|ns| ns / 1_000));
        let mem_bytes = if self.v2_memory {
            number(read(&self.unified, "memory.current"))
        } else {
            number(read(&self.memory, "memory.usage_in_bytes"))
        };
        let own = (cpu_us.is_none() || mem_bytes.is_none())
            .then(|| process_usage(self.os_pid))
            .flatten();
        Sample {
            cpu_us: cpu_us.or(own.and_then(|o| o.cpu_us)),
            mem_bytes: mem_bytes.or(own.and_then(|o| o.mem_bytes)),
        }
    }
}

/// One process's CPU time and resident memory from `/proc/PID/stat`.
fn process_usage(os_pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{os_pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start past its last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) and 24 (rss), counted from 1, are
    // 11, 12 and 21 here (field 3, the state, is at 0).
    let ticks: i64 = fields.get(11)?.parse::<i64>().ok()? + fields.get(12)?.parse::<i64>().ok()?;
    let rss_pages: i64 = fields.get(21)?.parse().ok()?;
    // SAFETY: sysconf takes no pointers.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    Some(Sample {
        cpu_us: (hz > 0).then(|| ticks * 1_000_000 / hz),
        mem_bytes: Some(rss_pages * page),
    })
}

impl Prepared {
    /// What reads the proc's usage while it runs, once its main process
    /// is `os_pid`.
    pub fn probe(&self, os_pid: u32) -> Probe {
        Probe {
            unified: self.unified.clone(),
            cpuacct: self.cpuacct.clone(),
            memory: self.memory.clone(),
            v2_memory: self.v2_memory,
            os_pid,
        }
    }

    /// Whether the proc runs in a jail.
    pub fn jailed(&self) -> bool {
        self.jail.is_some()
    }

    /// Whether the proc runs as the node's own user (no uid of its own).
    pub fn own_user(&self) -> bool {
        self.uid.is_none()
    }

    /// Its cgroup in the unified tree, if the host has one.
    pub fn unified_dir(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    /// Has the child join its cgroups and drop to its uid before exec (an
    /// unjailed proc, forked by `cmd`); a jailed one gets its jail's `HOME`
    /// and `TMPDIR` here and is started by [`Prepared::spawn`].
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        if self.jail.is_some() {
            cmd.env("HOME", crate::jail::WORK_DIR).env("TMPDIR", "/tmp");
            return;
        }
        let tasks: Vec<RawFd> = self
            .tasks
            .iter()
            .chain(&self.memory_tasks)
            .map(|f| f.as_raw_fd())
            .collect();
        let uid = self.uid;
        let procs = self.unified_procs.as_ref().map(|f| f.as_raw_fd());
        // The descriptor limit the node was given, not the one it raised.
        let nofile = tabos_store::descriptors::inherited_limit();
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only async-signal-safe functions (write, setrlimit,
        // setgroups, setgid, setuid, and errno through last_os_error) on
        // values prepared before the fork; it allocates nothing (the Vec
        // was built before).
        unsafe {
            cmd.pre_exec(move || {
                if let Some((soft, hard)) = nofile {
                    crate::rawsys::set_nofile(soft, hard)?;
                }
                for &fd in tasks.iter().chain(&procs) {
                    // "0" is the writing process: the child itself.
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(uid) = uid {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Starts `cmd` (after [`Prepared::apply`]): a jailed proc without
    /// forking the node ([`crate::jail::launch`]), returning once its
    /// program's exec has succeeded or failed; any other by `cmd` itself.
    pub async fn spawn(&mut self, cmd: &mut tokio::process::Command) -> std::io::Result<Child> {
        let Some(plan) = self.jail.clone() else {
            return cmd.spawn().map(Child::Forked);
        };
        let tasks: Vec<RawFd> = self.tasks.iter().map(|f| f.as_raw_fd()).collect();
        let join = crate::jail::Join {
            cgroup_dir: self.unified_dir_fd.as_ref().map(|f| f.as_raw_fd()),
            memory_tasks: self.memory_tasks.as_ref().map(|f| f.as_raw_fd()),
            lifeline: self.lifeline,
        };
        let started =
            crate::jail::launch(plan, &self.network_key, self.uid, join, tasks, cmd.as_std())?;
        self.launch = Some(started.launch);
        self.netns = started.netns;
        // SAFETY: the pidfd is ours and open for as long as the AsyncFd.
        let pidfd = match unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                started.pidfd,
                tokio::io::Interest::READABLE,
            )
        } {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: our own child, ended and reaped here.
                unsafe {
                    libc::kill(started.pid as libc::pid_t, libc::SIGKILL);
                    libc::waitpid(started.pid as libc::pid_t, &mut 0, 0);
                }
                return Err(e.into());
            }
        };
        let mut child = Jailed {
            pid: started.pid,
            pidfd,
            stdout: Some(started.stdout),
            stderr: Some(started.stderr),
            status: None,
        };
        // End of file: the program's exec succeeded (the report's write
        // end was close-on-exec, and P0 and P1 closed theirs); else the
        // errno of the step that failed.
        let mut report = tokio::net::unix::pipe::Receiver::from_owned_fd(started.report)?;
        let mut errno = Vec::with_capacity(4);
        use tokio::io::AsyncReadExt;
        report.read_to_end(&mut errno).await?;
        match <[u8; 4]>::try_from(errno.as_slice()) {
            Err(_) if errno.is_empty() => Ok(Child::Jailed(child)),
            Ok(e) => {
                let _ = child.wait().await; // P0 exits 127 after it
                Err(std::io::Error::from_raw_os_error(i32::from_ne_bytes(e)))
            }
            Err(_) => {
                let _ = child.wait().await;
                Err(std::io::Error::other("a torn report from the jail"))
            }
        }
    }

    /// Its main process ended with `status`. A jailed proc's P0 that
    /// exited (not killed) did so after reaping P1, which ends only after
    /// P2: nothing runs on their stacks any more.
    pub fn reaped(&mut self, status: &std::process::ExitStatus) {
        if let (Some(l), Some(_)) = (self.launch.as_mut(), status.code()) {
            l.ended();
        }
    }

    /// Closes the parent's copies of what the child inherited.
    pub fn spawned(&mut self) {
        self.tasks.clear();
        self.memory_tasks = None;
        self.unified_dir_fd = None;
        self.unified_procs = None;
    }

    /// After the proc ended: ends what is left in its cgroups (a process
    /// that left its process group), reads its usage and removes the
    /// cgroups.
    pub fn finish(mut self) -> Usage {
        let emptied = match (&self.unified, &self.pids) {
            (Some(u), _) => end_all(u, true),
            (None, Some(pids)) => end_all(pids, false),
            (None, None) => false,
        };
        // Nothing of the proc runs on its first processes' stacks any more
        // (else they are kept: see Launch's drop).
        if let (Some(l), true) = (self.launch.as_mut(), emptied) {
            l.ended();
        }
        // Its network, for the realm's next proc — only when nothing of it
        // runs there any more (else closed here).
        if let (Some(fd), true) = (self.netns.take(), emptied) {
            crate::netns::give_back(&self.network_key, fd);
        }
        self.launch = None;
        let read = |dir: &Option<PathBuf>, file: &str| -> Option<String> {
            dir.as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
        };
        let unified_stat =
            |file: &str, key: &str| read(&self.unified, file).and_then(|s| cgroup::keyed(&s, key));
        let cpu_us = unified_stat("cpu.stat", "usage_usec").or_else(|| {
            read(&self.cpuacct, "cpuacct.usage")
                .and_then(|s| s.trim().parse::<i64>().ok())
                .map(|ns| ns / 1_000)
        });
        let (peak_mem_bytes, oom_killed) = if self.v2_memory {
            let peak = read(&self.unified, "memory.peak")
                .or_else(|| read(&self.unified, "memory.current"))
                .and_then(|s| s.trim().parse::<i64>().ok());
            let oom = unified_stat("memory.events", "oom_kill").unwrap_or(0) > 0;
            (peak, oom)
        } else {
            let peak = read(&self.memory, "memory.max_usage_in_bytes")
                .and_then(|s| s.trim().parse::<i64>().ok());
            let oom = read(&self.memory, "memory.oom_control")
                .and_then(|s| cgroup::keyed(&s, "oom_kill"))
                .unwrap_or(0)
                > 0;
            (peak, oom)
        };
        let usage = Usage {
            cpu_us,
            peak_mem_bytes,
            oom_killed,
            mem_limit: self.mem_limit,
        };
        for d in self.dirs.iter().chain(&self.unified) {
            let _ = std::fs::remove_dir(d);
        }
        if let Some(jail) = &self.jail {
            for d in &jail.made {
                // Most procs leave their directory empty: one rmdir, not a
                // walk of it.
                if std::fs::remove_dir(d).is_err() {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
        }
        usage
    }
}

/// A started native proc's main process.
pub enum Child {
    /// Forked by tokio's `Command` (an unjailed proc).
    Forked(tokio::process::Child),
    /// P0 of a jailed proc ([`crate::jail::launch`]).
    Jailed(Jailed),
}

/// P0 of a jailed proc: its pid, a pidfd to wait on, its output's read
/// ends; killed if dropped before it ended (as `kill_on_drop`).
pub struct Jailed {
    pid: u32,
    pidfd: tokio::io::unix::AsyncFd<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    status: Option<std::process::ExitStatus>,
}

/// One of a proc's output streams, read by its node.
pub type Output = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

impl Child {
    /// Its OS pid, until it has been waited for.
    pub fn id(&self) -> Option<u32> {
        match self {
            Child::Forked(c) => c.id(),
            Child::Jailed(j) => j.status.is_none().then_some(j.pid),
        }
    }

    /// Its standard output and error, once.
    pub fn take_output(&mut self) -> [Option<Output>; 2] {
        match self {
            Child::Forked(c) => [
                c.stdout.take().map(|s| Box::new(s) as Output),
                c.stderr.take().map(|s| Box::new(s) as Output),
            ],
            Child::Jailed(j) => [j.stdout.take(), j.stderr.take()].map(|fd| {
                fd.and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok())
                    .map(|r| Box::new(r) as Output)
            }),
        }
    }

    /// Waits until it has ended.
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Child::Forked(c) => c.wait().await,
            Child::Jailed(j) => j.wait().await,
        }
    }
}

impl Jailed {
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            let mut ready = self.pidfd.readable().await?;
            let mut status: libc::c_int = 0;
            // SAFETY: `status` lives through the call; the pid is our child.
            let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG) };
            match r {
                0 => ready.clear_ready(),
                r if r < 0 => return Err(std::io::Error::last_os_error()),
                _ => self.status = Some(std::process::ExitStatus::from_raw(status)),
            }
        }
    }
}

impl Drop for Jailed {
    fn drop(&mut self) {
        if self.status.is_none() {
            // SAFETY: kill and waitpid on our own child, no pointers kept.
            unsafe {
                libc::kill(self.pid as libc::pid_t, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unified tree's paths against the kernel itself (root, and a
    /// cgroup2 mount — on a hybrid host, the one beside the v1
    /// hierarchies): a process moved into a child cgroup is seen there,
    /// its CPU time is read from `cpu.stat`, its pressure files read,
    /// freezing stops it, and [`end_all`] ends it so the cgroup can go.
    /// The fallback reads this process's own figures.
    #[test]
    fn a_process_usage_is_read_from_proc() {
        let mut spin = 0u64;
        for i in 0..2_000_000u64 {
            spin = spin.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(spin);
        let s = process_usage(std::process::id()).expect("readable");
        assert!(s.mem_bytes.unwrap() > 1 << 20, "{s:?}");
        assert!(s.cpu_us.unwrap() >= 0, "{s:?}");
        assert_eq!(process_usage(u32::MAX), None);
    }

    #[test]
    fn the_unified_tree_works_for_real() {
        let h = Hierarchies::detect();
        let Some(unified) = h.unified.as_ref() else {
            eprintln!("skipped: no cgroup2 tree on this host");
            return;
        };
        // SAFETY: geteuid takes no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: not root, cannot make cgroups");
            return;
        }
        let dir = unified
            .own
            .join(format!("tabos-unit-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .unwrap();
        let fd = procs.as_raw_fd();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "while :; do :; done"]);
        // SAFETY: write(2) on a descriptor opened before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let listed = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            listed.lines().any(|l| l == child.id().to_string()),
            "{listed}"
        );
        let own = std::fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert!(
            own.lines()
                .any(|l| l.starts_with("0::") && l.ends_with(name)),
            "{own}"
        );
        // It spins: its CPU time grows.
        let usage = || {
            let stat = std::fs::read_to_string(dir.join("cpu.stat")).unwrap();
            cgroup::keyed(&stat, "usage_usec").unwrap()
        };
        let first = usage();
        let mut later = first;
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            later = usage();
            if later > first {
                break;
            }
        }
        assert!(later > first, "cpu.stat counts it: {first} then {later}");
        // Pressure, where the kernel keeps it (PSI).
        if let Ok(text) = std::fs::read_to_string(dir.join("cpu.pressure")) {
            assert!(cgroup::pressure_avg10(&text).is_some(), "{text}");
        }
        // Frozen: the kernel says so in cgroup.events.
        std::fs::write(dir.join("cgroup.freeze"), "1").unwrap();
        let mut frozen = false;
        for _ in 0..200 {
            let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap();
            if cgroup::keyed(&events, "frozen") == Some(1) {
                frozen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(frozen, "frozen");
        std::fs::write(dir.join("cgroup.freeze"), "0").unwrap();
        // Ended, all of it, and the cgroup removable.
        end_all(&dir, true);
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed: {status:?}");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn realms_have_stable_distinct_uids_in_range() {
        assert_eq!(uid_for("a"), uid_for("a"));
        assert_ne!(uid_for("alice-co"), uid_for("bob-co"));
        for r in ["a", "default", "x.y-z"] {
            let u = uid_for(r);
            assert!((UID_BASE..UID_BASE + UID_RANGE).contains(&u));
        }
    }
}
