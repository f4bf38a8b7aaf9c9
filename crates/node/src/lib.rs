//! `tabos-node`: the node daemon.
//!
//! A node opens the kernel database ([`tabos_kernel::open`]) and serves the
//! gRPC API of `proto/tabos.proto` on a listener it is given ([`serve`]), until
//! a shutdown future completes — the mini-redis shape, so that tests run a
//! node in-process on port 0. One file per RPC family: [`sql`], [`status`].

pub mod sql;
pub mod status;

use std::future::Future;
use std::net::SocketAddr;

use tabos_client::proto::node_server::NodeServer;
use tabos_client::proto::sql_server::SqlServer;
use tabos_client::MESSAGE_BYTES_MAX;
use tabos_store::{Config, Store};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// Errors of the node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kernel(#[from] tabos_kernel::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A node: its database and when it started.
#[derive(Debug, Clone)]
pub struct Node {
    pub store: Store,
    pub started_us: i64,
}

impl Node {
    /// Opens the kernel database for a node.
    pub fn open(config: &Config) -> Result<Node, Error> {
        Ok(Node {
            store: tabos_kernel::open(config)?,
            started_us: tabos_store::now_us(),
        })
    }
}

/// Binds `addr` (e.g. `127.0.0.1:7070`, or port 0 for any free port).
pub async fn bind(addr: &str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })
}

/// Serves the node's API on `listener` until `shutdown` completes.
pub async fn serve(
    node: Node,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let sql = SqlServer::new(sql::SqlService::new(node.clone()))
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let status = NodeServer::new(status::StatusService::new(node))
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(sql)
        .add_service(status)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}

/// The address a bound listener actually listens on.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}

/// Maps a store error onto a gRPC status with a message a person can act on.
pub fn status_of(e: &tabos_store::Error) -> tonic::Status {
    use tabos_store::Error as E;
    use tonic::Status;
    let msg = e.to_string();
    match e {
        E::Sql(_) | E::Invalid(_) | E::Type(_) => Status::invalid_argument(msg),
        E::ReadOnly(_) => Status::permission_denied(msg),
        E::UnknownPartition { .. } => Status::not_found(msg),
        E::Limit { .. } | E::Overloaded(_) => Status::resource_exhausted(msg),
        E::Aborted(_) | E::RetriesExhausted { .. } => Status::aborted(msg),
        E::Closed => Status::unavailable(msg),
        _ => Status::internal(msg),
    }
}
