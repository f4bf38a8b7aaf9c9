"""redis-py, with its defaults, against `tabos kv serve` (issue 39, item 1).

Usage: clients.py HOST PORT PASSWORD. redis-py 8 connects with RESP3
(`HELLO 3 AUTH default PASSWORD`) and names itself (`CLIENT SETINFO`).
Prints "redis-py: all checks passed" at the end; any failed check raises.
"""

import sys
import time

import redis

host, port, password = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def expect_error(what, fn, words):
    try:
        fn()
    except redis.exceptions.ResponseError as e:
        assert words in str(e), f"{what}: {e}"
        return
    raise AssertionError(f"{what}: no error")


r = redis.Redis(host=host, port=port, password=password, decode_responses=True)
assert r.ping() is True
conn = r.connection_pool.get_connection()
assert conn.protocol in (3, "3"), conn.protocol
assert conn.handshake_metadata is not None, "no HELLO was answered"
proto = conn.handshake_metadata.get("proto", conn.handshake_metadata.get(b"proto"))
assert proto == 3, conn.handshake_metadata
r.connection_pool.release(conn)
r.flushall()
assert r.dbsize() == 0

# Strings and SET's options.
assert r.set("k", "v") is True
assert r.get("k") == "v"
assert r.get("missing") is None
assert r.set("k", "w", nx=True) is None
assert r.set("absent", "w", xx=True) is None
assert r.set("k", "w", xx=True, get=True) == "v"
assert r.set("t", "1", ex=100) is True
assert 99 <= r.ttl("t") <= 100
assert 99_000 <= r.pttl("t") <= 100_000
assert r.set("t", "2", keepttl=True) is True
assert r.ttl("t") > 0
assert r.set("t", "3") is True
assert r.ttl("t") == -1
assert r.ttl("missing") == -2
assert r.setnx("nx", "1") is True and r.setnx("nx", "2") is False
assert r.setex("se", 50, "v") is True and 49 <= r.ttl("se") <= 50
assert r.psetex("pse", 50_000, "v") is True and r.pttl("pse") > 0
assert r.getset("k", "x") == "w"
assert r.getdel("k") == "x" and r.exists("k") == 0
assert r.append("s", "Hello") == 5 and r.append("s", " World") == 11
assert r.strlen("s") == 11
assert r.getrange("s", -5, -1) == "World"
assert r.setrange("s", 6, "Redis") == 11 and r.get("s") == "Hello Redis"
assert r.type("s") == "string" and r.type("missing") == "none"
assert r.mset({"a": "1", "b": "2", "c": "3"}) is True
assert r.mget("a", "missing", "c") == ["1", None, "3"]
assert r.exists("a", "b", "missing") == 2
assert r.delete("a", "b", "missing") == 2

# Integers, exactly as Redis reads them.
assert r.incr("n") == 1 and r.incrby("n", 41) == 42 and r.decr("n") == 41
assert r.decrby("n", 1) == 40
assert r.incrbyfloat("f", 10.5) == 10.5 and r.incrbyfloat("f", 0.1) == 10.6
for bad in ("012", "+5", " 1", "1 ", "-0", "1.0", "99999999999999999999"):
    r.set("bad", bad)
    expect_error(f"INCR of {bad!r}", lambda: r.incr("bad"), "not an integer")
r.set("max", str(2**63 - 1))
expect_error("INCR past 2^63-1", lambda: r.incr("max"), "overflow")

# Deadlines: invisible at once when they pass.
assert r.set("soon", "v", px=100) is True
assert r.expire("n", 100) is True and 0 < r.ttl("n") <= 100
assert r.expire("n", 50, gt=True) is False
assert r.expire("n", 50, lt=True) is True
assert r.persist("n") is True and r.ttl("n") == -1
assert r.expire("missing", 10) is False
assert r.pexpireat("a2", 1) is False
r.set("at", "v")
assert r.expireat("at", int(time.time()) + 100) is True and r.ttl("at") > 0
assert r.expiretime("at") > time.time()
assert r.getex("at", persist=True) == "v" and r.ttl("at") == -1
assert r.getex("at", px=100_000) == "v" and r.pttl("at") > 0
expect_error("SET EX 0", lambda: r.set("z", "v", ex=0), "invalid expire time")
time.sleep(0.3)
assert r.get("soon") is None and r.exists("soon") == 0 and r.ttl("soon") == -2
assert r.expire("at", -1) is True and r.exists("at") == 0

# Only db 0, as a Redis Cluster.
assert r.execute_command("SELECT", 0) in (True, "OK")
expect_error("SELECT 5", lambda: r.execute_command("SELECT", 5), "out of range")
try:
    redis.Redis(host=host, port=port, password=password, db=5).ping()
    raise AssertionError("db=5 was accepted")
except redis.exceptions.ResponseError as e:
    assert "out of range" in str(e), e

# Sign-in refused with a wrong password, in either protocol.
for protocol in (2, 3):
    try:
        redis.Redis(host=host, port=port, password="wrong", protocol=protocol).ping()
        raise AssertionError(f"RESP{protocol}: a wrong password was accepted")
    except redis.exceptions.AuthenticationError:
        pass

# RESP2, as older clients speak it, sees the same keys.
r2 = redis.Redis(host=host, port=port, password=password, protocol=2, decode_responses=True)
assert r2.get("s") == "Hello Redis" and r2.get("missing") is None

# A command the service does not have, and one across shards it refuses.
expect_error("LPUSH", lambda: r.lpush("l", "x"), "unknown command")
keys = [f"key{i}" for i in range(16)]
try:
    r.msetnx({k: "1" for k in keys})
    raise AssertionError("MSETNX across shards was accepted")
except redis.exceptions.ClusterCrossSlotError:
    pass  # CROSSSLOT, which redis-py knows from Redis Cluster
assert r.exists(*keys) == 0, "a refused MSETNX set nothing"

# Hashes (HGETALL is a RESP3 map, a dict to redis-py).
assert r.hset("user:1", mapping={"name": "ada", "visits": "1"}) == 2
assert r.hset("user:1", "lang", "en") == 1
assert r.hget("user:1", "name") == "ada" and r.hget("user:1", "nope") is None
assert r.hmget("user:1", ["name", "nope"]) == ["ada", None]
assert r.hincrby("user:1", "visits", 41) == 42
assert r.hincrbyfloat("user:1", "score", 1.5) == 1.5
assert r.hgetall("user:1") == {"name": "ada", "visits": "42", "lang": "en", "score": "1.5"}
assert sorted(r.hkeys("user:1")) == ["lang", "name", "score", "visits"]
assert r.hlen("user:1") == 4 and r.hexists("user:1", "lang") and r.hstrlen("user:1", "name") == 3
assert r.type("user:1") == "hash"
assert r.hsetnx("user:1", "name", "bob") == 0  # False (RESP2) or 0 (RESP3)
expect_error("GET of a hash", lambda: r.get("user:1"), "WRONGTYPE")
expect_error("HSET of a string", lambda: r.hset("s", "f", "v"), "WRONGTYPE")
assert r.hdel("user:1", "name", "lang", "score", "visits", "nope") == 4
assert r.exists("user:1") == 0, "an empty hash is no key"

# Transactions, in one shard (keys with one hash tag): MULTI/EXEC as
# redis-py's pipeline sends it, and WATCH's optimistic check.
r.set("{acct}:a", 100)
r.set("{acct}:b", 0)
with r.pipeline(transaction=True) as p:
    p.decrby("{acct}:a", 30).incrby("{acct}:b", 30).get("{acct}:a")
    assert p.execute() == [70, 30, "70"]
with r.pipeline() as p:
    p.watch("{acct}:a")
    balance = int(p.get("{acct}:a"))
    p.multi()
    p.set("{acct}:a", balance - 10)
    assert p.execute() == [True]
assert r.get("{acct}:a") == "60"
with r.pipeline() as p:
    p.watch("{acct}:a")
    r.set("{acct}:a", 0)  # another client's write
    p.multi()
    p.set("{acct}:a", 999)
    try:
        p.execute()
        raise AssertionError("EXEC ran though a watched key changed")
    except redis.exceptions.WatchError:
        pass
assert r.get("{acct}:a") == "0"
# A runtime error in one command does not undo the others, as in Redis.
with r.pipeline(transaction=True) as p:
    p.set("{acct}:s", "x").incr("{acct}:s").set("{acct}:t", "y")
    out = p.execute(raise_on_error=False)
    assert out[0] is True and isinstance(out[1], redis.exceptions.ResponseError) and out[2] is True
# Keys of two shards in one transaction: refused, nothing runs.
with r.pipeline(transaction=True) as p:
    p.set("{acct}:a", 1).set("{other}:a", 1)
    try:
        p.execute()
        raise AssertionError("a transaction across shards ran")
    except (redis.exceptions.ResponseError, redis.exceptions.ClusterCrossSlotError) as e:
        assert "CROSSSLOT" in str(e) or "slot" in str(e) or "EXECABORT" in str(e), e
assert r.get("{acct}:a") == "0" and r.get("{other}:a") is None

# SCAN over every shard: each key once (none is written meanwhile), with
# MATCH, COUNT and TYPE; and a key there throughout the scan is returned
# though others come and go.
r.flushall()
names = {f"scan:{i}" for i in range(500)}
r.mset({k: "v" for k in names})
r.hset("scan:hash", "f", "v")
seen = []
cursor = 0
while True:
    cursor, page = r.scan(cursor, count=37)
    seen.extend(page)
    if cursor == 0:
        break
assert sorted(seen) == sorted(names | {"scan:hash"}), (len(seen), len(set(seen)))
assert set(r.scan_iter(match="scan:1?")) == {f"scan:{i}" for i in range(10, 20)}
assert list(r.scan_iter(_type="hash")) == ["scan:hash"]
kept, cursor, churned = set(), 0, 0
while True:
    cursor, page = r.scan(cursor, count=50)
    kept.update(page)
    r.set(f"churn:{churned}", "x")
    r.delete(f"churn:{churned - 1}")
    churned += 1
    if cursor == 0:
        break
assert names <= kept, "a key there for the whole scan was not returned"
expect_error("SCAN of a bad cursor", lambda: r.scan("x"), "invalid cursor")

# Publish/subscribe (RESP3 pushes to redis-py): channels and patterns,
# messages from another connection, counts, PUBSUB.
p = r.pubsub()
p.subscribe("news")
p.psubscribe("sport.*")
for _ in range(2):
    assert p.get_message(timeout=5)["type"] in ("subscribe", "psubscribe")
assert r.publish("news", "hello") == 1
assert r.publish("sport.tennis", "ace") == 1
assert r.publish("weather", "rain") == 0
m = p.get_message(timeout=5)
assert (m["type"], m["channel"], m["data"]) == ("message", "news", "hello"), m
m = p.get_message(timeout=5)
assert (m["type"], m["pattern"], m["channel"], m["data"]) == (
    "pmessage", "sport.*", "sport.tennis", "ace"), m
assert r.pubsub_channels() == ["news"]
assert r.pubsub_numsub("news", "weather") == [("news", 1), ("weather", 0)]
assert r.pubsub_numpat() == 1
second = r.pubsub()
second.subscribe("news")
assert second.get_message(timeout=5)["type"] == "subscribe"
assert r.publish("news", "both") == 2
assert p.get_message(timeout=5)["data"] == "both"
assert second.get_message(timeout=5)["data"] == "both"
p.unsubscribe("news")
assert p.get_message(timeout=5)["type"] == "unsubscribe"
assert r.publish("news", "one") == 1
second.close()
p.punsubscribe()
assert p.get_message(timeout=5)["type"] == "punsubscribe"
p.close()
for _ in range(50):  # the closed subscribers' links go
    if r.publish("news", "none") == 0:
        break
    time.sleep(0.1)
assert r.publish("news", "none") == 0 and r.pubsub_numpat() == 0

r.flushall()
assert r.dbsize() == 0 and r.get("s") is None
print("redis-py: all checks passed")
