from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_TOO_LARGE: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ERROR_REASON_FULL: _ClassVar[ErrorReason]
    ERROR_REASON_OVER_QUOTA: _ClassVar[ErrorReason]
    ERROR_REASON_PRECONDITION: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_A_DIRECTORY: _ClassVar[ErrorReason]
    ERROR_REASON_IS_A_DIRECTORY: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_EMPTY: _ClassVar[ErrorReason]
    ERROR_REASON_CONFLICT: _ClassVar[ErrorReason]
    ERROR_REASON_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_STALE_EPOCH: _ClassVar[ErrorReason]
    ERROR_REASON_MOUNTED: _ClassVar[ErrorReason]
    ERROR_REASON_PROCEDURE_FAILED: _ClassVar[ErrorReason]
    ERROR_REASON_OVERLOADED: _ClassVar[ErrorReason]
    ERROR_REASON_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_TIMED_OUT: _ClassVar[ErrorReason]
    ERROR_REASON_CANCELLED: _ClassVar[ErrorReason]
    ERROR_REASON_UNIMPLEMENTED: _ClassVar[ErrorReason]
    ERROR_REASON_READ_ONLY: _ClassVar[ErrorReason]
    ERROR_REASON_CONTENDED: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
    ERROR_REASON_BROKEN_PIPE: _ClassVar[ErrorReason]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_READER: _ClassVar[Role]
    ROLE_MEMBER: _ClassVar[Role]
    ROLE_ADMIN: _ClassVar[Role]
    ROLE_OPERATOR: _ClassVar[Role]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_STATE_UP: _ClassVar[NodeState]
    NODE_STATE_DRAINING: _ClassVar[NodeState]
    NODE_STATE_LEFT: _ClassVar[NodeState]
    NODE_STATE_LOST: _ClassVar[NodeState]

class AllocManager(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALLOC_MANAGER_UNSPECIFIED: _ClassVar[AllocManager]
    ALLOC_MANAGER_SMGR: _ClassVar[AllocManager]
    ALLOC_MANAGER_RMGR: _ClassVar[AllocManager]

class ProcKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROC_KIND_UNSPECIFIED: _ClassVar[ProcKind]
    PROC_KIND_NATIVE: _ClassVar[ProcKind]
    PROC_KIND_WASM: _ClassVar[ProcKind]

class ProcClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROC_CLASS_UNSPECIFIED: _ClassVar[ProcClass]
    PROC_CLASS_LC: _ClassVar[ProcClass]
    PROC_CLASS_BE: _ClassVar[ProcClass]

class Scheduler(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULER_UNSPECIFIED: _ClassVar[Scheduler]
    SCHEDULER_FIFO: _ClassVar[Scheduler]
    SCHEDULER_LOCALITY: _ClassVar[Scheduler]
    SCHEDULER_LEAST_LOADED: _ClassVar[Scheduler]

class Provenance(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROVENANCE_UNSPECIFIED: _ClassVar[Provenance]
    PROVENANCE_PROCS: _ClassVar[Provenance]
    PROVENANCE_ALL: _ClassVar[Provenance]

class StorageClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORAGE_CLASS_UNSPECIFIED: _ClassVar[StorageClass]
    STORAGE_CLASS_KV: _ClassVar[StorageClass]
    STORAGE_CLASS_NAMES: _ClassVar[StorageClass]
    STORAGE_CLASS_FILES: _ClassVar[StorageClass]
    STORAGE_CLASS_QUEUED_MAIL: _ClassVar[StorageClass]
    STORAGE_CLASS_DELIVERED_MAIL: _ClassVar[StorageClass]
    STORAGE_CLASS_CODE: _ClassVar[StorageClass]
    STORAGE_CLASS_WORKFLOWS: _ClassVar[StorageClass]
    STORAGE_CLASS_TABLES: _ClassVar[StorageClass]
    STORAGE_CLASS_LOGS: _ClassVar[StorageClass]

class ProcState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROC_STATE_UNSPECIFIED: _ClassVar[ProcState]
    PROC_STATE_SPAWNED: _ClassVar[ProcState]
    PROC_STATE_CLAIMED: _ClassVar[ProcState]
    PROC_STATE_RUNNING: _ClassVar[ProcState]
    PROC_STATE_EXITED: _ClassVar[ProcState]
    PROC_STATE_EVICTED: _ClassVar[ProcState]
    PROC_STATE_FAILED: _ClassVar[ProcState]

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STREAM_STDOUT: _ClassVar[LogStream]
    LOG_STREAM_STDERR: _ClassVar[LogStream]

class NameKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NAME_KIND_UNSPECIFIED: _ClassVar[NameKind]
    NAME_KIND_DIR: _ClassVar[NameKind]
    NAME_KIND_FILE: _ClassVar[NameKind]
    NAME_KIND_SYMLINK: _ClassVar[NameKind]

class WatchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCH_MODE_UNSPECIFIED: _ClassVar[WatchMode]
    WATCH_MODE_EXISTS: _ClassVar[WatchMode]
    WATCH_MODE_REMOVED: _ClassVar[WatchMode]
    WATCH_MODE_DIR: _ClassVar[WatchMode]

class WatchOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCH_OP_UNSPECIFIED: _ClassVar[WatchOp]
    WATCH_OP_WATCHING: _ClassVar[WatchOp]
    WATCH_OP_EXISTS: _ClassVar[WatchOp]
    WATCH_OP_REMOVED: _ClassVar[WatchOp]
    WATCH_OP_CREATE: _ClassVar[WatchOp]
    WATCH_OP_SET: _ClassVar[WatchOp]
    WATCH_OP_REMOVE: _ClassVar[WatchOp]

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_TYPE_UNSPECIFIED: _ClassVar[FileType]
    FILE_TYPE_DIR: _ClassVar[FileType]
    FILE_TYPE_FILE: _ClassVar[FileType]
    FILE_TYPE_SYMLINK: _ClassVar[FileType]
    FILE_TYPE_FIFO: _ClassVar[FileType]

class FsAccess(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FS_ACCESS_UNSPECIFIED: _ClassVar[FsAccess]
    FS_ACCESS_READ: _ClassVar[FsAccess]
    FS_ACCESS_WRITE: _ClassVar[FsAccess]
    FS_ACCESS_READ_WRITE: _ClassVar[FsAccess]

class SetTime(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SET_TIME_UNSPECIFIED: _ClassVar[SetTime]
    SET_TIME_OMIT: _ClassVar[SetTime]
    SET_TIME_NOW: _ClassVar[SetTime]
    SET_TIME_AT: _ClassVar[SetTime]

class FsChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FS_CHANGE_KIND_UNSPECIFIED: _ClassVar[FsChangeKind]
    FS_CHANGE_KIND_NAME: _ClassVar[FsChangeKind]
    FS_CHANGE_KIND_FILE: _ClassVar[FsChangeKind]

class WorkflowStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKFLOW_STATUS_UNSPECIFIED: _ClassVar[WorkflowStatus]
    WORKFLOW_STATUS_ENQUEUED: _ClassVar[WorkflowStatus]
    WORKFLOW_STATUS_PENDING: _ClassVar[WorkflowStatus]
    WORKFLOW_STATUS_SUCCESS: _ClassVar[WorkflowStatus]
    WORKFLOW_STATUS_ERROR: _ClassVar[WorkflowStatus]
    WORKFLOW_STATUS_CANCELLED: _ClassVar[WorkflowStatus]

class StepKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_KIND_UNSPECIFIED: _ClassVar[StepKind]
    STEP_KIND_FUNCTION: _ClassVar[StepKind]
    STEP_KIND_PROCEDURE: _ClassVar[StepKind]
    STEP_KIND_PROC: _ClassVar[StepKind]
    STEP_KIND_SLEEP: _ClassVar[StepKind]
    STEP_KIND_SEND: _ClassVar[StepKind]
    STEP_KIND_RECV: _ClassVar[StepKind]
    STEP_KIND_SET_EVENT: _ClassVar[StepKind]
    STEP_KIND_GET_EVENT: _ClassVar[StepKind]

class StepStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_STATUS_UNSPECIFIED: _ClassVar[StepStatus]
    STEP_STATUS_RUNNING: _ClassVar[StepStatus]
    STEP_STATUS_SUCCESS: _ClassVar[StepStatus]
    STEP_STATUS_ERROR: _ClassVar[StepStatus]

class TaskKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_KIND_UNSPECIFIED: _ClassVar[TaskKind]
    TASK_KIND_PROCEDURE: _ClassVar[TaskKind]
    TASK_KIND_WORKFLOW: _ClassVar[TaskKind]
    TASK_KIND_PROC: _ClassVar[TaskKind]

class GraphStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GRAPH_STATUS_UNSPECIFIED: _ClassVar[GraphStatus]
    GRAPH_STATUS_RUNNING: _ClassVar[GraphStatus]
    GRAPH_STATUS_SUCCESS: _ClassVar[GraphStatus]
    GRAPH_STATUS_ERROR: _ClassVar[GraphStatus]
    GRAPH_STATUS_CANCELLED: _ClassVar[GraphStatus]

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATUS_UNSPECIFIED: _ClassVar[TaskStatus]
    TASK_STATUS_WAITING: _ClassVar[TaskStatus]
    TASK_STATUS_READY: _ClassVar[TaskStatus]
    TASK_STATUS_RUNNING: _ClassVar[TaskStatus]
    TASK_STATUS_SUCCESS: _ClassVar[TaskStatus]
    TASK_STATUS_ERROR: _ClassVar[TaskStatus]
    TASK_STATUS_CANCELLED: _ClassVar[TaskStatus]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INVALID: ErrorReason
ERROR_REASON_TOO_LARGE: ErrorReason
ERROR_REASON_NOT_FOUND: ErrorReason
ERROR_REASON_ALREADY_EXISTS: ErrorReason
ERROR_REASON_FULL: ErrorReason
ERROR_REASON_OVER_QUOTA: ErrorReason
ERROR_REASON_PRECONDITION: ErrorReason
ERROR_REASON_NOT_A_DIRECTORY: ErrorReason
ERROR_REASON_IS_A_DIRECTORY: ErrorReason
ERROR_REASON_NOT_EMPTY: ErrorReason
ERROR_REASON_CONFLICT: ErrorReason
ERROR_REASON_DENIED: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_STALE_EPOCH: ErrorReason
ERROR_REASON_MOUNTED: ErrorReason
ERROR_REASON_PROCEDURE_FAILED: ErrorReason
ERROR_REASON_OVERLOADED: ErrorReason
ERROR_REASON_UNAVAILABLE: ErrorReason
ERROR_REASON_TIMED_OUT: ErrorReason
ERROR_REASON_CANCELLED: ErrorReason
ERROR_REASON_UNIMPLEMENTED: ErrorReason
ERROR_REASON_READ_ONLY: ErrorReason
ERROR_REASON_CONTENDED: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_BROKEN_PIPE: ErrorReason
ROLE_UNSPECIFIED: Role
ROLE_READER: Role
ROLE_MEMBER: Role
ROLE_ADMIN: Role
ROLE_OPERATOR: Role
NODE_STATE_UNSPECIFIED: NodeState
NODE_STATE_UP: NodeState
NODE_STATE_DRAINING: NodeState
NODE_STATE_LEFT: NodeState
NODE_STATE_LOST: NodeState
ALLOC_MANAGER_UNSPECIFIED: AllocManager
ALLOC_MANAGER_SMGR: AllocManager
ALLOC_MANAGER_RMGR: AllocManager
PROC_KIND_UNSPECIFIED: ProcKind
PROC_KIND_NATIVE: ProcKind
PROC_KIND_WASM: ProcKind
PROC_CLASS_UNSPECIFIED: ProcClass
PROC_CLASS_LC: ProcClass
PROC_CLASS_BE: ProcClass
SCHEDULER_UNSPECIFIED: Scheduler
SCHEDULER_FIFO: Scheduler
SCHEDULER_LOCALITY: Scheduler
SCHEDULER_LEAST_LOADED: Scheduler
PROVENANCE_UNSPECIFIED: Provenance
PROVENANCE_PROCS: Provenance
PROVENANCE_ALL: Provenance
STORAGE_CLASS_UNSPECIFIED: StorageClass
STORAGE_CLASS_KV: StorageClass
STORAGE_CLASS_NAMES: StorageClass
STORAGE_CLASS_FILES: StorageClass
STORAGE_CLASS_QUEUED_MAIL: StorageClass
STORAGE_CLASS_DELIVERED_MAIL: StorageClass
STORAGE_CLASS_CODE: StorageClass
STORAGE_CLASS_WORKFLOWS: StorageClass
STORAGE_CLASS_TABLES: StorageClass
STORAGE_CLASS_LOGS: StorageClass
PROC_STATE_UNSPECIFIED: ProcState
PROC_STATE_SPAWNED: ProcState
PROC_STATE_CLAIMED: ProcState
PROC_STATE_RUNNING: ProcState
PROC_STATE_EXITED: ProcState
PROC_STATE_EVICTED: ProcState
PROC_STATE_FAILED: ProcState
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STREAM_STDOUT: LogStream
LOG_STREAM_STDERR: LogStream
NAME_KIND_UNSPECIFIED: NameKind
NAME_KIND_DIR: NameKind
NAME_KIND_FILE: NameKind
NAME_KIND_SYMLINK: NameKind
WATCH_MODE_UNSPECIFIED: WatchMode
WATCH_MODE_EXISTS: WatchMode
WATCH_MODE_REMOVED: WatchMode
WATCH_MODE_DIR: WatchMode
WATCH_OP_UNSPECIFIED: WatchOp
WATCH_OP_WATCHING: WatchOp
WATCH_OP_EXISTS: WatchOp
WATCH_OP_REMOVED: WatchOp
WATCH_OP_CREATE: WatchOp
WATCH_OP_SET: WatchOp
WATCH_OP_REMOVE: WatchOp
FILE_TYPE_UNSPECIFIED: FileType
FILE_TYPE_DIR: FileType
FILE_TYPE_FILE: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_FIFO: FileType
FS_ACCESS_UNSPECIFIED: FsAccess
FS_ACCESS_READ: FsAccess
FS_ACCESS_WRITE: FsAccess
FS_ACCESS_READ_WRITE: FsAccess
SET_TIME_UNSPECIFIED: SetTime
SET_TIME_OMIT: SetTime
SET_TIME_NOW: SetTime
SET_TIME_AT: SetTime
FS_CHANGE_KIND_UNSPECIFIED: FsChangeKind
FS_CHANGE_KIND_NAME: FsChangeKind
FS_CHANGE_KIND_FILE: FsChangeKind
WORKFLOW_STATUS_UNSPECIFIED: WorkflowStatus
WORKFLOW_STATUS_ENQUEUED: WorkflowStatus
WORKFLOW_STATUS_PENDING: WorkflowStatus
WORKFLOW_STATUS_SUCCESS: WorkflowStatus
WORKFLOW_STATUS_ERROR: WorkflowStatus
WORKFLOW_STATUS_CANCELLED: WorkflowStatus
STEP_KIND_UNSPECIFIED: StepKind
STEP_KIND_FUNCTION: StepKind
STEP_KIND_PROCEDURE: StepKind
STEP_KIND_PROC: StepKind
STEP_KIND_SLEEP: StepKind
STEP_KIND_SEND: StepKind
STEP_KIND_RECV: StepKind
STEP_KIND_SET_EVENT: StepKind
STEP_KIND_GET_EVENT: StepKind
STEP_STATUS_UNSPECIFIED: StepStatus
STEP_STATUS_RUNNING: StepStatus
STEP_STATUS_SUCCESS: StepStatus
STEP_STATUS_ERROR: StepStatus
TASK_KIND_UNSPECIFIED: TaskKind
TASK_KIND_PROCEDURE: TaskKind
TASK_KIND_WORKFLOW: TaskKind
TASK_KIND_PROC: TaskKind
GRAPH_STATUS_UNSPECIFIED: GraphStatus
GRAPH_STATUS_RUNNING: GraphStatus
GRAPH_STATUS_SUCCESS: GraphStatus
GRAPH_STATUS_ERROR: GraphStatus
GRAPH_STATUS_CANCELLED: GraphStatus
TASK_STATUS_UNSPECIFIED: TaskStatus
TASK_STATUS_WAITING: TaskStatus
TASK_STATUS_READY: TaskStatus
TASK_STATUS_RUNNING: TaskStatus
TASK_STATUS_SUCCESS: TaskStatus
TASK_STATUS_ERROR: TaskStatus
TASK_STATUS_CANCELLED: TaskStatus

class ErrorDetail(_message.Message):
    __slots__ = ("reason", "subject", "stale_epoch", "over_quota", "mounted")
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    STALE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OVER_QUOTA_FIELD_NUMBER: _ClassVar[int]
    MOUNTED_FIELD_NUMBER: _ClassVar[int]
    reason: ErrorReason
    subject: str
    stale_epoch: StaleEpochDetail
    over_quota: OverQuotaDetail
    mounted: MountedDetail
    def __init__(self, reason: _Optional[_Union[ErrorReason, str]] = ..., subject: _Optional[str] = ..., stale_epoch: _Optional[_Union[StaleEpochDetail, _Mapping]] = ..., over_quota: _Optional[_Union[OverQuotaDetail, _Mapping]] = ..., mounted: _Optional[_Union[MountedDetail, _Mapping]] = ...) -> None: ...

class StaleEpochDetail(_message.Message):
    __slots__ = ("current", "given")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    GIVEN_FIELD_NUMBER: _ClassVar[int]
    current: int
    given: int
    def __init__(self, current: _Optional[int] = ..., given: _Optional[int] = ...) -> None: ...

class OverQuotaDetail(_message.Message):
    __slots__ = ("quota", "used", "limit")
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    quota: str
    used: int
    limit: int
    def __init__(self, quota: _Optional[str] = ..., used: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class MountedDetail(_message.Message):
    __slots__ = ("path", "target", "rest")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REST_FIELD_NUMBER: _ClassVar[int]
    path: str
    target: str
    rest: str
    def __init__(self, path: _Optional[str] = ..., target: _Optional[str] = ..., rest: _Optional[str] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("null", "int", "real", "text", "blob")
    NULL_FIELD_NUMBER: _ClassVar[int]
    INT_FIELD_NUMBER: _ClassVar[int]
    REAL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    null: bool
    int: int
    real: float
    text: str
    blob: bytes
    def __init__(self, null: _Optional[bool] = ..., int: _Optional[int] = ..., real: _Optional[float] = ..., text: _Optional[str] = ..., blob: _Optional[bytes] = ...) -> None: ...

class SqlRequest(_message.Message):
    __slots__ = ("sql", "params", "max_rows", "realm")
    SQL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    REALM_FIELD_NUMBER: _ClassVar[int]
    sql: str
    params: _containers.RepeatedCompositeFieldContainer[Value]
    max_rows: int
    realm: str
    def __init__(self, sql: _Optional[str] = ..., params: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., max_rows: _Optional[int] = ..., realm: _Optional[str] = ...) -> None: ...

class SqlRow(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class SqlResponse(_message.Message):
    __slots__ = ("columns", "rows", "truncated")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[SqlRow]
    truncated: bool
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[SqlRow, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("realm", "user", "role", "ttl_ms", "note", "scope")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    role: Role
    ttl_ms: int
    note: str
    scope: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., ttl_ms: _Optional[int] = ..., note: _Optional[str] = ..., scope: _Optional[str] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("id", "realm", "user", "role", "pid", "created_us", "expires_us", "revoked_us", "note", "scope", "default_realm")
    ID_FIELD_NUMBER: _ClassVar[int]
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_US_FIELD_NUMBER: _ClassVar[int]
    REVOKED_US_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_REALM_FIELD_NUMBER: _ClassVar[int]
    id: str
    realm: str
    user: str
    role: Role
    pid: str
    created_us: int
    expires_us: int
    revoked_us: int
    note: str
    scope: str
    default_realm: str
    def __init__(self, id: _Optional[str] = ..., realm: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., pid: _Optional[str] = ..., created_us: _Optional[int] = ..., expires_us: _Optional[int] = ..., revoked_us: _Optional[int] = ..., note: _Optional[str] = ..., scope: _Optional[str] = ..., default_realm: _Optional[str] = ...) -> None: ...

class CreatedToken(_message.Message):
    __slots__ = ("info", "token")
    INFO_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    info: TokenInfo
    token: str
    def __init__(self, info: _Optional[_Union[TokenInfo, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("realm", "procs")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PROCS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    procs: bool
    def __init__(self, realm: _Optional[str] = ..., procs: _Optional[bool] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "backend", "partitions", "durability", "procedures_committed", "procedures_failed", "commits", "retries", "started_us", "protections", "busy_cores", "load_source", "connections", "request_bytes_held", "cgroups", "pressure", "cores", "mem_mib", "notifications", "db_connections", "leader", "doors", "realm_caps")
    class PressureEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    PROCEDURES_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    PROCEDURES_FAILED_FIELD_NUMBER: _ClassVar[int]
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    PROTECTIONS_FIELD_NUMBER: _ClassVar[int]
    BUSY_CORES_FIELD_NUMBER: _ClassVar[int]
    LOAD_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BYTES_HELD_FIELD_NUMBER: _ClassVar[int]
    CGROUPS_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_MIB_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    DB_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    DOORS_FIELD_NUMBER: _ClassVar[int]
    REALM_CAPS_FIELD_NUMBER: _ClassVar[int]
    version: str
    backend: str
    partitions: int
    durability: str
    procedures_committed: int
    procedures_failed: int
    commits: int
    retries: int
    started_us: int
    protections: _containers.RepeatedScalarFieldContainer[str]
    busy_cores: float
    load_source: str
    connections: int
    request_bytes_held: int
    cgroups: str
    pressure: _containers.ScalarMap[str, float]
    cores: int
    mem_mib: int
    notifications: int
    db_connections: int
    leader: bool
    doors: _containers.RepeatedCompositeFieldContainer[DoorUse]
    realm_caps: _containers.RepeatedCompositeFieldContainer[RealmCap]
    def __init__(self, version: _Optional[str] = ..., backend: _Optional[str] = ..., partitions: _Optional[int] = ..., durability: _Optional[str] = ..., procedures_committed: _Optional[int] = ..., procedures_failed: _Optional[int] = ..., commits: _Optional[int] = ..., retries: _Optional[int] = ..., started_us: _Optional[int] = ..., protections: _Optional[_Iterable[str]] = ..., busy_cores: _Optional[float] = ..., load_source: _Optional[str] = ..., connections: _Optional[int] = ..., request_bytes_held: _Optional[int] = ..., cgroups: _Optional[str] = ..., pressure: _Optional[_Mapping[str, float]] = ..., cores: _Optional[int] = ..., mem_mib: _Optional[int] = ..., notifications: _Optional[int] = ..., db_connections: _Optional[int] = ..., leader: _Optional[bool] = ..., doors: _Optional[_Iterable[_Union[DoorUse, _Mapping]]] = ..., realm_caps: _Optional[_Iterable[_Union[RealmCap, _Mapping]]] = ...) -> None: ...

class RealmCap(_message.Message):
    __slots__ = ("what", "per_realm_max", "by_realm")
    class ByRealmEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    WHAT_FIELD_NUMBER: _ClassVar[int]
    PER_REALM_MAX_FIELD_NUMBER: _ClassVar[int]
    BY_REALM_FIELD_NUMBER: _ClassVar[int]
    what: str
    per_realm_max: int
    by_realm: _containers.ScalarMap[str, int]
    def __init__(self, what: _Optional[str] = ..., per_realm_max: _Optional[int] = ..., by_realm: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DoorUse(_message.Message):
    __slots__ = ("door", "open", "connections_max", "unauthenticated", "unauthenticated_max", "unauthenticated_per_source_max", "per_realm_max", "by_realm")
    class ByRealmEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DOOR_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_MAX_FIELD_NUMBER: _ClassVar[int]
    UNAUTHENTICATED_FIELD_NUMBER: _ClassVar[int]
    UNAUTHENTICATED_MAX_FIELD_NUMBER: _ClassVar[int]
    UNAUTHENTICATED_PER_SOURCE_MAX_FIELD_NUMBER: _ClassVar[int]
    PER_REALM_MAX_FIELD_NUMBER: _ClassVar[int]
    BY_REALM_FIELD_NUMBER: _ClassVar[int]
    door: str
    open: int
    connections_max: int
    unauthenticated: int
    unauthenticated_max: int
    unauthenticated_per_source_max: int
    per_realm_max: int
    by_realm: _containers.ScalarMap[str, int]
    def __init__(self, door: _Optional[str] = ..., open: _Optional[int] = ..., connections_max: _Optional[int] = ..., unauthenticated: _Optional[int] = ..., unauthenticated_max: _Optional[int] = ..., unauthenticated_per_source_max: _Optional[int] = ..., per_realm_max: _Optional[int] = ..., by_realm: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeRealmInfo(_message.Message):
    __slots__ = ("realm", "cores", "unused_cores", "procs")
    REALM_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    UNUSED_CORES_FIELD_NUMBER: _ClassVar[int]
    PROCS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    cores: int
    unused_cores: int
    procs: int
    def __init__(self, realm: _Optional[str] = ..., cores: _Optional[int] = ..., unused_cores: _Optional[int] = ..., procs: _Optional[int] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "address", "cores", "mem_mb", "labels", "state", "started_us", "heartbeat_us", "heartbeat_age_ms", "left_us", "busy_cores", "realms", "draining_us", "elastic", "lost_us", "given_back_us", "note", "mem_used_bytes", "disk_used_bytes")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_MB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_US_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    LEFT_US_FIELD_NUMBER: _ClassVar[int]
    BUSY_CORES_FIELD_NUMBER: _ClassVar[int]
    REALMS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_US_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    LOST_US_FIELD_NUMBER: _ClassVar[int]
    GIVEN_BACK_US_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    cores: int
    mem_mb: int
    labels: _containers.ScalarMap[str, str]
    state: NodeState
    started_us: int
    heartbeat_us: int
    heartbeat_age_ms: int
    left_us: int
    busy_cores: float
    realms: _containers.RepeatedCompositeFieldContainer[NodeRealmInfo]
    draining_us: int
    elastic: bool
    lost_us: int
    given_back_us: int
    note: str
    mem_used_bytes: int
    disk_used_bytes: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., cores: _Optional[int] = ..., mem_mb: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., state: _Optional[_Union[NodeState, str]] = ..., started_us: _Optional[int] = ..., heartbeat_us: _Optional[int] = ..., heartbeat_age_ms: _Optional[int] = ..., left_us: _Optional[int] = ..., busy_cores: _Optional[float] = ..., realms: _Optional[_Iterable[_Union[NodeRealmInfo, _Mapping]]] = ..., draining_us: _Optional[int] = ..., elastic: _Optional[bool] = ..., lost_us: _Optional[int] = ..., given_back_us: _Optional[int] = ..., note: _Optional[str] = ..., mem_used_bytes: _Optional[int] = ..., disk_used_bytes: _Optional[int] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node_id", "drain")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    drain: bool
    def __init__(self, node_id: _Optional[str] = ..., drain: _Optional[bool] = ...) -> None: ...

class MovedProc(_message.Message):
    __slots__ = ("realm", "pid")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    realm: str
    pid: str
    def __init__(self, realm: _Optional[str] = ..., pid: _Optional[str] = ...) -> None: ...

class SetElasticRequest(_message.Message):
    __slots__ = ("realm", "policy")
    REALM_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    realm: str
    policy: ElasticPolicy
    def __init__(self, realm: _Optional[str] = ..., policy: _Optional[_Union[ElasticPolicy, _Mapping]] = ...) -> None: ...

class AllocationRequest(_message.Message):
    __slots__ = ("realm", "limit")
    REALM_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    realm: str
    limit: int
    def __init__(self, realm: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class CoreGrantInfo(_message.Message):
    __slots__ = ("node_id", "cores")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    cores: int
    def __init__(self, node_id: _Optional[str] = ..., cores: _Optional[int] = ...) -> None: ...

class AllocDecision(_message.Message):
    __slots__ = ("seq", "at_us", "manager", "realm", "node_id", "cores_before", "cores_after", "reason")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_US_FIELD_NUMBER: _ClassVar[int]
    MANAGER_FIELD_NUMBER: _ClassVar[int]
    REALM_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CORES_BEFORE_FIELD_NUMBER: _ClassVar[int]
    CORES_AFTER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at_us: int
    manager: AllocManager
    realm: str
    node_id: str
    cores_before: int
    cores_after: int
    reason: str
    def __init__(self, seq: _Optional[int] = ..., at_us: _Optional[int] = ..., manager: _Optional[_Union[AllocManager, str]] = ..., realm: _Optional[str] = ..., node_id: _Optional[str] = ..., cores_before: _Optional[int] = ..., cores_after: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class RealmAllocation(_message.Message):
    __slots__ = ("realm", "elastic", "policy", "want_cores", "want_reason", "want_us", "grants", "live_cores", "unplaced_cores", "decisions")
    REALM_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    WANT_CORES_FIELD_NUMBER: _ClassVar[int]
    WANT_REASON_FIELD_NUMBER: _ClassVar[int]
    WANT_US_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    LIVE_CORES_FIELD_NUMBER: _ClassVar[int]
    UNPLACED_CORES_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    elastic: bool
    policy: ElasticPolicy
    want_cores: int
    want_reason: str
    want_us: int
    grants: _containers.RepeatedCompositeFieldContainer[CoreGrantInfo]
    live_cores: int
    unplaced_cores: int
    decisions: _containers.RepeatedCompositeFieldContainer[AllocDecision]
    def __init__(self, realm: _Optional[str] = ..., elastic: _Optional[bool] = ..., policy: _Optional[_Union[ElasticPolicy, _Mapping]] = ..., want_cores: _Optional[int] = ..., want_reason: _Optional[str] = ..., want_us: _Optional[int] = ..., grants: _Optional[_Iterable[_Union[CoreGrantInfo, _Mapping]]] = ..., live_cores: _Optional[int] = ..., unplaced_cores: _Optional[int] = ..., decisions: _Optional[_Iterable[_Union[AllocDecision, _Mapping]]] = ...) -> None: ...

class AllocSettingsRequest(_message.Message):
    __slots__ = ("set",)
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SET_FIELD_NUMBER: _ClassVar[int]
    set: _containers.ScalarMap[str, int]
    def __init__(self, set: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ManagerLeader(_message.Message):
    __slots__ = ("name", "holder", "epoch", "expires_in_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    epoch: int
    expires_in_ms: int
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., epoch: _Optional[int] = ..., expires_in_ms: _Optional[int] = ...) -> None: ...

class AllocSettingsResponse(_message.Message):
    __slots__ = ("settings", "leaders")
    class SettingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    settings: _containers.ScalarMap[str, int]
    leaders: _containers.RepeatedCompositeFieldContainer[ManagerLeader]
    def __init__(self, settings: _Optional[_Mapping[str, int]] = ..., leaders: _Optional[_Iterable[_Union[ManagerLeader, _Mapping]]] = ...) -> None: ...

class DecisionsRequest(_message.Message):
    __slots__ = ("realm", "limit")
    REALM_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    realm: str
    limit: int
    def __init__(self, realm: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class DecisionsResponse(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[AllocDecision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[AllocDecision, _Mapping]]] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ("changed", "moved")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    moved: _containers.RepeatedCompositeFieldContainer[MovedProc]
    def __init__(self, changed: _Optional[bool] = ..., moved: _Optional[_Iterable[_Union[MovedProc, _Mapping]]] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ("dest",)
    DEST_FIELD_NUMBER: _ClassVar[int]
    dest: str
    def __init__(self, dest: _Optional[str] = ...) -> None: ...

class BackupFile(_message.Message):
    __slots__ = ("name", "bytes", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    bytes: int
    sha256: str
    def __init__(self, name: _Optional[str] = ..., bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ("dest", "taken_us", "partitions", "files", "block_store", "segments", "frozen_us")
    DEST_FIELD_NUMBER: _ClassVar[int]
    TAKEN_US_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_STORE_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    FROZEN_US_FIELD_NUMBER: _ClassVar[int]
    dest: str
    taken_us: int
    partitions: int
    files: _containers.RepeatedCompositeFieldContainer[BackupFile]
    block_store: str
    segments: int
    frozen_us: int
    def __init__(self, dest: _Optional[str] = ..., taken_us: _Optional[int] = ..., partitions: _Optional[int] = ..., files: _Optional[_Iterable[_Union[BackupFile, _Mapping]]] = ..., block_store: _Optional[str] = ..., segments: _Optional[int] = ..., frozen_us: _Optional[int] = ...) -> None: ...

class ProcDescriptor(_message.Message):
    __slots__ = ("pid", "parent", "kind", "program", "args", "env", "cores", "mem_mb", "home_node", "restartable", "host_paths", "scope", "max_restarts", "code")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PID_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CLASS_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_MB_FIELD_NUMBER: _ClassVar[int]
    HOME_NODE_FIELD_NUMBER: _ClassVar[int]
    RESTARTABLE_FIELD_NUMBER: _ClassVar[int]
    HOST_PATHS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    pid: str
    parent: str
    kind: ProcKind
    program: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cores: int
    mem_mb: int
    home_node: str
    restartable: bool
    host_paths: _containers.RepeatedScalarFieldContainer[str]
    scope: str
    max_restarts: int
    code: str
    def __init__(self, pid: _Optional[str] = ..., parent: _Optional[str] = ..., kind: _Optional[_Union[ProcKind, str]] = ..., program: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cores: _Optional[int] = ..., mem_mb: _Optional[int] = ..., home_node: _Optional[str] = ..., restartable: _Optional[bool] = ..., host_paths: _Optional[_Iterable[str]] = ..., scope: _Optional[str] = ..., max_restarts: _Optional[int] = ..., code: _Optional[str] = ..., **kwargs) -> None: ...

class CreateRealmRequest(_message.Message):
    __slots__ = ("realm", "scheduler", "elastic")
    REALM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    realm: str
    scheduler: Scheduler
    elastic: ElasticPolicy
    def __init__(self, realm: _Optional[str] = ..., scheduler: _Optional[_Union[Scheduler, str]] = ..., elastic: _Optional[_Union[ElasticPolicy, _Mapping]] = ...) -> None: ...

class ElasticPolicy(_message.Message):
    __slots__ = ("min_cores", "max_cores")
    CLASS_FIELD_NUMBER: _ClassVar[int]
    MIN_CORES_FIELD_NUMBER: _ClassVar[int]
    MAX_CORES_FIELD_NUMBER: _ClassVar[int]
    min_cores: int
    max_cores: int
    def __init__(self, min_cores: _Optional[int] = ..., max_cores: _Optional[int] = ..., **kwargs) -> None: ...

class CreateRealmResponse(_message.Message):
    __slots__ = ("admin_token", "admin_token_id")
    ADMIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ADMIN_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    admin_token: str
    admin_token_id: str
    def __init__(self, admin_token: _Optional[str] = ..., admin_token_id: _Optional[str] = ...) -> None: ...

class SetRealmRequest(_message.Message):
    __slots__ = ("realm", "procs", "cores", "mem_mb", "clear", "storage_mb", "mailbox_mb", "procedures", "host_paths", "host_network", "retention_s", "provenance")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PROCS_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_MB_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    STORAGE_MB_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_MB_FIELD_NUMBER: _ClassVar[int]
    PROCEDURES_FIELD_NUMBER: _ClassVar[int]
    HOST_PATHS_FIELD_NUMBER: _ClassVar[int]
    HOST_NETWORK_FIELD_NUMBER: _ClassVar[int]
    RETENTION_S_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    procs: int
    cores: int
    mem_mb: int
    clear: _containers.RepeatedScalarFieldContainer[str]
    storage_mb: int
    mailbox_mb: int
    procedures: int
    host_paths: _containers.RepeatedScalarFieldContainer[str]
    host_network: bool
    retention_s: int
    provenance: Provenance
    def __init__(self, realm: _Optional[str] = ..., procs: _Optional[int] = ..., cores: _Optional[int] = ..., mem_mb: _Optional[int] = ..., clear: _Optional[_Iterable[str]] = ..., storage_mb: _Optional[int] = ..., mailbox_mb: _Optional[int] = ..., procedures: _Optional[int] = ..., host_paths: _Optional[_Iterable[str]] = ..., host_network: _Optional[bool] = ..., retention_s: _Optional[int] = ..., provenance: _Optional[_Union[Provenance, str]] = ...) -> None: ...

class RemoveRealmRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class RemoveRealmResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    def __init__(self, rows: _Optional[int] = ...) -> None: ...

class RealmInfo(_message.Message):
    __slots__ = ("realm", "live_procs", "quota_procs", "cores", "quota_cores", "mem_mb", "quota_mem_mb", "stored_bytes", "quota_storage_mb", "mailbox_bytes", "quota_mailbox_mb", "procedures", "quota_procedures", "host_paths", "proc_uid", "host_network", "stored", "scheduler", "created_us", "retention_s", "provenance")
    REALM_FIELD_NUMBER: _ClassVar[int]
    LIVE_PROCS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_PROCS_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_MB_FIELD_NUMBER: _ClassVar[int]
    QUOTA_MEM_MB_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_STORAGE_MB_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_MAILBOX_MB_FIELD_NUMBER: _ClassVar[int]
    PROCEDURES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_PROCEDURES_FIELD_NUMBER: _ClassVar[int]
    HOST_PATHS_FIELD_NUMBER: _ClassVar[int]
    PROC_UID_FIELD_NUMBER: _ClassVar[int]
    HOST_NETWORK_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    RETENTION_S_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    live_procs: int
    quota_procs: int
    cores: int
    quota_cores: int
    mem_mb: int
    quota_mem_mb: int
    stored_bytes: int
    quota_storage_mb: int
    mailbox_bytes: int
    quota_mailbox_mb: int
    procedures: int
    quota_procedures: int
    host_paths: _containers.RepeatedScalarFieldContainer[str]
    proc_uid: int
    host_network: bool
    stored: _containers.RepeatedCompositeFieldContainer[StoredBytes]
    scheduler: Scheduler
    created_us: int
    retention_s: int
    provenance: Provenance
    def __init__(self, realm: _Optional[str] = ..., live_procs: _Optional[int] = ..., quota_procs: _Optional[int] = ..., cores: _Optional[int] = ..., quota_cores: _Optional[int] = ..., mem_mb: _Optional[int] = ..., quota_mem_mb: _Optional[int] = ..., stored_bytes: _Optional[int] = ..., quota_storage_mb: _Optional[int] = ..., mailbox_bytes: _Optional[int] = ..., quota_mailbox_mb: _Optional[int] = ..., procedures: _Optional[int] = ..., quota_procedures: _Optional[int] = ..., host_paths: _Optional[_Iterable[str]] = ..., proc_uid: _Optional[int] = ..., host_network: _Optional[bool] = ..., stored: _Optional[_Iterable[_Union[StoredBytes, _Mapping]]] = ..., scheduler: _Optional[_Union[Scheduler, str]] = ..., created_us: _Optional[int] = ..., retention_s: _Optional[int] = ..., provenance: _Optional[_Union[Provenance, str]] = ...) -> None: ...

class StoredBytes(_message.Message):
    __slots__ = ("bytes",)
    CLASS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    def __init__(self, bytes: _Optional[int] = ..., **kwargs) -> None: ...

class ListRealmsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRealmsResponse(_message.Message):
    __slots__ = ("realms",)
    REALMS_FIELD_NUMBER: _ClassVar[int]
    realms: _containers.RepeatedCompositeFieldContainer[RealmInfo]
    def __init__(self, realms: _Optional[_Iterable[_Union[RealmInfo, _Mapping]]] = ...) -> None: ...

class SpawnRequest(_message.Message):
    __slots__ = ("realm", "proc", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PROC_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    proc: ProcDescriptor
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., proc: _Optional[_Union[ProcDescriptor, _Mapping]] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class Spawned(_message.Message):
    __slots__ = ("pid", "worker")
    PID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    pid: str
    worker: str
    def __init__(self, pid: _Optional[str] = ..., worker: _Optional[str] = ...) -> None: ...

class SpawnBurstRequest(_message.Message):
    __slots__ = ("realm", "procs")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PROCS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    procs: _containers.RepeatedCompositeFieldContainer[ProcDescriptor]
    def __init__(self, realm: _Optional[str] = ..., procs: _Optional[_Iterable[_Union[ProcDescriptor, _Mapping]]] = ...) -> None: ...

class SpawnBurstResponse(_message.Message):
    __slots__ = ("procs",)
    PROCS_FIELD_NUMBER: _ClassVar[int]
    procs: _containers.RepeatedCompositeFieldContainer[Spawned]
    def __init__(self, procs: _Optional[_Iterable[_Union[Spawned, _Mapping]]] = ...) -> None: ...

class PidRequest(_message.Message):
    __slots__ = ("realm", "pid")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    realm: str
    pid: str
    def __init__(self, realm: _Optional[str] = ..., pid: _Optional[str] = ...) -> None: ...

class ExitedRequest(_message.Message):
    __slots__ = ("realm", "pid", "status")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    pid: str
    status: int
    def __init__(self, realm: _Optional[str] = ..., pid: _Optional[str] = ..., status: _Optional[int] = ...) -> None: ...

class ProcStatus(_message.Message):
    __slots__ = ("realm", "pid", "state", "worker", "evict_requested", "exit_status", "error", "spawn_us", "start_us", "exit_us")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    EVICT_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    EXIT_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SPAWN_US_FIELD_NUMBER: _ClassVar[int]
    START_US_FIELD_NUMBER: _ClassVar[int]
    EXIT_US_FIELD_NUMBER: _ClassVar[int]
    realm: str
    pid: str
    state: ProcState
    worker: str
    evict_requested: bool
    exit_status: int
    error: str
    spawn_us: int
    start_us: int
    exit_us: int
    def __init__(self, realm: _Optional[str] = ..., pid: _Optional[str] = ..., state: _Optional[_Union[ProcState, str]] = ..., worker: _Optional[str] = ..., evict_requested: _Optional[bool] = ..., exit_status: _Optional[int] = ..., error: _Optional[str] = ..., spawn_us: _Optional[int] = ..., start_us: _Optional[int] = ..., exit_us: _Optional[int] = ...) -> None: ...

class PruneRequest(_message.Message):
    __slots__ = ("realm", "pids", "older_than_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    pids: _containers.RepeatedScalarFieldContainer[str]
    older_than_ms: int
    def __init__(self, realm: _Optional[str] = ..., pids: _Optional[_Iterable[str]] = ..., older_than_ms: _Optional[int] = ...) -> None: ...

class PruneResponse(_message.Message):
    __slots__ = ("pids",)
    PIDS_FIELD_NUMBER: _ClassVar[int]
    pids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pids: _Optional[_Iterable[str]] = ...) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ("realm", "pid", "stream", "since_us", "tail_lines")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SINCE_US_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    realm: str
    pid: str
    stream: LogStream
    since_us: int
    tail_lines: int
    def __init__(self, realm: _Optional[str] = ..., pid: _Optional[str] = ..., stream: _Optional[_Union[LogStream, str]] = ..., since_us: _Optional[int] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class LogMark(_message.Message):
    __slots__ = ("at", "time_us")
    AT_FIELD_NUMBER: _ClassVar[int]
    TIME_US_FIELD_NUMBER: _ClassVar[int]
    at: int
    time_us: int
    def __init__(self, at: _Optional[int] = ..., time_us: _Optional[int] = ...) -> None: ...

class LogsResponse(_message.Message):
    __slots__ = ("data", "truncated", "marks")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    truncated: bool
    marks: _containers.RepeatedCompositeFieldContainer[LogMark]
    def __init__(self, data: _Optional[bytes] = ..., truncated: _Optional[bool] = ..., marks: _Optional[_Iterable[_Union[LogMark, _Mapping]]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateMailboxRequest(_message.Message):
    __slots__ = ("realm", "name", "bytes_max", "log_delivered")
    REALM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BYTES_MAX_FIELD_NUMBER: _ClassVar[int]
    LOG_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    realm: str
    name: str
    bytes_max: int
    log_delivered: bool
    def __init__(self, realm: _Optional[str] = ..., name: _Optional[str] = ..., bytes_max: _Optional[int] = ..., log_delivered: _Optional[bool] = ...) -> None: ...

class RemoveMailboxRequest(_message.Message):
    __slots__ = ("realm", "name")
    REALM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    realm: str
    name: str
    def __init__(self, realm: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class RemoveMailboxResponse(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    def __init__(self, dropped: _Optional[int] = ...) -> None: ...

class Outgoing(_message.Message):
    __slots__ = ("to", "payload", "message_id")
    TO_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    to: str
    payload: bytes
    message_id: str
    def __init__(self, to: _Optional[str] = ..., payload: _Optional[bytes] = ..., message_id: _Optional[str] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("realm", "messages", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    messages: _containers.RepeatedCompositeFieldContainer[Outgoing]
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Outgoing, _Mapping]]] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., **kwargs) -> None: ...

class SentMessage(_message.Message):
    __slots__ = ("seq", "duplicate")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    duplicate: bool
    def __init__(self, seq: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("sent",)
    SENT_FIELD_NUMBER: _ClassVar[int]
    sent: _containers.RepeatedCompositeFieldContainer[SentMessage]
    def __init__(self, sent: _Optional[_Iterable[_Union[SentMessage, _Mapping]]] = ...) -> None: ...

class RecvRequest(_message.Message):
    __slots__ = ("realm", "mailbox", "max", "timeout_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    mailbox: str
    max: int
    timeout_ms: int
    def __init__(self, realm: _Optional[str] = ..., mailbox: _Optional[str] = ..., max: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("seq", "sender", "message_id", "sent_us", "payload")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SENT_US_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    seq: int
    sender: str
    message_id: str
    sent_us: int
    payload: bytes
    def __init__(self, seq: _Optional[int] = ..., sender: _Optional[str] = ..., message_id: _Optional[str] = ..., sent_us: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class RecvResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class MailboxRequest(_message.Message):
    __slots__ = ("realm", "mailbox")
    REALM_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_FIELD_NUMBER: _ClassVar[int]
    realm: str
    mailbox: str
    def __init__(self, realm: _Optional[str] = ..., mailbox: _Optional[str] = ...) -> None: ...

class MailboxInfo(_message.Message):
    __slots__ = ("address", "queued", "queued_bytes", "bytes_max", "log_delivered", "next_seq")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BYTES_FIELD_NUMBER: _ClassVar[int]
    BYTES_MAX_FIELD_NUMBER: _ClassVar[int]
    LOG_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    address: str
    queued: int
    queued_bytes: int
    bytes_max: int
    log_delivered: bool
    next_seq: int
    def __init__(self, address: _Optional[str] = ..., queued: _Optional[int] = ..., queued_bytes: _Optional[int] = ..., bytes_max: _Optional[int] = ..., log_delivered: _Optional[bool] = ..., next_seq: _Optional[int] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("dir", "epoch")
    DIR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    dir: str
    epoch: int
    def __init__(self, dir: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class NameEntry(_message.Message):
    __slots__ = ("path", "kind", "data", "version", "owner", "mode", "session", "created_us", "modified_us")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_US_FIELD_NUMBER: _ClassVar[int]
    path: str
    kind: NameKind
    data: bytes
    version: int
    owner: str
    mode: int
    session: str
    created_us: int
    modified_us: int
    def __init__(self, path: _Optional[str] = ..., kind: _Optional[_Union[NameKind, str]] = ..., data: _Optional[bytes] = ..., version: _Optional[int] = ..., owner: _Optional[str] = ..., mode: _Optional[int] = ..., session: _Optional[str] = ..., created_us: _Optional[int] = ..., modified_us: _Optional[int] = ...) -> None: ...

class CreateNameRequest(_message.Message):
    __slots__ = ("realm", "path", "kind", "data", "owner", "mode", "session", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    path: str
    kind: NameKind
    data: bytes
    owner: str
    mode: int
    session: str
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., path: _Optional[str] = ..., kind: _Optional[_Union[NameKind, str]] = ..., data: _Optional[bytes] = ..., owner: _Optional[str] = ..., mode: _Optional[int] = ..., session: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class SetNameRequest(_message.Message):
    __slots__ = ("realm", "path", "data", "if_version", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    path: str
    data: bytes
    if_version: int
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., path: _Optional[str] = ..., data: _Optional[bytes] = ..., if_version: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class NameVersion(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class NameRequest(_message.Message):
    __slots__ = ("realm", "path")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    realm: str
    path: str
    def __init__(self, realm: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class RemoveNameRequest(_message.Message):
    __slots__ = ("realm", "path", "if_version", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    path: str
    if_version: int
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., path: _Optional[str] = ..., if_version: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class RenameNameRequest(_message.Message):
    __slots__ = ("realm", "to", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    to: str
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., to: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., **kwargs) -> None: ...

class ReadDirResponse(_message.Message):
    __slots__ = ("entries", "more", "version")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[NameEntry]
    more: bool
    version: int
    def __init__(self, entries: _Optional[_Iterable[_Union[NameEntry, _Mapping]]] = ..., more: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class EpochResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("realm", "session", "owner", "ttl_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    session: str
    owner: str
    ttl_ms: int
    def __init__(self, realm: _Optional[str] = ..., session: _Optional[str] = ..., owner: _Optional[str] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("realm", "session")
    REALM_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    realm: str
    session: str
    def __init__(self, realm: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("session", "expires_us")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_US_FIELD_NUMBER: _ClassVar[int]
    session: str
    expires_us: int
    def __init__(self, session: _Optional[str] = ..., expires_us: _Optional[int] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("realm", "path", "mode")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    path: str
    mode: WatchMode
    def __init__(self, realm: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[_Union[WatchMode, str]] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("op", "path", "version", "entry")
    OP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    op: WatchOp
    path: str
    version: int
    entry: NameEntry
    def __init__(self, op: _Optional[_Union[WatchOp, str]] = ..., path: _Optional[str] = ..., version: _Optional[int] = ..., entry: _Optional[_Union[NameEntry, _Mapping]] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("realm", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class FsStat(_message.Message):
    __slots__ = ("path", "type", "owner", "mode", "size", "block_size", "ctime_us", "mtime_us", "layout", "atime_us", "id", "nlink")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    CTIME_US_FIELD_NUMBER: _ClassVar[int]
    MTIME_US_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    ATIME_US_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NLINK_FIELD_NUMBER: _ClassVar[int]
    path: str
    type: FileType
    owner: str
    mode: int
    size: int
    block_size: int
    ctime_us: int
    mtime_us: int
    layout: str
    atime_us: int
    id: str
    nlink: int
    def __init__(self, path: _Optional[str] = ..., type: _Optional[_Union[FileType, str]] = ..., owner: _Optional[str] = ..., mode: _Optional[int] = ..., size: _Optional[int] = ..., block_size: _Optional[int] = ..., ctime_us: _Optional[int] = ..., mtime_us: _Optional[int] = ..., layout: _Optional[str] = ..., atime_us: _Optional[int] = ..., id: _Optional[str] = ..., nlink: _Optional[int] = ...) -> None: ...

class FsCreateRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "mode", "fence", "parallel")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    mode: int
    fence: Fence
    parallel: bool
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., parallel: _Optional[bool] = ...) -> None: ...

class FsPathRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "fence", "handle")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    fence: Fence
    handle: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., handle: _Optional[str] = ...) -> None: ...

class FsLinkRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "new_path")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    NEW_PATH_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    new_path: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., new_path: _Optional[str] = ...) -> None: ...

class FsSymlinkRequest(_message.Message):
    __slots__ = ("realm", "user", "target", "path")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    target: str
    path: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., target: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class FsReadlinkResponse(_message.Message):
    __slots__ = ("target",)
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: str
    def __init__(self, target: _Optional[str] = ...) -> None: ...

class FsOpenRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "access", "session", "create", "mode", "host")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    access: FsAccess
    session: str
    create: bool
    mode: int
    host: FsHostCaller
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., access: _Optional[_Union[FsAccess, str]] = ..., session: _Optional[str] = ..., create: _Optional[bool] = ..., mode: _Optional[int] = ..., host: _Optional[_Union[FsHostCaller, _Mapping]] = ...) -> None: ...

class FsHostCaller(_message.Message):
    __slots__ = ("pid", "uid", "program")
    PID_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    pid: int
    uid: int
    program: str
    def __init__(self, pid: _Optional[int] = ..., uid: _Optional[int] = ..., program: _Optional[str] = ...) -> None: ...

class FsOpenResponse(_message.Message):
    __slots__ = ("handle", "stat")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    handle: str
    stat: FsStat
    def __init__(self, handle: _Optional[str] = ..., stat: _Optional[_Union[FsStat, _Mapping]] = ...) -> None: ...

class FsHandleRequest(_message.Message):
    __slots__ = ("realm", "user", "handle")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    handle: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class FsRenameRequest(_message.Message):
    __slots__ = ("realm", "user", "to", "fence")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    to: str
    fence: Fence
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., to: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., **kwargs) -> None: ...

class FsReadDirResponse(_message.Message):
    __slots__ = ("entries", "more")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FsStat]
    more: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[FsStat, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class FsReadRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "offset", "len", "pid", "handle")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEN_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    offset: int
    len: int
    pid: str
    handle: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., len: _Optional[int] = ..., pid: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class FsReadResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class FsWriteRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "offset", "data", "create", "fence", "pid", "handle")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    offset: int
    data: bytes
    create: bool
    fence: Fence
    pid: str
    handle: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., create: _Optional[bool] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., pid: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class FsWriteResponse(_message.Message):
    __slots__ = ("size",)
    SIZE_FIELD_NUMBER: _ClassVar[int]
    size: int
    def __init__(self, size: _Optional[int] = ...) -> None: ...

class FsTruncateRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "size", "fence", "handle")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    size: int
    fence: Fence
    handle: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., size: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., handle: _Optional[str] = ...) -> None: ...

class FsChmodRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "mode")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    mode: int
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[int] = ...) -> None: ...

class FsTimesRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "atime", "atime_us", "mtime", "mtime_us", "handle")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ATIME_FIELD_NUMBER: _ClassVar[int]
    ATIME_US_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    MTIME_US_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    atime: SetTime
    atime_us: int
    mtime: SetTime
    mtime_us: int
    handle: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., atime: _Optional[_Union[SetTime, str]] = ..., atime_us: _Optional[int] = ..., mtime: _Optional[_Union[SetTime, str]] = ..., mtime_us: _Optional[int] = ..., handle: _Optional[str] = ...) -> None: ...

class FsChownRequest(_message.Message):
    __slots__ = ("realm", "user", "path", "owner")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    path: str
    owner: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ..., path: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class FsDuRequest(_message.Message):
    __slots__ = ("realm", "path", "owner", "min_size")
    REALM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    path: str
    owner: str
    min_size: int
    def __init__(self, realm: _Optional[str] = ..., path: _Optional[str] = ..., owner: _Optional[str] = ..., min_size: _Optional[int] = ...) -> None: ...

class FsDuResponse(_message.Message):
    __slots__ = ("files", "bytes")
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    files: int
    bytes: int
    def __init__(self, files: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class FsWatchRequest(_message.Message):
    __slots__ = ("realm", "user")
    REALM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    realm: str
    user: str
    def __init__(self, realm: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class FsChange(_message.Message):
    __slots__ = ("kind", "path", "id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    kind: FsChangeKind
    path: str
    id: str
    def __init__(self, kind: _Optional[_Union[FsChangeKind, str]] = ..., path: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class FsChanges(_message.Message):
    __slots__ = ("watching", "changes")
    WATCHING_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    watching: bool
    changes: _containers.RepeatedCompositeFieldContainer[FsChange]
    def __init__(self, watching: _Optional[bool] = ..., changes: _Optional[_Iterable[_Union[FsChange, _Mapping]]] = ...) -> None: ...

class InstallProcedureRequest(_message.Message):
    __slots__ = ("realm", "name", "language", "code", "memory_bytes", "timeout_ms", "read_only")
    REALM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    realm: str
    name: str
    language: str
    code: bytes
    memory_bytes: int
    timeout_ms: int
    read_only: bool
    def __init__(self, realm: _Optional[str] = ..., name: _Optional[str] = ..., language: _Optional[str] = ..., code: _Optional[bytes] = ..., memory_bytes: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., read_only: _Optional[bool] = ...) -> None: ...

class ProcedureInfo(_message.Message):
    __slots__ = ("realm", "name", "language", "code_bytes", "code_hash", "memory_bytes", "timeout_ms", "installed_us", "read_only")
    REALM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CODE_HASH_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    INSTALLED_US_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    realm: str
    name: str
    language: str
    code_bytes: int
    code_hash: str
    memory_bytes: int
    timeout_ms: int
    installed_us: int
    read_only: bool
    def __init__(self, realm: _Optional[str] = ..., name: _Optional[str] = ..., language: _Optional[str] = ..., code_bytes: _Optional[int] = ..., code_hash: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., installed_us: _Optional[int] = ..., read_only: _Optional[bool] = ...) -> None: ...

class ListProceduresRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class ListProceduresResponse(_message.Message):
    __slots__ = ("procedures",)
    PROCEDURES_FIELD_NUMBER: _ClassVar[int]
    procedures: _containers.RepeatedCompositeFieldContainer[ProcedureInfo]
    def __init__(self, procedures: _Optional[_Iterable[_Union[ProcedureInfo, _Mapping]]] = ...) -> None: ...

class ProcedureRequest(_message.Message):
    __slots__ = ("realm", "name")
    REALM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    realm: str
    name: str
    def __init__(self, realm: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class CallProcedureRequest(_message.Message):
    __slots__ = ("realm", "name", "args")
    REALM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    name: str
    args: bytes
    def __init__(self, realm: _Optional[str] = ..., name: _Optional[str] = ..., args: _Optional[bytes] = ...) -> None: ...

class CallProcedureResponse(_message.Message):
    __slots__ = ("result", "log")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    result: bytes
    log: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, result: _Optional[bytes] = ..., log: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchCall(_message.Message):
    __slots__ = ("names_set", "names_get", "names_remove", "send", "recv", "procedure_call", "proc_status", "fs_stat", "fs_read", "fs_write", "spawn")
    NAMES_SET_FIELD_NUMBER: _ClassVar[int]
    NAMES_GET_FIELD_NUMBER: _ClassVar[int]
    NAMES_REMOVE_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    RECV_FIELD_NUMBER: _ClassVar[int]
    PROCEDURE_CALL_FIELD_NUMBER: _ClassVar[int]
    PROC_STATUS_FIELD_NUMBER: _ClassVar[int]
    FS_STAT_FIELD_NUMBER: _ClassVar[int]
    FS_READ_FIELD_NUMBER: _ClassVar[int]
    FS_WRITE_FIELD_NUMBER: _ClassVar[int]
    SPAWN_FIELD_NUMBER: _ClassVar[int]
    names_set: SetNameRequest
    names_get: NameRequest
    names_remove: RemoveNameRequest
    send: SendRequest
    recv: RecvRequest
    procedure_call: CallProcedureRequest
    proc_status: PidRequest
    fs_stat: FsPathRequest
    fs_read: FsReadRequest
    fs_write: FsWriteRequest
    spawn: SpawnRequest
    def __init__(self, names_set: _Optional[_Union[SetNameRequest, _Mapping]] = ..., names_get: _Optional[_Union[NameRequest, _Mapping]] = ..., names_remove: _Optional[_Union[RemoveNameRequest, _Mapping]] = ..., send: _Optional[_Union[SendRequest, _Mapping]] = ..., recv: _Optional[_Union[RecvRequest, _Mapping]] = ..., procedure_call: _Optional[_Union[CallProcedureRequest, _Mapping]] = ..., proc_status: _Optional[_Union[PidRequest, _Mapping]] = ..., fs_stat: _Optional[_Union[FsPathRequest, _Mapping]] = ..., fs_read: _Optional[_Union[FsReadRequest, _Mapping]] = ..., fs_write: _Optional[_Union[FsWriteRequest, _Mapping]] = ..., spawn: _Optional[_Union[SpawnRequest, _Mapping]] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("calls", "independent")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    INDEPENDENT_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[BatchCall]
    independent: bool
    def __init__(self, calls: _Optional[_Iterable[_Union[BatchCall, _Mapping]]] = ..., independent: _Optional[bool] = ...) -> None: ...

class BatchError(_message.Message):
    __slots__ = ("code", "message", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    details: bytes
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., details: _Optional[bytes] = ...) -> None: ...

class BatchResult(_message.Message):
    __slots__ = ("error", "names_set", "names_get", "names_remove", "send", "recv", "procedure_call", "proc_status", "fs_stat", "fs_read", "fs_write", "spawn")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NAMES_SET_FIELD_NUMBER: _ClassVar[int]
    NAMES_GET_FIELD_NUMBER: _ClassVar[int]
    NAMES_REMOVE_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    RECV_FIELD_NUMBER: _ClassVar[int]
    PROCEDURE_CALL_FIELD_NUMBER: _ClassVar[int]
    PROC_STATUS_FIELD_NUMBER: _ClassVar[int]
    FS_STAT_FIELD_NUMBER: _ClassVar[int]
    FS_READ_FIELD_NUMBER: _ClassVar[int]
    FS_WRITE_FIELD_NUMBER: _ClassVar[int]
    SPAWN_FIELD_NUMBER: _ClassVar[int]
    error: BatchError
    names_set: NameVersion
    names_get: NameEntry
    names_remove: Empty
    send: SendResponse
    recv: RecvResponse
    procedure_call: CallProcedureResponse
    proc_status: ProcStatus
    fs_stat: FsStat
    fs_read: FsReadResponse
    fs_write: FsWriteResponse
    spawn: Spawned
    def __init__(self, error: _Optional[_Union[BatchError, _Mapping]] = ..., names_set: _Optional[_Union[NameVersion, _Mapping]] = ..., names_get: _Optional[_Union[NameEntry, _Mapping]] = ..., names_remove: _Optional[_Union[Empty, _Mapping]] = ..., send: _Optional[_Union[SendResponse, _Mapping]] = ..., recv: _Optional[_Union[RecvResponse, _Mapping]] = ..., procedure_call: _Optional[_Union[CallProcedureResponse, _Mapping]] = ..., proc_status: _Optional[_Union[ProcStatus, _Mapping]] = ..., fs_stat: _Optional[_Union[FsStat, _Mapping]] = ..., fs_read: _Optional[_Union[FsReadResponse, _Mapping]] = ..., fs_write: _Optional[_Union[FsWriteResponse, _Mapping]] = ..., spawn: _Optional[_Union[Spawned, _Mapping]] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchResult, _Mapping]]] = ...) -> None: ...

class ScheduleInfo(_message.Message):
    __slots__ = ("realm", "schedule", "name", "cron", "app_version", "queue", "next_us")
    REALM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    NEXT_US_FIELD_NUMBER: _ClassVar[int]
    realm: str
    schedule: str
    name: str
    cron: str
    app_version: str
    queue: str
    next_us: int
    def __init__(self, realm: _Optional[str] = ..., schedule: _Optional[str] = ..., name: _Optional[str] = ..., cron: _Optional[str] = ..., app_version: _Optional[str] = ..., queue: _Optional[str] = ..., next_us: _Optional[int] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[ScheduleInfo]
    def __init__(self, schedules: _Optional[_Iterable[_Union[ScheduleInfo, _Mapping]]] = ...) -> None: ...

class RemoveScheduleRequest(_message.Message):
    __slots__ = ("realm", "schedule")
    REALM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    schedule: str
    def __init__(self, realm: _Optional[str] = ..., schedule: _Optional[str] = ...) -> None: ...

class RegisterExecutorRequest(_message.Message):
    __slots__ = ("realm", "app_version", "functions", "lease_ms", "executor")
    REALM_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    realm: str
    app_version: str
    functions: _containers.RepeatedScalarFieldContainer[str]
    lease_ms: int
    executor: str
    def __init__(self, realm: _Optional[str] = ..., app_version: _Optional[str] = ..., functions: _Optional[_Iterable[str]] = ..., lease_ms: _Optional[int] = ..., executor: _Optional[str] = ...) -> None: ...

class ExecutorInfo(_message.Message):
    __slots__ = ("executor", "node_id", "lease_ms")
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    executor: str
    node_id: str
    lease_ms: int
    def __init__(self, executor: _Optional[str] = ..., node_id: _Optional[str] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class ExecutorRequest(_message.Message):
    __slots__ = ("realm", "executor", "lease_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    lease_ms: int
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class StartWorkflowRequest(_message.Message):
    __slots__ = ("realm", "workflow_id", "name", "app_version", "input", "queue", "priority", "executor", "proc")
    REALM_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    PROC_FIELD_NUMBER: _ClassVar[int]
    realm: str
    workflow_id: str
    name: str
    app_version: str
    input: bytes
    queue: str
    priority: int
    executor: str
    proc: ProcDescriptor
    def __init__(self, realm: _Optional[str] = ..., workflow_id: _Optional[str] = ..., name: _Optional[str] = ..., app_version: _Optional[str] = ..., input: _Optional[bytes] = ..., queue: _Optional[str] = ..., priority: _Optional[int] = ..., executor: _Optional[str] = ..., proc: _Optional[_Union[ProcDescriptor, _Mapping]] = ...) -> None: ...

class StartWorkflowResponse(_message.Message):
    __slots__ = ("created", "workflow", "pid")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    created: bool
    workflow: WorkflowInfo
    pid: str
    def __init__(self, created: _Optional[bool] = ..., workflow: _Optional[_Union[WorkflowInfo, _Mapping]] = ..., pid: _Optional[str] = ...) -> None: ...

class WorkflowInfo(_message.Message):
    __slots__ = ("workflow_id", "name", "app_version", "status", "queue", "priority", "input", "has_output", "output", "error", "executor", "node_id", "attempts", "user", "forked_from", "created_us", "started_us", "updated_us", "ended_us")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    HAS_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    UPDATED_US_FIELD_NUMBER: _ClassVar[int]
    ENDED_US_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    name: str
    app_version: str
    status: WorkflowStatus
    queue: str
    priority: int
    input: bytes
    has_output: bool
    output: bytes
    error: str
    executor: str
    node_id: str
    attempts: int
    user: str
    forked_from: str
    created_us: int
    started_us: int
    updated_us: int
    ended_us: int
    def __init__(self, workflow_id: _Optional[str] = ..., name: _Optional[str] = ..., app_version: _Optional[str] = ..., status: _Optional[_Union[WorkflowStatus, str]] = ..., queue: _Optional[str] = ..., priority: _Optional[int] = ..., input: _Optional[bytes] = ..., has_output: _Optional[bool] = ..., output: _Optional[bytes] = ..., error: _Optional[str] = ..., executor: _Optional[str] = ..., node_id: _Optional[str] = ..., attempts: _Optional[int] = ..., user: _Optional[str] = ..., forked_from: _Optional[str] = ..., created_us: _Optional[int] = ..., started_us: _Optional[int] = ..., updated_us: _Optional[int] = ..., ended_us: _Optional[int] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("realm", "executor", "queue", "max", "wait_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    queue: str
    max: int
    wait_ms: int
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., queue: _Optional[str] = ..., max: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("workflow_id", "name", "input", "recovered")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    name: str
    input: bytes
    recovered: bool
    def __init__(self, workflow_id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[bytes] = ..., recovered: _Optional[bool] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("claims", "retry_at_us")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_US_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    retry_at_us: int
    def __init__(self, claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ..., retry_at_us: _Optional[int] = ...) -> None: ...

class StepBeginRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "step", "name", "kind", "input")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    step: int
    name: str
    kind: StepKind
    input: bytes
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., input: _Optional[bytes] = ...) -> None: ...

class StepOutcome(_message.Message):
    __slots__ = ("status", "output", "error", "recorded")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    status: StepStatus
    output: bytes
    error: str
    recorded: bool
    def __init__(self, status: _Optional[_Union[StepStatus, str]] = ..., output: _Optional[bytes] = ..., error: _Optional[str] = ..., recorded: _Optional[bool] = ...) -> None: ...

class StepBeginResponse(_message.Message):
    __slots__ = ("done", "attempt")
    DONE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    done: StepOutcome
    attempt: int
    def __init__(self, done: _Optional[_Union[StepOutcome, _Mapping]] = ..., attempt: _Optional[int] = ...) -> None: ...

class StepEndRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "step", "outcome", "last", "name", "kind", "attempts", "input")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    step: int
    outcome: StepOutcome
    last: bool
    name: str
    kind: StepKind
    attempts: int
    input: bytes
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ..., outcome: _Optional[_Union[StepOutcome, _Mapping]] = ..., last: _Optional[bool] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., attempts: _Optional[int] = ..., input: _Optional[bytes] = ...) -> None: ...

class StepProcedureRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "step", "procedure", "args", "last")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PROCEDURE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    step: int
    procedure: str
    args: bytes
    last: bool
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ..., procedure: _Optional[str] = ..., args: _Optional[bytes] = ..., last: _Optional[bool] = ...) -> None: ...

class SleepRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "step", "duration_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    step: int
    duration_ms: int
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class SleepResponse(_message.Message):
    __slots__ = ("wake_at_us", "now_us")
    WAKE_AT_US_FIELD_NUMBER: _ClassVar[int]
    NOW_US_FIELD_NUMBER: _ClassVar[int]
    wake_at_us: int
    now_us: int
    def __init__(self, wake_at_us: _Optional[int] = ..., now_us: _Optional[int] = ...) -> None: ...

class WorkflowSendRequest(_message.Message):
    __slots__ = ("realm", "to", "topic", "payload", "executor", "workflow_id", "step")
    REALM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    realm: str
    to: str
    topic: str
    payload: bytes
    executor: str
    workflow_id: str
    step: int
    def __init__(self, realm: _Optional[str] = ..., to: _Optional[str] = ..., topic: _Optional[str] = ..., payload: _Optional[bytes] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class WorkflowRecvRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "step", "topic", "timeout_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    step: int
    topic: str
    timeout_ms: int
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ..., topic: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class WorkflowRecvResponse(_message.Message):
    __slots__ = ("received", "payload")
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    received: bool
    payload: bytes
    def __init__(self, received: _Optional[bool] = ..., payload: _Optional[bytes] = ...) -> None: ...

class SetEventRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "step", "key", "value")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    step: int
    key: str
    value: bytes
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., step: _Optional[int] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class GetEventRequest(_message.Message):
    __slots__ = ("realm", "workflow_id", "key", "timeout_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    workflow_id: str
    key: str
    timeout_ms: int
    def __init__(self, realm: _Optional[str] = ..., workflow_id: _Optional[str] = ..., key: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class GetEventResponse(_message.Message):
    __slots__ = ("set", "value")
    SET_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    set: bool
    value: bytes
    def __init__(self, set: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class FinishWorkflowRequest(_message.Message):
    __slots__ = ("realm", "executor", "workflow_id", "outcome")
    REALM_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    realm: str
    executor: str
    workflow_id: str
    outcome: StepOutcome
    def __init__(self, realm: _Optional[str] = ..., executor: _Optional[str] = ..., workflow_id: _Optional[str] = ..., outcome: _Optional[_Union[StepOutcome, _Mapping]] = ...) -> None: ...

class WaitWorkflowRequest(_message.Message):
    __slots__ = ("realm", "workflow_id", "timeout_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    workflow_id: str
    timeout_ms: int
    def __init__(self, realm: _Optional[str] = ..., workflow_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ("realm", "status", "name", "queue", "app_version", "since_us", "limit")
    REALM_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    SINCE_US_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    realm: str
    status: WorkflowStatus
    name: str
    queue: str
    app_version: str
    since_us: int
    limit: int
    def __init__(self, realm: _Optional[str] = ..., status: _Optional[_Union[WorkflowStatus, str]] = ..., name: _Optional[str] = ..., queue: _Optional[str] = ..., app_version: _Optional[str] = ..., since_us: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows",)
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[WorkflowInfo]
    def __init__(self, workflows: _Optional[_Iterable[_Union[WorkflowInfo, _Mapping]]] = ...) -> None: ...

class WorkflowRequest(_message.Message):
    __slots__ = ("realm", "workflow_id", "after_step")
    REALM_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_STEP_FIELD_NUMBER: _ClassVar[int]
    realm: str
    workflow_id: str
    after_step: int
    def __init__(self, realm: _Optional[str] = ..., workflow_id: _Optional[str] = ..., after_step: _Optional[int] = ...) -> None: ...

class WorkflowStep(_message.Message):
    __slots__ = ("step", "name", "kind", "status", "output", "error", "attempts", "started_us", "ended_us", "input")
    STEP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    ENDED_US_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    step: int
    name: str
    kind: StepKind
    status: StepStatus
    output: bytes
    error: str
    attempts: int
    started_us: int
    ended_us: int
    input: bytes
    def __init__(self, step: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., status: _Optional[_Union[StepStatus, str]] = ..., output: _Optional[bytes] = ..., error: _Optional[str] = ..., attempts: _Optional[int] = ..., started_us: _Optional[int] = ..., ended_us: _Optional[int] = ..., input: _Optional[bytes] = ...) -> None: ...

class WorkflowDetail(_message.Message):
    __slots__ = ("workflow", "steps", "more")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    workflow: WorkflowInfo
    steps: _containers.RepeatedCompositeFieldContainer[WorkflowStep]
    more: bool
    def __init__(self, workflow: _Optional[_Union[WorkflowInfo, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[WorkflowStep, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class ResumeWorkflowRequest(_message.Message):
    __slots__ = ("realm", "workflow_id", "app_version")
    REALM_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    realm: str
    workflow_id: str
    app_version: str
    def __init__(self, realm: _Optional[str] = ..., workflow_id: _Optional[str] = ..., app_version: _Optional[str] = ...) -> None: ...

class ForkWorkflowRequest(_message.Message):
    __slots__ = ("realm", "workflow_id", "new_id", "from_step", "app_version")
    REALM_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    realm: str
    workflow_id: str
    new_id: str
    from_step: int
    app_version: str
    def __init__(self, realm: _Optional[str] = ..., workflow_id: _Optional[str] = ..., new_id: _Optional[str] = ..., from_step: _Optional[int] = ..., app_version: _Optional[str] = ...) -> None: ...

class RetargetRequest(_message.Message):
    __slots__ = ("realm", "from_version", "to_version")
    REALM_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    realm: str
    from_version: str
    to_version: str
    def __init__(self, realm: _Optional[str] = ..., from_version: _Optional[str] = ..., to_version: _Optional[str] = ...) -> None: ...

class RetargetResponse(_message.Message):
    __slots__ = ("moved",)
    MOVED_FIELD_NUMBER: _ClassVar[int]
    moved: int
    def __init__(self, moved: _Optional[int] = ...) -> None: ...

class SetQueueRequest(_message.Message):
    __slots__ = ("realm", "queue", "concurrency", "node_concurrency", "rate_limit", "rate_period_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    NODE_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RATE_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    queue: str
    concurrency: int
    node_concurrency: int
    rate_limit: int
    rate_period_ms: int
    def __init__(self, realm: _Optional[str] = ..., queue: _Optional[str] = ..., concurrency: _Optional[int] = ..., node_concurrency: _Optional[int] = ..., rate_limit: _Optional[int] = ..., rate_period_ms: _Optional[int] = ...) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ("queue", "concurrency", "node_concurrency", "rate_limit", "rate_period_ms", "enqueued", "pending")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    NODE_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RATE_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    queue: str
    concurrency: int
    node_concurrency: int
    rate_limit: int
    rate_period_ms: int
    enqueued: int
    pending: int
    def __init__(self, queue: _Optional[str] = ..., concurrency: _Optional[int] = ..., node_concurrency: _Optional[int] = ..., rate_limit: _Optional[int] = ..., rate_period_ms: _Optional[int] = ..., enqueued: _Optional[int] = ..., pending: _Optional[int] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("realm",)
    REALM_FIELD_NUMBER: _ClassVar[int]
    realm: str
    def __init__(self, realm: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ...) -> None: ...

class GraphTask(_message.Message):
    __slots__ = ("id", "kind", "target", "args", "dynamic", "attempts_max", "queue", "version", "argv", "proc_kind")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_MAX_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    PROC_KIND_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: TaskKind
    target: str
    args: bytes
    dynamic: bool
    attempts_max: int
    queue: str
    version: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    proc_kind: ProcKind
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[TaskKind, str]] = ..., target: _Optional[str] = ..., args: _Optional[bytes] = ..., dynamic: _Optional[bool] = ..., attempts_max: _Optional[int] = ..., queue: _Optional[str] = ..., version: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., proc_kind: _Optional[_Union[ProcKind, str]] = ...) -> None: ...

class SubmitGraphRequest(_message.Message):
    __slots__ = ("realm", "graph_id", "tasks", "result", "held")
    REALM_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    realm: str
    graph_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[GraphTask]
    result: str
    held: bool
    def __init__(self, realm: _Optional[str] = ..., graph_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[GraphTask, _Mapping]]] = ..., result: _Optional[str] = ..., held: _Optional[bool] = ...) -> None: ...

class AddTasksRequest(_message.Message):
    __slots__ = ("realm", "graph_id", "tasks")
    REALM_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    graph_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[GraphTask]
    def __init__(self, realm: _Optional[str] = ..., graph_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[GraphTask, _Mapping]]] = ...) -> None: ...

class GraphRequest(_message.Message):
    __slots__ = ("realm", "graph_id")
    REALM_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    realm: str
    graph_id: str
    def __init__(self, realm: _Optional[str] = ..., graph_id: _Optional[str] = ...) -> None: ...

class GraphInfo(_message.Message):
    __slots__ = ("graph_id", "status", "user", "result_task", "output", "error", "parent_graph", "parent_task", "created_us", "ended_us", "tasks", "ended", "held")
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    RESULT_TASK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARENT_GRAPH_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    ENDED_US_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    graph_id: str
    status: GraphStatus
    user: str
    result_task: str
    output: bytes
    error: str
    parent_graph: str
    parent_task: str
    created_us: int
    ended_us: int
    tasks: int
    ended: int
    held: bool
    def __init__(self, graph_id: _Optional[str] = ..., status: _Optional[_Union[GraphStatus, str]] = ..., user: _Optional[str] = ..., result_task: _Optional[str] = ..., output: _Optional[bytes] = ..., error: _Optional[str] = ..., parent_graph: _Optional[str] = ..., parent_task: _Optional[str] = ..., created_us: _Optional[int] = ..., ended_us: _Optional[int] = ..., tasks: _Optional[int] = ..., ended: _Optional[int] = ..., held: _Optional[bool] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("id", "kind", "target", "status", "deps", "attempts", "node_id", "child", "output", "error", "created_us", "started_us", "ended_us")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DEPS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_US_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    ENDED_US_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: TaskKind
    target: str
    status: TaskStatus
    deps: _containers.RepeatedScalarFieldContainer[str]
    attempts: int
    node_id: str
    child: str
    output: bytes
    error: str
    created_us: int
    started_us: int
    ended_us: int
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[TaskKind, str]] = ..., target: _Optional[str] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., deps: _Optional[_Iterable[str]] = ..., attempts: _Optional[int] = ..., node_id: _Optional[str] = ..., child: _Optional[str] = ..., output: _Optional[bytes] = ..., error: _Optional[str] = ..., created_us: _Optional[int] = ..., started_us: _Optional[int] = ..., ended_us: _Optional[int] = ...) -> None: ...

class ShowGraphResponse(_message.Message):
    __slots__ = ("graph", "tasks")
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    graph: GraphInfo
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    def __init__(self, graph: _Optional[_Union[GraphInfo, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ...) -> None: ...

class WaitGraphRequest(_message.Message):
    __slots__ = ("realm", "graph_id", "task", "timeout_ms")
    REALM_FIELD_NUMBER: _ClassVar[int]
    GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    realm: str
    graph_id: str
    task: str
    timeout_ms: int
    def __init__(self, realm: _Optional[str] = ..., graph_id: _Optional[str] = ..., task: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class WaitGraphResponse(_message.Message):
    __slots__ = ("ended", "graph", "task")
    ENDED_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ended: bool
    graph: GraphInfo
    task: TaskInfo
    def __init__(self, ended: _Optional[bool] = ..., graph: _Optional[_Union[GraphInfo, _Mapping]] = ..., task: _Optional[_Union[TaskInfo, _Mapping]] = ...) -> None: ...

class ListGraphsRequest(_message.Message):
    __slots__ = ("realm", "status", "limit")
    REALM_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    realm: str
    status: GraphStatus
    limit: int
    def __init__(self, realm: _Optional[str] = ..., status: _Optional[_Union[GraphStatus, str]] = ..., limit: _Optional[int] = ...) -> None: ...

class ListGraphsResponse(_message.Message):
    __slots__ = ("graphs",)
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    graphs: _containers.RepeatedCompositeFieldContainer[GraphInfo]
    def __init__(self, graphs: _Optional[_Iterable[_Union[GraphInfo, _Mapping]]] = ...) -> None: ...
