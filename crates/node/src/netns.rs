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
//! A namespace is given to one proc at a time, and only ever to procs of
//! one realm: once a proc has ended and nothing of it is left (its cgroup
//! emptied), its namespace is kept for its realm's next proc
//! ([`give_back`], [`take_for`]; at most [`KEPT_PER_REALM_MAX`] a realm,
//! [`KEPT_MAX`] in all, the oldest let go). Making one was the largest
//! single cost of a burst of native procs (perf: `copy_net_ns` and the
//! sysctl tables it registers, about a quarter of all samples, between
//! this thread and the clones that found none ready). What a proc leaves
//! in its network after its processes are gone — sockets in TIME_WAIT, its
//! loopback's counters — it could not change beyond (a jailed proc holds
//! no capability in it), and only a later proc of its own realm sees it;
//! another realm's never does. While none is ready — the first proc, a
//! burst larger than the pool, a host where the thread could not make one
//! — a proc's namespace is made at once on a short-lived thread of its own
//! (so that it too can be kept), or, where that fails, by its `clone3`; so
//! nothing ever waits for the pool's thread.
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
/// Most namespaces kept for one realm's next procs after its procs ended.
pub const KEPT_PER_REALM_MAX: usize = 8;
/// Most namespaces kept after their procs, all realms together.
pub const KEPT_MAX: usize = 64;

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
    /// Namespaces whose proc ended, with its realm, oldest first.
    kept: std::collections::VecDeque<(String, OwnedFd)>,
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

/// A network namespace for a proc of `realm` (as its node files it: the
/// node instance and the realm's name): one a proc of the realm ended in
/// ([`give_back`]), else one made ahead ([`take`]), else one made now on
/// a thread of its own (so that it too can be kept after its proc).
/// `None` only where none can be made that way.
pub fn take_for(realm: &str) -> Option<OwnedFd> {
    {
        let mut st = pool().state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = st.kept.iter().rposition(|(r, _)| r == realm) {
            return st.kept.remove(i).map(|(_, fd)| fd);
        }
    }
    take().or_else(|| match made_now() {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::debug!("a network namespace made by the proc's clone: {e}");
            None
        }
    })
}

/// A new network namespace with its loopback up, made by a thread that
/// ends in it (nothing has to go back to the node's).
fn made_now() -> std::io::Result<OwnedFd> {
    std::thread::Builder::new()
        .name("tabos-netns-now".into())
        .spawn(|| {
            // SAFETY: no memory; changes this short-lived thread's only.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            crate::jail::loopback_up().map_err(std::io::Error::from)?;
            open_own()
        })?
        .join()
        .map_err(|_| std::io::Error::other("the namespace's thread panicked"))?
}

/// The namespace `fd` of a proc of `realm` that has ended, nothing of it
/// left running: kept for the realm's next proc, within the bounds (else
/// closed, and the kernel takes it apart).
pub fn give_back(realm: &str, fd: OwnedFd) {
    let mut st = pool().state.lock().unwrap_or_else(|e| e.into_inner());
    if st.kept.iter().filter(|(r, _)| r == realm).count() >= KEPT_PER_REALM_MAX {
        return;
    }
    st.kept.push_back((realm.to_string(), fd));
    while st.kept.len() > KEPT_MAX {
        st.kept.pop_front();
    }
}

/// Lets go of the namespaces kept under every key starting with `prefix`
/// (a node instance's, as it stops: none of its realms' procs will ask).
pub fn forget(prefix: &str) {
    let mut st = pool().state.lock().unwrap_or_else(|e| e.into_inner());
    st.kept.retain(|(key, _)| !key.starts_with(prefix));
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
        st.kept.clear();
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

    /// A namespace given back goes to the next proc of its realm only,
    /// within the bounds.
    #[test]
    fn a_namespace_given_back_goes_to_its_realm_only() {
        let home = open_own().expect("our namespace");
        let realm = format!("kept-{}", std::process::id());
        let fd = make(&home).expect("a namespace (making one needs root)");
        let ino = inode(&fd);
        give_back(&realm, fd);
        // Another realm never gets it (it gets a fresh one, or none).
        if let Some(other) = take_for(&format!("{realm}-other")) {
            assert_ne!(inode(&other), ino);
        }
        let again = take_for(&realm).expect("the realm's namespace");
        assert_eq!(inode(&again), ino);
        assert!(loopback_is_up(&again));
        // Bounded: past the realm's most, one given back is let go.
        let made: Vec<OwnedFd> = (0..KEPT_PER_REALM_MAX + 1)
            .map(|_| make(&home).expect("a namespace"))
            .collect();
        let last = inode(made.last().expect("made"));
        for fd in made {
            give_back(&realm, fd);
        }
        let kept = {
            let st = pool().state.lock().unwrap();
            let of_realm: Vec<u64> = st
                .kept
                .iter()
                .filter(|(r, _)| *r == realm)
                .map(|(_, fd)| inode(fd))
                .collect();
            assert!(st.kept.len() <= KEPT_MAX);
            of_realm
        };
        assert_eq!(kept.len(), KEPT_PER_REALM_MAX);
        assert!(!kept.contains(&last), "one past the realm's most was kept");
        // A node that stops lets go of its realms' (keys under its name).
        forget(&realm);
        let st = pool().state.lock().unwrap();
        assert!(!st.kept.iter().any(|(r, _)| r.starts_with(&realm)));
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
