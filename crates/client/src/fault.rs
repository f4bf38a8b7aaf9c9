//! Why a call failed, as a type: the [`ErrorReason`] and [`ErrorDetail`]
//! of `tabos.proto`, and the one place each reason is mapped to what a
//! door speaks — its gRPC code ([`code`]), and for the PostgreSQL front
//! door its SQLSTATE ([`sqlstate`]). (The mount's errnos are in the CLI's
//! `mount.rs`, the Python SDK's exception classes in `errors.py`: one table
//! each, keyed on the reason.)
//!
//! A node sends the detail with every error its kernel or store gives, as
//! the status's details ([`status`]); [`detail`] reads it back, or, for a
//! status that carries none (a door's own refusal, or one the client's
//! transport made), gives the reason its code stands for ([`of_code`]).

use prost::Message;
use tonic::Code;

pub use crate::proto::{
    error_detail::More, ErrorDetail, ErrorReason, MountedDetail, OverQuotaDetail, StaleEpochDetail,
};

/// Every reason, for tables that must cover them all (tests assert it).
pub const REASONS: [ErrorReason; 25] = [
    ErrorReason::Invalid,
    ErrorReason::TooLarge,
    ErrorReason::NotFound,
    ErrorReason::AlreadyExists,
    ErrorReason::Full,
    ErrorReason::OverQuota,
    ErrorReason::Precondition,
    ErrorReason::NotADirectory,
    ErrorReason::IsADirectory,
    ErrorReason::NotEmpty,
    ErrorReason::Conflict,
    ErrorReason::Denied,
    ErrorReason::Unauthenticated,
    ErrorReason::StaleEpoch,
    ErrorReason::Mounted,
    ErrorReason::ProcedureFailed,
    ErrorReason::Overloaded,
    ErrorReason::Unavailable,
    ErrorReason::TimedOut,
    ErrorReason::Cancelled,
    ErrorReason::Unimplemented,
    ErrorReason::ReadOnly,
    ErrorReason::Contended,
    ErrorReason::Internal,
    ErrorReason::BrokenPipe,
];

/// The gRPC code a reason is answered with.
pub fn code(reason: ErrorReason) -> Code {
    use ErrorReason as R;
    match reason {
        R::Invalid | R::TooLarge | R::NotADirectory | R::IsADirectory => Code::InvalidArgument,
        R::NotFound => Code::NotFound,
        R::AlreadyExists => Code::AlreadyExists,
        R::Full | R::OverQuota | R::Overloaded => Code::ResourceExhausted,
        R::Precondition | R::NotEmpty | R::Conflict | R::Mounted | R::BrokenPipe => {
            Code::FailedPrecondition
        }
        R::Denied | R::ReadOnly => Code::PermissionDenied,
        R::Unauthenticated => Code::Unauthenticated,
        R::StaleEpoch | R::ProcedureFailed | R::Contended => Code::Aborted,
        R::Unavailable => Code::Unavailable,
        R::TimedOut => Code::DeadlineExceeded,
        R::Cancelled => Code::Cancelled,
        R::Unimplemented => Code::Unimplemented,
        R::Internal | R::Unspecified => Code::Internal,
    }
}

/// The reason a status with no detail stands for: its code's.
pub fn of_code(code: Code) -> ErrorReason {
    use ErrorReason as R;
    match code {
        Code::InvalidArgument | Code::OutOfRange => R::Invalid,
        Code::NotFound => R::NotFound,
        Code::AlreadyExists => R::AlreadyExists,
        Code::ResourceExhausted => R::Full,
        Code::FailedPrecondition => R::Precondition,
        Code::PermissionDenied => R::Denied,
        Code::Unauthenticated => R::Unauthenticated,
        Code::Aborted => R::Contended,
        Code::Unavailable => R::Unavailable,
        Code::DeadlineExceeded => R::TimedOut,
        Code::Cancelled => R::Cancelled,
        Code::Unimplemented => R::Unimplemented,
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => R::Internal,
    }
}

/// The SQLSTATE the PostgreSQL front door answers a reason with (classes
/// as PostgreSQL's own errors of the same kind).
pub fn sqlstate(reason: ErrorReason) -> &'static str {
    use ErrorReason as R;
    match reason {
        R::Invalid | R::NotADirectory | R::IsADirectory => "22023", // invalid_parameter_value
        R::TooLarge => "54000",                                     // program_limit_exceeded
        R::NotFound => "42704",                                     // undefined_object
        R::AlreadyExists => "42710",                                // duplicate_object
        R::Full | R::OverQuota | R::Overloaded => "53000",          // insufficient_resources
        R::Precondition | R::NotEmpty | R::Mounted | R::BrokenPipe => "55000", // object_not_in_prerequisite_state
        R::Conflict | R::StaleEpoch | R::Contended => "40001", // serialization_failure
        R::Denied => "42501",                                  // insufficient_privilege
        R::Unauthenticated => "28000", // invalid_authorization_specification
        R::ProcedureFailed => "P0001", // raise_exception
        R::Unavailable => "57P03",     // cannot_connect_now
        R::TimedOut | R::Cancelled => "57014", // query_canceled
        R::Unimplemented => "0A000",   // feature_not_supported
        R::ReadOnly => "25006",        // read_only_sql_transaction
        R::Internal | R::Unspecified => "XX000", // internal_error
    }
}

/// A detail of `reason` about `subject`, with nothing more.
pub fn detail_of(reason: ErrorReason, subject: impl Into<String>) -> ErrorDetail {
    ErrorDetail {
        reason: reason as i32,
        subject: subject.into(),
        more: None,
    }
}

/// The status a node answers `detail` with: its reason's code, `message`
/// for people, and the detail itself for programs.
pub fn status(detail: &ErrorDetail, message: impl Into<String>) -> tonic::Status {
    tonic::Status::with_details(
        code(detail.reason()),
        message,
        detail.encode_to_vec().into(),
    )
}

/// What a status says of why: the detail a node sent, or (none sent, or
/// one this client cannot read) its code's reason and nothing more.
pub fn detail(s: &tonic::Status) -> ErrorDetail {
    match ErrorDetail::decode(s.details()) {
        Ok(d) if !s.details().is_empty() && d.reason() != ErrorReason::Unspecified => d,
        _ => detail_of(of_code(s.code()), ""),
    }
}

/// Whether `s` was made by this client's own transport (the connection
/// failed or broke mid-call), not answered by a node: tonic keeps the
/// transport's error as its source, and a node's answer has none.
pub fn from_transport(s: &tonic::Status) -> bool {
    std::error::Error::source(s).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_once_and_keeps_its_code_on_the_wire() {
        let mut seen = std::collections::HashSet::new();
        for r in REASONS {
            assert!(seen.insert(r as i32), "{r:?} twice");
            let d = ErrorDetail {
                reason: r as i32,
                subject: "/a/b".into(),
                more: Some(More::OverQuota(OverQuotaDetail {
                    quota: "storage".into(),
                    used: 10,
                    limit: 5,
                })),
            };
            let s = status(&d, "words");
            assert_eq!(s.code(), code(r));
            assert_eq!(detail(&s), d, "the detail comes back whole");
            assert_eq!(s.message(), "words");
            assert_eq!(sqlstate(r).len(), 5);
        }
        // Every value the enum has (but UNSPECIFIED) is in REASONS.
        for v in 1..=64 {
            if let Ok(r) = ErrorReason::try_from(v) {
                assert!(seen.contains(&(r as i32)), "{r:?} missing from REASONS");
            }
        }
    }

    #[test]
    fn a_status_without_a_detail_has_its_codes_reason() {
        let s = tonic::Status::not_found("no such thing");
        assert_eq!(detail(&s).reason(), ErrorReason::NotFound);
        // Garbage in the details is not trusted either.
        let s = tonic::Status::with_details(Code::Aborted, "x", vec![0xff, 0xff].into());
        assert_eq!(detail(&s).reason(), ErrorReason::Contended);
        assert!(!from_transport(&s));
        // A code's reason answers with that code again.
        for c in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::AlreadyExists,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::Aborted,
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Cancelled,
            Code::Unimplemented,
            Code::Internal,
        ] {
            assert_eq!(code(of_code(c)), c);
        }
    }
}
