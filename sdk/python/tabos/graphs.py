"""Task graphs (``client.graphs``): tasks — stored procedures, workflows
or procs — whose arguments take other tasks' outputs, run by the nodes as
each task's inputs complete; each procedure task runs in one transaction
with its output, exactly once.

Ray-like, over a graph held open::

    with client.graphs.graph() as g:
        add = g.remote("add")          # a stored procedure of the realm
        a = add.remote(1, 2)           # an ObjectRef: nothing sent yet
        b = add.remote(a, 3)           # takes a's output
        assert g.get(b) == 6           # sends what is pending, waits

Or a whole graph at once: ``client.graphs.submit([{"id": "a", "procedure":
"add", "args": [1, 2]}, ...])``, then ``client.graphs.wait(graph_id)``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

from . import errors
from ._proto import tabos_pb2 as pb
from ._proto import tabos_pb2_grpc as rpc

if TYPE_CHECKING:
    from .client import Client

#: The longest one Wait call waits, in seconds (the node's bound).
WAIT_SLICE = 60.0


class TaskFailed(errors.FailedPrecondition):
    """A graph's task (or the graph) ended in error or was cancelled;
    raised by this client when its output was asked for."""

    reason = "TASK_FAILED"


@dataclass(frozen=True)
class GraphInfo:
    """A graph as the node records it (``status``: a ``pb.GraphStatus``
    value)."""

    graph_id: str
    status: int
    output: bytes
    error: str
    tasks: int
    ended: int
    held: bool
    parent_graph: str
    parent_task: str

    @property
    def running(self) -> bool:
        return self.status == pb.GRAPH_STATUS_RUNNING


@dataclass(frozen=True)
class TaskInfo:
    """A task (``status``: a ``pb.TaskStatus`` value; ``kind`` a
    ``pb.TaskKind`` value)."""

    id: str
    kind: int
    target: str
    status: int
    deps: tuple
    attempts: int
    node_id: str
    child: str
    output: bytes
    error: str

    @property
    def ended(self) -> bool:
        return self.status in (pb.TASK_STATUS_SUCCESS, pb.TASK_STATUS_ERROR, pb.TASK_STATUS_CANCELLED)


def _graph(g: pb.GraphInfo) -> GraphInfo:
    return GraphInfo(
        g.graph_id, g.status, g.output, g.error, g.tasks, g.ended, g.held, g.parent_graph, g.parent_task
    )


def _task(t: pb.TaskInfo) -> TaskInfo:
    return TaskInfo(
        t.id, t.kind, t.target, t.status, tuple(t.deps), t.attempts, t.node_id, t.child, t.output, t.error
    )


def _value(out: bytes) -> Any:
    """An output: its JSON value, else its bytes."""
    try:
        return json.loads(out)
    except ValueError:
        return out


def task(
    id: str,
    *,
    procedure: str = "",
    workflow: str = "",
    args: Sequence[Any] = (),
    dynamic: bool = False,
    attempts_max: int = 0,
    queue: str = "",
    version: str = "",
    proc: str = "",
    argv: Sequence[str] = (),
    wasm: bool = False,
) -> pb.GraphTask:
    """A task: ``procedure``, ``workflow`` (with its ``queue`` and
    ``version``) or ``proc`` (a program, with its ``argv``; ``wasm`` for a
    module: it gets the arguments as JSON in ``TABOS_TASK_ARGS``, and its
    stdout is its output once it exits 0) called with ``args``, in which
    :func:`ref` stands for another task's output."""
    named = [(k, t) for k, t in ((pb.TASK_KIND_PROCEDURE, procedure), (pb.TASK_KIND_WORKFLOW, workflow), (pb.TASK_KIND_PROC, proc)) if t]
    if len(named) != 1:
        raise errors.InvalidArgument(f"task {id} names one procedure, workflow or proc")
    kind, target = named[0]
    return pb.GraphTask(
        id=id,
        kind=kind,
        target=target,
        args=json.dumps(list(args)).encode(),
        dynamic=dynamic,
        attempts_max=attempts_max,
        queue=queue,
        version=version,
        argv=list(argv),
        proc_kind=pb.PROC_KIND_WASM if wasm else pb.PROC_KIND_NATIVE,
    )


def ref(task_id: str) -> dict:
    """The argument that takes task ``task_id``'s output."""
    return {"$task": task_id}


def _of_dict(t: dict) -> pb.GraphTask:
    return task(
        t["id"],
        procedure=t.get("procedure", ""),
        workflow=t.get("workflow", ""),
        args=t.get("args", ()),
        dynamic=t.get("dynamic", False),
        attempts_max=t.get("attempts_max", 0),
        queue=t.get("queue", ""),
        version=t.get("version", ""),
        proc=t.get("proc", ""),
        argv=t.get("argv", ()),
        wasm=t.get("wasm", False),
    )


class Graphs:
    """Task graphs (``client.graphs``)."""

    def __init__(self, c: "Client") -> None:
        self._c = c
        self._stub = rpc.GraphsStub(c._channel)

    def submit(
        self,
        tasks: Iterable[Any],
        *,
        result: str = "",
        graph_id: str = "",
        held: bool = False,
        realm: str = "",
    ) -> GraphInfo:
        """Submits a graph of ``tasks`` (:func:`task` values, or dicts as a
        graph file has them); a second submit of ``graph_id`` is the
        first."""
        ts = [t if isinstance(t, pb.GraphTask) else _of_dict(t) for t in tasks]
        req = pb.SubmitGraphRequest(realm=realm, graph_id=graph_id, tasks=ts, result=result, held=held)
        return _graph(self._c._call(self._stub.Submit, req))

    def add(self, graph_id: str, tasks: Iterable[Any], *, realm: str = "") -> GraphInfo:
        """Adds tasks to running graph ``graph_id``."""
        ts = [t if isinstance(t, pb.GraphTask) else _of_dict(t) for t in tasks]
        req = pb.AddTasksRequest(realm=realm, graph_id=graph_id, tasks=ts)
        return _graph(self._c._call(self._stub.AddTasks, req))

    def close(self, graph_id: str, *, realm: str = "") -> GraphInfo:
        """Closes held graph ``graph_id``: it ends once its tasks have."""
        return _graph(self._c._call(self._stub.Close, pb.GraphRequest(realm=realm, graph_id=graph_id)))

    def show(self, graph_id: str, *, realm: str = "") -> tuple:
        """``(GraphInfo, [TaskInfo, ...])``."""
        r = self._c._call(self._stub.Show, pb.GraphRequest(realm=realm, graph_id=graph_id))
        return _graph(r.graph), [_task(t) for t in r.tasks]

    def cancel(self, graph_id: str, *, realm: str = "") -> GraphInfo:
        """Cancels graph ``graph_id`` and what runs under it."""
        return _graph(self._c._call(self._stub.Cancel, pb.GraphRequest(realm=realm, graph_id=graph_id)))

    def list(self, *, status: "pb.GraphStatus" = pb.GRAPH_STATUS_UNSPECIFIED, limit: int = 100, realm: str = "") -> list:
        """The realm's graphs, newest first."""
        r = self._c._call(self._stub.List, pb.ListGraphsRequest(realm=realm, status=status, limit=limit))
        return [_graph(g) for g in r.graphs]

    def wait(
        self, graph_id: str, *, task: str = "", timeout: Optional[float] = None, realm: str = ""
    ) -> tuple:
        """Waits (on the node's change feed, at most ``timeout`` seconds;
        None: on) for graph ``graph_id`` or its ``task`` to end: ``(ended,
        GraphInfo, TaskInfo or None)``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            req = pb.WaitGraphRequest(
                realm=realm, graph_id=graph_id, task=task, timeout_ms=int(min(left, WAIT_SLICE) * 1000)
            )
            r = self._c._call(self._stub.Wait, req, wait=True)
            t = _task(r.task) if r.HasField("task") else None
            if r.ended or (deadline is not None and time.monotonic() >= deadline):
                return r.ended, _graph(r.graph), t

    def output(self, graph_id: str, *, task: str = "", realm: str = "") -> Any:
        """The output of graph ``graph_id`` (or its ``task``) once it ends
        — its JSON value, else its bytes; :class:`TaskFailed` if it failed
        or was cancelled."""
        _, g, t = self.wait(graph_id, task=task, realm=realm)
        if t is not None:
            if t.status != pb.TASK_STATUS_SUCCESS:
                raise TaskFailed(f"task {t.id} of graph {graph_id}: {t.error or 'cancelled'}")
            return _value(t.output)
        if g.status != pb.GRAPH_STATUS_SUCCESS:
            raise TaskFailed(f"graph {graph_id}: {g.error or 'cancelled'}")
        return _value(g.output)

    def graph(self, *, realm: str = "") -> "Graph":
        """A new graph held open, for :meth:`Graph.remote` calls."""
        g = self.submit([], held=True, realm=realm)
        return Graph(self, g.graph_id, realm)


class ObjectRef:
    """A task's future output (Ray's ``ObjectRef``): pass it to another
    task's ``remote`` call, or :meth:`Graph.get` it."""

    def __init__(self, graph: "Graph", task_id: str) -> None:
        self.graph, self.task_id = graph, task_id

    def get(self) -> Any:
        return self.graph.get(self)

    def __repr__(self) -> str:
        return f"ObjectRef({self.graph.graph_id}/{self.task_id})"


class RemoteFunction:
    """A stored procedure as a remote function of a :class:`Graph`."""

    def __init__(self, graph: "Graph", procedure: str, dynamic: bool, attempts_max: int) -> None:
        self._g, self._p, self._dynamic, self._attempts = graph, procedure, dynamic, attempts_max

    def remote(self, *args: Any) -> ObjectRef:
        """A task calling the procedure with ``args`` (a JSON array; an
        :class:`ObjectRef` in it takes that task's output). Kept until the
        graph sends its pending tasks."""
        return self._g._add(self._p, args, self._dynamic, self._attempts)


class Graph:
    """A graph held open: tasks added as they are made (in batches), ended
    by :meth:`close` (or leaving its ``with`` block) once they have."""

    def __init__(self, graphs: Graphs, graph_id: str, realm: str) -> None:
        self._graphs, self.graph_id, self._realm = graphs, graph_id, realm
        self._pending: list = []
        self._next = 0

    def remote(self, procedure: str, *, dynamic: bool = False, attempts_max: int = 0) -> RemoteFunction:
        """Procedure ``procedure`` as a remote function of this graph
        (``dynamic``: it may answer a child graph)."""
        return RemoteFunction(self, procedure, dynamic, attempts_max)

    def _add(self, procedure: str, args: Sequence[Any], dynamic: bool, attempts_max: int) -> ObjectRef:
        def arg(a: Any) -> Any:
            if isinstance(a, ObjectRef):
                if a.graph is not self:
                    raise errors.InvalidArgument(f"{a!r} is of another graph")
                return ref(a.task_id)
            return a

        self._next += 1
        tid = f"t{self._next}"
        self._pending.append(
            task(tid, procedure=procedure, args=[arg(a) for a in args], dynamic=dynamic, attempts_max=attempts_max)
        )
        return ObjectRef(self, tid)

    def submit(self) -> None:
        """Sends the pending tasks (at most SUBMIT_TASKS_MAX a call)."""
        while self._pending:
            batch, self._pending = self._pending[:20_000], self._pending[20_000:]
            self._graphs.add(self.graph_id, batch, realm=self._realm)

    def get(self, refs: Any) -> Any:
        """The output of an :class:`ObjectRef` (or a list of them), once it
        has one: its JSON value, else its bytes."""
        self.submit()
        if isinstance(refs, ObjectRef):
            return self._graphs.output(self.graph_id, task=refs.task_id, realm=self._realm)
        return [self.get(r) for r in refs]

    def close(self) -> GraphInfo:
        self.submit()
        return self._graphs.close(self.graph_id, realm=self._realm)

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()
            return
        try:  # what it left running stops with it
            self._graphs.cancel(self.graph_id, realm=self._realm)
        except errors.FailedPrecondition:
            pass  # it had ended (its failure is what is raised)
