//! `tabos-bench fs`: the filesystem in tables against ext4, and blockio
//! against synchronous and thread-pool pread and fio (DBOS Figure 10a/b,
//! Tables 1–2; BAIO Figure 2).
//!
//! Both sides keep their data on the same disk (this process's temporary
//! directory) at the same durability: what a completed write or create
//! survives is a power loss — tabos at durability `full` (fsync per
//! commit, shared by the commits of a group), ext4 with `fdatasync` after
//! each write operation and `fsync` of the directory after each create or
//! delete. Reads are from memory on both sides (the page cache; the
//! database's pages).
//!
//! Users: DBOS keeps a user's files on the user's home partition; tabos
//! keeps a realm's files on the realm's partition, so each user here has a
//! realm of their own (`u0` … `u39`) and the users spread over the
//! partitions as DBOS's do.

use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_blockio::{AlignedBuf, CachePolicy, Device, FormatOptions, Queue};
use tabos_kernel::fs::{self, Caller};
use tabos_store::{Durability, Store};

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};
use crate::served::Served;

const USERS: usize = 40;
const BLOCK: usize = 2048;
const FILE_BLOCKS: usize = 128;
const OP_BLOCKS: usize = 20;
const CLIENTS: [usize; 4] = [1, 4, 16, 40];
/// Table 2: files of at least this size count.
const DU_MIN: i64 = 20 * 1024;
/// Table 2: runs of the query and of the walk, each; the median counts.
const DU_RUNS: u32 = 7;

/// How big a run is.
struct Size {
    files_per_user: usize,
    run: Duration,
    creates_per_thread: usize,
    segment_bytes: u64,
    blockio_run: Duration,
}

fn realm(u: usize) -> String {
    format!("u{u}")
}

/// The bench's operator: the kernel's operations act for a caller only
/// authentication makes, so the bench makes one credential and acts as
/// each user through it.
static OPERATOR: std::sync::OnceLock<tabos_kernel::auth::Principal> = std::sync::OnceLock::new();

fn sign_in(rt: &tokio::runtime::Runtime, store: &Store) -> anyhow::Result<()> {
    let spec = tabos_kernel::auth::Spec::operator("bench fs");
    let (_, p) = rt.block_on(tabos_kernel::auth::create(store, spec))?;
    let _ = OPERATOR.set(p);
    Ok(())
}

/// `user` in realm `r`, acting through the bench's operator.
fn acting(r: &str, user: &str) -> Caller {
    OPERATOR
        .get()
        .expect("sign_in ran first")
        .act(r, user, r)
        .expect("a valid realm and user")
}

fn user(u: usize) -> Caller {
    acting(&realm(u), &format!("u{u}"))
}

fn file_path(f: usize) -> String {
    format!("/f{f}")
}

/// A small deterministic generator (xorshift), one per client.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Read,
    Write,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Spread {
    /// Figure 10a: 20 random blocks of one random file.
    OneFile,
    /// Figure 10b: 20 random blocks, each of a different file.
    ManyFiles,
}

/// The 20 (file, block) pairs of one operation.
fn pick(rng: &mut Rng, spread: Spread, files: usize) -> Vec<(usize, usize)> {
    match spread {
        Spread::OneFile => {
            let f = rng.below(files);
            (0..OP_BLOCKS)
                .map(|_| (f, rng.below(FILE_BLOCKS)))
                .collect()
        }
        Spread::ManyFiles => {
            let mut fs: Vec<usize> = Vec::with_capacity(OP_BLOCKS);
            while fs.len() < OP_BLOCKS.min(files) {
                let f = rng.below(files);
                if !fs.contains(&f) {
                    fs.push(f);
                }
            }
            while fs.len() < OP_BLOCKS {
                fs.push(rng.below(files));
            }
            fs.into_iter()
                .map(|f| (f, rng.below(FILE_BLOCKS)))
                .collect()
        }
    }
}

/// Runs `clients` threads of `op` for `run`; operations per second.
fn drive(clients: usize, run: Duration, op: impl Fn(usize, &mut Rng) + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in 0..clients {
            let (stop, done, op) = (&stop, &done, &op);
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9 ^ (c as u64 + 1).wrapping_mul(0x1234_5678_9ABC_DEF1));
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    op(c, &mut rng);
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

// ---- tabos setup and operations ----

fn tabos_setup(store: &Store, files: usize) -> anyhow::Result<()> {
    let data = vec![7u8; BLOCK * FILE_BLOCKS];
    let mut pending = Vec::new();
    for u in 0..USERS {
        let (r, who) = (realm(u), user(u));
        // Each user owns the realm's files (created by root, then given).
        let root = acting(&r, "root");
        for f in 0..files {
            let (r, who, root, data, p) = (
                r.clone(),
                who.clone(),
                root.clone(),
                data.clone(),
                file_path(f),
            );
            pending.push(store.submit(
                tabos_kernel::realm_partition(&r, store.partitions()),
                move |tx| {
                    let now = tabos_store::now_us();
                    fs::create_tx(tx, &root, &p, 0o644, now)?;
                    fs::chown_tx(tx, &root, &p, who.user(), now)?;
                    fs::write_tx(tx, &who, &p, 0, &data, now)
                },
            ));
            if pending.len() >= 64 {
                for p in pending.drain(..) {
                    p.wait()?;
                }
            }
        }
    }
    for p in pending {
        p.wait()?;
    }
    Ok(())
}

fn tabos_op(store: &Store, u: usize, kind: Kind, blocks: Vec<(usize, usize)>) {
    let (r, who) = (realm(u), user(u));
    let pk = tabos_kernel::realm_partition(&r, store.partitions());
    let op = move |tx: &mut dyn tabos_store::Tx| {
        let now = tabos_store::now_us();
        let mut n = 0;
        for (f, b) in &blocks {
            let p = file_path(*f);
            let off = (*b * BLOCK) as i64;
            match kind {
                Kind::Read => n += fs::read_tx(tx, &who, &p, off, BLOCK)?.len(),
                Kind::Write => {
                    fs::write_tx(tx, &who, &p, off, &[b'w'; BLOCK], now)?;
                    n += BLOCK;
                }
            }
        }
        Ok::<_, tabos_kernel::Error>(n)
    };
    // Reads take the kernel's read path, as the node's Fs.Read does: a
    // snapshot on a read connection, no write transaction to commit.
    let res = match kind {
        Kind::Read => store.read(pk, op).wait(),
        Kind::Write => store.call(pk, op),
    };
    assert_eq!(
        res.expect("a benchmark operation failed"),
        OP_BLOCKS * BLOCK
    );
}

// ---- ext4 setup and operations ----

fn ext4_file(root: &Path, u: usize, f: usize) -> PathBuf {
    root.join(format!("u{u}")).join(format!("f{f}"))
}

fn ext4_setup(root: &Path, files: usize) -> anyhow::Result<()> {
    let data = vec![7u8; BLOCK * FILE_BLOCKS];
    for u in 0..USERS {
        std::fs::create_dir_all(root.join(format!("u{u}")))?;
        for f in 0..files {
            std::fs::write(ext4_file(root, u, f), &data)?;
        }
    }
    sync_path(root)?;
    Ok(())
}

fn sync_path(p: &Path) -> anyhow::Result<()> {
    std::fs::File::open(p)?.sync_all()?;
    Ok(())
}

fn ext4_op(root: &Path, u: usize, kind: Kind, blocks: Vec<(usize, usize)>) {
    let mut buf = [0u8; BLOCK];
    let mut by_file: Vec<(usize, Vec<usize>)> = Vec::new();
    for (f, b) in blocks {
        match by_file.iter_mut().find(|(g, _)| *g == f) {
            Some((_, bs)) => bs.push(b),
            None => by_file.push((f, vec![b])),
        }
    }
    for (f, bs) in by_file {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(kind == Kind::Write)
            .open(ext4_file(root, u, f))
            .expect("open a benchmark file");
        for b in bs {
            let off = (b * BLOCK) as u64;
            match kind {
                Kind::Read => file.read_exact_at(&mut buf, off).expect("pread"),
                Kind::Write => file.write_all_at(&[b'w'; BLOCK], off).expect("pwrite"),
            }
        }
        if kind == Kind::Write {
            // Durability full: the write survives a power loss.
            file.sync_data().expect("fdatasync");
        }
    }
}

// ---- gRPC ----

fn grpc_op(
    rt: &tokio::runtime::Runtime,
    c: &mut tabos_client::Client,
    u: usize,
    kind: Kind,
    blocks: Vec<(usize, usize)>,
) {
    let (r, who) = (realm(u), format!("u{u}"));
    rt.block_on(async {
        for (f, b) in blocks {
            let p = file_path(f);
            let off = (b * BLOCK) as i64;
            match kind {
                Kind::Read => {
                    let d = c.fs_read(&r, &who, &p, off, BLOCK as u32).await;
                    assert_eq!(d.expect("fs_read").len(), BLOCK);
                }
                Kind::Write => {
                    c.fs_write(&r, &who, &p, off, vec![b'w'; BLOCK], false)
                        .await
                        .expect("fs_write");
                }
            }
        }
    });
}

struct Node {
    addr: tabos_client::Endpoint,
    store: Store,
    served: Served,
}

fn start_node(rt: &tokio::runtime::Runtime, dir: &Path, blocks: bool) -> anyhow::Result<Node> {
    start_node_at(rt, dir, blocks, Durability::Full)
}

fn start_node_at(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    blocks: bool,
    durability: Durability,
) -> anyhow::Result<Node> {
    let settings = tabos_node::NodeSettings {
        node_id: "bench-fs".into(),
        logs: dir.join("logs"),
        blocks: blocks
            .then(|| tabos_node::BlockStoreSettings::new(dir.join("blocks.dev"), 4 << 30)),
        ..tabos_node::NodeSettings::defaults()
    };
    let config = tabos_store::Config::sqlite(dir.join("db")).with_durability(durability);
    let node = tabos_node::Node::open_with(&config, settings)?;
    let store = node.store.clone();
    let served = rt.block_on(Served::start(node, Default::default()))?;
    Ok(Node {
        addr: served.addr.clone(),
        store,
        served,
    })
}

impl Node {
    fn stop(self, rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
        rt.block_on(self.served.stop())
    }
}

/// A client connection with the runtime it runs on, one per client thread.
type Conn = std::sync::Mutex<(tokio::runtime::Runtime, tabos_client::Client)>;

fn connections(addr: &tabos_client::Endpoint, n: usize) -> anyhow::Result<Vec<Conn>> {
    (0..n)
        .map(|_| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let c = rt.block_on(addr.connect())?;
            anyhow::Ok(std::sync::Mutex::new((rt, c)))
        })
        .collect()
}

/// One client per thread over gRPC, each with its own runtime.
fn drive_grpc(
    addr: &tabos_client::Endpoint,
    clients: usize,
    run: Duration,
    op: impl Fn(&tokio::runtime::Runtime, &mut tabos_client::Client, usize, &mut Rng) + Sync,
) -> anyhow::Result<f64> {
    let conns = connections(addr, clients)?;
    Ok(drive(clients, run, |i, rng| {
        let mut g = conns[i].lock().unwrap_or_else(|p| p.into_inner());
        let (rt, c) = &mut *g;
        op(rt, c, i, rng)
    }))
}

// ---- Figure 10 ----

fn figure10(
    report: &mut Report,
    node: &Node,
    ext4: &Path,
    size: &Size,
    filter: &str,
) -> anyhow::Result<()> {
    let files = size.files_per_user;
    for (spread, fig) in [(Spread::OneFile, "fig10a"), (Spread::ManyFiles, "fig10b")] {
        for kind in [Kind::Read, Kind::Write] {
            let k = if kind == Kind::Read { "read" } else { "write" };
            for clients in CLIENTS {
                let name = format!("{fig}.{k}.{clients}c");
                if !name.contains(filter) {
                    continue;
                }
                eprintln!("fs: {name} ...");
                let store = &node.store;
                let t = drive(clients, size.run, |c, rng| {
                    tabos_op(store, c % USERS, kind, pick(rng, spread, files))
                });
                let e = drive(clients, size.run, |c, rng| {
                    ext4_op(ext4, c % USERS, kind, pick(rng, spread, files))
                });
                let g = drive_grpc(&node.addr, clients, size.run, |rt, cl, c, rng| {
                    grpc_op(rt, cl, c % USERS, kind, pick(rng, spread, files))
                })?;
                eprintln!("  ops/s tabos in-process {t:.0}, over gRPC {g:.0}; ext4 {e:.0}");
                let mut f = Figure::new(
                    format!("{name}.in_process.ops_per_s"),
                    round(t, 0),
                    "ops/s",
                    Better::Higher,
                )
                .peer("ext4", Some(round(e, 0)))
                .runs(1, Stat::Rate);
                if spread == Spread::OneFile {
                    f = f.target(if kind == Kind::Read {
                        "ratio >= 0.5"
                    } else {
                        "ratio >= 1"
                    });
                }
                report.figures.push(f);
                report.figures.push(
                    Figure::new(
                        format!("{name}.grpc.ops_per_s"),
                        round(g, 0),
                        "ops/s",
                        Better::Higher,
                    )
                    .peer("ext4", Some(round(e, 0)))
                    .runs(1, Stat::Rate)
                    .note("20 Read or Write RPCs per operation"),
                );
            }
        }
    }
    Ok(())
}

// ---- Provenance (issue 43, item 2) ----

/// The realm, file, proc and mailbox of the provenance figures.
const PROV_REALM: &str = "prov";
/// A realm that records what clients acting for no proc do too
/// (`--provenance all`), with the same file and mailbox.
const PROV_ALL_REALM: &str = "prov-all";
const PROV_FILE: &str = "/prov";
const PROV_PID: &str = "reader";
const PROV_MAILBOX: &str = "plain";
const PROV_FILE_BYTES: usize = 1 << 20;
const PROV_IO: usize = 4096;
const PROV_MESSAGE: usize = 100;
/// Runs of each side (alternating), of half a figure-10 point each.
const PROV_RUNS: u32 = 5;

/// What a provenance figure does, once recorded and once not.
#[derive(Clone, Copy, PartialEq)]
enum ProvOp {
    /// A 4 KiB read at a random offset of a 1 MiB file, by a client acting
    /// for a proc (recorded) or for none.
    Read,
    /// The same, a write.
    Write,
    /// A 100-byte send and the receive that takes it: from a proc's address
    /// to its own mailbox (a `send` and a `recv` recorded), or from no
    /// address through a named mailbox (nothing recorded).
    Message,
}

impl ProvOp {
    fn name(self) -> &'static str {
        match self {
            ProvOp::Read => "read_4k",
            ProvOp::Write => "write_4k",
            ProvOp::Message => "send_recv_100b",
        }
    }
}

/// Who does a provenance figure's operations.
#[derive(Clone, Copy, PartialEq)]
enum ProvSide {
    /// A client acting for a proc: recorded.
    Proc,
    /// A client acting for no proc in a realm that records clients:
    /// recorded.
    Client,
    /// A client acting for no proc in a realm that records procs only:
    /// not recorded.
    Unrecorded,
}

/// One provenance operation by client `c`, on `side`.
fn prov_op(
    rt: &tokio::runtime::Runtime,
    c: &mut tabos_client::Client,
    op: ProvOp,
    side: ProvSide,
    rng: &mut Rng,
) {
    let mut c = c
        .clone()
        .acting_for(if side == ProvSide::Proc { PROV_PID } else { "" });
    let realm = match side {
        ProvSide::Client => PROV_ALL_REALM,
        _ => PROV_REALM,
    };
    let at = (rng.below(PROV_FILE_BYTES / PROV_IO) * PROV_IO) as i64;
    let proc_box = format!("proc/{PROV_PID}");
    let (from, mailbox) = if side == ProvSide::Proc {
        (proc_box.as_str(), proc_box.as_str())
    } else {
        ("", PROV_MAILBOX)
    };
    rt.block_on(async {
        match op {
            ProvOp::Read => {
                let d = c.fs_read(realm, "root", PROV_FILE, at, PROV_IO as u32);
                assert_eq!(d.await.expect("fs_read").len(), PROV_IO);
            }
            ProvOp::Write => {
                let data = vec![b'p'; PROV_IO];
                let w = c.fs_write(realm, "root", PROV_FILE, at, data, false);
                w.await.expect("fs_write");
            }
            ProvOp::Message => {
                let payload = vec![b'm'; PROV_MESSAGE];
                c.send(realm, from, mailbox, payload).await.expect("send");
                // With several clients another may take it: counted all the same.
                c.recv(realm, mailbox, 1, 0).await.expect("recv");
            }
        }
    })
}

/// What recording provenance costs a file read, a file write and a message
/// sent and received: the same operations over gRPC, recorded in
/// `proc_event` (a write's and a message's events in their own commit, a
/// read's committed before its data is returned) and not, alternating in
/// the same run, on a node of its own at `tabos up`'s default durability
/// (normal).
fn provenance(
    report: &mut Report,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    size: &Size,
    filter: &str,
) -> anyhow::Result<()> {
    if !(filter.is_empty() || filter.starts_with("provenance")) {
        return Ok(());
    }
    let dir = dir.join("provenance");
    std::fs::create_dir_all(&dir)?;
    let node = start_node_at(rt, &dir, false, Durability::Normal)?;
    for realm in [PROV_REALM, PROV_ALL_REALM] {
        tabos_kernel::realms::create(&node.store, realm, tabos_kernel::sched::Scheduler::Fifo)?;
    }
    rt.block_on(async {
        let mut c = node.addr.connect().await?;
        for realm in [PROV_REALM, PROV_ALL_REALM] {
            let file = vec![7u8; PROV_FILE_BYTES];
            c.fs_write(realm, "root", PROV_FILE, 0, file, true).await?;
            c.create_mailbox(realm, PROV_MAILBOX, 0, None).await?;
        }
        c.set_realm(tabos_client::proto::SetRealmRequest {
            realm: PROV_ALL_REALM.into(),
            provenance: Some(tabos_client::proto::Provenance::All.into()),
            ..Default::default()
        })
        .await?;
        // Alive for the whole run: its mailbox takes messages while it lives.
        let proc = tabos_client::proto::ProcDescriptor {
            pid: PROV_PID.into(),
            program: "sleep".into(),
            args: vec!["3600".into()],
            ..Default::default()
        };
        c.spawn(PROV_REALM, proc).await?;
        anyhow::Ok(())
    })?;
    let figures = [ProvOp::Read, ProvOp::Write, ProvOp::Message]
        .into_iter()
        .flat_map(|op| [(op, ProvSide::Proc), (op, ProvSide::Client)]);
    for (op, side) in figures {
        for clients in [1, 16] {
            let by = match side {
                ProvSide::Client => "clients.",
                _ => "",
            };
            let name = format!("provenance.{by}{}.{clients}c", op.name());
            if !name.starts_with(filter) {
                continue;
            }
            eprintln!("fs: {name} ...");
            // Alternating runs, so that neither side gets the warmer ones;
            // the median of each side's.
            let (mut on, mut off) = (Vec::new(), Vec::new());
            for _ in 0..PROV_RUNS {
                off.push(drive_grpc(
                    &node.addr,
                    clients,
                    size.run / 2,
                    |rt, c, _, rng| prov_op(rt, c, op, ProvSide::Unrecorded, rng),
                )?);
                on.push(drive_grpc(
                    &node.addr,
                    clients,
                    size.run / 2,
                    |rt, c, _, rng| prov_op(rt, c, op, side, rng),
                )?);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (on, off) = (median(&mut on), median(&mut off));
            eprintln!("  ops/s recorded {on:.0}, not recorded {off:.0}");
            report.figures.push(
                Figure::new(
                    format!("{name}.ops_per_s"),
                    round(on, 0),
                    "ops/s",
                    Better::Higher,
                )
                .peer("without provenance", Some(round(off, 0)))
                .runs(PROV_RUNS, Stat::MedianOfRuns)
                .target("ratio >= 0.9")
                .note(match side {
                    ProvSide::Client => {
                        "the same operations over gRPC by a client acting for no proc, \
                         recorded in proc_event (a realm with --provenance all) and not \
                         (a realm with procs, the default); durability normal"
                    }
                    _ => {
                        "the same operations over gRPC, recorded in proc_event and not \
                         (acting for a proc or none; a message from and to a proc's mailbox, \
                         or from no address through a named one); durability normal"
                    }
                }),
            );
        }
    }
    node.stop(rt)
}

// ---- Table 1 ----

struct Latencies {
    ops_per_s: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Each of `threads` threads does `n` ops `op(thread, i)`; throughput and
/// latency.
fn timed(threads: usize, n: usize, op: impl Fn(usize, usize) + Sync) -> Latencies {
    let started = Instant::now();
    let all = std::sync::Mutex::new(Samples::with_capacity(threads * n));
    std::thread::scope(|s| {
        for t in 0..threads {
            let (op, all) = (&op, &all);
            s.spawn(move || {
                let mut mine = Samples::with_capacity(n);
                for i in 0..n {
                    let t0 = Instant::now();
                    op(t, i);
                    mine.push(t0.elapsed().as_nanos() as u64);
                }
                all.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let mut all = all.into_inner().unwrap_or_else(|p| p.into_inner());
    Latencies {
        ops_per_s: (threads * n) as f64 / secs,
        p50_us: all.quantile_us(0.5),
        p99_us: all.quantile_us(0.99),
    }
}

fn table1(
    report: &mut Report,
    node: &Node,
    ext4: &Path,
    size: &Size,
    filter: &str,
) -> anyhow::Result<()> {
    if !"table1".contains(filter) && !filter.is_empty() {
        return Ok(());
    }
    const THREADS: usize = 40;
    let n = size.creates_per_thread;
    eprintln!("fs: table1 create/delete, {THREADS} threads × {n} ...");
    let store = &node.store;
    let t_path = |i: usize| format!("/t1/c{i}");
    for u in 0..USERS {
        let r = realm(u);
        store.call(
            tabos_kernel::realm_partition(&r, store.partitions()),
            move |tx| fs::mkdir_tx(tx, &acting(&r, "root"), "/t1", 0o777, 1),
        )?;
    }
    let tx_op = |create: bool| {
        move |t: usize, i: usize| {
            let (r, who, p) = (realm(t), user(t), t_path(i));
            let pk = tabos_kernel::realm_partition(&r, store.partitions());
            let res = store.call(pk, move |tx| {
                let now = tabos_store::now_us();
                if create {
                    fs::create_tx(tx, &who, &p, 0o644, now).map(|_| ())
                } else {
                    fs::unlink_tx(tx, &who, &p, now).map(|_| ())
                }
            });
            res.expect("a create or unlink failed");
        }
    };
    let tc = timed(THREADS, n, tx_op(true));
    let td = timed(THREADS, n, tx_op(false));
    // ext4: a create or unlink is durable once its directory is synced.
    for t in 0..THREADS {
        std::fs::create_dir_all(ext4.join(format!("t1-{t}")))?;
    }
    let e_op = |create: bool| {
        move |t: usize, i: usize| {
            let dir = ext4.join(format!("t1-{t}"));
            let p = dir.join(format!("c{i}"));
            if create {
                drop(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o644)
                        .open(&p)
                        .expect("create"),
                );
            } else {
                std::fs::remove_file(&p).expect("unlink");
            }
            sync_path(&dir).expect("fsync the directory");
        }
    };
    let ec = timed(THREADS, n, e_op(true));
    let ed = timed(THREADS, n, e_op(false));
    // Over gRPC: one client per thread.
    let grpc = |create: bool| -> anyhow::Result<Latencies> {
        let conns = connections(&node.addr, THREADS)?;
        Ok(timed(THREADS, n, |t, i| {
            let mut g = conns[t].lock().unwrap_or_else(|p| p.into_inner());
            let (rt, c) = &mut *g;
            let (r, who, p) = (realm(t), format!("u{t}"), format!("/t1/g{i}"));
            rt.block_on(async {
                if create {
                    c.fs_create(&r, &who, &p, 0).await.map(|_| ())
                } else {
                    c.fs_unlink(&r, &who, &p).await
                }
            })
            .expect("a create or unlink over gRPC failed");
        }))
    };
    let gc = grpc(true)?;
    let gd = grpc(false)?;
    for (op, t, g, e) in [("create", &tc, &gc, &ec), ("delete", &td, &gd, &ed)] {
        eprintln!(
            "  {op}: ops/s tabos {:.0} (gRPC {:.0}) ext4 {:.0}; p50 us tabos {:.0} ext4 {:.0}",
            t.ops_per_s, g.ops_per_s, e.ops_per_s, t.p50_us, e.p50_us
        );
        report.figures.push(
            Figure::new(
                format!("table1.{op}.in_process.ops_per_s"),
                round(t.ops_per_s, 0),
                "ops/s",
                Better::Higher,
            )
            .peer("ext4", Some(round(e.ops_per_s, 0)))
            .runs(1, Stat::Rate)
            .target("ratio >= 2"),
        );
        report.figures.push(
            Figure::new(
                format!("table1.{op}.grpc.ops_per_s"),
                round(g.ops_per_s, 0),
                "ops/s",
                Better::Higher,
            )
            .peer("ext4", Some(round(e.ops_per_s, 0)))
            .runs(1, Stat::Rate)
            .target("ratio >= 2"),
        );
        for (q, stat, tv, gv, ev) in [
            ("p50", Stat::P50, t.p50_us, g.p50_us, e.p50_us),
            ("p99", Stat::P99, t.p99_us, g.p99_us, e.p99_us),
        ] {
            report.figures.push(
                Figure::new(
                    format!("table1.{op}.in_process.{q}_us"),
                    round(tv, 1),
                    "us",
                    Better::Lower,
                )
                .peer("ext4", Some(round(ev, 1)))
                .runs(1, stat),
            );
            report.figures.push(
                Figure::new(
                    format!("table1.{op}.grpc.{q}_us"),
                    round(gv, 1),
                    "us",
                    Better::Lower,
                )
                .peer("ext4", Some(round(ev, 1)))
                .runs(1, stat),
            );
        }
    }
    Ok(())
}

// ---- Table 2 ----

/// The size of file `f` of user `u` in the Table 2 tree: 1 KB to 64 KB.
fn du_size(u: usize, f: usize) -> i64 {
    let mut r = Rng(((u * 7919 + f * 104_729) as u64) | 1);
    1024 + r.below(63 * 1024) as i64
}

fn table2(
    report: &mut Report,
    rt: &tokio::runtime::Runtime,
    node: &Node,
    ext4: &Path,
    filter: &str,
) -> anyhow::Result<()> {
    if !"table2".contains(filter) && !filter.is_empty() {
        return Ok(());
    }
    const R: &str = "t2";
    const FILES: usize = 100;
    const UID0: u32 = 20_000;
    eprintln!("fs: table2 du over {} files ...", USERS * FILES);
    let store = &node.store;
    let pk = tabos_kernel::realm_partition(R, store.partitions());
    // The same tree on both: /home/uN/fM owned by uN, sizes 1–64 KB.
    for u in 0..USERS {
        store.call(pk, move |tx| {
            let root = acting(R, "root");
            let home = format!("/home/u{u}");
            if u == 0 {
                fs::mkdir_tx(tx, &root, "/home", 0o755, 1)?;
            }
            fs::mkdir_tx(tx, &root, &home, 0o755, 1)?;
            for f in 0..FILES {
                let p = format!("{home}/f{f}");
                fs::create_tx(tx, &root, &p, 0o644, 1)?;
                fs::truncate_tx(tx, &root, &p, du_size(u, f), 1)?;
                fs::chown_tx(tx, &root, &p, &format!("u{u}"), 1)?;
            }
            Ok::<_, tabos_kernel::Error>(())
        })?;
        let home = ext4.join("home").join(format!("u{u}"));
        std::fs::create_dir_all(&home)?;
        for f in 0..FILES {
            let p = home.join(format!("f{f}"));
            std::fs::File::create(&p)?.set_len(du_size(u, f) as u64)?;
            std::os::unix::fs::chown(&p, Some(UID0 + u as u32), None)?;
        }
    }
    let who = 7usize;
    let query = "SELECT count(*), coalesce(sum(f_size), 0) FROM fs_inode \
                 WHERE realm = 't2' AND content_type = 'file' AND user_name = 'u7' \
                 AND f_size >= 20480";
    fn walk(dir: &Path, uid: u32, acc: &mut (i64, i64)) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let md = e.metadata()?;
            if md.is_dir() {
                walk(&e.path(), uid, acc)?;
            } else if md.uid() == uid && md.len() as i64 >= DU_MIN {
                acc.0 += 1;
                acc.1 += md.len() as i64;
            }
        }
        Ok(())
    }
    let best =
        |f: &mut dyn FnMut() -> anyhow::Result<(i64, i64)>| -> anyhow::Result<(f64, (i64, i64))> {
            let mut times = Vec::new();
            let mut got = (0, 0);
            for _ in 0..DU_RUNS {
                let t0 = Instant::now();
                got = f()?;
                times.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            times.sort_by(f64::total_cmp);
            Ok((times[times.len() / 2], got))
        };
    let (t_us, t_got) = best(&mut || {
        let rows = store.query(query, &[])?;
        Ok((rows.rows[0].get(0)?, rows.rows[0].get(1)?))
    })?;
    let (g_us, g_got) = best(&mut || {
        rt.block_on(async {
            let mut c = node.addr.connect().await?;
            let r = c.sql(query, Vec::new()).await?;
            let row = r.rows.first().context("no row")?;
            let int = |v: &Option<tabos_client::Value>| match v {
                Some(tabos_client::Value::Int(i)) => *i,
                _ => -1,
            };
            anyhow::Ok((int(&row[0]), int(&row[1])))
        })
    })?;
    let (e_us, e_got) = best(&mut || {
        let mut acc = (0, 0);
        walk(&ext4.join("home"), UID0 + who as u32, &mut acc)?;
        Ok(acc)
    })?;
    anyhow::ensure!(
        t_got == e_got,
        "table 2: the query says {t_got:?} but the walk {e_got:?}"
    );
    eprintln!(
        "  us: tabos query {t_us:.0} (gRPC {g_us:.0}, {g_got:?}), ext4 walk {e_us:.0}; {} files, {} bytes",
        t_got.0, t_got.1
    );
    report.figures.push(
        Figure::new(
            "table2.du.in_process_us",
            round(t_us, 1),
            "us",
            Better::Lower,
        )
        .peer("ext4 walk", Some(round(e_us, 1)))
        .runs(DU_RUNS, Stat::MedianOfRuns)
        .target("ratio <= 0.1")
        .note("one SQL query over every partition; the walk stats every file"),
    );
    report.figures.push(
        Figure::new("table2.du.grpc_us", round(g_us, 1), "us", Better::Lower)
            .peer("ext4 walk", Some(round(e_us, 1)))
            .runs(DU_RUNS, Stat::MedianOfRuns)
            .target("ratio <= 0.1")
            .note("the same query through the Sql service, connection included"),
    );
    Ok(())
}

// ---- blockio ----

const IO: usize = 8192;
const QD: u32 = 32;
const POOL: usize = 16;

/// Random 8 KiB offsets within `bytes`.
fn offsets(rng: &mut Rng, bytes: u64, n: usize) -> Vec<u64> {
    let slots = (bytes / IO as u64) as usize;
    (0..n).map(|_| (rng.below(slots) * IO) as u64).collect()
}

fn blockio_bench(report: &mut Report, dir: &Path, size: &Size, filter: &str) -> anyhow::Result<()> {
    if !"blockio".contains(filter) && !filter.is_empty() {
        return Ok(());
    }
    let path = dir.join("baio.dev");
    let seg_blocks = size.segment_bytes / 4096;
    Device::format(
        &path,
        &FormatOptions {
            blocks: Some(seg_blocks + 1024),
            block_size: 4096,
        },
    )?;
    let dev = Device::open(&path, 0)?;
    anyhow::ensure!(dev.direct(), "{} does not take O_DIRECT", path.display());
    let info = dev.create_segment("bench", "bench", seg_blocks)?;
    let seg = dev.open_segment("bench", "bench")?;
    let cap = seg.capability();
    eprintln!(
        "fs: blockio: filling a {} MiB segment ...",
        size.segment_bytes >> 20
    );
    {
        let mut q = Queue::new(&dev, QD)?;
        let chunk = 1 << 20;
        let mut done = Vec::new();
        for i in 0..size.segment_bytes / chunk {
            let mut b = AlignedBuf::zeroed(chunk as usize);
            b.fill((i % 251) as u8);
            q.write(&cap, i * chunk / 4096, b, CachePolicy::Uncached, i)?;
            if q.in_flight() >= QD as usize {
                q.wait(1, &mut done)?;
            }
        }
        let all = q.in_flight();
        q.wait(all, &mut done)?;
        for c in done {
            c.result?;
        }
        q.sync_now()?;
    }
    let run = size.blockio_run;
    let base = info.first_block * 4096;
    // io_uring at QD32: keep 32 reads in flight, refill as each completes.
    eprintln!("fs: blockio: io_uring QD{QD} ...");
    let uring = {
        let mut q = Queue::new(&dev, QD)?;
        let mut rng = Rng(42);
        let slots = size.segment_bytes / IO as u64;
        let started = Instant::now();
        let mut n = 0u64;
        let mut done = Vec::with_capacity(QD as usize);
        for _ in 0..QD {
            let b = rng.below(slots as usize) as u64 * 2;
            q.read(&cap, b, AlignedBuf::zeroed(IO), CachePolicy::Uncached, 0)?;
        }
        while started.elapsed() < run {
            done.clear();
            q.wait(1, &mut done)?;
            for c in done.drain(..) {
                c.result?;
                n += 1;
                let b = rng.below(slots as usize) as u64 * 2;
                q.read(
                    &cap,
                    b,
                    c.buf.expect("a read's buffer"),
                    CachePolicy::Uncached,
                    0,
                )?;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let all = q.in_flight();
        q.wait(all, &mut done)?;
        n as f64 / secs
    };
    // Synchronous O_DIRECT pread, one at a time.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)?;
    let pread_iops = |threads: usize| -> f64 {
        let stop = AtomicBool::new(false);
        let total = AtomicU64::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                let (file, stop, total) = (&file, &stop, &total);
                s.spawn(move || {
                    let mut rng = Rng(7 + t as u64);
                    let mut buf = AlignedBuf::zeroed(IO);
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        for off in offsets(&mut rng, size.segment_bytes, 16) {
                            file.read_exact_at(&mut buf, base + off).expect("pread");
                            n += 1;
                        }
                    }
                    total.fetch_add(n, Ordering::Relaxed);
                });
            }
            std::thread::sleep(run);
            stop.store(true, Ordering::Relaxed);
        });
        total.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
    };
    eprintln!("fs: blockio: synchronous pread ...");
    let sync = pread_iops(1);
    eprintln!("fs: blockio: {POOL}-thread pread pool ...");
    let pool = pread_iops(POOL);
    eprintln!("fs: blockio: fio ...");
    let fio = fio_iops(&path, base, size.segment_bytes, run);
    let fio_note = match &fio {
        Ok((_, v)) => format!(
            "fio {v}, ioengine io_uring, direct, randread 8k, iodepth {QD}, same file and range"
        ),
        Err(e) => format!("fio did not run: {e}"),
    };
    let fio_v = fio.as_ref().ok().map(|(x, _)| round(*x, 0));
    eprintln!(
        "  IOPS: blockio {uring:.0}, sync pread {sync:.0}, pool {pool:.0}, fio {:?}",
        fio_v
    );
    report.figures.push(
        Figure::new(
            "blockio.randread_8k_qd32.iops",
            round(uring, 0),
            "IOPS",
            Better::Higher,
        )
        .peer("fio io_uring", fio_v)
        .runs(1, Stat::Rate)
        .target("ratio >= 0.9")
        .note(fio_note),
    );
    report.figures.push(
        Figure::new(
            "blockio.vs_sync_pread.iops",
            round(uring, 0),
            "IOPS",
            Better::Higher,
        )
        .peer("O_DIRECT pread, 1 thread", Some(round(sync, 0)))
        .runs(1, Stat::Rate)
        .target("ratio >= 1.5"),
    );
    report.figures.push(
        Figure::new(
            "blockio.vs_thread_pool.iops",
            round(uring, 0),
            "IOPS",
            Better::Higher,
        )
        .peer("O_DIRECT pread, 16 threads (KAIO)", Some(round(pool, 0)))
        .runs(1, Stat::Rate)
        .target("ratio >= 1.2"),
    );
    Ok(())
}

/// fio's IOPS for the same pattern (installed with apt-get if missing).
fn fio_iops(path: &Path, offset: u64, bytes: u64, run: Duration) -> anyhow::Result<(f64, String)> {
    if std::process::Command::new("fio")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("fs: installing fio with apt-get (the blockio reference) ...");
        let _ = std::process::Command::new("apt-get").arg("update").status();
        let ok = std::process::Command::new("apt-get")
            .args(["install", "-y", "fio"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?
            .success();
        anyhow::ensure!(ok, "apt-get install fio failed");
    }
    let version = String::from_utf8_lossy(
        &std::process::Command::new("fio")
            .arg("--version")
            .output()?
            .stdout,
    )
    .trim()
    .to_string();
    let out = std::process::Command::new("fio")
        .args([
            "--name=randread",
            &format!("--filename={}", path.display()),
            "--direct=1",
            "--rw=randread",
            "--bs=8k",
            &format!("--iodepth={QD}"),
            "--ioengine=io_uring",
            &format!("--offset={offset}"),
            &format!("--size={bytes}"),
            &format!("--runtime={}", run.as_secs().max(1)),
            "--time_based",
            "--output-format=json",
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let iops = v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("no read IOPS in fio's output")?;
    Ok((iops, version))
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let size = if quick {
        Size {
            files_per_user: 5,
            run: Duration::from_millis(300),
            creates_per_thread: 10,
            segment_bytes: 128 << 20,
            blockio_run: Duration::from_secs(1),
        }
    } else {
        Size {
            files_per_user: 100,
            run: Duration::from_secs(2),
            creates_per_thread: 100,
            segment_bytes: 1 << 30,
            blockio_run: Duration::from_secs(5),
        }
    };
    let filter = std::env::var("TABOS_BENCH_FILTER").unwrap_or_default();
    // Both sides in one directory: one disk, one filesystem (stated).
    let dir = tabos_store::testing::TempDir::new("bench-fs");
    let ext4 = dir.path().join("ext4");
    std::fs::create_dir_all(&ext4)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut report = Report::new("fs", quick);
    let fs_type = std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir.path())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let node = start_node(&rt, dir.path(), false)?;
    sign_in(&rt, &node.store)?;
    if filter.is_empty() || filter.starts_with("fig10") {
        eprintln!(
            "fs: setting up {USERS} users × {} files × {FILE_BLOCKS} blocks of {BLOCK} bytes on both ...",
            size.files_per_user
        );
        tabos_setup(&node.store, size.files_per_user)?;
        ext4_setup(&ext4, size.files_per_user)?;
        figure10(&mut report, &node, &ext4, &size, &filter)?;
    }
    table1(&mut report, &node, &ext4, &size, &filter)?;
    table2(&mut report, &rt, &node, &ext4, &filter)?;
    let partitions = node.store.partitions();
    node.stop(&rt)?;
    provenance(&mut report, &rt, dir.path(), &size, &filter)?;
    blockio_bench(&mut report, dir.path(), &size, &filter)?;
    report.notes.push(format!(
        "same disk: {} ({fs_type}); tabos: embedded node in this process, SQLite, {} partitions, \
         durability full (fsync per commit, shared by a commit group); ext4: fdatasync after each \
         write operation, fsync of the directory after each create and delete; reads are warm on \
         both. Each user has a realm of their own (tabos keeps a realm's files on one partition, \
         DBOS a user's on the home partition). in_process: the node's kernel procedures called \
         directly, one transaction per operation (reads on the kernel's read path: a snapshot on \
         a read connection, as the node's Fs.Read); grpc: the Rust client over loopback, one \
         connection per client. Figure 10: {} s per point; files of {FILE_BLOCKS} blocks of \
         {BLOCK} bytes, {} per user. blockio: a {} MiB segment on a file on the same disk, \
         O_DIRECT, {} s per figure",
        dir.path().display(),
        partitions,
        size.run.as_secs_f64(),
        size.files_per_user,
        size.segment_bytes >> 20,
        size.blockio_run.as_secs_f64(),
    ));
    Ok(report)
}
