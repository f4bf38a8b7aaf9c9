"""Durable workflows (tabos issue 22): Python functions whose every step is
recorded in the node's database, so that after a crash — of this process,
a node or the database — they go on from their last completed step, and
no completed step runs again. What DBOS Transact offers, on tabos's
tables::

    import tabos
    from tabos.workflows import Executor

    client = tabos.Client()
    ex = Executor(client, app_version="v1")

    @ex.step(attempts=3)
    def charge(order: dict) -> dict:                # a step: recorded, run once
        return payments.charge(order["id"], order["total"])

    @ex.workflow()
    def order(ctx, order: dict) -> dict:
        ctx.procedure("reserve", order["id"])       # exactly once, in the step's transaction
        receipt = charge(order)                     # a decorated step, called as a function
        ctx.sleep(3600)                             # durable
        return {"order": order["id"], "receipt": receipt}

    ex.start()                                      # register, keep the lease
    handle = ex.run("order", {"id": "o-17", "total": 12}, workflow_id="order-17")
    print(handle.get_status().status, handle.get_result(timeout=60))

A workflow function takes a :class:`Ctx` and its input and returns its
output. Inputs, outputs, step results, messages and events are kept as
JSON unless the executor's ``serializer`` says ``"pickle"`` (any Python
object — opt-in: unpickling runs code, so only for data you trust) or
``"raw"`` (bytes or str in, bytes out). A workflow must take the same
steps in the same order each time it runs on the same input: its steps
are replayed by number. Each runs on a thread of its own here. Every call
is retried while the node cannot be reached (``retry_window`` seconds);
each is idempotent, so that is safe.
"""

from __future__ import annotations

import enum
import os
import functools
import json
import pickle
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union, overload

import grpc

from . import errors
from ._proto import tabos_pb2 as pb
from ._proto import tabos_pb2_grpc as rpc
from .client import Client, Payload, ProcState, _bytes, _wire, _word

#: A finished workflow's statuses: it changes no more unless resumed.
_FINAL = (pb.WORKFLOW_STATUS_SUCCESS, pb.WORKFLOW_STATUS_ERROR, pb.WORKFLOW_STATUS_CANCELLED)
#: How long a call is retried while the node cannot be reached.
RETRY_WINDOW = 120.0
#: Longest one wait the node is asked for (it caps waits at a minute).
WAIT_CHUNK = 30.0

# Every Workflows call is idempotent by (workflow, step), so one that timed
# out (the node waited out a database failover) is asked again too.
_TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
}


class Serializer(str, enum.Enum):
    """How an executor keeps what its workflows take and give (a ``str``
    too: ``serializer="json"`` names it)."""

    JSON = "json"
    PICKLE = "pickle"
    RAW = "raw"


class _Codec:
    """Values to bytes and back, as an executor's ``serializer`` says."""

    def __init__(self, kind: str) -> None:
        try:
            self.kind = Serializer(kind)
        except ValueError:
            words = ", ".join(s.value for s in Serializer)
            raise errors.InvalidArgument(f"serializer must be one of {words}, not {kind!r}") from None

    def dumps(self, value: Any) -> bytes:
        if self.kind is Serializer.RAW:
            if value is None:
                return b""
            if not isinstance(value, (bytes, bytearray, str)):
                raise errors.InvalidArgument(
                    f"serializer='raw' keeps bytes or str, not {type(value).__name__} "
                    "(serializer='json' or 'pickle' keeps other values)"
                )
            return value.encode() if isinstance(value, str) else bytes(value)
        if self.kind is Serializer.PICKLE:
            return pickle.dumps(value)
        try:
            return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise errors.InvalidArgument(
                f"{type(value).__name__} is not JSON ({e}): give JSON values, or "
                "Executor(serializer='pickle') for any Python object, 'raw' for bytes"
            ) from None

    def loads(self, data: Optional[bytes]) -> Any:
        if self.kind is Serializer.RAW:
            return data
        if not data:
            return None
        if self.kind is Serializer.PICKLE:
            return pickle.loads(data)
        return json.loads(data)


class WorkflowFailed(Exception):
    """The workflow ended in error (``error`` is what it recorded)."""

    def __init__(self, workflow_id: str, error: str) -> None:
        super().__init__(f"workflow {workflow_id} failed: {error}")
        self.workflow_id = workflow_id
        self.error = error


class WorkflowCancelled(Exception):
    """The workflow was cancelled before it finished."""


class Stopped(Exception):
    """The workflow is not this executor's to run any more: cancelled,
    finished, or taken over after this executor's lease lapsed. Raised
    inside the workflow function; let it propagate."""


class StepFailed(Exception):
    """A step failed past its retries (its error is recorded)."""


@dataclass(frozen=True)
class StepInfo:
    """What a function step is told: an idempotency key for effects outside
    tabos (a step may run again if its executor dies before recording it)
    and the attempt number (1 first)."""

    key: str
    attempt: int


@dataclass(frozen=True)
class Workflow:
    """A workflow's row."""

    workflow_id: str
    name: str
    app_version: str
    status: str
    queue: str
    input: bytes
    output: Optional[bytes]
    error: str
    executor: str
    attempts: int
    created_us: int
    started_us: int
    ended_us: int
    #: Finished: success, error or cancelled (it changes no more unless
    #: resumed).
    done: bool = False

    @staticmethod
    def _of(w: Any) -> "Workflow":
        return Workflow(
            workflow_id=w.workflow_id,
            name=w.name,
            app_version=w.app_version,
            status=_word(pb.WorkflowStatus, w.status),
            queue=w.queue,
            input=w.input,
            output=w.output if w.has_output else None,
            error=w.error,
            executor=w.executor,
            attempts=w.attempts,
            created_us=w.created_us,
            started_us=w.started_us,
            ended_us=w.ended_us,
            done=w.status in _FINAL,
        )


def _outcome(ok: bool, value: bytes = b"", error: str = "") -> Any:
    if ok:
        return pb.StepOutcome(status=pb.STEP_STATUS_SUCCESS, output=value)
    return pb.StepOutcome(status=pb.STEP_STATUS_ERROR, error=error)


class _Rpc:
    """The Workflows stub with the client's credential, retried while the
    node is unreachable."""

    def __init__(self, client: Client, retry_window: float) -> None:
        self.client = client
        self.stub = rpc.WorkflowsStub(client._channel)
        self.retry_window = retry_window

    def __call__(self, name: str, request: Any, *, wait: bool = False) -> Any:
        method = getattr(self.stub, name)
        until = time.monotonic() + self.retry_window
        pause = 0.02
        while True:
            try:
                return method(
                    request,
                    metadata=self.client._metadata,
                    timeout=None if wait else self.client.timeout,
                )
            except grpc.RpcError as e:
                if e.code() not in _TRANSIENT or time.monotonic() + pause > until:
                    raise errors.from_rpc(e) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def step_pid(workflow: str, step: int) -> str:
    """The pid of a workflow's proc step (as the Rust client names it)."""
    plain = f"{workflow}.s{step}"
    if len(plain) <= 128:
        return plain
    h = 0xCBF29CE484222325
    for b in workflow.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"wf{h:016x}.s{step}"


class Ctx:
    """A running workflow's handle on its steps."""

    def __init__(self, ex: "Executor", workflow_id: str, fresh: bool) -> None:
        self._ex = ex
        self.workflow_id = workflow_id
        self._next = 1
        self._fresh = fresh

    def _step_no(self) -> int:
        n = self._next
        self._next += 1
        return n

    def _rpc(self, name: str, request: Any, *, wait: bool = False) -> Any:
        try:
            return self._ex._rpc(name, request, wait=wait)
        except errors.FailedPrecondition as e:
            raise Stopped(e.message) from None

    def _result(self, o: Any) -> bytes:
        if o.status == pb.STEP_STATUS_SUCCESS:
            return bytes(o.output)
        raise StepFailed(o.error)

    def _begin(self, step: int, name: str, kind: "pb.StepKind", input: bytes = b"") -> Any:
        ex = self._ex
        return self._rpc(
            "StepBegin",
            pb.StepBeginRequest(
                realm=ex.realm,
                executor=ex.id,
                workflow_id=self.workflow_id,
                step=step,
                name=name,
                kind=kind,
                input=input,
            ),
        )

    def _end(
        self,
        step: int,
        outcome: Any,
        last: bool,
        name: str,
        kind: "pb.StepKind",
        attempts: int,
        input: bytes = b"",
    ) -> Any:
        """Records a step's outcome; a step not begun (no history) whole."""
        ex = self._ex
        return self._rpc(
            "StepEnd",
            pb.StepEndRequest(
                realm=ex.realm,
                executor=ex.id,
                workflow_id=self.workflow_id,
                step=step,
                outcome=outcome,
                last=last,
                name=name if self._fresh else "",
                kind=kind if self._fresh else pb.STEP_KIND_UNSPECIFIED,
                attempts=attempts,
                input=input if self._fresh else b"",
            ),
        )

    def step(
        self,
        name: str,
        fn: Callable[[StepInfo], Any],
        *,
        attempts: int = 1,
        backoff: float = 0.1,
    ) -> Any:
        """Runs ``fn`` as a step, retried up to ``attempts`` times (the
        pause doubling from ``backoff`` seconds). Its result is recorded
        (in the executor's serializer) and returned; a re-run gets the
        record instead of running it again. Past its attempts it raises
        :class:`StepFailed`, recorded."""
        return self._ex._codec.loads(self._step(name, fn, attempts=attempts, backoff=backoff))

    def _step(
        self,
        name: str,
        fn: Callable[[StepInfo], Any],
        *,
        attempts: int,
        backoff: float,
    ) -> bytes:
        step = self._step_no()
        ex = self._ex
        attempt = 1
        while True:
            if not self._fresh:
                begun = self._begin(step, name, pb.STEP_KIND_FUNCTION)
                if begun.HasField("done"):
                    return self._result(begun.done)
                attempt = begun.attempt
            try:
                out = ex._codec.dumps(fn(StepInfo(key=f"{self.workflow_id}/{step}", attempt=attempt)))
                ok, err = True, ""
            except Exception as e:  # the step's own failure
                out, ok, err = b"", False, f"{type(e).__name__}: {e}"
            last = ok or attempt >= max(attempts, 1)
            if ok or last or not self._fresh:
                got = self._end(step, _outcome(ok, out, err), last, name, pb.STEP_KIND_FUNCTION, attempt)
                if last:
                    return self._result(got)
            time.sleep(backoff)
            backoff *= 2
            if self._fresh:
                attempt += 1

    def procedure(self, name: str, args: Payload = b"", *, attempts: int = 1) -> bytes:
        """Calls stored procedure ``name`` as a step: its effects and the
        step's record commit together — exactly once."""
        step = self._step_no()
        ex = self._ex
        for attempt in range(1, max(attempts, 1) + 1):
            o = self._rpc(
                "StepProcedure",
                pb.StepProcedureRequest(
                    realm=ex.realm,
                    executor=ex.id,
                    workflow_id=self.workflow_id,
                    step=step,
                    procedure=name,
                    args=_bytes(args),
                    last=attempt >= attempts,
                ),
            )
            if o.status == pb.STEP_STATUS_SUCCESS or attempt >= attempts or o.recorded:
                return self._result(o)
        raise AssertionError("unreachable")

    def proc(self, name: str, program: str, *args: str, **spawn: Any) -> int:
        """Runs a proc as step ``name``: spawned once (its pid is the
        step's, so a re-run finds it instead of spawning another) and
        waited for; its exit status is the step's output. A proc that does
        not exit 0 raises :class:`StepFailed`. ``spawn`` is passed to
        :meth:`tabos.Client.spawn` (kind, cores, env, ...)."""
        ex = self._ex
        step = self._step_no()
        line = " ".join((program, *args)).encode()
        if not self._fresh:
            begun = self._begin(step, name, pb.STEP_KIND_PROC, line)
            if begun.HasField("done"):
                return int(self._result(begun.done))
        pid = step_pid(self.workflow_id, step)
        try:
            try:
                ex.client.spawn(program, *args, pid=pid, realm=ex.realm, **spawn)
            except errors.AlreadyExists:
                pass  # spawned by an earlier run of this step
            st = ex.client.wait(pid, realm=ex.realm)
            ok = st.state is ProcState.EXITED and st.exit_status == 0
            err = "" if ok else f"proc {pid} ended {st.state} with status {st.exit_status}: {st.error}"
        except errors.TabosError as e:
            ok, err = False, str(e)
        got = self._end(step, _outcome(ok, b"0", err), True, name, pb.STEP_KIND_PROC, 1, line)
        return int(self._result(got))

    def sleep(self, seconds: float) -> None:
        """Sleeps durably: the wake-up time is recorded, so after a crash
        the workflow sleeps only what is left."""
        ex = self._ex
        r = self._rpc(
            "Sleep",
            pb.SleepRequest(
                realm=ex.realm,
                executor=ex.id,
                workflow_id=self.workflow_id,
                step=self._step_no(),
                duration_ms=int(seconds * 1000),
            ),
        )
        time.sleep(max(0, r.wake_at_us - r.now_us) / 1e6)

    def send(self, to: str, topic: str, payload: Any) -> None:
        """Sends ``payload`` on ``topic`` to workflow ``to``, once."""
        ex = self._ex
        self._rpc(
            "Send",
            pb.WorkflowSendRequest(
                realm=ex.realm,
                to=to,
                topic=topic,
                payload=ex._codec.dumps(payload),
                executor=ex.id,
                workflow_id=self.workflow_id,
                step=self._step_no(),
            ),
        )

    def recv(self, topic: str, timeout: float = 60.0) -> Any:
        """The next message on ``topic``, waiting up to ``timeout`` seconds;
        None if none came (recorded too)."""
        ex = self._ex
        step = self._step_no()
        until = time.monotonic() + timeout
        while True:
            left = max(0.0, until - time.monotonic())
            r = self._rpc(
                "Recv",
                pb.WorkflowRecvRequest(
                    realm=ex.realm,
                    executor=ex.id,
                    workflow_id=self.workflow_id,
                    step=step,
                    topic=topic,
                    timeout_ms=int(min(left, WAIT_CHUNK) * 1000),
                ),
                wait=True,
            )
            if r.received or left <= WAIT_CHUNK:
                return ex._codec.loads(r.payload) if r.received else None

    def set_event(self, key: str, value: Any) -> None:
        """Publishes ``value`` under ``key`` for this workflow, once."""
        ex = self._ex
        self._rpc(
            "SetEvent",
            pb.SetEventRequest(
                realm=ex.realm,
                executor=ex.id,
                workflow_id=self.workflow_id,
                step=self._step_no(),
                key=key,
                value=ex._codec.dumps(value),
            ),
        )


Fn = Callable[[Ctx, Any], Any]
F = TypeVar("F", bound=Callable[..., Any])

# The workflow this thread runs (each runs on a thread of its own), for
# decorated steps called as plain functions.
_running = threading.local()


def current() -> Optional[Ctx]:
    """The :class:`Ctx` of the workflow running on this thread, if any."""
    return getattr(_running, "ctx", None)


class WorkflowHandle:
    """A started workflow: its id, its status, and its result once done (as
    DBOS Transact's handle)."""

    def __init__(self, ex: "Executor", workflow_id: str) -> None:
        self._ex = ex
        self.workflow_id = workflow_id

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.workflow_id!r})"

    def get_status(self) -> "Workflow":
        """Its row now: status (pending, success, error, cancelled...),
        attempts, times."""
        ex = self._ex
        return Workflow._of(
            ex._rpc(
                "Wait",
                pb.WaitWorkflowRequest(realm=ex.realm, workflow_id=self.workflow_id, timeout_ms=0),
                wait=True,
            )
        )

    def get_result(self, timeout: float = 60.0) -> Any:
        """Its output once it finishes (decoded), waiting up to ``timeout``
        seconds: :class:`WorkflowFailed` if it ended in error,
        :class:`WorkflowCancelled` if cancelled, ``DeadlineExceeded`` if it
        is still running."""
        w = self._ex._wait(self.workflow_id, timeout)
        if w.status == pb.WORKFLOW_STATUS_SUCCESS:
            return self._ex._codec.loads(w.output if w.has_output else b"")
        if w.status == pb.WORKFLOW_STATUS_ERROR:
            raise WorkflowFailed(self.workflow_id, w.error)
        if w.status == pb.WORKFLOW_STATUS_CANCELLED:
            raise WorkflowCancelled(f"workflow {self.workflow_id} was cancelled")
        status = _word(pb.WorkflowStatus, w.status)
        raise errors.DeadlineExceeded(f"workflow {self.workflow_id} is still {status} after {timeout} s")


class Executor:
    """This process's executor: the workflow functions it can run (declared
    with :meth:`workflow` before :meth:`start`), its application version and
    a lease it renews. With ``executor_id`` it is a restarted executor: the
    workflows it was running are taken back at once (as DBOS's executor
    id)."""

    def __init__(
        self,
        client: Client,
        app_version: str,
        *,
        realm: str = "",
        lease: float = 10.0,
        executor_id: str = "",
        retry_window: float = RETRY_WINDOW,
        serializer: str = "json",
    ) -> None:
        self.client = client
        self.app_version = app_version
        self.realm = realm
        self.lease = lease
        self.id = executor_id
        self._functions: Dict[str, Fn] = {}
        self._rpc = _Rpc(client, retry_window)
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._started = False
        self._codec = _Codec(serializer)

    @overload
    def workflow(self, name: Fn) -> Fn: ...
    @overload
    def workflow(self, name: Optional[str] = None) -> Callable[[Fn], Fn]: ...

    def workflow(self, name: Union[None, str, Fn] = None) -> Union[Fn, Callable[[Fn], Fn]]:
        """Declares a workflow function, named ``name`` or as the function
        is: ``@ex.workflow()``, ``@ex.workflow("order")`` or
        ``@ex.workflow``."""

        def register(fn: Fn, as_name: str) -> Fn:
            if self._started:
                raise errors.FailedPrecondition("declare workflows before start()")
            self._functions[as_name] = fn
            return fn

        if callable(name):
            return register(name, name.__name__)
        return lambda fn: register(fn, name or fn.__name__)

    def step(
        self, name: Optional[str] = None, *, attempts: int = 1, backoff: float = 0.1
    ) -> Callable[[F], F]:
        """Declares a function a step (a decorator, as DBOS's
        ``@DBOS.step()``): called inside a workflow it runs as a recorded
        step named ``name`` (or as the function is), retried up to
        ``attempts`` times, its result kept and returned again on a re-run;
        called outside any workflow it is a plain call."""

        def decorate(fn: F) -> F:
            step_name = name or fn.__name__

            @functools.wraps(fn)
            def run(*args: Any, **kwargs: Any) -> Any:
                ctx = current()
                if ctx is None or ctx._ex is not self:
                    return fn(*args, **kwargs)
                return ctx.step(step_name, lambda _: fn(*args, **kwargs), attempts=attempts, backoff=backoff)

            return run  # type: ignore[return-value]

        return decorate

    def start(self) -> "Executor":
        """Registers with the node and keeps the lease in the background."""
        info = self._rpc(
            "RegisterExecutor",
            pb.RegisterExecutorRequest(
                realm=self.realm,
                app_version=self.app_version,
                functions=sorted(self._functions),
                lease_ms=int(self.lease * 1000),
                executor=self.id,
            ),
        )
        self.id = info.executor
        self._started = True
        self._daemon(self._keep_lease)
        return self

    def _daemon(self, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, daemon=True)
        t.start()
        self._threads.append(t)

    def _keep_lease(self) -> None:
        while not self._stop.wait(self.lease / 3):
            try:
                self._rpc(
                    "RenewExecutor",
                    pb.ExecutorRequest(realm=self.realm, executor=self.id, lease_ms=int(self.lease * 1000)),
                )
            except errors.TabosError:
                pass  # unreachable now; the next renewal may get through
            except ValueError:
                return  # the client's channel was closed

    def _spawn(self, workflow_id: str, name: str, input: bytes, fresh: bool) -> None:
        fn = self._functions[name]

        def run() -> None:
            ctx = Ctx(self, workflow_id, fresh)
            _running.ctx = ctx
            try:
                out = _outcome(True, self._codec.dumps(fn(ctx, self._codec.loads(input))))
            except Stopped:
                return
            except Exception as e:
                out = _outcome(False, error=f"{type(e).__name__}: {e}")
            finally:
                _running.ctx = None
            try:
                self._rpc(
                    "Finish",
                    pb.FinishWorkflowRequest(
                        realm=self.realm, executor=self.id, workflow_id=workflow_id, outcome=out
                    ),
                )
            except errors.FailedPrecondition:
                pass  # cancelled or taken over meanwhile

        threading.Thread(target=run, daemon=True, name=f"workflow-{workflow_id}").start()

    def run(self, name: Union[str, Fn], input: Any = None, *, workflow_id: str = "") -> WorkflowHandle:
        """Starts workflow ``name`` (or the declared function itself) as
        ``workflow_id`` (empty: a new id) on ``input`` and runs it here; a
        second start of an id returns it without running it again. Returns
        its :class:`WorkflowHandle`."""
        name = self._name_of(name)
        if name not in self._functions:
            raise errors.InvalidArgument(f"no workflow function {name!r} is declared")
        workflow_id = workflow_id or f"w{uuid.uuid4().hex[:16]}"
        r = self._rpc(
            "Start",
            pb.StartWorkflowRequest(
                realm=self.realm,
                workflow_id=workflow_id,
                name=name,
                app_version=self.app_version,
                input=self._codec.dumps(input),
                executor=self.id,
            ),
        )
        w = r.workflow
        if w.status == pb.WORKFLOW_STATUS_PENDING and w.executor == self.id:
            self._spawn(workflow_id, name, w.input, r.created)
        return WorkflowHandle(self, workflow_id)

    def _name_of(self, name: Union[str, Fn]) -> str:
        if isinstance(name, str):
            return name
        for n, fn in self._functions.items():
            if fn is name:
                return n
        raise errors.InvalidArgument(f"{getattr(name, '__name__', name)!r} is not a declared workflow")

    def retrieve_workflow(self, workflow_id: str) -> WorkflowHandle:
        """The handle of workflow ``workflow_id`` (started anywhere)."""
        return WorkflowHandle(self, workflow_id)

    def enqueue(
        self,
        queue: str,
        name: Union[str, Fn],
        input: Any = None,
        *,
        workflow_id: str = "",
        priority: int = 0,
    ) -> WorkflowHandle:
        """Enqueues workflow ``name`` in ``queue``; an executor serving the
        queue runs it. Returns its :class:`WorkflowHandle`."""
        name = self._name_of(name)
        workflow_id = workflow_id or f"w{uuid.uuid4().hex[:16]}"
        self._rpc(
            "Start",
            pb.StartWorkflowRequest(
                realm=self.realm,
                workflow_id=workflow_id,
                name=name,
                app_version=self.app_version,
                input=self._codec.dumps(input),
                queue=queue,
                priority=priority,
            ),
        )
        return WorkflowHandle(self, workflow_id)

    def result(self, workflow_id: Union[str, WorkflowHandle], timeout: float = 60.0) -> Workflow:
        """Waits up to ``timeout`` seconds for the workflow to finish; its
        row then (its output as kept: :meth:`WorkflowHandle.get_result`
        decodes it)."""
        if isinstance(workflow_id, WorkflowHandle):
            workflow_id = workflow_id.workflow_id
        return Workflow._of(self._wait(workflow_id, timeout))

    def _wait(self, workflow_id: str, timeout: float) -> Any:
        """The workflow's row as the node sends it, once finished or after
        ``timeout`` seconds (asked again past each of the node's waits)."""
        until = time.monotonic() + timeout
        while True:
            left = max(0.0, until - time.monotonic())
            w = self._rpc(
                "Wait",
                pb.WaitWorkflowRequest(
                    realm=self.realm, workflow_id=workflow_id, timeout_ms=int(min(left, WAIT_CHUNK) * 1000)
                ),
                wait=True,
            )
            if w.status in _FINAL or left <= WAIT_CHUNK:
                return w

    def _claims(self, method: str, queue: str, wait: float) -> None:
        r = self._rpc(
            method,
            pb.ClaimRequest(realm=self.realm, executor=self.id, queue=queue, max=64, wait_ms=int(wait * 1000)),
            wait=True,
        )
        for c in r.claims:
            if c.name in self._functions:
                self._spawn(c.workflow_id, c.name, c.input, not c.recovered)

    def recover(self) -> None:
        """Takes over this version's orphaned workflows (in no queue)."""
        self._claims("Recover", "", 0)

    def serve(self, queue: str) -> None:
        """Serves ``queue`` in the background until :meth:`shutdown`."""

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self._claims("Dequeue", queue, WAIT_CHUNK)
                except errors.TabosError:
                    self._stop.wait(1.0)
                except ValueError:
                    return  # the client's channel was closed

        self._daemon(loop)

    def serve_recovery(self) -> None:
        """Takes over orphaned workflows in the background until
        :meth:`shutdown`."""

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self._claims("Recover", "", WAIT_CHUNK)
                except errors.TabosError:
                    self._stop.wait(1.0)
                except ValueError:
                    return  # the client's channel was closed

        self._daemon(loop)

    def send(self, to: Union[str, WorkflowHandle], topic: str, payload: Any) -> None:
        """Sends ``payload`` on ``topic`` to workflow ``to`` from outside
        any workflow."""
        if isinstance(to, WorkflowHandle):
            to = to.workflow_id
        self.client._call(
            self._rpc.stub.Send,
            pb.WorkflowSendRequest(realm=self.realm, to=to, topic=topic, payload=self._codec.dumps(payload)),
        )

    def get_event(self, workflow_id: Union[str, WorkflowHandle], key: str, timeout: float = 60.0) -> Any:
        """The event ``key`` of a workflow, waiting up to ``timeout``; None
        if it was not set by then."""
        if isinstance(workflow_id, WorkflowHandle):
            workflow_id = workflow_id.workflow_id
        until = time.monotonic() + timeout
        while True:
            left = max(0.0, until - time.monotonic())
            r = self._rpc(
                "GetEvent",
                pb.GetEventRequest(
                    realm=self.realm, workflow_id=workflow_id, key=key, timeout_ms=int(min(left, WAIT_CHUNK) * 1000)
                ),
                wait=True,
            )
            if r.set:
                return self._codec.loads(r.value)
            if left <= WAIT_CHUNK:
                return None

    def shutdown(self) -> None:
        """Stops serving; the workflows running here are handed to other
        executors at once."""
        self._stop.set()
        self._rpc("LeaveExecutor", pb.ExecutorRequest(realm=self.realm, executor=self.id))


@dataclass(frozen=True)
class ModuleRun:
    """A workflow started in a proc of its own (:meth:`Workflows.run_module`)."""

    workflow: Workflow
    #: The proc that runs it.
    pid: str
    #: False: a workflow of that id existed, and is returned as it is.
    created: bool


class Workflows:
    """Operating on workflows (what ``tabos workflow`` does):
    ``client.workflows``."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._stub = rpc.WorkflowsStub(client._channel)

    def list(
        self,
        *,
        status: str = "",
        name: str = "",
        queue: str = "",
        app_version: str = "",
        limit: int = 100,
        realm: str = "",
    ) -> List[Workflow]:
        r = self._client._call(
            self._stub.List,
            pb.ListWorkflowsRequest(
                realm=realm,
                status=_wire(pb.WorkflowStatus, "status", status) if status else pb.WORKFLOW_STATUS_UNSPECIFIED,
                name=name, queue=queue, app_version=app_version, limit=limit
            ),
        )
        return [Workflow._of(w) for w in r.workflows]

    def show(self, workflow_id: str, *, realm: str = "") -> dict:
        """The workflow and its recorded steps (as dicts)."""
        pages = []
        after = 0
        while True:  # page by page: the node bounds each
            d = self._client._call(
                self._stub.Show, pb.WorkflowRequest(realm=realm, workflow_id=workflow_id, after_step=after)
            )
            pages.extend(d.steps)
            if not d.more or not d.steps:
                break
            after = d.steps[-1].step
        steps = [
            {
                "step": s.step,
                "name": s.name,
                "kind": _word(pb.StepKind, s.kind),
                "status": _word(pb.StepStatus, s.status),
                "output": s.output,
                "error": s.error,
                "attempts": s.attempts,
                "input": s.input,
            }
            for s in pages
        ]
        return {"workflow": Workflow._of(d.workflow), "steps": steps}

    def run_module(
        self,
        module: Union[str, "os.PathLike[str]"],
        function: str,
        input: Payload = b"",
        *,
        code: Optional[Union[str, "os.PathLike[str]"]] = None,
        workflow_id: str = "",
        app_version: str = "",
        max_restarts: Optional[int] = None,
        mem_mb: int = 256,
        home_node: str = "",
        realm: str = "",
    ) -> "ModuleRun":
        """Starts a workflow written as a wasm module (``tabos workflow
        run``): ``module`` (a ``.wasm`` file of this machine, or with
        ``code`` — a directory uploaded whole — its path in it) is uploaded,
        and its ``function`` runs in a proc of its own, restartable: when
        its node is lost it runs again elsewhere and replays the steps
        recorded so far. ``workflow_id`` is its idempotency key: a second
        start of it returns the first. Returns the workflow's row and its
        proc's pid; :meth:`wait` waits for its end."""
        if code is None:
            tree, program = os.fspath(module), "./" + os.path.basename(os.fspath(module))
        else:
            tree, program = os.fspath(code), "./" + os.fspath(module).lstrip("./")
        if code is None and os.path.isdir(tree):
            raise errors.InvalidArgument(f"{tree} is a directory: pass it as code= and name the module in it")
        hash_ = self._client.upload_code(tree, realm=realm)
        proc = pb.ProcDescriptor(
            kind=pb.PROC_KIND_WASM,
            program=program,
            cores=0,
            mem_mb=mem_mb,
            home_node=home_node,
            restartable=True,
            code=hash_,
        )
        # A proc that mostly waits on the database: best-effort, of no cores
        # (as the Rust client's tabos_client::wfmodule). `class` is a Python
        # keyword: set by name.
        setattr(proc, "class", pb.PROC_CLASS_BE)
        if max_restarts is not None:
            proc.max_restarts = max_restarts
        r = self._client._call(
            self._stub.Start,
            pb.StartWorkflowRequest(
                realm=realm,
                workflow_id=workflow_id,
                name=function,
                app_version=app_version,
                input=_bytes(input),
                proc=proc,
            ),
        )
        return ModuleRun(workflow=Workflow._of(r.workflow), pid=r.pid, created=r.created)

    def wait(self, workflow_id: str, *, timeout: float = 60.0, realm: str = "") -> Workflow:
        """Waits up to ``timeout`` seconds for workflow ``workflow_id`` to
        finish; its row then."""
        until = time.monotonic() + timeout
        while True:
            left = max(0.0, until - time.monotonic())
            w = self._client._call(
                self._stub.Wait,
                pb.WaitWorkflowRequest(realm=realm, workflow_id=workflow_id, timeout_ms=int(min(left, WAIT_CHUNK) * 1000)),
                wait=True,
            )
            if w.status in _FINAL or left <= WAIT_CHUNK:
                return Workflow._of(w)

    def cancel(self, workflow_id: str, *, realm: str = "") -> Workflow:
        return Workflow._of(
            self._client._call(self._stub.Cancel, pb.WorkflowRequest(realm=realm, workflow_id=workflow_id))
        )

    def resume(self, workflow_id: str, *, app_version: str = "", realm: str = "") -> Workflow:
        return Workflow._of(
            self._client._call(
                self._stub.Resume,
                pb.ResumeWorkflowRequest(realm=realm, workflow_id=workflow_id, app_version=app_version),
            )
        )

    def fork(
        self, workflow_id: str, *, from_step: int = 1, new_id: str = "", app_version: str = "", realm: str = ""
    ) -> Workflow:
        return Workflow._of(
            self._client._call(
                self._stub.Fork,
                pb.ForkWorkflowRequest(
                    realm=realm, workflow_id=workflow_id, new_id=new_id, from_step=from_step, app_version=app_version
                ),
            )
        )

    def retarget(self, from_version: str, to_version: str, *, realm: str = "") -> int:
        r = self._client._call(
            self._stub.Retarget,
            pb.RetargetRequest(realm=realm, from_version=from_version, to_version=to_version),
        )
        return r.moved

    def set_queue(
        self,
        queue: str,
        *,
        concurrency: int = 0,
        node_concurrency: int = 0,
        rate_limit: int = 0,
        rate_period: float = 0.0,
        realm: str = "",
    ) -> dict:
        """Sets a queue's limits (0: none), taken into account at once."""
        q = self._client._call(
            self._stub.SetQueue,
            pb.SetQueueRequest(
                realm=realm,
                queue=queue,
                concurrency=concurrency,
                node_concurrency=node_concurrency,
                rate_limit=rate_limit,
                rate_period_ms=int(rate_period * 1000),
            ),
        )
        return {
            "queue": q.queue,
            "concurrency": q.concurrency,
            "node_concurrency": q.node_concurrency,
            "rate_limit": q.rate_limit,
            "rate_period_ms": q.rate_period_ms,
            "enqueued": q.enqueued,
            "pending": q.pending,
        }
