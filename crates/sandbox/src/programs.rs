//! Small wasm programs tabos ships, as WAT text: the IPC echo server and the
//! pinger that the tests, the `ipc` benchmark and examples run as wasm procs,
//! a namespace relay and a file copier. They use only the `tabos` host functions and
//! WASI's clock, `fd_write` and `proc_exit`.

/// Memory layout shared by both programs (byte offsets).
const TO: u32 = 0; // receiver list, up to 8 KiB
const PAYLOAD: u32 = 8_192; // outgoing payload, up to 8 KiB
const RECV_BUF: u32 = 16_384; // incoming payload, 16 KiB
const SENDER: u32 = 32_768; // incoming sender, 256 bytes
const LENS: u32 = 33_024; // payload length, sender length
const CLOCK: u32 = 33_040;
const IOVEC: u32 = 33_056;
const TIMES: u32 = 65_536; // the pinger's per-round durations (u64 ns)

/// Longest receiver list a pinger takes, in bytes.
pub const PING_TO_BYTES_MAX: usize = 8_192;
/// Largest payload a pinger sends.
pub const PING_PAYLOAD_BYTES_MAX: usize = 8_192;

const IMPORTS: &str = r#"
  (import "tabos" "send" (func $send (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "recv" (func $recv (param i32 i32 i32 i64 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
"#;

/// An echo server: sends every message it receives back to its sender, and
/// exits (status 0) on an empty message. A failing host call exits with
/// 100 + errno (send) or 200 + errno (recv).
pub fn echo() -> String {
    echo_from(None).unwrap_or_default()
}

/// An echo server taking its messages from named mailbox `mailbox` (a pool
/// of servers sharing one queue), or from its own with `None`.
pub fn echo_from(mailbox: Option<&str>) -> Result<String, String> {
    let from = mailbox.unwrap_or("");
    if from.len() > PING_TO_BYTES_MAX || from.contains('"') || from.contains('\\') {
        return Err("a mailbox name without quotes, at most 8 KiB".into());
    }
    let from_len = from.len();
    Ok(format!(
        r#"(module {IMPORTS}
  (memory (export "memory") 1)
  (data (i32.const {TO}) "{from}")
  (func (export "_start") (local $rc i32)
    (loop $next
      (local.set $rc (call $recv (i32.const {TO}) (i32.const {from_len}) (i32.const 0) (i64.const -1) (i32.const {RECV_BUF}) (i32.const 16384)
                                 (i32.const {SENDER}) (i32.const 256) (i32.const {LENS})))
      (if (local.get $rc) (then (call $exit (i32.add (i32.const 200) (local.get $rc)))))
      (if (i32.eqz (i32.load (i32.const {LENS}))) (then (return)))
      (local.set $rc (call $send (i32.const {SENDER}) (i32.load (i32.const {LENS_4}))
                                 (i32.const {RECV_BUF}) (i32.load (i32.const {LENS}))
                                 (i32.const 0) (i32.const 0)))
      (if (local.get $rc) (then (call $exit (i32.add (i32.const 100) (local.get $rc)))))
      (br $next)))
)"#,
        LENS_4 = LENS + 4
    ))
}

/// A namespace relay: creates directory `dir` (if missing), puts "ready"
/// in `dir/ready`, waits until `dir/go` exists, writes its data to stdout,
/// removes it and exits 0. A failing call exits with a code that says which
/// (mkdir 10, put 11, wait 12, get 13, remove 14) times 1,000 plus the errno.
pub fn name_relay(dir: &str) -> Result<String, String> {
    if dir.len() > 200 || !dir.starts_with('/') || dir.contains('"') || dir.contains('\\') {
        return Err("a directory path without quotes, at most 200 bytes".into());
    }
    let (ready, go) = (format!("{dir}/ready"), format!("{dir}/go"));
    let (dl, rl, gl) = (dir.len(), ready.len(), go.len());
    Ok(format!(
        r#"(module
  (import "tabos" "name_get" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "name_put" (func $put (param i32 i32 i32 i32 i64 i32) (result i32)))
  (import "tabos" "name_mkdir" (func $mkdir (param i32 i32) (result i32)))
  (import "tabos" "name_remove" (func $remove (param i32 i32) (result i32)))
  (import "tabos" "name_wait" (func $wait (param i32 i32 i32 i64) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{dir}")
  (data (i32.const 256) "{ready}")
  (data (i32.const 512) "{go}")
  (data (i32.const 768) "ready")
  (func $check (param $rc i32) (param $what i32)
    (if (local.get $rc) (then (call $exit (i32.add (i32.mul (local.get $what) (i32.const 1000)) (local.get $rc))))))
  (func (export "_start") (local $rc i32)
    (local.set $rc (call $mkdir (i32.const 0) (i32.const {dl})))
    (if (i32.ne (local.get $rc) (i32.const 20)) (then (call $check (local.get $rc) (i32.const 10))))
    (call $check (call $put (i32.const 256) (i32.const {rl}) (i32.const 768) (i32.const 5) (i64.const -1) (i32.const 1024)) (i32.const 11))
    (call $check (call $wait (i32.const 512) (i32.const {gl}) (i32.const 0) (i64.const -1)) (i32.const 12))
    (call $check (call $get (i32.const 512) (i32.const {gl}) (i32.const 4096) (i32.const 8192) (i32.const 1040)) (i32.const 13))
    (i32.store (i32.const 1056) (i32.const 4096))
    (i32.store (i32.const 1060) (i32.load (i32.const 1040)))
    (drop (call $fd_write (i32.const 1) (i32.const 1056) (i32.const 1) (i32.const 1064)))
    (call $check (call $remove (i32.const 512) (i32.const {gl})) (i32.const 14)))
)"#
    ))
}

/// A file copier: copies file `from` to `to` (created if missing) with
/// `fs_read` and `fs_write` in 64 KiB pieces, prints the byte count and
/// exits 0. A failing call exits with (stat 10, read 11, write 12) times
/// 1,000 plus the errno.
pub fn file_copy(from: &str, to: &str) -> Result<String, String> {
    for p in [from, to] {
        if p.len() > 200 || !p.starts_with('/') || p.contains('"') || p.contains('\\') {
            return Err("paths without quotes, at most 200 bytes".into());
        }
    }
    let (fl, tl) = (from.len(), to.len());
    Ok(format!(
        r#"(module
  (import "tabos" "fs_stat" (func $stat (param i32 i32 i32) (result i32)))
  (import "tabos" "fs_read" (func $read (param i32 i32 i64 i32 i32 i32) (result i32)))
  (import "tabos" "fs_write" (func $write (param i32 i32 i64 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "{from}")
  (data (i32.const 256) "{to}")
  (func $check (param $rc i32) (param $what i32)
    (if (local.get $rc) (then (call $exit (i32.add (i32.mul (local.get $what) (i32.const 1000)) (local.get $rc))))))
  (func (export "_start") (local $at i64) (local $n i32) (local $d i32) (local $i i32)
    ;; The source must be a file.
    (call $check (call $stat (i32.const 0) (i32.const {fl}) (i32.const 512)) (i32.const 10))
    (if (i32.ne (i32.load (i32.const 520)) (i32.const 1)) (then (call $exit (i32.const 10028))))
    (loop $more
      (call $check (call $read (i32.const 0) (i32.const {fl}) (local.get $at) (i32.const 65536) (i32.const 65536) (i32.const 544)) (i32.const 11))
      (local.set $n (i32.load (i32.const 544)))
      (if (i32.or (local.get $n) (i64.eqz (local.get $at)))
        (then
          (call $check (call $write (i32.const 256) (i32.const {tl}) (local.get $at) (i32.const 65536) (local.get $n) (i32.const 1) (i32.const 552)) (i32.const 12))))
      (local.set $at (i64.add (local.get $at) (i64.extend_i32_u (local.get $n))))
      (br_if $more (local.get $n)))
    ;; Print the count in decimal.
    (local.set $i (i32.const 1023))
    (loop $digit
      (local.set $d (i32.wrap_i64 (i64.rem_u (local.get $at) (i64.const 10))))
      (i32.store8 (local.get $i) (i32.add (i32.const 48) (local.get $d)))
      (local.set $at (i64.div_u (local.get $at) (i64.const 10)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (br_if $digit (i64.ne (local.get $at) (i64.const 0))))
    (i32.store (i32.const 560) (i32.add (local.get $i) (i32.const 1)))
    (i32.store (i32.const 564) (i32.sub (i32.const 1023) (local.get $i)))
    (drop (call $fd_write (i32.const 1) (i32.const 560) (i32.const 1) (i32.const 568))))
)"#
    ))
}

/// What a pinger does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    /// Receivers of every send ('\n'-separated in one call: a multicast).
    pub to: Vec<String>,
    /// Messages sent per round (to each receiver); the round ends when all
    /// `burst * to.len()` replies are in.
    pub burst: u32,
    pub rounds: u32,
    pub payload_bytes: usize,
}

/// A pinger: for each round, sends `burst` messages of `payload_bytes` to
/// every receiver, takes all their replies, and records the round's
/// duration; then sends each receiver an empty message (stopping echo
/// servers) and writes the durations to stdout as little-endian u64
/// nanoseconds, one per round. Exits like [`echo`] on a failing call.
pub fn ping(p: &Ping) -> Result<String, String> {
    let to = p.to.join("\n");
    if to.is_empty() || to.len() > PING_TO_BYTES_MAX || to.contains('"') || to.contains('\\') {
        return Err(format!(
            "a pinger needs 1..={PING_TO_BYTES_MAX} bytes of receivers without quotes"
        ));
    }
    if p.payload_bytes > PING_PAYLOAD_BYTES_MAX || p.rounds == 0 || p.burst == 0 {
        return Err(format!(
            "a pinger sends 1.. rounds of 1.. messages of at most {PING_PAYLOAD_BYTES_MAX} bytes"
        ));
    }
    let replies = u64::from(p.burst) * p.to.len() as u64;
    let times_bytes = u64::from(p.rounds) * 8;
    let pages = (u64::from(TIMES) + times_bytes).div_ceil(65_536);
    if pages > 16_384 {
        return Err("too many rounds to record".into());
    }
    let to_len = to.len();
    let to_text = to.replace('\n', "\\0a");
    Ok(format!(
        r#"(module {IMPORTS}
  (memory (export "memory") {pages})
  (data (i32.const {TO}) "{to_text}")
  (func (export "_start") (local $round i32) (local $k i32) (local $rc i32) (local $t0 i64)
    (loop $rounds
      (drop (call $clock (i32.const 1) (i64.const 0) (i32.const {CLOCK})))
      (local.set $t0 (i64.load (i32.const {CLOCK})))
      (local.set $k (i32.const 0))
      (loop $sends
        (local.set $rc (call $send (i32.const {TO}) (i32.const {to_len})
                                   (i32.const {PAYLOAD}) (i32.const {bytes}) (i32.const 0) (i32.const 0)))
        (if (local.get $rc) (then (call $exit (i32.add (i32.const 100) (local.get $rc)))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br_if $sends (i32.lt_u (local.get $k) (i32.const {burst}))))
      (local.set $k (i32.const 0))
      (loop $replies
        (local.set $rc (call $recv (i32.const 0) (i32.const 0) (i32.const 0) (i64.const -1) (i32.const {RECV_BUF}) (i32.const 16384)
                                   (i32.const {SENDER}) (i32.const 256) (i32.const {LENS})))
        (if (local.get $rc) (then (call $exit (i32.add (i32.const 200) (local.get $rc)))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br_if $replies (i32.lt_u (local.get $k) (i32.const {replies}))))
      (drop (call $clock (i32.const 1) (i64.const 0) (i32.const {CLOCK})))
      (i64.store (i32.add (i32.const {TIMES}) (i32.shl (local.get $round) (i32.const 3)))
                 (i64.sub (i64.load (i32.const {CLOCK})) (local.get $t0)))
      (local.set $round (i32.add (local.get $round) (i32.const 1)))
      (br_if $rounds (i32.lt_u (local.get $round) (i32.const {rounds}))))
    (drop (call $send (i32.const {TO}) (i32.const {to_len}) (i32.const {PAYLOAD}) (i32.const 0)
                      (i32.const 0) (i32.const 0)))
    (i32.store (i32.const {IOVEC}) (i32.const {TIMES}))
    (i32.store (i32.const {IOVEC_4}) (i32.const {times_bytes}))
    (drop (call $fd_write (i32.const 1) (i32.const {IOVEC}) (i32.const 1) (i32.const {IOVEC_8}))))
)"#,
        bytes = p.payload_bytes,
        burst = p.burst,
        rounds = p.rounds,
        IOVEC_4 = IOVEC + 4,
        IOVEC_8 = IOVEC + 8,
    ))
}

/// Decodes a pinger's stdout: its per-round durations in nanoseconds.
pub fn ping_times(stdout: &[u8]) -> Vec<u64> {
    stdout
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_compile() {
        let sb = crate::Sandbox::new().unwrap();
        sb.compile(echo().as_bytes()).unwrap();
        sb.compile(echo_from(Some("jobs")).unwrap().as_bytes())
            .unwrap();
        assert!(echo_from(Some("a\"b")).is_err());
        sb.compile(name_relay("/relay").unwrap().as_bytes())
            .unwrap();
        assert!(name_relay("relative").is_err());
        sb.compile(file_copy("/a", "/b").unwrap().as_bytes())
            .unwrap();
        assert!(file_copy("/a", "b\"").is_err());
        let p = Ping {
            to: vec!["proc/a".into(), "box".into()],
            burst: 3,
            rounds: 10_000,
            payload_bytes: 64,
        };
        sb.compile(ping(&p).unwrap().as_bytes()).unwrap();
        assert!(ping(&Ping {
            to: vec![],
            ..p.clone()
        })
        .is_err());
        assert!(ping(&Ping {
            payload_bytes: 9_000,
            ..p
        })
        .is_err());
        assert_eq!(ping_times(&[1, 0, 0, 0, 0, 0, 0, 0, 2]), vec![1]);
    }
}
