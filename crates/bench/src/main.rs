//! `tabos-bench <suite> [--quick]`: runs a benchmark suite against its
//! peer and writes bench/results/<suite>.json. The `tabos` binary holds
//! the product only; the suites, their peers and their installers are
//! here. Suites that run nodes and procs use the `tabos` binary beside
//! this one (or `$TABOS_BIN`).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tabos-bench",
    about = "Run a tabos benchmark suite against its peer and write bench/results/<suite>.json",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    #[command(flatten)]
    suite: SuiteArgs,
}

#[derive(clap::Args)]
struct SuiteArgs {
    /// Suite to run: store, sched, ipc, names, fs, mount, procedures, mr,
    /// auth, dialect, elastic, kv, www, workflows, cluster, fair, graphs,
    /// analytics or transport
    suite: Option<String>,
    /// Fewer samples, same figures, under a minute
    #[arg(long)]
    quick: bool,
    /// Directory for <suite>.json
    #[arg(long, default_value = "bench/results")]
    out: std::path::PathBuf,
    /// mr only: the directory to count and grep (default: the Linux source,
    /// Debian's linux-source-6.1, installed and unpacked by the benchmark)
    #[arg(long)]
    input: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Worker {
    /// The procs and processes a suite runs (bench-worker lc MAILBOX
    /// WORK_US; bench-worker wf-pending ADDR TOKEN N)
    #[command(hide = true)]
    BenchWorker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Worker::BenchWorker { args }) = cli.worker {
        let status = match args.split_first() {
            Some((w, rest)) if w == "lc" => tabos_bench::elastic::lc_server(rest),
            Some((w, rest)) if w == "wf-pending" => tabos_bench::workflows::pending_worker(rest),
            _ => {
                eprintln!(
                    "usage: tabos-bench bench-worker lc MAILBOX WORK_US | wf-pending ADDR TOKEN N"
                );
                2
            }
        };
        return std::process::ExitCode::from(status.clamp(0, 255) as u8);
    }
    let Some(suite) = cli.suite.suite else {
        eprintln!("usage: tabos-bench <SUITE> [--quick] (tabos-bench --help)");
        return std::process::ExitCode::from(2);
    };
    match tabos_bench::run_suite_on(
        &suite,
        cli.suite.quick,
        &cli.suite.out,
        cli.suite.input.as_deref(),
    ) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
