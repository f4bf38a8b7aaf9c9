//! `tabos bench <suite>`: run a benchmark suite (see crates/bench).

#[derive(clap::Args)]
pub struct Args {
    /// Suite to run: store, sched, ipc, names, fs, procedures, mr, auth or elastic
    suite: String,
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

pub fn run(args: Args) -> anyhow::Result<()> {
    tabos_bench::run_suite_on(&args.suite, args.quick, &args.out, args.input.as_deref())
}
