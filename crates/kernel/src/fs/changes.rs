//! A realm's file changes on the change feed, for caches that must learn of
//! them: the mount keeps entries and attributes in the kernel for long
//! (`tabos mount`, [`crate::fs`]'s module docs) and drops them when told.
//!
//! Every transaction that changes a name or a file says so on the realm's
//! channel ([`channel`]): a name added or removed ([`Change::Name`], its
//! path — a rename says both) or a file's attributes or data changed
//! ([`Change::File`], its id; a removal and a rename say the file's id
//! too, for a watcher not told the name). The notes go out after the commit, in commit
//! order, like every other note ([`tabos_store::feed`]).
//!
//! A watcher ([`watch`]) subscribes first and is then told every change;
//! what it may see of them is [`visible_tx`]'s: a name only when its user
//! may list the directory it is in (the names of another user's private
//! directory stay private), a file's id always (an id names nothing).

use tabos_store::{Subscription, Tx};

use super::{acting, allowed, lookup, FileType, Need};
use crate::auth::{Caller, Role};
use crate::names::parent_of;
use crate::{validate_realm, Result};

/// The change-feed channel of `realm`'s file changes.
pub fn channel(realm: &str) -> String {
    format!("fs/{realm}")
}

/// One change to a realm's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The name `path` was added or removed (its directory changed too).
    Name(String),
    /// The file (or directory) with this id changed: attributes, data or
    /// its number of names.
    File(String),
}

impl Change {
    /// The note's payload: a kind letter and the path or id.
    fn payload(&self) -> String {
        match self {
            Change::Name(p) => format!("n{p}"),
            Change::File(id) => format!("f{id}"),
        }
    }

    /// The change a note's payload says; `None` for one it does not.
    pub fn parse(payload: &str) -> Option<Change> {
        match payload.split_at_checked(1)? {
            ("n", p) if p.starts_with('/') => Some(Change::Name(p.to_string())),
            ("f", id) if !id.is_empty() => Some(Change::File(id.to_string())),
            _ => None,
        }
    }
}

/// Tells the realm's watchers of `change` when `tx` commits.
pub(super) fn note(tx: &mut dyn Tx, realm: &str, change: Change) -> Result<()> {
    tx.notify(&channel(realm), &change.payload())?;
    Ok(())
}

/// Starts watching the caller's realm's files: subscribed before it
/// returns, so every change committed after it is on the subscription.
/// Needs what reading files needs (role reader, no scope).
pub fn watch(store: &tabos_store::Store, who: &Caller) -> Result<Subscription> {
    let realm = acting(who, Role::Reader)?;
    validate_realm(realm)?;
    Ok(store.subscribe(&channel(realm)))
}

/// Which of `changes` the caller may be told of: a name only if it may
/// list the name's directory now, a file's id always. Keeps their order.
pub fn visible_tx(tx: &mut dyn Tx, who: &Caller, changes: Vec<Change>) -> Result<Vec<Change>> {
    let realm = acting(who, Role::Reader)?.to_string();
    let mut listable: std::collections::HashMap<String, bool> = Default::default();
    let mut out = Vec::with_capacity(changes.len());
    for c in changes {
        if let Change::Name(p) = &c {
            let dir = parent_of(p);
            let ok = match listable.get(dir) {
                Some(&ok) => ok,
                None => {
                    let ok = lookup(tx, &realm, dir)?.is_some_and(|d| {
                        d.file_type == FileType::Dir && allowed(&d, who, Need::Read).is_ok()
                    });
                    listable.insert(dir.to_string(), ok);
                    ok
                }
            };
            if !ok {
                continue;
            }
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reads_back_from_its_payload() {
        for c in [Change::Name("/a/b c".into()), Change::File("0a1b2c".into())] {
            assert_eq!(Change::parse(&c.payload()), Some(c));
        }
        for bad in ["", "n", "nrelative", "f", "x/a"] {
            assert_eq!(Change::parse(bad), None, "{bad:?}");
        }
    }
}
