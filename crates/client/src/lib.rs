//! `tabos-client`: the gRPC protocol of a tabos node (`proto/tabos.proto`)
//! and the Rust client library over it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tabos_client::Error> {
//! let mut client = tabos_client::Client::connect("127.0.0.1:7070").await?;
//! let result = client.sql("SELECT count(*) FROM kv", vec![]).await?;
//! println!("{:?}", result.rows);
//! # Ok(()) }
//! ```

/// The generated protocol types and service stubs.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("tabos.v1");
}

use proto::node_client::NodeClient;
use proto::procs_client::ProcsClient;
use proto::sql_client::SqlClient;
use tonic::transport::Channel;

/// The address a client uses when neither `--addr` nor `TABOS_ADDR` says otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7070";
/// Largest gRPC message a client or node accepts, in bytes.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;

/// Errors of the client library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot connect to tabos node at {addr}: {source} (is `tabos up` running? set --addr or TABOS_ADDR)")]
    Connect {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("invalid node address {0:?}")]
    Address(String),
    /// The node answered with an error; its message says what was wrong.
    #[error("{}: {}", code_name(.0.code()), .0.message())]
    Status(tonic::Status),
}

// Not `#[from]`: that would also make the status the error's source, and
// error reports would print its message twice.
impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::Status(s)
    }
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        InvalidArgument => "invalid argument",
        NotFound => "not found",
        AlreadyExists => "already exists",
        PermissionDenied => "refused",
        ResourceExhausted => "limit exceeded",
        FailedPrecondition => "failed precondition",
        Unavailable => "unavailable",
        DeadlineExceeded => "timed out",
        Aborted => "aborted",
        _ => "error",
    }
}

/// One SQL value on the client side.
pub type Value = proto::value::Kind;

/// A query result.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<Value>>>,
    pub truncated: bool,
}

/// A connection to one tabos node.
#[derive(Debug, Clone)]
pub struct Client {
    sql: SqlClient<Channel>,
    node: NodeClient<Channel>,
    procs: ProcsClient<Channel>,
}

/// Turns `host:port` (or a full `http://` URI) into an endpoint URI.
pub fn endpoint_uri(addr: &str) -> String {
    if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

impl Client {
    /// Connects to the node at `addr` (`host:port`).
    pub async fn connect(addr: &str) -> Result<Client, Error> {
        let endpoint = Channel::from_shared(endpoint_uri(addr))
            .map_err(|_| Error::Address(addr.to_string()))?
            .tcp_nodelay(true);
        let channel = endpoint.connect().await.map_err(|source| Error::Connect {
            addr: addr.to_string(),
            source,
        })?;
        Ok(Client::from_channel(channel))
    }

    /// A client over an existing channel.
    pub fn from_channel(channel: Channel) -> Client {
        Client {
            sql: SqlClient::new(channel.clone())
                .max_decoding_message_size(MESSAGE_BYTES_MAX)
                .max_encoding_message_size(MESSAGE_BYTES_MAX),
            node: NodeClient::new(channel.clone())
                .max_decoding_message_size(MESSAGE_BYTES_MAX)
                .max_encoding_message_size(MESSAGE_BYTES_MAX),
            procs: ProcsClient::new(channel)
                .max_decoding_message_size(MESSAGE_BYTES_MAX)
                .max_encoding_message_size(MESSAGE_BYTES_MAX),
        }
    }

    /// Runs a read-only SQL query on the node.
    pub async fn sql(&mut self, sql: &str, params: Vec<Value>) -> Result<QueryResult, Error> {
        self.sql_limited(sql, params, 0).await
    }

    /// Like [`sql`](Client::sql), returning at most `max_rows` rows (0: the
    /// node's default).
    pub async fn sql_limited(
        &mut self,
        sql: &str,
        params: Vec<Value>,
        max_rows: u32,
    ) -> Result<QueryResult, Error> {
        let request = proto::SqlRequest {
            sql: sql.to_string(),
            params: params
                .into_iter()
                .map(|k| proto::Value { kind: Some(k) })
                .collect(),
            max_rows,
        };
        let response = self.sql.query(request).await?.into_inner();
        Ok(QueryResult {
            columns: response.columns,
            rows: response
                .rows
                .into_iter()
                .map(|r| r.values.into_iter().map(|v| v.kind).collect())
                .collect(),
            truncated: response.truncated,
        })
    }

    /// Creates a realm with the given scheduler (fifo, locality, least_loaded).
    pub async fn create_realm(&mut self, realm: &str, scheduler: &str) -> Result<(), Error> {
        self.procs
            .create_realm(proto::CreateRealmRequest {
                realm: realm.into(),
                scheduler: scheduler.into(),
            })
            .await?;
        Ok(())
    }

    /// σOS Spawn: returns the pid and the worker chosen (empty if deferred).
    pub async fn spawn(
        &mut self,
        realm: &str,
        proc: proto::ProcDescriptor,
    ) -> Result<proto::Spawned, Error> {
        Ok(self
            .procs
            .spawn(proto::SpawnRequest {
                realm: realm.into(),
                proc: Some(proc),
            })
            .await?
            .into_inner())
    }

    /// σOS SpawnBurst: all of `procs` in one transaction.
    pub async fn spawn_burst(
        &mut self,
        realm: &str,
        procs: Vec<proto::ProcDescriptor>,
    ) -> Result<Vec<proto::Spawned>, Error> {
        Ok(self
            .procs
            .spawn_burst(proto::SpawnBurstRequest {
                realm: realm.into(),
                procs,
            })
            .await?
            .into_inner()
            .procs)
    }

    fn pid(realm: &str, pid: &str) -> proto::PidRequest {
        proto::PidRequest {
            realm: realm.into(),
            pid: pid.into(),
        }
    }

    /// σOS WaitStart.
    pub async fn wait_start(&mut self, realm: &str, pid: &str) -> Result<proto::ProcStatus, Error> {
        Ok(self
            .procs
            .wait_start(Self::pid(realm, pid))
            .await?
            .into_inner())
    }

    /// σOS WaitExit: the final status, with the exit status.
    pub async fn wait_exit(&mut self, realm: &str, pid: &str) -> Result<proto::ProcStatus, Error> {
        Ok(self
            .procs
            .wait_exit(Self::pid(realm, pid))
            .await?
            .into_inner())
    }

    /// σOS WaitEvict.
    pub async fn wait_evict(&mut self, realm: &str, pid: &str) -> Result<proto::ProcStatus, Error> {
        Ok(self
            .procs
            .wait_evict(Self::pid(realm, pid))
            .await?
            .into_inner())
    }

    /// σOS Started, for a proc that reports for itself.
    pub async fn started(&mut self, realm: &str, pid: &str) -> Result<(), Error> {
        self.procs.started(Self::pid(realm, pid)).await?;
        Ok(())
    }

    /// σOS Exited, for a proc that reports for itself.
    pub async fn exited(&mut self, realm: &str, pid: &str, status: i64) -> Result<(), Error> {
        self.procs
            .exited(proto::ExitedRequest {
                realm: realm.into(),
                pid: pid.into(),
                status,
            })
            .await?;
        Ok(())
    }

    /// σOS Evict.
    pub async fn evict(&mut self, realm: &str, pid: &str) -> Result<(), Error> {
        self.procs.evict(Self::pid(realm, pid)).await?;
        Ok(())
    }

    /// A proc's current status.
    pub async fn proc_status(
        &mut self,
        realm: &str,
        pid: &str,
    ) -> Result<proto::ProcStatus, Error> {
        Ok(self.procs.status(Self::pid(realm, pid)).await?.into_inner())
    }

    /// A native proc's captured stdout or stderr.
    pub async fn logs(
        &mut self,
        realm: &str,
        pid: &str,
        stream: &str,
    ) -> Result<proto::LogsResponse, Error> {
        Ok(self
            .procs
            .logs(proto::LogsRequest {
                realm: realm.into(),
                pid: pid.into(),
                stream: stream.into(),
            })
            .await?
            .into_inner())
    }

    /// The node's status.
    pub async fn status(&mut self) -> Result<proto::StatusResponse, Error> {
        Ok(self
            .node
            .status(proto::StatusRequest {})
            .await?
            .into_inner())
    }
}
