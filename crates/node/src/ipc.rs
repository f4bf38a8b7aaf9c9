//! The `Ipc` service: mailboxes and messages over gRPC ([`tabos_kernel::ipc`]).
//!
//! Every request is checked before anything is written. Receives wait on the
//! change feed; `RecvStream` takes a batch only when the client has read the
//! previous one, so messages are not taken faster than they are consumed.

use std::time::Duration;

use tabos_client::proto;
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

#[derive(Clone)]
pub struct IpcService {
    node: Node,
}

impl IpcService {
    /// Its streams end when the node's [`crate::Stopping`] is raised.
    pub fn new(node: Node) -> IpcService {
        IpcService { node }
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
    outgoing_of(msgs).map_err(|e| kernel_status(&e))
}

/// [`outgoing_from_proto`] for an operation's body.
pub fn outgoing_of(msgs: Vec<proto::Outgoing>) -> tabos_kernel::Result<Vec<Outgoing>> {
    let out = msgs
        .into_iter()
        .map(|m| {
            Ok(Outgoing {
                to: address_of(&m.to)?,
                payload: m.payload,
                message_id: (!m.message_id.is_empty()).then_some(m.message_id),
            })
        })
        .collect::<tabos_kernel::Result<Vec<_>>>()?;
    ipc::validate_outgoing(&out)?;
    Ok(out)
}

/// An operation's address field.
fn address_of(s: &str) -> tabos_kernel::Result<Address> {
    Address::parse(s)
}

/// The Ipc service's operations, each a call of [`tabos_kernel::ipc`]
/// (which checks the caller: role, scope, the proc it sends as).
pub mod ops {
    use super::*;
    use crate::op::op;

    op!(CreateMailbox(CreateMailboxRequest) -> Empty, |node, who, r| {
        let defaults = node.settings.mailbox;
        let opts = MailboxOptions {
            bytes_max: if r.bytes_max == 0 {
                defaults.bytes_max
            } else {
                r.bytes_max
            },
            log_delivered: r.log_delivered.unwrap_or(defaults.log_delivered),
        };
        ipc::create_mailbox(&node.store, &who, &r.name, opts).await?;
        Ok(proto::Empty {})
    });

    op!(RemoveMailbox(RemoveMailboxRequest) -> RemoveMailboxResponse, |node, who, r| {
        let dropped = ipc::remove_mailbox(&node.store, &who, &r.name).await?;
        Ok(proto::RemoveMailboxResponse { dropped })
    });

    op!(Send(SendRequest) -> SendResponse, |node, who, r| {
        let from = match r.from.as_str() {
            "" => None,
            s => Some(address_of(s)?),
        };
        let msgs = outgoing_of(r.messages)?;
        let fence = crate::names::fence_of(r.fence)?;
        let opts = node.settings.mailbox;
        let sent = ipc::send_fenced(&node.store, &who, from, msgs, opts, fence).await?;
        Ok(proto::SendResponse {
            sent: sent
                .into_iter()
                .map(|s| proto::SentMessage {
                    seq: s.seq,
                    duplicate: s.duplicate,
                })
                .collect(),
        })
    });

    op!(Recv(RecvRequest) -> RecvResponse, |node, who, r| {
        let from = address_of(&r.mailbox)?;
        let wait = Duration::from_millis(u64::from(r.timeout_ms));
        let take = take_of(r.max);
        // A wait ends (empty) when the node stops, so its drain does not
        // wait for it; what was taken is always returned.
        let got = ipc::recv(&node.store, &who, &from, take, wait, node.stopping.raised());
        Ok(response(got.await?))
    });

    op!(Peek(RecvRequest) -> RecvResponse, |node, who, r| {
        let from = address_of(&r.mailbox)?;
        let got = ipc::peek(&node.store, &who, &from, take_of(r.max)).await?;
        Ok(response(got))
    });

    op!(Mailbox(MailboxRequest) -> MailboxInfo, |node, who, r| {
        let at = address_of(&r.mailbox)?;
        let i = ipc::mailbox(&node.store, &who, &at).await?;
        Ok(proto::MailboxInfo {
            address: i.address,
            queued: i.queued,
            queued_bytes: i.queued_bytes,
            bytes_max: i.bytes_max,
            log_delivered: i.log_delivered,
            next_seq: i.next_seq,
        })
    });
}

crate::op::served! {
    IpcService: proto::ipc_server::Ipc;
    create_mailbox(CreateMailboxRequest) -> Empty = CreateMailbox;
    remove_mailbox(RemoveMailboxRequest) -> RemoveMailboxResponse = RemoveMailbox;
    send(SendRequest) -> SendResponse = Send;
    recv(RecvRequest) -> RecvResponse = Recv;
    peek(RecvRequest) -> RecvResponse = Peek;
    mailbox(MailboxRequest) -> MailboxInfo = Mailbox;
    @streams {
        type RecvStreamStream = crate::streams::Streamed<proto::RecvResponse>;

        async fn recv_stream(
            &self,
            request: Request<proto::RecvRequest>,
        ) -> Result<Response<Self::RecvStreamStream>, Status> {
            let who = self.node.caller_of(&request)?;
            let r = request.into_inner();
            let to = address(&r.mailbox)?;
            let take = take_of(r.max);
            // The receiver checks the caller; fail at once on an unknown
            // mailbox rather than in the stream.
            let mut receiver =
                ipc::Receiver::new(&self.node.store, &who, &to).map_err(|e| kernel_status(&e))?;
            ipc::peek(&self.node.store, &who, &to, Take::messages(1))
                .await
                .map_err(|e| kernel_status(&e))?;
            // Room for one batch: the next is taken only once the client has
            // read this one (or the transport has buffered it).
            let (out, streamed) = crate::streams::channel(1, self.node.stopping.watch());
            // One receiver for the stream's life (made above): it stays
            // subscribed, so after a batch that emptied the mailbox it waits for
            // the next send without a transaction, and no send falls between
            // subscriptions.
            tokio::spawn(async move {
                loop {
                    // Room first: a message is taken from the mailbox only
                    // once it has somewhere to go.
                    let Ok(permit) = out.reserve().await else {
                        return; // the client went away, or the node stops
                    };
                    let stop = async {
                        let _ = out.ended().await;
                    };
                    let got = receiver.recv(take, ipc::RECV_WAIT_MAX, stop).await;
                    match got {
                        Ok(got) if got.messages.is_empty() => {}
                        Ok(got) => permit.send(Ok(response(got))),
                        Err(e) => {
                            drop(permit);
                            return out.finish(kernel_status(&e));
                        }
                    }
                }
            });
            Ok(Response::new(streamed))
        }
    }
}
