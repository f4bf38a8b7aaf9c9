//! `tabos nodes` and `tabos node drain|rm`: the cluster's nodes.

use crate::NodeAddr;
use tabos_client::proto::NodeState;

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Args)]
pub struct NodeArgs {
    #[command(subcommand)]
    command: NodeCommand,
}

#[derive(clap::Subcommand)]
enum NodeCommand {
    /// Drain a node (operator): it takes no new procs, those placed on it but
    /// not started are placed elsewhere, and what it runs finishes; it stays
    /// drained across restarts until `--undo`
    Drain {
        /// The node's id (see `tabos nodes`)
        node_id: String,
        /// Put the node back in service instead
        #[arg(long)]
        undo: bool,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Forget a node that left or is lost (operator; refused while it is up)
    Rm {
        /// The node's id (see `tabos nodes`)
        node_id: String,
        #[command(flatten)]
        node: NodeAddr,
    },
}

/// One node as JSON: numbers as numbers, times as µs and RFC 3339.
fn node_json(n: &tabos_client::proto::NodeInfo) -> serde_json::Value {
    let realms: Vec<serde_json::Value> = n
        .realms
        .iter()
        .map(|r| {
            serde_json::json!({
                "realm": r.realm, "cores": r.cores, "unused_cores": r.unused_cores,
                "procs": r.procs,
            })
        })
        .collect();
    let labels: serde_json::Map<String, serde_json::Value> = n
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
        .collect();
    let time = |us: i64| (us != 0).then(|| crate::output::rfc3339(us));
    serde_json::json!({
        "node_id": n.node_id,
        "state": n.state().name(),
        "address": n.address,
        "cores": n.cores,
        "mem_mb": n.mem_mb,
        "busy_cores": n.busy_cores,
        "mem_used_bytes": n.mem_used_bytes,
        "disk_used_bytes": n.disk_used_bytes,
        "heartbeat_age_ms": n.heartbeat_age_ms,
        "started_us": n.started_us,
        "started": time(n.started_us),
        "left_us": (n.left_us != 0).then_some(n.left_us),
        "left": time(n.left_us),
        "draining_us": (n.draining_us != 0).then_some(n.draining_us),
        "elastic": n.elastic,
        "lost_us": (n.lost_us != 0).then_some(n.lost_us),
        "lost": time(n.lost_us),
        "given_back_us": (n.given_back_us != 0).then_some(n.given_back_us),
        "note": n.note,
        "labels": labels,
        "realms": realms,
    })
}

pub fn list(args: ListArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let nodes = client.list_nodes().await?;
        if crate::output::json() {
            let v: Vec<_> = nodes.iter().map(node_json).collect();
            crate::output::doc(&serde_json::Value::Array(v));
            return Ok(());
        }
        let wide = crate::output::wide();
        let mut header = vec![
            "node",
            "state",
            "address",
            "cores",
            "pool",
            "busy",
            "mem_mib",
            "heartbeat",
            "realms",
            "labels",
            "note",
        ];
        if wide {
            // What it uses of its memory now, and how long it has run.
            header.extend(["used_mib", "disk_used_mib", "age", "started"]);
        }
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| {
                let realms = n
                    .realms
                    .iter()
                    .map(|r| {
                        format!(
                            "{} ({}/{} cores free, {} procs)",
                            r.realm, r.unused_cores, r.cores, r.procs
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                // A draining node with nothing left to run is drained; a
                // lost one says whether its procs were given back yet.
                let state = match n.state() {
                    NodeState::Draining if n.realms.iter().all(|r| r.procs == 0) => {
                        "drained".to_string()
                    }
                    _ if n.given_back_us != 0 => "lost, procs given back".to_string(),
                    s => s.name().to_string(),
                };
                let mut labels: Vec<String> =
                    n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                labels.sort();
                let mut row = vec![
                    n.node_id.clone(),
                    state,
                    n.address.clone(),
                    n.cores.to_string(),
                    if n.elastic { "elastic" } else { "static" }.to_string(),
                    format!("{:.2}", n.busy_cores),
                    n.mem_mb.to_string(),
                    format!("{} ms ago", n.heartbeat_age_ms),
                    realms,
                    labels.join(","),
                    n.note.clone(),
                ];
                if wide {
                    row.extend([
                        n.mem_used_bytes
                            .map_or("-".into(), |b| format!("{:.0}", b as f64 / 1048576.0)),
                        n.disk_used_bytes
                            .map_or("-".into(), |b| format!("{:.0}", b as f64 / 1048576.0)),
                        crate::output::age(n.started_us),
                        crate::output::rfc3339(n.started_us),
                    ]);
                }
                row
            })
            .collect();
        out!("{}", crate::output::table(&header, &rows));
        Ok(())
    })
}

pub fn node(args: NodeArgs) -> anyhow::Result<()> {
    match args.command {
        NodeCommand::Drain {
            node_id,
            undo,
            node,
        } => crate::runtime()?.block_on(async {
            let done = node.connect().await?.drain_node(&node_id, !undo).await?;
            if crate::output::json() {
                let moved: Vec<_> = done
                    .moved
                    .iter()
                    .map(|m| serde_json::json!({"realm": m.realm, "pid": m.pid}))
                    .collect();
                let v = serde_json::json!({
                    "node": node_id, "draining": !undo, "changed": done.changed, "moved": moved,
                });
                crate::output::doc(&v);
                return Ok(());
            }
            match (undo, done.changed) {
                (false, true) => outln!("node {node_id} is draining"),
                (false, false) => outln!("node {node_id} was draining already"),
                (true, true) => outln!("node {node_id} is back in service"),
                (true, false) => outln!("node {node_id} was not draining"),
            }
            for m in &done.moved {
                outln!("placed again: {} in realm {}", m.pid, m.realm);
            }
            Ok(())
        }),
        NodeCommand::Rm { node_id, node } => crate::runtime()?.block_on(async {
            node.connect().await?.remove_node(&node_id).await?;
            crate::output::emit(
                || format!("removed node {node_id}"),
                || serde_json::json!({"node": node_id, "removed": true}),
            );
            Ok(())
        }),
    }
}
