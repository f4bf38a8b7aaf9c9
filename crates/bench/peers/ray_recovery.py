"""Ray's side of `tabos-bench graphs`' node kill: a two-node Ray cluster on
this machine (Ray's own `ray.cluster_utils.Cluster`, one CPU each), TASKS
tasks of ~1 ms each (retried on a node's loss, Ray's default); once a fifth
have ended the second node is killed (not gracefully); the time from the
kill to every result. Prints one JSON line.

Usage: python -c "$(cat ray_recovery.py)" TASKS
"""

import json
import sys
import time

import ray
from ray.cluster_utils import Cluster

tasks = int(sys.argv[1])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
worker = cluster.add_node(num_cpus=1)
ray.init(address=cluster.address, logging_level="ERROR")
cluster.wait_for_nodes()


@ray.remote(max_retries=3)
def work(i):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.001:
        pass
    return 1


refs = [work.remote(i) for i in range(tasks)]
ray.wait(refs, num_returns=tasks // 5, fetch_local=False)
t = time.perf_counter()
cluster.remove_node(worker, allow_graceful=False)
total = sum(ray.get(refs))
secs = time.perf_counter() - t
print(json.dumps({"version": ray.__version__, "secs": secs, "total": total}))
ray.shutdown()
cluster.shutdown()
