//! The API's enums as people read and type them ("exited", "draining",
//! "LC", "least_loaded"): what the CLI prints, its `--json` carries and its
//! arguments accept, in the kernel's own words (the node's tests assert the
//! two agree). One table per enum: `name()`, `from_name()` and `Display`
//! are all made from it, so the two directions cannot drift apart.

use crate::proto::{
    AllocManager, FileType, GraphStatus, LogStream, NameKind, NodeState, ProcClass, ProcKind,
    ProcState, Provenance, Role, Scheduler, StepKind, StepStatus, TaskKind, TaskStatus, WatchMode,
    WatchOp, WorkflowStatus,
};

/// `name()`, `from_name()`, `NAMES` and `parse()` (the unspecified value reads "unknown": a newer node's value,
/// or a request's default; `from_name` is exact) and `Display`.
macro_rules! names {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The value's name, as the kernel has it.
            pub fn name(self) -> &'static str {
                match self {
                    $ty::Unspecified => "unknown",
                    $($ty::$variant => $name,)+
                }
            }

            /// The value named `name`; `None` if no value is.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }

            /// Every value's name, for a usage message.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// `value` as this enum names it, or an error saying what it
            /// may be (how the CLI reads an argument; `what` names it).
            pub fn parse(what: &str, value: &str) -> Result<Self, String> {
                Self::from_name(value).ok_or_else(|| {
                    format!("{what} must be one of {}, not {value:?}", Self::NAMES.join(", "))
                })
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

names!(ProcState {
    Spawned => "spawned", Claimed => "claimed", Running => "running",
    Exited => "exited", Evicted => "evicted", Failed => "failed",
});
names!(NodeState { Up => "up", Draining => "draining", Left => "left", Lost => "lost" });
names!(Role { Reader => "reader", Member => "member", Admin => "admin", Operator => "operator" });
names!(ProcKind { Native => "native", Wasm => "wasm" });
names!(ProcClass { Lc => "LC", Be => "BE" });
names!(Scheduler { Fifo => "fifo", Locality => "locality", LeastLoaded => "least_loaded" });
names!(Provenance { Procs => "procs", All => "all" });
names!(AllocManager { Smgr => "smgr", Rmgr => "rmgr" });
names!(LogStream { Stdout => "stdout", Stderr => "stderr" });
names!(NameKind { Dir => "dir", File => "file", Symlink => "symlink" });
names!(WatchMode { Exists => "exists", Removed => "removed", Dir => "dir" });
names!(WatchOp {
    Watching => "watching", Exists => "exists", Removed => "removed",
    Create => "create", Set => "set", Remove => "remove",
});
names!(FileType { Dir => "dir", File => "file", Symlink => "symlink", Fifo => "fifo" });
names!(WorkflowStatus {
    Enqueued => "enqueued", Pending => "pending", Success => "success",
    Error => "error", Cancelled => "cancelled",
});
names!(StepKind {
    Function => "function", Procedure => "procedure", Proc => "proc", Sleep => "sleep",
    Send => "send", Recv => "recv", SetEvent => "set_event", GetEvent => "get_event",
});
names!(StepStatus { Running => "running", Success => "success", Error => "error" });
names!(TaskKind { Procedure => "procedure", Workflow => "workflow", Proc => "proc" });
names!(GraphStatus {
    Running => "running", Success => "success", Error => "error", Cancelled => "cancelled",
});
names!(TaskStatus {
    Waiting => "waiting", Ready => "ready", Running => "running", Success => "success",
    Error => "error", Cancelled => "cancelled",
});

impl ProcState {
    /// Whether the proc has ended: exited, evicted or failed.
    pub fn ended(self) -> bool {
        matches!(
            self,
            ProcState::Exited | ProcState::Evicted | ProcState::Failed
        )
    }
}

impl WorkflowStatus {
    /// Finished: it will not change again unless resumed.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            WorkflowStatus::Success | WorkflowStatus::Error | WorkflowStatus::Cancelled
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_value() {
        for n in ProcClass::NAMES {
            assert_eq!(ProcClass::from_name(n).map(|c| c.name()), Some(*n));
        }
        for n in StepKind::NAMES {
            assert_eq!(StepKind::from_name(n).map(|c| c.name()), Some(*n));
        }
        assert_eq!(Scheduler::from_name("unknown"), None);
        assert_eq!(Role::from_name("Admin"), None);
    }
}
