//! The `Ipc` service: mailboxes and messages over gRPC ([`tabos_kernel::ipc`]).
//!
//! Every request is checked before anything is written. Receives wait on the
//! change feed; `RecvStream` takes a batch only when the client has read the
//! previous one, so messages are not taken faster than they are consumed.

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::auth::Role;
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

#[derive(Clone)]
pub struct IpcService {
    node: Node,
    /// Raised when the node begins to shut down: receive streams end then.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl IpcService {
    pub fn new(node: Node, stopping: tokio::sync::watch::Receiver<bool>) -> IpcService {
        IpcService { node, stopping }
    }
}

fn address(s: &str) -> Result<Address, Status> {
    Address::parse(s).map_err(|e| kernel_status(&e))
}

fn take_of(max: u32) -> Take {
    Take::messages(max as usize)
}

pub fn message_to_proto(m: ipc::Message) -> proto::Message {
    proto::Message {
        seq: m.seq,
        sender: m.sender,
        message_id: m.message_id.unwrap_or_default(),
        sent_us: m.sent_us,
        payload: m.payload,
    }
}

fn response(r: ipc::Received) -> proto::RecvResponse {
    proto::RecvResponse {
        messages: r.messages.into_iter().map(message_to_proto).collect(),
    }
}

/// Converts a send request, checking it whole before any database work.
pub fn outgoing_from_proto(msgs: Vec<proto::Outgoing>) -> Result<Vec<Outgoing>, Status> {
    let out = msgs
        .into_iter()
        .map(|m| {
            Ok(Outgoing {
                to: address(&m.to)?,
                payload: m.payload,
                message_id: (!m.message_id.is_empty()).then_some(m.message_id),
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    ipc::validate_outgoing(&out).map_err(|e| kernel_status(&e))?;
    Ok(out)
}

#[tonic::async_trait]
impl proto::ipc_server::Ipc for IpcService {
    async fn create_mailbox(
        &self,
        request: Request<proto::CreateMailboxRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        access.unscoped("create mailboxes")?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let defaults = self.node.settings.mailbox;
        let opts = MailboxOptions {
            bytes_max: if r.bytes_max == 0 {
                defaults.bytes_max
            } else {
                r.bytes_max
            },
            log_delivered: r.log_delivered.unwrap_or(defaults.log_delivered),
        };
        ipc::create_mailbox(&self.node.store, &r.realm, &r.name, opts)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn remove_mailbox(
        &self,
        request: Request<proto::RemoveMailboxRequest>,
    ) -> Result<Response<proto::RemoveMailboxResponse>, Status> {
        let access = self.node.access(&request)?;
        access.unscoped("remove mailboxes")?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let dropped = ipc::remove_mailbox(&self.node.store, &r.realm, &r.name)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::RemoveMailboxResponse { dropped }))
    }

    async fn send(
        &self,
        request: Request<proto::SendRequest>,
    ) -> Result<Response<proto::SendResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let from = match r.from.as_str() {
            "" => None,
            s => Some(address(s)?),
        };
        // A proc's credential sends as that proc, never as another.
        if let Some(Address::Proc(pid)) = &from {
            access.acting_pid(pid.as_str())?;
        }
        let msgs = outgoing_from_proto(r.messages)?;
        for m in &msgs {
            access.may_send(&m.to)?;
        }
        let fence = crate::names::fence_from_proto(r.fence)?;
        let sent = ipc::send_fenced(
            &self.node.store,
            &r.realm,
            from,
            msgs,
            self.node.settings.mailbox,
            fence,
        )
        .await
        .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::SendResponse {
            sent: sent
                .into_iter()
                .map(|s| proto::SentMessage {
                    seq: s.seq,
                    duplicate: s.duplicate,
                })
                .collect(),
        }))
    }

    async fn recv(
        &self,
        request: Request<proto::RecvRequest>,
    ) -> Result<Response<proto::RecvResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let from = address(&r.mailbox)?;
        access.may_recv(&from)?;
        let got = ipc::recv(
            &self.node.store,
            &r.realm,
            &from,
            take_of(r.max),
            Duration::from_millis(u64::from(r.timeout_ms)),
            std::future::pending(),
        )
        .await
        .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(response(got)))
    }

    type RecvStreamStream = ReceiverStream<Result<proto::RecvResponse, Status>>;

    async fn recv_stream(
        &self,
        request: Request<proto::RecvRequest>,
    ) -> Result<Response<Self::RecvStreamStream>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Member)?;
        let to = address(&r.mailbox)?;
        access.may_recv(&to)?;
        let take = take_of(r.max);
        // Fail at once on an unknown mailbox rather than in the stream.
        ipc::peek(&self.node.store, &r.realm, &to, Take::messages(1))
            .await
            .map_err(|e| kernel_status(&e))?;
        // Room for one batch: the next is taken only once the client has
        // read this one (or the transport has buffered it).
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        // One receiver for the stream's life: it stays subscribed, so after
        // a batch that emptied the mailbox it waits for the next send
        // without a transaction, and no send falls between subscriptions.
        let mut receiver =
            ipc::Receiver::new(&self.node.store, &r.realm, &to).map_err(|e| kernel_status(&e))?;
        let stopping = self.stopping.clone();
        tokio::spawn(async move {
            loop {
                let Ok(permit) = tx.reserve().await else {
                    return; // the client went away
                };
                if *stopping.borrow() {
                    permit.send(Err(Status::unavailable("the node is shutting down")));
                    return;
                }
                let stop = async {
                    tokio::select! {
                        () = tx.closed() => {}
                        () = crate::stopping(stopping.clone()) => {}
                    }
                };
                let got = receiver.recv(take, ipc::RECV_WAIT_MAX, stop).await;
                match got {
                    Ok(got) if got.messages.is_empty() => {}
                    Ok(got) => permit.send(Ok(response(got))),
                    Err(e) => {
                        permit.send(Err(kernel_status(&e)));
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn peek(
        &self,
        request: Request<proto::RecvRequest>,
    ) -> Result<Response<proto::RecvResponse>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        let from = address(&r.mailbox)?;
        access.may_recv(&from)?;
        let got = ipc::peek(&self.node.store, &r.realm, &from, take_of(r.max))
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(response(got)))
    }

    async fn mailbox(
        &self,
        request: Request<proto::MailboxRequest>,
    ) -> Result<Response<proto::MailboxInfo>, Status> {
        let access = self.node.access(&request)?;
        let mut r = request.into_inner();
        r.realm = access.realm(&r.realm, Role::Reader)?;
        let at = address(&r.mailbox)?;
        if access.may_send(&at).is_err() {
            access.may_recv(&at)?;
        }
        let i = ipc::mailbox(&self.node.store, &r.realm, &at)
            .await
            .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::MailboxInfo {
            address: i.address,
            queued: i.queued,
            queued_bytes: i.queued_bytes,
            bytes_max: i.bytes_max,
            log_delivered: i.log_delivered,
            next_seq: i.next_seq,
        }))
    }
}
