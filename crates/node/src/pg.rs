//! The PostgreSQL wire protocol (issue 21, item 1): psql, psycopg, JDBC
//! and Grafana reach the OS state the way `tabos sql` does.
//!
//! * **Sign-in.** User = the realm (`acme`, or `acme/alice` to name the fs
//!   user too; an operator may also sign in as `*` for every realm),
//!   password = a tabos credential (cleartext over the connection: the
//!   node serves it on loopback only unless told otherwise, as for gRPC).
//!   The credential decides everything, as on every RPC: a tenant's acts
//!   for its own realm only and needs role admin (SQL reads past files'
//!   and names' modes); a scoped one is refused. It is checked again
//!   before every statement, so a revoked credential ends the session.
//! * **Queries.** Simple and extended protocols (`pgwire`). A statement
//!   runs on the node's read path through [`crate::sql::run`] — the same
//!   realm scoping, deadline and size limits as `tabos sql`, on either
//!   backend; past [`ROWS_MAX`] rows the result is cut and a WARNING says
//!   so. Types follow the values: integers int8, reals float8, text text,
//!   blobs bytea. `BEGIN`/`COMMIT`/`ROLLBACK`, `SET`, `RESET`, `DISCARD`
//!   and `SHOW` are answered here (every statement is its own read-only
//!   snapshot); `NOTIFY` and anything that writes is refused. Cursors
//!   ([`cursor`]), `COPY … TO STDOUT` ([`copy`]), CancelRequest
//!   ([`cancel`]), SQL's `PREPARE`/`EXECUTE`/`DEALLOCATE` and `LOCK TABLE`
//!   (pg_dump's) are served here too.
//! * **Catalog.** A statement naming `pg_catalog` or `information_schema`
//!   is answered from a catalog of the relations the session may read
//!   ([`catalog`]), enough for psql's `\d` and `\dt` and Grafana's table
//!   picker.
//! * **Notifications.** `LISTEN procs` (every proc transition, as `<pid>
//!   <state>`), `"proc/<pid>"`, `"mailbox/<name>"`, `"names/<dir>"`,
//!   `spawns`, `workflows` (every workflow enqueued or changing status,
//!   as `<id> <status>`) or `"workflow/<id>"` follows that change-feed channel of the
//!   session's realm; each notification is delivered as a PostgreSQL
//!   notification as soon as the connection is idle (no polling: the
//!   connection's task waits on the feed and the socket at once).
//! * **Errors** carry SQLSTATEs ([`sqlstate`]).
//!
//! Each connection runs on a task of its own with its own handlers;
//! at most [`CONNECTIONS_MAX`] at once, a sign-in within [`STARTUP_WAIT`].

mod cancel;
pub mod catalog;
mod copy;
mod cursor;

use copy::copy_response;
use cursor::{declaration, fetching, no_cursor, Cursor};

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DataRowEncoder, DescribePortalResponse, DescribeStatementResponse, FieldInfo, QueryResponse,
    Response, Tag,
};
use pgwire::api::stmt::{NoopQueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, NoopHandler, PgWireConnectionState, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::response::{NoticeResponse, NotificationResponse};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tabos_kernel::auth::Principal;
use tabos_store::{ReadScope, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::Node;

/// Where `tabos up` serves the protocol unless told otherwise.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:5433";
/// Most connections served at once; past it an idle connection of the
/// realm holding the most is closed to make room ([`crate::doors`]), or
/// the new one waits up to [`SLOT_WAIT`] and is closed.
pub const CONNECTIONS_MAX: usize = 256;
/// Most connections still signing in from one address.
pub const UNAUTHENTICATED_PER_SOURCE_MAX: usize = 16;
/// The front door's limits, as [`crate::doors`] applies them: a quarter
/// of the connections for those still signing in, a quarter per realm.
pub const DOOR: crate::doors::DoorLimits =
    crate::doors::DoorLimits::quarters(CONNECTIONS_MAX, UNAUTHENTICATED_PER_SOURCE_MAX);
/// Most connections still signing in, from all sources together.
pub const UNAUTHENTICATED_MAX: usize = DOOR.unauthenticated;
/// Most signed-in connections of one realm (operators are counted, not capped), as
/// PostgreSQL's per-role `CONNECTION LIMIT`: past it the sign-in is
/// refused with `too_many_connections` (53300).
pub const CONNECTIONS_PER_REALM_MAX: usize = DOOR.per_realm;
/// Longest a new connection waits for a slot when every one is held.
pub const SLOT_WAIT: Duration = Duration::from_secs(1);
/// Longest a client may take to sign in.
pub const STARTUP_WAIT: Duration = Duration::from_secs(10);
/// Most rows one statement returns (then cut, with a WARNING).
pub const ROWS_MAX: usize = crate::sql::ROWS_MAX as usize;
/// Most described portals whose results a connection keeps for their
/// Execute (past it they are dropped; an Execute then runs again).
pub const DESCRIBED_MAX: usize = 4;
/// Most channels one connection listens on.
pub const LISTENS_MAX: usize = 64;
/// Most channels one realm's connections listen on together (each a
/// follower task on the node's change feed); past it LISTEN fails with
/// 54000 (program_limit_exceeded). Four connections' worth.
pub const LISTENS_PER_REALM_MAX: usize = 4 * LISTENS_MAX;
/// Notifications waiting for an idle connection (its listeners wait
/// past it).
pub const NOTIFY_QUEUE_MAX: usize = 1_024;
/// Most cursors (`DECLARE … CURSOR`) a connection holds open at once;
/// each holds its whole result, bounded as any result is.
pub const CURSORS_MAX: usize = 8;
/// Most statements a connection keeps by SQL's `PREPARE`.
pub const PREPARED_MAX: usize = 64;
/// The version psql and drivers are told (the catalog answers the
/// queries of this version's psql).
pub const SERVER_VERSION: &str = tabos_store::dialect::SERVER_VERSION;

/// SQLSTATEs of the errors this front door gives.
pub mod sqlstate {
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_AUTHORIZATION: &str = "28000";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const READ_ONLY_TRANSACTION: &str = "25006";
    pub const SYNTAX_OR_ACCESS: &str = "42000";
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const QUERY_CANCELED: &str = "57014";
    pub const DUPLICATE_CURSOR: &str = "42P03";
    pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
    pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
    pub const INVALID_CURSOR_NAME: &str = "34000";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    pub const INSUFFICIENT_RESOURCES: &str = "53000";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const INTEGRITY_CONSTRAINT: &str = "23000";
    pub const INTERNAL_ERROR: &str = "XX000";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
}

fn error(severity: &str, code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        severity.into(),
        code.into(),
        message.into(),
    )))
}

fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    error("FATAL", code, message)
}

fn refused(code: &str, message: impl Into<String>) -> PgWireError {
    error("ERROR", code, message)
}

/// A store error as PostgreSQL would say it: the backend's own SQLSTATE
/// when the backend is PostgreSQL, the nearest class otherwise.
pub fn store_error(e: &tabos_store::Error) -> PgWireError {
    use tabos_store::{Error as E, SqlCode};
    let code = match e {
        E::Sql(s) => match &s.code {
            SqlCode::Sqlstate(code) => code.as_str(),
            // SQLite: 9 interrupted, 8 read-only, 19 constraint, 23 not
            // authorized; 1 (an error in the statement) and the rest.
            SqlCode::Sqlite { primary: 9, .. } => sqlstate::QUERY_CANCELED,
            SqlCode::Sqlite { primary: 8, .. } => sqlstate::READ_ONLY_TRANSACTION,
            SqlCode::Sqlite { primary: 19, .. } => sqlstate::INTEGRITY_CONSTRAINT,
            SqlCode::Sqlite { primary: 23, .. } => sqlstate::INSUFFICIENT_PRIVILEGE,
            _ => sqlstate::SYNTAX_OR_ACCESS,
        },
        // Finer than the reason's class.
        E::Type(_) => sqlstate::DATATYPE_MISMATCH,
        E::Limit { .. } => sqlstate::PROGRAM_LIMIT_EXCEEDED,
        // The rest as every door: by reason (tabos_client::fault).
        other => tabos_client::fault::sqlstate(crate::store_reason(other)),
    };
    // The message only: a SQL error's own text already names the
    // statement, which the client has.
    let message = match e {
        E::Sql(s) => s.message.clone(),
        other => other.to_string(),
    };
    refused(code, message)
}

/// The front door's connection slots and who holds them.
pub type Door = crate::doors::Door<crate::doors::Ticket>;

/// A new front door with its limits.
pub fn door() -> Arc<Door> {
    Arc::new(Door::new(CONNECTIONS_MAX, DOOR))
}

/// A new count of the channels each realm listens on
/// ([`LISTENS_PER_REALM_MAX`]).
pub fn listens() -> Arc<crate::doors::PerRealm> {
    crate::doors::PerRealm::new(LISTENS_PER_REALM_MAX)
}

/// Serves the protocol on `listener` until `stopping` is raised.
pub async fn serve(
    node: Node,
    listener: TcpListener,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let door = node.pg_door.clone();
    let stop = crate::stopping(stopping.clone());
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            a = listener.accept() => a,
        };
        let Ok((socket, peer)) = accepted else {
            // Out of descriptors, most likely: give the others a moment.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ticket = crate::doors::Ticket::new(crate::doors::Source::Ip(peer.ip()));
        if !door.ledger.admit(&ticket) {
            continue; // too many from this address still signing in: closed
        }
        let (node, stopping, door) = (node.clone(), stopping.clone(), door.clone());
        tokio::spawn(async move {
            if let Some(slot) = door.slot(Some(SLOT_WAIT)).await {
                connection(node, socket, stopping, ticket.clone(), door.clone()).await;
                drop(slot);
            }
            door.ledger.forget(&ticket);
        });
    }
}

/// A signed-in session: who, and what it reads.
#[derive(Clone)]
struct Session {
    principal: Arc<Principal>,
    scope: ReadScope,
    /// The realm it acts in (`None`: every realm, an operator's `*`).
    realm: Option<String>,
    /// Signed in with an operator's credential: reads the cluster's
    /// relations whole whichever realm it signed in to.
    operator: bool,
}

/// One connection's state, shared by its handlers.
struct Conn {
    node: Node,
    session: Mutex<Option<Session>>,
    /// Results run to describe a portal, kept for its execution.
    described: Mutex<HashMap<String, (String, Typed)>>,
    /// Open cursors, by name.
    cursors: Mutex<HashMap<String, Cursor>>,
    /// Statements SQL's `PREPARE` kept, by name.
    prepared: Mutex<HashMap<String, String>>,
    /// Its cancel key (registered while the connection lives).
    key: Option<cancel::Key>,
    /// The cluster's relations ([`catalog::cluster_relations`]), once
    /// an operator signed in to a realm has asked.
    cluster: tokio::sync::OnceCell<Arc<[String]>>,
    /// LISTENed channels (as the client named them) and their followers,
    /// each counted against its realm's [`LISTENS_PER_REALM_MAX`] while it
    /// lives.
    listens: Mutex<HashMap<String, (tokio::task::JoinHandle<()>, crate::doors::Taken)>>,
    notify: mpsc::Sender<(String, String)>,
    /// Its standing at the door (signed in for which realm, busy, to be
    /// closed).
    ticket: Arc<crate::doors::Ticket>,
    door: Arc<Door>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        for (_, t) in self
            .listens
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            t.0.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conn {
    /// Signs `user` in with `token`: a realm that does not exist is
    /// refused as PostgreSQL refuses a role that does not exist.
    async fn sign_in(&self, user: &str, token: &str) -> PgWireResult<Session> {
        let principal = self.node.auth.check(token.trim()).ok_or_else(|| {
            fatal(
                sqlstate::INVALID_PASSWORD,
                format!(
                    "password authentication failed for user \"{user}\": the password must be a \
                     live tabos credential"
                ),
            )
        })?;
        // User `realm[/user]`, or an operator's `*`: every realm. Who may
        // act where, and what SQL it reads, are the kernel's rules — the
        // same at every door.
        let (realm, fs_user) = match user.split_once('/') {
            Some((r, u)) => (r, u),
            None => (user, ""),
        };
        let every_realm = realm == "*" && principal.is_operator();
        let asked = if every_realm { "" } else { realm };
        let who = principal
            .act(asked, fs_user, &self.node.settings.realm)
            .map_err(|e| {
                let hint = match e {
                    tabos_kernel::Error::Denied(_) => {
                        format!(": sign in as user {}", principal.realm())
                    }
                    _ => String::new(),
                };
                fatal(sqlstate::INVALID_AUTHORIZATION, format!("{e}{hint}"))
            })?;
        let scope = who
            .sql_scope(every_realm)
            .map_err(|e| fatal(sqlstate::INSUFFICIENT_PRIVILEGE, e.to_string()))?;
        let scope_realm = match &scope {
            ReadScope::All => None,
            ReadScope::Realm(r) => Some(r.clone()),
        };
        if let Some(r) = &scope_realm {
            let name = r.clone();
            let known = tabos_kernel::read(&self.node.store, r, move |tx| {
                tabos_kernel::realms::scheduler_tx(tx, &name)
            })
            .await;
            match known {
                Ok(_) => {}
                Err(tabos_kernel::Error::NotFound(_)) => {
                    return Err(fatal(
                        sqlstate::INVALID_AUTHORIZATION,
                        format!("role \"{user}\" does not exist: there is no realm {r:?}"),
                    ))
                }
                Err(e) => return Err(fatal(sqlstate::CANNOT_CONNECT_NOW, e.to_string())),
            }
        }
        Ok(Session {
            operator: principal.is_operator(),
            principal,
            scope,
            realm: scope_realm,
        })
    }

    /// The session, its credential checked again (a revoked or expired
    /// one ends it).
    fn session(&self) -> PgWireResult<Session> {
        let s = lock(&self.session)
            .clone()
            .ok_or_else(|| fatal(sqlstate::INVALID_AUTHORIZATION, "not signed in"))?;
        if !self.node.auth.is_live(s.principal.id()) {
            return Err(fatal(
                sqlstate::INVALID_AUTHORIZATION,
                format!("credential {} was revoked or has expired", s.principal.id()),
            ));
        }
        Ok(s)
    }

    /// Runs one statement of the session, until it ends or a
    /// CancelRequest for this connection stops it ([`cancel`]).
    async fn run(&self, sql: &str, params: Vec<Value>) -> PgWireResult<Outcome> {
        let Some(key) = &self.key else {
            return self.run_now(sql, params).await;
        };
        let cancelled = key.signal.notified();
        tokio::select! {
            outcome = self.run_now(sql, params) => outcome,
            () = cancelled => Err(refused(
                sqlstate::QUERY_CANCELED,
                "canceling statement due to user request",
            )),
        }
    }

    async fn run_now(&self, sql: &str, params: Vec<Value>) -> PgWireResult<Outcome> {
        let session = self.session()?;
        // The same bounds as `tabos sql`.
        if sql.len() > crate::sql::SQL_BYTES_MAX {
            return Err(refused(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "a statement is at most {} bytes, not {}",
                    crate::sql::SQL_BYTES_MAX,
                    sql.len()
                ),
            ));
        }
        match classify(sql) {
            Statement::Empty => Ok(Outcome::Response(Response::EmptyQuery)),
            Statement::Begin => Ok(Outcome::Response(Response::TransactionStart(Tag::new(
                "BEGIN",
            )))),
            Statement::End(tag) => {
                // A transaction's end closes its cursors (those declared
                // WITH HOLD stay, as in PostgreSQL).
                lock(&self.cursors).retain(|_, c| c.hold);
                Ok(Outcome::Response(Response::TransactionEnd(Tag::new(tag))))
            }
            Statement::Set(tag) => Ok(Outcome::Response(Response::Execution(Tag::new(tag)))),
            Statement::Show(name) => Ok(Outcome::Rows(show(&name)?.into())),
            Statement::Listen(channel) => {
                self.listen(&session, channel)?;
                Ok(Outcome::Response(Response::Execution(Tag::new("LISTEN"))))
            }
            Statement::Unlisten(channel) => {
                let mut listens = lock(&self.listens);
                match channel {
                    Some(c) => {
                        if let Some((t, _)) = listens.remove(&c) {
                            t.abort();
                        }
                    }
                    None => listens.drain().for_each(|(_, (t, _))| t.abort()),
                }
                Ok(Outcome::Response(Response::Execution(Tag::new("UNLISTEN"))))
            }
            Statement::Notify => Err(refused(
                sqlstate::READ_ONLY_TRANSACTION,
                "cannot execute NOTIFY: tabos's SQL is read-only (notifications come from the OS \
                 state changing)",
            )),
            Statement::Query => Ok(Outcome::Rows(self.query(&session, sql, params).await?)),
            Statement::Copy => {
                let copy =
                    match tabos_store::dialect::copy_out(sql) {
                        Some(Ok(c)) => c,
                        Some(Err((code, why))) => return Err(refused(code, why)),
                        None => return Err(refused(
                            sqlstate::SYNTAX_ERROR,
                            "a COPY tabos cannot read: COPY (query) TO STDOUT [WITH (FORMAT csv, \
                             HEADER)] or COPY table [(columns)] TO STDOUT",
                        )),
                    };
                let typed = self.query(&session, &copy.query, params).await?;
                Ok(Outcome::Response(Response::CopyOut(copy_response(
                    &typed, &copy,
                ))))
            }
            Statement::Declare => {
                let d = declaration(sql)?;
                if lock(&self.cursors).contains_key(&d.name) {
                    return Err(refused(
                        sqlstate::DUPLICATE_CURSOR,
                        format!("cursor \"{}\" already exists", d.name),
                    ));
                }
                let typed = self.query(&session, d.query, params).await?;
                let mut cursors = lock(&self.cursors);
                if cursors.len() >= CURSORS_MAX {
                    return Err(refused(
                        sqlstate::PROGRAM_LIMIT_EXCEEDED,
                        format!("a connection holds at most {CURSORS_MAX} open cursors: CLOSE one"),
                    ));
                }
                let types = (0..typed.rows.columns.len())
                    .map(|i| column_type(&typed, i))
                    .collect();
                cursors.insert(
                    d.name,
                    Cursor {
                        typed,
                        types,
                        next: 0,
                        hold: d.hold,
                    },
                );
                Ok(Outcome::Response(Response::Execution(Tag::new(
                    "DECLARE CURSOR",
                ))))
            }
            Statement::Fetch { moving } => {
                let f = fetching(sql)?;
                let mut cursors = lock(&self.cursors);
                let cursor = cursors.get_mut(&f.name).ok_or_else(|| no_cursor(&f.name))?;
                let typed = cursor.take(f.count);
                if moving {
                    return Ok(Outcome::Response(Response::Execution(
                        Tag::new("MOVE").with_rows(typed.rows.rows.len()),
                    )));
                }
                Ok(Outcome::Rows(typed))
            }
            Statement::Prepare => {
                let Some((name, body)) = tabos_store::dialect::prepare_of(sql) else {
                    return Err(refused(
                        sqlstate::SYNTAX_ERROR,
                        "PREPARE name [(types)] AS statement is what tabos reads",
                    ));
                };
                let mut prepared = lock(&self.prepared);
                if prepared.contains_key(&name) {
                    return Err(refused(
                        sqlstate::DUPLICATE_PREPARED_STATEMENT,
                        format!("prepared statement \"{name}\" already exists"),
                    ));
                }
                if prepared.len() >= PREPARED_MAX {
                    return Err(refused(
                        sqlstate::PROGRAM_LIMIT_EXCEEDED,
                        format!("a connection keeps at most {PREPARED_MAX} prepared statements"),
                    ));
                }
                prepared.insert(name, body);
                Ok(Outcome::Response(Response::Execution(Tag::new("PREPARE"))))
            }
            Statement::Execute => {
                let (name, args) = match tabos_store::dialect::execute_of(sql) {
                    Some(Ok(e)) => e,
                    Some(Err(what)) => {
                        return Err(refused(
                            sqlstate::FEATURE_NOT_SUPPORTED,
                            format!("EXECUTE takes literal arguments, not {what}"),
                        ))
                    }
                    None => {
                        return Err(refused(
                            sqlstate::SYNTAX_ERROR,
                            "EXECUTE name [(arguments)] is what tabos reads",
                        ))
                    }
                };
                let body = lock(&self.prepared).get(&name).cloned().ok_or_else(|| {
                    refused(
                        sqlstate::INVALID_SQL_STATEMENT_NAME,
                        format!("prepared statement \"{name}\" does not exist"),
                    )
                })?;
                if classify(&body) != Statement::Query {
                    return Err(refused(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "EXECUTE of a prepared statement other than a query",
                    ));
                }
                Ok(Outcome::Rows(self.query(&session, &body, args).await?))
            }
            Statement::Deallocate(name) => {
                let mut prepared = lock(&self.prepared);
                match name {
                    None => prepared.clear(),
                    Some(n) => {
                        prepared.remove(&n).ok_or_else(|| {
                            refused(
                                sqlstate::INVALID_SQL_STATEMENT_NAME,
                                format!("prepared statement \"{n}\" does not exist"),
                            )
                        })?;
                    }
                }
                Ok(Outcome::Response(Response::Execution(Tag::new(
                    "DEALLOCATE",
                ))))
            }
            Statement::Close(name) => {
                let mut cursors = lock(&self.cursors);
                match name {
                    None => cursors.clear(),
                    Some(n) => {
                        cursors.remove(&n).ok_or_else(|| no_cursor(&n))?;
                    }
                }
                Ok(Outcome::Response(Response::Execution(Tag::new(
                    "CLOSE CURSOR",
                ))))
            }
        }
    }

    /// A query's rows: the catalog's, or the store's in the session's
    /// scope.
    async fn query(&self, session: &Session, sql: &str, params: Vec<Value>) -> PgWireResult<Typed> {
        if catalog::mentions_catalog(sql) {
            let node = self.node.clone();
            let (sql, scope) = (sql.to_string(), session.scope.clone());
            let operator = session.operator;
            return tokio::task::spawn_blocking(move || {
                catalog::answer(&node, &scope, operator, &sql, &params)
            })
            .await
            .map_err(|e| refused(sqlstate::INTERNAL_ERROR, e.to_string()))?;
        }
        let scope = self.scope_of(session, sql).await?;
        let mut rows = crate::sql::run(&self.node, scope, sql.to_string(), params, ROWS_MAX)
            .await
            .map_err(|e| store_error(&e))?;
        // SQLite names an expression by its text (`count(*)`), PostgreSQL
        // by its rules (`count`): as PostgreSQL on both backends.
        if self.node.store.kind() == tabos_store::BackendKind::Sqlite {
            if let Some(named) = tabos_store::dialect::output_names(sql) {
                if named.len() == rows.columns.len() && *named != *rows.columns {
                    rows.columns = named.into();
                }
            }
        }
        Ok(Typed {
            rows,
            bools: tabos_store::dialect::bool_columns(sql),
            arrays: Arc::from([]),
            types: None,
        })
    }

    /// The scope `sql` runs in: the session's, or — for an operator
    /// signed in to a realm, when every relation it names is the
    /// cluster's (`node`, `grants` …, outside any realm's view) — every
    /// row, as the operator's `*` reads them. A statement that mixes
    /// the two runs in the realm's scope, which names what it cannot see.
    async fn scope_of(&self, session: &Session, sql: &str) -> PgWireResult<ReadScope> {
        if !(session.operator && matches!(session.scope, ReadScope::Realm(_))) {
            return Ok(session.scope.clone());
        }
        let Some(named) = tabos_store::dialect::relations_named(sql) else {
            return Ok(session.scope.clone());
        };
        let store = self.node.store.clone();
        let cluster = self
            .cluster
            .get_or_try_init(|| async move {
                tokio::task::spawn_blocking(move || catalog::cluster_relations(&store))
                    .await
                    .map_err(|e| refused(sqlstate::INTERNAL_ERROR, e.to_string()))?
                    .map(Arc::from)
                    .map_err(|e| store_error(&e))
            })
            .await?;
        Ok(
            if !named.is_empty() && named.iter().all(|n| cluster.contains(n)) {
                ReadScope::All
            } else {
                session.scope.clone()
            },
        )
    }

    /// The result shape of cursor `name`, read without moving it.
    fn cursor_fields(&self, name: &str, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
        let cursors = lock(&self.cursors);
        let c = cursors.get(name).ok_or_else(|| no_cursor(name))?;
        Ok(fields(&c.take_none(), format).to_vec())
    }

    /// Follows `channel` of the session's realm.
    fn listen(&self, session: &Session, channel: String) -> PgWireResult<()> {
        let Some(realm) = &session.realm else {
            return Err(refused(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "LISTEN follows one realm's changes: sign in as user <realm>",
            ));
        };
        let feed = feed_channel(realm, &channel)
            .map_err(|why| refused(sqlstate::INVALID_PARAMETER_VALUE, why))?;
        let mut listens = lock(&self.listens);
        if listens.contains_key(&channel) {
            return Ok(());
        }
        if listens.len() >= LISTENS_MAX {
            return Err(refused(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!("a connection listens on at most {LISTENS_MAX} channels"),
            ));
        }
        let taken = self.node.pg_listens.take(realm).map_err(|full| {
            refused(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "realm {} listens on {} channels over its connections to this node, the \
                     most one realm may ({LISTENS_PER_REALM_MAX})",
                    full.realm, full.held
                ),
            )
        })?;
        let mut sub = self.node.store.subscribe(&feed);
        let (tx, name) = (self.notify.clone(), channel.clone());
        let task = tokio::spawn(async move {
            // Ends when the feed cuts it off (it lagged) or the connection
            // is gone. A client that reads no notifications holds back at
            // most NOTIFY_QUEUE_MAX of them; the follower then waits, and
            // the feed cuts it off if it waits too long.
            while let Ok(n) = sub.recv().await {
                if tx.send((name.clone(), n.payload)).await.is_err() {
                    return;
                }
            }
        });
        listens.insert(channel, (task, taken));
        Ok(())
    }
}

/// The change-feed channel a LISTEN names, in `realm` — the names the
/// dashboard's event stream takes too ([`crate::dashboard`]).
pub fn feed_channel(realm: &str, channel: &str) -> Result<String, String> {
    if channel == "spawns" {
        return Ok(tabos_kernel::procs::queue_channel(realm));
    }
    if channel == "procs" {
        return Ok(tabos_kernel::procs::procs_channel(realm));
    }
    if channel == "workflows" {
        return Ok(tabos_kernel::workflows::workflows_channel(realm));
    }
    if channel == "graphs" {
        return Ok(tabos_kernel::graphs::graphs_channel(realm));
    }
    match channel.split_once('/') {
        Some(("proc", pid)) => {
            let pid = tabos_kernel::ids::Pid::new(pid).map_err(|e| e.to_string())?;
            Ok(tabos_kernel::procs::proc_channel(realm, pid.as_str()))
        }
        Some(("logs", pid)) => {
            let pid = tabos_kernel::ids::Pid::new(pid).map_err(|e| e.to_string())?;
            Ok(tabos_kernel::logs::channel(realm, &pid))
        }
        Some(("mailbox", name)) => {
            let a = tabos_kernel::ipc::Address::parse(name).map_err(|e| e.to_string())?;
            Ok(tabos_kernel::ipc::channel(realm, &a))
        }
        Some(("workflow", id)) => {
            tabos_kernel::ids::WorkflowId::new(id).map_err(|e| e.to_string())?;
            Ok(tabos_kernel::workflows::workflow_channel(realm, id))
        }
        Some(("graph", id)) => {
            tabos_kernel::ids::validate_name("graph id", id).map_err(|e| e.to_string())?;
            Ok(tabos_kernel::graphs::graph_channel(realm, id))
        }
        Some(("names", dir)) => {
            let dir = format!("/{}", dir.trim_start_matches('/'));
            tabos_kernel::names::validate_path(&dir).map_err(|e| e.to_string())?;
            Ok(tabos_kernel::names::dir_channel(realm, &dir))
        }
        _ => Err(format!(
            "unknown channel {channel:?}: LISTEN procs, \"proc/<pid>\", \"logs/<pid>\", \"mailbox/<name>\", \
             \"names/<dir>\", spawns, workflows, \"workflow/<id>\", graphs or \"graph/<id>\""
        )),
    }
}

/// What a statement came to.
enum Outcome {
    Response(Response),
    Rows(Typed),
}

/// A result, and which of its columns the statement says are booleans
/// ([`tabos_store::dialect::bool_columns`]): the store's values have no
/// boolean (SQLite's are 1 and 0, and the PostgreSQL store reads `bool`
/// as an integer), so those columns are typed here.
struct Typed {
    rows: tabos_store::Rows,
    bools: Arc<[bool]>,
    /// Columns whose values are JSON arrays (of the catalog's arrays),
    /// sent as `text[]`.
    arrays: Arc<[bool]>,
    /// Column types decided already (a cursor's, from its whole result,
    /// so that every FETCH has the same shape).
    types: Option<Arc<[Type]>>,
}

impl From<tabos_store::Rows> for Typed {
    fn from(rows: tabos_store::Rows) -> Typed {
        Typed {
            rows,
            bools: Arc::from([]),
            arrays: Arc::from([]),
            types: None,
        }
    }
}

/// The statements answered here rather than by the store.
#[derive(Debug, PartialEq)]
enum Statement {
    Empty,
    Begin,
    End(&'static str),
    Set(&'static str),
    Show(String),
    Listen(String),
    Unlisten(Option<String>),
    Notify,
    Query,
    /// `COPY … TO STDOUT`.
    Copy,
    /// `DECLARE name CURSOR … FOR query`.
    Declare,
    /// `FETCH` (or `MOVE`: no rows, only how many).
    Fetch {
        moving: bool,
    },
    /// `CLOSE name` (`None`: `CLOSE ALL`).
    Close(Option<String>),
    /// SQL's `PREPARE name AS query` (pg_dump's).
    Prepare,
    /// SQL's `EXECUTE name (arguments)`.
    Execute,
    /// `DEALLOCATE [PREPARE] name` (`None`: `ALL`).
    Deallocate(Option<String>),
}

/// A channel or setting name as PostgreSQL reads an identifier: quoted
/// as is, otherwise folded to lower case.
fn identifier(s: &str) -> String {
    let s = s.trim().trim_end_matches(';').trim();
    match s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => s.to_ascii_lowercase(),
    }
}

fn classify(sql: &str) -> Statement {
    let s = sql.trim().trim_end_matches(';').trim();
    if s.is_empty() {
        return Statement::Empty;
    }
    let (first, rest) = s
        .split_once(char::is_whitespace)
        .map_or((s, ""), |(a, b)| (a, b.trim()));
    match first.to_ascii_lowercase().as_str() {
        "begin" | "start" => Statement::Begin,
        "commit" | "end" => Statement::End("COMMIT"),
        "rollback" | "abort" => Statement::End("ROLLBACK"),
        "set" => Statement::Set("SET"),
        // Savepoints (psycopg's nested transactions): every statement is
        // its own read-only snapshot, so there is nothing to keep or undo.
        "savepoint" => Statement::Set("SAVEPOINT"),
        "release" => Statement::Set("RELEASE"),
        "reset" => Statement::Set("RESET"),
        "discard" => Statement::Set("DISCARD ALL"),
        "show" => Statement::Show(identifier(rest)),
        "listen" => Statement::Listen(identifier(rest)),
        "unlisten" if rest.trim() == "*" => Statement::Unlisten(None),
        "unlisten" => Statement::Unlisten(Some(identifier(rest))),
        "notify" => Statement::Notify,
        "copy" => Statement::Copy,
        "declare" => Statement::Declare,
        "fetch" => Statement::Fetch { moving: false },
        "move" => Statement::Fetch { moving: true },
        // A lock on a read-only snapshot holds nothing back (pg_dump's
        // LOCK TABLE … IN ACCESS SHARE MODE).
        "lock" => Statement::Set("LOCK TABLE"),
        "prepare" => Statement::Prepare,
        "execute" => Statement::Execute,
        "deallocate" => {
            let name = rest
                .strip_prefix("prepare ")
                .or_else(|| rest.strip_prefix("PREPARE "))
                .unwrap_or(rest)
                .trim();
            if name.eq_ignore_ascii_case("all") {
                Statement::Deallocate(None)
            } else {
                Statement::Deallocate(Some(identifier(name)))
            }
        }
        "close" if rest.eq_ignore_ascii_case("all") => Statement::Close(None),
        "close" => Statement::Close(Some(identifier(rest))),
        _ => Statement::Query,
    }
}

/// `SHOW name`: the settings clients ask for.
fn show(name: &str) -> PgWireResult<tabos_store::Rows> {
    let Some(value) = tabos_store::dialect::setting(name) else {
        return Err(refused(
            sqlstate::UNDEFINED_OBJECT,
            format!("unrecognized configuration parameter \"{name}\""),
        ));
    };
    Ok(catalog::rows(
        &[name],
        vec![vec![Value::Text(value.into())]],
    ))
}

/// The type a column's values have: int8, float8, text or bytea (text
/// when they differ, or are all null).
/// Column `i`'s type, from its values: a boolean when the statement says
/// so and every value is 0, 1 or NULL.
fn column_type(typed: &Typed, i: usize) -> Type {
    let rows = &typed.rows;
    if let Some(t) = typed.types.as_ref().and_then(|t| t.get(i)) {
        return t.clone();
    }
    if typed.arrays.get(i) == Some(&true) {
        return Type::TEXT_ARRAY;
    }
    if typed.bools.get(i) == Some(&true)
        && rows
            .rows
            .iter()
            .all(|r| matches!(r.values().get(i), Some(Value::Int(0 | 1) | Value::Null)))
    {
        return Type::BOOL;
    }
    let mut ty: Option<Type> = None;
    for r in rows.rows.iter() {
        let t = match r.values().get(i) {
            Some(Value::Int(_)) => Type::INT8,
            Some(Value::Real(_)) => Type::FLOAT8,
            Some(Value::Text(t)) if time_us(t).is_some() => Type::TIMESTAMPTZ,
            Some(Value::Text(_)) => Type::TEXT,
            Some(Value::Blob(_)) => Type::BYTEA,
            _ => continue,
        };
        ty = Some(match (ty, t) {
            (None, t) => t,
            (Some(a), b) if a == b => a,
            (Some(Type::INT8), Type::FLOAT8) | (Some(Type::FLOAT8), Type::INT8) => Type::FLOAT8,
            _ => return Type::TEXT,
        });
    }
    ty.unwrap_or(Type::TEXT)
}

fn fields(typed: &Typed, format: &Format) -> Arc<Vec<FieldInfo>> {
    Arc::new(
        typed
            .rows
            .columns
            .iter()
            .enumerate()
            .map(|(i, name)| {
                FieldInfo::new(
                    name.clone(),
                    None,
                    None,
                    column_type(typed, i),
                    format.format_for(i),
                )
            })
            .collect(),
    )
}

/// The µs since the epoch of a time as both stores hand one over — RFC
/// 3339 in UTC to the µs, `2026-11-27T19:30:00.123456Z` (SQLite's view
/// columns and translated times; the PostgreSQL store's `timestamptz`) —
/// and `None` for any other text: a column of them is sent as
/// `timestamptz`.
fn time_us(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let shaped = b.len() == 27 && b[10] == b'T' && b[19] == b'.' && b[26] == b'Z';
    shaped
        .then(|| tabos_store::dialect::parse_timestamp(text))
        .flatten()
}

/// A `timestamptz` as PostgreSQL 15 prints one in UTC with DateStyle ISO:
/// `2026-11-27 19:30:00.5+00` (the fraction without trailing zeros, none
/// when whole). Binary: µs since 2000-01-01.
#[derive(Debug)]
struct PgTime(i64);

/// [`PgTime`]'s text.
fn time_text(us: i64) -> String {
    let iso = tabos_store::rfc3339(us, true);
    let (date_time, fraction) = iso
        .trim_end_matches('Z')
        .split_once('.')
        .unwrap_or((&iso, ""));
    let fraction = fraction.trim_end_matches('0');
    let date_time = date_time.replacen('T', " ", 1);
    if fraction.is_empty() {
        format!("{date_time}+00")
    } else {
        format!("{date_time}.{fraction}+00")
    }
}

impl pgwire::types::ToSqlText for PgTime {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _format_options: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(time_text(self.0).as_bytes());
        Ok(postgres_types::IsNull::No)
    }
}

impl postgres_types::ToSql for PgTime {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        /// 2000-01-01, PostgreSQL's epoch, in µs since 1970's.
        const PG_EPOCH_US: i64 = 946_684_800_000_000;
        out.extend_from_slice(&(self.0 - PG_EPOCH_US).to_be_bytes());
        Ok(postgres_types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ
    }

    postgres_types::to_sql_checked!();
}

/// A float8 as PostgreSQL 15 prints it: the shortest digits that read
/// back exactly, without a trailing `.0` (`5`, `2.5`), in exponent form
/// below 1e-4 or from 1e15 up (`1e+20`, `1.5e-07`), and `Infinity`,
/// `-Infinity`, `NaN`. (pgwire's text keeps Rust's `5.0` and `inf`.)
#[derive(Debug)]
struct PgFloat(f64);

/// [`PgFloat`]'s text.
fn float_text(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // `{:e}` is the shortest exact digits with their exponent.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..15).contains(&exp) {
        format!("{x}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

impl pgwire::types::ToSqlText for PgFloat {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _format_options: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(float_text(self.0).as_bytes());
        Ok(postgres_types::IsNull::No)
    }
}

impl postgres_types::ToSql for PgFloat {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <f64 as postgres_types::ToSql>::accepts(ty)
    }

    postgres_types::to_sql_checked!();
}

fn encode(enc: &mut DataRowEncoder, ty: &Type, v: &Value) -> PgWireResult<()> {
    match (v, ty) {
        (Value::Null, _) => enc.encode_field(&None::<i64>),
        (Value::Text(json), t) if *t == Type::TEXT_ARRAY => {
            let items: Vec<serde_json::Value> = serde_json::from_str(json)
                .map_err(|e| refused(sqlstate::INTERNAL_ERROR, format!("an array column: {e}")))?;
            let items: Vec<Option<String>> = items
                .into_iter()
                .map(|i| match i {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(s) => Some(s),
                    other => Some(other.to_string()),
                })
                .collect();
            enc.encode_field(&items)
        }
        (Value::Int(i), t) if *t == Type::INT8 => enc.encode_field(i),
        (Value::Int(i), t) if *t == Type::BOOL => enc.encode_field(&(*i != 0)),
        (Value::Int(i), t) if *t == Type::FLOAT8 => enc.encode_field(&PgFloat(*i as f64)),
        (Value::Real(r), t) if *t == Type::FLOAT8 => enc.encode_field(&PgFloat(*r)),
        (Value::Blob(b), t) if *t == Type::BYTEA => enc.encode_field(b),
        (Value::Text(s), t) if *t == Type::TIMESTAMPTZ => match time_us(s) {
            Some(us) => enc.encode_field(&PgTime(us)),
            None => enc.encode_field(s),
        },
        (Value::Text(s), _) => enc.encode_field(s),
        (Value::Int(i), _) => enc.encode_field(&i.to_string()),
        (Value::Real(r), _) => enc.encode_field(&r.to_string()),
        (Value::Blob(b), _) => enc.encode_field(&String::from_utf8_lossy(b).into_owned()),
    }
}

/// Rows as a PostgreSQL result in `format`.
fn query_response(typed: Typed, format: &Format) -> PgWireResult<QueryResponse> {
    let schema = fields(&typed, format);
    let mut enc = DataRowEncoder::new(schema.clone());
    let mut out = Vec::with_capacity(typed.rows.rows.len());
    for r in typed.rows.rows.iter() {
        for (v, f) in r.values().iter().zip(schema.iter()) {
            encode(&mut enc, f.datatype(), v)?;
        }
        out.push(Ok(enc.take_row()));
    }
    Ok(QueryResponse::new(schema, futures::stream::iter(out)))
}

/// Tells the client its result was cut.
async fn warn_truncated<C>(client: &mut C, rows: &tabos_store::Rows) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if rows.truncated {
        let info = ErrorInfo::new(
            "WARNING".into(),
            "01000".into(),
            format!(
                "the result was cut at {} rows: at most {ROWS_MAX} rows and {} bytes are returned",
                rows.rows.len(),
                crate::sql::RESULT_BYTES_MAX
            ),
        );
        client
            .send(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
                info,
            )))
            .await?;
    }
    Ok(())
}

/// The sign-in: a cleartext password, checked as a tabos credential.
struct Startup {
    conn: Arc<Conn>,
    params: DefaultServerParameterProvider,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::CleartextPassword,
                    ))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(p) => {
                let password = p.into_password()?;
                let user = client.metadata().get("user").cloned().unwrap_or_default();
                let session = self.conn.sign_in(&user, &password.password).await?;
                self.conn
                    .door
                    .ledger
                    .sign_in(&self.conn.ticket, session.principal.realm())
                    .map_err(|e| fatal(sqlstate::TOO_MANY_CONNECTIONS, e.to_string()))?;
                *lock(&self.conn.session) = Some(session);
                finish_authentication(client, &self.params).await?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The queries of one connection, both protocols.
struct Queries {
    conn: Arc<Conn>,
    parser: Arc<NoopQueryParser>,
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self.conn.run(query, Vec::new()).await? {
            Outcome::Response(r) => Ok(vec![r]),
            Outcome::Rows(typed) => {
                warn_truncated(client, &typed.rows).await?;
                Ok(vec![Response::Query(query_response(
                    typed,
                    &Format::UnifiedText,
                )?)])
            }
        }
    }
}

/// A portal's parameters as store values, by their declared types (text
/// when the client declared none).
fn params_of(portal: &Portal<String>) -> PgWireResult<Vec<Value>> {
    if portal.parameter_len() > crate::sql::PARAMS_MAX {
        return Err(refused(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            format!("at most {} parameters", crate::sql::PARAMS_MAX),
        ));
    }
    (0..portal.parameter_len())
        .map(|i| {
            let ty = portal
                .statement
                .parameter_types
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or(Type::UNKNOWN);
            let v = match ty {
                Type::INT2 => portal
                    .parameter::<i16>(i, &ty)?
                    .map(|v| Value::Int(v.into())),
                Type::INT4 => portal
                    .parameter::<i32>(i, &ty)?
                    .map(|v| Value::Int(v.into())),
                Type::INT8 => portal.parameter::<i64>(i, &ty)?.map(Value::Int),
                Type::FLOAT4 => portal
                    .parameter::<f32>(i, &ty)?
                    .map(|v| Value::Real(v.into())),
                Type::FLOAT8 => portal.parameter::<f64>(i, &ty)?.map(Value::Real),
                Type::BOOL => portal
                    .parameter::<bool>(i, &ty)?
                    .map(|v| Value::Int(v.into())),
                Type::BYTEA => portal.parameter::<Vec<u8>>(i, &ty)?.map(Value::Blob),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    portal.parameter::<String>(i, &ty)?.map(Value::Text)
                }
                other => {
                    return Err(refused(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        format!(
                            "parameter ${} has type {other}: give int, float, bool, text or bytea",
                            i + 1
                        ),
                    ))
                }
            };
            Ok(v.unwrap_or(Value::Null))
        })
        .collect()
}

impl Queries {
    /// Runs a portal's statement (or takes the result run to describe it).
    async fn outcome(&self, portal: &Portal<String>) -> PgWireResult<Outcome> {
        let sql = &portal.statement.statement;
        if let Some((s, typed)) = lock(&self.conn.described).remove(&portal.name) {
            if s == *sql {
                return Ok(Outcome::Rows(typed));
            }
        }
        self.conn.run(sql, params_of(portal)?).await
    }
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = String;
    type QueryParser = NoopQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self.outcome(portal).await? {
            Outcome::Response(r) => {
                if classify(&portal.statement.statement) == Statement::Declare {
                    // A cursor is a portal in PostgreSQL: psycopg describes
                    // it by name to learn its columns.
                    let d = declaration(&portal.statement.statement)?;
                    let fetch_all = format!("FETCH ALL FROM \"{}\"", d.name.replace('"', "\"\""));
                    client
                        .portal_store()
                        .put_portal(Arc::new(Portal::new_cursor(
                            d.name.clone(),
                            Arc::new(StoredStatement::new(d.name.clone(), fetch_all, Vec::new())),
                        )));
                }
                Ok(r)
            }
            Outcome::Rows(typed) => {
                warn_truncated(client, &typed.rows).await?;
                Ok(Response::Query(query_response(
                    typed,
                    &portal.result_column_format,
                )?))
            }
        }
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        stmt: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Parameters are what the client declared, text otherwise; the
        // columns are those of a run with every parameter null (the
        // store tells types only by values).
        let params: Vec<Type> = (0..placeholders(&stmt.statement).max(stmt.parameter_types.len()))
            .map(|i| {
                stmt.parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        let nulls = vec![Value::Null; params.len()];
        let fields = match classify(&stmt.statement) {
            // Run with nulls for the shape: it only reads.
            Statement::Query | Statement::Show(_) => {
                match self.conn.run(&stmt.statement, nulls).await? {
                    Outcome::Rows(typed) => fields(&typed, &Format::UnifiedText).to_vec(),
                    Outcome::Response(_) => Vec::new(),
                }
            }
            // A cursor's shape, without moving it.
            Statement::Fetch { moving: false } => {
                let f = fetching(&stmt.statement)?;
                self.conn.cursor_fields(&f.name, &Format::UnifiedText)?
            }
            // Not run to be described: it would act twice.
            _ => Vec::new(),
        };
        Ok(DescribeStatementResponse::new(params, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // A cursor (a portal psycopg describes by the cursor's name) and a
        // FETCH have the cursor's shape; only a query is run to be
        // described, and kept for the Execute that follows (the row
        // description comes from the values) — anything else would act
        // twice.
        let sql = portal.statement.statement.clone();
        if lock(&self.conn.cursors).contains_key(&portal.name) {
            let f = self
                .conn
                .cursor_fields(&portal.name, &portal.result_column_format)?;
            return Ok(DescribePortalResponse::new(f));
        }
        match classify(&sql) {
            Statement::Query | Statement::Show(_) => {}
            Statement::Fetch { moving: false } => {
                let f = fetching(&sql)?;
                let f = self
                    .conn
                    .cursor_fields(&f.name, &portal.result_column_format)?;
                return Ok(DescribePortalResponse::new(f));
            }
            _ => return Ok(DescribePortalResponse::new(Vec::new())),
        }
        match self.conn.run(&sql, params_of(portal)?).await? {
            Outcome::Rows(typed) => {
                let f = fields(&typed, &portal.result_column_format).to_vec();
                let mut kept = lock(&self.conn.described);
                // Bounded: a client that describes portals it never
                // executes holds at most this many results.
                if kept.len() >= DESCRIBED_MAX && !kept.contains_key(&portal.name) {
                    kept.clear();
                }
                kept.insert(portal.name.clone(), (sql, typed));
                Ok(DescribePortalResponse::new(f))
            }
            Outcome::Response(_) => Ok(DescribePortalResponse::new(Vec::new())),
        }
    }
}

/// The highest `$n` in `sql` (outside nothing: a rough count, for a
/// statement described before its parameters are known).
fn placeholders(sql: &str) -> usize {
    let b = sql.as_bytes();
    let mut most = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let start = i + 1;
            let mut j = start;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if let Ok(n) = sql[start..j].parse::<usize>() {
                most = most.max(n);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    most.min(crate::sql::PARAMS_MAX)
}

/// Serves one connection: sign-in, then statements, and notifications
/// whenever it is idle.
async fn connection(
    node: Node,
    socket: TcpStream,
    stopping: tokio::sync::watch::Receiver<bool>,
    ticket: Arc<crate::doors::Ticket>,
    door: Arc<Door>,
) {
    use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
    let negotiated =
        tokio::time::timeout(STARTUP_WAIT, negotiate_tls::<String>(socket, None)).await;
    let Ok(Ok(Some(mut socket))) = negotiated else {
        return;
    };
    let (notify, mut notifications) = mpsc::channel(NOTIFY_QUEUE_MAX);
    let conn = Arc::new(Conn {
        node,
        session: Mutex::new(None),
        described: Mutex::new(HashMap::new()),
        cursors: Mutex::new(HashMap::new()),
        prepared: Mutex::new(HashMap::new()),
        key: cancel::Key::new(),
        cluster: tokio::sync::OnceCell::new(),
        listens: Mutex::new(HashMap::new()),
        notify,
        ticket: ticket.clone(),
        door,
    });
    if let Some(key) = &conn.key {
        socket.set_pid_and_secret_key(key.pid, key.secret_key());
    }
    let mut params = DefaultServerParameterProvider::default();
    params.server_version = SERVER_VERSION.into();
    params.default_transaction_read_only = true;
    let startup = Arc::new(Startup {
        conn: conn.clone(),
        params,
    });
    let queries = Arc::new(Queries {
        conn: conn.clone(),
        parser: Arc::new(NoopQueryParser::new()),
    });
    let noop = Arc::new(NoopHandler);
    let canceller = Arc::new(cancel::Canceller);
    let deadline = tokio::time::Instant::now() + STARTUP_WAIT;
    let stop = crate::stopping(stopping);
    tokio::pin!(stop);
    loop {
        let state = socket.state();
        let signing_in = matches!(
            state,
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let idle = matches!(state, PgWireConnectionState::ReadyForQuery);
        tokio::select! {
            () = &mut stop => break,
            () = ticket.clone().closing() => break, // closed to make room
            () = tokio::time::sleep_until(deadline), if signing_in => break,
            n = notifications.recv(), if idle => {
                let Some((channel, payload)) = n else { break };
                let (pid, _) = socket.pid_and_secret_key();
                let m = NotificationResponse::new(pid, channel, payload);
                if socket.send(PgWireBackendMessage::NotificationResponse(m)).await.is_err() {
                    break;
                }
            }
            msg = socket.next() => {
                let Some(Ok(msg)) = msg else { break };
                if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
                    break;
                }
                let extended = match socket.state() {
                    PgWireConnectionState::CopyInProgress(e) => e,
                    _ => msg.is_extended_query(),
                };
                let cancel = matches!(msg, PgWireFrontendMessage::CancelRequest(_));
                let _busy = ticket.busy();
                if let Err(e) = process_message(
                    msg,
                    &mut socket,
                    startup.clone(),
                    queries.clone(),
                    queries.clone(),
                    noop.clone(),
                    canceller.clone(),
                )
                .await
                {
                    let is_fatal = e.is_fatal();
                    if process_error(&mut socket, e, extended).await.is_err() || is_fatal {
                        break;
                    }
                }
                if cancel {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_postgresql_prints_them() {
        for (x, text) in [
            (5.0, "5"),
            (2.5, "2.5"),
            (-0.1, "-0.1"),
            (1e20, "1e+20"),
            (1.5e-7, "1.5e-07"),
            (123456789012345.0, "123456789012345"),
            (1e15, "1e+15"),
            (0.0001, "0.0001"),
            (f64::INFINITY, "Infinity"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(float_text(x), text);
        }
    }

    #[test]
    fn statements_are_told_apart() {
        assert_eq!(classify("  ;"), Statement::Empty);
        assert_eq!(classify("BEGIN READ ONLY"), Statement::Begin);
        assert_eq!(classify("commit;"), Statement::End("COMMIT"));
        assert_eq!(
            classify("SET extra_float_digits = 3"),
            Statement::Set("SET")
        );
        assert_eq!(
            classify("SHOW TimeZone"),
            Statement::Show("timezone".into())
        );
        assert_eq!(
            classify(r#"LISTEN "proc/p1";"#),
            Statement::Listen("proc/p1".into())
        );
        assert_eq!(
            classify("LISTEN Spawns"),
            Statement::Listen("spawns".into())
        );
        assert_eq!(classify("UNLISTEN *"), Statement::Unlisten(None));
        assert_eq!(classify("notify x"), Statement::Notify);
        assert_eq!(
            classify(r#"SAVEPOINT "_pg3_1""#),
            Statement::Set("SAVEPOINT")
        );
        assert_eq!(classify(r#"RELEASE "_pg3_1""#), Statement::Set("RELEASE"));
        assert_eq!(
            classify("SHOW TRANSACTION ISOLATION LEVEL"),
            Statement::Show("transaction isolation level".into())
        );
        assert_eq!(classify("SELECT 1"), Statement::Query);
        assert_eq!(placeholders("SELECT $1, $12 WHERE a = $3"), 12);
    }

    #[test]
    fn channels_map_into_the_realm() {
        assert_eq!(feed_channel("r", "proc/p1").unwrap(), "proc/r/p1");
        assert_eq!(feed_channel("r", "spawns").unwrap(), "queue/r");
        assert_eq!(feed_channel("r", "procs").unwrap(), "procs/r");
        assert!(feed_channel("r", "mailbox/inbox").is_ok());
        assert!(feed_channel("r", "names/cfg").is_ok());
        for bad in ["proc/", "proc/a b", "mailbox/a/b", "other", "names/../x"] {
            assert!(feed_channel("r", bad).is_err(), "{bad}");
        }
    }
}
