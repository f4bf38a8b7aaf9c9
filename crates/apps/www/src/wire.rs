//! What wwd and the workers say to each other through mailboxes: a request
//! (one message to the site's request mailbox) and its response (one or
//! more messages to the wwd's own mailbox, `proc/<wwd>`), each a JSON
//! header line followed by body bytes.
//!
//! wwd keeps the whole answers workers mark cacheable (a static file's
//! `200`, [`CacheTag`]) while its site's supervisor tells it, on the same
//! mailbox, that it watches the realm's file changes, and drops them as
//! it is told of changes ([`CacheNote`]).
//!
//! The supervisor also tells wwd when one of its workers exited on its own
//! ([`WorkerGone`]): a request that worker had taken is answered by no
//! one, so wwd asks again for what is still unanswered and may be.
//!
//! A file of any size is streamed: a worker sends at most [`WINDOW_BYTES`]
//! of it, and says where the rest begins ([`Window`]); wwd asks for the
//! next window — as a request any worker may take — once its client has
//! begun to read the last one, so no more than two windows of a response
//! are ever held, whatever the file's size or the client's speed.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Body bytes per response message (a message carries at most 1 MiB).
pub const PART_BYTES: usize = 512 << 10;
/// Largest request body wwd takes.
pub const REQUEST_BODY_MAX: usize = 256 << 10;
/// Bytes of a streamed file one window carries.
pub const WINDOW_BYTES: u64 = 4 << 20;
/// Largest response a worker sends whole, not in windows (a page, a
/// compressed file, several ranges).
pub const WHOLE_BYTES_MAX: usize = 16 << 20;
/// Parts of one response wwd holds at most: a whole one, or two windows.
pub const HELD_PARTS_MAX: usize =
    WHOLE_BYTES_MAX / PART_BYTES + 2 * (WINDOW_BYTES as usize / PART_BYTES) + 1;
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
    /// Set: not a new request, but the next window of a file whose
    /// response is under way (its id is the response's).
    #[serde(default)]
    pub window: Option<Window>,
}

/// The rest of a streamed file: the request's path, the bytes
/// `[from, to)` of the file, and the `ETag` it had (a file changed since
/// is not sent on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub path: String,
    pub from: u64,
    pub to: u64,
    pub etag: String,
    /// The number its first part gets (wwd puts parts in order by it).
    pub part: u32,
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
    /// Headers of the response (validators, ranges, encoding).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body's length, when it is streamed or the answer to HEAD.
    #[serde(default)]
    pub length: Option<u64>,
    /// On the first part of a window: the next window, for wwd to ask.
    #[serde(default)]
    pub more: Option<Window>,
    /// The response cannot go on (the file changed or went away while it
    /// was being sent): wwd cuts the connection.
    #[serde(default)]
    pub broken: bool,
    /// Set on a whole static file's answer: wwd may keep it until the
    /// file changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheTag>,
}

/// The file a cacheable answer was read from: wwd drops the answer when
/// told the file or its name changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheTag {
    /// Its path in tabos fs.
    pub path: String,
    /// Its id.
    pub id: String,
}

/// What a site's supervisor tells its wwd of the realm's file changes
/// (through wwd's own mailbox, as the workers' answers come): wwd keeps
/// answers only while a lease the supervisor renews holds, and drops
/// those a change makes stale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheNote {
    pub cache: CacheChange,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheChange {
    /// The supervisor watches the realm's file changes: answers may be
    /// kept for `lease_ms` more (renewed well before it ends).
    Watching { lease_ms: u64 },
    /// These files changed (by id), and these names were added or
    /// removed (an answer read from under one is dropped too).
    Changed {
        ids: Vec<String>,
        paths: Vec<String>,
    },
    /// Anything may have changed (the site's routes): drop every answer.
    DropAll,
    /// The watch ended: drop every answer and keep none.
    Off,
}

impl CacheNote {
    /// The first bytes of every cache note's message, which no answer's
    /// header begins with.
    pub const PREFIX: &'static [u8] = b"{\"cache\":";
}

/// What a site's supervisor tells its wwd when a worker of the pool
/// exited without being told to (killed, crashed): whatever requests it
/// had taken will not be answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerGone {
    /// The worker's pid.
    pub worker_gone: String,
}

impl WorkerGone {
    /// The first bytes of every such message, which no answer's header
    /// and no cache note begins with.
    pub const PREFIX: &'static [u8] = b"{\"worker_gone\":";
}

impl ResponseHead {
    /// A response's first head.
    pub fn new(id: u64, status: u16, content_type: impl Into<String>) -> ResponseHead {
        ResponseHead {
            id,
            status,
            content_type: content_type.into(),
            part: 0,
            last: false,
            headers: Vec::new(),
            length: None,
            more: None,
            broken: false,
            cache: None,
        }
    }
}

/// A wwd's certificate chain and private key (PEM), the first message its
/// site's supervisor sends to a wwd started with `--tls`: through wwd's
/// own mailbox, which only wwd reads — never in its arguments or
/// environment, which the realm's proc table shows.
#[derive(Clone, Serialize, Deserialize)]
pub struct TlsMaterial {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsMaterial { .. }") // never the key
    }
}

impl TlsMaterial {
    /// The material from PEM files, checked as wwd will read it.
    pub fn from_files(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsMaterial> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p)
                .map_err(|e| Error::Invalid(format!("cannot read {}: {e}", p.display())))
        };
        let m = TlsMaterial {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        };
        m.server_config()?;
        Ok(m)
    }

    /// A rustls server configuration (TLS 1.2 and 1.3, HTTP/1.1).
    pub fn server_config(&self) -> Result<tokio_rustls::rustls::ServerConfig> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Invalid(format!("the TLS certificate: {e}")))?;
        if certs.is_empty() {
            return Err(Error::Invalid(
                "the TLS certificate file holds no certificate".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| Error::Invalid(format!("the TLS key: {e}")))?;
        let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Invalid(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| Error::Invalid(format!("the TLS certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
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

/// A response as its messages: the body cut into parts, from part
/// `head.part` on; the last one marked last unless `more` follows (the
/// first one then says where it goes on).
pub fn response(head: &ResponseHead, body: &[u8], more: Option<Window>) -> Vec<Vec<u8>> {
    let parts: Vec<&[u8]> = if body.is_empty() {
        vec![&[][..]]
    } else {
        body.chunks(PART_BYTES).collect()
    };
    let n = parts.len();
    let last = more.is_none();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let mut h = head.clone();
            h.part = head.part + i as u32;
            h.last = last && i + 1 == n;
            h.more = if i == 0 { more.clone() } else { None };
            encode(&h, b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_cut_into_parts_and_read_back() {
        let body = vec![7u8; PART_BYTES * 2 + 5];
        let msgs = response(&ResponseHead::new(9, 200, "text/plain"), &body, None);
        assert_eq!(msgs.len(), 3);
        let mut got = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let (h, b): (ResponseHead, &[u8]) = decode(m).unwrap();
            assert_eq!((h.id, h.part as usize, h.last), (9, i, i == 2));
            got.extend_from_slice(b);
        }
        assert_eq!(got, body);
        assert_eq!(
            response(&ResponseHead::new(1, 404, "text/plain"), b"", None).len(),
            1
        );
        // A window that goes on: none is last, the first says where.
        let more = Window {
            path: "/f".into(),
            from: 10,
            to: 20,
            etag: "\"e\"".into(),
            part: 3,
        };
        let msgs = response(&ResponseHead::new(2, 200, "x"), &body, Some(more.clone()));
        let heads: Vec<ResponseHead> = msgs.iter().map(|m| decode(m).unwrap().0).collect();
        assert!(heads.iter().all(|h| !h.last));
        assert_eq!(heads[0].more, Some(more));
        assert!(heads[1].more.is_none());
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

    /// Queues `msgs` in order and waits until they were all sent.
    pub async fn send_all(&self, msgs: Vec<tabos_client::proto::Outgoing>) -> Result<(), String> {
        let mut sent = Vec::with_capacity(msgs.len());
        for msg in msgs {
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.tx
                .send((msg, tx))
                .await
                .map_err(|_| "the sender stopped".to_string())?;
            sent.push(rx);
        }
        for rx in sent {
            rx.await.map_err(|_| "the sender stopped".to_string())??;
        }
        Ok(())
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
