//! The namespace from the client side: the `Names` calls, and on top of
//! them σOS's client libraries — [`Session`] (a lease kept alive in the
//! background), [`Election`] (leader election by an ephemeral symlink plus
//! an epoch and a fence), [`Semaphore`] (WaitStart/WaitExit-style waits) and
//! [`Group`] (membership as ephemeral entries in a directory).
//!
//! Symlinks are followed here, as σOS's client libraries do: the node
//! never resolves a path through a symlink (it answers MOUNTED with the
//! symlink, its target and the rest of the path), and `name_get`,
//! `name_set`, `name_create`, `name_remove` and `name_readdir` go on at
//! the target — a path target (`/svc/db-v2`) on the same node, an
//! endpoint (`host:port`) on the node there, with this client's
//! credential — at most [`HOPS_MAX`] times. An endpoint is followed only
//! when it is a node of the cluster this client's credential may list
//! (`ListNodes`): a symlink anyone could write must not send the
//! credential elsewhere; any other endpoint, or one met by a fenced call
//! (its fence names a directory of this namespace), comes back as the
//! MOUNTED error for the caller to handle.

use std::time::Duration;

use crate::proto::{self, Fence, NameEntry, WatchEvent};
use crate::{Client, Error};

/// Where a path that crossed a symlink must be resolved instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The symlink the path went through.
    pub path: String,
    /// Its target: for a service, its endpoint.
    pub target: String,
    /// What is left of the path, to resolve at the target.
    pub rest: String,
}

/// Most symlinks one names call follows (then [`Error::Hops`]): a
/// namespace's chains are short, a loop is not.
pub const HOPS_MAX: usize = 8;

/// Where a path goes on past the mount point `m`: a path target on the
/// same node (the rest joined to it), or an endpoint's root and rest.
fn joined(target: &str, rest: &str) -> String {
    let base = target.trim_end_matches('/');
    match (base.is_empty(), rest.is_empty()) {
        (true, true) => "/".into(),
        (_, true) => base.into(),
        _ => format!("{base}{rest}"),
    }
}

/// `host:port` of an address given with or without a scheme.
fn bare(addr: &str) -> &str {
    addr.split_once("://")
        .map_or(addr, |(_, a)| a)
        .trim_end_matches('/')
}

impl Client {
    /// Runs `op` (one names call) on `path`, following the symlinks it
    /// meets (see the module): `op` gets the client and the path to call.
    async fn following<T, F, Fut>(&self, path: &str, fenced: bool, mut op: F) -> Result<T, Error>
    where
        F: FnMut(Client, String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let (mut c, mut at) = (self.clone(), path.to_string());
        for _ in 0..=HOPS_MAX {
            let e = match op(c.clone(), at.clone()).await {
                Err(e) => e,
                done => return done,
            };
            let Some(m) = e.mount() else {
                return Err(e);
            };
            if m.target.starts_with('/') {
                at = joined(&m.target, &m.rest);
                continue;
            }
            if fenced || !c.is_cluster_node(&m.target).await {
                return Err(e);
            }
            match c.dial(bare(&m.target)).await {
                Some(next) => c = next?,
                None => return Err(e),
            }
            at = joined("", &m.rest);
        }
        Err(Error::Hops {
            path: path.into(),
            hops: HOPS_MAX,
        })
    }

    /// Whether `endpoint` is the API address of a node this client's
    /// credential may list.
    async fn is_cluster_node(&self, endpoint: &str) -> bool {
        let want = bare(endpoint);
        match self.clone().list_nodes().await {
            Ok(nodes) => nodes
                .iter()
                .any(|n| !n.address.is_empty() && bare(&n.address) == want),
            Err(_) => false,
        }
    }
}

/// How to create an entry.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    pub owner: String,
    /// 0 for the default, 0644.
    pub mode: i64,
    /// Make the entry ephemeral: removed when this session ends.
    pub session: Option<String>,
    pub fence: Option<Fence>,
}

pub use crate::proto::WatchMode;

fn name_request(realm: &str, path: &str) -> proto::NameRequest {
    proto::NameRequest {
        realm: realm.into(),
        path: path.into(),
    }
}

impl Client {
    /// Creates `path` (a directory, file or symlink), failing with
    /// "already exists" if anything is there. Returns its version (1).
    pub async fn name_create(
        &mut self,
        realm: &str,
        path: &str,
        kind: proto::NameKind,
        data: Vec<u8>,
        opts: CreateOptions,
    ) -> Result<i64, Error> {
        let fenced = opts.fence.is_some();
        self.following(path, fenced, |mut c, path| {
            let req = proto::CreateNameRequest {
                realm: realm.into(),
                path,
                kind: kind.into(),
                data: data.clone(),
                owner: opts.owner.clone(),
                mode: opts.mode,
                session: opts.session.clone().unwrap_or_default(),
                fence: opts.fence.clone(),
            };
            async move { Ok(c.names.create(req).await?.into_inner().version) }
        })
        .await
    }

    /// Creates `path` and any missing directories above it, as directories;
    /// existing ones are fine.
    pub async fn name_mkdir_all(&mut self, realm: &str, path: &str) -> Result<(), Error> {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            let made = self
                .name_create(
                    realm,
                    &at,
                    proto::NameKind::Dir,
                    Vec::new(),
                    CreateOptions::default(),
                )
                .await;
            match made {
                Ok(_) => {}
                Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Put: sets a file's data, creating it if needed; with `if_version`
    /// only at that version (0: only if it does not exist). Returns the new
    /// version.
    pub async fn name_set(
        &mut self,
        realm: &str,
        path: &str,
        data: Vec<u8>,
        if_version: Option<i64>,
        fence: Option<Fence>,
    ) -> Result<i64, Error> {
        self.following(path, fence.is_some(), |mut c, path| {
            let req = proto::SetNameRequest {
                realm: realm.into(),
                path,
                data: data.clone(),
                if_version,
                fence: fence.clone(),
            };
            async move { Ok(c.names.set(req).await?.into_inner().version) }
        })
        .await
    }

    /// The entry at `path` (stat and read in one).
    pub async fn name_get(&mut self, realm: &str, path: &str) -> Result<NameEntry, Error> {
        self.following(path, false, |mut c, path| async move {
            Ok(c.names.get(name_request(realm, &path)).await?.into_inner())
        })
        .await
    }

    /// Removes `path` (a directory only when empty), optionally only at a
    /// version.
    pub async fn name_remove(
        &mut self,
        realm: &str,
        path: &str,
        if_version: Option<i64>,
        fence: Option<Fence>,
    ) -> Result<(), Error> {
        self.following(path, fence.is_some(), |mut c, path| {
            let req = proto::RemoveNameRequest {
                realm: realm.into(),
                path,
                if_version,
                fence: fence.clone(),
            };
            async move {
                c.names.remove(req).await?;
                Ok(())
            }
        })
        .await
    }

    /// Renames atomically (over an existing file, not a directory).
    pub async fn name_rename(
        &mut self,
        realm: &str,
        from: &str,
        to: &str,
        fence: Option<Fence>,
    ) -> Result<(), Error> {
        self.names
            .rename(proto::RenameNameRequest {
                realm: realm.into(),
                from: from.into(),
                to: to.into(),
                fence,
            })
            .await?;
        Ok(())
    }

    /// A directory's entries, its version, and whether it had more.
    pub async fn name_readdir(
        &mut self,
        realm: &str,
        path: &str,
    ) -> Result<proto::ReadDirResponse, Error> {
        self.following(path, false, |mut c, path| async move {
            Ok(c.names
                .read_dir(name_request(realm, &path))
                .await?
                .into_inner())
        })
        .await
    }

    /// AdvanceEpoch: increments the epoch file at `path`; returns the new epoch.
    pub async fn advance_epoch(&mut self, realm: &str, path: &str) -> Result<i64, Error> {
        Ok(self
            .names
            .advance_epoch(name_request(realm, path))
            .await?
            .into_inner()
            .epoch)
    }

    /// FenceAtEpoch: raises `fence.dir` to `fence.epoch`, after which every
    /// request carrying an older epoch for it is refused ("stale epoch").
    pub async fn fence(&mut self, realm: &str, fence: Fence) -> Result<(), Error> {
        self.names
            .fence(proto::FenceRequest {
                realm: realm.into(),
                fence: Some(fence),
            })
            .await?;
        Ok(())
    }

    /// Opens a session (empty `session`: the node names it) with a TTL.
    pub async fn open_session(
        &mut self,
        realm: &str,
        session: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<proto::SessionResponse, Error> {
        Ok(self
            .names
            .open_session(proto::OpenSessionRequest {
                realm: realm.into(),
                session: session.into(),
                owner: owner.into(),
                ttl_ms: ttl.as_millis().min(i64::MAX as u128) as i64,
            })
            .await?
            .into_inner())
    }

    /// Renews a live session for another TTL; returns its new expiry.
    pub async fn renew_session(&mut self, realm: &str, session: &str) -> Result<i64, Error> {
        Ok(self
            .names
            .renew_session(proto::SessionRequest {
                realm: realm.into(),
                session: session.into(),
            })
            .await?
            .into_inner()
            .expires_us)
    }

    /// Closes a session, removing its ephemeral entries; returns how many.
    pub async fn close_session(&mut self, realm: &str, session: &str) -> Result<u64, Error> {
        Ok(self
            .names
            .close_session(proto::SessionRequest {
                realm: realm.into(),
                session: session.into(),
            })
            .await?
            .into_inner()
            .removed)
    }

    /// A watch as a stream of events (see [`WatchMode`]).
    pub async fn watch(
        &mut self,
        realm: &str,
        path: &str,
        mode: WatchMode,
    ) -> Result<tonic::Streaming<WatchEvent>, Error> {
        Ok(self
            .names
            .watch(proto::WatchRequest {
                realm: realm.into(),
                path: path.into(),
                mode: mode.into(),
            })
            .await?
            .into_inner())
    }

    /// OpenWatch: waits until `path` exists; returns the entry.
    pub async fn wait_exists(&mut self, realm: &str, path: &str) -> Result<NameEntry, Error> {
        let mut s = self.watch(realm, path, WatchMode::Exists).await?;
        match s.message().await? {
            Some(ev) => ev
                .entry
                .ok_or_else(|| Error::Status(tonic::Status::internal("exists without an entry"))),
            None => Err(Error::Status(tonic::Status::unavailable(
                "the watch ended without an event",
            ))),
        }
    }

    /// SetRemoveWatch: waits until `path` does not exist.
    pub async fn wait_removed(&mut self, realm: &str, path: &str) -> Result<(), Error> {
        let mut s = self.watch(realm, path, WatchMode::Removed).await?;
        match s.message().await? {
            Some(_) => Ok(()),
            None => Err(Error::Status(tonic::Status::unavailable(
                "the watch ended without an event",
            ))),
        }
    }
}

/// A session kept alive by a background task that renews it every third of
/// its TTL. [`lost`](Session::lost) completes if a renewal is refused — the
/// session lapsed (e.g. the process was paused) and its ephemeral entries
/// are gone. Dropping the session stops renewing (it then lapses); call
/// [`close`](Session::close) to end it at once.
#[derive(Debug)]
pub struct Session {
    realm: String,
    id: String,
    client: Client,
    renewer: tokio::task::JoinHandle<()>,
    lost: tokio::sync::watch::Receiver<bool>,
    /// Until when the session surely lives: the instant its last
    /// successful open or renewal was *sent*, plus the TTL. (The node
    /// expires it no earlier, so a holder of its ephemeral entries may act
    /// on them — serve reads as a leader — until then.)
    valid_until: std::sync::Arc<std::sync::Mutex<tokio::time::Instant>>,
}

impl Session {
    /// Opens a session for `owner` with `ttl` and starts renewing it.
    pub async fn open(
        client: &Client,
        realm: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Session, Error> {
        let mut c = client.clone();
        let sent = tokio::time::Instant::now();
        let id = c.open_session(realm, "", owner, ttl).await?.session;
        let valid_until = std::sync::Arc::new(std::sync::Mutex::new(sent + ttl));
        let (tell, lost) = tokio::sync::watch::channel(false);
        let (mut rc, r, i) = (c.clone(), realm.to_string(), id.clone());
        let valid = valid_until.clone();
        let renewer = tokio::spawn(async move {
            let mut tick = tokio::time::interval(ttl / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let sent = tokio::time::Instant::now();
                match rc.renew_session(&r, &i).await {
                    Ok(_) => *valid.lock().unwrap_or_else(|e| e.into_inner()) = sent + ttl,
                    // Gone: lapsed or closed. Anything else (the node is
                    // briefly unreachable) is retried at the next tick.
                    Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                        let _ = tell.send(true);
                        return;
                    }
                    Err(_) => {}
                }
            }
        });
        Ok(Session {
            realm: realm.into(),
            id,
            client: c,
            renewer,
            lost,
            valid_until,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Until when the session surely lives (see the field); in the past
    /// once renewals have failed for a TTL.
    pub fn valid_until(&self) -> tokio::time::Instant {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes once the session is known to be gone.
    pub async fn lost(&self) {
        let mut l = self.lost.clone();
        let _ = l.wait_for(|lost| *lost).await;
    }

    /// Ends the session now, removing its ephemeral entries.
    pub async fn close(mut self) -> Result<u64, Error> {
        self.renewer.abort();
        self.client.close_session(&self.realm, &self.id).await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// Leader election in directory `dir` (σOS thesis section 4.3): the leader
/// is whoever holds the ephemeral symlink `dir/leader` (its target names the
/// leader); on winning, the leader advances the epoch file `dir/epoch` and
/// fences directory `fenced` at the new epoch, and then carries
/// [`Leadership::fence`] on every write under `fenced`. A leader whose
/// session lapsed — even one paused and still believing it leads — has its
/// writes refused with "stale epoch" once a successor has fenced.
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    realm: String,
    dir: String,
    fenced: String,
}

/// What winning an election gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    pub epoch: i64,
    /// Carry this on every write under the fenced directory.
    pub fence: Fence,
}

impl Election {
    pub fn new(client: &Client, realm: &str, dir: &str, fenced: &str) -> Election {
        Election {
            client: client.clone(),
            realm: realm.into(),
            dir: dir.into(),
            fenced: fenced.into(),
        }
    }

    fn leader_path(&self) -> String {
        format!("{}/leader", self.dir)
    }

    /// Campaigns until elected: returns when `session` holds the leader
    /// symlink, with the new epoch and its fence.
    pub async fn campaign(&self, session: &Session, me: &str) -> Result<Leadership, Error> {
        let mut c = self.client.clone();
        c.name_mkdir_all(&self.realm, &self.dir).await?;
        c.name_mkdir_all(&self.realm, &self.fenced).await?;
        let leader = self.leader_path();
        loop {
            let opts = CreateOptions {
                session: Some(session.id().to_string()),
                ..CreateOptions::default()
            };
            let won = c
                .name_create(
                    &self.realm,
                    &leader,
                    proto::NameKind::Symlink,
                    me.as_bytes().to_vec(),
                    opts,
                )
                .await;
            match won {
                Ok(_) => break,
                Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {
                    c.wait_removed(&self.realm, &leader).await?;
                }
                Err(e) => return Err(e),
            }
        }
        let epoch = c
            .advance_epoch(&self.realm, &format!("{}/epoch", self.dir))
            .await?;
        let fence = Fence {
            dir: self.fenced.clone(),
            epoch,
        };
        c.fence(&self.realm, fence.clone()).await?;
        Ok(Leadership { epoch, fence })
    }

    /// Who leads now (the leader symlink's target), if anyone.
    pub async fn leader(&self) -> Result<Option<String>, Error> {
        match self
            .client
            .clone()
            .name_get(&self.realm, &self.leader_path())
            .await
        {
            Ok(e) => Ok(Some(String::from_utf8_lossy(&e.data).into_owned())),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Steps down: removes the leader symlink if `session` still holds it.
    pub async fn resign(&self, session: &Session) -> Result<(), Error> {
        let mut c = self.client.clone();
        let e = match c.name_get(&self.realm, &self.leader_path()).await {
            Ok(e) => e,
            Err(e) if e.code() == Some(tonic::Code::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        if e.session != session.id() {
            return Ok(());
        }
        match c
            .name_remove(&self.realm, &self.leader_path(), Some(e.version), None)
            .await
        {
            Err(e) if e.code() != Some(tonic::Code::NotFound) => Err(e),
            _ => Ok(()),
        }
    }
}

/// A σOS semaphore: a file that exists while the semaphore is down-able.
/// [`init`](Semaphore::init) creates it, [`down`](Semaphore::down) waits
/// until it is removed, [`up`](Semaphore::up) removes it — e.g. a parent
/// inits "child started", the child ups it, the parent downs it.
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    realm: String,
    path: String,
}

impl Semaphore {
    pub fn new(client: &Client, realm: &str, path: &str) -> Semaphore {
        Semaphore {
            client: client.clone(),
            realm: realm.into(),
            path: path.into(),
        }
    }

    /// Creates the semaphore (fails if it already exists).
    pub async fn init(&self) -> Result<(), Error> {
        self.client
            .clone()
            .name_create(
                &self.realm,
                &self.path,
                proto::NameKind::File,
                Vec::new(),
                CreateOptions::default(),
            )
            .await
            .map(|_| ())
    }

    /// Releases every waiter.
    pub async fn up(&self) -> Result<(), Error> {
        self.client
            .clone()
            .name_remove(&self.realm, &self.path, None, None)
            .await
    }

    /// Waits until the semaphore is up (returns at once if it already is).
    pub async fn down(&self) -> Result<(), Error> {
        self.client
            .clone()
            .wait_removed(&self.realm, &self.path)
            .await
    }
}

/// Group membership: each member is an ephemeral file `dir/<member>` whose
/// data is the member's own (e.g. its address); it leaves the group when it
/// leaves or when its session ends.
#[derive(Debug, Clone)]
pub struct Group {
    client: Client,
    realm: String,
    dir: String,
}

impl Group {
    pub fn new(client: &Client, realm: &str, dir: &str) -> Group {
        Group {
            client: client.clone(),
            realm: realm.into(),
            dir: dir.into(),
        }
    }

    fn member_path(&self, member: &str) -> String {
        format!("{}/{member}", self.dir)
    }

    /// Joins as `member`, held by `session`.
    pub async fn join(&self, session: &Session, member: &str, data: Vec<u8>) -> Result<(), Error> {
        let mut c = self.client.clone();
        c.name_mkdir_all(&self.realm, &self.dir).await?;
        let opts = CreateOptions {
            session: Some(session.id().to_string()),
            ..CreateOptions::default()
        };
        c.name_create(
            &self.realm,
            &self.member_path(member),
            proto::NameKind::File,
            data,
            opts,
        )
        .await
        .map(|_| ())
    }

    pub async fn leave(&self, member: &str) -> Result<(), Error> {
        self.client
            .clone()
            .name_remove(&self.realm, &self.member_path(member), None, None)
            .await
    }

    /// The members now (name and data), and the directory's version.
    pub async fn members(&self) -> Result<(Vec<(String, Vec<u8>)>, i64), Error> {
        let d = self
            .client
            .clone()
            .name_readdir(&self.realm, &self.dir)
            .await?;
        let prefix = format!("{}/", self.dir);
        let members = d
            .entries
            .into_iter()
            .map(|e| {
                let name = e.path.strip_prefix(&prefix).unwrap_or(&e.path).to_string();
                (name, e.data)
            })
            .collect();
        Ok((members, d.version))
    }

    /// Joins and leaves as they happen (a directory watch).
    pub async fn watch(&self) -> Result<tonic::Streaming<WatchEvent>, Error> {
        self.client
            .clone()
            .watch(&self.realm, &self.dir, WatchMode::Dir)
            .await
    }
}
