//! Which kernel tables changed, counted in this process: what keeps a
//! column snapshot from going stale.
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

static COUNTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

thread_local! {
    /// Slots touched by this thread's transaction, not yet published.
    static TOUCHED: Cell<[u64; SLOTS / 64]> = const { Cell::new([0; SLOTS / 64]) };
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

/// The pre-update hook's part: `table` is being changed by this thread's
/// transaction.
pub(crate) fn touched(table: &str) {
    let s = slot(table);
    TOUCHED.with(|t| {
        let mut bits = t.get();
        bits[s / 64] |= 1 << (s % 64);
        t.set(bits);
    });
}

/// The WAL hook's part: this thread's commit is visible; count a change
/// of every table it touched.
pub(crate) fn published() {
    let bits = TOUCHED.with(|t| t.replace([0; SLOTS / 64]));
    for (w, word) in bits.iter().enumerate() {
        let mut rest = *word;
        while rest != 0 {
            let b = rest.trailing_zeros() as usize;
            COUNTS[w * 64 + b].fetch_add(1, Ordering::Release);
            rest &= rest - 1;
        }
    }
}

/// Installs the pre-update hook on writer connection `conn`.
pub(crate) fn watch(conn: &rusqlite::Connection) {
    unsafe extern "C" fn hook(
        _ctx: *mut c_void,
        _db: *mut rusqlite::ffi::sqlite3,
        _op: c_int,
        _schema: *const c_char,
        table: *const c_char,
        _key1: i64,
        _key2: i64,
    ) {
        if table.is_null() {
            return;
        }
        // SAFETY: SQLite passes the changed table's name as a
        // NUL-terminated string valid for the callback's duration.
        let name = unsafe { CStr::from_ptr(table) };
        if let Ok(name) = name.to_str() {
            touched(name);
        }
    }
    // SAFETY: `conn.handle()` is the live connection's handle; the hook
    // takes no context pointer and lives as long as the program, so
    // nothing it holds can dangle. The symbol exists because the bundled
    // SQLite is built with SQLITE_ENABLE_PREUPDATE_HOOK (.cargo/config.toml).
    unsafe {
        rusqlite::ffi::sqlite3_preupdate_hook(conn.handle(), Some(hook), std::ptr::null_mut());
    }
}

/// `table`'s change count.
pub(crate) fn generation(table: &str) -> u64 {
    COUNTS[slot(table)].load(Ordering::Acquire)
}
