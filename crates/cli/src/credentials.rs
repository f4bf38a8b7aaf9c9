//! The credentials file: named contexts (address, realm, token), as a
//! kubeconfig holds clusters and users, and where a client command finds
//! its node and credential.
//!
//! Precedence, for each of address and token: the flag (`--addr`,
//! `--token`), then the environment (`TABOS_ADDR`, `TABOS_TOKEN`), then
//! the context (`--context`, `TABOS_CONTEXT`, else the file's current
//! one), then the default address (for the token: none, which the node
//! refuses). The file is `$TABOS_CREDENTIALS`, else
//! `$HOME/.config/tabos/credentials.json`; it is written with mode 0600
//! and replaced whole (write to a temporary file, then rename).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// Largest credentials file read, in bytes.
pub const FILE_BYTES_MAX: u64 = 1 << 20;
/// Longest context name.
pub const NAME_BYTES_MAX: usize = 256;

/// A context name: printable, no spaces, at most [`NAME_BYTES_MAX`] bytes.
fn validate_name(name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= NAME_BYTES_MAX
            && name.chars().all(|c| c.is_ascii_graphic()),
        "a context name is 1 to {NAME_BYTES_MAX} printable characters without spaces, not {name:?}"
    );
    Ok(())
}

/// One context: where a node is and which credential to use there.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Context {
    pub addr: String,
    /// The realm the credential acts for (empty for an operator's);
    /// informational: the node takes the realm from the credential.
    #[serde(default)]
    pub realm: String,
    pub token: String,
    /// A PEM file of the certificate authority (or the node's self-signed
    /// certificate) to trust: the node serves TLS. Empty: plaintext.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tls_ca: String,
}

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct File {
    /// The context used when none is named.
    #[serde(default)]
    pub current: String,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

/// Where the credentials file is.
pub fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TABOS_CREDENTIALS") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/tabos/credentials.json"))
}

impl File {
    /// Reads the file; a missing one is empty.
    pub fn load() -> anyhow::Result<File> {
        let Some(path) = path() else {
            return Ok(File::default());
        };
        let text = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
            Ok(m) if m.len() > FILE_BYTES_MAX => {
                anyhow::bail!("{} is larger than {FILE_BYTES_MAX} bytes", path.display())
            }
            Ok(_) => std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        };
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a tabos credentials file", path.display()))
    }

    /// The named context, or the current one.
    pub fn context(&self, name: Option<&str>) -> anyhow::Result<Option<&Context>> {
        match name {
            Some(n) => self.contexts.get(n).map(Some).ok_or_else(|| {
                anyhow::anyhow!(
                    "no context {n:?} in {} (contexts: {})",
                    path().map_or_else(String::new, |p| p.display().to_string()),
                    self.contexts.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            }),
            None => Ok(self.contexts.get(&self.current)),
        }
    }

    /// Adds or replaces context `name`, and makes it current if `make_current`
    /// (or if there is none yet); writes the file (mode 0600). Returns where.
    pub fn save_context(name: &str, ctx: Context, make_current: bool) -> anyhow::Result<PathBuf> {
        validate_name(name)?;
        let path = path().context("neither TABOS_CREDENTIALS nor HOME is set")?;
        let mut file = File::load()?;
        file.contexts.insert(name.to_string(), ctx);
        if make_current || !file.contexts.contains_key(&file.current) {
            file.current = name.to_string();
        }
        file.write(&path)?;
        Ok(path)
    }

    /// Makes context `name` current.
    pub fn use_context(name: &str) -> anyhow::Result<PathBuf> {
        let path = path().context("neither TABOS_CREDENTIALS nor HOME is set")?;
        let mut file = File::load()?;
        file.context(Some(name))?;
        file.current = name.to_string();
        file.write(&path)?;
        Ok(path)
    }

    /// Removes context `name` (the current one too: then none is current).
    pub fn remove_context(name: &str) -> anyhow::Result<PathBuf> {
        let path = path().context("neither TABOS_CREDENTIALS nor HOME is set")?;
        let mut file = File::load()?;
        file.context(Some(name))?;
        file.contexts.remove(name);
        if file.current == name {
            file.current.clear();
        }
        file.write(&path)?;
        Ok(path)
    }

    fn write(&self, path: &std::path::Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        tabos_node::write_secret(path, serde_json::to_string_pretty(self)?.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    }
}
