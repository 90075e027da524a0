"""shardring.uhashring.HashRing against uhashring 2.5 itself (from PyPI): the same answers.

Issue #46 found the drop-in refusing most of the ways uhashring is configured (its default mode,
per-node ``vnodes``, a ``hash_fn`` of one's own): ``FORMS`` is a matrix of constructor forms, the
common ones and the corners, and every one of them must give uhashring's node for every key, its
points, its distribution, its ranges, and stay equal through a run of mutations.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import random
import zlib
from hashlib import md5
from typing import Any, Callable, Dict, List, Tuple

import pytest
import uhashring

from shardring.uhashring import HashRing

KEYS = [f"user:{i}:{random.Random(i).random()}" for i in range(100_000)]
#: Keys of other types: uhashring hashes str(key) (so b"k" is the text "b'k'").
ODD_KEYS: List[Any] = [b"bytes-key", 42, 3.5, ("t", 1), None, "ünïcødé ✓", "", "x" * 300]


class Conn:
    """An ``instance`` object, as uhashring users attach a client to each node."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Conn({self.name!r})"


INSTANCES = {name: Conn(name) for name in ("c1", "c2", "c3")}


def crc_hash(key: Any) -> int:
    """A 32-bit hash_fn of one's own."""
    return zlib.crc32(str(key).encode("utf-8"))


def crowded_hash(key: Any) -> int:
    """A hash_fn with 5,000 values: many points share a position, so which node owns a shared one
    (the one written last, which depends on the order of mutations) is exercised."""
    return zlib.crc32(str(key).encode("utf-8")) % 5000


def hex_hash(key: Any) -> str:
    """A hash_fn returning text: uhashring only needs the values to sort."""
    return md5(str(key).encode("utf-8")).hexdigest()


def weight_by_port(**conf: Any) -> int:
    """A weight_fn: the node's weight from its configuration."""
    return 3 if conf["port"] == 11212 else conf["weight"]


def weight_by_name(**conf: Any) -> int:
    return 3 if str(conf["nodename"]).endswith("1") else 1


def weighted_nodes() -> Dict[str, int]:
    return {f"10.0.{i // 8}.{i % 8}:11211": 1 + i % 4 for i in range(24)}


def hostnames() -> Dict[str, Dict[str, Any]]:
    return {
        "cache1": {"hostname": "10.0.0.1", "port": 11211, "instance": INSTANCES["c1"], "weight": 1},
        "cache2": {"hostname": "10.0.0.2", "port": 11212, "instance": INSTANCES["c2"], "weight": 2},
        "cache3": {"hostname": "10.0.0.3", "port": 11213, "instance": INSTANCES["c3"]},
    }


def per_node_vnodes() -> Dict[str, Dict[str, Any]]:
    return {"a": {"vnodes": 40}, "b": {"vnodes": 80}, "c": {"vnodes": 10}}


def mixed() -> Dict[str, Any]:
    return {
        "a": {"vnodes": 50, "weight": 2, "hostname": "10.0.0.1", "port": 11211},
        "b": 3,
        "c": {"weight": 1, "instance": INSTANCES["c3"]},
        "d": {},
        "e": {"vnodes": 7, "nodename": "echo"},
    }


# (id, positional arguments, keyword arguments). Made by functions so each ring gets its own dicts.
FormMaker = Callable[[], Tuple[tuple, Dict[str, Any]]]
FORMS: List[Tuple[str, FormMaker]] = [
    # The common forms (the first twelve: what users of uhashring's README write).
    ("list", lambda: ((["a", "b", "c"],), {})),
    ("list-ketama", lambda: ((["a", "b", "c"],), {"hash_fn": "ketama"})),
    ("weights", lambda: ((weighted_nodes(),), {})),
    ("weights-ketama", lambda: ((weighted_nodes(),), {"hash_fn": "ketama"})),
    ("per-node-vnodes", lambda: ((per_node_vnodes(),), {})),
    ("per-node-vnodes-ketama", lambda: ((per_node_vnodes(),), {"hash_fn": "ketama"})),
    ("per-node-weights", lambda: (({"a": {"weight": 1}, "b": {"weight": 5}, "c": {"weight": 2}},), {})),
    ("mixed-ketama", lambda: ((mixed(),), {"hash_fn": "ketama"})),
    ("instances-hostname-port", lambda: ((hostnames(),), {})),
    ("weight_fn", lambda: ((hostnames(),), {"weight_fn": weight_by_port})),
    ("vnodes-kwarg", lambda: (({"a": 1, "b": 2, "c": 3},), {"vnodes": 20})),
    ("hash_fn-callable", lambda: ((["a", "b", "c", "d"],), {"hash_fn": crc_hash})),
    # The same in the other mode, and combinations.
    ("per-node-weights-ketama", lambda: (({"a": {"weight": 1}, "b": {"weight": 5}},), {"hash_fn": "ketama"})),
    ("mixed", lambda: ((mixed(),), {})),
    ("instances-hostname-port-ketama", lambda: ((hostnames(),), {"hash_fn": "ketama"})),
    ("weight_fn-ketama", lambda: ((["n1", "n2", "n3"],), {"hash_fn": "ketama", "weight_fn": weight_by_name})),
    ("vnodes-kwarg-ketama", lambda: (({"a": 1, "b": 2, "c": 3},), {"hash_fn": "ketama", "vnodes": 160})),
    ("vnodes-kwarg-and-per-node", lambda: (({"a": {"vnodes": 5}, "b": 2},), {"vnodes": 30})),
    ("vnodes-kwarg-and-per-node-ketama", lambda: (({"a": {"vnodes": 5}, "b": 2},), {"hash_fn": "ketama", "vnodes": 30})),
    ("hash_fn-per-node-vnodes", lambda: ((mixed(),), {"hash_fn": crc_hash, "weight_fn": weight_by_name})),
    ("hash_fn-crowded", lambda: ((weighted_nodes(),), {"hash_fn": crowded_hash})),
    ("hash_fn-text", lambda: ((["a", "b", "c"],), {"hash_fn": hex_hash})),
    ("replicas-4", lambda: ((["a", "b"],), {"hash_fn": "ketama", "replicas": 4})),
    ("replicas-3", lambda: ((weighted_nodes(),), {"hash_fn": "ketama", "replicas": 3})),
    ("replicas-1", lambda: ((["a", "b", "c"],), {"hash_fn": "ketama", "replicas": 1})),
    ("replicas-0", lambda: ((["a", "b"],), {"hash_fn": "ketama", "replicas": 0})),
    ("replicas-ignored-by-default-mode", lambda: ((["a", "b"],), {"replicas": 9})),
    ("compat-ignored", lambda: ((["a", "b"],), {"compat": True})),
    ("compat-ignored-ketama", lambda: ((["a", "b"],), {"hash_fn": "ketama", "compat": True})),
    ("one-name", lambda: (("solo",), {})),
    ("one-name-ketama", lambda: (("solo",), {"hash_fn": "ketama"})),
    ("empty", lambda: (([],), {})),
    ("empty-ketama", lambda: ((), {"hash_fn": "ketama"})),
    ("zero-weight", lambda: (({"a": 0, "b": 1, "c": 2},), {})),
    ("zero-weight-ketama", lambda: (({"a": 0, "b": 1, "c": 2},), {"hash_fn": "ketama"})),
    ("negative-weight-ketama", lambda: (({"a": -1, "b": 3},), {"hash_fn": "ketama"})),
    ("bool-weight-ketama", lambda: (({"a": True, "b": 2},), {"hash_fn": "ketama"})),
    ("tiny-weight-ketama", lambda: (({"a": 1, "b": 1000},), {"hash_fn": "ketama"})),
    ("vnodes-0", lambda: ((["a", "b"],), {"vnodes": 0})),
    ("vnodes-0-ketama", lambda: ((["a", "b"],), {"hash_fn": "ketama", "vnodes": 0})),
    ("int-names", lambda: (([1, 2, 3],), {})),
    ("int-names-ketama", lambda: (([1, 2, 3],), {"hash_fn": "ketama"})),
    ("tuple-names-ketama", lambda: (([("10.0.0.1", 11211), ("10.0.0.2", 11211)],), {"hash_fn": "ketama"})),
    ("empty-name-ketama", lambda: ((["", "a"],), {"hash_fn": "ketama"})),
    ("many-nodes", lambda: (({f"cache-{i}": 1 + i % 3 for i in range(64)},), {})),
    ("many-nodes-ketama", lambda: (({f"cache-{i}": 1 + i % 3 for i in range(64)},), {"hash_fn": "ketama"})),
]


def build(make: FormMaker) -> Tuple[HashRing, Any]:
    args, kwargs = make()
    theirs = uhashring.HashRing(*args, **kwargs)
    args, kwargs = make()
    return HashRing(*args, **kwargs), theirs


def printed(ring: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ring.print_continuum()
    return out.getvalue()


def assert_same(ours: HashRing, theirs: Any, keys: List[Any], detail: int = 1000, ranges: int = 100) -> None:
    """Every answer of the two rings equal: lookups over ``keys``, every other per-key answer over
    the first ``detail`` of them, ranges and iterations from the first ``ranges``; the continuum."""
    assert [ours.get_node(k) for k in keys] == [theirs.get_node(k) for k in keys]
    for key in keys[:detail] + ODD_KEYS:
        assert ours.get_node(key) == theirs.get_node(key), key
        assert ours.get(key) == theirs.get(key)
        assert ours[key] == theirs[key]
        assert ours.get_node_instance(key) == theirs.get_node_instance(key)
        assert ours.get_node_hostname(key) == theirs.get_node_hostname(key)
        assert ours.get_node_port(key) == theirs.get_node_port(key)
        assert ours.get_node_weight(key) == theirs.get_node_weight(key)
        assert ours.get_node_pos(key) == theirs.get_node_pos(key)
        assert ours.get_server(key) == theirs.get_server(key)
        assert ours.get_key(key) == theirs.get_key(key)
        assert ours.hashi(key) == theirs.hashi(key)
    for key in keys[:ranges] + ODD_KEYS:
        assert list(ours.range(key)) == list(theirs.range(key))
        for size in (1, 2, 5):
            assert list(ours.range(key, size=size)) == list(theirs.range(key, size=size))
            assert list(ours.range(key, size=size, unique=False)) == list(
                theirs.range(key, size=size, unique=False)
            )
        assert list(ours.iterate_nodes(key)) == list(theirs.iterate_nodes(key))
        assert list(itertools.islice(ours.iterate_nodes(key, distinct=False), 50)) == list(
            itertools.islice(theirs.iterate_nodes(key, distinct=False), 50)
        )
    # A whole round of the continuum, point by point, for a few keys.
    for key in keys[:3]:
        assert list(ours.range(key, unique=False)) == list(theirs.range(key, unique=False))
    assert ours.get_points() == theirs.get_points()
    assert ours.ring == theirs.ring and list(ours.ring.items()) == list(theirs.ring.items())
    assert ours.continuum == theirs.continuum
    assert ours.distribution == theirs.distribution
    assert list(ours.distribution.items()) == list(theirs.distribution.items())
    assert ours.size == theirs.size
    assert ours.conf == theirs.conf and ours.nodes == theirs.nodes
    assert list(ours.get_nodes()) == list(theirs.get_nodes())
    assert ours.get_instances() == theirs.get_instances()
    assert printed(ours) == printed(theirs)


Step = Tuple[str, Callable[[Any], Any]]
ADDED_CONF = {"vnodes": 7, "weight": 2, "hostname": "h2", "port": 1, "instance": INSTANCES["c2"]}


def remove_one(ring: Any) -> None:
    """Removes the first node, if there is one."""
    for name in list(ring.get_nodes())[:1]:
        ring.remove_node(name)


def mutations(names: List[Any]) -> List[Step]:
    """The mutations compared after each step, for a ring of the nodes ``names``: additions with
    every kind of configuration, weight, vnodes, nodename and hostname changes, removals, regenerate;
    then every node removed one by one (an empty ring) and nodes added back."""
    steps: List[Step] = [
        ("add a node", lambda r: r.add_node("added-1")),
        ("add a node with its configuration", lambda r: r.__setitem__("added-2", ADDED_CONF)),
        ("add a node of weight 3", lambda r: r.add_node("added-3", 3)),
        ("add a node of other vnodes", lambda r: r.add_node("added-4", {"vnodes": 60})),
        ("add a configuration that changes nothing", lambda r: r.add_node("added-3", 3)),
        ("remove a node", lambda r: r.remove_node("added-1")),
        ("del a node", lambda r: r.__delitem__("added-3")),
        ("regenerate", lambda r: r.regenerate()),
    ]
    if names:
        first, last = names[0], names[-1]
        steps += [
            ("change a weight", lambda r: r.__setitem__(first, {"weight": 4})),
            ("change vnodes", lambda r: r.add_node(first, {"vnodes": 13})),
            ("change the hostname only", lambda r: r.add_node(last, {"hostname": "moved", "port": 99})),
            ("change the nodename", lambda r: r.add_node(last, {"nodename": "renamed"})),
            ("remove an original node", lambda r: r.remove_node(first)),
        ]
    steps += [(f"remove node {i}", remove_one) for i in range(len(names) + 2)]
    steps += [
        ("add to an empty ring", lambda r: r.add_node("again", {"weight": 2})),
        ("add a second", lambda r: r.add_node("again-2")),
    ]
    return steps


@pytest.mark.parametrize("form", [make for _, make in FORMS], ids=[name for name, _ in FORMS])
def test_every_constructor_form_answers_as_uhashring(form: FormMaker) -> None:
    ours, theirs = build(form)
    assert_same(ours, theirs, KEYS[:20_000])


@pytest.mark.parametrize("form", [make for _, make in FORMS], ids=[name for name, _ in FORMS])
def test_every_form_follows_uhashring_through_mutations(form: FormMaker) -> None:
    ours, theirs = build(form)
    for label, step in mutations(list(theirs.get_nodes())):
        step(ours)
        try:
            step(theirs)
        except KeyError:
            # uhashring 2.5 removes a node without points, then raises (see
            # test_removing_a_node_without_points_works_where_uhashring_raises).
            if not label.startswith(("remove", "del")):
                raise
            assert list(ours.get_nodes()) == list(theirs.get_nodes()), label
        try:
            if label.startswith("remove node"):
                assert_same(ours, theirs, KEYS[:500], detail=50, ranges=5)
            else:
                assert_same(ours, theirs, KEYS[:2000], detail=200, ranges=20)
        except AssertionError as e:
            raise AssertionError(f"after {label!r}: {e}") from e


def test_the_same_node_for_100000_keys_with_weights() -> None:
    nodes = weighted_nodes()
    theirs = uhashring.HashRing(nodes, hash_fn="ketama")
    ours = HashRing(nodes, hash_fn="ketama")
    assert [ours.get_node(k) for k in KEYS] == [theirs.get_node(k) for k in KEYS]


def test_the_same_node_for_100000_keys_with_per_node_vnodes_in_both_modes() -> None:
    nodes = {f"10.0.0.{i}:11211": {"vnodes": 20 + 10 * i, "weight": 1 + i % 3} for i in range(12)}
    for kwargs in ({}, {"hash_fn": "ketama"}):
        theirs = uhashring.HashRing(nodes, **kwargs)
        ours = HashRing(nodes, **kwargs)
        assert [ours.get_node(k) for k in KEYS] == [theirs.get_node(k) for k in KEYS]


def test_the_usual_ketama_configuration_is_placed_by_the_library() -> None:
    # The fast path: equal vnodes, whole weights, str names. Per-node vnodes leave it (and come
    # back to it when they are equal again).
    ring = HashRing(weighted_nodes(), hash_fn="ketama")
    assert ring._library is not None
    ring.add_node("odd", {"vnodes": 41})
    assert ring._library is None
    ring.add_node("odd", {"vnodes": 40})
    assert ring._library is not None
    assert HashRing(["a", "b"], hash_fn="ketama", vnodes=160)._library is not None
    assert HashRing(["a", "b"])._library is None  # 128-bit positions: computed here


# node-x1318's points include one at node-4's position 2883275501 (ketama, vnodes 40, equal weights):
# found once by search. uhashring gives the position to the node it writes last.
SHARED_POSITION = 2883275501
COLLIDING = [f"node-{j}" for j in range(20)] + ["node-x1318"]


def keys_just_below(position: int, points: List[Tuple[int, str]], want: int = 5) -> List[str]:
    """Keys whose ketama hash falls between the point before ``position`` and ``position``: the
    keys that the shared position owns."""
    before = max(p for p, _ in points if p < position)
    found = []
    for i in range(5_000_000):
        key = f"probe-{i}"
        h = int.from_bytes(md5(key.encode()).digest()[:4], "little")
        if before <= h < position:
            found.append(key)
            if len(found) == want:
                break
    assert found, "no key lands before the shared position"
    return found


@pytest.mark.parametrize("order", ["as-listed", "reversed"])
@pytest.mark.parametrize("vnodes_differ", [False, True], ids=["library", "python"])
def test_a_position_two_nodes_share_goes_where_uhashring_sends_it(order: str, vnodes_differ: bool) -> None:
    names = COLLIDING if order == "as-listed" else COLLIDING[::-1]
    nodes: Dict[str, Any] = {n: 1 for n in names}
    if vnodes_differ:
        # A node without digests (vnodes 0) keeps every other node at 40 digests but takes the
        # ring off the library's path.
        nodes["pointless"] = {"vnodes": 0, "weight": 1}
    theirs = uhashring.HashRing(nodes, hash_fn="ketama")
    ours = HashRing(nodes, hash_fn="ketama")
    assert (ours._library is None) == vnodes_differ
    points = theirs.get_points()
    assert [p for p, _ in points].count(SHARED_POSITION) == 2
    owner = theirs.ring[SHARED_POSITION]
    assert owner == ("node-x1318" if order == "as-listed" else "node-4")
    probes = keys_just_below(SHARED_POSITION, points)
    for key in probes:
        assert theirs.get_node(key) == owner
        assert ours.get_node(key) == owner
        assert ours.get_server(key) == theirs.get_server(key)
    assert_same(ours, theirs, probes + KEYS[:5000], detail=200)
    for ring in (ours, theirs):
        ring.remove_node(owner)
    assert_same(ours, theirs, probes + KEYS[:5000], detail=200)


def test_crowded_positions_follow_uhashring_through_updates_in_default_mode() -> None:
    # In the default mode uhashring updates one node's points at a time: the owner of a shared
    # position is the node written last, so it depends on the history, not only on the nodes.
    theirs = uhashring.HashRing(weighted_nodes(), hash_fn=crowded_hash)
    ours = HashRing(weighted_nodes(), hash_fn=crowded_hash)
    rng = random.Random(46)
    names = list(weighted_nodes())
    for step in range(30):
        name = rng.choice(names)
        action = rng.choice(["weight", "vnodes", "remove", "add"])
        for ring in (ours, theirs):
            if action == "remove" and name in ring.get_nodes():
                ring.remove_node(name)
            elif action == "weight":
                ring[name] = {"weight": 1 + step % 4}
            elif action == "vnodes":
                ring[name] = {"vnodes": 100 + step}
            else:
                ring.add_node(name)
        assert_same(ours, theirs, KEYS[:1000], detail=100)


def test_regenerate_re_evaluates_weight_fn_in_both_modes() -> None:
    for kwargs in ({}, {"hash_fn": "ketama"}):
        weights = {"a": 1, "b": 1, "c": 1}

        def weight_fn(**conf: Any) -> int:
            return weights[conf["nodename"]]

        theirs = uhashring.HashRing(["a", "b", "c"], weight_fn=weight_fn, **kwargs)
        ours = HashRing(["a", "b", "c"], weight_fn=weight_fn, **kwargs)
        weights.update(a=5, c=0)
        theirs.regenerate()
        ours.regenerate()
        assert_same(ours, theirs, KEYS[:3000], detail=100)


def test_the_rest_of_the_api_answers_as_uhashring() -> None:
    for kwargs in ({}, {"hash_fn": "ketama"}):
        theirs = uhashring.HashRing(hostnames(), **kwargs)
        ours = HashRing(hostnames(), **kwargs)
        assert_same(ours, theirs, KEYS[:2000], detail=2000)
        assert ours.get_instances() == [INSTANCES["c1"], INSTANCES["c2"], INSTANCES["c3"]]


def test_an_empty_ring_answers_none_and_unknown_nodes_raise_key_error() -> None:
    for kwargs in ({}, {"hash_fn": "ketama"}):
        ours, theirs = HashRing([], **kwargs), uhashring.HashRing([], **kwargs)
        for ring in (ours, theirs):
            assert ring.get_node("k") is None and ring.get("k") is None and ring["k"] is None
            assert ring.get_server("k") is None and ring.get_node_pos("k") is None
            assert list(ring.iterate_nodes("k")) == [None]
            assert list(ring.range("k")) == []
            assert printed(ring) == "Continuum empty\n"
            with pytest.raises(KeyError, match="node 'nope' not found"):
                ring.remove_node("nope")


# Bad input: (arguments, keyword arguments) that uhashring refuses, and with what.
BAD = [
    ((("a", "b"),), {}, ValueError),  # a tuple of nodes
    (({"a": 1.5},), {}, ValueError),  # a node configuration that is neither int nor dict
    (({"a": "2"},), {"hash_fn": "ketama"}, ValueError),
    ((["a"],), {"hash_fn": "md5"}, TypeError),  # a hash_fn that is neither "ketama" nor callable
    ((["a"],), {"weight_fn": 3}, TypeError),
    (({"a": {"weight": 1.5}},), {}, TypeError),  # range() of a float: uhashring's own error
    (({"a": {"weight": 1.5}},), {"hash_fn": "ketama"}, TypeError),
    (({"a": {"vnodes": "40"}},), {"hash_fn": "ketama"}, TypeError),
    ((["a"],), {"hash_fn": "ketama", "replicas": None}, TypeError),
    (({"a": 0},), {"hash_fn": "ketama"}, ZeroDivisionError),  # weights that add up to 0
    (({"a": 1, "b": -1},), {"hash_fn": "ketama"}, ZeroDivisionError),
    ((["a"],), {"hash_fn": "ketama", "replicas": 5}, IndexError),  # past an MD5 digest's 4 words
]


@pytest.mark.parametrize("args,kwargs,error", BAD)
def test_bad_input_fails_as_in_uhashring(args: tuple, kwargs: Dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        uhashring.HashRing(*args, **kwargs)
    with pytest.raises(error):
        HashRing(*args, **kwargs)


def test_uhashrings_internal_errors_are_value_errors_that_say_why() -> None:
    with pytest.raises(ValueError, match="weights add up to 0"):
        HashRing({"a": 0}, hash_fn="ketama")
    with pytest.raises(ValueError, match="at most 4"):
        HashRing(["a"], hash_fn="ketama", replicas=5)
    # uhashring only fails once it has points to make: so does the drop-in.
    HashRing([], hash_fn="ketama", replicas=5)


@pytest.mark.parametrize("kwargs", [{}, {"hash_fn": "ketama"}], ids=["default", "ketama"])
def test_a_failed_change_leaves_the_same_state_as_in_uhashring(kwargs: Dict[str, Any]) -> None:
    # uhashring keeps the new configuration but not the continuum it could not build.
    theirs = uhashring.HashRing(weighted_nodes(), **kwargs)
    ours = HashRing(weighted_nodes(), **kwargs)
    for ring in (ours, theirs):
        with pytest.raises(TypeError):
            ring.add_node("bad", {"weight": 1.5})
    assert_same(ours, theirs, KEYS[:2000], detail=200)
    for ring in (ours, theirs):
        ring.add_node("bad", {"weight": 2})
    assert_same(ours, theirs, KEYS[:2000], detail=200)


def test_removing_a_node_without_points_works_where_uhashring_raises() -> None:
    # The one deliberate difference: uhashring 2.5's default mode removes the node, then raises
    # KeyError from its distribution (which never counted the node). The end state is the same.
    theirs = uhashring.HashRing({"a": 0, "b": 1, "c": 2})
    ours = HashRing({"a": 0, "b": 1, "c": 2})
    with pytest.raises(KeyError):
        theirs.remove_node("a")
    ours.remove_node("a")
    assert_same(ours, theirs, KEYS[:2000], detail=200)


def test_lone_surrogates_fail_as_in_uhashring() -> None:
    for kwargs in ({}, {"hash_fn": "ketama"}):
        for ring in (HashRing(["a", "b"], **kwargs), uhashring.HashRing(["a", "b"], **kwargs)):
            with pytest.raises(UnicodeEncodeError):
                ring.get_node("\ud800")
