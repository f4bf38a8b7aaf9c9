//! The host calls of a wasm workflow proc (import module `tabos`): a
//! durable workflow written as a wasm module (issue 41), whose steps are
//! recorded by the node as a Rust or Python executor's are, so that a proc
//! run again after its node was lost replays the recorded steps and goes
//! on from the first one not recorded.
//!
//! ```text
//! wf_input(buf, cap, out) -> errno
//!     The workflow this proc runs: its input to buf, and at `out` 8 bytes:
//!     the input's length (u32) and its state (u32: 0 to run; 1 it has
//!     ended already — the proc was run again after its end — so the proc
//!     should exit). ENOENT: the proc runs no workflow. The proc's first
//!     argument is the workflow's function name.
//! wf_step(name_ptr, name_len, buf, cap, out) -> errno
//!     Begins the function's next step, named `name`. At `out` 8 bytes: a
//!     length (u32) and what to do (u32): 0 run it, then call wf_step_end;
//!     1 it ran before: its recorded output is in buf (do not run it);
//!     2 it failed before: its recorded error is in buf.
//! wf_step_end(data, data_len, failed) -> errno
//!     Records the step begun last: its output, or (failed 1) its error.
//! wf_procedure(name_ptr, name_len, args, args_len, buf, cap, out) -> errno
//!     The next step: stored procedure `name` of the realm called with
//!     `args` in the transaction that records the step — exactly once.
//!     At `out`: the length (u32) and 1 success (its result in buf) or 2
//!     error (its message in buf).
//! wf_sleep(ms: i64) -> errno
//!     A durable sleep: a step that records when it ends, so a proc run
//!     again sleeps only what is left.
//! wf_finish(data, data_len, failed) -> errno
//!     Ends the workflow with its output, or (failed 1) its error.
//! ```
//!
//! Steps are numbered by their order in the run, so the function must take
//! the same steps in the same order each time it runs on the same input.
//! An answer longer than `cap` is E2BIG with its length at `out`; it is kept,
//! and the same call asked again (with a larger buffer) gets it without
//! running anything twice. Once the workflow is cancelled or has ended,
//! every call is ECANCELED: the proc should exit. Other errnos are
//! [`crate::host`]'s.

use std::time::Duration;

use wasmtime::{Caller, Linker};

use crate::host::{fail, host_calls, text, E2BIG, EFAULT, EINVAL, ENOSYS, MODULE, NAME_BYTES_MAX};
use crate::wasi::{memory, put_u32, range};
use crate::RunState;

/// How a step, a procedure or a workflow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WfOutcome {
    Success(Vec<u8>),
    Error(String),
}

/// The workflow a proc runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WfRun {
    pub input: Vec<u8>,
    /// It has ended: the proc has nothing to do.
    pub ended: bool,
}

/// What beginning a step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WfBegun {
    /// Not recorded: run it.
    Run,
    /// Recorded: its outcome, not to be run again.
    Done(WfOutcome),
}

/// What tabos does for a workflow proc's calls; implemented by the node.
/// Each defaults to "not offered" (`ENOSYS`).
pub trait WfHost {
    fn wf_input(&mut self) -> Result<WfRun, crate::host::HostError> {
        Err(crate::host::HostError::Unsupported)
    }
    fn wf_step(&mut self, _name: &str) -> Result<WfBegun, crate::host::HostError> {
        Err(crate::host::HostError::Unsupported)
    }
    fn wf_step_end(&mut self, _outcome: WfOutcome) -> Result<(), crate::host::HostError> {
        Err(crate::host::HostError::Unsupported)
    }
    fn wf_procedure(
        &mut self,
        _name: &str,
        _args: &[u8],
    ) -> Result<WfOutcome, crate::host::HostError> {
        Err(crate::host::HostError::Unsupported)
    }
    fn wf_sleep(&mut self, _d: Duration) -> Result<(), crate::host::HostError> {
        Err(crate::host::HostError::Unsupported)
    }
    fn wf_finish(&mut self, _outcome: WfOutcome) -> Result<(), crate::host::HostError> {
        Err(crate::host::HostError::Unsupported)
    }
}

/// An answer that did not fit the guest's buffer, kept for the same call.
pub(crate) struct Kept {
    call: &'static str,
    name: String,
    state: u32,
    data: Vec<u8>,
}

/// Most bytes of a step's or a workflow's output (the kernel's limit).
pub const VALUE_BYTES_MAX: u32 = 1 << 20;
/// Longest sleep one call takes (a year).
pub const SLEEP_MS_MAX: i64 = 366 * 24 * 3_600 * 1_000;

fn outcome_state(o: WfOutcome) -> (u32, Vec<u8>) {
    match o {
        WfOutcome::Success(v) => (1, v),
        WfOutcome::Error(e) => (2, e.into_bytes()),
    }
}

/// Writes an answer (`state`, `data`) to `buf`/`out`, or keeps it and says
/// E2BIG when it does not fit.
fn answer(
    caller: &mut Caller<'_, RunState>,
    call: &'static str,
    name: &str,
    (state, data): (u32, Vec<u8>),
    buf: i32,
    cap: i32,
    out: i32,
) -> i32 {
    let Some((mem, st)) = memory(caller) else {
        return EFAULT;
    };
    if range(mem, buf, cap as u32).is_none() || range(mem, out, 8).is_none() {
        return EFAULT;
    }
    put_u32(mem, out, data.len() as u32);
    put_u32(mem, out + 4, state);
    if data.len() > cap as u32 as usize {
        st.wf_kept = Some(Kept {
            call,
            name: name.to_string(),
            state,
            data,
        });
        return E2BIG;
    }
    let b = buf as u32 as usize;
    mem[b..b + data.len()].copy_from_slice(&data);
    0
}

/// The answer kept for this call, if any (taken).
fn kept(caller: &mut Caller<'_, RunState>, call: &str, name: &str) -> Option<(u32, Vec<u8>)> {
    let st = caller.data_mut();
    match st.wf_kept.take() {
        Some(k) if k.call == call && k.name == name => Some((k.state, k.data)),
        // Another call: the kept answer was not wanted after all.
        _ => None,
    }
}

/// Runs a workflow call on the host, its error an errno.
fn with_wf<T>(
    caller: &mut Caller<'_, RunState>,
    call: &str,
    f: impl FnOnce(&mut dyn WfHost) -> Result<T, crate::host::HostError>,
) -> Result<T, i32> {
    let state = caller.data_mut();
    let Some(host) = state.host.as_mut() else {
        return Err(ENOSYS);
    };
    let Some(wf) = host.workflow() else {
        return Err(ENOSYS);
    };
    f(wf).map_err(|e| fail(state, call, &e))
}

/// A name argument (a step's, a procedure's).
fn name_arg(caller: &mut Caller<'_, RunState>, ptr: i32, len: i32) -> Result<String, i32> {
    let Some((mem, _)) = memory(caller) else {
        return Err(EFAULT);
    };
    match text(mem, ptr, len, NAME_BYTES_MAX)? {
        Some(n) => Ok(n.to_string()),
        None => Err(EINVAL),
    }
}

/// Bytes of guest memory (an output, arguments), at most
/// [`VALUE_BYTES_MAX`].
fn bytes_arg(caller: &mut Caller<'_, RunState>, ptr: i32, len: i32) -> Result<Vec<u8>, i32> {
    if len as u32 > VALUE_BYTES_MAX {
        return Err(EINVAL);
    }
    let Some((mem, _)) = memory(caller) else {
        return Err(EFAULT);
    };
    range(mem, ptr, len as u32)
        .map(|r| mem[r].to_vec())
        .ok_or(EFAULT)
}

/// An outcome the guest reports: its bytes, an error when `failed` is 1.
fn outcome_arg(
    caller: &mut Caller<'_, RunState>,
    data: i32,
    len: i32,
    failed: i32,
) -> Result<WfOutcome, i32> {
    let bytes = bytes_arg(caller, data, len)?;
    match failed {
        0 => Ok(WfOutcome::Success(bytes)),
        1 => Ok(WfOutcome::Error(
            String::from_utf8_lossy(&bytes).into_owned(),
        )),
        _ => Err(EINVAL),
    }
}

/// Answers `call` (of `name`) with the answer kept for it, or with what
/// `ask` gets from the host: written to `buf`/`out`, or kept when too long.
#[allow(clippy::too_many_arguments)]
fn answered(
    caller: &mut Caller<'_, RunState>,
    call: &'static str,
    name: &str,
    buf: i32,
    cap: i32,
    out: i32,
    ask: impl FnOnce(&mut Caller<'_, RunState>) -> Result<(u32, Vec<u8>), i32>,
) -> i32 {
    let got = match kept(caller, call, name) {
        Some(k) => k,
        None => match ask(caller) {
            Ok(got) => got,
            Err(errno) => return errno,
        },
    };
    answer(caller, call, name, got, buf, cap, out)
}

fn wf_input(caller: &mut Caller<'_, RunState>, buf: i32, cap: i32, out: i32) -> i32 {
    answered(caller, "wf_input", "", buf, cap, out, |c| {
        with_wf(c, "wf_input", |h| h.wf_input()).map(|run| (u32::from(run.ended), run.input))
    })
}

fn wf_step(
    caller: &mut Caller<'_, RunState>,
    name: i32,
    len: i32,
    buf: i32,
    cap: i32,
    out: i32,
) -> i32 {
    let name = match name_arg(caller, name, len) {
        Ok(n) => n,
        Err(e) => return e,
    };
    answered(caller, "wf_step", &name, buf, cap, out, |c| {
        with_wf(c, "wf_step", |h| h.wf_step(&name)).map(|b| match b {
            WfBegun::Run => (0, Vec::new()),
            WfBegun::Done(o) => outcome_state(o),
        })
    })
}

fn wf_end(
    caller: &mut Caller<'_, RunState>,
    finish: bool,
    data: i32,
    len: i32,
    failed: i32,
) -> i32 {
    let o = match outcome_arg(caller, data, len, failed) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let r = if finish {
        with_wf(caller, "wf_finish", |h| h.wf_finish(o))
    } else {
        with_wf(caller, "wf_step_end", |h| h.wf_step_end(o))
    };
    r.err().unwrap_or(0)
}

#[allow(clippy::too_many_arguments)]
fn wf_procedure(
    caller: &mut Caller<'_, RunState>,
    name: i32,
    len: i32,
    args: i32,
    args_len: i32,
    buf: i32,
    cap: i32,
    out: i32,
) -> i32 {
    let name = match name_arg(caller, name, len) {
        Ok(n) => n,
        Err(e) => return e,
    };
    answered(caller, "wf_procedure", &name, buf, cap, out, |c| {
        let args = bytes_arg(c, args, args_len)?;
        with_wf(c, "wf_procedure", |h| h.wf_procedure(&name, &args)).map(outcome_state)
    })
}

fn wf_sleep(caller: &mut Caller<'_, RunState>, ms: i64) -> i32 {
    if !(0..=SLEEP_MS_MAX).contains(&ms) {
        return EINVAL;
    }
    let d = Duration::from_millis(ms as u64);
    with_wf(caller, "wf_sleep", |h| h.wf_sleep(d))
        .err()
        .unwrap_or(0)
}

/// Adds the `wf_*` functions to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    host_calls!(linker, c;
        wf_input(buf: i32, cap: i32, out: i32);
        wf_step(name: i32, len: i32, buf: i32, cap: i32, out: i32);
        wf_step_end(data: i32, len: i32, failed: i32) = wf_end(&mut c, false, data, len, failed);
        wf_procedure(name: i32, len: i32, args: i32, args_len: i32, buf: i32, cap: i32, out: i32);
        wf_sleep(ms: i64);
        wf_finish(data: i32, len: i32, failed: i32) = wf_end(&mut c, true, data, len, failed);
    );
    Ok(())
}
