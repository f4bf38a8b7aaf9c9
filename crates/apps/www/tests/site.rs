//! The web server on a real node (in-process, embedded SQLite; wwd and
//! worker procs running the `tabos-www-task` binary), asked with the real
//! curl: static files from tabos fs (a directory's index.html, content
//! types, HEAD, a file larger than one message), a page from a stored
//! procedure (many at once, one of them failing), bad requests (a path
//! leaving the site, a method static files
//! do not answer, a missing file or procedure), routes changed while it
//! runs, a worker SIGKILLed while the site serves on (and one killed
//! holding requests, which wwd asks again for), the pool grown by
//! wwd's load reports and shrunk after, and wwd's credential scoped to its
//! mailboxes; and HTTP as caches and browsers expect it (validators and
//! 304, ranges, HEAD's length, gzip, a 1 GiB file streamed, HTTPS).

use std::process::Command;
use std::time::Duration;

use tabos_client::procedures::ProcedureLimits;
use tabos_client::Client;
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::{kill_proc, TempDir};
use tabos_www::route::{Handler, Route, Routes};
use tabos_www::service::{self, Program, Site};

const REALM: &str = "default";

async fn start(dir: &TempDir) -> tabos_node::Embedded {
    start_with_blocks(dir, 256 << 20).await
}

/// A node whose block store holds `blocks` bytes.
async fn start_with_blocks(dir: &TempDir, blocks: u64) -> tabos_node::Embedded {
    let settings = NodeSettings {
        node_id: "n1".into(),
        logs: dir.path().join("logs"),
        cores: 8,
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.path().join("blocks.dev"),
            blocks,
        )),
        // The tests' programs and modules: in temporary directories and
        // the build's target directory (an operator's --program-dir).
        program_dirs: vec![
            std::env::temp_dir(),
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
        ],
        ..NodeSettings::defaults()
    };
    let node = Node::open_with(
        &tabos_store::Config::sqlite(dir.path().join("db")),
        settings,
    )
    .unwrap();
    let node = tabos_node::Embedded::start(node).await.unwrap();
    // wwd listens where browsers connect: the realm shares the host's network.
    node.client()
        .await
        .unwrap()
        .set_realm(tabos_client::proto::SetRealmRequest {
            realm: REALM.into(),
            host_network: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    node
}

async fn put(c: &mut Client, path: &str, data: &[u8]) {
    c.fs_create(REALM, "", path, 0o644).await.unwrap();
    let mut at = 0;
    for chunk in data.chunks(1 << 20) {
        c.fs_write(REALM, "", path, at, chunk.to_vec(), false)
            .await
            .unwrap();
        at += chunk.len() as i64;
    }
}

/// curl's status, content type and body for `args`.
fn curl(args: &[&str]) -> (u16, String, Vec<u8>) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "20",
            "-o",
            "-",
            "-w",
            "\n%{http_code} %{content_type}",
        ])
        .args(args)
        .output()
        .expect("curl (.ci/run installs it)");
    let mut body = out.stdout;
    let nl = body
        .iter()
        .rposition(|b| *b == b'\n')
        .expect("curl's trailer");
    let trailer = String::from_utf8(body.split_off(nl)).unwrap();
    let mut t = trailer.trim().splitn(2, ' ');
    let status = t.next().unwrap().parse().unwrap_or(0);
    (status, t.next().unwrap_or_default().to_string(), body)
}

/// `GET path` on its own connection to 127.0.0.1:`port`: the status and
/// the response's bytes (head and body).
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

/// The site's program: this build's `tabos-www-task`.
fn program() -> Program {
    Program {
        path: env!("CARGO_BIN_EXE_tabos-www-task").into(),
        args: Vec::new(),
    }
}

/// Starts site `site` on a free loopback port with `min..=max` workers:
/// the site, its port and its base URL.
async fn serve_site(client: &Client, site: &str, min: u32, max: u32) -> (Site, u16, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let s = Site::start(client, REALM, site, program(), &listen, None, min, max)
        .await
        .unwrap();
    (s, port, format!("http://{listen}"))
}

/// The tests' runtime: two workers, as the machine has two cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (boundedly) until `site` has `n` workers, and returns them.
async fn until_workers(site: &Site, n: usize, what: &str) -> Vec<String> {
    for _ in 0..600 {
        let w = site.workers().await.unwrap();
        if w.len() == n {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never {n} workers ({what})");
}

/// Waits (boundedly) until `url` answers 200: wwd is listening.
async fn until_answers(url: &str) {
    for _ in 0..200 {
        let u = url.to_string();
        if tokio::task::spawn_blocking(move || curl(&[&u]))
            .await
            .unwrap()
            .0
            == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("wwd never answered {url}");
}

fn routes(extra: &[(&str, Handler)]) -> Routes {
    let mut routes = vec![Route {
        prefix: "/".into(),
        handler: Handler::Static {
            root: "/site".into(),
        },
    }];
    for (p, h) in extra {
        routes.push(Route {
            prefix: (*p).into(),
            handler: h.clone(),
        });
    }
    Routes { routes }
}

/// Opens `n` TCP connections to `port` on loopback from address `from`
/// that send nothing; returns those the server keeps open once it has
/// closed `closed` of them (or after 5 s, whatever it closed).
async fn silent_connections(
    from: [u8; 4],
    port: u16,
    n: usize,
    closed: usize,
) -> Vec<tokio::net::TcpStream> {
    let mut open = Vec::new();
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind((std::net::Ipv4Addr::from(from), 0).into())
            .unwrap();
        open.push(socket.connect(([127, 0, 0, 1], port).into()).await.unwrap());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut seen = 0;
    while seen < closed && std::time::Instant::now() < deadline {
        open.retain(|s| match s.try_read(&mut [0u8; 1]) {
            Ok(0) => {
                seen += 1;
                false
            }
            _ => true, // nothing to read: held open
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    open
}

#[test]
fn a_site_answers_curl() {
    let dir = TempDir::new("www-site");
    let rt = runtime();
    rt.block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        c.fs_mkdir(REALM, "", "/site", 0o755).await.unwrap();
        c.fs_mkdir(REALM, "", "/site/docs", 0o755).await.unwrap();
        put(&mut c, "/site/index.html", b"<h1>home</h1>").await;
        put(&mut c, "/site/docs/index.html", b"<h1>docs</h1>").await;
        put(&mut c, "/site/style.css", b"body{}").await;
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        put(&mut c, "/site/big.bin", &big).await;
        put(&mut c, "/secret.txt", b"not the site's").await;
        let page = "function main(req) { const r = JSON.parse(req); \
                    return '<p>' + r.method + ' ' + r.path + '?' + r.query + '</p>'; }";
        c.procedure_install(REALM, "page", "js", page.into(), ProcedureLimits::default())
            .await
            .unwrap();
        let boom = "function main(req) { throw new Error('no page today'); }";
        c.procedure_install(REALM, "boom", "js", boom.into(), ProcedureLimits::default())
            .await
            .unwrap();
        let dynamic = Handler::Procedure {
            name: "page".into(),
        };
        let failing = Handler::Procedure {
            name: "boom".into(),
        };
        service::create(
            &client,
            REALM,
            "t",
            &routes(&[("/dyn", dynamic.clone()), ("/boom", failing)]),
        )
        .await
        .unwrap();
        let (mut site, port, base) = serve_site(&client, "t", 2, 3).await;
        let url = move |p: &str| format!("{base}{p}");
        until_answers(&url("/")).await;
        // wwd's credential reaches its three mailboxes and nothing more
        // (the node enforces a scope: crates/node/tests/auth.rs).
        let wwd = site.wwd().unwrap().to_string();
        let scope = c
            .clone()
            .sql(
                "SELECT scope FROM credential WHERE realm = $1 AND pid = $2 AND revoked_us IS NULL",
                vec![
                    tabos_client::Value::Text(REALM.into()),
                    tabos_client::Value::Text(wwd.clone()),
                ],
            )
            .await
            .unwrap();
        assert_eq!(
            scope.rows,
            [[Some(tabos_client::Value::Text(format!(
                "send:www-t-load send:www-t-requests recv:proc/{wwd}"
            )))]],
            "wwd's credential is scoped to its mailboxes"
        );
        let get = |args: Vec<String>| {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            curl(&a)
        };
        let checks = {
            let url = url.clone();
            tokio::task::spawn_blocking(move || {
                let (s, t, b) = get(vec![url("/")]);
                assert_eq!(
                    (s, t.as_str(), b.as_slice()),
                    (200, "text/html; charset=utf-8", &b"<h1>home</h1>"[..])
                );
                assert_eq!(get(vec![url("/docs/")]).2, b"<h1>docs</h1>");
                let (s, t, _) = get(vec![url("/style.css")]);
                assert_eq!((s, t.as_str()), (200, "text/css; charset=utf-8"));
                let (s, _, b) = get(vec![url("/big.bin")]);
                assert_eq!(s, 200);
                assert!(
                    b == big,
                    "the big file came back different ({} bytes)",
                    b.len()
                );
                let (s, _, b) = get(vec!["-I".into(), url("/style.css")]);
                assert_eq!(s, 200);
                assert!(!String::from_utf8_lossy(&b).contains("body{}"));
                assert_eq!(get(vec![url("/nope.html")]).0, 404);
                assert_eq!(
                    get(vec!["--path-as-is".into(), url("/../secret.txt")]).0,
                    400
                );
                assert_eq!(get(vec![url("/%2e%2e/secret.txt")]).0, 400);
                assert_eq!(
                    get(vec!["-X".into(), "POST".into(), url("/style.css")]).0,
                    405
                );
                let (s, _, b) = get(vec![url("/dyn/x?a=1")]);
                assert_eq!((s, b.as_slice()), (200, &b"<p>GET /dyn/x?a=1</p>"[..]));
            })
        };
        checks.await.unwrap();

        // Pages asked at once are taken together and their procedure
        // calls made in one batch: each answer is its own request's, and
        // a call that fails fails its page alone.
        let asked: Vec<_> = (0..256)
            .map(|i| {
                tokio::task::spawn_blocking(move || {
                    let path = if i % 8 == 0 {
                        format!("/boom/{i}")
                    } else {
                        format!("/dyn/p{i}")
                    };
                    (i, http_get(port, &path))
                })
            })
            .collect();
        for a in asked {
            let (i, (status, text)) = a.await.unwrap();
            if i % 8 == 0 {
                assert_eq!(status, 500, "{text}");
                assert!(text.contains("the page failed"), "{text}");
                assert!(text.contains("no page today"), "{text}");
            } else {
                assert_eq!(status, 200, "{text}");
                assert!(text.contains(&format!("<p>GET /dyn/p{i}?</p>")), "{text}");
            }
        }

        // One address's idle connections fill every slot (issue 36, item
        // 2): a newcomer from another address is still served, the
        // flooder's oldest closed to make room.
        let flood =
            silent_connections([127, 0, 0, 2], port, tabos_www::wwd::CONNECTIONS_MAX, 0).await;
        assert_eq!(flood.len(), tabos_www::wwd::CONNECTIONS_MAX, "all held");
        let u = url("/");
        assert_eq!(
            tokio::task::spawn_blocking(move || curl(&[&u]))
                .await
                .unwrap()
                .0,
            200,
            "another address is served"
        );
        let closed = flood
            .iter()
            .filter(|s| matches!(s.try_read(&mut [0u8; 1]), Ok(0)))
            .count();
        assert!(closed >= 1, "room was made from the flood");
        drop(flood);

        // Routes change while it runs: a missing procedure is a 404.
        let gone = Handler::Procedure {
            name: "nope".into(),
        };
        service::create(
            &client,
            REALM,
            "t",
            &routes(&[("/dyn", dynamic), ("/x", gone)]),
        )
        .await
        .unwrap();
        let u = url("/x/1");
        let mut seen = 0;
        for _ in 0..200 {
            let u = u.clone();
            let (s, _, b) = tokio::task::spawn_blocking(move || curl(&[&u]))
                .await
                .unwrap();
            if s == 404 && String::from_utf8_lossy(&b).contains("no procedure nope") {
                seen += 1;
                if seen == 4 {
                    break; // both workers have the new routes
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(seen, 4, "the new route was never served");

        // A worker SIGKILLed: the site serves on (the other), and its pool
        // starts another.
        let before = until_workers(&site, 2, "at first").await;
        let victim = before[0].clone();
        assert!(kill_proc(&victim) > 0);
        for _ in 0..5 {
            let u = url("/");
            assert_eq!(
                tokio::task::spawn_blocking(move || curl(&[&u]))
                    .await
                    .unwrap()
                    .0,
                200
            );
        }
        let mut after = Vec::new();
        for _ in 0..600 {
            after = site.workers().await.unwrap();
            if after.len() == 2 && !after.contains(&victim) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            after.len() == 2 && !after.contains(&victim),
            "not replaced: {after:?}"
        );

        // Under load the pool grows to its maximum (three): 400 requests,
        // up to 200 at once.
        let u = url("/dyn/load");
        let load = tokio::task::spawn_blocking(move || {
            let mut args = vec!["-s", "-Z", "--parallel-max", "200", "-o", "/dev/null"];
            let urls = vec![u.as_str(); 400];
            args.extend(urls);
            Command::new("curl").args(&args).status().unwrap()
        });
        let mut grew = false;
        for _ in 0..600 {
            if site.workers().await.unwrap().len() == 3 {
                grew = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(load.await.unwrap().success());
        assert!(grew, "the pool never grew under load");
        // Idle, it shrinks back (one worker per SHRINK_AFTER) to its
        // minimum of two.
        until_workers(&site, 2, "after the load").await;

        // Bad input to the site's creation changes nothing.
        let bad = Routes {
            routes: vec![Route {
                prefix: "nope".into(),
                handler: Handler::Static { root: "/".into() },
            }],
        };
        assert!(service::create(&client, REALM, "t", &bad).await.is_err());
        assert!(service::create(&client, REALM, "a/b", &routes(&[]))
            .await
            .is_err());
        site.stop().await;
        drop((c, client));
        node.stop().await.unwrap();
    });
}

/// A worker that dies holding requests it took from the site's request
/// mailbox (stopped with SIGSTOP while they came, then SIGKILLed): the
/// supervisor tells wwd the worker is gone, wwd asks again, and the other
/// worker answers every one — none waits out `ANSWER_WAIT` for a 504.
#[test]
fn requests_a_dead_worker_held_are_asked_again() {
    let dir = TempDir::new("www-ask-again");
    let rt = runtime();
    rt.block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        c.fs_mkdir(REALM, "", "/site", 0o755).await.unwrap();
        put(&mut c, "/site/index.html", b"<h1>home</h1>").await;
        // A page from a procedure: never a kept answer, always a worker's.
        let page = "function main(req) { return '<p>' + JSON.parse(req).path + '</p>'; }";
        c.procedure_install(REALM, "page", "js", page.into(), ProcedureLimits::default())
            .await
            .unwrap();
        let dynamic = Handler::Procedure {
            name: "page".into(),
        };
        service::create(&client, REALM, "t", &routes(&[("/dyn", dynamic)]))
            .await
            .unwrap();
        let (mut site, _port, base) = serve_site(&client, "t", 2, 2).await;
        until_answers(&format!("{base}/dyn/up")).await;
        let workers = until_workers(&site, 2, "at first").await;
        let victim = workers[0].clone();
        let stopped = tabos_store::testing::os_pids_of_proc(&victim);
        assert!(!stopped.is_empty());
        for p in &stopped {
            let stop = Command::new("kill")
                .args(["-STOP", &p.to_string()])
                .status();
            assert!(stop.unwrap().success());
        }
        let asks: Vec<_> = (0..8)
            .map(|i| {
                let u = format!("{base}/dyn/{i}");
                tokio::task::spawn_blocking(move || curl(&[&u]))
            })
            .collect();
        // The stopped worker takes its turn of them (the node hands each
        // request to the receiver waiting longest) and answers none.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let answered = asks.iter().filter(|a| a.is_finished()).count();
        assert!(answered < asks.len(), "the stopped worker took no request");
        assert!(kill_proc(&victim) > 0);
        for (i, a) in asks.into_iter().enumerate() {
            let (status, _, body) = a.await.unwrap();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            assert_eq!(body, format!("<p>/dyn/{i}</p>").into_bytes());
        }
        site.stop().await;
        drop((c, client));
        node.stop().await.unwrap();
    });
}

/// curl's status, headers (names lowercased) and body for `args`.
fn curl_full(args: &[&str]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "120"])
        .args(args)
        .output()
        .expect("curl (.ci/run installs it)");
    let text = out.stdout;
    let split = text
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "no headers from curl {args:?}: {:?}",
                String::from_utf8_lossy(&text)
            )
        });
    let head = String::from_utf8_lossy(&text[..split]).to_string();
    let body = text[split + 4..].to_vec();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The bytes of the big file at `at`: a pattern no window boundary lines
/// up with.
fn big_byte(at: u64) -> u8 {
    (at.wrapping_mul(7919) % 251) as u8
}

/// Issue 40, item 2: wwd keeps whole static answers and answers a plain
/// GET again from memory (`x-tabos-cache: hit`), while the site tells it
/// of the realm's file changes: a file rewritten, a directory above a
/// kept file renamed, a file removed and the site's routes changed are
/// each answered anew within the bound below — without the site's notes
/// the kept answers would be served for as long as it runs.
#[test]
fn kept_answers_follow_the_files_they_were_read_from() {
    const BOUND: Duration = Duration::from_secs(30);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = TempDir::new("www-kept");
    rt.block_on(async {
        let node = start(&dir).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        for d in ["/site", "/site/d", "/site2"] {
            c.fs_mkdir(REALM, "", d, 0o755).await.unwrap();
        }
        put(&mut c, "/site/a.txt", b"v1").await;
        put(&mut c, "/site/d/b.txt", b"b1").await;
        put(&mut c, "/site/c.txt", b"c1").await;
        put(&mut c, "/site2/c.txt", b"c2").await;
        service::create(&client, REALM, "kept", &routes(&[]))
            .await
            .unwrap();
        let (mut site, _port, base) = serve_site(&client, "kept", 1, 1).await;
        until_answers(&format!("{base}/a.txt")).await;
        // Polls `url` until its status and body are `want` and, with
        // `hit`, it came from what wwd keeps.
        let seen = |url: String,
                    want: (u16, Option<&'static [u8]>),
                    hit: bool,
                    what: &'static str| async move {
            let end = std::time::Instant::now() + BOUND;
            loop {
                let u = url.clone();
                let (status, headers, body) = tokio::task::spawn_blocking(move || curl_full(&[&u]))
                    .await
                    .unwrap();
                let kept = header(&headers, "x-tabos-cache") == Some("hit");
                let matches = status == want.0 && want.1.is_none_or(|b| b == body.as_slice());
                if matches && (kept || !hit) {
                    return;
                }
                assert!(
                    std::time::Instant::now() < end,
                    "{what}: not seen within {BOUND:?} (last: {status} {:?}, kept {kept})",
                    String::from_utf8_lossy(&body)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        for (u, b) in [
            ("/a.txt", &b"v1"[..]),
            ("/d/b.txt", b"b1"),
            ("/c.txt", b"c1"),
        ] {
            seen(format!("{base}{u}"), (200, Some(b)), true, "kept").await;
        }
        // Rewritten by another client.
        c.fs_write(REALM, "", "/site/a.txt", 0, b"v2".to_vec(), false)
            .await
            .unwrap();
        seen(
            format!("{base}/a.txt"),
            (200, Some(b"v2")),
            false,
            "a.txt rewritten",
        )
        .await;
        seen(
            format!("{base}/a.txt"),
            (200, Some(b"v2")),
            true,
            "a.txt kept anew",
        )
        .await;
        // A directory above a kept file renamed.
        c.fs_rename(REALM, "", "/site/d", "/site/e").await.unwrap();
        seen(format!("{base}/d/b.txt"), (404, None), false, "d renamed").await;
        // Removed.
        c.fs_unlink(REALM, "", "/site/a.txt").await.unwrap();
        seen(format!("{base}/a.txt"), (404, None), false, "a.txt removed").await;
        // The routes changed: / now serves /site2.
        let mut r = routes(&[]);
        r.routes[0].handler = Handler::Static {
            root: "/site2".into(),
        };
        service::create(&client, REALM, "kept", &r).await.unwrap();
        seen(
            format!("{base}/c.txt"),
            (200, Some(b"c2")),
            false,
            "routes changed",
        )
        .await;
        site.stop().await;
    });
}

/// Issue 39, item 2: HTTP as browsers and caches expect it, asked with
/// curl — validators and 304, single and multiple ranges (206, 416,
/// If-Range), Content-Length on HEAD, gzip when accepted, and a file far
/// larger than any message streamed whole (compared by sha256), cut off
/// when it changes while sent. `TABOS_WWW_BIG_MIB` sets the big file's
/// size (1024 by default; CI sets it smaller).
#[test]
fn http_as_browsers_and_caches_expect() {
    let big_mib: u64 = std::env::var("TABOS_WWW_BIG_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    assert!(
        big_mib > 64,
        "the big file must be larger than the old 64 MiB limit"
    );
    let big_len = big_mib << 20;
    let dir = TempDir::new("www-http");
    let rt = runtime();
    rt.block_on(async {
        let node = start_with_blocks(&dir, (big_len + (256 << 20)) as _).await;
        let client = node.client().await.unwrap();
        let mut c = client.clone();
        c.fs_mkdir(REALM, "", "/site", 0o755).await.unwrap();
        let page: Vec<u8> = (0..2_000)
            .flat_map(|i| format!("<p>line {i} of a page</p>\n").into_bytes())
            .collect();
        put(&mut c, "/site/page.html", &page).await;
        // The big file, written a MiB at a time; its sha256 from the same
        // bytes, by sha256sum.
        let mut sum = Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut sum_in = sum.stdin.take().unwrap();
        c.fs_create(REALM, "", "/site/big.bin", 0o644)
            .await
            .unwrap();
        for mib in 0..big_mib {
            let chunk: Vec<u8> = (0..1u64 << 20).map(|i| big_byte((mib << 20) + i)).collect();
            std::io::Write::write_all(&mut sum_in, &chunk).unwrap();
            c.fs_write(REALM, "", "/site/big.bin", (mib << 20) as i64, chunk, false)
                .await
                .unwrap();
        }
        drop(sum_in);
        let sum = String::from_utf8(sum.wait_with_output().unwrap().stdout).unwrap();
        let expected_sum = sum.split_whitespace().next().unwrap().to_string();

        service::create(&client, REALM, "h", &routes(&[]))
            .await
            .unwrap();
        let (mut site, _, base) = serve_site(&client, "h", 2, 2).await;
        let url = move |p: &str| format!("{base}{p}");
        until_answers(&url("/page.html")).await;
        let checks = {
            let (url, page) = (url.clone(), page.clone());
            tokio::task::spawn_blocking(move || {
                let p = url("/page.html");
                let (s, h, b) = curl_full(&[&p]);
                assert_eq!((s, b.as_slice()), (200, page.as_slice()));
                let etag = header(&h, "etag").expect("an ETag").to_string();
                let modified = header(&h, "last-modified")
                    .expect("a Last-Modified")
                    .to_string();
                assert_eq!(header(&h, "accept-ranges"), Some("bytes"));
                assert_eq!(
                    header(&h, "content-length"),
                    Some(page.len().to_string().as_str())
                );
                // Conditional requests.
                let inm = format!("If-None-Match: {etag}");
                let (s, h, b) = curl_full(&["-H", &inm, &p]);
                assert_eq!((s, b.len()), (304, 0));
                assert_eq!(header(&h, "etag"), Some(etag.as_str()));
                let ims = format!("If-Modified-Since: {modified}");
                assert_eq!(curl_full(&["-H", &ims, &p]).0, 304);
                let (s, _, b) = curl_full(&["-H", "If-None-Match: \"other\"", "-H", &ims, &p]);
                assert_eq!(
                    (s, b.len()),
                    (200, page.len()),
                    "If-None-Match wins over the date"
                );
                assert_eq!(
                    curl_full(&["-H", "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT", &p]).0,
                    200
                );
                // Ranges.
                let (s, h, b) = curl_full(&["-r", "0-9", &p]);
                assert_eq!((s, b.as_slice()), (206, &page[..10]));
                let range = format!("bytes 0-9/{}", page.len());
                assert_eq!(header(&h, "content-range"), Some(range.as_str()));
                let (s, _, b) = curl_full(&["-H", "Range: bytes=-5", &p]);
                assert_eq!((s, b.as_slice()), (206, &page[page.len() - 5..]));
                let (s, h, b) = curl_full(&["-r", "0-0,5-6", &p]);
                assert_eq!(s, 206);
                let ctype = header(&h, "content-type").unwrap();
                assert!(
                    ctype.starts_with("multipart/byteranges; boundary="),
                    "{ctype}"
                );
                let text = String::from_utf8_lossy(&b);
                let total = page.len();
                assert!(
                    text.contains(&format!("content-range: bytes 0-0/{total}")),
                    "{text}"
                );
                assert!(
                    text.contains(&format!("content-range: bytes 5-6/{total}")),
                    "{text}"
                );
                let past = format!("{}-", page.len());
                let (s, h, _) = curl_full(&["-r", &past, &p]);
                assert_eq!(s, 416);
                let unsat = format!("bytes */{}", page.len());
                assert_eq!(header(&h, "content-range"), Some(unsat.as_str()));
                let (s, _, b) = curl_full(&["-r", "0-9", "-H", "If-Range: \"stale\"", &p]);
                assert_eq!(
                    (s, b.len()),
                    (200, page.len()),
                    "a stale If-Range gets the whole"
                );
                let if_range = format!("If-Range: {etag}");
                assert_eq!(curl_full(&["-r", "0-9", "-H", &if_range, &p]).0, 206);
                // HEAD says what GET would send.
                let (s, h, b) = curl_full(&["-I", &p]);
                assert_eq!((s, b.len()), (200, 0));
                assert_eq!(
                    header(&h, "content-length"),
                    Some(page.len().to_string().as_str())
                );
                // gzip, when the client accepts it: smaller, the same once
                // decoded, and a weak tag.
                let (s, h, b) = curl_full(&["--compressed", &p]);
                assert_eq!((s, b.as_slice()), (200, page.as_slice()));
                assert_eq!(header(&h, "content-encoding"), Some("gzip"));
                let zipped: usize = header(&h, "content-length").unwrap().parse().unwrap();
                assert!(zipped < page.len() / 4, "{zipped} of {}", page.len());
                assert!(header(&h, "etag").unwrap().starts_with("W/"));
                assert_eq!(header(&h, "vary"), Some("accept-encoding"));
            })
        };
        checks.await.unwrap();

        // The big file: streamed whole (its sha256), a range across
        // windows, HEAD's length.
        let big = url("/big.bin");
        let (got_sum, head, middle) = {
            let big = big.clone();
            tokio::task::spawn_blocking(move || {
                let o = Command::new("sh")
                    .arg("-c")
                    .arg(format!("curl -sf --max-time 600 '{big}' | sha256sum"))
                    .output()
                    .unwrap();
                let got = String::from_utf8(o.stdout).unwrap();
                let head = curl_full(&["-I", &big]);
                let middle = curl_full(&["-r", "4194000-8389000", &big]);
                (
                    got.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                    head,
                    middle,
                )
            })
            .await
            .unwrap()
        };
        assert_eq!(got_sum, expected_sum, "the big file came back different");
        assert_eq!(
            header(&head.1, "content-length"),
            Some(big_len.to_string().as_str())
        );
        assert_eq!(middle.0, 206);
        assert!(
            middle.2.len() == 8389000 - 4194000 + 1
                && middle
                    .2
                    .iter()
                    .enumerate()
                    .all(|(i, b)| *b == big_byte(4194000 + i as u64)),
            "a range across windows came back different"
        );
        // Changed while being sent to a slow client: cut off, not mixed.
        let slow = {
            let big = big.clone();
            tokio::task::spawn_blocking(move || {
                Command::new("curl")
                    .args([
                        "-s",
                        "--limit-rate",
                        "4M",
                        "--max-time",
                        "120",
                        "-o",
                        "/dev/null",
                        &big,
                    ])
                    .status()
                    .unwrap()
            })
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        c.fs_write(REALM, "", "/site/big.bin", 0, b"changed".to_vec(), false)
            .await
            .unwrap();
        let status = slow.await.unwrap();
        assert!(
            !status.success(),
            "a file changed while sent came whole: {status:?}"
        );
        site.stop().await;

        // HTTPS: plain HTTP beyond loopback is refused; with a
        // certificate (openssl's, self-signed) curl verifies and is served.
        let refused = Site::start(&client, REALM, "h", program(), "0.0.0.0:0", None, 1, 1)
            .await
            .err()
            .expect("plain HTTP beyond loopback was accepted");
        assert!(refused.to_string().contains("--tls-cert"), "{refused}");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let o = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            tabos_www::wire::TlsMaterial::from_files(&key, &key).is_err(),
            "a key is no certificate"
        );
        let tls = tabos_www::wire::TlsMaterial::from_files(&cert, &key).unwrap();
        let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut secure = Site::start(
            &client,
            REALM,
            "h",
            program(),
            &format!("127.0.0.1:{tls_port}"),
            Some(tls),
            1,
            1,
        )
        .await
        .unwrap();
        let https = format!("https://127.0.0.1:{tls_port}/page.html");
        let ca = cert.display().to_string();
        let mut served = None;
        for _ in 0..200 {
            let (https, ca) = (https.clone(), ca.clone());
            let got = tokio::task::spawn_blocking(move || curl(&["--cacert", &ca, &https]))
                .await
                .unwrap();
            if got.0 == 200 {
                served = Some(got.2);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            served.as_deref(),
            Some(page.as_slice()),
            "HTTPS never served the page"
        );
        let plain = format!("http://127.0.0.1:{tls_port}/page.html");
        let (s, _, _) = tokio::task::spawn_blocking(move || curl(&[&plain]))
            .await
            .unwrap();
        assert_ne!(s, 200, "plain HTTP on the HTTPS port was served");
        secure.stop().await;
        drop((c, client));
        node.stop().await.unwrap();
    });
}
