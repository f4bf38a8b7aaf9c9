//! A service's life: [`create`] writes its first config and its policy; a
//! [`Supervisor`] keeps its balancer procs running (one leads, the others
//! stand by; one that exits is replaced) — and the leading balancer keeps
//! the kvds running; [`stop`] evicts them all; [`status`] tells what
//! serves what.

use std::time::Duration;

use serde::Serialize;
use tabos_client::app::{spawn_watched, unique_pid};
use tabos_client::names::Group;
use tabos_client::proto;
use tabos_client::Client;
use tokio::sync::mpsc;

use crate::config::{Config, Layout, Policy};
use crate::kvd::Load;
use crate::{Error, Result};

/// Most balancers a service runs.
pub const BALANCERS_MAX: u32 = 4;
/// Most balancers a supervisor starts in all (replacements included), so
/// one that cannot start is not started forever.
pub const SPAWNS_MAX: u64 = 1_000;

pub use tabos_client::app::Program;

/// Creates service `svc` with `shards` shards over `groups` groups (or
/// finds the one that exists: its config is returned as it is), and sets
/// its policy.
pub async fn create(
    client: &Client,
    realm: &str,
    svc: &str,
    shards: u32,
    groups: u32,
    policy: &Policy,
) -> Result<Config> {
    policy.check()?;
    let layout = Layout::new(svc)?;
    // kvds listen where clerks and the Redis front end connect: on the
    // host's network.
    let (name, allowed) = tabos_client::app::host_network(client, realm).await?;
    if !allowed {
        return Err(Error::Invalid(tabos_client::app::host_network_refusal(
            &name,
            "its kvds must listen where clients connect",
        )));
    }
    let mut c = client.clone();
    let config = Config::initial(shards, groups)?;
    c.name_mkdir_all(realm, &layout.groups()).await?;
    c.name_set(realm, &layout.policy(), policy.to_json(), None, None)
        .await?;
    // The password, once: a service keeps the one it was created with.
    let password = crate::config::new_password()?.into_bytes();
    match c
        .name_set(realm, &layout.password(), password, Some(0), None)
        .await
    {
        Ok(_) => {}
        Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => {}
        Err(e) => return Err(e.into()),
    }
    match c
        .name_set(realm, &layout.config(), config.to_json(), Some(0), None)
        .await
    {
        Ok(_) => Ok(config),
        Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => Ok(Config::from_json(
            &c.name_get(realm, &layout.config()).await?.data,
        )?),
        Err(e) => Err(e.into()),
    }
}

/// Keeps a service's balancers running.
pub struct Supervisor {
    client: Client,
    realm: String,
    svc: String,
    program: Program,
    count: u32,
    spawned: u64,
    live: Vec<String>,
    /// When each live balancer was started, and the wait before starting
    /// one again after a quick exit.
    started: std::collections::HashMap<String, tokio::time::Instant>,
    backoff: tabos_client::app::RestartBackoff,
    exits: mpsc::UnboundedSender<String>,
    exited: mpsc::UnboundedReceiver<String>,
}

impl Supervisor {
    pub fn new(
        client: &Client,
        realm: &str,
        svc: &str,
        program: Program,
        count: u32,
    ) -> Result<Supervisor> {
        Layout::new(svc)?;
        if count == 0 || count > BALANCERS_MAX {
            return Err(Error::Invalid(format!(
                "balancers must be 1..={BALANCERS_MAX}"
            )));
        }
        let (exits, exited) = mpsc::unbounded_channel();
        Ok(Supervisor {
            client: client.clone(),
            realm: realm.into(),
            svc: svc.into(),
            program,
            count,
            spawned: 0,
            live: Vec::new(),
            started: Default::default(),
            backoff: Default::default(),
            exits,
            exited,
        })
    }

    /// The balancers alive now.
    pub fn live(&self) -> &[String] {
        &self.live
    }

    /// Starts the balancers it lacks.
    pub async fn fill(&mut self) -> Result<()> {
        while self.live.len() < self.count as usize {
            if self.spawned >= SPAWNS_MAX {
                return Err(Error::Unavailable(format!(
                    "{SPAWNS_MAX} balancers started already"
                )));
            }
            self.spawned += 1;
            let pid = unique_pid(&format!("balancer-{}", self.svc), self.spawned);
            let mut args = self.program.args.clone();
            args.extend([
                "balancer".to_string(),
                self.svc.clone(),
                self.program.path.clone(),
            ]);
            args.extend(self.program.args.iter().cloned());
            let p = proto::ProcDescriptor {
                pid: pid.clone(),
                kind: proto::ProcKind::Native.into(),
                class: proto::ProcClass::Be.into(),
                program: self.program.path.clone(),
                args,
                // Light: it mostly waits.
                cores: Some(0),
                ..Default::default()
            };
            spawn_watched(&self.client, &self.realm, p, self.exits.clone()).await?;
            self.started
                .insert(pid.clone(), tokio::time::Instant::now());
            self.live.push(pid);
        }
        Ok(())
    }

    /// Waits for one of its balancers to exit; returns its pid (the
    /// caller [`fill`](Supervisor::fill)s again).
    pub async fn exited(&mut self) -> Result<String> {
        let pid = self
            .exited
            .recv()
            .await
            .ok_or_else(|| Error::Invalid("the supervisor's channel closed".into()))?;
        self.live.retain(|p| *p != pid);
        if let Some(at) = self.started.remove(&pid) {
            // One that cannot start is not restarted in a tight loop.
            tokio::time::sleep(self.backoff.after_exit(at.elapsed())).await;
        }
        Ok(pid)
    }

    /// Evicts its balancers, then every kvd of the service.
    pub async fn stop(&mut self) -> Result<()> {
        let mut c = self.client.clone();
        for pid in &self.live {
            let _ = c.evict(&self.realm, pid).await;
        }
        for pid in std::mem::take(&mut self.live) {
            let _ = c.wait_exit(&self.realm, &pid).await;
        }
        stop_kvds(&self.client, &self.realm, &self.svc).await
    }
}

/// Evicts every kvd of the service (each group's members).
pub async fn stop_kvds(client: &Client, realm: &str, svc: &str) -> Result<()> {
    let layout = Layout::new(svc)?;
    let mut c = client.clone();
    let config = Config::from_json(&c.name_get(realm, &layout.config()).await?.data)?;
    let mut pids = Vec::new();
    for g in &config.groups {
        match Group::new(client, realm, &layout.members(*g))
            .members()
            .await
        {
            Ok((m, _)) => pids.extend(m.into_iter().map(|(pid, _)| pid)),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for pid in &pids {
        let _ = c.evict(realm, pid).await;
    }
    for pid in &pids {
        let _ = c.wait_exit(realm, pid).await;
    }
    Ok(())
}

/// A group as [`status`] sees it.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStatus {
    pub group: u32,
    /// The leading kvd's address, if one leads.
    pub leader: Option<String>,
    pub shards: Vec<u32>,
    /// The leader's last load report.
    pub load: Option<Load>,
    /// Its keys now (DBSIZE asked of its leader, as INFO and DBSIZE at
    /// the front end count them; the load report's are up to a second
    /// old), if it answered.
    pub keys: Option<i64>,
}

/// The service's config and policy, its balancer, and each group's
/// leader and load.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub service: String,
    pub config: Config,
    pub policy: Option<Policy>,
    /// The leading balancer's pid, if one leads.
    pub balancer: Option<String>,
    pub groups: Vec<GroupStatus>,
}

pub async fn status(client: &Client, realm: &str, svc: &str) -> Result<Status> {
    let layout = Layout::new(svc)?;
    let mut c = client.clone();
    let (config, _) = crate::config::read(client, realm, &layout).await?;
    let mut groups = Vec::new();
    for g in &config.groups {
        let leader = match c.name_get(realm, &layout.leader(*g)).await {
            Ok(e) => Some(String::from_utf8_lossy(&e.data).into_owned()),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => None,
            Err(e) => Err(e)?,
        };
        let load = match c.name_get(realm, &layout.load(*g)).await {
            Ok(e) => serde_json::from_slice(&e.data).ok(),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => None,
            Err(e) => Err(e)?,
        };
        groups.push(GroupStatus {
            group: *g,
            leader,
            shards: config.shards_of(*g),
            load,
            keys: None,
        });
    }
    // Each leader's count now, within a bound: a group that does not
    // answer shows none rather than holding the status up.
    if let Ok(mut clerk) = crate::clerk::Clerk::new(client, realm, svc).await {
        for g in &mut groups {
            let asked = clerk.keys_of(g.group);
            g.keys = tokio::time::timeout(STATUS_ASK_MAX, asked)
                .await
                .ok()
                .and_then(Result::ok);
        }
    }
    let policy = match c.name_get(realm, &layout.policy()).await {
        Ok(e) => Policy::from_json(&e.data).ok(),
        Err(_) => None,
    };
    let balancer = match c
        .name_get(realm, &format!("{}/leader", layout.balancer()))
        .await
    {
        Ok(e) => Some(String::from_utf8_lossy(&e.data).into_owned()),
        Err(_) => None,
    };
    Ok(Status {
        service: svc.into(),
        config,
        policy,
        balancer,
        groups,
    })
}

/// Longest `status` waits for one group's leader to count its keys.
pub const STATUS_ASK_MAX: Duration = Duration::from_secs(2);

/// Waits (at most `max`) until every group of the service has a leader.
pub async fn until_led(client: &Client, realm: &str, svc: &str, max: Duration) -> Result<()> {
    let layout = Layout::new(svc)?;
    let mut c = client.clone();
    let config = Config::from_json(&c.name_get(realm, &layout.config()).await?.data)?;
    let wait = async {
        for g in &config.groups {
            c.wait_exists(realm, &layout.leader(*g)).await?;
        }
        Ok::<_, Error>(())
    };
    match tokio::time::timeout(max, wait).await {
        Ok(done) => done,
        Err(_) => {
            let why = tabos_client::app::unplaced(client, realm, &format!("kvd-{svc}-"))
                .await
                .map(|w| format!(": its kvds are {w}"))
                .unwrap_or_default();
            Err(Error::Unavailable(format!(
                "not every group had a leader within {max:?}{why}"
            )))
        }
    }
}
