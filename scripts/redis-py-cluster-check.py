#!/usr/bin/env python3
"""redis-py through a shardring Redis Cluster pool (`--redis-cluster`), RESP2 and RESP3, compared with
redis-py's own cluster client (`RedisCluster`) against the same cluster: the same results for single-key
commands, MSET/MGET across slots (the cluster client's `*_nonatomic`), pipelines across slots, hashes,
sorted sets, counters and TTLs, multi-key DEL/EXISTS, transactions on hash-tagged keys, and the commands
across every master (SCAN, KEYS, DBSIZE) over what both wrote. No reply seen through the proxy is a
redirection (redis-py raises MOVED and ASK as errors: any would fail the run).

Usage: redis-py-cluster-check.py PROXY_PORT NODE_PORT   (run with the redis-py under test on sys.path)
"""
import sys
import uuid

import redis
from redis.cluster import RedisCluster


def workload(r, cluster_client, prefix):
    """The same operations through `r`; `cluster_client` selects the cluster client's spelling."""
    out = []
    k = lambda s: f"{prefix}:{s}"
    # The cluster client answers its MSET with one result per slot: all true is MSET's OK.
    mset = (lambda m: all(r.mset_nonatomic(m))) if cluster_client else r.mset
    mget = (lambda ks: r.mget_nonatomic(ks)) if cluster_client else r.mget
    out.append(r.set(k("a"), "1"))
    out.append(r.get(k("a")))
    out.append(r.get(k("missing")))
    out.append(mset({k(f"m{i}"): f"v{i}" for i in range(40)}))
    out.append(mget([k(f"m{i}") for i in range(45)]))
    p = r.pipeline(transaction=False)
    for i in range(60):
        p.set(k(f"p{i}"), i)
        p.get(k(f"p{i}"))
    p.incr(k("n"))
    p.incrby(k("n"), 41)
    p.get(k("nope"))
    out.append(p.execute())
    out.append(r.hset(k("h"), mapping={"f1": "x", "f2": "y"}))
    out.append(sorted(r.hgetall(k("h")).items()))
    out.append(r.zadd(k("z"), {"a": 1.5, "b": 2, "c": -3.25}))
    out.append(r.zrange(k("z"), 0, -1, withscores=True))
    out.append(r.rpush(k("l"), *range(10)))
    out.append(r.lrange(k("l"), 2, 5))
    out.append(r.set(k("t"), "x", ex=100))
    out.append(95 <= r.ttl(k("t")) <= 100)
    out.append(r.exists(*[k(f"m{i}") for i in range(10)], k("missing")))
    out.append(r.delete(*[k(f"m{i}") for i in range(5)], k("missing")))
    out.append(r.exists(*[k(f"m{i}") for i in range(10)]))
    # Keys of one slot (a hash tag): multi-key commands a cluster takes as they are.
    tag = lambda s: f"{{{prefix}}}:{s}"
    out.append(r.sadd(tag("s1"), "a", "b", "c"))
    out.append(r.sadd(tag("s2"), "b", "c", "d"))
    out.append(sorted(r.sinter(tag("s1"), tag("s2"))))
    out.append(r.rename(tag("s1"), tag("s3")))
    out.append(sorted(r.smembers(tag("s3"))))
    return out


def transaction(r, prefix):
    tag = lambda s: f"{{{prefix}}}:{s}"
    p = r.pipeline(transaction=True)
    p.set(tag("x"), 1)
    p.incr(tag("x"))
    p.get(tag("x"))
    return p.execute()


def main():
    proxy_port, node_port = int(sys.argv[1]), int(sys.argv[2])
    cluster = RedisCluster(host="127.0.0.1", port=node_port)
    run = uuid.uuid4().hex[:8]
    protocols = [2, 3] if int(redis.__version__.split(".")[0]) >= 5 else [2]
    for protocol in protocols:
        # Each side in the same RESP (redis-py shapes some replies by it: scores, maps).
        extra = {"protocol": protocol} if protocol == 3 else {}
        want = workload(RedisCluster(host="127.0.0.1", port=node_port, **extra), True, f"c{run}{protocol}")
        proxy = redis.Redis(host="127.0.0.1", port=proxy_port, **extra)
        got = workload(proxy, False, f"p{run}{protocol}")
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                sys.exit(f"redis-py {redis.__version__} RESP{protocol}: step {i} through the proxy "
                         f"gave {g!r}, the cluster client {w!r}")
        tx = transaction(proxy, f"t{run}{protocol}")
        if tx != [True, 2, b"2"]:
            sys.exit(f"RESP{protocol}: a transaction on one slot gave {tx!r}")
        print(f"redis-py {redis.__version__} RESP{protocol}: {len(want)} results equal to RedisCluster's")
    proxy = redis.Redis(host="127.0.0.1", port=proxy_port)
    # Every key both wrote, listed through the proxy as the cluster client lists them.
    through_proxy = set(proxy.scan_iter(match=f"*{run}*", count=50))
    direct = set(cluster.scan_iter(match=f"*{run}*", count=50))
    if through_proxy != direct:
        sys.exit(f"SCAN: the proxy listed {len(through_proxy)} keys, the cluster client "
                 f"{len(direct)}; only through the proxy: {sorted(through_proxy - direct)[:5]}, "
                 f"only direct: {sorted(direct - through_proxy)[:5]}")
    if set(proxy.keys(f"*{run}*")) != direct:
        sys.exit("KEYS through the proxy differs from the cluster client's SCAN")
    sizes = cluster.dbsize(target_nodes=RedisCluster.PRIMARIES)
    total = sum(sizes.values()) if isinstance(sizes, dict) else sizes
    if proxy.dbsize() != total:
        sys.exit(f"DBSIZE: {proxy.dbsize()} through the proxy, {total} summed over the primaries by the cluster client")
    print(f"SCAN, KEYS, DBSIZE through the proxy equal the cluster client's ({len(direct)} keys)")


main()
