//! tabos-mr: MapReduce on tabos, after σOS's `mr` (thesis section 5.1).
//!
//! The parts:
//!
//! * [`split`] — inputs (files and directories of the machine) cut into
//!   byte-range splits, and a streaming reader that gives each split the
//!   lines that *start* inside it (Hadoop's rule), so every line is read by
//!   exactly one mapper however the cuts fall.
//! * [`job`] — the built-in jobs (word count, grep) as map and reduce
//!   functions over bytes (input need not be UTF-8), the partition function
//!   that sends a key to its reducer, and in-mapper combining.
//! * [`format`] — the intermediate and output record format: length-prefixed
//!   keys with a count, sorted by key.
//! * [`task`] — the work of one mapper (a split to one sorted run per
//!   reducer) and one reducer (runs merged into its output).
//! * [`stream`] — user jobs: map, combine and reduce as programs of the
//!   job's uploaded code (native or wasm) speaking records on stdin and
//!   stdout, run by the same mapper and reducer procs.
//! * [`direct`] — the same jobs computed in one process, the reference the
//!   tests compare with.
//! * [`procs`], [`driver`], [`spec`] — the coordinator, mapper and reducer
//!   procs over the tabos API and the client that submits and follows a
//!   job; [`watch`] — a directory watch that outlives being cut off;
//!   [`control`] — listing, following, cancelling and removing jobs from
//!   any client.

pub mod control;
pub mod direct;
pub mod driver;
pub mod format;
pub mod job;
pub mod procs;
pub mod spec;
pub mod split;
pub mod stream;
pub mod task;
pub mod watch;

/// Errors of the MapReduce library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid: {0}")]
    Invalid(String),
    /// What was named (a job) is not there.
    #[error("not found: {0}")]
    NotFound(String),
    #[error("corrupt intermediate data: {0}")]
    Corrupt(String),
    /// The tabos API refused or failed a call.
    #[error("{0}")]
    Api(#[from] tabos_client::Error),
    /// A user's program failed (its status, signal, trap or time limit,
    /// and its last words).
    #[error("{0}")]
    Program(String),
    /// The job failed (a task failed every attempt, or could not be
    /// started at all).
    #[error("the job failed: {0}")]
    Failed(String),
    /// A proc of the job lost what it stood on — its lead, its session,
    /// its watch, or its node for a while — and stops; the job goes on
    /// (another coordinator carries on, a task runs again).
    #[error("interrupted: {0}")]
    Interrupted(String),
}

impl tabos_client::app::CutShort for Error {
    /// A call of the tabos API cut short (not answered): asked again by
    /// the driver through an outage.
    fn is_cut_short(&self) -> bool {
        matches!(self, Error::Api(e) if e.is_cut_short())
    }
}

impl Error {
    /// Whether the job itself is at fault — its spec, its inputs, what its
    /// realm allows — so that another coordinator would fail the same way.
    /// Anything else (the node or the database away, a session or lead
    /// lost, a watch cut off) is a setback another coordinator recovers
    /// from.
    pub fn is_the_jobs_fault(&self) -> bool {
        match self {
            Error::Failed(_)
            | Error::Program(_)
            | Error::Invalid(_)
            | Error::NotFound(_)
            | Error::Corrupt(_) => true,
            Error::Api(e) => matches!(
                e.code(),
                Some(
                    tonic::Code::InvalidArgument
                        | tonic::Code::PermissionDenied
                        | tonic::Code::Unauthenticated
                )
            ),
            Error::Io { .. } | Error::Interrupted(_) => false,
        }
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::Api(s.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}
