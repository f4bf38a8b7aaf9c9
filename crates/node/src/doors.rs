//! The node's doors (issue 36, item 2): the connection ledger of
//! [`tabos_client::doors`] (shared with the servers built on the client
//! library), and how `tabos status` shows a door's limits and use.

pub use tabos_client::doors::*;

/// Door `door`'s limits and use as `tabos status` shows them to
/// `caller`: a tenant sees its own realm's count only, not which other
/// realms use the node.
pub fn door_use<H: Held>(
    name: &str,
    door: &Door<H>,
    caller: &tabos_kernel::auth::Caller,
) -> tabos_client::proto::DoorUse {
    let (open, usage) = door.usage();
    let limits = door.ledger.limits();
    tabos_client::proto::DoorUse {
        door: name.to_string(),
        open: open as u64,
        connections_max: door.connections_max() as u64,
        unauthenticated: usage.unauthenticated as u64,
        unauthenticated_max: limits.unauthenticated as u64,
        unauthenticated_per_source_max: limits.unauthenticated_per_source as u64,
        per_realm_max: limits.per_realm as u64,
        by_realm: usage
            .by_realm
            .into_iter()
            .filter(|(r, _)| caller.is_operator() || *r == caller.realm())
            .map(|(r, n)| (r, n as u64))
            .collect(),
    }
}

/// What realms hold of `what` (`usage`, by realm) against its cap of
/// `per_realm_max` each, as `caller` may see it (a tenant its own realm's
/// only).
pub fn realm_cap(
    what: &str,
    per_realm_max: usize,
    usage: Vec<(String, usize)>,
    caller: &tabos_kernel::auth::Caller,
) -> tabos_client::proto::RealmCap {
    tabos_client::proto::RealmCap {
        what: what.to_string(),
        per_realm_max: per_realm_max as u64,
        by_realm: usage
            .into_iter()
            .filter(|(r, _)| caller.is_operator() || *r == caller.realm())
            .map(|(r, n)| (r, n as u64))
            .collect(),
    }
}
