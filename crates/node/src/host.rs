//! The node's side of the wasm host functions ([`tabos_sandbox::host`]):
//! a wasm proc's IPC calls go straight to the kernel, on the proc's own
//! worker thread, without an RPC.

use std::sync::Arc;
use std::time::Duration;

use tabos_kernel::fs::files::Files;
use tabos_kernel::fs::{Caller, FileType};
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tabos_kernel::names::{self, Kind};
use tabos_sandbox::host::{FileEntry, Host, HostError, NameEntry, Received, RecvCall};
use tabos_sandbox::StopHandle;
use tabos_store::Store;
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// One wasm proc's host: who it acts as (its realm, user and pid), its
/// address, and how to stop its waits.
pub struct ProcHost {
    store: Store,
    /// The node's filesystem (its block store included).
    files: Files,
    /// The proc, acting in its realm for its spawner's user.
    caller: Caller,
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
    /// The proc's receiver, made by its first recv.
    receiver: Option<ipc::Receiver>,
    /// Messages already taken from the mailbox (deleted in the receive's
    /// transaction) and not yet handed to the proc: they go with the proc if
    /// it ends first, as a batch does with a client that goes away.
    taken: std::collections::VecDeque<ipc::Message>,
    /// The receiver of the last other mailbox the proc received from.
    others: Option<(Address, ipc::Receiver)>,
    /// Its workflow calls, when it runs a workflow of its own.
    wf: crate::wfproc::WfProc,
}

/// How long a wasm proc's thread looks for a reply before it sleeps: a
/// sleeping thread takes tens of microseconds to wake on a virtual machine,
/// longer than most replies take to arrive.
const SPIN: Duration = Duration::from_micros(200);

impl ProcHost {
    /// The host of the proc `caller` acts for (its claim made it:
    /// [`tabos_kernel::procs::ProcInfo::caller`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        files: Files,
        procedures: tabos_kernel::procedures::Procedures,
        node_id: String,
        caller: Caller,
        opts: MailboxOptions,
        rt: Handle,
        stop: StopHandle,
        woken: Arc<Notify>,
    ) -> Result<ProcHost, tabos_kernel::Error> {
        let pid = caller
            .pid()
            .ok_or_else(|| tabos_kernel::Error::Invalid("a proc's host needs a proc".into()))?;
        let wf = crate::wfproc::WfProc::new(
            store.clone(),
            procedures,
            caller.clone(),
            node_id,
            rt.clone(),
            stop.clone(),
            woken.clone(),
        );
        Ok(ProcHost {
            wf,
            store,
            files,
            me: Address::proc(pid),
            caller,
            opts,
            rt,
            stop,
            woken,
            receiver: None,
            taken: std::collections::VecDeque::new(),
            others: None,
        })
    }
}

impl Host for ProcHost {
    fn workflow(&mut self) -> Option<&mut dyn tabos_sandbox::workflow::WfHost> {
        Some(&mut self.wf)
    }

    fn fs_read(&mut self, path: &str, offset: i64, len: usize) -> Result<Vec<u8>, HostError> {
        self.rt
            .block_on(self.files.read(&self.caller, path, offset, len))
            .map_err(tabos_kernel::Error::into_host)
    }

    fn fs_write(
        &mut self,
        path: &str,
        offset: i64,
        data: &[u8],
        create: bool,
    ) -> Result<i64, HostError> {
        let who = self.caller.clone();
        self.rt
            .block_on(
                self.files
                    .write(&who, path, offset, data.to_vec(), create, None),
            )
            .map_err(tabos_kernel::Error::into_host)
    }

    fn fs_stat(&mut self, path: &str) -> Result<FileEntry, HostError> {
        let (who, path) = (self.caller.clone(), path.to_string());
        let st = self
            .rt
            .block_on(tabos_kernel::fs::call(
                &self.store,
                self.caller.realm(),
                move |tx| tabos_kernel::fs::stat_tx(tx, &who, &path),
            ))
            .map_err(tabos_kernel::Error::into_host)?;
        Ok(FileEntry {
            kind: match st.file_type {
                FileType::Dir => 0,
                FileType::File => 1,
                FileType::Symlink => 2,
                FileType::Fifo => 3,
            },
            mode: st.mode as u32,
            size: st.size,
        })
    }

    fn name_get(&mut self, path: &str) -> Result<NameEntry, HostError> {
        let (path, who) = (path.to_string(), self.caller.clone());
        let e = self
            .rt
            .block_on(names::read(&self.store, self.caller.realm(), move |tx| {
                names::get(tx, &who, &path)
            }))
            .map_err(tabos_kernel::Error::into_host)?;
        Ok(NameEntry {
            kind: match e.kind {
                Kind::Dir => 0,
                Kind::File => 1,
                Kind::Symlink => 2,
            },
            data: e.data,
            version: e.version,
        })
    }

    fn name_put(
        &mut self,
        path: &str,
        data: &[u8],
        if_version: Option<i64>,
    ) -> Result<i64, HostError> {
        let (path, data, who) = (path.to_string(), data.to_vec(), self.caller.clone());
        self.rt
            .block_on(names::call(&self.store, self.caller.realm(), move |tx| {
                let now = tabos_store::now_us();
                names::set(tx, &who, &path, &data, if_version, None, now)
            }))
            .map_err(tabos_kernel::Error::into_host)
    }

    fn name_mkdir(&mut self, path: &str) -> Result<(), HostError> {
        let (path, who) = (path.to_string(), self.caller.clone());
        self.rt
            .block_on(names::call(&self.store, self.caller.realm(), move |tx| {
                let now = tabos_store::now_us();
                names::create(tx, &who, &path, Kind::Dir, &[], 0, None, None, now)
            }))
            .map(drop)
            .map_err(tabos_kernel::Error::into_host)
    }

    fn name_remove(&mut self, path: &str) -> Result<(), HostError> {
        let (path, who) = (path.to_string(), self.caller.clone());
        self.rt
            .block_on(names::call(&self.store, self.caller.realm(), move |tx| {
                names::remove(tx, &who, &path, None, None, tabos_store::now_us())
            }))
            .map_err(tabos_kernel::Error::into_host)
    }

    fn name_wait(
        &mut self,
        path: &str,
        exists: bool,
        timeout: Option<Duration>,
    ) -> Result<(), HostError> {
        // The wait checks the caller before it waits.
        let (store, who, woken) = (self.store.clone(), self.caller.clone(), self.woken.clone());
        let path = path.to_string();
        let stop = self.stop.clone();
        self.rt.block_on(async move {
            let waited = async {
                if exists {
                    names::wait_exists(&store, &who, &path).await.map(drop)
                } else {
                    names::wait_removed(&store, &who, &path).await
                }
            };
            let limit = async {
                match timeout {
                    Some(t) => tokio::time::sleep(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(waited, limit);
            loop {
                tokio::select! {
                    got = &mut waited => return got.map_err(tabos_kernel::Error::into_host),
                    () = &mut limit => return Err(HostError::TimedOut),
                    () = woken.notified() => {
                        // Notified for a stop; a permit left over from an
                        // earlier wait ends nothing.
                        if stop.is_stopped() {
                            return Err(HostError::Stopped);
                        }
                    }
                }
            }
        })
    }

    fn send(&mut self, to: &[&str], payload: &[u8], id: Option<&str>) -> Result<(), HostError> {
        let msgs =
            Outgoing::to_each(to, payload, id).map_err(tabos_kernel::Error::into_host_ipc)?;
        // A blocking wait (it spins briefly): this is the proc's own thread.
        ipc::send_blocking(
            &self.store,
            &self.caller,
            Some(self.me.clone()),
            msgs,
            self.opts,
        )
        .map(drop)
        .map_err(tabos_kernel::Error::into_host_ipc)
    }

    fn recv(&mut self, call: RecvCall<'_>) -> Result<Received, HostError> {
        match (call.from, call.peek) {
            (None, false) => self.recv_own(call.bytes_max, call.timeout),
            (from, true) => self.peek(from, call.bytes_max),
            (Some(from), false) => self.recv_from(from, call.bytes_max, call.timeout),
        }
    }
}

impl ProcHost {
    fn received(m: ipc::Message) -> Received {
        Received {
            sender: m.sender,
            payload: m.payload,
        }
    }

    /// Looks at the next message of `from` (or the proc's own mailbox,
    /// where messages already taken come first).
    fn peek(&mut self, from: Option<&str>, bytes_max: usize) -> Result<Received, HostError> {
        let address = match from {
            None => {
                if let Some(m) = self.taken.front() {
                    if m.payload.len() > bytes_max {
                        return Err(HostError::TooBig(m.payload.len()));
                    }
                    return Ok(Self::received(m.clone()));
                }
                self.me.clone()
            }
            Some(f) => Address::parse(f).map_err(tabos_kernel::Error::into_host_ipc)?,
        };
        let take = Take {
            max: 1,
            bytes_max: bytes_max.min(ipc::RECV_BYTES_MAX),
        };
        let got = self
            .rt
            .block_on(ipc::peek(&self.store, &self.caller, &address, take))
            .map_err(tabos_kernel::Error::into_host_ipc)?;
        if let Some(len) = got.next_bytes {
            return Err(HostError::TooBig(len));
        }
        got.messages
            .into_iter()
            .next()
            .map(Self::received)
            .ok_or(HostError::Empty)
    }

    /// Waits on `receiver` until it takes messages: a wait "without limit"
    /// is RECV_WAIT_MAX at a time; an empty result means the proc is being
    /// stopped or the timeout ran out.
    fn take(
        &self,
        receiver: &mut ipc::Receiver,
        take: Take,
        timeout: Option<Duration>,
    ) -> Result<Vec<ipc::Message>, HostError> {
        let wait = timeout.unwrap_or(ipc::RECV_WAIT_MAX);
        loop {
            let woken = self.woken.clone();
            let got = receiver
                .recv_blocking(&self.rt, take, wait, async move { woken.notified().await })
                .map_err(tabos_kernel::Error::into_host_ipc)?;
            if let Some(len) = got.next_bytes {
                return Err(HostError::TooBig(len));
            }
            if !got.messages.is_empty() {
                return Ok(got.messages);
            }
            if self.stop.is_stopped() {
                return Err(HostError::Stopped);
            }
            if timeout.is_some() {
                return Err(HostError::TimedOut);
            }
        }
    }

    /// Takes one message of another mailbox (a queue shared with other
    /// receivers, so never more than one at a time).
    fn recv_from(
        &mut self,
        from: &str,
        bytes_max: usize,
        timeout: Option<Duration>,
    ) -> Result<Received, HostError> {
        let address = Address::parse(from).map_err(tabos_kernel::Error::into_host_ipc)?;
        let take = Take {
            max: 1,
            bytes_max: bytes_max.min(ipc::RECV_BYTES_MAX),
        };
        let mut receiver = match self.others.take() {
            Some((a, r)) if a == address => r,
            _ => ipc::Receiver::new(&self.store, &self.caller, &address)
                .map_err(tabos_kernel::Error::into_host_ipc)?
                .with_spin(SPIN),
        };
        let got = self.take(&mut receiver, take, timeout);
        self.others = Some((address, receiver));
        got?.into_iter()
            .next()
            .map(Self::received)
            .ok_or(HostError::Empty)
    }

    fn recv_own(
        &mut self,
        bytes_max: usize,
        timeout: Option<Duration>,
    ) -> Result<Received, HostError> {
        if self.taken.is_empty() {
            // One transaction takes as many as are queued (up to a batch), so
            // a burst costs one receive, not one per message; the rest wait
            // in `taken` for the next calls.
            let take = Take {
                max: ipc::RECV_MESSAGES_MAX,
                bytes_max: ipc::RECV_BYTES_MAX,
            };
            let mut receiver = match self.receiver.take() {
                Some(r) => r,
                None => ipc::Receiver::new(&self.store, &self.caller, &self.me)
                    .map_err(tabos_kernel::Error::into_host_ipc)?
                    .with_spin(SPIN),
            };
            let got = self.take(&mut receiver, take, timeout);
            self.receiver = Some(receiver);
            self.taken.extend(got?);
            debug_assert!(self.taken.len() <= ipc::RECV_MESSAGES_MAX);
        }
        // Messages taken by an earlier receive come first, in order.
        match self.taken.front() {
            Some(m) if m.payload.len() > bytes_max => Err(HostError::TooBig(m.payload.len())),
            _ => self
                .taken
                .pop_front()
                .map(Self::received)
                .ok_or(HostError::Empty),
        }
    }
}
