//! PostgreSQL's CancelRequest: psql's Ctrl-C, psycopg's `cancel()`,
//! JDBC's `Statement.cancel()`.
//!
//! Each connection is given a process id (a counter of this process) and
//! a random secret in its BackendKeyData; a CancelRequest — sent on a
//! connection of its own, before any sign-in, as PostgreSQL's protocol
//! has it — that names both stops the statement that connection is
//! running: its future is dropped, which raises the read path's cancel
//! flag ([`crate::sql::run`]), and the client gets SQLSTATE 57014. A
//! request with a wrong secret, for a connection that is gone, or while
//! the connection is idle does nothing, as in PostgreSQL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use pgwire::api::cancel::CancelHandler;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::sync::Notify;

use super::lock;

/// The live connections' keys: process id → (secret, the connection's
/// cancel signal).
type Keys = Mutex<HashMap<i32, (i32, Arc<Notify>)>>;

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A connection's cancel key, registered while it lives.
pub(super) struct Key {
    pub pid: i32,
    pub secret: i32,
    /// Signalled by a CancelRequest that names this key.
    pub signal: Arc<Notify>,
}

impl Key {
    /// A new key (`None` when the system gives no randomness: such a
    /// connection cannot be cancelled, and says so by a zero key).
    pub fn new() -> Option<Key> {
        static NEXT: AtomicI32 = AtomicI32::new(1);
        let mut raw = [0u8; 4];
        getrandom::fill(&mut raw).ok()?;
        // Positive and never 0, as PostgreSQL's process ids are.
        let pid = NEXT
            .fetch_add(1, Ordering::Relaxed)
            .rem_euclid(i32::MAX - 1)
            + 1;
        let key = Key {
            pid,
            secret: i32::from_ne_bytes(raw),
            signal: Arc::new(Notify::new()),
        };
        lock(keys()).insert(pid, (key.secret, key.signal.clone()));
        Some(key)
    }

    /// What BackendKeyData carries.
    pub fn secret_key(&self) -> SecretKey {
        SecretKey::I32(self.secret)
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        let mut keys = lock(keys());
        if keys.get(&self.pid).is_some_and(|(s, _)| *s == self.secret) {
            keys.remove(&self.pid);
        }
    }
}

/// Answers CancelRequests from the registered keys.
pub(super) struct Canceller;

#[async_trait]
impl CancelHandler for Canceller {
    async fn on_cancel_request(&self, request: CancelRequest) {
        // The request's connection may read the key as bytes (its own
        // protocol version): compared by value.
        let signal = match lock(keys()).get(&request.pid) {
            Some((s, signal)) if request.secret_key.eq_value(&SecretKey::I32(*s)) => signal.clone(),
            _ => return,
        };
        // Wakes the statement running now, if any; stores nothing for
        // the next one.
        signal.notify_waiters();
    }
}
