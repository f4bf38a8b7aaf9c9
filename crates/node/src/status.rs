//! The `Node` service: what this node runs on and what it has done, and
//! the cluster's nodes (`kernel::nodes`).

use tabos_client::proto;
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
        _request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        let store = &self.node.store;
        let stats = store.stats();
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
        }))
    }

    async fn list_nodes(
        &self,
        request: Request<proto::ListNodesRequest>,
    ) -> Result<Response<proto::ListNodesResponse>, Status> {
        let access = self.node.access(&request)?;
        // A realm's member sees the nodes, and only its own realm on them.
        let only = (!access.principal.is_operator()).then(|| access.principal.realm.clone());
        let store = self.node.store.clone();
        let lease_us = self.node.lease_us();
        let nodes = tokio::task::spawn_blocking(move || {
            tabos_kernel::nodes::list(&store, only.as_deref(), lease_us)
        })
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
        tabos_kernel::nodes::remove(&self.node.store, &id, self.node.lease_us())
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
        let done = tabos_kernel::procs::drain_node(
            &self.node.store,
            &r.node_id,
            r.drain,
            self.node.lease_us(),
        )
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
}

fn node_to_proto(n: NodeInfo, now_us: i64) -> proto::NodeInfo {
    proto::NodeInfo {
        node_id: n.node_id,
        address: n.address,
        cores: n.cores,
        mem_mb: n.mem_mb,
        labels: n.labels.into_iter().collect(),
        state: n.state.to_string(),
        started_us: n.started_us,
        heartbeat_us: n.heartbeat_us,
        heartbeat_age_ms: (now_us - n.heartbeat_us).max(0) / 1_000,
        left_us: n.left_us.unwrap_or(0),
        draining_us: n.draining_us.unwrap_or(0),
        busy_cores: n.busy_cores,
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
