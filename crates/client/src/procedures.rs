//! Stored procedures from the client side: install, list, remove, call.

use crate::proto::{self, CallProcedureResponse, ProcedureInfo};
use crate::{Client, Error};

/// What an install asks for besides the code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcedureLimits {
    /// 0: the node's default.
    pub memory_bytes: u64,
    /// 0: the node's default.
    pub timeout_ms: u32,
    /// Declared read-only (see `InstallProcedureRequest.read_only`).
    pub read_only: bool,
}

impl Client {
    /// Installs (or replaces) procedure `name` of `realm`; `language` is
    /// `wasm` or `js`. Code that does not compile is refused with the
    /// compiler's message.
    pub async fn procedure_install(
        &mut self,
        realm: &str,
        name: &str,
        language: &str,
        code: Vec<u8>,
        limits: ProcedureLimits,
    ) -> Result<ProcedureInfo, Error> {
        Ok(self
            .procedures
            .install(proto::InstallProcedureRequest {
                realm: realm.into(),
                name: name.into(),
                language: language.into(),
                code,
                memory_bytes: limits.memory_bytes,
                timeout_ms: limits.timeout_ms,
                read_only: limits.read_only,
            })
            .await?
            .into_inner())
    }

    pub async fn procedure_list(&mut self, realm: &str) -> Result<Vec<ProcedureInfo>, Error> {
        Ok(self
            .procedures
            .list(proto::ListProceduresRequest {
                realm: realm.into(),
            })
            .await?
            .into_inner()
            .procedures)
    }

    pub async fn procedure_remove(&mut self, realm: &str, name: &str) -> Result<(), Error> {
        self.procedures
            .remove(proto::ProcedureRequest {
                realm: realm.into(),
                name: name.into(),
            })
            .await?;
        Ok(())
    }

    /// Calls procedure `name` of `realm` with `args`: one transaction.
    pub async fn procedure_call(
        &mut self,
        realm: &str,
        name: &str,
        args: Vec<u8>,
    ) -> Result<CallProcedureResponse, Error> {
        Ok(self
            .procedures
            .call(proto::CallProcedureRequest {
                realm: realm.into(),
                name: name.into(),
                args,
            })
            .await?
            .into_inner())
    }
}
