//! One read-only preopened directory for a wasm proc (issue 41, item 1):
//! the uploaded code it runs in, as WASI preview1 file descriptor 3,
//! named `.` so that relative paths resolve in it — what a WASI program
//! built by any toolchain finds with `fd_prestat_get` and opens with
//! `path_open`.
//!
//! Nothing beyond that directory is reachable: every open is an
//! `openat2(2)` beneath it (`RESOLVE_BENEATH`: no `..` out of it, no
//! absolute path, no symbolic link that leads out, no magic link), and
//! every open is read-only — a creation, truncation, append or a request
//! for write rights is `EROFS`/`ENOTCAPABLE`. A proc holds at most
//! [`OPEN_MAX`] descriptors; reads are bounded by the guest's buffers.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Descriptors a proc may hold open in its directory at once.
pub const OPEN_MAX: usize = 64;
/// The preopened directory's descriptor.
pub const PREOPEN_FD: i32 = 3;
/// Its name as the guest sees it.
const PREOPEN_NAME: &str = ".";
/// Longest path a guest may pass.
const PATH_BYTES_MAX: u32 = 4096;

// The preview1 errno values used here.
pub(crate) const EACCES: i32 = 2;
pub(crate) const EBADF: i32 = 8;
pub(crate) const EINVAL: i32 = 28;
pub(crate) const EIO: i32 = 29;
pub(crate) const EISDIR: i32 = 31;
pub(crate) const ELOOP: i32 = 32;
pub(crate) const EMFILE: i32 = 33;
pub(crate) const ENAMETOOLONG: i32 = 37;
pub(crate) const ENOENT: i32 = 44;
pub(crate) const ENOTDIR: i32 = 54;
pub(crate) const EROFS: i32 = 69;
pub(crate) const ENOTCAPABLE: i32 = 76;

// Preview1 flags and file types.
const OFLAGS_CREAT: i32 = 1;
const OFLAGS_DIRECTORY: i32 = 2;
const OFLAGS_EXCL: i32 = 4;
const OFLAGS_TRUNC: i32 = 8;
const LOOKUP_SYMLINK_FOLLOW: i32 = 1;
const FDFLAGS_APPEND: i32 = 1;
const FILETYPE_UNKNOWN: u8 = 0;
const FILETYPE_DIRECTORY: u8 = 3;
const FILETYPE_REGULAR: u8 = 4;
const FILETYPE_SYMLINK: u8 = 7;

/// The read rights a descriptor of the directory carries (every right
/// that only reads: fd_read, seek, fdstat, tell, readdir, path_open,
/// filestat and path_filestat gets…).
const READ_RIGHTS: u64 = (1 << 1)
    | (1 << 2)
    | (1 << 3)
    | (1 << 5)
    | (1 << 9)
    | (1 << 13)
    | (1 << 14)
    | (1 << 15)
    | (1 << 18)
    | (1 << 21);

/// An open descriptor.
#[derive(Debug)]
struct Open {
    file: std::fs::File,
    dir: bool,
}

/// The directory and what the guest holds open in it.
#[derive(Debug)]
pub struct Tree {
    root: std::fs::File,
    open: HashMap<i32, Open>,
    next: i32,
}

/// A file's metadata as preview1's `filestat` lays it out (64 bytes).
pub(crate) fn filestat(m: &std::fs::Metadata) -> [u8; 64] {
    use std::os::unix::fs::MetadataExt;
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&m.dev().to_le_bytes());
    b[8..16].copy_from_slice(&m.ino().to_le_bytes());
    b[16] = filetype(&m.file_type());
    b[24..32].copy_from_slice(&m.nlink().to_le_bytes());
    b[32..40].copy_from_slice(&m.size().to_le_bytes());
    let ns = |s: i64, n: i64| (s.max(0) as u64).saturating_mul(1_000_000_000) + n.max(0) as u64;
    b[40..48].copy_from_slice(&ns(m.atime(), m.atime_nsec()).to_le_bytes());
    b[48..56].copy_from_slice(&ns(m.mtime(), m.mtime_nsec()).to_le_bytes());
    b[56..64].copy_from_slice(&ns(m.ctime(), m.ctime_nsec()).to_le_bytes());
    b
}

fn filetype(t: &std::fs::FileType) -> u8 {
    if t.is_dir() {
        FILETYPE_DIRECTORY
    } else if t.is_file() {
        FILETYPE_REGULAR
    } else if t.is_symlink() {
        FILETYPE_SYMLINK
    } else {
        FILETYPE_UNKNOWN
    }
}

/// An OS error as a preview1 errno.
fn errno(e: &std::io::Error) -> i32 {
    match e.raw_os_error() {
        Some(libc::ENOENT) => ENOENT,
        Some(libc::EACCES) | Some(libc::EPERM) => EACCES,
        Some(libc::ENOTDIR) => ENOTDIR,
        Some(libc::EISDIR) => EISDIR,
        Some(libc::ELOOP) => ELOOP,
        Some(libc::ENAMETOOLONG) => ENAMETOOLONG,
        // Out of the directory (RESOLVE_BENEATH).
        Some(libc::EXDEV) => ENOTCAPABLE,
        Some(libc::EINVAL) => EINVAL,
        _ => EIO,
    }
}

impl Tree {
    /// The directory at `dir` on the host, preopened.
    pub fn open(dir: &Path) -> std::io::Result<Tree> {
        use std::os::unix::fs::OpenOptionsExt;
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        Ok(Tree {
            root,
            open: HashMap::new(),
            next: PREOPEN_FD + 1,
        })
    }

    /// `fd_prestat_get`'s name length for `fd`, if it is the preopen.
    pub fn prestat(&self, fd: i32) -> Option<u32> {
        (fd == PREOPEN_FD).then_some(PREOPEN_NAME.len() as u32)
    }

    pub fn prestat_name(&self, fd: i32) -> Option<&'static [u8]> {
        (fd == PREOPEN_FD).then_some(PREOPEN_NAME.as_bytes())
    }

    fn dir_of(&self, fd: i32) -> Result<&std::fs::File, i32> {
        if fd == PREOPEN_FD {
            return Ok(&self.root);
        }
        match self.open.get(&fd) {
            Some(o) if o.dir => Ok(&o.file),
            Some(_) => Err(ENOTDIR),
            None => Err(EBADF),
        }
    }

    /// `openat2` of `path` beneath directory descriptor `fd`, read-only.
    fn open_beneath(&self, fd: i32, path: &[u8], flags: i32, follow: bool) -> Result<OwnedFd, i32> {
        if path.len() as u32 > PATH_BYTES_MAX {
            return Err(ENAMETOOLONG);
        }
        let dir = self.dir_of(fd)?;
        let path = CString::new(path).map_err(|_| EINVAL)?;
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
        how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | flags | nofollow) as u64;
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: openat2 reads `path` (NUL-terminated) and `how` (its
        // size given) and returns a new descriptor or -1.
        let got = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if got < 0 {
            return Err(errno(&std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor openat2 just returned, owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(got as i32) })
    }

    /// `path_open`: a new descriptor, or the errno.
    pub fn path_open(
        &mut self,
        fd: i32,
        lookup: i32,
        path: &[u8],
        oflags: i32,
        rights: i64,
        fdflags: i32,
    ) -> Result<i32, i32> {
        if oflags & (OFLAGS_CREAT | OFLAGS_EXCL | OFLAGS_TRUNC) != 0 {
            return Err(EROFS);
        }
        if fdflags & FDFLAGS_APPEND != 0 {
            return Err(EROFS);
        }
        // The rights asked are not checked: toolchains ask for every right
        // by default, also to read. What is granted is READ_RIGHTS, and no
        // call here writes.
        let _ = rights;
        if self.open.len() >= OPEN_MAX {
            return Err(EMFILE);
        }
        let dir_flag = if oflags & OFLAGS_DIRECTORY != 0 {
            libc::O_DIRECTORY
        } else {
            0
        };
        let fd_new = self.open_beneath(fd, path, dir_flag, lookup & LOOKUP_SYMLINK_FOLLOW != 0)?;
        let file = std::fs::File::from(fd_new);
        let dir = file.metadata().map_err(|e| errno(&e))?.is_dir();
        let n = self.next;
        self.next += 1;
        self.open.insert(n, Open { file, dir });
        Ok(n)
    }

    /// `path_filestat_get`.
    pub fn path_filestat(&self, fd: i32, lookup: i32, path: &[u8]) -> Result<[u8; 64], i32> {
        let got = self.open_beneath(fd, path, libc::O_PATH, lookup & LOOKUP_SYMLINK_FOLLOW != 0)?;
        let f = std::fs::File::from(got);
        f.metadata().map(|m| filestat(&m)).map_err(|e| errno(&e))
    }

    /// `fd_filestat_get`.
    pub fn fd_filestat(&self, fd: i32) -> Result<[u8; 64], i32> {
        let f = if fd == PREOPEN_FD {
            &self.root
        } else {
            &self.open.get(&fd).ok_or(EBADF)?.file
        };
        f.metadata().map(|m| filestat(&m)).map_err(|e| errno(&e))
    }

    /// `fd_fdstat_get`: (filetype, rights).
    pub fn fdstat(&self, fd: i32) -> Result<(u8, u64), i32> {
        if fd == PREOPEN_FD {
            return Ok((FILETYPE_DIRECTORY, READ_RIGHTS));
        }
        let o = self.open.get(&fd).ok_or(EBADF)?;
        let t = if o.dir {
            FILETYPE_DIRECTORY
        } else {
            FILETYPE_REGULAR
        };
        Ok((t, READ_RIGHTS))
    }

    /// `fd_read` into `bufs`, in order; the bytes read.
    pub fn read(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        let o = self.open.get_mut(&fd).ok_or(EBADF)?;
        if o.dir {
            return Err(EISDIR);
        }
        o.file.read(buf).map_err(|e| errno(&e))
    }

    /// `fd_seek`: the new offset.
    pub fn seek(&mut self, fd: i32, offset: i64, whence: i32) -> Result<u64, i32> {
        let o = self.open.get_mut(&fd).ok_or(EBADF)?;
        let to = match whence {
            0 => SeekFrom::Start(u64::try_from(offset).map_err(|_| EINVAL)?),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            _ => return Err(EINVAL),
        };
        o.file.seek(to).map_err(|e| errno(&e))
    }

    /// `fd_close`.
    pub fn close(&mut self, fd: i32) -> Result<(), i32> {
        if fd == PREOPEN_FD {
            // The preopen stays: a program that closes it loses it only
            // in its own view.
            return Ok(());
        }
        self.open.remove(&fd).map(drop).ok_or(EBADF)
    }

    /// `fd_readdir`: the directory's entries from `cookie` on, as
    /// preview1 dirents, into at most `cap` bytes (the last one cut, as
    /// the specification has it: the guest reads again with a larger
    /// buffer).
    pub fn readdir(&self, fd: i32, cookie: u64, cap: usize) -> Result<Vec<u8>, i32> {
        use std::os::unix::fs::DirEntryExt;
        let dir = self.dir_of(fd)?;
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|e| errno(&e))?;
        let mut names: Vec<(Vec<u8>, u64, u8)> = vec![
            (b".".to_vec(), 0, FILETYPE_DIRECTORY),
            (b"..".to_vec(), 0, FILETYPE_DIRECTORY),
        ];
        for e in listing {
            let e = e.map_err(|e| errno(&e))?;
            use std::os::unix::ffi::OsStrExt;
            let t = e
                .file_type()
                .map(|t| filetype(&t))
                .unwrap_or(FILETYPE_UNKNOWN);
            names.push((e.file_name().as_bytes().to_vec(), e.ino(), t));
        }
        names[2..].sort();
        let mut out = Vec::new();
        for (i, (name, ino, t)) in names.iter().enumerate().skip(cookie as usize) {
            if out.len() >= cap {
                break;
            }
            let mut d = Vec::with_capacity(24 + name.len());
            d.extend_from_slice(&(i as u64 + 1).to_le_bytes());
            d.extend_from_slice(&ino.to_le_bytes());
            d.extend_from_slice(&(name.len() as u32).to_le_bytes());
            d.push(*t);
            d.extend_from_slice(&[0, 0, 0]);
            d.extend_from_slice(name);
            out.extend_from_slice(&d);
        }
        out.truncate(cap);
        Ok(out)
    }
}
