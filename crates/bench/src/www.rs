//! `tabos-bench www`: the web server (σOS section 5.3) under wrk (Debian's
//! `wrk`, installed with apt-get if missing) at 1, 16 and 64 connections:
//!
//! * **static** — `tabos www serve`'s wwd and workers answering a 4 KiB
//!   file from tabos fs, against nginx (Debian's `nginx`) serving the same
//!   file from local disk with its default two worker processes. Goal:
//!   ≥ 0.5× nginx.
//! * **dynamic** — a page made by a stored procedure (JavaScript), against
//!   a fork-per-request CGI server (here: each request forks and execs
//!   `/bin/sh` to print the same page). Goal: ≥ 5×.
//!
//! Everything runs on this machine, the load generator included.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tabos_client::procedures::ProcedureLimits;
use tabos_client::Client;
use tabos_www::route::{Handler, Route, Routes};
use tabos_www::service::{self, Program, Site};

use crate::report::{round, Better, Figure, Report, Stat};

/// Connection counts wrk runs at.
const CONNECTIONS: [usize; 3] = [1, 16, 64];
/// The static file's size.
const FILE_BYTES: usize = 4 << 10;
/// The dynamic page, as the procedure and the CGI script make it.
const PAGE_JS: &str = "function main(req) { const r = JSON.parse(req); \
                       return '<p>hello ' + r.path + '</p>'; }";

/// nginx, stopped when dropped: SIGTERM first, so its master stops its
/// workers (a SIGKILL to the master alone left them running), then
/// SIGKILL if it has not ended within a few seconds.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child, which we have not reaped.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(port: u16, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// nginx serving `root` on `port` (foreground, logs off, temp files in
/// `dir`).
fn start_nginx(dir: &Path, root: &Path, port: u16) -> anyhow::Result<Killed> {
    let bin = crate::names::debian_binary("www", "nginx", &["/usr/sbin/nginx"])?;
    let conf = dir.join("nginx.conf");
    let t = dir.display();
    std::fs::write(
        &conf,
        format!(
            "user root; worker_processes 2; pid {t}/nginx.pid; error_log {t}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{ access_log off; sendfile on; tcp_nopush on; default_type application/octet-stream;\n\
             client_body_temp_path {t}/cb; proxy_temp_path {t}/px; fastcgi_temp_path {t}/fc;\n\
             uwsgi_temp_path {t}/uw; scgi_temp_path {t}/sc;\n\
             server {{ listen 127.0.0.1:{port}; root {}; }} }}\n",
            root.display()
        ),
    )?;
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start nginx")?;
    let k = Killed(child);
    wait_listening(port, "nginx")?;
    Ok(k)
}

/// The fork-per-request CGI peer: an HTTP/1.1 server (one thread per
/// connection, keep-alive) whose every request forks and execs `/bin/sh`
/// to print the page.
fn start_cgi(port: u16) -> anyhow::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = sock.set_nodelay(true);
                let mut w = match sock.try_clone() {
                    Ok(w) => w,
                    Err(_) => return,
                };
                let mut r = BufReader::new(sock);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
                    // The headers, to the empty line.
                    let mut close = false;
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" || h == "\n" {
                            break;
                        }
                        close |= h.to_ascii_lowercase().starts_with("connection: close");
                    }
                    let out = Command::new("/bin/sh")
                        .args(["-c", "printf '<p>hello %s</p>' \"$PATH_INFO\""])
                        .env("PATH_INFO", &path)
                        .output();
                    let body = out.map(|o| o.stdout).unwrap_or_default();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    if w.write_all(head.as_bytes()).is_err() || w.write_all(&body).is_err() || close
                    {
                        return;
                    }
                }
            });
        }
    });
    Ok(())
}

/// wrk's requests per second for `url` at `conns` connections.
fn wrk(url: &str, conns: usize, dur: Duration) -> anyhow::Result<f64> {
    let bin = crate::names::debian_binary("www", "wrk", &["/usr/bin/wrk"])?;
    let threads = conns.min(2);
    let out = Command::new(bin)
        .args(["-t", &threads.to_string(), "-c", &conns.to_string()])
        .args(["-d", &format!("{}s", dur.as_secs().max(1))])
        .arg(url)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "wrk failed: {text}");
    anyhow::ensure!(
        !text.contains("Non-2xx"),
        "wrk saw error responses from {url}: {text}"
    );
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no Requests/sec in wrk's output: {text}"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(quick: bool) -> anyhow::Result<Report> {
    let mut report = Report::new("www", quick);
    let exe = crate::tabos_exe()?;
    let runs: u32 = if quick { 1 } else { 3 };
    let dur = Duration::from_secs(if quick { 1 } else { 3 });
    let dir = tabos_store::testing::TempDir::new("bench-www");
    let local = dir.path().join("site");
    std::fs::create_dir_all(&local)?;
    let file: Vec<u8> = (0..FILE_BYTES).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(local.join("file.html"), &file)?;
    let node = crate::elastic::start_node(&exe, &["--cores", "8"], &dir.path().join("node"))?;
    let (tabos_port, nginx_port, cgi_port) = (free_port()?, free_port()?, free_port()?);
    let _nginx = start_nginx(dir.path(), &local, nginx_port)?;
    start_cgi(cgi_port)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    report.notes.push(format!(
        "on this {cpus}-core machine, wrk included: tabos www serve (one wwd, 2 workers) over a \
         tabos node (embedded SQLite); nginx with 2 worker processes from local disk; the CGI \
         peer forks /bin/sh per request"
    ));
    let rt = tokio::runtime::Runtime::new()?;
    let mut site = rt.block_on(async {
        let mut c = Client::connect(&node.addr, &node.token).await?;
        // wwd listens where wrk connects: on the host's network.
        c.set_realm(tabos_client::proto::SetRealmRequest {
            realm: "default".into(),
            host_network: Some(true),
            ..Default::default()
        })
        .await?;
        c.fs_mkdir("default", "", "/site", 0o755).await?;
        c.fs_create("default", "", "/site/file.html", 0o644).await?;
        c.fs_write("default", "", "/site/file.html", 0, file.clone(), false)
            .await?;
        c.procedure_install(
            "default",
            "page",
            "js",
            PAGE_JS.into(),
            ProcedureLimits::default(),
        )
        .await?;
        let routes = Routes {
            routes: vec![
                Route {
                    prefix: "/".into(),
                    handler: Handler::Static {
                        root: "/site".into(),
                    },
                },
                Route {
                    prefix: "/dyn".into(),
                    handler: Handler::Procedure {
                        name: "page".into(),
                    },
                },
            ],
        };
        service::create(&c, "default", "bench", &routes).await?;
        let program = Program {
            path: exe.display().to_string(),
            args: vec!["www-task".into()],
        };
        let site = Site::start(
            &c,
            "default",
            "bench",
            program,
            &format!("127.0.0.1:{tabos_port}"),
            None,
            2,
            2,
        )
        .await?;
        anyhow::Ok(site)
    })?;
    wait_listening(tabos_port, "wwd")?;
    // Both answer the same bytes before anything is measured.
    let fetch = |port: u16, path: &str| -> anyhow::Result<Vec<u8>> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        let at = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .context("no header end")?;
        Ok(out[at + 4..].to_vec())
    };
    anyhow::ensure!(
        fetch(tabos_port, "/file.html")? == file,
        "tabos served other bytes"
    );
    anyhow::ensure!(
        fetch(nginx_port, "/file.html")? == file,
        "nginx served other bytes"
    );
    let (ours, cgi) = (fetch(tabos_port, "/dyn/x")?, fetch(cgi_port, "/dyn/x")?);
    anyhow::ensure!(
        ours == cgi,
        "the dynamic pages differ: tabos {:?}, CGI {:?}",
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&cgi)
    );
    for (kind, path, peer_port, peer, target) in [
        (
            "static",
            "/file.html",
            nginx_port,
            "nginx (2 workers, local disk)",
            "ratio >= 0.5",
        ),
        (
            "dynamic",
            "/dyn/x",
            cgi_port,
            "fork-per-request CGI (/bin/sh)",
            "ratio >= 5",
        ),
    ] {
        // TABOS_BENCH_FILTER=dynamic (or static) runs that kind alone (a
        // profile of one path).
        if !kind.contains(
            std::env::var("TABOS_BENCH_FILTER")
                .unwrap_or_default()
                .as_str(),
        ) {
            continue;
        }
        for conns in CONNECTIONS {
            let (mut t, mut p) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                t.push(wrk(
                    &format!("http://127.0.0.1:{tabos_port}{path}"),
                    conns,
                    dur,
                )?);
                p.push(wrk(
                    &format!("http://127.0.0.1:{peer_port}{path}"),
                    conns,
                    dur,
                )?);
            }
            let (t, p) = (median(&mut t), median(&mut p));
            println!("www: {kind} at {conns} connections: tabos {t:.0}/s, {peer} {p:.0}/s");
            let mut f = Figure::new(
                format!("{kind}.{conns}c"),
                round(t, 0),
                "requests/s",
                Better::Higher,
            )
            .peer(peer, Some(round(p, 0)))
            .runs(runs, Stat::MedianOfRuns)
            .note(format!(
                "wrk -c {conns} for {} s per run against {path}",
                dur.as_secs()
            ));
            if conns == *CONNECTIONS.last().expect("counts") {
                f = f.target(target);
            }
            report.figures.push(f);
        }
    }
    rt.block_on(site.stop());
    drop(node);
    Ok(report)
}
