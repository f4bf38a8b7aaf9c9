//! `tabos www serve`: the web server (crates/apps/www) — a site's routes
//! written, its wwd and worker procs kept running until interrupted; and
//! the hidden `tabos www-task`, which is what those procs run.

use anyhow::Context;
use tabos_www::route::{Handler, Route, Routes};
use tabos_www::service::{self, Program, Site};

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: WwwCommand,
}

#[derive(clap::Subcommand)]
enum WwwCommand {
    /// Serve a site over HTTP/1.1: a wwd proc (LC, its credential limited
    /// to its mailboxes) takes the requests and hands each through a
    /// mailbox to a pool of worker procs (BE; this command grows and
    /// shrinks it with wwd's load), which answer with files from the realm's tabos fs (--root) or pages from
    /// stored procedures (--route PREFIX=procedure:NAME); until interrupted
    /// or terminated, which evicts the site's procs
    Serve {
        /// The tabos fs directory served at /
        #[arg(long, default_value = "/site")]
        root: String,
        /// More routes: PREFIX=procedure:NAME (a stored procedure's result
        /// is the page; it gets the request as JSON) or PREFIX=static:DIR
        #[arg(long = "route", value_name = "PREFIX=KIND:TARGET")]
        routes: Vec<String>,
        /// Where wwd listens (on the node that runs it); beyond loopback
        /// it needs --tls-cert and --tls-key
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Serve HTTPS with this certificate chain (PEM)
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// The certificate's private key (PEM)
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// Fewest worker procs
        #[arg(long, default_value_t = 2)]
        workers: u32,
        /// Most worker procs: more are started while requests pile up, and
        /// lets them go when the load falls [default: 4 × --workers]
        #[arg(long)]
        max_workers: Option<u32>,
        /// The site's name (its routes are /www/NAME/routes in the namespace)
        #[arg(long, default_value = "main")]
        site: String,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
}

/// How long `tabos www serve` waits for its wwd to start before it says
/// why it has not.
const PLACE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A `--route` flag: `PREFIX=procedure:NAME` or `PREFIX=static:DIR`.
fn parse_route(s: &str) -> anyhow::Result<Route> {
    let (prefix, target) = s
        .split_once('=')
        .with_context(|| format!("--route {s:?}: expected PREFIX=KIND:TARGET"))?;
    let handler = match target.split_once(':') {
        Some(("procedure", name)) => Handler::Procedure { name: name.into() },
        Some(("static", dir)) => Handler::Static { root: dir.into() },
        _ => anyhow::bail!("--route {s:?}: the kind is procedure or static"),
    };
    Ok(Route {
        prefix: prefix.into(),
        handler,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let WwwCommand::Serve {
        root,
        routes,
        listen,
        tls_cert,
        tls_key,
        workers,
        max_workers,
        site,
        realm,
        node,
    } = args.command;
    let tls = match (&tls_cert, &tls_key) {
        (Some(cert), Some(key)) => Some(tabos_www::wire::TlsMaterial::from_files(cert, key)?),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let max_workers = max_workers.unwrap_or(workers.saturating_mul(4));
    let mut all = vec![Route {
        prefix: "/".into(),
        handler: Handler::Static { root },
    }];
    for r in &routes {
        all.push(parse_route(r)?);
    }
    let routes = Routes { routes: all };
    crate::runtime()?.block_on(async {
        let client = node.connect().await?;
        let realm = realm.realm;
        service::create(&client, &realm, &site, &routes)
            .await
            .context("create the site")?;
        let program = Program::this_executable("www-task").context("find the tabos executable")?;
        let mut s = Site::start(
            &client,
            &realm,
            &site,
            program,
            &listen,
            tls,
            workers,
            max_workers,
        )
        .await?;
        // Installed before anything is printed: whoever reads the URL and
        // sends SIGTERM must find it handled (the default action kills the
        // process without stopping the site's procs).
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("handle SIGTERM")?;
        // Said only once wwd runs: until then nothing answers there, and
        // the user is told why.
        let wwd = s.wwd().unwrap_or_default().to_string();
        let mut c = client.clone();
        if tokio::time::timeout(PLACE_WAIT, c.wait_start(&realm, &wwd))
            .await
            .is_err()
        {
            let why = tabos_client::app::unplaced(&client, &realm, &wwd)
                .await
                .unwrap_or_else(|| "not started yet".into());
            eprintln!("site {site}: wwd {wwd} is {why}; waiting (Ctrl-C to stop)");
            tokio::select! {
                started = c.wait_start(&realm, &wwd) => { started?; }
                _ = tokio::signal::ctrl_c() => {
                    s.stop().await;
                    return Ok(());
                }
                _ = term.recv() => {
                    s.stop().await;
                    return Ok(());
                }
            }
        }
        outln!(
            "site {site}: wwd {wwd} on {scheme}://{listen}/ with {workers}..={max_workers} workers"
        );
        let outcome: anyhow::Result<()> = loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break Ok(()),
                _ = term.recv() => break Ok(()),
                r = s.replace_next() => match r {
                    Ok(pid) => eprintln!("wwd {pid} exited; started another"),
                    Err(e) => break Err(e.into()),
                },
            }
        };
        s.stop().await;
        outcome
    })
}
