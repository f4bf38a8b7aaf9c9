"""tabos: the Python SDK of the tabos database-oriented operating system.

    import tabos
    with tabos.Client() as c:             # the CLI's credentials file, or TABOS_ADDR/TABOS_TOKEN
        pid = c.spawn("echo", "hi")
        c.wait(pid)
        print(c.logs(pid))
        for row in c.sql("SELECT pid, state FROM ps"):
            print(row["pid"], row["state"])

A pure-Python package over grpcio, its stubs generated from the node's own
tabos.proto (see sdk/python/README.md for why).
"""

from . import code
from .client import (
    CHUNK_BYTES,
    DEFAULT_ADDR,
    CallResult,
    Client,
    Election,
    FileChange,
    FileStat,
    Message,
    NameEntry,
    Procedure,
    ProcState,
    ProcStatus,
    Session,
    WatchEvent,
    credentials_path,
    unique_pid,
)
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    IsADirectory,
    Mounted,
    NotADirectory,
    NotEmpty,
    BrokenPipe,
    TooManyHops,
    NotFound,
    OverQuota,
    Overloaded,
    PermissionDenied,
    ProcedureFailed,
    ReadOnly,
    ResourceExhausted,
    StaleEpoch,
    TabosError,
    TooLarge,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

from .graphs import Graph, Graphs, GraphInfo, ObjectRef, RemoteFunction, TaskFailed, TaskInfo
from .workflows import (
    Ctx,
    Executor,
    StepFailed,
    StepInfo,
    Stopped,
    Workflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowHandle,
)

__version__ = "0.1.0"

__all__ = [
    "Aborted",
    "AlreadyExists",
    "CHUNK_BYTES",
    "CallResult",
    "Cancelled",
    "Client",
    "Conflict",
    "Ctx",
    "DEFAULT_ADDR",
    "DeadlineExceeded",
    "Election",
    "Executor",
    "FailedPrecondition",
    "FileChange",
    "FileStat",
    "Internal",
    "InvalidArgument",
    "IsADirectory",
    "Message",
    "Mounted",
    "NameEntry",
    "NotADirectory",
    "NotEmpty",
    "BrokenPipe",
    "TooManyHops",
    "NotFound",
    "OverQuota",
    "Overloaded",
    "PermissionDenied",
    "ProcState",
    "ProcStatus",
    "Procedure",
    "ProcedureFailed",
    "Graph",
    "GraphInfo",
    "Graphs",
    "ObjectRef",
    "RemoteFunction",
    "TaskFailed",
    "TaskInfo",
    "ReadOnly",
    "ResourceExhausted",
    "Session",
    "StaleEpoch",
    "StepFailed",
    "StepInfo",
    "Stopped",
    "TabosError",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "WatchEvent",
    "Workflow",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "credentials_path",
    "unique_pid",
]
