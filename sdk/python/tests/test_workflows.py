"""Durable workflows from Python (tabos issue 22) against a real node."""

from __future__ import annotations

import json

import pytest

import tabos
from tabos.workflows import Executor, WorkflowFailed


def test_steps_run_once_and_a_second_start_is_the_first(node, client: tabos.Client) -> None:
    ran = []
    client.procedures.install("wf_tick", b'function main(a) { tabos.put("t/" + a, "1"); return a; }')
    # serializer="raw": the bytes contract, bytes in and out.
    ex = Executor(client, app_version="py-v1", lease=5.0, serializer="raw")

    @ex.workflow("order")
    def order(ctx, data: bytes) -> bytes:
        a = ctx.step("reserve", lambda s: ran.append(s.key) or b"reserved")
        b = ctx.procedure("wf_tick", data)
        ctx.sleep(0.05)
        ctx.set_event("stage", b"done")
        return a + b"+" + b

    ex.start()
    wid = ex.run("order", b"o-1", workflow_id="py-order-1").workflow_id
    w = ex.result(wid, timeout=30)
    assert (w.status, w.output) == ("success", b"reserved+o-1")
    assert ex.get_event(wid, "stage", timeout=5) == b"done"
    # A second start returns the first: nothing runs again.
    assert ex.run("order", b"o-1", workflow_id="py-order-1").workflow_id == wid
    assert ex.result(wid).status == "success"
    assert ran == [f"{wid}/1"]
    shown = client.workflows.show(wid)
    assert [s["kind"] for s in shown["steps"]] == ["function", "procedure", "sleep", "set_event"]
    assert [w.workflow_id for w in client.workflows.list(name="order")] == [wid]
    rows = client.sql("SELECT status FROM workflow WHERE workflow_id = $1", wid)
    assert rows[0]["status"] == "success"
    ex.shutdown()


def test_failures_messages_queues_and_operations(node, client: tabos.Client) -> None:
    ex = Executor(client, app_version="py-v2", lease=5.0, serializer="raw")

    @ex.workflow("flaky")
    def flaky(ctx, _: bytes) -> bytes:
        return ctx.step("boom", lambda s: 1 / 0, attempts=2, backoff=0.01)

    @ex.workflow("procs")
    def procs(ctx, _: bytes) -> bytes:
        ok = ctx.proc("true", "/bin/true")
        try:
            ctx.proc("false", "/bin/false")
            failed = False
        except tabos.StepFailed:
            failed = True
        return f"{ok} {failed}".encode()

    @ex.workflow("waits")
    def waits(ctx, _: bytes) -> bytes:
        got = ctx.recv("go", timeout=30)
        return got or b"none"

    ex.start()
    ex.serve("py-q")
    ex.serve_recovery()
    w = ex.result(ex.run("flaky"), timeout=30)
    assert w.status == "error" and "ZeroDivisionError" in w.error
    assert ex.result(ex.run("procs", workflow_id="py-procs"), timeout=60).output == b"0 True"
    assert client.wait("py-procs.s1").exit_status == 0
    wid = ex.enqueue("py-q", "waits", workflow_id="py-waits").workflow_id
    ex.send(wid, "go", b"hello")
    assert ex.result(wid, timeout=30).output == b"hello"
    forked = client.workflows.fork(wid, from_step=1, new_id="py-waits-2")
    assert forked.workflow_id == "py-waits-2"
    ex.send("py-waits-2", "go", b"again")
    assert ex.result("py-waits-2", timeout=30).output == b"again"
    q = client.workflows.set_queue("py-q", concurrency=2)
    assert q["concurrency"] == 2
    with pytest.raises(tabos.NotFound):
        client.workflows.cancel("py-nope")
    with pytest.raises(tabos.FailedPrecondition):
        client.workflows.resume(wid)
    with pytest.raises(tabos.InvalidArgument):
        client.workflows.list(status="done")
    ex.shutdown()


def test_json_pickle_decorators_and_handles(node, client: tabos.Client) -> None:
    """As DBOS Transact's users write workflows: decorated steps called as
    functions, JSON arguments and results by default (pickle opt-in), and
    a handle with get_status() and get_result()."""
    ex = Executor(client, app_version="py-v3", lease=5.0)
    calls = []

    @ex.step(attempts=2)
    def price(item: dict) -> dict:
        calls.append(item["sku"])
        return {"sku": item["sku"], "cents": 250 * item["qty"]}

    @ex.workflow()
    def checkout(ctx, order: dict) -> dict:
        lines = [price(i) for i in order["items"]]
        ctx.set_event("lines", len(lines))
        return {"order": order["id"], "total": sum(l["cents"] for l in lines), "lines": lines}

    @ex.workflow
    def fails(ctx, n: int) -> None:
        raise ValueError(f"bad {n}")

    @ex.workflow("waits_json")
    def waits(ctx, _: None) -> dict:
        return {"got": ctx.recv("go", timeout=30)}

    ex.start()
    order = {"id": "o-9", "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}]}
    h = ex.run("checkout", order, workflow_id="py-json-1")
    assert isinstance(h, tabos.WorkflowHandle) and h.workflow_id == "py-json-1"
    got = h.get_result(timeout=30)
    assert got == {"order": "o-9", "total": 750, "lines": [
        {"sku": "a", "cents": 500}, {"sku": "b", "cents": 250}]}
    assert h.get_status().status == "success"
    assert ex.get_event(h, "lines", timeout=5) == 2
    # Kept as JSON: readable in SQL as it is in Python.
    row = client.sql("SELECT input, output FROM workflow WHERE workflow_id = $1", "py-json-1")[0]
    assert json.loads(row["input"]) == order and json.loads(row["output"]) == got
    # Steps were recorded, named after their functions, and ran once; a
    # second start (by the function itself) is the first.
    assert ex.run(checkout, order, workflow_id="py-json-1").get_result(timeout=30) == got
    assert calls == ["a", "b"]
    assert [s["name"] for s in client.workflows.show("py-json-1")["steps"]] == ["price", "price", "lines"]
    # Outside a workflow, a step is a plain call.
    assert price({"sku": "c", "qty": 4}) == {"sku": "c", "cents": 1000}
    # Failures: the error, typed.
    with pytest.raises(WorkflowFailed) as failed:
        ex.run("fails", 3).get_result(timeout=30)
    assert "ValueError: bad 3" in failed.value.error
    # Messages in JSON; a handle from an id.
    w = ex.run("waits_json", workflow_id="py-json-w")
    assert ex.retrieve_workflow("py-json-w").get_status().status in ("pending", "success")
    ex.send(w, "go", {"ok": [1, 2]})
    assert w.get_result(timeout=30) == {"got": {"ok": [1, 2]}}
    # Not JSON: refused before anything is stored, saying what to do.
    with pytest.raises(tabos.InvalidArgument, match="pickle"):
        ex.run("checkout", {"when": object()})
    with pytest.raises(tabos.InvalidArgument):
        Executor(client, app_version="x", serializer="yaml")
    ex.shutdown()

    # Pickle, opted into: any Python object.
    px = Executor(client, app_version="py-v4", lease=5.0, serializer="pickle")

    @px.workflow()
    def span(ctx, r: range) -> frozenset:
        return frozenset(ctx.step("double", lambda _: [2 * i for i in r]))

    px.start()
    assert px.run("span", range(3)).get_result(timeout=30) == frozenset({0, 2, 4})
    px.shutdown()


def test_a_workflow_written_as_a_wasm_module(node, client: tabos.Client, tmp_path) -> None:
    """``client.workflows.run_module``: the example module (Rust compiled to
    wasm32-wasip1) uploaded and run by a proc of its own."""
    import pathlib
    import subprocess

    examples = pathlib.Path(__file__).resolve().parents[3] / "examples"
    subprocess.run(["sh", str(examples / "workflow-wasm" / "build.sh"), str(tmp_path)], check=True)
    module = tmp_path / "workflow.wasm"
    client.procedures.install("reserve", (examples / "workflow-wasm" / "reserve.js").read_bytes())
    run = client.workflows.run_module(module, "order", "gadget 2", workflow_id=f"py-mod-{node.way}")
    assert run.created and run.pid and run.workflow.executor == f"proc:{run.pid}"
    w = client.workflows.wait(run.workflow.workflow_id, timeout=60)
    assert (w.status, w.output) == ("success", b"2 x gadget = 20; left in stock: 8")
    again = client.workflows.run_module(module, "order", "gadget 2", workflow_id=f"py-mod-{node.way}")
    assert (again.created, again.pid) == (False, run.pid)
    shown = client.workflows.show(w.workflow_id)
    assert [s["name"] for s in shown["steps"]] == ["reserve", "invoice", "sleep"]
    with pytest.raises(tabos.errors.InvalidArgument):
        client.workflows.run_module(tmp_path, "order")
