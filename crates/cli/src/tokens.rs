//! `tabos token create|list|revoke|whoami`: credentials.

use tabos_client::proto;

use crate::NodeAddr;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Create a credential and print its token (shown once)
    Create {
        /// Realm it acts for [default: yours; operators: any]
        #[arg(long, default_value = "")]
        realm: String,
        /// fs user it acts as [default: root for admin, else the role's name]
        #[arg(long)]
        user: Option<String>,
        /// reader, member, admin, or operator (operators only)
        #[arg(long, default_value = "member", value_parser = |s: &str| proto::Role::parse("role", s))]
        role: proto::Role,
        /// Lifetime, e.g. 90s, 30m, 12h, 7d [default: until revoked]
        #[arg(long)]
        ttl: Option<String>,
        /// A note shown by `token list`
        #[arg(long, default_value = "")]
        note: String,
        /// Limit it to mailboxes: space-separated `send:MAILBOX` and
        /// `recv:MAILBOX` grants; it may then send and receive there and do
        /// nothing else (no names, files, procs, SQL or procedures). Or
        /// `metrics` (with --role operator): it may read /metrics and
        /// nothing else, for a Prometheus server [default: all the role
        /// allows]
        #[arg(long, default_value = "", value_name = "GRANTS")]
        scope: String,
        /// Also save it as this context of the credentials file (the
        /// current context stays as it is, unless --use)
        #[arg(long, value_name = "CONTEXT")]
        save_as: Option<String>,
        /// With --save-as: make the saved context the current one
        #[arg(long = "use", requires = "save_as")]
        use_it: bool,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// List credentials (never their tokens)
    List {
        /// Only this realm's [default: yours; operators: every realm's]
        #[arg(long, default_value = "")]
        realm: String,
        /// Include procs' credentials
        #[arg(long)]
        procs: bool,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Revoke a credential by its id: it authenticates nothing from now on
    Revoke {
        /// The credential's id (from `token list`)
        id: String,
        #[command(flatten)]
        node: NodeAddr,
    },
    /// Show the credential in use: realm, user, role
    Whoami {
        #[command(flatten)]
        node: NodeAddr,
    },
}

/// Parses a duration such as `90s`, `30m`, `12h`, `7d` or `500ms` into
/// milliseconds.
pub fn parse_ttl(s: &str) -> anyhow::Result<u64> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| {
        anyhow::anyhow!("--ttl {s:?}: expected a number and a unit (ms, s, m, h, d)")
    })?;
    let ms = match unit {
        "ms" => 1,
        "s" | "" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => anyhow::bail!("--ttl {s:?}: the unit must be ms, s, m, h or d"),
    };
    let total = n
        .checked_mul(ms)
        .filter(|&t| t > 0)
        .ok_or_else(|| anyhow::anyhow!("--ttl {s:?} is out of range"))?;
    Ok(total)
}

/// A time as RFC 3339 to the second (UTC), as kubectl and etcdctl show
/// times; `--json` has the µs and the full RFC 3339 too.
fn time(us: i64) -> String {
    tabos_store::rfc3339(us, false)
}

fn row(t: &proto::TokenInfo) -> Vec<String> {
    vec![
        t.id.clone(),
        if t.realm.is_empty() {
            "*".into()
        } else {
            t.realm.clone()
        },
        t.user.clone(),
        t.role().name().to_string(),
        t.pid.clone(),
        time(t.created_us),
        t.expires_us.map_or_else(|| "never".into(), time),
        t.revoked_us.map_or_else(String::new, time),
        t.scope.clone(),
        t.note.clone(),
    ]
}

fn json(t: &proto::TokenInfo) -> serde_json::Value {
    serde_json::json!({
        "id": t.id, "realm": t.realm, "user": t.user, "role": t.role().name(),
        "pid": t.pid, "created_us": t.created_us, "expires_us": t.expires_us,
        "revoked_us": t.revoked_us, "note": t.note, "scope": t.scope,
        "created": (t.created_us != 0).then(|| crate::output::rfc3339(t.created_us)),
        "expires": t.expires_us.map(crate::output::rfc3339),
        "revoked": t.revoked_us.map(crate::output::rfc3339),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::runtime()?.block_on(async {
        match args.command {
            Command::Create {
                realm,
                user,
                role,
                ttl,
                note,
                scope,
                save_as,
                use_it,
                node,
            } => {
                let ttl_ms = ttl.as_deref().map(parse_ttl).transpose()?.unwrap_or(0);
                let mut c = node.connect().await?;
                let created = c
                    .create_token(proto::CreateTokenRequest {
                        realm,
                        user: user.unwrap_or_default(),
                        role: role.into(),
                        ttl_ms,
                        note,
                        scope,
                    })
                    .await?;
                let info = created.info.unwrap_or_default();
                if let Some(name) = save_as {
                    let path = crate::credentials::File::save_context(
                        &name,
                        crate::credentials::Context {
                            addr: node.addr()?,
                            realm: info.realm.clone(),
                            token: created.token.clone(),
                            tls_ca: node
                                .tls_ca
                                .as_ref()
                                .map(|p| p.display().to_string())
                                .unwrap_or_default(),
                        },
                        use_it,
                    )?;
                    let current = crate::credentials::File::load()?.current == name;
                    eprintln!(
                        "saved as context {name}{} in {}{}",
                        if current { " (current)" } else { "" },
                        path.display(),
                        if current {
                            String::new()
                        } else {
                            format!("; use it with --context {name}, or make it current: tabos context use {name}")
                        }
                    );
                }
                if crate::output::json() {
                    let mut v = json(&info);
                    v["token"] = created.token.into();
                    crate::output::doc(&v);
                } else {
                    eprintln!(
                        "credential {} for realm {} as user {}, role {} (shown once, keep it safe):",
                        info.id,
                        if info.realm.is_empty() { "*" } else { &info.realm },
                        info.user,
                        info.role()
                    );
                    outln!("{}", created.token);
                }
            }
            Command::List {
                realm,
                procs,
                node,
            } => {
                let mut c = node.connect().await?;
                let list = c.list_tokens(&realm, procs).await?;
                if crate::output::json() {
                    let v: Vec<_> = list.iter().map(json).collect();
                    crate::output::doc(&serde_json::Value::Array(v));
                } else {
                    let cols = [
                        "id", "realm", "user", "role", "pid", "created", "expires", "revoked",
                        "scope", "note",
                    ];
                    let rows: Vec<_> = list.iter().map(row).collect();
                    out!("{}", crate::output::table(&cols, &rows));
                }
            }
            Command::Revoke { id, node } => {
                let mut c = node.connect().await?;
                c.revoke_token(&id).await?;
                crate::output::emit(
                    || format!("credential {id} revoked"),
                    || serde_json::json!({"id": id, "revoked": true}),
                );
            }
            Command::Whoami { node } => {
                let mut c = node.connect().await?;
                let me = c.who_am_i().await?;
                crate::output::emit(
                    || {
                        let realm = if me.realm.is_empty() {
                            "(every realm: an operator)"
                        } else {
                            me.realm.as_str()
                        };
                        let mut lines = vec![
                            format!("credential {}", me.id),
                            format!("realm      {realm}"),
                            format!("user       {}", me.user),
                            format!("role       {}", me.role().name()),
                        ];
                        if !me.pid.is_empty() {
                            lines.push(format!("proc       {}", me.pid));
                        }
                        if !me.scope.is_empty() {
                            lines.push(format!("scope      {}", me.scope));
                        }
                        if let Some(e) = me.expires_us {
                            lines.push(format!("expires    {}", crate::output::rfc3339(e)));
                        }
                        lines.join("\n")
                    },
                    || json(&me),
                );
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_parse() {
        assert_eq!(parse_ttl("90s").unwrap(), 90_000);
        assert_eq!(parse_ttl("2h").unwrap(), 7_200_000);
        assert_eq!(parse_ttl("500ms").unwrap(), 500);
        assert_eq!(parse_ttl("7d").unwrap(), 604_800_000);
        assert_eq!(parse_ttl("5").unwrap(), 5_000);
        for bad in ["", "0s", "h", "3y", "-1s", "99999999999999999999d"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}
