"""Typed exceptions: one per gRPC status a tabos node answers with, and
one per reason within a status.

Every call of :class:`tabos.Client` raises a subclass of :class:`TabosError`
when the node refuses or fails it; ``code`` is the gRPC status name,
``reason`` the node's typed reason (``ErrorReason`` of tabos.proto without
its prefix, e.g. ``"NOT_EMPTY"``), ``subject`` the path or name it is about
when there is one, and ``message`` the node's own words (for people: act on
the class and its fields, never on the words). A reason with a class of its
own (:class:`NotEmpty`, :class:`StaleEpoch`, :class:`OverQuota` …) is a
subclass of its code's class, so ``except FailedPrecondition`` still
catches a :class:`NotEmpty`.
"""

from __future__ import annotations

from typing import Any

import grpc

from ._proto import tabos_pb2 as pb

#: The trailer a node sends an error's ErrorDetail in.
DETAILS_KEY = "grpc-status-details-bin"


def _reason_name(value: int) -> str:
    """A reason's name without its prefix; "" for one this SDK does not
    know (a newer node's) or UNSPECIFIED."""
    try:
        name = pb.ErrorReason.Name(value)
    except ValueError:
        return ""
    return "" if value == 0 else name.removeprefix("ERROR_REASON_")


class TabosError(Exception):
    """A call the node refused or could not serve."""

    code: str = "UNKNOWN"
    reason: str = "INTERNAL"

    def __init__(self, message: str, code: str | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        #: The node's ``ErrorDetail`` (tabos.proto), when it sent one.
        self.detail = detail
        self.subject: str = detail.subject if detail is not None else ""
        if detail is not None and _reason_name(detail.reason):
            self.reason = _reason_name(detail.reason)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(TabosError):
    """Bad input: a malformed path, pid, query or descriptor."""

    code = "INVALID_ARGUMENT"
    reason = "INVALID"


class NotFound(TabosError):
    """An unknown proc, mailbox, name, file or procedure."""

    code = "NOT_FOUND"
    reason = "NOT_FOUND"


class AlreadyExists(TabosError):
    """Creating what exists (a pid, a mailbox, a name, a file)."""

    code = "ALREADY_EXISTS"
    reason = "ALREADY_EXISTS"


class PermissionDenied(TabosError):
    """The credential may not do this (another realm, a weaker role, a
    scoped credential, a file's mode)."""

    code = "PERMISSION_DENIED"
    reason = "DENIED"


class Unauthenticated(TabosError):
    """No credential, or an unknown, revoked or expired one."""

    code = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class ResourceExhausted(TabosError):
    """A quota or limit: a full mailbox, too many procs, an oversized
    payload."""

    code = "RESOURCE_EXHAUSTED"
    reason = "FULL"


class FailedPrecondition(TabosError):
    """The state does not allow it (a stale version or epoch, a non-empty
    directory)."""

    code = "FAILED_PRECONDITION"
    reason = "PRECONDITION"


class Aborted(TabosError):
    """A conflict the node gave up on; retrying may succeed."""

    code = "ABORTED"
    reason = "CONTENDED"


class Unavailable(TabosError):
    """The node (or the one holding the data) cannot be reached now."""

    code = "UNAVAILABLE"
    reason = "UNAVAILABLE"


class DeadlineExceeded(TabosError):
    """The call (a query, a wait) ran past its time."""

    code = "DEADLINE_EXCEEDED"
    reason = "TIMED_OUT"


class Cancelled(TabosError):
    """The call was cancelled."""

    code = "CANCELLED"
    reason = "CANCELLED"


class Internal(TabosError):
    """A failure inside the node."""

    code = "INTERNAL"
    reason = "INTERNAL"


class Unimplemented(TabosError):
    """Not supported by this node."""

    code = "UNIMPLEMENTED"
    reason = "UNIMPLEMENTED"


class TooLarge(InvalidArgument):
    """A payload over its limit."""

    reason = "TOO_LARGE"


class NotADirectory(InvalidArgument):
    """A path's parent, or rmdir's target, is not a directory (``subject``)."""

    reason = "NOT_A_DIRECTORY"


class IsADirectory(InvalidArgument):
    """A file operation on a directory (``subject``)."""

    reason = "IS_A_DIRECTORY"


class OverQuota(ResourceExhausted):
    """A change would pass one of the realm's quotas: ``quota`` ("storage",
    "mailbox", "procedures", "procs", "cores", "memory"), ``used`` after the
    change and ``limit``, in the quota's unit (bytes for storage and
    mailbox)."""

    reason = "OVER_QUOTA"

    @property
    def quota(self) -> str:
        return self.detail.over_quota.quota if self.detail is not None else ""

    @property
    def used(self) -> int:
        return self.detail.over_quota.used if self.detail is not None else 0

    @property
    def limit(self) -> int:
        return self.detail.over_quota.limit if self.detail is not None else 0


class Overloaded(ResourceExhausted):
    """Too much to do now (a queue, a door); retry later."""

    reason = "OVERLOADED"


class NotEmpty(FailedPrecondition):
    """Removing, or renaming over, a directory that has entries (``subject``)."""

    reason = "NOT_EMPTY"


class TooManyHops(TabosError):
    """A names call met more symlinks than ``HOPS_MAX`` (a loop); raised by
    this client, not a node."""

    code = "FAILED_PRECONDITION"
    reason = "HOPS"


class BrokenPipe(FailedPrecondition):
    """A write to a named pipe whose readers have all closed (EPIPE)."""

    reason = "BROKEN_PIPE"


class Conflict(FailedPrecondition):
    """Changed by another writer since it was read (a version, a file's
    data): read it again."""

    reason = "CONFLICT"


class Mounted(FailedPrecondition):
    """The path crosses a mount (σOS automount): ``path``, its ``target``
    and the ``rest`` to resolve there."""

    reason = "MOUNTED"

    @property
    def path(self) -> str:
        return self.detail.mounted.path if self.detail is not None else ""

    @property
    def target(self) -> str:
        return self.detail.mounted.target if self.detail is not None else ""

    @property
    def rest(self) -> str:
        return self.detail.mounted.rest if self.detail is not None else ""


class ReadOnly(PermissionDenied):
    """A write where only reads may run."""

    reason = "READ_ONLY"


class StaleEpoch(Aborted):
    """The request's fence is older than its directory's epoch: ``current``
    is the epoch now (-1 when there is none any more), ``given`` the one the
    request carried."""

    reason = "STALE_EPOCH"

    @property
    def current(self) -> int:
        return self.detail.stale_epoch.current if self.detail is not None else 0

    @property
    def given(self) -> int:
        return self.detail.stale_epoch.given if self.detail is not None else 0


class ProcedureFailed(Aborted):
    """A stored procedure failed (``subject`` names it); nothing changed."""

    reason = "PROCEDURE_FAILED"


_BY_CODE: dict[grpc.StatusCode, type[TabosError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}


#: The class of each reason that has one beyond its code's.
_BY_REASON: dict[str, type[TabosError]] = {
    c.reason: c
    for c in (
        TooLarge,
        NotADirectory,
        IsADirectory,
        OverQuota,
        Overloaded,
        NotEmpty,
        BrokenPipe,
        Conflict,
        Mounted,
        ReadOnly,
        StaleEpoch,
        ProcedureFailed,
    )
}


def _detail(e: grpc.RpcError) -> Any:
    """The ErrorDetail in a failed call's trailers, or None."""
    trailers: Any = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == DETAILS_KEY and isinstance(value, bytes):
            d = pb.ErrorDetail()
            try:
                d.ParseFromString(value)
            except Exception:  # a detail this SDK cannot read: the code decides
                return None
            return d if d.reason else None
    return None


def from_rpc(e: grpc.RpcError) -> TabosError:
    """The typed exception for a failed call: its reason's class when the
    node sent a reason that has one, else its code's."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    detail = _detail(e)
    cls = _BY_CODE.get(code, TabosError)
    if detail is not None:
        by_reason = _BY_REASON.get(_reason_name(detail.reason))
        if by_reason is not None and issubclass(by_reason, cls):
            cls = by_reason
    return cls(details or "", code.name if code else "UNKNOWN", detail)
