"""shardring.Ring: the API over the library's ring and the other algorithms, and every kind of bad
input refused with the library's message."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import shardring
from shardring import EmptyRingError, Ring

KEYS = [f"key:{i}" for i in range(10_000)]


def test_lookups_take_str_and_bytes_alike() -> None:
    ring = Ring({"a": 1, "b": 2, "c": 1})
    for key in KEYS[:500] + ["", "ключ", "🔑"]:
        assert ring.lookup(key) == ring.lookup(key.encode())
    assert ring.lookup_many(KEYS) == [ring.lookup(k) for k in KEYS]
    assert ring.lookup_many(k.encode() for k in KEYS) == ring.lookup_many(KEYS)  # any iterable
    assert ring.lookup_many([]) == []


def test_lookup_many_reads_every_kind_of_iterable_and_key_alike() -> None:
    class Backwards(list):  # a list subclass iterates as it says, not by index
        def __iter__(self):  # type: ignore[no-untyped-def]
            return reversed(list.copy(self))

    class Text(str):
        pass

    class Data(bytes):
        pass

    keys = KEYS[:3000] + ["", "ключ", "🔑"]
    for ring in (Ring({"a": 1, "b": 2, "c": 1}), Ring(["a", "b", "c"], algorithm="jump")):
        want = [ring.lookup(k) for k in keys]
        assert ring.lookup_many(keys) == want
        assert ring.lookup_many(tuple(keys)) == want
        assert ring.lookup_many(iter(keys)) == want
        assert ring.lookup_many(Backwards(keys)) == want[::-1]
        assert ring.lookup_many([k.encode() if i % 2 else k for i, k in enumerate(keys)]) == want
        assert ring.lookup_many([Text(k) for k in keys]) == want
        assert ring.lookup_many(tuple(Data(k.encode()) for k in keys)) == want
        with pytest.raises(TypeError, match="str or bytes"):
            ring.lookup_many(("ok", b"ok", bytearray(b"k")))
        with pytest.raises(UnicodeEncodeError):
            ring.lookup_many(["ok", "\ud800"])


def test_a_list_changed_by_another_thread_during_a_batch_is_read_safely() -> None:
    # lookup_many reads a list's items without taking references; the list may change while a chunk
    # is placed without the GIL. Items replaced (their objects freed), removed and added meanwhile.
    ring = Ring([f"n{i}" for i in range(10)])
    keys: list = [f"m{i}".encode() for i in range(200_000)]
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            keys[i % len(keys)] = f"r{i}".encode()
            if i % 100 == 0:
                del keys[-500:]
            elif i % 100 == 50:
                keys.extend(f"e{i}:{j}".encode() for j in range(500))

    changer = threading.Thread(target=churn)
    changer.start()
    try:
        for _ in range(20):
            owners = ring.lookup_many(keys)
            assert 150_000 < len(owners) < 250_000 and all(o.startswith("n") for o in owners)
    finally:
        stop.set()
        changer.join()


def test_batches_larger_than_a_chunk_and_the_gil_released() -> None:
    ring = Ring([f"n{i}" for i in range(50)])
    keys = [f"k{i}".encode() for i in range(100_000)]
    assert ring.lookup_many(keys) == [ring.lookup(k) for k in keys]


def test_replicas_are_distinct_and_start_at_the_owner() -> None:
    ring = Ring(["a", "b", "c", "d"])
    for key in KEYS[:200]:
        r = ring.replicas(key, 3)
        assert len(set(r)) == 3 and r[0] == ring.lookup(key)
    assert sorted(ring.replicas("k", 10)) == ["a", "b", "c", "d"]


def test_adding_a_node_only_moves_keys_to_it() -> None:
    ring = Ring(["a", "b", "c"])
    before = ring.lookup_many(KEYS)
    ring.add("d", 1.0)
    after = ring.lookup_many(KEYS)
    assert all(x == y or y == "d" for x, y in zip(before, after))
    assert 0 < after.count("d") < len(KEYS) / 2
    ring.remove("d")
    assert ring.lookup_many(KEYS) == before


def test_weights_shares_and_points() -> None:
    ring = Ring({"a": 1, "b": 3})
    shares = ring.shares()
    assert abs(sum(shares.values()) - 1) < 1e-9 and shares["b"] > 2 * shares["a"]
    assert ring.nodes == {"a": 1.0, "b": 3.0}
    ring.set_weight("a", 3)
    assert ring.nodes["a"] == 3.0
    assert len(ring.points()) == 160 * 6
    assert "a" in ring and "z" not in ring and len(ring) == 2


def test_diff_is_the_migration_plan() -> None:
    old = Ring(["a", "b", "c"])
    new = Ring(["a", "b", "c", "d"])
    plan = old.diff(new)
    assert plan and all(m.new == "d" and m.old in ("a", "b", "c") for m in plan)
    assert all(m.first <= m.last for m in plan)
    moved = {k for k, x, y in zip(KEYS, old.lookup_many(KEYS), new.lookup_many(KEYS)) if x != y}
    assert len(moved) > 0
    assert old.diff(old) == []
    assert "Migration(first=" in repr(plan[0])


def test_every_algorithm_by_name() -> None:
    for algorithm in shardring.ALGORITHMS:
        ring = Ring(["a", "b", "c"], algorithm=algorithm, hash="murmur3")
        assert ring.algorithm == algorithm
        owners = ring.lookup_many(KEYS)
        assert set(owners) == {"a", "b", "c"}
        ring.add("d")
        assert "d" in ring.lookup_many(KEYS)
        ring.remove("d")
        assert ring.lookup_many(KEYS) == owners or algorithm == "maglev"  # maglev refills its table


def test_points_shares_and_diff_are_a_rings_only() -> None:
    jump = Ring(["a", "b"], algorithm="jump")
    for call in (jump.shares, jump.points, lambda: jump.diff(jump)):
        with pytest.raises(ValueError, match="ring"):
            call()


def test_a_compat_ring_changes_as_the_program_rebuilds() -> None:
    nodes = ["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11212"]
    ring = Ring(nodes[:2], compat="twemproxy")
    ring.add(nodes[2])
    assert ring.lookup_many(KEYS) == Ring(nodes, compat="twemproxy").lookup_many(KEYS)
    ring.set_weight(nodes[0], 2)
    fresh = Ring({nodes[0]: 2, nodes[1]: 1, nodes[2]: 1}, compat="twemproxy")
    assert ring.lookup_many(KEYS) == fresh.lookup_many(KEYS)
    ring.remove(nodes[1])
    assert ring.lookup_many(KEYS) == Ring({nodes[0]: 2, nodes[2]: 1}, compat="twemproxy").lookup_many(KEYS)


def test_lookups_from_threads_while_membership_changes() -> None:
    ring = Ring([f"n{i}" for i in range(8)])
    keys = [f"t{i}".encode() for i in range(20_000)]
    errors = []

    def look() -> None:
        try:
            for _ in range(20):
                owners = ring.lookup_many(keys)
                assert len(owners) == len(keys) and all(o[0] in "nx" for o in owners)
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)

    threads = [threading.Thread(target=look) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(50):
        ring.add(f"x{i}")
        ring.remove(f"x{i}")
    for t in threads:
        t.join()
    assert not errors


# Bad input.


def test_unknown_hash_mode_and_algorithm() -> None:
    with pytest.raises(ValueError, match="unknown hash"):
        Ring(["a"], hash="sha7")
    with pytest.raises(ValueError, match="unknown mode"):
        Ring(["a:1"], compat="memcachedb")
    with pytest.raises(ValueError, match="unknown algorithm"):
        Ring(["a"], algorithm="spiral")
    with pytest.raises(ValueError, match="unknown hash"):
        Ring(["127.0.0.1:11211"], compat="twemproxy", hash="xxh3")
    with pytest.raises(ValueError):
        Ring(["a"], compat="nginx", hash="md5")  # nginx has no choice of hash
    with pytest.raises(ValueError, match="exclusive"):
        Ring(["a"], compat="nginx", algorithm="jump")


def test_bad_weights_and_nodes() -> None:
    for bad in ({"a": 0}, {"a": -1}, {"a": float("nan")}, {"a": float("inf")}):
        with pytest.raises(ValueError, match="weight"):
            Ring(bad)
    with pytest.raises(ValueError, match="whole-number"):
        Ring({"127.0.0.1:11211": 1.5}, compat="twemproxy")
    with pytest.raises(ValueError, match="already a member"):
        Ring(["a", "a"])
    with pytest.raises(ValueError, match="empty"):
        Ring([""])
    with pytest.raises(ValueError, match="does not support"):
        Ring({"a": 2}, algorithm="jump")
    with pytest.raises(ValueError, match="HOST:PORT"):
        Ring(["no-port"], compat="libmemcached")
    with pytest.raises(TypeError):
        Ring("abc")
    with pytest.raises(TypeError):
        Ring([1, 2])
    ring = Ring(["a"])
    with pytest.raises(ValueError, match="weight"):
        ring.add("b", 0)
    with pytest.raises(ValueError, match="weight"):
        ring.set_weight("a", 0)
    with pytest.raises(ValueError, match="not a member"):
        ring.remove("zz")
    with pytest.raises(ValueError, match="already a member"):
        ring.add("a")
    assert ring.nodes == {"a": 1.0}  # unchanged by the refused changes


def test_an_empty_rings_lookup_raises() -> None:
    ring = Ring()
    for call in (lambda: ring.lookup("k"), lambda: ring.lookup_many(["k"]), lambda: ring.replicas("k", 2)):
        with pytest.raises(EmptyRingError):
            call()
    assert issubclass(EmptyRingError, LookupError)
    assert ring.lookup_many([]) == []
    ring.add("a")
    assert ring.lookup("k") == "a"


def test_keys_must_be_str_or_bytes() -> None:
    ring = Ring(["a", "b"])
    for bad in (1, 1.5, None, bytearray(b"k"), memoryview(b"k"), ("k",)):
        with pytest.raises(TypeError, match="str or bytes"):
            ring.lookup(bad)
    with pytest.raises(TypeError, match="str or bytes"):
        ring.lookup_many(["ok", 3])
    with pytest.raises(TypeError, match="not one key"):
        ring.lookup_many("abc")
    with pytest.raises(UnicodeEncodeError):
        ring.lookup("\ud800")  # a lone surrogate has no UTF-8
    with pytest.raises(ValueError):
        ring.replicas("k", 0)


def test_template_settings_belong_to_template_rings() -> None:
    with pytest.raises(ValueError, match="template"):
        Ring(["a"], template="{name}-{i}")
    with pytest.raises(ValueError, match="needs template"):
        Ring(["a"], compat="template")
    with pytest.raises(ValueError):
        Ring(["a"], compat="template", template="no placeholders")
    ring = Ring(["a", "b"], compat="template", template="{name}-{i}", digest="crc32", ties="first")
    assert ring.lookup("k") in ("a", "b")


def test_reprs_read_as_python() -> None:
    assert repr(Ring(["a"])) == "Ring(algorithm='ring', hash='xxh3', nodes=1)"
    assert repr(Ring(["a:1"], compat="nginx")) == "Ring(compat='nginx', nodes=1)"
    m = Ring(["a"]).diff(Ring(["b"]))[0]
    assert repr(m) == f"Migration(first={m.first}, last={m.last}, old='a', new='b')"


def test_other_threads_run_while_a_large_batch_is_placed() -> None:
    # A thread that notes the longest time it went without running: were the GIL held for the whole
    # call, that would be the call's duration; released while each chunk is placed, it is a chunk's.
    ring = Ring([f"n{i}" for i in range(10)])
    keys = [f"g{i}".encode() for i in range(1_000_000)]
    longest = [0.0]
    stop = threading.Event()

    def spin() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            longest[0] = max(longest[0], now - last)
            last = now

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    spinner = threading.Thread(target=spin)
    try:
        spinner.start()
        time.sleep(0.01)
        longest[0] = 0.0
        start = time.perf_counter()
        ring.lookup_many(keys)
        took = time.perf_counter() - start
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(interval)
    assert longest[0] < took / 3, (longest[0], took)
