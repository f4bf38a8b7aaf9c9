//! The `Node` service: what this node runs on and what it has done.

use tabos_client::proto;
use tonic::{Request, Response, Status};

use crate::Node;

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
}
