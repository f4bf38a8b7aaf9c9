//! The Redis serialization protocol, RESP2 and RESP3, as much as clients
//! of a key-value store use: requests are arrays of bulk strings (or
//! inline commands, as typed into telnet); replies are simple strings,
//! errors, integers, bulk strings, nulls, arrays and maps, each written as
//! the connection's protocol version has it (a RESP3 null is `_`, a RESP2
//! map a flat array). A connection starts at RESP2 and changes with
//! `HELLO`, which, like `AUTH`, `SELECT` and `CLIENT`, is answered here
//! for every server ([`serve_connection`]). Every length a peer sends is
//! bounded before anything is allocated for it.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Most arguments in one request (MSET of 2,048 pairs).
pub const ARGS_MAX: usize = 4_097;
/// Largest argument, in bytes: a key or a value.
pub const ARG_BYTES_MAX: usize = crate::VALUE_BYTES_MAX;
/// Longest header or inline line, in bytes.
pub const LINE_BYTES_MAX: usize = 64 * 1024;
/// How long a connection may stay before it authenticates (issue 36,
/// item 2): one that never gives the password is closed then.
pub const AUTH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);
/// Most connections not yet authenticated from one address; past it a new
/// one is told why and closed. Well above what one client opens at once
/// (redis-benchmark's default is 50; a front end's clerks connect to each
/// kvd as its own clients do), and half the share of connections not yet
/// authenticated, so one address cannot take it all.
pub const UNAUTHENTICATED_PER_SOURCE_MAX: usize = 128;

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the protocol: the connection cannot go on.
    #[error("Protocol error: {0}")]
    Protocol(String),
}

/// Reads one line ending in CRLF (or LF), without it; `None` at a clean
/// end of stream.
async fn line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Option<Vec<u8>>, ReadError> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(LINE_BYTES_MAX as u64 + 2)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(ReadError::Protocol(if n > LINE_BYTES_MAX {
            format!("line longer than {LINE_BYTES_MAX} bytes")
        } else {
            "unexpected end of stream".into()
        }));
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(buf))
}

fn number(text: &[u8], what: &str) -> Result<i64, ReadError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ReadError::Protocol(format!("invalid {what} length")))
}

/// Reads one request: its arguments, the command first. `None` at a clean
/// end of stream. An empty inline line is skipped.
pub async fn read_request<R: AsyncBufRead + Unpin>(
    r: &mut R,
) -> Result<Option<Vec<Vec<u8>>>, ReadError> {
    loop {
        let Some(head) = line(r).await? else {
            return Ok(None);
        };
        if head.first() != Some(&b'*') {
            // Inline: words separated by spaces.
            let args: Vec<Vec<u8>> = head
                .split(|b| *b == b' ' || *b == b'\t')
                .filter(|w| !w.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            if args.is_empty() {
                continue;
            }
            if args.len() > ARGS_MAX {
                return Err(ReadError::Protocol("too many arguments".into()));
            }
            return Ok(Some(args));
        }
        let n = number(&head[1..], "multibulk")?;
        if n <= 0 {
            continue;
        }
        if n as usize > ARGS_MAX {
            return Err(ReadError::Protocol(format!(
                "more than {ARGS_MAX} arguments"
            )));
        }
        let mut args = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let h = line(r)
                .await?
                .ok_or_else(|| ReadError::Protocol("unexpected end of stream".into()))?;
            if h.first() != Some(&b'$') {
                return Err(ReadError::Protocol(format!(
                    "expected '$', got '{}'",
                    h.first().map(|b| *b as char).unwrap_or(' ')
                )));
            }
            let len = number(&h[1..], "bulk")?;
            if len < 0 || len as usize > ARG_BYTES_MAX {
                return Err(ReadError::Protocol(format!(
                    "invalid bulk length (at most {ARG_BYTES_MAX} bytes)"
                )));
            }
            let mut arg = vec![0; len as usize + 2];
            r.read_exact(&mut arg).await?;
            if &arg[len as usize..] != b"\r\n" {
                return Err(ReadError::Protocol("bulk string not ended by CRLF".into()));
            }
            arg.truncate(len as usize);
            args.push(arg);
        }
        return Ok(Some(args));
    }
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    /// Pairs: a RESP3 map, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// Out of band (a pub/sub message or confirmation): a RESP3 push, an
    /// array in RESP2. Sent even while `CLIENT REPLY OFF`.
    Push(Vec<Reply>),
    /// Several replies to one request, one after another (SUBSCRIBE of
    /// several channels confirms each); none for a request not answered.
    Many(Vec<Reply>),
}

/// A connection's protocol version (`HELLO 2|3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Proto {
    #[default]
    Resp2,
    Resp3,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    pub fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// Appends the reply's RESP2 encoding to `out` (what a server says
    /// to a connection that never said `HELLO 3`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_as(Proto::Resp2, out)
    }

    /// Appends the reply's encoding in protocol `proto` to `out`.
    pub fn encode_as(&self, proto: Proto, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend(s.bytes().filter(|b| *b != b'\r' && *b != b'\n'));
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(s) => {
                out.push(b'-');
                out.extend(
                    s.bytes()
                        .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
                out.extend_from_slice(b"\r\n");
            }
            Reply::Integer(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Null if proto == Proto::Resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Null => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for i in items {
                    i.encode_as(proto, out);
                }
            }
            Reply::Push(items) => {
                let kind = if proto == Proto::Resp3 { '>' } else { '*' };
                out.extend_from_slice(format!("{kind}{}\r\n", items.len()).as_bytes());
                for i in items {
                    i.encode_as(proto, out);
                }
            }
            Reply::Many(replies) => {
                for r in replies {
                    r.encode_as(proto, out);
                }
            }
            Reply::Map(pairs) => {
                let head = match proto {
                    Proto::Resp3 => format!("%{}\r\n", pairs.len()),
                    Proto::Resp2 => format!("*{}\r\n", pairs.len() * 2),
                };
                out.extend_from_slice(head.as_bytes());
                for (k, v) in pairs {
                    k.encode_as(proto, out);
                    v.encode_as(proto, out);
                }
            }
        }
    }

    /// A bulk string of text.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Bulk(s.into().into_bytes())
    }
}

/// Encodes a request (what a client sends): an array of bulk strings.
pub fn encode_request(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply (what a client receives), bounded like requests.
pub async fn read_reply<R: AsyncBufRead + Unpin + Send>(r: &mut R) -> Result<Reply, ReadError> {
    read_reply_at(r, 0).await
}

/// Deepest nesting of arrays in a reply.
const REPLY_DEPTH_MAX: usize = 4;

fn read_reply_at<'a, R: AsyncBufRead + Unpin + Send>(
    r: &'a mut R,
    depth: usize,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Reply, ReadError>> + Send + 'a>> {
    Box::pin(async move {
        let h = line(r)
            .await?
            .ok_or_else(|| ReadError::Protocol("connection closed".into()))?;
        let (kind, rest) = h
            .split_first()
            .ok_or_else(|| ReadError::Protocol("empty reply".into()))?;
        let text = || String::from_utf8_lossy(rest).into_owned();
        Ok(match kind {
            b'+' => Reply::Simple(text()),
            b'_' => Reply::Null,
            b'%' => {
                let n = number(rest, "map")?;
                if n < 0 || n as usize > ARGS_MAX || depth >= REPLY_DEPTH_MAX {
                    return Err(ReadError::Protocol("map reply too large".into()));
                }
                let mut pairs = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let k = read_reply_at(r, depth + 1).await?;
                    let v = read_reply_at(r, depth + 1).await?;
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            }
            b'-' => Reply::Error(text()),
            b':' => Reply::Integer(number(rest, "integer")?),
            b'$' => {
                let len = number(rest, "bulk")?;
                if len < 0 {
                    return Ok(Reply::Null);
                }
                if len as usize > ARG_BYTES_MAX {
                    return Err(ReadError::Protocol("bulk reply too long".into()));
                }
                let mut b = vec![0; len as usize + 2];
                r.read_exact(&mut b).await?;
                b.truncate(len as usize);
                Reply::Bulk(b)
            }
            b'*' | b'>' => {
                let n = number(rest, "multibulk")?;
                if n < 0 {
                    return Ok(Reply::Null);
                }
                if n as usize > ARGS_MAX || depth >= REPLY_DEPTH_MAX {
                    return Err(ReadError::Protocol("array reply too large".into()));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(read_reply_at(r, depth + 1).await?);
                }
                if *kind == b'>' {
                    Reply::Push(items)
                } else {
                    Reply::Array(items)
                }
            }
            other => {
                return Err(ReadError::Protocol(format!(
                    "unknown reply type '{}'",
                    *other as char
                )))
            }
        })
    })
}

/// A server's connections and who holds them ([`tabos_node::doors`]):
/// at most `max`, of which at most a quarter not yet authenticated, and
/// [`UNAUTHENTICATED_PER_SOURCE_MAX`] of those from one address.
pub type Door = tabos_client::doors::Door<tabos_client::doors::Ticket>;

/// A connection's standing at its server's [`Door`].
pub struct Standing {
    pub ticket: std::sync::Arc<tabos_client::doors::Ticket>,
    pub door: std::sync::Arc<Door>,
}

/// Where a door serves its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// On the caller's runtime, a task each.
    Caller,
    /// On this many [`crate::loops`] of its own (1 ..=
    /// [`crate::loops::LOOPS_MAX`]), each connection whole on one; they
    /// stop when the accepting ends.
    Loops(usize),
}

/// Accepts connections on `listener` for ever, each served by `serve` on a
/// task of its own (where `threads` says), at most `max` at once — a
/// quarter of them not yet authenticated, [`UNAUTHENTICATED_PER_SOURCE_MAX`]
/// from one address: one more is told why and closed, and the rest are
/// served on.
pub async fn accept_loop<F, Fut>(
    listener: tokio::net::TcpListener,
    max: usize,
    threads: Threads,
    serve: F,
) -> std::io::Result<()>
where
    F: Fn(tokio::net::TcpStream, Standing) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use tabos_client::doors::{DoorLimits, Source, Ticket};
    let loops = match threads {
        Threads::Caller => None,
        Threads::Loops(n) => Some(crate::loops::Loops::start(n, "resp-loop")?),
    };
    let serve = std::sync::Arc::new(serve);
    let door = std::sync::Arc::new(Door::new(
        max,
        DoorLimits {
            unauthenticated: max / 4,
            unauthenticated_per_source: UNAUTHENTICATED_PER_SOURCE_MAX,
            // One service, one realm: every authenticated client may use
            // all of it.
            per_realm: max,
        },
    ));
    let refuse = |sock: tokio::net::TcpStream, why: &'static str| {
        tokio::spawn(async move {
            let mut sock = sock;
            let mut out = Vec::new();
            Reply::err(why).encode(&mut out);
            let _ = write_all(&mut sock, &out).await;
        });
    };
    loop {
        let (sock, peer) = listener.accept().await?;
        let ticket = Ticket::new(Source::Ip(peer.ip()));
        if !door.ledger.admit(&ticket) {
            refuse(
                sock,
                "ERR too many connections from this address have not authenticated",
            );
            continue;
        }
        // Full: refused, as Redis's maxclients (a connection not yet
        // authenticated counts too, but those are at most a quarter).
        let slot = match door.try_slot() {
            Some(slot) => slot,
            None => {
                door.ledger.forget(&ticket);
                refuse(sock, "ERR max number of clients reached");
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let standing = Standing {
            ticket: ticket.clone(),
            door: door.clone(),
        };
        let door = door.clone();
        match &loops {
            None => {
                let served = serve(sock, standing);
                tokio::spawn(async move {
                    served.await;
                    door.ledger.forget(&ticket);
                    drop(slot);
                });
            }
            Some(loops) => {
                // Registered again on the loop's own runtime.
                let sock = match sock.into_std() {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("a connection could not be handed to a loop: {e}");
                        door.ledger.forget(&ticket);
                        continue;
                    }
                };
                let serve = serve.clone();
                loops.spawn(move || async move {
                    match tokio::net::TcpStream::from_std(sock) {
                        Ok(sock) => serve(sock, standing).await,
                        Err(e) => eprintln!("a loop could not take a connection: {e}"),
                    }
                    door.ledger.forget(&ticket);
                    drop(slot);
                });
            }
        }
    }
}

/// Serves one connection: requests in order, each through the gate of
/// `password`, then the connection's own commands ([`Session`]), then
/// `h`; requests that came together (pipelined) are answered in one
/// write. Ends at the client's end of stream, QUIT, a protocol error
/// (told to the client), [`AUTH_WAIT_MAX`] without authenticating, or its
/// door closing it.
pub async fn serve_connection<H: Handler>(
    sock: tokio::net::TcpStream,
    password: &str,
    h: &mut H,
    standing: Standing,
) {
    let (r, mut w) = sock.into_split();
    let mut r = tokio::io::BufReader::new(r);
    let mut gate = Gate::new(password);
    let mut session = Session::new();
    let mut out = Vec::new();
    let auth_deadline = tokio::time::Instant::now() + AUTH_WAIT_MAX;
    let mut signed_in = false;
    loop {
        // Wait for a request to begin, or a message for a subscribed
        // connection: filling the buffer is cancel-safe (what came stays
        // in it), reading a request is not, so it is read after.
        tokio::select! {
            ready = r.fill_buf() => match ready {
                Ok(b) if !b.is_empty() => {}
                _ => return,
            },
            push = next_push(h) => {
                let Some(push) = push else {
                    // Dropped by its broker: it did not keep up.
                    Reply::err("ERR this subscriber fell too far behind its messages")
                        .encode_as(Proto::Resp3, &mut out);
                    let _ = write_all(&mut w, &out).await;
                    return;
                };
                push.encode_as(session.proto, &mut out);
                if write_all(&mut w, &out).await.is_err() {
                    return;
                }
                out.clear();
                continue;
            }
            () = standing.ticket.clone().closing() => return,
            () = tokio::time::sleep_until(auth_deadline), if !signed_in => return,
        }
        let read = tokio::select! {
            read = read_request(&mut r) => read,
            () = standing.ticket.clone().closing() => return,
            () = tokio::time::sleep_until(auth_deadline), if !signed_in => return,
        };
        let req = match read {
            Ok(Some(req)) => req,
            Ok(None) | Err(ReadError::Io(_)) => return,
            Err(e) => {
                Reply::err(format!("ERR {e}")).encode_as(session.proto, &mut out);
                let _ = write_all(&mut w, &out).await;
                return;
            }
        };
        let _busy = standing.ticket.busy();
        let quit = req[0].eq_ignore_ascii_case(b"QUIT");
        let reply = if let Some(refused) =
            crate::pubsub::refused_while_subscribed(&req, session.proto, h.subscriptions())
        {
            refused
        } else {
            if gate.open && req[0].eq_ignore_ascii_case(b"RESET") {
                h.reset().await;
            }
            match session.answer(&req, &mut gate) {
                Some(r) => r,
                None => match gate.check(&req) {
                    Some(r) => r,
                    None => h.handle(req).await,
                },
            }
        };
        if gate.open && !signed_in {
            // Authenticated: no longer counted against its address.
            signed_in = standing.door.ledger.sign_in(&standing.ticket, "").is_ok();
        }
        if session.quiet() {
            // CLIENT REPLY OFF or SKIP: only what is pushed is sent.
            for push in reply.pushes() {
                push.encode_as(session.proto, &mut out);
            }
        } else {
            reply.encode_as(session.proto, &mut out);
        }
        if quit || r.buffer().is_empty() {
            if write_all(&mut w, &out).await.is_err() || quit {
                return;
            }
            out.clear();
        }
    }
}

/// The next message for a subscribed connection (`None`: its broker
/// dropped it); never, for one that is not.
async fn next_push<H: Handler>(h: &mut H) -> Option<Reply> {
    match h.pushes() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Reply {
    /// The pushed parts of a reply: what is sent while `CLIENT REPLY OFF`.
    fn pushes(&self) -> Vec<&Reply> {
        match self {
            Reply::Push(_) => vec![self],
            Reply::Many(rs) => rs.iter().flat_map(Reply::pushes).collect(),
            _ => Vec::new(),
        }
    }
}

/// Connection ids, as `CLIENT ID` and `HELLO` give them.
static CONNECTION_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
/// Longest name `CLIENT SETNAME` keeps.
pub const CLIENT_NAME_BYTES_MAX: usize = 256;

/// What a connection is, apart from its data: its protocol version, id
/// and name, and the database it selected (only 0 exists: the service is
/// one keyspace, as a Redis Cluster is).
pub struct Session {
    pub proto: Proto,
    id: u64,
    name: Vec<u8>,
    replies: Replies,
}

/// `CLIENT REPLY`: whether a connection's replies are sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Replies {
    On,
    Off,
    /// `CLIENT REPLY SKIP`: not for itself, nor for the next command.
    SkipThis,
    SkipNext,
}

impl Default for Session {
    fn default() -> Session {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        Session {
            proto: Proto::Resp2,
            id: CONNECTION_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            name: Vec::new(),
            replies: Replies::On,
        }
    }

    /// Whether the reply to the request just answered is withheld
    /// (`CLIENT REPLY OFF|SKIP`).
    fn quiet(&mut self) -> bool {
        let (quiet, next) = match self.replies {
            Replies::On => (false, Replies::On),
            Replies::Off => (true, Replies::Off),
            Replies::SkipThis => (true, Replies::SkipNext),
            Replies::SkipNext => (true, Replies::On),
        };
        self.replies = next;
        quiet
    }

    /// Answers the connection's own commands — `HELLO`, `SELECT`,
    /// `CLIENT ID|SETNAME|GETNAME|SETINFO`, `RESET` — or `None` for the
    /// rest. `HELLO … AUTH` authenticates through `gate`; the others need
    /// an open gate, as any command does.
    pub fn answer(&mut self, req: &[Vec<u8>], gate: &mut Gate<'_>) -> Option<Reply> {
        let cmd = req[0].to_ascii_uppercase();
        let args = &req[1..];
        if cmd == b"HELLO" {
            return Some(self.hello(args, gate));
        }
        if !gate.open {
            return None; // the gate answers NOAUTH
        }
        Some(match cmd.as_slice() {
            b"SELECT" => match args {
                [n] => match parse_integer(n) {
                    Some(0) => Reply::ok(),
                    Some(_) => Reply::err("ERR DB index is out of range"),
                    None => Reply::err("ERR value is not an integer or out of range"),
                },
                _ => arity("select"),
            },
            b"RESET" => {
                self.proto = Proto::Resp2;
                self.name.clear();
                self.replies = Replies::On;
                Reply::Simple("RESET".into())
            }
            b"CLIENT" => {
                let sub = args.first().map(|a| a.to_ascii_uppercase());
                match (sub.as_deref(), args.len()) {
                    (Some(b"ID"), 1) => Reply::Integer(self.id as i64),
                    (Some(b"GETNAME"), 1) if self.name.is_empty() => Reply::Null,
                    (Some(b"GETNAME"), 1) => Reply::Bulk(self.name.clone()),
                    (Some(b"SETNAME"), 2) => match self.set_name(&args[1]) {
                        Ok(()) => Reply::ok(),
                        Err(e) => e,
                    },
                    // Libraries' names and versions: accepted, not kept.
                    (Some(b"SETINFO"), 3) => Reply::ok(),
                    (Some(b"REPLY"), 2) => {
                        match args[1].to_ascii_uppercase().as_slice() {
                            b"ON" => self.replies = Replies::On,
                            b"OFF" => self.replies = Replies::Off,
                            b"SKIP" => self.replies = Replies::SkipThis,
                            _ => return Some(Reply::err("ERR syntax error")),
                        }
                        Reply::ok()
                    }
                    (Some(b"SETINFO" | b"ID" | b"GETNAME" | b"SETNAME" | b"REPLY"), _) => {
                        arity("client")
                    }
                    _ => Reply::err(format!(
                        "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                        String::from_utf8_lossy(args.first().map_or(&[][..], Vec::as_slice))
                    )),
                }
            }
            _ => return None,
        })
    }

    fn set_name(&mut self, name: &[u8]) -> Result<(), Reply> {
        if name.len() > CLIENT_NAME_BYTES_MAX || name.iter().any(|b| !(0x21..=0x7e).contains(b)) {
            return Err(Reply::err(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.name = name.to_vec();
        Ok(())
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
    fn hello(&mut self, args: &[Vec<u8>], gate: &mut Gate<'_>) -> Reply {
        let mut proto = self.proto;
        let mut rest = args;
        if let [v, more @ ..] = args {
            proto = match parse_integer(v) {
                Some(2) => Proto::Resp2,
                Some(3) => Proto::Resp3,
                Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
                None => {
                    return Reply::err("ERR Protocol version is not an integer or out of range")
                }
            };
            rest = more;
        }
        let mut name = None;
        while let [opt, more @ ..] = rest {
            match (opt.to_ascii_uppercase().as_slice(), more) {
                (b"AUTH", [user, pass, tail @ ..]) => {
                    if let Some(refused) = gate.auth(user, pass) {
                        return refused;
                    }
                    rest = tail;
                }
                (b"SETNAME", [n, tail @ ..]) => {
                    name = Some(n.clone());
                    rest = tail;
                }
                _ => {
                    return Reply::err(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(opt)
                    ))
                }
            }
        }
        if !gate.open {
            return Reply::err(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time",
            );
        }
        if let Some(n) = name {
            if let Err(e) = self.set_name(&n) {
                return e;
            }
        }
        self.proto = proto;
        Reply::Map(vec![
            (Reply::text("server"), Reply::text("redis")),
            (Reply::text("version"), Reply::text(SERVER_VERSION)),
            (
                Reply::text("proto"),
                Reply::Integer(if proto == Proto::Resp3 { 3 } else { 2 }),
            ),
            (Reply::text("id"), Reply::Integer(self.id as i64)),
            (Reply::text("mode"), Reply::text("standalone")),
            (Reply::text("role"), Reply::text("master")),
            (Reply::text("modules"), Reply::Array(Vec::new())),
        ])
    }
}

/// `TIME`: this host's clock, as seconds and microseconds (the clock
/// the service's deadlines are on, to the millisecond).
pub fn time_reply() -> Reply {
    let us = crate::now_us();
    Reply::Array(vec![
        Reply::text((us / 1_000_000).to_string()),
        Reply::text((us % 1_000_000).to_string()),
    ])
}

/// The Redis version the service answers as (the commands it has are
/// Redis 7.0's).
pub const SERVER_VERSION: &str = "7.0.0";

fn arity(cmd: &str) -> Reply {
    Reply::err(format!("ERR wrong number of arguments for '{cmd}' command"))
}

/// An integer as Redis reads one (`string2ll`): an optional `-`, then
/// digits with no leading zero (`0` alone), within 64 bits — no `+`, no
/// spaces, no `-0`.
pub fn parse_integer(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let canonical = match digits {
        [] => false,
        [b'0'] => digits.len() == b.len(),
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    };
    if !canonical || b.len() > 20 {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// What answers a connection's requests (after its [`Gate`]).
pub trait Handler {
    fn handle(&mut self, req: Vec<Vec<u8>>) -> impl std::future::Future<Output = Reply> + Send;

    /// Where a subscribed connection's messages come from.
    fn pushes(&mut self) -> Option<&mut tokio::sync::mpsc::Receiver<Reply>> {
        None
    }

    /// Channels and patterns the connection is subscribed to.
    fn subscriptions(&self) -> usize {
        0
    }

    /// `RESET`: subscriptions and transactions end.
    fn reset(&mut self) -> impl std::future::Future<Output = ()> + Send {
        async {}
    }
}

/// A connection's authentication, as Redis's `requirepass`: until the
/// client gives the service's password (`AUTH password`, `AUTH default
/// password`, or `HELLO … AUTH default password`) it may only PING, QUIT,
/// HELLO or authenticate.
pub struct Gate<'a> {
    password: &'a str,
    open: bool,
}

impl<'a> Gate<'a> {
    pub fn new(password: &'a str) -> Gate<'a> {
        Gate {
            password,
            open: false,
        }
    }

    /// Whether the connection has authenticated.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// `user` and `pass` checked: `None` if they open the gate, else the
    /// refusal. Only the user `default` exists.
    fn auth(&mut self, user: &[u8], pass: &[u8]) -> Option<Reply> {
        self.open = user == b"default" && equal(pass, self.password.as_bytes());
        (!self.open)
            .then(|| Reply::err("WRONGPASS invalid username-password pair or user is disabled."))
    }

    /// `None`: the request goes on to the handler. `Some(reply)`: it was
    /// answered here.
    pub fn check(&mut self, req: &[Vec<u8>]) -> Option<Reply> {
        let cmd = req[0].to_ascii_uppercase();
        if cmd == b"AUTH" {
            return Some(
                match req {
                    [_, p] => self.auth(b"default", p),
                    [_, user, p] => self.auth(user, p),
                    _ => Some(arity("auth")),
                }
                .unwrap_or_else(Reply::ok),
            );
        }
        if self.open || cmd == b"PING" || cmd == b"QUIT" {
            return None;
        }
        Some(Reply::err("NOAUTH Authentication required."))
    }
}

/// Compares in time that depends on the lengths only.
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Writes `bytes` and flushes.
pub async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers PING with PONG and every other request with its first
    /// argument.
    struct Echo;
    impl Handler for Echo {
        async fn handle(&mut self, req: Vec<Vec<u8>>) -> Reply {
            if req[0] == b"PING" {
                Reply::Simple("PONG".into())
            } else {
                Reply::Bulk(req[0].clone())
            }
        }
    }

    async fn connect_from(from: [u8; 4], port: u16) -> tokio::net::TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind((std::net::Ipv4Addr::from(from), 0).into())
            .unwrap();
        socket.connect(([127, 0, 0, 1], port).into()).await.unwrap()
    }

    async fn ask(s: &mut tokio::net::TcpStream, req: &str) -> String {
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 256];
        let n = tokio::time::timeout(std::time::Duration::from_secs(30), s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// Issue 36, item 2: one address's connections that do not
    /// authenticate stop at their share (the next is told why), another
    /// address authenticates and is served, and a connection that never
    /// authenticates is closed after `AUTH_WAIT_MAX`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unauthenticated_connections_are_capped_per_address_and_in_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(accept_loop(
            listener,
            1_024,
            Threads::Caller,
            |sock, standing| async move {
                serve_connection(sock, "pw", &mut Echo, standing).await;
            },
        ));
        let mut held = Vec::new();
        for _ in 0..UNAUTHENTICATED_PER_SOURCE_MAX {
            let mut s = connect_from([127, 0, 0, 2], port).await;
            assert_eq!(ask(&mut s, "PING\r\n").await, "+PONG\r\n");
            held.push(s);
        }
        let mut over = connect_from([127, 0, 0, 2], port).await;
        let mut buf = vec![0u8; 256];
        let n = over.read(&mut buf).await.unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).contains("have not authenticated"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        let mut other = connect_from([127, 0, 0, 3], port).await;
        assert_eq!(ask(&mut other, "AUTH pw\r\n").await, "+OK\r\n");
        assert_eq!(ask(&mut other, "GET\r\n").await, "$3\r\nGET\r\n");
        // An authenticated connection leaves its address's count: the
        // flooding address can authenticate one of its own and open one.
        assert_eq!(ask(&mut held[0], "AUTH pw\r\n").await, "+OK\r\n");
        let mut again = connect_from([127, 0, 0, 2], port).await;
        assert_eq!(ask(&mut again, "PING\r\n").await, "+PONG\r\n");
        // Never authenticated: closed after the wait.
        let n = tokio::time::timeout(AUTH_WAIT_MAX * 3, again.read(&mut buf))
            .await
            .expect("closed after the wait for AUTH")
            .unwrap();
        assert_eq!(n, 0);
        // The authenticated one is still served.
        assert_eq!(ask(&mut other, "GET\r\n").await, "$3\r\nGET\r\n");
    }

    /// Answers every request with the name of the thread serving it.
    struct Who;
    impl Handler for Who {
        async fn handle(&mut self, _req: Vec<Vec<u8>>) -> Reply {
            Reply::Bulk(
                std::thread::current()
                    .name()
                    .unwrap_or_default()
                    .as_bytes()
                    .to_vec(),
            )
        }
    }

    /// A door on event loops serves each connection on one loop's thread,
    /// a new one on the loop serving fewest; when its accepting ends, the
    /// loops stop and close what they served.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_on_loops_are_spread_and_closed_with_the_door() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let door = tokio::spawn(accept_loop(
            listener,
            1_024,
            Threads::Loops(2),
            |sock, standing| async move {
                serve_connection(sock, "pw", &mut Who, standing).await;
            },
        ));
        let mut held = Vec::new();
        let mut names = Vec::new();
        for _ in 0..4 {
            let mut s = connect_from([127, 0, 0, 1], port).await;
            assert_eq!(ask(&mut s, "AUTH pw\r\n").await, "+OK\r\n");
            names.push(ask(&mut s, "WHO\r\n").await);
            held.push(s);
        }
        names.sort();
        assert_eq!(
            names,
            [
                "$11\r\nresp-loop-0\r\n",
                "$11\r\nresp-loop-0\r\n",
                "$11\r\nresp-loop-1\r\n",
                "$11\r\nresp-loop-1\r\n"
            ]
        );
        door.abort();
        let _ = door.await;
        for mut s in held {
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(std::time::Duration::from_secs(30), s.read(&mut buf))
                .await
                .expect("closed with the door")
                .unwrap_or(0);
            assert_eq!(n, 0);
        }
    }

    async fn parse(bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, ReadError> {
        let mut r = tokio::io::BufReader::new(bytes);
        read_request(&mut r).await
    }

    #[tokio::test]
    async fn requests_parse_in_both_forms() {
        let a = parse(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(a.unwrap(), [b"SET".to_vec(), b"k".to_vec(), Vec::new()]);
        let a = parse(b"PING  hi\r\n").await.unwrap();
        assert_eq!(a.unwrap(), [b"PING".to_vec(), b"hi".to_vec()]);
        assert!(parse(b"").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn bad_requests_are_protocol_errors() {
        for bad in [
            &b"*2\r\n$3\r\nGET\r\n"[..],
            b"*1\r\n:3\r\n",
            b"*1\r\n$99999999999\r\n",
            b"*999999\r\n",
            b"*1\r\n$3\r\nGETXX",
        ] {
            match parse(bad).await {
                Err(ReadError::Protocol(_)) => {}
                Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
            }
        }
    }

    #[test]
    fn the_gate_opens_only_for_the_password() {
        let req = |a: &[&str]| a.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let mut g = Gate::new("s3cret");
        assert!(g.check(&req(&["PING"])).is_none());
        assert!(
            matches!(g.check(&req(&["GET", "k"])), Some(Reply::Error(e)) if e.starts_with("NOAUTH"))
        );
        assert!(
            matches!(g.check(&req(&["AUTH", "nope"])), Some(Reply::Error(e)) if e.starts_with("WRONGPASS"))
        );
        assert!(matches!(
            g.check(&req(&["AUTH", "bob", "s3cret"])),
            Some(Reply::Error(_))
        ));
        assert!(matches!(g.check(&req(&["AUTH"])), Some(Reply::Error(_))));
        assert!(g.check(&req(&["GET", "k"])).is_some(), "still closed");
        assert_eq!(
            g.check(&req(&["auth", "default", "s3cret"])),
            Some(Reply::ok())
        );
        assert!(g.check(&req(&["GET", "k"])).is_none());
    }

    #[tokio::test]
    async fn replies_round_trip() {
        let r = Reply::Array(vec![
            Reply::ok(),
            Reply::err("ERR no"),
            Reply::Integer(-3),
            Reply::Bulk(b"a\r\nb".to_vec()),
            Reply::Null,
        ]);
        let mut out = Vec::new();
        r.encode(&mut out);
        let mut rd = tokio::io::BufReader::new(&out[..]);
        assert_eq!(read_reply(&mut rd).await.unwrap(), r);
    }
}
