"""Durable workflows from Python (tabos issue 22) against a real node."""

from __future__ import annotations

import pytest

import tabos
from tabos.workflows import Executor


def test_steps_run_once_and_a_second_start_is_the_first(node, client: tabos.Client) -> None:
    ran = []
    client.procedures.install("wf_tick", b'function main(a) { tabos.put("t/" + a, "1"); return a; }')
    ex = Executor(client, app_version="py-v1", lease=5.0)

    @ex.workflow("order")
    def order(ctx, data: bytes) -> bytes:
        a = ctx.step("reserve", lambda s: ran.append(s.key) or b"reserved")
        b = ctx.procedure("wf_tick", data)
        ctx.sleep(0.05)
        ctx.set_event("stage", b"done")
        return a + b"+" + b

    ex.start()
    wid = ex.run("order", b"o-1", workflow_id="py-order-1")
    w = ex.result(wid, timeout=30)
    assert (w.status, w.output) == ("success", b"reserved+o-1")
    assert ex.get_event(wid, "stage", timeout=5) == b"done"
    # A second start returns the first: nothing runs again.
    assert ex.run("order", b"o-1", workflow_id="py-order-1") == wid
    assert ex.result(wid).status == "success"
    assert ran == [f"{wid}/1"]
    shown = client.workflows.show(wid)
    assert [s["kind"] for s in shown["steps"]] == ["function", "procedure", "sleep", "set_event"]
    assert [w.workflow_id for w in client.workflows.list(name="order")] == [wid]
    rows = client.sql("SELECT status FROM workflow WHERE workflow_id = $1", wid)
    assert rows[0]["status"] == "success"
    ex.shutdown()


def test_failures_messages_queues_and_operations(node, client: tabos.Client) -> None:
    ex = Executor(client, app_version="py-v2", lease=5.0)

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
    wid = ex.enqueue("py-q", "waits", workflow_id="py-waits")
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
