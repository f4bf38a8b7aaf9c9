//! What wwd and the workers say to each other through mailboxes: a request
//! (one message to the site's request mailbox) and its response (one or
//! more messages to the wwd's own mailbox, `proc/<wwd>`), each a JSON
//! header line followed by body bytes.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Body bytes per response message (a message carries at most 1 MiB).
pub const PART_BYTES: usize = 512 << 10;
/// Largest request body wwd takes.
pub const REQUEST_BODY_MAX: usize = 256 << 10;
/// Largest response a worker sends (bigger files answer 413).
pub const RESPONSE_BYTES_MAX: usize = 64 << 20;
/// Most request headers passed on.
pub const HEADERS_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// wwd's number for it (unique per wwd).
    pub id: u64,
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseHead {
    pub id: u64,
    pub status: u16,
    pub content_type: String,
    /// This part's number, from 0.
    pub part: u32,
    /// The last part.
    pub last: bool,
}

/// A header line and a body as one message.
pub fn encode<T: Serialize>(head: &T, body: &[u8]) -> Vec<u8> {
    let mut out = serde_json::to_vec(head).expect("a header serializes");
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// The header and the body of a message.
pub fn decode<T: for<'de> Deserialize<'de>>(msg: &[u8]) -> Result<(T, &[u8])> {
    let nl = msg
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| Error::Invalid("a message without a header line".into()))?;
    let head = serde_json::from_slice(&msg[..nl])
        .map_err(|e| Error::Invalid(format!("a bad message header: {e}")))?;
    Ok((head, &msg[nl + 1..]))
}

/// A response as its messages: the body cut into parts.
pub fn response(id: u64, status: u16, content_type: &str, body: &[u8]) -> Vec<Vec<u8>> {
    let parts: Vec<&[u8]> = if body.is_empty() {
        vec![&[][..]]
    } else {
        body.chunks(PART_BYTES).collect()
    };
    let n = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let head = ResponseHead {
                id,
                status,
                content_type: content_type.into(),
                part: i as u32,
                last: i + 1 == n,
            };
            encode(&head, b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_cut_into_parts_and_read_back() {
        let body = vec![7u8; PART_BYTES * 2 + 5];
        let msgs = response(9, 200, "text/plain", &body);
        assert_eq!(msgs.len(), 3);
        let mut got = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let (h, b): (ResponseHead, &[u8]) = decode(m).unwrap();
            assert_eq!((h.id, h.part as usize, h.last), (9, i, i == 2));
            got.extend_from_slice(b);
        }
        assert_eq!(got, body);
        assert_eq!(response(1, 404, "text/plain", b"").len(), 1);
        assert!(decode::<ResponseHead>(b"no header").is_err());
    }
}

/// Most messages one batched send carries.
pub const BATCH_MESSAGES_MAX: usize = 256;
/// Most payload bytes one batched send carries (a send takes 8 MiB).
pub const BATCH_BYTES_MAX: usize = 6 << 20;

type Queued = (
    tabos_client::proto::Outgoing,
    tokio::sync::oneshot::Sender<Result<(), String>>,
);

/// Sends messages in batches: whatever was queued while one send was on
/// its way goes together in the next, in the order queued — so under load
/// many requests or answers share one transaction.
#[derive(Clone)]
pub struct Batcher {
    tx: tokio::sync::mpsc::Sender<Queued>,
}

impl Batcher {
    /// A batcher sending as `from` (a proc's own `proc/<pid>`, or empty).
    pub fn start(client: &tabos_client::Client, realm: &str, from: &str) -> Batcher {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Queued>(BATCH_MESSAGES_MAX * 4);
        let (mut c, realm, from) = (client.clone(), realm.to_string(), from.to_string());
        tokio::spawn(async move {
            let mut carry: Option<Queued> = None;
            loop {
                let first = match carry.take() {
                    Some(q) => q,
                    None => match rx.recv().await {
                        Some(q) => q,
                        None => return,
                    },
                };
                let mut bytes = first.0.payload.len();
                let mut batch = vec![first];
                while batch.len() < BATCH_MESSAGES_MAX {
                    match rx.try_recv() {
                        Ok(q) if bytes + q.0.payload.len() > BATCH_BYTES_MAX => {
                            carry = Some(q);
                            break;
                        }
                        Ok(q) => {
                            bytes += q.0.payload.len();
                            batch.push(q);
                        }
                        Err(_) => break,
                    }
                }
                let (msgs, waiters): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
                let out = c
                    .send_many(&realm, &from, msgs)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                for w in waiters {
                    let _ = w.send(out.clone());
                }
            }
        });
        Batcher { tx }
    }

    /// Queues `msg` and waits until its batch was sent.
    pub async fn send(&self, msg: tabos_client::proto::Outgoing) -> Result<(), String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send((msg, tx))
            .await
            .map_err(|_| "the sender stopped".to_string())?;
        rx.await.map_err(|_| "the sender stopped".to_string())?
    }
}
