//! `tabos-bench`: benchmark suites, each measuring tabos and its peer in the
//! same run and writing `bench/results/<suite>.json` (format in DESIGN.md,
//! "Benchmarks"). Benchmarks never run inside the test suite.
//!
//! Suites: [`store`], [`sched`], [`ipc`], [`names`], [`fs`], [`procedures`].

pub mod fs;
pub mod ipc;
pub mod machine;
pub mod measure;
pub mod names;
pub mod procedures;
pub mod report;
pub mod sched;
pub mod store;

use std::path::Path;

/// Runs suite `name`, prints its table and writes its result file into `out`.
pub fn run_suite(name: &str, quick: bool, out: &Path) -> anyhow::Result<()> {
    let report = match name {
        "store" => store::run(quick)?,
        "sched" => sched::run(quick)?,
        "ipc" => ipc::run(quick)?,
        "names" => names::run(quick)?,
        "fs" => fs::run(quick)?,
        "procedures" => procedures::run(quick)?,
        other => {
            anyhow::bail!("unknown benchmark suite {other:?}; suites: store, sched, ipc, names, fs, procedures")
        }
    };
    report.print();
    let path = report.write(out)?;
    println!("wrote {}", path.display());
    Ok(())
}
