//! Stored procedures tabos ships as examples, used by the tests, the
//! `procedures` benchmark and `tabos procedure install --example`: the same
//! logic in WebAssembly (WAT text) and JavaScript.
//!
//! * `noop`: returns nothing.
//! * `echo`: returns its arguments.
//! * `nops`: makes N no-op host calls (N: the arguments as a decimal).
//! * `get`: the value at `key` — one hop of `chase`, for comparisons.
//! * `count` (wasm): counts keys through batched scans.
//! * `chase`: `get(get(key))` — the paper's Figure 1: the value at the key
//!   named by the value at `key` (the arguments), or nothing when either is
//!   missing.

/// `noop` in WebAssembly.
pub const WASM_NOOP: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "main") (param i32) (result i32) (i32.const 0)))"#;

/// `noop` in JavaScript.
pub const JS_NOOP: &str = "function main(arg) {}";

/// `echo` in WebAssembly.
pub const WASM_ECHO: &str = r#"(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (memory (export "memory") 17)
  (func (export "main") (param $n i32) (result i32)
    (drop (call $args (i32.const 0) (local.get $n)))
    (drop (call $result (i32.const 0) (local.get $n)))
    (i32.const 0)))"#;

/// `echo` in JavaScript.
pub const JS_ECHO: &str = "function main(arg) { return arg; }";

/// `nops` in WebAssembly: the arguments are N as 8 little-endian bytes
/// (so the loop costs nothing but the calls).
pub const WASM_NOPS: &str = r#"(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "nop" (func $nop (result i32)))
  (memory (export "memory") 1)
  (func (export "main") (param $n i32) (result i32)
    (local $i i64) (local $count i64)
    (drop (call $args (i32.const 0) (i32.const 8)))
    (local.set $count (i64.load (i32.const 0)))
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (local.get $count)))
        (drop (call $nop))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (i32.const 0)))"#;

/// `nops` in JavaScript: the arguments are N in decimal.
pub const JS_NOPS: &str = "function main(arg) { const n = Number(arg); \
     for (let i = 0; i < n; i++) tabos.nop(); }";

/// `chase` in WebAssembly: keys and values up to 1 KiB and 60 KiB.
pub const WASM_CHASE: &str = r#"(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (import "tabos" "kv_get" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  ;; 0: the key (1 KiB)  1024: the first value (1 KiB)  2048: lengths
  ;; 4096: the second value (60 KiB)
  (func (export "main") (param $n i32) (result i32)
    (local $e i32)
    (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (return (i32.const 1))))
    (drop (call $args (i32.const 0) (local.get $n)))
    (local.set $e (call $get (i32.const 0) (local.get $n) (i32.const 1024) (i32.const 1024) (i32.const 2048)))
    (if (i32.eq (local.get $e) (i32.const 44)) (then (return (i32.const 0))))
    (if (local.get $e) (then (return (i32.add (i32.const 100) (local.get $e)))))
    (local.set $e (call $get (i32.const 1024) (i32.load (i32.const 2048)) (i32.const 4096) (i32.const 61440) (i32.const 2052)))
    (if (i32.eq (local.get $e) (i32.const 44)) (then (return (i32.const 0))))
    (if (local.get $e) (then (return (i32.add (i32.const 200) (local.get $e)))))
    (drop (call $result (i32.const 4096) (i32.load (i32.const 2052))))
    (i32.const 0)))"#;

/// `chase` in JavaScript.
pub const JS_CHASE: &str = "function main(key) { \
     const next = tabos.get(key); \
     if (next === null) return null; \
     return tabos.getBytes(next); }";

/// `count` in WebAssembly: counts the realm's keys from the key in the
/// arguments (up to 1 KiB) on, through `kv_scan` batches of up to 4 KiB
/// written into linear memory; the result is the count as a u32 (LE).
pub const WASM_COUNT: &str = r#"(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (import "tabos" "kv_scan" (func $scan (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0: the key to start from  2048: count, bytes used  2056: result
  ;; 4096: the batch (4 KiB)
  (func (export "main") (param $n i32) (result i32)
    (local $count i32) (local $e i32) (local $got i32) (local $p i32)
    (local $klen i32) (local $vlen i32) (local $len i32) (local $flags i32)
    (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (return (i32.const 1))))
    (drop (call $args (i32.const 0) (i32.const 1024)))
    (local.set $len (local.get $n))
    (loop $batch
      (local.set $e (call $scan (i32.const 0) (local.get $len) (i32.const 0) (i32.const 0)
                              (local.get $flags) (i32.const 4096) (i32.const 4096) (i32.const 2048)))
      (if (local.get $e) (then (return (i32.add (i32.const 100) (local.get $e)))))
      (local.set $got (i32.load (i32.const 2048)))
      (if (i32.eqz (local.get $got)) (then
        (i32.store (i32.const 2056) (local.get $count))
        (drop (call $result (i32.const 2056) (i32.const 4)))
        (return (i32.const 0))))
      (local.set $count (i32.add (local.get $count) (local.get $got)))
      ;; walk to the batch's last entry and continue after its key
      (local.set $p (i32.const 4096))
      (loop $walk
        (local.set $klen (i32.load (local.get $p)))
        (local.set $vlen (i32.load (i32.add (local.get $p) (i32.const 4))))
        (local.set $got (i32.sub (local.get $got) (i32.const 1)))
        (if (local.get $got) (then
          (local.set $p (i32.add (local.get $p) (i32.add (i32.const 8) (i32.add (local.get $klen) (local.get $vlen)))))
          (br $walk))))
      (memory.copy (i32.const 0) (i32.add (local.get $p) (i32.const 8)) (local.get $klen))
      (local.set $len (local.get $klen))
      (local.set $flags (i32.const 1))
      (br $batch))
    (i32.const 2)))"#;

/// `get` in WebAssembly: values up to 60 KiB.
pub const WASM_GET: &str = r#"(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (import "tabos" "kv_get" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "main") (param $n i32) (result i32)
    (local $e i32)
    (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (return (i32.const 1))))
    (drop (call $args (i32.const 0) (local.get $n)))
    (local.set $e (call $get (i32.const 0) (local.get $n) (i32.const 4096) (i32.const 61440) (i32.const 2048)))
    (if (i32.eq (local.get $e) (i32.const 44)) (then (return (i32.const 0))))
    (if (local.get $e) (then (return (i32.add (i32.const 100) (local.get $e)))))
    (drop (call $result (i32.const 4096) (i32.load (i32.const 2048))))
    (i32.const 0)))"#;
