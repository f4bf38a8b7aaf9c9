//! Event loops a door's connections are spread over, as nginx's workers:
//! threads each running a single-threaded runtime, every connection served
//! whole on one of them (the least busy when it came). Its reads, its
//! clerk's calls to the kvds and the [`crate::clerk`] pipe it shares with
//! the loop's other connections stay on that thread, so a request wakes
//! no other thread — on a multi-threaded runtime a reply read by one
//! worker was handed to a connection on the other (a futex or eventfd
//! wake-up, a context switch). The front end serves on `--threads` of
//! these; a kvd on one ([`crate::kvd::CONNECTION_LOOPS`]), its flusher
//! and watches on the process's runtime.
//!
//! Dropping the [`Loops`] stops them: each runtime ends, and with it the
//! connections it served.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;

/// Most loops one door runs.
pub const LOOPS_MAX: usize = 64;

thread_local! {
    /// The loop this thread runs, if it runs one.
    static CURRENT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Every loop of the process has its own number.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The loop the calling thread runs (`None` off the loops: a
/// multi-threaded runtime's worker, or any other thread).
pub fn current() -> Option<u64> {
    CURRENT.with(Cell::get)
}

/// A door's loops.
pub struct Loops {
    loops: Vec<Loop>,
}

struct Loop {
    handle: tokio::runtime::Handle,
    /// Connections it serves now.
    serving: Arc<AtomicUsize>,
    /// Dropped with the [`Loops`]: the loop's runtime then ends.
    _stop: oneshot::Sender<()>,
}

/// Counts a connection on its loop until it ends, however it ends.
struct Serving(Arc<AtomicUsize>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Loops {
    /// Starts `n` loops (1 ..= [`LOOPS_MAX`]), their threads named
    /// `name-0`, `name-1`, …
    pub fn start(n: usize, name: &str) -> std::io::Result<Loops> {
        if !(1..=LOOPS_MAX).contains(&n) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{n} loops: between 1 and {LOOPS_MAX}"),
            ));
        }
        let mut loops = Vec::with_capacity(n);
        for i in 0..n {
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop, stopped) = oneshot::channel::<()>();
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                            return;
                        }
                    };
                    CURRENT.with(|c| c.set(Some(id)));
                    let _ = handle_tx.send(Ok(rt.handle().clone()));
                    // Runs what is spawned on it until the Loops go.
                    rt.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
            let handle = handle_rx.recv().map_err(|_| {
                std::io::Error::other(format!("loop {name}-{i} ended as it started"))
            })??;
            loops.push(Loop {
                handle,
                serving: Arc::default(),
                _stop: stop,
            });
        }
        Ok(Loops { loops })
    }

    /// Runs what `make` returns on the loop serving the fewest
    /// connections, counted there until it ends. `make` runs on that
    /// loop, so what it registers (a socket taken from another runtime)
    /// is that loop's.
    pub fn spawn<F, Fut>(&self, make: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let l = self
            .loops
            .iter()
            .min_by_key(|l| l.serving.load(Ordering::Relaxed))
            .expect("at least one loop (checked at start)");
        l.serving.fetch_add(1, Ordering::Relaxed);
        let serving = Serving(l.serving.clone());
        l.handle.spawn(async move {
            let _serving = serving;
            make().await
        });
    }
}
