//! The node's side of a wasm workflow proc's calls
//! ([`tabos_sandbox::workflow`]): a workflow written as a wasm module and
//! run by a proc of its own ([`tabos_kernel::workflows::start_in_proc_tx`]),
//! whose steps the proc's host records as the `Workflows` service records a
//! client executor's — the same kernel operations, on the proc's own worker
//! thread, with the proc as the executor (`proc:<pid>`).
//!
//! Steps are numbered here, in the order the run asks for them; a proc run
//! again (its node lost) starts from 1 and gets each recorded step's
//! outcome instead of running it. A run of a workflow with nothing recorded
//! yet records each function step whole at its end (one transaction, as
//! the Rust and Python executors do: there is nothing to replay). A call the database cannot take (a
//! failover) is tried again for [`RETRY_WINDOW`]: each is idempotent by its
//! step number.

use std::sync::Arc;
use std::time::Duration;

use tabos_kernel::auth::Caller;
use tabos_kernel::procedures::Procedures;
use tabos_kernel::workflows::{self as wf, Outcome, ProcRun, StepKind};
use tabos_kernel::Error;
use tabos_sandbox::workflow::{WfBegun, WfHost, WfOutcome, WfRun};
use tabos_sandbox::{HostError, StopHandle};
use tabos_store::{Store, Tx};
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// How long a call is tried again while the database cannot be reached.
pub const RETRY_WINDOW: Duration = Duration::from_secs(120);
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(20);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// One wasm proc's workflow calls.
pub struct WfProc {
    store: Store,
    procedures: Procedures,
    /// The proc, acting in its realm for its spawner's user.
    caller: Caller,
    /// Where it runs (recorded on the workflow).
    node_id: String,
    rt: Handle,
    stop: StopHandle,
    woken: Arc<Notify>,
    /// Its workflow, once `wf_input` has found it.
    run: Option<ProcRun>,
    /// The next step's number.
    next: i64,
    /// The step begun and not yet ended: its number and name.
    begun: Option<(i64, String)>,
}

impl WfProc {
    pub fn new(
        store: Store,
        procedures: Procedures,
        caller: Caller,
        node_id: String,
        rt: Handle,
        stop: StopHandle,
        woken: Arc<Notify>,
    ) -> WfProc {
        WfProc {
            store,
            procedures,
            caller,
            node_id,
            rt,
            stop,
            woken,
            run: None,
            next: 1,
            begun: None,
        }
    }

    /// Its workflow, or why there is none to act on.
    fn run(&self) -> Result<&ProcRun, HostError> {
        self.run.as_ref().ok_or_else(|| {
            HostError::Invalid("call wf_input first: it finds the proc's workflow".into())
        })
    }

    /// The next step's number, taken.
    fn take_step(&mut self) -> Result<i64, HostError> {
        if let Some((n, _)) = &self.begun {
            return Err(HostError::Invalid(format!(
                "step {n} has not ended: call wf_step_end first"
            )));
        }
        let n = self.next;
        self.next += 1;
        Ok(n)
    }

    /// Runs `f` in one transaction of the proc's realm, tried again while
    /// the database is away (within [`RETRY_WINDOW`], unless stopped).
    fn write<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Fn(&mut dyn Tx, &Caller, i64) -> tabos_kernel::Result<T> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        let mut pauses = tabos_client::retry::Backoff::new(RETRY_PAUSE_MIN, RETRY_PAUSE_MAX)
            .until(tokio::time::Instant::now() + RETRY_WINDOW);
        loop {
            let (f, who) = (f.clone(), self.caller.clone());
            let got = self.rt.block_on(tabos_kernel::call(
                &self.store,
                self.caller.realm(),
                move |tx| f(tx, &who, tabos_store::now_us()),
            ));
            match got {
                Err(Error::Store(e)) if e.is_unavailable() && !self.stop.is_stopped() => {
                    if !self.rt.block_on(pauses.wait()) {
                        return Err(Error::Store(e));
                    }
                }
                other => return other,
            }
        }
    }

    /// A kernel error as the guest sees it: a workflow no longer this
    /// proc's to run (cancelled, ended) stops it (ECANCELED).
    fn refused(&self, e: Error) -> HostError {
        let Error::Precondition(why) = e else {
            return e.into_host();
        };
        let Some(run) = &self.run else {
            return HostError::Conflict(why);
        };
        let (id, ex) = (run.workflow.clone(), run.executor.clone());
        let ours = self.write(move |tx, who, _| {
            Ok(wf::get_tx(tx, who, &id)?.is_some_and(|w| {
                w.status == wf::Status::Pending && w.executor == Some(ex.to_string())
            }))
        });
        match ours {
            Ok(false) => HostError::Stopped,
            _ => HostError::Conflict(why),
        }
    }

    /// Sleeps until `at_us` on the node's clock, or until the proc is
    /// stopped.
    fn sleep_until(&self, at_us: i64) -> Result<(), HostError> {
        let left = Duration::from_micros((at_us - tabos_store::now_us()).max(0) as u64);
        let (woken, stop) = (self.woken.clone(), self.stop.clone());
        self.rt.block_on(async move {
            let limit = tokio::time::sleep(left);
            tokio::pin!(limit);
            loop {
                tokio::select! {
                    () = &mut limit => return Ok(()),
                    () = woken.notified() => {
                        // A permit left over from an earlier wait ends nothing.
                        if stop.is_stopped() {
                            return Err(HostError::Stopped);
                        }
                    }
                }
            }
        })
    }
}

fn outcome(o: Outcome) -> WfOutcome {
    match o {
        Outcome::Success(v) => WfOutcome::Success(v),
        Outcome::Error(e) => WfOutcome::Error(e),
    }
}

fn kernel_outcome(o: WfOutcome) -> Outcome {
    match o {
        WfOutcome::Success(v) => Outcome::Success(v),
        WfOutcome::Error(e) => Outcome::Error(e),
    }
}

impl WfHost for WfProc {
    fn wf_input(&mut self) -> Result<WfRun, HostError> {
        let node = self.node_id.clone();
        let run = self
            .write(move |tx, who, now| wf::proc_run_tx(tx, who, &node, now))
            .map_err(Error::into_host)?
            .ok_or_else(|| HostError::NotFound("this proc runs no workflow".into()))?;
        let answer = WfRun {
            input: run.input.clone(),
            ended: run.status.is_final(),
        };
        self.run = Some(run);
        Ok(answer)
    }

    fn wf_step(&mut self, name: &str) -> Result<WfBegun, HostError> {
        let run = self.run()?.clone();
        let step = self.take_step()?;
        if run.fresh {
            // Nothing to replay: it is recorded whole at its end (one
            // transaction, as the Rust and Python executors do).
            self.begun = Some((step, name.to_string()));
            return Ok(WfBegun::Run);
        }
        let (name, begun_name) = (name.to_string(), name.to_string());
        let begun = self.write(move |tx, who, now| {
            wf::step_begin_tx(
                tx,
                who,
                &run.executor,
                &run.workflow,
                step,
                &name,
                StepKind::Function,
                &[],
                now,
            )
        });
        match begun.map_err(|e| self.refused(e))? {
            wf::Begun::Done(o) => Ok(WfBegun::Done(outcome(o))),
            wf::Begun::Run { .. } => {
                self.begun = Some((step, begun_name));
                Ok(WfBegun::Run)
            }
        }
    }

    fn wf_step_end(&mut self, o: WfOutcome) -> Result<(), HostError> {
        let run = self.run()?.clone();
        let (step, name) = self
            .begun
            .take()
            .ok_or_else(|| HostError::Invalid("no step has begun: call wf_step first".into()))?;
        let o = kernel_outcome(o);
        let unbegun = run.fresh.then(|| wf::Unbegun {
            name,
            kind: StepKind::Function,
            input: Vec::new(),
            attempts: 1,
        });
        self.write(move |tx, who, now| {
            wf::step_end_tx(
                tx,
                who,
                &run.executor,
                &run.workflow,
                step,
                &o,
                true,
                unbegun.as_ref(),
                now,
            )
        })
        .map(drop)
        .map_err(|e| self.refused(e))
    }

    fn wf_procedure(&mut self, name: &str, args: &[u8]) -> Result<WfOutcome, HostError> {
        let run = self.run()?.clone();
        let step = self.take_step()?;
        let s = crate::workflows::ProcedureStep {
            executor: run.executor,
            workflow: run.workflow,
            step,
            procedure: name.to_string(),
            args: args.to_vec(),
            last: true,
        };
        let (store, procedures, who) = (
            self.store.clone(),
            self.procedures.clone(),
            self.caller.clone(),
        );
        self.rt
            .block_on(crate::workflows::step_procedure(
                &store,
                &procedures,
                who,
                s,
            ))
            .map(outcome)
            .map_err(|e| self.refused(e))
    }

    fn wf_sleep(&mut self, d: Duration) -> Result<(), HostError> {
        let run = self.run()?.clone();
        let step = self.take_step()?;
        let us = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        let at = self
            .write(move |tx, who, now| {
                wf::sleep_tx(tx, who, &run.executor, &run.workflow, step, us, now)
            })
            .map_err(|e| self.refused(e))?;
        self.sleep_until(at)
    }

    fn wf_finish(&mut self, o: WfOutcome) -> Result<(), HostError> {
        let run = self.run()?.clone();
        let o = kernel_outcome(o);
        self.write(move |tx, who, now| {
            wf::finish_tx(tx, who, &run.executor, &run.workflow, &o, now)
        })
        .map_err(|e| self.refused(e))
    }
}
