//! The web server on a real node (in-process, embedded SQLite; wwd and
//! worker procs running the `tabos-www-task` binary), asked with the real
//! curl: static files from tabos fs (a directory's index.html, content
//! types, HEAD, a file larger than one message), a page from a stored
//! procedure, bad requests (a path leaving the site, a method static files
//! do not answer, a missing file or procedure), routes changed while it
//! runs, a worker SIGKILLed while the site serves on, the pool grown by
//! wwd's load reports and shrunk after, and wwd's credential scoped to its
//! mailboxes.

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
    let settings = NodeSettings {
        node_id: "n1".into(),
        logs: dir.path().join("logs"),
        cores: 8,
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.path().join("blocks.dev"),
            256 << 20,
        )),
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
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
        let dynamic = Handler::Procedure {
            name: "page".into(),
        };
        service::create(&client, REALM, "t", &routes(&[("/dyn", dynamic.clone())]))
            .await
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let base = format!("http://127.0.0.1:{port}");
        let program = Program {
            path: env!("CARGO_BIN_EXE_tabos-www-task").into(),
            args: Vec::new(),
        };
        let mut site = Site::start(
            &client,
            REALM,
            "t",
            program,
            &format!("127.0.0.1:{port}"),
            2,
            3,
        )
        .await
        .unwrap();
        let url = move |p: &str| format!("{base}{p}");
        // Bounded wait for wwd to listen.
        let mut up = false;
        for _ in 0..200 {
            let u = url("/");
            if tokio::task::spawn_blocking(move || curl(&[&u]))
                .await
                .unwrap()
                .0
                == 200
            {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(up, "wwd never answered");
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
        let until_workers = |n: usize, what: &'static str| {
            let site = &site;
            async move {
                for _ in 0..600 {
                    let w = site.workers().await.unwrap();
                    if w.len() == n {
                        return w;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                panic!("never {n} workers ({what})");
            }
        };
        let before = until_workers(2, "at first").await;
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
        until_workers(2, "after the load").await;

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
