//! The seccomp allow-list of a jailed proc, for x86-64 and aarch64, and the
//! BPF program that enforces it.
//!
//! The lists are tables of (name, number) for both architectures whatever
//! this build's, so that a unit test on either checks both: the same calls
//! allowed on each (but for the legacy calls only x86-64 has, which
//! aarch64's libc makes through the `*at` calls and their like), none of
//! the calls a jail must refuse, no number twice. The program: the
//! build's architecture only (anything else is killed), x86-64's x32 ABI
//! refused, `clone` only without a namespace flag, `clone3` ENOSYS (libc
//! falls back to `clone`, whose flags the filter can read), the listed
//! calls allowed, EPERM for the rest.
//!
//! The listed calls are found by a binary search over ranges of
//! consecutive numbers, not a chain of one comparison per call: when a
//! filter is attached, the kernel (5.11+) runs it for every system call
//! number to build its cache of calls always allowed, under the process's
//! signal lock — with a chain of ~300 comparisons that was a third of a
//! millisecond of every proc's start — and a call the cache does not
//! answer (a refused one, `clone`) runs it again.

/// One architecture's filter parameters.
#[derive(Debug, Clone, Copy)]
pub struct Arch {
    pub name: &'static str,
    /// `AUDIT_ARCH_*`, what `seccomp_data.arch` holds.
    pub audit: u32,
    pub allowed: &'static [(&'static str, u32)],
    pub clone: u32,
    pub clone3: u32,
    /// x86-64 marks x32 calls with this bit of the number; 0 elsewhere.
    pub x32_bit: u32,
}

pub const X86_64_ARCH: Arch = Arch {
    name: "x86_64",
    audit: 0xC000_003E,
    allowed: X86_64,
    clone: 56,
    clone3: 435,
    x32_bit: 0x4000_0000,
};

pub const AARCH64_ARCH: Arch = Arch {
    name: "aarch64",
    audit: 0xC000_00B7,
    allowed: AARCH64,
    clone: 220,
    clone3: 435,
    x32_bit: 0,
};

/// This build's architecture, if the jail knows it.
pub fn native() -> Option<Arch> {
    if cfg!(target_arch = "x86_64") {
        Some(X86_64_ARCH)
    } else if cfg!(target_arch = "aarch64") {
        Some(AARCH64_ARCH)
    } else {
        None
    }
}

/// Calls no jailed proc may make, on any architecture: checked absent
/// from both lists.
pub const REFUSED: &[&str] = &[
    "mount",
    "umount2",
    "pivot_root",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "setns",
    "unshare",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "clock_settime",
    "settimeofday",
    "adjtimex",
    "setuid",
    "setgid",
    "setreuid",
    "setresuid",
    "setgroups",
    "chroot",
    "open_by_handle_at",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
];

// seccomp_data offsets and BPF opcodes (linux/filter.h, linux/seccomp.h).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LO: u32 = 16;
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JGT_K: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
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
/// A BPF program holds at most this many instructions.
pub const PROGRAM_LEN_MAX: usize = 4096;

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

/// The seccomp program for `arch` (see the module doc).
pub fn program(arch: &Arch) -> Vec<libc::sock_filter> {
    let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let mut f = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JEQ_K, arch.audit, 1, 0),
        stmt(RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
    ];
    if arch.x32_bit != 0 {
        f.push(jump(JGE_K, arch.x32_bit, 0, 1));
        f.push(stmt(RET_K, eperm));
    }
    f.extend([
        jump(JEQ_K, arch.clone3, 0, 1),
        stmt(RET_K, enosys),
        // clone: allowed without a namespace flag (its first argument's low
        // word holds the flags on both architectures).
        jump(JEQ_K, arch.clone, 0, 5),
        stmt(LD_W_ABS, ARG0_LO),
        jump(JSET_K, CLONE_NEW_ANY, 0, 1),
        stmt(RET_K, eperm),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, eperm), // (not reached)
    ]);
    search(&mut f, &ranges(arch.allowed), eperm);
    f
}

/// `allowed`'s numbers as sorted, disjoint ranges of consecutive numbers
/// (first, last).
fn ranges(allowed: &[(&str, u32)]) -> Vec<(u32, u32)> {
    let mut nrs: Vec<u32> = allowed.iter().map(|(_, nr)| *nr).collect();
    nrs.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for nr in nrs {
        match out.last_mut() {
            Some((_, last)) if nr == *last + 1 => *last = nr,
            _ => out.push((nr, nr)),
        }
    }
    out
}

/// Appends the search for the call number (in the accumulator) among
/// `ranges`: allowed inside one, `deny` otherwise. Each step halves the
/// ranges: `nr >= first of the upper half` goes on through an
/// unconditional jump (its offset is 32 bits; a conditional one's only 8)
/// past the lower half's code, which follows.
fn search(f: &mut Vec<libc::sock_filter>, ranges: &[(u32, u32)], deny: u32) {
    match ranges {
        [] => f.push(stmt(RET_K, deny)),
        [(first, last)] => f.extend([
            jump(JGE_K, *first, 0, 2),
            jump(JGT_K, *last, 1, 0),
            stmt(RET_K, SECCOMP_RET_ALLOW),
            stmt(RET_K, deny),
        ]),
        _ => {
            let (lower, upper) = ranges.split_at(ranges.len() / 2);
            f.push(jump(JGE_K, upper[0].0, 0, 1));
            let over = f.len();
            f.push(stmt(JA, 0));
            search(f, lower, deny);
            f[over].k = (f.len() - over - 1) as u32;
            search(f, upper, deny);
        }
    }
}

/// The system calls a jailed program may make on x86-64, by name and number
/// (`arch/x86/entry/syscalls/syscall_64.tbl`).
pub const X86_64: &[(&str, u32)] = &[
    ("read", 0),
    ("write", 1),
    ("open", 2),
    ("close", 3),
    ("stat", 4),
    ("fstat", 5),
    ("lstat", 6),
    ("poll", 7),
    ("lseek", 8),
    ("mmap", 9),
    ("mprotect", 10),
    ("munmap", 11),
    ("brk", 12),
    ("rt_sigaction", 13),
    ("rt_sigprocmask", 14),
    ("rt_sigreturn", 15),
    ("ioctl", 16),
    ("pread64", 17),
    ("pwrite64", 18),
    ("readv", 19),
    ("writev", 20),
    ("access", 21),
    ("pipe", 22),
    ("select", 23),
    ("sched_yield", 24),
    ("mremap", 25),
    ("msync", 26),
    ("mincore", 27),
    ("madvise", 28),
    ("shmget", 29),
    ("shmat", 30),
    ("shmctl", 31),
    ("dup", 32),
    ("dup2", 33),
    ("pause", 34),
    ("nanosleep", 35),
    ("getitimer", 36),
    ("alarm", 37),
    ("setitimer", 38),
    ("getpid", 39),
    ("sendfile", 40),
    ("socket", 41),
    ("connect", 42),
    ("accept", 43),
    ("sendto", 44),
    ("recvfrom", 45),
    ("sendmsg", 46),
    ("recvmsg", 47),
    ("shutdown", 48),
    ("bind", 49),
    ("listen", 50),
    ("getsockname", 51),
    ("getpeername", 52),
    ("socketpair", 53),
    ("setsockopt", 54),
    ("getsockopt", 55),
    ("fork", 57),
    ("vfork", 58),
    ("execve", 59),
    ("exit", 60),
    ("wait4", 61),
    ("kill", 62),
    ("uname", 63),
    ("semget", 64),
    ("semop", 65),
    ("semctl", 66),
    ("shmdt", 67),
    ("msgget", 68),
    ("msgsnd", 69),
    ("msgrcv", 70),
    ("msgctl", 71),
    ("fcntl", 72),
    ("flock", 73),
    ("fsync", 74),
    ("fdatasync", 75),
    ("truncate", 76),
    ("ftruncate", 77),
    ("getdents", 78),
    ("getcwd", 79),
    ("chdir", 80),
    ("fchdir", 81),
    ("rename", 82),
    ("mkdir", 83),
    ("rmdir", 84),
    ("creat", 85),
    ("link", 86),
    ("unlink", 87),
    ("symlink", 88),
    ("readlink", 89),
    ("chmod", 90),
    ("fchmod", 91),
    ("chown", 92),
    ("fchown", 93),
    ("lchown", 94),
    ("umask", 95),
    ("gettimeofday", 96),
    ("getrlimit", 97),
    ("getrusage", 98),
    ("sysinfo", 99),
    ("times", 100),
    ("getuid", 102),
    ("getgid", 104),
    ("geteuid", 107),
    ("getegid", 108),
    ("setpgid", 109),
    ("getppid", 110),
    ("getpgrp", 111),
    ("setsid", 112),
    ("getgroups", 115),
    ("getresuid", 118),
    ("getresgid", 120),
    ("getpgid", 121),
    ("getsid", 124),
    ("capget", 125),
    ("rt_sigpending", 127),
    ("rt_sigtimedwait", 128),
    ("rt_sigqueueinfo", 129),
    ("rt_sigsuspend", 130),
    ("sigaltstack", 131),
    ("utime", 132),
    ("statfs", 137),
    ("fstatfs", 138),
    ("getpriority", 140),
    ("setpriority", 141),
    ("sched_setparam", 142),
    ("sched_getparam", 143),
    ("sched_setscheduler", 144),
    ("sched_getscheduler", 145),
    ("sched_get_priority_max", 146),
    ("sched_get_priority_min", 147),
    ("sched_rr_get_interval", 148),
    ("prctl", 157),
    ("arch_prctl", 158),
    ("setrlimit", 160),
    ("sync", 162),
    ("gettid", 186),
    ("readahead", 187),
    ("getxattr", 191),
    ("lgetxattr", 192),
    ("fgetxattr", 193),
    ("listxattr", 194),
    ("llistxattr", 195),
    ("flistxattr", 196),
    ("tkill", 200),
    ("time", 201),
    ("futex", 202),
    ("sched_setaffinity", 203),
    ("sched_getaffinity", 204),
    ("io_setup", 206),
    ("io_destroy", 207),
    ("io_getevents", 208),
    ("io_submit", 209),
    ("io_cancel", 210),
    ("getdents64", 217),
    ("set_tid_address", 218),
    ("restart_syscall", 219),
    ("semtimedop", 220),
    ("fadvise64", 221),
    ("timer_create", 222),
    ("timer_settime", 223),
    ("timer_gettime", 224),
    ("timer_getoverrun", 225),
    ("timer_delete", 226),
    ("clock_gettime", 228),
    ("clock_getres", 229),
    ("clock_nanosleep", 230),
    ("exit_group", 231),
    ("epoll_wait", 232),
    ("epoll_ctl", 233),
    ("tgkill", 234),
    ("utimes", 235),
    ("waitid", 247),
    ("inotify_init", 253),
    ("inotify_add_watch", 254),
    ("inotify_rm_watch", 255),
    ("openat", 257),
    ("mkdirat", 258),
    ("fchownat", 260),
    ("futimesat", 261),
    ("newfstatat", 262),
    ("unlinkat", 263),
    ("renameat", 264),
    ("linkat", 265),
    ("symlinkat", 266),
    ("readlinkat", 267),
    ("fchmodat", 268),
    ("faccessat", 269),
    ("pselect6", 270),
    ("ppoll", 271),
    ("set_robust_list", 273),
    ("get_robust_list", 274),
    ("splice", 275),
    ("tee", 276),
    ("sync_file_range", 277),
    ("vmsplice", 278),
    ("utimensat", 280),
    ("epoll_pwait", 281),
    ("signalfd", 282),
    ("timerfd_create", 283),
    ("eventfd", 284),
    ("fallocate", 285),
    ("timerfd_settime", 286),
    ("timerfd_gettime", 287),
    ("accept4", 288),
    ("signalfd4", 289),
    ("eventfd2", 290),
    ("epoll_create", 213),
    ("epoll_create1", 291),
    ("dup3", 292),
    ("pipe2", 293),
    ("inotify_init1", 294),
    ("preadv", 295),
    ("pwritev", 296),
    ("rt_tgsigqueueinfo", 297),
    ("recvmmsg", 299),
    ("prlimit64", 302),
    ("syncfs", 306),
    ("sendmmsg", 307),
    ("getcpu", 309),
    ("sched_setattr", 314),
    ("sched_getattr", 315),
    ("renameat2", 316),
    ("getrandom", 318),
    ("memfd_create", 319),
    ("execveat", 322),
    ("membarrier", 324),
    ("copy_file_range", 326),
    ("preadv2", 327),
    ("pwritev2", 328),
    ("statx", 332),
    ("rseq", 334),
    ("pidfd_open", 434),
    ("pidfd_send_signal", 424),
    ("close_range", 436),
    ("faccessat2", 439),
    ("epoll_pwait2", 441),
    ("mlock", 149),
    ("munlock", 150),
    ("mlock2", 325),
    ("get_mempolicy", 239),
    ("set_mempolicy", 238),
];

/// The same calls on aarch64 (`include/uapi/asm-generic/unistd.h`): those
/// of [`X86_64`] but the legacy ones aarch64 never had ([`X86_64_ONLY`]),
/// which its libc replaces with the `*at` calls, `ppoll`, `pselect6`,
/// `clone`, `dup3`, `pipe2` and `epoll_pwait` already listed.
pub const AARCH64: &[(&str, u32)] = &[
    ("read", 63),
    ("write", 64),
    ("close", 57),
    ("fstat", 80),
    ("lseek", 62),
    ("mmap", 222),
    ("mprotect", 226),
    ("munmap", 215),
    ("brk", 214),
    ("rt_sigaction", 134),
    ("rt_sigprocmask", 135),
    ("rt_sigreturn", 139),
    ("ioctl", 29),
    ("pread64", 67),
    ("pwrite64", 68),
    ("readv", 65),
    ("writev", 66),
    ("sched_yield", 124),
    ("mremap", 216),
    ("msync", 227),
    ("mincore", 232),
    ("madvise", 233),
    ("shmget", 194),
    ("shmat", 196),
    ("shmctl", 195),
    ("dup", 23),
    ("nanosleep", 101),
    ("getitimer", 102),
    ("setitimer", 103),
    ("getpid", 172),
    ("sendfile", 71),
    ("socket", 198),
    ("connect", 203),
    ("accept", 202),
    ("sendto", 206),
    ("recvfrom", 207),
    ("sendmsg", 211),
    ("recvmsg", 212),
    ("shutdown", 210),
    ("bind", 200),
    ("listen", 201),
    ("getsockname", 204),
    ("getpeername", 205),
    ("socketpair", 199),
    ("setsockopt", 208),
    ("getsockopt", 209),
    ("execve", 221),
    ("exit", 93),
    ("wait4", 260),
    ("kill", 129),
    ("uname", 160),
    ("semget", 190),
    ("semop", 193),
    ("semctl", 191),
    ("shmdt", 197),
    ("msgget", 186),
    ("msgsnd", 189),
    ("msgrcv", 188),
    ("msgctl", 187),
    ("fcntl", 25),
    ("flock", 32),
    ("fsync", 82),
    ("fdatasync", 83),
    ("truncate", 45),
    ("ftruncate", 46),
    ("getcwd", 17),
    ("chdir", 49),
    ("fchdir", 50),
    ("fchmod", 52),
    ("fchown", 55),
    ("umask", 166),
    ("gettimeofday", 169),
    ("getrusage", 165),
    ("sysinfo", 179),
    ("times", 153),
    ("getuid", 174),
    ("getgid", 176),
    ("geteuid", 175),
    ("getegid", 177),
    ("setpgid", 154),
    ("getppid", 173),
    ("setsid", 157),
    ("getgroups", 158),
    ("getresuid", 148),
    ("getresgid", 150),
    ("getpgid", 155),
    ("getsid", 156),
    ("capget", 90),
    ("rt_sigpending", 136),
    ("rt_sigtimedwait", 137),
    ("rt_sigqueueinfo", 138),
    ("rt_sigsuspend", 133),
    ("sigaltstack", 132),
    ("statfs", 43),
    ("fstatfs", 44),
    ("getpriority", 141),
    ("setpriority", 140),
    ("sched_setparam", 118),
    ("sched_getparam", 121),
    ("sched_setscheduler", 119),
    ("sched_getscheduler", 120),
    ("sched_get_priority_max", 125),
    ("sched_get_priority_min", 126),
    ("sched_rr_get_interval", 127),
    ("prctl", 167),
    ("sync", 81),
    ("gettid", 178),
    ("readahead", 213),
    ("getxattr", 8),
    ("lgetxattr", 9),
    ("fgetxattr", 10),
    ("listxattr", 11),
    ("llistxattr", 12),
    ("flistxattr", 13),
    ("tkill", 130),
    ("futex", 98),
    ("sched_setaffinity", 122),
    ("sched_getaffinity", 123),
    ("io_setup", 0),
    ("io_destroy", 1),
    ("io_getevents", 4),
    ("io_submit", 2),
    ("io_cancel", 3),
    ("getdents64", 61),
    ("set_tid_address", 96),
    ("restart_syscall", 128),
    ("semtimedop", 192),
    ("fadvise64", 223),
    ("timer_create", 107),
    ("timer_settime", 110),
    ("timer_gettime", 108),
    ("timer_getoverrun", 109),
    ("timer_delete", 111),
    ("clock_gettime", 113),
    ("clock_getres", 114),
    ("clock_nanosleep", 115),
    ("exit_group", 94),
    ("epoll_ctl", 21),
    ("tgkill", 131),
    ("waitid", 95),
    ("inotify_add_watch", 27),
    ("inotify_rm_watch", 28),
    ("openat", 56),
    ("mkdirat", 34),
    ("fchownat", 54),
    ("newfstatat", 79),
    ("unlinkat", 35),
    ("linkat", 37),
    ("symlinkat", 36),
    ("readlinkat", 78),
    ("fchmodat", 53),
    ("faccessat", 48),
    ("pselect6", 72),
    ("ppoll", 73),
    ("set_robust_list", 99),
    ("get_robust_list", 100),
    ("splice", 76),
    ("tee", 77),
    ("sync_file_range", 84),
    ("vmsplice", 75),
    ("utimensat", 88),
    ("epoll_pwait", 22),
    ("timerfd_create", 85),
    ("fallocate", 47),
    ("timerfd_settime", 86),
    ("timerfd_gettime", 87),
    ("accept4", 242),
    ("signalfd4", 74),
    ("eventfd2", 19),
    ("epoll_create1", 20),
    ("dup3", 24),
    ("pipe2", 59),
    ("inotify_init1", 26),
    ("preadv", 69),
    ("pwritev", 70),
    ("rt_tgsigqueueinfo", 240),
    ("recvmmsg", 243),
    ("prlimit64", 261),
    ("syncfs", 267),
    ("sendmmsg", 269),
    ("getcpu", 168),
    ("sched_setattr", 274),
    ("sched_getattr", 275),
    ("renameat2", 276),
    ("getrandom", 278),
    ("memfd_create", 279),
    ("execveat", 281),
    ("membarrier", 283),
    ("copy_file_range", 285),
    ("preadv2", 286),
    ("pwritev2", 287),
    ("statx", 291),
    ("rseq", 293),
    ("pidfd_open", 434),
    ("pidfd_send_signal", 424),
    ("close_range", 436),
    ("faccessat2", 439),
    ("epoll_pwait2", 441),
    ("mlock", 228),
    ("munlock", 229),
    ("mlock2", 284),
    ("get_mempolicy", 236),
    ("set_mempolicy", 237),
];

/// The calls of [`X86_64`] that aarch64 does not have.
pub const X86_64_ONLY: &[&str] = &[
    "open",
    "stat",
    "lstat",
    "poll",
    "access",
    "pipe",
    "select",
    "dup2",
    "pause",
    "alarm",
    "fork",
    "vfork",
    "getdents",
    "rename",
    "mkdir",
    "rmdir",
    "creat",
    "link",
    "unlink",
    "symlink",
    "readlink",
    "chmod",
    "chown",
    "lchown",
    "getrlimit",
    "getpgrp",
    "utime",
    "arch_prctl",
    "setrlimit",
    "time",
    "epoll_wait",
    "utimes",
    "inotify_init",
    "futimesat",
    "renameat",
    "signalfd",
    "eventfd",
    "epoll_create",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn names(list: &[(&'static str, u32)]) -> BTreeSet<&'static str> {
        list.iter().map(|(n, _)| *n).collect()
    }

    #[test]
    fn both_lists_allow_the_same_calls_and_refuse_what_they_must() {
        for arch in [X86_64_ARCH, AARCH64_ARCH] {
            let listed = names(arch.allowed);
            assert_eq!(
                listed.len(),
                arch.allowed.len(),
                "{}: a name twice",
                arch.name
            );
            let numbers: BTreeSet<u32> = arch.allowed.iter().map(|(_, n)| *n).collect();
            assert_eq!(
                numbers.len(),
                arch.allowed.len(),
                "{}: a number twice",
                arch.name
            );
            for r in REFUSED {
                assert!(!listed.contains(r), "{}: {r} is allowed", arch.name);
            }
            assert!(!numbers.contains(&arch.clone3) && !numbers.contains(&arch.clone));
            assert!(program(&arch).len() < PROGRAM_LEN_MAX, "{}", arch.name);
        }
        // aarch64 allows what x86-64 does, less the calls it never had.
        let legacy: BTreeSet<&str> = X86_64_ONLY.iter().copied().collect();
        let want: BTreeSet<&str> = names(X86_64).difference(&legacy).copied().collect();
        assert_eq!(names(AARCH64), want);
        // Spot checks against the kernel's tables.
        let nr = |list: &[(&str, u32)], n: &str| list.iter().find(|(m, _)| *m == n).map(|p| p.1);
        assert_eq!(nr(X86_64, "openat"), Some(257));
        assert_eq!(nr(AARCH64, "openat"), Some(56));
        assert_eq!(nr(AARCH64, "read"), Some(63));
        assert_eq!(nr(AARCH64, "execve"), Some(221));
        assert_eq!(nr(AARCH64, "exit_group"), Some(94));
        // What a program needs on aarch64 to start at all.
        for n in [
            "execve",
            "mmap",
            "brk",
            "openat",
            "newfstatat",
            "ppoll",
            "pipe2",
            "dup3",
        ] {
            assert!(names(AARCH64).contains(n), "{n}");
        }
    }

    /// What the kernel would answer for a call: a classic BPF interpreter
    /// of the instructions [`program`] uses (every jump checked in range).
    fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, arg0: u32) -> u32 {
        steps(prog, arch, nr, arg0).0
    }

    /// [`run`]'s answer and the instructions it took.
    fn steps(prog: &[libc::sock_filter], arch: u32, nr: u32, arg0: u32) -> (u32, usize) {
        let (mut pc, mut acc) = (0usize, 0u32);
        for taken in 1.. {
            let i = prog[pc];
            pc += 1;
            let branch = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
            match i.code {
                LD_W_ABS => {
                    acc = match i.k {
                        NR => nr,
                        ARCH => arch,
                        ARG0_LO => arg0,
                        k => panic!("load of offset {k}"),
                    }
                }
                JEQ_K => pc += branch(acc == i.k),
                JGE_K => pc += branch(acc >= i.k),
                JGT_K => pc += branch(acc > i.k),
                JSET_K => pc += branch(acc & i.k != 0),
                JA => pc += i.k as usize,
                RET_K => return (i.k, taken),
                c => panic!("opcode {c:#x}"),
            }
            assert!(pc < prog.len(), "a jump past the end");
        }
        unreachable!()
    }

    /// The program allows exactly the listed calls (and `clone` without a
    /// namespace flag), refuses every other number with EPERM, `clone3`
    /// with ENOSYS, x32 calls, and kills another architecture's — checked
    /// for every number, on both architectures; and it stays a search,
    /// not a chain: at most a few dozen steps for any call.
    #[test]
    fn the_program_allows_exactly_the_list() {
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for arch in [X86_64_ARCH, AARCH64_ARCH] {
            let prog = program(&arch);
            let allowed: BTreeSet<u32> = arch.allowed.iter().map(|(_, n)| *n).collect();
            for nr in 0..2048 {
                let want = if nr == arch.clone3 {
                    enosys
                } else if nr == arch.clone || allowed.contains(&nr) {
                    SECCOMP_RET_ALLOW
                } else {
                    eperm
                };
                assert_eq!(run(&prog, arch.audit, nr, 0), want, "{} {nr}", arch.name);
                if arch.x32_bit != 0 {
                    assert_eq!(run(&prog, arch.audit, nr | arch.x32_bit, 0), eperm);
                }
            }
            for nr in [u32::MAX, u32::MAX / 2, 1 << 20] {
                assert_eq!(run(&prog, arch.audit, nr, 0), eperm, "{} {nr}", arch.name);
            }
            let flags = libc::CLONE_NEWNET as u32 | libc::SIGCHLD as u32;
            assert_eq!(run(&prog, arch.audit, arch.clone, flags), eperm);
            assert_eq!(
                run(&prog, arch.audit, arch.clone, libc::SIGCHLD as u32),
                SECCOMP_RET_ALLOW
            );
            let other = [X86_64_ARCH.audit, AARCH64_ARCH.audit, 0x4000_0003]
                .into_iter()
                .find(|a| *a != arch.audit)
                .unwrap();
            assert_eq!(run(&prog, other, 0, 0), SECCOMP_RET_KILL_PROCESS);
            // A search: two instructions per halving of the ranges, where
            // the chain it replaced took two per listed call.
            let most = (0..2048)
                .map(|nr| steps(&prog, arch.audit, nr, 0).1)
                .max()
                .unwrap();
            let halvings = ranges(arch.allowed).len().ilog2() as usize + 1;
            assert!(most <= 2 * halvings + 16, "{}: {most} steps", arch.name);
            println!(
                "{}: {} instructions, at most {most} steps",
                arch.name,
                prog.len()
            );
        }
    }

    /// This build's numbers agree with its libc's.
    #[test]
    fn the_native_table_agrees_with_libc() {
        let arch = native().expect("a jailed architecture");
        let nr = |n: &str| arch.allowed.iter().find(|(m, _)| *m == n).unwrap().1 as libc::c_long;
        assert_eq!(nr("read"), libc::SYS_read);
        assert_eq!(nr("openat"), libc::SYS_openat);
        assert_eq!(nr("execve"), libc::SYS_execve);
        assert_eq!(nr("exit_group"), libc::SYS_exit_group);
        assert_eq!(nr("close_range"), libc::SYS_close_range);
        assert_eq!(arch.clone as libc::c_long, libc::SYS_clone);
        assert_eq!(arch.clone3 as libc::c_long, libc::SYS_clone3);
    }
}
