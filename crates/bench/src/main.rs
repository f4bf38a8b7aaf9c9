//! `tabos-bench <suite> [--quick]`: the same as `tabos bench`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "tabos-bench",
    about = "Run a tabos benchmark suite against its peer"
)]
struct Args {
    /// Suite to run: store, sched, ipc or names
    suite: String,
    /// Fewer samples, same figures, under a minute
    #[arg(long)]
    quick: bool,
    /// Directory for <suite>.json
    #[arg(long, default_value = "bench/results")]
    out: std::path::PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tabos_bench::run_suite(&args.suite, args.quick, &args.out)
}
