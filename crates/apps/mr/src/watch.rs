//! A directory watch that outlives being cut off. A node ends a watch that
//! fell behind — and every watch when its database fails over — with
//! DATA_LOSS (it may have missed changes); a node stopping ends it too.
//! [`DirWatch`] opens it again (with back-off, for at most
//! [`REOPEN_MAX`]) and says so, and its user lists the directory again:
//! nothing is missed, some changes are seen twice, which the job's
//! procs already take once.

use std::time::Duration;

use tabos_client::names::WatchMode;
use tabos_client::proto::WatchEvent;
use tabos_client::Client;

use crate::Result;

/// Longest a cut-off watch is tried again for (a failover, a restart).
pub const REOPEN_MAX: Duration = Duration::from_secs(60);
const PAUSE_MIN: Duration = Duration::from_millis(50);
const PAUSE_MAX: Duration = Duration::from_secs(2);

/// What [`DirWatch::next`] saw.
pub enum Watched {
    /// A change (or the first `watching` event of a new watch).
    Event(Box<WatchEvent>),
    /// The watch was cut off and opened again: changes may have been
    /// missed, so the directory is to be listed again.
    Reopened,
}

pub struct DirWatch {
    client: Client,
    realm: String,
    dir: String,
    stream: tonic::Streaming<WatchEvent>,
}

impl DirWatch {
    /// Watches directory `dir` of `realm`.
    pub async fn open(client: &Client, realm: &str, dir: &str) -> Result<DirWatch> {
        let mut client = client.clone();
        let stream = client.watch(realm, dir, WatchMode::Dir).await?;
        Ok(DirWatch {
            client,
            realm: realm.to_string(),
            dir: dir.to_string(),
            stream,
        })
    }

    /// The next change, or [`Watched::Reopened`] after the watch was cut
    /// off; an error once it cannot be opened again for [`REOPEN_MAX`].
    pub async fn next(&mut self) -> Result<Watched> {
        if let Ok(Some(ev)) = self.stream.message().await {
            return Ok(Watched::Event(Box::new(ev)));
        }
        let mut pauses = tabos_client::retry::Backoff::new(PAUSE_MIN, PAUSE_MAX)
            .until(tokio::time::Instant::now() + REOPEN_MAX);
        loop {
            match self
                .client
                .watch(&self.realm, &self.dir, WatchMode::Dir)
                .await
            {
                Ok(s) => {
                    self.stream = s;
                    return Ok(Watched::Reopened);
                }
                Err(e) => {
                    if !pauses.wait().await {
                        return Err(e.into());
                    }
                }
            }
        }
    }
}
