//! tabos-www: σOS's web server (thesis section 5.3), built only on the
//! tabos API.
//!
//! * [`wwd`] — the LC proc that accepts HTTP/1.1 and hands each request to
//!   the worker pool through a mailbox, touching neither the namespace nor
//!   the files.
//! * [`worker`] — the BE procs that answer: static files from tabos fs,
//!   pages from stored procedures.
//! * [`route`] — the site's routes (JSON in the namespace), path mapping
//!   that never leaves a static root, content types.
//! * [`wire`] — the request and response messages.
//! * [`service`] — creating a site and running its procs.

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
}

/// What every proc of a site has: the API, its realm, pid and layout.
pub struct Ctx {
    pub client: tabos_client::Client,
    pub realm: String,
    pub pid: String,
    pub layout: Layout,
}

fn env(name: &str) -> Result<String> {
    std::env::var(name)
        .map_err(|_| Error::Invalid(format!("{name} is not set (run as a tabos proc)")))
}

impl Ctx {
    async fn from_env(site: &str) -> Result<Ctx> {
        let (addr, realm, pid) = (env("TABOS_ADDR")?, env("TABOS_REALM")?, env("TABOS_PID")?);
        let token = env("TABOS_TOKEN")?;
        let client = tabos_client::Client::connect(&addr, &token)
            .await?
            .acting_for(&pid);
        Ok(Ctx {
            client,
            realm,
            pid,
            layout: Layout::new(site)?,
        })
    }
}

/// The entry point of a site's procs — `wwd SITE LISTEN`, `worker SITE` —
/// with `TABOS_ADDR`, `TABOS_REALM`, `TABOS_PID` and `TABOS_TOKEN` from
/// procd. Returns the proc's exit status.
pub fn main(args: &[String]) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("www: cannot start a runtime: {e}");
            return 2;
        }
    };
    let usage = || Error::Invalid("usage: wwd SITE LISTEN | worker SITE".into());
    let out = rt.block_on(async {
        match args {
            [role, site, listen] if role == "wwd" => {
                wwd::run(Ctx::from_env(site).await?, listen).await
            }
            [role, site] if role == "worker" => worker::run(Ctx::from_env(site).await?).await,
            _ => Err(usage()),
        }
    });
    match out {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("www: {e}");
            1
        }
    }
}
