//! `tabos-bench`: benchmark suites, each measuring tabos and its peer in the
//! same run and writing `bench/results/<suite>.json` (format in DESIGN.md,
//! "Benchmarks"). Benchmarks never run inside the test suite.
//!
//! Suites: [`store`], [`sched`], [`ipc`], [`names`], [`fs`], [`procedures`],
//! [`mr`], [`auth`], [`dialect`], [`elastic`], [`kv`], [`www`], [`workflows`], [`cluster`],
//! [`fair`], [`graphs`].

pub mod analytics;
pub mod auth;
pub mod cluster;
pub mod dialect;
pub mod elastic;
pub mod fair;
pub mod fs;
pub mod graphs;
pub mod ipc;
pub mod kv;
pub mod machine;
pub mod measure;
pub mod mount;
pub mod mr;
pub mod names;
pub mod plot;
pub mod procedures;
pub mod report;
pub mod sched;
pub mod served;
pub mod store;
pub mod transport;
pub mod venv;
pub mod workflows;
pub mod www;

use std::path::Path;

/// Runs suite `name`, prints its table and writes its result file into `out`.
/// The `tabos` binary the suites run as nodes and procs: `$TABOS_BIN`,
/// else the one beside this benchmark's own executable (cargo builds both
/// into the same directory: `cargo build --release -p tabos-cli -p
/// tabos-bench`).
pub fn tabos_exe() -> anyhow::Result<std::path::PathBuf> {
    let path = match std::env::var_os("TABOS_BIN") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("tabos"))
            .ok_or_else(|| anyhow::anyhow!("this executable has no directory"))?,
    };
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: build it (cargo build --release -p tabos-cli) or set TABOS_BIN",
        path.display()
    );
    Ok(path)
}

pub fn run_suite(name: &str, quick: bool, out: &Path) -> anyhow::Result<()> {
    run_suite_on(name, quick, out, None)
}

/// [`run_suite`], with the input directory of the suites that read one
/// (`mr`; others refuse it).
pub fn run_suite_on(
    name: &str,
    quick: bool,
    out: &Path,
    input: Option<&Path>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        input.is_none() || name == "mr",
        "--input is for the mr suite only"
    );
    let report = match name {
        "store" => store::run(quick)?,
        "sched" => sched::run(quick)?,
        "ipc" => ipc::run(quick)?,
        "names" => names::run(quick)?,
        "fs" => fs::run(quick)?,
        "procedures" => procedures::run(quick)?,
        "mr" => mr::run(quick, input)?,
        "mount" => mount::run(quick)?,
        "auth" => auth::run(quick)?,
        "transport" => transport::run(quick)?,
        "dialect" => dialect::run(quick)?,
        "elastic" => elastic::run(quick)?,
        "kv" => kv::run(quick)?,
        "www" => www::run(quick)?,
        "workflows" => workflows::run(quick)?,
        "cluster" => cluster::run(quick)?,
        "fair" => fair::run(quick)?,
        "graphs" => graphs::run(quick)?,
        "analytics" => analytics::run(quick)?,
        other => {
            anyhow::bail!("unknown benchmark suite {other:?}; suites: store, sched, ipc, names, fs, mount, procedures, mr, auth, transport, dialect, elastic, kv, www, workflows, cluster, fair, graphs, analytics")
        }
    };
    let mut report = report;
    if !report.series.is_empty() {
        match plot::draw(&report, out) {
            Ok(paths) => report.plots = paths,
            Err(e) => report.notes.push(format!("time series not plotted: {e}")),
        }
    }
    report.print();
    for p in &report.plots {
        println!("plotted {p}");
    }
    let path = report.write(out)?;
    println!("wrote {}", path.display());
    Ok(())
}
