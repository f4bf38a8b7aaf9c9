//! Architecture Invariant (issue 37): a service served through operations
//! ([`tabos_node::op`]) checks no access itself. Each unary handler of
//! those services is one line, `self.node.on::<ops::X>(request).await`;
//! a streaming handler gets its caller from `caller_of`; none calls
//! `access`, `require`, `realm(`, `unscoped` or `acting_pid` — the kernel
//! operation checks the caller. The test reads the sources, so a handler
//! written the old way fails it.

use std::path::Path;

/// The services whose operations are declared in an `ops` module, and
/// how many handlers each has at least (so a reader that found none fails).
const SERVED_BY_OPS: &[(&str, usize)] = &[
    ("names.rs", 12),
    ("ipc.rs", 7),
    ("procedures.rs", 4),
    ("fs.rs", 13),
    ("procs.rs", 16),
    ("workflows.rs", 27),
    ("tokens.rs", 4),
    ("status.rs", 8),
    ("sql.rs", 1),
    ("graphs.rs", 7),
];

/// Handlers of those services still checked at the door (none: every
/// operation of theirs takes a caller, issue 37). A name here is a debt.
const STILL_AT_THE_DOOR: &[(&str, &str)] = &[];

/// What a door's own access check looks like.
const ACCESS_CODE: &[&str] = &[
    ".access(",
    ".require(",
    "access.realm(",
    ".unscoped(",
    ".acting_pid(",
    "auth::Access",
];

/// The handlers of the `impl proto::…_server::… for …` block: (name, body)
/// — or of a `served!` table, where each `method(Req) -> Resp = Op;` is
/// served by its operation and nothing else, and the methods of its
/// `@streams { … }` block are written out.
fn handlers(src: &str) -> Vec<(String, String)> {
    if let Some(i) = src.find("crate::op::served! {") {
        let table = &src[i..src[i..].find("\n}").map_or(src.len(), |e| i + e)];
        let (rows, streams) = table.split_once("    @streams {").unwrap_or((table, ""));
        let mut out: Vec<(String, String)> = rows
            .lines()
            .filter_map(|l| {
                let (call, op) = l.trim().strip_suffix(';')?.split_once(" = ")?;
                let name = call.split_once('(')?.0;
                Some((
                    name.to_string(),
                    format!("self.node.on::<ops::{op}>(request)"),
                ))
            })
            .collect();
        out.extend(methods(streams, "        async fn "));
        return out;
    }
    let start = src
        .find("_server::")
        .and_then(|i| src[..i].rfind("impl proto::"))
        .expect("a service impl block");
    methods(&src[start..], "    async fn ")
}

/// The `async fn`s of `block` (each `lead` deep): (name, body).
fn methods(block: &str, lead: &str) -> Vec<(String, String)> {
    let ty = format!("\n{}type ", &lead[..lead.len() - "async fn ".len()]);
    let next = format!("\n{lead}");
    let mut out = Vec::new();
    let mut rest = block;
    while let Some(i) = rest.find(lead) {
        let after = &rest[i + lead.len()..];
        let name: String = after.chars().take_while(|c| *c != '(').collect();
        let body_end = after
            .find(&next)
            .or_else(|| after.find(&ty))
            .unwrap_or(after.len());
        out.push((name, after[..body_end].to_string()));
        rest = &after[body_end..];
    }
    out
}

#[test]
fn services_served_by_operations_check_no_access_themselves() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for (file, least) in SERVED_BY_OPS {
        let src = std::fs::read_to_string(src_dir.join(file)).unwrap();
        let hs = handlers(&src);
        assert!(
            hs.len() >= *least,
            "{file}: found only {} handlers",
            hs.len()
        );
        for (name, body) in hs {
            if STILL_AT_THE_DOOR.contains(&(*file, name.as_str())) {
                continue;
            }
            for code in ACCESS_CODE {
                if body.contains(code) {
                    wrong.push(format!("{file}: {name} has access code `{code}`"));
                }
            }
            let unary = body.contains("self.node.on::<ops::");
            // A stream or a forwarded request gets its caller itself (or
            // through the file's one helper for it, `log_target`).
            let streaming = body.contains("self.node.caller_of(") || body.contains("log_target(");
            if !unary && !streaming {
                wrong.push(format!(
                    "{file}: {name} is neither an operation nor a stream"
                ));
            }
            if unary && body.contains("map_err") {
                wrong.push(format!("{file}: {name} maps errors itself"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The test sees what it is meant to: a handler written the old way is
/// caught.
#[test]
fn the_reader_catches_a_handler_that_checks_access() {
    let src = r#"
#[tonic::async_trait]
impl proto::names_server::Names for NamesService {
    async fn get(&self, request: Request<proto::NameRequest>) -> Result<Response<proto::NameEntry>, Status> {
        let access = self.node.access(&request)?;
        todo()
    }

    async fn set(&self, request: Request<proto::SetNameRequest>) -> Result<Response<proto::NameVersion>, Status> {
        self.node.on::<ops::Set>(request).await
    }
}
"#;
    let hs = handlers(src);
    assert_eq!(hs.len(), 2);
    let table = r#"
crate::op::served! {
    WorkflowsService: proto::workflows_server::Workflows;
    start(StartWorkflowRequest) -> StartWorkflowResponse = Start;
    wait(WaitWorkflowRequest) -> WorkflowInfo = Wait;
}
"#;
    let served = handlers(table);
    assert_eq!(served.len(), 2, "{served:?}");
    assert_eq!(served[1].0, "wait");
    assert!(served[1].1.contains("self.node.on::<ops::Wait>"));
    // A streaming method beside the table is read, and checked, too.
    let streams = r#"
crate::op::served! {
    NamesService: proto::names_server::Names;
    get(NameRequest) -> NameEntry = Get;
    @streams {
        type WatchStream = ReceiverStream<Result<proto::WatchEvent, Status>>;

        async fn watch(&self, request: Request<proto::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
            let (a, b) = (1, 2);
            let access = self.node.access(&request)?;
            todo()
        }
    }
}
"#;
    let both = handlers(streams);
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(both[1].0, "watch");
    assert!(both[1].1.contains(".access("));
    assert!(hs[0].1.contains(".access("));
    assert!(hs[1].1.contains("self.node.on::<ops::Set>"));
}
