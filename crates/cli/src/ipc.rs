//! IPC commands: `send`, `recv`, `mailbox create|rm|show`.

use std::io::{Read, Write};

use anyhow::Context;
use tabos_client::proto;

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct SendArgs {
    /// Receiver: a mailbox name, or proc/<pid> for a proc's own mailbox
    to: String,
    /// The message; read from stdin when omitted
    data: Option<String>,
    /// More receivers of the same message (a multicast, in one transaction)
    #[arg(long = "also", value_name = "TO")]
    also: Vec<String>,
    /// The sender's address, where replies go (default: anonymous)
    #[arg(long, default_value = "")]
    from: String,
    /// Idempotency key: a resend with the same id from the same sender is stored once
    #[arg(long = "id")]
    message_id: Option<String>,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// `tabos send TO [DATA]`: prints each message's sequence number.
pub fn send(args: SendArgs) -> anyhow::Result<()> {
    let payload = match &args.data {
        Some(d) => d.clone().into_bytes(),
        None => {
            let mut buf = Vec::new();
            // One byte past the limit, so an oversized message is refused
            // by the node with its own message rather than cut short here.
            std::io::stdin()
                .take(tabos_kernel::ipc::PAYLOAD_BYTES_MAX as u64 + 1)
                .read_to_end(&mut buf)
                .context("cannot read the message from stdin")?;
            buf
        }
    };
    let messages: Vec<proto::Outgoing> = std::iter::once(&args.to)
        .chain(&args.also)
        .map(|to| proto::Outgoing {
            to: to.clone(),
            payload: payload.clone(),
            message_id: args.message_id.clone().unwrap_or_default(),
        })
        .collect();
    crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let sent = client
            .send_many(&args.realm.realm, &args.from, messages.clone())
            .await
            .context("send failed")?;
        if crate::output::json() {
            let v: Vec<_> = messages
                .iter()
                .zip(&sent)
                .map(|(m, s)| serde_json::json!({"to": m.to, "seq": s.seq, "duplicate": s.duplicate}))
                .collect();
            crate::output::doc(&serde_json::Value::Array(v));
            return Ok(());
        }
        for (m, s) in messages.iter().zip(sent) {
            let dup = if s.duplicate {
                " (duplicate: already sent)"
            } else {
                ""
            };
            outln!("{} #{}{dup}", m.to, s.seq);
        }
        Ok(())
    })
}

#[derive(clap::Args)]
pub struct RecvArgs {
    /// Mailbox to receive from: a name, or proc/<pid>
    mailbox: String,
    /// Most messages to take (at most 64)
    #[arg(long, default_value_t = 1)]
    max: u32,
    /// How long to wait for a message, in ms (0: do not wait)
    #[arg(long, default_value_t = 0)]
    timeout_ms: u32,
    /// Keep receiving as messages arrive, until interrupted
    #[arg(long, conflicts_with_all = ["peek", "timeout_ms"])]
    follow: bool,
    /// Show the first messages without taking them
    #[arg(long)]
    peek: bool,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

fn print_message(m: &proto::Message) -> anyhow::Result<()> {
    if crate::output::json() {
        let v = serde_json::json!({
            "seq": m.seq,
            "sender": m.sender,
            "message_id": m.message_id,
            "sent_us": m.sent_us,
            "sent": crate::output::rfc3339(m.sent_us),
            "bytes": m.payload.len(),
            "payload": String::from_utf8_lossy(&m.payload),
        });
        crate::output::doc(&v);
        return Ok(());
    }
    {
        let mut out = std::io::stdout().lock();
        out.write_all(&m.payload)?;
        if !m.payload.ends_with(b"\n") {
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    Ok(())
}

/// `tabos recv MAILBOX`: prints each message's payload (one per line), or
/// JSON lines; exits with status 1 when no message came.
pub fn recv(args: RecvArgs) -> anyhow::Result<()> {
    let got_any = crate::runtime()?.block_on(async {
        let mut client = args.node.connect().await?;
        let realm = &args.realm.realm;
        if args.follow {
            let mut stream = client.recv_stream(realm, &args.mailbox, args.max).await?;
            loop {
                tokio::select! {
                    batch = stream.message() => match batch? {
                        Some(b) => for m in &b.messages { print_message(m)?; },
                        None => return Ok::<_, anyhow::Error>(true),
                    },
                    _ = tokio::signal::ctrl_c() => return Ok(true),
                }
            }
        }
        let messages = if args.peek {
            client.peek(realm, &args.mailbox, args.max).await?
        } else {
            client
                .recv(realm, &args.mailbox, args.max, args.timeout_ms)
                .await?
        };
        for m in &messages {
            print_message(m)?;
        }
        Ok(!messages.is_empty())
    })?;
    if !got_any {
        eprintln!("no message");
        std::process::exit(1);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct MailboxArgs {
    #[command(subcommand)]
    command: MailboxCommand,
}

#[derive(clap::Subcommand)]
enum MailboxCommand {
    /// Create a named mailbox
    Create {
        name: String,
        /// Bound on queued bytes; a send past it is refused [default: the
        /// node's --mailbox-bytes-max]
        #[arg(long)]
        bytes_max: Option<i64>,
        /// Keep delivered messages in the message_log table
        #[arg(long)]
        log: bool,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Remove a named mailbox and the messages still queued in it
    Rm {
        name: String,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Show a mailbox's queue and bound
    Show {
        /// A name, or proc/<pid>
        name: String,
        #[command(flatten)]
        realm: RealmArg,
        #[command(flatten)]
        node: NodeAddr,
    },
}

pub fn mailbox(args: MailboxArgs) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        match args.command {
            MailboxCommand::Create {
                name,
                bytes_max,
                log,
                realm,
                node,
            } => {
                let mut client = node.connect().await?;
                client
                    .create_mailbox(
                        &realm.realm,
                        &name,
                        bytes_max.unwrap_or(0),
                        log.then_some(true),
                    )
                    .await?;
                crate::output::emit(
                    || format!("mailbox {name} created"),
                    || serde_json::json!({"mailbox": name, "created": true}),
                );
            }
            MailboxCommand::Rm { name, realm, node } => {
                let mut client = node.connect().await?;
                let dropped = client.remove_mailbox(&realm.realm, &name).await?;
                crate::output::emit(
                    || format!("mailbox {name} removed ({dropped} queued messages dropped)"),
                    || serde_json::json!({"mailbox": name, "dropped": dropped}),
                );
            }
            MailboxCommand::Show { name, realm, node } => {
                let mut client = node.connect().await?;
                let i = client.mailbox(&realm.realm, &name).await?;
                if crate::output::json() {
                    let v = serde_json::json!({
                        "mailbox": i.address, "queued": i.queued, "queued_bytes": i.queued_bytes,
                        "bytes_max": i.bytes_max, "log_delivered": i.log_delivered,
                        "next_seq": i.next_seq,
                    });
                    crate::output::doc(&v);
                    return Ok(());
                }
                let columns: Vec<String> =
                    ["mailbox", "queued", "bytes", "bound", "log", "next_seq"]
                        .map(String::from)
                        .to_vec();
                let row = vec![
                    i.address,
                    i.queued.to_string(),
                    i.queued_bytes.to_string(),
                    i.bytes_max.to_string(),
                    i.log_delivered.to_string(),
                    i.next_seq.to_string(),
                ];
                out!("{}", crate::output::table(&columns, &[row]));
            }
        }
        Ok(())
    })
}
