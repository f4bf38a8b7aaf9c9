//! Workflows written as wasm modules (issue 41, item 4): a WASI module
//! whose function is a durable workflow, uploaded with the request and run
//! by a proc of its own, its steps the `tabos` host calls `wf_*`
//! (`examples/workflow-wasm/tabos_workflow.rs` is a guest's side of them).
//!
//! ```no_run
//! # async fn demo(mut client: tabos_client::Client) -> Result<(), tabos_client::Error> {
//! use tabos_client::wfmodule::ModuleWorkflow;
//! let w = ModuleWorkflow::new("workflow.wasm".as_ref(), "order", b"widget 3".to_vec());
//! let started = client.start_module_workflow("", w).await?;
//! println!("{} run by proc {}", started.workflow.workflow_id, started.pid);
//! # Ok(()) }
//! ```
//!
//! The proc is restartable: when its node is lost it runs again elsewhere
//! and replays the steps recorded so far, so a step runs again only if it
//! was under way (and a stored-procedure step never does). Its id is the
//! workflow's idempotency key: a second start of the id returns the first,
//! spawning nothing.

use std::path::{Path, PathBuf};

use crate::{proto, Client, Error};

/// Memory of a workflow's proc unless asked otherwise, in MB.
pub const MEM_MB_DEFAULT: i64 = 256;

/// A workflow module to run.
#[derive(Debug, Clone)]
pub struct ModuleWorkflow {
    /// The module: a `.wasm` file, or a directory uploaded whole (then
    /// `program` names the module in it).
    pub code: PathBuf,
    /// The module within a directory, as `./PATH` or `PATH`.
    pub program: Option<String>,
    /// The workflow function (the module's first argument).
    pub function: String,
    pub input: Vec<u8>,
    /// Its id (idempotency key) [default: a new one].
    pub id: Option<String>,
    /// [default: the code's content hash].
    pub app_version: Option<String>,
    /// Runs of its proc after the first when its node is lost [default:
    /// the node's, 10].
    pub max_restarts: Option<i64>,
    pub mem_mb: i64,
    /// A node to prefer.
    pub home_node: Option<String>,
}

impl ModuleWorkflow {
    pub fn new(code: &Path, function: &str, input: Vec<u8>) -> ModuleWorkflow {
        ModuleWorkflow {
            code: code.to_path_buf(),
            program: None,
            function: function.to_string(),
            input,
            id: None,
            app_version: None,
            max_restarts: None,
            mem_mb: MEM_MB_DEFAULT,
            home_node: None,
        }
    }
}

/// A workflow started in a proc of its own.
#[derive(Debug, Clone)]
pub struct StartedModule {
    pub workflow: proto::WorkflowInfo,
    /// The proc that runs it.
    pub pid: String,
    /// False: a workflow of that id existed, and is returned as it is.
    pub created: bool,
}

impl Client {
    /// Uploads `w`'s code ([`Client::upload_code`]) and starts its
    /// workflow in `realm`, run by a restartable wasm proc of its own.
    pub async fn start_module_workflow(
        &mut self,
        realm: &str,
        w: ModuleWorkflow,
    ) -> Result<StartedModule, Error> {
        let is_dir = tokio::fs::metadata(&w.code)
            .await
            .map_err(|source| crate::code::CodeError::Io {
                path: w.code.clone(),
                source,
            })?
            .is_dir();
        let program = match (is_dir, &w.program) {
            (true, Some(p)) => format!("./{}", p.trim_start_matches("./")),
            (false, None) => format!(
                "./{}",
                w.code.file_name().unwrap_or_default().to_string_lossy()
            ),
            (true, None) => {
                return Err(Error::Invalid(format!(
                    "{} is a directory: name the module in it",
                    w.code.display()
                )))
            }
            (false, Some(_)) => {
                return Err(Error::Invalid(format!(
                    "{} is a file: it is the module",
                    w.code.display()
                )))
            }
        };
        let code = self.upload_code(realm, &w.code).await?.hash;
        let proc_ = proto::ProcDescriptor {
            kind: proto::ProcKind::Wasm.into(),
            // A proc that mostly waits on the database: best-effort and of
            // no cores, as a MapReduce job's coordinator (never preempted
            // for its cores).
            class: proto::ProcClass::Be.into(),
            program,
            cores: Some(0),
            mem_mb: Some(w.mem_mb),
            home_node: w.home_node.unwrap_or_default(),
            restartable: true,
            max_restarts: w.max_restarts,
            code,
            ..Default::default()
        };
        let r = self
            .workflows_rpc()
            .start(proto::StartWorkflowRequest {
                realm: realm.to_string(),
                workflow_id: w.id.unwrap_or_default(),
                name: w.function,
                app_version: w.app_version.unwrap_or_default(),
                input: w.input,
                proc: Some(proc_),
                ..Default::default()
            })
            .await
            .map_err(Error::Status)?
            .into_inner();
        Ok(StartedModule {
            workflow: r.workflow.unwrap_or_default(),
            pid: r.pid,
            created: r.created,
        })
    }
}
