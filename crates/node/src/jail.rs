//! The jail of a native proc (issue 17, item 5; issue 34, item 2): its own
//! mount, pid, IPC, UTS and network namespaces, a root of its own, a
//! seccomp allow-list ([`crate::seccomp`]), its unified cgroup from its
//! first instruction, and a lifeline to the node.
//!
//! A jailed proc sees
//!
//! * the system's directories read-only (`/usr`, `/bin`, `/lib`, `/etc`, …;
//!   [`SYSTEM_DIRS`]), a few devices (`/dev/null`, `zero`, `full`,
//!   `random`, `urandom`), its own `/proc` (its pid namespace only) and a
//!   `/tmp` of its own ([`TMP_BYTES_MAX`], charged to its memory cgroup);
//! * its working directory, [`WORK_DIR`] (read-write, `HOME`), made for
//!   it on the node and removed after it — or, for a proc spawned with
//!   uploaded code, that code at [`CODE_DIR`], read-only (`HOME` stays
//!   [`WORK_DIR`]);
//! * the node's local socket at [`NODE_SOCKET`], its way to the node;
//! * the node's own executable (so a proc may run the tabos CLI) and its
//!   program, when either is a file outside the system's directories
//!   (read-only at its own path; a program only where [`crate::programs`]
//!   allows it, checked before), and the host paths its spawn asked for
//!   and its realm allows (read-only at their own paths);
//!
//! and nothing else: not the node's data directory, logs or block store,
//! not another realm's files or procs.
//!
//! How: between fork and exec the child (P0, in the node's namespaces and
//! cgroup) closes its copy of the node's lifeline and clones P1 into new
//! namespaces — with `clone3(CLONE_INTO_CGROUP)`, straight into the proc's
//! cgroup of the unified tree, which takes none of the locks that moving a
//! process in would (on a kernel without `clone3`, P1 moves itself) — and
//! waits for it, passing on its exit status. P1 — pid 1 of the new pid
//! namespace — brings up its network namespace's loopback, builds the new
//! root in a tmpfs, pivots into it, and clones P2, then reaps orphans until
//! P2 ends (when pid 1 ends, the kernel ends every other process of the
//! namespace); P2 drops to the realm's uid, installs the seccomp filter
//! and execs the program. Every step between fork and exec is a raw
//! system call on values prepared before the fork (nothing allocates).
//! P0 and P1 close every descriptor they hold (P0 all but the lifeline's
//! read end), so the node learns of the exec (or its failure) from P2
//! alone and no pipe is held open by them. P0 ignores SIGTERM, SIGINT and
//! SIGHUP — an eviction's SIGTERM to the group reaches the program (P2,
//! not pid 1) and the proc ends when it does — so the node sees the proc
//! end when the program ends.
//!
//! The lifeline: a pipe whose write end only the node's process holds
//! ([`crate::confine`]). P0 polls its read end beside P1's pidfd; when the
//! node's process ends — a clean stop, a crash or `kill -9` — the kernel
//! closes the write end, the read end hangs up, and P0 kills P1, which
//! takes the whole pid namespace with it. So no proc outlives its node.
//! (A parent-death signal would not do: it follows the *thread* that
//! forked, and the node's threads come and go.)
//!
//! The network: unless its realm allows the host's network, a proc has a
//! network namespace of its own with loopback only — it cannot reach a
//! service that listens on the host's loopback, the node's PostgreSQL, or
//! anything beyond the machine, nor listen where others could reach it;
//! it reaches its node through the node's socket, bound into the jail.
//!
//! The seccomp filter allows a list of system calls that ordinary programs
//! (shells, coreutils, interpreters, tabos' own tasks) use and refuses the
//! rest with EPERM: no mount, pivot_root, swapon, reboot, kexec, modules,
//! ptrace or process_vm_*, bpf, perf_event_open, keyctl, userfaultfd,
//! io_uring, setns or unshare, clock setting, and no `clone` with a
//! namespace flag. With `no_new_privs`, a set-uid program gains nothing.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directories a jailed proc sees read-only, where the host has them
/// (a symlink, as `/bin → usr/bin` on merged-/usr systems, is made a
/// symlink in the jail).
pub const SYSTEM_DIRS: [&str; 9] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];
/// The devices a jailed proc sees.
pub const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];
/// Where a jailed proc finds its node's local socket.
pub const NODE_SOCKET: &str = "/run/tabos/node.sock";
/// The jailed proc's working directory (and `HOME`).
pub const WORK_DIR: &str = "/tabos";
/// Where a jailed proc sees its uploaded code, read-only ([`crate::code`]):
/// its working directory when it was spawned with a tree.
pub const CODE_DIR: &str = "/code";
/// Size of a jailed proc's `/tmp`.
pub const TMP_BYTES_MAX: u64 = 64 << 20;
/// Size of the tmpfs holding the jail's root (its directories and mount
/// points only).
const ROOT_BYTES_MAX: u64 = 1 << 20;

/// Everything the child needs, made before the fork.
#[derive(Debug)]
pub struct Plan {
    root: CString,
    root_data: CString,
    tmp_data: CString,
    dirs: Vec<CString>,
    files: Vec<CString>,
    links: Vec<(CString, CString)>,
    /// (source, target, read-only)
    binds: Vec<(CString, CString, bool)>,
    proc_dir: CString,
    tmp_dir: CString,
    old: CString,
    old_inside: CString,
    work_inside: CString,
    filter: Vec<libc::sock_filter>,
    /// A network namespace of its own (loopback only).
    own_network: bool,
    /// The host directories made for the proc, removed after it.
    pub made: Vec<PathBuf>,
}

fn cstr(p: impl AsRef<Path>) -> std::io::Result<CString> {
    CString::new(p.as_ref().as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))
}

/// `path` inside the jail's root `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn is_system(path: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| path.starts_with(d))
}

impl Plan {
    /// The jail of a proc whose root and working directory are made under
    /// `base` (a directory of the node's) as `name`, owned by `uid`,
    /// running its placement's program, seeing its host paths read-only
    /// and the node's socket at [`NODE_SOCKET`].
    pub fn new(
        base: &Path,
        name: &str,
        uid: Option<u32>,
        placement: &crate::confine::Placement<'_>,
    ) -> std::io::Result<Plan> {
        let (program, host_paths) = (placement.program, placement.host_paths);
        let root = base.join("roots").join(name);
        let work = base.join("work").join(name);
        std::fs::create_dir_all(&root)?;
        std::fs::create_dir_all(&work)?;
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&work, Some(uid), Some(uid))?;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700))?;
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut files: Vec<PathBuf> = Vec::new();
        let mut links = Vec::new();
        let mut binds = Vec::new();
        // Every ancestor of `p` inside the root, in order, once.
        let dir_chain = |p: &Path, dirs: &mut Vec<PathBuf>| {
            let mut acc = PathBuf::from("/");
            for c in p.components().skip(1) {
                acc.push(c);
                let inside = under(&root, &acc);
                if !dirs.contains(&inside) {
                    dirs.push(inside);
                }
            }
        };
        for d in SYSTEM_DIRS {
            let host = Path::new(d);
            let Ok(meta) = std::fs::symlink_metadata(host) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                links.push((cstr(std::fs::read_link(host)?)?, cstr(under(&root, host))?));
            } else if meta.is_dir() {
                dir_chain(host, &mut dirs);
                binds.push((cstr(host)?, cstr(under(&root, host))?, true));
            }
        }
        dir_chain(Path::new("/dev"), &mut dirs);
        for d in DEVICES {
            let host = Path::new("/dev").join(d);
            if host.exists() {
                files.push(under(&root, &host));
                binds.push((cstr(&host)?, cstr(under(&root, &host))?, false));
            }
        }
        for (target, link) in [
            ("/proc/self/fd", "/dev/fd"),
            ("/proc/self/fd/0", "/dev/stdin"),
            ("/proc/self/fd/1", "/dev/stdout"),
            ("/proc/self/fd/2", "/dev/stderr"),
        ] {
            links.push((cstr(target)?, cstr(under(&root, Path::new(link)))?));
        }
        for d in ["/proc", "/tmp", WORK_DIR, "/.old"] {
            dir_chain(Path::new(d), &mut dirs);
        }
        // The node's local socket, the proc's way to its node (writable:
        // connecting is a write; the node checks every call's credential).
        if let Some(socket) = placement.node_socket {
            let inside = Path::new(NODE_SOCKET);
            if let Some(parent) = inside.parent() {
                dir_chain(parent, &mut dirs);
            }
            files.push(under(&root, inside));
            binds.push((cstr(socket)?, cstr(under(&root, inside))?, false));
        }
        binds.push((
            cstr(&work)?,
            cstr(under(&root, Path::new(WORK_DIR)))?,
            false,
        ));
        // Its uploaded code, read-only (the node's copy, checked against
        // its hash as it was leased: crate::code).
        if let Some(code) = placement.code {
            dir_chain(Path::new(CODE_DIR), &mut dirs);
            binds.push((cstr(code)?, cstr(under(&root, Path::new(CODE_DIR)))?, true));
        }
        // The program, when it is a file of its own: world-executable
        // regular files only (what any uid could run anyway).
        let mut extra: Vec<(PathBuf, bool)> = Vec::new();
        if program.contains('/') {
            let p = PathBuf::from(program);
            use std::os::unix::fs::PermissionsExt;
            let runnable = std::fs::metadata(&p)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o001 != 0);
            if runnable && p.is_absolute() && !is_system(&p) {
                extra.push((p, false));
            }
        }
        // The node's own executable too: a proc may run the tabos CLI,
        // which finds the node through TABOS_ADDR and TABOS_TOKEN.
        if let Ok(me) = std::env::current_exe() {
            use std::os::unix::fs::PermissionsExt;
            let runnable = std::fs::metadata(&me)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o001 != 0);
            if runnable && !is_system(&me) && !extra.iter().any(|(p, _)| p == &me) {
                extra.push((me, false));
            }
        }
        let mut asked: Vec<&String> = host_paths.iter().collect();
        asked.sort_by_key(|p| p.len()); // a directory before what is under it
        for h in asked {
            let p = PathBuf::from(h);
            // The realm's allowance is checked on the path's text; a
            // symlink on the way would bind whatever it points to.
            if std::fs::canonicalize(&p).is_ok_and(|c| c != p) {
                return Err(std::io::Error::other(format!(
                    "host path {h} goes through a symlink: ask for the path it leads to"
                )));
            }
            if is_system(&p) || p.starts_with(WORK_DIR) || p.starts_with(CODE_DIR) {
                continue; // seen already, or the working directory's place
            }
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => extra.push((p, true)),
                Ok(_) => extra.push((p, false)),
                Err(_) => {} // not there: the proc will find nothing
            }
        }
        for (p, is_dir) in extra {
            if is_dir {
                dir_chain(&p, &mut dirs);
            } else {
                if let Some(parent) = p.parent() {
                    dir_chain(parent, &mut dirs);
                }
                files.push(under(&root, &p));
            }
            binds.push((cstr(&p)?, cstr(under(&root, &p))?, true));
        }
        Ok(Plan {
            root_data: cstr(format!("mode=0755,size={ROOT_BYTES_MAX}"))?,
            tmp_data: cstr(format!("mode=1777,size={TMP_BYTES_MAX}"))?,
            dirs: dirs.iter().map(cstr).collect::<std::io::Result<_>>()?,
            files: files.iter().map(cstr).collect::<std::io::Result<_>>()?,
            links,
            binds,
            proc_dir: cstr(under(&root, Path::new("/proc")))?,
            tmp_dir: cstr(under(&root, Path::new("/tmp")))?,
            old: cstr(under(&root, Path::new("/.old")))?,
            old_inside: cstr("/.old")?,
            work_inside: cstr(if placement.code_is_cwd {
                CODE_DIR
            } else {
                WORK_DIR
            })?,
            root: cstr(&root)?,
            filter: crate::seccomp::native()
                .map(|a| crate::seccomp::program(&a))
                .ok_or_else(|| std::io::Error::other("no seccomp list for this architecture"))?,
            own_network: !placement.host_network,
            made: vec![root, work],
        })
    }

    /// Between fork and exec: enters the jail (see the module doc). Returns
    /// only in P2, after dropping to `uid`; P0 and P1 never return.
    ///
    /// # Safety
    /// Only between fork and exec, in the child; calls only system calls.
    pub unsafe fn enter(&self, uid: Option<u32>, join: &Join) -> std::io::Result<()> {
        // SAFETY: the caller is the child between fork and exec (this fn's contract); every call below is a system call on values made before the fork.
        unsafe {
            if let Some((_, write)) = join.lifeline {
                // Only the node may hold it, or its end would go unheard.
                libc::close(write);
            }
            let mut flags =
                libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
            if self.own_network {
                flags |= libc::CLONE_NEWNET;
            }
            let (p1, joined) = match join.cgroup_dir {
                Some(dir) => match clone_into(flags, dir) {
                    Ok(pid) => (pid, true),
                    // A kernel without clone3 (before 5.7): clone, and
                    // P1 moves itself.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::E2BIG)) => {
                        (clone_child(flags)?, false)
                    }
                    Err(e) => return Err(e),
                },
                None => (clone_child(flags)?, false),
            };
            if p1 > 0 {
                waiter(p1, true, join.lifeline.map(|(read, _)| read)); // P0
            }
            // P1: pid 1 of the new namespace.
            if !joined {
                if let Some(procs) = join.cgroup_procs {
                    if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
            if self.own_network {
                loopback_up()?;
            }
            self.build_root()?;
            let p2 = clone_child(0)?;
            if p2 > 0 {
                waiter(p2, false, None); // P1
            }
            // P2: the program's process.
            if let Some(uid) = uid {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let prog = libc::sock_fprog {
                len: self.filter.len() as u16,
                filter: self.filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        }
    }

    /// P1: the new root, pivoted into.
    unsafe fn build_root(&self) -> std::io::Result<()> {
        // SAFETY: as for `enter`, whose part this is.
        unsafe {
            let check = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            let none = std::ptr::null::<libc::c_char>();
            // Nothing done here propagates back to the node's namespace.
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"tabos".as_ptr(),
                self.root.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                self.root_data.as_ptr().cast(),
            ))?;
            // /proc and /tmp are mounted as soon as they are made, so that the
            // host paths asked for under /tmp land on the jail's /tmp.
            for d in &self.dirs {
                if libc::mkdir(d.as_ptr(), 0o755) != 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                {
                    return Err(std::io::Error::last_os_error());
                }
                if d == &self.proc_dir {
                    check(libc::mount(
                        c"proc".as_ptr(),
                        self.proc_dir.as_ptr(),
                        c"proc".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        std::ptr::null(),
                    ))?;
                } else if d == &self.tmp_dir {
                    check(libc::mount(
                        c"tmpfs".as_ptr(),
                        self.tmp_dir.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        self.tmp_data.as_ptr().cast(),
                    ))?;
                }
            }
            for f in &self.files {
                let fd = libc::open(
                    f.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            for (target, link) in &self.links {
                check(libc::symlink(target.as_ptr(), link.as_ptr()))?;
            }
            for (src, dst, read_only) in &self.binds {
                check(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                if *read_only {
                    check(libc::mount(
                        none,
                        dst.as_ptr(),
                        none,
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID,
                        std::ptr::null(),
                    ))?;
                }
            }
            if libc::syscall(libc::SYS_pivot_root, self.root.as_ptr(), self.old.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            check(libc::chdir(c"/".as_ptr()))?;
            check(libc::umount2(self.old_inside.as_ptr(), libc::MNT_DETACH))?;
            check(libc::rmdir(self.old_inside.as_ptr()))?;
            // The root's own directories are fixed from here on.
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                std::ptr::null(),
            ))?;
            check(libc::chdir(self.work_inside.as_ptr()))
        }
    }
}

/// Why native procs cannot be jailed on this machine, or `None` if they
/// can.
pub fn unavailable() -> Option<String> {
    if crate::seccomp::native().is_none() {
        return Some(format!(
            "no jail (namespaces, seccomp): no seccomp list for {}",
            std::env::consts::ARCH
        ));
    }
    for ns in ["pid", "mnt", "net"] {
        if !Path::new(&format!("/proc/self/ns/{ns}")).exists() {
            return Some(format!("no jail: the kernel offers no {ns} namespaces"));
        }
    }
    None
}

/// The system calls a jailed proc may make here.
pub fn allowed() -> &'static [(&'static str, u32)] {
    crate::seccomp::native().map_or(&[], |a| a.allowed)
}

/// What ties a jailed proc to its cgroup and its node, as descriptors the
/// node holds open across the fork.
#[derive(Debug, Clone, Copy)]
pub struct Join {
    /// Its cgroup of the unified tree (a directory), to be cloned into.
    pub cgroup_dir: Option<RawFd>,
    /// That cgroup's `cgroup.procs`, to move into where clone3 is missing.
    pub cgroup_procs: Option<RawFd>,
    /// The node's lifeline: (read end, write end).
    pub lifeline: Option<(RawFd, RawFd)>,
}

use std::os::fd::RawFd;

/// `clone_args` of clone3(2), as far as `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (linux/sched.h; not in every libc yet).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A fork-like clone3 with `flags` whose child starts in the cgroup of
/// directory `cgroup`; 0 in the child.
unsafe fn clone_into(flags: libc::c_int, cgroup: RawFd) -> std::io::Result<libc::pid_t> {
    let args = CloneArgs {
        flags: flags as u32 as u64 | CLONE_INTO_CGROUP,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup as u64,
    };
    // SAFETY: clone3 with no stack is fork: the child runs on a copy of
    // this stack; `args` lives through the call and is as large as said.
    unsafe {
        let r = libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        );
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(r as libc::pid_t)
    }
}

/// A fork-like clone with `flags` (namespaces); 0 in the child.
unsafe fn clone_child(flags: libc::c_int) -> std::io::Result<libc::pid_t> {
    // SAFETY: clone without CLONE_VM or a new stack is fork: the child runs on a copy of this stack.
    unsafe {
        let r = libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        );
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(r as libc::pid_t)
    }
}

/// P1 in a network namespace of its own: its loopback up (a new namespace
/// has `lo`, down).
unsafe fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket and ioctl on a request made on this stack.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let up = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) == 0 && {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) == 0
        };
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if up {
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// P0 (`outer`) or P1: closes every descriptor (P0 keeps `lifeline`, the
/// read end of the node's lifeline), waits for `child` (P1 also reaps
/// whatever else ends in its namespace; P0 also kills `child` when the
/// lifeline hangs up) and exits as it did: its exit code, or 128 + the
/// signal that ended it.
unsafe fn waiter(child: libc::pid_t, outer: bool, lifeline: Option<RawFd>) -> ! {
    // SAFETY: system calls only, on this process's own descriptors, children and signals.
    unsafe {
        match lifeline {
            Some(keep) => {
                if keep > 0 {
                    libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
                }
                libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
            }
            None => {
                libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
            }
        }
        if outer {
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_IGN);
            }
        }
        // P0 watches the lifeline beside its child: a pidfd becomes
        // readable when the child ends.
        let pidfd = match lifeline {
            Some(_) => libc::syscall(libc::SYS_pidfd_open, child, 0u32) as libc::c_int,
            None => -1,
        };
        if let (Some(line), true) = (lifeline, pidfd >= 0) {
            loop {
                let mut fds = [
                    libc::pollfd {
                        fd: line,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: pidfd,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                if libc::poll(fds.as_mut_ptr(), 2, -1) < 0 {
                    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    break;
                }
                if fds[0].revents != 0 {
                    // The node is gone: so is its proc.
                    libc::kill(child, libc::SIGKILL);
                    break;
                }
                if fds[1].revents != 0 {
                    break;
                }
            }
        }
        loop {
            let mut status: libc::c_int = 0;
            let pid = libc::waitpid(if outer { child } else { -1 }, &mut status, 0);
            if pid < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                libc::_exit(127);
            }
            if pid != child {
                continue; // an orphan reaped by pid 1
            }
            if libc::WIFEXITED(status) {
                libc::_exit(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                libc::_exit(128 + libc::WTERMSIG(status));
            }
        }
    }
}
