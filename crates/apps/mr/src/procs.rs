//! The coordinator, mapper and reducer procs (σOS thesis section 5.1),
//! each a native proc that talks to its node only through the tabos API.
//!
//! * A **mapper** (map task i, attempt n) reads its split list from tabos
//!   fs, maps the splits from the machine's files, writes one sealed run
//!   per reducer to `/mr/<job>/inter/m<i>.a<n>.r<k>` and announces each in
//!   the reducer's namespace directory (`/mr/<job>/r<k>/m<i>`), then
//!   reports to the job's mailbox.
//! * A **reducer** (k) watches its directory — a dir watch opened before
//!   it lists the directory, so no announcement is missed — and folds each
//!   run in as it appears. A run it cannot read (gone, cut, damaged) it
//!   asks to be redone by creating `/mr/<job>/rerun/m<i>.<n>`, and waits
//!   for a newer attempt's announcement. With every map task's run in, it
//!   writes its text output to a temporary file and renames it into place
//!   (so `part-<k>` is always whole), then reports.
//! * A **coordinator** campaigns for leadership of the job (a session with
//!   the job's TTL, `Election` over `/mr/<job>/coord`, fencing
//!   `/mr/<job>/task`). The leader rebuilds the job's state from the
//!   namespace — the task records, the procs they name, the rerun
//!   requests — so a standby that takes over from a dead leader carries
//!   on where it stopped. It records each attempt *before* spawning it
//!   (with its pid chosen), spawns and records with the leadership's fence
//!   (a deposed leader can do neither), waits for each proc's exit
//!   (WaitExit), spawns a failed task again (at most
//!   [`ATTEMPTS_MAX`](crate::spec::ATTEMPTS_MAX) attempts) and reruns a map
//!   task a reducer could not read. With every task done it sets the
//!   job's status to `done` and resigns, which releases the standby.
//!
//! Mappers are LC procs (one core each: the worker's cores bound how many
//! map at once); reducers and coordinators are BE procs, which reserve
//! nothing — a reducer waiting for announcements must never hold the core
//! a map task it waits for needs. Coordinators declare 0 cores (they
//! mostly wait), so they never keep a reducer from being admitted.

use std::collections::{BTreeMap, HashMap, HashSet};

use tabos_client::fs::CHUNK_BYTES;
use tabos_client::names::{CreateOptions, Election, Session};
use tabos_client::proto::{self, Fence};
use tabos_client::Client;
use tokio::sync::mpsc;

use crate::spec::{Announcement, Layout, Spec, Task, TaskState, ATTEMPTS_MAX, FS_USER};
use crate::watch::{DirWatch, Watched};
use crate::{format, split, stream, task, Error, Result};

/// The exit status of a coordinator that stops because it lost its lead,
/// its session or its node (BSD's `EX_TEMPFAIL`): the job is not at fault,
/// and whoever follows the job starts another coordinator if none is left.
/// Any other error exit of a coordinator fails its job.
pub const EXIT_CARRY_ON: i32 = 75;

/// What every proc of a job has: the API, its realm, pid and job.
pub struct Ctx {
    pub client: Client,
    pub realm: String,
    pub pid: String,
    pub layout: Layout,
    pub spec: Spec,
}

/// The entry point of the procs: `coordinator JOB N`, `map JOB I ATTEMPT`
/// or `reduce JOB K ATTEMPT`, with `TABOS_ADDR`, `TABOS_REALM` and
/// `TABOS_PID` from procd. Returns the proc's exit status.
pub fn main(args: &[String]) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mr: cannot start a runtime: {e}");
            return 2;
        }
    };
    let coordinator = args.first().is_some_and(|r| r == "coordinator");
    match rt.block_on(run(args)) {
        Ok(()) => 0,
        Err(e) if coordinator && !e.is_the_jobs_fault() => {
            eprintln!("mr: {e}; another coordinator carries on");
            EXIT_CARRY_ON
        }
        Err(e) => {
            eprintln!("mr: {e}");
            1
        }
    }
}

async fn run(args: &[String]) -> Result<()> {
    let usage = || {
        Error::Invalid(
            "usage: coordinator JOB N | map JOB I ATTEMPT | reduce JOB K ATTEMPT".to_string(),
        )
    };
    let num =
        |s: Option<&String>| -> Result<u64> { s.and_then(|s| s.parse().ok()).ok_or_else(usage) };
    let role = args.first().ok_or_else(usage)?;
    let job = args.get(1).ok_or_else(usage)?;
    let ctx = Ctx::from_env(job).await?;
    match role.as_str() {
        "coordinator" => coordinator(ctx, num(args.get(2))? as u32).await,
        "map" => {
            let (i, n) = (num(args.get(2))? as usize, num(args.get(3))? as u32);
            mapper(ctx, i, n).await
        }
        "reduce" => {
            let (k, n) = (num(args.get(2))? as usize, num(args.get(3))? as u32);
            reducer(ctx, k, n).await
        }
        _ => Err(usage()),
    }
}

impl Ctx {
    async fn from_env(job: &str) -> Result<Ctx> {
        crate::spec::validate_job_id(job)?;
        let tabos_client::app::ProcEnv {
            client, realm, pid, ..
        } = tabos_client::app::ProcEnv::from_env()
            .await
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let layout = Layout::new(job);
        let mut c = client.clone();
        let spec = Spec::from_json(&c.name_get(&realm, &layout.spec()).await?.data)?;
        Ok(Ctx {
            client,
            realm,
            pid,
            layout,
            spec,
        })
    }

    /// Fault injection (tests): stops here if the job says this attempt
    /// pauses at `at`, until `/mr/<job>/resume` exists.
    async fn pause_point(&self, t: Task, attempt: u32, at: &str) -> Result<()> {
        let Some(p) = &self.spec.pause else {
            return Ok(());
        };
        if p.task != t.name() || p.attempt != attempt || p.at != at {
            return Ok(());
        }
        let mut c = self.client.clone();
        let os_pid = std::process::id().to_string().into_bytes();
        c.name_set(&self.realm, &self.layout.paused(t), os_pid, None, None)
            .await?;
        eprintln!("mr: {} paused at {at}", t.name());
        c.wait_exists(&self.realm, &self.layout.resume()).await?;
        Ok(())
    }

    async fn report(&self, text: String) -> Result<()> {
        let mut c = self.client.clone();
        c.send(
            &self.realm,
            &self.pid,
            &self.layout.mailbox(),
            text.into_bytes(),
        )
        .await?;
        Ok(())
    }

    /// Writes `data` as file `path` (replacing it), in API-sized chunks.
    async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let mut c = self.client.clone();
        self.create_empty(&mut c, path).await?;
        for (n, chunk) in data.chunks(CHUNK_BYTES).enumerate() {
            let at = (n * CHUNK_BYTES) as i64;
            c.fs_write(&self.realm, FS_USER, path, at, chunk.to_vec(), false)
                .await?;
        }
        Ok(())
    }

    /// Writes the pieces `pieces` brings, in order, as file `path`
    /// (replacing it), each as it comes and as it is (no copy); returns
    /// the bytes written. Each piece is one write: at most
    /// [`CHUNK_BYTES`], as the reducer makes them.
    async fn write_pieces(&self, path: &str, mut pieces: mpsc::Receiver<Vec<u8>>) -> Result<usize> {
        let mut c = self.client.clone();
        self.create_empty(&mut c, path).await?;
        let mut at = 0usize;
        while let Some(piece) = pieces.recv().await {
            let n = piece.len();
            if n > CHUNK_BYTES {
                return Err(Error::Invalid(format!(
                    "an output piece of {n} bytes is more than one write takes"
                )));
            }
            c.fs_write(&self.realm, FS_USER, path, at as i64, piece, false)
                .await?;
            at += n;
        }
        Ok(at)
    }

    /// Makes `path` an empty file, whatever was there.
    async fn create_empty(&self, c: &mut Client, path: &str) -> Result<()> {
        match c.fs_unlink(&self.realm, FS_USER, path).await {
            Err(e) if e.code() != Some(tonic::Code::NotFound) => return Err(e.into()),
            _ => {}
        }
        c.fs_create(&self.realm, FS_USER, path, 0).await?;
        Ok(())
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, tabos_client::Error> {
        let mut out = Vec::new();
        self.client
            .clone()
            .fs_read_all(&self.realm, FS_USER, path, &mut out)
            .await?;
        Ok(out)
    }
}

/// A reducer hands its output to the writer in pieces of about this many
/// bytes (a line, at most twice [`format::KEY_BYTES_MAX`] and a count,
/// past it: a piece stays within one write's [`CHUNK_BYTES`]).
const OUTPUT_PIECE_BYTES: usize = 1 << 20;
const _: () = assert!(OUTPUT_PIECE_BYTES + 2 * format::KEY_BYTES_MAX + 32 <= CHUNK_BYTES);
/// Pieces of a reducer's output waiting for the writer, at most: the merge
/// waits beyond it.
const OUTPUT_PIECES_QUEUED: usize = 4;

/// Bytes read past a split's end per request while looking for the end of
/// its last line.
const TAIL_CHUNK_BYTES: u32 = 64 << 10;

impl Ctx {
    /// A split of a file in tabos fs: its bytes from
    /// [`split::first_byte`] through the end of its last line.
    async fn fetch_split(&self, sp: &split::Split) -> Result<Vec<u8>> {
        let path = sp
            .path
            .to_str()
            .ok_or_else(|| Error::Invalid(format!("input {} is not UTF-8", sp.path.display())))?;
        let mut c = self.client.clone();
        let end = sp.offset + sp.len;
        let mut at = split::first_byte(sp);
        let mut out = Vec::with_capacity((end - at) as usize);
        while at < end {
            let n = (end - at).min(CHUNK_BYTES as u64) as u32;
            let got = c.fs_read(&self.realm, FS_USER, path, at as i64, n).await?;
            if got.is_empty() {
                return Ok(out); // the file was cut meanwhile
            }
            at += got.len() as u64;
            out.extend_from_slice(&got);
        }
        loop {
            let got = c
                .fs_read(&self.realm, FS_USER, path, at as i64, TAIL_CHUNK_BYTES)
                .await?;
            match got.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    out.extend_from_slice(&got[..=i]);
                    return Ok(out);
                }
                None if got.is_empty() => return Ok(out),
                None => {
                    at += got.len() as u64;
                    out.extend_from_slice(&got);
                }
            }
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Invalid(format!("a worker thread failed: {e}")))?
}

/// A user job's code: the task's working directory, where procd put it.
fn code_dir() -> Result<std::path::PathBuf> {
    std::env::current_dir().map_err(|e| Error::Invalid(format!("no working directory: {e}")))
}

/// Map task `i`, attempt `attempt`.
async fn mapper(ctx: Ctx, i: usize, attempt: u32) -> Result<()> {
    let t = Task::Map(i);
    ctx.pause_point(t, attempt, "start").await?;
    let plan = ctx.read_file(&ctx.layout.plan(i)).await?;
    let splits = split::decode_task(&plan)?;
    let bytes_in: u64 = splits.iter().map(|s| s.len).sum();
    let reducers = ctx.spec.reducers;
    let runs = if let Some(job) = ctx.spec.user.clone() {
        // A user job: its map program over the split's records, run in
        // this proc's working directory — the job's code.
        let fetched = if ctx.spec.inputs_in_fs {
            let mut fetched = Vec::with_capacity(splits.len());
            for sp in &splits {
                fetched.push(ctx.fetch_split(sp).await?);
            }
            Some(fetched)
        } else {
            None
        };
        blocking(move || {
            let input = stream::map_input(&splits, fetched.as_deref())?;
            let mut runner = stream::Runner::new(code_dir()?, &job);
            stream::map(&mut runner, &job, input, reducers)
        })
        .await?
    } else if ctx.spec.inputs_in_fs {
        let kind = ctx.spec.job_kind()?;
        // Through the API, from whichever node holds the files.
        let mut fetched = Vec::with_capacity(splits.len());
        for sp in splits {
            let bytes = ctx.fetch_split(&sp).await?;
            fetched.push((sp, bytes));
        }
        blocking(move || task::map_fetched(&kind, &fetched, reducers)).await?
    } else {
        let kind = ctx.spec.job_kind()?;
        blocking(move || task::map_task(&kind, &splits, reducers)).await?
    };
    // The announcements must name only whole files: write every run first.
    let mut announced = Vec::with_capacity(reducers);
    let mut bytes_out = 0;
    for (k, run) in runs.into_iter().enumerate() {
        let path = if run.is_empty() {
            None
        } else {
            let path = ctx.layout.intermediate(i, attempt, k);
            let sealed = format::seal(run);
            bytes_out += sealed.len();
            ctx.write_file(&path, &sealed).await?;
            Some(path)
        };
        announced.push(Announcement { attempt, path });
    }
    ctx.pause_point(t, attempt, "output").await?;
    let mut c = ctx.client.clone();
    for (k, a) in announced.iter().enumerate() {
        c.name_set(
            &ctx.realm,
            &ctx.layout.announcement(k, i),
            a.encode(),
            None,
            None,
        )
        .await?;
    }
    ctx.report(format!(
        "map m{i} a{attempt}: {bytes_in} bytes in, {bytes_out} bytes out"
    ))
    .await
}

/// Reducer `k`, attempt `attempt`.
async fn reducer(ctx: Ctx, k: usize, attempt: u32) -> Result<()> {
    let t = Task::Reduce(k);
    ctx.pause_point(t, attempt, "start").await?;
    let dir = ctx.layout.reducer_dir(k);
    let mut c = ctx.client.clone();
    // Watch first, then list: an announcement made in between is seen twice
    // at worst (and taken once), never missed.
    let mut watch = DirWatch::open(&c, &ctx.realm, &dir).await?;
    let mut r = Reduction::default();
    for e in list(&mut c, &ctx.realm, &dir).await? {
        r.offer(&ctx, &e.path, &e.data).await?;
    }
    while r.taken.len() < ctx.spec.maps {
        let ev = match watch.next().await? {
            Watched::Event(ev) => *ev,
            // Cut off (the database failed over): list again.
            Watched::Reopened => {
                for e in list(&mut c, &ctx.realm, &dir).await? {
                    r.offer(&ctx, &e.path, &e.data).await?;
                }
                continue;
            }
        };
        if !matches!(ev.op(), proto::WatchOp::Create | proto::WatchOp::Set) {
            continue;
        }
        match c.name_get(&ctx.realm, &ev.path).await {
            Ok(e) => r.offer(&ctx, &e.path, &e.data).await?,
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    drop(watch);
    ctx.pause_point(t, attempt, "output").await?;
    let Reduction { runs, bytes_in, .. } = r;
    let tmp = ctx.layout.output_tmp(k, attempt);
    let bytes_out = if let Some(job) = ctx.spec.user.clone() {
        // A user job: what its reduce program prints is the output.
        let text = blocking(move || {
            let runs: Vec<&[u8]> = runs.values().map(|r| r.as_slice()).collect();
            let mut runner = stream::Runner::new(code_dir()?, &job);
            stream::reduce(&mut runner, &job, &runs)
        })
        .await?;
        ctx.write_file(&tmp, &text).await?;
        text.len()
    } else {
        // The merge hands its text over in pieces, written as they come:
        // the node stores one piece while the next is merged, and the
        // reducer never holds its whole output.
        let (tx, rx) = mpsc::channel::<Vec<u8>>(OUTPUT_PIECES_QUEUED);
        let merged = blocking(move || {
            let runs: Vec<&[u8]> = runs.values().map(|r| r.as_slice()).collect();
            let room = OUTPUT_PIECE_BYTES + OUTPUT_PIECE_BYTES / 4;
            let mut piece = Vec::with_capacity(room);
            // False once the writer has stopped (it failed, and says why).
            let mut open = true;
            format::merge_with(&runs, |key, count| {
                if open {
                    format::put_text(&mut piece, key, count);
                    if piece.len() >= OUTPUT_PIECE_BYTES {
                        let full = std::mem::replace(&mut piece, Vec::with_capacity(room));
                        open = tx.blocking_send(full).is_ok();
                    }
                }
            });
            if open && !piece.is_empty() {
                let _ = tx.blocking_send(piece);
            }
            Ok(())
        });
        let (merged, written) = tokio::join!(merged, ctx.write_pieces(&tmp, rx));
        merged?;
        written?
    };
    c.fs_rename(&ctx.realm, FS_USER, &tmp, &ctx.layout.output(k))
        .await?;
    ctx.report(format!(
        "reduce r{k} a{attempt}: {bytes_in} bytes in, {bytes_out} bytes out"
    ))
    .await
}

/// A reducer's state: the runs taken so far (checked, merged at the end).
#[derive(Default)]
struct Reduction {
    /// Map task → its run's records, encoded.
    runs: BTreeMap<usize, Vec<u8>>,
    taken: HashSet<usize>,
    /// Map task → the attempt whose output could not be read.
    bad: HashMap<usize, u32>,
    bytes_in: usize,
}

impl Reduction {
    /// Takes the announcement at `path` unless its map task is taken or it
    /// is the attempt already found unreadable.
    async fn offer(&mut self, ctx: &Ctx, path: &str, data: &[u8]) -> Result<()> {
        let Some(map) = path
            .rsplit('/')
            .next()
            .and_then(Task::parse)
            .and_then(|t| match t {
                Task::Map(i) if i < ctx.spec.maps => Some(i),
                _ => None,
            })
        else {
            return Ok(());
        };
        if self.taken.contains(&map) {
            return Ok(());
        }
        let a = Announcement::decode(data)?;
        if self.bad.get(&map).is_some_and(|&bad| a.attempt <= bad) {
            return Ok(());
        }
        let Some(file) = a.path else {
            self.taken.insert(map);
            return Ok(());
        };
        // A user job's runs are records of bytes; a built-in's, counts.
        let check: fn(&[u8]) -> Result<usize> = if ctx.spec.user.is_some() {
            stream::check_run
        } else {
            format::check
        };
        let run = match ctx.read_file(&file).await {
            Ok(mut bytes) => format::unseal(&bytes).and_then(check).map(|_| {
                let n = bytes.len();
                bytes.truncate(n - format::SEAL_BYTES);
                (bytes, n)
            }),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                Err(Error::Corrupt(format!("{file} is gone")))
            }
            Err(e) => return Err(e.into()),
        };
        match run {
            Ok((run, n)) => {
                self.runs.insert(map, run);
                self.bytes_in += n;
                self.taken.insert(map);
            }
            Err(e) => {
                eprintln!(
                    "mr: cannot read map m{map} a{}: {e}; asking for a rerun",
                    a.attempt
                );
                self.bad.insert(map, a.attempt);
                let made = ctx
                    .client
                    .clone()
                    .name_create(
                        &ctx.realm,
                        &ctx.layout.rerun(map, a.attempt),
                        tabos_client::proto::NameKind::File,
                        Vec::new(),
                        CreateOptions::default(),
                    )
                    .await;
                match made {
                    Err(e) if e.code() != Some(tonic::Code::AlreadyExists) => return Err(e.into()),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// What the coordinator's event loop hears.
enum Event {
    Exited {
        task: Task,
        pid: String,
        status: proto::ProcStatus,
    },
    Rerun {
        map: usize,
        attempt: u32,
        path: String,
    },
    Lost,
}

/// A coordinator (the n-th started for the job).
async fn coordinator(ctx: Ctx, n: u32) -> Result<()> {
    let ttl = std::time::Duration::from_millis(ctx.spec.session_ttl_ms);
    let session = Session::open(&ctx.client, &ctx.realm, &ctx.pid, ttl).await?;
    let election = Election::new(
        &ctx.client,
        &ctx.realm,
        &ctx.layout.election(),
        &ctx.layout.tasks(),
    );
    let me = format!("{} {}", ctx.pid, std::process::id());
    let lead = election.campaign(&session, &me).await?;
    eprintln!("mr: coordinator {n} leads at epoch {}", lead.epoch);
    let mut c = ctx.client.clone();
    let status = c.name_get(&ctx.realm, &ctx.layout.status()).await?;
    if status.data.starts_with(b"done") || status.data.starts_with(b"failed") {
        // The job ended under another leader: nothing to do.
        election.resign(&session).await?;
        let _ = session.close().await;
        return Ok(());
    }
    let outcome = Leader::new(&ctx, lead.fence).run(&session).await;
    let text = match outcome {
        Ok(()) => "done".to_string(),
        Err(Error::Failed(ref why)) => format!("failed: {why}"),
        // Lost the lead, the session or the node: the standby carries on.
        Err(e) if !e.is_the_jobs_fault() => return Err(e),
        // Anything else is the job's own fault: it fails, saying why.
        Err(ref e) => format!("failed: coordinator {}: {e}", ctx.pid),
    };
    if text.starts_with("failed") {
        // Nothing of a failed job keeps running (its reducers would wait
        // for map output that is never coming): stopped before the status
        // says so, so whoever follows the job finds them ended.
        crate::control::stop_tasks(&ctx.client, &ctx.realm, &ctx.layout.job).await?;
    }
    c.name_set(
        &ctx.realm,
        &ctx.layout.status(),
        text.into_bytes(),
        None,
        None,
    )
    .await?;
    election.resign(&session).await?;
    let _ = session.close().await;
    outcome
}

/// The leader's view of the job.
struct Leader<'a> {
    ctx: &'a Ctx,
    fence: Fence,
    state: BTreeMap<Task, TaskState>,
    /// How each task's last failed attempt ended.
    last_failure: HashMap<Task, String>,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
}

impl<'a> Leader<'a> {
    fn new(ctx: &'a Ctx, fence: Fence) -> Leader<'a> {
        let (tx, rx) = mpsc::unbounded_channel();
        Leader {
            ctx,
            fence,
            state: BTreeMap::new(),
            last_failure: HashMap::new(),
            tx,
            rx,
        }
    }

    async fn run(mut self, session: &Session) -> Result<()> {
        let (ctx, mut c) = (self.ctx, self.ctx.client.clone());
        // Rerun requests: watch, then list (as the reducers do).
        let dir = ctx.layout.reruns();
        let mut reruns = DirWatch::open(&c, &ctx.realm, &dir).await?;
        for e in list(&mut c, &ctx.realm, &dir).await? {
            if let Some(ev) = rerun_event(&e.path) {
                let _ = self.tx.send(ev);
            }
        }
        let tx = self.tx.clone();
        let (mut c2, realm) = (c.clone(), ctx.realm.clone());
        let watcher = tokio::spawn(async move {
            loop {
                match reruns.next().await {
                    Ok(Watched::Event(ev)) if ev.op() == proto::WatchOp::Create => {
                        if let Some(ev) = rerun_event(&ev.path) {
                            let _ = tx.send(ev);
                        }
                    }
                    Ok(Watched::Event(_)) => {}
                    // Cut off: list again (a rerun is handled once).
                    Ok(Watched::Reopened) => match list(&mut c2, &realm, &dir).await {
                        Ok(entries) => {
                            for e in entries {
                                if let Some(ev) = rerun_event(&e.path) {
                                    let _ = tx.send(ev);
                                }
                            }
                        }
                        Err(_) => break,
                    },
                    Err(_) => break,
                }
            }
            let _ = tx.send(Event::Lost);
        });
        let result = self.drive(session).await;
        watcher.abort();
        result
    }

    async fn drive(&mut self, session: &Session) -> Result<()> {
        let ctx = self.ctx;
        let mut c = ctx.client.clone();
        // Rebuild from the namespace what an earlier leader did: the task
        // records, in one listing.
        let mut recorded: HashMap<String, Vec<u8>> = list(&mut c, &ctx.realm, &ctx.layout.tasks())
            .await?
            .into_iter()
            .filter_map(|e| Some((e.path.rsplit('/').next()?.to_string(), e.data)))
            .collect();
        for t in ctx.spec.tasks() {
            match recorded.remove(&t.name()) {
                Some(data) => {
                    self.state.insert(t, TaskState::decode(&data)?);
                    self.adopt(t).await?;
                }
                None => self.start(t, 1).await?,
            }
        }
        while self.state.values().any(|s| !s.done) {
            let ev = tokio::select! {
                ev = self.rx.recv() => ev.ok_or_else(|| Error::Interrupted("event channel closed".into()))?,
                () = session.lost() => return Err(Error::Interrupted("the coordinator's session lapsed".into())),
            };
            match ev {
                Event::Lost => return Err(Error::Interrupted("the rerun watch ended".into())),
                Event::Exited { task, pid, status } => self.exited(task, &pid, status).await?,
                Event::Rerun { map, attempt, path } => {
                    let t = Task::Map(map);
                    let current = self.state.get(&t).cloned();
                    if let Some(s) = current {
                        if s.attempt == attempt {
                            eprintln!(
                                "mr: a reducer cannot read m{map} a{attempt}: running it again"
                            );
                            self.start(t, attempt + 1).await?;
                        }
                    }
                    match c.name_remove(&ctx.realm, &path, None, None).await {
                        Err(e) if e.code() != Some(tonic::Code::NotFound) => return Err(e.into()),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes over task `t` as recorded: waits for its proc, or starts it.
    async fn adopt(&mut self, t: Task) -> Result<()> {
        let s = self.state[&t].clone();
        if s.done {
            return Ok(());
        }
        let mut c = self.ctx.client.clone();
        match c.proc_status(&self.ctx.realm, &s.pid).await {
            Ok(_) => {
                self.wait_for(t, s.pid);
                Ok(())
            }
            // Recorded, never spawned: the last leader stopped in between.
            Err(e) if e.code() == Some(tonic::Code::NotFound) => self.spawn(t, s.attempt).await,
            Err(e) => Err(e.into()),
        }
    }

    /// Starts attempt `attempt` of `t`: records it, then spawns it.
    async fn start(&mut self, t: Task, attempt: u32) -> Result<()> {
        if attempt > ATTEMPTS_MAX {
            let last = self
                .state
                .get(&t)
                .map(|s| s.pid.clone())
                .unwrap_or_default();
            let why = self.last_failure.get(&t).cloned().unwrap_or_default();
            return Err(Error::Failed(format!(
                "task {} failed {ATTEMPTS_MAX} times; the last attempt, {last}, {why}",
                t.name()
            )));
        }
        let s = TaskState {
            attempt,
            pid: self.ctx.layout.pid(t, attempt),
            done: false,
        };
        self.record(t, s).await?;
        self.spawn(t, attempt).await
    }

    async fn record(&mut self, t: Task, s: TaskState) -> Result<()> {
        let ctx = self.ctx;
        ctx.client
            .clone()
            .name_set(
                &ctx.realm,
                &ctx.layout.task(t),
                s.encode(),
                None,
                Some(self.fence.clone()),
            )
            .await?;
        self.state.insert(t, s);
        Ok(())
    }

    async fn spawn(&mut self, t: Task, attempt: u32) -> Result<()> {
        let ctx = self.ctx;
        let pid = ctx.layout.pid(t, attempt);
        let (role, class) = match t {
            Task::Map(_) => ("map", proto::ProcClass::Lc),
            Task::Reduce(_) => ("reduce", proto::ProcClass::Be),
        };
        let index = match t {
            Task::Map(i) | Task::Reduce(i) => i,
        };
        let mut args = ctx.spec.program_args.clone();
        args.extend([
            role.to_string(),
            ctx.layout.job.clone(),
            index.to_string(),
            attempt.to_string(),
        ]);
        let proc_ = proto::ProcDescriptor {
            pid: pid.clone(),
            parent: ctx.pid.clone(),
            kind: proto::ProcKind::Native.into(),
            class: class.into(),
            program: ctx.spec.program.clone(),
            args,
            cores: Some(1),
            // A mapper reads the job's inputs on the machine (read-only, in
            // its jail); nothing else does.
            host_paths: match t {
                Task::Map(_) => ctx.spec.host_paths.clone(),
                Task::Reduce(_) => Vec::new(),
            },
            // A user job's tasks run in its code (their working directory).
            code: ctx
                .spec
                .user
                .as_ref()
                .map(|u| u.code.clone())
                .unwrap_or_default(),
            ..Default::default()
        };
        let spawned = ctx
            .client
            .clone()
            .spawn_fenced(&ctx.realm, proc_, Some(self.fence.clone()))
            .await;
        match spawned {
            Ok(_) => {}
            // Spawned by an earlier leader after all.
            Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => {}
            // Refused for what the task is (the realm may not see its
            // inputs, the program is not there): every attempt would be.
            Err(e)
                if matches!(
                    e.code(),
                    Some(
                        tonic::Code::InvalidArgument
                            | tonic::Code::PermissionDenied
                            | tonic::Code::NotFound
                    )
                ) =>
            {
                let why = match &e {
                    tabos_client::Error::Status(s) => s.message().to_string(),
                    other => other.to_string(),
                };
                return Err(Error::Failed(format!(
                    "cannot spawn task {}: {why}",
                    t.name()
                )));
            }
            Err(e) => return Err(e.into()),
        }
        self.wait_for(t, pid);
        Ok(())
    }

    fn wait_for(&self, task: Task, pid: String) {
        let (mut c, realm, tx) = (
            self.ctx.client.clone(),
            self.ctx.realm.clone(),
            self.tx.clone(),
        );
        tokio::spawn(async move {
            // A failed wait (the node going away) is reported as a failed
            // proc; the attempt that follows finds out whether it was.
            let status = c
                .wait_exit(&realm, &pid)
                .await
                .unwrap_or_else(|e| proto::ProcStatus {
                    pid: pid.clone(),
                    state: proto::ProcState::Unspecified as i32,
                    error: e.to_string(),
                    ..Default::default()
                });
            let _ = tx.send(Event::Exited { task, pid, status });
        });
    }

    async fn exited(&mut self, t: Task, pid: &str, status: proto::ProcStatus) -> Result<()> {
        let Some(s) = self.state.get(&t).cloned() else {
            return Ok(());
        };
        if s.pid != pid || s.done {
            return Ok(()); // an attempt since replaced
        }
        if status.state() == proto::ProcState::Unspecified {
            return Err(Error::Interrupted(format!(
                "lost track of {pid}: {}",
                status.error
            )));
        }
        if status.state() == proto::ProcState::Exited && status.exit_status == Some(0) {
            return self.record(t, TaskState { done: true, ..s }).await;
        }
        // Its own last words, so the job's failure says what went wrong.
        let said = crate::control::last_stderr_lines(&self.ctx.client, &self.ctx.realm, pid, 1)
            .await
            .into_iter()
            .next();
        let how = match (status.state(), status.exit_status) {
            (proto::ProcState::Exited, Some(n)) => format!("exited with status {n}"),
            (state, _) => state.to_string(),
        };
        let why = match said.or_else(|| (!status.error.is_empty()).then(|| status.error.clone())) {
            Some(said) => format!("{how}: {said}"),
            None => how,
        };
        eprintln!("mr: {pid} {why}; starting it again");
        self.last_failure.insert(t, why);
        self.start(t, s.attempt + 1).await
    }
}

/// A namespace directory's entries, all of them: a listing cut short
/// (`more`) is an error, since every caller must see every entry (job
/// sizes keep the directories within one reply; see
/// [`MAPS_MAX`](crate::spec::MAPS_MAX)).
pub(crate) async fn list(c: &mut Client, realm: &str, dir: &str) -> Result<Vec<proto::NameEntry>> {
    let listed = c.name_readdir(realm, dir).await?;
    if listed.more {
        return Err(Error::Invalid(format!(
            "{dir} has more entries than one listing holds"
        )));
    }
    Ok(listed.entries)
}

fn rerun_event(path: &str) -> Option<Event> {
    let name = path.rsplit('/').next()?;
    let (m, a) = name.split_once('.')?;
    match Task::parse(m)? {
        Task::Map(map) => Some(Event::Rerun {
            map,
            attempt: a.parse().ok()?,
            path: path.to_string(),
        }),
        Task::Reduce(_) => None,
    }
}
