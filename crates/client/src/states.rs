//! The API's state enums as people read them ("exited", "draining"): what
//! the CLI prints and its `--json` carries, in the kernel's own words (the
//! node's tests assert the two agree). One match per enum.

use crate::proto::{NodeState, ProcState};

impl ProcState {
    /// The state's name, as the kernel's `proc.state` column has it.
    pub fn name(self) -> &'static str {
        match self {
            ProcState::Unspecified => "unknown",
            ProcState::Spawned => "spawned",
            ProcState::Claimed => "claimed",
            ProcState::Running => "running",
            ProcState::Exited => "exited",
            ProcState::Evicted => "evicted",
            ProcState::Failed => "failed",
        }
    }

    /// Whether the proc has ended: exited, evicted or failed.
    pub fn ended(self) -> bool {
        matches!(
            self,
            ProcState::Exited | ProcState::Evicted | ProcState::Failed
        )
    }
}

impl NodeState {
    /// The state's name, as `tabos nodes` and the kernel have it.
    pub fn name(self) -> &'static str {
        match self {
            NodeState::Unspecified => "unknown",
            NodeState::Up => "up",
            NodeState::Draining => "draining",
            NodeState::Left => "left",
            NodeState::Lost => "lost",
        }
    }
}

impl std::fmt::Display for ProcState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
