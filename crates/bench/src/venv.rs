//! The benchmarks' Python: one virtualenv (`target/bench-venv`, or
//! `TABOS_BENCH_VENV`) into which the peers' packages (Ray, PySpark) and
//! the plots' (matplotlib) are pip-installed, each once, when a suite first
//! needs it.

use std::path::PathBuf;
use std::process::Command;

/// The virtualenv's directory.
pub fn dir() -> PathBuf {
    PathBuf::from(std::env::var("TABOS_BENCH_VENV").unwrap_or_else(|_| "target/bench-venv".into()))
}

/// The virtualenv's python, with pip package `package` installed (once)
/// so that `import module` works; or why it could not be.
pub fn python_with(package: &str, module: &str) -> Result<PathBuf, String> {
    let venv = dir();
    let python = venv.join("bin/python");
    if !python.exists() {
        println!("creating a virtualenv at {} ...", venv.display());
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .map_err(|e| format!("python3 -m venv: {e}"))?;
        if !ok.success() {
            return Err("python3 -m venv failed".into());
        }
    }
    let has = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        println!(
            "installing {package} into {} (pip, once) ...",
            venv.display()
        );
        let ok = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", package])
            .status()
            .map_err(|e| format!("pip install {package}: {e}"))?;
        if !ok.success() {
            return Err(format!("pip install {package} failed"));
        }
    }
    Ok(python)
}

/// The last line of a peer script's standard output that is a JSON
/// object, parsed; or why there is none (`who` and the last lines of its
/// standard error).
pub fn last_json_line(out: &std::process::Output, who: &str) -> Result<serde_json::Value, String> {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| {
            format!(
                "{who} did not report: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        })?;
    serde_json::from_str(line).map_err(|e| format!("bad {who} output {line:?}: {e}"))
}
