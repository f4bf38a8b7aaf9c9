//! `tabos batch`: several calls in one round trip, read as lines from stdin.

use std::io::{BufRead, Write};

use tabos_client::batch::BATCH_CALLS_MAX;
use tabos_client::proto::{self, batch_call::Call, batch_result::Result as Out};

use crate::procs::RealmArg;
use crate::NodeAddr;

/// What one line of input may say.
const GRAMMAR: &str = "put PATH DATA | get PATH | rm PATH | send TO DATA | recv MAILBOX [MAX] \
                       | call PROCEDURE [ARGS] | status PID | stat FILE | read FILE | write FILE DATA";

#[derive(clap::Args)]
#[command(
    after_help = "Each line of stdin is one call: put PATH DATA | get PATH | rm PATH \
    (namespace) | send TO DATA | recv MAILBOX [MAX] (never waits) | call PROCEDURE [ARGS] | \
    status PID | stat FILE | read FILE | write FILE DATA (files, as the credential's user). \
    DATA is the rest of the line. At most 64 calls, all sent in one round trip; one output \
    line per call, in order: `ok ...` or `error CODE: message`. Exits non-zero if any failed."
)]
pub struct Args {
    /// The calls do not depend on one another: the node runs them at once,
    /// in no set order, and their writes share commits (output stays in
    /// the lines' order)
    #[arg(long)]
    independent: bool,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

/// One input line as a call of `realm`.
fn parse(line: &str, realm: &str) -> anyhow::Result<Call> {
    let (verb, rest) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
    let (first, data) = rest.split_once(' ').unwrap_or((rest, ""));
    let need = |what: &str| -> anyhow::Result<String> {
        anyhow::ensure!(!first.is_empty(), "{verb} needs {what} (lines: {GRAMMAR})");
        Ok(first.to_string())
    };
    let realm = realm.to_string();
    Ok(match verb {
        "put" => Call::NamesSet(proto::SetNameRequest {
            realm,
            path: need("a path")?,
            data: data.as_bytes().to_vec(),
            ..Default::default()
        }),
        "get" => Call::NamesGet(proto::NameRequest {
            realm,
            path: need("a path")?,
        }),
        "rm" => Call::NamesRemove(proto::RemoveNameRequest {
            realm,
            path: need("a path")?,
            ..Default::default()
        }),
        "send" => Call::Send(proto::SendRequest {
            realm,
            messages: vec![proto::Outgoing {
                to: need("a mailbox")?,
                payload: data.as_bytes().to_vec(),
                message_id: String::new(),
            }],
            ..Default::default()
        }),
        "recv" => Call::Recv(proto::RecvRequest {
            realm,
            mailbox: need("a mailbox")?,
            max: if data.is_empty() {
                0
            } else {
                data.trim().parse()?
            },
            timeout_ms: 0,
        }),
        "call" => Call::ProcedureCall(proto::CallProcedureRequest {
            realm,
            name: need("a procedure")?,
            args: data.as_bytes().to_vec(),
        }),
        "status" => Call::ProcStatus(proto::PidRequest {
            realm,
            pid: need("a pid")?,
        }),
        "stat" => Call::FsStat(proto::FsPathRequest {
            realm,
            path: need("a file")?,
            ..Default::default()
        }),
        "read" => Call::FsRead(proto::FsReadRequest {
            realm,
            path: need("a file")?,
            len: 4 << 20,
            ..Default::default()
        }),
        "write" => Call::FsWrite(proto::FsWriteRequest {
            realm,
            path: need("a file")?,
            data: data.as_bytes().to_vec(),
            create: true,
            ..Default::default()
        }),
        other => anyhow::bail!("unknown call {other:?} (lines: {GRAMMAR})"),
    })
}

/// One result as an output line (after `ok`).
fn show(out: &Out) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match out {
        Out::Error(e) => format!("error {}", e.message),
        Out::NamesSet(v) => format!("version {}", v.version),
        Out::NamesGet(e) => format!("{} version {}: {}", e.kind(), e.version, text(&e.data)),
        Out::NamesRemove(_) => "removed".into(),
        Out::Send(s) => format!(
            "seq {}",
            s.sent.first().map_or(String::new(), |m| m.seq.to_string())
        ),
        Out::Recv(r) => {
            let msgs: Vec<String> = r.messages.iter().map(|m| text(&m.payload)).collect();
            format!("{} messages: {}", msgs.len(), msgs.join(" "))
        }
        Out::ProcedureCall(c) => text(&c.result),
        Out::ProcStatus(s) => format!("{} {}", s.pid, s.state()),
        Out::FsStat(s) => format!("{} bytes", s.size),
        Out::FsRead(r) => text(&r.data),
        Out::FsWrite(w) => format!("size {}", w.size),
        Out::Spawn(s) => format!("pid {}", s.pid),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let realm = args.realm.realm.clone();
    let mut calls = Vec::new();
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        anyhow::ensure!(
            calls.len() < BATCH_CALLS_MAX,
            "a batch holds at most {BATCH_CALLS_MAX} calls"
        );
        calls.push(parse(&line, &realm).map_err(|e| anyhow::anyhow!("line {}: {e}", i + 1))?);
    }
    anyhow::ensure!(!calls.is_empty(), "no calls on stdin (lines: {GRAMMAR})");
    let results = crate::runtime()?.block_on(async {
        let mut c = args.node.connect().await?;
        let results = if args.independent {
            c.batch_independent(calls).await?
        } else {
            c.batch(calls).await?
        };
        Ok::<_, anyhow::Error>(results)
    })?;
    let mut failed = 0;
    let mut out = std::io::stdout().lock();
    for r in results {
        let json = crate::output::json();
        match r {
            Ok(o) if json => writeln!(out, "{}", serde_json::json!({"ok": show(&o)}))?,
            Ok(o) => writeln!(out, "ok {}", show(&o))?,
            Err(e) => {
                failed += 1;
                if json {
                    writeln!(out, "{}", serde_json::json!({"error": e.to_string()}))?;
                } else {
                    writeln!(out, "error {e}")?;
                }
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of the batch's calls failed");
    Ok(())
}
