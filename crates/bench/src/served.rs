//! A node served on loopback for a suite, with the operator's credential:
//! what each suite that measures tabos through its API starts first.

use anyhow::Context;
use tabos_client::Endpoint;

/// A node for a suite that measures the API rather than the disk:
/// embedded SQLite in `dir`, 2 partitions, durability off.
pub fn node(
    dir: &tabos_store::testing::TempDir,
    node_id: &str,
) -> anyhow::Result<tabos_node::Node> {
    let settings = tabos_node::NodeSettings {
        node_id: node_id.into(),
        logs: dir.path().join("logs"),
        ..tabos_node::NodeSettings::defaults()
    };
    let config = tabos_store::Config::sqlite(dir.path().join("db"))
        .with_partitions(2)
        .with_durability(tabos_store::Durability::Off);
    Ok(tabos_node::Node::open_with(&config, settings)?)
}

/// A node being served; [`Served::stop`] ends it.
pub struct Served {
    /// The node's API, with an operator credential.
    pub addr: Endpoint,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Result<(), tabos_node::Error>>,
}

impl Served {
    /// Serves `node` on a port of 127.0.0.1 with `options` (within a Tokio
    /// runtime).
    pub async fn start(
        node: tabos_node::Node,
        options: tabos_node::ServeOptions,
    ) -> anyhow::Result<Served> {
        let listener = tabos_node::bind("127.0.0.1:0").await?;
        let addr = tabos_node::local_addr(&listener)
            .context("no local address")?
            .to_string();
        let operator = node.operator_credential("bench").await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(tabos_node::serve_with(
            node,
            listener,
            async {
                let _ = stopped.await;
            },
            options,
        ));
        Ok(Served {
            addr: Endpoint::new(addr, operator.token),
            stop,
            served,
        })
    }

    /// Stops the node and waits until it has.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.served.await??;
        Ok(())
    }
}
