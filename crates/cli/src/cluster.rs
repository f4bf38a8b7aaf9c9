//! `tabos cluster settings|decisions`, and how an elastic realm's
//! allocation is printed (`tabos realm show`): the cluster manager (σMGR)
//! and realm managers (RMGR) of elastic realms, their policy's settings and
//! their decisions.

use tabos_client::proto;

use crate::NodeAddr;

#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(clap::Subcommand)]
enum ClusterCommand {
    /// Show (or change, with NAME=VALUE) the elastic allocation policy's
    /// settings — tick_ms, idle_ms, lease_ms, headroom_pct — and who leads
    /// each manager (operators)
    Settings {
        /// Settings to change, e.g. idle_ms=5000
        #[arg(value_parser = parse_setting)]
        set: Vec<(String, i64)>,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// The managers' latest decisions, oldest first, each with its reason
    /// (operators)
    Decisions {
        /// Only this realm's
        #[arg(long)]
        realm: Option<String>,
        /// Most decisions (newest)
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        node: NodeAddr,
    },
}

fn parse_setting(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("a setting is NAME=VALUE, not {s:?}"))?;
    let v: i64 = v
        .parse()
        .map_err(|_| format!("{k}: the value must be an integer, not {v:?}"))?;
    Ok((k.to_string(), v))
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Settings { set, node } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let r = client.alloc_settings(set.into_iter().collect()).await?;
            let mut settings: Vec<(String, i64)> = r.settings.into_iter().collect();
            settings.sort();
            if crate::output::json() {
                let leaders: Vec<serde_json::Value> = r
                    .leaders
                    .iter()
                    .map(|l| {
                        serde_json::json!({
                            "name": l.name, "holder": l.holder, "epoch": l.epoch,
                            "expires_in_ms": l.expires_in_ms,
                        })
                    })
                    .collect();
                let s: serde_json::Map<String, serde_json::Value> = settings
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::from(*v)))
                    .collect();
                crate::output::doc(&serde_json::json!({ "settings": s, "leaders": leaders }));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = settings
                .iter()
                .map(|(k, v)| vec![k.clone(), v.to_string()])
                .collect();
            out!("{}", crate::output::table(&["setting", "value"], &rows));
            let rows: Vec<Vec<String>> = r
                .leaders
                .iter()
                .map(|l| {
                    vec![
                        l.name.clone(),
                        l.holder.clone(),
                        l.epoch.to_string(),
                        format!("{} ms", l.expires_in_ms),
                    ]
                })
                .collect();
            if !rows.is_empty() {
                outln!();
                let cols = ["manager", "leader", "epoch", "lease left"];
                out!("{}", crate::output::table(&cols, &rows));
            }
            Ok(())
        }),
        ClusterCommand::Decisions { realm, limit, node } => crate::runtime()?.block_on(async {
            let mut client = node.connect().await?;
            let d = client
                .decisions(realm.as_deref().unwrap_or(""), limit)
                .await?;
            if crate::output::json() {
                // An array, as every listing's JSON is.
                let v: Vec<_> = d.iter().map(decision_json).collect();
                crate::output::doc(&serde_json::Value::Array(v));
            } else {
                print_decisions(&d);
            }
            Ok(())
        }),
    }
}

fn decision_json(d: &proto::AllocDecision) -> serde_json::Value {
    serde_json::json!({
        "seq": d.seq, "at_us": d.at_us, "manager": d.manager().name(), "realm": d.realm,
        "node_id": (!d.node_id.is_empty()).then_some(&d.node_id),
        "cores_before": d.cores_before, "cores_after": d.cores_after, "reason": d.reason,
    })
}

/// An elastic realm's allocation as one JSON object.
pub fn allocation_json(a: &proto::RealmAllocation) -> serde_json::Value {
    let grants: Vec<serde_json::Value> = a
        .grants
        .iter()
        .map(|g| serde_json::json!({ "node_id": g.node_id, "cores": g.cores }))
        .collect();
    let decisions: Vec<serde_json::Value> = a.decisions.iter().map(decision_json).collect();
    serde_json::json!({
        "realm": a.realm,
        "elastic": a.elastic,
        "class": a.policy.as_ref().map(|p| p.class().name()),
        "min_cores": a.policy.as_ref().map(|p| p.min_cores),
        "max_cores": a.policy.as_ref().map(|p| p.max_cores),
        "want_cores": a.elastic.then_some(a.want_cores),
        "want_reason": a.elastic.then_some(&a.want_reason),
        "granted_cores": a.grants.iter().map(|g| g.cores).sum::<i64>(),
        "grants": grants,
        "live_cores": a.live_cores,
        "unplaced_cores": a.unplaced_cores,
        "decisions": decisions,
    })
}

/// Seconds since the Unix epoch, with milliseconds, for a time in µs.
fn at(us: i64) -> String {
    format!("{}.{:03}", us / 1_000_000, (us / 1_000) % 1_000)
}

fn print_decisions(d: &[proto::AllocDecision]) {
    let cols = ["at (s)", "manager", "realm", "node", "cores", "reason"];
    let rows: Vec<Vec<String>> = d
        .iter()
        .map(|d| {
            vec![
                at(d.at_us),
                d.manager().name().to_string(),
                d.realm.clone(),
                if d.node_id.is_empty() {
                    "(wants)".into()
                } else {
                    d.node_id.clone()
                },
                format!("{} -> {}", d.cores_before, d.cores_after),
                d.reason.clone(),
            ]
        })
        .collect();
    out!("{}", crate::output::table(&cols, &rows));
}

/// An elastic realm's policy, want, grants and decisions (nothing more
/// for a static realm than that it is static).
pub fn print_allocation(a: &proto::RealmAllocation) {
    outln!();
    let Some(p) = &a.policy else {
        outln!(
            "static realm: every static node serves it with all its cores \
             ({} cores of live procs, {} waiting to be placed)",
            a.live_cores,
            a.unplaced_cores
        );
        return;
    };
    let granted: i64 = a.grants.iter().map(|g| g.cores).sum();
    outln!(
        "elastic {} realm: {} to {} cores; wants {} ({}); granted {granted}; \
         live procs hold {} cores, {} waiting to be placed",
        p.class(),
        p.min_cores,
        p.max_cores,
        a.want_cores,
        a.want_reason,
        a.live_cores,
        a.unplaced_cores
    );
    if !a.grants.is_empty() {
        let rows: Vec<Vec<String>> = a
            .grants
            .iter()
            .map(|g| vec![g.node_id.clone(), g.cores.to_string()])
            .collect();
        out!("{}", crate::output::table(&["node", "cores"], &rows));
    }
    if !a.decisions.is_empty() {
        outln!("\nallocation over time:");
        print_decisions(&a.decisions);
    }
}
