//! `tabos procedure install|list|remove|call`: stored procedures.

use std::io::{Read, Write};

use anyhow::Context;
use tabos_client::procedures::ProcedureLimits;

use crate::procs::RealmArg;
use crate::NodeAddr;

#[derive(clap::Args)]
pub struct ProcedureArgs {
    #[command(subcommand)]
    command: ProcedureCommand,
    #[command(flatten)]
    realm: RealmArg,
    #[command(flatten)]
    node: NodeAddr,
}

#[derive(clap::Subcommand)]
enum ProcedureCommand {
    /// Install (or replace) a procedure from a file: a .wasm or .wat module
    /// exporting main(i32) -> i32 and memory, or a .js script defining
    /// function main(arg). Code that does not compile is refused.
    Install {
        name: String,
        /// The code's file (- for stdin)
        file: String,
        /// wasm or js (default: from the file's extension)
        #[arg(long)]
        language: Option<String>,
        /// Memory limit in MiB, at most 1024: a wasm procedure's linear
        /// memory, a JS one's heap during its call [default: 64]
        #[arg(long)]
        memory_mib: Option<u64>,
        /// Time limit of one call in milliseconds, 1..=1000 (a call holds its
        /// partition's tenant connection that long at most) [default: 1000]
        #[arg(long)]
        timeout_ms: Option<u32>,
        /// The procedure only reads: calls run on a read connection, never
        /// queued behind the realm's writes (a write in it fails the call)
        #[arg(long)]
        read_only: bool,
    },
    /// List the realm's procedures
    List,
    /// Remove a procedure
    Remove { name: String },
    /// Call a procedure with ARGS (or --args-file) in one transaction and
    /// print its result; what it logged goes to stderr
    Call {
        name: String,
        /// The arguments, as text
        #[arg(default_value = "")]
        args: String,
        /// Read the arguments from a file (- for stdin)
        #[arg(long, conflicts_with = "args")]
        args_file: Option<String>,
    },
}

fn read_input(path: &str) -> anyhow::Result<Vec<u8>> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {path}"))
    }
}

fn language_of(file: &str, given: Option<String>) -> anyhow::Result<String> {
    if let Some(l) = given {
        return Ok(l);
    }
    match std::path::Path::new(file)
        .extension()
        .and_then(|e| e.to_str())
    {
        Some("wasm" | "wat") => Ok("wasm".into()),
        Some("js" | "mjs") => Ok("js".into()),
        _ => anyhow::bail!("cannot tell the language of {file}: pass --language wasm|js"),
    }
}

pub fn run(args: ProcedureArgs) -> anyhow::Result<()> {
    let realm = args.realm.realm.clone();
    crate::runtime()?.block_on(async {
        let mut c = args.node.connect().await?;
        match args.command {
            ProcedureCommand::Install {
                name,
                file,
                language,
                memory_mib,
                timeout_ms,
                read_only,
            } => {
                let language = language_of(&file, language)?;
                let code = read_input(&file)?;
                let limits = ProcedureLimits {
                    // 0: the node's default.
                    memory_bytes: memory_mib.unwrap_or(0).saturating_mul(1 << 20),
                    timeout_ms: timeout_ms.unwrap_or(0),
                    read_only,
                };
                let i = c
                    .procedure_install(&realm, &name, &language, code, limits)
                    .await?;
                crate::output::emit(
                    || {
                        format!(
                            "installed {} ({}, {} bytes, hash {}) in realm {}",
                            i.name, i.language, i.code_bytes, i.code_hash, i.realm
                        )
                    },
                    || procedure_json(&i),
                );
            }
            ProcedureCommand::List => {
                let list = c.procedure_list(&realm).await?;
                let mut out = std::io::stdout().lock();
                if crate::output::json() {
                    let v: Vec<_> = list.iter().map(procedure_json).collect();
                    writeln!(out, "{}", serde_json::Value::Array(v))?;
                    return Ok(());
                }
                writeln!(
                    out,
                    "{:<24} {:<5} {:>10} {:>10} {:>9}  MODE",
                    "NAME", "LANG", "BYTES", "MEMORY", "TIMEOUT"
                )?;
                for i in list {
                    writeln!(
                        out,
                        "{:<24} {:<5} {:>10} {:>9}M {:>7}ms  {}",
                        i.name,
                        i.language,
                        i.code_bytes,
                        i.memory_bytes >> 20,
                        i.timeout_ms,
                        if i.read_only {
                            "read-only"
                        } else {
                            "read-write"
                        }
                    )?;
                }
            }
            ProcedureCommand::Remove { name } => {
                c.procedure_remove(&realm, &name).await?;
                if crate::output::json() {
                    outln!(
                        "{}",
                        serde_json::json!({"procedure": name, "removed": true})
                    );
                }
            }
            ProcedureCommand::Call {
                name,
                args,
                args_file,
            } => {
                let input = match args_file {
                    Some(f) => read_input(&f)?,
                    None => args.into_bytes(),
                };
                let out = c.procedure_call(&realm, &name, input).await?;
                if crate::output::json() {
                    let v = serde_json::json!({
                        "result": String::from_utf8_lossy(&out.result), "log": out.log,
                    });
                    crate::output::doc(&v);
                    return Ok(());
                }
                for line in &out.log {
                    eprintln!("log: {line}");
                }
                let mut stdout = std::io::stdout().lock();
                stdout.write_all(&out.result)?;
                if !out.result.is_empty() && out.result.last() != Some(&b'\n') {
                    stdout.write_all(b"\n")?;
                }
            }
        }
        Ok(())
    })
}

/// A procedure's description as JSON (the install time in RFC 3339).
fn procedure_json(i: &tabos_client::proto::ProcedureInfo) -> serde_json::Value {
    serde_json::json!({
        "realm": i.realm, "name": i.name, "language": i.language,
        "code_bytes": i.code_bytes, "code_hash": i.code_hash,
        "memory_bytes": i.memory_bytes, "timeout_ms": i.timeout_ms,
        "read_only": i.read_only, "installed": crate::output::rfc3339(i.installed_us),
    })
}
