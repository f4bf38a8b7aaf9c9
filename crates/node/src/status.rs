//! The `Node` service: what this node runs on and what it has done, the
//! cluster's nodes (`kernel::nodes`), and elastic realms' allocation
//! (`kernel::alloc`).

use std::collections::BTreeMap;

use tabos_client::proto;
use tabos_kernel::nodes::NodeInfo;
use tabos_kernel::{alloc, cluster};

use crate::Node;

pub struct StatusService {
    node: Node,
}

impl StatusService {
    pub fn new(node: Node) -> StatusService {
        StatusService { node }
    }
}

crate::op::served! {
    StatusService: proto::node_server::Node;
    status(StatusRequest) -> StatusResponse = Status;
    list_nodes(ListNodesRequest) -> ListNodesResponse = ListNodes;
    remove_node(RemoveNodeRequest) -> Empty = RemoveNode;
    drain_node(DrainNodeRequest) -> DrainNodeResponse = DrainNode;
    set_elastic(SetElasticRequest) -> RealmAllocation = SetElastic;
    allocation(AllocationRequest) -> RealmAllocation = Allocation;
    alloc_settings(AllocSettingsRequest) -> AllocSettingsResponse = AllocSettings;
    decisions(DecisionsRequest) -> DecisionsResponse = Decisions;
    backup(BackupRequest) -> BackupResponse = Backup;
}

/// The service's operations; [`tabos_kernel::cluster`] checks the caller.
pub mod ops {
    use super::*;
    use crate::op::op;

    // What this node runs on and has done: any credential may ask; the
    // doors' use by realm is shown as the caller may see it.
    op!(Status(StatusRequest) -> StatusResponse, |node, who, _r| {
        let store = &node.store;
        let stats = store.stats();
        Ok(proto::StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            backend: store.kind().to_string(),
            partitions: store.partitions(),
            durability: store.durability().to_string(),
            procedures_committed: stats.committed,
            procedures_failed: stats.failed,
            commits: stats.commits,
            retries: stats.retries,
            started_us: node.started_us,
            protections: node.confine.describe(),
            busy_cores: node.load.measured_cores(),
            load_source: node.load.source().describe(),
            connections: crate::conn::open_connections() as u64,
            request_bytes_held: node.request_bytes.held() as u64,
            cgroups: node.confine.mode().to_string(),
            pressure: node
                .confine
                .pressure()
                .unwrap_or_default()
                .into_iter()
                .map(|(r, v)| (r.to_string(), v))
                .collect(),
            cores: node.settings.cores,
            mem_mib: node.settings.mem_mb,
            notifications: stats.notifications,
            db_connections: stats.connections,
            leader: node.standing.leading(),
            doors: node.door_uses(&who),
            realm_caps: node.realm_caps(&who),
        })
    });

    op!(ListNodes(ListNodesRequest) -> ListNodesResponse, |node, who, _r| {
        let nodes = cluster::nodes(&node.store, &who).await?;
        let now = tabos_store::now_us();
        Ok(proto::ListNodesResponse {
            nodes: nodes.into_iter().map(|n| node_to_proto(n, now)).collect(),
        })
    });

    op!(RemoveNode(RemoveNodeRequest) -> Empty, |node, who, r| {
        let id = tabos_kernel::ids::NodeId::new(r.node_id)?;
        cluster::remove_node(&node.store, &who, &id).await?;
        Ok(proto::Empty {})
    });

    op!(DrainNode(DrainNodeRequest) -> DrainNodeResponse, |node, who, r| {
        let id = tabos_kernel::ids::NodeId::new(r.node_id)?;
        let done = cluster::drain_node(&node.store, &who, &id, r.drain).await?;
        Ok(proto::DrainNodeResponse {
            changed: done.changed,
            moved: done
                .moved
                .into_iter()
                .map(|(realm, pid)| proto::MovedProc { realm, pid })
                .collect(),
        })
    });

    op!(Backup(BackupRequest) -> BackupResponse, |node, who, r| {
        let db_url = match &node.db {
            tabos_store::Location::Postgres(url) => Some(url.as_str()),
            tabos_store::Location::Sqlite(_) => None,
        };
        let b = cluster::backup(&node.files, &who, std::path::Path::new(&r.dest), db_url).await?;
        let (block_store, segments) = b.block_store.unwrap_or_default();
        Ok(proto::BackupResponse {
            dest: b.dir.display().to_string(),
            taken_us: b.taken_us,
            partitions: b.partitions,
            files: b
                .files
                .into_iter()
                .map(|f| proto::BackupFile {
                    name: f.name,
                    bytes: f.bytes,
                    sha256: f.sha256,
                })
                .collect(),
            block_store,
            segments,
            frozen_us: b.frozen_us,
        })
    });

    op!(SetElastic(SetElasticRequest) -> RealmAllocation, |node, who, r| {
        cluster::set_elastic(&node.store, &who, policy_of(r.policy)?).await?;
        Ok(allocation_to_proto(cluster::allocation(&node.store, &who, decisions_max(0)).await?))
    });

    op!(Allocation(AllocationRequest) -> RealmAllocation, |node, who, r| {
        let a = cluster::allocation(&node.store, &who, decisions_max(r.limit)).await?;
        Ok(allocation_to_proto(a))
    });

    op!(AllocSettings(AllocSettingsRequest) -> AllocSettingsResponse, |node, who, r| {
        let set: BTreeMap<String, i64> = r.set.into_iter().collect();
        let (settings, leaders) = cluster::alloc_settings(&node.store, &who, &set).await?;
        let now = tabos_store::now_us();
        Ok(proto::AllocSettingsResponse {
            settings: settings
                .pairs()
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
            leaders: leaders
                .into_iter()
                .map(|(name, holder, epoch, expires_us)| proto::ManagerLeader {
                    name,
                    holder,
                    epoch,
                    expires_in_ms: (expires_us - now).max(0) / 1_000,
                })
                .collect(),
        })
    });

    op!(Decisions(DecisionsRequest) -> DecisionsResponse, |node, who, r| {
        let every_realm = r.realm.is_empty();
        let decisions =
            cluster::decisions(&node.store, &who, every_realm, decisions_max(r.limit)).await?;
        Ok(proto::DecisionsResponse {
            decisions: decisions.into_iter().map(decision_to_proto).collect(),
        })
    });
}

/// An elastic policy from its message, checked.
pub fn policy_of(p: Option<proto::ElasticPolicy>) -> tabos_kernel::Result<alloc::Policy> {
    let p =
        p.ok_or_else(|| tabos_kernel::Error::Invalid("an elastic policy is required".into()))?;
    let class = crate::wire::field("an elastic realm's class", p.class)?
        .unwrap_or(tabos_kernel::procs::Class::Be);
    let policy = alloc::Policy {
        class,
        min_cores: p.min_cores,
        max_cores: p.max_cores,
    };
    policy.validate()?;
    Ok(policy)
}

fn policy_to_proto(p: &alloc::Policy) -> proto::ElasticPolicy {
    proto::ElasticPolicy {
        class: crate::wire::out(p.class),
        min_cores: p.min_cores,
        max_cores: p.max_cores,
    }
}

fn decision_to_proto(d: alloc::Decision) -> proto::AllocDecision {
    proto::AllocDecision {
        seq: d.seq,
        at_us: d.at_us,
        manager: crate::wire::of_text(&d.manager, proto::AllocManager::from_name).into(),
        realm: d.realm,
        node_id: d.node_id,
        cores_before: d.cores_before,
        cores_after: d.cores_after,
        reason: d.reason,
    }
}

/// Most decisions one request returns when it does not say.
const DECISIONS_DEFAULT: u32 = 100;

/// The decisions a request asks for: `limit`, or the default for 0.
fn decisions_max(limit: u32) -> usize {
    match limit {
        0 => DECISIONS_DEFAULT as usize,
        n => n as usize,
    }
}

/// A realm's allocation as the protocol says it.
fn allocation_to_proto(a: cluster::Allocation) -> proto::RealmAllocation {
    let mut out = proto::RealmAllocation {
        realm: a.realm,
        live_cores: a.demand.live_cores,
        unplaced_cores: a.demand.unplaced_cores,
        ..Default::default()
    };
    let Some((elastic, grants, decisions)) = a.elastic else {
        return out;
    };
    out.elastic = true;
    out.policy = Some(policy_to_proto(&elastic.policy));
    out.want_cores = elastic.want_cores;
    out.want_reason = elastic.want_reason;
    out.want_us = elastic.want_us;
    out.grants = grants
        .into_iter()
        .map(|g| proto::CoreGrantInfo {
            node_id: g.node_id,
            cores: g.cores,
        })
        .collect();
    out.decisions = decisions.into_iter().map(decision_to_proto).collect();
    out
}

fn node_to_proto(n: NodeInfo, now_us: i64) -> proto::NodeInfo {
    proto::NodeInfo {
        node_id: n.node_id,
        address: n.address,
        cores: n.cores,
        mem_mb: n.mem_mb,
        labels: n.labels.into_iter().collect(),
        state: crate::wire::out(n.state),
        started_us: n.started_us,
        heartbeat_us: n.heartbeat_us,
        heartbeat_age_ms: (now_us - n.heartbeat_us).max(0) / 1_000,
        left_us: n.left_us.unwrap_or(0),
        draining_us: n.draining_us.unwrap_or(0),
        elastic: n.elastic,
        busy_cores: n.busy_cores,
        lost_us: n.lost_us.unwrap_or(0),
        given_back_us: n.given_back_us.unwrap_or(0),
        note: n.note,
        mem_used_bytes: n.mem_used_bytes,
        disk_used_bytes: n.disk_used_bytes,
        realms: n
            .realms
            .into_iter()
            .map(|r| proto::NodeRealmInfo {
                realm: r.realm,
                cores: r.cores,
                unused_cores: r.unused_cores,
                procs: r.procs,
            })
            .collect(),
    }
}
