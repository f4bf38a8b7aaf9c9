//! A site's life: [`create`] writes its routes and its request mailbox; a
//! [`Site`] runs its wwd and its pool of workers, starting another when
//! one exits, and [`Site::stop`] evicts them.

use tabos_client::proto;
use tabos_client::Client;
use tokio::sync::mpsc;

use crate::route::Routes;
use crate::{Error, Layout, Result};

/// Most workers a site runs.
pub const WORKERS_MAX: u32 = 64;
/// Most procs a site starts in all (replacements included).
pub const SPAWNS_MAX: u64 = 10_000;
/// The request mailbox's bound, in bytes.
pub const REQUESTS_BYTES_MAX: i64 = 64 << 20;

/// What a site's procs run: a program and the arguments before the role
/// (e.g. the `tabos` binary and `www-task`).
#[derive(Debug, Clone)]
pub struct Program {
    pub path: String,
    pub args: Vec<String>,
}

/// Creates (or updates) site `site`: its routes and its request mailbox.
pub async fn create(client: &Client, realm: &str, site: &str, routes: &Routes) -> Result<()> {
    routes.check()?;
    let layout = Layout::new(site)?;
    let mut c = client.clone();
    c.name_mkdir_all(realm, &layout.root()).await?;
    c.name_set(realm, &layout.routes(), routes.to_json(), None, None)
        .await?;
    match c
        .create_mailbox(realm, &layout.requests(), REQUESTS_BYTES_MAX, None)
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A running site: its wwd and workers.
pub struct Site {
    client: Client,
    realm: String,
    site: String,
    program: Program,
    listen: String,
    workers: u32,
    spawned: u64,
    wwd: Option<String>,
    pool: Vec<String>,
    exits: mpsc::UnboundedSender<String>,
    exited: mpsc::UnboundedReceiver<String>,
}

impl Site {
    /// Starts site `site`'s wwd on `listen` and `workers` workers.
    pub async fn start(
        client: &Client,
        realm: &str,
        site: &str,
        program: Program,
        listen: &str,
        workers: u32,
    ) -> Result<Site> {
        Layout::new(site)?;
        if workers == 0 || workers > WORKERS_MAX {
            return Err(Error::Invalid(format!("workers must be 1..={WORKERS_MAX}")));
        }
        let (exits, exited) = mpsc::unbounded_channel();
        let mut s = Site {
            client: client.clone(),
            realm: realm.into(),
            site: site.into(),
            program,
            listen: listen.into(),
            workers,
            spawned: 0,
            wwd: None,
            pool: Vec::new(),
            exits,
            exited,
        };
        s.fill().await?;
        Ok(s)
    }

    /// Starts what is missing: the wwd, workers.
    pub async fn fill(&mut self) -> Result<()> {
        if self.wwd.is_none() {
            let args = vec!["wwd".to_string(), self.site.clone(), self.listen.clone()];
            self.wwd = Some(self.spawn("wwd", args, "LC", 1).await?);
        }
        while self.pool.len() < self.workers as usize {
            let args = vec!["worker".to_string(), self.site.clone()];
            let pid = self.spawn("worker", args, "BE", 1).await?;
            self.pool.push(pid);
        }
        Ok(())
    }

    async fn spawn(
        &mut self,
        what: &str,
        role: Vec<String>,
        class: &str,
        cores: i64,
    ) -> Result<String> {
        if self.spawned >= SPAWNS_MAX {
            return Err(Error::Invalid(format!(
                "{SPAWNS_MAX} procs started already"
            )));
        }
        self.spawned += 1;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        let pid = format!("www-{}-{what}-{stamp}-{}", self.site, self.spawned);
        let mut args = self.program.args.clone();
        args.extend(role);
        let p = proto::ProcDescriptor {
            pid: pid.clone(),
            kind: "native".into(),
            class: class.into(),
            program: self.program.path.clone(),
            args,
            cores: Some(cores),
            ..Default::default()
        };
        let mut c = self.client.clone();
        c.spawn(&self.realm, p).await?;
        let (tx, realm, p) = (self.exits.clone(), self.realm.clone(), pid.clone());
        tokio::spawn(async move {
            let _ = c.wait_exit(&realm, &p).await;
            let _ = tx.send(p);
        });
        Ok(pid)
    }

    /// The wwd's pid.
    pub fn wwd(&self) -> Option<&str> {
        self.wwd.as_deref()
    }

    /// The workers' pids.
    pub fn workers(&self) -> &[String] {
        &self.pool
    }

    /// Waits for one of its procs to exit, starts another; returns the pid
    /// that exited.
    pub async fn replace_next(&mut self) -> Result<String> {
        let pid = self
            .exited
            .recv()
            .await
            .ok_or_else(|| Error::Invalid("the site's channel closed".into()))?;
        if self.wwd.as_deref() == Some(pid.as_str()) {
            self.wwd = None;
        }
        self.pool.retain(|p| *p != pid);
        self.fill().await?;
        Ok(pid)
    }

    /// Evicts its procs and waits for them to exit.
    pub async fn stop(&mut self) {
        let mut c = self.client.clone();
        let pids: Vec<String> = self
            .wwd
            .take()
            .into_iter()
            .chain(self.pool.drain(..))
            .collect();
        for p in &pids {
            let _ = c.evict(&self.realm, p).await;
        }
        for p in &pids {
            let _ = c.wait_exit(&self.realm, p).await;
        }
    }
}
