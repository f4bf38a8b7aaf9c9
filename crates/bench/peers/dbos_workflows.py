"""DBOS Transact's side of `tabos-bench workflows` (run in the bench
virtualenv, where the benchmark pip-installs `dbos`).

    dbos_workflows.py MODE SYSTEM_DB_URL ARGS...

Modes (each prints one JSON line, `{"seconds": ..., ...}`):

* `starts N C`: N one-step workflows, C in flight at once, each started
  and its result awaited (DBOS.start_workflow, handle.get_result).
* `steps S`: one workflow of S steps, run to its end.
* `queue K POLL`: K workflows enqueued one after another in a queue
  polled every POLL seconds; each sample is the time from the enqueue
  call to the workflow's first line.
* `pending N`: starts N workflows whose first step completes and whose
  second blocks; prints READY when all N are in their second step, then
  waits to be killed (the benchmark sends SIGKILL).
* `recover N`: launches on the same system database, executor id and
  application version as `pending`: DBOS recovers the N pending workflows
  at launch; the time from launch to all N finished.

Every workflow's steps are DBOS steps (their outputs recorded in the system
database before the workflow goes on), as tabos's function steps are.
"""

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from dbos import DBOS, DBOSConfig, SetWorkflowID

MODE, URL = sys.argv[1], sys.argv[2]
ARGS = sys.argv[3:]

config: DBOSConfig = {
    "name": "tabos-bench",
    "system_database_url": URL,
    "application_version": "bench-v1",
    "executor_id": "bench-executor",
    "log_level": "WARNING",
}
DBOS(config=config)

STARTED = {}
BLOCK = threading.Event()
IN_SECOND = threading.Semaphore(0)


@DBOS.step()
def step(i):
    return i


@DBOS.step()
def second(i):
    if MODE == "pending":
        IN_SECOND.release()
        BLOCK.wait()
    return i


@DBOS.workflow()
def one_step(i):
    return step(i)


@DBOS.workflow()
def many_steps(n):
    for i in range(n):
        step(i)
    return n


@DBOS.workflow()
def marked(i):
    STARTED[i] = time.perf_counter()
    return step(i)


@DBOS.workflow()
def two_steps(i):
    step(i)
    return second(i)


def out(**kv):
    print(json.dumps(kv), flush=True)


if MODE == "recover":
    t0 = time.perf_counter()
    DBOS.launch()
    # Launch recovered this executor's pending workflows: wait for each.
    n = int(ARGS[0])
    for i in range(n):
        DBOS.retrieve_workflow(f"pending-{i}").get_result()
    out(seconds=time.perf_counter() - t0, workflows=n)
    DBOS.destroy()
    sys.exit(0)

DBOS.launch()

if MODE == "queue":
    queue = DBOS.register_queue("bench", polling_interval_sec=float(ARGS[1]))

if MODE == "starts":
    n, c = int(ARGS[0]), int(ARGS[1])

    def run(i):
        DBOS.start_workflow(one_step, i).get_result()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=c) as pool:
        list(pool.map(run, range(n)))
    out(seconds=time.perf_counter() - t0, workflows=n)
elif MODE == "steps":
    s = int(ARGS[0])
    t0 = time.perf_counter()
    DBOS.start_workflow(many_steps, s).get_result()
    out(seconds=time.perf_counter() - t0, steps=s)
elif MODE == "queue":
    k = int(ARGS[0])
    samples = []
    t_all = time.perf_counter()
    for i in range(k):
        t0 = time.perf_counter()
        queue.enqueue(marked, i).get_result()
        samples.append(STARTED[i] - t0)
    out(seconds=time.perf_counter() - t_all, samples=samples)
elif MODE == "pending":
    n = int(ARGS[0])
    for i in range(n):
        with SetWorkflowID(f"pending-{i}"):
            DBOS.start_workflow(two_steps, i)
    for _ in range(n):
        IN_SECOND.acquire()
    print("READY", flush=True)
    BLOCK.wait()
else:
    sys.exit(f"unknown mode {MODE}")
DBOS.destroy()
