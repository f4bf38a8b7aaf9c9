//! The `Node` service: what this node runs on and what it has done, the
//! cluster's nodes (`kernel::nodes`), and elastic realms' allocation
//! (`kernel::alloc`).

use tabos_client::proto;
use tabos_kernel::alloc;
use tabos_kernel::auth::Role;
use tabos_kernel::nodes::NodeInfo;
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

pub struct StatusService {
    node: Node,
}

impl StatusService {
    pub fn new(node: Node) -> StatusService {
        StatusService { node }
    }
}

#[tonic::async_trait]
impl proto::node_server::Node for StatusService {
    async fn status(
        &self,
        request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        let caller = crate::auth::caller(&request)?;
        let store = &self.node.store;
        let stats = store.stats();
        let doors = self.node.door_uses(&caller);
        let realm_caps = self.node.realm_caps(&caller);
        Ok(Response::new(proto::StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            backend: store.kind().to_string(),
            partitions: store.partitions(),
            durability: store.durability().to_string(),
            procedures_committed: stats.committed,
            procedures_failed: stats.failed,
            commits: stats.commits,
            retries: stats.retries,
            started_us: self.node.started_us,
            protections: self.node.confine.describe(),
            busy_cores: self.node.load.measured_cores(),
            load_source: self.node.load.source().describe(),
            connections: crate::conn::open_connections() as u64,
            request_bytes_held: self.node.request_bytes.held() as u64,
            cgroups: self.node.confine.mode().to_string(),
            pressure: self
                .node
                .confine
                .pressure()
                .unwrap_or_default()
                .into_iter()
                .map(|(r, v)| (r.to_string(), v))
                .collect(),
            cores: self.node.settings.cores,
            mem_mib: self.node.settings.mem_mb,
            notifications: stats.notifications,
            db_connections: stats.connections,
            leader: self.node.standing.leading(),
            doors,
            realm_caps,
        }))
    }

    async fn list_nodes(
        &self,
        request: Request<proto::ListNodesRequest>,
    ) -> Result<Response<proto::ListNodesResponse>, Status> {
        let access = self.node.access(&request)?;
        // A realm's member sees the nodes, and only its own realm on them.
        let only = (!access.principal.is_operator()).then(|| access.principal.realm().to_string());
        let store = self.node.store.clone();
        let nodes =
            tokio::task::spawn_blocking(move || tabos_kernel::nodes::list(&store, only.as_deref()))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| kernel_status(&e))?;
        let now = tabos_store::now_us();
        Ok(Response::new(proto::ListNodesResponse {
            nodes: nodes.into_iter().map(|n| node_to_proto(n, now)).collect(),
        }))
    }

    async fn remove_node(
        &self,
        request: Request<proto::RemoveNodeRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        access.require(Role::Operator)?;
        let id = request.into_inner().node_id;
        tabos_kernel::nodes::remove(&self.node.store, &id)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn drain_node(
        &self,
        request: Request<proto::DrainNodeRequest>,
    ) -> Result<Response<proto::DrainNodeResponse>, Status> {
        let access = self.node.access(&request)?;
        access.require(Role::Operator)?;
        let r = request.into_inner();
        let done = tabos_kernel::procs::drain_node(&self.node.store, &r.node_id, r.drain)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::DrainNodeResponse {
            changed: done.changed,
            moved: done
                .moved
                .into_iter()
                .map(|(realm, pid)| proto::MovedProc { realm, pid })
                .collect(),
        }))
    }

    async fn set_elastic(
        &self,
        request: Request<proto::SetElasticRequest>,
    ) -> Result<Response<proto::RealmAllocation>, Status> {
        let access = self.node.access(&request)?;
        access.require(Role::Operator)?;
        let r = request.into_inner();
        tabos_kernel::validate_realm(&r.realm).map_err(|e| kernel_status(&e))?;
        let policy = policy_from_proto(r.policy)?;
        alloc::set_policy(&self.node.store, &r.realm, policy, false)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(self.allocation_of(&r.realm, 0).await?))
    }

    async fn allocation(
        &self,
        request: Request<proto::AllocationRequest>,
    ) -> Result<Response<proto::RealmAllocation>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let realm = access.realm(&r.realm, Role::Reader)?;
        tabos_kernel::validate_realm(&realm).map_err(|e| kernel_status(&e))?;
        Ok(Response::new(self.allocation_of(&realm, r.limit).await?))
    }

    async fn alloc_settings(
        &self,
        request: Request<proto::AllocSettingsRequest>,
    ) -> Result<Response<proto::AllocSettingsResponse>, Status> {
        let access = self.node.access(&request)?;
        access.require(Role::Operator)?;
        let set = request.into_inner().set;
        // Every change is checked before any is made.
        for (name, value) in &set {
            alloc::check_setting(name, *value).map_err(|e| kernel_status(&e))?;
        }
        let store = &self.node.store;
        let mut settings = alloc::settings(store).await;
        for (name, value) in &set {
            settings = alloc::set_setting(store, name, *value).await;
            if settings.is_err() {
                break;
            }
        }
        let settings = settings.map_err(|e| kernel_status(&e))?;
        let now = tabos_store::now_us();
        let leaders = alloc::leaders(store)
            .await
            .map_err(|e| kernel_status(&e))?
            .into_iter()
            .map(|(name, holder, epoch, expires_us)| proto::ManagerLeader {
                name,
                holder,
                epoch,
                expires_in_ms: (expires_us - now).max(0) / 1_000,
            })
            .collect();
        Ok(Response::new(proto::AllocSettingsResponse {
            settings: settings
                .pairs()
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
            leaders,
        }))
    }

    async fn decisions(
        &self,
        request: Request<proto::DecisionsRequest>,
    ) -> Result<Response<proto::DecisionsResponse>, Status> {
        let access = self.node.access(&request)?;
        access.require(Role::Operator)?;
        let r = request.into_inner();
        let limit = if r.limit == 0 {
            DECISIONS_DEFAULT
        } else {
            r.limit
        };
        let realm = (!r.realm.is_empty()).then_some(r.realm.as_str());
        let decisions = alloc::history(&self.node.store, realm, limit as usize)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::DecisionsResponse {
            decisions: decisions.into_iter().map(decision_to_proto).collect(),
        }))
    }
}

/// An elastic policy from its message, checked.
pub fn policy_from_proto(p: Option<proto::ElasticPolicy>) -> Result<alloc::Policy, Status> {
    let p = p.ok_or_else(|| Status::invalid_argument("an elastic policy is required"))?;
    let class = crate::wire::request("an elastic realm's class", p.class)?
        .unwrap_or(tabos_kernel::procs::Class::Be);
    let policy = alloc::Policy {
        class,
        min_cores: p.min_cores,
        max_cores: p.max_cores,
    };
    policy.validate().map_err(|e| kernel_status(&e))?;
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

impl StatusService {
    /// `realm`'s allocation with its latest `limit` decisions.
    async fn allocation_of(
        &self,
        realm: &str,
        limit: u32,
    ) -> Result<proto::RealmAllocation, Status> {
        let store = &self.node.store;
        let k = |e: tabos_kernel::Error| kernel_status(&e);
        let one = alloc::get(store, realm).await.map_err(k)?;
        let demand = alloc::demand(store, realm).await.map_err(k)?;
        let mut out = proto::RealmAllocation {
            realm: realm.to_string(),
            live_cores: demand.live_cores,
            unplaced_cores: demand.unplaced_cores,
            ..Default::default()
        };
        let Some(a) = one else {
            return Ok(out);
        };
        let limit = if limit == 0 { DECISIONS_DEFAULT } else { limit };
        out.elastic = true;
        out.policy = Some(policy_to_proto(&a.policy));
        out.want_cores = a.want_cores;
        out.want_reason = a.want_reason;
        out.want_us = a.want_us;
        out.grants = alloc::grants_of_realm(store, realm)
            .await
            .map_err(k)?
            .into_iter()
            .map(|g| proto::CoreGrantInfo {
                node_id: g.node_id,
                cores: g.cores,
            })
            .collect();
        out.decisions = alloc::history(store, Some(realm), limit as usize)
            .await
            .map_err(k)?
            .into_iter()
            .map(decision_to_proto)
            .collect();
        Ok(out)
    }
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
