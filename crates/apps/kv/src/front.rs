//! The Redis-protocol front end (`tabos kv serve --listen ADDR`): every
//! connection gets its own [`Clerk`], so redis-cli and redis-benchmark
//! drive the whole service — keys spread over every group — as if it were
//! one Redis server. Commands about the connection (PING, ECHO, SELECT,
//! QUIT, CLIENT, COMMAND, CONFIG) are answered here; DBSIZE and INFO ask
//! every group.

use tabos_client::Client;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};

use crate::clerk::Clerk;
use crate::resp::{self, Reply};
use crate::{Error, Result};

/// Most client connections the front end serves at once.
pub const CONNECTIONS_MAX: usize = 1_024;

/// Serves `listener` until it fails.
pub async fn serve(
    listener: TcpListener,
    client: Client,
    realm: String,
    svc: String,
) -> Result<()> {
    resp::accept_loop(listener, CONNECTIONS_MAX, |sock| {
        let (client, realm, svc) = (client.clone(), realm.clone(), svc.clone());
        async move {
            if let Err(e) = connection(sock, &client, &realm, &svc).await {
                eprintln!("kv front end: {e}");
            }
        }
    })
    .await
    .map_err(|e| Error::Invalid(format!("accept: {e}")))
}

async fn connection(sock: TcpStream, client: &Client, realm: &str, svc: &str) -> Result<()> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    let mut clerk = Clerk::new(client, realm, svc).await?;
    let mut out = Vec::new();
    loop {
        let req = match resp::read_request(&mut r).await {
            Ok(Some(req)) => req,
            Ok(None) | Err(resp::ReadError::Io(_)) => return Ok(()),
            Err(e) => {
                Reply::err(format!("ERR {e}")).encode(&mut out);
                let _ = resp::write_all(&mut w, &out).await;
                return Ok(());
            }
        };
        let cmd = String::from_utf8_lossy(&req[0]).to_ascii_uppercase();
        let reply = match (cmd.as_str(), req.len()) {
            ("PING", 1) => Reply::Simple("PONG".into()),
            ("PING", 2) | ("ECHO", 2) => Reply::Bulk(req[1].clone()),
            ("QUIT" | "SELECT" | "CLIENT", _) => Reply::ok(),
            ("COMMAND" | "CONFIG", _) => Reply::Array(Vec::new()),
            ("DBSIZE", 1) => match clerk.dbsize().await {
                Ok(n) => Reply::Integer(n),
                Err(e) => Reply::err(format!("TRYAGAIN {e}")),
            },
            ("INFO", _) => {
                let keys = clerk.dbsize().await.unwrap_or(-1);
                let c = clerk.config();
                Reply::Bulk(
                    format!(
                        "# Server\r\nredis_version:7.0.0-tabos\r\ntabos_kv_service:{svc}\r\n\
                         # Keyspace\r\ntabos_kv_config_epoch:{}\r\ntabos_kv_shards:{}\r\n\
                         tabos_kv_groups:{}\r\ndb0:keys={keys}\r\n",
                        c.epoch,
                        c.shards.len(),
                        c.groups.len()
                    )
                    .into_bytes(),
                )
            }
            _ => {
                let args: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
                match clerk.call(&args).await {
                    Ok(r) => r,
                    Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
                    Err(e) => Reply::err(format!("ERR {e}")),
                }
            }
        };
        reply.encode(&mut out);
        if cmd == "QUIT" || r.buffer().is_empty() {
            if resp::write_all(&mut w, &out).await.is_err() || cmd == "QUIT" {
                return Ok(());
            }
            out.clear();
        }
    }
}
