//! `tabos-bench procedures`: the paper's measurements of tenant code next
//! to the data (../shared/seeds/004: Table 2, Figure 1, Figure 2).
//!
//! * Invocation: a no-op procedure entered and left through the sandbox's
//!   dispatch, in WebAssembly and JavaScript, against a native Rust
//!   function behind the same dispatch; a no-op host call from inside.
//! * Table 2: context creation and install (compile) time, against
//!   creating a process (fork + exec + wait of /bin/true).
//! * Figure 1: `chase` (get(get(key))) as one procedure call against two
//!   client round trips, over gRPC, at 1 and 16 clients; and the same chase
//!   as a Lua function on a local redis-server (FCALL), started here.
//! * Figure 2: Q1–Q4 over 64-byte records (256 MiB; 32 MiB with --quick),
//!   native Rust against the same Rust compiled to wasm32 against
//!   JavaScript.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_sandbox::host::{HostError, Received};
use tabos_sandbox::procedure::{code_hash, examples, Language, Limits, ProcSpec};
use tabos_sandbox::{Host, RecvCall, Sandbox, SandboxConfig};

use crate::measure::Samples;
use crate::report::{round, Better, Figure, Report, Stat};
use crate::served::Served;

include!("../guest/fig2.rs");

const REALM: &str = "bench";
/// Keys of the chase data set: k<i> → v<i> → a value of VALUE_BYTES.
const KEYS: usize = 1_000;
const VALUE_BYTES: usize = 64;

/// The host of the dispatch measurements: nothing but `nop`.
struct NopHost;

impl Host for NopHost {
    fn send(&mut self, _: &[&str], _: &[u8], _: Option<&str>) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    fn recv(&mut self, _: RecvCall<'_>) -> Result<Received, HostError> {
        Err(HostError::Unsupported)
    }
}

fn native_noop(_: &mut dyn Host, _: &[u8]) -> Result<Vec<u8>, String> {
    Ok(Vec::new())
}

fn spec<'a>(tenant: &'a str, language: Language, code: &str) -> ProcSpec<'a> {
    ProcSpec {
        tenant,
        name: "p",
        language,
        code_hash: code_hash(code.as_bytes()),
        limits: Limits::default(),
    }
}

/// Rounds of [`ns_per`]: every contestant of a dispatch, host-call or
/// Table 2 figure gets this many, and its best counts.
const NS_PER_ROUNDS: u32 = 3;

/// Mean ns per call of `f` over `n` calls, best of [`NS_PER_ROUNDS`]
/// rounds.
fn ns_per(n: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..NS_PER_ROUNDS {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
    }
    Ok(best)
}

fn call(sb: &Sandbox, s: &ProcSpec<'_>, code: &str, args: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut load = |_: &mut NopHost| Ok(code.as_bytes().to_vec());
    sb.call_procedure(s, &mut NopHost, &mut load, args)
        .map(|o| o.result)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn invocation(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    eprintln!("procedures: invocation and host calls ...");
    let sb = Sandbox::new()?;
    let n = if quick { 20_000 } else { 200_000 };
    let (w, j) = (
        spec(REALM, Language::Wasm, examples::WASM_NOOP),
        spec(REALM, Language::Js, examples::JS_NOOP),
    );
    let native = ns_per(n, || {
        sb.call_native(native_noop, &Limits::default(), &mut NopHost, b"")
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("{e}"))
    })?;
    let wasm = ns_per(n, || call(&sb, &w, examples::WASM_NOOP, b"").map(|_| ()))?;
    let js = ns_per(n, || call(&sb, &j, examples::JS_NOOP, b"").map(|_| ()))?;
    let peer = "native Rust fn, same dispatch";
    let note =
        "enter and exit a no-op procedure through Sandbox::call_procedure (context from the \
                pool, deadline set, result and log returned); the native fn goes through \
                Sandbox::call_native";
    report.figures.push(
        Figure::new("invoke.noop.wasm_ns", round(wasm, 1), "ns", Better::Lower)
            .peer(peer, Some(round(native, 1)))
            .runs(NS_PER_ROUNDS, Stat::BestOfRuns)
            .target("value <= 200")
            .note(note),
    );
    report.figures.push(
        Figure::new("invoke.noop.js_ns", round(js, 1), "ns", Better::Lower)
            .peer(peer, Some(round(native, 1)))
            .runs(NS_PER_ROUNDS, Stat::BestOfRuns)
            .target("value <= 1000")
            .note(note),
    );
    // Host calls: a procedure making C no-op calls, less one invocation.
    let c: u64 = if quick { 200_000 } else { 2_000_000 };
    let (wn, jn) = (
        spec(REALM, Language::Wasm, examples::WASM_NOPS),
        spec(REALM, Language::Js, examples::JS_NOPS),
    );
    let wasm_calls = ns_per(1, || {
        call(&sb, &wn, examples::WASM_NOPS, &c.to_le_bytes()).map(|_| ())
    })?;
    let js_calls = ns_per(1, || {
        call(&sb, &jn, examples::JS_NOPS, c.to_string().as_bytes()).map(|_| ())
    })?;
    let native_call = ns_per(n, || {
        let h: &mut dyn Host = &mut NopHost;
        std::hint::black_box(h.nop());
        Ok(())
    })?;
    report.figures.push(
        Figure::new(
            "hostcall.nop.wasm_ns",
            round((wasm_calls - wasm) / c as f64, 2),
            "ns",
            Better::Lower,
        )
        .peer("native dyn Host call", Some(round(native_call, 2)))
        .runs(NS_PER_ROUNDS, Stat::BestOfRuns)
        .target("value <= 30")
        .note("tabos.nop() from a wasm loop, into the Host trait and back"),
    );
    report.figures.push(
        Figure::new(
            "hostcall.nop.js_ns",
            round((js_calls - js) / c as f64, 2),
            "ns",
            Better::Lower,
        )
        .peer("native dyn Host call", Some(round(native_call, 2)))
        .runs(NS_PER_ROUNDS, Stat::BestOfRuns)
        .note("tabos.nop() from a JavaScript loop (QuickJS is an interpreter: the loop's own cost is included)"),
    );
    Ok(())
}

/// Creating a process, the paper's "Processes/C++" context: fork, exec
/// /bin/true, wait.
fn process_us(n: usize) -> anyhow::Result<f64> {
    Ok(ns_per(n, || {
        let st = std::process::Command::new("/bin/true").status()?;
        anyhow::ensure!(st.success(), "/bin/true failed");
        Ok(())
    })? / 1e3)
}

fn table2(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    eprintln!("procedures: context creation and install (Table 2) ...");
    let sb = Sandbox::new()?;
    let n = if quick { 50 } else { 200 };
    // Warm the module cache and the runtime of this thread.
    call(
        &sb,
        &spec("warm", Language::Wasm, examples::WASM_NOOP),
        examples::WASM_NOOP,
        b"",
    )?;
    call(
        &sb,
        &spec("warm", Language::Js, examples::JS_NOOP),
        examples::JS_NOOP,
        b"",
    )?;
    let mut i = 0;
    let wasm_ctx = ns_per(n / 3, || {
        i += 1;
        let t = format!("w{i}");
        call(
            &sb,
            &spec(&t, Language::Wasm, examples::WASM_NOOP),
            examples::WASM_NOOP,
            b"",
        )
        .map(|_| ())
    })? / 1e3;
    let mut i = 0;
    let js_ctx = ns_per(n / 3, || {
        i += 1;
        let t = format!("j{i}");
        call(
            &sb,
            &spec(&t, Language::Js, examples::JS_NOOP),
            examples::JS_NOOP,
            b"",
        )
        .map(|_| ())
    })? / 1e3;
    let mut i = 0;
    let wasm_install = ns_per(n / 3, || {
        i += 1;
        // A different module each time: a cache hit would not compile.
        let code = examples::WASM_CHASE.replacen(
            "(memory",
            &format!("(global $unique{i} i32 (i32.const {i})) (memory"),
            1,
        );
        sb.check_procedure(Language::Wasm, code.as_bytes(), &Limits::default())
            .map_err(|e| anyhow::anyhow!("{e}"))
    })? / 1e3;
    let mut i = 0;
    let js_install = ns_per(n / 3, || {
        i += 1;
        let code = format!("{}\n// {i}", examples::JS_CHASE);
        sb.check_procedure(Language::Js, code.as_bytes(), &Limits::default())
            .map_err(|e| anyhow::anyhow!("{e}"))
    })? / 1e3;
    let process = process_us(n)?;
    let peer = "process: fork+exec+wait /bin/true";
    for (name, v, note) in [
        (
            "table2.context.wasm_us",
            wasm_ctx,
            "a new tenant's first call of a cached module: Store, instance, call",
        ),
        (
            "table2.context.js_us",
            js_ctx,
            "a new tenant's first call: QuickJS context, the tabos API, the script, call",
        ),
        (
            "table2.install.wasm_us",
            wasm_install,
            "compile and link check of the chase module (Cranelift)",
        ),
        (
            "table2.install.js_us",
            js_install,
            "install check of the chase script: a scratch context evaluates it",
        ),
    ] {
        report.figures.push(
            Figure::new(name, round(v, 1), "us", Better::Lower)
                .peer(peer, Some(round(process, 1)))
                .runs(NS_PER_ROUNDS, Stat::BestOfRuns)
                .note(note),
        );
    }
    Ok(())
}

// ---- Figure 1: chase over gRPC, and Redis --------------------------------

async fn start_node(dir: &Path) -> anyhow::Result<Served> {
    let settings = tabos_node::NodeSettings {
        node_id: "bench-procedures".into(),
        logs: dir.join("logs"),
        realm: REALM.into(),
        blocks: None,
        ..tabos_node::NodeSettings::defaults()
    };
    let config =
        tabos_store::Config::sqlite(dir.join("db")).with_durability(tabos_store::Durability::Full);
    let node = tabos_node::Node::open_with(&config, settings)?;
    eprintln!("  loading {KEYS} chains ...");
    let now = tabos_store::now_us();
    node.store.call::<(), tabos_kernel::Error, _>(
        tabos_kernel::realm_partition(REALM, node.store.partitions()),
        move |tx| {
            for i in 0..KEYS {
                tabos_kernel::kv::put_tx(
                    tx,
                    REALM,
                    &format!("k{i}"),
                    format!("v{i}").as_bytes(),
                    now,
                )?;
                tabos_kernel::kv::put_tx(tx, REALM, &format!("v{i}"), &value(i), now)?;
            }
            tabos_kernel::Result::Ok(())
        },
    )?;
    let served = Served::start(node, Default::default()).await?;
    let mut c = served.addr.connect().await?;
    // Declared read-only, as Redis's chase is a `no-writes` function: each
    // call runs on a read connection, not the partition's writer.
    let none = tabos_client::procedures::ProcedureLimits {
        read_only: true,
        ..Default::default()
    };
    for (name, lang, code) in [
        ("chase", "wasm", examples::WASM_CHASE),
        ("get", "wasm", examples::WASM_GET),
        ("jschase", "js", examples::JS_CHASE),
    ] {
        c.procedure_install(REALM, name, lang, code.into(), none)
            .await?;
    }
    Ok(served)
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    v
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Chase {
    /// One call of the wasm chase procedure.
    Wasm,
    /// One call of the JavaScript chase procedure.
    Js,
    /// Two calls of the wasm get procedure: the client follows the pointer.
    TwoTrips,
}

struct Measured {
    ops_per_s: f64,
    p50_us: f64,
}

async fn chase_tabos(
    addr: &tabos_client::Endpoint,
    how: Chase,
    clients: usize,
    dur: Duration,
) -> anyhow::Result<Measured> {
    let mut set = tokio::task::JoinSet::new();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(clients));
    for c in 0..clients {
        let client = addr.connect().await?;
        let start = start.clone();
        set.spawn(async move {
            let one = |i: usize| {
                let mut client = client.clone();
                async move {
                    let key = format!("k{i}");
                    let got = match how {
                        Chase::Wasm => {
                            client
                                .procedure_call(REALM, "chase", key.into_bytes())
                                .await?
                                .result
                        }
                        Chase::Js => {
                            client
                                .procedure_call(REALM, "jschase", key.into_bytes())
                                .await?
                                .result
                        }
                        Chase::TwoTrips => {
                            let next = client
                                .procedure_call(REALM, "get", key.into_bytes())
                                .await?
                                .result;
                            client.procedure_call(REALM, "get", next).await?.result
                        }
                    };
                    anyhow::ensure!(got == value(i), "chase of k{i} returned {got:?}");
                    anyhow::Ok(())
                }
            };
            for i in 0..20 {
                one((c * 31 + i) % KEYS).await?;
            }
            start.wait().await;
            let mut samples = Samples::default();
            let t0 = Instant::now();
            let mut i = c * 7919;
            while t0.elapsed() < dur {
                let t = Instant::now();
                one(i % KEYS).await?;
                samples.push(t.elapsed().as_nanos() as u64);
                i += 13;
            }
            anyhow::Ok((samples, t0.elapsed()))
        });
    }
    collect(&mut set).await
}

async fn collect(
    set: &mut tokio::task::JoinSet<anyhow::Result<(Samples, Duration)>>,
) -> anyhow::Result<Measured> {
    let mut all = Samples::default();
    let mut rate = 0.0;
    while let Some(r) = set.join_next().await {
        let (s, d) = r.context("a benchmark client panicked")??;
        rate += s.len() as f64 / d.as_secs_f64();
        all.extend(s);
    }
    Ok(Measured {
        ops_per_s: rate,
        p50_us: all.quantile_us(0.5),
    })
}

/// A minimal RESP2 client (one connection, one command at a time).
struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

#[derive(Debug, PartialEq)]
enum Reply {
    Status(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

impl Resp {
    fn connect(addr: &str) -> anyhow::Result<Resp> {
        let w = TcpStream::connect(addr)?;
        w.set_nodelay(true)?;
        Ok(Resp {
            r: BufReader::new(w.try_clone()?),
            w,
        })
    }

    fn cmd(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out)?;
        self.reply()
    }

    fn reply(&mut self) -> anyhow::Result<Reply> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        let line = line.trim_end();
        let (kind, rest) = line.split_at(1.min(line.len()));
        Ok(match kind {
            "+" => Reply::Status(rest.into()),
            "-" => anyhow::bail!("redis: {rest}"),
            ":" => Reply::Int(rest.parse()?),
            "$" => {
                let n: i64 = rest.parse()?;
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    self.r.read_exact(&mut buf)?;
                    buf.truncate(n as usize);
                    Reply::Bulk(Some(buf))
                }
            }
            "*" => {
                let n: i64 = rest.parse()?;
                let mut items = Vec::new();
                for _ in 0..n.max(0) {
                    items.push(self.reply()?);
                }
                Reply::Array(items)
            }
            _ => anyhow::bail!("redis: unexpected reply {line:?}"),
        })
    }
}

/// redis-server on loopback with persistence off (the chase only reads);
/// killed when dropped.
struct Redis {
    child: std::process::Child,
    addr: String,
    version: String,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const LUA_CHASE: &str = "#!lua name=tabos\n\
    redis.register_function{function_name='chase', flags={'no-writes'}, callback=function(keys, args)\n\
      local next = redis.call('GET', keys[1])\n\
      if not next then return false end\n\
      return redis.call('GET', next)\n\
    end}\n";

fn start_redis(dir: &Path) -> anyhow::Result<Redis> {
    let bin =
        crate::names::debian_binary("procedures", "redis-server", &["/usr/bin/redis-server"])?;
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let port = crate::names::free_port()?;
    let child = std::process::Command::new(&bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot start redis-server")?;
    let redis = Redis {
        child,
        addr: format!("127.0.0.1:{port}"),
        version,
    };
    // A bounded start-up wait for the external process.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut c = loop {
        match Resp::connect(&redis.addr) {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => anyhow::bail!("redis-server did not start: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    c.cmd(&[b"FUNCTION", b"LOAD", b"REPLACE", LUA_CHASE.as_bytes()])?;
    for i in 0..KEYS {
        c.cmd(&[
            b"SET",
            format!("k{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ])?;
        c.cmd(&[b"SET", format!("v{i}").as_bytes(), &value(i)])?;
    }
    Ok(redis)
}

fn chase_redis(addr: &str, clients: usize, dur: Duration) -> anyhow::Result<Measured> {
    let start = std::sync::Arc::new(std::sync::Barrier::new(clients));
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (addr, start) = (addr.to_string(), start.clone());
            std::thread::spawn(move || -> anyhow::Result<(Samples, Duration)> {
                let mut r = Resp::connect(&addr)?;
                let mut one = |i: usize| -> anyhow::Result<()> {
                    let key = format!("k{i}");
                    let got = r.cmd(&[b"FCALL", b"chase", b"1", key.as_bytes()])?;
                    anyhow::ensure!(
                        got == Reply::Bulk(Some(value(i))),
                        "redis chase of {key}: {got:?}"
                    );
                    Ok(())
                };
                for i in 0..20 {
                    one((c * 31 + i) % KEYS)?;
                }
                start.wait();
                let mut samples = Samples::default();
                let t0 = Instant::now();
                let mut i = c * 7919;
                while t0.elapsed() < dur {
                    let t = Instant::now();
                    one(i % KEYS)?;
                    samples.push(t.elapsed().as_nanos() as u64);
                    i += 13;
                }
                Ok((samples, t0.elapsed()))
            })
        })
        .collect();
    let mut all = Samples::default();
    let mut rate = 0.0;
    for h in handles {
        let (s, d) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a redis client panicked"))??;
        rate += s.len() as f64 / d.as_secs_f64();
        all.extend(s);
    }
    Ok(Measured {
        ops_per_s: rate,
        p50_us: all.quantile_us(0.5),
    })
}

fn figure1(report: &mut Report, quick: bool, dir: &Path) -> anyhow::Result<()> {
    eprintln!("procedures: chase over gRPC and on Redis (Figure 1) ...");
    let dur = Duration::from_millis(if quick { 500 } else { 3_000 });
    let redis = start_redis(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (node, results) = rt.block_on(async {
        let node = start_node(dir).await?;
        eprintln!("  node serving at {}", node.addr.addr);
        let mut results = Vec::new();
        for clients in [1usize, 16] {
            eprintln!("  {clients} clients ...");
            let wasm = chase_tabos(&node.addr, Chase::Wasm, clients, dur).await?;
            let js = chase_tabos(&node.addr, Chase::Js, clients, dur).await?;
            let two = chase_tabos(&node.addr, Chase::TwoTrips, clients, dur).await?;
            results.push((clients, wasm, js, two));
        }
        anyhow::Ok((node, results))
    })?;
    rt.block_on(node.stop())?;
    for (clients, wasm, js, two) in results {
        let redis_m = chase_redis(&redis.addr, clients, dur)?;
        eprintln!(
            "  {clients}c: wasm {:.0}/s p50 {:.1}us, js {:.0}/s p50 {:.1}us, two trips {:.0}/s p50 {:.1}us, redis {:.0}/s p50 {:.1}us",
            wasm.ops_per_s, wasm.p50_us, js.ops_per_s, js.p50_us, two.ops_per_s, two.p50_us, redis_m.ops_per_s, redis_m.p50_us
        );
        let c = format!("{clients}c");
        if clients == 1 {
            // ≥ 1.8× faster than two round trips: one call's latency at most
            // 1/1.8 of theirs.
            report.figures.push(
                Figure::new(format!("chase.{c}.wasm.p50_us"), round(wasm.p50_us, 1), "us", Better::Lower)
                    .peer("two client round trips (gRPC)", Some(round(two.p50_us, 1)))
                    .runs(1, Stat::P50)
                    .target("ratio <= 0.556")
                    .note("chase in one wasm procedure call vs the client following the pointer with two calls"),
            );
            report.figures.push(
                Figure::new(
                    format!("chase.{c}.js.p50_us"),
                    round(js.p50_us, 1),
                    "us",
                    Better::Lower,
                )
                .peer("two client round trips (gRPC)", Some(round(two.p50_us, 1)))
                .runs(1, Stat::P50),
            );
        }
        report.figures.push(
            Figure::new(
                format!("chase.{c}.wasm.ops_per_s"),
                round(wasm.ops_per_s, 0),
                "ops/s",
                Better::Higher,
            )
            .peer(
                "two client round trips (gRPC)",
                Some(round(two.ops_per_s, 0)),
            )
            .runs(1, Stat::Rate),
        );
        report.figures.push(
            Figure::new(
                format!("chase.{c}.wasm_vs_redis.ops_per_s"),
                round(wasm.ops_per_s, 0),
                "ops/s",
                Better::Higher,
            )
            .peer(
                "redis-server FCALL (Lua)",
                Some(round(redis_m.ops_per_s, 0)),
            )
            .runs(1, Stat::Rate)
            .target("ratio >= 1"),
        );
        report.figures.push(
            Figure::new(
                format!("chase.{c}.js_vs_redis.ops_per_s"),
                round(js.ops_per_s, 0),
                "ops/s",
                Better::Higher,
            )
            .peer(
                "redis-server FCALL (Lua)",
                Some(round(redis_m.ops_per_s, 0)),
            )
            .runs(1, Stat::Rate),
        );
        report.figures.push(
            Figure::new(
                format!("chase.{c}.wasm_vs_redis.p50_us"),
                round(wasm.p50_us, 1),
                "us",
                Better::Lower,
            )
            .peer("redis-server FCALL (Lua)", Some(round(redis_m.p50_us, 1)))
            .runs(1, Stat::P50),
        );
    }
    report.notes.push(format!(
        "chase: embedded node (SQLite, durability full) in this process, {KEYS} keys k<i> → v<i> → \
         {VALUE_BYTES}-byte values in the realm's kv table, clients over loopback gRPC (one \
         connection each, tokio, 2 worker threads), each call one read-only procedure (one \
         snapshot on a read connection of the realm's partition, as Redis's is no-writes); redis: {} on loopback, persistence off, the chase as a Lua function (FUNCTION \
         LOAD, FCALL) over RESP from one thread per client; {} s per measurement",
        redis.version,
        dur.as_secs_f64()
    ));
    Ok(())
}

// ---- Figure 2 -------------------------------------------------------------

const SELECTIVITY_PCT: [u32; 5] = [1, 10, 50, 90, 100];
/// Field 0 is uniform in [0, A_RANGE).
const A_RANGE: i32 = 1_000_000;

const JS_QUERIES: &str = "
function q1(a, n, x) { let s = 0; for (let i = 0, e = n * 16; i < e; i += 16) if (a[i] < x) s += a[i + 1]; return s; }
function q2(a, n, x, out) { let k = 0; for (let i = 0, e = n * 16; i < e; i += 16) if (a[i] < x) out[k++] = a[i + 1]; return k; }
function q3(a, n, x, out) { let k = 0; for (let i = 0, e = n * 16; i < e; i += 16) if (a[i] < x) { out[k] = a[i + 1]; out[k + 1] = a[i + 2]; out[k + 2] = a[i + 3]; out[k + 3] = a[i + 4]; k += 4; } return k / 4; }
function q4(a, n, x) { let s = 0; for (let i = 0, e = n * 16; i < e; i += 16) if (a[i] < x) s += Math.pow(a[i + 1], 1.5) + Math.pow(a[i + 2], 0.5) + Math.pow(a[i + 3], 2.5); return s; }
";

/// The data: n records, field 0 uniform in [0, A_RANGE), the others small.
fn records_data(n: usize) -> Vec<i32> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut v = vec![0i32; n * FIELDS];
    for r in v.chunks_exact_mut(FIELDS) {
        r[0] = (next() % A_RANGE as u64) as i32;
        for f in &mut r[1..] {
            *f = (next() % 1000) as i32;
        }
    }
    v
}

/// The Figure 2 guest's source, carried in the binary: the suite runs
/// from the release binary alone, wherever it was built.
const GUEST_SRC: &str = include_str!("../guest/fig2.rs");
/// The target the guest is compiled for.
const GUEST_TARGET: &str = "wasm32-wasip1";

/// Installs the guest's target with rustup when the toolchain lacks it.
fn ensure_guest_target() -> anyhow::Result<()> {
    let libdir = std::process::Command::new("rustc")
        .args(["--print", "target-libdir", "--target", GUEST_TARGET])
        .output()
        .context("cannot run rustc (the Figure 2 guest is compiled with it)")?;
    let dir = String::from_utf8_lossy(&libdir.stdout).trim().to_string();
    if libdir.status.success() && !dir.is_empty() && Path::new(&dir).is_dir() {
        return Ok(());
    }
    eprintln!("procedures: installing the {GUEST_TARGET} target with rustup (once) ...");
    let st = std::process::Command::new("rustup")
        .args(["target", "add", GUEST_TARGET])
        .status()
        .context("cannot run rustup to add the wasm32 target")?;
    anyhow::ensure!(st.success(), "rustup target add {GUEST_TARGET} failed");
    Ok(())
}

/// Compiles the guest for wasm32 with the installed rustc (adding the
/// target first if it is missing).
fn compile_guest(dir: &Path) -> anyhow::Result<Vec<u8>> {
    ensure_guest_target()?;
    let src = dir.join("fig2.rs");
    std::fs::write(&src, GUEST_SRC)?;
    let out = dir.join("fig2.wasm");
    let st = std::process::Command::new("rustc")
        .args([
            "--edition",
            "2021",
            "--target",
            GUEST_TARGET,
            "--crate-type",
            "cdylib",
        ])
        .args([
            "-C",
            "opt-level=3",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .context("cannot run rustc for the wasm32 guest")?;
    anyhow::ensure!(
        st.success(),
        "rustc --target wasm32-wasip1 failed for {}",
        src.display()
    );
    Ok(std::fs::read(out)?)
}

/// One query's answer, comparable across the three.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Int(i64),
    Real(f64),
}

fn same(a: Answer, b: Answer) -> bool {
    match (a, b) {
        (Answer::Int(x), Answer::Int(y)) => x == y,
        (Answer::Real(x), Answer::Real(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        _ => false,
    }
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<(f64, T)> {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let v = f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        last = Some(v);
    }
    Ok((best, last.context("no rounds")?))
}

fn figure2(report: &mut Report, quick: bool, dir: &Path) -> anyhow::Result<()> {
    let bytes: usize = if quick { 32 << 20 } else { 256 << 20 };
    let n = bytes / (FIELDS * 4);
    eprintln!(
        "procedures: Figure 2 over {} MiB ({n} records) ...",
        bytes >> 20
    );
    let data = records_data(n);
    let mut out = vec![0i32; 4 * n];
    // WebAssembly: the same Rust, compiled for wasm32, in the sandbox's
    // engine (epoch checks on, as for procedures).
    let guest = compile_guest(dir)?;
    let sb = Sandbox::with_config(SandboxConfig {
        js_runtime_bytes: 2 << 30,
    })?;
    let mut wasm = sb
        .raw_instance(&guest, bytes + 4 * n * 4 + (64 << 20))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let i32v = |v: i32| wasmtime::Val::I32(v);
    let alloc =
        |w: &mut tabos_sandbox::procedure::wasm::RawInstance, b: usize| -> anyhow::Result<i32> {
            let r = w
                .call("alloc", &[i32v(b as i32)], 1)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            r[0].i32().context("alloc returned no i32")
        };
    let wdata = alloc(&mut wasm, bytes)?;
    let wout = alloc(&mut wasm, 4 * n * 4)?;
    let raw: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    wasm.write(wdata as u32 as usize, &raw)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(raw);
    // JavaScript: QuickJS, the engine of JS procedures, over an Int32Array.
    let js_rt = rquickjs::Runtime::new()?;
    js_rt.set_memory_limit(2 << 30);
    let js_ctx = rquickjs::Context::full(&js_rt)?;
    js_ctx.with(|ctx| -> anyhow::Result<()> {
        ctx.eval::<(), _>(JS_QUERIES)?;
        let a = rquickjs::TypedArray::<i32>::new_copy(ctx.clone(), &data[..])?;
        ctx.globals().set("DATA", a)?;
        let o = rquickjs::TypedArray::<i32>::new_copy(ctx.clone(), vec![0i32; 4 * n])?;
        ctx.globals().set("OUT", o)?;
        Ok(())
    })?;
    let rounds = if quick { 2 } else { 3 };
    let mut wasm_ratios: Vec<Vec<f64>> = vec![Vec::new(); 4];
    let mut js_ratios: Vec<Vec<f64>> = vec![Vec::new(); 4];
    for q in 1..=4usize {
        for sel in SELECTIVITY_PCT {
            let x = (i64::from(A_RANGE) * i64::from(sel) / 100) as i32;
            let (native_ms, native) = time(rounds, || {
                let p = data.as_ptr();
                let o = out.as_mut_ptr();
                Ok(match q {
                    1 => Answer::Int(std::hint::black_box(q1(p, n, x))),
                    2 => Answer::Int(q2(p, n, x, o) as i64),
                    3 => Answer::Int(q3(p, n, x, o) as i64),
                    _ => Answer::Real(std::hint::black_box(q4(p, n, x))),
                })
            })?;
            let (wasm_ms, w) = time(rounds, || {
                let (name, args) = match q {
                    1 => ("q1", vec![i32v(wdata), i32v(n as i32), i32v(x)]),
                    2 => ("q2", vec![i32v(wdata), i32v(n as i32), i32v(x), i32v(wout)]),
                    3 => ("q3", vec![i32v(wdata), i32v(n as i32), i32v(x), i32v(wout)]),
                    _ => ("q4", vec![i32v(wdata), i32v(n as i32), i32v(x)]),
                };
                let r = wasm
                    .call(name, &args, 1)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                Ok(match r[0] {
                    wasmtime::Val::I64(v) => Answer::Int(v),
                    wasmtime::Val::I32(v) => Answer::Int(i64::from(v as u32)),
                    wasmtime::Val::F64(bits) => Answer::Real(f64::from_bits(bits)),
                    ref other => anyhow::bail!("q{q} returned {other:?}"),
                })
            })?;
            let (js_ms, j) = time(rounds, || {
                js_ctx.with(|ctx| -> anyhow::Result<Answer> {
                    let f: rquickjs::Function = ctx.globals().get(format!("q{q}"))?;
                    let a: rquickjs::Value = ctx.globals().get("DATA")?;
                    let o: rquickjs::Value = ctx.globals().get("OUT")?;
                    let v: f64 = match q {
                        2 | 3 => f.call((a, n as f64, x, o))?,
                        _ => f.call((a, n as f64, x))?,
                    };
                    Ok(if q == 4 {
                        Answer::Real(v)
                    } else {
                        Answer::Int(v as i64)
                    })
                })
            })?;
            anyhow::ensure!(
                same(native, w),
                "q{q} at {sel}%: native {native:?}, wasm {w:?}"
            );
            anyhow::ensure!(
                same(native, j),
                "q{q} at {sel}%: native {native:?}, js {j:?}"
            );
            eprintln!("  q{q} {sel:>3}%: native {native_ms:.1} ms, wasm {wasm_ms:.1} ms, js {js_ms:.1} ms");
            wasm_ratios[q - 1].push(wasm_ms / native_ms);
            js_ratios[q - 1].push(js_ms / native_ms);
            let mut f = Figure::new(
                format!("fig2.q{q}.s{sel}.wasm_ms"),
                round(wasm_ms, 2),
                "ms",
                Better::Lower,
            )
            .peer("native Rust", Some(round(native_ms, 2)))
            .runs(rounds as u32, Stat::BestOfRuns);
            if q <= 3 {
                f = f.target("ratio <= 1.3");
            }
            report.figures.push(f);
            report.figures.push(
                Figure::new(
                    format!("fig2.q{q}.s{sel}.js_ms"),
                    round(js_ms, 2),
                    "ms",
                    Better::Lower,
                )
                .peer("native Rust", Some(round(native_ms, 2)))
                .runs(rounds as u32, Stat::BestOfRuns),
            );
        }
    }
    for q in 1..=4 {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        report.notes.push(format!(
            "fig2 q{q}: wasm/native {:.2}× and js/native {:.2}× on average over selectivities {SELECTIVITY_PCT:?}%",
            mean(&wasm_ratios[q - 1]),
            mean(&js_ratios[q - 1])
        ));
    }
    report.notes.push(format!(
        "fig2: {} MiB of records of 16 × i32 in memory ({n} records), predicate A < x on field 0 \
         (uniform), the same Rust (crates/bench/guest/fig2.rs) compiled natively (release) and \
         with rustc --target wasm32-wasip1 -C opt-level=3, run in the sandbox's engine (Cranelift, \
         epoch interruption on, as procedures); JavaScript on QuickJS (the engine of JS \
         procedures, an interpreter, not a JIT like the paper's V8); best of {rounds} rounds for \
         each",
        bytes >> 20
    ));
    Ok(())
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let dir = tabos_store::testing::TempDir::new("bench-procedures");
    let filter = std::env::var("TABOS_BENCH_FILTER").unwrap_or_default();
    let mut report = Report::new("procedures", quick);
    if "invoke".contains(&filter) || filter.is_empty() {
        invocation(&mut report, quick)?;
    }
    if "table2".contains(&filter) || filter.is_empty() {
        table2(&mut report, quick)?;
    }
    if "chase".contains(&filter) || filter.is_empty() {
        figure1(&mut report, quick, dir.path())?;
    }
    if "fig2".contains(&filter) || filter.is_empty() {
        figure2(&mut report, quick, dir.path())?;
    }
    Ok(report)
}
