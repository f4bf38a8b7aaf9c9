//! A worker proc (BE): takes requests from the site's request mailbox —
//! each delivered to exactly one of the pool's workers — and answers each
//! to the wwd that sent it: a static file read from tabos fs (its path
//! mapped under the route's root, never outside it), or the page a stored
//! procedure returns. It reads the routes when it starts and again when
//! they change (a watch on the site's directory).

use std::sync::{Arc, RwLock};

use tabos_client::names::WatchMode;
use tabos_client::proto;
use tabos_client::Client;

use crate::route::{self, Handler, Routes};
use crate::wire::{self, Request, RESPONSE_BYTES_MAX};
use crate::{Ctx, Result, FS_USER};

/// Requests one worker takes at once (answered concurrently).
pub const TAKE_MAX: u32 = 32;
/// Bytes read from tabos fs per call.
const READ_BYTES: usize = 4 << 20;

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
        for m in batch.messages {
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
        for a in answers {
            let _ = a.await;
        }
    }
    Ok(())
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
    let to = if m.sender.starts_with("proc/") {
        m.sender.clone()
    } else {
        format!("proc/{}", m.sender)
    };
    let msgs = match wire::decode::<Request>(&m.payload) {
        Ok((req, _body)) => {
            let routes = routes.read().unwrap_or_else(|e| e.into_inner()).clone();
            let (status, ctype, body) = handle(&mut c, realm, &routes, &req).await;
            wire::response(req.id, status, &ctype, &body)
        }
        // Not ours to answer: no id to answer it with.
        Err(e) => {
            eprintln!("worker: a bad request message from {}: {e}", m.sender);
            return;
        }
    };
    // Queued one after another: the parts arrive in order.
    for part in msgs {
        let msg = proto::Outgoing {
            to: to.clone(),
            payload: part,
            message_id: String::new(),
        };
        if let Err(e) = out.send(msg).await {
            eprintln!("worker: cannot answer {to}: {e}");
            return;
        }
    }
}

fn text(status: u16, msg: &str) -> (u16, String, Vec<u8>) {
    (
        status,
        "text/plain; charset=utf-8".into(),
        format!("{msg}\n").into_bytes(),
    )
}

/// The status, content type and body for `req`.
async fn handle(
    c: &mut Client,
    realm: &str,
    routes: &Routes,
    req: &Request,
) -> (u16, String, Vec<u8>) {
    let Some((r, rest)) = routes.find(&req.path) else {
        return text(404, "no route");
    };
    match &r.handler {
        Handler::Static { root } => {
            if req.method != "GET" && req.method != "HEAD" {
                return text(405, "static files answer GET and HEAD");
            }
            let Some(mut path) = route::under(root, rest) else {
                return text(400, "a path that leaves the site");
            };
            let st = match c.fs_stat(realm, &path).await {
                Ok(st) => st,
                Err(e) => return fs_error(&e),
            };
            let mut size = st.size;
            if st.r#type() == proto::FileType::Dir {
                path = format!("{}/index.html", path.trim_end_matches('/'));
                match c.fs_stat(realm, &path).await {
                    Ok(st) => size = st.size,
                    Err(e) => return fs_error(&e),
                }
            }
            if size as usize > RESPONSE_BYTES_MAX {
                return text(413, "the file is larger than this server sends");
            }
            let mut body = Vec::with_capacity(size as usize);
            while body.len() < size as usize {
                match c
                    .fs_read(realm, FS_USER, &path, body.len() as i64, READ_BYTES as u32)
                    .await
                {
                    Ok(b) if b.is_empty() => break,
                    Ok(b) => body.extend_from_slice(&b),
                    Err(e) => return fs_error(&e),
                }
            }
            if req.method == "HEAD" {
                body.clear();
            }
            (200, route::content_type(&path).into(), body)
        }
        Handler::Procedure { name } => {
            let args = serde_json::to_vec(req).expect("a request serializes");
            match c.procedure_call(realm, name, args).await {
                Ok(out) => (200, "text/html; charset=utf-8".into(), out.result),
                Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                    text(404, &format!("no procedure {name}"))
                }
                Err(e) => text(500, &format!("the page failed: {e}")),
            }
        }
    }
}

fn fs_error(e: &tabos_client::Error) -> (u16, String, Vec<u8>) {
    match e.code() {
        Some(tonic::Code::NotFound) => text(404, "not found"),
        Some(tonic::Code::PermissionDenied) => text(403, "forbidden"),
        Some(tonic::Code::InvalidArgument) => text(400, "bad path"),
        _ => text(502, &format!("the file could not be read: {e}")),
    }
}
