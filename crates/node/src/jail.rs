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
//! How ([`launch`]): the node clones P0 (in the node's namespaces, its v1
//! cgroups but memory's, leader of the proc's process group), which closes
//! its copy of the node's lifeline and clones P1 into new namespaces, and
//! waits for it, passing on its exit status. P1 — pid 1 of the new pid
//! namespace — joins a network namespace made ahead ([`crate::netns`]) or
//! brings up the loopback of the one its clone made, enters its root —
//! a copy of the node's [`Template`] with its own `/proc`, `/tmp`,
//! working directory and socket, or, for a proc with host paths, code or
//! a program of its own, a root built for it in a tmpfs and pivoted into
//! — and clones P2, then reaps orphans until P2 ends (when pid 1 ends,
//! the kernel ends every other process of the namespace). P2 is cloned straight into the proc's cgroup of the unified
//! tree (`clone3(CLONE_INTO_CGROUP)`, which takes none of the locks that
//! moving a process in would; Linux 5.7 or later), joins its v1 memory
//! cgroup, takes its standard streams, drops to the realm's uid, installs
//! the seccomp filter and execs the program.
//!
//! None of them is a fork of the node. All three share the node's memory
//! (`CLONE_VM`), each on a stack of its own that the node keeps until the
//! proc has ended ([`Launch`]); P1 goes on while P2 runs up to its exec
//! (no `CLONE_VFORK`: P1 closes its copy of the exec's report pipe at
//! once, so the node hears of the exec from P2 alone, without waiting for
//! P1 to be scheduled again after it). A fork copied the node's page tables for each of
//! them, and while P0 and P1 held their copies every page the node wrote
//! cost it a fault and a TLB flush on every CPU: measured, most of a
//! native spawn's cost here, and a tax on the node's every thread. Sharing
//! the memory asks two things. The code P0, P1 and P2 run makes only raw
//! system calls ([`crate::rawsys`]: no libc, whose errno is the node
//! thread's and whose `setuid` signals the node's threads) on values made
//! before the clone, allocating nothing. And P0 and P1 join no memory
//! cgroup: an out-of-memory kill in one would kill every process sharing
//! their memory — the node. Only P2 joins the proc's, as its exec leaves
//! the node's memory behind.
//!
//! P0 and P1 close every descriptor they hold (P0 all but the lifeline's
//! read end), so the node learns of the exec (end of file on a pipe whose
//! write end P2 holds close-on-exec) or of the step that failed (its errno
//! on that pipe) from P2 alone, and no pipe is held open by them. P0
//! ignores SIGTERM, SIGINT and SIGHUP — an eviction's SIGTERM to the group
//! reaches the program (P2, not pid 1) and the proc ends when it does — so
//! the node sees the proc end when the program ends.
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

/// At most this many mounts a proc adds to the node's template root (its
/// working directory and the node's socket): P1 keeps their detached
/// copies in an array on its stack, allocating nothing.
const TEMPLATE_MOUNTS_MAX: usize = 2;

/// A jail's root as mounts to make: a tmpfs at `root` with its
/// directories, mount-point files and symlinks, and the binds into it,
/// then pivoted into and made read-only ([`Root::build`]).
#[derive(Debug)]
struct Root {
    root: CString,
    root_data: CString,
    tmp_data: CString,
    dirs: Vec<CString>,
    files: Vec<CString>,
    links: Vec<(CString, CString)>,
    /// (source, target, read-only)
    binds: Vec<(CString, CString, bool)>,
    /// Where a proc's own `/proc` and `/tmp` are mounted as they are made
    /// (none in the template: those are each proc's).
    proc_dir: Option<CString>,
    tmp_dir: Option<CString>,
    old: CString,
}

/// A root being laid out at `root` on the host.
struct Layout {
    root: PathBuf,
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    links: Vec<(CString, CString)>,
    binds: Vec<(CString, CString, bool)>,
}

impl Layout {
    /// The system's directories (read-only), the devices, `/dev`'s links
    /// and the mount points every jail has: `/proc`, `/tmp`,
    /// [`WORK_DIR`], and `/.old` (pivoted through, then removed).
    fn new(root: &Path) -> std::io::Result<Layout> {
        let mut l = Layout {
            root: root.to_path_buf(),
            dirs: Vec::new(),
            files: Vec::new(),
            links: Vec::new(),
            binds: Vec::new(),
        };
        for d in SYSTEM_DIRS {
            let host = Path::new(d);
            let Ok(meta) = std::fs::symlink_metadata(host) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let link = cstr(l.inside(host))?;
                l.links.push((cstr(std::fs::read_link(host)?)?, link));
            } else if meta.is_dir() {
                l.dir(host);
                l.bind(host, host, true)?;
            }
        }
        l.dir(Path::new("/dev"));
        for d in DEVICES {
            let host = Path::new("/dev").join(d);
            if host.exists() {
                l.files.push(l.inside(&host));
                l.bind(&host, &host, false)?;
            }
        }
        for (target, link) in [
            ("/proc/self/fd", "/dev/fd"),
            ("/proc/self/fd/0", "/dev/stdin"),
            ("/proc/self/fd/1", "/dev/stdout"),
            ("/proc/self/fd/2", "/dev/stderr"),
        ] {
            let link = cstr(l.inside(Path::new(link)))?;
            l.links.push((cstr(target)?, link));
        }
        for d in ["/proc", "/tmp", WORK_DIR, "/.old"] {
            l.dir(Path::new(d));
        }
        Ok(l)
    }

    /// `path` inside the root.
    fn inside(&self, path: &Path) -> PathBuf {
        under(&self.root, path)
    }

    /// Every ancestor of `p` inside the root, in order, once.
    fn dir(&mut self, p: &Path) {
        let mut acc = PathBuf::from("/");
        for c in p.components().skip(1) {
            acc.push(c);
            let inside = self.inside(&acc);
            if !self.dirs.contains(&inside) {
                self.dirs.push(inside);
            }
        }
    }

    /// A file's mount point at `p`, its directories first.
    fn file(&mut self, p: &Path) {
        if let Some(parent) = p.parent() {
            self.dir(parent);
        }
        self.files.push(self.inside(p));
    }

    /// Host path `src` bound at `at` inside the root.
    fn bind(&mut self, src: &Path, at: &Path, read_only: bool) -> std::io::Result<()> {
        self.binds
            .push((cstr(src)?, cstr(self.inside(at))?, read_only));
        Ok(())
    }

    /// The host files and directories of `extra`, read-only at their own
    /// paths.
    fn extras(&mut self, extra: &[(PathBuf, bool)]) -> std::io::Result<()> {
        for (p, is_dir) in extra {
            if *is_dir {
                self.dir(p);
            } else {
                self.file(p);
            }
            self.bind(p, p, true)?;
        }
        Ok(())
    }

    /// The mounts to make; a proc's own `/proc` and `/tmp` too when
    /// `proc_and_tmp`.
    fn finish(self, proc_and_tmp: bool) -> std::io::Result<Root> {
        let mine = |p: &str| -> std::io::Result<Option<CString>> {
            proc_and_tmp
                .then(|| cstr(under(&self.root, Path::new(p))))
                .transpose()
        };
        Ok(Root {
            root_data: cstr(format!("mode=0755,size={ROOT_BYTES_MAX}"))?,
            tmp_data: cstr(format!("mode=1777,size={TMP_BYTES_MAX}"))?,
            proc_dir: mine("/proc")?,
            tmp_dir: mine("/tmp")?,
            old: cstr(under(&self.root, Path::new("/.old")))?,
            dirs: self.dirs.iter().map(cstr).collect::<std::io::Result<_>>()?,
            files: self
                .files
                .iter()
                .map(cstr)
                .collect::<std::io::Result<_>>()?,
            root: cstr(&self.root)?,
            links: self.links,
            binds: self.binds,
        })
    }
}

/// The host files a proc sees besides the system's directories, each
/// read-only at its own path, with whether it is a directory: its program
/// when that is a file of its own, the node's executable (so a proc may
/// run the tabos CLI, which finds the node through TABOS_ADDR and
/// TABOS_TOKEN), and the host paths its spawn asked for.
fn extras(program: &str, host_paths: &[String]) -> std::io::Result<Vec<(PathBuf, bool)>> {
    use std::os::unix::fs::PermissionsExt;
    // World-executable regular files only (what any uid could run anyway).
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o001 != 0)
    };
    let mut extra: Vec<(PathBuf, bool)> = Vec::new();
    if program.contains('/') {
        let p = PathBuf::from(program);
        if runnable(&p) && p.is_absolute() && !is_system(&p) {
            extra.push((p, false));
        }
    }
    if let Ok(me) = std::env::current_exe() {
        if runnable(&me) && !is_system(&me) && !extra.iter().any(|(p, _)| p == &me) {
            extra.push((me, false));
        }
    }
    let mut asked: Vec<&String> = host_paths.iter().collect();
    asked.sort_by_key(|p| p.len()); // a directory before what is under it
    for h in asked {
        let p = PathBuf::from(h);
        // The realm's allowance is checked on the path's text; a symlink on
        // the way would bind whatever it points to.
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
    Ok(extra)
}

/// The root most jailed procs share, built once per node: the system's
/// directories, the devices, `/dev`'s links, the node's executable and
/// the mount points of a proc's own mounts, read-only, in a mount
/// namespace of its own that only this descriptor keeps.
///
/// Laying a root out cost every proc some forty system calls (a tmpfs,
/// its directories, a bind and a read-only remount for each system
/// directory, a pivot and the unmount of the node's whole tree), about
/// half a millisecond of its start here, and as much again for the kernel
/// to take apart after it. A proc whose jail has nothing of its own but
/// its working directory and the node's socket (no uploaded code, no
/// program file outside the system's directories, no host paths) has its
/// P1 join this namespace and copy it (`setns`, `unshare(CLONE_NEWNS)`:
/// the copy's root is the template's root), then mount its `/proc` and
/// `/tmp` and move in its own two mounts, copied from the node's tree
/// before it left it (`open_tree`, `move_mount`, each made private) — ten
/// calls. A proc
/// with more lays its root out as before (the template has no mount
/// point for what others do not have: a jail shows nothing it does not
/// use).
#[derive(Debug)]
pub struct Template {
    ns: OwnedFd,
    /// Whether it has the node socket's mount point.
    with_socket: bool,
    /// The host files and directories it has beyond the system's (the
    /// node's executable).
    extras: Vec<(PathBuf, bool)>,
    /// Each extra's identity when it was bound: a bind mount holds the
    /// file it was made of, so once its path names another file (the
    /// tabos binary upgraded in place) a proc must not be given the old
    /// one — it was, until the node restarted.
    bound: Vec<Option<FileId>>,
}

/// A file's device and inode.
type FileId = (u64, u64);

/// What `p` names now, if anything.
fn file_id(p: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

impl Template {
    /// Builds the template under `base` (a directory of the node's; the
    /// root's tmpfs is mounted on `base/template` in the template's own
    /// namespace only), with the node socket's mount point if
    /// `with_socket`. On a thread of its own: it leaves the node's mount
    /// namespace, builds, pivots and ends.
    pub fn make(base: &Path, with_socket: bool) -> std::io::Result<Template> {
        let dir = base.join("template");
        std::fs::create_dir_all(&dir)?;
        let extras = extras("", &[])?;
        let bound = extras.iter().map(|(p, _)| file_id(p)).collect();
        let mut l = Layout::new(&dir)?;
        if with_socket {
            l.file(Path::new(NODE_SOCKET));
        }
        l.extras(&extras)?;
        let root = l.finish(false)?;
        let built = std::thread::scope(|s| {
            s.spawn(|| -> std::io::Result<OwnedFd> {
                // Its own file system context and mount namespace: the
                // node's other threads keep theirs.
                rawsys::unshare(libc::CLONE_FS | libc::CLONE_NEWNS)?;
                let ns = OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/mnt")?);
                // A kernel without open_tree (before 5.2) cannot use it.
                // SAFETY: a NUL-terminated path of this function's.
                let probe = unsafe { rawsys::open_tree_clone(root.root.as_ptr()) }?;
                rawsys::close(probe);
                root.build()?;
                Ok(ns)
            })
            .join()
        });
        let ns = built.map_err(|_| std::io::Error::other("the template's thread panicked"))??;
        Ok(Template {
            ns,
            with_socket,
            extras,
            bound,
        })
    }

    /// Whether a proc with `extra` host files, and the node's socket if
    /// `with_socket`, can have this root: the same files, still the ones
    /// it bound (a proc whose program was replaced since has its root
    /// laid out afresh).
    fn fits(&self, with_socket: bool, extra: &[(PathBuf, bool)]) -> bool {
        self.with_socket == with_socket
            && self.extras == extra
            && self
                .extras
                .iter()
                .zip(&self.bound)
                .all(|((p, _), was)| file_id(p) == *was)
    }
}

/// How a proc's root is made in its P1.
#[derive(Debug)]
enum How {
    /// Laid out for this proc alone.
    Built(Root),
    /// The node's [`Template`], copied, with this proc's own mounts
    /// (host source, target inside; writable), at most
    /// [`TEMPLATE_MOUNTS_MAX`].
    Template {
        template: std::sync::Arc<Template>,
        mounts: Vec<(CString, CString)>,
        tmp_data: CString,
    },
}

/// Everything the child needs, made before the fork.
#[derive(Debug)]
pub struct Plan {
    how: How,
    work_inside: CString,
    filter: &'static [libc::sock_filter],
    /// A network namespace of its own (loopback only).
    own_network: bool,
    /// The host directories made for the proc, removed after it.
    pub made: Vec<PathBuf>,
}

/// The seccomp program of this architecture's allow-list, made once.
fn filter() -> Option<&'static [libc::sock_filter]> {
    static PROGRAM: std::sync::OnceLock<Option<Vec<libc::sock_filter>>> =
        std::sync::OnceLock::new();
    PROGRAM
        .get_or_init(|| crate::seccomp::native().map(|a| crate::seccomp::program(&a)))
        .as_deref()
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
    /// The jail of a proc whose working directory (and root, unless it
    /// can have the node's `template`) are made under `base` (a directory
    /// of the node's) as `name`, owned by `uid`, running its placement's
    /// program, seeing its host paths read-only and the node's socket at
    /// [`NODE_SOCKET`].
    pub fn new(
        base: &Path,
        name: &str,
        uid: Option<u32>,
        placement: &crate::confine::Placement<'_>,
        template: Option<&std::sync::Arc<Template>>,
    ) -> std::io::Result<Plan> {
        let work = base.join("work").join(name);
        std::fs::create_dir_all(&work)?;
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&work, Some(uid), Some(uid))?;
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700))?;
        let extra = extras(placement.program, placement.host_paths)?;
        let socket = placement.node_socket;
        let mut made = vec![work.clone()];
        let fits = |t: &&std::sync::Arc<Template>| {
            placement.code.is_none() && t.fits(socket.is_some(), &extra)
        };
        let how = match template.filter(fits) {
            Some(t) => {
                // The node's local socket, the proc's way to its node
                // (writable: connecting is a write; the node checks every
                // call's credential), and its working directory.
                let mut mounts = Vec::with_capacity(TEMPLATE_MOUNTS_MAX);
                if let Some(s) = socket {
                    mounts.push((cstr(s)?, cstr(NODE_SOCKET)?));
                }
                mounts.push((cstr(&work)?, cstr(WORK_DIR)?));
                assert!(mounts.len() <= TEMPLATE_MOUNTS_MAX);
                How::Template {
                    template: t.clone(),
                    mounts,
                    tmp_data: cstr(format!("mode=1777,size={TMP_BYTES_MAX}"))?,
                }
            }
            None => {
                let root = base.join("roots").join(name);
                std::fs::create_dir_all(&root)?;
                made.insert(0, root.clone());
                let mut l = Layout::new(&root)?;
                if let Some(s) = socket {
                    let inside = Path::new(NODE_SOCKET);
                    l.file(inside);
                    l.bind(s, inside, false)?;
                }
                l.bind(&work, Path::new(WORK_DIR), false)?;
                // Its uploaded code, read-only (the node's copy, checked
                // against its hash as it was leased: crate::code).
                if let Some(code) = placement.code {
                    l.dir(Path::new(CODE_DIR));
                    l.bind(code, Path::new(CODE_DIR), true)?;
                }
                l.extras(&extra)?;
                How::Built(l.finish(true)?)
            }
        };
        Ok(Plan {
            how,
            work_inside: cstr(if placement.code_is_cwd {
                CODE_DIR
            } else {
                WORK_DIR
            })?,
            filter: filter()
                .ok_or_else(|| std::io::Error::other("no seccomp list for this architecture"))?,
            own_network: !placement.host_network,
            made,
        })
    }

    /// Whether P1 is cloned into a new mount namespace (a root built for
    /// the proc alone), rather than joining the template's and copying it.
    fn new_mount_namespace(&self) -> bool {
        matches!(self.how, How::Built(_))
    }

    /// The template's namespace, which P0 keeps open for P1.
    fn template_ns(&self) -> Option<RawFd> {
        match &self.how {
            How::Template { template, .. } => Some(template.ns.as_raw_fd()),
            How::Built(_) => None,
        }
    }

    /// P1: the proc's root, entered, and its working directory. Only
    /// [`rawsys`] calls: it runs in a child sharing the node's memory.
    fn enter_root(&self) -> Result<(), Errno> {
        match &self.how {
            How::Built(root) => root.build()?,
            How::Template {
                template,
                mounts,
                tmp_data,
            } => enter_template(template, mounts, tmp_data)?,
        }
        // SAFETY: a CString of this plan.
        unsafe { rawsys::chdir(self.work_inside.as_ptr()) }
    }
}

/// P1's root from the template: this proc's own mounts copied from the
/// node's tree while P1 is still in it, the template's namespace joined
/// and copied, `/proc` and `/tmp` mounted and the copies moved in.
fn enter_template(
    template: &Template,
    mounts: &[(CString, CString)],
    tmp_data: &CString,
) -> Result<(), Errno> {
    let mut trees: [RawFd; TEMPLATE_MOUNTS_MAX] = [-1; TEMPLATE_MOUNTS_MAX];
    // SAFETY: every pointer is a CString of the plan, alive while the
    // child runs (jail::Launch holds the plan until the proc ended).
    unsafe {
        for (tree, (src, _)) in trees.iter_mut().zip(mounts) {
            *tree = rawsys::open_tree_clone(src.as_ptr())?;
        }
        let ns = template.ns.as_raw_fd();
        rawsys::setns(ns, libc::CLONE_NEWNS)?;
        rawsys::close(ns);
        // A copy of the template's namespace, this proc's alone: what it
        // mounts from here reaches neither the template nor another proc.
        rawsys::unshare(libc::CLONE_NEWNS)?;
        rawsys::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )?;
        rawsys::mount(
            c"tmpfs".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            tmp_data.as_ptr().cast(),
        )?;
        for (&tree, (_, target)) in trees.iter().zip(mounts) {
            rawsys::move_mount_to(tree, target.as_ptr())?;
            rawsys::close(tree);
            // Copied while P1 was in the node's namespace, where a host
            // (systemd's) shares its mounts: a copy is a peer of its source.
            // Made private, as a laid-out root's binds are, so no mount
            // event crosses between the host and the jail either way.
            rawsys::mount(
                std::ptr::null(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )?;
        }
    }
    Ok(())
}

impl Root {
    /// Mounts the root, pivots into it and makes it read-only. Only
    /// [`rawsys`] calls: it runs in a child sharing the node's memory (and
    /// on the template's thread).
    fn build(&self) -> Result<(), Errno> {
        let none = std::ptr::null::<libc::c_char>();
        let data = |c: &CString| c.as_ptr().cast::<libc::c_void>();
        // SAFETY: every pointer is a CString of this root, alive while the
        // child runs (jail::Launch holds the plan until the proc ended).
        unsafe {
            // Nothing done here propagates back to the node's namespace.
            rawsys::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )?;
            rawsys::mount(
                c"tabos".as_ptr(),
                self.root.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data(&self.root_data),
            )?;
            // /proc and /tmp are mounted as soon as they are made, so that
            // the host paths asked for under /tmp land on the jail's /tmp.
            for d in &self.dirs {
                match rawsys::mkdir(d.as_ptr(), 0o755) {
                    Ok(()) | Err(Errno(libc::EEXIST)) => {}
                    Err(e) => return Err(e),
                }
                if self.proc_dir.as_ref() == Some(d) {
                    rawsys::mount(
                        c"proc".as_ptr(),
                        d.as_ptr(),
                        c"proc".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        std::ptr::null(),
                    )?;
                } else if self.tmp_dir.as_ref() == Some(d) {
                    rawsys::mount(
                        c"tmpfs".as_ptr(),
                        d.as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        data(&self.tmp_data),
                    )?;
                }
            }
            for f in &self.files {
                rawsys::touch(f.as_ptr())?;
            }
            for (target, link) in &self.links {
                rawsys::symlink(target.as_ptr(), link.as_ptr())?;
            }
            for (src, dst, read_only) in &self.binds {
                rawsys::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )?;
                if *read_only {
                    rawsys::mount(
                        none,
                        dst.as_ptr(),
                        none,
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID,
                        std::ptr::null(),
                    )?;
                }
            }
            rawsys::pivot_root(self.root.as_ptr(), self.old.as_ptr())?;
            rawsys::chdir(c"/".as_ptr())?;
            rawsys::umount_detach(c"/.old".as_ptr())?;
            rawsys::rmdir(c"/.old".as_ptr())?;
            // The root's own directories are fixed from here on.
            rawsys::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                std::ptr::null(),
            )
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
    /// Its cgroup of the unified tree (a directory), P2 cloned into it.
    pub cgroup_dir: Option<RawFd>,
    /// Its v1 memory cgroup's `tasks`, which P2 writes itself into.
    pub memory_tasks: Option<RawFd>,
    /// The node's lifeline: (read end, write end).
    pub lifeline: Option<(RawFd, RawFd)>,
}

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::rawsys::{self, CloneArgs, Errno, Stack};

/// What the jailed program is run with, made in the node before the clone:
/// the paths to try in order (one, or the program under each directory of
/// `PATH`, as execvp would), its arguments and its whole environment.
#[derive(Debug)]
struct Exec {
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into the CStrings this Exec owns, which
// never move (each is its own allocation) and are only read.
unsafe impl Send for Exec {}

impl Exec {
    /// The program, arguments and environment `cmd` would run with: the
    /// node's environment with `cmd`'s changes.
    fn of(cmd: &std::process::Command) -> std::io::Result<Exec> {
        use std::collections::BTreeMap;
        use std::ffi::OsString;
        let bytes = |s: &std::ffi::OsStr| {
            CString::new(s.as_bytes()).map_err(|_| std::io::Error::other("a NUL byte"))
        };
        let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => env.insert(k.to_owned(), v.to_owned()),
                None => env.remove(k),
            };
        }
        let program = cmd.get_program();
        let candidates = if program.as_bytes().contains(&b'/') {
            vec![bytes(program)?]
        } else {
            let path = env
                .get(std::ffi::OsStr::new("PATH"))
                .cloned()
                .unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| bytes(d.join(program).as_os_str()))
                .collect::<std::io::Result<_>>()?
        };
        let argv_s: Vec<CString> = std::iter::once(program)
            .chain(cmd.get_args())
            .map(bytes)
            .collect::<std::io::Result<_>>()?;
        let envp_s: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.clone();
                kv.push("=");
                kv.push(v);
                bytes(&kv)
            })
            .collect::<std::io::Result<_>>()?;
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        Ok(Exec {
            candidates,
            argv: ptrs(&argv_s),
            envp: ptrs(&envp_s),
            _argv: argv_s,
            _envp: envp_s,
        })
    }
}

/// Everything P0, P1 and P2 read, at an address that does not move (boxed)
/// and kept until the proc has ended ([`Launch`]).
struct Ctx {
    plan: std::sync::Arc<Plan>,
    uid: Option<u32>,
    join: Join,
    /// Its v1 cgroups' `tasks`, each written by P0 for itself.
    tasks: Vec<RawFd>,
    exec: Exec,
    /// stdin, stdout and stderr for the program (each ≥ 3).
    stdio: [RawFd; 3],
    /// Where a failing step writes its errno (the node reads end of file
    /// when the program's exec succeeded).
    report: RawFd,
    flags: u64,
    /// A network namespace made ahead ([`crate::netns`]) for P1 to join,
    /// loopback up: then `flags` asks for none.
    netns: Option<RawFd>,
    /// The descriptors P0 keeps (sorted): the rest of the node's — its
    /// sockets, its database files — it closes first, so that a starting
    /// proc never holds one open (a connection the node closes would
    /// otherwise stay open, unseen by its peer, until P1 and P2 let go).
    keep: Vec<RawFd>,
    /// The descriptor limit the program gets: the one the node was given
    /// before it raised its own ([`tabos_store::descriptors`]).
    nofile: Option<(u64, u64)>,
    stacks: [Stack; 3],
}

/// A started jailed proc's memory that its first processes run on: held
/// until the proc has ended and its cgroup is empty
/// ([`crate::confine::Prepared::finish`]) — P0 and P1 live as long as the
/// program, on these stacks, in the node's memory.
pub struct Launch {
    ctx: Option<Box<Ctx>>,
    ended: bool,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("ended", &self.ended)
            .finish()
    }
}

impl Launch {
    /// Every process of the proc has ended: its memory may go.
    pub fn ended(&mut self) {
        self.ended = true;
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        if !self.ended {
            // A process of it may still run on these stacks: unmapping
            // them would crash it in the node's memory. Kept (and counted
            // as lost) rather than risked.
            std::mem::forget(self.ctx.take());
        }
    }
}

/// A jailed proc just started: P0's pid and pidfd, the read ends of its
/// standard output and error, and whether the program's exec succeeded
/// (`report`'s read end: end of file, or an errno).
pub struct Started {
    pub pid: u32,
    pub pidfd: OwnedFd,
    /// The network namespace it joined, made ahead or kept from an ended
    /// proc of its realm ([`crate::netns`]): given back once nothing of
    /// the proc is left.
    pub netns: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub report: OwnedFd,
    pub launch: Launch,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, ours from here on.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// `fd` moved to a descriptor ≥ 3 (so that placing the standard streams
/// never overwrites another of them), close-on-exec.
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() >= 3 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor, ours.
    unsafe {
        let n = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(n))
    }
}

/// Starts `cmd`'s program in the jail `plan` as `uid` (a proc whose network
/// namespace is filed under `network_key`, [`crate::netns::take_for`]), joined to its
/// cgroups (`tasks` of v1, `join` of the unified tree) — without forking
/// the node: P0, P1 and P2 share the node's memory (`CLONE_VM`, each on a
/// stack of its own), so no page table is
/// copied and no page of the node's is left copy-on-write while the proc
/// runs. A fork of the node cost milliseconds a proc here (page tables and,
/// after it, a fault and a cross-CPU TLB flush for every page the node
/// wrote while P0 and P1 held their copies).
pub fn launch(
    plan: std::sync::Arc<Plan>,
    network_key: &str,
    uid: Option<u32>,
    join: Join,
    tasks: Vec<RawFd>,
    cmd: &std::process::Command,
) -> std::io::Result<Started> {
    let exec = Exec::of(cmd)?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    let null = OwnedFd::from(std::fs::OpenOptions::new().read(true).open("/dev/null")?);
    let (null, out_w, err_w, report_w) = (
        above_stdio(null)?,
        above_stdio(out_w)?,
        above_stdio(err_w)?,
        above_stdio(report_w)?,
    );
    let mut flags = (libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;
    // A mount namespace of its own now, or P1 copies the template's.
    if plan.new_mount_namespace() {
        flags |= libc::CLONE_NEWNS as u64;
    }
    // A network of its own: one made ahead if one is ready, else made by
    // the clone (the kernel's half millisecond on the way to the exec).
    let netns = if plan.own_network {
        crate::netns::take_for(network_key)
    } else {
        None
    };
    if plan.own_network && netns.is_none() {
        flags |= libc::CLONE_NEWNET as u64;
    }
    let template_ns = plan.template_ns();
    let ctx = Box::new(Ctx {
        plan,
        uid,
        join,
        tasks,
        exec,
        stdio: [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
        report: report_w.as_raw_fd(),
        flags,
        netns: netns.as_ref().map(|f| f.as_raw_fd()),
        keep: {
            let mut keep: Vec<RawFd> = [
                null.as_raw_fd(),
                out_w.as_raw_fd(),
                err_w.as_raw_fd(),
                report_w.as_raw_fd(),
            ]
            .into_iter()
            .chain(netns.as_ref().map(|f| f.as_raw_fd()))
            .chain(template_ns)
            .chain(join.memory_tasks)
            .chain(join.cgroup_dir)
            .chain(join.lifeline.map(|(read, _)| read))
            .collect();
            keep.sort_unstable();
            keep.dedup();
            keep
        },
        nofile: tabos_store::descriptors::inherited_limit(),
        stacks: [Stack::new()?, Stack::new()?, Stack::new()?],
    });
    let mut pidfd: RawFd = -1;
    let (stack, stack_size) = ctx.stacks[0].span();
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_PIDFD) as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack,
        stack_size,
        ..Default::default()
    };
    let arg = &*ctx as *const Ctx as usize;
    // SAFETY: P0 runs p0 on its own stack, reading `ctx`, which `Launch`
    // keeps (boxed, never moved) until the proc has ended.
    let pid = unsafe { rawsys::clone3_run(&args, p0, arg) }?;
    // The children hold their own copies of these; the node's go.
    drop((null, out_w, err_w, report_w));
    // SAFETY: the kernel wrote a new pidfd, ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Started {
        pid: pid as u32,
        pidfd,
        netns,
        stdout: out_r,
        stderr: err_r,
        report: report_r,
        launch: Launch {
            ctx: Some(ctx),
            ended: false,
        },
    })
}

/// A step of P0, P1 or P2 failed: its errno to the node, and out.
fn fail(c: &Ctx, e: Errno) -> ! {
    let b = e.0.to_ne_bytes();
    // SAFETY: `b` lives through the call.
    let _ = unsafe { rawsys::write(c.report, b.as_ptr(), b.len()) };
    rawsys::exit(127)
}

/// P0: in the node's namespaces, joined to the proc's v1 cgroups, leader
/// of the proc's process group; starts P1 in the new namespaces (straight
/// into the proc's unified cgroup) and waits for it.
unsafe extern "C" fn p0(arg: usize) -> ! {
    // SAFETY: `arg` is the Ctx `launch` keeps alive for this process.
    let c = unsafe { &*(arg as *const Ctx) };
    // The node's signal handlers (tokio's, for SIGCHLD, SIGTERM…) would
    // run here, in the node's memory, when P1 ends: every signal back to
    // its default (P1 and P2 inherit them). SIGKILL and SIGSTOP cannot be
    // changed; the kernel refuses them and numbers past the last.
    for sig in 1..=64 {
        rawsys::signal(sig, libc::SIG_DFL);
    }
    for &fd in &c.tasks {
        // "0" is the writing task: P0 itself.
        // SAFETY: a static byte.
        if let Err(e) = unsafe { rawsys::write(fd, b"0".as_ptr(), 1) } {
            fail(c, e);
        }
    }
    // Everything else of the node's goes — the lifeline's write end too:
    // only the node may hold it, or its end would go unheard.
    let mut next: u32 = 0;
    for &k in &c.keep {
        let k = k as u32;
        if k > next {
            rawsys::close_range(next, k - 1);
        }
        next = k + 1;
    }
    rawsys::close_range(next, u32::MAX);
    if let Err(e) = rawsys::setpgid_self() {
        fail(c, e);
    }
    let (stack, stack_size) = c.stacks[1].span();
    let args = CloneArgs {
        flags: c.flags | libc::CLONE_VM as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack,
        stack_size,
        ..Default::default()
    };
    // SAFETY: P1 runs on its own stack, reading `c` as P0 does.
    let p1 = match unsafe { rawsys::clone3_run(&args, p1, arg) } {
        Ok(pid) => pid as i32,
        Err(e) => fail(c, e),
    };
    waiter(p1, true, c.join.lifeline.map(|(read, _)| read))
}

/// P1: pid 1 of the new pid namespace; its network's loopback up, its
/// root entered, then P2, then reaps until P2 ends.
unsafe extern "C" fn p1(arg: usize) -> ! {
    // SAFETY: as p0.
    let c = unsafe { &*(arg as *const Ctx) };
    let built = (|| {
        match c.netns {
            // Made ahead, loopback up; P2 must not hold it.
            Some(fd) => {
                rawsys::setns(fd, libc::CLONE_NEWNET)?;
                rawsys::close(fd);
            }
            None if c.plan.own_network => loopback_up()?,
            None => {}
        }
        c.plan.enter_root()
    })();
    if let Err(e) = built {
        fail(c, e);
    }
    let (stack, stack_size) = c.stacks[2].span();
    let mut args = CloneArgs {
        flags: libc::CLONE_VM as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack,
        stack_size,
        ..Default::default()
    };
    if let Some(dir) = c.join.cgroup_dir {
        args.flags |= rawsys::CLONE_INTO_CGROUP;
        args.cgroup = dir as u64;
    }
    // SAFETY: P2 runs on its own stack (P1 goes on to wait on its own).
    let p2 = match unsafe { rawsys::clone3_run(&args, p2, arg) } {
        Ok(pid) => pid as i32,
        Err(e) => fail(c, e),
    };
    waiter(p2, false, None)
}

/// P2: the program's process — its standard streams placed, its uid taken,
/// its signals as a new process expects, the seccomp filter on, and exec.
unsafe extern "C" fn p2(arg: usize) -> ! {
    // SAFETY: as p0.
    let c = unsafe { &*(arg as *const Ctx) };
    let e = (|| -> Result<(), Errno> {
        if let Some(fd) = c.join.memory_tasks {
            // "0": P2 itself (it shares the node's memory only until its
            // exec, in a cgroup nothing else is charged to yet).
            // SAFETY: a static byte.
            unsafe { rawsys::write(fd, b"0".as_ptr(), 1) }?;
        }
        for (i, &fd) in c.stdio.iter().enumerate() {
            rawsys::dup3(fd, i as RawFd)?;
        }
        if let Some((soft, hard)) = c.nofile {
            rawsys::set_nofile(soft, hard)?;
        }
        if let Some(uid) = c.uid {
            rawsys::setgroups_none()?;
            rawsys::setgid(uid)?;
            rawsys::setuid(uid)?;
        }
        // The node ignores SIGPIPE (as Rust programs do); a program
        // expects the default, as std's Command gives it.
        rawsys::signal(libc::SIGPIPE, libc::SIG_DFL);
        rawsys::unblock_all();
        let filter = &c.plan.filter;
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` and the filter live through the calls.
        unsafe {
            rawsys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)?;
            rawsys::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as usize,
                &prog as *const libc::sock_fprog as usize,
            )?;
        }
        // As execvp: the first that runs; a missing one is passed over.
        let mut kept = Errno(libc::ENOENT);
        for path in &c.exec.candidates {
            // SAFETY: NUL-terminated strings and null-terminated arrays
            // of them, all in `c`.
            let e = unsafe {
                rawsys::execve(path.as_ptr(), c.exec.argv.as_ptr(), c.exec.envp.as_ptr())
            };
            match e.0 {
                libc::ENOENT | libc::ENOTDIR => {}
                _ if kept.0 == libc::ENOENT => kept = e,
                _ => {}
            }
        }
        Err(kept)
    })();
    match e {
        Err(e) => fail(c, e),
        Ok(()) => fail(c, Errno(libc::EINVAL)),
    }
}

/// Loopback up in this process's (or thread's) network namespace, a new
/// one (which has `lo`, down): P1's, or one [`crate::netns`] makes ahead.
pub(crate) fn loopback_up() -> Result<(), Errno> {
    let fd = rawsys::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC)?;
    // SAFETY: ifreq is plain data, valid all zeroes.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    let req_ptr = &mut req as *mut libc::ifreq as usize;
    // SAFETY: `req` lives through both calls.
    let up = unsafe {
        rawsys::ioctl(fd, libc::SIOCGIFFLAGS as libc::c_ulong, req_ptr).and_then(|()| {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            rawsys::ioctl(fd, libc::SIOCSIFFLAGS as libc::c_ulong, req_ptr)
        })
    };
    rawsys::close(fd);
    up
}

/// P0 (`outer`) or P1: closes every descriptor (P0 keeps `lifeline`, the
/// read end of the node's lifeline), waits for `child` (P1 also reaps
/// whatever else ends in its namespace; P0 also kills `child` when the
/// lifeline hangs up) and exits as it did: its exit code, or 128 + the
/// signal that ended it.
fn waiter(child: i32, outer: bool, lifeline: Option<RawFd>) -> ! {
    match lifeline {
        Some(keep) => {
            if keep > 0 {
                rawsys::close_range(0, (keep - 1) as u32);
            }
            rawsys::close_range((keep + 1) as u32, u32::MAX);
        }
        None => rawsys::close_range(0, u32::MAX),
    }
    if outer {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            rawsys::signal(sig, libc::SIG_IGN);
        }
    }
    // P0 watches the lifeline beside its child: a pidfd becomes readable
    // when the child ends.
    if let Some(line) = lifeline {
        if let Ok(pidfd) = rawsys::pidfd_open(child) {
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
                // SAFETY: `fds` lives through the call.
                match unsafe { rawsys::poll(fds.as_mut_ptr(), fds.len()) } {
                    Err(Errno(libc::EINTR)) => continue,
                    Err(_) => break,
                    Ok(_) => {}
                }
                if fds[0].revents != 0 {
                    // The node is gone: so is its proc.
                    rawsys::kill(child, libc::SIGKILL);
                    break;
                }
                if fds[1].revents != 0 {
                    break;
                }
            }
        }
    }
    loop {
        match rawsys::wait(if outer { child } else { -1 }) {
            Err(Errno(libc::EINTR)) => continue,
            Err(_) => rawsys::exit(127),
            Ok((pid, _)) if pid != child => continue, // an orphan reaped by pid 1
            Ok((_, status)) => {
                if libc::WIFEXITED(status) {
                    rawsys::exit(libc::WEXITSTATUS(status));
                }
                if libc::WIFSIGNALED(status) {
                    rawsys::exit(128 + libc::WTERMSIG(status));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_does_not_fit_once_its_program_is_replaced() {
        let dir = tabos_store::testing::TempDir::new("jail-template-fits");
        let program = dir.path().join("prog");
        std::fs::write(&program, b"old").unwrap();
        let extra = vec![(program.clone(), false)];
        let t = Template {
            ns: OwnedFd::from(std::fs::File::open("/dev/null").unwrap()),
            with_socket: true,
            extras: extra.clone(),
            bound: vec![file_id(&program)],
        };
        assert!(t.fits(true, &extra));
        assert!(!t.fits(false, &extra));
        assert!(!t.fits(true, &[]));
        // Written in place: the same file, still bound.
        std::fs::write(&program, b"patched").unwrap();
        assert!(t.fits(true, &extra));
        // Replaced (as cargo and package managers do: a new file renamed
        // over the path), or gone: not the file the template holds.
        let new = dir.path().join("prog.new");
        std::fs::write(&new, b"new").unwrap();
        std::fs::rename(&new, &program).unwrap();
        assert!(!t.fits(true, &extra));
        std::fs::remove_file(&program).unwrap();
        assert!(!t.fits(true, &extra));
    }
}
