//! Which kernel tables changed, counted per store: what keeps a column
//! snapshot from going stale.
//!
//! Every writer connection has a pre-update hook that notes, on its own
//! thread, the tables its transaction touches (one bit per table slot,
//! [`SLOTS`] of them, chosen by the name's hash); its WAL hook, which
//! SQLite calls once a commit is in the WAL and visible to readers, adds
//! one to each noted slot's count. A snapshot loaded after reading a
//! table's count is current while the count stays: any commit it did not
//! see is counted after the count it read. Two tables sharing a slot, or
//! a rolled-back transaction's notes published with the next commit,
//! only make a snapshot reload sooner than it had to. The node is the
//! data directory's only writer (it holds its lock), so no commit goes
//! uncounted.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

/// Table slots counted apart.
pub const SLOTS: usize = 1_024;

/// One store's change counts, a slot each. Allocated once per store
/// opened and never freed (8 KiB): SQLite's hook holds a pointer to it
/// for as long as any of the store's connections lives.
#[derive(Debug)]
pub struct Counts([AtomicU64; SLOTS]);

impl Counts {
    pub(crate) fn leaked() -> &'static Counts {
        Box::leak(Box::new(Counts([const { AtomicU64::new(0) }; SLOTS])))
    }

    /// `table`'s change count.
    pub(crate) fn generation(&self, table: &str) -> u64 {
        self.0[slot(table)].load(Ordering::Acquire)
    }
}

/// Slots touched by this thread's transaction, not yet published, and
/// the counts of the store whose connection touched them (a writer
/// connection is used by one thread at a time, its partition's).
struct Touched {
    counts: Option<&'static Counts>,
    bits: [u64; SLOTS / 64],
}

thread_local! {
    static TOUCHED: Cell<Touched> = const {
        Cell::new(Touched { counts: None, bits: [0; SLOTS / 64] })
    };
}

fn slot(table: &str) -> usize {
    // FNV-1a: stable, and cheap on a table name.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in table.bytes() {
        h ^= u64::from(b.to_ascii_lowercase());
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SLOTS as u64) as usize
}

/// The pre-update hook's part: `table` of the store counted in `counts`
/// is being changed by this thread's transaction.
fn touched(counts: &'static Counts, table: &str) {
    let s = slot(table);
    TOUCHED.with(|t| {
        let mut cur = t.replace(Touched {
            counts: None,
            bits: [0; SLOTS / 64],
        });
        if cur.counts.is_some_and(|c| !std::ptr::eq(c, counts)) {
            // Another store's notes on this thread: publish them now
            // (sooner than needed, never later).
            publish(&cur);
            cur.bits = [0; SLOTS / 64];
        }
        cur.counts = Some(counts);
        cur.bits[s / 64] |= 1 << (s % 64);
        t.set(cur);
    });
}

fn publish(t: &Touched) {
    let Some(counts) = t.counts else { return };
    for (w, word) in t.bits.iter().enumerate() {
        let mut rest = *word;
        while rest != 0 {
            let b = rest.trailing_zeros() as usize;
            counts.0[w * 64 + b].fetch_add(1, Ordering::Release);
            rest &= rest - 1;
        }
    }
}

/// The WAL hook's part: this thread's commit is visible; count a change
/// of every table it touched.
pub(crate) fn published() {
    let t = TOUCHED.with(|t| {
        t.replace(Touched {
            counts: None,
            bits: [0; SLOTS / 64],
        })
    });
    publish(&t);
}

/// Installs the pre-update hook on writer connection `conn` of the store
/// counted in `counts`.
pub(crate) fn watch(conn: &rusqlite::Connection, counts: &'static Counts) {
    unsafe extern "C" fn hook(
        ctx: *mut c_void,
        _db: *mut rusqlite::ffi::sqlite3,
        _op: c_int,
        _schema: *const c_char,
        table: *const c_char,
        _key1: i64,
        _key2: i64,
    ) {
        if table.is_null() || ctx.is_null() {
            return;
        }
        // SAFETY: ctx is the `&'static Counts` passed below, never freed.
        let counts: &'static Counts = unsafe { &*(ctx as *const Counts) };
        // SAFETY: SQLite passes the changed table's name as a
        // NUL-terminated string valid for the callback's duration.
        let name = unsafe { CStr::from_ptr(table) };
        if let Ok(name) = name.to_str() {
            touched(counts, name);
        }
    }
    // SAFETY: `conn.handle()` is the live connection's handle; the hook is
    // a plain function and its context a `&'static Counts`, so nothing it
    // holds can dangle. The symbol exists because the bundled SQLite is
    // built with SQLITE_ENABLE_PREUPDATE_HOOK (.cargo/config.toml).
    unsafe {
        rusqlite::ffi::sqlite3_preupdate_hook(
            conn.handle(),
            Some(hook),
            counts as *const Counts as *mut c_void,
        );
    }
}
