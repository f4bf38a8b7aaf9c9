//! What the node's integration tests share: an in-process node over an
//! embedded store, served on a free loopback port.
#![allow(dead_code)] // each test binary uses its own part

use tabos_client::Error as ClientError;
use tabos_node::{Node, NodeSettings};
use tabos_store::testing::TempDir;
use tabos_store::Config;

pub struct Running {
    pub node: Node,
    pub addr: String,
    /// The node's operator credential.
    pub token: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Result<(), tabos_node::Error>>,
}

/// Starts node `node_id` (4 cores, 2 partitions) with its database in `dir`.
pub async fn start(dir: &TempDir, node_id: &str) -> Running {
    start_with(dir, node_id, tabos_node::ServeOptions::default()).await
}

/// [`start`], served with `options`.
pub async fn start_with(
    dir: &TempDir,
    node_id: &str,
    options: tabos_node::ServeOptions,
) -> Running {
    let config = Config::sqlite(dir.path().join("db")).with_partitions(2);
    start_on(dir, node_id, &config, options).await
}

/// Starts node `node_id` over the database `config` (its logs and block
/// store in `dir`): several such nodes on one PostgreSQL database are a
/// cluster.
pub async fn start_on(
    dir: &TempDir,
    node_id: &str,
    config: &Config,
    options: tabos_node::ServeOptions,
) -> Running {
    start_custom(dir, node_id, config, options, |_| {}).await
}

/// [`start_on`], its settings changed by `change` first.
pub async fn start_custom(
    dir: &TempDir,
    node_id: &str,
    config: &Config,
    options: tabos_node::ServeOptions,
    change: impl FnOnce(&mut NodeSettings),
) -> Running {
    let mut settings = NodeSettings {
        node_id: node_id.into(),
        logs: dir.path().join("logs"),
        cores: 4,
        blocks: Some(tabos_node::BlockStoreSettings::new(
            dir.path().join("blocks.dev"),
            256 << 20,
        )),
        // The tests' programs and modules: in temporary directories and
        // the build's target directory (an operator's --program-dir).
        program_dirs: vec![
            std::env::temp_dir(),
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(".."),
        ],
        ..NodeSettings::defaults()
    };
    change(&mut settings);
    // Opening may block (PostgreSQL's client): off the async threads.
    let config = config.clone();
    let node = tokio::task::spawn_blocking(move || Node::open_with(&config, settings))
        .await
        .unwrap()
        .unwrap();
    let token = node.operator_credential("test").await.unwrap().token;
    let listener = tabos_node::bind("127.0.0.1:0").await.unwrap();
    let addr = tabos_node::local_addr(&listener).unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(tabos_node::serve_with(
        node.clone(),
        listener,
        async {
            let _ = stopped.await;
        },
        options,
    ));
    Running {
        node,
        addr,
        token,
        stop,
        served,
    }
}

impl Running {
    /// A client acting as the operator.
    pub async fn client(&self) -> tabos_client::Client {
        tabos_client::Client::connect(&self.addr, &self.token)
            .await
            .unwrap()
    }

    /// A client acting with `token`.
    pub async fn client_with(&self, token: &str) -> tabos_client::Client {
        tabos_client::Client::connect(&self.addr, token)
            .await
            .unwrap()
    }

    pub async fn shut_down(self) {
        let _ = self.stop.send(());
        self.served.await.unwrap().unwrap();
        drop(self.node);
    }
}

/// The gRPC code of a client error.
pub fn code(e: &ClientError) -> tonic::Code {
    match e {
        ClientError::Status(s) => s.code(),
        other => panic!("expected a status, got {other}"),
    }
}

/// A SQL cell as text (NULL as "NULL").
pub fn text(v: &Option<tabos_client::Value>) -> String {
    use tabos_client::Value;
    match v {
        Some(Value::Text(t)) => t.clone(),
        Some(Value::Int(n)) => n.to_string(),
        Some(Value::Real(x)) => x.to_string(),
        Some(Value::Blob(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::Null(_)) | None => "NULL".into(),
    }
}

/// The open API calls of `realm` as `tabos status` shows them to `c`
/// (`None`: none shown for it); checks the cap shown is the node's.
pub async fn realm_calls(c: &mut tabos_client::Client, realm: &str) -> Option<u64> {
    let s = c.status().await.unwrap();
    let cap = s
        .realm_caps
        .into_iter()
        .find(|c| c.what == "API calls")
        .expect("the API calls per realm are shown");
    assert_eq!(
        cap.per_realm_max as usize,
        tabos_node::conn::CALLS_PER_REALM_MAX
    );
    cap.by_realm.get(realm).copied()
}

/// A native proc `pid` that prints its own token (for a test to act with,
/// [`printed_token`]) and then sleeps.
pub fn token_printer(pid: &str) -> tabos_client::proto::ProcDescriptor {
    tabos_client::proto::ProcDescriptor {
        pid: pid.into(),
        program: "sh".into(),
        args: vec![
            "-c".into(),
            r#"printf %s "$TABOS_TOKEN"; exec sleep 600"#.into(),
        ],
        ..Default::default()
    }
}

/// The token proc `pid` of `realm` prints to its stdout (87 characters),
/// once it has.
pub async fn printed_token(c: &mut tabos_client::Client, realm: &str, pid: &str) -> String {
    let mut token = String::new();
    for _ in 0..200 {
        token = String::from_utf8(
            c.logs(realm, pid, tabos_client::proto::LogStream::Stdout)
                .await
                .unwrap()
                .data,
        )
        .unwrap();
        if token.len() == 87 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(token.len(), 87, "the proc printed its token: {token:?}");
    token
}

/// The name libtest knows a test of this binary by, to run it alone in a
/// child process (`--exact`): its module's path without the crate's name.
pub fn test_name(module_path: &str, test: &str) -> String {
    let (_, module) = module_path
        .split_once("::")
        .expect("a test in a module of the tests' binary");
    format!("{module}::{test}")
}
