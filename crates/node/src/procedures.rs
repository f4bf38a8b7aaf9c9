//! The `Procedures` service: install, list, remove and call stored
//! procedures ([`tabos_kernel::procedures`]).
//!
//! A call runs on the realm's partition executor, inside one transaction;
//! the gRPC task only waits for it. A procedure that fails is ABORTED with
//! its kind and message (and what it logged), and changed nothing.

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::auth::Role;
use tabos_kernel::procedures::{Info, Install, Procedures};
use tabos_sandbox::procedure::{Limits, MEMORY_BYTES_DEFAULT, TIMEOUT_DEFAULT};
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

#[derive(Clone)]
pub struct ProceduresService {
    procedures: Procedures,
    node: Node,
}

impl ProceduresService {
    pub fn new(node: Node) -> ProceduresService {
        ProceduresService {
            procedures: Procedures::new(node.store.clone(), node.sandbox.clone()),
            node,
        }
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

fn status(e: tabos_kernel::Error) -> Status {
    kernel_status(&e)
}

#[tonic::async_trait]
impl proto::procedures_server::Procedures for ProceduresService {
    async fn install(
        &self,
        request: Request<proto::InstallProcedureRequest>,
    ) -> Result<Response<proto::ProcedureInfo>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Admin)?;
        let language = r.language.parse().map_err(Status::invalid_argument)?;
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
        let installed = self
            .procedures
            .install(Install {
                realm: r.realm,
                name: r.name,
                language,
                code: r.code,
                limits,
                read_only: r.read_only,
            })
            .await
            .map_err(status)?;
        Ok(Response::new(info(installed)))
    }

    async fn list(
        &self,
        request: Request<proto::ListProceduresRequest>,
    ) -> Result<Response<proto::ListProceduresResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        let list = self.procedures.list(&r.realm).await.map_err(status)?;
        Ok(Response::new(proto::ListProceduresResponse {
            procedures: list.into_iter().map(info).collect(),
        }))
    }

    async fn remove(
        &self,
        request: Request<proto::ProcedureRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Admin)?;
        self.procedures
            .remove(&r.realm, &r.name)
            .await
            .map_err(status)?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn call(
        &self,
        request: Request<proto::CallProcedureRequest>,
    ) -> Result<Response<proto::CallProcedureResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        // The procedure's file calls act for the caller's user.
        let who = tabos_kernel::auth::Caller {
            user: access.user("")?,
        };
        let out = self
            .procedures
            .call_as(&r.realm, &who, &r.name, r.args)
            .await
            .map_err(status)?;
        Ok(Response::new(proto::CallProcedureResponse {
            result: out.result,
            log: out.log,
        }))
    }
}
