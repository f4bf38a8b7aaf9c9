"""Typed exceptions: one per gRPC status a tabos node answers with.

Every call of :class:`tabos.Client` raises a subclass of :class:`TabosError`
when the node refuses or fails it; ``code`` is the gRPC status name and
``message`` the node's own words (what was wrong and, often, what to do).
"""

from __future__ import annotations

import grpc


class TabosError(Exception):
    """A call the node refused or could not serve."""

    code: str = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(TabosError):
    """Bad input: a malformed path, pid, query or descriptor."""

    code = "INVALID_ARGUMENT"


class NotFound(TabosError):
    """An unknown proc, mailbox, name, file or procedure."""

    code = "NOT_FOUND"


class AlreadyExists(TabosError):
    """Creating what exists (a pid, a mailbox, a name, a file)."""

    code = "ALREADY_EXISTS"


class PermissionDenied(TabosError):
    """The credential may not do this (another realm, a weaker role, a
    scoped credential, a file's mode)."""

    code = "PERMISSION_DENIED"


class Unauthenticated(TabosError):
    """No credential, or an unknown, revoked or expired one."""

    code = "UNAUTHENTICATED"


class ResourceExhausted(TabosError):
    """A quota or limit: a full mailbox, too many procs, an oversized
    payload."""

    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(TabosError):
    """The state does not allow it (a stale version or epoch, a non-empty
    directory)."""

    code = "FAILED_PRECONDITION"


class Aborted(TabosError):
    """A conflict the node gave up on; retrying may succeed."""

    code = "ABORTED"


class Unavailable(TabosError):
    """The node (or the one holding the data) cannot be reached now."""

    code = "UNAVAILABLE"


class DeadlineExceeded(TabosError):
    """The call (a query, a wait) ran past its time."""

    code = "DEADLINE_EXCEEDED"


class Cancelled(TabosError):
    """The call was cancelled."""

    code = "CANCELLED"


class Internal(TabosError):
    """A failure inside the node."""

    code = "INTERNAL"


class Unimplemented(TabosError):
    """Not supported by this node."""

    code = "UNIMPLEMENTED"


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


def from_rpc(e: grpc.RpcError) -> TabosError:
    """The typed exception for a failed call."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    cls = _BY_CODE.get(code, TabosError)
    return cls(details or "", code.name if code else "UNKNOWN")
