//! The cgroups of this host, as they are mounted: version 1 controllers,
//! the version 2 (unified) tree, or both — "hybrid", as systemd's hybrid
//! mode has it (and this project's CI machines: the `cpu`, `memory` and
//! `pids` controllers in v1 hierarchies beside a cgroup2 tree without
//! them). Read once from `/proc/self/mountinfo` and `/proc/self/cgroup`.
//!
//! What uses it: [`crate::confine`] (a cgroup per native proc: limits
//! through whichever hierarchy holds the controller, membership, kill,
//! freeze, CPU time and pressure through the unified tree where there is
//! one) and [`crate::size`] (the memory the node itself may use).
//!
//! The file names and formats are the kernel's
//! (`Documentation/admin-guide/cgroup-v2.rst`, `cgroup-v1/*.rst`).

use std::path::{Path, PathBuf};

/// The v1 controllers confinement uses.
pub const V1_CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "cpuacct"];
/// The v2 controllers that carry per-proc limits.
pub const V2_LIMIT_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];
/// A limit at or above this many bytes is "no limit" (the kernel writes
/// `PAGE_COUNTER_MAX` pages, about 2^63 bytes, for v1's unlimited).
const UNLIMITED_BYTES: u64 = 1 << 60;

/// How the host mounts cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only v1 hierarchies.
    V1,
    /// Only the unified tree, holding the limit controllers.
    V2,
    /// v1 hierarchies for the limit controllers, and a unified tree beside
    /// them for membership, kill, freeze, CPU time and pressure.
    Hybrid,
    /// No cgroups at all.
    None,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::V1 => "v1",
            Mode::V2 => "v2",
            Mode::Hybrid => "hybrid (v1 and v2)",
            Mode::None => "none",
        })
    }
}

/// A mounted hierarchy: where, and this process's own cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// The mount point.
    pub mount: PathBuf,
    /// This process's cgroup, as a directory under [`Hierarchy::mount`].
    pub own: PathBuf,
}

/// The host's cgroup hierarchies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    /// Each v1 controller of [`V1_CONTROLLERS`] that is mounted.
    pub v1: Vec<(&'static str, Hierarchy)>,
    /// The unified (cgroup2) tree, if mounted.
    pub unified: Option<Hierarchy>,
    /// Controllers the unified tree offers at this process's cgroup
    /// (its `cgroup.controllers`).
    pub unified_controllers: Vec<String>,
}

impl Hierarchies {
    /// This host's, as this process sees them.
    pub fn detect() -> Hierarchies {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut h = Hierarchies::parse(&mountinfo, &own);
        if let Some(u) = &h.unified {
            h.unified_controllers = std::fs::read_to_string(u.own.join("cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
        }
        h
    }

    /// The hierarchies of a `mountinfo` table and a `/proc/<pid>/cgroup`
    /// listing (controllers not read: see [`Hierarchies::detect`]).
    pub fn parse(mountinfo: &str, own: &str) -> Hierarchies {
        // "hierarchy-id:controller,list:/path" per line; "0::/path" is v2.
        let own_paths: Vec<(Vec<&str>, &str)> = own
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                Some((
                    controllers.split(',').filter(|c| !c.is_empty()).collect(),
                    path,
                ))
            })
            .collect();
        let mut h = Hierarchies::default();
        for line in mountinfo.lines() {
            // "id parent major:minor root mount-point options [optional…] - fstype source super-options"
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(mount), Some(fstype)) = (left.get(3), left.get(4), right.first())
            else {
                continue;
            };
            let mount = PathBuf::from(unescape(mount));
            match *fstype {
                "cgroup2" => {
                    let path = own_paths
                        .iter()
                        .find(|(c, _)| c.is_empty())
                        .map_or("/", |(_, p)| p);
                    h.unified.get_or_insert(Hierarchy {
                        own: under_mount(&mount, root, path),
                        mount,
                    });
                }
                "cgroup" => {
                    let options = right.get(2).copied().unwrap_or_default();
                    for name in V1_CONTROLLERS {
                        if !options.split(',').any(|o| o == name)
                            || h.v1.iter().any(|(n, _)| *n == name)
                        {
                            continue;
                        }
                        let path = own_paths
                            .iter()
                            .find(|(c, _)| c.contains(&name))
                            .map_or("/", |(_, p)| p);
                        h.v1.push((
                            name,
                            Hierarchy {
                                own: under_mount(&mount, root, path),
                                mount: mount.clone(),
                            },
                        ));
                    }
                }
                _ => {}
            }
        }
        h
    }

    /// How the host mounts cgroups.
    pub fn mode(&self) -> Mode {
        let limits_in_v1 = ["memory", "pids", "cpu"]
            .iter()
            .any(|c| self.v1.iter().any(|(n, _)| n == c));
        match (limits_in_v1, &self.unified) {
            (true, Some(_)) => Mode::Hybrid,
            (true, None) => Mode::V1,
            (false, Some(_)) => Mode::V2,
            (false, None) if !self.v1.is_empty() => Mode::V1,
            (false, None) => Mode::None,
        }
    }

    /// The v1 hierarchy of `controller`, if mounted.
    pub fn v1(&self, controller: &str) -> Option<&Hierarchy> {
        self.v1
            .iter()
            .find(|(n, _)| *n == controller)
            .map(|(_, h)| h)
    }

    /// The memory this process may use by its cgroups' limits (its own
    /// cgroup's and every ancestor's, the least), or `None` if none
    /// limits it.
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        let mut least: Option<u64> = None;
        let mut take = |dir: &Path, file: &str| {
            if let Some(n) = read_limit(&dir.join(file)) {
                least = Some(least.map_or(n, |l| l.min(n)));
            }
        };
        if let Some(m) = self.v1("memory") {
            for dir in up_to(&m.own, &m.mount) {
                take(dir, "memory.limit_in_bytes");
            }
        }
        if let Some(u) = &self.unified {
            for dir in up_to(&u.own, &u.mount) {
                take(dir, "memory.max");
            }
        }
        least
    }
}

/// `path` (a cgroup path as `/proc/self/cgroup` gives it) as a directory
/// under a hierarchy mounted at `mount` whose root is `root`: a container's
/// mount shows its own cgroup as the root.
fn under_mount(mount: &Path, root: &str, path: &str) -> PathBuf {
    let rel = match path.strip_prefix(root) {
        Some(rel) if root != "/" => rel,
        _ if root == "/" => path,
        // Not under the mount's root (another namespace's view): the
        // mount's root is the nearest we can name.
        _ => "",
    };
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(rel)
    }
}

/// `dir` and its ancestors, through `mount` (inclusive).
fn up_to<'a>(dir: &'a Path, mount: &'a Path) -> impl Iterator<Item = &'a Path> {
    dir.ancestors().take_while(move |d| d.starts_with(mount))
}

/// A limit file: a number of bytes, or `max` (none).
fn read_limit(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let n: u64 = text.trim().parse().ok()?;
    (n < UNLIMITED_BYTES).then_some(n)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..=i + 3].iter().all(u8::is_ascii_digit) {
            let n = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first number of a `key value` line in a flat-keyed cgroup file
/// (`cpu.stat`, `memory.events`, `memory.stat`).
pub fn keyed(text: &str, key: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A pressure file's "some" average over the last ten seconds, in percent
/// (`some avg10=0.12 avg60=… total=…`).
pub fn pressure_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This project's CI machine: v1 controllers beside an empty cgroup2
    /// tree at /sys/fs/cgroup/unified; the process in a v1 memory cgroup
    /// of its own.
    const HYBRID: &str = "\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
35 31 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
36 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
37 31 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
";
    const HYBRID_OWN: &str = "\
8:pids:/
4:memory:/process_api/abc
2:cpu,cpuacct:/
0::/
";

    #[test]
    fn a_hybrid_host_is_read_as_hybrid() {
        let h = Hierarchies::parse(HYBRID, HYBRID_OWN);
        assert_eq!(h.mode(), Mode::Hybrid);
        let u = h.unified.as_ref().unwrap();
        assert_eq!(u.own, Path::new("/sys/fs/cgroup/unified"));
        let m = h.v1("memory").unwrap();
        assert_eq!(m.mount, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(m.own, Path::new("/sys/fs/cgroup/memory/process_api/abc"));
        // Co-mounted controllers share a hierarchy.
        assert_eq!(h.v1("cpu").unwrap().mount, h.v1("cpuacct").unwrap().mount);
        assert_eq!(h.v1("pids").unwrap().own, Path::new("/sys/fs/cgroup/pids"));
    }

    #[test]
    fn a_v2_host_and_a_container_view_are_read() {
        let v2 = "\
30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";
        let h = Hierarchies::parse(v2, "0::/system.slice/tabos.service\n");
        assert_eq!(h.mode(), Mode::V2);
        assert_eq!(
            h.unified.unwrap().own,
            Path::new("/sys/fs/cgroup/system.slice/tabos.service")
        );
        // A container's mount whose root is its own cgroup.
        let container = "\
40 30 0:26 /kubepods/pod1/c1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw
";
        let h = Hierarchies::parse(container, "0::/kubepods/pod1/c1\n");
        assert_eq!(h.unified.unwrap().own, Path::new("/sys/fs/cgroup"));
        assert_eq!(Hierarchies::parse("", "").mode(), Mode::None);
        let v1 = HYBRID.replace("cgroup2 cgroup2", "tmpfs tmpfs");
        assert_eq!(Hierarchies::parse(&v1, HYBRID_OWN).mode(), Mode::V1);
    }

    #[test]
    fn flat_keyed_and_pressure_files_are_read() {
        let stat = "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n";
        assert_eq!(keyed(stat, "usage_usec"), Some(1234));
        assert_eq!(keyed(stat, "nope"), None);
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        let psi = "some avg10=1.50 avg60=0.20 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(pressure_avg10(psi), Some(1.5));
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    /// On the machine the tests run on, detection finds what is mounted
    /// (every Linux CI host has at least one hierarchy), and a limit, if
    /// any, is a real number.
    #[test]
    fn this_host_is_detected() {
        let h = Hierarchies::detect();
        assert_ne!(h.mode(), Mode::None, "{h:?}");
        if let Some(n) = h.memory_limit_bytes() {
            assert!(n > 0);
        }
    }
}
