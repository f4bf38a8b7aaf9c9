//! Jobs after their submission, from any client: what jobs there are and
//! how far each has got ([`list`], [`status`]), stopping one
//! ([`cancel`]), and removing what a finished one left ([`remove`]) —
//! `tabos mr ls|status|cancel|rm`. Everything is read from the job's names
//! (its spec, status and task records), so the command that submitted the
//! job need not be running.

use std::time::Duration;

use tabos_client::Client;

use crate::driver::COORDINATORS_MAX;
use crate::spec::{validate_job_id, Layout, Spec, Task, TaskState, FS_USER};
use crate::{Error, Result};

/// What a cancelled job's status says.
pub const CANCELLED: &str = "failed: cancelled";
/// Longest `cancel` waits for each evicted proc to exit.
pub const EXIT_WAIT: Duration = Duration::from_secs(10);
/// Most jobs `list` shows.
pub const JOBS_MAX: usize = 1_000;
/// Most entries `remove` deletes (names and files together).
pub const REMOVE_ENTRIES_MAX: u64 = 1_000_000;

/// A job as its names tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    pub id: String,
    /// `wordcount` or `grep`.
    pub kind: String,
    /// `running`, `done`, or `failed: why`.
    pub status: String,
    pub maps: usize,
    pub maps_done: usize,
    pub reducers: usize,
    pub reducers_done: usize,
    /// Attempts beyond the first, over all tasks.
    pub retries: u32,
}

impl JobStatus {
    pub fn running(&self) -> bool {
        self.status == "running"
    }
}

fn not_found(id: &str, e: tabos_client::Error) -> Error {
    if e.code() == Some(tonic::Code::NotFound) {
        Error::NotFound(format!(
            "no job {id} in this realm (tabos mr ls lists them)"
        ))
    } else {
        Error::Api(e)
    }
}

/// Job `id`'s status and progress.
pub async fn status(client: &Client, realm: &str, id: &str) -> Result<JobStatus> {
    validate_job_id(id)?;
    let layout = Layout::new(id);
    let mut c = client.clone();
    let spec = c
        .name_get(realm, &layout.spec())
        .await
        .map_err(|e| not_found(id, e))?;
    let spec = Spec::from_json(&spec.data)?;
    let status = c.name_get(realm, &layout.status()).await?;
    let mut s = JobStatus {
        id: id.to_string(),
        kind: spec.kind.clone(),
        status: String::from_utf8_lossy(&status.data).into_owned(),
        maps: spec.maps,
        maps_done: 0,
        reducers: spec.reducers,
        reducers_done: 0,
        retries: 0,
    };
    for (t, st) in tasks(&mut c, realm, &layout).await? {
        s.retries += st.attempt.saturating_sub(1);
        match t {
            Task::Map(_) if st.done => s.maps_done += 1,
            Task::Reduce(_) if st.done => s.reducers_done += 1,
            _ => {}
        }
    }
    Ok(s)
}

/// The job's task records.
async fn tasks(c: &mut Client, realm: &str, layout: &Layout) -> Result<Vec<(Task, TaskState)>> {
    let listed = crate::procs::list(c, realm, &layout.tasks()).await?;
    Ok(listed
        .into_iter()
        .filter_map(|e| {
            let name = e.path.rsplit('/').next().unwrap_or_default().to_string();
            Some((Task::parse(&name)?, TaskState::decode(&e.data).ok()?))
        })
        .collect())
}

/// The realm's jobs, oldest first (job ids sort by their start).
pub async fn list(client: &Client, realm: &str) -> Result<Vec<JobStatus>> {
    let mut c = client.clone();
    let entries = match c.name_readdir(realm, "/mr").await {
        Ok(r) => r.entries,
        Err(e) if e.code() == Some(tonic::Code::NotFound) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut ids: Vec<String> = entries
        .into_iter()
        .filter(|e| e.kind() == tabos_client::proto::NameKind::Dir)
        .filter_map(|e| e.path.rsplit('/').next().map(str::to_string))
        .filter(|id| validate_job_id(id).is_ok())
        .collect();
    ids.sort();
    let mut out = Vec::new();
    for id in ids.into_iter().take(JOBS_MAX) {
        // A job whose names are half gone (being removed) is left out.
        if let Ok(s) = status(client, realm, &id).await {
            out.push(s);
        }
    }
    Ok(out)
}

/// Evicts `pid` if it is still there, and waits (bounded) for its exit;
/// whether it was live.
async fn evict(c: &mut Client, realm: &str, pid: &str) -> Result<bool> {
    match c.evict(realm, pid).await {
        Ok(()) => {
            let _ = tokio::time::timeout(EXIT_WAIT, c.wait_exit(realm, pid)).await;
            Ok(true)
        }
        Err(e)
            if matches!(
                e.code(),
                Some(tonic::Code::NotFound) | Some(tonic::Code::FailedPrecondition)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Stops running job `id`: marks it failed ("cancelled") so that no
/// coordinator — and no submitting command — starts anything more, evicts
/// its coordinators, marks it again (a leader may have written its own
/// end meanwhile), then evicts its tasks' live attempts. Returns the pids
/// evicted.
pub async fn cancel(client: &Client, realm: &str, id: &str) -> Result<Vec<String>> {
    let s = status(client, realm, id).await?;
    if !s.running() {
        return Err(Error::Invalid(format!(
            "job {id} has already ended ({})",
            s.status
        )));
    }
    let layout = Layout::new(id);
    let mut c = client.clone();
    let mark = |c: &mut Client| {
        let (mut c, realm, path) = (c.clone(), realm.to_string(), layout.status());
        async move {
            c.name_set(&realm, &path, CANCELLED.as_bytes().to_vec(), None, None)
                .await
        }
    };
    mark(&mut c).await?;
    let mut evicted = Vec::new();
    for n in 1..=COORDINATORS_MAX {
        let pid = layout.coordinator_pid(n);
        if evict(&mut c, realm, &pid).await? {
            evicted.push(pid);
        }
    }
    mark(&mut c).await?;
    evicted.extend(stop_tasks(client, realm, id).await?);
    Ok(evicted)
}

/// Evicts the live attempts of job `id`'s unfinished tasks (waiting,
/// bounded, for each to exit): what a failed or cancelled job does so that
/// nothing of it keeps running. Returns the pids evicted.
pub async fn stop_tasks(client: &Client, realm: &str, id: &str) -> Result<Vec<String>> {
    let layout = Layout::new(id);
    let mut c = client.clone();
    let mut evicted = Vec::new();
    for (t, st) in tasks(&mut c, realm, &layout).await? {
        if st.done {
            continue;
        }
        let pid = layout.pid(t, st.attempt);
        if evict(&mut c, realm, &pid).await? {
            evicted.push(pid);
        }
    }
    Ok(evicted)
}

/// Fails running job `id` with `why` from outside it (its submitter, when
/// no coordinator can): its status says `failed: why` (set only over
/// `running`, so an end written meanwhile stands), then its coordinators
/// and tasks are stopped. Whether this call failed it.
pub async fn fail(client: &Client, realm: &str, id: &str, why: &str) -> Result<bool> {
    let layout = Layout::new(id);
    let mut c = client.clone();
    let status = c.name_get(realm, &layout.status()).await?;
    if status.data != b"running" {
        return Ok(false);
    }
    let text = format!("failed: {why}").into_bytes();
    match c
        .name_set(realm, &layout.status(), text, Some(status.version), None)
        .await
    {
        Ok(_) => {}
        // Ended meanwhile (a version moved on): that end stands.
        Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    for n in 1..=COORDINATORS_MAX {
        evict(&mut c, realm, &layout.coordinator_pid(n)).await?;
    }
    stop_tasks(client, realm, id).await?;
    Ok(true)
}

/// Most bytes of a proc's stderr read to find its last lines.
pub const STDERR_TAIL_BYTES_MAX: usize = 64 << 10;

/// The last `n` non-empty lines `pid` wrote to stderr (none if its log
/// cannot be read): what a failure is explained with.
pub async fn last_stderr_lines(client: &Client, realm: &str, pid: &str, n: usize) -> Vec<String> {
    let Ok(log) = client
        .clone()
        .logs(realm, pid, tabos_client::proto::LogStream::Stderr)
        .await
    else {
        return Vec::new();
    };
    let data = &log.data[log.data.len().saturating_sub(STDERR_TAIL_BYTES_MAX)..];
    let text = String::from_utf8_lossy(data);
    let mut lines: Vec<String> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .rev()
        .take(n)
        .map(str::to_string)
        .collect();
    lines.reverse();
    lines
}

/// Removes what job `id` left — its names, its files under `/mr/<id>`
/// (inputs planned, intermediates, output) and its mailbox — once it has
/// ended. Returns the names and files removed.
pub async fn remove(client: &Client, realm: &str, id: &str) -> Result<u64> {
    let s = status(client, realm, id).await?;
    if s.running() {
        return Err(Error::Invalid(format!(
            "job {id} is running: tabos mr cancel {id} first"
        )));
    }
    let layout = Layout::new(id);
    let mut c = client.clone();
    let mut removed = 0u64;
    // Files first: the names say the job exists until the end.
    let mut stack = vec![layout.root()];
    while let Some(dir) = stack.last().cloned() {
        if removed >= REMOVE_ENTRIES_MAX {
            return Err(Error::Invalid(format!(
                "stopped after removing {removed} entries"
            )));
        }
        let listing = match c.fs_readdir(realm, FS_USER, &dir).await {
            Ok(l) => l,
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                stack.pop();
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if listing.entries.is_empty() {
            c.fs_rmdir(realm, FS_USER, &dir).await?;
            stack.pop();
            removed += 1;
            continue;
        }
        for e in listing.entries {
            if e.r#type() == tabos_client::proto::FileType::Dir {
                stack.push(e.path);
            } else {
                c.fs_unlink(realm, FS_USER, &e.path).await?;
                removed += 1;
            }
        }
    }
    match c.remove_mailbox(realm, &layout.mailbox()).await {
        Err(e) if e.code() != Some(tonic::Code::NotFound) => return Err(e.into()),
        _ => {}
    }
    let mut stack = vec![layout.root()];
    while let Some(dir) = stack.last().cloned() {
        if removed >= REMOVE_ENTRIES_MAX {
            return Err(Error::Invalid(format!(
                "stopped after removing {removed} entries"
            )));
        }
        let listing = c.name_readdir(realm, &dir).await?;
        if listing.entries.is_empty() {
            c.name_remove(realm, &dir, None, None).await?;
            stack.pop();
            removed += 1;
            continue;
        }
        for e in listing.entries {
            if e.kind() == tabos_client::proto::NameKind::Dir {
                stack.push(e.path);
            } else {
                c.name_remove(realm, &e.path, None, None).await?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}
