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
use crate::command;
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
                    let mut front = Front {
                        clerk,
                        svc,
                        multi: None,
                        watched: Vec::new(),
                    };
                    resp::serve_connection(sock, &password, &mut front, standing).await;
                }
                Err(e) => eprintln!("kv front end: {e}"),
            }
        }
    })
    .await
    .map_err(|e| Error::Invalid(format!("accept: {e}")))
}

/// The keys of a transaction's command (none for PING, ECHO, TIME).
fn transaction_keys(c: &[Vec<u8>]) -> Vec<&[u8]> {
    command::lookup(&c[0])
        .map(|spec| spec.key_positions(c.len()))
        .unwrap_or_default()
        .into_iter()
        .map(|i| c[i].as_slice())
        .collect()
}

/// One connection: its clerk, and its transaction if one is open.
struct Front {
    clerk: Clerk,
    svc: String,
    /// Between MULTI and EXEC: the commands queued.
    multi: Option<Multi>,
    /// WATCHed keys with their kvd's tokens (all in one shard).
    watched: crate::kvd::WatchedKeys,
}

/// A transaction being queued.
#[derive(Default)]
struct Multi {
    commands: Vec<Vec<Vec<u8>>>,
    /// A command was refused while queueing: EXEC will not run it.
    failed: bool,
}

impl resp::Handler for Front {
    fn handle(&mut self, req: Vec<Vec<u8>>) -> impl std::future::Future<Output = Reply> + Send {
        self.transacting(req)
    }
}

impl Front {
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH, and commands queued in a
    /// transaction; the rest to [`Front::answer`]. A transaction's keys
    /// (its commands' and the watched ones) must be in one shard — it
    /// runs on its kvd as one log entry —, else CROSSSLOT.
    async fn transacting(&mut self, req: Vec<Vec<u8>>) -> Reply {
        let cmd = String::from_utf8_lossy(&req[0]).to_ascii_uppercase();
        let arity_ok = match cmd.as_str() {
            "MULTI" | "EXEC" | "DISCARD" | "UNWATCH" => req.len() == 1,
            "WATCH" => req.len() >= 2,
            _ => true,
        };
        if !arity_ok {
            // In a transaction, it fails the transaction too.
            if let Some(m) = self.multi.as_mut() {
                m.failed = true;
            }
            return command::wrong_arity(&cmd);
        }
        match (cmd.as_str(), self.multi.is_some()) {
            // Refused, and the transaction with it (EXECABORT), as Redis 7.
            ("MULTI" | "WATCH", true) => {
                if let Some(m) = self.multi.as_mut() {
                    m.failed = true;
                }
                Reply::err(if cmd == "MULTI" {
                    "ERR MULTI calls can not be nested"
                } else {
                    "ERR WATCH inside MULTI is not allowed"
                })
            }
            ("MULTI", false) => {
                self.multi = Some(Multi::default());
                Reply::ok()
            }
            ("EXEC", false) => Reply::err("ERR EXEC without MULTI"),
            ("DISCARD", false) => Reply::err("ERR DISCARD without MULTI"),
            ("EXEC", true) => {
                let multi = self.multi.take().unwrap_or_default();
                let watched = std::mem::take(&mut self.watched);
                if multi.failed {
                    return Reply::err(
                        "EXECABORT Transaction discarded because of previous errors.",
                    );
                }
                self.exec(watched, multi.commands).await
            }
            ("DISCARD", true) => {
                self.multi = None;
                self.watched.clear();
                Reply::ok()
            }
            ("WATCH", false) => self.watch(&req[1..]).await,
            ("UNWATCH", _) => {
                self.watched.clear();
                Reply::ok()
            }
            ("QUIT", _) | (_, false) => self.answer(req).await,
            (_, true) => {
                let refused = self.queueable(&req);
                let multi = self.multi.get_or_insert_with(Multi::default);
                match refused {
                    Some(e) => {
                        multi.failed = true;
                        e
                    }
                    None => {
                        multi.commands.push(req);
                        Reply::Simple("QUEUED".into())
                    }
                }
            }
        }
    }

    /// Why `req` cannot join the open transaction, if it cannot.
    fn queueable(&self, req: &[Vec<u8>]) -> Option<Reply> {
        let keys: Vec<&[u8]> = match command::lookup(&req[0]) {
            Some(spec) => {
                if let Err(e) = spec.check_arity(req.len()) {
                    return Some(e);
                }
                if spec.keys == command::Keys::Every {
                    return Some(Reply::err(format!(
                        "ERR {} (of the whole keyspace) cannot be in a transaction here",
                        spec.name
                    )));
                }
                spec.key_positions(req.len())
                    .into_iter()
                    .map(|i| req[i].as_slice())
                    .collect()
            }
            None => match req[0].to_ascii_uppercase().as_slice() {
                b"PING" if req.len() <= 2 => Vec::new(),
                b"ECHO" if req.len() == 2 => Vec::new(),
                b"TIME" if req.len() == 1 => Vec::new(),
                _ => {
                    return Some(Reply::err(format!(
                        "ERR unknown command '{}' (or one that cannot be in a transaction here)",
                        String::from_utf8_lossy(&req[0])
                    )))
                }
            },
        };
        let config = self.clerk.config();
        let mut shards = self
            .watched
            .iter()
            .map(|(k, _)| k.as_slice())
            .chain(
                self.multi
                    .iter()
                    .flat_map(|m| m.commands.iter())
                    .flat_map(|c| transaction_keys(c)),
            )
            .chain(keys)
            .map(|k| config.shard_of(k));
        let first = shards.next();
        (!shards.all(|s| Some(s) == first))
            .then(|| Reply::err("CROSSSLOT Keys in request don't hash to the same slot"))
    }

    /// WATCH `keys`: tokens from their kvd, kept until EXEC, DISCARD or
    /// UNWATCH.
    async fn watch(&mut self, keys: &[Vec<u8>]) -> Reply {
        let config = self.clerk.config();
        let mut shards = self
            .watched
            .iter()
            .map(|(k, _)| k.as_slice())
            .chain(keys.iter().map(Vec::as_slice))
            .map(|k| config.shard_of(k));
        let first = shards.next();
        if !shards.all(|s| Some(s) == first) {
            return Reply::err("CROSSSLOT Keys in request don't hash to the same slot");
        }
        let mut req: Vec<&[u8]> = vec![b"TABOS.WATCH"];
        req.extend(keys.iter().map(Vec::as_slice));
        match self.clerk.send_for(Some(&keys[0]), &req, true).await {
            Ok(Reply::Array(tokens)) if tokens.len() == keys.len() => {
                for (k, t) in keys.iter().zip(tokens) {
                    let Reply::Array(t) = t else {
                        return Reply::err("ERR a kvd answered WATCH without tokens");
                    };
                    let [Reply::Integer(tick), Reply::Integer(deadline)] = t.as_slice() else {
                        return Reply::err("ERR a kvd answered WATCH without tokens");
                    };
                    self.watched.push((k.clone(), (*tick as u64, *deadline)));
                }
                Reply::ok()
            }
            Ok(Reply::Error(e)) => Reply::Error(e),
            Ok(_) => Reply::err("ERR a kvd answered WATCH without tokens"),
            Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
            Err(e) => Reply::err(format!("ERR {e}")),
        }
    }

    /// EXEC: the transaction to the kvd of its shard, in one request.
    async fn exec(
        &mut self,
        watched: crate::kvd::WatchedKeys,
        commands: Vec<Vec<Vec<u8>>>,
    ) -> Reply {
        let key: Option<Vec<u8>> = watched.first().map(|(k, _)| k.clone()).or_else(|| {
            commands
                .iter()
                .flat_map(|c| transaction_keys(c))
                .next()
                .map(<[u8]>::to_vec)
        });
        let (n, m) = (watched.len().to_string(), commands.len().to_string());
        let tokens: Vec<(String, String)> = watched
            .iter()
            .map(|(_, (tick, deadline))| (tick.to_string(), deadline.to_string()))
            .collect();
        let counts: Vec<String> = commands.iter().map(|c| c.len().to_string()).collect();
        let mut req: Vec<&[u8]> = vec![b"TABOS.EXEC", n.as_bytes()];
        for ((k, _), (tick, deadline)) in watched.iter().zip(&tokens) {
            req.push(k);
            req.push(tick.as_bytes());
            req.push(deadline.as_bytes());
        }
        req.push(m.as_bytes());
        for (c, count) in commands.iter().zip(&counts) {
            req.push(count.as_bytes());
            req.extend(c.iter().map(Vec::as_slice));
        }
        match self.clerk.send_for(key.as_deref(), &req, false).await {
            Ok(r) => r,
            Err(Error::Unavailable(e)) => Reply::err(format!("TRYAGAIN {e}")),
            Err(e) => Reply::err(format!("ERR {e}")),
        }
    }

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
