// The paper's Figure 2 queries (Q1–Q4) over records of 16 × i32, written
// once: the `procedures` benchmark includes this file natively and
// compiles it with `rustc --target wasm32-wasip1 --crate-type cdylib` for
// the WebAssembly side, so both run the same Rust.
//
// Field 0 is the predicate column A; a record matches when A < x.
// Q1: SUM(B)              — little compute, one value out.
// Q2: SELECT B            — little compute, a value out per match.
// Q3: SELECT B, C, D, E   — like Q2, reading more fields.
// Q4: SUM(B^1.5 + C^0.5 + D^2.5) — three pow per match, compute bound.

/// Fields per record.
pub const FIELDS: usize = 16;

fn records<'a>(p: *const i32, n: usize) -> &'a [i32] {
    // SAFETY: the caller passes n records it owns (see each query).
    unsafe { core::slice::from_raw_parts(p, n * FIELDS) }
}

fn output<'a>(p: *mut i32, n: usize) -> &'a mut [i32] {
    // SAFETY: the caller passes room for n values.
    unsafe { core::slice::from_raw_parts_mut(p, n) }
}

/// Room for `bytes` bytes, never freed (the benchmark's data and output).
#[cfg_attr(target_arch = "wasm32", unsafe(no_mangle))]
pub extern "C" fn alloc(bytes: usize) -> *mut u8 {
    let mut v: Vec<u8> = Vec::with_capacity(bytes);
    let p = v.as_mut_ptr();
    core::mem::forget(v);
    p
}

/// # Safety: `p` holds `n` records.
#[cfg_attr(target_arch = "wasm32", unsafe(no_mangle))]
pub extern "C" fn q1(p: *const i32, n: usize, x: i32) -> i64 {
    let mut sum = 0i64;
    for r in records(p, n).chunks_exact(FIELDS) {
        if r[0] < x {
            sum += i64::from(r[1]);
        }
    }
    sum
}

/// # Safety: `p` holds `n` records, `out` room for `n` values.
#[cfg_attr(target_arch = "wasm32", unsafe(no_mangle))]
pub extern "C" fn q2(p: *const i32, n: usize, x: i32, out: *mut i32) -> usize {
    let out = output(out, n);
    let mut k = 0;
    for r in records(p, n).chunks_exact(FIELDS) {
        if r[0] < x {
            out[k] = r[1];
            k += 1;
        }
    }
    k
}

/// # Safety: `p` holds `n` records, `out` room for `4 n` values.
#[cfg_attr(target_arch = "wasm32", unsafe(no_mangle))]
pub extern "C" fn q3(p: *const i32, n: usize, x: i32, out: *mut i32) -> usize {
    let out = output(out, 4 * n);
    let mut k = 0;
    for r in records(p, n).chunks_exact(FIELDS) {
        if r[0] < x {
            out[k..k + 4].copy_from_slice(&r[1..5]);
            k += 4;
        }
    }
    k / 4
}

/// # Safety: `p` holds `n` records.
#[cfg_attr(target_arch = "wasm32", unsafe(no_mangle))]
pub extern "C" fn q4(p: *const i32, n: usize, x: i32) -> f64 {
    let mut sum = 0.0f64;
    for r in records(p, n).chunks_exact(FIELDS) {
        if r[0] < x {
            sum += f64::from(r[1]).powf(1.5) + f64::from(r[2]).powf(0.5) + f64::from(r[3]).powf(2.5);
        }
    }
    sum
}
