//! Code that travels with the request (issue 41, item 1): a file or a
//! directory of the caller's, put into its realm's files under
//! `/code/<hash>/` and named by its content hash, which a spawn names
//! ([`proto::ProcDescriptor::code`]) and the node that runs the proc
//! checks when it materialises the files.
//!
//! The hash is the SHA-256 of a *manifest*: one line per regular file,
//! sorted by path (bytewise), each
//!
//! ```text
//! <x|f> <sha256 of its contents, hex> <path relative to the tree's root>\n
//! ```
//!
//! `x` for a file with any execute bit, `f` otherwise. A single file is a
//! tree of that one file under its own name. Directories are implied by
//! their files (an empty one is not kept); a symbolic link, a device or a
//! name with a control character is refused, so the same tree always has
//! the same hash wherever it is computed (the Python SDK computes it the
//! same way: `tabos.code`).
//!
//! An upload writes the tree under a fresh `/code/.upload-<random>/` and
//! renames it to `/code/<hash>` when every file is there: a tree under its
//! hash is whole, and an upload of a hash already present writes nothing.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Client, Error};

/// Where uploaded code lives in a realm's files.
pub const CODE_DIR: &str = "/code";
/// `/code`'s mode when an upload makes it: anyone of the realm may add to
/// it, only an entry's owner remove it.
pub const CODE_DIR_MODE: i64 = 0o1777;
/// Most files one upload holds.
pub const CODE_FILES_MAX: usize = 10_000;
/// Most bytes one upload holds (its files' contents).
pub const CODE_BYTES_MAX: u64 = 1 << 30;
/// Most bytes of one file's path within its tree.
pub const CODE_PATH_BYTES_MAX: usize = 1024;

/// One file of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path relative to the tree's root, `/`-separated.
    pub path: String,
    pub executable: bool,
    pub size: u64,
    /// SHA-256 of its contents.
    pub sha256: [u8; 32],
}

/// A tree's files and its content hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Sorted by path.
    pub entries: Vec<Entry>,
    /// 64 lowercase hex digits.
    pub hash: String,
}

impl Manifest {
    /// The manifest of `entries` (sorted here).
    pub fn of(mut entries: Vec<Entry>) -> Manifest {
        entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        let mut h = Sha256::new();
        for e in &entries {
            h.update(if e.executable { b"x " } else { b"f " });
            h.update(hex(&e.sha256).as_bytes());
            h.update(b" ");
            h.update(e.path.as_bytes());
            h.update(b"\n");
        }
        Manifest {
            hash: hex(&h.finalize()),
            entries,
        }
    }

    /// Bytes of its files' contents.
    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }

    /// Its directory in the realm's files.
    pub fn dir(&self) -> String {
        format!("{CODE_DIR}/{}", self.hash)
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a tree cannot be uploaded (or a materialised one is not what its
/// hash says).
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: only regular files and directories are uploaded (not a symbolic link, device, socket or pipe)")]
    NotAFile(PathBuf),
    #[error("{0:?}: a file's name must be UTF-8 with no control character, its path at most {CODE_PATH_BYTES_MAX} bytes")]
    BadName(PathBuf),
    #[error("more than {CODE_FILES_MAX} files")]
    TooManyFiles,
    #[error("more than {CODE_BYTES_MAX} bytes")]
    TooBig,
    #[error("{0}: changed while it was uploaded")]
    Changed(PathBuf),
    #[error("the realm has no {CODE_DIR} yet, and this user may not make it: a realm admin makes it (tabos fs mkdir --mode 1777 {CODE_DIR}), or uploads first")]
    NoCodeDir,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CodeError + '_ {
    move |source| CodeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// SHA-256 and size of the file at `path`.
pub fn hash_file(path: &Path) -> Result<([u8; 32], u64), CodeError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((h.finalize().into(), size))
}

/// The manifest of the tree at `root`: a directory's files, or a file as a
/// tree of itself under its name. Symbolic links are refused, not followed
/// (`root` itself may be one: it is what the caller named).
pub fn manifest(root: &Path) -> Result<Manifest, CodeError> {
    let meta = std::fs::metadata(root).map_err(io(root))?;
    let mut entries = Vec::new();
    let mut bytes = 0u64;
    let mut add = |path: &Path, rel: String, m: &std::fs::Metadata| -> Result<(), CodeError> {
        use std::os::unix::fs::PermissionsExt;
        if rel.len() > CODE_PATH_BYTES_MAX || rel.chars().any(char::is_control) {
            return Err(CodeError::BadName(path.to_path_buf()));
        }
        if entries.len() >= CODE_FILES_MAX {
            return Err(CodeError::TooManyFiles);
        }
        let (sha256, size) = hash_file(path)?;
        bytes += size;
        if bytes > CODE_BYTES_MAX {
            return Err(CodeError::TooBig);
        }
        entries.push(Entry {
            path: rel,
            executable: m.permissions().mode() & 0o111 != 0,
            size,
            sha256,
        });
        Ok(())
    };
    if meta.is_file() {
        let name = root
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| CodeError::BadName(root.to_path_buf()))?;
        add(root, name.to_string(), &meta)?;
        return Ok(Manifest::of(entries));
    }
    if !meta.is_dir() {
        return Err(CodeError::NotAFile(root.to_path_buf()));
    }
    let mut dirs = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = dirs.pop() {
        for e in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let e = e.map_err(io(&dir))?;
            let path = e.path();
            let name = e
                .file_name()
                .into_string()
                .map_err(|_| CodeError::BadName(path.clone()))?;
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let m = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            if m.is_dir() {
                dirs.push((path, rel));
            } else if m.is_file() {
                add(&path, rel, &m)?;
            } else {
                return Err(CodeError::NotAFile(path));
            }
        }
    }
    Ok(Manifest::of(entries))
}

impl Client {
    /// Puts the file or directory at `local` into `realm`'s files as
    /// uploaded code (see the module doc) and returns its manifest, whose
    /// hash a spawn names. Written as the credential's user; counted
    /// against the realm's storage quota like any file. A tree already
    /// there under its hash is not written again.
    pub async fn upload_code(&mut self, realm: &str, local: &Path) -> Result<Manifest, Error> {
        let local = local.to_path_buf();
        let m = tokio::task::spawn_blocking({
            let local = local.clone();
            move || manifest(&local)
        })
        .await
        .map_err(|e| CodeError::Io {
            path: local.clone(),
            source: std::io::Error::other(e.to_string()),
        })??;
        let dir = m.dir();
        if self.fs_stat(realm, &dir).await.is_ok() {
            return Ok(m);
        }
        // Every user of the realm uploads into it; the sticky bit keeps
        // each one's trees theirs to remove (as /tmp does).
        if self.fs_stat(realm, CODE_DIR).await.is_err() {
            match self.fs_mkdir(realm, "", CODE_DIR, CODE_DIR_MODE).await {
                Err(e) if e.code() == Some(tonic::Code::PermissionDenied) => {
                    return Err(CodeError::NoCodeDir.into())
                }
                Err(e) if e.code() != Some(tonic::Code::AlreadyExists) => return Err(e),
                _ => {}
            }
        }
        let nonce: u64 = rand_u64();
        let staging = format!("{CODE_DIR}/.upload-{nonce:016x}");
        self.fs_mkdir(realm, "", &staging, 0o755).await?;
        let written = self.write_tree(realm, &local, &staging, &m).await;
        if let Err(e) = written {
            self.remove_tree(realm, &staging).await;
            return Err(e);
        }
        match self.fs_rename(realm, "", &staging, &dir).await {
            Ok(()) => Ok(m),
            // Another upload of the same tree got there first: the same
            // files.
            Err(_) if self.fs_stat(realm, &dir).await.is_ok() => {
                self.remove_tree(realm, &staging).await;
                Ok(m)
            }
            Err(e) => {
                self.remove_tree(realm, &staging).await;
                Err(e)
            }
        }
    }

    /// Writes `m`'s files from `local` under `to`.
    async fn write_tree(
        &mut self,
        realm: &str,
        local: &Path,
        to: &str,
        m: &Manifest,
    ) -> Result<(), Error> {
        let single = std::fs::metadata(local).is_ok_and(|meta| meta.is_file());
        let mut made: std::collections::HashSet<String> = Default::default();
        for e in &m.entries {
            // Its directories, once each.
            let mut at = to.to_string();
            if let Some((dirs, _)) = e.path.rsplit_once('/') {
                for d in dirs.split('/') {
                    at = format!("{at}/{d}");
                    if made.insert(at.clone()) {
                        self.fs_mkdir(realm, "", &at, 0o755).await?;
                    }
                }
            }
            let src = if single {
                local.to_path_buf()
            } else {
                local.join(&e.path)
            };
            let path = format!("{to}/{}", e.path);
            let mode = if e.executable { 0o755 } else { 0o644 };
            self.fs_create(realm, "", &path, mode).await?;
            let mut f = std::fs::File::open(&src).map_err(io(&src))?;
            let mut h = Sha256::new();
            let mut at = 0i64;
            let mut buf = vec![0u8; crate::fs::CHUNK_BYTES];
            loop {
                let n = read_full(&mut f, &mut buf).map_err(io(&src))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                self.fs_write(realm, "", path.as_str(), at, buf[..n].to_vec(), false)
                    .await?;
                at += n as i64;
            }
            // Changed since it was hashed: its name would lie.
            if <[u8; 32]>::from(h.finalize()) != e.sha256 || at as u64 != e.size {
                return Err(CodeError::Changed(src).into());
            }
        }
        Ok(())
    }

    /// Removes a staging tree (best effort: what is left is the realm's to
    /// remove, and counts against its quota until then).
    async fn remove_tree(&mut self, realm: &str, dir: &str) {
        let mut stack = vec![(dir.to_string(), false)];
        while let Some((d, listed)) = stack.pop() {
            if listed {
                let _ = self.fs_rmdir(realm, "", &d).await;
                continue;
            }
            stack.push((d.clone(), true));
            let Ok(listing) = self.fs_readdir(realm, "", &d).await else {
                continue;
            };
            for e in listing.entries {
                let name = e.path.rsplit('/').next().unwrap_or_default();
                let p = format!("{d}/{name}");
                if e.r#type() == crate::proto::FileType::Dir {
                    stack.push((p, false));
                } else {
                    let _ = self.fs_unlink(realm, "", &p).await;
                }
            }
        }
    }
}

/// Reads until `buf` is full or the input ends (a read interrupted by a
/// signal is tried again).
pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trees_hash_is_its_manifests() {
        let dir = std::env::temp_dir().join(format!("tabos-code-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("bin/run.sh"), "echo hi\n").unwrap();
        std::fs::write(dir.join("data.txt"), "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("bin/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let m = manifest(&dir).unwrap();
        let sha = |s: &str| hex(&Sha256::digest(s.as_bytes()));
        let text = format!(
            "x {} bin/run.sh\nf {} data.txt\n",
            sha("echo hi\n"),
            sha("x")
        );
        assert_eq!(m.hash, sha(&text));
        assert_eq!(m.entries.len(), 2);
        assert_eq!(m.bytes(), 9);
        // A file alone is a tree of itself.
        let one = manifest(&dir.join("data.txt")).unwrap();
        assert_eq!(one.hash, sha(&format!("f {} data.txt\n", sha("x"))));
        // A symbolic link is refused, not followed.
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        assert!(matches!(manifest(&dir), Err(CodeError::NotAFile(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
