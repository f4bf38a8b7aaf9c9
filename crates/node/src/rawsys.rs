//! System calls made without libc, and a `clone3` that runs a function on
//! a stack of its own: what a jailed proc's first processes use
//! ([`crate::jail`]).
//!
//! Why not libc: those processes share the node's memory (`CLONE_VM`, so
//! that starting a proc copies none of the node's page tables and leaves
//! none of its pages copy-on-write — see `jail`'s module doc), and with it
//! the thread-local storage of the node's thread that cloned them. A libc
//! wrapper that fails writes `errno` there, under that thread's feet, and
//! some wrappers do more than their system call (`setuid` signals every
//! thread glibc knows of). The calls here return `-errno` in their result
//! and touch nothing but their arguments.
//!
//! Only x86-64 and aarch64, where the jail is built.

use std::os::fd::RawFd;

/// A system call's failure: its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// The kernel's answer: a value, or -errno in the top 4095 values.
fn check(r: isize) -> Result<usize, Errno> {
    if (-4095..0).contains(&r) {
        Err(Errno(-r as i32))
    } else {
        Ok(r as usize)
    }
}

/// System call `n` with up to six arguments.
///
/// # Safety
/// As the system call asks of its arguments.
#[cfg(target_arch = "x86_64")]
pub unsafe fn syscall(n: libc::c_long, a: [usize; 6]) -> Result<usize, Errno> {
    let r: isize;
    // SAFETY: the Linux x86-64 system call convention; rcx and r11 are
    // clobbered by `syscall`.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    check(r)
}

/// System call `n` with up to six arguments.
///
/// # Safety
/// As the system call asks of its arguments.
#[cfg(target_arch = "aarch64")]
pub unsafe fn syscall(n: libc::c_long, a: [usize; 6]) -> Result<usize, Errno> {
    let r: isize;
    // SAFETY: the Linux aarch64 system call convention.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] as isize => r,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack),
        );
    }
    check(r)
}

/// `clone_args` of clone3(2), as far as `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Debug, Default)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (linux/sched.h; not in every libc yet).
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The function a [`clone3_run`] child runs, given its argument.
pub type ChildMain = unsafe extern "C" fn(usize) -> !;

/// clone3 with `args` (which must name a stack): the child runs
/// `main(arg)` on that stack and never returns here; the parent gets the
/// child's pid.
///
/// # Safety
/// `args.stack` must be memory that stays mapped while the child runs on
/// it; with `CLONE_VM`, `main` must touch only what the parent keeps alive
/// for it, and make only [`syscall`]s.
pub unsafe fn clone3_run(args: &CloneArgs, main: ChildMain, arg: usize) -> Result<usize, Errno> {
    let r: isize;
    // SAFETY: the child starts with its stack pointer at the top of the
    // stack it was given (16-byte aligned by the caller) and calls `main`,
    // which never returns; the parent continues as after any system call.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => r,
            in("rdi") args as *const CloneArgs as usize,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") main as usize,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x0, x9",
            "blr x10",
            "brk #0",
            "2:",
            in("x8") libc::SYS_clone3,
            inlateout("x0") args as *const CloneArgs as usize as isize => r,
            in("x1") std::mem::size_of::<CloneArgs>(),
            in("x9") arg,
            in("x10") main as usize,
            options(nostack),
        );
    }
    check(r)
}

/// A stack for a [`clone3_run`] child: anonymous memory with a guard
/// page below it, kept for the next child when dropped (up to
/// [`STACKS_KEPT`]) and unmapped beyond that.
#[derive(Debug)]
pub struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: a mapping's address, used by one child at a time.
unsafe impl Send for Stack {}
// SAFETY: as above; nothing is read or written through a shared Stack.
unsafe impl Sync for Stack {}

/// Size of each [`Stack`], its guard page included.
pub const STACK_BYTES: usize = 256 << 10;

/// Stacks kept mapped for reuse once their child has ended: unmapping one
/// a child wrote costs a TLB shoot-down on every CPU that runs one of the
/// node's threads (the children share its memory), and mapping it again
/// page faults; three per proc start. 48 cover 16 procs starting at once
/// (12 MiB of address space, resident only where a child wrote).
pub const STACKS_KEPT: usize = 48;

static KEPT: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());

impl Stack {
    /// A stack: a kept one, or a new mapping (made here, in the node,
    /// never in a child).
    pub fn new() -> std::io::Result<Stack> {
        let kept = KEPT.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match kept {
            Some(stack) => Ok(stack),
            None => Stack::map(),
        }
    }

    fn map() -> std::io::Result<Stack> {
        let len = STACK_BYTES;
        // SAFETY: a fresh anonymous mapping; the lowest page made a guard.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(4096);
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                let e = std::io::Error::last_os_error();
                libc::munmap(base, len);
                return Err(e);
            }
            Ok(Stack { base, len })
        }
    }

    /// The lowest address and the size, for `clone_args`.
    pub fn span(&self) -> (u64, u64) {
        (self.base as u64, self.len as u64)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // No child uses it any more (the owner drops it only once they
        // have ended: see jail::Launch), so the next may: kept as it is,
        // its mapping moved into a new value.
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < STACKS_KEPT {
            let base = std::mem::replace(&mut self.base, std::ptr::null_mut());
            kept.push(Stack {
                base,
                len: self.len,
            });
            return;
        }
        drop(kept);
        // SAFETY: our own mapping, no longer used by any child.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

// ---- the calls the jail's children make, each a thin typed wrapper ----

/// # Safety
/// `buf` readable for `len` bytes.
pub unsafe fn write(fd: RawFd, buf: *const u8, len: usize) -> Result<usize, Errno> {
    // SAFETY: as the caller promises.
    unsafe { syscall(libc::SYS_write, [fd as usize, buf as usize, len, 0, 0, 0]) }
}

pub fn close(fd: RawFd) {
    // SAFETY: closing a descriptor touches no memory.
    let _ = unsafe { syscall(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
}

pub fn close_range(first: u32, last: u32) {
    // SAFETY: as close.
    let _ = unsafe {
        syscall(
            libc::SYS_close_range,
            [first as usize, last as usize, 0, 0, 0, 0],
        )
    };
}

pub fn dup3(old: RawFd, new: RawFd) -> Result<(), Errno> {
    if old == new {
        // Already in place: only let it through exec.
        // SAFETY: fcntl on a descriptor, no memory.
        return unsafe {
            syscall(
                libc::SYS_fcntl,
                [old as usize, libc::F_SETFD as usize, 0, 0, 0, 0],
            )
        }
        .map(drop);
    }
    // SAFETY: descriptors only.
    unsafe { syscall(libc::SYS_dup3, [old as usize, new as usize, 0, 0, 0, 0]) }.map(drop)
}

pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: ends this process (a child that shares memory is its own
        // thread group: the node's threads go on).
        let _ = unsafe { syscall(libc::SYS_exit_group, [code as usize, 0, 0, 0, 0, 0]) };
    }
}

pub fn kill(pid: i32, sig: i32) {
    // SAFETY: signals, no memory.
    let _ = unsafe { syscall(libc::SYS_kill, [pid as usize, sig as usize, 0, 0, 0, 0]) };
}

pub fn setpgid_self() -> Result<(), Errno> {
    // SAFETY: as kill.
    unsafe { syscall(libc::SYS_setpgid, [0; 6]) }.map(drop)
}

/// The kernel's `struct sigaction` (not libc's).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Sets `sig`'s disposition to `SIG_IGN` or `SIG_DFL`.
pub fn signal(sig: i32, handler: libc::sighandler_t) {
    let act = KernelSigaction {
        handler,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: `act` lives through the call; the kernel's sigset is 8 bytes.
    let _ = unsafe {
        syscall(
            libc::SYS_rt_sigaction,
            [sig as usize, &act as *const _ as usize, 0, 8, 0, 0],
        )
    };
}

/// Unblocks every signal.
pub fn unblock_all() {
    let none: u64 = 0;
    // SAFETY: `none` lives through the call.
    let _ = unsafe {
        syscall(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                &none as *const u64 as usize,
                0,
                8,
                0,
                0,
            ],
        )
    };
}

/// # Safety
/// NUL-terminated strings (or null where mount(2) allows) and `data` as
/// the file system asks.
pub unsafe fn mount(
    src: *const libc::c_char,
    target: *const libc::c_char,
    fstype: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_void,
) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_mount,
            [
                src as usize,
                target as usize,
                fstype as usize,
                flags as usize,
                data as usize,
                0,
            ],
        )
    }
    .map(drop)
}

/// # Safety
/// `path` NUL-terminated.
pub unsafe fn umount_detach(path: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_umount2,
            [path as usize, libc::MNT_DETACH as usize, 0, 0, 0, 0],
        )
    }
    .map(drop)
}

/// # Safety
/// Both NUL-terminated.
pub unsafe fn pivot_root(new: *const libc::c_char, old: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_pivot_root,
            [new as usize, old as usize, 0, 0, 0, 0],
        )
    }
    .map(drop)
}

/// # Safety
/// `path` NUL-terminated.
pub unsafe fn chdir(path: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe { syscall(libc::SYS_chdir, [path as usize, 0, 0, 0, 0, 0]) }.map(drop)
}

/// # Safety
/// `path` NUL-terminated.
pub unsafe fn mkdir(path: *const libc::c_char, mode: u32) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_mkdirat,
            [
                libc::AT_FDCWD as usize,
                path as usize,
                mode as usize,
                0,
                0,
                0,
            ],
        )
    }
    .map(drop)
}

/// # Safety
/// `path` NUL-terminated.
pub unsafe fn rmdir(path: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_unlinkat,
            [
                libc::AT_FDCWD as usize,
                path as usize,
                libc::AT_REMOVEDIR as usize,
                0,
                0,
                0,
            ],
        )
    }
    .map(drop)
}

/// Creates `path` (an empty file, a mount point) if it is not there.
///
/// # Safety
/// `path` NUL-terminated.
pub unsafe fn touch(path: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    let fd = unsafe {
        syscall(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as usize,
                path as usize,
                (libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC) as usize,
                0o644,
                0,
                0,
            ],
        )
    }?;
    close(fd as RawFd);
    Ok(())
}

/// # Safety
/// Both NUL-terminated.
pub unsafe fn symlink(target: *const libc::c_char, link: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_symlinkat,
            [
                target as usize,
                libc::AT_FDCWD as usize,
                link as usize,
                0,
                0,
                0,
            ],
        )
    }
    .map(drop)
}

pub fn setgroups_none() -> Result<(), Errno> {
    // SAFETY: an empty list.
    unsafe { syscall(libc::SYS_setgroups, [0; 6]) }.map(drop)
}

/// This process's gid, all of them (as root): the system call, which
/// changes only the calling task — not glibc's, which would signal every
/// thread of the node.
pub fn setgid(gid: u32) -> Result<(), Errno> {
    // SAFETY: no memory.
    unsafe { syscall(libc::SYS_setgid, [gid as usize, 0, 0, 0, 0, 0]) }.map(drop)
}

/// As [`setgid`], for the uid.
pub fn setuid(uid: u32) -> Result<(), Errno> {
    // SAFETY: no memory.
    unsafe { syscall(libc::SYS_setuid, [uid as usize, 0, 0, 0, 0, 0]) }.map(drop)
}

/// Sets this process's `RLIMIT_NOFILE` to `soft` and `hard` (prlimit64
/// on itself: no memory but the struct on this stack).
pub fn set_nofile(soft: u64, hard: u64) -> Result<(), Errno> {
    let limit = libc::rlimit64 {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: the kernel reads `limit`, which lives through the call, and
    // writes nothing (no old-limit pointer).
    unsafe {
        syscall(
            libc::SYS_prlimit64,
            [
                0,
                libc::RLIMIT_NOFILE as usize,
                &limit as *const libc::rlimit64 as usize,
                0,
                0,
                0,
            ],
        )
    }
    .map(drop)
}

/// # Safety
/// `arg2` and `arg3` as `option` asks.
pub unsafe fn prctl(option: i32, arg2: usize, arg3: usize) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe { syscall(libc::SYS_prctl, [option as usize, arg2, arg3, 0, 0, 0]) }.map(drop)
}

/// # Safety
/// `path` NUL-terminated; `argv` and `envp` null-terminated arrays of
/// NUL-terminated strings.
pub unsafe fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> Errno {
    // SAFETY: as the caller promises; returns only on failure.
    match unsafe {
        syscall(
            libc::SYS_execve,
            [path as usize, argv as usize, envp as usize, 0, 0, 0],
        )
    } {
        Err(e) => e,
        Ok(_) => Errno(libc::EINVAL),
    }
}

/// A pidfd for `pid`.
pub fn pidfd_open(pid: i32) -> Result<RawFd, Errno> {
    // SAFETY: no memory.
    unsafe { syscall(libc::SYS_pidfd_open, [pid as usize, 0, 0, 0, 0, 0]) }.map(|fd| fd as RawFd)
}

/// # Safety
/// `fds` valid for `n` entries.
pub unsafe fn poll(fds: *mut libc::pollfd, n: usize) -> Result<usize, Errno> {
    // SAFETY: as the caller promises; no timeout, no signal mask.
    unsafe { syscall(libc::SYS_ppoll, [fds as usize, n, 0, 0, 0, 0]) }
}

/// waitpid(2) through wait4: the pid that ended and its status.
pub fn wait(pid: i32) -> Result<(i32, i32), Errno> {
    let mut status: i32 = 0;
    // SAFETY: `status` lives through the call.
    let r = unsafe {
        syscall(
            libc::SYS_wait4,
            [pid as usize, &mut status as *mut i32 as usize, 0, 0, 0, 0],
        )
    }?;
    Ok((r as i32, status))
}

/// # Safety
/// `arg` as `request` asks.
pub unsafe fn ioctl(fd: RawFd, request: libc::c_ulong, arg: usize) -> Result<(), Errno> {
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_ioctl,
            [fd as usize, request as usize, arg, 0, 0, 0],
        )
    }
    .map(drop)
}

/// A new namespace of each kind in `flags` for this process
/// (`CLONE_NEWNS`: a copy of the mount namespace it is in).
pub fn unshare(flags: i32) -> Result<(), Errno> {
    // SAFETY: no memory.
    unsafe { syscall(libc::SYS_unshare, [flags as usize, 0, 0, 0, 0, 0]) }.map(drop)
}

/// A detached copy of the mount at `path` and every mount under it
/// (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`, Linux 5.2), as a
/// close-on-exec descriptor for [`move_mount_to`].
///
/// # Safety
/// `path` NUL-terminated.
pub unsafe fn open_tree_clone(path: *const libc::c_char) -> Result<RawFd, Errno> {
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as u32;
    // SAFETY: as the caller promises.
    unsafe {
        syscall(
            libc::SYS_open_tree,
            [
                libc::AT_FDCWD as usize,
                path as usize,
                flags as usize,
                0,
                0,
                0,
            ],
        )
    }
    .map(|fd| fd as RawFd)
}

/// Attaches the detached mount `tree` ([`open_tree_clone`]) at `target`.
///
/// # Safety
/// `target` NUL-terminated.
pub unsafe fn move_mount_to(tree: RawFd, target: *const libc::c_char) -> Result<(), Errno> {
    // SAFETY: as the caller promises; the empty path is a static C string.
    unsafe {
        syscall(
            libc::SYS_move_mount,
            [
                tree as usize,
                c"".as_ptr() as usize,
                libc::AT_FDCWD as usize,
                target as usize,
                libc::MOVE_MOUNT_F_EMPTY_PATH as usize,
                0,
            ],
        )
    }
    .map(drop)
}

/// Joins the namespace `fd` (of kind `nstype`, e.g. `CLONE_NEWNET`).
pub fn setns(fd: RawFd, nstype: i32) -> Result<(), Errno> {
    // SAFETY: no memory.
    unsafe { syscall(libc::SYS_setns, [fd as usize, nstype as usize, 0, 0, 0, 0]) }.map(drop)
}

pub fn socket(domain: i32, ty: i32) -> Result<RawFd, Errno> {
    // SAFETY: no memory.
    unsafe { syscall(libc::SYS_socket, [domain as usize, ty as usize, 0, 0, 0, 0]) }
        .map(|fd| fd as RawFd)
}
