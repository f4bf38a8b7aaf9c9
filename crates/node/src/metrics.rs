//! The node's metrics in the Prometheus (OpenMetrics) text format, served
//! at `/metrics` on its HTTP listener to an operator's credential (issue
//! 42, item 1).
//!
//! Two kinds of series:
//!
//! * **Counted as they happen**: every API call's duration by method and
//!   gRPC code (observed where every call passes, [`crate::budget`]); the
//!   procs this node ran that ended, by realm, kind and how (procd).
//!   Method labels are bounded: a call the node does not serve is
//!   `unknown`, and past [`METHODS_MAX`] distinct methods the rest are
//!   `other` — no client can grow the node's memory through a label.
//! * **Read at scrape time**, from what the node already keeps: procs by
//!   realm and state, mailboxes and what they hold, names and sessions,
//!   core grants, each realm's use against its quota (one read-only pass
//!   over the kernel database); the store's commits and procedures, the
//!   change feed's cut-offs and what its subscribers have not read, the
//!   node's busy cores and resident memory, its block store and its doors'
//!   connections (in memory). Scrapes take turns, so two scrapers never
//!   interleave the gauges' refills.
//! * **Timed in the store** ([`StoreTimings`], a collector): per
//!   partition, how long procedures queued for the partition's writer and
//!   how long its transactions took, as histograms.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::Node;

/// Most distinct method labels of the call histogram; calls of further
/// methods are counted under `other`.
pub const METHODS_MAX: usize = 512;
/// The call histogram's buckets, in seconds: 50 µs to 10 s.
const CALL_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];
/// Most rows one scrape-time query reads (per table: realms × states and
/// the like; a cluster with more is shown in part).
const SCRAPE_ROWS_MAX: usize = 10_000;

type Labels = Vec<(String, String)>;
type Gauges = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// The node's metrics: its registry and the handles that fill it.
pub struct Metrics {
    registry: Registry,
    calls: Family<Labels, Histogram, fn() -> Histogram>,
    methods: Mutex<HashSet<String>>,
    ended: Family<Labels, Counter>,
    procs: Gauges,
    mailboxes: Gauges,
    mailbox_messages: Gauges,
    mailbox_bytes: Gauges,
    names: Gauges,
    sessions: Gauges,
    grants: Gauges,
    realm_live_procs: Gauges,
    realm_stored_bytes: Gauges,
    realm_quota_storage_bytes: Gauges,
    store: Family<Labels, Counter>,
    feed_cut_offs: Family<Labels, Counter>,
    code: Family<Labels, Counter>,
    node_cores: Gauges,
    node_memory: Gauges,
    feed_backlog: Gauges,
    blocks: Gauges,
    connections: Gauges,
    /// The store whose timings the collector reads (set at the first scrape).
    timings: std::sync::Arc<StoreTimings>,
    /// Scrapes take turns (each clears and refills the gauges).
    scrape: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tabos");
        let calls = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            call_histogram as fn() -> Histogram,
        );
        registry.register(
            "rpc_duration_seconds",
            "API calls (gRPC and the local transport) by method and gRPC code, from request to \
             the response's last byte",
            calls.clone(),
        );
        let ended = Family::<Labels, Counter>::default();
        registry.register(
            "procs_ended",
            "Procs this node ran that ended, by realm, kind and how (exited, failed, evicted)",
            ended.clone(),
        );
        let store = counter(
            &mut registry,
            "store_events",
            "The kernel database in this process since it opened: commits, procedures \
             committed and failed, retries, notifications, queries the columnar engine \
             answered and table snapshots it loaded",
        );
        let feed_cut_offs = counter(
            &mut registry,
            "feed_cut_offs",
            "Change-feed subscribers cut off for falling behind, since the node started",
        );
        let code = counter(
            &mut registry,
            "code_copies",
            "Trees of uploaded code this node copied from realms' files into its cache, by why: \
             first use on the node (new), or its copy found changed on disk (tampered)",
        );
        let timings = std::sync::Arc::new(StoreTimings::default());
        registry.register_collector(Box::new(timings.clone()));
        let mut gauge = |name: &str, help: &str| {
            let g = Gauges::default();
            registry.register(name, help, g.clone());
            g
        };
        Metrics {
            procs: gauge("procs", "Procs by realm and state (the proc table)"),
            mailboxes: gauge("mailboxes", "Mailboxes by realm"),
            mailbox_messages: gauge("mailbox_queued_messages", "Messages queued, by realm"),
            mailbox_bytes: gauge(
                "mailbox_queued_bytes",
                "Bytes queued in mailboxes, by realm",
            ),
            names: gauge("names", "Namespace entries by realm"),
            sessions: gauge("name_sessions", "Open namespace sessions by realm"),
            grants: gauge(
                "core_grants",
                "Cores granted to elastic realms, by node and realm",
            ),
            realm_live_procs: gauge(
                "realm_live_procs",
                "Live procs counted against each realm's quota",
            ),
            realm_stored_bytes: gauge("realm_stored_bytes", "Bytes each realm stores, by class"),
            realm_quota_storage_bytes: gauge(
                "realm_quota_storage_bytes",
                "Each realm's storage quota in bytes (realms with one)",
            ),
            store,
            feed_cut_offs,
            code,
            node_cores: gauge(
                "node_cores",
                "This node's cores: offered to procs, and busy (measured, procs and node)",
            ),
            node_memory: gauge(
                "node_memory_bytes",
                "This node's memory: offered to procs, and resident (the node process)",
            ),
            feed_backlog: gauge(
                "feed_unread",
                "Change-feed notifications queued for this node's subscribers and not yet \
                 read: subscribers, notes (all, and the most one subscriber holds), bytes",
            ),
            blocks: gauge("block_store_bytes", "This node's block store: total, free"),
            connections: gauge("door_connections", "Open connections by door"),
            timings,
            registry,
            calls,
            ended,
            methods: Mutex::new(HashSet::new()),
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    /// Counts one API call of `method` that ended with `code` after
    /// `seconds`.
    pub fn observe_call(&self, method: &str, code: tonic::Code, seconds: f64) {
        let method = if code == tonic::Code::Unimplemented {
            "unknown"
        } else {
            let mut known = self.methods.lock().unwrap_or_else(|p| p.into_inner());
            if known.contains(method) {
                method
            } else if known.len() < METHODS_MAX {
                known.insert(method.to_string());
                method
            } else {
                "other"
            }
        };
        let code = format!("{code:?}");
        self.calls
            .get_or_create(&labels(&[("method", method), ("code", &code)]))
            .observe(seconds);
    }

    /// Counts a proc of `realm` that ended on this node.
    pub fn proc_ended(&self, realm: &str, kind: &str, state: &str) {
        self.ended
            .get_or_create(&labels(&[
                ("realm", realm),
                ("kind", kind),
                ("state", state),
            ]))
            .inc();
    }

    /// The metrics now, as OpenMetrics text.
    pub async fn scrape(&self, node: &Node) -> Result<String, String> {
        let _turn = self.scrape.lock().await;
        let store = node.store.clone();
        let tables = tokio::task::spawn_blocking(move || read_tables(&store))
            .await
            .map_err(|e| e.to_string())??;
        for g in [
            &self.procs,
            &self.mailboxes,
            &self.mailbox_messages,
            &self.mailbox_bytes,
            &self.names,
            &self.sessions,
            &self.grants,
            &self.realm_live_procs,
            &self.realm_stored_bytes,
            &self.realm_quota_storage_bytes,
            &self.node_cores,
            &self.node_memory,
            &self.feed_backlog,
            &self.blocks,
            &self.connections,
        ] {
            g.clear();
        }
        // Every realm has each per-realm series, 0 until a row says more.
        for (realm_labels, _) in &tables.live_procs {
            for family in [
                &self.mailboxes,
                &self.mailbox_messages,
                &self.mailbox_bytes,
                &self.names,
                &self.sessions,
            ] {
                family.get_or_create(realm_labels).set(0.0);
            }
        }
        for (family, rows) in [
            (&self.procs, &tables.procs),
            (&self.mailboxes, &tables.mailboxes),
            (&self.mailbox_messages, &tables.mailbox_messages),
            (&self.mailbox_bytes, &tables.mailbox_bytes),
            (&self.names, &tables.names),
            (&self.sessions, &tables.sessions),
            (&self.grants, &tables.grants),
            (&self.realm_live_procs, &tables.live_procs),
            (&self.realm_stored_bytes, &tables.stored),
            (&self.realm_quota_storage_bytes, &tables.quota_storage),
        ] {
            for (l, v) in rows {
                family.get_or_create(l).set(*v);
            }
        }
        let s = node.store.stats();
        for (what, n) in [
            ("commits", s.commits),
            ("committed", s.committed),
            ("failed", s.failed),
            ("retries", s.retries),
            ("notifications", s.notifications),
            ("columnar_answered", node.store.columnar_stats().answered),
            ("columnar_loads", node.store.columnar_stats().loads),
        ] {
            catch_up(&self.store.get_or_create(&labels(&[("event", what)])), n);
        }
        catch_up(
            &self.feed_cut_offs.get_or_create(&Vec::new()),
            node.store.feed_cut_offs(),
        );
        let (copies, tampered) = node.code.counts();
        for (why, n) in [
            ("new", copies - tampered.min(copies)),
            ("tampered", tampered),
        ] {
            catch_up(&self.code.get_or_create(&labels(&[("why", why)])), n);
        }
        let id = node.settings.node_id.as_str();
        for (what, v) in [
            ("offered", node.settings.cores as f64),
            ("busy", node.load.busy_cores()),
        ] {
            self.node_cores
                .get_or_create(&labels(&[("node", id), ("what", what)]))
                .set(v);
        }
        for (what, v) in [
            ("offered", node.settings.mem_mb as f64 * (1u64 << 20) as f64),
            (
                "resident",
                crate::load::resident_bytes().unwrap_or(0) as f64,
            ),
        ] {
            self.node_memory
                .get_or_create(&labels(&[("node", id), ("what", what)]))
                .set(v);
        }
        let b = node.store.feed_backlog();
        for (what, v) in [
            ("subscribers", b.subscribers),
            ("notes", b.unread),
            ("notes_max", b.unread_max),
            ("bytes", b.unread_bytes),
        ] {
            self.feed_backlog
                .get_or_create(&labels(&[("what", what)]))
                .set(v as f64);
        }
        let _ = self.timings.store.set(node.store.clone());
        if let Some(d) = node.files.device() {
            let st = d.stats();
            let bs = f64::from(d.block_size());
            let total = d.total_bytes() as f64;
            for (what, v) in [("total", total), ("free", st.free_blocks as f64 * bs)] {
                self.blocks
                    .get_or_create(&labels(&[("node", id), ("what", what)]))
                    .set(v);
            }
        }
        for (door, held) in [
            ("api", node.doors.door().usage().0),
            ("postgres", node.pg_door.usage().0),
            ("dashboard", node.dashboard_door.usage().0),
        ] {
            self.connections
                .get_or_create(&labels(&[("door", door)]))
                .set(held as f64);
        }
        let mut text = String::new();
        encode(&mut text, &self.registry).map_err(|e| e.to_string())?;
        Ok(text)
    }
}

/// A counter registered in `registry`.
fn counter(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let c = Family::<Labels, Counter>::default();
    registry.register(name, help, c.clone());
    c
}

/// Brings `counter` up to `total`, a count kept elsewhere that only grows.
fn catch_up(counter: &Counter, total: u64) {
    let have = counter.get();
    if total > have {
        counter.inc_by(total - have);
    }
}

/// What one scrape reads from the kernel database.
#[derive(Default)]
struct Tables {
    procs: Vec<(Labels, f64)>,
    mailboxes: Vec<(Labels, f64)>,
    mailbox_messages: Vec<(Labels, f64)>,
    mailbox_bytes: Vec<(Labels, f64)>,
    names: Vec<(Labels, f64)>,
    sessions: Vec<(Labels, f64)>,
    grants: Vec<(Labels, f64)>,
    live_procs: Vec<(Labels, f64)>,
    stored: Vec<(Labels, f64)>,
    quota_storage: Vec<(Labels, f64)>,
}

/// Runs `sql` (text label columns first, then `values` numbers) and
/// returns one series per value column and row.
fn grouped(
    store: &tabos_store::Store,
    sql: &str,
    keys: &[&str],
    values: usize,
) -> Result<Vec<Vec<(Labels, f64)>>, String> {
    let rows = store
        .query_capped(sql, &[], SCRAPE_ROWS_MAX)
        .map_err(|e| e.to_string())?;
    let mut out = vec![Vec::new(); values];
    for row in &rows.rows {
        let mut l = Labels::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            l.push((
                k.to_string(),
                row.get::<String>(i).map_err(|e| e.to_string())?,
            ));
        }
        for (j, series) in out.iter_mut().enumerate() {
            let v: i64 = row.get(keys.len() + j).map_err(|e| e.to_string())?;
            series.push((l.clone(), v as f64));
        }
    }
    Ok(out)
}

fn read_tables(store: &tabos_store::Store) -> Result<Tables, String> {
    let mut t = Tables::default();
    let one = |sql: &str, keys: &[&str]| -> Result<Vec<(Labels, f64)>, String> {
        Ok(grouped(store, sql, keys, 1)?.remove(0))
    };
    t.procs = one(
        "SELECT realm, state, count(*) FROM proc GROUP BY realm, state",
        &["realm", "state"],
    )?;
    let mut m = grouped(
        store,
        "SELECT realm, count(*), CAST(coalesce(sum(queued), 0) AS INTEGER), \
         CAST(coalesce(sum(queued_bytes), 0) AS INTEGER) FROM mailbox GROUP BY realm",
        &["realm"],
        3,
    )?;
    t.mailbox_bytes = m.pop().unwrap_or_default();
    t.mailbox_messages = m.pop().unwrap_or_default();
    t.mailboxes = m.pop().unwrap_or_default();
    t.names = one(
        "SELECT realm, count(*) FROM name_entry GROUP BY realm",
        &["realm"],
    )?;
    t.sessions = one(
        "SELECT realm, count(*) FROM name_session GROUP BY realm",
        &["realm"],
    )?;
    t.grants = one(
        "SELECT node_id, realm, CAST(sum(cores) AS INTEGER) FROM core_grant \
         GROUP BY node_id, realm",
        &["node", "realm"],
    )?;
    for u in tabos_kernel::realms::usage(store, None).map_err(|e| e.to_string())? {
        let realm = u.realm.clone();
        t.live_procs
            .push((labels(&[("realm", &realm)]), u.live_procs as f64));
        for (class, bytes) in u.stored.iter() {
            t.stored.push((
                labels(&[("realm", &realm), ("class", &class.to_string())]),
                bytes as f64,
            ));
        }
        if let Some(mb) = u.quota.storage_mb {
            t.quota_storage
                .push((labels(&[("realm", &realm)]), (mb << 20) as f64));
        }
    }
    Ok(t)
}

/// The store's per-partition timings as two histograms,
/// `tabos_store_queue_seconds` and `tabos_store_transaction_seconds`, by
/// partition: read from the store's counters at each scrape.
#[derive(Debug, Default)]
pub struct StoreTimings {
    store: std::sync::OnceLock<tabos_store::Store>,
}

impl Collector for StoreTimings {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(store) = self.store.get() else {
            return Ok(());
        };
        let timings = store.timings();
        for (name, help, pick) in [
            (
                "store_queue_seconds",
                "Procedures' wait from submission to the start of their run, by partition",
                0,
            ),
            (
                "store_transaction_seconds",
                "Transactions from BEGIN to COMMIT done (a group commit on SQLite, a try on \
                 PostgreSQL), by partition",
                1,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for (p, queued, transaction) in &timings {
                let t = if pick == 0 { queued } else { transaction };
                let mut buckets: Vec<(f64, u64)> = tabos_store::TIMING_BUCKETS_US
                    .iter()
                    .zip(t.counts)
                    .map(|(us, n)| (*us as f64 / 1e6, n))
                    .collect();
                buckets.push((f64::MAX, t.counts[tabos_store::TIMING_BUCKETS_US.len()]));
                let count = t.counts.iter().sum();
                let partition = vec![("partition".to_string(), p.0.to_string())];
                family
                    .encode_family(&partition)?
                    .encode_histogram::<Labels>(t.sum_us as f64 / 1e6, count, &buckets, None)?;
            }
        }
        Ok(())
    }
}
