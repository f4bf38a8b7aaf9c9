//! The WASI preview1 functions a tabos wasm proc gets.
//!
//! A proc is a *command*: it reads its arguments and environment, reads
//! stdin (empty, unless its runner gives one: a MapReduce task's records),
//! writes to stdout and stderr (captured into the run's sinks), reads the clocks and
//! randomness, and exits. It has no sockets, and no files but, when it was
//! spawned with uploaded code, that code as one read-only preopened
//! directory ([`crate::wasi_fs`]): tabos state is reached through tabos
//! host functions, never through the host's filesystem.
//!
//! Every other preview1 function is defined with its specification's
//! signature and returns `ENOSYS`, so modules built by any WASI toolchain
//! link, and a module that calls something tabos lacks gets a clean error
//! code instead of a link failure. This is a departure from using
//! `wasmtime-wasi` (see ARCHITECTURE.md): its preview1 layer needs the
//! component model and async runtime features, several times the build time,
//! for functions procs may not have anyway.
//!
//! Guest pointers are bounds-checked against linear memory on every access;
//! a bad pointer or length gives `EFAULT`, never a host panic.

use std::io::{Read, Write};

use wasmtime::{Caller, Extern, FuncType, Linker, Val, ValType};

use crate::RunState;

pub const MODULE: &str = "wasi_snapshot_preview1";

// The preview1 errno values used here.
const SUCCESS: i32 = 0;
use crate::wasi_fs::{EBADF, EINVAL, EIO};
const EFAULT: i32 = 21;
const ENOSYS: i32 = 52;
const ESPIPE: i32 = 70;

/// Most iovecs one fd_write or fd_read takes (Linux's IOV_MAX).
const IOVS_MAX: u32 = 1024;
/// Bytes random_get fills per call.
const RANDOM_BYTES_MAX: u32 = 1 << 20;

/// `proc_exit(code)`: unwinds the run with this error; the runner turns it
/// into [`crate::Outcome::Exited`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub i32);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "proc_exit({})", self.0)
    }
}

impl std::error::Error for Exit {}

/// One run's WASI state.
pub struct Ctx {
    args: Vec<String>,
    /// `KEY=value` strings.
    env: Vec<String>,
    /// Descriptor 0: `None` reads as end of file.
    pub(crate) stdin: Option<Box<dyn Read + Send>>,
    stdout: Box<dyn Write + Send>,
    stderr: Box<dyn Write + Send>,
    /// Its preopened directory, if it has one.
    pub(crate) tree: Option<crate::wasi_fs::Tree>,
}

impl Ctx {
    pub fn new(
        args: Vec<String>,
        env: Vec<(String, String)>,
        stdout: Box<dyn Write + Send>,
        stderr: Box<dyn Write + Send>,
    ) -> Ctx {
        Ctx {
            args,
            env: env.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
            stdin: None,
            stdout,
            stderr,
            tree: None,
        }
    }

    /// Writes one line to the run's stderr (host-side diagnostics).
    pub fn stderr_line(&mut self, line: &str) {
        let _ = writeln!(self.stderr, "{line}");
    }

    pub fn flush(&mut self) {
        let _ = self.stdout.flush();
        let _ = self.stderr.flush();
    }
}

/// The guest's exported memory and the run state, borrowed together.
pub(crate) fn memory<'a>(
    caller: &'a mut Caller<'_, RunState>,
) -> Option<(&'a mut [u8], &'a mut RunState)> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Some(m.data_and_store_mut(caller)),
        _ => None,
    }
}

pub(crate) fn range(mem: &[u8], ptr: i32, len: u32) -> Option<std::ops::Range<usize>> {
    let start = ptr as u32 as usize;
    let end = start.checked_add(len as usize)?;
    (end <= mem.len()).then_some(start..end)
}

pub(crate) fn put_u32(mem: &mut [u8], ptr: i32, v: u32) -> bool {
    match range(mem, ptr, 4) {
        Some(r) => {
            mem[r].copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

fn put_u64(mem: &mut [u8], ptr: i32, v: u64) -> bool {
    match range(mem, ptr, 8) {
        Some(r) => {
            mem[r].copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

fn ok_or_fault(ok: bool) -> i32 {
    if ok {
        SUCCESS
    } else {
        EFAULT
    }
}

fn get_u32(mem: &[u8], ptr: i32) -> Option<u32> {
    let r = range(mem, ptr, 4)?;
    Some(u32::from_le_bytes(mem[r].try_into().ok()?))
}

/// `*_sizes_get`: the count and the total bytes, NUL terminators included.
fn sizes(strings: &[String]) -> (u32, u32) {
    let bytes: usize = strings.iter().map(|s| s.len() + 1).sum();
    (strings.len() as u32, bytes as u32)
}

/// `args_get` / `environ_get`: pointers at `ptrs`, NUL-terminated strings
/// packed at `buf`.
fn put_strings(mem: &mut [u8], strings: &[String], ptrs: i32, buf: i32) -> i32 {
    let mut at = buf as u32;
    for (i, s) in strings.iter().enumerate() {
        let Some(slot) = (ptrs as u32).checked_add(4 * i as u32) else {
            return EFAULT;
        };
        if !put_u32(mem, slot as i32, at) {
            return EFAULT;
        }
        let Some(r) = range(mem, at as i32, s.len() as u32 + 1) else {
            return EFAULT;
        };
        let end = r.end;
        mem[r.start..end - 1].copy_from_slice(s.as_bytes());
        mem[end - 1] = 0;
        at = end as u32;
    }
    SUCCESS
}

fn fd_write(caller: &mut Caller<'_, RunState>, fd: i32, iovs: i32, n: i32, written: i32) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    let sink: &mut dyn Write = match fd {
        1 => &mut *state.wasi.stdout,
        2 => &mut *state.wasi.stderr,
        _ => return EBADF,
    };
    if n as u32 > IOVS_MAX {
        return EINVAL;
    }
    let mut total: u32 = 0;
    for i in 0..n as u32 {
        // An iovec is {buf: u32, buf_len: u32}; its address must not wrap.
        let Some(at) = (iovs as u32)
            .checked_add(8 * i)
            .filter(|a| a.checked_add(8).is_some())
        else {
            return EFAULT;
        };
        let (Some(ptr), Some(len)) = (get_u32(mem, at as i32), get_u32(mem, (at + 4) as i32))
        else {
            return EFAULT;
        };
        let Some(r) = range(mem, ptr as i32, len) else {
            return EFAULT;
        };
        // The sink decides what to keep (procd caps each log); a failing
        // sink drops output rather than failing the guest.
        let _ = sink.write_all(&mem[r]);
        total = total.saturating_add(len);
    }
    ok_or_fault(put_u32(mem, written, total))
}

fn clock_time_get(caller: &mut Caller<'_, RunState>, id: i32, out: i32) -> i32 {
    let clock = match id {
        0 => libc::CLOCK_REALTIME,
        1 => libc::CLOCK_MONOTONIC,
        2 => libc::CLOCK_PROCESS_CPUTIME_ID,
        3 => libc::CLOCK_THREAD_CPUTIME_ID,
        _ => return EINVAL,
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return EINVAL;
    }
    let ns = (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64);
    let Some((mem, _)) = memory(caller) else {
        return EFAULT;
    };
    ok_or_fault(put_u64(mem, out, ns))
}

fn random_get(caller: &mut Caller<'_, RunState>, buf: i32, len: i32) -> i32 {
    if len as u32 > RANDOM_BYTES_MAX {
        return EINVAL;
    }
    let Some((mem, _)) = memory(caller) else {
        return EFAULT;
    };
    let Some(r) = range(mem, buf, len as u32) else {
        return EFAULT;
    };
    let out = &mut mem[r];
    let mut filled = 0;
    while filled < out.len() {
        let rest = &mut out[filled..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n <= 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return EINVAL;
        }
        filled += n as usize;
    }
    SUCCESS
}

fn fdstat_get(caller: &mut Caller<'_, RunState>, fd: i32, out: i32) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    // fs_rights: fd_read = 1 << 1, fd_write = 1 << 6; filetype 2: a
    // character device.
    let (filetype, rights): (u8, u64) = match (fd, &state.wasi.tree) {
        (0, _) => (2, 1 << 1),
        (1 | 2, _) => (2, 1 << 6),
        (_, Some(t)) => match t.fdstat(fd) {
            Ok(v) => v,
            Err(e) => return e,
        },
        _ => return EBADF,
    };
    let Some(r) = range(mem, out, 24) else {
        return EFAULT;
    };
    let stat = &mut mem[r];
    stat.fill(0);
    stat[0] = filetype;
    stat[8..16].copy_from_slice(&rights.to_le_bytes());
    // The rights its opens inherit: the same.
    stat[16..24].copy_from_slice(&rights.to_le_bytes());
    SUCCESS
}

/// The iovecs at `iovs` (`n` of them) as ranges of `mem`.
fn iovecs(mem: &[u8], iovs: i32, n: i32) -> Result<Vec<std::ops::Range<usize>>, i32> {
    if n as u32 > IOVS_MAX {
        return Err(EINVAL);
    }
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n as u32 {
        let at = (iovs as u32)
            .checked_add(8 * i)
            .filter(|a| a.checked_add(8).is_some())
            .ok_or(EFAULT)?;
        let (Some(ptr), Some(len)) = (get_u32(mem, at as i32), get_u32(mem, (at + 4) as i32))
        else {
            return Err(EFAULT);
        };
        out.push(range(mem, ptr as i32, len).ok_or(EFAULT)?);
    }
    Ok(out)
}

fn fd_read(caller: &mut Caller<'_, RunState>, fd: i32, iovs: i32, n: i32, read: i32) -> i32 {
    let Some((mem, state)) = memory(caller) else {
        return EFAULT;
    };
    if fd == 0 {
        return read_stdin(mem, state, iovs, n, read);
    }
    let Some(tree) = state.wasi.tree.as_mut() else {
        return EBADF;
    };
    let bufs = match iovecs(mem, iovs, n) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let mut total: u32 = 0;
    for r in bufs {
        let want = r.len();
        match tree.read(fd, &mut mem[r]) {
            Ok(got) => {
                total = total.saturating_add(got as u32);
                if got < want {
                    break;
                }
            }
            Err(e) if total == 0 => return e,
            Err(_) => break,
        }
    }
    ok_or_fault(put_u32(mem, read, total))
}

/// `fd_read` on descriptor 0: from the run's stdin, if it has one (else at
/// end of file), into the first iovec that has room — a short read, as a
/// pipe gives, which every libc's stdio loops over.
fn read_stdin(mem: &mut [u8], state: &mut RunState, iovs: i32, n: i32, read: i32) -> i32 {
    let Some(stdin) = state.wasi.stdin.as_mut() else {
        return ok_or_fault(put_u32(mem, read, 0));
    };
    let bufs = match iovecs(mem, iovs, n) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(r) = bufs.into_iter().find(|r| !r.is_empty()) else {
        return ok_or_fault(put_u32(mem, read, 0));
    };
    loop {
        match stdin.read(&mut mem[r.clone()]) {
            Ok(got) => return ok_or_fault(put_u32(mem, read, got as u32)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return EIO,
        }
    }
}

/// Copies `bytes` into guest memory at `ptr` (a filestat's 64 bytes).
fn put_bytes(mem: &mut [u8], ptr: i32, bytes: &[u8]) -> Result<(), i32> {
    let r = range(mem, ptr, bytes.len() as u32).ok_or(EFAULT)?;
    mem[r].copy_from_slice(bytes);
    Ok(())
}

/// A guest path (`ptr`, `len`) as bytes.
fn guest_path(mem: &[u8], ptr: i32, len: i32) -> Result<Vec<u8>, i32> {
    range(mem, ptr, len as u32)
        .map(|r| mem[r].to_vec())
        .ok_or(EFAULT)
}

/// The preopen's calls: `f` on the tree, or EBADF for a proc without one.
fn with_tree<T>(
    caller: &mut Caller<'_, RunState>,
    f: impl FnOnce(&mut [u8], &mut crate::wasi_fs::Tree) -> Result<T, i32>,
) -> Result<T, i32> {
    let (mem, state) = memory(caller).ok_or(EFAULT)?;
    let tree = state.wasi.tree.as_mut().ok_or(EBADF)?;
    f(mem, tree)
}

fn status<T>(r: Result<T, i32>) -> i32 {
    match r {
        Ok(_) => SUCCESS,
        Err(e) => e,
    }
}

/// Adds the preview1 functions to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    // args_* and environ_* are the same two calls over different strings.
    type Strings = fn(&Ctx) -> &[String];
    for (prefix, strings) in [
        ("args", (|c: &Ctx| &c.args[..]) as Strings),
        ("environ", |c: &Ctx| &c.env[..]),
    ] {
        linker.func_wrap(
            MODULE,
            &format!("{prefix}_sizes_get"),
            move |mut c: Caller<'_, RunState>, count: i32, size: i32| -> i32 {
                let Some((mem, s)) = memory(&mut c) else {
                    return EFAULT;
                };
                let (n, bytes) = sizes(strings(&s.wasi));
                ok_or_fault(put_u32(mem, count, n) && put_u32(mem, size, bytes))
            },
        )?;
        linker.func_wrap(
            MODULE,
            &format!("{prefix}_get"),
            move |mut c: Caller<'_, RunState>, ptrs: i32, buf: i32| -> i32 {
                let Some((mem, s)) = memory(&mut c) else {
                    return EFAULT;
                };
                put_strings(mem, strings(&s.wasi), ptrs, buf)
            },
        )?;
    }
    linker.func_wrap(
        MODULE,
        "fd_write",
        |mut c: Caller<'_, RunState>, fd: i32, iovs: i32, n: i32, written: i32| -> i32 {
            fd_write(&mut c, fd, iovs, n, written)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_read",
        |mut c: Caller<'_, RunState>, fd: i32, iovs: i32, n: i32, read: i32| -> i32 {
            fd_read(&mut c, fd, iovs, n, read)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_close",
        |mut c: Caller<'_, RunState>, fd: i32| -> i32 {
            if (0..=2).contains(&fd) {
                return SUCCESS;
            }
            status(with_tree(&mut c, |_, t| t.close(fd)))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_seek",
        |mut c: Caller<'_, RunState>, fd: i32, off: i64, whence: i32, out: i32| -> i32 {
            if (0..=2).contains(&fd) {
                return ESPIPE;
            }
            status(with_tree(&mut c, |mem, t| {
                let at = t.seek(fd, off, whence)?;
                put_u64(mem, out, at).then_some(()).ok_or(EFAULT)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_tell",
        |mut c: Caller<'_, RunState>, fd: i32, out: i32| -> i32 {
            if (0..=2).contains(&fd) {
                return ESPIPE;
            }
            status(with_tree(&mut c, |mem, t| {
                let at = t.seek(fd, 0, 1)?;
                put_u64(mem, out, at).then_some(()).ok_or(EFAULT)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "path_open",
        |mut c: Caller<'_, RunState>,
         fd: i32,
         lookup: i32,
         path: i32,
         len: i32,
         oflags: i32,
         rights: i64,
         _inheriting: i64,
         fdflags: i32,
         out: i32|
         -> i32 {
            status(with_tree(&mut c, |mem, t| {
                let p = guest_path(mem, path, len)?;
                let n = t.path_open(fd, lookup, &p, oflags, rights, fdflags)?;
                put_u32(mem, out, n as u32).then_some(()).ok_or(EFAULT)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "path_filestat_get",
        |mut c: Caller<'_, RunState>, fd: i32, lookup: i32, path: i32, len: i32, out: i32| -> i32 {
            status(with_tree(&mut c, |mem, t| {
                let p = guest_path(mem, path, len)?;
                put_bytes(mem, out, &t.path_filestat(fd, lookup, &p)?)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_filestat_get",
        |mut c: Caller<'_, RunState>, fd: i32, out: i32| -> i32 {
            status(with_tree(&mut c, |mem, t| {
                put_bytes(mem, out, &t.fd_filestat(fd)?)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_readdir",
        |mut c: Caller<'_, RunState>, fd: i32, buf: i32, len: i32, cookie: i64, used: i32| -> i32 {
            status(with_tree(&mut c, |mem, t| {
                let r = range(mem, buf, len as u32).ok_or(EFAULT)?;
                let got = t.readdir(fd, cookie as u64, r.len())?;
                mem[r.start..r.start + got.len()].copy_from_slice(&got);
                put_u32(mem, used, got.len() as u32)
                    .then_some(())
                    .ok_or(EFAULT)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_fdstat_get",
        |mut c: Caller<'_, RunState>, fd: i32, out: i32| -> i32 { fdstat_get(&mut c, fd, out) },
    )?;
    // The preopened directory, if any, is descriptor 3; EBADF on the
    // next ends the guest's scan for them.
    linker.func_wrap(
        MODULE,
        "fd_prestat_get",
        |mut c: Caller<'_, RunState>, fd: i32, out: i32| -> i32 {
            status(with_tree(&mut c, |mem, t| {
                let len = t.prestat(fd).ok_or(EBADF)?;
                // prestat: tag u8 (0: a directory), then its name's length.
                let ok = put_u32(mem, out, 0) && put_u32(mem, out.wrapping_add(4), len);
                ok.then_some(()).ok_or(EFAULT)
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_prestat_dir_name",
        |mut c: Caller<'_, RunState>, fd: i32, p: i32, l: i32| -> i32 {
            status(with_tree(&mut c, |mem, t| {
                let name = t.prestat_name(fd).ok_or(EBADF)?;
                if (l as u32 as usize) < name.len() {
                    return Err(EINVAL);
                }
                let r = range(mem, p, name.len() as u32).ok_or(EFAULT)?;
                mem[r].copy_from_slice(name);
                Ok(())
            }))
        },
    )?;
    linker.func_wrap(
        MODULE,
        "clock_time_get",
        |mut c: Caller<'_, RunState>, id: i32, _precision: i64, out: i32| -> i32 {
            clock_time_get(&mut c, id, out)
        },
    )?;
    linker.func_wrap(
        MODULE,
        "clock_res_get",
        |mut c: Caller<'_, RunState>, id: i32, out: i32| -> i32 {
            if !(0..=3).contains(&id) {
                return EINVAL;
            }
            match memory(&mut c) {
                Some((mem, _)) => ok_or_fault(put_u64(mem, out, 1)),
                None => EFAULT,
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "random_get",
        |mut c: Caller<'_, RunState>, buf: i32, len: i32| -> i32 { random_get(&mut c, buf, len) },
    )?;
    linker.func_wrap(MODULE, "sched_yield", |_: Caller<'_, RunState>| -> i32 {
        SUCCESS
    })?;
    linker.func_wrap(
        MODULE,
        "proc_exit",
        |_: Caller<'_, RunState>, code: i32| -> wasmtime::Result<()> {
            Err(wasmtime::Error::new(Exit(code)))
        },
    )?;
    add_unsupported(linker)
}

/// The rest of preview1, each with its signature, returning ENOSYS.
fn add_unsupported(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    use ValType::{I32, I64};
    let table: &[(&str, &[ValType])] = &[
        ("fd_advise", &[I32, I64, I64, I32]),
        ("fd_allocate", &[I32, I64, I64]),
        ("fd_datasync", &[I32]),
        ("fd_fdstat_set_flags", &[I32, I32]),
        ("fd_fdstat_set_rights", &[I32, I64, I64]),
        ("fd_filestat_set_size", &[I32, I64]),
        ("fd_filestat_set_times", &[I32, I64, I64, I32]),
        ("fd_pread", &[I32, I32, I32, I64, I32]),
        ("fd_pwrite", &[I32, I32, I32, I64, I32]),
        ("fd_renumber", &[I32, I32]),
        ("fd_sync", &[I32]),
        ("path_create_directory", &[I32, I32, I32]),
        (
            "path_filestat_set_times",
            &[I32, I32, I32, I32, I64, I64, I32],
        ),
        ("path_link", &[I32, I32, I32, I32, I32, I32, I32]),
        ("path_readlink", &[I32, I32, I32, I32, I32, I32]),
        ("path_remove_directory", &[I32, I32, I32]),
        ("path_rename", &[I32, I32, I32, I32, I32, I32]),
        ("path_symlink", &[I32, I32, I32, I32, I32]),
        ("path_unlink_file", &[I32, I32, I32]),
        ("poll_oneoff", &[I32, I32, I32, I32]),
        ("proc_raise", &[I32]),
        ("sock_accept", &[I32, I32, I32]),
        ("sock_recv", &[I32, I32, I32, I32, I32, I32]),
        ("sock_send", &[I32, I32, I32, I32, I32]),
        ("sock_shutdown", &[I32, I32]),
    ];
    let engine = linker.engine().clone();
    for (name, params) in table {
        let ty = FuncType::new(&engine, params.iter().cloned(), [I32]);
        linker.func_new(MODULE, name, ty, |_, _, results| {
            results[0] = Val::I32(ENOSYS);
            Ok(())
        })?;
    }
    Ok(())
}
