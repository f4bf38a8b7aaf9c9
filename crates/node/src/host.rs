//! The node's side of the wasm host functions ([`tabos_sandbox::host`]):
//! a wasm proc's IPC calls go straight to the kernel, on the proc's own
//! worker thread, without an RPC.

use std::sync::Arc;
use std::time::Duration;

use tabos_kernel::ids::Pid;
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tabos_sandbox::host::{Host, HostError, Received};
use tabos_sandbox::StopHandle;
use tabos_store::Store;
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// One wasm proc's host: its realm, its address, and how to stop its waits.
pub struct ProcHost {
    store: Store,
    realm: String,
    me: Address,
    opts: MailboxOptions,
    /// The runtime the kernel's futures run on; the proc's thread blocks on
    /// them (it is a blocking-pool thread, never a runtime worker).
    rt: Handle,
    /// Set when the proc is evicted ...
    stop: StopHandle,
    /// ... and then notified (one permit, so it is not missed by a wait
    /// that starts later), to end a wait.
    woken: Arc<Notify>,
}

impl ProcHost {
    pub fn new(
        store: Store,
        realm: &str,
        pid: &Pid,
        opts: MailboxOptions,
        rt: Handle,
        stop: StopHandle,
        woken: Arc<Notify>,
    ) -> ProcHost {
        ProcHost {
            store,
            realm: realm.to_string(),
            me: Address::proc(pid),
            opts,
            rt,
            stop,
            woken,
        }
    }
}

fn host_error(e: tabos_kernel::Error) -> HostError {
    use tabos_kernel::Error as K;
    match e {
        K::NotFound(m) => HostError::NotFound(m),
        K::Full(m) => HostError::Full(m),
        K::Precondition(m) => HostError::Closed(m),
        K::Invalid(m) if m.contains("payload") => HostError::PayloadTooLarge(m),
        K::Invalid(m) => HostError::Invalid(m),
        other => HostError::Other(other.to_string()),
    }
}

impl Host for ProcHost {
    fn send(&mut self, to: &[&str], payload: &[u8]) -> Result<(), HostError> {
        let msgs = to
            .iter()
            .map(|t| {
                Ok(Outgoing {
                    to: Address::parse(t)?,
                    payload: payload.to_vec(),
                    message_id: None,
                })
            })
            .collect::<tabos_kernel::Result<Vec<_>>>()
            .map_err(host_error)?;
        let sent = self.rt.block_on(ipc::send(
            &self.store,
            &self.realm,
            Some(self.me.clone()),
            msgs,
            self.opts,
        ));
        sent.map(drop).map_err(host_error)
    }

    fn recv(&mut self, bytes_max: usize, timeout: Option<Duration>) -> Result<Received, HostError> {
        let take = Take {
            max: 1,
            bytes_max: bytes_max.min(ipc::RECV_BYTES_MAX),
        };
        let wait = timeout.unwrap_or(ipc::RECV_WAIT_MAX);
        loop {
            let woken = self.woken.clone();
            let got = self
                .rt
                .block_on(ipc::recv(
                    &self.store,
                    &self.realm,
                    &self.me,
                    take,
                    wait,
                    async move { woken.notified().await },
                ))
                .map_err(host_error)?;
            if let Some(len) = got.next_bytes {
                return Err(HostError::TooBig(len));
            }
            if let Some(m) = got.messages.into_iter().next() {
                return Ok(Received {
                    sender: m.sender,
                    payload: m.payload,
                });
            }
            // Empty: stopped, or the wait ran out. A wait "without limit"
            // is RECV_WAIT_MAX at a time.
            if self.stop.is_stopped() {
                return Err(HostError::Stopped);
            }
            if timeout.is_some() {
                return Err(HostError::TimedOut);
            }
        }
    }
}
