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
    use crate::op::op;

    op!(Install(InstallProcedureRequest) -> ProcedureInfo, |node, who, r| {
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
    });

    op!(List(ListProceduresRequest) -> ListProceduresResponse, |node, who, _| {
        let list = node.procedures.list(&who).await?;
        Ok(proto::ListProceduresResponse {
            procedures: list.into_iter().map(info).collect(),
        })
    });

    op!(Remove(ProcedureRequest) -> Empty, |node, who, r| {
        node.procedures.remove(&who, &r.name).await?;
        Ok(proto::Empty {})
    });

    op!(Call(CallProcedureRequest) -> CallProcedureResponse, |node, who, r| {
        let out = node.procedures.call(&who, &r.name, r.args).await?;
        Ok(proto::CallProcedureResponse {
            result: out.result,
            log: out.log,
        })
    });
}

crate::op::served! {
    ProceduresService: proto::procedures_server::Procedures;
    install(InstallProcedureRequest) -> ProcedureInfo = Install;
    list(ListProceduresRequest) -> ListProceduresResponse = List;
    remove(ProcedureRequest) -> Empty = Remove;
    call(CallProcedureRequest) -> CallProcedureResponse = Call;
}
