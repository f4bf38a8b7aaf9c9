//! The node's size: the cores and memory it offers procs, by default what
//! the host — or the node's own cgroup, when it runs in a container or
//! under a service manager's limit — lets it use, less a reserve for the
//! node itself (its kernel database, caches and runtime).
//!
//! `tabos up --cores N --mem-mib N` overrides either.

use crate::cgroup::Hierarchies;

/// The share of the memory it sees that the node keeps for itself, in
/// percent, bounded by [`MEM_RESERVE_MIB_MIN`] and [`MEM_RESERVE_MIB_MAX`].
pub const MEM_RESERVE_PCT: u64 = 10;
/// Least memory the node keeps for itself, in MiB.
pub const MEM_RESERVE_MIB_MIN: u64 = 256;
/// Most memory the node keeps for itself, in MiB.
pub const MEM_RESERVE_MIB_MAX: u64 = 2048;
/// Least memory a node offers procs, in MiB, whatever the host has.
pub const MEM_OFFERED_MIB_MIN: u64 = 64;

/// What the node offers, and where the figures came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Size {
    pub cores: i64,
    pub mem_mib: i64,
    /// What bounded the memory: the host, or a cgroup's limit.
    pub mem_source: &'static str,
}

/// This host's size for procs: its usable cores (Rust's
/// `available_parallelism`, which honours CPU affinity and a cgroup's CPU
/// quota) and its memory — `/proc/meminfo`'s total, or the node's cgroup
/// limit if lower — less the reserve.
pub fn detect() -> Size {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
    let host = host_memory_bytes();
    let limit = Hierarchies::detect().memory_limit_bytes();
    let (bytes, mem_source) = match (host, limit) {
        (Some(h), Some(l)) if l < h => (l, "the node's cgroup limit"),
        (Some(h), _) => (h, "the host"),
        (None, Some(l)) => (l, "the node's cgroup limit"),
        (None, None) => (0, "unknown (no /proc/meminfo)"),
    };
    Size {
        cores,
        mem_mib: offered_mib(bytes >> 20) as i64,
        mem_source,
    }
}

/// Of `seen_mib` MiB, what procs are offered.
pub fn offered_mib(seen_mib: u64) -> u64 {
    let reserve =
        (seen_mib * MEM_RESERVE_PCT / 100).clamp(MEM_RESERVE_MIB_MIN, MEM_RESERVE_MIB_MAX);
    seen_mib.saturating_sub(reserve).max(MEM_OFFERED_MIB_MIN)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_a_share_within_bounds() {
        assert_eq!(offered_mib(24 << 10), (24 << 10) - MEM_RESERVE_MIB_MAX);
        assert_eq!(offered_mib(8 << 10), (8 << 10) - 819);
        assert_eq!(offered_mib(1024), 1024 - MEM_RESERVE_MIB_MIN);
        assert_eq!(offered_mib(100), MEM_OFFERED_MIB_MIN);
    }

    #[test]
    fn this_host_offers_what_it_has() {
        let s = detect();
        assert!(s.cores >= 1);
        let host = host_memory_bytes().unwrap() >> 20;
        assert!(
            s.mem_mib as u64 <= host && s.mem_mib as u64 >= host.min(1024) / 2,
            "{s:?}"
        );
    }
}
