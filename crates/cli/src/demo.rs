//! `tabos demo`: a newcomer's first run.
//!
//! Starts an embedded node in a temporary directory (nothing to install),
//! serves its API on a free loopback port, runs a small workload of
//! procedures on it — bank transfers between accounts kept in the realm
//! key-value table, some of which fail and roll back — and then asks the node,
//! through the same gRPC API every client uses, what happened, in SQL.

use std::time::Instant;

use anyhow::Context;
use tabos_kernel::{kv, realm_partition};
use tabos_store::{Config, Error as StoreError};

#[derive(clap::Args)]
pub struct Args {
    /// Number of transfer procedures to run
    #[arg(long, default_value_t = 40_000)]
    transfers: u32,
    /// Keep the data directory here instead of a temporary one
    #[arg(long)]
    data: Option<std::path::PathBuf>,
}

const REALMS: [&str; 4] = ["acme", "globex", "initech", "umbrella"];
const ACCOUNTS: u32 = 250;
const OPENING_BALANCE: i64 = 1_000;
/// Transfers in flight at once (the "clients").
const CLIENTS: usize = 64;

/// A deterministic generator, so every run does the same work.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn balance(tx: &mut dyn tabos_store::Tx, realm: &str, account: &str) -> tabos_kernel::Result<i64> {
    let v = kv::get_tx(tx, realm, account)?
        .ok_or_else(|| tabos_kernel::Error::NotFound(format!("account {account}")))?;
    String::from_utf8_lossy(&v)
        .parse()
        .map_err(|_| tabos_kernel::Error::Invalid(format!("account {account} is not a number")))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let tmp;
    let dir = match &args.data {
        Some(d) => d.clone(),
        None => {
            tmp = TempDir::new()?;
            tmp.0.clone()
        }
    };
    println!("tabos demo: an embedded node in {}", dir.display());
    let node = tabos_node::Node::open(&Config::sqlite(&dir)).context("open the kernel database")?;
    let store = node.store.clone();
    println!(
        "  kernel database: SQLite, {} partitions, durability {}, group commit",
        store.partitions(),
        store.durability()
    );

    let rt = crate::runtime()?;
    rt.block_on(async move {
        let listener = tabos_node::bind("127.0.0.1:0").await?;
        let addr = tabos_node::local_addr(&listener).context("listener address")?.to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(tabos_node::serve(node, listener, async {
            let _ = stopped.await;
        }));
        println!("  serving the tabos API on {addr}\n");

        // 1. Open accounts: one procedure per realm, all on the realm's partition.
        let t0 = Instant::now();
        let mut opened = Vec::new();
        for realm in REALMS {
            let p = realm_partition(realm, store.partitions());
            let now = tabos_store::now_us();
            opened.push(store.submit(p, move |tx| {
                for a in 0..ACCOUNTS {
                    let v = OPENING_BALANCE.to_string();
                    kv::put_tx(tx, realm, &format!("acct-{a:03}"), v.as_bytes(), now)?;
                }
                Ok::<_, tabos_kernel::Error>(())
            }));
        }
        for p in opened {
            p.await?;
        }
        println!(
            "[1/3] opened {} accounts in {} realms with {OPENING_BALANCE} each ({:.1} ms)",
            ACCOUNTS as usize * REALMS.len(),
            REALMS.len(),
            t0.elapsed().as_secs_f64() * 1e3
        );

        // 2. Transfers: each is one procedure that reads two balances and
        //    writes both, or aborts (and leaves nothing) if funds are short.
        println!(
            "[2/3] running {} transfer procedures from {CLIENTS} concurrent clients ...",
            args.transfers
        );
        let t1 = Instant::now();
        let per_client = args.transfers as usize / CLIENTS;
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1));
                let (mut ok, mut refused) = (0u64, 0u64);
                for _ in 0..per_client {
                    let realm = REALMS[rng.below(REALMS.len() as u64) as usize];
                    let from = format!("acct-{:03}", rng.below(u64::from(ACCOUNTS)));
                    let to = format!("acct-{:03}", rng.below(u64::from(ACCOUNTS)));
                    let amount = 1 + rng.below(300) as i64;
                    let now = tabos_store::now_us();
                    let p = realm_partition(realm, store.partitions());
                    let r = store
                        .submit(p, move |tx| {
                            let have = balance(tx, realm, &from)?;
                            if have < amount {
                                return Err(tabos_kernel::Error::Store(StoreError::Aborted(
                                    format!("{from} has {have}, cannot send {amount}"),
                                )));
                            }
                            kv::put_tx(tx, realm, &from, (have - amount).to_string().as_bytes(), now)?;
                            let theirs = balance(tx, realm, &to)?;
                            kv::put_tx(tx, realm, &to, (theirs + amount).to_string().as_bytes(), now)?;
                            Ok(())
                        })
                        .await;
                    match r {
                        Ok(()) => ok += 1,
                        Err(tabos_kernel::Error::Store(StoreError::Aborted(_))) => refused += 1,
                        Err(e) => return Err(e),
                    }
                }
                Ok::<_, tabos_kernel::Error>((ok, refused))
            }));
        }
        let (mut ok, mut refused) = (0, 0);
        for t in tasks {
            let (o, r) = t.await??;
            ok += o;
            refused += r;
        }
        let secs = t1.elapsed().as_secs_f64();
        println!(
            "      {ok} committed, {refused} refused for want of funds and rolled back, \
             in {:.2} s ({:.0} procedures/s)\n",
            secs,
            (ok + refused) as f64 / secs
        );

        // 3. Ask the node what happened, in SQL, over gRPC like any client.
        println!("[3/3] asking the node in SQL, through its gRPC API:\n");
        let mut client = tabos_client::Client::connect(&addr).await?;
        let queries = [
            (
                "Money is conserved: every realm still holds accounts x 1000",
                "SELECT realm, count(*) AS accounts, sum(CAST(value AS INTEGER)) AS total, \
                 max(version) - 1 AS most_writes_to_one_account \
                 FROM kv GROUP BY realm ORDER BY realm",
            ),
            (
                "Where the rows live: realms are hashed to partitions, one executor each",
                "SELECT p_key AS partition, count(DISTINCT realm) AS realms, count(*) AS rows \
                 FROM kv GROUP BY p_key ORDER BY p_key",
            ),
            (
                "The five richest accounts",
                "SELECT realm, key AS account, CAST(value AS INTEGER) AS balance, version \
                 FROM kv ORDER BY CAST(value AS INTEGER) DESC, realm, key LIMIT 5",
            ),
        ];
        for (title, sql) in queries {
            println!("-- {title}\n{sql}\n");
            let result = client.sql(sql, vec![]).await?;
            crate::output::print_result(&result, false);
            println!();
        }
        let s = client.status().await?;
        println!(
            "-- The node's own counters (tabos status)\n\
             procedures committed {}, rolled back {}, in {} commits: {:.1} procedures per group commit",
            s.procedures_committed,
            s.procedures_failed,
            s.commits,
            (s.procedures_committed + s.procedures_failed) as f64 / s.commits.max(1) as f64
        );
        let refused_write = client.sql("DELETE FROM kv", vec![]).await;
        if let Err(e) = refused_write {
            println!("\n-- And `tabos sql` is read-only: DELETE FROM kv -> {e}");
        }
        let _ = stop.send(());
        server.await??;
        Ok(())
    })
}

/// A temporary directory removed when the demo ends.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let p = std::env::temp_dir().join(format!(
            "tabos-demo-{}-{}",
            std::process::id(),
            tabos_store::now_us()
        ));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
