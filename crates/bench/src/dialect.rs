//! Suite `dialect`: what reading PostgreSQL's SQL on SQLite costs (issue
//! 38, item 5).
//!
//! On the SQLite backend every user statement goes through
//! `tabos_store::dialect::translate` (parse with sqlparser's PostgreSQL
//! dialect, rewrite, print) before SQLite compiles it; the result is
//! cached by statement text. Measured in one process, in alternating
//! rounds:
//!
//! * a cached translation of the point query, against the point query's
//!   own latency through the PostgreSQL front door (one client, the
//!   `postgres` crate's extended protocol, a prepared statement) — target:
//!   cached ≤ 5 % of the query;
//! * an uncached translation of the same point query, and of the fifty-three
//!   statements of `crates/cli/tests/pg/dialect.sql`, each against the
//!   same query latency (reported, no target: a statement is translated
//!   once per text).

use std::time::Instant;

use anyhow::Context;
use tabos_store::dialect;

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};
use crate::served::Served;

/// The point query: one realm's row by key.
const POINT: &str = "SELECT realm, scheduler FROM realm WHERE realm = 'default'";
/// The dialect file the CLI's test runs on both backends.
const DIALECT_FILE: &str = include_str!("../../cli/tests/pg/dialect.sql");

struct Sizes {
    rounds: usize,
    /// Queries through the front door per round.
    queries: usize,
    /// Translations per round (of each kind).
    translations: usize,
}

/// A node on SQLite (durability off, 2 partitions) serving the
/// PostgreSQL protocol on a port of loopback too; where that is.
async fn start(
    dir: &tabos_store::testing::TempDir,
) -> anyhow::Result<(Served, std::net::SocketAddr)> {
    let node = crate::served::node(dir, "dialect")?;
    let pg = tabos_node::SideListener::bind("127.0.0.1:0", "PostgreSQL protocol").await?;
    let pg_addr = pg.addr();
    let options = tabos_node::ServeOptions {
        pg: Some(pg),
        ..Default::default()
    };
    Ok((Served::start(node, options).await?, pg_addr))
}

/// The dialect file's statements, one a line.
fn dialect_statements() -> Vec<&'static str> {
    DIALECT_FILE
        .lines()
        .filter(|l| !l.starts_with("--") && !l.trim().is_empty())
        .map(|l| l.trim_end_matches(';'))
        .collect()
}

/// One round of `n` point queries on one connection (the postgres crate
/// is blocking: run it off the runtime).
fn query_round(
    client: &mut postgres::Client,
    stmt: &postgres::Statement,
    n: usize,
    into: &mut Samples,
) -> anyhow::Result<()> {
    for _ in 0..n {
        let t0 = Instant::now();
        let rows = client.query(stmt, &[])?;
        into.push(t0.elapsed().as_nanos() as u64);
        anyhow::ensure!(rows.len() == 1, "the point query found {} rows", rows.len());
    }
    Ok(())
}

/// One round of `n` translations of each of `statements`, timed per call.
fn translate_round(
    statements: &[&str],
    n: usize,
    cached: bool,
    into: &mut Samples,
) -> anyhow::Result<()> {
    for _ in 0..n {
        for s in statements {
            let t0 = Instant::now();
            let out = if cached {
                dialect::translate(s)
            } else {
                dialect::translate_uncached(s)
            };
            into.push(t0.elapsed().as_nanos() as u64);
            std::hint::black_box(out.map_err(|e| anyhow::anyhow!("{s}: {e}"))?);
        }
    }
    Ok(())
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let sizes = if quick {
        Sizes {
            rounds: 3,
            queries: 500,
            translations: 200,
        }
    } else {
        Sizes {
            rounds: 7,
            queries: 3_000,
            translations: 2_000,
        }
    };
    let mut report = Report::new("dialect", quick);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tabos_store::testing::TempDir::new("bench-dialect");
    let (served, pg_addr) = rt.block_on(start(&dir))?;
    let url = format!(
        "host={} port={} user=* password={} dbname=tabos connect_timeout=10",
        pg_addr.ip(),
        pg_addr.port(),
        served.addr.token
    );
    let statements = dialect_statements();
    let measured = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<_> {
            let mut client = postgres::Client::connect(&url, postgres::NoTls)
                .context("connect to the front door")?;
            let stmt = client.prepare(POINT)?;
            let (mut query, mut cached, mut uncached, mut file) = (
                Samples::default(),
                Samples::default(),
                Samples::default(),
                Samples::default(),
            );
            for r in 0..sizes.rounds {
                eprintln!("  round {}/{}", r + 1, sizes.rounds);
                query_round(&mut client, &stmt, sizes.queries, &mut query)?;
                translate_round(&[POINT], sizes.translations, true, &mut cached)?;
                translate_round(&[POINT], sizes.translations, false, &mut uncached)?;
                translate_round(&statements, sizes.translations / 20, false, &mut file)?;
            }
            Ok((query, cached, uncached, file))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    });
    let (mut query, mut cached, mut uncached, mut file) = measured?;
    rt.block_on(served.stop())?;

    let q50 = query.quantile_us(0.5);
    let runs = sizes.rounds as u32;
    // Each translation figure against the same peer: the point query.
    let against_query = |name: &str, samples: &mut Samples, note: String| {
        Figure::new(
            name,
            round(samples.quantile_us(0.5), 3),
            "us",
            Better::Lower,
        )
        .peer(
            "the point query through the front door (median)",
            Some(round(q50, 2)),
        )
        .runs(runs, Stat::P50)
        .note(note)
    };
    report.figures.push(
        against_query(
            "translate.cached.point_query.median_us",
            &mut cached,
            format!(
                "dialect::translate of `{POINT}` with its translation cached, against the same \
                 statement's round trip through the PostgreSQL front door on SQLite (postgres \
                 crate, prepared, one client, loopback); runs: {} alternating rounds of {} \
                 translations and {} queries; stat: median of all samples",
                sizes.rounds, sizes.translations, sizes.queries
            ),
        )
        .target("ratio <= 0.05"),
    );
    report.figures.push(against_query(
        "translate.uncached.point_query.median_us",
        &mut uncached,
        "parse, rewrite and print of the point query, no cache (a statement's first time)".into(),
    ));
    let file_p99 = file.quantile_us(0.99);
    report.figures.push(against_query(
        "translate.uncached.dialect_file.median_us",
        &mut file,
        format!(
            "each of the {} PostgreSQL-dialect statements of crates/cli/tests/pg/dialect.sql \
             translated without the cache; p99 {file_p99:.1} us",
            statements.len(),
        ),
    ));
    report.figures.push(
        Figure::new(
            "front_door.point_query.median_us",
            round(q50, 2),
            "us",
            Better::Lower,
        )
        .runs(runs, Stat::P50)
        .note(format!(
            "the point query's round trip through the front door (translation included); p99 \
             {:.1} us",
            query.quantile_us(0.99)
        )),
    );
    Ok(report)
}
