//! Confinement of native procs (issue 17, item 5).
//!
//! When the node runs as root, each native proc runs
//!
//! * as an unprivileged uid and gid of its realm ([`uid_for`]: one per
//!   realm, from [`UID_BASE`]), with no supplementary groups — so it cannot
//!   read the node's data directory (mode 0700) or signal another realm's
//!   procs;
//! * in cgroups of its own (the v1 `memory`, `pids` and `cpu` controllers,
//!   which is what this kind of machine mounts; `cpuacct` for its CPU
//!   time): memory limited to its `mem_mb` (none asked: no limit), at most
//!   [`PIDS_MAX`] tasks, CPU time limited to its cores (0 cores: none).
//!
//! The child joins its cgroups and drops to its uid between fork and exec
//! (writing `0` — itself — to each `tasks` file, so nothing it starts is
//! ever outside them). `tasks`, not `cgroup.procs`: between fork and exec
//! the child has one thread, so moving that thread moves the process, and
//! a thread moving itself skips the kernel's global threadgroup lock,
//! whose write side waits for an RCU grace period — 8 to 36 ms a spawn on
//! this kind of virtual machine (measured), against about 0.1 ms. After the proc ends, whatever is still in its
//! cgroup (a process that left its process group) is killed, its usage is
//! read (CPU time, peak memory, whether the kernel killed it for memory)
//! and its cgroups are removed.
//!
//! And, where the node is root on x86-64 Linux, in a jail of its own
//! ([`crate::jail`]): its own mount, pid, IPC and UTS namespaces, seeing
//! its working directory, the system's directories read-only and the host
//! paths its realm allows, under a seccomp allow-list. [`Confine::describe`]
//! says what is on and what is off.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// First uid (and gid) of realms' procs.
pub const UID_BASE: u32 = 200_000;
/// How many uids realms' procs are spread over.
pub const UID_RANGE: u32 = 100_000;
/// Most tasks (processes and threads) one native proc may have.
pub const PIDS_MAX: i64 = 512;
/// CPU bandwidth period of a proc's `cpu` cgroup, in microseconds.
pub const CPU_PERIOD_US: i64 = 100_000;
/// After a proc ended: how many times its cgroup is swept for processes
/// that outlived it (each killed), and the pause between sweeps for the
/// kernel to reap them.
const SWEEPS_MAX: usize = 8;
const SWEEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);
/// Where the v1 controllers are mounted.
const CGROUP_V1: &str = "/sys/fs/cgroup";

/// The uid (and gid) of `realm`'s procs: stable on every node.
pub fn uid_for(realm: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in realm.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    UID_BASE + h % UID_RANGE
}

/// Removes what node instances whose process is gone left under `base`
/// (their procs' cgroups once empty, then their own directory); a cgroup
/// that still has tasks refuses, and stays.
fn remove_dead_instances(base: &Path) {
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
                    let _ = std::fs::remove_dir(g.path());
                }
            }
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

/// What confinement this node applies.
#[derive(Debug)]
pub struct Confine {
    /// Run procs as their realm's uid (the node is root).
    uids: bool,
    /// This node's directory under each v1 controller it may use.
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    /// Where jails' roots and working directories are made (`None`: no
    /// jails).
    jails: Option<PathBuf>,
    /// Why what is off is off.
    off: Vec<String>,
}

impl Confine {
    /// No confinement (a node told not to confine).
    pub fn none(why: &str) -> Confine {
        Confine {
            uids: false,
            memory: None,
            pids: None,
            cpu: None,
            cpuacct: None,
            jails: None,
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
        let mut controller = |name: &str| -> Option<PathBuf> {
            let base = Path::new(CGROUP_V1).join(name).join("tabos");
            let dir = base.join(&me);
            match std::fs::create_dir_all(&dir) {
                Ok(()) => {
                    remove_dead_instances(&base);
                    Some(dir)
                }
                Err(e) => {
                    c.off
                        .push(format!("no {name} cgroup ({}: {e})", dir.display()));
                    None
                }
            }
        };
        let (memory, pids, cpu, cpuacct) = (
            controller("memory"),
            controller("pids"),
            controller("cpu"),
            controller("cpuacct"),
        );
        c.memory = memory;
        c.pids = pids;
        c.cpu = cpu;
        c.cpuacct = cpuacct;
        if !cfg!(target_arch = "x86_64") {
            c.off
                .push("no jail (namespaces, seccomp): its filter is written for x86-64".into());
        } else if !Path::new("/proc/self/ns/pid").exists()
            || !Path::new("/proc/self/ns/mnt").exists()
        {
            c.off
                .push("no jail: the kernel offers no mount or pid namespaces".into());
        } else {
            // Runs of an earlier instance of this node may have left roots
            // and working directories behind.
            let _ = std::fs::remove_dir_all(run);
            match std::fs::create_dir_all(run) {
                Ok(()) => c.jails = Some(run.to_path_buf()),
                Err(e) => c.off.push(format!("no jail ({}: {e})", run.display())),
            }
        }
        c
    }

    /// The node's own `cpuacct` cgroup, which counts the CPU time of all of
    /// its native procs (what BE admission measures).
    pub fn cpuacct_dir(&self) -> Option<&Path> {
        self.cpuacct.as_deref()
    }

    /// Whether native procs run jailed.
    pub fn jailed(&self) -> bool {
        self.jails.is_some()
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
        let on: Vec<&str> = [
            ("memory", self.memory.is_some()),
            ("pids", self.pids.is_some()),
            ("cpu", self.cpu.is_some()),
            ("cpuacct", self.cpuacct.is_some()),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect();
        if !on.is_empty() {
            lines.push(format!("in cgroups of their own (v1: {})", on.join(", ")));
        }
        if self.jails.is_some() {
            lines.push(format!(
                "in their own mount, pid, IPC and UTS namespaces: they see their working \
                 directory ({}), the system's directories read-only and the host paths their \
                 realm allows",
                crate::jail::WORK_DIR
            ));
            lines.push(format!(
                "under a seccomp allow-list of {} system calls",
                crate::jail::ALLOWED.len()
            ));
        }
        lines.extend(self.off.iter().cloned());
        lines
    }

    /// Makes the cgroups of proc `pid` of `realm` with its limits, and opens
    /// what the child writes itself into.
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
                run, &name, uid, placement,
            )?)),
            None => None,
        };
        let mut p = Prepared {
            jail,
            uid,
            dirs: Vec::new(),
            procs: Vec::new(),
            memory: None,
            pids: None,
            cpuacct: None,
            mem_limit: None,
        };
        let mut group = |base: &Option<PathBuf>| -> std::io::Result<Option<PathBuf>> {
            let Some(base) = base else { return Ok(None) };
            let dir = base.join(&name);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            p.dirs.push(dir.clone());
            Ok(Some(dir))
        };
        let memory = group(&self.memory)?;
        let pids = group(&self.pids)?;
        let cpu = group(&self.cpu)?;
        let cpuacct = group(&self.cpuacct)?;
        if let Some(m) = &memory {
            if mem_mb > 0 {
                let bytes = mem_mb.saturating_mul(1 << 20);
                std::fs::write(m.join("memory.limit_in_bytes"), bytes.to_string())?;
                p.mem_limit = Some(bytes);
            }
        }
        if let Some(d) = &pids {
            std::fs::write(d.join("pids.max"), PIDS_MAX.to_string())?;
        }
        if let Some(d) = &cpu {
            if cores > 0 {
                std::fs::write(d.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string())?;
                std::fs::write(
                    d.join("cpu.cfs_quota_us"),
                    (cores * CPU_PERIOD_US).to_string(),
                )?;
            }
        }
        for d in p.dirs.clone() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("tasks"))?;
            p.procs.push(OwnedFd::from(f));
        }
        p.memory = memory;
        p.pids = pids;
        p.cpuacct = cpuacct;
        Ok(p)
    }
}

impl Drop for Confine {
    /// The node's own cgroup directories go with it (once its procs' are
    /// gone: a directory with children or tasks refuses, and stays for the
    /// next node to remove).
    fn drop(&mut self) {
        for d in [&self.memory, &self.pids, &self.cpu, &self.cpuacct]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// What a proc's jail holds besides the system: its program, the host
/// paths its spawn asked for (and its realm allows), the node's socket.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub program: &'a str,
    pub host_paths: &'a [String],
    /// The node's local socket, bound into the jail at
    /// [`crate::jail::NODE_SOCKET`].
    pub node_socket: Option<&'a std::path::Path>,
}

/// A proc's cgroups, uid and jail, ready for its child.
#[derive(Debug)]
pub struct Prepared {
    jail: Option<std::sync::Arc<crate::jail::Plan>>,
    uid: Option<u32>,
    dirs: Vec<PathBuf>,
    /// `tasks` of each, open for the child to write itself into (see the
    /// module doc for why not `cgroup.procs`).
    procs: Vec<OwnedFd>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    mem_limit: Option<i64>,
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

impl Prepared {
    /// Whether the proc runs in a jail.
    pub fn jailed(&self) -> bool {
        self.jail.is_some()
    }

    /// Whether the proc runs as the node's own user (no uid of its own).
    pub fn own_user(&self) -> bool {
        self.uid.is_none()
    }

    /// Has the child join its cgroups, enter its jail and drop to its uid
    /// before exec.
    pub fn apply(&self, cmd: &mut tokio::process::Command) {
        let fds: Vec<i32> = self.procs.iter().map(|f| f.as_raw_fd()).collect();
        let uid = self.uid;
        let jail = self.jail.clone();
        if jail.is_some() {
            cmd.env("HOME", crate::jail::WORK_DIR).env("TMPDIR", "/tmp");
        }
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only async-signal-safe functions (write, setgroups, setgid,
        // setuid, the jail's system calls, and errno through
        // last_os_error) on values prepared before the fork; it allocates
        // nothing (the Vec and the plan were built before).
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &fds {
                    // "0" is the writing process: the child itself.
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(jail) = &jail {
                    // Drops to `uid` inside, after building the root.
                    return jail.enter(uid);
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

    /// Closes the parent's copies of what the child inherited.
    pub fn spawned(&mut self) {
        self.procs.clear();
    }

    /// After the proc ended: kills what is left in its cgroups (a process
    /// that left its process group), reads its usage and removes the
    /// cgroups.
    pub fn finish(self) -> Usage {
        if let Some(pids) = &self.pids {
            for _ in 0..SWEEPS_MAX {
                let left = std::fs::read_to_string(pids.join("cgroup.procs")).unwrap_or_default();
                let mut any = false;
                for pid in left
                    .lines()
                    .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
                {
                    if pid > 1 {
                        any = true;
                        // SAFETY: kill takes no pointers; every pid listed
                        // is in this proc's own cgroup.
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        }
                    }
                }
                if !any {
                    break;
                }
                std::thread::sleep(SWEEP_PAUSE);
            }
        }
        let read = |dir: &Option<PathBuf>, file: &str| -> Option<String> {
            dir.as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
        };
        let usage = Usage {
            cpu_us: read(&self.cpuacct, "cpuacct.usage")
                .and_then(|s| s.trim().parse::<i64>().ok())
                .map(|ns| ns / 1_000),
            peak_mem_bytes: read(&self.memory, "memory.max_usage_in_bytes")
                .and_then(|s| s.trim().parse::<i64>().ok()),
            oom_killed: read(&self.memory, "memory.oom_control").is_some_and(|s| {
                s.lines()
                    .filter_map(|l| l.strip_prefix("oom_kill "))
                    .any(|n| n.trim().parse::<i64>().unwrap_or(0) > 0)
            }),
            mem_limit: self.mem_limit,
        };
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
        if let Some(jail) = &self.jail {
            for d in &jail.made {
                let _ = std::fs::remove_dir_all(d);
            }
        }
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
