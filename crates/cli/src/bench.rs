//! `tabos bench <suite>`: run a benchmark suite (see crates/bench).

#[derive(clap::Args)]
pub struct Args {
    /// Suite to run: store, sched, ipc, names, fs or procedures
    suite: String,
    /// Fewer samples, same figures, under a minute
    #[arg(long)]
    quick: bool,
    /// Directory for <suite>.json
    #[arg(long, default_value = "bench/results")]
    out: std::path::PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    tabos_bench::run_suite(&args.suite, args.quick, &args.out)
}
