//! Network namespaces made ahead of the jailed procs that need one
//! ([`crate::jail`]).
//!
//! A proc whose realm does not share the host's network gets a network
//! namespace of its own, with loopback only. The kernel takes about half a
//! millisecond here to make one (`copy_net_ns`: the loopback device, its
//! sysctl tables, the per-namespace state of every protocol), which was
//! spent in the `clone3` that starts the proc, on the way to its exec. So
//! a thread of the node's makes them beforehand, up to [`READY_MAX`] at a
//! time and only on CPU time nothing else wants (`SCHED_IDLE`): it enters
//! a new namespace (`unshare(CLONE_NEWNET)`), brings its loopback up,
//! keeps a descriptor of it and goes back to the node's. A proc's P1 joins
//! a ready one (`setns`) instead of asking for a new one in its `clone3`.
//!
//! Each namespace is fresh, made for one proc and given to one only: none
//! is used again (a proc's sockets may outlive it in TIME_WAIT, and one
//! proc's network is never another's). While none is ready — the first
//! proc, a burst larger than the pool, a host where the thread could not
//! make one — a proc gets its namespace in its `clone3` as before, so
//! nothing ever waits for this thread.
//!
//! The thread starts with the first proc that asks and stops for good at
//! its first failure (said once in the log): a namespace it could not
//! make or a return to the node's namespace that failed leaves the node's
//! procs on the `clone3` path.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Condvar, Mutex, OnceLock};

/// Most namespaces kept ready: enough for the procs of a spawn that come
/// close together; each costs the kernel tens of KiB while it waits.
pub const READY_MAX: usize = 4;

/// The pool: namespaces ready, and whether its thread still makes them.
struct Pool {
    state: Mutex<State>,
    /// Wakes the thread when a namespace is taken.
    taken: Condvar,
    /// Told when one is made (what a test waits on).
    made: Condvar,
}

#[derive(Default)]
struct State {
    ready: Vec<OwnedFd>,
    /// The thread has stopped (it failed once): none is made again.
    stopped: bool,
    /// The thread was started (by the first `take`).
    started: bool,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(State::default()),
        taken: Condvar::new(),
        made: Condvar::new(),
    })
}

/// A fresh network namespace with its loopback up, if one is ready — a
/// descriptor of it, close-on-exec, for the proc's P1 to join — and asks
/// for another to be made. `None` (none ready yet, or none can be made
/// here): the caller makes its own with `CLONE_NEWNET`.
pub fn take() -> Option<OwnedFd> {
    let p = pool();
    let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
    if st.stopped {
        return None;
    }
    if !st.started {
        st.started = true;
        let spawned = std::thread::Builder::new()
            .name("tabos-netns".into())
            .spawn(|| fill(pool()));
        if let Err(e) = spawned {
            tracing::warn!("network namespaces are made as procs start: no thread ({e})");
            st.stopped = true;
            return None;
        }
    }
    let fd = st.ready.pop();
    p.taken.notify_one();
    fd
}

/// The pool's thread: keeps [`READY_MAX`] namespaces ready until it fails.
/// It runs only on CPU time nothing else wants (`SCHED_IDLE`): making a
/// namespace right after a proc took one competed with that proc's own
/// start for this machine's cores; under a burst that leaves none spare,
/// procs make their own as before.
fn fill(p: &'static Pool) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` outlives the call; 0 is this thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::debug!("the network namespaces' thread keeps its priority: {e}");
    }
    let stop = |why: String| {
        tracing::warn!("network namespaces are made as procs start from here on: {why}");
        let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
        st.stopped = true;
        st.ready.clear();
        p.made.notify_all();
    };
    let home = match open_own() {
        Ok(fd) => fd,
        Err(e) => return stop(format!("this thread's network namespace: {e}")),
    };
    loop {
        {
            let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
            while st.ready.len() >= READY_MAX {
                st = p.taken.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
        match make(&home) {
            Ok(fd) => {
                let mut st = p.state.lock().unwrap_or_else(|e| e.into_inner());
                st.ready.push(fd);
                p.made.notify_all();
            }
            Err(e) => return stop(e.to_string()),
        }
    }
}

/// A new network namespace with its loopback up, made by this thread,
/// which then goes back to `home`.
fn make(home: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: no memory; changes this thread's network namespace only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let made = crate::jail::loopback_up()
        .map_err(std::io::Error::from)
        .and_then(|()| open_own());
    // SAFETY: `home` is a network namespace's descriptor, open.
    if unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::other(format!(
            "cannot go back to the node's network namespace: {e}"
        )));
    }
    made
}

/// This thread's network namespace, as a descriptor (close-on-exec).
fn open_own() -> std::io::Result<OwnedFd> {
    let path = c"/proc/thread-self/ns/net";
    // SAFETY: a NUL-terminated path; the descriptor returned is ours.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn inode(fd: &OwnedFd) -> u64 {
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .expect("a namespace descriptor")
            .ino()
    }

    /// Whether loopback is up in the namespace `fd` (looked at from a
    /// thread of its own, which joins it).
    fn loopback_is_up(fd: &OwnedFd) -> bool {
        let raw = fd.as_raw_fd();
        std::thread::spawn(move || {
            // SAFETY: a namespace's descriptor, open while the test holds it.
            assert_eq!(unsafe { libc::setns(raw, libc::CLONE_NEWNET) }, 0);
            // SAFETY: a socket of ours, closed below; `req` outlives the call.
            unsafe {
                let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                assert!(s >= 0);
                let mut req: libc::ifreq = std::mem::zeroed();
                for (i, b) in b"lo".iter().enumerate() {
                    req.ifr_name[i] = *b as libc::c_char;
                }
                assert_eq!(libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut req), 0);
                libc::close(s);
                req.ifr_ifru.ifru_flags & libc::IFF_UP as libc::c_short != 0
            }
        })
        .join()
        .expect("the looking thread")
    }

    /// The pool gives what its thread made ahead: a namespace of its own
    /// with loopback up, once the thread has had time to make one.
    #[test]
    fn the_pool_gives_namespaces_made_ahead() {
        let home = open_own().expect("our namespace");
        // The first asks for the thread; what it gets is whatever was ready.
        drop(take());
        let p = pool();
        let st = p.state.lock().unwrap();
        let (st, _) = p
            .made
            .wait_timeout_while(st, std::time::Duration::from_secs(30), |st| {
                st.ready.is_empty() && !st.stopped
            })
            .unwrap();
        assert!(
            !st.stopped,
            "the pool's thread stopped (making one needs root)"
        );
        drop(st);
        let fd = take().expect("a namespace made ahead");
        assert_ne!(inode(&fd), inode(&home));
        assert!(loopback_is_up(&fd));
    }

    /// Namespaces made by the pool's thread are new ones — not the
    /// process's, not each other's — with loopback up, and the thread is
    /// back in its own after each. (Needs root, as the jail does.)
    #[test]
    fn made_namespaces_are_fresh_and_the_maker_goes_home() {
        let home = open_own().expect("our namespace");
        let mut seen = vec![inode(&home)];
        let mut kept = Vec::new();
        for _ in 0..3 {
            let fd = make(&home).expect("a namespace (making one needs root)");
            let ino = inode(&fd);
            assert!(!seen.contains(&ino), "{ino} among {seen:?}");
            assert!(loopback_is_up(&fd), "loopback up in {ino}");
            seen.push(ino);
            kept.push(fd);
            assert_eq!(
                inode(&open_own().unwrap()),
                seen[0],
                "the maker went back to its own namespace"
            );
        }
    }
}
