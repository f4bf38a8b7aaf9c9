//! Submitting a job and following it: what `tabos mr`, `tabos demo`, the
//! tests and the benchmark use.
//!
//! [`Job::submit`] plans the input (on this machine: the inputs are its
//! files), writes each map task's split list into tabos fs, lays out the
//! job's namespace directories, creates the job's mailbox (with its
//! delivered messages kept, for provenance) and spawns the coordinators — a
//! leader and, if asked, a standby. [`Job::wait`] follows the task records
//! with dir watches (no polling) and reports [`Progress`]; should every
//! coordinator end while the job is not finished, it spawns another (at
//! most [`COORDINATORS_MAX`]). [`Job::output`] reads the reducers' part
//! files back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tabos_client::app::{through_outage, OUTAGE_MAX};
use tabos_client::names::CreateOptions;
use tabos_client::proto::{self, ProcState};
use tabos_client::Client;
use tokio::sync::mpsc;

use crate::job::Kind;
use crate::spec::{Layout, Pause, Spec, Task, TaskState, FS_USER, MAPS_MAX};
use crate::split::Split;
use crate::{format, split, Error, Result};

/// Coordinators one job may start in all.
pub const COORDINATORS_MAX: u32 = 8;
/// How long [`Job::wait`] waits for the coordinators to exit after the job.
pub const COORDINATOR_EXIT_WAIT: Duration = Duration::from_secs(10);
/// Default bytes of input per map task.
pub const TASK_BYTES_DEFAULT: u64 = 32 << 20;
/// Default coordinator session lease.
pub const SESSION_TTL_DEFAULT: Duration = Duration::from_secs(3);

/// What a job computes: a built-in job, or the user's own programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    BuiltIn(Kind),
    User(crate::stream::UserJob),
}

impl From<Kind> for Work {
    fn from(k: Kind) -> Work {
        Work::BuiltIn(k)
    }
}

impl From<crate::stream::UserJob> for Work {
    fn from(j: crate::stream::UserJob) -> Work {
        Work::User(j)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Submit {
    pub kind: Work,
    pub inputs: Vec<PathBuf>,
    pub reducers: usize,
    /// Input bytes per map task (small files are packed together).
    pub task_bytes: u64,
    /// Leave out files that do not look like text.
    pub text_only: bool,
    /// The executable the procs run, and the arguments before the role.
    pub program: PathBuf,
    pub program_args: Vec<String>,
    /// Start a standby coordinator beside the leader.
    pub standby: bool,
    pub session_ttl: Duration,
    /// Fault injection (tests).
    pub pause: Option<Pause>,
    /// The inputs are files (or directories) in the realm's tabos fs, not
    /// on this machine: mappers read their splits through the API, from
    /// whichever node they run on — no shared file system.
    pub inputs_in_fs: bool,
    /// Refuse the job when an input cannot be read by the realm's procs,
    /// instead of leaving that input out ([`Job::skipped`]).
    pub strict: bool,
}

impl Submit {
    /// A job with the defaults: 4 reducers, [`TASK_BYTES_DEFAULT`], a
    /// standby coordinator.
    pub fn new(
        kind: impl Into<Work>,
        inputs: Vec<PathBuf>,
        program: PathBuf,
        program_args: Vec<String>,
    ) -> Submit {
        Submit {
            kind: kind.into(),
            inputs,
            reducers: 4,
            task_bytes: TASK_BYTES_DEFAULT,
            text_only: false,
            program,
            program_args,
            standby: true,
            session_ttl: SESSION_TTL_DEFAULT,
            pause: None,
            inputs_in_fs: false,
            strict: false,
        }
    }
}

/// How far a job has got.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    pub maps: usize,
    pub maps_done: usize,
    pub reducers: usize,
    pub reducers_done: usize,
    pub bytes: u64,
    pub bytes_mapped: u64,
    /// Attempts beyond the first, over all tasks.
    pub retries: u32,
    pub elapsed: Duration,
}

/// One phase of a finished job, from the proc table.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    /// Procs run (attempts included).
    pub procs: i64,
    /// From the phase's first spawn to its last exit.
    pub span: Duration,
    /// The procs' run times, summed.
    pub run: Duration,
}

/// A job submitted to a node.
pub struct Job {
    client: Client,
    realm: String,
    pub layout: Layout,
    pub spec: Spec,
    /// Input bytes of each map task.
    task_bytes: Vec<u64>,
    pub input_files: usize,
    /// Inputs left out because the realm's procs could not read them.
    pub skipped: Vec<split::Skipped>,
    started: Instant,
    coordinators: u32,
}

fn new_job_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // Microseconds and the process id: unique on the node for any human
    // rate of submission, and sorted by time.
    format!("j{:x}-{:x}", now.as_micros(), std::process::id())
}

fn ok_if_exists<T>(r: Result<T, tabos_client::Error>) -> Result<()> {
    match r {
        Err(e) if e.code() != Some(tonic::Code::AlreadyExists) => Err(e.into()),
        _ => Ok(()),
    }
}

/// `call` on a clone of `client`, asked again while it is cut short — the
/// node or its database away in a failover — for up to
/// [`OUTAGE_MAX`]. A job's submission and
/// its driver's reads and writes are all safe to send twice: the names and
/// files a submission creates are its job's alone (its id is new), so
/// "exists" after a call cut short is its own first sending.
async fn again<T, Fut>(
    client: &Client,
    mut call: impl FnMut(Client) -> Fut,
) -> std::result::Result<T, tabos_client::Error>
where
    Fut: std::future::Future<Output = std::result::Result<T, tabos_client::Error>>,
{
    through_outage(OUTAGE_MAX, || call(client.clone())).await
}

impl Job {
    /// Plans `s`'s input and starts the job on the node.
    pub async fn submit(client: &Client, realm: &str, s: Submit) -> Result<Job> {
        if s.reducers == 0 || s.reducers > crate::job::REDUCERS_MAX {
            return Err(Error::Invalid(format!(
                "a job has 1..={} reducers",
                crate::job::REDUCERS_MAX
            )));
        }
        if s.inputs.is_empty() {
            return Err(Error::Invalid("a job needs at least one input".into()));
        }
        let program = s
            .program
            .to_str()
            .ok_or_else(|| Error::Invalid("the program's path is not UTF-8".into()))?
            .to_string();
        // The realm by name: what the job's SQL and its procs go by.
        let realm = match realm {
            "" => client.clone().who_am_i().await?.default_realm,
            r => r.to_string(),
        };
        let realm = realm.as_str();
        let planned = if s.inputs_in_fs {
            plan_in_fs(client, realm, &s).await?
        } else {
            plan_on_host(client, realm, &s).await?
        };
        if s.strict {
            if let Some(line) = split::skipped_summary(&planned.skipped) {
                return Err(Error::Invalid(line));
            }
        }
        let Planned {
            tasks,
            files,
            host_paths,
            skipped,
        } = planned;
        let (kind, pattern, user) = match &s.kind {
            Work::BuiltIn(Kind::WordCount) => ("wordcount", Vec::new(), None),
            Work::BuiltIn(Kind::Grep { pattern }) => ("grep", pattern.clone(), None),
            Work::User(job) => {
                job.validate()?;
                // Each input line reaches the map program as a record keyed
                // by its file: refused here, not retried in every mapper.
                for sp in tasks.iter().flatten() {
                    crate::stream::check_input_path(&sp.path)?;
                }
                ("user", Vec::new(), Some(job.clone()))
            }
        };
        let spec = Spec {
            id: new_job_id(),
            kind: kind.into(),
            pattern,
            maps: tasks.len(),
            reducers: s.reducers,
            session_ttl_ms: s.session_ttl.as_millis() as u64,
            program,
            program_args: s.program_args.clone(),
            pause: s.pause.clone(),
            host_paths,
            inputs_in_fs: s.inputs_in_fs,
            user,
        };
        let layout = Layout::new(&spec.id);
        // Every step below is asked again through an outage (`again`), and
        // "exists" is taken as done: the job's names are its own.
        // Files: /mr is shared by the realm's users (01777, sticky: whoever
        // submits first makes it, and each job's tree under it is its
        // submitter's alone to remove).
        ok_if_exists(
            again(client, |mut c| async move {
                c.fs_mkdir(realm, FS_USER, "/mr", 0o1777).await
            })
            .await,
        )?;
        for d in ["", "/plan", "/inter", "/out"] {
            let dir = &format!("{}{d}", layout.root());
            ok_if_exists(
                again(client, |mut c| async move {
                    c.fs_mkdir(realm, FS_USER, dir, 0o755).await
                })
                .await,
            )?;
        }
        for (i, t) in tasks.iter().enumerate() {
            let plan = split::encode_task(t);
            let path = &layout.plan(i);
            for (n, chunk) in plan.chunks(tabos_client::fs::CHUNK_BYTES).enumerate() {
                // At its offset: written twice, the same bytes.
                let at = (n * tabos_client::fs::CHUNK_BYTES) as i64;
                again(client, |mut c| async move {
                    c.fs_write(realm, FS_USER, path, at, chunk.to_vec(), true)
                        .await
                })
                .await?;
            }
        }
        // Names.
        let mut dirs = vec![layout.tasks(), layout.reruns(), layout.election()];
        dirs.push(format!("{}/paused", layout.root()));
        dirs.extend((0..s.reducers).map(|k| layout.reducer_dir(k)));
        for d in &dirs {
            again(
                client,
                |mut c| async move { c.name_mkdir_all(realm, d).await },
            )
            .await?;
        }
        let spec_json = &spec.to_json();
        for (path, data) in [
            (layout.spec(), spec_json.as_slice()),
            (layout.status(), b"running".as_slice()),
        ] {
            let path = &path;
            ok_if_exists(
                again(client, |mut c| async move {
                    c.name_create(
                        realm,
                        path,
                        tabos_client::proto::NameKind::File,
                        data.to_vec(),
                        CreateOptions::default(),
                    )
                    .await
                })
                .await,
            )?;
        }
        let mailbox = &layout.mailbox();
        ok_if_exists(
            again(client, |mut c| async move {
                c.create_mailbox(realm, mailbox, 0, Some(true)).await
            })
            .await,
        )?;
        let task_bytes = tasks
            .iter()
            .map(|t| t.iter().map(|s| s.len).sum())
            .collect();
        let mut job = Job {
            client: client.clone(),
            realm: realm.into(),
            layout,
            spec,
            task_bytes,
            input_files: files,
            skipped,
            started: Instant::now(),
            coordinators: 0,
        };
        job.spawn_coordinator().await?;
        if s.standby {
            job.spawn_coordinator().await?;
        }
        Ok(job)
    }

    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// The realm the job runs in, by name.
    pub fn realm(&self) -> &str {
        &self.realm
    }

    pub fn input_bytes(&self) -> u64 {
        self.task_bytes.iter().sum()
    }

    /// Spawns coordinator number `self.coordinators + 1` (a BE proc of 0
    /// cores).
    async fn spawn_coordinator(&mut self) -> Result<String> {
        if self.coordinators >= COORDINATORS_MAX {
            return Err(Error::Failed(format!(
                "{COORDINATORS_MAX} coordinators ended before the job finished"
            )));
        }
        self.coordinators += 1;
        let pid = self.layout.coordinator_pid(self.coordinators);
        let mut args = self.spec.program_args.clone();
        args.extend([
            "coordinator".to_string(),
            self.spec.id.clone(),
            self.coordinators.to_string(),
        ]);
        let p = proto::ProcDescriptor {
            pid: pid.clone(),
            kind: tabos_client::proto::ProcKind::Native.into(),
            class: tabos_client::proto::ProcClass::Be.into(),
            program: self.spec.program.clone(),
            args,
            // Light: it mostly waits, and must never keep a reducer out.
            cores: Some(0),
            ..Default::default()
        };
        // Its pid is new to the job: "exists" is this spawn's own.
        let (p, realm) = (&p, self.realm.as_str());
        ok_if_exists(
            again(&self.client, |mut c| async move {
                c.spawn(realm, p.clone()).await
            })
            .await,
        )?;
        Ok(pid)
    }

    /// Follows the job until it finishes, calling `progress` whenever a
    /// task's record changes. Ok once the job is done; `Error::Failed` if
    /// it failed.
    pub async fn wait(&mut self, mut progress: impl FnMut(&Progress)) -> Result<Progress> {
        enum Ev {
            Changed,
            CoordinatorEnded,
            WatchEnded,
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut c = self.client.clone();
        let mut watches = Vec::new();
        for dir in [self.layout.tasks(), self.layout.root()] {
            let (realm, dir) = (self.realm.as_str(), dir.as_str());
            let mut w = through_outage(OUTAGE_MAX, || {
                crate::watch::DirWatch::open(&self.client, realm, dir)
            })
            .await?;
            let tx = tx.clone();
            watches.push(tokio::spawn(async move {
                // A change, or a watch cut off and opened again: either
                // way the job's state is read again.
                while w.next().await.is_ok() {
                    if tx.send(Ev::Changed).is_err() {
                        return;
                    }
                }
                let _ = tx.send(Ev::WatchEnded);
            }));
        }
        let (client, realm) = (self.client.clone(), self.realm.clone());
        let watch_coordinator = |pid: String| {
            let (mut c, realm, tx) = (client.clone(), realm.clone(), tx.clone());
            tokio::spawn(async move {
                // Told only once the coordinator has ended (or is not
                // there): a wait cut short — its node or the database away
                // in a failover, the node stopping — is asked again. Told
                // at once, the loop below found the coordinator still
                // running, kept it, and never heard of its end: a job
                // whose coordinators then handed over had none, for ever.
                tabos_client::app::until_exited(&mut c, &realm, &pid).await;
                let _ = tx.send(Ev::CoordinatorEnded);
            })
        };
        let mut live: Vec<String> = (1..=self.coordinators)
            .map(|n| self.layout.coordinator_pid(n))
            .collect();
        for pid in &live {
            watch_coordinator(pid.clone());
        }
        // The job's state is read (and written) through an outage: the
        // job runs on through a failover, and so does its driver.
        let (client, realm, status_path) = (
            self.client.clone(),
            self.realm.clone(),
            self.layout.status(),
        );
        let (realm, status_path) = (realm.as_str(), status_path.as_str());
        let status_of = || {
            again(&client, move |mut c| async move {
                c.name_get(realm, status_path).await
            })
        };
        let result = loop {
            let p = through_outage(OUTAGE_MAX, || self.progress()).await?;
            progress(&p);
            let status = status_of().await?.data;
            if status.starts_with(b"done") {
                // The progress above was read before the status: the last
                // tasks may have finished in between. What it ended with.
                let p = through_outage(OUTAGE_MAX, || self.progress()).await?;
                progress(&p);
                break Ok(p);
            }
            if let Some(why) = status.strip_prefix(b"failed: ") {
                break Err(Error::Failed(String::from_utf8_lossy(why).into_owned()));
            }
            match rx.recv().await {
                Some(Ev::Changed) => {}
                Some(Ev::WatchEnded) | None => {
                    break Err(Error::Invalid("the watch of the job ended".into()));
                }
                Some(Ev::CoordinatorEnded) => {
                    // Keep one coordinator alive while the job runs — but
                    // only in place of one the cluster took away (lost
                    // with its node, killed, evicted, or handing over):
                    // one that failed of itself fails the job at once,
                    // with its own words.
                    let mut still = Vec::new();
                    let mut own_failure = None;
                    for pid in live {
                        let st = again(&client, |mut c| {
                            let pid = pid.as_str();
                            async move { c.proc_status(realm, pid).await }
                        })
                        .await?;
                        match coordinator_end(&st) {
                            None => still.push(pid),
                            Some(CoordinatorEnd::TakenAway) => {}
                            Some(CoordinatorEnd::Failed) => {
                                if own_failure.is_none() {
                                    own_failure = Some(self.failure_of(&st).await);
                                }
                            }
                        }
                    }
                    live = still;
                    let status = status_of().await?.data;
                    if status != b"running" {
                        continue; // the status says how it ended
                    }
                    if let Some(why) = own_failure {
                        self.fail(&why).await?;
                        continue;
                    }
                    if live.is_empty() {
                        match self.spawn_coordinator().await {
                            Ok(pid) => {
                                watch_coordinator(pid.clone());
                                live.push(pid);
                            }
                            Err(Error::Failed(why)) => self.fail(&why).await?,
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        };
        for w in watches {
            w.abort();
        }
        // The coordinators leave right after the job ends (the leader
        // resigns, a standby finds the job over); wait for them, bounded,
        // so the proc table tells the whole story.
        if result.is_ok() {
            for pid in &live {
                let wait = c.wait_exit(&self.realm, pid);
                let _ = tokio::time::timeout(COORDINATOR_EXIT_WAIT, wait).await;
            }
        }
        result
    }

    /// A coordinator's own failure, in its own words: the last line of its
    /// stderr, else the error its node recorded.
    async fn failure_of(&self, st: &proto::ProcStatus) -> String {
        let said = crate::control::last_stderr_lines(&self.client, &self.realm, &st.pid, 1)
            .await
            .into_iter()
            .next();
        let how = match (st.state(), st.exit_status) {
            (ProcState::Exited, Some(n)) => format!("exited with status {n}"),
            (state, _) => state.to_string(),
        };
        match said.or_else(|| (!st.error.is_empty()).then(|| st.error.clone())) {
            Some(why) => format!("coordinator {} {how}: {why}", st.pid),
            None => format!("coordinator {} {how}", st.pid),
        }
    }

    /// Marks the job failed (unless it ended meanwhile) and stops whatever
    /// of it still runs.
    async fn fail(&self, why: &str) -> Result<()> {
        // Sent twice, the second finds the job failed already.
        through_outage(OUTAGE_MAX, || {
            crate::control::fail(&self.client, &self.realm, &self.spec.id, why)
        })
        .await?;
        Ok(())
    }

    /// The job's progress from its task records.
    pub async fn progress(&self) -> Result<Progress> {
        let mut c = self.client.clone();
        let listed = crate::procs::list(&mut c, &self.realm, &self.layout.tasks()).await?;
        let mut p = Progress {
            maps: self.spec.maps,
            reducers: self.spec.reducers,
            bytes: self.input_bytes(),
            elapsed: self.started.elapsed(),
            ..Progress::default()
        };
        for e in listed {
            let name = e.path.rsplit('/').next().unwrap_or_default();
            let (Some(t), Ok(s)) = (Task::parse(name), TaskState::decode(&e.data)) else {
                continue;
            };
            p.retries += s.attempt.saturating_sub(1);
            match t {
                Task::Map(i) if s.done => {
                    p.maps_done += 1;
                    p.bytes_mapped += self.task_bytes.get(i).copied().unwrap_or(0);
                }
                Task::Reduce(_) if s.done => p.reducers_done += 1,
                _ => {}
            }
        }
        Ok(p)
    }

    /// The job's output as it is: its part files' bytes, reducer by
    /// reducer (a user job's, whatever its reduce program printed).
    pub async fn output_bytes(&self) -> Result<Vec<Vec<u8>>> {
        let mut parts = Vec::with_capacity(self.spec.reducers);
        for k in 0..self.spec.reducers {
            let mut bytes = Vec::new();
            self.client
                .clone()
                .fs_read_all(&self.realm, FS_USER, &self.layout.output(k), &mut bytes)
                .await?;
            parts.push(bytes);
        }
        Ok(parts)
    }

    /// The job's output as records: every reducer's part (`key<TAB>count`
    /// lines), merged in key order.
    pub async fn output(&self) -> Result<Vec<(Vec<u8>, u64)>> {
        let runs = self
            .output_bytes()
            .await?
            .iter()
            .map(|text| format::from_text(text))
            .collect::<Result<_>>()?;
        Ok(format::merge(runs))
    }

    /// What the job's output adds up to, read part by part with only the
    /// first `n` records (in `order`) kept: a word count's output can
    /// hold millions of keys, and showing twenty of them needs neither a
    /// copy of each nor a sort of all. The reducers' parts hold disjoint
    /// keys (each key has one reducer), so no two records add up.
    pub async fn summary(&self, n: usize, order: Order) -> Result<Summary> {
        let parts = self.output_bytes().await?;
        let (mut records, mut total) = (0usize, 0u64);
        let mut first: std::collections::BinaryHeap<Ranked<'_>> =
            std::collections::BinaryHeap::with_capacity(n.min(SUMMARY_RESERVE_MAX));
        for part in &parts {
            for r in format::text_records(part) {
                let (key, count) = r?;
                records += 1;
                total = total.saturating_add(count);
                if n == 0 {
                    continue;
                }
                let ranked = Ranked { order, key, count };
                // The heap's top is the last of those kept.
                if first.len() < n {
                    first.push(ranked);
                } else if first.peek().is_some_and(|last| ranked < *last) {
                    first.pop();
                    first.push(ranked);
                }
            }
        }
        let top = first
            .into_sorted_vec()
            .into_iter()
            .map(|r| (r.key.into_owned(), r.count))
            .collect();
        Ok(Summary {
            records,
            total,
            top,
        })
    }

    /// The job's phases from the proc table, in one SQL query: per phase
    /// (coordinate, map, reduce) its procs (attempts), the span from its
    /// first spawn to its last exit, and the procs' summed run time.
    pub async fn phases(&self) -> Result<Vec<Phase>> {
        use tabos_client::Value;
        let sql = "SELECT substr(pid, $3, 1) AS phase, count(*) AS procs, \
                   min(spawn_us) AS first_spawn_us, max(exit_us) AS last_exit_us, \
                   sum(exit_us - start_us) AS run_us \
                   FROM proc WHERE realm = $1 AND pid LIKE $2 GROUP BY substr(pid, $3, 1) \
                   ORDER BY min(spawn_us)";
        let params = vec![
            Value::Text(self.realm.clone()),
            Value::Text(format!("{}-%", self.spec.id)),
            Value::Int(self.spec.id.len() as i64 + 2),
        ];
        let r = self.client.clone().sql(sql, params).await?;
        let int = |v: &Option<Value>| match v {
            Some(Value::Int(n)) => *n,
            _ => 0,
        };
        Ok(r.rows
            .iter()
            .map(|row| {
                let name = match &row[0] {
                    Some(Value::Text(t)) if t == "m" => "map",
                    Some(Value::Text(t)) if t == "r" => "reduce",
                    Some(Value::Text(t)) if t == "c" => "coordinate",
                    _ => "other",
                };
                let (first, last) = (int(&row[2]), int(&row[3]));
                Phase {
                    name,
                    procs: int(&row[1]),
                    span: Duration::from_micros(last.saturating_sub(first).max(0) as u64),
                    run: Duration::from_micros(int(&row[4]).max(0) as u64),
                }
            })
            .collect())
    }

    /// The job's task proc whose failure failed the job — its last
    /// allowed attempt ([`ATTEMPTS_MAX`](crate::spec::ATTEMPTS_MAX)) — or
    /// else the task proc that failed last (an error exit, or failed by its
    /// node), a coordinator only when no task failed, and the last `lines`
    /// lines of its stderr: what a person looks at first when a job fails.
    /// The last attempt comes first because other tasks fail beside it (an
    /// input gone fails every map that reads it), and one of their earlier
    /// attempts may end after it. A coordinator that ends a failed job
    /// exits with an error too, after the task whose failure it reports,
    /// and says only what the job's status already says.
    pub async fn last_failure(&self, lines: usize) -> Result<Option<(String, Vec<String>)>> {
        use tabos_client::Value;
        let sql = "SELECT pid FROM proc WHERE realm = $1 AND pid LIKE $2 \
                   AND (state = 'failed' OR (state = 'exited' AND exit_status <> 0)) \
                   ORDER BY CASE WHEN pid LIKE $3 THEN 1 ELSE 0 END, \
                            CASE WHEN pid LIKE $4 THEN 0 ELSE 1 END, exit_us DESC LIMIT 1";
        let params = vec![
            Value::Text(self.realm.clone()),
            Value::Text(format!("{}-%", self.spec.id)),
            Value::Text(format!("{}-coord-%", self.spec.id)),
            Value::Text(format!("{}-%-a{}", self.spec.id, crate::spec::ATTEMPTS_MAX)),
        ];
        let r = self.client.clone().sql(sql, params).await?;
        let Some(Some(Value::Text(pid))) = r.rows.first().and_then(|row| row.first()) else {
            return Ok(None);
        };
        let said = crate::control::last_stderr_lines(&self.client, &self.realm, pid, lines).await;
        Ok(Some((pid.clone(), said)))
    }

    /// Takes the tasks' reports from the job's mailbox (so they move to
    /// the message log): each is `(sender pid, text)`.
    pub async fn reports(&self) -> Result<Vec<(String, String)>> {
        let mut c = self.client.clone();
        let mut out = Vec::new();
        loop {
            let batch = c.recv(&self.realm, &self.layout.mailbox(), 0, 0).await?;
            if batch.is_empty() {
                return Ok(out);
            }
            out.extend(
                batch
                    .into_iter()
                    .map(|m| (m.sender, String::from_utf8_lossy(&m.payload).into_owned())),
            );
        }
    }
}

/// How a coordinator's end bears on its job.
enum CoordinatorEnd {
    /// Lost with its node, killed by a signal, evicted, or handing over
    /// ([`crate::procs::EXIT_CARRY_ON`]): another may carry on.
    TakenAway,
    /// Failed of itself: an error exit, or it could not start at all.
    Failed,
}

/// How `st`'s coordinator ended, or `None` while it lives.
fn coordinator_end(st: &proto::ProcStatus) -> Option<CoordinatorEnd> {
    match (st.state(), st.exit_status) {
        (ProcState::Spawned | ProcState::Claimed | ProcState::Running, _) => None,
        (ProcState::Exited, Some(0)) | (ProcState::Evicted, _) => Some(CoordinatorEnd::TakenAway),
        (ProcState::Exited, Some(n)) if n == i64::from(crate::procs::EXIT_CARRY_ON) || n >= 128 => {
            Some(CoordinatorEnd::TakenAway)
        }
        // A proc failed after it started was lost with its node; one that
        // never started could not be started.
        (ProcState::Failed, _) if st.start_us.is_some() => Some(CoordinatorEnd::TakenAway),
        _ => Some(CoordinatorEnd::Failed),
    }
}

/// A job's input, planned: its map tasks, the files they cover, the host
/// paths mappers ask to see, and what was left out.
struct Planned {
    tasks: Vec<Vec<Split>>,
    files: usize,
    host_paths: Vec<String>,
    skipped: Vec<split::Skipped>,
}

/// Map tasks planned over inputs on this machine (absolute paths the
/// realm lets its procs see), read as the realm's procs will read them.
async fn plan_on_host(client: &Client, realm: &str, s: &Submit) -> Result<Planned> {
    // Absolute, so that a mapper finds them from its own working
    // directory, and so that they can be asked for as host paths.
    let inputs = s
        .inputs
        .iter()
        .map(|p| {
            std::fs::canonicalize(p)
                .map_err(|e| Error::Invalid(format!("input {}: {e}", p.display())))
        })
        .collect::<Result<Vec<PathBuf>>>()?;
    let host_paths = host_paths_of(&inputs)?;
    // Refused now, not by the first mapper's spawn: the realm must let
    // its procs see the inputs.
    let realms = client.clone().list_realms().await?;
    let mine = realms.iter().find(|i| i.realm == realm);
    let allowed: Option<&Vec<String>> = mine.map(|r| &r.host_paths);
    if let Some(p) = allowed.and_then(|allowed| {
        host_paths
            .iter()
            .find(|p| !allowed.iter().any(|a| tabos_client::host_path_within(p, a)))
    }) {
        return Err(Error::Invalid(format!(
            "realm {realm:?} does not let its procs see input {p}; its operator can \
                 allow it: tabos realm set {realm} --allow-host-path {p}"
        )));
    }
    // The realm's procs run as a uid of their own when the node is root;
    // planning as root, this command reads as that uid too, so a file the
    // procs cannot read is left out now rather than failing a mapper.
    // SAFETY: geteuid takes no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let reader = match mine.and_then(|r| r.proc_uid) {
        Some(uid) if root => split::Reader::Uid(uid),
        _ => split::Reader::Me,
    };
    let (text_only, want) = (s.text_only, s.task_bytes);
    let (tasks, files, skipped) = tokio::task::spawn_blocking(move || -> Result<_> {
        let planned = split::plan_as(&inputs, want.max(split::SPLIT_BYTES_MIN), text_only, reader)?;
        let (tasks, files) = pack(planned.splits, want)?;
        Ok((tasks, files, planned.skipped))
    })
    .await
    .map_err(|e| Error::Invalid(format!("planning failed: {e}")))??;
    if tasks.is_empty() {
        return Err(Error::Invalid(match split::skipped_summary(&skipped) {
            Some(line) => format!("nothing to read in the inputs: {line}"),
            None => "the inputs hold no (text) file to read".into(),
        }));
    }
    Ok(Planned {
        tasks,
        files,
        host_paths,
        skipped,
    })
}

/// Splits packed into map tasks of about `want` bytes; the tasks and the
/// files they cover.
fn pack(splits: Vec<Split>, want: u64) -> Result<(Vec<Vec<Split>>, usize)> {
    let files = splits.iter().filter(|s| s.offset == 0).count();
    let total: u64 = splits.iter().map(|s| s.len).sum();
    // Few enough tasks for one directory listing.
    let per_task = want.max(total / MAPS_MAX as u64 + 1);
    let tasks = split::pack(splits, per_task);
    if tasks.len() > MAPS_MAX {
        return Err(Error::Invalid(format!(
            "{} map tasks (more than {MAPS_MAX}): too many files for one job",
            tasks.len()
        )));
    }
    Ok((tasks, files))
}

/// Most files a job's inputs in tabos fs may name.
pub const FS_INPUT_FILES_MAX: usize = 100_000;

/// Map tasks planned over inputs in the realm's tabos fs: files and the
/// files under directories (walked in name order), cut into splits.
async fn plan_in_fs(client: &Client, realm: &str, s: &Submit) -> Result<Planned> {
    let mut c = client.clone();
    let mut files: Vec<(PathBuf, u64)> = Vec::new();
    let mut todo: Vec<String> = Vec::new();
    for p in s.inputs.iter().rev() {
        let p = p
            .to_str()
            .ok_or_else(|| Error::Invalid(format!("input {} is not UTF-8", p.display())))?;
        todo.push(p.to_string());
    }
    while let Some(path) = todo.pop() {
        let st = c.fs_stat(realm, &path).await?;
        if st.r#type() == tabos_client::proto::FileType::Dir {
            let listed = c.fs_readdir(realm, FS_USER, &path).await?;
            if listed.more {
                return Err(Error::Invalid(format!(
                    "input directory {path} has more entries than one listing holds"
                )));
            }
            let mut names: Vec<String> = listed
                .entries
                .into_iter()
                .map(|e| {
                    if e.path.starts_with('/') {
                        e.path
                    } else {
                        format!("{}/{}", path.trim_end_matches('/'), e.path)
                    }
                })
                .collect();
            names.sort();
            todo.extend(names.into_iter().rev());
        } else if st.size > 0 {
            files.push((PathBuf::from(&path), st.size as u64));
        }
        if files.len() > FS_INPUT_FILES_MAX {
            return Err(Error::Invalid(format!(
                "the inputs name more than {FS_INPUT_FILES_MAX} files"
            )));
        }
    }
    let want = s.task_bytes.max(split::SPLIT_BYTES_MIN);
    let (tasks, files) = pack(split::cut(files, want), s.task_bytes)?;
    Ok(Planned {
        tasks,
        files,
        host_paths: Vec::new(),
        skipped: Vec::new(),
    })
}

/// The host paths mappers ask to see for `inputs` (absolute): the inputs
/// themselves, or — past the most a proc may ask for — their directories.
fn host_paths_of(inputs: &[PathBuf]) -> Result<Vec<String>> {
    let text = |p: &Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| Error::Invalid(format!("input {} is not UTF-8", p.display())))
    };
    let mut paths: Vec<String> = inputs.iter().map(|p| text(p)).collect::<Result<_>>()?;
    paths.sort();
    paths.dedup();
    if paths.len() > tabos_client::HOST_PATHS_MAX {
        paths = inputs
            .iter()
            .map(|p| text(p.parent().unwrap_or(Path::new("/"))))
            .collect::<Result<_>>()?;
        paths.sort();
        paths.dedup();
    }
    if paths.len() > tabos_client::HOST_PATHS_MAX {
        return Err(Error::Invalid(format!(
            "inputs in {} directories: at most {} (give their common directory)",
            paths.len(),
            tabos_client::HOST_PATHS_MAX
        )));
    }
    Ok(paths)
}

/// Records [`Job::summary`] makes room for up front, at most: asked for
/// more (a large `--top`), its heap grows only as records come. (It never
/// holds more than `n`: a record pushed past that takes the last one's
/// place.)
const SUMMARY_RESERVE_MAX: usize = 4_096;

/// Which records [`Job::summary`] keeps: a word count's most frequent
/// (ties by key), or the first by key (grep's files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    MostFrequent,
    ByKey,
}

/// A job's output, summed up ([`Job::summary`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Its records (distinct keys).
    pub records: usize,
    /// Their counts, added up.
    pub total: u64,
    /// The first records in the order asked, first first.
    pub top: Vec<(Vec<u8>, u64)>,
}

/// A record as [`Job::summary`] ranks it: less is first.
struct Ranked<'a> {
    order: Order,
    key: std::borrow::Cow<'a, [u8]>,
    count: u64,
}

impl Ranked<'_> {
    fn rank(&self) -> (std::cmp::Reverse<u64>, &[u8]) {
        match self.order {
            Order::MostFrequent => (std::cmp::Reverse(self.count), &self.key),
            // By key alone: every record's count ranks the same.
            Order::ByKey => (std::cmp::Reverse(0), &self.key),
        }
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Ranked<'_> {}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}
