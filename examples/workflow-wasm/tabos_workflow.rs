//! The guest's side of a tabos workflow written as a wasm module: the
//! `tabos` host calls `wf_*` (crates/sandbox/src/workflow.rs) behind a
//! small API, as the Rust and Python executors offer it.
//!
//! ```ignore
//! tabos_workflow::run(|ctx, input| {
//!     let n = ctx.procedure("reserve", &input)?;       // exactly once
//!     let bill = ctx.step("invoice", || Ok(n.clone()))?; // recorded
//!     ctx.sleep(500)?;                                  // durable
//!     Ok(bill)
//! })
//! ```
//!
//! A step's outcome is recorded by the node before the function goes on,
//! so when the proc runs again (its node was lost) each recorded step
//! gives back what it gave the first time instead of running again: the
//! function must take the same steps in the same order on the same input.

#[link(wasm_import_module = "tabos")]
extern "C" {
    fn wf_input(buf: *mut u8, cap: u32, out: *mut u32) -> i32;
    fn wf_step(name: *const u8, len: u32, buf: *mut u8, cap: u32, out: *mut u32) -> i32;
    fn wf_step_end(data: *const u8, len: u32, failed: i32) -> i32;
    fn wf_procedure(
        name: *const u8,
        len: u32,
        args: *const u8,
        args_len: u32,
        buf: *mut u8,
        cap: u32,
        out: *mut u32,
    ) -> i32;
    fn wf_sleep(ms: i64) -> i32;
    fn wf_finish(data: *const u8, len: u32, failed: i32) -> i32;
    fn name_wait(path: *const u8, len: u32, mode: i32, timeout_ms: i64) -> i32;
}

const E2BIG: i32 = 1;
const ECANCELED: i32 = 11;
/// The first buffer an answer is read into (a larger one is made when the
/// host says the answer is longer).
const BUF_FIRST: usize = 64 << 10;

/// Why a workflow call did not give an answer.
#[derive(Debug)]
pub enum Error {
    /// The workflow is no longer this proc's to run (cancelled, ended):
    /// return at once; nothing more is recorded.
    Stopped,
    /// A step or procedure failed (its error, recorded), or the function
    /// gives up: the workflow's error.
    Failed(String),
    /// A host call failed with this errno (its reason is on stderr).
    Host(i32),
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Failed(s)
    }
}

fn check(errno: i32) -> Result<(), Error> {
    match errno {
        0 => Ok(()),
        ECANCELED => Err(Error::Stopped),
        e => Err(Error::Host(e)),
    }
}

/// Calls `f(buf, cap, out)` until its answer fits, returning (state, bytes).
fn answer(mut f: impl FnMut(*mut u8, u32, *mut u32) -> i32) -> Result<(u32, Vec<u8>), Error> {
    let mut buf = vec![0u8; BUF_FIRST];
    let mut out = [0u32; 2];
    loop {
        match f(buf.as_mut_ptr(), buf.len() as u32, out.as_mut_ptr()) {
            E2BIG => buf.resize(out[0] as usize, 0),
            e => {
                check(e)?;
                buf.truncate(out[0] as usize);
                return Ok((out[1], buf));
            }
        }
    }
}

/// An outcome the host recorded: 1 success (its bytes), 2 error.
fn recorded(state: u32, bytes: Vec<u8>) -> Result<Vec<u8>, Error> {
    match state {
        1 => Ok(bytes),
        _ => Err(Error::Failed(String::from_utf8_lossy(&bytes).into_owned())),
    }
}

/// What a workflow function acts through.
pub struct Ctx {
    _private: (),
}

impl Ctx {
    /// Step `name`: runs `f` and records what it returns, or — run before —
    /// gives back what was recorded without running it. An error `f`
    /// returns is recorded as the step's and returned.
    pub fn step(
        &mut self,
        name: &str,
        f: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>, Error> {
        let (state, bytes) = answer(|buf, cap, out| unsafe {
            wf_step(name.as_ptr(), name.len() as u32, buf, cap, out)
        })?;
        if state != 0 {
            return recorded(state, bytes);
        }
        let got = f();
        let (data, failed) = match &got {
            Ok(v) => (v.as_slice(), 0),
            Err(e) => (e.as_bytes(), 1),
        };
        check(unsafe { wf_step_end(data.as_ptr(), data.len() as u32, failed) })?;
        got.map_err(Error::Failed)
    }

    /// Stored procedure `name` of the realm, called with `args` in the
    /// transaction that records the step: exactly once, however often the
    /// proc runs.
    pub fn procedure(&mut self, name: &str, args: &[u8]) -> Result<Vec<u8>, Error> {
        let (state, bytes) = answer(|buf, cap, out| unsafe {
            wf_procedure(
                name.as_ptr(),
                name.len() as u32,
                args.as_ptr(),
                args.len() as u32,
                buf,
                cap,
                out,
            )
        })?;
        recorded(state, bytes)
    }

    /// Sleeps `ms` milliseconds, durably: a proc run again sleeps only what
    /// is left.
    pub fn sleep(&mut self, ms: u64) -> Result<(), Error> {
        check(unsafe { wf_sleep(ms.min(i64::MAX as u64) as i64) })
    }

    /// Waits until name `path` exists in the realm's namespace (not a
    /// step: call it inside one).
    pub fn wait_for_name(&mut self, path: &str) -> Result<(), Error> {
        check(unsafe { name_wait(path.as_ptr(), path.len() as u32, 0, -1) })
    }
}

/// The function this proc runs: the proc's first argument.
pub fn function() -> String {
    std::env::args().nth(1).unwrap_or_default()
}

/// Runs the proc's workflow with `f` and records its end. Returns the
/// proc's exit status.
pub fn run(f: impl FnOnce(&mut Ctx, Vec<u8>) -> Result<Vec<u8>, Error>) -> i32 {
    let (ended, input) = match answer(|buf, cap, out| unsafe { wf_input(buf, cap, out) }) {
        Ok(got) => got,
        Err(e) => {
            eprintln!("no workflow to run: {e:?}");
            return 2;
        }
    };
    if ended != 0 {
        return 0; // run again after its end: nothing to do
    }
    let (data, failed) = match f(&mut Ctx { _private: () }, input) {
        Ok(out) => (out, 0),
        Err(Error::Failed(e)) => (e.into_bytes(), 1),
        Err(Error::Stopped) => return 0,
        Err(Error::Host(errno)) => {
            // The node fails the workflow with the proc's end.
            eprintln!("a workflow call failed: errno {errno}");
            return 1;
        }
    };
    match check(unsafe { wf_finish(data.as_ptr(), data.len() as u32, failed) }) {
        Ok(()) | Err(Error::Stopped) => 0,
        Err(e) => {
            eprintln!("cannot finish the workflow: {e:?}");
            1
        }
    }
}
