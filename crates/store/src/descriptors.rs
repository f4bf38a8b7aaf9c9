//! The process's file descriptors, as far as the store's pools are
//! concerned: whether one more pooled connection may be opened without
//! taking descriptors the rest of the process needs.
//!
//! The SQLite backend opens its read connections when first needed and
//! keeps them: an all-partition reader holds two descriptors per partition
//! (the database file and its WAL), so at full growth the pools hold
//! several hundred. Under a low `RLIMIT_NOFILE` a pool that grew into every
//! descriptor freed by closed client connections left none for `accept`:
//! the node served what it had and never accepted again. A pool past its
//! first connection now grows only while at least [`free_min`] descriptors
//! stay free after the opening; otherwise its callers wait for a pooled
//! connection, as they do when the pool is full. A partition's tenant
//! connections, opened as tenant code needs them, follow the same rule.
//!
//! A node holds some descriptors whatever it does — each partition's
//! writer and checkpointer and the first connection of each pool — and
//! what it holds is kept: under a limit below that, whichever opening came
//! first after client connections closed kept their descriptors, and the
//! node, serving nothing, never accepted again. A server therefore checks
//! at start that its limit leaves [`free_min`] free beyond what it holds at
//! rest ([`room_to_serve`]), and refuses to start otherwise, as
//! PostgreSQL's postmaster does ("insufficient file descriptors").
//!
//! A server raises its soft limit to the hard one at start
//! ([`raise_soft_limit`], as Go's runtime does): a default soft limit of
//! 1,024 is fewer descriptors than the node's connection cap alone. The
//! programs it starts get the limit it was given back
//! ([`inherited_limit`]): one that uses select(2) breaks above 1,024.

/// Descriptors kept free below a soft limit of `8 × FREE_MIN`, at least.
pub const FREE_MIN: usize = 32;

/// Descriptors a pool must leave free under a soft limit of `limit`: an
/// eighth of it, at least [`FREE_MIN`] (for accepting connections,
/// spawning procs, opening files and blocks).
pub fn free_min(limit: usize) -> usize {
    (limit / 8).max(FREE_MIN)
}

/// The soft and hard limits this process was started with, once
/// [`raise_soft_limit`] has raised the soft one.
static INHERITED: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

fn get_limit() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass and nothing else.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; returns
/// the soft limit in force after (the old one if it cannot be raised), or
/// `None` where the limit cannot be read. Call once, at the start of a
/// process that serves a node (`tabos up`, `tabos demo`), before it
/// starts programs.
pub fn raise_soft_limit() -> Option<u64> {
    let limit = get_limit()?;
    if limit.rlim_cur >= limit.rlim_max {
        return Some(limit.rlim_cur);
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Some(limit.rlim_cur);
    }
    let _ = INHERITED.set((limit.rlim_cur, limit.rlim_max));
    Some(raised.rlim_cur)
}

/// The soft and hard `RLIMIT_NOFILE` programs this process starts should
/// have: what it was given, where [`raise_soft_limit`] changed it.
pub fn inherited_limit() -> Option<(u64, u64)> {
    INHERITED.get().copied()
}

/// The soft `RLIMIT_NOFILE` and the descriptors open now, or `None` where
/// either cannot be read (then pools grow as configured).
fn usage() -> Option<(usize, usize)> {
    let limit = get_limit()?;
    let soft = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    // The listing's own descriptor is counted, then closed: one too many,
    // which errs on the side of keeping descriptors free.
    let open = match std::fs::read_dir("/proc/self/fd") {
        Ok(listing) => listing.count(),
        // Out of descriptors: every one is open. (Taken as "cannot be
        // read", this let a pool grow into the first descriptors freed.)
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => soft,
        Err(_) => return None,
    };
    Some((soft, open))
}

/// Descriptors a server takes beside its store's and its clients': its
/// listeners, the runtime's poller, standard streams and logs, the block
/// device, and what spawning a proc or reading a cgroup file opens for a
/// moment. (An idle node with every door open holds 22.)
pub const SERVING: usize = 32;

/// A soft limit too low for a server: what it holds at rest, and what it
/// needs in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooFew {
    pub soft: usize,
    /// The store's connections at rest ([`crate::Config::descriptors_at_rest`]).
    pub store: usize,
    /// The store's, [`SERVING`], and [`free_min`] of the limit for clients.
    pub needed: usize,
}

impl std::fmt::Display for TooFew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} file descriptors are too few to serve: the kernel database's connections \
             hold {} at rest, serving takes up to {SERVING} more, and {} must stay free for \
             clients; raise the limit (ulimit -n) to at least {}, or have the database hold \
             fewer (a new SQLite database with fewer --partitions, a smaller PostgreSQL pool \
             with --db-connections)",
            self.soft,
            self.store,
            free_min(self.soft),
            // The margin grows with the limit: the least that suffices.
            least_soft(self.store)
        )
    }
}

impl std::error::Error for TooFew {}

/// Whether a soft limit of `soft` serves a store holding `store` at rest.
pub fn room_under(soft: usize, store: usize) -> Result<(), TooFew> {
    let needed = store + SERVING + free_min(soft);
    if soft < needed {
        return Err(TooFew {
            soft,
            store,
            needed,
        });
    }
    Ok(())
}

/// The least soft limit [`room_under`] accepts for `store`.
fn least_soft(store: usize) -> usize {
    let mut soft = store + SERVING + FREE_MIN;
    while room_under(soft, store).is_err() {
        soft += 1;
    }
    soft
}

/// Whether this process's soft limit (once raised, [`raise_soft_limit`])
/// serves a store holding `store` descriptors at rest: what it holds, what
/// serving takes, and [`free_min`] free for accepting clients. `Ok` where
/// the limit cannot be read.
pub fn room_to_serve(store: usize) -> Result<(), TooFew> {
    match get_limit() {
        Some(limit) => room_under(usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX), store),
        None => Ok(()),
    }
}

/// Descriptors promised to openings under way ([`Opening`]): not yet in
/// `/proc/self/fd`, already spoken for.
static OPENING: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// Room for `cost` descriptors, held while they are being opened; dropped
/// once they are (then `/proc/self/fd` counts them) or were not.
#[must_use = "the room is held only while the opening is"]
#[derive(Debug)]
pub struct Opening {
    cost: usize,
}

impl Drop for Opening {
    fn drop(&mut self) {
        *OPENING.lock().unwrap_or_else(|p| p.into_inner()) -= self.cost;
    }
}

/// Room for opening `cost` more descriptors that leaves at least
/// [`free_min`] of the soft limit free, counting openings under way; or
/// `None`. Two threads asking at once cannot both take the last room.
pub fn reserve(cost: usize) -> Option<Opening> {
    let mut opening = OPENING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((soft, open)) = usage() {
        let free = soft.saturating_sub(open).saturating_sub(*opening);
        if free < cost + free_min(soft) {
            return None;
        }
    }
    *opening += cost;
    Some(Opening { cost })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_margin_is_an_eighth_and_never_below_the_minimum() {
        assert_eq!(free_min(96), FREE_MIN);
        assert_eq!(free_min(1_024), 128);
        assert_eq!(free_min(0), FREE_MIN);
    }

    #[test]
    fn a_server_needs_its_store_serving_and_the_free_margin() {
        // 8 partitions of SQLite hold 105 at rest: 96 is too few.
        let e = room_under(96, 105).unwrap_err();
        assert_eq!(e.needed, 105 + SERVING + FREE_MIN);
        let said = e.to_string();
        assert!(said.contains("at least 169"), "{said}");
        assert!(room_under(169, 105).is_ok());
        assert!(room_under(168, 105).is_err());
        // The margin is an eighth of a larger limit.
        let least = least_soft(400);
        assert_eq!(least, 493, "432 + 493 / 8");
        assert!(room_under(least, 400).is_ok() && room_under(least - 1, 400).is_err());
        assert!(room_under(1_024, 105).is_ok());
    }

    #[test]
    fn room_follows_the_soft_limit() {
        let (soft, open) = usage().expect("Linux has /proc/self/fd and RLIMIT_NOFILE");
        assert!(open >= 3, "stdin, stdout, stderr at least: {open}");
        assert!(soft >= open, "{soft} < {open}");
        // Asking for every descriptor there is never fits.
        assert!(reserve(soft).is_none());
        // Room held is room taken: what is left shrinks by it.
        let free = soft - open;
        assert!(
            free > 2 * free_min(soft),
            "a test process has most of its descriptors free: {open} of {soft} open"
        );
        let half = (free - free_min(soft)) / 2 + 1;
        let first = reserve(half).expect("room for half of what is free");
        assert!(reserve(half).is_none(), "the same room twice");
        drop(first);
        assert!(reserve(half).is_some(), "room given back is room again");
    }
}
