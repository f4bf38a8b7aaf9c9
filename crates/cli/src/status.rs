//! `tabos status`: what the node runs on.

use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    node: NodeAddr,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let s = client.status().await?;
        let me = client.who_am_i().await?;
        let acting = if me.realm.is_empty() {
            format!("operator (user {}, credential {})", me.user, me.id)
        } else {
            format!(
                "realm {} as user {}, role {} (credential {})",
                me.realm, me.user, me.role(), me.id
            )
        };
        let pairs = [
            ("acting as", acting),
            ("version", s.version.clone()),
            ("backend", s.backend.clone()),
            ("partitions", s.partitions.to_string()),
            ("durability", s.durability.clone()),
            ("procedures committed", s.procedures_committed.to_string()),
            ("procedures failed", s.procedures_failed.to_string()),
            ("commits", s.commits.to_string()),
            ("retries", s.retries.to_string()),
            ("started", crate::output::rfc3339(s.started_us)),
            (
                "offers procs",
                format!("{} cores, {} MiB", s.cores, s.mem_mib),
            ),
            ("cgroups", s.cgroups.clone()),
            (
                "cluster",
                format!(
                    "{}; {} database connections; {} notifications received",
                    if s.leader { "leader" } else { "member" },
                    s.db_connections,
                    s.notifications
                ),
            ),
            ("protections", s.protections.join("; ")),
            (
                "pressure on procs (avg10)",
                if s.pressure.is_empty() {
                    "not measured (no unified cgroup tree)".to_string()
                } else {
                    let mut p: Vec<_> = s.pressure.iter().collect();
                    p.sort_by(|a, b| a.0.cmp(b.0));
                    p.iter()
                        .map(|(r, v)| format!("{r} {v:.2}%"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
            ("busy cores (measured)", format!("{:.2}", s.busy_cores)),
            ("BE admission measures", s.load_source.clone()),
            ("API connections (gRPC and local)", s.connections.to_string()),
            ("request bytes held", s.request_bytes_held.to_string()),
        ];
        let mut pairs = pairs.to_vec();
        for d in &s.doors {
            pairs.push((
                "door",
                format!(
                    "{}: {} open of {}; {} not signed in of {} ({} per address); {} (at most {} \
                     per realm)",
                    d.door,
                    d.open,
                    d.connections_max,
                    d.unauthenticated,
                    d.unauthenticated_max,
                    d.unauthenticated_per_source_max,
                    by_realm(&d.by_realm),
                    d.per_realm_max
                ),
            ));
        }
        for c in &s.realm_caps {
            pairs.push((
                "per realm",
                format!(
                    "{}: {} (at most {} per realm)",
                    c.what,
                    by_realm(&c.by_realm),
                    c.per_realm_max
                ),
            ));
        }
        if crate::output::json() {
            // Numbers as numbers, the start as RFC 3339.
            let v = serde_json::json!({
                "acting_as": {"id": me.id, "realm": me.realm, "user": me.user, "role": me.role().name()},
                "version": s.version,
                "backend": s.backend,
                "partitions": s.partitions,
                "durability": s.durability,
                "procedures_committed": s.procedures_committed,
                "procedures_failed": s.procedures_failed,
                "commits": s.commits,
                "retries": s.retries,
                "started": crate::output::rfc3339(s.started_us),
                "started_us": s.started_us,
                "cores": s.cores,
                "mem_mib": s.mem_mib,
                "cgroups": s.cgroups,
                "leader": s.leader,
                "db_connections": s.db_connections,
                "notifications": s.notifications,
                "protections": s.protections,
                "pressure": s.pressure,
                "busy_cores": s.busy_cores,
                "load_source": s.load_source,
                "connections": s.connections,
                "doors": s.doors.iter().map(|d| serde_json::json!({
                    "door": d.door,
                    "open": d.open,
                    "connections_max": d.connections_max,
                    "unauthenticated": d.unauthenticated,
                    "unauthenticated_max": d.unauthenticated_max,
                    "unauthenticated_per_source_max": d.unauthenticated_per_source_max,
                    "per_realm_max": d.per_realm_max,
                    "by_realm": d.by_realm,
                })).collect::<Vec<_>>(),
                "realm_caps": s.realm_caps.iter().map(|c| serde_json::json!({
                    "what": c.what,
                    "per_realm_max": c.per_realm_max,
                    "by_realm": c.by_realm,
                })).collect::<Vec<_>>(),
                "request_bytes_held": s.request_bytes_held,
            });
            crate::output::doc(&v);
        } else {
            let rows: Vec<Vec<String>> = pairs
                .iter()
                .map(|(k, v)| vec![k.to_string(), v.clone()])
                .collect();
            out!(
                "{}",
                crate::output::table(&["field", "value"], &rows)
            );
        }
        Ok(())
    })
}

/// Signed-in connections by realm, as `a 3, operators 1`.
fn by_realm(m: &std::collections::HashMap<String, u64>) -> String {
    if m.is_empty() {
        return "none signed in".into();
    }
    let mut r: Vec<_> = m.iter().collect();
    r.sort();
    r.iter()
        .map(|(realm, n)| {
            let who = if realm.is_empty() {
                "operators"
            } else {
                realm.as_str()
            };
            format!("{who} {n}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}
