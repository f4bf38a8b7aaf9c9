//! The one error type of `tabos-store`.
//!
//! Every failure a client, a tenant or an operator can cause comes back as an
//! [`Error`] value; nothing reachable from outside panics. A SQL error keeps the
//! statement that failed, the backend's own code (SQLite extended result code or
//! PostgreSQL SQLSTATE) and, where the backend reports one, the byte position of
//! the offending token, so that the message a user sees points at their mistake.

use std::fmt;

/// The backend-specific code of a SQL error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlCode {
    /// SQLite primary and extended result codes (`SQLITE_CONSTRAINT` = 19,
    /// `SQLITE_CONSTRAINT_PRIMARYKEY` = 1555, ...).
    Sqlite { primary: i32, extended: i32 },
    /// A PostgreSQL SQLSTATE such as `40001`.
    Sqlstate(String),
    /// The driver failed before the database produced a code (I/O, protocol).
    None,
}

impl fmt::Display for SqlCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlCode::Sqlite { primary, extended } => {
                write!(f, "SQLite code {primary} (extended {extended})")
            }
            SqlCode::Sqlstate(s) => write!(f, "SQLSTATE {s}"),
            SqlCode::None => write!(f, "no code"),
        }
    }
}

/// A SQL error from either backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// The statement as the caller wrote it (before any dialect rewriting).
    pub statement: String,
    pub code: SqlCode,
    pub message: String,
    /// Byte offset into `statement` of the token the backend complained about.
    pub position: Option<usize>,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.message, self.code)?;
        if let Some(p) = self.position {
            write!(f, " at byte {p}")?;
        }
        write!(f, " in statement: {}", abbreviate(&self.statement, 200))
    }
}

fn abbreviate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Errors of the store layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("SQL error: {0}")]
    Sql(Box<SqlError>),

    #[error("unknown partition {p_key}: this store has partitions 0..{partitions}")]
    UnknownPartition { p_key: u32, partitions: u32 },

    #[error("read-only: {0}")]
    ReadOnly(String),

    /// A realm-scoped read named a table, view or action outside its
    /// realm's scope ([`ReadScope::Realm`](crate::ReadScope::Realm)).
    #[error("not in this realm's view: {0}")]
    OutOfScope(String),

    #[error("invalid argument: {0}")]
    Invalid(String),

    #[error("{what} exceeds its limit of {limit}: {detail}")]
    Limit {
        what: &'static str,
        limit: u64,
        detail: String,
    },

    #[error("store overloaded: {0}")]
    Overloaded(String),

    /// A read ran past its deadline and was stopped.
    #[error("{0}")]
    Timeout(String),

    /// A read was given up because nobody waits for it any more.
    #[error("cancelled: {0}")]
    Cancelled(String),

    #[error("type mismatch: {0}")]
    Type(String),

    #[error("migration failed: {0}")]
    Migration(String),

    #[error("configuration: {0}")]
    Config(String),

    #[error("I/O: {0}")]
    Io(String),

    /// A procedure gave up on purpose; its transaction is rolled back.
    #[error("procedure aborted: {0}")]
    Aborted(String),

    /// The transaction could not be serialized after the bounded number of retries.
    #[error("transaction still conflicting after {retries} retries: {last}")]
    RetriesExhausted { retries: u32, last: Box<SqlError> },

    /// A change-feed subscriber fell too far behind and was cut off; it must
    /// re-read the state it watches and subscribe again.
    #[error(
        "change-feed subscriber was cut off with {0} notifications unread (its queue full, or notifications lost) \
         and must re-read what it watches"
    )]
    Lagged(usize),

    #[error("store is shut down")]
    Closed,

    /// The database cannot be reached now (its server stopped, restarts or
    /// fails over): retry later. A transaction that failed this way before
    /// its commit changed nothing; one whose commit was cut off may or may
    /// not have committed (the message says so).
    #[error("the database is unavailable: {0}")]
    Unavailable(String),

    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// SQLite's extended code for a write refused because the transaction's
/// read snapshot is no longer the latest.
pub const SQLITE_BUSY_SNAPSHOT: i32 = 517;
/// SQLite's code for a lock held by another connection.
pub const SQLITE_BUSY: i32 = 5;

impl Error {
    pub(crate) fn sql(
        statement: &str,
        code: SqlCode,
        message: impl Into<String>,
        position: Option<usize>,
    ) -> Error {
        Error::Sql(Box::new(SqlError {
            statement: statement.to_string(),
            code,
            message: message.into(),
            position,
        }))
    }

    /// The SQL error inside, if this is one.
    pub fn as_sql(&self) -> Option<&SqlError> {
        match self {
            Error::Sql(e) => Some(e),
            _ => None,
        }
    }

    /// True for the errors a transaction must be retried on: PostgreSQL
    /// serialization failure (40001) and deadlock (40P01); SQLite's
    /// SQLITE_BUSY_SNAPSHOT (517) and SQLITE_BUSY (5), met by a deferred
    /// transaction (tenant code, see `sqlite`) whose snapshot is stale when
    /// it first writes, or that would write while another holds the write
    /// lock (SQLite cannot wait there: the snapshot would be stale after).
    pub fn is_retryable(&self) -> bool {
        match self.as_sql().map(|e| &e.code) {
            Some(SqlCode::Sqlstate(s)) => s == "40001" || s == "40P01",
            Some(SqlCode::Sqlite { extended, .. }) => {
                *extended == SQLITE_BUSY_SNAPSHOT || *extended == SQLITE_BUSY
            }
            _ => false,
        }
    }

    /// True when the database could not be reached ([`Error::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    /// True when a UNIQUE or PRIMARY KEY constraint rejected the write, on
    /// either backend (SQLite 2067/1555, PostgreSQL 23505).
    pub fn is_unique_violation(&self) -> bool {
        match self.as_sql().map(|e| &e.code) {
            Some(SqlCode::Sqlite { extended, .. }) => *extended == 2067 || *extended == 1555,
            Some(SqlCode::Sqlstate(s)) => s == "23505",
            _ => false,
        }
    }

    /// True when any integrity constraint rejected the write.
    pub fn is_constraint_violation(&self) -> bool {
        match self.as_sql().map(|e| &e.code) {
            Some(SqlCode::Sqlite { primary, .. }) => *primary == 19,
            Some(SqlCode::Sqlstate(s)) => s.starts_with("23"),
            _ => false,
        }
    }
}

/// What a procedure's error type must offer so that the executors can tell a
/// retryable conflict from a final failure, and can report their own failures
/// (commit errors, overload) in the caller's type.
pub trait ProcedureError: From<Error> + Send + 'static {
    fn store_error(&self) -> Option<&Error>;
}

impl ProcedureError for Error {
    fn store_error(&self) -> Option<&Error> {
        Some(self)
    }
}
