//! A wasm workflow's host calls (`tabos_sandbox::workflow`) on their own,
//! against a host of the test's: an answer too long for the guest's buffer
//! is E2BIG and kept, so the same call asked again gets it without the
//! host running the step twice; a malformed outcome is EINVAL.

use std::sync::{Arc, Mutex};

use tabos_sandbox::host::{Host, HostError, Received, RecvCall};
use tabos_sandbox::workflow::{WfBegun, WfHost, WfOutcome};
use tabos_sandbox::{Outcome, RunSpec, Sandbox};

/// What the guest asked the host for.
#[derive(Default)]
struct Calls {
    steps: Vec<String>,
    finished: Vec<WfOutcome>,
}

struct TestHost(Arc<Mutex<Calls>>);

impl WfHost for TestHost {
    fn wf_step(&mut self, name: &str) -> Result<WfBegun, HostError> {
        self.0.lock().unwrap().steps.push(name.to_string());
        Ok(WfBegun::Done(WfOutcome::Success(b"hello".to_vec())))
    }
    fn wf_finish(&mut self, o: WfOutcome) -> Result<(), HostError> {
        self.0.lock().unwrap().finished.push(o);
        Ok(())
    }
}

impl Host for TestHost {
    fn send(&mut self, _: &[&str], _: &[u8], _: Option<&str>) -> Result<(), HostError> {
        Err(HostError::Unsupported)
    }
    fn recv(&mut self, _: RecvCall<'_>) -> Result<Received, HostError> {
        Err(HostError::Unsupported)
    }
    fn workflow(&mut self) -> Option<&mut dyn WfHost> {
        Some(self)
    }
}

/// Runs module `wat` with `host`; how it ended.
fn run(sb: &Sandbox, wat: &str, host: Option<Box<dyn Host + Send>>) -> Outcome {
    let program = sb.compile(wat.as_bytes()).expect("compiles");
    let spec = RunSpec {
        args: vec!["wf".into()],
        env: Vec::new(),
        stdin: None,
        stdout: Box::new(std::io::sink()),
        stderr: Box::new(std::io::sink()),
        memory_bytes: 16 << 20,
        host,
        preopen: None,
    };
    sb.run(&program, spec, &sb.stop_handle()).expect("runs")
}

/// Step "s" into a 2-byte buffer (E2BIG), again into 64 bytes (its kept
/// answer), a finish with a bad flag (EINVAL), then a good finish of the
/// answer; exits with E2BIG*1000 + second errno*100 + state*10 + length,
/// plus EINVAL's 28 * 10000.
const GUEST: &str = r#"(module
  (import "tabos" "wf_step" (func $step (param i32 i32 i32 i32 i32) (result i32)))
  (import "tabos" "wf_finish" (func $finish (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "s")
  (func (export "_start")
    (local $first i32) (local $second i32) (local $bad i32)
    (local.set $first (call $step (i32.const 0) (i32.const 1) (i32.const 1024) (i32.const 2) (i32.const 16)))
    (local.set $second (call $step (i32.const 0) (i32.const 1) (i32.const 1024) (i32.const 64) (i32.const 16)))
    (local.set $bad (call $finish (i32.const 1024) (i32.const 5) (i32.const 2)))
    (drop (call $finish (i32.const 1024) (i32.load (i32.const 16)) (i32.const 0)))
    (call $exit (i32.add (i32.add (i32.mul (local.get $bad) (i32.const 10000))
                                  (i32.mul (local.get $first) (i32.const 1000)))
                 (i32.add (i32.mul (local.get $second) (i32.const 100))
                          (i32.add (i32.mul (i32.load (i32.const 20)) (i32.const 10))
                                   (i32.load (i32.const 16))))))))"#;

#[test]
fn an_answer_too_long_is_kept_for_the_same_call_and_nothing_runs_twice() {
    let sb = Sandbox::new().unwrap();
    let calls = Arc::new(Mutex::new(Calls::default()));
    let outcome = run(&sb, GUEST, Some(Box::new(TestHost(calls.clone()))));
    // EINVAL 28, E2BIG 1, then 0 with state 1 (recorded) and length 5.
    assert_eq!(outcome, Outcome::Exited(28 * 10_000 + 1_000 + 15));
    let calls = calls.lock().unwrap();
    assert_eq!(calls.steps, ["s"], "the step was asked for once");
    assert_eq!(calls.finished, [WfOutcome::Success(b"hello".to_vec())]);
}

/// A host that offers no workflow calls: ENOSYS.
#[test]
fn without_a_workflow_host_the_calls_are_enosys() {
    let sb = Sandbox::new().unwrap();
    let wat = r#"(module
      (import "tabos" "wf_sleep" (func $sleep (param i64) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start") (call $exit (call $sleep (i64.const 1)))))"#;
    let outcome = run(&sb, wat, None);
    assert_eq!(
        outcome,
        Outcome::Exited(tabos_sandbox::host::ENOSYS as u32 as i32)
    );
}
