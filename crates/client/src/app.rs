//! What the applications' procs (MapReduce, the key-value service, the web
//! server) share: reading the environment procd gives a native proc,
//! running a proc's async main, and starting procs whose exits are
//! reported (the supervisors' building block).

use tokio::sync::mpsc;

use crate::{proto, Client, Error};

/// A native proc's view of itself: its realm and pid, and a client with
/// its own credential acting for it (`TABOS_ADDR`, `TABOS_REALM`,
/// `TABOS_PID`, `TABOS_TOKEN`, set by procd); with an application's
/// `layout` (where its service keeps things), what every proc of that
/// application has.
pub struct ProcEnv<L = ()> {
    pub client: Client,
    pub realm: String,
    pub pid: String,
    pub layout: L,
}

impl ProcEnv {
    pub async fn from_env() -> Result<ProcEnv, Error> {
        let var = |name: &'static str| std::env::var(name).map_err(|_| Error::NotAProc(name));
        let (addr, realm, pid, token) = (
            var("TABOS_ADDR")?,
            var("TABOS_REALM")?,
            var("TABOS_PID")?,
            var("TABOS_TOKEN")?,
        );
        let client = Client::connect(&addr, &token).await?.acting_for(&pid);
        Ok(ProcEnv {
            client,
            realm,
            pid,
            layout: (),
        })
    }

    /// This proc with its application's `layout`.
    pub fn with<L>(self, layout: L) -> ProcEnv<L> {
        ProcEnv {
            client: self.client,
            realm: self.realm,
            pid: self.pid,
            layout,
        }
    }
}

/// Runs a proc's async main on a runtime of `threads` worker threads;
/// returns its exit status (0, or 1 with the error on stderr, or 2 if no
/// runtime could be made). `what` prefixes the messages.
pub fn run_main<E: std::fmt::Display>(
    what: &str,
    threads: usize,
    main: impl std::future::Future<Output = Result<(), E>>,
) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{what}: cannot start a runtime: {e}");
            return 2;
        }
    };
    match rt.block_on(main) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{what}: {e}");
            1
        }
    }
}

/// A pid no other proc of this program has: `prefix`, the time in µs and
/// a count.
pub fn unique_pid(prefix: &str, count: u64) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!("{prefix}-{stamp}-{count}")
}

/// Spawns `proc` in `realm` and, when it has exited, sends its pid to
/// `exits` (a WaitExit on a task of its own).
pub async fn spawn_watched(
    client: &Client,
    realm: &str,
    proc: proto::ProcDescriptor,
    exits: mpsc::UnboundedSender<String>,
) -> Result<String, Error> {
    let pid = proc.pid.clone();
    let mut c = client.clone();
    c.spawn(realm, proc).await?;
    let (realm, p) = (realm.to_string(), pid.clone());
    tokio::spawn(async move {
        until_exited(&mut c, &realm, &p).await;
        let _ = exits.send(p);
    });
    Ok(pid)
}

/// The first pause before a wait cut short is asked again.
const WAIT_PAUSE_FIRST: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest such pause.
const WAIT_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Returns once proc `pid` has ended, or cannot be waited for (not there,
/// not the caller's to see). A wait cut short ([`Error::is_cut_short`]:
/// the node or its database away for a while, the node stopping) is asked
/// again: taken for the proc's end, it had a supervisor start a second
/// copy of a proc still running, or lose sight of it.
pub async fn until_exited(c: &mut Client, realm: &str, pid: &str) {
    let mut pauses = crate::retry::Backoff::new(WAIT_PAUSE_FIRST, WAIT_PAUSE_MAX);
    while let Err(e) = c.wait_exit(realm, pid).await {
        if !e.is_cut_short() {
            return;
        }
        pauses.wait().await;
    }
}

/// How long [`through_outage`]'s callers keep asking: longer than a
/// database failover (pg_auto_failover promoted a standby 52 s after its
/// primary died, in CI) or a node's restart, short enough that a client
/// of a node that is gone for good is told so within minutes.
pub const OUTAGE_MAX: std::time::Duration = std::time::Duration::from_secs(180);

/// An error that can say its call was cut short rather than answered
/// ([`Error::is_cut_short`]); the applications' own errors, which carry
/// the client's, say so too.
pub trait CutShort {
    fn is_cut_short(&self) -> bool;
}

impl CutShort for Error {
    fn is_cut_short(&self) -> bool {
        Error::is_cut_short(self)
    }
}

/// `call`'s answer, asked again (backed off) while it is cut short, for
/// at most `outage`; then its last answer, whatever it is. Only for calls
/// that may be sent twice: reads, and writes whose second sending changes
/// nothing — or says "exists", which the caller must be able to take as
/// its own first sending (a name only it would create).
pub async fn through_outage<T, E: CutShort, Fut>(
    outage: std::time::Duration,
    call: impl FnMut() -> Fut,
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    through_outage_told(outage, call, |_| {}).await
}

/// [`through_outage`], `told` of each answer cut short before it is asked
/// again (a command says once that it waits out an outage).
pub async fn through_outage_told<T, E: CutShort, Fut>(
    outage: std::time::Duration,
    mut call: impl FnMut() -> Fut,
    mut told: impl FnMut(&E),
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut pauses = crate::retry::Backoff::new(WAIT_PAUSE_FIRST, WAIT_PAUSE_MAX)
        .until(tokio::time::Instant::now() + outage);
    loop {
        match call().await {
            Err(e) if e.is_cut_short() => {
                if !pauses.wait().await {
                    return Err(e);
                }
                told(&e);
            }
            answer => return answer,
        }
    }
}

/// Proc `pid`'s end ([`Client::wait_exit`]), waited for through an
/// outage of up to [`OUTAGE_MAX`] — a failover, its node restarting — as
/// `tabos wait` does: the proc's end is the answer, not the outage;
/// `told` of each answer cut short.
pub async fn exit_of(
    client: &Client,
    realm: &str,
    pid: &str,
    told: impl FnMut(&Error),
) -> Result<proto::ProcStatus, Error> {
    let call = || {
        let mut c = client.clone();
        async move { c.wait_exit(realm, pid).await }
    };
    through_outage_told(OUTAGE_MAX, call, told).await
}

/// A proc that lived less than this was failing, not done.
pub const QUICK_EXIT: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest wait before starting a proc again.
pub const RESTART_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// The first wait before starting again a proc that exited quickly.
pub const RESTART_WAIT_FIRST: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a supervisor waits before starting again a proc that exited:
/// not at all after a proc that lived [`QUICK_EXIT`] or more; after quick
/// exits, [`RESTART_WAIT_FIRST`] doubling up to [`RESTART_WAIT_MAX`]
/// (jittered: [`crate::retry::Backoff`]) — so a proc that cannot start (a
/// port taken, a bad program) is not restarted in a tight loop.
#[derive(Debug)]
pub struct RestartBackoff {
    pauses: crate::retry::Backoff,
}

impl Default for RestartBackoff {
    fn default() -> RestartBackoff {
        RestartBackoff {
            pauses: crate::retry::Backoff::new(RESTART_WAIT_FIRST, RESTART_WAIT_MAX),
        }
    }
}

impl RestartBackoff {
    /// The wait before the next start, given how long the last one lived.
    pub fn after_exit(&mut self, lived: std::time::Duration) -> std::time::Duration {
        if lived >= QUICK_EXIT {
            self.pauses.reset();
            return std::time::Duration::ZERO;
        }
        self.pauses.pause()
    }
}

/// Whether `realm`'s native procs share the host's network (and the realm
/// by name: `""` is the caller's). A service whose procs listen where
/// clients outside them connect (kvd, wwd) needs it; a realm without it
/// gives each proc a network of its own with loopback only.
pub async fn host_network(client: &Client, realm: &str) -> Result<(String, bool), Error> {
    let mut c = client.clone();
    let realm = match realm {
        "" => c.who_am_i().await?.default_realm,
        r => r.to_string(),
    };
    let allowed = c
        .list_realms()
        .await?
        .into_iter()
        .find(|r| r.realm == realm)
        .is_some_and(|r| r.host_network);
    Ok((realm, allowed))
}

/// What to say when `what` needs the host's network and `realm` does not
/// allow it.
pub fn host_network_refusal(realm: &str, what: &str) -> String {
    format!(
        "realm {realm:?} gives its procs a network of their own (loopback only), but {what}; \
         its operator can allow it the host's network: tabos realm set {realm} --host-network"
    )
}

/// Why procs of an application (their pids start with `prefix`) have not
/// started, as a sentence for its user: those not running yet, with what
/// they ask for and where they wait. `None` when none is waiting. An
/// empty `realm` is the caller's (a realm's SQL sees only its own rows).
pub async fn unplaced(client: &Client, realm: &str, prefix: &str) -> Option<String> {
    let rows = client
        .clone()
        .sql_limited(
            "SELECT pid, class, cores, waiting, worker_id FROM ps WHERE ($1 = '' OR realm = $1) \
             AND state IN ('spawned', 'claimed') AND substr(pid, 1, length($2)) = $2 \
             ORDER BY spawn_us",
            vec![
                crate::Value::Text(realm.into()),
                crate::Value::Text(prefix.into()),
            ],
            UNPLACED_SHOWN_MAX as u32 + 1,
        )
        .await
        .ok()?
        .rows;
    let text = |v: &Option<crate::Value>| match v {
        Some(crate::Value::Text(t)) => t.clone(),
        Some(crate::Value::Int(i)) => i.to_string(),
        _ => "?".into(),
    };
    let shown: Vec<String> = rows
        .iter()
        .take(UNPLACED_SHOWN_MAX)
        .map(|r| {
            let (pid, class, cores) = (text(&r[0]), text(&r[1]), text(&r[2]));
            let place = match &r[4] {
                Some(crate::Value::Text(w)) => format!("waiting on {w}"),
                _ => "on no node yet".into(),
            };
            format!(
                "{pid} ({class}, {cores} core(s), {} MB, {place})",
                text(&r[3])
            )
        })
        .collect();
    if shown.is_empty() {
        return None;
    }
    let more = if rows.len() > UNPLACED_SHOWN_MAX {
        " and more"
    } else {
        ""
    };
    Some(format!(
        "not started yet: {}{more}. An LC proc holds whole \
         cores and BE procs wait for idle ones; `tabos ps` shows what runs, `tabos status` \
         each node's cores",
        shown.join(", ")
    ))
}

/// Procs [`unplaced`] names at most.
pub const UNPLACED_SHOWN_MAX: usize = 4;

/// What an application's procs run: a program and the arguments before
/// the role (e.g. the `tabos` binary and `kv-task`).
#[derive(Debug, Clone)]
pub struct Program {
    pub path: String,
    pub args: Vec<String>,
}

impl Program {
    /// This process's own executable, with `task` (e.g. `kv-task`) as the
    /// first argument: how the CLI runs an application's procs.
    pub fn this_executable(task: &str) -> std::io::Result<Program> {
        Ok(Program {
            path: std::env::current_exe()?.display().to_string(),
            args: vec![task.to_string()],
        })
    }
}

/// Checks an application's name for its things (a KV service, a web
/// site): 1 to `max` bytes of letters, digits, `-` or `_`, so that it is one
/// component of a path and of a mailbox name. The error says so, naming
/// the `kind` of name.
pub fn check_name(kind: &str, name: &str, max: usize) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{kind} name {name:?}: 1..={max} letters, digits, '-' or '_'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn quick_exits_back_off_and_a_long_life_resets() {
        // Each wait is jittered: between half and all of its step.
        let within = |p: Duration, step: Duration| {
            assert!(p >= step / 2 && p <= step, "{p:?} for a step of {step:?}")
        };
        let mut b = RestartBackoff::default();
        let quick = Duration::from_millis(10);
        within(b.after_exit(quick), Duration::from_millis(250));
        within(b.after_exit(quick), Duration::from_millis(500));
        for _ in 0..20 {
            b.after_exit(quick);
        }
        within(b.after_exit(quick), RESTART_WAIT_MAX);
        assert_eq!(b.after_exit(QUICK_EXIT), Duration::ZERO);
        within(b.after_exit(quick), Duration::from_millis(250));
    }

    /// A call cut short is asked again until it is answered — and only
    /// then; an answer, good or bad, is returned at once; an outage longer
    /// than the bound ends with the last cut-short error.
    #[tokio::test]
    async fn calls_are_asked_again_through_an_outage_and_no_longer() {
        let away = || Error::Status(tonic::Status::unavailable("the database is unavailable"));
        let mut calls = 0;
        let r: Result<u32, Error> = through_outage(Duration::from_secs(60), || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    Err(away())
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 3);

        let mut calls = 0;
        let r: Result<u32, Error> = through_outage(Duration::from_secs(60), || {
            calls += 1;
            async { Err(Error::Status(tonic::Status::not_found("no such proc"))) }
        })
        .await;
        assert_eq!(r.unwrap_err().code(), Some(tonic::Code::NotFound));
        assert_eq!(calls, 1, "an answer is not asked again");

        let mut calls = 0;
        let r: Result<u32, Error> = through_outage(Duration::from_millis(300), || {
            calls += 1;
            async { Err(away()) }
        })
        .await;
        assert!(r.unwrap_err().is_cut_short());
        assert!(
            (2..20).contains(&calls),
            "asked again while the bound lasted, then given up: {calls} calls"
        );
    }
}
