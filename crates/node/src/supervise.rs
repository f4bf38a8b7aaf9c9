//! The node's background tasks under one supervisor (issue 37, item 4).
//!
//! Each task is registered with a name and a [`Policy`]: the supervisor
//! starts it with the tasks' stop signal, and when it ends before the node
//! stops — returned or panicked — does what the policy says: starts it
//! again after a pause ([`Policy::Restart`], the pause doubling from
//! [`RESTART_PAUSE_MIN`] to [`RESTART_PAUSE_MAX`]), or stops the node
//! ([`Policy::Essential`]: a node whose heartbeat or procd has died must
//! not go on serving as if it ran procs), or only says so
//! ([`Policy::Once`]: a door that owned its listener cannot be started
//! again). Each task has a stop signal of its own: [`Supervisor::shut_down`]
//! stops them one at a time in the reverse of their registration, each
//! ended before the next is told — the last started, the first stopped
//! (procd stops its procs while the heartbeat registered before it still
//! holds the node's lease).
//!
//! Architecture Invariant: `serve_with` spawns no background task itself;
//! every one is a [`Supervisor::spawn`], so none is forgotten at shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// First pause before a task that ended is started again.
pub const RESTART_PAUSE_MIN: Duration = Duration::from_millis(100);
/// Longest pause between restarts of a task that keeps ending.
pub const RESTART_PAUSE_MAX: Duration = Duration::from_secs(30);

/// What the supervisor does when a task ends before the node stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Start it again, after a pause.
    Restart,
    /// Stop the node: it cannot go on without the task.
    Essential,
    /// Say so: the task could not be started again.
    Once,
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The tasks of one node, each with the signal that stops it.
pub struct Supervisor {
    node_id: String,
    /// Raised when an essential task ends: the node stops.
    node_stopping: crate::Stopping,
    /// The first essential task that ended, and how.
    failed: Arc<Mutex<Option<String>>>,
    tasks: Vec<Supervised>,
}

/// A registered task: its name, its stop signal and its supervision.
struct Supervised {
    name: &'static str,
    stop: watch::Sender<bool>,
    run: JoinHandle<()>,
}

impl Supervisor {
    /// A supervisor for node `node_id`, which raises `node_stopping` when an
    /// essential task ends.
    pub fn new(node_id: &str, node_stopping: crate::Stopping) -> Supervisor {
        Supervisor {
            node_id: node_id.to_string(),
            node_stopping,
            failed: Arc::default(),
            tasks: Vec::new(),
        }
    }

    /// Starts task `name`, made by `make` from its stop signal each time it
    /// (re)starts; it must end once the signal is raised.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, policy: Policy, mut make: F)
    where
        F: FnMut(watch::Receiver<bool>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop_tx, mut stop) = watch::channel(false);
        let (node_id, node_stopping, failed) = (
            self.node_id.clone(),
            self.node_stopping.clone(),
            self.failed.clone(),
        );
        let run = async move {
            let mut pause = RESTART_PAUSE_MIN;
            loop {
                let task: Task = Box::pin(make(stop.clone()));
                // Its own task, so that a panic is an end like any other.
                let how = match tokio::spawn(task).await {
                    Ok(()) => "returned".to_string(),
                    Err(e) if e.is_panic() => "panicked".to_string(),
                    Err(e) => format!("was cancelled ({e})"),
                };
                if *stop.borrow() {
                    return;
                }
                match policy {
                    Policy::Restart => {
                        tracing::warn!(
                            node = %node_id, "task {name} {how}; starting it again in {pause:?}"
                        );
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            _ = stop.wait_for(|s| *s) => return,
                        }
                        pause = (pause * 2).min(RESTART_PAUSE_MAX);
                    }
                    Policy::Essential => {
                        tracing::error!(node = %node_id, "task {name} {how}; the node stops");
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert_with(|| format!("task {name} {how}"));
                        node_stopping.raise();
                        return;
                    }
                    Policy::Once => {
                        tracing::warn!(node = %node_id, "task {name} {how} before the node stopped");
                        return;
                    }
                }
            }
        };
        self.tasks.push(Supervised {
            name,
            stop: stop_tx,
            run: tokio::spawn(run),
        });
    }

    /// [`Supervisor::spawn`] for a task made once (it owns what it serves,
    /// a listener): [`Policy::Once`].
    pub fn spawn_once<F, Fut>(&mut self, name: &'static str, make: F)
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut make = Some(make);
        self.spawn(name, Policy::Once, move |stop| {
            let task = make.take().map(|make| make(stop));
            async move {
                if let Some(task) = task {
                    task.await;
                }
            }
        });
    }

    /// The names of the tasks registered, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tasks.iter().map(|t| t.name).collect()
    }

    /// Stops the tasks one at a time, the last registered first, each
    /// ended before the next is told. Returns what made the node stop, if
    /// an essential task did.
    pub async fn shut_down(mut self) -> Option<String> {
        while let Some(t) = self.tasks.pop() {
            t.stop.send_replace(true);
            if let Err(e) = t.run.await {
                tracing::error!(node = %self.node_id, "task {} ended badly: {e}", t.name);
            }
        }
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Sleeps until `at_us` (µs since the epoch; at once if past), or for ever
/// when `None`: the timer of a background task whose next due time is time
/// itself (the session and retention reapers), raced against its wakes.
pub(crate) async fn sleep_until_us(at_us: Option<i64>) {
    match at_us {
        Some(t) => {
            let wait = t.saturating_sub(tabos_store::now_us()).max(0);
            tokio::time::sleep(std::time::Duration::from_micros(wait as u64)).await
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn supervisor() -> (Supervisor, crate::Stopping) {
        let stopping = crate::Stopping::default();
        (Supervisor::new("n", stopping.clone()), stopping)
    }

    /// A restartable task that ends (or panics) is started again; an
    /// essential one that ends stops the node and says why; shutdown stops
    /// them in reverse order.
    #[tokio::test(start_paused = true)]
    async fn policies_and_order() {
        let (mut s, stopping) = supervisor();
        let starts = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let n = starts.clone();
        s.spawn("flaky", Policy::Restart, move |mut stop| {
            let k = n.fetch_add(1, Ordering::SeqCst);
            async move {
                match k {
                    0 => {}
                    1 => panic!("the second run panics"),
                    _ => {
                        let _ = stop.wait_for(|s| *s).await;
                    }
                }
            }
        });
        for name in ["first", "second"] {
            let order = order.clone();
            s.spawn(name, Policy::Restart, move |mut stop| {
                let order = order.clone();
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                    order.lock().unwrap().push(format!("{name} told"));
                    // Slow to end: the next is told only once it has.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    order.lock().unwrap().push(format!("{name} ended"));
                }
            });
        }
        tokio::time::sleep(RESTART_PAUSE_MIN * 4).await;
        assert_eq!(starts.load(Ordering::SeqCst), 3, "started again twice");
        assert!(
            !*stopping.watch().borrow(),
            "a restartable task stops no node"
        );
        assert_eq!(s.names(), ["flaky", "first", "second"]);
        assert_eq!(s.shut_down().await, None);
        assert_eq!(
            *order.lock().unwrap(),
            ["second told", "second ended", "first told", "first ended"]
        );

        let (mut s, stopping) = supervisor();
        s.spawn("heart", Policy::Essential, |_stop| async {});
        stopping.raised().await;
        assert_eq!(s.shut_down().await.as_deref(), Some("task heart returned"));
    }

    /// A task that ends as asked is not started again, and a once-task
    /// runs once.
    #[tokio::test(start_paused = true)]
    async fn stopped_tasks_stay_stopped() {
        let (mut s, stopping) = supervisor();
        let runs = Arc::new(AtomicUsize::new(0));
        let n = runs.clone();
        s.spawn_once("door", move |_stop| async move {
            n.fetch_add(1, Ordering::SeqCst);
        });
        tokio::time::sleep(RESTART_PAUSE_MAX).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(s.shut_down().await, None);
        assert!(!*stopping.watch().borrow());
    }
}
