#!/usr/bin/env python3
"""redis-py, unmodified and with its defaults, through shardring's proxy and straight to Redis: the same
results for get/set/mget, pipeline(transaction=False), hgetall, zrange(withscores=True), delete/exists.

Usage: redis-py-check.py PROXY_PORT DIRECT_PORT   (run with the redis-py under test on sys.path)
"""
import sys
import uuid

import redis


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
    return out


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
    # The library's default first, then each RESP version asked for explicitly.
    for kwargs in ({}, {"protocol": 2}, {"protocol": 3}):
        via_proxy = redis.Redis(host="127.0.0.1", port=proxy_port, **kwargs)
        direct = redis.Redis(host="127.0.0.1", port=direct_port, **kwargs)
        prefix = uuid.uuid4().hex
        got, want = run(via_proxy, "p" + prefix), run(direct, "d" + prefix)
        proto = spoken(via_proxy)
        what = f"redis-py {redis.__version__} ({'default' if not kwargs else 'asked'}: RESP{proto})"
        if got != want:
            for i, (g, w) in enumerate(zip(got, want)):
                if g != w:
                    print(f"step {i}: proxy {g!r} != direct {w!r}")
            sys.exit(f"{what}: results differ")
        print(f"{what}: {len(got)} results equal through the proxy")


if __name__ == "__main__":
    main()
