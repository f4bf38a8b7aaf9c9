//! Errors as the API says them: a kernel or store error becomes a gRPC
//! status whose detail is its typed reason ([`tabos_client::fault`]) — the
//! one mapping every door uses ([`kernel_status`], [`status_of`]).

/// Maps a kernel error onto a gRPC status: its typed reason (and what
/// the reason carries) as the status's detail, its code the reason's
/// ([`tabos_client::fault`]), and the message for people.
pub fn kernel_status(e: &tabos_kernel::Error) -> tonic::Status {
    use tabos_client::fault::{self, detail_of, ErrorReason as R, More};
    use tabos_kernel::Error as K;
    let plain = |reason: R, message: &str| fault::status(&detail_of(reason, ""), message);
    match e {
        K::Store(s) => status_of(s),
        K::Unavailable(m) => plain(R::Unavailable, m),
        K::Unimplemented(_) => plain(R::Unimplemented, &e.to_string()),
        K::BrokenPipe(_) => plain(R::BrokenPipe, &e.to_string()),
        K::Invalid(m) => plain(R::Invalid, m),
        K::TooLarge(m) => plain(R::TooLarge, m),
        K::NotFound(m) => plain(R::NotFound, m),
        K::AlreadyExists(m) => plain(R::AlreadyExists, m),
        K::Full(m) => plain(R::Full, m),
        K::Precondition(m) => plain(R::Precondition, m),
        K::Conflict(m) => plain(R::Conflict, m),
        K::Denied(_) => plain(R::Denied, &e.to_string()),
        K::Blocks(_) => plain(R::Internal, &e.to_string()),
        K::NotADirectory(path) => fault::status(&detail_of(R::NotADirectory, path), e.to_string()),
        K::IsADirectory(path, _) => fault::status(&detail_of(R::IsADirectory, path), e.to_string()),
        K::NotEmpty(path) => fault::status(&detail_of(R::NotEmpty, path), e.to_string()),
        K::StaleEpoch { current, given, .. } => {
            let mut d = detail_of(R::StaleEpoch, "");
            d.more = Some(More::StaleEpoch(fault::StaleEpochDetail {
                current: *current,
                given: *given,
            }));
            fault::status(&d, e.to_string())
        }
        K::OverQuota {
            quota,
            used,
            limit,
            message,
        } => {
            let mut d = detail_of(R::OverQuota, "");
            d.more = Some(More::OverQuota(fault::OverQuotaDetail {
                quota: quota.to_string(),
                used: *used,
                limit: *limit,
            }));
            fault::status(&d, message)
        }
        // Reached here only when it could not be forwarded to the holder.
        K::OnBlockStore { path, .. } => {
            fault::status(&detail_of(R::Unavailable, path), e.to_string())
        }
        // A failed procedure changed nothing: PROCEDURE_FAILED (INVALID for
        // code that does not compile and limits out of range), with its log
        // after the message.
        K::Procedure { name, error } => {
            let mut msg = e.to_string();
            for line in &error.log {
                msg.push_str("\nlog: ");
                msg.push_str(line);
            }
            let reason = match error.kind {
                tabos_sandbox::FailureKind::Invalid | tabos_sandbox::FailureKind::Limit => {
                    R::Invalid
                }
                _ => R::ProcedureFailed,
            };
            fault::status(&detail_of(reason, name), msg)
        }
        K::Mounted { path, target, rest } => {
            // The parts in the detail, so clients resolve without parsing.
            let mut d = detail_of(R::Mounted, path);
            d.more = Some(More::Mounted(fault::MountedDetail {
                path: path.clone(),
                target: target.clone(),
                rest: rest.clone(),
            }));
            fault::status(&d, e.to_string())
        }
    }
}

/// Maps a store error onto a gRPC status with a message a person can act
/// on, and its reason as the detail ([`kernel_status`]).
pub fn status_of(e: &tabos_store::Error) -> tonic::Status {
    use tabos_client::fault;
    fault::status(&fault::detail_of(store_reason(e), ""), e.to_string())
}

/// The reason of a store error (every door's, the PostgreSQL front door's
/// too).
pub fn store_reason(e: &tabos_store::Error) -> tabos_client::fault::ErrorReason {
    use tabos_client::fault::ErrorReason as R;
    use tabos_store::Error as E;
    match e {
        E::Sql(_) | E::Invalid(_) | E::Type(_) => R::Invalid,
        E::ReadOnly(_) => R::ReadOnly,
        E::OutOfScope(_) => R::Denied,
        E::UnknownPartition { .. } => R::NotFound,
        E::Limit { .. } => R::Full,
        E::Overloaded(_) => R::Overloaded,
        E::Aborted(_) | E::RetriesExhausted { .. } => R::Contended,
        E::Closed | E::Unavailable(_) => R::Unavailable,
        E::Timeout(_) => R::TimedOut,
        E::Cancelled(_) => R::Cancelled,
        _ => R::Internal,
    }
}
