//! The `Sql` service: read-only SQL over the node's OS state.
//!
//! An operator sees every row of every table. A realm's admin sees its
//! realm only: the OS-state tables and views the schema's `tenant_view`
//! names, holding only the realm's rows, and the realm's tenant tables —
//! nothing else, whatever the statement says (`tabos_store::ReadScope`).
//! Members and readers may not query: SQL reads files' blocks and
//! names' values past their owners' modes, which only the admin may
//! bypass. A query runs on the store's read path (SQLite `query_only` readers, or a
//! PostgreSQL READ ONLY transaction), so a statement that would write is
//! refused with PERMISSION_DENIED and changes nothing. Inputs are bounded:
//! [`SQL_BYTES_MAX`], [`PARAMS_MAX`]; so is the work: at most [`ROWS_MAX`]
//! rows and [`RESULT_BYTES_MAX`] bytes returned (the response says when it
//! was truncated), at most the node's `query_time_max` ([`QUERY_TIME_MAX`]) of running (then
//! DEADLINE_EXCEEDED), no value over the store's `READ_VALUE_BYTES_MAX`,
//! no PRAGMA; a query whose client went away is stopped.

use tabos_client::proto::{self, value::Kind};
use tabos_kernel::{Error, Result};
use tabos_store::Value;

use crate::Node;

/// Longest statement accepted, in bytes.
pub const SQL_BYTES_MAX: usize = 64 * 1024;
/// Most parameters of one statement.
pub const PARAMS_MAX: usize = 1_000;
/// Rows returned when the request does not say.
pub const ROWS_DEFAULT: u32 = 10_000;
/// Most rows one response carries.
pub const ROWS_MAX: u32 = 100_000;
/// Most bytes of values one response carries (under the message limit,
/// with room for the encoding).
pub const RESULT_BYTES_MAX: usize = tabos_client::MESSAGE_BYTES_MAX / 2;
/// Longest a query may run before it is stopped, unless the node's
/// settings say otherwise.
pub const QUERY_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Raises its flag when dropped: a query task whose client went away (the
/// RPC's future is dropped) stops at its next progress check and gives its
/// reader back.
struct CancelOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

pub struct SqlService {
    node: Node,
}

impl SqlService {
    pub fn new(node: Node) -> SqlService {
        SqlService { node }
    }
}

fn value_from_proto(v: proto::Value, index: usize) -> Result<Value> {
    match v.kind {
        None => Err(Error::Invalid(format!(
            "parameter ${} has no value",
            index + 1
        ))),
        Some(Kind::Null(_)) => Ok(Value::Null),
        Some(Kind::Int(i)) => Ok(Value::Int(i)),
        Some(Kind::Real(r)) => Ok(Value::Real(r)),
        Some(Kind::Text(t)) => Ok(Value::Text(t)),
        Some(Kind::Blob(b)) => Ok(Value::Blob(b)),
    }
}

fn value_to_proto(v: &Value) -> proto::Value {
    let kind = match v {
        Value::Null => Kind::Null(true),
        Value::Int(i) => Kind::Int(*i),
        Value::Real(r) => Kind::Real(*r),
        Value::Text(t) => Kind::Text(t.clone()),
        Value::Blob(b) => Kind::Blob(b.clone()),
    };
    proto::Value { kind: Some(kind) }
}

/// Runs `sql` with `params` on the node's read path within `scope`,
/// returning at most `max_rows` rows (truncated past it, or past
/// [`RESULT_BYTES_MAX`]), stopped after the node's `query_time_max` or
/// when the returned future is dropped. What `tabos sql` and the
/// PostgreSQL front door ([`crate::pg`]) share.
pub async fn run(
    node: &Node,
    scope: tabos_store::ReadScope,
    sql: String,
    params: Vec<Value>,
    max_rows: usize,
) -> std::result::Result<tabos_store::Rows, tabos_store::Error> {
    let store = node.store.clone();
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let limits = tabos_store::ReadLimits {
        cap: tabos_store::Cap::Truncate(max_rows),
        bytes_max: RESULT_BYTES_MAX,
        time_max: Some(node.settings.query_time_max),
        cancel: Some(cancel),
        scope,
        // Scans over large tables go to the columnar engine.
        engine: tabos_store::Engine::Auto,
    };
    tokio::task::spawn_blocking(move || store.query_bounded(&sql, &params, &limits))
        .await
        .map_err(|e| tabos_store::Error::Invalid(format!("query task failed: {e}")))?
}

crate::op::served! {
    SqlService: proto::sql_server::Sql;
    query(SqlRequest) -> SqlResponse = Query;
}

/// The service's operation: the caller's SQL scope is the kernel's
/// ([`tabos_kernel::auth::Caller::sql_scope`]).
pub mod ops {
    use super::*;
    use crate::op::op;

    op!(Query(SqlRequest) -> SqlResponse, |node, who, req| {
        // An operator naming no realm reads every realm's rows.
        let scope = who.sql_scope(req.realm.is_empty())?;
        if req.sql.trim().is_empty() {
            return Err(Error::Invalid("empty SQL statement".into()));
        }
        if req.sql.len() > SQL_BYTES_MAX {
            return Err(Error::Invalid(format!(
                "statement of {} bytes exceeds the limit of {SQL_BYTES_MAX}",
                req.sql.len()
            )));
        }
        if req.params.len() > PARAMS_MAX {
            return Err(Error::Invalid(format!(
                "{} parameters exceed the limit of {PARAMS_MAX}",
                req.params.len()
            )));
        }
        let params = req
            .params
            .into_iter()
            .enumerate()
            .map(|(i, v)| value_from_proto(v, i))
            .collect::<Result<Vec<_>>>()?;
        let max_rows = match req.max_rows {
            0 => ROWS_DEFAULT,
            n => n.min(ROWS_MAX),
        } as usize;
        let rows = run(node, scope, req.sql, params, max_rows).await?;
        Ok(proto::SqlResponse {
            columns: rows.columns.to_vec(),
            truncated: rows.truncated,
            rows: rows
                .rows
                .iter()
                .map(|r| proto::SqlRow {
                    values: r.values().iter().map(value_to_proto).collect(),
                })
                .collect(),
        })
    });
}
