//! One kernel operation, declared once and served at every door.
//!
//! An [`Op`] names its request and response (which says, by [`Acting`],
//! which realm and user it asks to act as); its body runs the kernel operation, which
//! takes the [`Caller`] and checks it itself (role, scope, ownership). The
//! doors only adapt: [`Node::on`] serves an op over gRPC (the local socket
//! and the batch call go through the same services); a wasm proc's host
//! calls reach the same kernel operations with the proc's own caller. A
//! handler is one line, with no access code and no error
//! mapping: the one place a principal becomes a caller is here
//! ([`tabos_kernel::auth::Principal::act`]), the one place a kernel error
//! becomes a status is [`crate::kernel_status`].
//!
//! Architecture Invariant: a service converted to ops has no `access`,
//! `require` or `map_err` in its handlers (`tests/ops.rs` holds it).

use std::future::Future;

use tabos_kernel::auth::Caller;
use tabos_kernel::Result;
use tabos_store::Tx;
use tonic::{Request, Response, Status};

use crate::{auth, kernel_status, Node};

/// What a request asks to act as: its realm and its user (each empty: the
/// credential's own; only an operator's may name others).
pub trait Acting {
    fn acting(&self) -> (&str, &str);
}

/// `acting!(realm: A, B)`: the requests that name a realm; `acting!(realm
/// and user: C)`: those that name a user too (the filesystem's);
/// `acting!(none: D)`: those that name neither (the credential's own, an
/// operator's in the node's realm).
macro_rules! acting {
    (realm: $($t:ident),+ $(,)?) => {$(
        impl Acting for tabos_client::proto::$t {
            fn acting(&self) -> (&str, &str) {
                (&self.realm, "")
            }
        }
    )+};
    (none: $($t:ident),+ $(,)?) => {$(
        impl Acting for tabos_client::proto::$t {
            fn acting(&self) -> (&str, &str) {
                ("", "")
            }
        }
    )+};
    (realm and user: $($t:ident),+ $(,)?) => {$(
        impl Acting for tabos_client::proto::$t {
            fn acting(&self) -> (&str, &str) {
                (&self.realm, &self.user)
            }
        }
    )+};
}

acting!(realm:
    CreateNameRequest, SetNameRequest, NameRequest, RemoveNameRequest, RenameNameRequest,
    FenceRequest, OpenSessionRequest, SessionRequest, WatchRequest,
    CreateMailboxRequest, RemoveMailboxRequest, SendRequest, RecvRequest, MailboxRequest,
    InstallProcedureRequest, ListProceduresRequest, ProcedureRequest, CallProcedureRequest,
    CreateTokenRequest, ListTokensRequest, SetElasticRequest, AllocationRequest,
    DecisionsRequest, SqlRequest,
    FsDuRequest, PidRequest, ExitedRequest, PruneRequest, LogsRequest, SpawnRequest,
    SpawnBurstRequest,
    RegisterExecutorRequest, ExecutorRequest, StartWorkflowRequest, ClaimRequest,
    StepBeginRequest, StepEndRequest, StepProcedureRequest, SleepRequest, WorkflowSendRequest,
    WorkflowRecvRequest, SetEventRequest, GetEventRequest, FinishWorkflowRequest,
    WaitWorkflowRequest, ListWorkflowsRequest, WorkflowRequest, ResumeWorkflowRequest,
    ForkWorkflowRequest, RetargetRequest, SetQueueRequest, ScheduleInfo, ListSchedulesRequest,
    RemoveScheduleRequest, ListQueuesRequest,
    SubmitGraphRequest, AddTasksRequest, GraphRequest, WaitGraphRequest, ListGraphsRequest,
);
acting!(none:
    RevokeTokenRequest, Empty, StatusRequest, ListNodesRequest, RemoveNodeRequest,
    DrainNodeRequest, AllocSettingsRequest, CreateRealmRequest, SetRealmRequest, BackupRequest,
    RemoveRealmRequest, ListRealmsRequest,
);
acting!(realm and user:
    FsCreateRequest, FsPathRequest, FsRenameRequest, FsChmodRequest, FsChownRequest,
    FsTimesRequest, FsReadRequest, FsWriteRequest, FsTruncateRequest,
    FsLinkRequest, FsSymlinkRequest, FsOpenRequest, FsHandleRequest, FsWatchRequest,
);

/// `served! { Service: Trait; method(Request) -> Response = Op; … }`:
/// implements a gRPC service's trait by serving each method with its
/// operation ([`Node::on`]) — a handler that is one line, made so. The
/// table is what `tests/ops.rs` reads. A trailing `@streams { … }` holds
/// the service's streaming methods, written out.
macro_rules! served {
    (
        $svc:ty: $tr:path;
        $($method:ident($req:ident) -> $resp:ident = $op:ident;)+
        $(@streams { $($streams:tt)* })?
    ) => {
        #[tonic::async_trait]
        impl $tr for $svc {
            $(
                async fn $method(
                    &self,
                    request: tonic::Request<tabos_client::proto::$req>,
                ) -> std::result::Result<tonic::Response<tabos_client::proto::$resp>, tonic::Status>
                {
                    self.node.on::<ops::$op>(request).await
                }
            )+
            $($($streams)*)?
        }
    };
}
pub(crate) use served;

/// `op!(Name(Request) -> Response, |node, who, r| body)`: declares
/// operation `Name` ([`Op`]) on proto messages `Request` and `Response`,
/// its body run for caller `who`.
macro_rules! op {
    ($name:ident($req:ident) -> $resp:ident, |$node:ident, $who:ident, $r:tt| $body:block) => {
        pub struct $name;
        impl $crate::op::Op for $name {
            type Request = tabos_client::proto::$req;
            type Response = tabos_client::proto::$resp;
            async fn run(
                $node: &$crate::Node,
                $who: tabos_kernel::auth::Caller,
                $r: Self::Request,
            ) -> tabos_kernel::Result<Self::Response> {
                $body
            }
        }
    };
}
pub(crate) use op;

/// A kernel operation as the node serves it.
pub trait Op: 'static {
    /// What a door is asked (the proto message), and whom it asks to act
    /// as.
    type Request: Acting + Send + 'static;
    /// What it answers.
    type Response: Send + 'static;

    /// The operation for `who`: decodes the request, runs the kernel's
    /// operation (which checks `who`) and encodes its answer.
    fn run(
        node: &Node,
        who: Caller,
        r: Self::Request,
    ) -> impl Future<Output = Result<Self::Response>> + Send;
}

impl Node {
    /// Serves `O` for a gRPC request: its credential (checked by the
    /// interceptor every service is wrapped in) acting as the request asks.
    pub async fn on<O: Op>(
        &self,
        request: Request<O::Request>,
    ) -> std::result::Result<Response<O::Response>, Status> {
        let principal = auth::caller(&request)?;
        let r = request.into_inner();
        let out = async {
            let (realm, user) = r.acting();
            let who = principal.act(realm, user, &self.settings.realm)?;
            O::run(self, who, r).await
        };
        out.await.map(Response::new).map_err(|e| kernel_status(&e))
    }

    /// The caller of a request a handler serves itself (a stream, a
    /// request forwarded whole): its credential acting as the request asks.
    pub fn caller_of<T: Acting>(
        &self,
        request: &Request<T>,
    ) -> std::result::Result<Caller, Status> {
        let principal = auth::caller(request)?;
        let (realm, user) = request.get_ref().acting();
        principal
            .act(realm, user, &self.settings.realm)
            .map_err(|e| kernel_status(&e))
    }

    /// Runs `f` for `who` in one write transaction on the caller's realm's
    /// partition (retried whole on a conflict): an operation's body.
    pub async fn write_as<T, F>(&self, who: Caller, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn Tx, &Caller, i64) -> Result<T> + Send + 'static,
    {
        let realm = who.realm().to_string();
        tabos_kernel::call(&self.store, &realm, move |tx| {
            f(tx, &who, tabos_store::now_us())
        })
        .await
    }

    /// [`Node::write_as`] for operations that only read: on a read
    /// connection, never queued behind the partition's writes.
    pub async fn read_as<T, F>(&self, who: Caller, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut dyn Tx, &Caller, i64) -> Result<T> + Send + 'static,
    {
        let realm = who.realm().to_string();
        tabos_kernel::read(&self.store, &realm, move |tx| {
            f(tx, &who, tabos_store::now_us())
        })
        .await
    }
}
