"""Task graphs from Python: Ray-like remote calls over a held graph, a
whole graph submitted at once, dynamic child graphs, failures, cancel."""

from __future__ import annotations

import json

import pytest

import tabos
from tabos import graphs
from tabos._proto import tabos_pb2 as pb

ADD = "function main(a) { return String(JSON.parse(a).reduce((x, y) => x + y, 0)); }"
SPLIT = """function main(arg) {
  const [lo, hi] = JSON.parse(arg);
  if (hi - lo <= 4) { let s = 0; for (let i = lo; i < hi; i++) s += i; return String(s); }
  const mid = Math.floor((lo + hi) / 2);
  return JSON.stringify({"$tasks": [
    {"id": "l", "procedure": "py-split", "dynamic": true, "args": [lo, mid]},
    {"id": "r", "procedure": "py-split", "dynamic": true, "args": [mid, hi]},
    {"id": "s", "procedure": "py-add", "args": [{"$task": "l"}, {"$task": "r"}]}], "$result": "s"});
}"""


@pytest.fixture
def procs(client: tabos.Client) -> tabos.Client:
    client.procedures.install("py-add", ADD)
    client.procedures.install("py-split", SPLIT)
    client.procedures.install("py-boom", "function main(a) { throw new Error('boom'); }")
    return client


def test_remote_calls_take_each_others_outputs(procs: tabos.Client) -> None:
    with procs.graphs.graph() as g:
        add = g.remote("py-add")
        leaves = [add.remote(i, 1) for i in range(50)]
        total = add.remote(*leaves)
        assert g.get(total) == sum(i + 1 for i in range(50))
        # More tasks after a get, taking ended ones.
        more = add.remote(total, leaves[0], 100)
        assert more.get() == 1275 + 1 + 100
        assert g.get(leaves[:3]) == [1, 2, 3]
    info, tasks = procs.graphs.show(g.graph_id)
    assert info.status == pb.GRAPH_STATUS_SUCCESS
    assert len(tasks) == 52 and all(t.attempts == 1 for t in tasks)
    assert sorted(tasks[50].deps) == sorted(f"t{i}" for i in range(1, 51))


def test_a_submitted_graph_with_a_dynamic_task(procs: tabos.Client) -> None:
    g = procs.graphs.submit(
        [
            graphs.task("x", procedure="py-split", args=[0, 100], dynamic=True),
            {"id": "y", "procedure": "py-add", "args": [graphs.ref("x"), 1]},
        ]
    )
    assert procs.graphs.output(g.graph_id) == sum(range(100)) + 1
    children = [c for c in procs.graphs.list() if c.parent_graph == g.graph_id]
    assert [(c.parent_task, c.status) for c in children] == [("x", pb.GRAPH_STATUS_SUCCESS)]


def test_a_failing_task_fails_its_graph_and_its_takers(procs: tabos.Client) -> None:
    with pytest.raises(tabos.TaskFailed):
        with procs.graphs.graph() as g:
            boom = g.remote("py-boom", attempts_max=2).remote(1)
            after = g.remote("py-add").remote(boom, 1)
            g.get(after)
    info, tasks = procs.graphs.show(g.graph_id)
    assert info.status == pb.GRAPH_STATUS_ERROR
    assert [(t.status, t.attempts) for t in tasks] == [
        (pb.TASK_STATUS_ERROR, 2),
        (pb.TASK_STATUS_CANCELLED, 0),
    ]
    with pytest.raises(tabos.InvalidArgument):
        procs.graphs.submit([{"id": "a", "procedure": "py-add", "args": [graphs.ref("nope")]}])
    with pytest.raises(tabos.NotFound):
        procs.graphs.show("no-such-graph")


def test_cancel_ends_a_held_graph(procs: tabos.Client) -> None:
    g = procs.graphs.graph()
    g.remote("py-add").remote(1)
    g.submit()
    assert procs.graphs.cancel(g.graph_id).status == pb.GRAPH_STATUS_CANCELLED
    ended, info, _ = procs.graphs.wait(g.graph_id, timeout=5)
    assert ended and info.status == pb.GRAPH_STATUS_CANCELLED
    with pytest.raises(tabos.FailedPrecondition):
        procs.graphs.add(g.graph_id, [graphs.task("z", procedure="py-add")])


def test_a_workflow_task_runs_on_an_executor(procs: tabos.Client) -> None:
    ex = tabos.Executor(procs, app_version="py-graph", lease=5.0, serializer="raw")

    @ex.workflow("py-twice")
    def twice(ctx, arg: bytes) -> bytes:
        (n,) = json.loads(arg)
        return ctx.step("double", lambda s: str(n * 2).encode())

    ex.start()
    ex.serve("py-gq")
    try:
        g = procs.graphs.submit(
            [
                graphs.task("a", procedure="py-add", args=[1, 2]),
                graphs.task("w", workflow="py-twice", queue="py-gq", version="py-graph", args=[graphs.ref("a")]),
                {"id": "b", "procedure": "py-add", "args": [graphs.ref("w"), 10]},
            ]
        )
        assert procs.graphs.output(g.graph_id) == 16
        _, tasks = procs.graphs.show(g.graph_id)
        assert tasks[1].kind == pb.TASK_KIND_WORKFLOW and tasks[1].child == f"{g.graph_id}:w"
    finally:
        ex.shutdown()


def test_a_failing_task_beside_others_changes_nothing_of_theirs(procs: tabos.Client) -> None:
    count = "function main(a) { tabos.put('py-n', String(Number(tabos.get('py-n') || '0') + 1)); return '1'; }"
    procs.procedures.install("py-count", count)
    procs.procedures.install("py-half", "function main(a) { tabos.put('py-half', 'x'); throw new Error('half'); }")
    procs.procedures.install("py-get", "function main(k) { return tabos.get(k) || 'none'; }")
    before = int(procs.procedures.call("py-get", "py-n").result.decode().replace("none", "0"))
    # Submitted together, the node runs them in the same batches.
    bad = procs.graphs.submit([graphs.task("h", procedure="py-half", attempts_max=2)])
    good = procs.graphs.submit([graphs.task(f"c{i}", procedure="py-count") for i in range(40)])
    assert procs.graphs.output(good.graph_id) == 1
    with pytest.raises(tabos.TaskFailed):
        procs.graphs.output(bad.graph_id)
    assert int(procs.procedures.call("py-get", "py-n").result) == before + 40
    assert procs.procedures.call("py-get", "py-half").result == b"none"


def test_a_proc_task_gives_its_stdout(procs: tabos.Client) -> None:
    g = procs.graphs.submit(
        [
            graphs.task("n", proc="/bin/sh", argv=["-c", 'echo "$TABOS_TASK_ARGS" | tr -d "[]"'], args=[7]),
            graphs.task("m", procedure="py-add", args=[graphs.ref("n"), 1]),
        ]
    )
    assert procs.graphs.output(g.graph_id) == 8
    _, tasks = procs.graphs.show(g.graph_id)
    assert tasks[0].kind == pb.TASK_KIND_PROC and tasks[0].child == f"{g.graph_id}:n:1"
