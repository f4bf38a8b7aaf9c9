//! The `Names` service: the realm namespace over gRPC
//! ([`tabos_kernel::names`]), and the node's session reaper.
//!
//! Each request is one kernel transaction on the realm's partition. Watches
//! are server streams fed by the change feed: `exists` and `removed` end
//! after their one event; `dir` sends the directory's version first and then
//! every change in it, in commit order, until the client cancels — or ends
//! with DATA_LOSS if the watcher fell so far behind that the feed cut it off
//! (the client re-reads the directory and watches again, as with etcd's
//! compaction).

use tabos_client::proto;
use tabos_kernel::names::{self, Entry, Fence, Kind};
use tabos_kernel::Error as KError;
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

/// Events a dir watch may have in flight to a slow client before it waits.
const WATCH_BUFFER: usize = 256;

#[derive(Clone)]
pub struct NamesService {
    node: Node,
}

impl NamesService {
    /// Its streams end when the node's [`crate::Stopping`] is raised.
    pub fn new(node: Node) -> NamesService {
        NamesService { node }
    }
}

/// The kernel fence of a request (none when absent).
pub fn fence_from_proto(f: Option<proto::Fence>) -> Result<Option<Fence>, Status> {
    fence_of(f).map_err(|e| kernel_status(&e))
}

pub fn entry_to_proto(e: Entry) -> proto::NameEntry {
    proto::NameEntry {
        path: e.path,
        kind: crate::wire::out(e.kind),
        data: e.data,
        version: e.version,
        owner: e.owner,
        mode: e.mode,
        session: e.session.unwrap_or_default(),
        created_us: e.created_us,
        modified_us: e.modified_us,
    }
}

/// The kernel fence of an operation's request (none when absent).
pub fn fence_of(f: Option<proto::Fence>) -> tabos_kernel::Result<Option<Fence>> {
    let Some(f) = f else { return Ok(None) };
    names::validate_path(&f.dir)?;
    if f.epoch < 0 {
        return Err(KError::Invalid("an epoch is never negative".into()));
    }
    Ok(Some(Fence {
        dir: f.dir,
        epoch: f.epoch,
    }))
}

/// The Names service's operations, each a kernel operation of
/// [`tabos_kernel::names`] (which checks the caller) in one transaction.
pub mod ops {
    use super::*;
    use crate::op::op;

    op!(Create(CreateNameRequest) -> NameVersion, |node, who, r| {
        let kind: Kind = crate::wire::field("kind", r.kind)?
            .ok_or_else(|| KError::Invalid("kind must be dir, file or symlink".into()))?;
        let fence = fence_of(r.fence)?;
        let session = (!r.session.is_empty()).then_some(r.session);
        let (path, data, mode) = (r.path, r.data, r.mode);
        let version = node
            .write_as(who, move |tx, who, now| {
                let s = session.as_deref();
                names::create(tx, who, &path, kind, &data, mode, s, fence.as_ref(), now)
            })
            .await?;
        Ok(proto::NameVersion { version })
    });

    op!(Set(SetNameRequest) -> NameVersion, |node, who, r| {
        let fence = fence_of(r.fence)?;
        let (path, data, if_version) = (r.path, r.data, r.if_version);
        let version = node
            .write_as(who, move |tx, who, now| {
                names::set(tx, who, &path, &data, if_version, fence.as_ref(), now)
            })
            .await?;
        Ok(proto::NameVersion { version })
    });

    op!(Get(NameRequest) -> NameEntry, |node, who, r| {
        let e = node
            .read_as(who, move |tx, who, _| names::get(tx, who, &r.path))
            .await?;
        Ok(entry_to_proto(e))
    });

    op!(Remove(RemoveNameRequest) -> Empty, |node, who, r| {
        let fence = fence_of(r.fence)?;
        let (path, if_version) = (r.path, r.if_version);
        node.write_as(who, move |tx, who, now| {
            names::remove(tx, who, &path, if_version, fence.as_ref(), now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(Rename(RenameNameRequest) -> Empty, |node, who, r| {
        let fence = fence_of(r.fence)?;
        let (from, to) = (r.from, r.to);
        node.write_as(who, move |tx, who, now| {
            names::rename(tx, who, &from, &to, fence.as_ref(), now)
        })
        .await?;
        Ok(proto::Empty {})
    });

    op!(ReadDir(NameRequest) -> ReadDirResponse, |node, who, r| {
        let (entries, more, version) = node
            .read_as(who, move |tx, who, _| names::read_dir(tx, who, &r.path))
            .await?;
        Ok(proto::ReadDirResponse {
            entries: entries.into_iter().map(entry_to_proto).collect(),
            more,
            version,
        })
    });

    op!(AdvanceEpoch(NameRequest) -> EpochResponse, |node, who, r| {
        let epoch = node
            .write_as(who, move |tx, who, now| {
                names::advance_epoch(tx, who, &r.path, now)
            })
            .await?;
        Ok(proto::EpochResponse { epoch })
    });

    op!(CheckFence(FenceRequest) -> Empty, |node, who, r| {
        let fence = fence_of(r.fence)?
            .ok_or_else(|| KError::Invalid("Fence needs a fence (dir and epoch)".into()))?;
        node.write_as(who, move |tx, who, now| names::fence(tx, who, &fence, now))
            .await?;
        Ok(proto::Empty {})
    });

    op!(OpenSession(OpenSessionRequest) -> SessionResponse, |node, who, r| {
        let session = if r.session.is_empty() {
            names::generate_session_id()
        } else {
            r.session
        };
        let (s, ttl_us) = (session.clone(), r.ttl_ms.saturating_mul(1000));
        let expires_us = node
            .write_as(who, move |tx, who, now| {
                names::open_session(tx, who, &s, ttl_us, now)
            })
            .await?;
        Ok(proto::SessionResponse {
            session,
            expires_us,
        })
    });

    op!(RenewSession(SessionRequest) -> SessionResponse, |node, who, r| {
        let s = r.session.clone();
        let expires_us = node
            .write_as(who, move |tx, who, now| {
                names::renew_session(tx, who, &s, now)
            })
            .await?;
        Ok(proto::SessionResponse {
            session: r.session,
            expires_us,
        })
    });

    op!(CloseSession(SessionRequest) -> CloseSessionResponse, |node, who, r| {
        let realm = who.realm().to_string();
        let removed = node
            .write_as(who, move |tx, who, now| {
                let removed = names::close_session(tx, who, &r.session, now)?;
                // Its open files' handles go with it (in the same commit).
                let queued = tabos_kernel::fs::session_ended_tx(tx, who.realm(), &r.session)?;
                Ok((removed, queued))
            })
            .await?;
        let (removed, queued) = removed;
        if queued > 0 {
            node.files.reclaim(&realm).await?;
        }
        Ok(proto::CloseSessionResponse {
            removed: removed as u64,
        })
    });
}

crate::op::served! {
    NamesService: proto::names_server::Names;
    create(CreateNameRequest) -> NameVersion = Create;
    set(SetNameRequest) -> NameVersion = Set;
    get(NameRequest) -> NameEntry = Get;
    remove(RemoveNameRequest) -> Empty = Remove;
    rename(RenameNameRequest) -> Empty = Rename;
    read_dir(NameRequest) -> ReadDirResponse = ReadDir;
    advance_epoch(NameRequest) -> EpochResponse = AdvanceEpoch;
    fence(FenceRequest) -> Empty = CheckFence;
    open_session(OpenSessionRequest) -> SessionResponse = OpenSession;
    renew_session(SessionRequest) -> SessionResponse = RenewSession;
    close_session(SessionRequest) -> CloseSessionResponse = CloseSession;
    @streams {
        type WatchStream = crate::streams::Streamed<proto::WatchEvent>;

        async fn watch(
            &self,
            request: Request<proto::WatchRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            let who = self.node.caller_of(&request)?;
            let r = request.into_inner();
            let mode: proto::WatchMode = crate::wire::request_proto("watch mode", r.mode)?
                .ok_or_else(|| Status::invalid_argument("watch mode must be exists, removed or dir"))?;
            // Refused here, as the call's answer, rather than as the stream's
            // first event (the waits check again as they look).
            let (path, dir_mode) = (r.path.clone(), mode == proto::WatchMode::Dir);
            self.node
                .read_as(who.clone(), move |tx, who, _| {
                    names::may_watch(tx, who, &path, dir_mode)
                })
                .await
                .map_err(|e| kernel_status(&e))?;
            let held = crate::streams::take_watch(&self.node, &who)?;
            let store = self.node.store.clone();
            let (out, streamed) = crate::streams::channel(WATCH_BUFFER, self.node.stopping.watch());
            match mode {
                proto::WatchMode::Exists | proto::WatchMode::Removed => {
                    let exists = mode == proto::WatchMode::Exists;
                    tokio::spawn(async move {
                        let _held = held;
                        let waited = async {
                            if exists {
                                names::wait_exists(&store, &who, &r.path).await.map(|e| {
                                    proto::WatchEvent {
                                        op: proto::WatchOp::Exists.into(),
                                        path: e.path.clone(),
                                        version: e.version,
                                        entry: Some(entry_to_proto(e)),
                                    }
                                })
                            } else {
                                names::wait_removed(&store, &who, &r.path).await.map(|()| {
                                    proto::WatchEvent {
                                        op: proto::WatchOp::Removed.into(),
                                        path: r.path.clone(),
                                        version: 0,
                                        entry: None,
                                    }
                                })
                            }
                        };
                        tokio::select! {
                            got = waited => match got {
                                Ok(event) => { let _ = out.send(event).await; }
                                Err(e) => out.finish(kernel_status(&e)),
                            },
                            _ = out.ended() => {}
                        }
                    });
                }
                // (`request_proto` made unspecified a refusal above.)
                proto::WatchMode::Dir | proto::WatchMode::Unspecified => {
                    let (sub, version) = names::watch_dir(&store, &who, &r.path)
                        .await
                        .map_err(|e| kernel_status(&e))?;
                    tokio::spawn(forward_dir(sub, r.path, version, out, held));
                }
            }
            Ok(Response::new(streamed))
        }
    }
}

/// Forwards a directory's changes to a watcher until it goes away, falls
/// behind or the node stops; `_held` is its place among its realm's watches.
async fn forward_dir(
    mut sub: tabos_store::Subscription,
    dir: String,
    version: i64,
    out: crate::streams::Out<proto::WatchEvent>,
    _held: crate::doors::Taken,
) {
    let first = proto::WatchEvent {
        op: proto::WatchOp::Watching.into(),
        path: dir.clone(),
        version,
        entry: None,
    };
    if out.send(first).await.is_err() {
        return;
    }
    loop {
        let note = tokio::select! {
            note = sub.recv() => note,
            _ = out.ended() => return,
        };
        let status = match note {
            // Long directory paths share hashed channels: keep only ours.
            Ok(n) => match names::Change::parse(&n.payload) {
                Some(c) if names::parent_of(&c.path) == dir => {
                    let event = proto::WatchEvent {
                        op: crate::wire::of_text(&c.op, proto::WatchOp::from_name).into(),
                        path: c.path,
                        version: c.version,
                        entry: None,
                    };
                    if out.send(event).await.is_err() {
                        return;
                    }
                    continue;
                }
                _ => continue,
            },
            Err(tabos_store::Error::Lagged(n)) => Status::data_loss(format!(
                "the watch of {dir} fell {n} changes behind and was cut off; \
                 read the directory again and watch from its new version"
            )),
            Err(e) => crate::status_of(&e),
        };
        out.finish(status);
        return;
    }
}

/// The session reaper: ends lapsed sessions on every partition, removing
/// their ephemeral entries (which wakes those entries' watchers). It sleeps
/// until the earliest expiry it knows of and is woken when a session is
/// opened anywhere (`SESSIONS_CHANNEL`; on PostgreSQL the feed carries other
/// nodes' notifications too). Time itself is the event here, so this is a
/// timer, not polling: a renewal needs no wake-up, since the pass at the old
/// expiry finds the session alive and learns its new expiry. Every node runs
/// one; expiring is idempotent, so nodes racing on a shared database agree.
pub async fn reap_sessions(node: Node, mut stop: tokio::sync::watch::Receiver<bool>) {
    /// Wait after a failed pass before trying that partition again.
    const RETRY_AFTER_US: i64 = 1_000_000;
    let store = node.store.clone();
    let mut opened = store.subscribe(names::SESSIONS_CHANNEL);
    // Earliest known expiry per partition (None: no session); 0 looks now.
    let mut next: Vec<Option<i64>> = vec![Some(0); store.partitions() as usize];
    loop {
        let now = tabos_store::now_us();
        for (i, due) in next.iter_mut().enumerate() {
            if due.is_none_or(|d| d > now) {
                continue;
            }
            let p = tabos_store::PKey(i as u32);
            *due = loop {
                let got = store
                    .run(p, move |tx| {
                        let e = names::expire_sessions_tx(tx, now)?;
                        // The ended sessions' open files' handles go in the
                        // same commit; realms with storage to give back.
                        let mut reclaim = Vec::new();
                        for (realm, session) in &e.sessions {
                            if tabos_kernel::fs::session_ended_tx(tx, realm, session)? > 0 {
                                reclaim.push(realm.clone());
                            }
                        }
                        Ok::<_, KError>((e, reclaim))
                    })
                    .await;
                match got {
                    Ok((e, reclaim)) => {
                        for realm in reclaim {
                            if let Err(err) = node.files.reclaim(&realm).await {
                                tracing::warn!(
                                    node = %node.settings.node_id, "giving back files of realm {realm}: {err}");
                            }
                        }
                        if !e.sessions.is_empty() {
                            tracing::info!(
                                node = %node.settings.node_id, "sessions expired: {:?} ({} ephemeral entries removed)", e.sessions, e.entries);
                        }
                        // A full batch leaves lapsed ones behind: go again.
                        if e.next_us.is_some_and(|n| n <= now) {
                            continue;
                        }
                        break e.next_us;
                    }
                    Err(KError::Store(tabos_store::Error::Closed)) => return,
                    Err(e) => {
                        tracing::warn!(node = %node.settings.node_id, "session reaper: {e}");
                        break Some(now + RETRY_AFTER_US);
                    }
                }
            };
        }
        let sleep = crate::supervise::sleep_until_us(next.iter().flatten().min().copied());
        tokio::select! {
            _ = stop.changed() => return,
            note = opened.recv() => match note.ok().and_then(|n| n.payload.parse::<i64>().ok()) {
                // A session opened somewhere: every partition is due by its expiry.
                Some(t) => next.iter_mut().for_each(|d| *d = Some(d.map_or(t, |d| d.min(t)))),
                // Cut off (or a payload we do not know): look everywhere now.
                None => {
                    opened = store.subscribe(names::SESSIONS_CHANNEL);
                    next.iter_mut().for_each(|d| *d = Some(0));
                }
            },
            () = sleep => {}
        }
    }
}
