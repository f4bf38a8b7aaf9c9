//! A node served in-process ([`Embedded`]): the demo, tests and
//! benchmarks host a node this way, on a free loopback port with an
//! operator credential.

use crate::{bind, local_addr, serve, Error, Node};

/// A node served in-process on a free loopback port, with an operator
/// credential: how the demo, tests and benchmarks host a node.
pub struct Embedded {
    /// The node's address and its operator credential.
    pub endpoint: tabos_client::Endpoint,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Embedded {
    /// Serves `node` on 127.0.0.1 (a free port) until [`Embedded::stop`]
    /// or drop.
    pub async fn start(node: Node) -> Result<Embedded, Error> {
        let operator = node.operator_credential("in-process node").await?;
        let listener = bind("127.0.0.1:0").await?;
        let addr = local_addr(&listener)
            .ok_or_else(|| Error::Startup("the listener has no address".into()))?
            .to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve(node, listener, async {
            let _ = stopped.await;
        }));
        Ok(Embedded {
            endpoint: tabos_client::Endpoint::new(addr, operator.token),
            stop: Some(stop),
            served: Some(served),
        })
    }

    /// The node's address.
    pub fn addr(&self) -> &str {
        &self.endpoint.addr
    }

    /// A client acting as the node's operator.
    pub async fn client(&self) -> Result<tabos_client::Client, tabos_client::Error> {
        self.endpoint.connect().await
    }

    /// Stops the node and waits until it has stopped.
    pub async fn stop(mut self) -> Result<(), Error> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.served.take() {
            Some(h) => h
                .await
                .map_err(|e| Error::Startup(format!("node task: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
