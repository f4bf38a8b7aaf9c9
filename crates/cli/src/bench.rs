//! `tabos bench <suite>`: run a benchmark suite (see crates/bench).

#[derive(clap::Args)]
pub struct Args {
    /// Suite to run: store, sched, ipc, names, fs, procedures, mr, auth, elastic, kv or www
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

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The worker (`lc`) and its arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// A proc a benchmark runs (`tabos bench-worker lc MAILBOX WORK_US`).
pub fn worker(args: WorkerArgs) -> std::process::ExitCode {
    let status = match args.args.split_first() {
        Some((w, rest)) if w == "lc" => tabos_bench::elastic::lc_server(rest),
        _ => {
            eprintln!("usage: tabos bench-worker lc MAILBOX WORK_US");
            2
        }
    };
    std::process::ExitCode::from(status.clamp(0, 255) as u8)
}
