"""The tabos client for asyncio: the same calls as :class:`tabos.Client`,
awaited, over ``grpc.aio``::

    import asyncio
    import tabos.aio

    async def main() -> None:
        async with tabos.aio.Client() as c:     # as the CLI: TABOS_ADDR/TABOS_TOKEN, else the credentials file
            pid = await c.spawn("echo", "hi")
            await c.wait(pid)
            print(await c.logs(pid))
            async for m in c.messages("inbox"):  # a stream: each message as it arrives
                print(m.payload)

    asyncio.run(main())

A stream (``messages``, ``follow_logs``) is an async generator: one left
before its end should be closed (``await stream.aclose()``, or
``contextlib.aclosing``) — until then it goes on taking messages.

Results and errors are the synchronous client's: the same dataclasses,
dicts for rows, and :class:`tabos.TabosError` subclasses for refusals. A
``unix:`` address reaches the node's local socket in gRPC (HTTP/2), which
the node's socket serves beside its local transport.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator, Optional, Sequence

import grpc
import grpc.aio

from . import errors
from ._proto import tabos_pb2 as pb
from ._proto import tabos_pb2_grpc as rpc
from .client import (
    CHANNEL_OPTIONS,
    CHUNK_BYTES,
    CallResult,
    FileChange,
    FileStat,
    Message,
    Payload,
    ProcStatus,
    SqlValue,
    _bytes,
    _descriptor,
    _file_changes,
    _message,
    _mkdir_paths,
    _realm,
    _rename_request,
    _resolve,
    _rows,
    _set_realm_request,
    _value,
    _whoami,
    _wire,
)
from .workflows import Workflow

__all__ = ["Client"]


class Client:
    """A connection to a tabos node for asyncio, acting with one
    credential: ``addr``, ``token``, ``context``, ``tls_ca`` and
    ``timeout`` as :class:`tabos.Client` takes them. Use it as an async
    context manager, or await :meth:`close`."""

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
        self.timeout = timeout
        target = self.addr.removeprefix("http://")
        if tls_ca:
            creds = grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes())
            self._channel = grpc.aio.secure_channel(target.removeprefix("https://"), creds, CHANNEL_OPTIONS)
        else:
            # On the local socket, grpc would name the socket's path as the
            # request's authority, which is no host name: the node's HTTP/2
            # server refuses the stream.
            options = CHANNEL_OPTIONS + [("grpc.default_authority", "localhost")] if target.startswith("unix:") else CHANNEL_OPTIONS
            self._channel = grpc.aio.insecure_channel(target, options)
        self._procs = rpc.ProcsStub(self._channel)
        self._ipc = rpc.IpcStub(self._channel)
        self._sql = rpc.SqlStub(self._channel)
        self._procedures = rpc.ProceduresStub(self._channel)
        self._tokens = rpc.TokensStub(self._channel)
        self._workflows = rpc.WorkflowsStub(self._channel)
        self._fs = rpc.FsStub(self._channel)
        self.fs = Fs(self)

    # -- plumbing -------------------------------------------------------

    async def _call(self, method: Any, request: Any, *, wait: bool = False) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=None if wait else self.timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc(e) from None

    async def _stream(self, method: Any, request: Any) -> AsyncIterator[Any]:
        call = method(request, metadata=self._metadata)
        try:
            async for item in call:
                yield item
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc(e) from None
        finally:
            call.cancel()

    async def close(self) -> None:
        """Closes the channel."""
        await self._channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- who ------------------------------------------------------------

    async def whoami(self) -> dict:
        """The credential in use: its id, realm, user, role and pid."""
        return _whoami(await self._call(self._tokens.WhoAmI, pb.Empty()))

    # -- realms ---------------------------------------------------------

    async def realms(self) -> list:
        """Realms with their usage, quotas and settings, as dicts (see
        :meth:`tabos.Client.realm`): every realm for an operator, the
        caller's own otherwise."""
        r = await self._call(self._procs.ListRealms, pb.ListRealmsRequest())
        return [_realm(i) for i in r.realms]

    async def realm(self, name: str) -> dict:
        """Realm ``name`` as :meth:`tabos.Client.realm` gives it; NotFound
        if the caller sees no such realm."""
        for r in await self.realms():
            if r["realm"] == name:
                return r
        raise errors.NotFound(f"no realm {name!r} (or not one this credential may see)")

    async def create_realm(self, name: str, *, scheduler: str = "fifo") -> dict:
        """Creates realm ``name`` (operator); returns its first admin
        credential, ``{"token", "id"}`` — shown once."""
        r = await self._call(
            self._procs.CreateRealm,
            pb.CreateRealmRequest(realm=name, scheduler=_wire(pb.Scheduler, "scheduler", scheduler)),
        )
        return {"token": r.admin_token, "id": r.admin_token_id}

    async def set_realm(self, name: str, **settings: Any) -> dict:
        """Sets realm ``name``'s quotas and settings (operator), with the
        keywords of :meth:`tabos.Client.set_realm`; returns the realm."""
        return _realm(await self._call(self._procs.SetRealm, _set_realm_request(name, **settings)))

    async def remove_realm(self, name: str) -> int:
        """Deletes realm ``name`` and everything of it (operator; refused
        while it has live procs); returns the rows deleted."""
        return (await self._call(self._procs.RemoveRealm, pb.RemoveRealmRequest(realm=name))).rows

    # -- procs ----------------------------------------------------------

    async def spawn(
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
        realm: str = "",
    ) -> str:
        """Spawns a proc; returns its pid (see :meth:`tabos.Client.spawn`)."""
        d = _descriptor(
            program, args, pid=pid, kind=kind, proc_class=proc_class, cores=cores, mem_mb=mem_mb,
            env=env, parent=parent, home_node=home_node, host_paths=host_paths, scope=scope,
            restartable=restartable, max_restarts=max_restarts,
        )
        return str((await self._call(self._procs.Spawn, pb.SpawnRequest(realm=realm, proc=d))).pid)

    async def wait(self, pid: str, *, until: str = "exit", realm: str = "") -> ProcStatus:
        """Waits until proc ``pid`` has started, exited or been asked to
        leave (``until``: start, exit, evict)."""
        method = {
            "start": self._procs.WaitStart,
            "exit": self._procs.WaitExit,
            "evict": self._procs.WaitEvict,
        }.get(until)
        if method is None:
            raise errors.InvalidArgument(f"until must be start, exit or evict, not {until!r}")
        return ProcStatus._of(await self._call(method, pb.PidRequest(realm=realm, pid=pid), wait=True))

    async def evict(self, pid: str, *, realm: str = "") -> None:
        """Asks proc ``pid`` to leave (SIGTERM, then SIGKILL)."""
        await self._call(self._procs.Evict, pb.PidRequest(realm=realm, pid=pid))

    async def proc(self, pid: str, *, realm: str = "") -> ProcStatus:
        """Proc ``pid``'s status now."""
        return ProcStatus._of(await self._call(self._procs.Status, pb.PidRequest(realm=realm, pid=pid)))

    async def ps(self, *, state: Optional[str] = None, realm: str = "") -> list:
        """The realm's procs, newest first, as dicts (SQL over ``ps``)."""
        sql = "SELECT * FROM ps"
        params: list = []
        if state:
            sql += " WHERE state = $1"
            params.append(state)
        return await self.sql(sql + " ORDER BY spawn_us DESC", *params, realm=realm)

    async def logs(
        self, pid: str, stream: str = "stdout", *, realm: str = "", tail: int = 0, since_us: int = 0
    ) -> bytes:
        """A proc's ``stdout`` or ``stderr`` as the cluster keeps it."""
        req = pb.LogsRequest(
            realm=realm, pid=pid, stream=_wire(pb.LogStream, "stream", stream),
            tail_lines=tail, since_us=since_us,
        )
        return bytes((await self._call(self._procs.Logs, req)).data)

    async def follow_logs(
        self, pid: str, stream: str = "stdout", *, realm: str = "", tail: int = 0
    ) -> AsyncIterator[bytes]:
        """A proc's log so far, then each piece as it is written, until the
        proc has ended (the node pushes)."""
        req = pb.LogsRequest(realm=realm, pid=pid, stream=_wire(pb.LogStream, "stream", stream), tail_lines=tail)
        async for r in self._stream(self._procs.FollowLogs, req):
            yield bytes(r.data)

    # -- messages -------------------------------------------------------

    async def create_mailbox(self, name: str, *, bytes_max: int = 0, realm: str = "") -> None:
        """Creates mailbox ``name``."""
        await self._call(self._ipc.CreateMailbox, pb.CreateMailboxRequest(realm=realm, name=name, bytes_max=bytes_max))

    async def remove_mailbox(self, name: str, *, realm: str = "") -> int:
        """Removes mailbox ``name``; returns the messages it dropped."""
        r = await self._call(self._ipc.RemoveMailbox, pb.RemoveMailboxRequest(realm=realm, name=name))
        return int(r.dropped)

    async def send(
        self, to: str, payload: Payload, *, sender: str = "", message_id: Optional[str] = None, realm: str = ""
    ) -> int:
        """Sends one message to mailbox ``to``; returns its sequence number."""
        out = pb.Outgoing(to=to, payload=_bytes(payload), message_id=message_id or "")
        named: dict = {"from": sender}  # `from` is a Python keyword
        r = await self._call(self._ipc.Send, pb.SendRequest(realm=realm, messages=[out], **named))
        return int(r.sent[0].seq) if r.sent else 0

    async def recv(self, mailbox: str, *, max: int = 1, timeout: float = 0, realm: str = "") -> list:
        """Takes up to ``max`` messages, waiting up to ``timeout`` seconds
        for the first."""
        req = pb.RecvRequest(realm=realm, mailbox=mailbox, max=max, timeout_ms=int(timeout * 1000))
        r = await self._call(self._ipc.Recv, req, wait=True)
        return [_message(m) for m in r.messages]

    async def messages(self, mailbox: str, *, batch: int = 64, realm: str = "") -> AsyncIterator[Message]:
        """Every message of ``mailbox`` as it arrives, each taken once."""
        req = pb.RecvRequest(realm=realm, mailbox=mailbox, max=batch)
        async for r in self._stream(self._ipc.RecvStream, req):
            for m in r.messages:
                yield _message(m)

    # -- SQL and procedures ---------------------------------------------

    async def sql(self, query: str, *params: SqlValue, realm: str = "", max_rows: int = 0) -> list:
        """A read-only query over the OS state; rows as dicts."""
        req = pb.SqlRequest(sql=query, params=[_value(p) for p in params], realm=realm, max_rows=max_rows)
        return _rows(await self._call(self._sql.Query, req))

    async def call(self, procedure: str, args: Payload = b"", *, realm: str = "") -> CallResult:
        """Calls stored procedure ``procedure`` with ``args``: one
        transaction."""
        req = pb.CallProcedureRequest(realm=realm, name=procedure, args=_bytes(args))
        r = await self._call(self._procedures.Call, req)
        return CallResult(r.result, list(r.log))

    # -- workflows ------------------------------------------------------

    async def workflow(self, workflow_id: str, *, realm: str = "") -> Workflow:
        """A workflow's row now."""
        req = pb.WaitWorkflowRequest(realm=realm, workflow_id=workflow_id, timeout_ms=0)
        return Workflow._of(await self._call(self._workflows.Wait, req, wait=True))

    async def wait_workflow(self, workflow_id: str, *, timeout: float = 60.0, realm: str = "") -> Workflow:
        """Its row once it has finished, or after ``timeout`` seconds (the
        node bounds one wait at a minute: a longer one is asked again)."""
        loop_left = timeout
        while True:
            chunk = min(loop_left, 30.0)
            req = pb.WaitWorkflowRequest(realm=realm, workflow_id=workflow_id, timeout_ms=int(chunk * 1000))
            w = Workflow._of(await self._call(self._workflows.Wait, req, wait=True))
            loop_left -= chunk
            if w.done or loop_left <= 0:
                return w


class Fs:
    """The realm's files (``client.fs``) for asyncio, as the credential's
    user: the synchronous :class:`tabos.client.Fs`'s calls, awaited, with
    whole files read and written (``read_bytes``, ``write_bytes``) in
    place of ``open``."""

    def __init__(self, c: Client) -> None:
        self._c = c

    async def _is_pipe(self, path: str, realm: str, user: str) -> bool:
        s = await self._c._call(self._c._fs.Stat, pb.FsPathRequest(realm=realm, user=user, path=path))
        return bool(s.type == pb.FILE_TYPE_FIFO)

    async def stat(self, path: str, *, realm: str = "", user: str = "") -> FileStat:
        """A file's or directory's metadata."""
        s = await self._c._call(self._c._fs.Stat, pb.FsPathRequest(realm=realm, user=user, path=path))
        return FileStat._of(s)

    async def ls(self, path: str = "/", *, realm: str = "", user: str = "") -> list:
        """A directory's entries."""
        r = await self._c._call(self._c._fs.ReadDir, pb.FsPathRequest(realm=realm, user=user, path=path))
        return [FileStat._of(s) for s in r.entries]

    async def mkdir(
        self, path: str, *, mode: int = 0o755, parents: bool = False, realm: str = "", user: str = ""
    ) -> None:
        """Makes a directory (and its missing parents with ``parents``)."""
        for p in _mkdir_paths(path, parents):
            try:
                await self._c._call(self._c._fs.Mkdir, pb.FsCreateRequest(realm=realm, user=user, path=p, mode=mode))
            except errors.AlreadyExists:
                if not parents:
                    raise

    async def mkfifo(self, path: str, *, mode: int = 0o644, realm: str = "", user: str = "") -> FileStat:
        """Makes a named pipe (see :meth:`tabos.client.Fs.mkfifo`)."""
        req = pb.FsCreateRequest(realm=realm, user=user, path=path, mode=mode)
        return FileStat._of(await self._c._call(self._c._fs.Mkfifo, req))

    async def remove(self, path: str, *, realm: str = "", user: str = "") -> None:
        """Removes a file, or an empty directory."""
        req = pb.FsPathRequest(realm=realm, user=user, path=path)
        s = await self._c._call(self._c._fs.Stat, req)
        await self._c._call(self._c._fs.Rmdir if s.type == pb.FILE_TYPE_DIR else self._c._fs.Unlink, req)

    async def rename(self, src: str, dst: str, *, realm: str = "", user: str = "") -> None:
        """Moves ``src`` to ``dst``."""
        await self._c._call(self._c._fs.Rename, _rename_request(src, dst, realm, user))

    async def read_bytes(self, path: str, *, realm: str = "", user: str = "") -> bytes:
        """The whole file, read in chunks of at most 4 MiB; of a named pipe,
        what its writers write until EOF (each read waits for them)."""
        pipe = await self._is_pipe(path, realm, user)
        out = bytearray()
        while True:
            req = pb.FsReadRequest(realm=realm, user=user, path=path, offset=len(out), len=CHUNK_BYTES)
            data = (await self._c._call(self._c._fs.Read, req, wait=pipe)).data
            if not data:
                return bytes(out)
            out += data

    async def write_bytes(self, path: str, data: bytes, *, realm: str = "", user: str = "") -> None:
        """Replaces the file with ``data`` (made 0644 if it is not there);
        into a named pipe, writes ``data`` (each write waits for room)."""
        c, pipe = self._c, False
        try:
            await c._call(c._fs.Create, pb.FsCreateRequest(realm=realm, user=user, path=path, mode=0o644))
        except errors.AlreadyExists:
            pipe = await self._is_pipe(path, realm, user)
            if not pipe:
                await c._call(c._fs.Truncate, pb.FsTruncateRequest(realm=realm, user=user, path=path, size=0))
        for at in range(0, len(data), CHUNK_BYTES):
            chunk = data[at : at + CHUNK_BYTES]
            req = pb.FsWriteRequest(realm=realm, user=user, path=path, offset=at, data=chunk)
            await c._call(c._fs.Write, req, wait=pipe)

    async def watch(self, *, realm: str = "", user: str = "") -> AsyncIterator[FileChange]:
        """The realm's file changes as they commit (see
        :meth:`tabos.client.Fs.watch`): an async generator, to be closed
        when no longer read."""
        req = pb.FsWatchRequest(realm=realm, user=user)
        async for m in self._c._stream(self._c._fs.Watch, req):
            for change in _file_changes(m):
                yield change
