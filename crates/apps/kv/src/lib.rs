//! tabos-kv: the elastic sharded key-value service of σOS (thesis section
//! 5.2, Figure 5-1), built only on the tabos API.
//!
//! The parts:
//!
//! * [`config`] — the shard → group map with its epoch, and where the
//!   service keeps its state in the realm's namespace.
//! * [`shard`] — a shard's durable state in the kernel database: a log of
//!   write batches after a snapshot, fenced by the shard's epoch.
//! * [`kvd`] — the server proc: while it leads its group, it serves the
//!   group's shards from memory over the Redis protocol.
//! * [`clerk`] — the client library: caches the config, routes each key to
//!   its group's leader, follows `MOVED` and `TRYAGAIN`.
//! * [`front`] — a Redis-protocol front end over clerks, so redis-cli and
//!   redis-benchmark drive the whole service.
//! * [`balancer`] — the balancer proc: keeps every group staffed, adds and
//!   removes groups as the load changes, moves shards with mover procs.
//! * [`service`] — creating a service and running its balancers; its
//!   status.
//! * [`pubsub`] — publish/subscribe: a broker in every kvd, PUBLISH to
//!   all of them.
//! * [`resp`] — the Redis protocol; [`loops`] — the single-threaded
//!   runtimes the front end and each kvd serve their connections on.
//! * [`command`] — the data commands: their contracts and what they do.
//! * [`linearizability`] — a checker of recorded histories (the tests).

pub mod balancer;
pub mod clerk;
pub mod command;
pub mod config;
pub mod front;
pub mod kvd;
pub mod linearizability;
pub mod loops;
pub mod pubsub;
pub mod resp;
pub mod service;
pub mod shard;

/// Largest key or value, in bytes.
pub const VALUE_BYTES_MAX: usize = 1 << 20;
/// The fs user the service's snapshot files are written as: empty, so that
/// the node takes it from the credential (the procs act for their
/// spawner's user).
pub const FS_USER: &str = "";

/// Errors of the key-value service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid: {0}")]
    Invalid(String),
    /// What was named (a service) is not there.
    #[error("not found: {0}")]
    NotFound(String),
    #[error("corrupt shard state: {0}")]
    Corrupt(String),
    /// The tabos API refused or failed a call.
    #[error("{0}")]
    Api(#[from] tabos_client::Error),
    /// A kvd answered with an error.
    #[error("{0}")]
    Reply(String),
    /// No kvd could be reached in time, or a write's outcome is unknown.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::Api(s.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) use kvd::now_us;

/// What every proc of a service has: the API, its realm, pid and layout.
pub type Ctx = tabos_client::app::ProcEnv<config::Layout>;

async fn ctx(svc: &str) -> Result<Ctx> {
    let layout = config::Layout::new(svc)?;
    let env = tabos_client::app::ProcEnv::from_env().await?;
    Ok(env.with(layout))
}

/// The entry point of the service's procs — `kvd SVC GROUP`, `balancer
/// SVC PROGRAM [ARGS...]` (what it spawns kvds and movers with), `mover SVC
/// SHARD EPOCH` — with `TABOS_ADDR`, `TABOS_REALM`, `TABOS_PID` and `TABOS_TOKEN` from procd.
/// Returns the proc's exit status.
pub fn main(args: &[String]) -> i32 {
    tabos_client::app::run_main("kv", 2, run(args))
}

async fn run(args: &[String]) -> Result<()> {
    let usage = || {
        Error::Invalid(
            "usage: kvd SVC GROUP | balancer SVC PROGRAM [ARGS...] | mover SVC SHARD EPOCH".into(),
        )
    };
    match args {
        [role, svc, group] if role == "kvd" => {
            let group = group.parse().map_err(|_| usage())?;
            kvd::run(ctx(svc).await?, group).await
        }
        [role, svc, program, prefix @ ..] if role == "balancer" => {
            let program = service::Program {
                path: program.clone(),
                args: prefix.to_vec(),
            };
            balancer::run(ctx(svc).await?, program).await
        }
        [role, svc, s, epoch] if role == "mover" => {
            let s = s.parse().map_err(|_| usage())?;
            let epoch = epoch.parse().map_err(|_| usage())?;
            balancer::mover(ctx(svc).await?, s, epoch).await
        }
        _ => Err(usage()),
    }
}
