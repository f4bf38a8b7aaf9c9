"""Ray's side of `tabos-bench graphs`: a reduction tree and a fan-out /
fan-in of no-op tasks, submitted by the driver with object refs as
arguments and awaited with ray.get. Prints one JSON line of wall times.

Usage: python -c "$(cat ray_graphs.py)" LEAVES FAN RUNS
"""

import json
import sys
import time

import ray

leaves, width, runs = (int(a) for a in sys.argv[1:4])
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")


@ray.remote
def zero(*args):
    return 0


def tree():
    level = [zero.remote() for _ in range(leaves)]
    while len(level) > 1:
        nxt = [zero.remote(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return ray.get(level[0])


def fan(n):
    parts = [zero.remote() for _ in range(n)]
    return ray.get(zero.remote(*parts))


fan(50)  # warm the workers, as tabos's run is
tree_ms, fan_ms = [], []
for _ in range(runs):
    t = time.perf_counter()
    tree()
    tree_ms.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter()
    fan(width)
    fan_ms.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"version": ray.__version__, "tree_ms": tree_ms, "fan_ms": fan_ms}))
ray.shutdown()
