//! Which programs on the node a proc may run (issue 41, item 1): nothing
//! outside the realm's files and what its operator allowed is ever
//! executed on a proc's behalf.
//!
//! A proc's program is its uploaded code, a file of the realm's files
//! (`fs:/path`) — both read as its user, checked by `crate::code` — or a
//! program *on the node*, which [`Programs::check`] allows only
//!
//! * in the system's directories ([`crate::jail::SYSTEM_DIRS`], what every
//!   jail shows),
//! * under a host path the spawn asked for (each within one its realm's
//!   operator allows: `realm set --allow-host-path`, checked at spawn),
//! * in a program directory of the node's operator: the node's own
//!   executable's directory (where tabos' own tasks are) and those named
//!   by `tabos up --program-dir`,
//!
//! judged by its canonical path (no `..` or symbolic link leads out), and
//! never within the node's own data — its database, block store, logs,
//! jails and code cache (where other realms' code is) — whatever the
//! directories above say. A native proc's bare command name is looked up
//! on the node's `PATH` first and judged where it was found. The check is
//! made at spawn, for a clear answer at once, and again by the node that
//! runs the proc, whose own settings decide.

use std::path::{Path, PathBuf};

/// Why a program on the node may not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// There is no such file.
    #[error("{0}")]
    Missing(String),
    /// It is where no proc may run a program.
    #[error("{0}")]
    NotAllowed(String),
}

/// The node's rule for programs on the node.
#[derive(Debug, Clone)]
pub struct Programs {
    /// Directories of programs its operator installed (canonical).
    dirs: Vec<PathBuf>,
    /// The node's own data, never a program (canonical where it exists).
    private: Vec<PathBuf>,
    /// The system's directories, canonical (made once, not per spawn).
    system: Vec<PathBuf>,
}

/// The canonical form of `p`, or `p` itself when it does not exist (yet).
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Programs {
    /// The rule of a node whose operator installed programs in `dirs` (the
    /// node's executable's directory is added) and whose own data is in
    /// `private`.
    pub fn new(dirs: &[PathBuf], private: &[PathBuf]) -> Programs {
        let mut all: Vec<PathBuf> = dirs.iter().map(|d| canonical(d)).collect();
        if let Some(own) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(canonical))
        {
            all.push(own);
        }
        all.sort();
        all.dedup();
        Programs {
            dirs: all,
            private: private.iter().map(|p| canonical(p)).collect(),
            system: crate::jail::SYSTEM_DIRS
                .iter()
                .map(|d| canonical(Path::new(d)))
                .collect(),
        }
    }

    /// The directories of programs its operator installed.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Program `program` (a path; a native proc's bare command name is
    /// resolved on `PATH` first by the caller) may run for a proc that asked
    /// for `host_paths`: its canonical path, or why not.
    pub fn check(&self, program: &Path, host_paths: &[String]) -> Result<PathBuf, Refused> {
        let real = std::fs::canonicalize(program)
            .map_err(|e| Refused::Missing(format!("program {}: {e}", program.display())))?;
        if self.private.iter().any(|p| real.starts_with(p)) {
            return Err(Refused::NotAllowed(format!(
                "program {} is in the node's own data, which no proc runs",
                program.display()
            )));
        }
        let system = self.system.iter().any(|d| real.starts_with(d));
        let asked = host_paths
            .iter()
            .any(|h| real.starts_with(canonical(Path::new(h))));
        if system || asked || self.dirs.iter().any(|d| real.starts_with(d)) {
            return Ok(real);
        }
        Err(Refused::NotAllowed(format!(
            "program {} is outside the system's directories, the host paths the spawn asked \
             for and the node's program directories ({}): upload it with the spawn (--upload), \
             put it in the realm's files (fs:/PATH), or have the operator allow its directory \
             (realm set --allow-host-path, then --host-path; or tabos up --program-dir)",
            program.display(),
            self.dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_asked_and_operator_directories_only_and_never_the_nodes_data() {
        let dir = std::env::temp_dir().join(format!("tabos-programs-{}", std::process::id()));
        let (ops, data, other) = (dir.join("ops"), dir.join("ops/data"), dir.join("other"));
        for d in [&ops, &data, &other] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("tool"), "#!/bin/sh\n").unwrap();
        }
        let p = Programs::new(std::slice::from_ref(&ops), std::slice::from_ref(&data));
        assert!(p.check(Path::new("/bin/sh"), &[]).is_ok());
        assert!(p.check(&ops.join("tool"), &[]).is_ok());
        // Within the operator's directory, but the node's own data.
        let e = p.check(&data.join("tool"), &[]).unwrap_err();
        assert!(
            matches!(&e, Refused::NotAllowed(m) if m.contains("own data")),
            "{e}"
        );
        let e = p.check(&other.join("tool"), &[]).unwrap_err();
        assert!(
            matches!(&e, Refused::NotAllowed(m) if m.contains("outside")),
            "{e}"
        );
        // Asked for as a host path (the realm's allowance checked at spawn).
        let asked = [other.display().to_string()];
        assert!(p.check(&other.join("tool"), &asked).is_ok());
        // No way out through `..` or a symbolic link.
        assert!(p.check(&ops.join("../other/tool"), &[]).is_err());
        std::os::unix::fs::symlink(other.join("tool"), ops.join("link")).unwrap();
        assert!(p.check(&ops.join("link"), &[]).is_err());
        assert!(matches!(
            p.check(&ops.join("missing"), &[]),
            Err(Refused::Missing(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
