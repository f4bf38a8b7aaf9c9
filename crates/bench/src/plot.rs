//! Draws a report's time series into PNG files, one per `plot`, with
//! matplotlib from the benchmarks' virtualenv ([`crate::venv`]): series of
//! a second unit go on a right-hand axis.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::report::{Report, Series};

const SCRIPT: &str = r#"
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
job = json.load(open(sys.argv[1]))
for p in job["plots"]:
    fig, left = plt.subplots(figsize=(9, 4.5))
    units = []
    for s in p["series"]:
        if s["y_unit"] not in units:
            units.append(s["y_unit"])
    axes = {units[0]: left}
    if len(units) > 1:
        axes[units[1]] = left.twinx()
    lines = []
    for i, s in enumerate(p["series"]):
        ax = axes.get(s["y_unit"], left)
        xs = [pt[0] for pt in s["points"]]
        ys = [pt[1] for pt in s["points"]]
        # One colour per series across both axes.
        lines += ax.plot(xs, ys, label=s["name"], color=f"C{i}",
                         drawstyle="steps-post" if s["y_unit"] == "cores" else "default")
    left.set_xlabel(p["series"][0]["x_unit"])
    for u, ax in axes.items():
        ax.set_ylabel(u)
        ax.set_ylim(bottom=0)
    left.legend(lines, [l.get_label() for l in lines], loc="best", fontsize="small")
    left.set_title(p["title"])
    left.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(p["path"], dpi=110)
    plt.close(fig)
"#;

/// Draws `report`'s series into `<dir>/<suite>.<plot>.png`; the files
/// written, or why none could be.
pub fn draw(report: &Report, dir: &Path) -> Result<Vec<String>, String> {
    let mut plots: BTreeMap<&str, Vec<&Series>> = BTreeMap::new();
    for s in &report.series {
        plots.entry(s.plot.as_str()).or_default().push(s);
    }
    if plots.is_empty() {
        return Ok(Vec::new());
    }
    let python = crate::venv::python_with("matplotlib", "matplotlib")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    let job: Vec<serde_json::Value> = plots
        .iter()
        .map(|(name, series)| {
            let path = dir.join(format!("{}.{name}.png", report.suite));
            paths.push(path.display().to_string());
            serde_json::json!({
                "title": format!("tabos-bench {}: {name}", report.suite),
                "path": path,
                "series": series,
            })
        })
        .collect();
    let job_file = dir.join(format!(".{}.plots.json", report.suite));
    std::fs::write(&job_file, serde_json::json!({ "plots": job }).to_string())
        .map_err(|e| format!("{}: {e}", job_file.display()))?;
    let out = Command::new(&python)
        .args(["-c", SCRIPT])
        .arg(&job_file)
        .output()
        .map_err(|e| format!("running matplotlib: {e}"))?;
    let _ = std::fs::remove_file(&job_file);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(4).collect();
        return Err(format!("matplotlib failed: {}", tail.join(" | ")));
    }
    Ok(paths)
}
