//! The WebAssembly runtime on its own: WASI commands written as WAT.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tabos_sandbox::{Error, Outcome, RunSpec, Sandbox};

/// A sink the test can read after the run.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

struct Run {
    outcome: Outcome,
    stdout: String,
    stderr: String,
}

fn run_with(sb: &Sandbox, wat: &str, args: &[&str], memory_bytes: usize) -> Run {
    let program = sb.compile(wat.as_bytes()).expect("compiles");
    let (out, err) = (Captured::default(), Captured::default());
    let spec = RunSpec {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![("GREETING".into(), "hi".into())],
        stdin: None,
        stdout: Box::new(out.clone()),
        stderr: Box::new(err.clone()),
        memory_bytes,
        host: None,
        preopen: None,
    };
    let outcome = sb.run(&program, spec, &sb.stop_handle()).expect("runs");
    Run {
        outcome,
        stdout: out.text(),
        stderr: err.text(),
    }
}

fn run(sb: &Sandbox, wat: &str) -> Run {
    run_with(sb, wat, &["prog"], 16 << 20)
}

const HELLO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (data (i32.const 32) "oops\n")
  (func (export "_start")
    ;; iovec at 0: {16, 6}; then stderr iovec at 8: {32, 5}
    (i32.store (i32.const 0) (i32.const 16)) (i32.store (i32.const 4) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 100)))
    (i32.store (i32.const 8) (i32.const 32)) (i32.store (i32.const 12) (i32.const 5))
    (drop (call $fd_write (i32.const 2) (i32.const 8) (i32.const 1) (i32.const 100)))))"#;

#[test]
fn stdout_and_stderr_are_captured_and_start_returning_is_status_zero() {
    let sb = Sandbox::new().unwrap();
    let r = run(&sb, HELLO);
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.stdout, "hello\n");
    assert_eq!(r.stderr, "oops\n");
}

#[test]
fn proc_exit_gives_the_status() {
    let sb = Sandbox::new().unwrap();
    let wat = r#"(module
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start") (call $exit (i32.const 7)) unreachable))"#;
    assert_eq!(run(&sb, wat).outcome, Outcome::Exited(7));
}

#[test]
fn arguments_and_environment_are_seen() {
    let sb = Sandbox::new().unwrap();
    // Exits with argc * 100 + the length of the first environment string
    // ("GREETING=hi" plus its NUL = 12).
    let wat = r#"(module
      (import "wasi_snapshot_preview1" "args_sizes_get" (func $as (param i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "environ_sizes_get" (func $es (param i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start")
        (drop (call $as (i32.const 0) (i32.const 4)))
        (drop (call $es (i32.const 8) (i32.const 12)))
        (call $exit (i32.add (i32.mul (i32.load (i32.const 0)) (i32.const 100))
                             (i32.load (i32.const 12))))))"#;
    let r = run_with(&sb, wat, &["prog", "a", "b"], 16 << 20);
    assert_eq!(r.outcome, Outcome::Exited(312));
}

#[test]
fn a_bad_pointer_in_a_host_call_is_efault_not_a_crash() {
    let sb = Sandbox::new().unwrap();
    // The iovec points past the end of the one-page memory.
    let wat = r#"(module
      (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start")
        (i32.store (i32.const 0) (i32.const 65530)) (i32.store (i32.const 4) (i32.const 100))
        (call $exit (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;
    let r = run(&sb, wat);
    assert_eq!(r.outcome, Outcome::Exited(21), "EFAULT");
    assert_eq!(r.stdout, "");
}

#[test]
fn unsupported_wasi_functions_link_and_return_enosys() {
    let sb = Sandbox::new().unwrap();
    // (path_open is served now, for a proc's preopened code; removing a
    // file never is.)
    let wat = r#"(module
      (import "wasi_snapshot_preview1" "path_unlink_file"
        (func $unlink (param i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start")
        (call $exit (call $unlink (i32.const 3) (i32.const 0) (i32.const 0)))))"#;
    assert_eq!(run(&sb, wat).outcome, Outcome::Exited(52), "ENOSYS");
}

#[test]
fn traps_and_stack_overflow_are_outcomes() {
    let sb = Sandbox::new().unwrap();
    let unreachable =
        r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#;
    match run(&sb, unreachable).outcome {
        Outcome::Trapped(m) => assert!(m.contains("unreachable"), "{m}"),
        o => panic!("{o:?}"),
    }
    let recurse = r#"(module (memory (export "memory") 1)
      (func $f (call $f)) (func (export "_start") (call $f)))"#;
    match run(&sb, recurse).outcome {
        Outcome::Trapped(m) => assert!(m.contains("call stack exhausted"), "{m}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn memory_beyond_the_limit_is_refused_to_the_guest() {
    let sb = Sandbox::new().unwrap();
    // Grows by 32 pages (2 MiB) and exits with memory.grow's result + 10:
    // 11 if it grew from 1 page, 9 if refused (-1).
    let wat = r#"(module
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start")
        (call $exit (i32.add (memory.grow (i32.const 32)) (i32.const 10)))))"#;
    assert_eq!(
        run_with(&sb, wat, &["p"], 1 << 20).outcome,
        Outcome::Exited(9)
    );
    assert_eq!(
        run_with(&sb, wat, &["p"], 4 << 20).outcome,
        Outcome::Exited(11)
    );
}

const SPIN: &str = r#"(module (memory (export "memory") 1)
  (func (export "_start") (loop $l (br $l))))"#;

#[test]
fn an_infinite_loop_is_stopped_from_another_thread() {
    let sb = Sandbox::new().unwrap();
    let program = sb.compile(SPIN.as_bytes()).unwrap();
    let stop = sb.stop_handle();
    let (sb2, stop2) = (sb.clone(), stop.clone());
    let t = std::thread::spawn(move || {
        let spec = RunSpec {
            args: vec!["spin".into()],
            env: vec![],
            stdin: None,
            stdout: Box::new(std::io::sink()),
            stderr: Box::new(std::io::sink()),
            memory_bytes: 1 << 20,
            host: None,
            preopen: None,
        };
        sb2.run(&program, spec, &stop2).unwrap()
    });
    // Another run on the same engine is not disturbed by the epoch bump.
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.stop();
    assert_eq!(t.join().unwrap(), Outcome::Stopped);
    assert_eq!(run(&sb, HELLO).outcome, Outcome::Exited(0));
}

#[test]
fn bad_modules_are_refused_with_the_compilers_message() {
    let sb = Sandbox::new().unwrap();
    match sb.compile(b"\0asm\x01\0\0\0garbage") {
        Err(Error::InvalidModule(m)) => assert!(!m.is_empty()),
        r => panic!("{r:?}"),
    }
    match sb.compile(b"(module (func $f (result i32) (i64.const 1)))") {
        Err(Error::InvalidModule(m)) => assert!(m.contains("type mismatch"), "{m}"),
        r => panic!("{r:?}"),
    }
    match sb.compile(b"(module (memory 1))") {
        Err(Error::InvalidModule(m)) => assert!(m.contains("_start"), "{m}"),
        r => panic!("{r:?}"),
    }
    let unknown_import = r#"(module (import "env" "launch_missiles" (func))
      (func (export "_start")))"#;
    match sb.compile(unknown_import.as_bytes()) {
        Err(Error::InvalidModule(m)) => assert!(m.contains("launch_missiles"), "{m}"),
        r => panic!("{r:?}"),
    }
    match sb.compile_file(std::path::Path::new("/nonexistent/prog.wasm")) {
        Err(Error::Io { .. }) => {}
        r => panic!("{r:?}"),
    }
    assert_eq!(sb.cached_modules(), 0, "nothing invalid is cached");
}

#[test]
fn modules_are_compiled_once_per_content() {
    let sb = Sandbox::new().unwrap();
    sb.compile(HELLO.as_bytes()).unwrap();
    sb.compile(HELLO.as_bytes()).unwrap();
    assert_eq!(sb.cached_modules(), 1);
    sb.compile(SPIN.as_bytes()).unwrap();
    assert_eq!(sb.cached_modules(), 2);
}

/// The tabos host calls without a host answer ENOSYS; bad pointers and
/// flags are refused before any host work.
#[test]
fn tabos_host_calls_check_arguments_and_need_a_host() {
    let sb = Sandbox::new().unwrap();
    let call = |body: &str| {
        let wat = format!(
            r#"(module
  (import "tabos" "send" (func $send (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "recv" (func $recv (param i32 i32 i32 i64 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "inbox")
  (func (export "_start") (call $exit {body})))"#
        );
        run(&sb, &wat).outcome
    };
    let send = |to: &str, to_len: &str, data: &str, data_len: &str| {
        call(&format!(
            "(call $send (i32.const {to}) (i32.const {to_len}) (i32.const {data}) (i32.const {data_len}) (i32.const 0) (i32.const 0))"
        ))
    };
    let recv = |flags: &str, buf: &str, lens: &str| {
        call(&format!(
            "(call $recv (i32.const 0) (i32.const 5) (i32.const {flags}) (i64.const 0) (i32.const {buf}) (i32.const 64) (i32.const 128) (i32.const 16) (i32.const {lens}))"
        ))
    };
    use tabos_sandbox::host::{EFAULT, EINVAL, ENOSYS};
    assert_eq!(send("0", "5", "16", "8"), Outcome::Exited(ENOSYS));
    assert_eq!(
        send("0", "0", "16", "8"),
        Outcome::Exited(EINVAL),
        "no receiver"
    );
    assert_eq!(send("0", "5", "65530", "100"), Outcome::Exited(EFAULT));
    assert_eq!(send("65530", "100", "16", "8"), Outcome::Exited(EFAULT));
    assert_eq!(
        send("0", "-1", "16", "8"),
        Outcome::Exited(EINVAL),
        "too long"
    );
    assert_eq!(recv("0", "256", "512"), Outcome::Exited(ENOSYS));
    assert_eq!(recv("0", "65500", "512"), Outcome::Exited(EFAULT));
    assert_eq!(recv("0", "256", "65532"), Outcome::Exited(EFAULT));
    assert_eq!(
        recv("4", "256", "512"),
        Outcome::Exited(EINVAL),
        "unknown flag"
    );
}

/// The namespace host calls check their pointers, paths and modes before
/// any host work, and answer ENOSYS without a host.
#[test]
fn tabos_name_calls_check_arguments_and_need_a_host() {
    let sb = Sandbox::new().unwrap();
    let call = |body: &str| {
        let wat = format!(
            r#"(module
  (import "tabos" "name_get" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "name_put" (func $put (param i32 i32 i32 i32 i64 i32) (result i32)))
  (import "tabos" "name_remove" (func $remove (param i32 i32) (result i32)))
  (import "tabos" "name_wait" (func $wait (param i32 i32 i32 i64) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "/a/b")
  (func (export "_start") (call $exit {body})))"#
        );
        run(&sb, &wat).outcome
    };
    use tabos_sandbox::host::{EFAULT, EINVAL, ENOSYS};
    let get = |len: &str, buf: &str, out: &str| {
        call(&format!(
            "(call $get (i32.const 0) (i32.const {len}) (i32.const {buf}) (i32.const 64) (i32.const {out}))"
        ))
    };
    assert_eq!(get("4", "256", "512"), Outcome::Exited(ENOSYS));
    assert_eq!(get("4", "65500", "512"), Outcome::Exited(EFAULT));
    assert_eq!(get("4", "256", "65530"), Outcome::Exited(EFAULT));
    assert_eq!(
        get("0", "256", "512"),
        Outcome::Exited(EINVAL),
        "empty path"
    );
    assert_eq!(
        get("2000", "256", "512"),
        Outcome::Exited(EINVAL),
        "too long"
    );
    let put = |data: &str, out: &str| {
        call(&format!(
            "(call $put (i32.const 0) (i32.const 4) (i32.const {data}) (i32.const 8) (i64.const -1) (i32.const {out}))"
        ))
    };
    assert_eq!(put("16", "512"), Outcome::Exited(ENOSYS));
    assert_eq!(put("65532", "512"), Outcome::Exited(EFAULT));
    assert_eq!(put("16", "65532"), Outcome::Exited(EFAULT));
    assert_eq!(
        call("(call $remove (i32.const 65530) (i32.const 100))"),
        Outcome::Exited(EFAULT)
    );
    assert_eq!(
        call("(call $wait (i32.const 0) (i32.const 4) (i32.const 7) (i64.const 0))"),
        Outcome::Exited(EINVAL),
        "unknown mode"
    );
    assert_eq!(
        call("(call $wait (i32.const 0) (i32.const 4) (i32.const 1) (i64.const 0))"),
        Outcome::Exited(ENOSYS)
    );
}

/// Reads `data.txt` of its preopened directory (descriptor 3, named `.`)
/// to stdout; then tries to leave the directory (`../x`, `/etc/passwd`)
/// and to create a file, and exits 2, 3 or 4 if any of those is not
/// refused with ENOTCAPABLE, EROFS and ENOTCAPABLE.
const READS_ITS_DIR: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name" (func $dirname (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "data.txt")
  (data (i32.const 16) "../x")
  (data (i32.const 32) "new")
  (data (i32.const 48) "/etc/passwd")
  (func (export "_start")
    (if (call $prestat (i32.const 3) (i32.const 400)) (then (call $exit (i32.const 10))))
    (if (i32.ne (i32.load (i32.const 404)) (i32.const 1)) (then (call $exit (i32.const 11))))
    (drop (call $dirname (i32.const 3) (i32.const 408) (i32.const 1)))
    (if (i32.ne (i32.load8_u (i32.const 408)) (i32.const 46)) (then (call $exit (i32.const 12))))
    (if (i32.ne (call $prestat (i32.const 4) (i32.const 400)) (i32.const 8)) (then (call $exit (i32.const 13))))
    (if (call $open (i32.const 3) (i32.const 1) (i32.const 0) (i32.const 8) (i32.const 0)
                    (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100))
      (then (call $exit (i32.const 1))))
    (i32.store (i32.const 200) (i32.const 1024))
    (i32.store (i32.const 204) (i32.const 256))
    (if (call $read (i32.load (i32.const 100)) (i32.const 200) (i32.const 1) (i32.const 300))
      (then (call $exit (i32.const 5))))
    (i32.store (i32.const 204) (i32.load (i32.const 300)))
    (drop (call $write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 304)))
    (if (i32.ne (call $open (i32.const 3) (i32.const 1) (i32.const 16) (i32.const 4) (i32.const 0)
                    (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100)) (i32.const 76))
      (then (call $exit (i32.const 2))))
    (if (i32.ne (call $open (i32.const 3) (i32.const 1) (i32.const 32) (i32.const 3) (i32.const 1)
                    (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100)) (i32.const 69))
      (then (call $exit (i32.const 3))))
    (if (i32.ne (call $open (i32.const 3) (i32.const 1) (i32.const 48) (i32.const 11) (i32.const 0)
                    (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100)) (i32.const 76))
      (then (call $exit (i32.const 4))))
    (call $exit (i32.const 0))))"#;

#[test]
fn a_proc_reads_its_preopened_directory_and_nothing_beyond_it() {
    let sb = Sandbox::new().unwrap();
    let dir = std::env::temp_dir().join(format!("tabos-preopen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data.txt"), "from the code\n").unwrap();
    let program = sb.compile(READS_ITS_DIR.as_bytes()).unwrap();
    let out = Captured::default();
    let spec = |preopen| RunSpec {
        args: vec!["reader".into()],
        env: vec![],
        stdin: None,
        stdout: Box::new(out.clone()),
        stderr: Box::new(std::io::sink()),
        memory_bytes: 1 << 20,
        host: None,
        preopen,
    };
    let got = sb
        .run(&program, spec(Some(dir.clone())), &sb.stop_handle())
        .unwrap();
    assert_eq!(got, Outcome::Exited(0));
    assert_eq!(out.text(), "from the code\n");
    assert!(!dir.join("new").exists());
    // Without a directory there is nothing to find.
    let got = sb.run(&program, spec(None), &sb.stop_handle()).unwrap();
    assert_eq!(got, Outcome::Exited(10));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `cat`: copies descriptor 0 to descriptor 1 in reads of at most 7 bytes
/// (so a long input takes many reads), then exits 0.
const CAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (block $done
      (loop $more
        ;; iovec at 0: buffer 64, length 7; bytes read at 16
        (i32.store (i32.const 0) (i32.const 64))
        (i32.store (i32.const 4) (i32.const 7))
        (br_if $done (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)))
        (br_if $done (i32.eqz (i32.load (i32.const 16))))
        (i32.store (i32.const 4) (i32.load (i32.const 16)))
        (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 20)))
        (br $more)))))"#;

#[test]
fn a_run_reads_the_stdin_it_is_given_and_none_is_end_of_file() {
    let sb = Sandbox::new().unwrap();
    let program = sb.compile(CAT.as_bytes()).unwrap();
    let input: Vec<u8> = (0..10_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let out = Captured::default();
    let spec = |stdin: Option<Box<dyn std::io::Read + Send>>| RunSpec {
        args: vec!["cat".into()],
        env: vec![],
        stdin,
        stdout: Box::new(out.clone()),
        stderr: Box::new(std::io::sink()),
        memory_bytes: 1 << 20,
        host: None,
        preopen: None,
    };
    let got = sb
        .run(
            &program,
            spec(Some(Box::new(std::io::Cursor::new(input.clone())))),
            &sb.stop_handle(),
        )
        .unwrap();
    assert_eq!(got, Outcome::Exited(0));
    assert_eq!(out.0.lock().unwrap().as_slice(), input.as_slice());
    out.0.lock().unwrap().clear();
    let got = sb.run(&program, spec(None), &sb.stop_handle()).unwrap();
    assert_eq!(got, Outcome::Exited(0));
    assert!(out.0.lock().unwrap().is_empty());
}
