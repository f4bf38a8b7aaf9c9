//! `tabos top`: what each node and each running proc uses now, refreshed
//! (kubectl top's two tables on one screen).
//!
//! Both come from the database: a node's heartbeat carries its busy cores
//! and the memory it and its procs use (`node.busy_cores`,
//! `node.mem_used_bytes`), and each procd writes what its running native
//! procs use every `USAGE_INTERVAL` (the `ps` view's `cpu_cores`,
//! `mem_bytes`, `cpu_us`). The screen is redrawn on a clock, as top's is:
//! the figures themselves are measurements on a clock, so no change in the
//! database announces a new one.

use std::io::IsTerminal;
use std::time::Duration;

use tabos_client::Value;

use crate::NodeAddr;

/// Most procs shown (the busiest first).
const PROCS_SHOWN_MAX: u32 = 1_000;

#[derive(clap::Args)]
pub struct Args {
    /// Print once and exit (what a script or a pipe wants)
    #[arg(long)]
    once: bool,
    /// Time between refreshes, e.g. 2s, 500ms
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    interval: String,
    /// Procs to show, the busiest first
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=i64::from(PROCS_SHOWN_MAX)))]
    procs: u32,
    /// Show every realm's procs (an operator)
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    realm: crate::procs::RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let ms = crate::tokens::parse_ttl(&args.interval).map_err(|_| {
        anyhow::anyhow!(
            "--interval {:?}: a number and a unit (ms, s, m)",
            args.interval
        )
    })?;
    anyhow::ensure!(ms >= 100, "--interval {:?}: at least 100ms", args.interval);
    let interval = Duration::from_millis(ms);
    let tty = std::io::stdout().is_terminal();
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let realm = match args.realm.realm.as_str() {
            "" => client.who_am_i().await?.realm,
            r => r.to_string(),
        };
        let every_realm = args.all || realm.is_empty();
        if !every_realm {
            crate::procs::ensure_realm(&mut client, &realm).await?;
        }
        loop {
            let screen = measure(&mut client, &realm, every_realm, args.procs).await?;
            if crate::output::json() {
                crate::output::doc(&screen.json());
            } else {
                if tty && !args.once {
                    // Home and clear, as top redraws.
                    out!("\x1b[H\x1b[2J");
                }
                out!("{}", screen.text());
            }
            if args.once {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    })
}

/// One refresh: the nodes and the busiest running procs.
struct Screen {
    nodes: Vec<tabos_client::proto::NodeInfo>,
    procs: tabos_client::QueryResult,
}

async fn measure(
    client: &mut tabos_client::Client,
    realm: &str,
    every_realm: bool,
    shown: u32,
) -> anyhow::Result<Screen> {
    let nodes = client.list_nodes().await?;
    let mut params = vec![Value::Int(i64::from(shown))];
    let filter = if every_realm {
        String::new()
    } else {
        params.push(Value::Text(realm.to_string()));
        " AND realm = $2".to_string()
    };
    let sql = format!(
        "SELECT realm, pid, worker_id AS worker, cpu_cores, mem_bytes, mem_mb, cpu_us, start_us, \
         program FROM ps WHERE state = 'running'{filter} \
         ORDER BY cpu_cores DESC NULLS LAST, mem_bytes DESC NULLS LAST, pid LIMIT $1"
    );
    let procs = client.sql_limited(&sql, params, PROCS_SHOWN_MAX).await?;
    Ok(Screen { nodes, procs })
}

fn int(v: &Option<Value>) -> Option<i64> {
    match v {
        Some(Value::Int(i)) => Some(*i),
        Some(Value::Real(r)) => Some(*r as i64),
        _ => None,
    }
}

fn real(v: &Option<Value>) -> Option<f64> {
    match v {
        Some(Value::Real(r)) => Some(*r),
        Some(Value::Int(i)) => Some(*i as f64),
        _ => None,
    }
}

fn text(v: &Option<Value>) -> String {
    match v {
        Some(Value::Text(t)) => t.clone(),
        other => crate::output::cell(other),
    }
}

fn mib(bytes: i64) -> String {
    format!("{:.0}", bytes as f64 / 1048576.0)
}

fn pct(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.0}%", 100.0 * part / whole)
    } else {
        "-".into()
    }
}

impl Screen {
    fn text(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| {
                let used = n.mem_used_bytes;
                let live: i64 = n.realms.iter().map(|r| r.procs).sum();
                vec![
                    n.node_id.clone(),
                    n.state().name().to_string(),
                    format!("{:.2}", n.busy_cores),
                    pct(n.busy_cores, n.cores as f64),
                    used.map_or("-".into(), mib),
                    used.map_or("-".into(), |b| pct(b as f64, n.mem_mb as f64 * 1048576.0)),
                    live.to_string(),
                ]
            })
            .collect();
        let mut out = crate::output::table(
            &[
                "node",
                "state",
                "cpu(cores)",
                "cpu%",
                "memory(MiB)",
                "memory%",
                "procs",
            ],
            &rows,
        );
        out.push('\n');
        let now = tabos_store::now_us();
        let rows: Vec<Vec<String>> = self
            .procs
            .rows
            .iter()
            .map(|r| {
                let asked_mib = int(&r[5]).unwrap_or(0);
                vec![
                    text(&r[1]),
                    text(&r[0]),
                    text(&r[2]),
                    real(&r[3]).map_or("-".into(), |c| format!("{c:.2}")),
                    int(&r[4]).map_or("-".into(), mib),
                    int(&r[4]).map_or("-".into(), |b| pct(b as f64, asked_mib as f64 * 1048576.0)),
                    int(&r[6]).map_or("-".into(), |us| crate::output::duration(us / 1_000_000)),
                    int(&r[7]).map_or("-".into(), |s| {
                        crate::output::duration((now - s).max(0) / 1_000_000)
                    }),
                    text(&r[8]),
                ]
            })
            .collect();
        out.push_str(&crate::output::table(
            &[
                "pid",
                "realm",
                "worker",
                "cpu(cores)",
                "memory(MiB)",
                "of asked",
                "cpu time",
                "age",
                "program",
            ],
            &rows,
        ));
        if rows.is_empty() {
            out.push_str("(no running procs)\n");
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        let nodes: Vec<_> = self
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "node_id": n.node_id,
                    "state": n.state().name(),
                    "cores": n.cores,
                    "busy_cores": n.busy_cores,
                    "mem_mb": n.mem_mb,
                    "mem_used_bytes": n.mem_used_bytes,
                    "procs": n.realms.iter().map(|r| r.procs).sum::<i64>(),
                })
            })
            .collect();
        let procs: Vec<_> = self
            .procs
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "realm": text(&r[0]),
                    "pid": text(&r[1]),
                    "worker": text(&r[2]),
                    "cpu_cores": real(&r[3]),
                    "mem_bytes": int(&r[4]),
                    "mem_mb": int(&r[5]),
                    "cpu_us": int(&r[6]),
                    "started": int(&r[7]).map(crate::output::rfc3339),
                    "program": text(&r[8]),
                })
            })
            .collect();
        serde_json::json!({ "nodes": nodes, "procs": procs })
    }
}
