//! A linearizability checker for histories of a key-value store, after
//! Wing & Gong and Lowe as Porcupine implements them: the history is split
//! by key (each key a register, P-compositionality), and each key's
//! operations are searched for an order that respects real time — an
//! operation may go next only if no pending operation returned before it
//! was called — and the register's semantics, with the states already
//! tried for each set of linearized operations remembered.
//!
//! A write whose outcome is unknown (the client saw an error or a lost
//! connection) has no return time: it may take effect at any point after
//! its call, or never.

use std::collections::{BTreeMap, HashSet};

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Set the key to the value (`None`: delete it).
    Write(Option<Vec<u8>>),
    /// Read the key and saw the value (`None`: no value).
    Read(Option<Vec<u8>>),
}

/// One operation of a history: its key, when it was called and returned
/// (any clock common to all clients, e.g. ns since the test began) and
/// what it did. `ret` is `None` for a write whose outcome is unknown.
#[derive(Debug, Clone)]
pub struct Operation {
    pub key: Vec<u8>,
    pub call: u64,
    pub ret: Option<u64>,
    pub action: Action,
}

/// Most operations on one key the search takes (it is exponential in the
/// worst case; keys of a test keep fewer).
pub const OPS_PER_KEY_MAX: usize = 2_000;
/// Most states the search visits per key before it gives up.
pub const VISITS_MAX: usize = 5_000_000;

/// Why a history is not (known to be) linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// No order works for this key.
    Violation {
        key: Vec<u8>,
    },
    /// The search was too big to finish.
    Unknown {
        key: Vec<u8>,
    },
}

/// Checks a whole history (every key without a value at first).
pub fn check(history: &[Operation]) -> Verdict {
    let mut by_key: BTreeMap<&[u8], Vec<&Operation>> = BTreeMap::new();
    for op in history {
        by_key.entry(&op.key).or_default().push(op);
    }
    for (key, ops) in by_key {
        if ops.len() > OPS_PER_KEY_MAX {
            return Verdict::Unknown { key: key.to_vec() };
        }
        match check_key(&ops) {
            Some(true) => {}
            Some(false) => return Verdict::Violation { key: key.to_vec() },
            None => return Verdict::Unknown { key: key.to_vec() },
        }
    }
    Verdict::Linearizable
}

/// One key's operations: `Some(linearizable)`, or `None` if the search
/// ran past [`VISITS_MAX`].
fn check_key(ops: &[&Operation]) -> Option<bool> {
    let n = ops.len();
    let ret = |i: usize| ops[i].ret.unwrap_or(u64::MAX);
    let words = n.div_ceil(64);
    let must: usize = ops.iter().filter(|o| o.ret.is_some()).count();
    // Depth-first: (linearized set, register state, how many of the
    // certain operations are in it).
    let mut seen: HashSet<(Vec<u64>, Option<Vec<u8>>)> = HashSet::new();
    let mut stack: Vec<(Vec<u64>, Option<Vec<u8>>, usize)> = vec![(vec![0; words], None, 0)];
    let mut visits = 0usize;
    while let Some((done, state, certain)) = stack.pop() {
        if certain == must {
            return Some(true);
        }
        visits += 1;
        if visits > VISITS_MAX {
            return None;
        }
        let is_done = |i: usize| done[i / 64] & (1 << (i % 64)) != 0;
        // The earliest return among the operations still pending: only an
        // operation called before it may go next.
        let horizon = (0..n)
            .filter(|i| !is_done(*i))
            .map(ret)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..n {
            if is_done(i) || ops[i].call > horizon {
                continue;
            }
            let next = match &ops[i].action {
                Action::Write(v) => v.clone(),
                Action::Read(v) if *v == state => state.clone(),
                Action::Read(_) => continue,
            };
            let mut d = done.clone();
            d[i / 64] |= 1 << (i % 64);
            if seen.insert((d.clone(), next.clone())) {
                let c = certain + usize::from(ops[i].ret.is_some());
                stack.push((d, next, c));
            }
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: u64, ret: Option<u64>, action: Action) -> Operation {
        Operation {
            key: b"k".to_vec(),
            call,
            ret,
            action,
        }
    }
    fn w(v: &str) -> Action {
        Action::Write(Some(v.as_bytes().to_vec()))
    }
    fn r(v: Option<&str>) -> Action {
        Action::Read(v.map(|v| v.as_bytes().to_vec()))
    }

    #[test]
    fn registers() {
        // Overlapping write and read: either order.
        let ok = [op(0, Some(10), w("a")), op(5, Some(6), r(Some("a")))];
        assert_eq!(check(&ok), Verdict::Linearizable);
        let ok = [op(0, Some(10), w("a")), op(5, Some(6), r(None))];
        assert_eq!(check(&ok), Verdict::Linearizable);
        // A read after the write returned must see it.
        let stale = [op(0, Some(4), w("a")), op(5, Some(6), r(None))];
        assert!(matches!(check(&stale), Verdict::Violation { .. }));
        // A value never written.
        let bogus = [op(0, Some(4), w("a")), op(5, Some(6), r(Some("b")))];
        assert!(matches!(check(&bogus), Verdict::Violation { .. }));
        // Reads go back in time: a then b written, a read sees b then a.
        let back = [
            op(0, Some(1), w("a")),
            op(2, Some(3), w("b")),
            op(4, Some(5), r(Some("b"))),
            op(6, Some(7), r(Some("a"))),
        ];
        assert!(matches!(check(&back), Verdict::Violation { .. }));
    }

    #[test]
    fn unknown_writes_may_or_may_not_happen() {
        let maybe = [op(0, None, w("a")), op(5, Some(6), r(Some("a")))];
        assert_eq!(check(&maybe), Verdict::Linearizable);
        let never = [op(0, None, w("a")), op(5, Some(6), r(None))];
        assert_eq!(check(&never), Verdict::Linearizable);
        // But not before it was called.
        let early = [op(5, None, w("a")), op(0, Some(1), r(Some("a")))];
        assert!(matches!(check(&early), Verdict::Violation { .. }));
    }
}
