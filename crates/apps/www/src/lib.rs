//! tabos-www: σOS's web server (thesis section 5.3), built only on the
//! tabos API.
//!
//! * [`wwd`] — the LC proc that accepts HTTP/1.1 and hands each request to
//!   the worker pool through a mailbox, touching neither the namespace nor
//!   the files.
//! * [`worker`] — the BE procs that answer: static files from tabos fs,
//!   pages from stored procedures.
//! * [`pool`] — the pool of workers, grown and shrunk with wwd's load.
//! * [`route`] — the site's routes (JSON in the namespace), path mapping
//!   that never leaves a static root, content types.
//! * [`wire`] — the request and response messages, and how a file of any
//!   size is streamed a window at a time.
//! * [`http`] — validators, conditional requests, ranges and compression,
//!   decided before a byte of a file is read.
//! * [`service`] — creating a site and running its procs: wwd with a
//!   credential scoped to its mailboxes, and the worker pool.

pub mod http;
pub mod pool;
pub mod route;
pub mod service;
pub mod wire;
pub mod worker;
pub mod wwd;

/// The fs user the workers read files as: empty, so that the node takes
/// it from the credential (the procs act for their spawner's user).
pub const FS_USER: &str = "";

/// Errors of the web server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid: {0}")]
    Invalid(String),
    /// The tabos API refused or failed a call.
    #[error("{0}")]
    Api(#[from] tabos_client::Error),
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::Api(s.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a site keeps its state: `/www/<site>/routes` in the namespace,
/// and its request mailbox.
#[derive(Debug, Clone)]
pub struct Layout {
    site: String,
}

impl Layout {
    pub fn new(site: &str) -> Result<Layout> {
        route::validate_site(site)?;
        Ok(Layout { site: site.into() })
    }

    pub fn site(&self) -> &str {
        &self.site
    }

    pub fn root(&self) -> String {
        format!("/www/{}", self.site)
    }

    pub fn routes(&self) -> String {
        format!("/www/{}/routes", self.site)
    }

    /// The mailbox requests wait in for a worker.
    pub fn requests(&self) -> String {
        format!("www-{}-requests", self.site)
    }

    /// The mailbox wwd reports its load to.
    pub fn load(&self) -> String {
        format!("www-{}-load", self.site)
    }

    /// All wwd `pid` may do: send requests and load reports, and receive
    /// its answers.
    pub fn wwd_scope(&self, pid: &str) -> String {
        format!(
            "send:{} send:{} recv:proc/{pid}",
            self.requests(),
            self.load()
        )
    }
}

/// What every proc of a site has: the API, its realm, pid and layout.
pub type Ctx = tabos_client::app::ProcEnv<Layout>;

async fn ctx(site: &str) -> Result<Ctx> {
    let layout = Layout::new(site)?;
    let env = tabos_client::app::ProcEnv::from_env().await?;
    Ok(env.with(layout))
}

/// The entry point of a site's procs — `wwd SITE LISTEN [--tls]`, `worker
/// SITE WWD` — with
/// `TABOS_ADDR`, `TABOS_REALM`, `TABOS_PID` and `TABOS_TOKEN` from procd.
/// Returns the proc's exit status.
pub fn main(args: &[String]) -> i32 {
    tabos_client::app::run_main("www", 2, run(args))
}

async fn run(args: &[String]) -> Result<()> {
    let usage = || Error::Invalid("usage: wwd SITE LISTEN [--tls] | worker SITE WWD".into());
    match args {
        [role, site, listen] if role == "wwd" => wwd::run(ctx(site).await?, listen, false).await,
        [role, site, listen, tls] if role == "wwd" && tls == "--tls" => {
            wwd::run(ctx(site).await?, listen, true).await
        }
        [role, site, wwd] if role == "worker" => worker::run(ctx(site).await?, wwd).await,
        _ => Err(usage()),
    }
}
