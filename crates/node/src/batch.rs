//! The `Batch` service (issue 18, item 2): several calls in one round trip.
//!
//! Each call is handed to the service that owns it exactly as if it had
//! come alone: a request with the batch's metadata and its caller's
//! credential ([`Principal`], put there by the interceptor), so every
//! check (in the kernel operation it reaches: role, scope, ownership),
//! limit and error is that service's own. The Batch service is open to
//! scoped credentials, as Ipc is; the services it fans into are not, and
//! their operations refuse a scoped caller themselves. Calls run one
//! after another in the order given — or, in a batch marked independent,
//! all at once, so that their transactions share the store's group
//! commits (a kvd's appends to its shards' logs: one commit, not one per
//! shard); a failure becomes that call's [`proto::BatchError`] and the
//! other calls run. A batch holds at most
//! [`BATCH_CALLS_MAX`] calls, and a recv in it may not wait: a batch takes
//! as long as its calls' work, never a client-chosen wait.

use std::sync::Arc;

use tabos_client::proto;
use tabos_client::proto::batch_call::Call;
use tabos_client::proto::batch_result::Result as Out;
use tabos_client::proto::fs_server::Fs;
use tabos_client::proto::ipc_server::Ipc;
use tabos_client::proto::names_server::Names;
use tabos_client::proto::procedures_server::Procedures;
use tabos_client::proto::procs_server::Procs;
use tonic::{Request, Response, Status};

use crate::fs::FsService;
use crate::ipc::IpcService;
use crate::names::NamesService;
use crate::procedures::ProceduresService;
use crate::procs::ProcsService;
use tabos_kernel::auth::Principal;

/// Most calls in one batch.
pub const BATCH_CALLS_MAX: usize = tabos_client::batch::BATCH_CALLS_MAX;

/// The services a batch's calls go to (the same instances the node
/// serves, sharing their state).
#[derive(Clone)]
pub struct BatchService {
    pub names: NamesService,
    pub ipc: IpcService,
    pub fs: FsService,
    pub procs: ProcsService,
    pub procedures: ProceduresService,
}

/// One call's request: the batch's metadata and its caller.
fn part<T>(metadata: &tonic::metadata::MetadataMap, caller: &Arc<Principal>, msg: T) -> Request<T> {
    let mut extensions = tonic::Extensions::new();
    extensions.insert(caller.clone());
    Request::from_parts(metadata.clone(), extensions, msg)
}

/// A call's failure, as its result.
fn failed(s: Status) -> Out {
    Out::Error(proto::BatchError {
        code: s.code() as i32,
        message: s.message().to_string(),
        details: s.details().to_vec(),
    })
}

fn out<T>(r: Result<Response<T>, Status>, wrap: fn(T) -> Out) -> Out {
    r.map_or_else(failed, |resp| wrap(resp.into_inner()))
}

impl BatchService {
    async fn one(
        &self,
        md: &tonic::metadata::MetadataMap,
        who: &Arc<Principal>,
        call: Option<Call>,
    ) -> Out {
        let Some(call) = call else {
            return failed(Status::invalid_argument("a batch call names no call"));
        };
        // No access check here: each call reaches its kernel operation,
        // which checks the caller — a scoped credential's refusal included
        // (tests/auth.rs sends every kind of call with one).
        match call {
            Call::NamesSet(m) => out(
                Names::set(&self.names, part(md, who, m)).await,
                Out::NamesSet,
            ),
            Call::NamesGet(m) => out(
                Names::get(&self.names, part(md, who, m)).await,
                Out::NamesGet,
            ),
            Call::NamesRemove(m) => out(
                Names::remove(&self.names, part(md, who, m)).await,
                Out::NamesRemove,
            ),
            Call::Send(m) => out(Ipc::send(&self.ipc, part(md, who, m)).await, Out::Send),
            Call::Recv(m) if m.timeout_ms != 0 => failed(Status::invalid_argument(
                "a recv in a batch does not wait: its timeout_ms must be 0",
            )),
            Call::Recv(m) => out(Ipc::recv(&self.ipc, part(md, who, m)).await, Out::Recv),
            Call::ProcedureCall(m) => out(
                Procedures::call(&self.procedures, part(md, who, m)).await,
                Out::ProcedureCall,
            ),
            Call::ProcStatus(m) => out(
                Procs::status(&self.procs, part(md, who, m)).await,
                Out::ProcStatus,
            ),
            Call::FsStat(m) => out(Fs::stat(&self.fs, part(md, who, m)).await, Out::FsStat),
            Call::FsRead(m) => out(Fs::read(&self.fs, part(md, who, m)).await, Out::FsRead),
            Call::FsWrite(m) => out(Fs::write(&self.fs, part(md, who, m)).await, Out::FsWrite),
            Call::Spawn(m) => out(
                Procs::spawn(&self.procs, part(md, who, m)).await,
                Out::Spawn,
            ),
        }
    }
}

#[tonic::async_trait]
impl proto::batch_server::Batch for BatchService {
    async fn run(
        &self,
        request: Request<proto::BatchRequest>,
    ) -> Result<Response<proto::BatchResponse>, Status> {
        let caller = crate::auth::caller(&request)?;
        let (metadata, _, req) = request.into_parts();
        if req.calls.len() > BATCH_CALLS_MAX {
            return Err(Status::invalid_argument(format!(
                "a batch of {} calls exceeds {BATCH_CALLS_MAX}",
                req.calls.len()
            )));
        }
        let n = req.calls.len();
        let results: Vec<Out> = if req.independent {
            // At most BATCH_CALLS_MAX at once, each bounded as if alone,
            // their procedures queued together for the group commit.
            let procedures = req
                .calls
                .iter()
                .filter(|c| matches!(c.call, Some(Call::ProcedureCall(_))))
                .count();
            let calls = req
                .calls
                .into_iter()
                .map(|c| self.one(&metadata, &caller, c.call));
            let all = tabos_store::grouped(futures::future::join_all(calls));
            if procedures > 1 && tabos_kernel::may_block_in_place() {
                // Each procedure call runs its tenant code on the thread
                // that polls it, in a `block_in_place` of its own: one per
                // call handed this worker's other tasks to another thread
                // and back (a wake each way). Here the batch takes this
                // thread once, and its calls' own `block_in_place`s, off a
                // worker, cost nothing. Its other calls still wait
                // asynchronously; every call is bounded as if alone.
                let rt = tokio::runtime::Handle::current();
                tokio::task::block_in_place(|| rt.block_on(all))
            } else {
                all.await
            }
        } else {
            let mut results = Vec::with_capacity(n);
            for c in req.calls {
                results.push(self.one(&metadata, &caller, c.call).await);
            }
            results
        };
        assert_eq!(results.len(), n, "one result per call");
        let results = results
            .into_iter()
            .map(|r| proto::BatchResult { result: Some(r) })
            .collect();
        Ok(Response::new(proto::BatchResponse { results }))
    }
}
