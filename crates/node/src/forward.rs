//! Any node answers for the cluster (issue 19, item 1): a request for data
//! only one node holds — a proc's logs, kept in its node's log directory —
//! is forwarded to that node over the same authenticated API, acting with
//! the caller's own credential (every node checks it against the one
//! credential table), so forwarding grants nothing the caller lacks.
//!
//! A file whose data is in another node's block store (its extents name
//! the store; the `node` table says which node holds it) is read and
//! written there likewise.
//!
//! A forwarded request cannot loop: the node it reaches finds in the
//! database that it holds the data itself and answers locally.

use std::time::Duration;

use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::auth::AUTHORIZATION;
use crate::{kernel_status, Node};

/// How long a forwarded request may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a forwarded request may take in all.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where data of node `holder` is answered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// This node.
    Here,
    /// Another node, up, serving its API at this address.
    Peer(String),
}

/// Where to answer for data held by node `holder_id` (what: what the data
/// is, for the error). UNAVAILABLE when that node is not up or serves no
/// API: the data is there, but cannot be reached now.
pub async fn holder(node: &Node, holder_id: &str, what: &str) -> Result<Holder, Status> {
    if holder_id == node.settings.node_id {
        return Ok(Holder::Here);
    }
    let info = match tabos_kernel::nodes::get(&node.store, holder_id).await {
        Ok(i) => i,
        Err(tabos_kernel::Error::NotFound(_)) => {
            return Err(Status::unavailable(format!(
                "{what} is on node {holder_id}, which has been removed from the cluster"
            )))
        }
        Err(e) => return Err(kernel_status(&e)),
    };
    use tabos_kernel::nodes::NodeState;
    match info.state {
        NodeState::Up | NodeState::Draining if !info.address.is_empty() => {
            Ok(Holder::Peer(info.address))
        }
        NodeState::Up | NodeState::Draining => Err(Status::unavailable(format!(
            "{what} is on node {holder_id}, which serves no API address"
        ))),
        state => Err(Status::unavailable(format!(
            "{what} is on node {holder_id}, which is {state}"
        ))),
    }
}

/// The caller's bearer token, to act with on the holder.
pub fn bearer(md: &MetadataMap) -> Result<String, Status> {
    md.get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .ok_or_else(|| Status::unauthenticated("the authorization header is not `Bearer <token>`"))
}

/// A client of the node at `addr`, acting with `token`.
pub async fn connect(addr: &str, token: &str) -> Result<tabos_client::Client, Status> {
    match tokio::time::timeout(CONNECT_TIMEOUT, tabos_client::Client::connect(addr, token)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(Status::unavailable(format!(
            "cannot reach the node holding the data: {e}"
        ))),
        Err(_) => Err(Status::unavailable(format!(
            "cannot reach the node holding the data at {addr}: no connection within {} s",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// Runs a forwarded call, bounded by [`REQUEST_TIMEOUT`]; the holder's
/// answer (or error) is the caller's.
pub async fn call<T>(
    addr: &str,
    f: impl std::future::Future<Output = Result<T, tabos_client::Error>>,
) -> Result<T, Status> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(tabos_client::Error::Status(s))) => Err(s),
        Ok(Err(e)) => Err(Status::unavailable(format!(
            "forwarding to {addr} failed: {e}"
        ))),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the node at {addr} did not answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

/// Where to answer for a file whose data is in block store `store_id`
/// (what: the file, for the error).
pub async fn holder_of_store(node: &Node, store_id: &str, what: &str) -> Result<Holder, Status> {
    if store_id == node.files.store_id() {
        return Ok(Holder::Here);
    }
    match tabos_kernel::nodes::holding_store(&node.store, store_id).await {
        Ok(info) => holder(node, &info.node_id, what).await,
        Err(tabos_kernel::Error::NotFound(_)) => Err(Status::unavailable(format!(
            "{what} is in block store {store_id}, which no node of the cluster holds"
        ))),
        Err(e) => Err(kernel_status(&e)),
    }
}

/// The `Fs` RPCs of the node at `addr`, acting with `token`.
pub async fn fs_at(
    addr: &str,
    token: &str,
) -> Result<tabos_client::proto::fs_client::FsClient<tabos_client::Transport>, Status> {
    Ok(connect(addr, token).await?.fs_rpc())
}

/// Runs a raw forwarded RPC, bounded by [`REQUEST_TIMEOUT`].
pub async fn rpc<T>(
    addr: &str,
    f: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the node at {addr} did not answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}
