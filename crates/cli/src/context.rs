//! `tabos context list|use|rm`: the contexts of the credentials file
//! (`credentials`), as `kubectl config get-contexts|use-context|
//! delete-context` has them. A context's token is never printed.

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// The saved contexts; `*` marks the current one
    List,
    /// Make CONTEXT the current one: commands use it when none is named
    Use { name: String },
    /// Remove CONTEXT (its credential stays valid: `tabos token revoke`
    /// ends it)
    Rm { name: String },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    use crate::credentials::File;
    match args.command {
        Command::List => {
            let file = File::load()?;
            if crate::output::json() {
                let v: Vec<_> = file
                    .contexts
                    .iter()
                    .map(|(name, c)| {
                        serde_json::json!({
                            "name": name, "current": *name == file.current,
                            "addr": c.addr, "realm": c.realm, "tls": !c.tls_ca.is_empty(),
                        })
                    })
                    .collect();
                crate::output::doc(&serde_json::Value::Array(v));
                return Ok(());
            }
            let cols = ["current", "name", "address", "realm", "tls"];
            let rows: Vec<Vec<String>> = file
                .contexts
                .iter()
                .map(|(name, c)| {
                    vec![
                        if *name == file.current { "*" } else { "" }.to_string(),
                        name.clone(),
                        c.addr.clone(),
                        if c.realm.is_empty() {
                            "* (operator)".to_string()
                        } else {
                            c.realm.clone()
                        },
                        if c.tls_ca.is_empty() { "no" } else { "yes" }.to_string(),
                    ]
                })
                .collect();
            out!("{}", crate::output::table(&cols, &rows));
        }
        Command::Use { name } => {
            let path = File::use_context(&name)?;
            crate::output::emit(
                || format!("current context: {name} (in {})", path.display()),
                || serde_json::json!({"current": name}),
            );
        }
        Command::Rm { name } => {
            let path = File::remove_context(&name)?;
            crate::output::emit(
                || format!("context {name} removed from {}", path.display()),
                || serde_json::json!({"removed": name}),
            );
        }
    }
    Ok(())
}
