//! One back-off for every retry loop on the client side (the client
//! library, its workflows, the applications' procs and supervisors):
//! pauses that double from a first one up to a cap, each jittered so that
//! clients that failed together do not come back together, optionally
//! bounded by a deadline after which the caller gives up. (The store's
//! serialization retries, below this crate, jitter their own pauses the
//! same way: `tabos_store`'s PostgreSQL backend.)

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio::time::Instant;

/// The pauses between attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
    deadline: Option<Instant>,
}

impl Backoff {
    /// Pauses of `first`, doubling to at most `max` (each jittered).
    pub fn new(first: Duration, max: Duration) -> Backoff {
        debug_assert!(first <= max, "a back-off's first pause is within its cap");
        Backoff {
            first,
            max: max.max(first),
            next: first,
            deadline: None,
        }
    }

    /// Gives up (see [`Backoff::wait`]) once a pause would end past
    /// `deadline`.
    pub fn until(mut self, deadline: Instant) -> Backoff {
        self.deadline = Some(deadline);
        self
    }

    /// The next pause: between half and all of the current step (full
    /// steps would keep clients that failed at once in step), the step then
    /// doubled up to the cap.
    pub fn pause(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        let half = step / 2;
        let nanos = half.as_nanos().min(u64::MAX as u128) as u64;
        half + Duration::from_nanos(random() % nanos.saturating_add(1))
    }

    /// Sleeps the next pause and says `true`; or, when the pause would end
    /// past the deadline, sleeps nothing and says `false`: give up.
    pub async fn wait(&mut self) -> bool {
        let pause = self.pause();
        if self.deadline.is_some_and(|d| Instant::now() + pause > d) {
            return false;
        }
        tokio::time::sleep(pause).await;
        true
    }

    /// Back to the first pause (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A random number for jitter (and anything else whose numbers only have
/// to differ, such as a multipart boundary): std's per-process random hash
/// keys, so no dependency is needed. Not for secrets.
pub fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::UNIX_EPOCH
            .elapsed()
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_the_cap_each_jittered_within_its_step() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
        let steps = [100, 200, 400, 700, 700, 700];
        for ms in steps {
            let step = Duration::from_millis(ms);
            let p = b.pause();
            assert!(p >= step / 2 && p <= step, "{p:?} for a step of {step:?}");
        }
        b.reset();
        assert!(b.pause() <= Duration::from_millis(100));
    }

    #[test]
    fn pauses_differ() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20 {
            seen.insert(Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).pause());
        }
        assert!(seen.len() > 10, "{seen:?}");
    }

    #[tokio::test]
    async fn a_deadline_ends_the_waits() {
        // A pause would end past a deadline that is now: give up at once.
        let mut b =
            Backoff::new(Duration::from_millis(1), Duration::from_millis(1)).until(Instant::now());
        assert!(!b.wait().await);
        // No deadline: it waits, every time.
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        assert!(b.wait().await && b.wait().await);
    }
}
