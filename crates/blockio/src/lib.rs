//! BAIO for tabos (../shared/seeds/003, section 4): a block store in one
//! file or block device that keeps only *ownership and protection* — named
//! segments of physically contiguous blocks, each with an owner — and leaves
//! the layout inside a segment to its user.
//!
//! * [`Device::format`] writes the superblock, the free-block bitmap and an
//!   empty segment table ([`format`]); [`Device::open`] verifies the
//!   superblock's checksum and every table entry's.
//! * [`Device::create_segment`] finds a contiguous free run (first fit from
//!   the bitmap's search hint) and zeroes it — a new segment never shows a
//!   previous owner's bytes.
//! * [`Device::open_segment`] checks the caller's right (the owner's name)
//!   and returns a [`Segment`], whose [`Capability`] every request carries.
//!   A capability names a slot, its generation and a random token; it dies
//!   when the segment is closed or deleted, and a forged one matches nothing.
//! * [`Queue`] submits requests in batches through io_uring and reaps their
//!   completions asynchronously; the data file is opened with O_DIRECT and
//!   buffers are [`AlignedBuf`]s. Each request addresses blocks *within the
//!   segment* and is bounds-checked; each chooses [`CachePolicy::Cached`]
//!   (through the shared [`cache`]) or [`CachePolicy::Uncached`].

pub mod cache;
pub mod format;
mod queue;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use format::{BLOCK_BYTES_MAX, BLOCK_BYTES_MIN, NAME_BYTES_MAX, OWNER_BYTES_MAX};
pub use queue::{AlignedBuf, Completion, Queue, ALIGN, QUEUE_DEPTH_MAX};

use format::{Entry, Superblock, ENTRY_BYTES};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("blockio: {context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("blockio: corrupt device: {0}")]
    Corrupt(String),
    #[error("blockio: {0}")]
    Invalid(String),
    #[error("blockio: {0}")]
    NotFound(String),
    #[error("blockio: {0}")]
    AlreadyExists(String),
    #[error("blockio: no space: {0}")]
    NoSpace(String),
    #[error("blockio: permission denied: {0}")]
    Denied(String),
    #[error("blockio: bad capability: {0}")]
    BadCapability(String),
    #[error(
        "blockio: blocks [{block}, {block}+{count}) are outside the segment of {blocks} blocks"
    )]
    OutOfSegment { block: u64, count: u64, blocks: u64 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// Whether a request goes through the shared block cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachePolicy {
    /// Reads are served from the cache when every block is there and fill
    /// it otherwise; writes go to the device and update the cache.
    Cached,
    /// Straight to the device; a write drops cached copies of its blocks.
    Uncached,
}

/// The right to do I/O on one open segment: what a request carries (BAIO's
/// block descriptor). Plain data, so it can cross to a sandbox as integers;
/// the device accepts it only while the segment is open under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Capability {
    pub slot: u32,
    pub generation: u32,
    pub token: u64,
}

/// Settings of a new device.
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Device size in blocks; `None` on a block device means all of it.
    pub blocks: Option<u64>,
    pub block_size: u32,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            blocks: None,
            block_size: 4096,
        }
    }
}

/// What [`Device::segments`] lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub name: String,
    pub owner: String,
    /// Physical block number of the segment's block 0 (for tools like fio
    /// that address the device directly).
    pub first_block: u64,
    pub blocks: u64,
}

/// What [`Device::copy_to`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCopy {
    /// The copy's size (the device's).
    pub bytes: u64,
    /// What it holds besides holes: metadata and non-zero data.
    pub bytes_written: u64,
    pub segments: u64,
}

/// Bytes [`Device::copy_to`] reads and writes at a time.
const COPY_PIECE_BYTES: usize = 1 << 20;

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub free_blocks: u64,
    pub segments: u64,
}

struct Open {
    slot: u32,
    generation: u32,
    /// Physical first block and length.
    first: u64,
    blocks: u64,
}

struct State {
    sb: Superblock,
    /// One bit per data block, 1 = allocated.
    bitmap: Vec<u64>,
    entries: Vec<Entry>,
    by_name: HashMap<String, u32>,
}

pub(crate) struct Inner {
    path: PathBuf,
    /// O_DIRECT (when the filesystem allows it) for segment data.
    pub(crate) data: File,
    pub(crate) direct: bool,
    /// Buffered, for the superblock, bitmap and table.
    meta: File,
    pub(crate) block_size: u32,
    device_id: u64,
    state: Mutex<State>,
    open: RwLock<HashMap<u64, Open>>,
    pub(crate) cache: cache::Cache,
    tokens: AtomicU64,
    pub(crate) queues: Mutex<Vec<Queue>>,
}

/// An opened block store; cheap to clone, shared by every queue.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("path", &self.inner.path)
            .field("block_size", &self.inner.block_size)
            .field("direct", &self.inner.direct)
            .finish()
    }
}

fn check_name(what: &str, s: &str, max: usize) -> Result<()> {
    if s.is_empty() || s.len() > max || s.bytes().any(|b| b == 0 || b.is_ascii_control()) {
        return Err(Error::Invalid(format!(
            "a {what} is 1..={max} bytes without control characters, not {s:?}"
        )));
    }
    Ok(())
}

fn random_u64() -> Result<u64> {
    let mut s = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `s`.
    let n = unsafe { libc::getrandom(s.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        return Err(io_err("getrandom")(std::io::Error::last_os_error()));
    }
    Ok(u64::from_le_bytes(s))
}

fn device_bytes(f: &File, path: &Path) -> Result<(u64, bool)> {
    let md = f
        .metadata()
        .map_err(io_err(format!("stat {}", path.display())))?;
    if md.file_type().is_block_device() {
        // A block device's size is where a seek to its end lands.
        // SAFETY: lseek on a descriptor we own; it touches no memory.
        let end = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) };
        if end < 0 {
            return Err(io_err(format!("size of {}", path.display()))(
                std::io::Error::last_os_error(),
            ));
        }
        Ok((end as u64, true))
    } else {
        Ok((md.len(), false))
    }
}

/// Zeroes `[offset, offset + len)` of `f`: cheaply where the filesystem or
/// device can (FALLOC_FL_ZERO_RANGE), by writing zeros where it cannot.
fn zero_range(f: &File, offset: u64, len: u64) -> Result<()> {
    // SAFETY: fallocate on a descriptor we own; it touches no memory.
    let rc = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], offset + at)
            .map_err(io_err("zeroing a new segment"))?;
        at += n as u64;
    }
    Ok(())
}

impl Device {
    /// Writes an empty block store to `path` (a file, created or grown to
    /// `opts.blocks` blocks, or a block device). Everything on it is lost.
    pub fn format(path: impl AsRef<Path>, opts: &FormatOptions) -> Result<()> {
        let path = path.as_ref();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(format!("open {}", path.display())))?;
        let (bytes, is_dev) = device_bytes(&f, path)?;
        let bs = u64::from(opts.block_size);
        let blocks = match (opts.blocks, is_dev) {
            (Some(n), true) if n * bs > bytes => {
                return Err(Error::Invalid(format!(
                    "{} holds {} blocks, not {n}",
                    path.display(),
                    bytes / bs
                )))
            }
            (Some(n), _) => n,
            (None, true) => bytes / bs,
            (None, false) => {
                return Err(Error::Invalid(
                    "formatting a file needs its size in blocks".into(),
                ))
            }
        };
        let mut sb = Superblock::layout(opts.block_size, blocks)?;
        sb.device_id = random_u64()?;
        if !is_dev {
            f.set_len(blocks * bs)
                .map_err(io_err(format!("size {}", path.display())))?;
        }
        // Bitmap and table zero, then the superblock last: until it is
        // written, the device is not a block store.
        zero_range(&f, bs, (sb.data_start - 1) * bs)?;
        f.sync_data().map_err(io_err("sync after format"))?;
        f.write_all_at(&sb.encode(), 0)
            .map_err(io_err("write superblock"))?;
        f.sync_data().map_err(io_err("sync superblock"))?;
        Ok(())
    }

    /// Opens a formatted block store, verifying its superblock and segment
    /// table and repairing bitmap bits no segment owns (a crash during
    /// create or delete).
    pub fn open(path: impl AsRef<Path>, cache_blocks: usize) -> Result<Device> {
        let path = path.as_ref();
        let meta = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err(format!("open {}", path.display())))?;
        let mut head = vec![0u8; 4096];
        let n = meta
            .read_at(&mut head, 0)
            .map_err(io_err("read superblock"))?;
        let mut sb = Superblock::decode(&head[..n])?;
        let (bytes, _) = device_bytes(&meta, path)?;
        let bs = u64::from(sb.block_size);
        if bytes < sb.total_blocks * bs {
            return Err(Error::Corrupt(format!(
                "the superblock says {} blocks but {} holds {} bytes",
                sb.total_blocks,
                path.display(),
                bytes
            )));
        }
        let read = |start: u64, blocks: u64| -> Result<Vec<u8>> {
            let mut b = vec![0u8; (blocks * bs) as usize];
            meta.read_exact_at(&mut b, start * bs)
                .map_err(io_err("read metadata"))?;
            Ok(b)
        };
        let table = read(sb.table_start, sb.table_blocks)?;
        let mut entries = Vec::with_capacity(sb.entries as usize);
        let mut by_name = HashMap::new();
        let mut bitmap = vec![0u64; sb.data_blocks.div_ceil(64) as usize];
        for i in 0..sb.entries {
            let at = i as usize * ENTRY_BYTES;
            let e = Entry::decode(i, &table[at..at + ENTRY_BYTES])?;
            if e.used {
                if e.start
                    .checked_add(e.blocks)
                    .is_none_or(|end| end > sb.data_blocks)
                    || e.blocks == 0
                {
                    return Err(Error::Corrupt(format!(
                        "segment {:?} (entry {i}) lies outside the data area",
                        e.name
                    )));
                }
                for b in e.start..e.start + e.blocks {
                    if bitmap[(b / 64) as usize] & (1 << (b % 64)) != 0 {
                        return Err(Error::Corrupt(format!(
                            "segment {:?} (entry {i}) overlaps another at block {b}",
                            e.name
                        )));
                    }
                    bitmap[(b / 64) as usize] |= 1 << (b % 64);
                }
                if by_name.insert(e.name.clone(), i as u32).is_some() {
                    return Err(Error::Corrupt(format!("two segments named {:?}", e.name)));
                }
            }
            entries.push(e);
        }
        // The table is the authority; rewrite an on-disk bitmap that
        // disagrees with it.
        let on_disk = read(sb.bitmap_start, sb.bitmap_blocks)?;
        let mut want = vec![0u8; on_disk.len()];
        for (i, w) in bitmap.iter().enumerate() {
            want[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        if want != on_disk {
            meta.write_all_at(&want, sb.bitmap_start * bs)
                .map_err(io_err("repair bitmap"))?;
            meta.sync_data().map_err(io_err("sync bitmap"))?;
        }
        if sb.free_hint >= sb.data_blocks {
            sb.free_hint = 0;
        }
        let (data, direct) = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => (f, true),
            // tmpfs and some others refuse O_DIRECT: fall back to buffered
            // I/O (still through io_uring); `direct()` tells.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(io_err(format!("open {}", path.display())))?,
                false,
            ),
            Err(e) => return Err(io_err(format!("open {} O_DIRECT", path.display()))(e)),
        };
        let seed = random_u64()?;
        let device_id = sb.device_id;
        Ok(Device {
            inner: Arc::new(Inner {
                path: path.into(),
                data,
                direct,
                meta,
                block_size: sb.block_size,
                device_id,
                state: Mutex::new(State {
                    sb,
                    bitmap,
                    entries,
                    by_name,
                }),
                open: RwLock::default(),
                cache: cache::Cache::new(cache_blocks),
                tokens: AtomicU64::new(seed | 1),
                queues: Mutex::default(),
            }),
        })
    }

    pub fn block_size(&self) -> u32 {
        self.inner.block_size
    }

    /// The block store's size in bytes (a block device's too, whose file
    /// length reads 0).
    pub fn total_bytes(&self) -> u64 {
        let st = self.state();
        st.sb.total_blocks * u64::from(st.sb.block_size)
    }

    /// The random identity written at format (tells block stores apart).
    pub fn id(&self) -> u64 {
        self.inner.device_id
    }

    /// Whether data I/O bypasses the page cache (O_DIRECT).
    pub fn direct(&self) -> bool {
        self.inner.direct
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> Stats {
        let st = self.state();
        let used: u64 = st.bitmap.iter().map(|w| u64::from(w.count_ones())).sum();
        Stats {
            cache_hits: self.inner.cache.hits.load(Ordering::Relaxed),
            cache_misses: self.inner.cache.misses.load(Ordering::Relaxed),
            free_blocks: st.sb.data_blocks - used,
            segments: st.by_name.len() as u64,
        }
    }

    fn write_meta(&self, buf: &[u8], offset: u64, what: &str) -> Result<()> {
        self.inner
            .meta
            .write_all_at(buf, offset)
            .map_err(io_err(format!("write {what}")))?;
        self.inner
            .meta
            .sync_data()
            .map_err(io_err(format!("sync {what}")))
    }

    /// Writes the bitmap words covering data blocks `[start, start + n)`.
    fn write_bitmap(&self, st: &State, start: u64, n: u64) -> Result<()> {
        let bs = u64::from(st.sb.block_size);
        let (w0, w1) = (start / 64, (start + n).div_ceil(64));
        let mut buf = Vec::with_capacity(((w1 - w0) * 8) as usize);
        for w in &st.bitmap[w0 as usize..w1 as usize] {
            buf.extend_from_slice(&w.to_le_bytes());
        }
        self.write_meta(&buf, st.sb.bitmap_start * bs + w0 * 8, "bitmap")
    }

    fn write_entry(&self, st: &State, slot: u32) -> Result<()> {
        let bs = u64::from(st.sb.block_size);
        let off = st.sb.table_start * bs + u64::from(slot) * ENTRY_BYTES as u64;
        self.write_meta(&st.entries[slot as usize].encode(), off, "segment table")
    }

    /// Allocates a segment of `blocks` contiguous, zeroed blocks named
    /// `name`, owned by `owner`.
    pub fn create_segment(&self, name: &str, owner: &str, blocks: u64) -> Result<SegmentInfo> {
        check_name("segment name", name, NAME_BYTES_MAX)?;
        check_name("owner", owner, OWNER_BYTES_MAX)?;
        if blocks == 0 {
            return Err(Error::Invalid("a segment has at least one block".into()));
        }
        let mut st = self.state();
        if st.by_name.contains_key(name) {
            return Err(Error::AlreadyExists(format!("segment {name:?} exists")));
        }
        let slot = st.entries.iter().position(|e| !e.used).ok_or_else(|| {
            Error::NoSpace(format!("all {} segment slots are used", st.sb.entries))
        })? as u32;
        let start = find_run(&st.bitmap, st.sb.data_blocks, st.sb.free_hint, blocks)
            .ok_or_else(|| Error::NoSpace(format!("no {blocks} contiguous free blocks")))?;
        let bs = u64::from(st.sb.block_size);
        let first = st.sb.data_start + start;
        zero_range(&self.inner.meta, first * bs, blocks * bs)?;
        self.inner.cache.invalidate(first, blocks);
        // Bits first, entry last (see `format`).
        set_bits(&mut st.bitmap, start, blocks, true);
        self.write_bitmap(&st, start, blocks)?;
        let e = &mut st.entries[slot as usize];
        e.generation = e.generation.wrapping_add(1);
        e.used = true;
        e.start = start;
        e.blocks = blocks;
        e.owner = owner.into();
        e.name = name.into();
        self.write_entry(&st, slot)?;
        st.by_name.insert(name.into(), slot);
        st.sb.free_hint = (start + blocks) % st.sb.data_blocks;
        let sb = st.sb.encode();
        self.write_meta(&sb, 0, "superblock")?;
        Ok(SegmentInfo {
            name: name.into(),
            owner: owner.into(),
            first_block: first,
            blocks,
        })
    }

    fn find(&self, st: &State, name: &str, owner: &str) -> Result<u32> {
        let slot = *st
            .by_name
            .get(name)
            .ok_or_else(|| Error::NotFound(format!("no segment named {name:?}")))?;
        let e = &st.entries[slot as usize];
        if e.owner != owner {
            return Err(Error::Denied(format!(
                "segment {name:?} belongs to {:?}, not {owner:?}",
                e.owner
            )));
        }
        Ok(slot)
    }

    /// Frees segment `name` (only its owner may); every capability to it
    /// dies.
    pub fn delete_segment(&self, name: &str, owner: &str) -> Result<()> {
        let mut st = self.state();
        let slot = self.find(&st, name, owner)?;
        let (start, blocks) = {
            let e = &mut st.entries[slot as usize];
            e.used = false;
            e.generation = e.generation.wrapping_add(1);
            (e.start, e.blocks)
        };
        // Entry first, bits last (see `format`).
        self.write_entry(&st, slot)?;
        st.by_name.remove(name);
        self.inner
            .open
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, o| o.slot != slot);
        set_bits(&mut st.bitmap, start, blocks, false);
        self.write_bitmap(&st, start, blocks)?;
        self.inner
            .cache
            .invalidate(st.sb.data_start + start, blocks);
        Ok(())
    }

    /// Copies the block store to a new file `dest` (sparse, the same size,
    /// block size and identity): its superblock, bitmap and segment table
    /// as they are now, and every segment's blocks. The caller keeps writes
    /// out of the segments until it returns (the fs freezes its writers for
    /// a backup): a block written meanwhile may be copied old or new.
    /// Creating and deleting segments may go on; one created during the
    /// copy is not in it, one deleted during it is copied whole.
    pub fn copy_to(&self, dest: &Path) -> Result<DeviceCopy> {
        let out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(io_err(format!("create {}", dest.display())))?;
        let (meta, extents, total) = {
            let st = self.state();
            let bs = u64::from(st.sb.block_size);
            let mut meta = vec![0u8; (st.sb.data_start * bs) as usize];
            self.inner
                .meta
                .read_exact_at(&mut meta, 0)
                .map_err(io_err("read the block store's metadata"))?;
            let extents: Vec<(u64, u64)> = st
                .entries
                .iter()
                .filter(|e| e.used)
                .map(|e| ((st.sb.data_start + e.start) * bs, e.blocks * bs))
                .collect();
            (meta, extents, st.sb.total_blocks * bs)
        };
        out.set_len(total)
            .map_err(io_err(format!("size {}", dest.display())))?;
        out.write_all_at(&meta, 0)
            .map_err(io_err(format!("write {}", dest.display())))?;
        let mut copied = meta.len() as u64;
        let mut buf = vec![0u8; COPY_PIECE_BYTES];
        for (offset, len) in &extents {
            let mut at = 0;
            while at < *len {
                let n = (len - at).min(COPY_PIECE_BYTES as u64) as usize;
                self.inner
                    .meta
                    .read_exact_at(&mut buf[..n], offset + at)
                    .map_err(io_err("read a segment"))?;
                // Zeros stay a hole: the copy is as sparse as the data.
                static ZEROS: [u8; COPY_PIECE_BYTES] = [0; COPY_PIECE_BYTES];
                if buf[..n] != ZEROS[..n] {
                    out.write_all_at(&buf[..n], offset + at)
                        .map_err(io_err(format!("write {}", dest.display())))?;
                    copied += n as u64;
                }
                at += n as u64;
            }
        }
        out.sync_all()
            .map_err(io_err(format!("sync {}", dest.display())))?;
        Ok(DeviceCopy {
            bytes: total,
            bytes_written: copied,
            segments: extents.len() as u64,
        })
    }

    /// Every segment, by name.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let st = self.state();
        let mut v: Vec<_> = st
            .entries
            .iter()
            .filter(|e| e.used)
            .map(|e| SegmentInfo {
                name: e.name.clone(),
                owner: e.owner.clone(),
                first_block: st.sb.data_start + e.start,
                blocks: e.blocks,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Opens segment `name` for `owner`, who must own it.
    pub fn open_segment(&self, name: &str, owner: &str) -> Result<Segment> {
        let st = self.state();
        let slot = self.find(&st, name, owner)?;
        let e = &st.entries[slot as usize];
        // Tokens: a random start, then an odd-constant stride (a bijection
        // on u64), so two are never equal and none is guessable from a name.
        let token = self
            .inner
            .tokens
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        let cap = Capability {
            slot,
            generation: e.generation,
            token,
        };
        self.inner
            .open
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                token,
                Open {
                    slot,
                    generation: e.generation,
                    first: st.sb.data_start + e.start,
                    blocks: e.blocks,
                },
            );
        Ok(Segment {
            device: self.clone(),
            name: name.into(),
            blocks: e.blocks,
            cap,
        })
    }

    /// Ends a capability (what dropping its [`Segment`] does).
    pub fn close(&self, cap: &Capability) {
        self.inner
            .open
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&cap.token);
    }

    /// The physical blocks `[block, block + count)` of the segment `cap`
    /// opens, after checking the capability and the bounds.
    pub(crate) fn resolve(&self, cap: &Capability, block: u64, count: u64) -> Result<u64> {
        let open = self.inner.open.read().unwrap_or_else(|p| p.into_inner());
        let o = open
            .get(&cap.token)
            .filter(|o| o.slot == cap.slot && o.generation == cap.generation)
            .ok_or_else(|| {
                Error::BadCapability(format!(
                    "{cap:?} opens nothing on this device (closed, forged, or its segment deleted)"
                ))
            })?;
        if count == 0 || block.checked_add(count).is_none_or(|end| end > o.blocks) {
            return Err(Error::OutOfSegment {
                block,
                count,
                blocks: o.blocks,
            });
        }
        Ok(o.first + block)
    }

    /// Depth of the queues [`Device::with_queue`] makes.
    pub const POOLED_QUEUE_DEPTH: u32 = 64;

    /// A queue from this device's pool (made on first use), returned to the
    /// pool when `f` is done: for callers that do a batch and go.
    pub fn with_queue<T>(&self, f: impl FnOnce(&mut Queue) -> Result<T>) -> Result<T> {
        let pooled = self
            .inner
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let mut q = match pooled {
            Some(q) => q,
            None => Queue::new(self, Self::POOLED_QUEUE_DEPTH)?,
        };
        let r = f(&mut q);
        // A queue with requests still in flight holds buffers the kernel
        // may write: it is not handed to the next caller.
        if q.in_flight() == 0 {
            self.inner
                .queues
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(q);
        }
        r
    }
}

/// An open segment: its capability, closed on drop.
pub struct Segment {
    device: Device,
    pub name: String,
    pub blocks: u64,
    cap: Capability,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("blocks", &self.blocks)
            .finish()
    }
}

impl Segment {
    pub fn capability(&self) -> Capability {
        self.cap
    }

    pub fn bytes(&self) -> u64 {
        self.blocks * u64::from(self.device.block_size())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.device.close(&self.cap);
    }
}

fn bit(bitmap: &[u64], b: u64) -> bool {
    bitmap[(b / 64) as usize] & (1 << (b % 64)) != 0
}

fn set_bits(bitmap: &mut [u64], start: u64, n: u64, on: bool) {
    for b in start..start + n {
        debug_assert_eq!(bit(bitmap, b), !on, "block {b} already {}", on);
        if on {
            bitmap[(b / 64) as usize] |= 1 << (b % 64);
        } else {
            bitmap[(b / 64) as usize] &= !(1 << (b % 64));
        }
    }
}

/// First fit of `n` free blocks, searching from `hint` to the end, then
/// from 0; whole allocated words are skipped 64 blocks at a time.
fn find_run(bitmap: &[u64], total: u64, hint: u64, n: u64) -> Option<u64> {
    if n > total {
        return None;
    }
    let search = |from: u64, to: u64| -> Option<u64> {
        let (mut start, mut b) = (from, from);
        while b < to {
            if b % 64 == 0 && bitmap[(b / 64) as usize] == u64::MAX {
                b += 64;
                start = b;
                continue;
            }
            if bit(bitmap, b) {
                start = b + 1;
            } else if b + 1 - start == n {
                return Some(start);
            }
            b += 1;
        }
        None
    };
    search(hint.min(total), total).or_else(|| search(0, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_from_the_hint_then_wrapping() {
        let mut bm = vec![0u64; 2];
        set_bits(&mut bm, 0, 70, true);
        assert_eq!(find_run(&bm, 128, 0, 10), Some(70));
        assert_eq!(find_run(&bm, 128, 100, 10), Some(100));
        assert_eq!(find_run(&bm, 128, 125, 10), Some(70));
        assert_eq!(find_run(&bm, 128, 0, 59), None);
        assert_eq!(find_run(&bm, 128, 0, 58), Some(70));
    }
}
