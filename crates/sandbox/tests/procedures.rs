//! Stored procedures on the sandbox alone, with a host over an in-memory
//! map (the kernel's host over a transaction is tested in tabos-kernel).

use std::collections::BTreeMap;
use std::time::Duration;

use tabos_sandbox::procedure::{code_hash, examples, FailureKind, Language, Limits, ProcSpec};
use tabos_sandbox::{Host, HostError, RecvCall, Sandbox};

#[derive(Default)]
struct MapHost {
    kv: BTreeMap<String, Vec<u8>>,
    nops: u64,
}

impl Host for MapHost {
    fn send(&mut self, _: &[&str], _: &[u8], _: Option<&str>) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    fn recv(&mut self, _: RecvCall<'_>) -> Result<tabos_sandbox::host::Received, HostError> {
        Err(HostError::Unsupported)
    }
    fn kv_get(&mut self, key: &str) -> Result<Option<Vec<u8>>, HostError> {
        Ok(self.kv.get(key).cloned())
    }
    fn kv_put(&mut self, key: &str, value: &[u8]) -> Result<(), HostError> {
        self.kv.insert(key.into(), value.into());
        Ok(())
    }
    fn nop(&mut self) -> u64 {
        self.nops += 1;
        0
    }
}

fn call(
    sb: &Sandbox,
    lang: Language,
    code: &str,
    host: &mut MapHost,
    args: &[u8],
    limits: Limits,
) -> Result<tabos_sandbox::CallOutput, tabos_sandbox::ProcError> {
    let spec = ProcSpec {
        tenant: "t",
        name: "p",
        language: lang,
        code_hash: code_hash(code.as_bytes()),
        limits,
    };
    let mut load = |_: &mut MapHost| Ok(code.as_bytes().to_vec());
    sb.call_procedure(&spec, host, &mut load, args)
}

fn short() -> Limits {
    Limits {
        memory_bytes: 16 << 20,
        timeout: Duration::from_millis(200),
    }
}

#[test]
fn echo_and_chase_in_both_languages() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    host.kv.insert("a".into(), b"b".to_vec());
    host.kv.insert("b".into(), b"value of b".to_vec());
    for (lang, echo, chase) in [
        (Language::Wasm, examples::WASM_ECHO, examples::WASM_CHASE),
        (Language::Js, examples::JS_ECHO, examples::JS_CHASE),
    ] {
        sb.check_procedure(lang, echo.as_bytes(), &Limits::default())
            .unwrap();
        let out = call(&sb, lang, echo, &mut host, b"hello", Limits::default()).unwrap();
        assert_eq!(out.result, b"hello", "{lang}");
        let out = call(&sb, lang, chase, &mut host, b"a", Limits::default()).unwrap();
        assert_eq!(out.result, b"value of b", "{lang}");
        let out = call(&sb, lang, chase, &mut host, b"missing", Limits::default()).unwrap();
        assert_eq!(out.result, b"", "{lang}");
    }
    // The wasm contexts went back to the pool (all but the one this thread
    // keeps for its next call).
    assert!(sb.idle_procedure_contexts() >= 1);
}

#[test]
fn host_calls_are_counted_once_each() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    call(
        &sb,
        Language::Wasm,
        examples::WASM_NOPS,
        &mut host,
        &1000u64.to_le_bytes(),
        Limits::default(),
    )
    .unwrap();
    assert_eq!(host.nops, 1000);
    call(
        &sb,
        Language::Js,
        examples::JS_NOPS,
        &mut host,
        b"500",
        Limits::default(),
    )
    .unwrap();
    assert_eq!(host.nops, 1500);
}

#[test]
fn invalid_code_is_refused_with_the_compilers_message() {
    let sb = Sandbox::new().unwrap();
    let l = Limits::default();
    let e = sb
        .check_procedure(Language::Js, b"function main( {", &l)
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::Invalid);
    assert!(
        e.message.contains("SyntaxError") || e.message.contains("expecting"),
        "{e}"
    );
    let e = sb
        .check_procedure(Language::Js, b"var x = 1;", &l)
        .unwrap_err();
    assert!(e.message.contains("main"), "{e}");
    let e = sb
        .check_procedure(Language::Wasm, b"(module (func", &l)
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::Invalid);
    assert!(e.message.contains("invalid module"), "{e}");
    let e = sb
        .check_procedure(
            Language::Wasm,
            b"(module (memory (export \"memory\") 1))",
            &l,
        )
        .unwrap_err();
    assert!(e.message.contains("main"), "{e}");
    // Top-level code may not reach the host.
    let e = sb
        .check_procedure(Language::Js, b"tabos.get('x'); function main() {}", &l)
        .unwrap_err();
    assert!(e.message.contains("only while main runs"), "{e}");
    // A top level that never ends is stopped at the time limit, which
    // times the script alone (not the runtime and context made for it).
    let e = sb
        .check_procedure(Language::Js, b"for (;;) {} function main() {}", &short())
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::Timeout, "{e}");
    // And the checker is usable after it.
    sb.check_procedure(Language::Js, b"function main() {}", &short())
        .unwrap();
}

#[test]
fn failures_have_their_kind_and_leave_the_sandbox_usable() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    let cases: &[(Language, &str, FailureKind)] = &[
        (
            Language::Js,
            "function main() { throw new Error('boom'); }",
            FailureKind::Exception,
        ),
        (
            Language::Js,
            "function main() { for (;;) {} }",
            FailureKind::Timeout,
        ),
        (
            Language::Js,
            "function main() { const a = []; for (;;) a.push(new ArrayBuffer(1 << 20)); }",
            FailureKind::OutOfMemory,
        ),
        (
            Language::Js,
            "function f(n) { return f(n + 1) + 1; } function main() { f(0); }",
            FailureKind::StackOverflow,
        ),
        (
            Language::Wasm,
            r#"(module (memory (export "memory") 1) (func (export "main") (param i32) (result i32) unreachable))"#,
            FailureKind::Trap,
        ),
        (
            Language::Wasm,
            r#"(module (memory (export "memory") 1) (func (export "main") (param i32) (result i32) (loop $l (br $l)) (i32.const 0)))"#,
            FailureKind::Timeout,
        ),
        (
            Language::Wasm,
            r#"(module (memory (export "memory") 1) (func (export "main") (param i32) (result i32) (drop (memory.grow (i32.const 1000))) (i32.const 0)))"#,
            FailureKind::OutOfMemory,
        ),
        (
            Language::Wasm,
            r#"(module (memory (export "memory") 1) (func $f (param i32) (result i32) (i32.add (call $f (local.get 0)) (i32.const 1))) (func (export "main") (param i32) (result i32) (call $f (i32.const 0))))"#,
            FailureKind::StackOverflow,
        ),
        (
            Language::Wasm,
            r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
               (memory (export "memory") 1)
               (data (i32.const 0) "k")
               (func (export "main") (param i32) (result i32) (call $put (i32.const 0) (i32.const 1) (i32.const 65000) (i32.const 10000))))"#,
            FailureKind::Trap,
        ),
        (
            Language::Wasm,
            r#"(module (memory (export "memory") 1) (func (export "main") (param i32) (result i32) (i32.const 7)))"#,
            FailureKind::Status(7),
        ),
    ];
    for (lang, code, kind) in cases {
        let e = call(&sb, *lang, code, &mut host, b"", short()).unwrap_err();
        assert_eq!(e.kind, *kind, "{lang} {code}: {e}");
        // The next call, of a healthy procedure, works.
        let out = call(&sb, *lang, examples::JS_ECHO, &mut host, b"ok", short());
        if *lang == Language::Js {
            assert_eq!(out.unwrap().result, b"ok");
        }
    }
    let e = call(
        &sb,
        Language::Wasm,
        r#"(module (import "tabos" "kv_put" (func $put (param i32 i32 i32 i32) (result i32)))
           (memory (export "memory") 1)
           (func (export "main") (param i32) (result i32) (call $put (i32.const 0) (i32.const 1) (i32.const 65000) (i32.const 10000))))"#,
        &mut host,
        b"",
        short(),
    )
    .unwrap_err();
    assert!(e.message.contains("outside linear memory"), "{e}");
    assert!(
        host.kv.is_empty(),
        "nothing was written by the failed calls"
    );
    let out = call(
        &sb,
        Language::Wasm,
        examples::WASM_ECHO,
        &mut host,
        b"ok",
        short(),
    )
    .unwrap();
    assert_eq!(out.result, b"ok");
}

#[test]
fn logs_come_back_with_the_result_and_with_an_error() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    let out = call(
        &sb,
        Language::Js,
        "function main(a) { console.log('got', a, {x: 1}); return {n: 2}; }",
        &mut host,
        b"arg",
        Limits::default(),
    )
    .unwrap();
    assert_eq!(out.log, vec![r#"got arg {"x":1}"#.to_string()]);
    assert_eq!(out.result, br#"{"n":2}"#);
    let e = call(
        &sb,
        Language::Js,
        "function main() { tabos.log('before'); tabos.put('k', 'v'); null.x; }",
        &mut host,
        b"",
        Limits::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind, FailureKind::Exception);
    assert_eq!(e.log, vec!["before".to_string()]);
    assert!(
        e.message.contains("TypeError") || e.message.contains("null"),
        "{e}"
    );
}

/// Built-ins that walk a huge sparse or fake array — C loops QuickJS does
/// not interrupt — and ones that build huge strings end with an error
/// (a RangeError, the time limit or the memory limit), and the sandbox
/// serves the next call.
#[test]
fn javascript_built_ins_cannot_run_past_their_limits() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    let bodies = [
        "new Array(2**32-1).join('')",
        "String(new Array(2**32-1))",
        "Array.prototype.join.call({length: 2**53-1}, '')",
        "[].concat({length: 2**32-1, [Symbol.isConcatSpreadable]: true})",
        "Array.prototype.reverse.call({length: 2**32})",
        "Array.prototype.copyWithin.call({length: 2**32}, 0, 1)",
        "Array.prototype.lastIndexOf.call({length: 2**53-1}, 1)",
        "Array.prototype.toLocaleString.call({length: 2**32})",
        "Array.from({length: 2**32-1})",
        "JSON.stringify(new Array(2**32-1))",
        "(() => { let a = []; for (let i = 0; i < 40; i++) a = [a, a]; return JSON.stringify(a); })()",
        "'x'.repeat(2**28)",
        "(() => { const O = Object; Object = () => ({length: 0}); return new Array(2**32-1).join(''); })()",
    ];
    for body in bodies {
        let code = format!("function main() {{ return {body}; }}");
        let e = call(&sb, Language::Js, &code, &mut host, b"", short()).unwrap_err();
        assert!(
            matches!(
                e.kind,
                FailureKind::Timeout | FailureKind::OutOfMemory | FailureKind::Exception
            ),
            "{body}: {e}"
        );
        let out = call(
            &sb,
            Language::Js,
            examples::JS_ECHO,
            &mut host,
            b"ok",
            short(),
        )
        .unwrap();
        assert_eq!(out.result, b"ok", "after {body}");
    }
    // Ordinary arrays and JSON still work through the wrapped built-ins,
    // replacers and spacing included.
    let ok = r#"function main() {
        const a = [3, 1, 2]; a.sort();
        const o = {b: 1, a: [1, {a: 2, c: 3}], c: new Number(4), d: {toJSON() { return {a: 5, z: 6}; }}};
        return [
          a.concat([4]).map(x => x * 2).join(','),
          Array.from('ab').join(''),
          JSON.stringify(o),
          JSON.stringify(o, ['c', 'a']),
          JSON.stringify(o, (k, v) => typeof v === 'number' ? v + 1 : v),
          JSON.stringify([1, [2]], null, 1),
          String(JSON.stringify(undefined)),
        ].join('|');
    }"#;
    let out = call(&sb, Language::Js, ok, &mut host, b"", short()).unwrap();
    assert_eq!(
        String::from_utf8(out.result).unwrap(),
        concat!(
            r#"2,4,6,8|ab|{"b":1,"a":[1,{"a":2,"c":3}],"c":4,"d":{"a":5,"z":6}}|"#,
            r#"{"c":4,"a":[1,{"c":3,"a":2}]}|"#,
            r#"{"b":2,"a":[2,{"a":3,"c":4}],"c":4,"d":{"a":6,"z":7}}|"#,
            "[\n 1,\n [\n  2\n ]\n]|undefined"
        )
    );
}

/// One tenant's retained globals count against its own runtime only: a
/// tenant that holds most of its memory does not make another fail.
#[test]
fn a_tenant_holding_javascript_memory_hurts_only_itself() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    let hog = "var kept = []; function main() { \
               for (let i = 0; i < 48; i++) kept.push(new ArrayBuffer(1 << 20)); return kept.length; }";
    // 64 MiB for each call: the runtime of a tenant holds at most that.
    let spec = |tenant: &'static str, code: &'static str| ProcSpec {
        tenant,
        name: "p",
        language: Language::Js,
        code_hash: code_hash(code.as_bytes()),
        limits: Limits {
            memory_bytes: 64 << 20,
            ..short()
        },
    };
    let mut load_hog = |_: &mut MapHost| Ok(hog.as_bytes().to_vec());
    let held = sb
        .call_procedure(&spec("hog", hog), &mut host, &mut load_hog, b"")
        .unwrap();
    assert_eq!(held.result, b"48");
    let grow = "var more = []; function main() { \
                for (let i = 0; i < 48; i++) more.push(new ArrayBuffer(1 << 20)); return more.length; }";
    let mut load_grow = |_: &mut MapHost| Ok(grow.as_bytes().to_vec());
    // The same amount in another tenant's runtime fits.
    let other = sb
        .call_procedure(&spec("other", grow), &mut host, &mut load_grow, b"")
        .unwrap();
    assert_eq!(other.result, b"48");
    // More of it in the hog's own runtime does not.
    let e = sb
        .call_procedure(&spec("hog", grow), &mut host, &mut load_grow, b"")
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::OutOfMemory, "{e}");
}

/// A wasm context whose call grew its memory past IDLE_MEMORY_BYTES_MAX is
/// not kept for reuse; smaller ones are.
#[test]
fn big_wasm_contexts_give_their_memory_back() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    let limits = Limits {
        memory_bytes: 64 << 20,
        timeout: Duration::from_secs(1),
    };
    let grower = |pages: u32| {
        format!(
            r#"(module (memory (export "memory") 1) (func (export "main") (param i32) (result i32) (drop (memory.grow (i32.const {pages}))) (i32.const 0)))"#
        )
    };
    let run = |code: &str, host: &mut MapHost| {
        call(&sb, Language::Wasm, code, host, b"", limits).unwrap();
    };
    run(examples::WASM_ECHO, &mut host);
    // 32 MiB: dropped after its call, so the echo stays this thread's.
    run(&grower(512), &mut host);
    assert_eq!(sb.idle_procedure_contexts(), 0);
    // 64 KiB more: kept, and the echo goes back to the pool.
    run(&grower(1), &mut host);
    assert_eq!(sb.idle_procedure_contexts(), 1);
}

/// Issue 41, item 3: a JavaScript procedure gets the memory it was given —
/// a 10 MB string and 100 MiB of buffers under 256 MiB, the same refused
/// (out of memory, and the sandbox usable after) under 16 MiB.
#[test]
fn js_procedures_get_the_memory_they_are_given() {
    let sb = Sandbox::new().unwrap();
    let mut host = MapHost::default();
    let code = "function main() { const s = 'x'.repeat(10000000); const a = []; \
                for (let i = 0; i < 100; i++) a.push(new ArrayBuffer(1 << 20)); \
                return s.length + a.length; }";
    let spec = |tenant: &'static str, mib: usize| ProcSpec {
        tenant,
        name: "big",
        language: Language::Js,
        code_hash: code_hash(code.as_bytes()),
        limits: Limits {
            memory_bytes: mib << 20,
            timeout: Duration::from_secs(1),
        },
    };
    let mut load = |_: &mut MapHost| Ok(code.as_bytes().to_vec());
    let out = sb
        .call_procedure(&spec("roomy", 256), &mut host, &mut load, b"")
        .unwrap();
    assert_eq!(out.result, b"10000100");
    let e = sb
        .call_procedure(&spec("tight", 16), &mut host, &mut load, b"")
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::OutOfMemory, "{e}");
    let again = sb
        .call_procedure(&spec("roomy", 256), &mut host, &mut load, b"")
        .unwrap();
    assert_eq!(again.result, b"10000100");
}
