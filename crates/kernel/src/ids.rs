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

macro_rules! name_id {
    ($(#[$doc:meta])* $name:ident, $what:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub String);

        impl $name {
            /// Validates and wraps.
            pub fn new(s: impl Into<String>) -> Result<$name> {
                let s = s.into();
                validate_name($what, &s)?;
                Ok($name(s))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
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
        }
    }
}
