//! The pool of worker procs serving one wwd: at least `min` workers, at
//! most `max`. It grows by one when the requests in flight outnumber
//! [`GROW_PER_WORKER`] per worker (as wwd reports them, at most once per
//! [`GROW_GAP`]), shrinks by one when the most requests in flight over
//! [`SHRINK_AFTER`] would have fit in one worker fewer, and replaces a
//! worker that exits — telling wwd first, when it went on its own
//! ([`WorkerGone`]), so that wwd asks again for what it had taken.
//! Workers exit on their own when their wwd is gone; the pool is then
//! [retired](Pool::retire) and another made for the next wwd.
//!
//! The pool runs in the site's supervisor ([`crate::service::Site`]), not
//! in wwd: wwd's credential may not spawn (it reaches only its mailboxes),
//! so it tells the supervisor its load in messages instead.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tabos_client::proto;
use tabos_client::Client;
use tokio::time::Instant;

use crate::service::Program;
use crate::wire::WorkerGone;
use crate::{Error, Result};

/// Requests in flight per worker before another is started.
pub const GROW_PER_WORKER: usize = 32;
/// Least time between two workers started for load.
pub const GROW_GAP: Duration = Duration::from_millis(500);
/// How long the load must stay low before a worker is evicted.
pub const SHRINK_AFTER: Duration = Duration::from_secs(10);
/// Most workers a pool may have.
pub const WORKERS_MAX: u32 = 64;
/// Most workers a pool starts in all (replacements included).
pub const SPAWNS_MAX: u64 = 100_000;

struct State {
    workers: Vec<String>,
    spawned: u64,
    last_grow: Option<Instant>,
    /// The wait before replacing a worker that exited quickly.
    backoff: tabos_client::app::RestartBackoff,
    /// The most requests in flight since `window_start`.
    peak: usize,
    window_start: Instant,
}

pub struct Pool {
    client: Client,
    realm: String,
    site: String,
    /// This wwd's pid: the workers' parent, whose exit ends them.
    wwd: String,
    program: Program,
    min: u32,
    max: u32,
    state: Mutex<State>,
    /// Raised when its wwd is gone: it starts no more workers.
    retired: std::sync::atomic::AtomicBool,
}

impl Pool {
    pub fn new(
        client: &Client,
        realm: &str,
        site: &str,
        wwd: &str,
        program: Program,
        min: u32,
        max: u32,
    ) -> Result<Arc<Pool>> {
        if min == 0 || min > max || max > WORKERS_MAX {
            return Err(Error::Invalid(format!(
                "workers must satisfy 1 <= min <= max <= {WORKERS_MAX}"
            )));
        }
        Ok(Arc::new(Pool {
            client: client.clone(),
            realm: realm.into(),
            site: site.into(),
            wwd: wwd.into(),
            program,
            min,
            max,
            state: Mutex::new(State {
                workers: Vec::new(),
                spawned: 0,
                last_grow: None,
                backoff: Default::default(),
                peak: 0,
                window_start: Instant::now(),
            }),
            retired: Default::default(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn size(&self) -> usize {
        self.lock().workers.len()
    }

    /// Its wwd is gone (its workers leave with it): it starts no more.
    pub fn retire(&self) {
        self.retired
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_retired(&self) -> bool {
        self.retired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts the minimum, and the timer that shrinks the pool.
    pub async fn start(self: &Arc<Self>) -> Result<()> {
        for _ in 0..self.min {
            self.spawn().await?;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SHRINK_AFTER);
            tick.tick().await;
            while !me.is_retired() {
                tick.tick().await;
                me.maybe_shrink().await;
            }
        });
        Ok(())
    }

    /// wwd had up to `in_flight` requests in flight: grows if needed.
    pub fn load(self: &Arc<Self>, in_flight: usize) {
        let grow = {
            let mut st = self.lock();
            st.peak = st.peak.max(in_flight);
            let busy = in_flight > st.workers.len() * GROW_PER_WORKER;
            let room = st.workers.len() < self.max as usize;
            let gap = st.last_grow.is_none_or(|t| t.elapsed() >= GROW_GAP);
            if busy && room && gap {
                st.last_grow = Some(Instant::now());
            }
            busy && room && gap
        };
        if grow {
            let me = self.clone();
            tokio::spawn(async move {
                if let Err(e) = me.spawn().await {
                    eprintln!("site: cannot start a worker: {e}");
                }
            });
        }
    }

    async fn maybe_shrink(&self) {
        let victim = {
            let mut st = self.lock();
            let n = st.workers.len();
            let low = !self.is_retired()
                && n > self.min as usize
                && st.peak <= (n - 1) * GROW_PER_WORKER / 4;
            st.peak = 0;
            st.window_start = Instant::now();
            if low {
                st.workers.pop()
            } else {
                None
            }
        };
        if let Some(pid) = victim {
            eprintln!("site: load is low; evicting worker {pid}");
            let _ = self.client.clone().evict(&self.realm, &pid).await;
        }
    }

    /// [`spawn`](Pool::spawn) behind a box: a worker's exit starts its
    /// replacement from inside a spawn, which a plain recursive future
    /// cannot name.
    fn spawn_boxed(
        self: Arc<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>> {
        Box::pin(async move { self.spawn().await })
    }

    /// Tells wwd that worker `pid` is gone ([`WorkerGone`]). Not told
    /// (wwd unreachable, its mailbox full): its requests then wait out
    /// their time, as before there was this note.
    async fn tell_gone(&self, c: &mut Client, pid: &str) {
        let note = crate::wire::encode(
            &WorkerGone {
                worker_gone: pid.to_string(),
            },
            b"",
        );
        let to = format!("proc/{}", self.wwd);
        if let Err(e) = c.send(&self.realm, "", &to, note).await {
            eprintln!(
                "site: cannot tell wwd {} that worker {pid} is gone: {e}",
                self.wwd
            );
        }
    }

    async fn spawn(self: &Arc<Self>) -> Result<()> {
        if self.is_retired() {
            return Ok(());
        }
        let pid = {
            let mut st = self.lock();
            if st.spawned >= SPAWNS_MAX {
                return Err(Error::Invalid(format!(
                    "{SPAWNS_MAX} workers started already"
                )));
            }
            st.spawned += 1;
            tabos_client::app::unique_pid(&format!("www-{}-worker", self.site), st.spawned)
        };
        let mut args = self.program.args.clone();
        args.extend(["worker".to_string(), self.site.clone(), self.wwd.clone()]);
        let p = proto::ProcDescriptor {
            pid: pid.clone(),
            parent: self.wwd.clone(),
            kind: proto::ProcKind::Native.into(),
            class: proto::ProcClass::Be.into(),
            program: self.program.path.clone(),
            args,
            cores: Some(1),
            ..Default::default()
        };
        let mut c = self.client.clone();
        c.spawn(&self.realm, p).await?;
        self.lock().workers.push(pid.clone());
        eprintln!("site: started worker {pid} for wwd {}", self.wwd);
        // Replaced if it exits while still one of the pool's.
        let me = self.clone();
        let born = Instant::now();
        tokio::spawn(async move {
            tabos_client::app::until_exited(&mut c, &me.realm, &pid).await;
            // Still one of the pool's (not evicted): it went on its own,
            // and wwd asks again for what it may have taken.
            if !me.is_retired() && me.lock().workers.contains(&pid) {
                me.tell_gone(&mut c, &pid).await;
            }
            let wait = me.lock().backoff.after_exit(born.elapsed());
            tokio::time::sleep(wait).await;
            let was = {
                let mut st = me.lock();
                let before = st.workers.len();
                st.workers.retain(|p| *p != pid);
                before != st.workers.len()
            };
            if was && me.size() < me.min as usize {
                if let Err(e) = me.clone().spawn_boxed().await {
                    eprintln!("site: cannot replace worker {pid}: {e}");
                }
            }
        });
        Ok(())
    }
}
