//! A worker proc (BE): takes requests from the site's request mailbox —
//! each delivered to exactly one of the pool's workers — and answers each
//! to the wwd that sent it: a static file read from tabos fs (its path
//! mapped under the route's root, never outside it), or the page a stored
//! procedure returns — the pages among the requests it took at once made
//! by one batch of independent procedure calls ([`answer_pages`]). It
//! reads the routes when it starts and again when they change (a watch on
//! the site's directory).

use std::sync::{Arc, RwLock};

use tabos_client::batch::BATCH_CALLS_MAX;
use tabos_client::names::WatchMode;
use tabos_client::proto;
use tabos_client::Client;

use crate::http::{self, Ranges, Validators};
use crate::route::{self, Handler, Routes};
use crate::wire::{self, Request, ResponseHead, Window, WHOLE_BYTES_MAX, WINDOW_BYTES};
use crate::{Ctx, Result, FS_USER};

/// Requests one worker takes at once (answered concurrently).
pub const TAKE_MAX: u32 = 32;
/// Bytes read from tabos fs per call.
const READ_BYTES: usize = 4 << 20;
const _: () = assert!(
    WINDOW_BYTES as usize <= READ_BYTES * 4,
    "a window is a few reads"
);

/// Runs a worker of site `site` until its wwd exits (or its mailbox or
/// node goes away).
pub async fn run(ctx: Ctx, wwd: &str) -> Result<()> {
    {
        // It works for one wwd: when that one is gone, so is it.
        let (mut c, realm, wwd) = (ctx.client.clone(), ctx.realm.clone(), wwd.to_string());
        tokio::spawn(async move {
            if c.wait_exit(&realm, &wwd).await.is_ok() {
                eprintln!("worker: wwd {wwd} exited; leaving");
                std::process::exit(0);
            }
        });
    }
    let routes = Arc::new(RwLock::new(read_routes(&ctx).await?));
    {
        // Routes follow their changes.
        let (mut c, realm, layout) = (ctx.client.clone(), ctx.realm.clone(), ctx.layout.clone());
        let routes = routes.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(mut s) = c.watch(&realm, &layout.root(), WatchMode::Dir).await {
                    while let Ok(Some(_)) = s.message().await {
                        if let Ok(e) = c.name_get(&realm, &layout.routes()).await {
                            if let Ok(r) = Routes::from_json(&e.data) {
                                *routes.write().unwrap_or_else(|e| e.into_inner()) = r;
                            }
                        }
                    }
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
    }
    let mut c = ctx.client.clone();
    let out = wire::Batcher::start(&ctx.client, &ctx.realm, "");
    let mut stream = c
        .recv_stream(&ctx.realm, &ctx.layout.requests(), TAKE_MAX)
        .await?;
    while let Some(batch) = stream.message().await? {
        let mut answers = Vec::new();
        let mut pages = Vec::new();
        for m in batch.messages {
            if let Some(p) = as_page(&routes, &m) {
                pages.push(p);
                continue;
            }
            let (c, realm, routes, out) = (
                ctx.client.clone(),
                ctx.realm.clone(),
                routes.clone(),
                out.clone(),
            );
            answers.push(tokio::spawn(async move {
                answer(c, &realm, &routes, &out, m).await;
            }));
        }
        if !pages.is_empty() {
            let (c, realm, out) = (ctx.client.clone(), ctx.realm.clone(), out.clone());
            answers.push(tokio::spawn(async move {
                answer_pages(c, &realm, &out, pages).await;
            }));
        }
        for a in answers {
            let _ = a.await;
        }
    }
    Ok(())
}

/// A request taken that a stored procedure answers.
struct Page {
    /// The wwd's mailbox the answer goes to.
    to: String,
    req: Request,
    procedure: String,
}

/// The wwd mailbox that sent `m`, as the kernel recorded it.
fn sender(m: &proto::Message) -> String {
    if m.sender.starts_with("proc/") {
        m.sender.clone()
    } else {
        format!("proc/{}", m.sender)
    }
}

/// `m` as a page request, if a procedure answers it (anything else, a
/// message that does not decode included, is answered alone).
fn as_page(routes: &RwLock<Routes>, m: &proto::Message) -> Option<Page> {
    let (req, _body) = wire::decode::<Request>(&m.payload).ok()?;
    if req.window.is_some() {
        return None;
    }
    let procedure = {
        let routes = routes.read().unwrap_or_else(|e| e.into_inner());
        match &routes.find(&req.path)?.0.handler {
            Handler::Procedure { name } => name.clone(),
            Handler::Static { .. } => return None,
        }
    };
    Some(Page {
        to: sender(m),
        req,
        procedure,
    })
}

/// Answers the pages taken together: their procedure calls go in batches
/// of independent calls — one round trip and a shared group commit for
/// up to [`BATCH_CALLS_MAX`] pages, each call still its own transaction,
/// failing alone — and their answers in one send.
async fn answer_pages(mut c: Client, realm: &str, out: &wire::Batcher, pages: Vec<Page>) {
    use tabos_client::proto::batch_call::Call;
    use tabos_client::proto::batch_result::Result as Out;
    for chunk in pages.chunks(BATCH_CALLS_MAX) {
        let calls = chunk
            .iter()
            .map(|p| {
                Call::ProcedureCall(proto::CallProcedureRequest {
                    realm: realm.into(),
                    name: p.procedure.clone(),
                    args: serde_json::to_vec(&p.req).expect("a request serializes"),
                })
            })
            .collect();
        let results: Vec<std::result::Result<proto::CallProcedureResponse, Option<String>>> =
            match c.batch_independent(calls).await {
                Ok(rs) => rs
                    .into_iter()
                    .map(|r| match r {
                        Ok(Out::ProcedureCall(o)) => Ok(o),
                        Ok(_) => Err(Some("the node answered another call".into())),
                        Err(e) => Err(not_found_or(&e)),
                    })
                    .collect(),
                Err(e) => chunk.iter().map(|_| Err(Some(e.to_string()))).collect(),
            };
        let msgs = chunk
            .iter()
            .zip(results)
            .flat_map(|(p, r)| {
                page(p.req.id, &p.procedure, r)
                    .into_iter()
                    .map(|payload| proto::Outgoing {
                        to: p.to.clone(),
                        payload,
                        message_id: String::new(),
                    })
            })
            .collect();
        if let Err(e) = out.send_all(msgs).await {
            eprintln!("worker: cannot answer {} pages: {e}", chunk.len());
        }
    }
}

/// A failed procedure call as [`page`] takes it: `None` when there is no
/// such procedure, else why it failed.
fn not_found_or(e: &tabos_client::Error) -> Option<String> {
    (e.code() != Some(tonic::Code::NotFound)).then(|| e.to_string())
}

/// The messages of a page's answer: the procedure's result, or why not
/// (`Err(None)`: no such procedure; `Err(Some(why))`: the call failed).
fn page(
    id: u64,
    name: &str,
    r: std::result::Result<proto::CallProcedureResponse, Option<String>>,
) -> Vec<Vec<u8>> {
    match r {
        Ok(out) if out.result.len() > WHOLE_BYTES_MAX => {
            text(id, 502, "the page is larger than this server sends")
        }
        Ok(out) => wire::response(
            &ResponseHead::new(id, 200, "text/html; charset=utf-8"),
            &out.result,
            None,
        ),
        Err(None) => text(id, 404, &format!("no procedure {name}")),
        Err(Some(why)) => text(id, 500, &format!("the page failed: {why}")),
    }
}

async fn read_routes(ctx: &Ctx) -> Result<Routes> {
    let e = ctx
        .client
        .clone()
        .name_get(&ctx.realm, &ctx.layout.routes())
        .await?;
    Routes::from_json(&e.data)
}

/// Answers one request message to its sender.
async fn answer(
    mut c: Client,
    realm: &str,
    routes: &RwLock<Routes>,
    out: &wire::Batcher,
    m: proto::Message,
) {
    // The sender as the kernel recorded it: the wwd's own mailbox.
    let to = sender(&m);
    let msgs = match wire::decode::<Request>(&m.payload) {
        Ok((req, _body)) => {
            let routes = routes.read().unwrap_or_else(|e| e.into_inner()).clone();
            match &req.window {
                Some(w) => window(&mut c, realm, &routes, req.id, w).await,
                None => respond(&mut c, realm, &routes, &req).await,
            }
        }
        // Not ours to answer: no id to answer it with.
        Err(e) => {
            eprintln!("worker: a bad request message from {}: {e}", m.sender);
            return;
        }
    };
    let msgs = msgs
        .into_iter()
        .map(|payload| proto::Outgoing {
            to: to.clone(),
            payload,
            message_id: String::new(),
        })
        .collect();
    // Queued one after another: the parts arrive in order.
    if let Err(e) = out.send_all(msgs).await {
        eprintln!("worker: cannot answer {to}: {e}");
    }
}

/// A short text answer.
fn text(id: u64, status: u16, msg: &str) -> Vec<Vec<u8>> {
    wire::response(
        &ResponseHead::new(id, status, "text/plain; charset=utf-8"),
        format!("{msg}\n").as_bytes(),
        None,
    )
}

/// The messages that answer `req`.
async fn respond(c: &mut Client, realm: &str, routes: &Routes, req: &Request) -> Vec<Vec<u8>> {
    let Some((r, rest)) = routes.find(&req.path) else {
        return text(req.id, 404, "no route");
    };
    match &r.handler {
        Handler::Static { root } => static_file(c, realm, root, rest, req).await,
        Handler::Procedure { name } => {
            let args = serde_json::to_vec(req).expect("a request serializes");
            let r = c
                .procedure_call(realm, name, args)
                .await
                .map_err(|e| not_found_or(&e));
            page(req.id, name, r)
        }
    }
}

/// The file `rest` under `root` (a directory's `index.html`) and its
/// status, or the HTTP status and message that say why not.
async fn resolve(
    c: &mut Client,
    realm: &str,
    root: &str,
    rest: &str,
) -> std::result::Result<(String, proto::FsStat), (u16, String)> {
    let Some(mut path) = route::under(root, rest) else {
        return Err((400, "a path that leaves the site".into()));
    };
    let mut st = c.fs_stat(realm, &path).await.map_err(|e| fs_error(&e))?;
    if st.r#type() == proto::FileType::Dir {
        path = format!("{}/index.html", path.trim_end_matches('/'));
        st = c.fs_stat(realm, &path).await.map_err(|e| fs_error(&e))?;
    }
    Ok((path, st))
}

/// A static file as nginx answers it: 304 when the client's copy is
/// current, 206 for ranges (416 for none within it), gzip for text the
/// client accepts it for, and otherwise the file, streamed a window at a
/// time; HEAD the same without the body.
async fn static_file(
    c: &mut Client,
    realm: &str,
    root: &str,
    rest: &str,
    req: &Request,
) -> Vec<Vec<u8>> {
    let id = req.id;
    let head_only = req.method == "HEAD";
    if req.method != "GET" && !head_only {
        let mut head = ResponseHead::new(id, 405, "text/plain; charset=utf-8");
        head.headers.push(("allow".into(), "GET, HEAD".into()));
        return wire::response(&head, b"static files answer GET and HEAD\n", None);
    }
    let (path, st) = match resolve(c, realm, root, rest).await {
        Ok(x) => x,
        Err((status, msg)) => return text(id, status, &msg),
    };
    let size = st.size.max(0) as u64;
    let v = Validators::new(st.mtime_us, size);
    let ctype = route::content_type(&path);
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let mut head = ResponseHead::new(id, 200, ctype);
    head.headers = vec![
        ("etag".into(), v.etag.clone()),
        ("last-modified".into(), v.last_modified()),
        ("accept-ranges".into(), "bytes".into()),
    ];
    let compressible = http::compressible(ctype);
    if compressible {
        head.headers.push(("vary".into(), "accept-encoding".into()));
    }
    if v.not_modified(header("if-none-match"), header("if-modified-since")) {
        head.status = 304;
        return wire::response(&head, b"", None);
    }
    let ranges = if v.range_applies(header("if-range")) {
        http::ranges(header("range"), size)
    } else {
        Ranges::Whole
    };
    let (from, to) = match ranges {
        Ranges::Unsatisfiable => {
            head.status = 416;
            head.content_type = "text/plain; charset=utf-8".into();
            head.headers
                .push(("content-range".into(), format!("bytes */{size}")));
            return wire::response(&head, b"", None);
        }
        Ranges::Parts(parts) if parts.len() == 1 => {
            let (a, b) = parts[0];
            head.status = 206;
            head.headers
                .push(("content-range".into(), format!("bytes {a}-{b}/{size}")));
            (a, b + 1)
        }
        Ranges::Parts(parts)
            if parts.iter().map(|(a, b)| b + 1 - a).sum::<u64>() <= WHOLE_BYTES_MAX as u64 / 2 =>
        {
            return byteranges(c, realm, &path, head, &parts, size, head_only).await;
        }
        // Several ranges of more than can be sent at once: the whole file.
        _ => {
            let gzip = compressible
                && !head_only
                && http::accepts_gzip(header("accept-encoding"))
                && (http::COMPRESS_BYTES_MIN..=http::COMPRESS_BYTES_MAX).contains(&size);
            // The whole file in one part: wwd may keep the answer.
            let tag = wire::CacheTag {
                path: path.clone(),
                id: st.id.clone(),
            };
            if size <= wire::PART_BYTES as u64 {
                head.cache = Some(tag);
            }
            if gzip {
                return match read(c, realm, &path, 0, size).await {
                    Ok(data) => gzipped(head, &v, &data),
                    Err((status, msg)) => text(id, status, &msg),
                };
            }
            (0, size)
        }
    };
    head.length = Some(to - from);
    if head_only {
        return wire::response(&head, b"", None);
    }
    let w = Window {
        path: req.path.clone(),
        from,
        to,
        etag: v.etag.clone(),
        part: 0,
    };
    send_window(c, realm, &path, head, &w).await
}

/// The next window of a streamed file (wwd asked for it): sent on if the
/// file is still what it was, else the response is broken off.
async fn window(c: &mut Client, realm: &str, routes: &Routes, id: u64, w: &Window) -> Vec<Vec<u8>> {
    let mut head = ResponseHead::new(id, 200, "");
    head.part = w.part;
    let broken = |mut head: ResponseHead| {
        head.broken = true;
        head.last = true;
        vec![wire::encode(&head, b"")]
    };
    let Some((
        route::Route {
            handler: Handler::Static { root },
            ..
        },
        rest,
    )) = routes.find(&w.path)
    else {
        return broken(head);
    };
    let Ok((path, st)) = resolve(c, realm, root, rest).await else {
        return broken(head);
    };
    let size = st.size.max(0) as u64;
    if Validators::new(st.mtime_us, size).etag != w.etag || w.from >= w.to || w.to > size {
        return broken(head);
    }
    send_window(c, realm, &path, head, w).await
}

/// The messages of window `w` of file `path` (at most [`WINDOW_BYTES`]),
/// numbered from `w.part`, the first saying where the next one begins.
async fn send_window(
    c: &mut Client,
    realm: &str,
    path: &str,
    mut head: ResponseHead,
    w: &Window,
) -> Vec<Vec<u8>> {
    let end = w.to.min(w.from.saturating_add(WINDOW_BYTES));
    head.part = w.part;
    let data = match read(c, realm, path, w.from, end).await {
        Ok(d) if d.len() as u64 == end - w.from => d,
        // Shorter than it was a moment ago, or unreadable: cut off.
        _ => {
            head.broken = true;
            head.last = true;
            return vec![wire::encode(&head, b"")];
        }
    };
    let more = (end < w.to).then(|| Window {
        path: w.path.clone(),
        from: end,
        to: w.to,
        etag: w.etag.clone(),
        part: w.part + data.len().div_ceil(wire::PART_BYTES).max(1) as u32,
    });
    wire::response(&head, &data, more)
}

/// Several ranges: one `multipart/byteranges` body, sent whole.
async fn byteranges(
    c: &mut Client,
    realm: &str,
    path: &str,
    mut head: ResponseHead,
    parts: &[(u64, u64)],
    size: u64,
    head_only: bool,
) -> Vec<Vec<u8>> {
    let boundary = format!("tabos-{:016x}", tabos_client::retry::random());
    let ctype = std::mem::replace(
        &mut head.content_type,
        format!("multipart/byteranges; boundary={boundary}"),
    );
    head.status = 206;
    let mut body = Vec::new();
    for (a, b) in parts {
        body.extend_from_slice(
            format!("\r\n--{boundary}\r\ncontent-type: {ctype}\r\ncontent-range: bytes {a}-{b}/{size}\r\n\r\n")
                .as_bytes(),
        );
        match read(c, realm, path, *a, b + 1).await {
            Ok(data) => body.extend_from_slice(&data),
            Err((status, msg)) => return text(head.id, status, &msg),
        }
    }
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    head.length = Some(body.len() as u64);
    if head_only {
        body.clear();
    }
    wire::response(&head, &body, None)
}

/// The file compressed with gzip, its tag made weak as nginx does.
fn gzipped(mut head: ResponseHead, v: &Validators, data: &[u8]) -> Vec<Vec<u8>> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let body = match gz.write_all(data).and_then(|()| gz.finish()) {
        Ok(b) => b,
        Err(e) => return text(head.id, 500, &format!("gzip: {e}")),
    };
    for (k, val) in head.headers.iter_mut() {
        if k == "etag" {
            *val = v.weak_etag();
        }
    }
    head.headers
        .push(("content-encoding".into(), "gzip".into()));
    head.length = Some(body.len() as u64);
    wire::response(&head, &body, None)
}

/// Bytes `[from, to)` of file `path`.
async fn read(
    c: &mut Client,
    realm: &str,
    path: &str,
    from: u64,
    to: u64,
) -> std::result::Result<Vec<u8>, (u16, String)> {
    let mut data = Vec::with_capacity((to - from) as usize);
    while (data.len() as u64) < to - from {
        let at = from + data.len() as u64;
        let n = (to - at).min(READ_BYTES as u64) as u32;
        match c.fs_read(realm, FS_USER, path, at as i64, n).await {
            Ok(b) if b.is_empty() => break,
            Ok(b) => data.extend_from_slice(&b),
            Err(e) => return Err(fs_error(&e)),
        }
    }
    Ok(data)
}

fn fs_error(e: &tabos_client::Error) -> (u16, String) {
    match e.code() {
        Some(tonic::Code::NotFound) => (404, "not found".into()),
        Some(tonic::Code::PermissionDenied) => (403, "forbidden".into()),
        Some(tonic::Code::InvalidArgument) => (400, "bad path".into()),
        _ => (502, format!("the file could not be read: {e}")),
    }
}
