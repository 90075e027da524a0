"""shardring.uhashring.HashRing against uhashring itself (from PyPI): the same node for every key."""

from __future__ import annotations

import random

import pytest
import uhashring

from shardring.uhashring import HashRing

KEYS = [f"user:{i}:{random.Random(i).random()}" for i in range(100_000)]


def weighted_nodes() -> dict:
    return {f"10.0.{i // 8}.{i % 8}:11211": 1 + i % 4 for i in range(24)}


def test_the_same_node_for_100000_keys_with_weights() -> None:
    nodes = weighted_nodes()
    theirs = uhashring.HashRing(nodes, hash_fn="ketama")
    ours = HashRing(nodes, hash_fn="ketama")
    assert [ours.get_node(k) for k in KEYS] == [theirs.get_node(k) for k in KEYS]


def test_membership_changes_follow_uhashring() -> None:
    nodes = weighted_nodes()
    theirs = uhashring.HashRing(nodes, hash_fn="ketama")
    ours = HashRing(nodes, hash_fn="ketama")
    keys = KEYS[:20_000]
    for ring in (theirs, ours):
        ring.remove_node("10.0.1.3:11211")
        ring.add_node("10.0.9.9:11211", {"weight": 3})
        ring["10.0.0.1:11211"] = {"weight": 4}  # a weight change
        ring.add_node("cache-x")
    assert [ours.get_node(k) for k in keys] == [theirs.get_node(k) for k in keys]
    assert list(ours.get_nodes()) == list(theirs.get_nodes())
    assert ours.distribution == theirs.distribution
    assert ours.get_points() == theirs.get_points()
    assert ours.size == theirs.size


def test_the_rest_of_the_api_answers_as_uhashring() -> None:
    conf = {
        "cache1": {"hostname": "10.0.0.1", "port": 11211, "instance": "c1", "weight": 1},
        "cache2": {"hostname": "10.0.0.2", "port": 11212, "instance": "c2", "weight": 2},
        "cache3": {"hostname": "10.0.0.3", "port": 11213, "weight": 1},
    }
    theirs = uhashring.HashRing(conf, hash_fn="ketama")
    ours = HashRing(conf, hash_fn="ketama")
    for key in KEYS[:2000] + [b"bytes-key", 42, ("t", 1)]:
        assert ours.get_node(key) == theirs.get_node(key)
        assert ours.get(key) == theirs.get(key)
        assert ours[key] == theirs[key]
        assert ours.get_node_hostname(key) == theirs.get_node_hostname(key)
        assert ours.get_node_port(key) == theirs.get_node_port(key)
        assert ours.get_node_weight(key) == theirs.get_node_weight(key)
        assert ours.get_node_pos(key) == theirs.get_node_pos(key)
        assert ours.get_server(key) == theirs.get_server(key)
        assert ours.get_key(key) == theirs.get_key(key)
        assert list(ours.iterate_nodes(key)) == list(theirs.iterate_nodes(key))
        assert list(ours.iterate_nodes(key, distinct=False))[:50] == list(
            theirs.iterate_nodes(key, distinct=False)
        )[:50]
        assert list(ours.range(key, size=2)) == list(theirs.range(key, size=2))
    assert ours.get_instances() == theirs.get_instances()
    assert ours.conf == theirs.conf
    assert ours.ring == theirs.ring


def test_weight_fn_and_a_single_node_string() -> None:
    fn = lambda **conf: 3 if conf["nodename"].endswith("1") else 1  # noqa: E731
    theirs = uhashring.HashRing(["n1", "n2", "n3"], hash_fn="ketama", weight_fn=fn)
    ours = HashRing(["n1", "n2", "n3"], hash_fn="ketama", weight_fn=fn)
    assert [ours.get_node(k) for k in KEYS[:5000]] == [theirs.get_node(k) for k in KEYS[:5000]]
    assert HashRing("solo", hash_fn="ketama").get_node("k") == "solo"


def test_custom_vnodes() -> None:
    nodes = {"a": 1, "b": 2, "c": 3}
    theirs = uhashring.HashRing(nodes, hash_fn="ketama", vnodes=160)
    ours = HashRing(nodes, hash_fn="ketama", vnodes=160)
    assert [ours.get_node(k) for k in KEYS[:5000]] == [theirs.get_node(k) for k in KEYS[:5000]]


def test_an_empty_ring_answers_none_and_unknown_nodes_raise_key_error() -> None:
    ours, theirs = HashRing([], hash_fn="ketama"), uhashring.HashRing([], hash_fn="ketama")
    assert ours.get_node("k") is None and theirs.get_node("k") is None
    assert ours.get("k") is None
    with pytest.raises(KeyError):
        ours.remove_node("nope")
    with pytest.raises(KeyError):
        theirs.remove_node("nope")


def test_modes_it_cannot_reproduce_are_refused_not_misplaced() -> None:
    with pytest.raises(ValueError, match="ketama"):
        HashRing(["a", "b"])  # uhashring's default mode: 128-bit MD5 positions
    with pytest.raises(ValueError, match="ketama"):
        HashRing(["a", "b"], hash_fn=lambda k: 1)
    with pytest.raises(ValueError, match="replicas"):
        HashRing(["a"], hash_fn="ketama", replicas=3)
    with pytest.raises(ValueError, match="vnodes"):
        HashRing({"a": {"vnodes": 10}, "b": {"vnodes": 20}}, hash_fn="ketama")
    with pytest.raises(ValueError):
        HashRing({"a": 0}, hash_fn="ketama")
