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

/// The splits of `inputs`, in order, each about `split_bytes` long (the
/// last of a file shorter; an empty file gives no split).
pub fn plan(inputs: &[PathBuf], split_bytes: u64) -> Result<Vec<Split>> {
    if split_bytes < SPLIT_BYTES_MIN {
        return Err(Error::Invalid(format!(
            "a split is at least {SPLIT_BYTES_MIN} bytes"
        )));
    }
    let mut files = Vec::new();
    for input in inputs {
        walk(input, &mut files)?;
    }
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
    Ok(splits)
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
pub fn read_lines(split: &Split, mut f: impl FnMut(&[u8], bool)) -> Result<()> {
    let path = &split.path;
    let mut file = File::open(path).map_err(io(path))?;
    let end = split.offset + split.len;
    // Start one byte early: if that byte is '\n', the split starts on a
    // line boundary; otherwise the partial line belongs to the split before.
    let mut pos = split.offset.saturating_sub(1);
    file.seek(SeekFrom::Start(pos)).map_err(io(path))?;
    let mut r = BufReader::with_capacity(256 << 10, file);
    let mut line = Vec::with_capacity(4096);
    if split.offset > 0 {
        pos += skip_line(&mut r).map_err(io(path))?;
    }
    // Inside a line longer than one piece: its rest belongs to this split
    // even past the split's end.
    let mut inside = false;
    while inside || pos < end {
        line.clear();
        let (n, complete) = read_piece(&mut r, &mut line).map_err(io(path))?;
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
