//! A site's life: [`create`] writes its routes and its mailboxes; a
//! [`Site`] runs its wwd — with a credential scoped to its mailboxes, so
//! that it cannot reach the namespace, the files or the procs — and the
//! pool of workers serving it, grown and shrunk by wwd's load reports; it
//! starts another wwd (and pool) when one exits, and [`Site::stop`] evicts
//! them all. While a wwd runs, the site watches the realm's file changes
//! and the site's routes for it and tells it on its mailbox
//! ([`crate::wire::CacheNote`]), so that wwd may keep whole static answers
//! — it cannot watch itself: its credential reaches its mailboxes only.

use std::sync::{Arc, Mutex};

use tabos_client::app::{spawn_watched, unique_pid};
use tabos_client::proto;
use tabos_client::retry::Backoff;
use tabos_client::Client;
use tokio::sync::mpsc;

use crate::pool::Pool;
use crate::route::Routes;
use crate::{Error, Layout, Result};

/// Most wwds a site starts in all (replacements included).
pub const SPAWNS_MAX: u64 = 10_000;
/// The request mailbox's bound, in bytes.
pub const REQUESTS_BYTES_MAX: i64 = 64 << 20;
/// The load mailbox's bound, in bytes: a few minutes of reports, should
/// the supervisor be away.
pub const LOAD_BYTES_MAX: i64 = 64 << 10;

pub use tabos_client::app::Program;

/// Creates (or updates) site `site`: its routes, its request mailbox and
/// its load mailbox.
pub async fn create(client: &Client, realm: &str, site: &str, routes: &Routes) -> Result<()> {
    routes.check()?;
    let layout = Layout::new(site)?;
    let mut c = client.clone();
    c.name_mkdir_all(realm, &layout.root()).await?;
    c.name_set(realm, &layout.routes(), routes.to_json(), None, None)
        .await?;
    for (mailbox, bytes) in [
        (layout.requests(), REQUESTS_BYTES_MAX),
        (layout.load(), LOAD_BYTES_MAX),
    ] {
        match c.create_mailbox(realm, &mailbox, bytes, None).await {
            Ok(()) => {}
            Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// How long wwd may keep answers on one word from the site's watch; the
/// site renews it every third of that.
pub const CACHE_LEASE: std::time::Duration = std::time::Duration::from_secs(10);
/// Most changes one note to wwd carries (a path is at most 1 KiB, so a
/// note stays well within a message); more (a burst of changes) is told
/// as "drop every answer".
pub const CACHE_NOTE_CHANGES_MAX: usize = 256;

/// The pool serving the current wwd, shared with the load reader.
type Current = Arc<Mutex<Option<Arc<Pool>>>>;

/// A running site: its wwd and the pool of workers serving it.
pub struct Site {
    client: Client,
    realm: String,
    site: String,
    program: Program,
    listen: String,
    /// wwd serves HTTPS with it (sent to its mailbox at each start).
    tls: Option<crate::wire::TlsMaterial>,
    min: u32,
    max: u32,
    spawned: u64,
    wwd: Option<String>,
    /// When the wwd was started, and the wait before starting it again.
    started: tokio::time::Instant,
    backoff: tabos_client::app::RestartBackoff,
    exits: mpsc::UnboundedSender<String>,
    exited: mpsc::UnboundedReceiver<String>,
    pool: Current,
    /// Reads wwd's load reports; stopped with the site.
    reader: tokio::task::JoinHandle<()>,
    /// Tells the current wwd of the realm's file changes.
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Site {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
    }
}

/// Hands each of wwd's load reports to the current pool.
async fn read_load(client: Client, realm: String, mailbox: String, pool: Current) {
    let mut pauses = Backoff::new(crate::wwd::PAUSE_FIRST, crate::wwd::PAUSE_MAX);
    loop {
        let mut c = client.clone();
        if let Ok(mut s) = c.recv_stream(&realm, &mailbox, 64).await {
            pauses.reset();
            while let Ok(Some(batch)) = s.message().await {
                // The latest report of a batch is the one that counts.
                let peak = batch
                    .messages
                    .iter()
                    .rev()
                    .find_map(|m| std::str::from_utf8(&m.payload).ok()?.parse::<usize>().ok());
                let current = pool.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let (Some(peak), Some(p)) = (peak, current) {
                    p.load(peak);
                }
            }
        }
        pauses.wait().await;
    }
}

/// Tells wwd's mailbox `to` of the realm's file changes and of changes
/// under the site's directory `root` (its routes), for as long as the site
/// runs it: a lease while both watches are up, what changed as it
/// changes, and `Off` when a watch ends (then watches again).
async fn tell_changes(client: Client, realm: String, root: String, to: String) {
    use crate::wire::{encode, CacheChange, CacheNote};
    let note = |change: CacheChange| encode(&CacheNote { cache: change }, b"");
    let mut pauses = Backoff::new(std::time::Duration::from_millis(100), CACHE_LEASE);
    loop {
        let mut c = client.clone();
        let watched = async {
            let mut files = c.clone().fs_watch(&realm, crate::FS_USER).await?;
            let mut routes = c
                .clone()
                .watch(&realm, &root, tabos_client::names::WatchMode::Dir)
                .await?;
            // Each stream's first message says it watches.
            files.message().await?;
            routes.message().await?;
            let mut renew = tokio::time::interval(CACHE_LEASE / 3);
            loop {
                let change = tokio::select! {
                    _ = renew.tick() => CacheChange::Watching {
                        lease_ms: CACHE_LEASE.as_millis() as u64,
                    },
                    m = files.message() => {
                        let Some(m) = m? else { break };
                        let (mut ids, mut paths) = (Vec::new(), Vec::new());
                        for ch in m.changes {
                            match ch.kind() {
                                proto::FsChangeKind::Name => paths.push(ch.path),
                                _ => ids.push(ch.id),
                            }
                        }
                        if ids.len() + paths.len() > CACHE_NOTE_CHANGES_MAX {
                            CacheChange::DropAll
                        } else {
                            CacheChange::Changed { ids, paths }
                        }
                    }
                    m = routes.message() => {
                        if m?.is_none() {
                            break;
                        }
                        CacheChange::DropAll
                    }
                };
                c.send(&realm, "", &to, note(change)).await?;
                pauses.reset();
            }
            Ok::<(), tabos_client::Error>(())
        };
        let _ = watched.await;
        // Unwatched: wwd keeps nothing until the watches are back.
        let _ = c.send(&realm, "", &to, note(CacheChange::Off)).await;
        pauses.wait().await;
    }
}

/// Plain HTTP only on loopback: beyond it, what visitors send and get
/// crosses the network readable (as `tabos up` refuses for its own).
fn refuse_plaintext_beyond_loopback(listen: &str) -> Result<()> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = listen
        .to_socket_addrs()
        .map_err(|e| Error::Invalid(format!("{listen:?} is not host:port: {e}")))?
        .collect();
    if addrs.is_empty() || addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(Error::Invalid(format!(
            "refusing to serve plain HTTP on {listen}: beyond loopback, give a certificate \
             (--tls-cert and --tls-key), or listen on 127.0.0.1:PORT"
        )));
    }
    Ok(())
}

impl Site {
    /// Starts site `site`'s wwd on `listen` — HTTPS with `tls`, which a
    /// listener beyond loopback must have —, with `min..=max` workers.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        client: &Client,
        realm: &str,
        site: &str,
        program: Program,
        listen: &str,
        tls: Option<crate::wire::TlsMaterial>,
        min: u32,
        max: u32,
    ) -> Result<Site> {
        let layout = Layout::new(site)?;
        if tls.is_none() {
            refuse_plaintext_beyond_loopback(listen)?;
        }
        if min == 0 || min > max || max > crate::pool::WORKERS_MAX {
            return Err(Error::Invalid(format!(
                "workers must satisfy 1 <= min <= max <= {}",
                crate::pool::WORKERS_MAX
            )));
        }
        // wwd listens where browsers connect: on the host's network.
        let (name, allowed) = tabos_client::app::host_network(client, realm).await?;
        if !allowed {
            return Err(Error::Invalid(tabos_client::app::host_network_refusal(
                &name,
                &format!("wwd must listen on {listen}"),
            )));
        }
        let (exits, exited) = mpsc::unbounded_channel();
        let pool: Current = Default::default();
        let reader = tokio::spawn(read_load(
            client.clone(),
            realm.to_string(),
            layout.load(),
            pool.clone(),
        ));
        let mut s = Site {
            client: client.clone(),
            realm: realm.into(),
            site: site.into(),
            program,
            listen: listen.into(),
            tls,
            min,
            max,
            spawned: 0,
            wwd: None,
            started: tokio::time::Instant::now(),
            backoff: Default::default(),
            exits,
            exited,
            pool,
            reader,
            watcher: None,
        };
        s.fill().await?;
        Ok(s)
    }

    /// Starts the wwd, and a pool for it, if it is not running.
    async fn fill(&mut self) -> Result<()> {
        if self.wwd.is_some() {
            return Ok(());
        }
        if self.spawned >= SPAWNS_MAX {
            return Err(Error::Invalid(format!("{SPAWNS_MAX} wwds started already")));
        }
        self.spawned += 1;
        let pid = unique_pid(&format!("www-{}-wwd", self.site), self.spawned);
        let layout = Layout::new(&self.site)?;
        let mut args = self.program.args.clone();
        args.extend(["wwd".to_string(), self.site.clone(), self.listen.clone()]);
        if self.tls.is_some() {
            args.push("--tls".into());
        }
        let p = proto::ProcDescriptor {
            pid: pid.clone(),
            kind: proto::ProcKind::Native.into(),
            class: proto::ProcClass::Lc.into(),
            program: self.program.path.clone(),
            args,
            cores: Some(1),
            // Its mailboxes and nothing else (σOS: wwd runs without the
            // namespace); the node refuses it everything more.
            scope: layout.wwd_scope(&pid),
            ..Default::default()
        };
        spawn_watched(&self.client, &self.realm, p, self.exits.clone()).await?;
        if let Some(tls) = &self.tls {
            let payload = crate::wire::encode(tls, b"");
            self.client
                .clone()
                .send(&self.realm, "", &format!("proc/{pid}"), payload)
                .await?;
        }
        self.started = tokio::time::Instant::now();
        self.wwd = Some(pid.clone());
        if let Some(w) = self.watcher.replace(tokio::spawn(tell_changes(
            self.client.clone(),
            self.realm.clone(),
            layout.root(),
            format!("proc/{pid}"),
        ))) {
            w.abort();
        }
        let pool = Pool::new(
            &self.client,
            &self.realm,
            &self.site,
            &pid,
            self.program.clone(),
            self.min,
            self.max,
        )?;
        *self.pool.lock().unwrap_or_else(|e| e.into_inner()) = Some(pool.clone());
        pool.start().await
    }

    /// Retires the current pool (its wwd is gone or going).
    fn retire_pool(&self) {
        if let Some(p) = self.pool.lock().unwrap_or_else(|e| e.into_inner()).take() {
            p.retire();
        }
    }

    /// The wwd's pid.
    pub fn wwd(&self) -> Option<&str> {
        self.wwd.as_deref()
    }

    /// The live workers (the wwd's children), by SQL.
    pub async fn workers(&self) -> Result<Vec<String>> {
        let Some(wwd) = &self.wwd else {
            return Ok(Vec::new());
        };
        let rows = self
            .client
            .clone()
            .sql_in(
                &self.realm,
                "SELECT pid FROM proc WHERE parent_pid = $1 AND state IN ('spawned', 'claimed', 'running') ORDER BY pid",
                vec![tabos_client::Value::Text(wwd.clone())],
                0,
            )
            .await?;
        Ok(rows
            .rows
            .into_iter()
            .filter_map(|r| match r.into_iter().next().flatten() {
                Some(tabos_client::Value::Text(p)) => Some(p),
                _ => None,
            })
            .collect())
    }

    /// Waits for the wwd to exit and starts another; returns the pid that
    /// exited.
    pub async fn replace_next(&mut self) -> Result<String> {
        let pid = self
            .exited
            .recv()
            .await
            .ok_or_else(|| Error::Invalid("the site's channel closed".into()))?;
        if self.wwd.as_deref() == Some(pid.as_str()) {
            self.wwd = None;
            // Its workers leave with it; the next wwd gets a pool of its
            // own.
            self.retire_pool();
            // A wwd that cannot start (its port taken) is not restarted
            // in a tight loop.
            let lived = self.started.elapsed();
            let wait = self.backoff.after_exit(lived);
            if !wait.is_zero() {
                // Why it could not start is in its stderr: its last line.
                let why = match self
                    .client
                    .clone()
                    .logs(&self.realm, &pid, proto::LogStream::Stderr)
                    .await
                {
                    Ok(l) => String::from_utf8_lossy(&l.data)
                        .lines()
                        .last()
                        .unwrap_or_default()
                        .to_string(),
                    Err(_) => String::new(),
                };
                eprintln!("wwd {pid} exited after {lived:?} ({why}); starting another in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
        self.fill().await?;
        Ok(pid)
    }

    /// Evicts the wwd and its workers and waits for them to exit.
    pub async fn stop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
        self.retire_pool();
        let workers = self.workers().await.unwrap_or_default();
        let mut c = self.client.clone();
        let pids: Vec<String> = self.wwd.take().into_iter().chain(workers).collect();
        for p in &pids {
            let _ = c.evict(&self.realm, p).await;
        }
        for p in &pids {
            let _ = c.wait_exit(&self.realm, p).await;
        }
    }
}
