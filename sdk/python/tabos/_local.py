"""The local transport: a node's API on its local Unix socket in
length-prefixed frames instead of HTTP/2 (the protocol is documented once,
in the Rust client's ``crates/client/src/local.rs``).

:class:`LocalChannel` stands where a ``grpc.Channel`` would: the generated
stubs call its ``unary_unary`` and ``unary_stream``, and a failed call
raises a ``grpc.RpcError`` with the code, details and trailing metadata
(typed error details included) a gRPC call would have, so everything above
the stubs is the same over either. One connection per channel, one reader
thread handing each frame to its call; calls from many threads at once.
"""

from __future__ import annotations

import base64
import queue
import socket
import struct
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

import grpc

MAGIC = b"TABOSLT1"
CALL, CANCEL, CREDIT, HEADERS, DATA, END, GOAWAY = 1, 2, 3, 4, 5, 6, 7
WINDOW = 16
CREDIT_BATCH = WINDOW // 2
MESSAGE_BYTES_MAX = 16 << 20
#: Largest frame accepted from a node: a largest message, framed, twice
#: over (the Rust client's bound).
FRAME_BYTES_MAX = 2 * (MESSAGE_BYTES_MAX + (16 << 10) + 512)

_CODES = {c.value[0]: c for c in grpc.StatusCode}
_LOST = object()  # the connection ended: every open call fails


class LocalError(grpc.RpcError):
    """A failed call, read as grpcio's errors are."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple = ()) -> None:
        super().__init__(details)
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailers

    def __str__(self) -> str:
        return f"{self._code.name}: {self._details}"


def _headers(pairs: list[tuple[str, bytes]]) -> bytes:
    out = [struct.pack("<H", len(pairs))]
    for k, v in pairs:
        kb = k.encode("ascii")
        out.append(struct.pack("<B", len(kb)) + kb + struct.pack("<H", len(v)) + v)
    return b"".join(out)


def _read_headers(b: bytes) -> list[tuple[str, bytes]]:
    (n,) = struct.unpack_from("<H", b, 0)
    at, out = 2, []
    for _ in range(n):
        kl = b[at]
        k = b[at + 1 : at + 1 + kl].decode("ascii")
        at += 1 + kl
        (vl,) = struct.unpack_from("<H", b, at)
        out.append((k, b[at + 2 : at + 2 + vl]))
        at += 2 + vl
    return out


def _status(trailers: list[tuple[str, bytes]]) -> Optional[LocalError]:
    """The error ``trailers`` carry, or None for a call that succeeded."""
    code, message = None, ""
    # Trailers as grpc gives them: text, or bytes for a "-bin" key.
    meta: List[Tuple[str, Union[str, bytes]]] = []
    for k, v in trailers:
        if k == "grpc-status":
            code = int(v)
        elif k == "grpc-message":
            message = urllib.parse.unquote(v.decode("ascii", "replace"))
        elif k.endswith("-bin"):
            meta.append((k, base64.b64decode(v + b"=" * (-len(v) % 4))))
        else:
            meta.append((k, v.decode("ascii", "replace")))
    if code is None:
        return LocalError(grpc.StatusCode.INTERNAL, "the call ended without a status")
    if code == 0:
        return None
    return LocalError(_CODES.get(code, grpc.StatusCode.UNKNOWN), message, tuple(meta))


class _Conn:
    """One connection: its socket, its reader thread, its open calls."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.sendall(MAGIC)
        self.write_lock = threading.Lock()
        self.lock = threading.Lock()
        self.calls: dict[int, queue.SimpleQueue] = {}
        self.next = 0
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def start(self, payload: bytes) -> Optional[tuple[int, queue.SimpleQueue]]:
        """Sends a call: its id and the queue of its events, or None when
        the connection takes no more calls. The id is taken with the writer
        held, so calls go out in the order of their ids (a node refuses an
        id lower than one it has read)."""
        with self.write_lock:
            with self.lock:
                if self.closed:
                    return None
                self.next += 1
                call_id = self.next
                q: queue.SimpleQueue = queue.SimpleQueue()
                self.calls[call_id] = q
            try:
                self.sock.sendall(struct.pack("<IIB", len(payload) + 5, call_id, CALL) + payload)
            except OSError:
                pass  # the reader fails the call with the connection
        return call_id, q

    def send(self, call_id: int, kind: int, payload: bytes) -> None:
        frame = struct.pack("<IIB", len(payload) + 5, call_id, kind) + payload
        try:
            with self.write_lock:
                self.sock.sendall(frame)
        except OSError:
            self._lost()

    def forget(self, call_id: int, cancel: bool) -> None:
        """Call ``call_id`` is over here; ``cancel``: tell the node, if it
        is still open there."""
        with self.lock:
            open_ = self.calls.pop(call_id, None) is not None
        if cancel and open_:
            self.send(call_id, CANCEL, b"")

    def _recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            c = self.sock.recv(min(n - got, 1 << 20))
            if not c:
                raise ConnectionError("the node closed the connection")
            chunks.append(c)
            got += len(c)
        return b"".join(chunks)

    def _read(self) -> None:
        try:
            while True:
                (length,) = struct.unpack("<I", self._recv_exact(4))
                if length < 5 or length + 4 > FRAME_BYTES_MAX:
                    break
                body = self._recv_exact(length)
                call_id, kind = struct.unpack_from("<IB", body, 0)
                payload = body[5:]
                with self.lock:
                    if kind == GOAWAY:
                        (last,) = struct.unpack_from("<I", payload, 0)
                        self.closed = True
                        for i in [i for i in self.calls if i > last]:
                            self.calls.pop(i).put((GOAWAY, b""))
                        continue
                    q = self.calls.pop(call_id, None) if kind == END else self.calls.get(call_id)
                if kind not in (HEADERS, DATA, END):
                    break
                if q is not None:
                    q.put((kind, payload))
        except (OSError, ConnectionError, struct.error):
            pass
        self._lost()

    def _lost(self) -> None:
        with self.lock:
            self.closed = True
            calls, self.calls = self.calls, {}
        for q in calls.values():
            q.put(_LOST)
        try:
            self.sock.close()
        except OSError:
            pass


class _Call:
    """One call's events: its messages, then its end."""

    def __init__(self, channel: "LocalChannel", path: str, request: bytes, metadata: Any,
                 deserialize: Callable[[bytes], Any], timeout: Optional[float] = None) -> None:
        self.deserialize = deserialize
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.done = False
        head = [(k, v.encode() if isinstance(v, str) else v) for k, v in (metadata or ())]
        if timeout is not None:
            # The node ends the call at its deadline too, as gRPC's does.
            head.append(("grpc-timeout", b"%dm" % max(1, min(99_999_999, int(timeout * 1000)))))
        framed = struct.pack(">BI", 0, len(request)) + request
        p = path.encode("ascii")
        payload = struct.pack("<H", len(p)) + p + _headers(head) + framed
        for _ in range(3):  # again on a new connection after a GOAWAY
            self.conn, (self.id, self.q) = channel._start(payload)
            first = self._get()
            if first is _LOST:
                raise LocalError(grpc.StatusCode.UNAVAILABLE, "the node's local socket closed")
            if first[0] != GOAWAY:
                break
        else:
            raise LocalError(grpc.StatusCode.UNAVAILABLE, "the node is shutting down")
        self.first = first
        # A message's pieces gather here; bytearray appends in place (bytes
        # would copy the whole message at each 1 MiB piece).
        self.buf = bytearray()
        self.unacked = 0

    def _get(self) -> Any:
        """The call's next event, by its deadline (past it the call is
        cancelled and fails as gRPC's do)."""
        if self.deadline is None:
            return self.q.get()
        try:
            return self.q.get(timeout=max(0.0, self.deadline - time.monotonic()))
        except queue.Empty:
            self.cancel()
            raise LocalError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    def _next_event(self) -> Any:
        if self.first is not None:
            e, self.first = self.first, None
            return e
        return self._get()

    def messages(self) -> Iterator[Any]:
        """The call's messages, in order; raises its error at its end."""
        while True:
            e = self._next_event()
            if e is _LOST:
                self.done = True
                raise LocalError(grpc.StatusCode.UNAVAILABLE, "the node's local socket closed")
            kind, payload = e
            if kind == HEADERS:
                continue
            if kind == DATA:
                self.unacked += 1
                if self.unacked >= CREDIT_BATCH:
                    self.conn.send(self.id, CREDIT, struct.pack("<I", self.unacked))
                    self.unacked = 0
                self.buf += payload
                at = 0
                while len(self.buf) - at >= 5:
                    _, n = struct.unpack_from(">BI", self.buf, at)
                    if len(self.buf) - at < 5 + n:
                        break
                    msg = bytes(self.buf[at + 5 : at + 5 + n])
                    at += 5 + n
                    yield self.deserialize(msg)
                del self.buf[:at]
                continue
            self.done = True  # END
            err = _status(_read_headers(payload))
            if err is not None:
                raise err
            return

    def cancel(self) -> None:
        if not self.done:
            self.done = True
            self.conn.forget(self.id, cancel=True)


class _Stream:
    """A server stream as grpcio returns one: iterate it, or cancel it."""

    def __init__(self, call: _Call) -> None:
        self._call = call
        self._it = call.messages()

    def __iter__(self) -> "_Stream":
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def cancel(self) -> None:
        self._call.cancel()


class LocalChannel:
    """A ``grpc.Channel`` stand-in over the local socket at ``path``."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._conn: Optional[_Conn] = None
        self._connection()  # a missing node is known at once

    def _connection(self) -> _Conn:
        with self._lock:
            if self._conn is None or self._conn.closed:
                try:
                    self._conn = _Conn(self._path)
                except OSError as e:
                    raise LocalError(grpc.StatusCode.UNAVAILABLE,
                                     f"cannot connect to {self._path}: {e}") from None
            return self._conn

    def _start(self, payload: bytes) -> tuple[_Conn, tuple[int, queue.SimpleQueue]]:
        for _ in range(2):
            conn = self._connection()
            started = conn.start(payload)
            if started is not None:
                return conn, started
        raise LocalError(grpc.StatusCode.UNAVAILABLE, "the node's local socket closed")

    def unary_unary(self, method: str, request_serializer: Callable, response_deserializer: Callable,
                    **_: Any) -> Callable:
        def call(request: Any, timeout: Optional[float] = None, metadata: Any = None, **__: Any) -> Any:
            c = _Call(self, method, request_serializer(request), metadata, response_deserializer,
                      timeout)
            out = None
            for m in c.messages():
                out = m
            if out is None:
                raise LocalError(grpc.StatusCode.INTERNAL, "the call answered no message")
            return out

        return call

    def unary_stream(self, method: str, request_serializer: Callable, response_deserializer: Callable,
                     **_: Any) -> Callable:
        def call(request: Any, timeout: Optional[float] = None, metadata: Any = None, **__: Any) -> _Stream:
            return _Stream(_Call(self, method, request_serializer(request), metadata,
                                 response_deserializer, timeout))

        return call

    def stream_unary(self, *_: Any, **__: Any) -> Callable:
        raise NotImplementedError("tabos.proto has no client-streaming call")

    def stream_stream(self, *_: Any, **__: Any) -> Callable:
        raise NotImplementedError("tabos.proto has no bidirectional call")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn._lost()
                self._conn = None
