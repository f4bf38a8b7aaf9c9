//! The `Procedures` service: install, list, remove and call stored
//! procedures ([`tabos_kernel::procedures`]).
//!
//! A call runs on the realm's partition executor, inside one transaction;
//! the gRPC task only waits for it. A procedure that fails is ABORTED with
//! its kind and message (and what it logged), and changed nothing.

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::procedures::Info;
use tabos_sandbox::procedure::{Limits, MEMORY_BYTES_DEFAULT, TIMEOUT_DEFAULT};
use tonic::{Request, Response, Status};

use crate::Node;

#[derive(Clone)]
pub struct ProceduresService {
    node: Node,
}

impl ProceduresService {
    pub fn new(node: Node) -> ProceduresService {
        ProceduresService { node }
    }
}

fn info(i: Info) -> proto::ProcedureInfo {
    proto::ProcedureInfo {
        realm: i.realm,
        name: i.name,
        language: i.language.to_string(),
        code_bytes: i.code_bytes as u64,
        code_hash: i.code_hash,
        memory_bytes: i.memory_bytes as u64,
        timeout_ms: u32::try_from(i.timeout.as_millis()).unwrap_or(u32::MAX),
        installed_us: i.installed_us,
        read_only: i.read_only,
    }
}

/// The Procedures service's operations, each a call of
/// [`tabos_kernel::procedures::Procedures`] (which checks the caller).
pub mod ops {
    use super::*;
    use crate::op::Op;
    use tabos_kernel::auth::Caller;
    use tabos_kernel::Result;

    pub struct Install;
    impl Op for Install {
        type Request = proto::InstallProcedureRequest;
        type Response = proto::ProcedureInfo;
        async fn run(node: &Node, who: Caller, r: Self::Request) -> Result<Self::Response> {
            let language = r.language.parse().map_err(tabos_kernel::Error::Invalid)?;
            let limits = Limits {
                memory_bytes: match r.memory_bytes {
                    0 => MEMORY_BYTES_DEFAULT,
                    n => usize::try_from(n).unwrap_or(usize::MAX),
                },
                timeout: match r.timeout_ms {
                    0 => TIMEOUT_DEFAULT,
                    n => Duration::from_millis(u64::from(n)),
                },
            };
            let install = tabos_kernel::procedures::Install {
                name: r.name,
                language,
                code: r.code,
                limits,
                read_only: r.read_only,
            };
            Ok(info(node.procedures.install(&who, install).await?))
        }
    }

    pub struct List;
    impl Op for List {
        type Request = proto::ListProceduresRequest;
        type Response = proto::ListProceduresResponse;
        async fn run(node: &Node, who: Caller, _: Self::Request) -> Result<Self::Response> {
            let list = node.procedures.list(&who).await?;
            Ok(proto::ListProceduresResponse {
                procedures: list.into_iter().map(info).collect(),
            })
        }
    }

    pub struct Remove;
    impl Op for Remove {
        type Request = proto::ProcedureRequest;
        type Response = proto::Empty;
        async fn run(node: &Node, who: Caller, r: Self::Request) -> Result<Self::Response> {
            node.procedures.remove(&who, &r.name).await?;
            Ok(proto::Empty {})
        }
    }

    pub struct Call;
    impl Op for Call {
        type Request = proto::CallProcedureRequest;
        type Response = proto::CallProcedureResponse;
        async fn run(node: &Node, who: Caller, r: Self::Request) -> Result<Self::Response> {
            let out = node.procedures.call(&who, &r.name, r.args).await?;
            Ok(proto::CallProcedureResponse {
                result: out.result,
                log: out.log,
            })
        }
    }
}

#[tonic::async_trait]
impl proto::procedures_server::Procedures for ProceduresService {
    async fn install(
        &self,
        request: Request<proto::InstallProcedureRequest>,
    ) -> Result<Response<proto::ProcedureInfo>, Status> {
        self.node.on::<ops::Install>(request).await
    }

    async fn list(
        &self,
        request: Request<proto::ListProceduresRequest>,
    ) -> Result<Response<proto::ListProceduresResponse>, Status> {
        self.node.on::<ops::List>(request).await
    }

    async fn remove(
        &self,
        request: Request<proto::ProcedureRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        self.node.on::<ops::Remove>(request).await
    }

    async fn call(
        &self,
        request: Request<proto::CallProcedureRequest>,
    ) -> Result<Response<proto::CallProcedureResponse>, Status> {
        self.node.on::<ops::Call>(request).await
    }
}
