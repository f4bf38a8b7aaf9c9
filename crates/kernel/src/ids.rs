//! Identifier newtypes of the kernel.

use std::fmt;

use crate::{Error, Result};

/// Longest pid, worker id or node id, in bytes.
pub const NAME_BYTES_MAX: usize = 128;

/// Checks a name: 1..=NAME_BYTES_MAX bytes of `[A-Za-z0-9_.:-]`, not `.` or `..`.
pub fn validate_name(what: &str, s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= NAME_BYTES_MAX
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} {s:?} must be 1..={NAME_BYTES_MAX} characters of A-Z a-z 0-9 _ - . :"
        )))
    }
}

/// An identifier newtype: a `String` made only through `new`, which
/// validates it with `$check` (the kernel alone also wraps what it reads
/// back from its own rows). It reads as a `&str` (`Deref`), so a
/// function that takes one cannot be given another kind of id or an
/// unchecked string, while one that takes `&str` still takes it.
macro_rules! name_id {
    ($(#[$doc:meta])* $name:ident, $what:expr) => {
        name_id!($(#[$doc])* $name, $what, |s| validate_name($what, s));
    };
    ($(#[$doc:meta])* $name:ident, $what:expr, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(crate) String);

        impl $name {
            /// Validates and wraps.
            pub fn new(s: impl Into<String>) -> Result<$name> {
                let s = s.into();
                let check: fn(&str) -> Result<()> = $check;
                check(&s)?;
                Ok($name(s))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text it wraps.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl From<&$name> for tabos_store::Value {
            fn from(v: &$name) -> tabos_store::Value {
                tabos_store::Value::Text(v.0.clone())
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<&$name> for String {
            fn eq(&self, other: &&$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

name_id!(
    /// A proc's identifier, unique within its realm.
    Pid,
    "pid"
);
name_id!(
    /// A worker's identifier, unique within its realm.
    WorkerId,
    "worker id"
);
name_id!(
    /// A node's identifier, unique within its cluster.
    NodeId,
    "node id"
);
name_id!(
    /// A durable workflow's identifier (its idempotency key), unique
    /// within its realm.
    WorkflowId,
    "workflow id"
);
name_id!(
    /// A workflow executor's identifier (DBOS's executor id), unique
    /// within its realm.
    ExecutorId,
    "executor"
);
name_id!(
    /// A realm's name: 1..=[`crate::REALM_BYTES_MAX`] bytes of
    /// `[A-Za-z0-9_.-]`, the first a letter or digit.
    RealmName,
    "realm name",
    crate::validate_realm
);

impl WorkerId {
    /// The worker of node `node` (its procd's): `<node>.w0`. Refused when
    /// that would be too long — so a node id that fits only without the
    /// suffix is refused when the node opens, not when it registers.
    pub fn of_node(node: &NodeId) -> Result<WorkerId> {
        WorkerId::new(format!("{node}.w0"))
    }
}

impl ExecutorId {
    /// What an executor id that a proc holds begins with: such ids are
    /// made only here, never registered by a client.
    pub const PROC_PREFIX: &'static str = "proc:";

    /// The executor that proc `pid` is, running a workflow of its own (a
    /// wasm workflow module, `crate::workflows::start_in_proc_tx`):
    /// `proc:<pid>`. Refused when that would be too long.
    pub fn of_proc(pid: &Pid) -> Result<ExecutorId> {
        ExecutorId::new(format!("{}{pid}", Self::PROC_PREFIX))
    }

    /// The proc this executor is, if it is one.
    pub fn proc(&self) -> Option<&str> {
        self.0.strip_prefix(Self::PROC_PREFIX)
    }
}

/// Where a message goes, or who sent it (`crate::ipc`'s; here so that
/// lower layers — a credential's scope — can name mailboxes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// A proc's own mailbox: `proc/<pid>`.
    Proc(Pid),
    /// A named mailbox: `<name>`.
    Named(String),
}

impl Address {
    /// Parses `proc/<pid>` or a mailbox name (the characters of a pid, no `/`).
    pub fn parse(s: &str) -> Result<Address> {
        match s.split_once('/') {
            Some(("proc", pid)) => Ok(Address::Proc(Pid::new(pid)?)),
            Some(_) => Err(Error::Invalid(format!(
                "address {s:?} must be proc/<pid> or a mailbox name without '/'"
            ))),
            None => {
                validate_name("mailbox name", s)?;
                Ok(Address::Named(s.to_string()))
            }
        }
    }

    /// A proc's address.
    pub fn proc(pid: &Pid) -> Address {
        Address::Proc(pid.clone())
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Proc(p) => write!(f, "proc/{p}"),
            Address::Named(n) => f.write_str(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(Pid::new("mapper-3.a:1").is_ok());
        assert!(WorkflowId::new("order-17.a:b_c").is_ok());
        assert!(RealmName::new("team-a.b_1").is_ok());
        for bad in [
            "",
            "-a",
            ".a",
            "a:b",
            "a/b",
            &"r".repeat(crate::REALM_BYTES_MAX + 1),
        ] {
            assert!(RealmName::new(bad).is_err(), "{bad:?}");
        }
        let longest = NodeId::new("n".repeat(NAME_BYTES_MAX)).unwrap();
        assert!(WorkerId::of_node(&longest).is_err());
        let n1 = NodeId::new("n1").unwrap();
        assert_eq!(WorkerId::of_node(&n1).unwrap(), "n1.w0");
        // An id reads as the text it wraps, and only as that.
        let id = WorkflowId::new("w1").unwrap();
        assert!(id == "w1" && &*id == "w1" && format!("{id}") == "w1");
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "nul\0",
            &"x".repeat(NAME_BYTES_MAX + 1),
        ] {
            assert!(Pid::new(bad).is_err(), "{bad:?}");
            assert!(WorkflowId::new(bad).is_err(), "{bad:?}");
            assert!(ExecutorId::new(bad).is_err(), "{bad:?}");
            assert!(NodeId::new(bad).is_err(), "{bad:?}");
        }
    }
}
