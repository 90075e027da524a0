#!/usr/bin/env python3
"""redis-py, unmodified and with its defaults, through shardring's proxy and straight to Redis: the same
results for get/set/mget, pipeline(transaction=False), hgetall, zrange(withscores=True), delete/exists,
pipeline(transaction=True) on hash-tagged keys, WATCH retry loops under a concurrent writer, and blpop
with a timeout and with a producer. Then what only the proxy does: a transaction across servers is
refused whole and leaves the client usable, and clients that leave inside WATCH or BLPOP leave no
server connection behind (counted on the pool's servers).

Usage: redis-py-check.py PROXY_PORT DIRECT_PORT [POOL_SERVER_PORT...]
       (run with the redis-py under test on sys.path)
"""
import sys
import threading
import time
import uuid

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def run(r, prefix):
    out = []
    k = lambda s: f"{prefix}:{s}"
    out.append(r.set(k("a"), "1"))
    out.append(r.get(k("a")))
    out.append(r.get(k("missing")))
    out.append(r.mset({k(f"m{i}"): f"v{i}" for i in range(20)}))
    out.append(r.mget([k(f"m{i}") for i in range(25)]))
    p = r.pipeline(transaction=False)
    for i in range(50):
        p.set(k(f"p{i}"), i)
        p.get(k(f"p{i}"))
    p.incr(k("n"))
    p.get(k("nope"))
    out.append(p.execute())
    out.append(r.hset(k("h"), mapping={"f1": "x", "f2": "y"}))
    out.append(r.hgetall(k("h")))
    out.append(r.zadd(k("z"), {"a": 1.5, "b": 2, "c": -3.25}))
    out.append(r.zrange(k("z"), 0, -1, withscores=True))
    out.append(r.zscore(k("z"), "a"))
    out.append(r.exists(*[k(f"m{i}") for i in range(25)]))
    out.append(r.delete(*[k(f"m{i}") for i in range(25)]))
    out.append(r.ping())
    out.extend(transactions(r, prefix))
    return out


def transactions(r, prefix):
    """pipeline(transaction=True), WATCH loops with a concurrent writer, blocking pops."""
    out = []
    t = lambda s: f"{{{prefix}}}:{s}"
    p = r.pipeline(transaction=True)
    p.set(t("a"), 1).incr(t("a")).get(t("a")).hset(t("h"), "f", "v").hgetall(t("h")).ping()
    out.append(p.execute())
    # Watchers add 1 each round through WATCH/MULTI/EXEC while a writer adds 1000s directly:
    # every increment must land exactly once.
    r.set(t("n"), 0)
    rounds, watchers = 40, 3

    def add_one(pipe):
        n = int(pipe.get(t("n")))
        pipe.multi()
        pipe.set(t("n"), n + 1)

    def watcher():
        for _ in range(rounds):
            r.transaction(add_one, t("n"))

    def writer():
        for _ in range(rounds):
            r.incrby(t("n"), 1000)

    threads = [threading.Thread(target=watcher) for _ in range(watchers)]
    threads.append(threading.Thread(target=writer))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out.append(int(r.get(t("n"))) == rounds * watchers + rounds * 1000)
    started = time.monotonic()
    out.append(r.blpop([t("q1"), t("q2")], timeout=1))
    out.append(time.monotonic() - started >= 0.9)

    def produce():
        time.sleep(0.3)
        r.rpush(t("q2"), "job")

    producer = threading.Thread(target=produce)
    producer.start()
    out.append(r.blpop([t("q1"), t("q2")], timeout=5))
    producer.join()
    out.extend(pubsub(r, prefix))
    return out


def pubsub(r, prefix):
    """pubsub(): subscribe, psubscribe, get_message, as redis-py's users call them."""
    out = []
    p = r.pubsub()
    channels = [f"{prefix}:news:{i}" for i in range(6)]
    p.subscribe(*channels)
    p.psubscribe(f"{prefix}:sport:*")
    confirmations = []
    while len(confirmations) < 7:
        m = p.get_message(timeout=2)
        if m is None:
            break
        confirmations.append((m["type"], m["channel"]))
    # Each server confirms its own channels: the order across servers is not Redis's to keep.
    out.append(sorted(confirmations))
    for i, ch in enumerate(channels):
        out.append(r.publish(ch, f"m{i}"))
    out.append(r.publish(f"{prefix}:sport:golf", "birdie"))
    got = []
    while len(got) < 7:
        m = p.get_message(timeout=2)
        if m is None:
            break
        if m["type"] in ("message", "pmessage"):
            got.append((m["type"], m["pattern"], m["channel"], m["data"]))
    out.append(got)
    p.unsubscribe(channels[0])
    p.punsubscribe()
    ends = []
    while len(ends) < 2:
        m = p.get_message(timeout=2)
        if m is None:
            break
        ends.append((m["type"], m["channel"], m["data"]))
    out.append(sorted(ends))
    p.close()
    return out


def blocked_on(ports):
    """How many connections the pool's servers have blocked (BLPOP) or inside MULTI."""
    n = 0
    for port in ports:
        for c in redis.Redis(host="127.0.0.1", port=port).client_list():
            # b: blocked in a command; x: inside MULTI.
            if set(c.get("flags", "")) & {"b", "x"}:
                n += 1
    return n


def proxy_only(port, pool_ports, kwargs):
    """What a proxy over several servers adds: refusals that leave the client usable, and server
    connections given back by clients that leave."""
    r = redis.Redis(host="127.0.0.1", port=port, **kwargs)
    keys = [f"spread:{i}:{uuid.uuid4().hex}" for i in range(16)]
    p = r.pipeline(transaction=True)
    for k in keys:
        p.set(k, 1)
    try:
        p.execute()
        sys.exit("a transaction across servers ran")
    except redis.ResponseError as e:
        # redis-py 8 raises ClusterCrossSlotError (a ResponseError) for Redis Cluster's CROSSSLOT.
        said = f"{type(e).__name__} {e}"
        if not any(w in said for w in ("CROSSSLOT", "CrossSlot", "EXECABORT")):
            sys.exit(f"a transaction across servers failed with {e!r}")
    if r.exists(*keys) != 0:
        sys.exit("a refused transaction wrote keys")
    if not r.ping():
        sys.exit("the client is unusable after a refused transaction")
    # Clients that leave while blocked or watching: their server connections go too. No retries:
    # redis-py 6 and later retry a command whose connection dropped (three times by default), so a
    # leaver's BLPOP would come back on a new connection after its disconnect, a client that stayed.
    leavers = []
    once = Retry(NoBackoff(), 0)
    for i in range(4):
        c = redis.Redis(host="127.0.0.1", port=port, retry=once, **kwargs)
        leavers.append(c)
        threading.Thread(target=lambda c=c, i=i: swallow(c.blpop, f"{{gone}}:{i}", 0), daemon=True).start()
    w = redis.Redis(host="127.0.0.1", port=port, retry=once, **kwargs)
    wp = w.pipeline()
    wp.watch("{gone}:w")
    leavers.append(w)
    time.sleep(0.5)
    if blocked_on(pool_ports) != 4:
        sys.exit(f"expected 4 blocked server connections, saw {blocked_on(pool_ports)}")
    for c in leavers:
        c.connection_pool.disconnect()
    wp.reset()
    deadline = time.monotonic() + 5
    while blocked_on(pool_ports) and time.monotonic() < deadline:
        time.sleep(0.05)
    if blocked_on(pool_ports):
        sys.exit(f"{blocked_on(pool_ports)} server connections still blocked after their clients left")


def swallow(f, *args):
    try:
        f(*args)
    except Exception:
        pass


def spoken(r):
    """The RESP version the client's connection negotiated."""
    try:
        conn = r.connection_pool.get_connection()
    except TypeError:
        conn = r.connection_pool.get_connection("PING")
    try:
        conn.connect()
        return conn.protocol
    finally:
        r.connection_pool.release(conn)


def main():
    proxy_port, direct_port = int(sys.argv[1]), int(sys.argv[2])
    pool_ports = [int(p) for p in sys.argv[3:]]
    # The library's default first, then each RESP version asked for explicitly.
    for kwargs in ({}, {"protocol": 2}, {"protocol": 3}):
        via_proxy = redis.Redis(host="127.0.0.1", port=proxy_port, **kwargs)
        direct = redis.Redis(host="127.0.0.1", port=direct_port, **kwargs)
        prefix = uuid.uuid4().hex
        # The direct Redis is not one of the pool's servers: the same keys on both.
        got, want = run(via_proxy, prefix), run(direct, prefix)
        proto = spoken(via_proxy)
        what = f"redis-py {redis.__version__} ({'default' if not kwargs else 'asked'}: RESP{proto})"
        if got != want:
            for i, (g, w) in enumerate(zip(got, want)):
                if g != w:
                    print(f"step {i}: proxy {g!r} != direct {w!r}")
            sys.exit(f"{what}: results differ")
        print(f"{what}: {len(got)} results equal through the proxy")
        if pool_ports:
            proxy_only(proxy_port, pool_ports, kwargs)
            print(f"{what}: a transaction across servers refused, leavers' connections freed")


if __name__ == "__main__":
    main()
