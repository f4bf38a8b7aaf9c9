"""The tabos client: every OS service of a node, over its gRPC API.

A :class:`Client` holds one channel to one node and one credential. The
realm and user of every call come from that credential (the node decides);
``realm=`` on a call only matters to an operator, who may name any realm.
"""

from __future__ import annotations

import enum
import io
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Union

import grpc

from . import errors
from ._proto import tabos_pb2 as pb
from ._proto import tabos_pb2_grpc as rpc

#: Where a node listens unless told otherwise.
DEFAULT_ADDR = "127.0.0.1:7070"
#: Largest message a node sends or takes.
MESSAGE_BYTES_MAX = 16 << 20
#: Bytes read or written per fs call.
CHUNK_BYTES = 4 << 20
#: Largest credentials file read.
CREDENTIALS_BYTES_MAX = 1 << 20

Payload = Union[bytes, str]
SqlValue = Union[None, int, float, str, bytes]


def _bytes(p: Payload) -> bytes:
    return p.encode() if isinstance(p, str) else bytes(p)


def _word(enum: Any, v: int) -> str:
    """A wire enum's value as the kernel's word for it ("dir", "set",
    "least_loaded", "LC"): its name without the enum's prefix; "unknown"
    for the unspecified value or one a newer node sends."""
    try:
        name = enum.Name(v)
    except ValueError:
        return "unknown"
    prefix = _prefix(enum)
    if name == prefix + "UNSPECIFIED":
        return "unknown"
    word = name.removeprefix(prefix)
    return word if enum is pb.ProcClass else word.lower()


def _wire(enum: Any, what: str, word: str) -> Any:
    """The wire value the kernel's word names; InvalidArgument, listing
    the words, for one that names none (before anything is sent)."""
    prefix = _prefix(enum)
    try:
        return enum.Value(prefix + word.upper())
    except ValueError:
        words = [_word(enum, v) for v in enum.values() if v != 0]
        raise errors.InvalidArgument(f"{what} must be one of {', '.join(words)}, not {word!r}") from None


def _prefix(enum: Any) -> str:
    return enum.Name(0).removesuffix("UNSPECIFIED")


def credentials_path() -> Optional[Path]:
    """The credentials file the CLI uses: ``$TABOS_CREDENTIALS``, else
    ``~/.config/tabos/credentials.json``."""
    if os.environ.get("TABOS_CREDENTIALS"):
        return Path(os.environ["TABOS_CREDENTIALS"])
    home = os.environ.get("HOME")
    return Path(home) / ".config/tabos/credentials.json" if home else None


def _context(name: Optional[str]) -> dict:
    path = credentials_path()
    if path is None or not path.exists():
        return {}
    if path.stat().st_size > CREDENTIALS_BYTES_MAX:
        raise errors.InvalidArgument(f"{path} is larger than {CREDENTIALS_BYTES_MAX} bytes")
    data = json.loads(path.read_text())
    contexts = data.get("contexts", {})
    name = name or os.environ.get("TABOS_CONTEXT") or data.get("current", "")
    if name and name not in contexts:
        raise errors.NotFound(f"no context {name!r} in {path} (contexts: {', '.join(contexts)})")
    return contexts.get(name, {})


#: The channel options of every client: the node's message bound, and a
#: connection of its own (grpcio otherwise shares one TCP connection among
#: a process's channels to one address, and a node counts a connection
#: against the realm of the first credential it carried).
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.use_local_subchannel_pool", 1),
]


def _resolve(
    addr: Optional[str], token: Optional[str], context: Optional[str], tls_ca: Optional[str]
) -> "tuple[str, str, Optional[str]]":
    """The address, credential and TLS authority a client uses, defaulted
    as the CLI's are (see :class:`Client`)."""
    ctx = {} if (addr and token) else _context(context)
    addr = addr or os.environ.get("TABOS_ADDR") or ctx.get("addr") or DEFAULT_ADDR
    token = token or os.environ.get("TABOS_TOKEN") or ctx.get("token")
    if not token:
        raise errors.Unauthenticated(
            "no credential: give token=, set TABOS_TOKEN, or save a context "
            "(tabos up saves the operator's; tabos token create --save-as NAME)"
        )
    tls_ca = tls_ca or ctx.get("tls_ca") or os.environ.get("TABOS_TLS_CA")
    return addr, token.strip(), tls_ca


class ProcState(str, enum.Enum):
    """A proc's state (``ProcState`` of tabos.proto). A ``str`` too, so
    ``status.state == "exited"`` reads as it always did."""

    UNKNOWN = "unknown"
    SPAWNED = "spawned"
    CLAIMED = "claimed"
    RUNNING = "running"
    EXITED = "exited"
    EVICTED = "evicted"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def ended(self) -> bool:
        """Whether the proc has ended: exited, evicted or failed."""
        return self in (ProcState.EXITED, ProcState.EVICTED, ProcState.FAILED)

    @staticmethod
    def _of(v: int) -> "ProcState":
        try:
            name = pb.ProcState.Name(v).removeprefix("PROC_STATE_")
        except ValueError:  # a newer node's state
            return ProcState.UNKNOWN
        return ProcState.__members__.get(name, ProcState.UNKNOWN)


@dataclass(frozen=True)
class ProcStatus:
    """A proc's state as the node records it."""

    realm: str
    pid: str
    state: ProcState
    worker: str
    evict_requested: bool
    exit_status: Optional[int]
    error: str
    spawn_us: int
    start_us: Optional[int]
    exit_us: Optional[int]

    @staticmethod
    def _of(s: pb.ProcStatus) -> "ProcStatus":
        return ProcStatus(
            realm=s.realm,
            pid=s.pid,
            state=ProcState._of(s.state),
            worker=s.worker,
            evict_requested=s.evict_requested,
            exit_status=s.exit_status if s.HasField("exit_status") else None,
            error=s.error,
            spawn_us=s.spawn_us,
            start_us=s.start_us if s.HasField("start_us") else None,
            exit_us=s.exit_us if s.HasField("exit_us") else None,
        )


@dataclass(frozen=True)
class Message:
    """A message taken from a mailbox."""

    seq: int
    sender: str
    payload: bytes
    message_id: str
    sent_us: int


@dataclass(frozen=True)
class NameEntry:
    """A name: a file, a directory or a symlink of the namespace."""

    path: str
    kind: str
    data: bytes
    version: int
    owner: str
    mode: int
    session: str

    @staticmethod
    def _of(e: pb.NameEntry) -> "NameEntry":
        return NameEntry(e.path, _word(pb.NameKind, e.kind), e.data, e.version, e.owner, e.mode, e.session)


@dataclass(frozen=True)
class WatchEvent:
    """One change a watch saw: ``op`` is watching, exists, removed,
    create, set or remove."""

    op: str
    path: str
    version: int


@dataclass(frozen=True)
class FileChange:
    """One change a file watch saw: ``kind`` is ``"watching"`` (first,
    once subscribed), ``"name"`` (a name added or removed: ``what`` is its
    path) or ``"file"`` (a file's data or attributes: ``what`` is its id)."""

    kind: str
    what: str


@dataclass(frozen=True)
class FileStat:
    """A file or directory of the realm's tabos fs."""

    path: str
    type: str
    owner: str
    mode: int
    size: int
    mtime_us: int

    @staticmethod
    def _of(s: pb.FsStat) -> "FileStat":
        return FileStat(s.path, _word(pb.FileType, s.type), s.owner, s.mode, s.size, s.mtime_us)


@dataclass(frozen=True)
class Procedure:
    """A stored procedure installed in the realm."""

    name: str
    language: str
    code_bytes: int
    code_hash: str
    read_only: bool


@dataclass
class CallResult:
    """What a procedure returned, and what it logged."""

    result: bytes
    log: list = field(default_factory=list)


class Client:
    """A connection to a tabos node, acting with one credential.

    ``addr`` and ``token`` default as the CLI's do: ``TABOS_ADDR`` and
    ``TABOS_TOKEN``, else the credentials file's current context (or
    ``context``), else ``127.0.0.1:7070`` (the token has no default: the
    node refuses calls without one). ``addr`` is ``host:port`` or
    ``unix:/path/to/tabos.sock`` (the node's local socket, spoken to in its
    local transport). With ``tls_ca`` (a PEM file) the channel
    is TLS. ``timeout`` (seconds) bounds each call that does not wait by
    nature.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        addr: Optional[str] = None,
        token: Optional[str] = None,
        *,
        context: Optional[str] = None,
        tls_ca: Optional[str] = None,
        timeout: Optional[float] = 30.0,
    ) -> None:
        self.addr, token, tls_ca = _resolve(addr, token, context, tls_ca)
        self._metadata = (("authorization", f"Bearer {token}"),)
        # Kept to dial another node of the cluster with the same credential
        # (a names call following an endpoint symlink).
        self._dialing = (token, tls_ca)
        self.timeout = timeout
        # grpc's channel, or the local transport's (the same calls).
        self._channel: Any
        target = self.addr.removeprefix("http://")
        if tls_ca:
            creds = grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes())
            self._channel = grpc.secure_channel(target.removeprefix("https://"), creds, CHANNEL_OPTIONS)
        elif target.startswith("unix:"):
            # The node's local socket: its local transport, the same calls
            # in frames cheaper than HTTP/2 (``_local``).
            from ._local import LocalChannel

            try:
                self._channel = LocalChannel(target.removeprefix("unix:"))
            except grpc.RpcError as e:
                raise errors.from_rpc(e) from None
        else:
            self._channel = grpc.insecure_channel(target, CHANNEL_OPTIONS)
        self._procs = rpc.ProcsStub(self._channel)
        self._ipc = rpc.IpcStub(self._channel)
        self._names = rpc.NamesStub(self._channel)
        self._fs = rpc.FsStub(self._channel)
        self._sql = rpc.SqlStub(self._channel)
        self._procedures = rpc.ProceduresStub(self._channel)
        self._tokens = rpc.TokensStub(self._channel)
        self._node = rpc.NodeStub(self._channel)
        self.names = Names(self)
        self.fs = Fs(self)
        self.procedures = Procedures(self)
        self.mr = MapReduce(self, token)
        from .workflows import Workflows  # imports this module

        self.workflows = Workflows(self)
        from .graphs import Graphs

        self.graphs = Graphs(self)

    # -- plumbing -------------------------------------------------------

    def _call(self, method: Any, request: Any, *, wait: bool = False) -> Any:
        try:
            return method(
                request,
                metadata=self._metadata,
                timeout=None if wait else self.timeout,
            )
        except grpc.RpcError as e:
            raise errors.from_rpc(e) from None

    def _stream(self, method: Any, request: Any) -> Iterator[Any]:
        call = method(request, metadata=self._metadata)
        try:
            for item in call:
                yield item
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc(e) from None
        finally:
            call.cancel()

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def _is_cluster_node(self, endpoint: str) -> bool:
        """Whether ``endpoint`` is the API address of a node this
        credential may list."""
        try:
            nodes = self._call(self._node.ListNodes, pb.ListNodesRequest()).nodes
        except errors.TabosError:
            return False
        return any(n.address and _bare(n.address) == _bare(endpoint) for n in nodes)

    def _dial(self, addr: str) -> "Client":
        """A client of the node at ``addr`` with this one's credential."""
        token, tls_ca = self._dialing
        return Client(addr, token, tls_ca=tls_ca, timeout=self.timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- who and where --------------------------------------------------

    def whoami(self) -> dict:
        """The credential in use: its id, realm, user, role and pid."""
        return _whoami(self._call(self._tokens.WhoAmI, pb.Empty()))

    def status(self) -> dict:
        """The node's status: version, backend, partitions, load, and each
        door's connection limits and use (a tenant sees its own realm's
        count only)."""
        s = self._call(self._node.Status, pb.StatusRequest())
        return {
            "version": s.version,
            "backend": s.backend,
            "partitions": s.partitions,
            "durability": s.durability,
            "busy_cores": s.busy_cores,
            "connections": s.connections,
            "doors": [
                {
                    "door": d.door,
                    "open": d.open,
                    "connections_max": d.connections_max,
                    "unauthenticated": d.unauthenticated,
                    "unauthenticated_max": d.unauthenticated_max,
                    "unauthenticated_per_source_max": d.unauthenticated_per_source_max,
                    "per_realm_max": d.per_realm_max,
                    "by_realm": dict(d.by_realm),
                }
                for d in s.doors
            ],
            "realm_caps": [
                {
                    "what": c.what,
                    "per_realm_max": c.per_realm_max,
                    "by_realm": dict(c.by_realm),
                }
                for c in s.realm_caps
            ],
        }

    def backup(self, dest: str) -> dict:
        """Backs the node up into ``dest``, a new directory on its machine
        (operator; a node on PostgreSQL: pg_dump of its database, run on its
        machine): every partition at one point, the block
        store and a manifest. Restore with ``tabos restore DEST --data DIR``."""
        b = self._call(self._node.Backup, pb.BackupRequest(dest=dest))
        return {
            "dest": b.dest,
            "taken_us": b.taken_us,
            "partitions": b.partitions,
            "files": [{"name": f.name, "bytes": f.bytes, "sha256": f.sha256} for f in b.files],
            "block_store": b.block_store,
            "segments": b.segments,
            "frozen_us": b.frozen_us,
        }

    # -- realms ---------------------------------------------------------

    def realms(self) -> list:
        """Realms with their usage, quotas and settings, as dicts (see
        :meth:`realm`): every realm for an operator, the caller's own
        otherwise."""
        r = self._call(self._procs.ListRealms, pb.ListRealmsRequest())
        return [_realm(i) for i in r.realms]

    def realm(self, name: str) -> dict:
        """Realm ``name``: its ``live_procs``, ``cores``, ``mem_mb``,
        ``stored_bytes`` (and by class in ``stored``), ``mailbox_bytes``,
        ``procedures``, each quota (``quota_procs`` ... ``None``: none),
        ``host_paths``, ``host_network``, ``scheduler``, ``retention_s``
        (``None``: kept until pruned), ``provenance`` (``"procs"`` or
        ``"all"``) and ``created_us``. NotFound if the caller sees no such
        realm."""
        for r in self.realms():
            if r["realm"] == name:
                return r
        raise errors.NotFound(f"no realm {name!r} (or not one this credential may see)")

    def create_realm(self, name: str, *, scheduler: str = "fifo") -> dict:
        """Creates realm ``name`` (operator) placing its procs by
        ``scheduler`` (fifo, locality, least_loaded); returns its first
        admin credential, ``{"token", "id"}`` — shown once."""
        r = self._call(
            self._procs.CreateRealm,
            pb.CreateRealmRequest(realm=name, scheduler=_wire(pb.Scheduler, "scheduler", scheduler)),
        )
        return {"token": r.admin_token, "id": r.admin_token_id}

    def set_realm(
        self,
        name: str,
        *,
        procs: Optional[int] = None,
        cores: Optional[int] = None,
        mem_mb: Optional[int] = None,
        storage_mb: Optional[int] = None,
        mailbox_mb: Optional[int] = None,
        procedures: Optional[int] = None,
        host_paths: Optional[list] = None,
        host_network: Optional[bool] = None,
        retention_s: Optional[int] = None,
        provenance: Optional[str] = None,
        clear: Sequence[str] = (),
    ) -> dict:
        """Sets realm ``name``'s quotas and settings (operator), as ``tabos
        realm set`` does: what is given changes, the rest stays; ``clear``
        removes quotas ("procs", "cores", "memory", "storage", "mailbox",
        "procedures"), the host paths ("host-paths") or the retention
        ("retention"). ``provenance`` is ``"procs"`` (what procs do, the
        default) or ``"all"`` (also what clients acting for no proc read,
        write, send and receive). Returns the realm as :meth:`realm`
        gives it."""
        req = _set_realm_request(
            name,
            procs=procs,
            cores=cores,
            mem_mb=mem_mb,
            storage_mb=storage_mb,
            mailbox_mb=mailbox_mb,
            procedures=procedures,
            host_paths=host_paths,
            host_network=host_network,
            retention_s=retention_s,
            provenance=provenance,
            clear=clear,
        )
        return _realm(self._call(self._procs.SetRealm, req))

    def remove_realm(self, name: str) -> int:
        """Deletes realm ``name`` and everything of it (operator; refused
        while it has live procs); returns the rows deleted."""
        return self._call(self._procs.RemoveRealm, pb.RemoveRealmRequest(realm=name)).rows

    # -- procs ----------------------------------------------------------

    def spawn(
        self,
        program: str,
        *args: str,
        pid: Optional[str] = None,
        kind: str = "native",
        proc_class: str = "LC",
        cores: int = 1,
        mem_mb: int = 0,
        env: Optional[dict] = None,
        parent: Optional[str] = None,
        home_node: Optional[str] = None,
        host_paths: Sequence[str] = (),
        scope: Optional[str] = None,
        restartable: bool = False,
        max_restarts: Optional[int] = None,
        upload: Optional[Union[str, Path]] = None,
        code: Optional[str] = None,
        realm: str = "",
    ) -> str:
        """Spawns a proc; returns its pid.

        ``kind`` is native (a program on the node, ``fs:/path`` of the
        realm's files, or ``./path`` of its code) or wasm (a module, found
        the same ways); ``proc_class`` LC (reserves ``cores``) or BE (runs
        while the node has room; 0 cores for a light proc). ``scope``
        limits the proc's own credential to mailboxes (``"send:M
        recv:proc/PID"``). A ``restartable`` proc runs again elsewhere when
        its node is lost, at most ``max_restarts`` times (the node's
        default, 10, unless given), then fails. ``upload`` (a file or
        directory of yours) is put into the realm's files as code
        (:meth:`upload_code`) and is the proc's working directory, read-only;
        ``code`` names code uploaded before by its hash.
        """
        if upload is not None and code is not None:
            raise errors.InvalidArgument("give upload or code, not both")
        if upload is not None:
            code = self.upload_code(upload, realm=realm)
        d = _descriptor(
            program, args, pid=pid, kind=kind, proc_class=proc_class, cores=cores, mem_mb=mem_mb,
            env=env, parent=parent, home_node=home_node, host_paths=host_paths, scope=scope,
            restartable=restartable, max_restarts=max_restarts,
        )
        d.code = code or ""
        return self._call(self._procs.Spawn, pb.SpawnRequest(realm=realm, proc=d)).pid

    def upload_code(self, local: Union[str, Path], *, realm: str = "") -> str:
        """Puts the file or directory ``local`` into the realm's files as
        code, under ``/code/<hash>`` (once: the same content is not written
        again), and returns its content hash, which :meth:`spawn` takes as
        ``code``. It counts against the realm's storage quota."""
        from . import code as _code

        return _code.upload(self, os.fspath(local), realm=realm).hash

    def wait(self, pid: str, *, until: str = "exit", realm: str = "") -> ProcStatus:
        """Waits until proc ``pid`` has started (``until="start"``), exited
        (``"exit"``) or been asked to leave (``"evict"``)."""
        method = {
            "start": self._procs.WaitStart,
            "exit": self._procs.WaitExit,
            "evict": self._procs.WaitEvict,
        }.get(until)
        if method is None:
            raise errors.InvalidArgument(f"until must be start, exit or evict, not {until!r}")
        return ProcStatus._of(self._call(method, pb.PidRequest(realm=realm, pid=pid), wait=True))

    def evict(self, pid: str, *, realm: str = "") -> None:
        """Asks proc ``pid`` to leave (SIGTERM, then SIGKILL)."""
        self._call(self._procs.Evict, pb.PidRequest(realm=realm, pid=pid))

    def proc(self, pid: str, *, realm: str = "") -> ProcStatus:
        """Proc ``pid``'s status now."""
        return ProcStatus._of(self._call(self._procs.Status, pb.PidRequest(realm=realm, pid=pid)))

    def ps(self, *, state: Optional[str] = None, realm: str = "") -> list:
        """The realm's procs, newest first (an admin's view: SQL over
        ``ps``), as dicts; ``state`` filters (spawned, running, exited,
        evicted, failed...)."""
        sql = "SELECT * FROM ps"
        params: list = []
        if state:
            sql += " WHERE state = $1"
            params.append(state)
        return self.sql(sql + " ORDER BY spawn_us DESC", *params, realm=realm)

    def logs(
        self,
        pid: str,
        stream: str = "stdout",
        *,
        realm: str = "",
        tail: int = 0,
        since_us: int = 0,
    ) -> bytes:
        """A proc's ``stdout`` or ``stderr`` as the cluster keeps it (its
        newest 8 MiB), from any node, also after the proc's node is gone:
        only the last ``tail`` lines, or what was written since
        ``since_us`` (µs since the epoch), when given."""
        req = pb.LogsRequest(
            realm=realm, pid=pid, stream=_wire(pb.LogStream, "stream", stream),
            tail_lines=tail, since_us=since_us,
        )
        return self._call(self._procs.Logs, req).data

    def follow_logs(
        self, pid: str, stream: str = "stdout", *, realm: str = "", tail: int = 0
    ) -> Iterator[bytes]:
        """A proc's log so far (or its last ``tail`` lines), then each piece
        it writes as it writes it, until it has ended (no polling: the node
        pushes)."""
        req = pb.LogsRequest(
            realm=realm, pid=pid, stream=_wire(pb.LogStream, "stream", stream), tail_lines=tail
        )
        for r in self._stream(self._procs.FollowLogs, req):
            yield r.data

    # -- messages -------------------------------------------------------

    def create_mailbox(self, name: str, *, bytes_max: int = 0, realm: str = "") -> None:
        """Creates mailbox ``name`` (``bytes_max`` 0: the node's default
        bound)."""
        self._call(
            self._ipc.CreateMailbox,
            pb.CreateMailboxRequest(realm=realm, name=name, bytes_max=bytes_max),
        )

    def remove_mailbox(self, name: str, *, realm: str = "") -> int:
        """Removes mailbox ``name``; returns the messages it dropped."""
        return self._call(
            self._ipc.RemoveMailbox, pb.RemoveMailboxRequest(realm=realm, name=name)
        ).dropped

    def send(
        self,
        to: str,
        payload: Payload,
        *,
        sender: str = "",
        message_id: Optional[str] = None,
        realm: str = "",
    ) -> int:
        """Sends one message to mailbox ``to`` (``proc/PID`` or a name);
        returns its sequence number. A ``message_id`` makes a resend from
        the same sender count once."""
        out = pb.Outgoing(to=to, payload=_bytes(payload), message_id=message_id or "")
        # `from` is a Python keyword: given by name.
        named: Dict[str, Any] = {"from": sender}
        r = self._call(self._ipc.Send, pb.SendRequest(realm=realm, messages=[out], **named))
        return r.sent[0].seq if r.sent else 0

    def recv(self, mailbox: str, *, max: int = 1, timeout: float = 0, realm: str = "") -> list:
        """Takes up to ``max`` messages, waiting up to ``timeout`` seconds
        for the first."""
        req = pb.RecvRequest(realm=realm, mailbox=mailbox, max=max, timeout_ms=int(timeout * 1000))
        r = self._call(self._ipc.Recv, req, wait=True)
        return [_message(m) for m in r.messages]

    def messages(self, mailbox: str, *, batch: int = 64, realm: str = "") -> Iterator[Message]:
        """Every message of ``mailbox`` as it arrives, each taken once, for
        as long as the iterator is used (a stream: no polling)."""
        req = pb.RecvRequest(realm=realm, mailbox=mailbox, max=batch)
        for r in self._stream(self._ipc.RecvStream, req):
            for m in r.messages:
                yield _message(m)

    # -- SQL ------------------------------------------------------------

    def sql(self, query: str, *params: SqlValue, realm: str = "", max_rows: int = 0) -> list:
        """Runs a read-only query over the OS state; rows as dicts. An
        operator sees every realm unless it names one; a realm's admin
        sees its realm. ``$1``, ``$2``... are ``params``."""
        req = pb.SqlRequest(sql=query, params=[_value(p) for p in params], realm=realm, max_rows=max_rows)
        return _rows(self._call(self._sql.Query, req))


def _descriptor(
    program: str,
    args: Sequence[str],
    *,
    pid: Optional[str],
    kind: str,
    proc_class: str,
    cores: int,
    mem_mb: int,
    env: Optional[dict],
    parent: Optional[str],
    home_node: Optional[str],
    host_paths: Sequence[str],
    scope: Optional[str],
    restartable: bool,
    max_restarts: Optional[int],
) -> pb.ProcDescriptor:
    """A spawn's descriptor (:meth:`Client.spawn`'s arguments), checked."""
    if max_restarts is not None and not restartable:
        raise errors.InvalidArgument("max_restarts goes with restartable=True")
    d = pb.ProcDescriptor(
        pid=pid or "",
        parent=parent or "",
        kind=_wire(pb.ProcKind, "kind", kind),
        program=program,
        args=list(args),
        env=dict(env or {}),
        cores=cores,
        mem_mb=mem_mb,
        home_node=home_node or "",
        host_paths=list(host_paths),
        scope=scope or "",
        restartable=restartable,
        # `class` is a Python keyword: given by name.
        **{"class": _wire(pb.ProcClass, "proc_class", proc_class)},
    )
    if max_restarts is not None:
        d.max_restarts = max_restarts
    return d


def _set_realm_request(
    name: str,
    *,
    procs: Optional[int] = None,
    cores: Optional[int] = None,
    mem_mb: Optional[int] = None,
    storage_mb: Optional[int] = None,
    mailbox_mb: Optional[int] = None,
    procedures: Optional[int] = None,
    host_paths: Optional[list] = None,
    host_network: Optional[bool] = None,
    retention_s: Optional[int] = None,
    provenance: Optional[str] = None,
    clear: Sequence[str] = (),
) -> pb.SetRealmRequest:
    """The request of :meth:`Client.set_realm` (both clients build it
    here): what is given is set, the rest left as it is."""
    req = pb.SetRealmRequest(realm=name, clear=list(clear), host_paths=list(host_paths or []))
    for field_name, value in (
        ("procs", procs),
        ("cores", cores),
        ("mem_mb", mem_mb),
        ("storage_mb", storage_mb),
        ("mailbox_mb", mailbox_mb),
        ("procedures", procedures),
        ("host_network", host_network),
        ("retention_s", retention_s),
    ):
        if value is not None:
            setattr(req, field_name, value)
    if provenance is not None:
        req.provenance = _wire(pb.Provenance, "provenance", provenance)
    return req


def _realm(r: pb.RealmInfo) -> dict:
    """A realm's usage, quotas and settings as a dict (``None`` for an
    absent quota, retention or proc uid)."""

    def opt(name: str) -> Optional[int]:
        return getattr(r, name) if r.HasField(name) else None

    return {
        "realm": r.realm,
        "live_procs": r.live_procs,
        "quota_procs": opt("quota_procs"),
        "cores": r.cores,
        "quota_cores": opt("quota_cores"),
        "mem_mb": r.mem_mb,
        "quota_mem_mb": opt("quota_mem_mb"),
        "stored_bytes": r.stored_bytes,
        "stored": {_word(pb.StorageClass, getattr(b, "class")): b.bytes for b in r.stored},
        "quota_storage_mb": opt("quota_storage_mb"),
        "mailbox_bytes": r.mailbox_bytes,
        "quota_mailbox_mb": opt("quota_mailbox_mb"),
        "procedures": r.procedures,
        "quota_procedures": opt("quota_procedures"),
        "host_paths": list(r.host_paths),
        "host_network": r.host_network,
        "proc_uid": opt("proc_uid"),
        "scheduler": _word(pb.Scheduler, r.scheduler),
        "created_us": r.created_us,
        "retention_s": opt("retention_s"),
        "provenance": _word(pb.Provenance, r.provenance),
    }


def _whoami(t: Any) -> dict:
    return {"id": t.id, "realm": t.realm, "user": t.user, "role": _word(pb.Role, t.role), "pid": t.pid}


def _rows(r: Any) -> list:
    """A SQL answer's rows as dicts."""
    cols = list(r.columns)
    return [dict(zip(cols, (_from_value(v) for v in row.values))) for row in r.rows]


def _message(m: pb.Message) -> Message:
    return Message(m.seq, m.sender, m.payload, m.message_id, m.sent_us)


def _value(v: SqlValue) -> pb.Value:
    if v is None:
        return pb.Value(null=True)
    if isinstance(v, bool):
        return pb.Value(int=int(v))
    if isinstance(v, int):
        return pb.Value(int=v)
    if isinstance(v, float):
        return pb.Value(real=v)
    if isinstance(v, str):
        return pb.Value(text=v)
    if isinstance(v, (bytes, bytearray)):
        return pb.Value(blob=bytes(v))
    raise errors.InvalidArgument(f"a SQL parameter is None, int, float, str or bytes, not {type(v)}")


def _from_value(v: pb.Value) -> SqlValue:
    kind = v.WhichOneof("kind")
    return None if kind in (None, "null") else getattr(v, kind)


#: Most symlinks one names call follows: a namespace's chains are short,
#: a loop is not.
HOPS_MAX = 8


def _joined(target: str, rest: str) -> str:
    """Where a path goes on past a symlink: ``rest`` under ``target`` (an
    endpoint's root when ``target`` is empty)."""
    base = target.rstrip("/")
    if not rest:
        return base or "/"
    return base + rest


def _bare(addr: str) -> str:
    """``host:port`` of an address given with or without a scheme."""
    return addr.split("://", 1)[-1].rstrip("/")


class Names:
    """The namespace: files, directories and symlinks with versions,
    sessions, watches and elections (``client.names``)."""

    def __init__(self, c: Client) -> None:
        self._c = c

    def _following(self, path: str, op: Callable[["Client", str], Any]) -> Any:
        """Runs ``op(client, path)`` (one names call), following the
        symlinks it meets, as σOS's client libraries do: a path target on
        this node, an endpoint on that node with this client's credential —
        but only an endpoint that is a node of the cluster this credential
        may list (a symlink anyone could write must not send the credential
        elsewhere; any other comes back as :class:`Mounted`) — at most
        :data:`HOPS_MAX` times (then :class:`TooManyHops`)."""
        c, at, dialed = self._c, path, []
        try:
            for _ in range(HOPS_MAX + 1):
                try:
                    return op(c, at)
                except errors.Mounted as m:
                    if m.target.startswith("/"):
                        at = _joined(m.target, m.rest)
                        continue
                    if not c._is_cluster_node(m.target):
                        raise
                    c = c._dial(_bare(m.target))
                    dialed.append(c)
                    at = _joined("", m.rest)
            raise errors.TooManyHops(f"{path}: more than {HOPS_MAX} symlinks to follow (a loop?)")
        finally:
            for d in dialed:
                d.close()

    def get(self, path: str, *, realm: str = "") -> NameEntry:
        """The entry at ``path`` (through the symlinks on the way)."""
        return NameEntry._of(self._following(path, lambda c, p: c._call(c._names.Get, pb.NameRequest(realm=realm, path=p))))

    def set(self, path: str, data: Payload, *, if_version: Optional[int] = None, realm: str = "") -> int:
        """Creates or replaces file ``path``'s data (at ``if_version``
        only, when given); returns the new version."""
        def op(c: Client, p: str) -> int:
            req = pb.SetNameRequest(realm=realm, path=p, data=_bytes(data))
            if if_version is not None:
                req.if_version = if_version
            return int(c._call(c._names.Set, req).version)

        return int(self._following(path, op))

    def create(
        self,
        path: str,
        data: Payload = b"",
        *,
        kind: str = "file",
        session: Optional[str] = None,
        realm: str = "",
    ) -> int:
        """Creates ``path`` (a file, dir or symlink); with a ``session`` it
        is ephemeral: removed when the session ends."""
        def op(c: Client, p: str) -> int:
            req = pb.CreateNameRequest(
                realm=realm, path=p, kind=_wire(pb.NameKind, "kind", kind), data=_bytes(data), session=session or ""
            )
            return int(c._call(c._names.Create, req).version)

        return int(self._following(path, op))

    def mkdir(self, path: str, *, realm: str = "") -> None:
        """Creates directory ``path`` and its missing parents."""
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            try:
                self.create("/" + "/".join(parts[:i]), kind="dir", realm=realm)
            except errors.AlreadyExists:
                pass

    def remove(self, path: str, *, if_version: Optional[int] = None, realm: str = "") -> None:
        """Removes ``path`` (an empty directory, a file, a symlink)."""
        def op(c: Client, p: str) -> None:
            req = pb.RemoveNameRequest(realm=realm, path=p)
            if if_version is not None:
                req.if_version = if_version
            c._call(c._names.Remove, req)

        self._following(path, op)

    def ls(self, path: str = "/", *, realm: str = "") -> list:
        """Directory ``path``'s entries."""
        r = self._following(path, lambda c, p: c._call(c._names.ReadDir, pb.NameRequest(realm=realm, path=p)))
        return [NameEntry._of(e) for e in r.entries]

    def watch(self, path: str, *, mode: str = "dir", realm: str = "") -> Iterator[WatchEvent]:
        """Changes at ``path`` as they happen: ``mode="dir"`` every change in
        a directory; ``"exists"`` one event once it exists; ``"removed"`` one
        once it does not."""
        req = pb.WatchRequest(realm=realm, path=path, mode=_wire(pb.WatchMode, "mode", mode))
        for e in self._c._stream(self._c._names.Watch, req):
            yield WatchEvent(_word(pb.WatchOp, e.op), e.path, e.version)

    def session(self, owner: str = "", *, ttl: float = 10.0, realm: str = "") -> "Session":
        """Opens a session renewed in the background every third of
        ``ttl`` (seconds); its ephemeral names go when it ends."""
        return Session(self._c, owner, ttl, realm)

    def election(self, directory: str, *, realm: str = "") -> "Election":
        """Leader election in ``directory`` (the leader holds the ephemeral
        symlink ``directory/leader``)."""
        return Election(self._c, directory, realm)


class Session:
    """A namespace session kept alive by a thread (a context manager:
    closing it removes its ephemeral names at once)."""

    def __init__(self, c: Client, owner: str, ttl: float, realm: str) -> None:
        self._c, self._realm = c, realm
        req = pb.OpenSessionRequest(realm=realm, owner=owner, ttl_ms=int(ttl * 1000))
        self.id: str = c._call(c._names.OpenSession, req).session
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._renew, args=(ttl / 3,), daemon=True)
        self._thread.start()

    def _renew(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self._c._call(self._c._names.RenewSession, pb.SessionRequest(realm=self._realm, session=self.id))
            except errors.TabosError:
                self.lost.set()
                return

    def close(self) -> None:
        """Ends the session now."""
        self._stop.set()
        self._c._call(self._c._names.CloseSession, pb.SessionRequest(realm=self._realm, session=self.id))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Election:
    """σOS's leader election: :meth:`campaign` returns once elected (with
    the new epoch); the leader symlink goes with the session."""

    def __init__(self, c: Client, directory: str, realm: str) -> None:
        self._c, self._dir, self._realm = c, directory.rstrip("/"), realm

    @property
    def _leader(self) -> str:
        return f"{self._dir}/leader"

    def campaign(self, session: Session, me: str) -> int:
        """Waits until ``session`` holds the leadership (woken by a watch,
        not polling); returns the new epoch."""
        self._c.names.mkdir(self._dir, realm=self._realm)
        while True:
            try:
                self._c.names.create(self._leader, me, kind="symlink", session=session.id, realm=self._realm)
                break
            except errors.AlreadyExists:
                for _ in self._c.names.watch(self._leader, mode="removed", realm=self._realm):
                    break
        req = pb.NameRequest(realm=self._realm, path=f"{self._dir}/epoch")
        return self._c._call(self._c._names.AdvanceEpoch, req).epoch

    def leader(self) -> Optional[str]:
        """Who leads now, if anyone."""
        try:
            return self._c.names.get(self._leader, realm=self._realm).data.decode()
        except errors.NotFound:
            return None

    def resign(self, session: Session) -> None:
        """Steps down if ``session`` leads."""
        try:
            e = self._c.names.get(self._leader, realm=self._realm)
        except errors.NotFound:
            return
        if e.session == session.id:
            try:
                self._c.names.remove(self._leader, if_version=e.version, realm=self._realm)
            except errors.NotFound:
                pass


class File(io.RawIOBase):
    """A file of the realm's tabos fs, opened by :meth:`Fs.open`: read,
    write, seek and tell as with a local file."""

    def __init__(self, fs: "Fs", path: str, mode: str, realm: str, user: str) -> None:
        super().__init__()
        self._fs, self._path, self._realm, self._user = fs, path, realm, user
        self._mode = mode
        self._pos = 0
        # A named pipe's reads and writes wait for the other end: no timeout.
        self._pipe = False
        c = fs._c

        def stat() -> Any:
            return c._call(c._fs.Stat, pb.FsPathRequest(realm=realm, user=user, path=path))

        if "w" in mode:
            try:
                c._call(c._fs.Create, pb.FsCreateRequest(realm=realm, user=user, path=path, mode=0o644))
            except errors.AlreadyExists:
                self._pipe = stat().type == pb.FILE_TYPE_FIFO
                if not self._pipe:
                    c._call(c._fs.Truncate, pb.FsTruncateRequest(realm=realm, user=user, path=path, size=0))
        elif "a" in mode:
            try:
                st = stat()
                self._pos, self._pipe = st.size, st.type == pb.FILE_TYPE_FIFO
            except errors.NotFound:
                c._call(c._fs.Create, pb.FsCreateRequest(realm=realm, user=user, path=path, mode=0o644))
        else:
            # NotFound now, not at the first read.
            self._pipe = stat().type == pb.FILE_TYPE_FIFO

    def readable(self) -> bool:
        return "r" in self._mode or "+" in self._mode

    def writable(self) -> bool:
        return any(m in self._mode for m in "wa+")

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        c = self._fs._c
        n = min(len(b), CHUNK_BYTES)
        req = pb.FsReadRequest(realm=self._realm, user=self._user, path=self._path, offset=self._pos, len=n)
        data = c._call(c._fs.Read, req, wait=self._pipe).data
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def write(self, b: Any) -> int:
        c = self._fs._c
        data = bytes(b)
        for i in range(0, len(data), CHUNK_BYTES):
            chunk = data[i : i + CHUNK_BYTES]
            req = pb.FsWriteRequest(
                realm=self._realm, user=self._user, path=self._path, offset=self._pos, data=chunk
            )
            c._call(c._fs.Write, req, wait=self._pipe)
            self._pos += len(chunk)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self._fs.stat(self._path, realm=self._realm).size + offset
        return self._pos

    def tell(self) -> int:
        return self._pos


def _file_changes(m: pb.FsChanges) -> Iterator[FileChange]:
    """What one message of a file watch tells, in order."""
    if m.watching:
        yield FileChange("watching", "")
    for ch in m.changes:
        named = ch.kind == pb.FsChangeKind.FS_CHANGE_KIND_NAME
        yield FileChange(_word(pb.FsChangeKind, ch.kind), ch.path if named else ch.id)


def _mkdir_paths(path: str, parents: bool) -> list:
    """The directories a mkdir of ``path`` makes, in order: it alone, or
    with ``parents`` every ancestor too."""
    if not parents:
        return [path]
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _rename_request(src: str, dst: str, realm: str, user: str) -> pb.FsRenameRequest:
    # `from` is a Python keyword: the field is given by name.
    named: Dict[str, Any] = {"from": src}
    return pb.FsRenameRequest(realm=realm, user=user, to=dst, **named)


class Fs:
    """The realm's files (``client.fs``), as the credential's user."""

    def __init__(self, c: Client) -> None:
        self._c = c

    def open(self, path: str, mode: str = "r", *, realm: str = "", user: str = "") -> Any:
        """Opens ``path`` as the builtin ``open`` would: ``"r"``, ``"w"``,
        ``"a"``, ``"r+"`` for text (UTF-8), with ``b`` for bytes."""
        raw = File(self, path, mode.replace("t", ""), realm, user)
        buffered: Any
        if "r" in mode and "+" not in mode:
            buffered = io.BufferedReader(raw, CHUNK_BYTES)
        elif "+" in mode:
            buffered = io.BufferedRandom(raw, CHUNK_BYTES)
        else:
            buffered = io.BufferedWriter(raw, CHUNK_BYTES)
        return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding="utf-8")

    def watch(self, *, realm: str = "", user: str = "") -> Iterator[FileChange]:
        """The realm's file changes as they commit, until the iterator is
        closed: first ``FileChange("watching", "")`` once subscribed, then
        each change in commit order — a name only where the user may list
        its directory. A watch that falls behind the node's change feed raises
        ``TabosError`` with code ``DATA_LOSS``: drop what was cached from it
        and watch again."""
        req = pb.FsWatchRequest(realm=realm, user=user)
        for m in self._c._stream(self._c._fs.Watch, req):
            yield from _file_changes(m)

    def stat(self, path: str, *, realm: str = "", user: str = "") -> FileStat:
        """A file's or directory's metadata."""
        s = self._c._call(self._c._fs.Stat, pb.FsPathRequest(realm=realm, user=user, path=path))
        return FileStat._of(s)

    def ls(self, path: str = "/", *, realm: str = "", user: str = "") -> list:
        """A directory's entries."""
        r = self._c._call(self._c._fs.ReadDir, pb.FsPathRequest(realm=realm, user=user, path=path))
        return [FileStat._of(s) for s in r.entries]

    def mkdir(self, path: str, *, mode: int = 0o755, parents: bool = False, realm: str = "", user: str = "") -> None:
        """Makes a directory (and its missing parents with ``parents``)."""
        for p in _mkdir_paths(path, parents):
            try:
                self._c._call(self._c._fs.Mkdir, pb.FsCreateRequest(realm=realm, user=user, path=p, mode=mode))
            except errors.AlreadyExists:
                if not parents:
                    raise

    def mkfifo(self, path: str, *, mode: int = 0o644, realm: str = "", user: str = "") -> FileStat:
        """Makes a named pipe: ``open(path, "rb").read()`` waits for a
        writer's bytes and ends at EOF once writers have been and gone (a
        write by path, or a closed handle); a write waits for room (64 KiB
        buffered) and raises :class:`BrokenPipe` once its readers have gone."""
        s = self._c._call(self._c._fs.Mkfifo, pb.FsCreateRequest(realm=realm, user=user, path=path, mode=mode))
        return FileStat._of(s)

    def remove(self, path: str, *, realm: str = "", user: str = "") -> None:
        """Removes a file, or an empty directory."""
        req = pb.FsPathRequest(realm=realm, user=user, path=path)
        s = self._c._call(self._c._fs.Stat, req)
        if s.type == pb.FILE_TYPE_DIR:
            self._c._call(self._c._fs.Rmdir, req)
        else:
            self._c._call(self._c._fs.Unlink, req)

    def rename(self, src: str, dst: str, *, realm: str = "", user: str = "") -> None:
        """Moves ``src`` to ``dst``."""
        self._c._call(self._c._fs.Rename, _rename_request(src, dst, realm, user))

    def read_bytes(self, path: str, *, realm: str = "") -> bytes:
        """The whole file."""
        with self.open(path, "rb", realm=realm) as f:
            return f.read()

    def write_bytes(self, path: str, data: bytes, *, realm: str = "") -> None:
        """Replaces the file with ``data``."""
        with self.open(path, "wb", realm=realm) as f:
            f.write(data)


class Procedures:
    """Stored procedures (``client.procedures``): JavaScript or wasm run
    next to the data, in the caller's transaction."""

    def __init__(self, c: Client) -> None:
        self._c = c

    def install(
        self,
        name: str,
        code: Payload,
        *,
        language: str = "js",
        read_only: bool = False,
        memory_bytes: int = 0,
        timeout_ms: int = 0,
        realm: str = "",
    ) -> Procedure:
        """Installs (or replaces) procedure ``name`` (``language`` js or
        wasm)."""
        req = pb.InstallProcedureRequest(
            realm=realm,
            name=name,
            language=language,
            code=_bytes(code),
            memory_bytes=memory_bytes,
            timeout_ms=timeout_ms,
            read_only=read_only,
        )
        return _procedure(self._c._call(self._c._procedures.Install, req))

    def call(self, name: str, args: Payload = b"", *, realm: str = "") -> CallResult:
        """Calls procedure ``name`` with ``args``: one transaction."""
        r = self._c._call(self._c._procedures.Call, pb.CallProcedureRequest(realm=realm, name=name, args=_bytes(args)))
        return CallResult(r.result, list(r.log))

    def list(self, *, realm: str = "") -> list:
        """The realm's procedures."""
        r = self._c._call(self._c._procedures.List, pb.ListProceduresRequest(realm=realm))
        return [_procedure(p) for p in r.procedures]

    def remove(self, name: str, *, realm: str = "") -> None:
        """Removes procedure ``name``."""
        self._c._call(self._c._procedures.Remove, pb.ProcedureRequest(realm=realm, name=name))


def _procedure(p: pb.ProcedureInfo) -> Procedure:
    return Procedure(p.name, p.language, p.code_bytes, p.code_hash, p.read_only)


class MapReduce:
    """MapReduce jobs (``client.mr``). A job's planner and controller are
    the node's Rust code in the ``tabos`` binary (``$TABOS_BIN``, else
    ``tabos`` on ``PATH``), which this drives with ``--json`` and this
    client's address and credential: the job runs on the node, not here."""

    #: Longest a job control call (not ``run``) may take, in seconds.
    CONTROL_TIMEOUT = 120.0

    def __init__(self, c: Client, token: str) -> None:
        self._c, self._token = c, token

    def _tabos(self, *args: str, timeout: Optional[float]) -> Any:
        import shutil
        import subprocess

        exe = os.environ.get("TABOS_BIN") or shutil.which("tabos")
        if not exe:
            raise errors.Unavailable("the tabos binary is needed for MapReduce: set TABOS_BIN or put it on PATH")
        env = dict(os.environ, TABOS_ADDR=self._c.addr, TABOS_TOKEN=self._token)
        try:
            done = subprocess.run(
                [exe, *args, "--json"], env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as e:
            raise errors.DeadlineExceeded(f"tabos {' '.join(args)} took over {timeout} s") from e
        if done.returncode != 0:
            message = done.stderr.strip().removeprefix("error: ")
            if "no job" in message:
                raise errors.NotFound(message)
            raise errors.FailedPrecondition(message or f"tabos {args[0]} failed")
        return json.loads(done.stdout)

    def run(
        self,
        kind: str,
        inputs: Sequence[str],
        *,
        pattern: Optional[str] = None,
        in_fs: bool = False,
        reducers: int = 4,
        top: int = 20,
        realm: str = "",
        timeout: Optional[float] = None,
    ) -> dict:
        """Runs a ``wordcount`` or ``grep`` job (``pattern``) over ``inputs``
        (files of the node's machine, or with ``in_fs`` of the realm's tabos
        fs) and waits for it: its id, timings and ``top`` results."""
        if kind not in ("wordcount", "grep"):
            raise errors.InvalidArgument(f"kind must be wordcount or grep, not {kind!r}")
        args = ["mr", kind, "--reducers", str(reducers), "--top", str(top)]
        if kind == "grep":
            if not pattern:
                raise errors.InvalidArgument("grep needs a pattern")
            args += ["--pattern", pattern]
        if in_fs:
            args.append("--in-fs")
        for i in inputs:
            args += ["--input", i]
        if realm:
            args += ["--realm", realm]
        return self._tabos(*args, timeout=timeout)

    def run_programs(
        self,
        inputs: Sequence[str],
        *,
        map: Union[str, Path],
        reduce: Union[str, Path],
        combine: Optional[Union[str, Path]] = None,
        code: Optional[Union[str, Path]] = None,
        args: Sequence[str] = (),
        time_limit: int = 600,
        in_fs: bool = False,
        reducers: int = 4,
        top: int = 20,
        realm: str = "",
        timeout: Optional[float] = None,
    ) -> dict:
        """Runs a job of your own programs over ``inputs`` and waits for it
        (``tabos mr run``): ``map``, ``reduce`` and ``combine`` are wasm
        modules or native programs and scripts speaking the record protocol
        (``key<TAB>value`` lines on stdin and stdout; README.md, "MapReduce
        with your own code"). They are files of this machine, uploaded with
        the job — or, given ``code`` (a directory, uploaded whole), paths
        inside it. ``args`` go to every program; ``time_limit`` (seconds)
        bounds each run of one. Returns the job's id, timings, ``output``
        (its part files in tabos fs, in order) and the ``top`` first lines."""
        if reducers < 1:
            raise errors.InvalidArgument("a job has at least one reducer")
        if not inputs:
            raise errors.InvalidArgument("a job needs at least one input")
        cli = ["mr", "run", "--map", str(map), "--reduce", str(reduce)]
        if combine is not None:
            cli += ["--combine", str(combine)]
        if code is not None:
            cli += ["--code", str(code)]
        for a in args:
            cli += ["--arg", a]
        cli += ["--time-limit", str(time_limit), "--reducers", str(reducers), "--top", str(top)]
        if in_fs:
            cli.append("--in-fs")
        for i in inputs:
            cli += ["--input", i]
        if realm:
            cli += ["--realm", realm]
        return self._tabos(*cli, timeout=timeout)

    def output(self, result: dict, *, realm: str = "") -> bytes:
        """A finished job's output (``result`` from :meth:`run_programs`):
        its part files' bytes, in order."""
        return b"".join(self._c.fs.read_bytes(p, realm=realm) for p in result["output"])

    def jobs(self, *, realm: str = "") -> list:
        """The realm's jobs with their status and progress."""
        return self._tabos("mr", "ls", *(["--realm", realm] if realm else []), timeout=self.CONTROL_TIMEOUT)

    def status(self, job: str, *, realm: str = "") -> dict:
        """Job ``job``'s status (running, done, failed: why) and progress."""
        return self._tabos("mr", "status", job, *(["--realm", realm] if realm else []), timeout=self.CONTROL_TIMEOUT)

    def cancel(self, job: str, *, realm: str = "") -> None:
        """Stops a running job (marked failed: cancelled; its procs evicted)."""
        self._tabos("mr", "cancel", job, *(["--realm", realm] if realm else []), timeout=self.CONTROL_TIMEOUT)

    def remove(self, job: str, *, realm: str = "") -> None:
        """Removes what an ended job left (names, files, mailbox)."""
        self._tabos("mr", "rm", job, *(["--realm", realm] if realm else []), timeout=self.CONTROL_TIMEOUT)


def unique_pid(prefix: str = "py") -> str:
    """A pid no other proc will have: ``prefix``, the time and randomness."""
    return f"{prefix}-{int(time.time() * 1e6):x}-{uuid.uuid4().hex[:8]}"
