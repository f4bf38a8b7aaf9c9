//! The `Procs` service: the σOS proc API over gRPC.
//!
//! Requests are validated before anything is written: names, resources, and
//! for native procs that the program exists and is executable on this node.
//! Waits are answered when the change feed reports the transition; a client
//! that disconnects simply drops its wait.

use std::path::{Path, PathBuf};

use tabos_client::proto;
use tabos_kernel::ids::Pid;
use tabos_kernel::procs::{self, Class, Descriptor, Kind, ProcInfo};
use tabos_kernel::sched::Scheduler;
use tabos_kernel::{Error as KError, Result as KResult};
use tonic::{Request, Response, Status};

use crate::{kernel_status, Node};

#[derive(Clone)]
pub struct ProcsService {
    node: Node,
}

impl ProcsService {
    /// Its streams end when the node's [`crate::Stopping`] is raised.
    pub fn new(node: Node) -> ProcsService {
        ProcsService { node }
    }
}

/// What a Logs or FollowLogs request asks for, checked.
struct LogTarget {
    who: tabos_kernel::auth::Caller,
    pid: Pid,
    stream: tabos_kernel::logs::Stream,
    want: tabos_kernel::logs::Want,
}

/// Whose log a Logs or FollowLogs call asks for. The log is in the
/// cluster's tables: this node answers, wherever the proc ran.
fn log_target(node: &Node, request: Request<proto::LogsRequest>) -> Result<LogTarget, Status> {
    let who = node.caller_of(&request)?;
    let r = request.into_inner();
    let pid = Pid::new(r.pid).map_err(invalid)?;
    let stream = match crate::wire::request_proto("stream", r.stream)? {
        None | Some(proto::LogStream::Stdout | proto::LogStream::Unspecified) => {
            tabos_kernel::logs::Stream::Stdout
        }
        Some(proto::LogStream::Stderr) => tabos_kernel::logs::Stream::Stderr,
    };
    if r.since_us < 0 {
        return Err(invalid(format!("since_us cannot be {}", r.since_us)));
    }
    Ok(LogTarget {
        who,
        pid,
        stream,
        want: tabos_kernel::logs::Want {
            since_us: r.since_us,
            tail_lines: r.tail_lines,
            ..Default::default()
        },
    })
}

/// Most bytes of log one FollowLogs message carries.
pub const FOLLOW_CHUNK_BYTES: usize = tabos_kernel::logs::FOLLOW_READ_BYTES_MAX;
/// FollowLogs messages waiting for a client that has not read them.
const FOLLOW_BUFFER: usize = 4;

/// A read of a log as the API gives it.
fn logs_response(r: tabos_kernel::logs::Read) -> proto::LogsResponse {
    proto::LogsResponse {
        marks: r
            .marks
            .iter()
            .map(|(at, time_us)| proto::LogMark {
                at: *at as u64,
                time_us: *time_us,
            })
            .collect(),
        data: r.data,
        truncated: r.truncated,
    }
}

fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

/// Resolves a native program the way execvp would, or says why it cannot run.
pub fn resolve_program(program: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return if runnable(&p) {
            Ok(p)
        } else {
            Err(format!(
                "program {program} does not exist or is not executable"
            ))
        };
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|p| runnable(p))
        })
        .ok_or_else(|| format!("program {program:?} not found in PATH"))
}

// The client's copy of the limit is the kernel's.
const _: () = assert!(tabos_client::HOST_PATHS_MAX == tabos_kernel::procs::HOST_PATHS_MAX);

/// Converts and checks a descriptor; the proc acts for `user` (its
/// spawner's, from the spawner's credential).
pub fn descriptor_from_proto(d: proto::ProcDescriptor, user: &str) -> KResult<Descriptor> {
    let pid = match d.pid.as_str() {
        "" => None,
        s => Some(Pid::new(s)?),
    };
    let parent = match d.parent.as_str() {
        "" => None,
        s => Some(Pid::new(s)?),
    };
    let kind: Kind = crate::wire::field("kind", d.kind)?.unwrap_or(Kind::Native);
    let class: Class = crate::wire::field("class", d.class)?.unwrap_or(Class::Lc);
    let mut env: Vec<(String, String)> = d.env.into_iter().collect();
    env.sort();
    let desc = Descriptor {
        pid,
        parent,
        kind,
        class,
        program: d.program,
        args: d.args,
        env,
        cores: d.cores.unwrap_or(1),
        mem_mb: d.mem_mb.unwrap_or(0),
        home_node: (!d.home_node.is_empty()).then_some(d.home_node),
        restartable: d.restartable,
        max_restarts: d
            .max_restarts
            .unwrap_or(tabos_kernel::procs::RESTARTS_DEFAULT),
        user: user.to_string(),
        host_paths: d.host_paths,
        scope: match d.scope.trim() {
            "" => None,
            s => Some(tabos_kernel::auth::Scope::parse(s)?),
        },
        code: match d.code.as_str() {
            "" => None,
            c => Some(procs::CodeHash::parse(c)?),
        },
    };
    desc.validate()?;
    // A program of the realm's files or of its uploaded code is found
    // where the proc runs, by procd (crate::code); one on the node is
    // checked here.
    if desc.kind == Kind::Native && on_the_node(&desc) {
        resolve_program(&desc.program).map_err(KError::Invalid)?;
    }
    Ok(desc)
}

/// Whether `d`'s program is a file on the node (not of the realm's files
/// or of its uploaded code).
pub fn on_the_node(d: &Descriptor) -> bool {
    procs::fs_program(&d.program).is_none()
        && !crate::code::in_code(d.kind, d.code.is_some(), &d.program)
}

/// Refuses a spawn whose code — an uploaded tree, or the file of an `fs:`
/// program — the caller cannot find in its realm's files: said at once,
/// not as the proc's failure on whichever node claims it. (That node
/// reads the code again, as the proc's user, and checks its hash.)
async fn check_code(
    node: &Node,
    who: &tabos_kernel::auth::Caller,
    ds: &[Descriptor],
) -> KResult<()> {
    let mut wanted: Vec<(String, bool)> = ds
        .iter()
        .flat_map(|d| {
            let tree = d.code.as_ref().map(|h| (h.dir(), true));
            let file = procs::fs_program(&d.program).map(|p| (p.to_string(), false));
            tree.into_iter().chain(file)
        })
        .collect();
    wanted.sort();
    wanted.dedup();
    for (path, dir) in wanted {
        let (w, p) = (who.clone(), path.clone());
        let st = tabos_kernel::read(&node.store, who.realm(), move |tx| {
            tabos_kernel::fs::stat_tx(tx, &w, &p)
        })
        .await;
        let is_dir = match st {
            Ok(s) => s.file_type == tabos_kernel::fs::FileType::Dir,
            Err(KError::NotFound(_)) => {
                return Err(KError::NotFound(if dir {
                    format!("no code {path} in the realm's files (upload it: tabos spawn --upload PATH)")
                } else {
                    format!("no program fs:{path} in the realm's files")
                }))
            }
            Err(e) => return Err(e),
        };
        if is_dir != dir {
            return Err(KError::Invalid(if dir {
                format!("code {path} is not a directory of uploaded code")
            } else {
                format!("program fs:{path} is a directory")
            }));
        }
    }
    Ok(())
}

/// Compiles the wasm modules of `ds` (once per distinct program, into the
/// node's cache, so procd finds them compiled), refusing the request if any
/// is missing or invalid. Nothing has been written yet.
async fn check_modules(node: &Node, ds: &[Descriptor]) -> KResult<()> {
    let mut programs: Vec<String> = ds
        .iter()
        .filter(|d| d.kind == Kind::Wasm && on_the_node(d))
        .map(|d| d.program.clone())
        .collect();
    programs.sort();
    programs.dedup();
    if programs.is_empty() {
        return Ok(());
    }
    let sandbox = node.sandbox.clone();
    tokio::task::spawn_blocking(move || {
        programs.iter().try_for_each(|p| {
            sandbox
                .compile_file(Path::new(p))
                .map(drop)
                .map_err(|e| KError::Invalid(format!("wasm program {p}: {e}")))
        })
    })
    .await
    .map_err(|e| KError::Invalid(format!("module check task failed: {e}")))?
}

/// Refuses a spawn of a program on the node that this node's rule does
/// not allow ([`crate::programs`]); the node that runs it asks again.
fn check_programs(node: &Node, ds: &[Descriptor]) -> KResult<()> {
    for d in ds.iter().filter(|d| on_the_node(d)) {
        let program = match d.kind {
            Kind::Native => resolve_program(&d.program).map_err(KError::Invalid)?,
            Kind::Wasm => PathBuf::from(&d.program),
        };
        node.programs
            .check(&program, &d.host_paths)
            .map_err(|e| match e {
                crate::programs::Refused::Missing(m) => KError::Invalid(m),
                crate::programs::Refused::NotAllowed(m) => KError::Denied(m),
            })?;
    }
    Ok(())
}

/// A proc `who` asks to spawn, checked as a spawn checks it — its
/// descriptor, the caller's right, its code and its module — before
/// anything is written (a Spawn's, a workflow's own proc's).
pub(crate) async fn admit(
    node: &Node,
    who: &tabos_kernel::auth::Caller,
    d: proto::ProcDescriptor,
) -> KResult<Descriptor> {
    let d = descriptor_from_proto(d, who.user())?;
    // Asked before the modules are compiled on the caller's behalf.
    procs::may_spawn(who, std::slice::from_ref(&d))?;
    check_programs(node, std::slice::from_ref(&d))?;
    check_code(node, who, std::slice::from_ref(&d)).await?;
    check_modules(node, std::slice::from_ref(&d)).await?;
    Ok(d)
}

pub fn status_to_proto(i: &ProcInfo) -> proto::ProcStatus {
    proto::ProcStatus {
        realm: i.realm.clone(),
        pid: i.pid.to_string(),
        state: crate::wire::out(i.state),
        worker: i.worker.as_ref().map(|w| w.to_string()).unwrap_or_default(),
        evict_requested: i.evict_requested,
        exit_status: i.exit_status,
        error: i.error.clone().unwrap_or_default(),
        spawn_us: i.spawn_us,
        start_us: i.start_us,
        exit_us: i.exit_us,
    }
}

/// A realm and what it uses, as the protocol says it.
fn realm_info(node: &Node, u: tabos_kernel::realms::Usage) -> proto::RealmInfo {
    proto::RealmInfo {
        proc_uid: node.confine.uid_of(&u.realm),
        host_network: u.host_network,
        scheduler: crate::wire::out(u.scheduler),
        created_us: u.created_us,
        retention_s: u.retention_us.map(|us| us / 1_000_000),
        provenance: crate::wire::out(u.provenance),
        realm: u.realm,
        live_procs: u.live_procs,
        quota_procs: u.quota.procs,
        cores: u.cores,
        quota_cores: u.quota.cores,
        mem_mb: u.mem_mb,
        quota_mem_mb: u.quota.mem_mb,
        stored_bytes: u.stored_bytes,
        quota_storage_mb: u.quota.storage_mb,
        mailbox_bytes: u.mailbox_bytes,
        quota_mailbox_mb: u.quota.mailbox_mb,
        procedures: u.procedures,
        quota_procedures: u.quota.procedures,
        host_paths: u.host_paths,
        stored: u
            .stored
            .iter()
            .map(|(class, bytes)| proto::StoredBytes {
                class: crate::wire::out(class),
                bytes,
            })
            .collect(),
    }
}

/// The Procs service's operations, each a call of [`tabos_kernel::procs`]
/// for a caller (which checks role, scope and the proc it acts for).
pub mod ops {
    use super::*;
    use crate::op::op;
    use tabos_kernel::cluster;
    use tabos_kernel::Result;

    fn spawned((pid, worker): (Pid, Option<tabos_kernel::ids::WorkerId>)) -> proto::Spawned {
        proto::Spawned {
            pid: pid.to_string(),
            worker: worker.map(|w| w.to_string()).unwrap_or_default(),
        }
    }

    op!(Spawn(SpawnRequest) -> Spawned, |node, who, r| {
        let d = r
            .proc
            .ok_or_else(|| KError::Invalid("spawn needs a proc descriptor".into()))?;
        let d = admit(node, &who, d).await?;
        let fence = crate::names::fence_of(r.fence)?;
        Ok(spawned(procs::spawn_for(&node.store, &who, d, fence).await?))
    });

    op!(SpawnBurst(SpawnBurstRequest) -> SpawnBurstResponse, |node, who, r| {
        let ds = r
            .procs
            .into_iter()
            .map(|d| descriptor_from_proto(d, who.user()))
            .collect::<KResult<Vec<_>>>()?;
        procs::may_spawn(&who, &ds)?;
        check_programs(node, &ds)?;
        check_code(node, &who, &ds).await?;
        check_modules(node, &ds).await?;
        let spawned_all = procs::spawn_burst_for(&node.store, &who, ds).await?;
        Ok(proto::SpawnBurstResponse {
            procs: spawned_all.into_iter().map(spawned).collect(),
        })
    });

    op!(CreateRealm(CreateRealmRequest) -> CreateRealmResponse, |node, who, r| {
        let scheduler: Scheduler =
            crate::wire::field("scheduler", r.scheduler)?.unwrap_or(Scheduler::Fifo);
        let elastic = match r.elastic {
            Some(p) => Some(crate::status::policy_of(Some(p))?),
            None => None,
        };
        let (minted, principal) =
            cluster::create_realm(&node.store, &who, &r.realm, scheduler, elastic).await?;
        node.auth.remember(minted.hash, principal);
        Ok(proto::CreateRealmResponse {
            admin_token: minted.token,
            admin_token_id: minted.id.to_string(),
        })
    });

    op!(SetRealm(SetRealmRequest) -> RealmInfo, |node, who, r| {
        let change = cluster::RealmChange {
            set: tabos_kernel::realms::Quota {
                procs: r.procs,
                cores: r.cores,
                mem_mb: r.mem_mb,
                storage_mb: r.storage_mb,
                mailbox_mb: r.mailbox_mb,
                procedures: r.procedures,
            },
            clear: r.clear,
            host_paths: r.host_paths,
            host_network: r.host_network,
            retention: r
                .retention_s
                .map(|s| tabos_kernel::realms::Retention::new(s.saturating_mul(1_000_000)))
                .transpose()?,
            provenance: r
                .provenance
                .map(|v| crate::wire::field("provenance", v))
                .transpose()?
                .flatten(),
        };
        let u = cluster::set_realm(&node.store, &who, &r.realm, change).await?;
        Ok(realm_info(node, u))
    });

    op!(RemoveRealm(RemoveRealmRequest) -> RemoveRealmResponse, |node, who, r| {
        let rows = cluster::remove_realm(&node.files, &who, &r.realm).await?;
        node.auth.forget_realm(&r.realm);
        Ok(proto::RemoveRealmResponse { rows: rows as i64 })
    });

    op!(ListRealms(ListRealmsRequest) -> ListRealmsResponse, |node, who, _r| {
        let realms = cluster::realms(&node.store, &who).await?;
        Ok(proto::ListRealmsResponse {
            realms: realms.into_iter().map(|u| realm_info(node, u)).collect(),
        })
    });

    fn pid(r: &proto::PidRequest) -> Result<Pid> {
        Pid::new(r.pid.clone())
    }

    // A wait ends when the node stops (UNAVAILABLE: ask again, here once
    // it is back or at another node), as a watch's stream does: the node
    // drains its calls before it stops its procs, so a wait for one of
    // them would otherwise hold its stop for the whole drain.
    macro_rules! wait_op {
        ($name:ident, $wait:path) => {
            op!($name(PidRequest) -> ProcStatus, |node, who, r| {
                let pid = pid(&r)?;
                tokio::select! {
                    s = $wait(&node.store, &who, &pid) => Ok(status_to_proto(&s?)),
                    () = node.stopping.raised() => {
                        Err(tabos_kernel::Error::Unavailable("the node is stopping".into()))
                    }
                }
            });
        };
    }
    wait_op!(WaitStart, procs::wait_start_for);
    wait_op!(WaitExit, procs::wait_exit_for);
    wait_op!(WaitEvict, procs::wait_evict_for);

    op!(Status(PidRequest) -> ProcStatus, |node, who, r| {
        Ok(status_to_proto(&procs::status_for(&node.store, &who, &pid(&r)?).await?))
    });

    op!(Started(PidRequest) -> Empty, |node, who, r| {
        procs::started_for(&node.store, &who, &pid(&r)?).await?;
        Ok(proto::Empty {})
    });

    op!(Exited(ExitedRequest) -> Empty, |node, who, r| {
        let pid = Pid::new(r.pid)?;
        procs::exited_for(&node.store, &who, &pid, r.status).await?;
        Ok(proto::Empty {})
    });

    op!(Evict(PidRequest) -> Empty, |node, who, r| {
        procs::evict_for(&node.store, &who, &pid(&r)?).await?;
        Ok(proto::Empty {})
    });

    op!(Prune(PruneRequest) -> PruneResponse, |node, who, r| {
        let pids = r
            .pids
            .iter()
            .map(|p| Pid::new(p.as_str()))
            .collect::<Result<Vec<_>>>()?;
        let before = (r.older_than_ms > 0).then(|| {
            tabos_store::now_us().saturating_sub(r.older_than_ms.saturating_mul(1000) as i64)
        });
        let pruned = procs::prune_for(&node.store, &who, pids, before).await?;
        Ok(proto::PruneResponse {
            pids: pruned.into_iter().map(|p| p.as_str().to_string()).collect(),
        })
    });
}

crate::op::served! {
    ProcsService: proto::procs_server::Procs;
    create_realm(CreateRealmRequest) -> CreateRealmResponse = CreateRealm;
    set_realm(SetRealmRequest) -> RealmInfo = SetRealm;
    remove_realm(RemoveRealmRequest) -> RemoveRealmResponse = RemoveRealm;
    list_realms(ListRealmsRequest) -> ListRealmsResponse = ListRealms;
    spawn(SpawnRequest) -> Spawned = Spawn;
    spawn_burst(SpawnBurstRequest) -> SpawnBurstResponse = SpawnBurst;
    wait_start(PidRequest) -> ProcStatus = WaitStart;
    wait_exit(PidRequest) -> ProcStatus = WaitExit;
    wait_evict(PidRequest) -> ProcStatus = WaitEvict;
    started(PidRequest) -> Empty = Started;
    exited(ExitedRequest) -> Empty = Exited;
    evict(PidRequest) -> Empty = Evict;
    prune(PruneRequest) -> PruneResponse = Prune;
    status(PidRequest) -> ProcStatus = Status;
    @streams {
        async fn logs(
            &self,
            request: Request<proto::LogsRequest>,
        ) -> Result<Response<proto::LogsResponse>, Status> {
            let t = log_target(&self.node, request)?;
            let read = tabos_kernel::logs::read_for(&self.node.store, &t.who, &t.pid, t.stream, t.want)
                .await
                .map_err(|e| kernel_status(&e))?;
            Ok(Response::new(logs_response(read)))
        }

        type FollowLogsStream = crate::streams::Streamed<proto::LogsResponse>;

        async fn follow_logs(
            &self,
            request: Request<proto::LogsRequest>,
        ) -> Result<Response<Self::FollowLogsStream>, Status> {
            let t = log_target(&self.node, request)?;
            let store = self.node.store.clone();
            // Told of every append before the first read, so none is
            // missed between a read and the wait.
            let mut appended = store.subscribe(&tabos_kernel::logs::channel(t.who.realm(), &t.pid));
            // Refused at once (no such proc, another realm's) rather than
            // in the stream.
            let first = tabos_kernel::logs::read_for(
                &store,
                &t.who,
                &t.pid,
                t.stream,
                tabos_kernel::logs::Want {
                    max_bytes: FOLLOW_CHUNK_BYTES,
                    ..t.want
                },
            )
            .await
            .map_err(|e| kernel_status(&e))?;
            let (out, streamed) =
                crate::streams::channel(FOLLOW_BUFFER, self.node.stopping.watch());
            tokio::spawn(async move {
                let realm = t.who.realm().to_string();
                let mut after = first.last_seq;
                let mut next = Some(first);
                let ended = procs::wait_exit(&store, &realm, &t.pid);
                tokio::pin!(ended);
                let mut has_ended = false;
                loop {
                    let read = match next.take() {
                        Some(r) => r,
                        None => {
                            // Whether it has ended before what is there is
                            // read: an end recorded means all its output
                            // was appended first.
                            let over = has_ended
                                || procs::status(&store, &realm, &t.pid)
                                    .await
                                    .is_ok_and(|i| i.state.is_terminal());
                            let want = tabos_kernel::logs::Want {
                                after_seq: after,
                                max_bytes: FOLLOW_CHUNK_BYTES,
                                ..Default::default()
                            };
                            match tabos_kernel::logs::read_for(&store, &t.who, &t.pid, t.stream, want).await {
                                Ok(r) if r.data.is_empty() && over => return,
                                Ok(r) => r,
                                Err(e) => return out.finish(kernel_status(&e)),
                            }
                        }
                    };
                    if !read.data.is_empty() {
                        after = read.last_seq;
                        if out.send(logs_response(read)).await.is_err() {
                            return; // the client went away, or the node stops
                        }
                        continue;
                    }
                    // Nothing new: the next append, or the proc's end —
                    // from the change feed, never by polling.
                    tokio::select! {
                        got = appended.recv() => {
                            // Cut off (fell behind): subscribed again; the
                            // next read finds what was missed.
                            if got.is_err() {
                                appended = store.subscribe(&tabos_kernel::logs::channel(&realm, &t.pid));
                            }
                        }
                        _ = &mut ended, if !has_ended => has_ended = true,
                        _ = out.ended() => return,
                    }
                }
            });
            Ok(Response::new(streamed))
        }
    }
}
