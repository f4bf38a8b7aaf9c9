//! The balancer (σOS section 5.2): a BE proc, leader plus standbys
//! (election in `/kv/<svc>/balancer`, fencing the service's directory so a
//! deposed balancer can change no config). The leader
//!
//! * keeps [`Policy::kvds_per_group`] kvds alive in every group in service
//!   — it counts each group's members (kvds join `groups/g/members` with
//!   their session) and spawns what is missing;
//! * reads the groups' load reports every [`PERIOD`] and adds a group when
//!   one serves more than [`Policy::grow_ops`] requests/s for
//!   [`Policy::grow_after_ms`], removes one
//!   when the whole load would fit in one group fewer under
//!   [`Policy::shrink_ops`] for [`Policy::shrink_after_ms`] — and keeps
//!   the count within the policy's minimum and maximum;
//! * moves shards to fit (a map that moves few shards,
//!   [`Config::rebalanced`]) in steps, each a new config written with the
//!   leader's fence and the version it read:
//!   1. the new groups join `groups` and the target map is recorded; it
//!      waits for the new groups' leaders;
//!   2. the shards that change group are marked moving — no group serves
//!      them — and it waits until each one's old group applied that
//!      config (or has no leader, whose lease has then run out);
//!   3. a mover proc per shard takes it (a new shard epoch; and if its
//!      old group never applied the config, a new epoch of that group's
//!      log, so that no leader of it appends any more), folds what its
//!      old group's log holds of it into a snapshot written to a temporary
//!      file and renamed into place, pointing at its new group's log;
//!   4. the target map becomes the map; removed groups' kvds exit.
//!
//!   A new leader finds a move in progress in the config (its target) and
//!   finishes it from the step it reached.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tabos_client::app::{spawn_watched, unique_pid};
use tabos_client::names::{Election, Group, Session, WatchMode};
use tabos_client::proto::{self, Fence};
use tabos_client::Client;
use tokio::sync::mpsc;

use crate::config::{Config, Layout, Policy};
use crate::kvd::Load;
use crate::service::Program;
use crate::{shard, Ctx, Error, Result};

/// How often the leader looks at the load.
pub const PERIOD: Duration = Duration::from_secs(1);
/// A load report older than this is not counted.
const LOAD_FRESH_US: i64 = 3_000_000;
/// The balancer's session TTL.
pub const SESSION_TTL: Duration = Duration::from_secs(2);
/// A kvd spawned but not yet a member is counted as one for this long.
const JOIN_WAIT: Duration = Duration::from_secs(30);
/// Attempts of one mover before the balancer gives up (and exits, so a
/// standby tries again).
const MOVER_ATTEMPTS_MAX: u32 = 3;
/// Longest a step waits for the groups before looking again.
const STEP_WAIT: Duration = Duration::from_secs(1);

struct Balancer {
    client: Client,
    realm: String,
    pid: String,
    layout: Layout,
    program: Program,
    fence: Fence,
    /// kvds spawned and not yet members: pid → (group, when).
    pending: HashMap<String, (u32, tokio::time::Instant)>,
    /// A kvd exited before joining: no kvd is started before this (so one
    /// that cannot start is not restarted in a tight loop).
    hold_until: Option<tokio::time::Instant>,
    backoff: tabos_client::app::RestartBackoff,
    exits: mpsc::UnboundedSender<String>,
    exited: mpsc::UnboundedReceiver<String>,
    spawned: u64,
    /// Since when the load has been low enough to remove a group.
    low_since: Option<tokio::time::Instant>,
    /// Since when a group's load has been high enough to add one.
    high_since: Option<tokio::time::Instant>,
    /// The watches on the service's directories poke here.
    poke: mpsc::UnboundedSender<()>,
    poked: mpsc::UnboundedReceiver<()>,
    /// The groups whose directories it watches.
    watching: HashSet<u32>,
}

/// Runs a balancer of the service until its session is lost or it fails.
pub async fn run(ctx: Ctx, program: Program) -> Result<()> {
    let session = Session::open(&ctx.client, &ctx.realm, &ctx.pid, SESSION_TTL).await?;
    let election = Election::new(
        &ctx.client,
        &ctx.realm,
        &ctx.layout.balancer(),
        ctx.layout.root(),
    );
    let lead = tokio::select! {
        won = election.campaign(&session, &ctx.pid) => won?,
        _ = session.lost() => return Err(Error::Invalid("the session was lost".into())),
    };
    eprintln!("balancer {}: leads (epoch {})", ctx.pid, lead.epoch);
    let (exits, exited) = mpsc::unbounded_channel();
    let (poke, poked) = mpsc::unbounded_channel();
    let mut b = Balancer {
        client: ctx.client.clone(),
        realm: ctx.realm.clone(),
        pid: ctx.pid.clone(),
        layout: ctx.layout.clone(),
        program,
        fence: lead.fence,
        pending: HashMap::new(),
        hold_until: None,
        backoff: Default::default(),
        exits,
        exited,
        spawned: 0,
        low_since: None,
        high_since: None,
        poke,
        poked,
        watching: HashSet::new(),
    };
    tokio::select! {
        _ = session.lost() => Err(Error::Invalid("the session was lost: another balancer leads".into())),
        r = b.lead() => r,
    }
}

impl Balancer {
    async fn lead(&mut self) -> Result<()> {
        // Woken by a change in the service's directory (a config), in a
        // group's directory (its leader, what it applied) or members, or
        // by the period (the load is a time series).
        self.watch(self.layout.root().to_string());
        let mut tick = tokio::time::interval(PERIOD);
        loop {
            let (config, version) = self.config().await?;
            for g in &config.groups {
                if self.watching.insert(*g) {
                    self.watch(self.layout.group(*g));
                    self.watch(self.layout.members(*g));
                }
            }
            if config.target.is_some() {
                self.finish_move(config, version).await?;
                continue;
            }
            let policy = self.policy().await?;
            self.staff(&config.groups, &policy).await?;
            if let Some(groups) = self.decide(&config, &policy).await? {
                eprintln!(
                    "balancer {}: groups {:?} -> {:?}",
                    self.pid, config.groups, groups
                );
                let target = config.rebalanced(&groups)?;
                let mut all: Vec<u32> = config.groups.clone();
                all.extend(groups.iter().filter(|g| !config.groups.contains(g)));
                all.sort_unstable();
                let next = Config {
                    epoch: config.epoch + 1,
                    shards: config.shards.clone(),
                    groups: all,
                    moving: Vec::new(),
                    target: Some(target.shards),
                    hash_tags: config.hash_tags,
                };
                self.write_config(&next, version).await?;
                continue;
            }
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.poked.recv() => self.drain_pokes(),
                e = self.exited.recv() => {
                    if let Some(pid) = e {
                        self.kvd_exited(&pid);
                    }
                }
            }
        }
    }

    /// Pokes that came meanwhile ask for the same look again: one will do.
    fn drain_pokes(&mut self) {
        while self.poked.try_recv().is_ok() {}
    }

    /// A directory watch that pokes the loop on every change (and opens
    /// itself again if cut off).
    fn watch(&self, dir: String) {
        let (mut c, realm, poke) = (self.client.clone(), self.realm.clone(), self.poke.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(mut s) = c.watch(&realm, &dir, WatchMode::Dir).await {
                    while let Ok(Some(_)) = s.message().await {
                        if poke.send(()).is_err() {
                            return;
                        }
                    }
                }
                if poke.send(()).is_err() {
                    return;
                }
                tokio::time::sleep(STEP_WAIT).await;
            }
        });
    }

    async fn config(&mut self) -> Result<(Config, i64)> {
        let e = self
            .client
            .name_get(&self.realm, &self.layout.config())
            .await?;
        Ok((Config::from_json(&e.data)?, e.version))
    }

    async fn policy(&mut self) -> Result<Policy> {
        match self
            .client
            .name_get(&self.realm, &self.layout.policy())
            .await
        {
            Ok(e) => Policy::from_json(&e.data),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(Policy::default()),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the next config, only over the version it read and only
    /// while it leads.
    async fn write_config(&mut self, next: &Config, version: i64) -> Result<()> {
        next.check()?;
        self.client
            .name_set(
                &self.realm,
                &self.layout.config(),
                next.to_json(),
                Some(version),
                Some(self.fence.clone()),
            )
            .await?;
        eprintln!(
            "balancer {}: config epoch {} (moving {:?})",
            self.pid, next.epoch, next.moving
        );
        Ok(())
    }

    /// A proc it started exited: a kvd that never joined holds off the
    /// next start.
    fn kvd_exited(&mut self, pid: &str) {
        if let Some((_, at)) = self.pending.remove(pid) {
            let wait = self.backoff.after_exit(at.elapsed());
            self.hold_until = Some(tokio::time::Instant::now() + wait);
        }
    }

    /// Spawns kvds where a group has fewer than the policy's.
    async fn staff(&mut self, groups: &[u32], policy: &Policy) -> Result<()> {
        let now = tokio::time::Instant::now();
        if self.hold_until.is_some_and(|t| now < t) {
            return Ok(());
        }
        self.pending
            .retain(|_, (_, at)| now.duration_since(*at) < JOIN_WAIT);
        for g in groups {
            let (members, _) = match Group::new(&self.client, &self.realm, &self.layout.members(*g))
                .members()
                .await
            {
                Ok(m) => m,
                Err(e) if e.code() == Some(tonic::Code::NotFound) => (Vec::new(), 0),
                Err(e) => return Err(e.into()),
            };
            let joined: HashSet<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
            let before = self.pending.len();
            self.pending.retain(|pid, _| !joined.contains(pid.as_str()));
            if self.pending.len() < before {
                // kvds start again: no more holding off.
                self.backoff = Default::default();
            }
            let pending = self.pending.values().filter(|(pg, _)| pg == g).count();
            for _ in members.len() + pending..policy.kvds_per_group as usize {
                let pid = self.spawn_kvd(*g).await?;
                self.pending.insert(pid, (*g, now));
            }
        }
        Ok(())
    }

    fn next_pid(&mut self, what: &str) -> String {
        self.spawned += 1;
        unique_pid(what, self.spawned)
    }

    async fn spawn_kvd(&mut self, g: u32) -> Result<String> {
        let svc = self.layout.service().to_string();
        let pid = self.next_pid(&format!("kvd-{svc}-g{g}"));
        let mut args = self.program.args.clone();
        args.extend(["kvd".to_string(), svc, g.to_string()]);
        self.spawn(&pid, args, proto::ProcClass::Lc, 1).await?;
        Ok(pid)
    }

    async fn spawn(
        &mut self,
        pid: &str,
        args: Vec<String>,
        class: proto::ProcClass,
        cores: i64,
    ) -> Result<()> {
        let p = proto::ProcDescriptor {
            pid: pid.into(),
            parent: self.pid.clone(),
            kind: proto::ProcKind::Native.into(),
            class: class.into(),
            program: self.program.path.clone(),
            args,
            cores: Some(cores),
            ..Default::default()
        };
        spawn_watched(&self.client, &self.realm, p, self.exits.clone()).await?;
        Ok(())
    }

    /// The groups the service should have, if not the ones it has.
    async fn decide(&mut self, config: &Config, policy: &Policy) -> Result<Option<Vec<u32>>> {
        let mut groups = config.groups.clone();
        let fresh_id = |groups: &[u32]| (0..).find(|g| !groups.contains(g)).expect("a free id");
        if groups.len() < policy.min_groups as usize {
            while groups.len() < policy.min_groups as usize {
                groups.push(fresh_id(&groups));
            }
            return Ok(Some(groups));
        }
        if groups.len() > policy.max_groups as usize {
            groups.sort_unstable();
            groups.truncate(policy.max_groups as usize);
            return Ok(Some(groups));
        }
        let now_us = crate::now_us();
        let mut loads = Vec::new();
        for g in &config.groups {
            if let Ok(e) = self
                .client
                .name_get(&self.realm, &self.layout.load(*g))
                .await
            {
                if let Ok(l) = serde_json::from_slice::<Load>(&e.data) {
                    if now_us - l.at_us < LOAD_FRESH_US {
                        loads.push(l.ops_per_s);
                    }
                }
            }
        }
        if loads.len() < config.groups.len() {
            // Not every group reports: no decision on half the picture.
            self.low_since = None;
            self.high_since = None;
            return Ok(None);
        }
        let total: f64 = loads.iter().sum();
        if groups.len() < policy.max_groups as usize && loads.iter().any(|l| *l > policy.grow_ops) {
            self.low_since = None;
            let since = *self
                .high_since
                .get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() < Duration::from_millis(policy.grow_after_ms) {
                return Ok(None);
            }
            self.high_since = None;
            groups.push(fresh_id(&groups));
            return Ok(Some(groups));
        }
        self.high_since = None;
        if groups.len() > policy.min_groups as usize
            && total / ((groups.len() - 1) as f64) < policy.shrink_ops
        {
            let since = *self.low_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= Duration::from_millis(policy.shrink_after_ms) {
                self.low_since = None;
                let last = *groups.iter().max().expect("groups");
                groups.retain(|g| *g != last);
                return Ok(Some(groups));
            }
        } else {
            self.low_since = None;
        }
        Ok(None)
    }

    /// Carries a move (a config with a target) on from where it is.
    async fn finish_move(&mut self, config: Config, version: i64) -> Result<()> {
        let target = config.target.clone().expect("a move in progress");
        let policy = self.policy().await?;
        self.staff(&config.groups, &policy).await?;
        let moved: Vec<u32> = (0..config.shards.len() as u32)
            .filter(|s| config.shards[*s as usize] != target[*s as usize])
            .collect();
        // Step 1: every group that receives shards has a leader.
        for g in moved
            .iter()
            .map(|s| target[*s as usize])
            .collect::<HashSet<_>>()
        {
            if !self.has_leader(g).await? {
                self.settle().await;
                return Ok(());
            }
        }
        // Step 2: the shards stop being served where they were.
        if config.moving != moved {
            let next = Config {
                epoch: config.epoch + 1,
                moving: moved,
                ..config
            };
            return self.write_config(&next, version).await;
        }
        for g in moved
            .iter()
            .map(|s| config.shards[*s as usize])
            .collect::<HashSet<_>>()
        {
            if self.applied(g).await? < config.epoch && self.has_leader(g).await? {
                self.settle().await;
                return Ok(());
            }
        }
        // Step 3: movers.
        let mut attempts: HashMap<u32, u32> = HashMap::new();
        let mut todo: Vec<u32> = moved.clone();
        while !todo.is_empty() {
            let mut running = Vec::new();
            for s in &todo {
                let n = attempts.entry(*s).or_insert(0);
                *n += 1;
                if *n > MOVER_ATTEMPTS_MAX {
                    return Err(Error::Unavailable(format!(
                        "the mover of shard {s} failed {MOVER_ATTEMPTS_MAX} times"
                    )));
                }
                let svc = self.layout.service().to_string();
                let pid = self.next_pid(&format!("mover-{svc}-s{s}-e{}", config.epoch));
                let mut args = self.program.args.clone();
                args.extend(["mover".into(), svc, s.to_string(), config.epoch.to_string()]);
                self.spawn(&pid, args, proto::ProcClass::Be, 1).await?;
                running.push((*s, pid));
            }
            todo.clear();
            for (s, pid) in running {
                let st = self.client.wait_exit(&self.realm, &pid).await?;
                if st.state() != tabos_client::proto::ProcState::Exited || st.exit_status != Some(0)
                {
                    eprintln!(
                        "balancer {}: mover {pid} ended {} {:?}",
                        self.pid,
                        st.state(),
                        st.exit_status
                    );
                    todo.push(s);
                }
            }
        }
        // Step 4: the target is the map.
        let mut groups: Vec<u32> = target.clone();
        groups.sort_unstable();
        groups.dedup();
        let next = Config {
            epoch: config.epoch + 1,
            shards: target,
            groups,
            moving: Vec::new(),
            target: None,
            hash_tags: config.hash_tags,
        };
        self.write_config(&next, version).await
    }

    async fn has_leader(&mut self, g: u32) -> Result<bool> {
        match self
            .client
            .name_get(&self.realm, &self.layout.leader(g))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn applied(&mut self, g: u32) -> Result<i64> {
        match self
            .client
            .name_get(&self.realm, &self.layout.applied(g))
            .await
        {
            Ok(e) => Ok(std::str::from_utf8(&e.data)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits for the groups to move on: a change in a directory it
    /// watches (a group's leader or applied epoch), an exit, or at most
    /// [`STEP_WAIT`].
    async fn settle(&mut self) {
        tokio::select! {
            _ = tokio::time::sleep(STEP_WAIT) => {}
            _ = self.poked.recv() => self.drain_pokes(),
            e = self.exited.recv() => {
                if let Some(pid) = e {
                    self.kvd_exited(&pid);
                }
            }
        }
    }
}

/// A mover: takes shard `s` (fencing whoever served it), folds what its
/// old group's log holds of it into a snapshot written to a temporary file
/// and renamed into place, pointing at the end of its new group's log, so
/// its new group loads it in one read. Does nothing if the config no
/// longer moves `s` at `epoch` (a deposed balancer's mover).
pub async fn mover(ctx: Ctx, s: u32, epoch: i64) -> Result<()> {
    let mut c = ctx.client.clone();
    let config = Config::from_json(&c.name_get(&ctx.realm, &ctx.layout.config()).await?.data)?;
    let target = config
        .target
        .as_ref()
        .and_then(|t| t.get(s as usize).copied());
    let (Some(to), true) = (target, config.epoch >= epoch && config.moving.contains(&s)) else {
        eprintln!(
            "mover {}: shard {s} is not moving at epoch {epoch}; nothing to do",
            ctx.pid
        );
        return Ok(());
    };
    let from = config.shards[s as usize];
    // The old group dropped the shard and said so once no flush with its
    // writes was on its way; if it did not (it had no leader), no leader
    // of it may append from here on.
    let applied = match c.name_get(&ctx.realm, &ctx.layout.applied(from)).await {
        Ok(e) => String::from_utf8_lossy(&e.data).parse::<i64>().unwrap_or(0),
        Err(e) if e.code() == Some(tonic::Code::NotFound) => 0,
        Err(e) => return Err(e.into()),
    };
    if applied < config.epoch {
        shard::take_group(&mut c, &ctx.realm, &ctx.layout, from).await?;
    }
    shard::prepare(&mut c, &ctx.realm, &ctx.layout, s).await?;
    let taken = shard::take(&mut c, &ctx.realm, &ctx.layout, s).await?;
    let mut loaded = shard::load(&mut c, &ctx.realm, &ctx.layout, s, None).await?;
    // Entries of the new group's log up to here hold nothing of the shard
    // that is not in the snapshot (a stay there before is in it).
    let upto = shard::group_log_head(&mut c, &ctx.realm, &ctx.layout, to).await?;
    loaded.contents.forget_old(crate::kvd::now_us());
    shard::snapshot(
        &mut c,
        &ctx.realm,
        &ctx.layout,
        &taken,
        to,
        upto,
        &loaded.contents,
    )
    .await?;
    eprintln!(
        "mover {}: shard {s} moved from group {from} to {to} ({} keys; group {to}'s log from entry {upto})",
        ctx.pid,
        loaded.contents.pairs.len()
    );
    Ok(())
}
