//! [`Pending`]: the result of a submitted procedure, awaitable or blockable.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::error::{Error, ProcedureError};
use crate::Outcome;

/// How long a blocking waiter looks for its result (yielding the CPU in
/// between) before it parks: most procedures answer within tens of
/// microseconds, and waking a parked thread costs about as much again on a
/// virtual machine. Async waiters never spin.
const SPIN_BEFORE_PARK: std::time::Duration = std::time::Duration::from_micros(200);

/// A procedure that has been submitted and will commit or roll back.
#[must_use = "a submitted procedure runs anyway, but its result is lost unless waited for"]
pub struct Pending<T, E = Error> {
    rx: oneshot::Receiver<Outcome>,
    _types: PhantomData<fn() -> (T, E)>,
}

impl<T: 'static, E: ProcedureError> Pending<T, E> {
    pub(crate) fn new(rx: oneshot::Receiver<Outcome>) -> Self {
        Pending {
            rx,
            _types: PhantomData,
        }
    }

    fn unpack(r: Result<Outcome, oneshot::error::RecvError>) -> Result<T, E> {
        match r {
            Ok(Ok(v)) => match v.downcast::<T>() {
                Ok(v) => Ok(*v),
                Err(_) => Err(E::from(Error::Internal(
                    "procedure result has an unexpected type".into(),
                ))),
            },
            Ok(Err(f)) => match f.error.downcast::<E>() {
                Ok(e) => Err(*e),
                Err(_) => Err(E::from(Error::Internal(
                    "procedure error has an unexpected type".into(),
                ))),
            },
            // The executor went away without answering: the store shut down.
            Err(_) => Err(E::from(Error::Closed)),
        }
    }

    /// Blocks the calling thread until the procedure finished (spinning
    /// briefly first, see [`SPIN_BEFORE_PARK`]). In async code `.await` the
    /// `Pending` instead, so as not to block a worker.
    pub fn wait(mut self) -> Result<T, E> {
        crate::release_held();
        let until = std::time::Instant::now() + SPIN_BEFORE_PARK;
        loop {
            match self.rx.try_recv() {
                Ok(v) => return Self::unpack(Ok(v)),
                Err(oneshot::error::TryRecvError::Closed) => return Err(E::from(Error::Closed)),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if std::time::Instant::now() >= until {
                return Self::unpack(crate::block_on(self.rx));
            }
            std::thread::yield_now();
        }
    }
}

impl<T: 'static, E: ProcedureError> Future for Pending<T, E> {
    type Output = Result<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(Self::unpack)
    }
}
