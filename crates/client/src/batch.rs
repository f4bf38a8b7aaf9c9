//! Several calls in one round trip ([`Client::batch`]; the `Batch` service).

use crate::proto::{self, batch_call::Call, batch_result::Result as Out};
use crate::{Client, Error};

/// Most calls in one batch (the node refuses more).
pub const BATCH_CALLS_MAX: usize = 64;

impl Client {
    /// Runs `calls` in one round trip, in order, each as if made alone:
    /// one result per call, a failed call as its [`Error::Status`] (the
    /// calls after it still run). The calls are not one transaction
    /// together. At most [`BATCH_CALLS_MAX`] calls; a recv may not wait.
    pub async fn batch(&mut self, calls: Vec<Call>) -> Result<Vec<Result<Out, Error>>, Error> {
        self.run_batch(calls, false).await
    }

    /// [`Client::batch`] for calls that do not depend on one another: the
    /// node runs them at once, in no set order, so their transactions
    /// share its group commits (writes to several paths cost about one
    /// commit, not one each). The results still come in the calls' order.
    pub async fn batch_independent(
        &mut self,
        calls: Vec<Call>,
    ) -> Result<Vec<Result<Out, Error>>, Error> {
        self.run_batch(calls, true).await
    }

    async fn run_batch(
        &mut self,
        calls: Vec<Call>,
        independent: bool,
    ) -> Result<Vec<Result<Out, Error>>, Error> {
        let n = calls.len();
        let results = self
            .batch
            .run(proto::BatchRequest {
                calls: calls
                    .into_iter()
                    .map(|c| proto::BatchCall { call: Some(c) })
                    .collect(),
                independent,
            })
            .await?
            .into_inner()
            .results;
        if results.len() != n {
            return Err(Error::Status(tonic::Status::internal(format!(
                "a batch of {n} calls came back with {} results",
                results.len()
            ))));
        }
        Ok(results
            .into_iter()
            .map(|r| match r.result {
                Some(Out::Error(e)) => Err(Error::Status(tonic::Status::with_details(
                    tonic::Code::from_i32(e.code),
                    e.message,
                    e.details.into(),
                ))),
                Some(out) => Ok(out),
                None => Err(Error::Status(tonic::Status::internal(
                    "a batch result carried nothing",
                ))),
            })
            .collect())
    }
}
