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
/// last of a file shorter; an empty file gives no split).
pub fn plan(inputs: &[PathBuf], split_bytes: u64) -> Result<Vec<Split>> {
    plan_with(inputs, split_bytes, false)
}

/// [`plan`], leaving out, if `text_only`, files that do not look like
/// text: a NUL byte in their first [`SNIFF_BYTES`] (grep's test; it also
/// catches compressed files) — or files that cannot be read.
pub fn plan_with(inputs: &[PathBuf], split_bytes: u64, text_only: bool) -> Result<Vec<Split>> {
    if split_bytes < SPLIT_BYTES_MIN {
        return Err(Error::Invalid(format!(
            "a split is at least {SPLIT_BYTES_MIN} bytes"
        )));
    }
    let mut files = Vec::new();
    for input in inputs {
        walk(input, &mut files)?;
    }
    if text_only {
        files.retain(|(path, _)| looks_like_text(path));
    }
    Ok(cut(files, split_bytes))
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

fn looks_like_text(path: &Path) -> bool {
    use std::io::Read;
    let Ok(f) = File::open(path) else {
        return false;
    };
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

/// Regular files under `path` (itself if a file), with their sizes.
fn walk(path: &Path, out: &mut Vec<(PathBuf, u64)>) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    if meta.is_file() {
        if out.len() >= FILES_MAX {
            return Err(Error::Invalid(format!("more than {FILES_MAX} input files")));
        }
        out.push((path.to_path_buf(), meta.len()));
    } else if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io(path))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()
            .map_err(io(path))?;
        entries.sort();
        for e in entries {
            walk(&e, out)?;
        }
    }
    // Symlinks, sockets, devices: not inputs.
    Ok(())
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
