//! Inputs cut into splits, and the reader of one split.
//!
//! [`plan`] walks the inputs (a file, or a directory walked in name order,
//! regular files only — symlinks are not followed, so a walk cannot loop or
//! leave the tree) and cuts each file into splits of about `split_bytes`.
//! [`read_lines`] streams the lines of one split: a split owns every line
//! that starts at an offset in `[offset, offset + len)`; it reads past its
//! end to finish its last line and, unless it starts the file, skips the
//! partial line it starts in (which belongs to the split before).

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::{io, Error, Result};

/// Most files one job takes.
pub const FILES_MAX: usize = 1_000_000;
/// Smallest split size accepted.
pub const SPLIT_BYTES_MIN: u64 = 4 << 10;
/// Longest line handed to a map function; a longer line is handed in
/// pieces of this size (a single huge line must not need unbounded memory).
pub const LINE_BYTES_MAX: usize = 1 << 20;
/// Largest piece [`read_owned`] hands over from a file.
pub const OWNED_PIECE_BYTES: usize = 1 << 20;

/// A byte range of one input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
}

/// Bytes at the start of a file looked at to tell text from binary.
pub const SNIFF_BYTES: usize = 8 << 10;

/// The splits of `inputs`, in order, each about `split_bytes` long (the
/// last of a file shorter; an empty file gives no split). Strict: a file
/// or directory that cannot be read is an error.
pub fn plan(inputs: &[PathBuf], split_bytes: u64) -> Result<Vec<Split>> {
    check_split_bytes(split_bytes)?;
    let mut walk = Walk::default();
    for input in inputs {
        walk.walk(input)?;
    }
    match walk.skipped.into_iter().next() {
        Some(s) => Err(Error::Io {
            path: s.path.display().to_string(),
            source: std::io::Error::other(s.why),
        }),
        None => Ok(cut(walk.files, split_bytes)),
    }
}

/// Whose eyes a job's inputs are planned with: what the mappers can read
/// is what they will be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// This process, as it is.
    Me,
    /// An unprivileged uid with no supplementary groups — how a confined
    /// proc of a realm reads (the node runs it as that uid). Needs this
    /// process to be root; see [`as_reader`].
    Uid(u32),
}

/// An input left out of a job, and why (the walk goes on without it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

/// What [`plan_as`] found: the splits, and the inputs it had to leave out.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    pub splits: Vec<Split>,
    pub skipped: Vec<Skipped>,
}

/// The one line that tells what was left out: "skipped 3 unreadable
/// inputs, e.g. /usr/share/polkit-1/rules.d: permission denied".
pub fn skipped_summary(skipped: &[Skipped]) -> Option<String> {
    let first = skipped.first()?;
    let n = skipped.len();
    Some(format!(
        "skipped {n} unreadable input{}, e.g. {}: {}",
        if n == 1 { "" } else { "s" },
        first.path.display(),
        first.why
    ))
}

/// [`plan`] as `reader` sees the inputs: a file or directory it cannot
/// read — for want of permission, gone since it was listed, not a file
/// that can be opened — is left out and listed in [`Planned::skipped`],
/// never an error. If `text_only`, files that do not look like text (a
/// NUL byte in their first [`SNIFF_BYTES`]: grep's test, which also
/// catches compressed files) are left out too, silently.
pub fn plan_as(
    inputs: &[PathBuf],
    split_bytes: u64,
    text_only: bool,
    reader: Reader,
) -> Result<Planned> {
    check_split_bytes(split_bytes)?;
    as_reader(reader, || {
        let mut walk = Walk::default();
        for input in inputs {
            walk.walk(input)?;
        }
        let Walk {
            mut files,
            mut skipped,
        } = walk;
        // Opened, as the mappers will open them — tens of thousands of
        // files for a source tree, so on a few threads (made by this one,
        // they check with its identity).
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, PLAN_THREADS_MAX);
        let per_thread = files.len().div_ceil(threads).max(PLAN_FILES_PER_THREAD_MIN);
        let opened: Vec<Walk> = std::thread::scope(|s| {
            let checks: Vec<_> = files
                .chunks(per_thread)
                .map(|chunk| s.spawn(move || open_all(chunk, text_only)))
                .collect();
            checks
                .into_iter()
                .map(|c| {
                    c.join()
                        .map_err(|_| Error::Invalid("planning the inputs failed".into()))
                })
                .collect::<Result<_>>()
        })?;
        files = Vec::with_capacity(files.len());
        for o in opened {
            files.extend(o.files);
            skipped.extend(o.skipped);
        }
        Ok(Planned {
            splits: cut(files, split_bytes),
            skipped,
        })
    })?
}

/// Most threads [`plan_as`] opens the inputs on.
const PLAN_THREADS_MAX: usize = 4;
/// Fewest inputs worth a thread of their own in [`plan_as`].
const PLAN_FILES_PER_THREAD_MIN: usize = 2_048;

/// Opens each of `files` as a mapper will: those it can (and, if
/// `text_only`, that look like text) are kept, those it cannot skipped.
fn open_all(files: &[(PathBuf, u64)], text_only: bool) -> Walk {
    let mut kept = Vec::with_capacity(files.len());
    let mut skipped = Vec::new();
    for (path, len) in files {
        match File::open(path) {
            Ok(f) => {
                if !text_only || looks_like_text(f) {
                    kept.push((path.clone(), *len));
                }
            }
            Err(e) => skipped.push(Skipped {
                path: path.clone(),
                why: reason(&e),
            }),
        }
    }
    Walk {
        files: kept,
        skipped,
    }
}

fn check_split_bytes(split_bytes: u64) -> Result<()> {
    if split_bytes < SPLIT_BYTES_MIN {
        return Err(Error::Invalid(format!(
            "a split is at least {SPLIT_BYTES_MIN} bytes"
        )));
    }
    Ok(())
}

/// An I/O error as a person reads it ("permission denied", not
/// "Permission denied (os error 13)").
fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::NotFound => "gone (removed while the job was planned)".into(),
        _ => e.to_string(),
    }
}

/// Runs `f` with `reader`'s file-system identity: for [`Reader::Uid`], on
/// a thread of its own whose file-system uid and gid are `uid` and whose
/// supplementary groups are none — set with the raw system calls, which
/// (unlike glibc's wrappers of `setgroups`) change the calling thread
/// only. Dropping the file-system uid from 0 also drops the capabilities
/// that bypass permission checks, so the kernel checks every open as it
/// will for the proc (ACLs included). The thread ends with `f`, and its
/// credentials with it.
pub fn as_reader<T: Send>(reader: Reader, f: impl FnOnce() -> T + Send) -> Result<T> {
    let Reader::Uid(uid) = reader else {
        return Ok(f());
    };
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: these system calls take integers (and a null list)
            // and change only the credentials of this thread, which runs
            // nothing but `f` and then ends.
            let became = unsafe {
                libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) == 0
                    && {
                        libc::syscall(libc::SYS_setfsgid, uid as usize);
                        libc::syscall(libc::SYS_setfsuid, uid as usize);
                        // Each returns the previous value: asking again
                        // with an invalid id tells whether it took.
                        libc::syscall(libc::SYS_setfsuid, u32::MAX as usize) == uid as libc::c_long
                            && libc::syscall(libc::SYS_setfsgid, u32::MAX as usize)
                                == uid as libc::c_long
                    }
            };
            if !became {
                return Err(Error::Invalid(format!(
                    "cannot check the inputs as uid {uid}: {}",
                    std::io::Error::last_os_error()
                )));
            }
            Ok(f())
        })
        .join()
        .map_err(|_| Error::Invalid("planning the inputs failed".into()))?
    })
}

/// Files `(path, size)`, in order, cut into splits of `split_bytes` (the
/// last of a file shorter; an empty file gives none).
pub fn cut(files: Vec<(PathBuf, u64)>, split_bytes: u64) -> Vec<Split> {
    let mut splits = Vec::new();
    for (path, size) in files {
        let mut offset = 0;
        while offset < size {
            let len = split_bytes.min(size - offset);
            splits.push(Split {
                path: path.clone(),
                offset,
                len,
            });
            offset += len;
        }
    }
    splits
}

fn looks_like_text(f: File) -> bool {
    use std::io::Read;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    match f.take(SNIFF_BYTES as u64).read_to_end(&mut head) {
        Ok(_) => !head.contains(&0),
        Err(_) => false,
    }
}

/// Splits packed, in order, into map tasks of about `task_bytes` each
/// (Hadoop's combined input splits): many small files make one task, not
/// one proc each. A task never has more than [`TASK_SPLITS_MAX`] splits.
pub fn pack(splits: Vec<Split>, task_bytes: u64) -> Vec<Vec<Split>> {
    let mut tasks: Vec<Vec<Split>> = Vec::new();
    let mut bytes = 0u64;
    for s in splits {
        let full = tasks
            .last()
            .is_none_or(|t| bytes >= task_bytes || t.len() >= TASK_SPLITS_MAX);
        if full {
            tasks.push(Vec::new());
            bytes = 0;
        }
        bytes += s.len;
        tasks.last_mut().expect("pushed above").push(s);
    }
    tasks
}

/// Most splits in one map task.
pub const TASK_SPLITS_MAX: usize = 100_000;

/// A map task's splits as bytes: per split `[offset u64][len u64]
/// [path_len u32][path]`, little-endian (paths are bytes, any encoding).
pub fn encode_task(splits: &[Split]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in splits {
        let p = s.path.as_os_str().as_encoded_bytes();
        out.extend_from_slice(&s.offset.to_le_bytes());
        out.extend_from_slice(&s.len.to_le_bytes());
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// Decodes [`encode_task`]'s bytes.
pub fn decode_task(mut bytes: &[u8]) -> Result<Vec<Split>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    let cut = || Error::Corrupt("a map task's split list is cut".into());
    while !bytes.is_empty() {
        if bytes.len() < 20 || out.len() >= TASK_SPLITS_MAX {
            return Err(cut());
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let (offset, len) = (u64_at(0), u64_at(8));
        let n = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]) as usize;
        if bytes.len() < 20 + n || n == 0 {
            return Err(cut());
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes[20..20 + n]));
        out.push(Split { path, offset, len });
        bytes = &bytes[20 + n..];
    }
    Ok(out)
}

/// A walk over inputs: the regular files found, with their sizes, and
/// what could not be looked at.
#[derive(Default)]
struct Walk {
    files: Vec<(PathBuf, u64)>,
    skipped: Vec<Skipped>,
}

impl Walk {
    /// Regular files under `path` (itself if a file), in name order.
    fn walk(&mut self, path: &Path) -> Result<()> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => return self.skip(path, &e),
        };
        if meta.is_file() {
            self.file(path.to_path_buf(), meta.len())?;
        } else if meta.is_dir() {
            self.walk_dir(path)?;
        }
        // Symlinks, sockets, devices: not inputs.
        Ok(())
    }

    /// The regular files under directory `dir`, in name order. An entry's
    /// kind comes with the listing and a file's size from a look-up
    /// relative to the directory: no walk of its whole path per entry.
    fn walk_dir(&mut self, dir: &Path) -> Result<()> {
        let listed = std::fs::read_dir(dir).and_then(|d| d.collect::<std::io::Result<Vec<_>>>());
        let mut entries = match listed {
            Ok(entries) => entries,
            Err(e) => return self.skip(dir, &e),
        };
        // Within one directory a path's order is its name's.
        entries.sort_by_cached_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => self.walk_dir(&path)?,
                Ok(t) if t.is_file() => match e.metadata() {
                    Ok(m) => self.file(path, m.len())?,
                    Err(err) => self.skip(&path, &err)?,
                },
                Ok(_) => {} // symlinks, sockets, devices: not inputs
                Err(err) => self.skip(&path, &err)?,
            }
        }
        Ok(())
    }

    fn file(&mut self, path: PathBuf, len: u64) -> Result<()> {
        if self.files.len() >= FILES_MAX {
            return Err(Error::Invalid(format!("more than {FILES_MAX} input files")));
        }
        self.files.push((path, len));
        Ok(())
    }

    fn skip(&mut self, path: &Path, e: &std::io::Error) -> Result<()> {
        if self.skipped.len() >= FILES_MAX {
            return Err(Error::Invalid(format!(
                "more than {FILES_MAX} inputs cannot be read"
            )));
        }
        self.skipped.push(Skipped {
            path: path.to_path_buf(),
            why: reason(e),
        });
        Ok(())
    }
}

/// Calls `f(piece, ends)` with each line (without its '\n') that the
/// split owns, in order; a line longer than [`LINE_BYTES_MAX`] comes in
/// pieces, `ends` set on its last one.
pub fn read_lines(split: &Split, f: impl FnMut(&[u8], bool)) -> Result<()> {
    let path = &split.path;
    let mut file = File::open(path).map_err(io(path))?;
    let pos = first_byte(split);
    file.seek(SeekFrom::Start(pos)).map_err(io(path))?;
    // Most inputs are small files: a buffer no larger than the split
    // (and what finishing its last line may need) spares the allocator.
    let want = (split.len + 1).saturating_add(4096).min(256 << 10) as usize;
    lines_from(BufReader::with_capacity(want, file), split, f).map_err(io(path))
}

/// Calls `f` with the bytes `split` owns — the lines [`read_lines`] would
/// give, with their '\n's — in order, in pieces of at most
/// [`OWNED_PIECE_BYTES`] cut anywhere, not at line ends: for a job that
/// does not care where lines end (a word count, where '\n' is just
/// whitespace), without a copy and a call per line.
pub fn read_owned(split: &Split, f: impl FnMut(&[u8])) -> Result<()> {
    let path = &split.path;
    let mut file = File::open(path).map_err(io(path))?;
    file.seek(SeekFrom::Start(first_byte(split)))
        .map_err(io(path))?;
    let want = (split.len + 1)
        .saturating_add(4096)
        .min(OWNED_PIECE_BYTES as u64) as usize;
    owned_from(BufReader::with_capacity(want, file), split, f).map_err(io(path))
}

/// [`read_owned`] over `bytes`, as [`read_lines_in`] takes them.
pub fn read_owned_in(bytes: &[u8], split: &Split, f: impl FnMut(&[u8])) -> Result<()> {
    owned_from(bytes, split, f).map_err(io(&split.path))
}

/// The bytes `split` owns from `r`, positioned at [`first_byte`]: every
/// byte from its first owned line's start to its end (all in lines that
/// start before it), then the rest of the line its end falls in.
fn owned_from(mut r: impl BufRead, split: &Split, mut f: impl FnMut(&[u8])) -> std::io::Result<()> {
    let end = split.offset + split.len;
    let mut pos = first_byte(split);
    if split.offset > 0 {
        pos += skip_line(&mut r)?;
    }
    let mut last = None;
    while pos < end {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        let take = buf.len().min((end - pos) as usize);
        f(&buf[..take]);
        last = Some(buf[take - 1]);
        r.consume(take);
        pos += take as u64;
    }
    if last.is_none() || last == Some(b'\n') {
        return Ok(()); // nothing owned, or its last line ended at its end
    }
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                f(&buf[..=i]);
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                f(buf);
                r.consume(n);
            }
        }
    }
}

/// Where reading `split` starts: one byte early — if that byte is '\n',
/// the split starts on a line boundary; otherwise the partial line belongs
/// to the split before.
pub fn first_byte(split: &Split) -> u64 {
    split.offset.saturating_sub(1)
}

/// [`read_lines`] over `bytes`, the file's bytes from [`first_byte`] on
/// through (at least) the end of the split's last line — how a mapper
/// reads a split of a file in tabos fs, fetched through the API.
pub fn read_lines_in(bytes: &[u8], split: &Split, f: impl FnMut(&[u8], bool)) -> Result<()> {
    lines_from(bytes, split, f).map_err(io(&split.path))
}

/// The lines of `split` from `r`, positioned at [`first_byte`].
fn lines_from(
    mut r: impl BufRead,
    split: &Split,
    mut f: impl FnMut(&[u8], bool),
) -> std::io::Result<()> {
    let end = split.offset + split.len;
    let mut pos = first_byte(split);
    let mut line = Vec::with_capacity(4096);
    if split.offset > 0 {
        pos += skip_line(&mut r)?;
    }
    // Inside a line longer than one piece: its rest belongs to this split
    // even past the split's end.
    let mut inside = false;
    while inside || pos < end {
        line.clear();
        let (n, complete) = read_piece(&mut r, &mut line)?;
        if n == 0 {
            if inside {
                f(&[], true);
            }
            break;
        }
        pos += n as u64;
        if complete && line.last() == Some(&b'\n') {
            line.pop();
        }
        f(&line, complete);
        inside = !complete;
    }
    Ok(())
}

/// Skips through the next '\n'; the bytes skipped.
fn skip_line(r: &mut impl BufRead) -> std::io::Result<u64> {
    let mut n = 0u64;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(n);
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(n + i as u64 + 1);
            }
            None => {
                let len = buf.len();
                r.consume(len);
                n += len as u64;
            }
        }
    }
}

/// Reads up to the next '\n' (kept) or [`LINE_BYTES_MAX`] bytes; returns
/// the bytes read and whether the line ended (a '\n' or the end of file).
fn read_piece(r: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    let mut n = 0;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((n, true));
        }
        let room = LINE_BYTES_MAX - out.len();
        let take = buf.len().min(room);
        match buf[..take].iter().position(|&b| b == b'\n') {
            Some(i) => {
                out.extend_from_slice(&buf[..=i]);
                r.consume(i + 1);
                return Ok((n + i + 1, true));
            }
            None => {
                out.extend_from_slice(&buf[..take]);
                r.consume(take);
                n += take;
                if out.len() >= LINE_BYTES_MAX {
                    return Ok((n, false));
                }
            }
        }
    }
}
