//! A job as the procs see it, and where its state lives in tabos.
//!
//! The job's description is the namespace file `/mr/<job>/job` (JSON). Its
//! state is spread over the namespace and the filesystem, so that any
//! coordinator — the first or a standby that took over — can rebuild it:
//!
//! ```text
//! namespace                          filesystem (tabos fs, user `mr`)
//! /mr/<job>/job        the spec      /mr/<job>/plan/m<i>      map task i's splits
//! /mr/<job>/task/<t>   "<attempt> <pid> <state>" per task, set by the leader only
//! /mr/<job>/r<k>/m<i>  "<attempt> <path|->": map i's output for reducer k
//! /mr/<job>/rerun/m<i>.<attempt>     a reducer could not read that output
//! /mr/<job>/coord/     the election (leader symlink, epoch)
//! /mr/<job>/status     "running" | "done …" | "failed: …"
//!                                    /mr/<job>/inter/m<i>.a<n>.r<k>  sealed runs
//!                                    /mr/<job>/out/part-<k>   text output
//! ```
//!
//! Tasks are `m<i>` (map task i) and `r<k>` (reducer k); a task's attempt
//! n runs as proc `<job>-<task>-a<n>`, a coordinator as `<job>-coord-<n>`.

use serde::{Deserialize, Serialize};

use crate::job::Kind;
use crate::{Error, Result};

/// The filesystem user a job's files are read and written as: empty, so
/// that the node takes it from the credential — the submitter's for the
/// driver, and for the procs their own, which act for their spawner's
/// user (so every file of a job has one owner).
pub const FS_USER: &str = "";
/// Attempts of one task before the job fails.
pub const ATTEMPTS_MAX: u32 = 4;
/// Longest job id.
pub const JOB_ID_BYTES_MAX: usize = 64;
/// Most entries one namespace ReadDir reply holds (the node's limit).
pub const LISTING_MAX: usize = 10_000;
/// Most map tasks of one job: the records of all its tasks, maps and
/// reducers, must fit one listing of `/mr/<job>/task` (what a coordinator
/// taking over and the progress line read).
pub const MAPS_MAX: usize = LISTING_MAX - crate::job::REDUCERS_MAX;

/// What the coordinator and its tasks need to know about a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    pub id: String,
    /// `wordcount`, `grep`, or `user` (its programs in `user`).
    pub kind: String,
    /// The grep pattern's bytes (empty for word count).
    #[serde(default)]
    pub pattern: Vec<u8>,
    pub maps: usize,
    pub reducers: usize,
    /// The coordinators' session lease: how long a dead leader keeps the
    /// standby waiting.
    pub session_ttl_ms: u64,
    /// The executable the procs run (`args` then name the role), and the
    /// arguments that come before the role (e.g. `mr-task` for `tabos`).
    pub program: String,
    #[serde(default)]
    pub program_args: Vec<String>,
    /// Fault injection for tests: a task attempt that stops and waits.
    #[serde(default)]
    pub pause: Option<Pause>,
    /// The inputs' host paths (absolute), which mappers are spawned to see
    /// read-only: their realm must allow them (`tabos realm set
    /// --allow-host-path`).
    #[serde(default)]
    pub host_paths: Vec<String>,
    /// The inputs are in the realm's tabos fs: mappers read their splits
    /// through the API.
    #[serde(default)]
    pub inputs_in_fs: bool,
    /// A user job (`kind` "user"): its code and programs.
    #[serde(default)]
    pub user: Option<crate::stream::UserJob>,
}

/// Stops attempt `attempt` of task `task` at `at` (`start` or `output`):
/// it announces itself in `/mr/<job>/paused/<task>` (its OS pid as it sees
/// it — in a jail, its pid namespace's — as data)
/// and waits for `/mr/<job>/resume` — a test kills it meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub task: String,
    pub attempt: u32,
    pub at: String,
}

impl Spec {
    pub fn job_kind(&self) -> Result<Kind> {
        match self.kind.as_str() {
            "wordcount" => Ok(Kind::WordCount),
            "grep" => Kind::grep(&self.pattern),
            k => Err(Error::Invalid(format!("unknown job kind {k:?}"))),
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a spec always serializes")
    }

    pub fn from_json(bytes: &[u8]) -> Result<Spec> {
        let s: Spec = serde_json::from_slice(bytes)
            .map_err(|e| Error::Invalid(format!("bad job description: {e}")))?;
        validate_job_id(&s.id)?;
        match (&s.user, s.kind.as_str()) {
            (Some(u), "user") => u.validate()?,
            (None, _) => {
                s.job_kind()?;
            }
            (Some(_), k) => return Err(Error::Invalid(format!("a {k} job has no programs"))),
        }
        if s.reducers == 0 || s.reducers > crate::job::REDUCERS_MAX {
            return Err(Error::Invalid("bad reducer count".into()));
        }
        if s.maps > MAPS_MAX {
            return Err(Error::Invalid(format!("more than {MAPS_MAX} map tasks")));
        }
        Ok(s)
    }

    /// Every task, maps first.
    pub fn tasks(&self) -> Vec<Task> {
        (0..self.maps)
            .map(Task::Map)
            .chain((0..self.reducers).map(Task::Reduce))
            .collect()
    }
}

/// A job id is 1..=64 characters of `[a-z0-9-]`: it goes into pids,
/// namespace paths and file names.
pub fn validate_job_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= JOB_ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "a job id is 1..={JOB_ID_BYTES_MAX} characters of a-z 0-9 -, not {id:?}"
        )))
    }
}

/// One task of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Task {
    Map(usize),
    Reduce(usize),
}

impl Task {
    pub fn name(self) -> String {
        match self {
            Task::Map(i) => format!("m{i}"),
            Task::Reduce(k) => format!("r{k}"),
        }
    }

    pub fn parse(s: &str) -> Option<Task> {
        let n = s.get(1..)?.parse().ok()?;
        match s.as_bytes().first()? {
            b'm' => Some(Task::Map(n)),
            b'r' => Some(Task::Reduce(n)),
            _ => None,
        }
    }

    pub fn is_map(self) -> bool {
        matches!(self, Task::Map(_))
    }
}

/// Where a job's state lives.
#[derive(Debug, Clone)]
pub struct Layout {
    pub job: String,
}

impl Layout {
    pub fn new(job: &str) -> Layout {
        Layout { job: job.into() }
    }
    pub fn root(&self) -> String {
        format!("/mr/{}", self.job)
    }
    pub fn spec(&self) -> String {
        format!("/mr/{}/job", self.job)
    }
    pub fn status(&self) -> String {
        format!("/mr/{}/status", self.job)
    }
    pub fn tasks(&self) -> String {
        format!("/mr/{}/task", self.job)
    }
    pub fn task(&self, t: Task) -> String {
        format!("/mr/{}/task/{}", self.job, t.name())
    }
    pub fn reducer_dir(&self, k: usize) -> String {
        format!("/mr/{}/r{k}", self.job)
    }
    pub fn announcement(&self, k: usize, map: usize) -> String {
        format!("/mr/{}/r{k}/m{map}", self.job)
    }
    pub fn reruns(&self) -> String {
        format!("/mr/{}/rerun", self.job)
    }
    pub fn rerun(&self, map: usize, attempt: u32) -> String {
        format!("/mr/{}/rerun/m{map}.{attempt}", self.job)
    }
    pub fn election(&self) -> String {
        format!("/mr/{}/coord", self.job)
    }
    pub fn paused(&self, t: Task) -> String {
        format!("/mr/{}/paused/{}", self.job, t.name())
    }
    pub fn resume(&self) -> String {
        format!("/mr/{}/resume", self.job)
    }
    pub fn plan(&self, map: usize) -> String {
        format!("/mr/{}/plan/m{map}", self.job)
    }
    pub fn intermediate(&self, map: usize, attempt: u32, k: usize) -> String {
        format!("/mr/{}/inter/m{map}.a{attempt}.r{k}", self.job)
    }
    pub fn output(&self, k: usize) -> String {
        format!("/mr/{}/out/part-{k}", self.job)
    }
    /// An attempt's output before it is renamed into place.
    pub fn output_tmp(&self, k: usize, attempt: u32) -> String {
        format!("/mr/{}/out/.part-{k}.a{attempt}", self.job)
    }
    /// The job's mailbox: tasks report what they did (kept in the
    /// message log, for provenance).
    pub fn mailbox(&self) -> String {
        format!("mr.{}", self.job)
    }
    pub fn pid(&self, t: Task, attempt: u32) -> String {
        format!("{}-{}-a{attempt}", self.job, t.name())
    }
    pub fn coordinator_pid(&self, n: u32) -> String {
        format!("{}-coord-{n}", self.job)
    }
}

/// A task's record: which attempt runs as which proc, and whether it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    pub attempt: u32,
    pub pid: String,
    pub done: bool,
}

impl TaskState {
    pub fn encode(&self) -> Vec<u8> {
        let state = if self.done { "done" } else { "running" };
        format!("{} {} {state}", self.attempt, self.pid).into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<TaskState> {
        let s = std::str::from_utf8(bytes).map_err(|_| Error::Corrupt("task state".into()))?;
        let mut it = s.split(' ');
        let (Some(a), Some(pid), Some(state), None) = (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(Error::Corrupt(format!("task state {s:?}")));
        };
        Ok(TaskState {
            attempt: a
                .parse()
                .map_err(|_| Error::Corrupt(format!("task state {s:?}")))?,
            pid: pid.into(),
            done: state == "done",
        })
    }
}

/// A map output's announcement: the attempt that wrote it and its file
/// (`None`: the map task had nothing for this reducer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub attempt: u32,
    pub path: Option<String>,
}

impl Announcement {
    pub fn encode(&self) -> Vec<u8> {
        format!("{} {}", self.attempt, self.path.as_deref().unwrap_or("-")).into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Announcement> {
        let s = std::str::from_utf8(bytes).map_err(|_| Error::Corrupt("announcement".into()))?;
        let (a, p) = s
            .split_once(' ')
            .ok_or_else(|| Error::Corrupt(format!("announcement {s:?}")))?;
        Ok(Announcement {
            attempt: a
                .parse()
                .map_err(|_| Error::Corrupt(format!("announcement {s:?}")))?,
            path: (p != "-").then(|| p.to_string()),
        })
    }
}
