//! The jail of a native proc (issue 17, item 5): its own mount, pid, IPC
//! and UTS namespaces, a root of its own, and a seccomp allow-list.
//!
//! A jailed proc sees
//!
//! * the system's directories read-only (`/usr`, `/bin`, `/lib`, `/etc`, …;
//!   [`SYSTEM_DIRS`]), a few devices (`/dev/null`, `zero`, `full`,
//!   `random`, `urandom`), its own `/proc` (its pid namespace only) and a
//!   `/tmp` of its own ([`TMP_BYTES_MAX`], charged to its memory cgroup);
//! * its working directory, [`WORK_DIR`] (read-write, `HOME`), made for
//!   it on the node and removed after it;
//! * the node's local socket at [`NODE_SOCKET`], its way to the node;
//! * the node's own executable (so a proc may run the tabos CLI) and its
//!   program, when either is a file outside the system's directories
//!   (read-only at its own path), and the host paths its spawn asked for
//!   and its realm allows (read-only at their own paths);
//!
//! and nothing else: not the node's data directory, logs or block store,
//! not another realm's files or procs.
//!
//! How: between fork and exec the child (P0, in the node's namespaces)
//! clones P1 into new namespaces and waits for it, passing on its exit
//! status; P1 — pid 1 of the new pid namespace — builds the new root in a
//! tmpfs, pivots into it, and clones P2, then reaps orphans until P2 ends
//! (when pid 1 ends, the kernel ends every other process of the
//! namespace); P2 drops to the realm's uid, installs the seccomp filter
//! and execs the program. Every step between fork and exec is a raw
//! system call on values prepared before the fork (nothing allocates).
//! P0 and P1 close every descriptor they hold, so the node learns of the
//! exec (or its failure) from P2 alone and no pipe is held open by them.
//! P0 ignores SIGTERM, SIGINT and SIGHUP — an eviction's SIGTERM to the
//! group reaches the program (P2, not pid 1) and the proc ends when it
//! does — so the node sees the proc end when the program ends.
//!
//! The seccomp filter ([`filter`]) allows a list of system calls that
//! ordinary programs (shells, coreutils, interpreters, tabos' own tasks)
//! use and refuses the rest with EPERM: no mount, pivot_root, swapon,
//! reboot, kexec, modules, ptrace or process_vm_*, bpf, perf_event_open,
//! keyctl, userfaultfd, io_uring, setns or unshare, clock setting, and no
//! `clone` with a namespace flag (`clone3` is ENOSYS, so libc falls back
//! to `clone`, whose flags the filter can read). With `no_new_privs`, a
//! set-uid program gains nothing.

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
            if is_system(&p) || p.starts_with(WORK_DIR) {
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
            work_inside: cstr(WORK_DIR)?,
            root: cstr(&root)?,
            filter: filter(),
            made: vec![root, work],
        })
    }

    /// Between fork and exec: enters the jail (see the module doc). Returns
    /// only in P2, after dropping to `uid`; P0 and P1 never return.
    ///
    /// # Safety
    /// Only between fork and exec, in the child; calls only system calls.
    pub unsafe fn enter(&self, uid: Option<u32>) -> std::io::Result<()> {
        // SAFETY: the caller is the child between fork and exec (this fn's contract); every call below is a system call on values made before the fork.
        unsafe {
            let flags =
                libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
            let p1 = clone_child(flags)?;
            if p1 > 0 {
                waiter(p1, true); // P0
            }
            // P1: pid 1 of the new namespace.
            self.build_root()?;
            let p2 = clone_child(0)?;
            if p2 > 0 {
                waiter(p2, false); // P1
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

/// P0 (`outer`) or P1: closes every descriptor, waits for `child` (P1
/// also reaps whatever else ends in its namespace) and exits as it did:
/// its exit code, or 128 + the signal that ended it.
unsafe fn waiter(child: libc::pid_t, outer: bool) -> ! {
    // SAFETY: system calls only, on this process's own descriptors, children and signals.
    unsafe {
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        if outer {
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_IGN);
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

// seccomp_data offsets and BPF opcodes (linux/filter.h, linux/seccomp.h).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LO: u32 = 16;
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_BIT: u32 = 0x4000_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Every namespace flag of clone(2).
const CLONE_NEW_ANY: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32
    | 0x80; // CLONE_NEWTIME

/// The system calls a jailed program may make (x86-64).
pub const ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_open,
    libc::SYS_close,
    libc::SYS_stat,
    libc::SYS_fstat,
    libc::SYS_lstat,
    libc::SYS_poll,
    libc::SYS_lseek,
    libc::SYS_mmap,
    libc::SYS_mprotect,
    libc::SYS_munmap,
    libc::SYS_brk,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_ioctl,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_access,
    libc::SYS_pipe,
    libc::SYS_select,
    libc::SYS_sched_yield,
    libc::SYS_mremap,
    libc::SYS_msync,
    libc::SYS_mincore,
    libc::SYS_madvise,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_pause,
    libc::SYS_nanosleep,
    libc::SYS_getitimer,
    libc::SYS_alarm,
    libc::SYS_setitimer,
    libc::SYS_getpid,
    libc::SYS_sendfile,
    libc::SYS_socket,
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_shutdown,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_socketpair,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_execve,
    libc::SYS_exit,
    libc::SYS_wait4,
    libc::SYS_kill,
    libc::SYS_uname,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semctl,
    libc::SYS_shmdt,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_getdents,
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_rename,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_creat,
    libc::SYS_link,
    libc::SYS_unlink,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_umask,
    libc::SYS_gettimeofday,
    libc::SYS_getrlimit,
    libc::SYS_getrusage,
    libc::SYS_sysinfo,
    libc::SYS_times,
    libc::SYS_getuid,
    libc::SYS_getgid,
    libc::SYS_geteuid,
    libc::SYS_getegid,
    libc::SYS_setpgid,
    libc::SYS_getppid,
    libc::SYS_getpgrp,
    libc::SYS_setsid,
    libc::SYS_getgroups,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_getpgid,
    libc::SYS_getsid,
    libc::SYS_capget,
    libc::SYS_rt_sigpending,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_sigsuspend,
    libc::SYS_sigaltstack,
    libc::SYS_utime,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_getpriority,
    libc::SYS_setpriority,
    libc::SYS_sched_setparam,
    libc::SYS_sched_getparam,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_sched_rr_get_interval,
    libc::SYS_prctl,
    libc::SYS_arch_prctl,
    libc::SYS_setrlimit,
    libc::SYS_sync,
    libc::SYS_gettid,
    libc::SYS_readahead,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_tkill,
    libc::SYS_time,
    libc::SYS_futex,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getaffinity,
    libc::SYS_io_setup,
    libc::SYS_io_destroy,
    libc::SYS_io_getevents,
    libc::SYS_io_submit,
    libc::SYS_io_cancel,
    libc::SYS_getdents64,
    libc::SYS_set_tid_address,
    libc::SYS_restart_syscall,
    libc::SYS_semtimedop,
    libc::SYS_fadvise64,
    libc::SYS_timer_create,
    libc::SYS_timer_settime,
    libc::SYS_timer_gettime,
    libc::SYS_timer_getoverrun,
    libc::SYS_timer_delete,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_exit_group,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_ctl,
    libc::SYS_tgkill,
    libc::SYS_utimes,
    libc::SYS_waitid,
    libc::SYS_inotify_init,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    libc::SYS_openat,
    libc::SYS_mkdirat,
    libc::SYS_fchownat,
    libc::SYS_futimesat,
    libc::SYS_newfstatat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_fchmodat,
    libc::SYS_faccessat,
    libc::SYS_pselect6,
    libc::SYS_ppoll,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_sync_file_range,
    libc::SYS_vmsplice,
    libc::SYS_utimensat,
    libc::SYS_epoll_pwait,
    libc::SYS_signalfd,
    libc::SYS_timerfd_create,
    libc::SYS_eventfd,
    libc::SYS_fallocate,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    libc::SYS_accept4,
    libc::SYS_signalfd4,
    libc::SYS_eventfd2,
    libc::SYS_epoll_create,
    libc::SYS_epoll_create1,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_inotify_init1,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_recvmmsg,
    libc::SYS_prlimit64,
    libc::SYS_syncfs,
    libc::SYS_sendmmsg,
    libc::SYS_getcpu,
    libc::SYS_sched_setattr,
    libc::SYS_sched_getattr,
    libc::SYS_renameat2,
    libc::SYS_getrandom,
    libc::SYS_memfd_create,
    libc::SYS_execveat,
    libc::SYS_membarrier,
    libc::SYS_copy_file_range,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_statx,
    libc::SYS_rseq,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
    libc::SYS_close_range,
    libc::SYS_faccessat2,
    libc::SYS_epoll_pwait2,
    libc::SYS_mlock,
    libc::SYS_munlock,
    libc::SYS_mlock2,
    libc::SYS_get_mempolicy,
    libc::SYS_set_mempolicy,
];

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The seccomp program: x86-64 only (anything else is killed), the x32
/// ABI refused, `clone` without namespace flags, `clone3` ENOSYS, the
/// [`ALLOWED`] calls, EPERM for the rest.
pub fn filter() -> Vec<libc::sock_filter> {
    let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let mut f = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
        jump(JGE_K, X32_BIT, 0, 1),
        stmt(RET_K, eperm),
        jump(JEQ_K, libc::SYS_clone3 as u32, 0, 1),
        stmt(RET_K, enosys),
        // clone: allowed without a namespace flag (the flags are its first
        // argument's low word on x86-64).
        jump(JEQ_K, libc::SYS_clone as u32, 0, 5),
        stmt(LD_W_ABS, ARG0_LO),
        jump(JSET_K, CLONE_NEW_ANY, 0, 1),
        stmt(RET_K, eperm),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, eperm), // (not reached)
    ];
    // Each allowed call: equal → the next instruction (allow), else skip it.
    for &nr in ALLOWED {
        f.push(jump(JEQ_K, nr as u32, 0, 1));
        f.push(stmt(RET_K, SECCOMP_RET_ALLOW));
    }
    f.push(stmt(RET_K, eperm));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_fits_and_refuses_what_it_must() {
        let f = filter();
        assert!(
            f.len() < 4096,
            "BPF programs hold at most 4096 instructions"
        );
        for nr in [
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_keyctl,
            libc::SYS_userfaultfd,
            libc::SYS_io_uring_setup,
            libc::SYS_setns,
            libc::SYS_unshare,
            libc::SYS_init_module,
            libc::SYS_kexec_load,
            libc::SYS_reboot,
            libc::SYS_clock_settime,
            libc::SYS_setuid,
            libc::SYS_chroot,
        ] {
            assert!(!ALLOWED.contains(&nr), "{nr} is allowed");
        }
        let mut sorted = ALLOWED.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ALLOWED.len(), "listed twice");
    }
}
