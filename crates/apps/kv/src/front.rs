//! The Redis-protocol front end (`tabos kv serve --listen ADDR`): every
//! connection gets its own [`Clerk`], so redis-cli and redis-benchmark
//! drive the whole service — keys spread over every group — as if it were
//! one Redis server, behind the service's password (`redis-cli -a`, or
//! `HELLO 3 AUTH default PW` as redis-py sends). Commands about the
//! connection (HELLO, SELECT, CLIENT, RESET: [`resp::Session`]; PING,
//! ECHO, QUIT, COMMAND, CONFIG) are answered here; DBSIZE, FLUSHALL and
//! INFO ask every group.

use tabos_client::Client;
use tokio::net::TcpListener;

use crate::clerk::Clerk;
use crate::resp::{self, Reply};
use crate::{Error, Result};

/// Most client connections the front end serves at once.
pub const CONNECTIONS_MAX: usize = 1_024;

/// Serves `listener` until it fails. Every connection must first give the
/// service's password (`AUTH`, as Redis's `requirepass`).
pub async fn serve(
    listener: TcpListener,
    client: Client,
    realm: String,
    svc: String,
) -> Result<()> {
    let layout = crate::config::Layout::new(&svc)?;
    let password = crate::config::read_password(&client, &realm, &layout).await?;
    resp::accept_loop(listener, CONNECTIONS_MAX, |sock, standing| {
        let (client, realm, svc, password) =
            (client.clone(), realm.clone(), svc.clone(), password.clone());
        async move {
            match Clerk::new(&client, &realm, &svc).await {
                Ok(clerk) => {
                    let mut front = Front { clerk, svc };
                    resp::serve_connection(sock, &password, &mut front, standing).await;
                }
                Err(e) => eprintln!("kv front end: {e}"),
            }
        }
    })
    .await
    .map_err(|e| Error::Invalid(format!("accept: {e}")))
}

/// One connection: its clerk.
struct Front {
    clerk: Clerk,
    svc: String,
}

impl resp::Handler for Front {
    fn handle(&mut self, req: Vec<Vec<u8>>) -> impl std::future::Future<Output = Reply> + Send {
        self.answer(req)
    }
}

impl Front {
    async fn answer(&mut self, req: Vec<Vec<u8>>) -> Reply {
        let cmd = String::from_utf8_lossy(&req[0]).to_ascii_uppercase();
        match (cmd.as_str(), req.len()) {
            ("PING", 1) => Reply::Simple("PONG".into()),
            ("PING", 2) | ("ECHO", 2) => Reply::Bulk(req[1].clone()),
            ("QUIT", _) => Reply::ok(),
            ("TIME", 1) => crate::resp::time_reply(),
            ("COMMAND", _) => Reply::Array(Vec::new()),
            // No settings are changed from a connection: CONFIG GET finds
            // none, CONFIG SET refuses as Redis does an unknown one.
            ("CONFIG", _) => match req.get(1).map(|s| s.to_ascii_uppercase()).as_deref() {
                Some(b"GET") => Reply::Array(Vec::new()),
                Some(b"RESETSTAT") => Reply::ok(),
                Some(b"SET") => Reply::err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                    String::from_utf8_lossy(req.get(2).map_or(&[][..], Vec::as_slice))
                )),
                _ => Reply::err("ERR unknown CONFIG subcommand (tabos has GET, SET, RESETSTAT)"),
            },
            // The service runs no functions: there are none to list or
            // flush, and none can be loaded.
            ("FUNCTION", _) => match req.get(1).map(|s| s.to_ascii_uppercase()).as_deref() {
                Some(b"FLUSH") => Reply::ok(),
                Some(b"LIST") => Reply::Array(Vec::new()),
                _ => Reply::err("ERR tabos's key-value service runs no functions"),
            },
            ("DBSIZE", 1) => match self.clerk.dbsize().await {
                Ok(n) => Reply::Integer(n),
                Err(e) => Reply::err(format!("TRYAGAIN {e}")),
            },
            ("INFO", _) => {
                let keys = self.clerk.dbsize().await.unwrap_or(-1);
                let c = self.clerk.config();
                Reply::Bulk(
                    format!(
                        "# Server\r\nredis_version:7.0.0-tabos\r\ntabos_kv_service:{}\r\n\
                         # Keyspace\r\ntabos_kv_config_epoch:{}\r\ntabos_kv_shards:{}\r\n\
                         tabos_kv_groups:{}\r\ndb0:keys={keys}\r\n",
                        self.svc,
                        c.epoch,
                        c.shards.len(),
                        c.groups.len()
                    )
                    .into_bytes(),
                )
            }
            _ => {
                let args: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
                match self.clerk.call(&args).await {
                    Ok(r) => r,
                    Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
                    Err(e) => Reply::err(format!("ERR {e}")),
                }
            }
        }
    }
}
