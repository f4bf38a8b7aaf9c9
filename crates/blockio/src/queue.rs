//! The I/O engine: one io_uring per [`Queue`] (BAIO's request queue and
//! service daemon in one). Requests are pushed — checked against their
//! capability and segment, answered at once from the cache when they can
//! be — then submitted together with one system call, and their
//! completions reaped when the caller asks, in whatever order the device
//! finishes them. A queue belongs to one thread at a time; a device has as
//! many as its users want.

use std::alloc::Layout;
use std::collections::VecDeque;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;

use io_uring::{opcode, types, IoUring};

use crate::{io_err, CachePolicy, Capability, Device, Error, Result};

/// Alignment of every buffer (O_DIRECT needs the logical block size; a page
/// covers every device).
pub const ALIGN: usize = 4096;
/// Deepest queue.
pub const QUEUE_DEPTH_MAX: u32 = 1024;
/// Largest single request.
pub const REQUEST_BYTES_MAX: usize = 16 << 20;

/// A zeroed, [`ALIGN`]-aligned heap buffer that I/O reads into or writes
/// from.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// The buffer is plain owned memory.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1).next_multiple_of(ALIGN), ALIGN)
            .expect("a request-sized layout is valid")
    }

    pub fn zeroed(len: usize) -> AlignedBuf {
        let layout = Self::layout(len);
        // SAFETY: the layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    /// A buffer of `len` bytes made of `pieces` (offset, bytes), copied in
    /// order (a later piece over an earlier), zeros where none lands: only
    /// the gaps are zeroed, not the whole — a write's buffer is mostly its
    /// data. Panics if a piece reaches past `len`.
    pub fn assembled(len: usize, pieces: &[(usize, &[u8])]) -> AlignedBuf {
        assert!(
            pieces.iter().all(|(at, b)| at + b.len() <= len),
            "a piece past the buffer's end"
        );
        let layout = Self::layout(len);
        // SAFETY: the layout has non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        let mut spans: Vec<(usize, usize)> =
            pieces.iter().map(|(at, b)| (*at, at + b.len())).collect();
        spans.sort_unstable();
        let mut covered = 0;
        let zero = |from: usize, to: usize| {
            // SAFETY: from < to <= len, within the allocation.
            unsafe { std::ptr::write_bytes(ptr.as_ptr().add(from), 0, to - from) }
        };
        for (from, to) in spans {
            if from > covered {
                zero(covered, from);
            }
            covered = covered.max(to);
        }
        if covered < len {
            zero(covered, len);
        }
        for (at, b) in pieces {
            // SAFETY: at + b.len() <= len (asserted above); the source is
            // another allocation.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ptr.as_ptr().add(*at), b.len()) }
        }
        // Every byte of 0..len is now written: a gap zeroed, the rest copied.
        AlignedBuf { ptr, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes, initialised (zeroed at birth).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// A finished request: its tag, its buffer back (to reuse), and whether
/// it worked.
#[derive(Debug)]
pub struct Completion {
    pub tag: u64,
    pub buf: Option<AlignedBuf>,
    pub result: Result<()>,
}

enum Op {
    Read { first: u64, fill: bool },
    Write { first: u64, cached: bool },
    Sync,
}

struct Inflight {
    tag: u64,
    buf: Option<AlignedBuf>,
    op: Op,
    want: usize,
}

/// A submission and completion queue on one device.
pub struct Queue {
    device: Device,
    ring: IoUring,
    slots: Vec<Option<Inflight>>,
    free: Vec<usize>,
    ready: VecDeque<Completion>,
    unsubmitted: usize,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("depth", &self.slots.len())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Queue {
    /// A queue that keeps at most `depth` requests in flight.
    pub fn new(device: &Device, depth: u32) -> Result<Queue> {
        if !(1..=QUEUE_DEPTH_MAX).contains(&depth) {
            return Err(Error::Invalid(format!(
                "queue depth {depth} is not 1..={QUEUE_DEPTH_MAX}"
            )));
        }
        let ring = IoUring::new(depth.next_power_of_two()).map_err(io_err("io_uring_setup"))?;
        Ok(Queue {
            device: device.clone(),
            ring,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth as usize).rev().collect(),
            ready: VecDeque::new(),
            unsubmitted: 0,
        })
    }

    /// Requests pushed and not yet reaped by [`Queue::wait`] (completed
    /// ones waiting to be reaped included).
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len() + self.ready.len()
    }

    fn check_buf(&self, buf: &AlignedBuf) -> Result<u64> {
        let bs = self.device.block_size() as usize;
        if buf.is_empty() || !buf.len().is_multiple_of(bs) || buf.len() > REQUEST_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "a request is whole blocks of {bs} bytes, at most {REQUEST_BYTES_MAX}, not {}",
                buf.len()
            )));
        }
        Ok((buf.len() / bs) as u64)
    }

    /// Queues a read of `buf.len()` bytes from the segment's `block` on.
    pub fn read(
        &mut self,
        cap: &Capability,
        block: u64,
        mut buf: AlignedBuf,
        policy: CachePolicy,
        tag: u64,
    ) -> Result<()> {
        let count = self.check_buf(&buf)?;
        let first = self.device.resolve(cap, block, count)?;
        let bs = self.device.block_size() as usize;
        let cached = policy == CachePolicy::Cached;
        if cached && self.device.inner.cache.read(first, bs, &mut buf) {
            self.ready.push_back(Completion {
                tag,
                buf: Some(buf),
                result: Ok(()),
            });
            return Ok(());
        }
        let e = opcode::Read::new(
            types::Fd(self.device.inner.data.as_raw_fd()),
            buf.ptr.as_ptr(),
            buf.len() as u32,
        )
        .offset(first * bs as u64);
        self.push(
            e.build(),
            tag,
            Some(buf),
            Op::Read {
                first,
                fill: cached,
            },
        )
    }

    /// Queues a write of `buf` to the segment's `block` on.
    pub fn write(
        &mut self,
        cap: &Capability,
        block: u64,
        buf: AlignedBuf,
        policy: CachePolicy,
        tag: u64,
    ) -> Result<()> {
        let count = self.check_buf(&buf)?;
        let first = self.device.resolve(cap, block, count)?;
        let bs = self.device.block_size() as u64;
        let cached = policy == CachePolicy::Cached;
        // Drop cached copies now, so no read served meanwhile returns them.
        self.device.inner.cache.invalidate(first, count);
        let e = opcode::Write::new(
            types::Fd(self.device.inner.data.as_raw_fd()),
            buf.ptr.as_ptr(),
            buf.len() as u32,
        )
        .offset(first * bs);
        self.push(e.build(), tag, Some(buf), Op::Write { first, cached })
    }

    /// Queues a flush of every completed write on the device to stable
    /// storage (fdatasync).
    pub fn sync(&mut self, tag: u64) -> Result<()> {
        let e = opcode::Fsync::new(types::Fd(self.device.inner.data.as_raw_fd()))
            .flags(types::FsyncFlags::DATASYNC);
        self.push(e.build(), tag, None, Op::Sync)
    }

    fn push(
        &mut self,
        entry: io_uring::squeue::Entry,
        tag: u64,
        buf: Option<AlignedBuf>,
        op: Op,
    ) -> Result<()> {
        // A full queue makes room by finishing a request.
        while self.free.is_empty() {
            self.submit()?;
            self.reap_blocking(1)?;
        }
        let slot = self.free.pop().expect("a free slot after making room");
        let want = buf.as_ref().map_or(0, |b| b.len());
        let entry = entry.user_data(slot as u64);
        // SAFETY: the buffer the entry points at is kept in `slots` until
        // its completion is reaped (and `Drop` waits for every one).
        while unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.submit()?;
        }
        self.slots[slot] = Some(Inflight { tag, buf, op, want });
        self.unsubmitted += 1;
        Ok(())
    }

    /// Hands every queued request to the kernel in one system call.
    pub fn submit(&mut self) -> Result<usize> {
        if self.unsubmitted == 0 {
            return Ok(0);
        }
        loop {
            match self.ring.submit() {
                Ok(n) => {
                    self.unsubmitted = self.unsubmitted.saturating_sub(n);
                    return Ok(n);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.reap(),
                Err(e) => return Err(io_err("io_uring_enter")(e)),
            }
        }
    }

    /// Moves finished requests from the completion ring to `ready`.
    fn reap(&mut self) {
        let bs = self.device.block_size() as usize;
        let cache = &self.device.inner.cache;
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            let Some(f) = self.slots[slot].take() else {
                debug_assert!(false, "a completion for idle slot {slot}");
                continue;
            };
            self.free.push(slot);
            let res = cqe.result();
            let result = if res < 0 {
                Err(io_err(match f.op {
                    Op::Read { .. } => "read",
                    Op::Write { .. } => "write",
                    Op::Sync => "sync",
                })(std::io::Error::from_raw_os_error(-res)))
            } else if res as usize != f.want {
                Err(Error::Invalid(format!(
                    "short transfer: {res} of {} bytes (past the device's end?)",
                    f.want
                )))
            } else {
                if let (Op::Read { first, fill: true }, Some(b)) = (&f.op, &f.buf) {
                    cache.fill(*first, bs, b);
                }
                if let (Op::Write { first, cached }, Some(b)) = (&f.op, &f.buf) {
                    if *cached {
                        cache.fill(*first, bs, b);
                    } else {
                        cache.invalidate(*first, (b.len() / bs) as u64);
                    }
                }
                Ok(())
            };
            self.ready.push_back(Completion {
                tag: f.tag,
                buf: f.buf,
                result,
            });
        }
    }

    /// Waits until at least `min` completions are ready (or nothing is in
    /// flight).
    fn reap_blocking(&mut self, min: usize) -> Result<()> {
        loop {
            self.reap();
            let busy = self.slots.len() - self.free.len();
            if self.ready.len() >= min || busy == 0 {
                return Ok(());
            }
            match self.ring.submit_and_wait(1) {
                Ok(n) => self.unsubmitted = self.unsubmitted.saturating_sub(n),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => return Err(io_err("io_uring_enter (wait)")(e)),
            }
        }
    }

    /// Submits what is queued, waits for at least `min` completions, and
    /// moves every ready completion to `out`; returns how many it moved.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) -> Result<usize> {
        self.reap();
        if self.ready.len() >= min {
            self.submit()?;
        } else {
            // One system call submits what is queued and waits.
            self.reap_blocking(min)?;
        }
        let n = self.ready.len();
        out.extend(self.ready.drain(..));
        Ok(n)
    }

    /// Runs everything queued to completion; the first failure, if any.
    fn finish_all(&mut self) -> Result<Vec<Completion>> {
        let mut out = Vec::new();
        let all = self.in_flight();
        self.wait(all, &mut out)?;
        debug_assert_eq!(self.in_flight(), 0);
        Ok(out)
    }

    fn idle(&self, what: &str) -> Result<()> {
        if self.in_flight() != 0 {
            return Err(Error::Invalid(format!(
                "{what} needs an idle queue; {} requests are in flight",
                self.in_flight()
            )));
        }
        Ok(())
    }

    /// Reads `len` bytes at byte `offset` of the segment — whole-block
    /// requests of at most [`REQUEST_BYTES_MAX`], all in one batch.
    pub fn read_bytes(
        &mut self,
        cap: &Capability,
        offset: u64,
        len: usize,
        policy: CachePolicy,
    ) -> Result<Vec<u8>> {
        self.idle("read_bytes")?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let bs = self.device.block_size() as u64;
        let (first, last) = (offset / bs, (offset + len as u64 - 1) / bs);
        let per = REQUEST_BYTES_MAX as u64 / bs;
        let mut b = first;
        while b <= last {
            let n = (last + 1 - b).min(per);
            if let Err(e) = self.read(cap, b, AlignedBuf::zeroed((n * bs) as usize), policy, b) {
                self.finish_all()?;
                return Err(e);
            }
            b += n;
        }
        let mut done = self.finish_all()?;
        done.sort_by_key(|c| c.tag);
        let mut out = Vec::with_capacity(len);
        for c in done {
            c.result?;
            let buf = c.buf.expect("a read returns its buffer");
            let start = c.tag * bs;
            let lo = offset.max(start) - start;
            let hi = (offset + len as u64).min(start + buf.len() as u64) - start;
            out.extend_from_slice(&buf[lo as usize..hi as usize]);
        }
        debug_assert_eq!(out.len(), len);
        Ok(out)
    }

    /// Writes `data` at byte `offset` of the segment; partial blocks at
    /// either end are read first and merged. Not durable until a sync.
    pub fn write_bytes(
        &mut self,
        cap: &Capability,
        offset: u64,
        data: &[u8],
        policy: CachePolicy,
    ) -> Result<()> {
        self.idle("write_bytes")?;
        if data.is_empty() {
            return Ok(());
        }
        let bs = self.device.block_size() as u64;
        let end = offset + data.len() as u64;
        let (first, last) = (offset / bs, (end - 1) / bs);
        // The partial blocks at either end, read before anything is queued
        // (read_bytes wants the queue idle).
        let head = if !offset.is_multiple_of(bs) {
            Some(self.read_bytes(cap, first * bs, bs as usize, policy)?)
        } else {
            None
        };
        let tail = if !end.is_multiple_of(bs) && (last != first || head.is_none()) {
            Some(self.read_bytes(cap, last * bs, bs as usize, policy)?)
        } else {
            None
        };
        let per = REQUEST_BYTES_MAX as u64 / bs;
        let mut b = first;
        while b <= last {
            let n = (last + 1 - b).min(per);
            let (lo, hi) = (b * bs, (b + n) * bs);
            // The old partial blocks, then the data over them: the buffer
            // is written once, not zeroed first.
            let mut pieces: Vec<(usize, &[u8])> = Vec::with_capacity(3);
            if b == first {
                if let Some(h) = &head {
                    pieces.push((0, &h[..]));
                }
            }
            if b + n - 1 == last {
                if let Some(t) = tail
                    .as_ref()
                    .or(if first == last { head.as_ref() } else { None })
                {
                    pieces.push((((last - b) * bs) as usize, &t[..]));
                }
            }
            let (s, e) = (offset.max(lo), end.min(hi));
            pieces.push((
                (s - lo) as usize,
                &data[(s - offset) as usize..(e - offset) as usize],
            ));
            let buf = AlignedBuf::assembled((n * bs) as usize, &pieces);
            if let Err(e) = self.write(cap, b, buf, policy, b) {
                self.finish_all()?;
                return Err(e);
            }
            b += n;
        }
        for c in self.finish_all()? {
            c.result?;
        }
        Ok(())
    }

    /// Makes every completed write durable.
    pub fn sync_now(&mut self) -> Result<()> {
        self.idle("sync_now")?;
        self.sync(0)?;
        for c in self.finish_all()? {
            c.result?;
        }
        Ok(())
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // The kernel may still write into in-flight buffers: wait for them
        // before their memory is freed.
        let _ = self.submit();
        while self.slots.len() != self.free.len() {
            if self.reap_blocking(self.ready.len() + 1).is_err() {
                // The ring itself failed; leaking the buffers is the only
                // safe thing left.
                for s in &mut self.slots {
                    if let Some(f) = s.take() {
                        std::mem::forget(f.buf);
                    }
                }
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedBuf;

    /// An assembled buffer holds its pieces (a later one over an earlier)
    /// and zeros everywhere else, like a zeroed buffer copied into.
    #[test]
    fn an_assembled_buffer_is_its_pieces_and_zeros_between() {
        let (a, b, c) = (vec![1u8; 100], vec![2u8; 50], vec![3u8; 10]);
        let pieces: Vec<(usize, &[u8])> = vec![(200, &a), (250, &b), (0, &c), (400, &[])];
        let got = AlignedBuf::assembled(512, &pieces);
        let mut want = AlignedBuf::zeroed(512);
        for (at, p) in &pieces {
            want[*at..at + p.len()].copy_from_slice(p);
        }
        assert_eq!(&got[..], &want[..]);
        assert_eq!(got.as_ptr() as usize % super::ALIGN, 0);
        assert!(AlignedBuf::assembled(4096, &[]).iter().all(|&x| x == 0));
    }

    #[test]
    #[should_panic(expected = "past the buffer's end")]
    fn a_piece_past_the_end_is_refused() {
        AlignedBuf::assembled(16, &[(10, &[0u8; 7])]);
    }
}
