"""A drop-in for uhashring's ``HashRing`` (uhashring 2.5 from PyPI): the same node for every key.

Switch by changing one import::

    # from uhashring import HashRing
    from shardring.uhashring import HashRing

    ring = HashRing(["cache1", "cache2"])                             # uhashring's default mode
    ring = HashRing({"cache1": 1, "cache2": 2}, hash_fn="ketama")     # its ketama mode
    ring = HashRing({"a": {"vnodes": 40}, "b": {"weight": 2, "hostname": "10.0.0.2", "port": 11211}})
    ring.get_node("user:42")

Everything uhashring 2.5's ``HashRing`` accepts is accepted and answered as uhashring answers it:
nodes as a name, a list of names or a dict of names to a weight or to a configuration dict (any of
``hostname``, ``instance``, ``nodename``, ``port``, ``vnodes``, ``weight``), the keyword arguments
``hash_fn`` (``"ketama"``, a callable, or none), ``vnodes``, ``weight_fn`` and ``replicas`` (ketama
mode), every method and property, and every mutation (``add_node``/``remove_node``/``[]=``/``del``,
``regenerate``). The continuum is uhashring's point for point: the same positions, the same owner of a
position two nodes share (the node uhashring wrote last), the same ``distribution``. Keyword
arguments uhashring ignores (``compat=...``, a ``replicas`` outside ketama mode) are ignored here too.

Why two engines. uhashring's ketama mode (``hash_fn="ketama"``) is the library's
``compat="uhashring"`` ring: when every node has the same ``vnodes``, a positive whole weight and a
``str`` name (the usual configuration) its keys are placed by the library (MD5 and a binary search in
Rust, several times faster than uhashring). Everything else is computed here with uhashring's own
arithmetic, in Python, at uhashring's speed: its default mode places nodes at 128-bit MD5 values,
which a 32-bit ring cannot hold; a ``hash_fn`` of your own is Python code; per-node ``vnodes`` (each
node gets ``vnodes × n × weight // total`` digests in ketama mode, ``vnodes × weight`` points in the
default mode) have no equivalent in the library's one-setting rings.

Bad input fails as it fails in uhashring, with the same exception types (``ValueError`` for a bad
node configuration, ``TypeError`` for a ``hash_fn``/``weight_fn`` that is not callable or a weight
that is not a whole number in ketama mode, ``KeyError`` for an unknown node). Where uhashring stumbles
over an internal error, the error here says what is wrong and is still of uhashring's type:
weights that add up to 0 in ketama mode raise an error that is both ``ValueError`` and
``ZeroDivisionError``; ``replicas`` above 4 one that is both ``ValueError`` and ``IndexError``.
The one deliberate difference: removing a node that has no points in the default mode (weight or
``vnodes`` 0) works, where uhashring 2.5 removes it and then raises ``KeyError``.
"""

from __future__ import annotations

from bisect import bisect
from collections import Counter
from hashlib import md5
from struct import Struct
from typing import Any, Callable, Dict, Iterable, Iterator, KeysView, List, Optional, Tuple, Union

from ._shardring import Ring

__all__ = ["HashRing"]

_NodeConf = Dict[str, Any]
#: A node of a ketama continuum being built: (name, vnodes, weight).
_Member = Tuple[Any, Any, Any]

#: An MD5 digest read as ketama reads it: four little-endian 32-bit words, one per replica.
_QUADS = Struct("<4I")
#: The first of them: ketama's hash of a key.
_FIRST_QUAD = Struct("<I")

#: Products ``vnodes × n × weight`` up to which the library's ketama arithmetic (in f64) is exact.
_EXACT_PRODUCT = 2**53


class _WeightsSumToZeroError(ValueError, ZeroDivisionError):
    """The weights of a ketama ring add up to 0: uhashring divides by their sum (ZeroDivisionError),
    so this is one too, and a ValueError for what it is: bad input."""


class _TooManyReplicasError(ValueError, IndexError):
    """``replicas`` above 4 in ketama mode: an MD5 digest has four 32-bit words, one per replica;
    uhashring runs off the digest's end (IndexError), so this is one too, and a ValueError."""


def _md5_int(key: Any) -> int:
    """uhashring's default hash: the MD5 of ``str(key)`` as a 128-bit integer (its
    ``int(md5(...).hexdigest(), 16)``, read from the digest without making the hex text)."""
    return int.from_bytes(md5(str(key).encode("utf-8")).digest(), "big")


def _ketama_hash(key: Any) -> int:
    """uhashring's ketama hash of a key: the first four bytes of its MD5, little-endian."""
    return _FIRST_QUAD.unpack_from(md5(str(key).encode("utf-8")).digest())[0]


def _ketama_continuum(
    members: List[_Member], replicas: Any
) -> Tuple[List[Any], Dict[Any, Any], Counter]:
    """uhashring's ``KetamaRing._create_ring`` over ``members``: the sorted positions (a position two
    points share is listed twice, as uhashring's ``insort`` lists it), the owner of each position
    (the last node written, in configuration order) and each node's number of points.

    The arithmetic is uhashring's own, Python's unbounded integers included, so that any weight and
    ``vnodes`` it accepts get the same number of points, and any it fails on fails alike."""
    weight_sum = 0
    for _, _, weight in members:
        weight_sum += weight
    count = len(members)
    keys: List[Any] = []
    ring: Dict[Any, Any] = {}
    distribution: Counter = Counter()
    for name, vnodes, weight in members:
        try:
            digests = (vnodes * count * weight) // weight_sum
        except ZeroDivisionError:
            raise _WeightsSumToZeroError(
                f"the nodes' weights add up to {weight_sum!r}: uhashring's ketama mode gives each node"
                " vnodes × nodes × weight // (sum of weights) digests, so the sum must not be 0"
            ) from None
        for w in range(0, digests):
            quads = _QUADS.unpack(md5(f"{name}-{w}".encode("utf-8")).digest())
            for i in range(0, replicas):
                if i >= 4:
                    raise _TooManyReplicasError(
                        f"replicas={replicas!r}: ketama takes at most 4 points from each MD5 digest"
                        " (one per 32-bit word)"
                    )
                position = quads[i]
                ring[position] = name
                keys.append(position)
                distribution[name] += 1
    keys.sort()
    return keys, ring, distribution


def _library_ring(members: List[_Member], replicas: Any) -> Optional[Ring]:
    """The library's ``compat="uhashring"`` ring of ``members`` when it is uhashring's ketama
    continuum exactly: four replicas, one ``vnodes`` for every node, positive whole weights, ``str``
    names, every node with at least one digest, numbers small enough for the library's exact
    arithmetic. ``None`` otherwise: the continuum is then computed in Python."""
    if type(replicas) is not int or replicas != 4 or not members:
        return None
    vnodes = members[0][1]
    if type(vnodes) is not int or vnodes < 1:
        return None
    total = 0
    for name, v, weight in members:
        if type(name) is not str or not name or type(v) is not int or v != vnodes:
            return None
        if type(weight) is not int or weight < 1:
            return None
        total += weight
    count = len(members)
    if vnodes * count * total >= _EXACT_PRODUCT:
        return None
    if any(vnodes * count * weight // total < 1 for _, _, weight in members):
        return None
    try:
        weights = [(name, float(weight)) for name, _, weight in members]
        return Ring(weights, compat="uhashring", vnodes=vnodes)
    except (ValueError, OverflowError):
        # More points than the library builds, or a name it refuses: uhashring's arithmetic then.
        return None


class HashRing:
    """uhashring 2.5's ``HashRing``: the same constructor, methods and answers (see the module).

    ``nodes`` is a node name, a list of names, or a dict of names to a weight (``int``) or to a
    configuration dict with any of ``hostname``, ``instance``, ``nodename``, ``port``, ``vnodes`` and
    ``weight``. Keyword arguments: ``hash_fn`` (``"ketama"`` for the ketama-compatible mode, a
    callable to hash keys and points yourself, or none for uhashring's default 128-bit MD5 mode),
    ``vnodes`` (the default of every node: 40 in ketama mode, 160 otherwise), ``weight_fn`` (called
    with each node's configuration as keyword arguments, it gives the node's weight) and
    ``replicas`` (points per digest in ketama mode, 4).
    """

    def __init__(self, nodes: Union[str, list, dict] = [], **kwargs: Any) -> None:  # noqa: B006 (uhashring's signature)
        hash_fn = kwargs.get("hash_fn", None)
        vnodes = kwargs.get("vnodes", None)
        weight_fn = kwargs.get("weight_fn", None)

        self._ketama = isinstance(hash_fn, str) and hash_fn == "ketama"
        #: The default mode's hash (of keys and of points); None in ketama mode.
        self._hash_fn: Optional[Callable[[Any], Any]] = None
        if self._ketama:
            # uhashring hands `replicas` to its ketama ring only, and ignores it otherwise.
            self._replicas: Any = kwargs.get("replicas", 4)
            if vnodes is None:
                vnodes = 40
        else:
            if vnodes is None:
                vnodes = 160
            if hash_fn and not callable(hash_fn):
                raise TypeError("hash_fn should be a callable function")
            self._hash_fn = hash_fn or _md5_int
            self._replicas = 4
        #: The hash of a key (`hashi(key)`, without the method's dispatch: lookups call it).
        self._key_hash: Callable[[Any], Any] = self._hash_fn or _ketama_hash
        self._default_vnodes = vnodes

        if weight_fn and not callable(weight_fn):
            raise TypeError("weight_fn should be a callable function")
        self._weight_fn: Optional[Callable[..., Any]] = weight_fn

        self._nodes: Dict[Any, _NodeConf] = {}
        # The continuum as uhashring keeps it: sorted positions, position -> node, points per node,
        # and (default mode, which updates one node at a time) each node's positions.
        self._model_keys: List[Any] = []
        self._model_ring: Dict[Any, Any] = {}
        self._model_distribution: Counter = Counter()
        self._node_points: Dict[Any, List[Any]] = {}
        # Ketama mode on the library: the ring keys are placed on, and the members it was built from,
        # from which the continuum above is computed when something asks for it (`_materialise`).
        self._library: Optional[Ring] = None
        self._pending: Optional[List[_Member]] = None

        if self._configure_nodes(nodes):
            self._create_ring(self._nodes.items())

    # Configuration, read exactly as uhashring reads it.

    def _configure_nodes(self, nodes: Union[str, list, dict]) -> bool:
        """Merges ``nodes`` into the configuration; whether the continuum must be rebuilt (a new
        node, or a change of ``nodename``, ``vnodes`` or ``weight``)."""
        if isinstance(nodes, str):
            nodes = [nodes]
        elif not isinstance(nodes, (dict, list)):
            raise ValueError(
                "nodes configuration should be a list or a dict," " got {}".format(type(nodes))
            )
        conf_changed = False
        for node in nodes:
            conf: _NodeConf = {
                "hostname": node,
                "instance": None,
                "nodename": node,
                "port": None,
                "vnodes": self._default_vnodes,
                "weight": 1,
            }
            current_conf = self._nodes.get(node, {})
            if not current_conf:
                conf_changed = True
            if isinstance(nodes, dict):
                node_conf = nodes[node]
                if isinstance(node_conf, int):
                    conf["weight"] = node_conf
                elif isinstance(node_conf, dict):
                    for k, v in node_conf.items():
                        if k in conf:
                            conf[k] = v
                            if k in ["nodename", "vnodes", "weight"]:
                                if current_conf.get(k) != v:
                                    conf_changed = True
                else:
                    raise ValueError(
                        "node configuration should be a dict or an int,"
                        " got {}".format(type(node_conf))
                    )
            if self._weight_fn:
                conf["weight"] = self._weight_fn(**conf)
            if current_conf.get("weight") != conf["weight"]:
                conf_changed = True
            self._nodes[node] = conf
        return conf_changed

    def _create_ring(self, nodes: Iterable[Tuple[Any, _NodeConf]]) -> None:
        """Updates the continuum after a change of ``nodes``: ketama mode rebuilds it whole, the
        default mode replaces the points of ``nodes`` only (as uhashring does: which node owns a
        shared position depends on that order)."""
        if self._ketama:
            self._create_ketama()
        else:
            self._create_points(nodes)

    def _create_ketama(self) -> None:
        """Rebuilds the ketama continuum. On error (a weight uhashring cannot use) the previous
        continuum stays, as it stays in uhashring, while the configuration keeps the change."""
        members = [(name, conf["vnodes"], conf["weight"]) for name, conf in self._nodes.items()]
        library = _library_ring(members, self._replicas)
        if library is not None:
            self._library, self._pending = library, members
            return
        keys, ring, distribution = _ketama_continuum(members, self._replicas)
        self._library, self._pending = None, None
        self._model_keys, self._model_ring, self._model_distribution = keys, ring, distribution

    def _create_points(self, nodes: Iterable[Tuple[Any, _NodeConf]]) -> None:
        """uhashring's ``MetaRing._create_ring``: each node's old points out (those it still owns),
        its ``vnodes × weight`` new points in, each at ``hash_fn(f"{name}-{i}")``; a position already
        taken goes to the node written last."""
        hash_fn = self._hash_fn
        assert hash_fn is not None
        ring, distribution = self._model_ring, self._model_distribution
        for node_name, node_conf in nodes:
            old_points = self._node_points.pop(node_name, None)
            if old_points:
                for point in old_points:
                    if ring.get(point) == node_name:
                        del ring[point]
                distribution.pop(node_name, None)
            new_points = []
            for w in range(0, node_conf["vnodes"] * node_conf["weight"]):
                distribution[node_name] += 1
                point = hash_fn(f"{node_name}-{w}")
                ring[point] = node_name
                new_points.append(point)
            self._node_points[node_name] = new_points
        self._model_keys = sorted(ring.keys())

    def _materialise(self) -> None:
        """Computes the ketama continuum of a ring placed by the library, the first time something
        asks for positions (lookups do not need it). The members stay pending until the continuum
        is in place, so another thread that asks meanwhile computes it too rather than reading the
        previous one."""
        members = self._pending
        if members is not None:
            keys, ring, distribution = _ketama_continuum(members, self._replicas)
            if self._pending is members:
                self._model_keys, self._model_ring, self._model_distribution = keys, ring, distribution
                self._pending = None

    # Membership.

    def __setitem__(self, nodename: Any, conf: Union[int, _NodeConf] = {"weight": 1}) -> None:  # noqa: B006
        """Adds the node ``nodename`` with its configuration (a weight, or a configuration dict), or
        changes the configuration of an existing one."""
        if self._configure_nodes({nodename: conf}):
            self._create_ring([(nodename, self._nodes[nodename])])

    add_node = __setitem__

    def __delitem__(self, nodename: Any) -> None:
        """Removes the node ``nodename``; ``KeyError`` when there is none."""
        if nodename not in self._nodes:
            raise KeyError(
                "node '{}' not found, available nodes: {}".format(nodename, self._nodes.keys())
            )
        if self._ketama:
            self._nodes.pop(nodename)
            self._create_ketama()
            return
        points = self._node_points[nodename]
        self._nodes.pop(nodename)
        self._node_points.pop(nodename)
        # (uhashring 2.5 pops without a default and so raises KeyError for a node without points,
        # after removing it: here the removal just succeeds.)
        self._model_distribution.pop(nodename, None)
        ring = self._model_ring
        for point in points:
            if ring.get(point) == nodename:
                del ring[point]
        self._model_keys = sorted(ring.keys())

    remove_node = __delitem__

    def regenerate(self) -> None:
        """Re-evaluates ``weight_fn`` for every node (keeping the rest of each configuration) and
        rebuilds the continuum: for a ``weight_fn`` whose answers change over time."""
        self._configure_nodes(dict(self._nodes))
        self._create_ring(self._nodes.items())

    # Lookups.

    def hashi(self, key: Any, replica: int = 0) -> Any:
        """The hash of ``key`` on the continuum: in ketama mode the 32-bit word ``replica`` (0-3) of
        the MD5 of ``str(key)``, little-endian; otherwise ``hash_fn(key)`` (by default the MD5 of
        ``str(key)`` as a 128-bit integer), which takes no ``replica``."""
        hash_fn = self._hash_fn
        if hash_fn is not None:
            if replica:
                raise TypeError("hashi() takes no replica outside ketama mode")
            return hash_fn(key)
        dh = md5(str(key).encode("utf-8")).digest()
        rd = replica * 4
        return (dh[3 + rd] << 24) | (dh[2 + rd] << 16) | (dh[1 + rd] << 8) | dh[0 + rd]

    def get_key(self, key: Any) -> Any:
        """The hash of ``key`` on the continuum (``hashi``; hash_ring's name for it)."""
        return self.hashi(key)

    def _get_pos(self, key: Any) -> int:
        """The index in the sorted positions of the first one above the hash of ``key``, wrapping
        to 0 past the last (bisect_right: a key at a point's exact position goes to the next)."""
        keys = self._keys
        p = bisect(keys, self.hashi(key))
        return 0 if p == len(keys) else p

    def get_node(self, key: Any) -> Any:
        """The name of the node of ``key`` (``None`` when the continuum has no points)."""
        library = self._library
        if library is not None:
            # (`str(key)`, as uhashring hashes it; inlined: this is the call users make per request.)
            return library.lookup(key if type(key) is str else str(key))
        # Without the library the continuum is always computed (nothing is pending).
        ring = self._model_ring
        if not ring:
            return None
        keys = self._model_keys
        p = bisect(keys, self._key_hash(key))
        return ring[keys[0 if p == len(keys) else p]]

    def _get(self, key: Any, what: str) -> Any:
        """uhashring's lookup of ``what`` about the node of ``key``: ``nodename``, ``pos``,
        ``tuple`` (position, name), ``dict`` (its configuration), or a configuration key."""
        library = self._library
        if library is not None and what not in ("pos", "tuple"):
            nodename = library.lookup(key if type(key) is str else str(key))
        else:
            self._materialise()
            ring = self._model_ring
            if not ring:
                return None
            keys = self._model_keys
            pos = bisect(keys, self._key_hash(key))
            if pos == len(keys):
                pos = 0
            if what == "pos":
                return pos
            nodename = ring[keys[pos]]
            if what == "tuple":
                return (keys[pos], nodename)
        if what in ["hostname", "instance", "port", "weight"]:
            return self._nodes[nodename][what]
        if what == "dict":
            return self._nodes[nodename]
        if what == "nodename":
            return nodename
        return None

    def get(self, key: Any) -> Optional[_NodeConf]:
        """The configuration dict of the node of ``key`` (``None`` on an empty continuum)."""
        return self._get(key, "dict")

    def __getitem__(self, key: Any) -> Any:
        """The ``instance`` of the node of ``key``."""
        return self._get(key, "instance")

    get_node_instance = __getitem__

    def get_node_hostname(self, key: Any) -> Any:
        """The ``hostname`` of the node of ``key``."""
        return self._get(key, "hostname")

    def get_node_port(self, key: Any) -> Any:
        """The ``port`` of the node of ``key``."""
        return self._get(key, "port")

    def get_node_weight(self, key: Any) -> Any:
        """The ``weight`` of the node of ``key``."""
        return self._get(key, "weight")

    def get_node_pos(self, key: Any) -> Optional[int]:
        """The index, among the continuum's sorted positions, of the point that owns ``key``."""
        return self._get(key, "pos")

    def get_server(self, key: Any) -> Optional[Tuple[Any, Any]]:
        """The ``(position, nodename)`` point that owns ``key`` (ketama's server tuple)."""
        return self._get(key, "tuple")

    def get_instances(self) -> list:
        """The ``instance`` of every node that has one (a true value), in configuration order."""
        return [c.get("instance") for c in self._nodes.values() if c.get("instance")]

    def get_nodes(self) -> KeysView[Any]:
        """The names of the nodes (a dict keys view, as uhashring's)."""
        return self._nodes.keys()

    def get_points(self) -> List[Tuple[Any, Any]]:
        """Every point of the continuum, ``(position, nodename)`` in ring order (a position two
        nodes share is listed once per point, each time with the node that owns it)."""
        ring = self._ring
        return [(k, ring[k]) for k in self._keys]

    def range(self, key: Any, size: Optional[int] = None, unique: bool = True) -> Iterator[_NodeConf]:
        """The configurations of the nodes clockwise from the point of ``key``, once round the
        continuum: each node once (``unique``) or once per point, at most ``size`` of them."""
        all_nodes: Any = set()
        if unique:
            size = size or len(self._nodes)
        else:
            all_nodes = []
        pos = self._get_pos(key)
        for k in self._keys[pos:]:
            nodename = self._ring[k]
            if unique:
                if nodename in all_nodes:
                    continue
                all_nodes.add(nodename)
            else:
                all_nodes.append(nodename)
            yield self._nodes[nodename]
            if len(all_nodes) == size:
                break
        else:
            for i, k in enumerate(self._keys):
                if i < pos:
                    nodename = self._ring[k]
                    if unique:
                        if nodename in all_nodes:
                            continue
                        all_nodes.add(nodename)
                    else:
                        all_nodes.append(nodename)
                    yield self._nodes[nodename]
                    if len(all_nodes) == size:
                        break

    def iterate_nodes(self, key: Any, distinct: bool = True) -> Iterator[Any]:
        """The ``nodename`` of the nodes clockwise from ``key`` (hash_ring's API): each node once
        when ``distinct``, else once per point; a single ``None`` on an empty continuum."""
        if not self._ring:
            yield None
        else:
            for node in self.range(key, unique=distinct):
                yield node["nodename"]

    def print_continuum(self) -> None:
        """Prints the continuum as ketama does: the number of points, then ``name (position)`` per
        point in ring order."""
        numpoints = len(self._keys)
        if numpoints:
            print(f"Numpoints in continuum: {numpoints}")
        else:
            print("Continuum empty")
        for point, node in self.get_points():
            print(f"{node} ({point})")

    @property
    def conf(self) -> Dict[Any, _NodeConf]:
        """The nodes' configuration dicts by name (uhashring's own dict, not a copy)."""
        return self._nodes

    nodes = conf

    @property
    def distribution(self) -> Counter:
        """How many points each node has (a ``Counter``; a node without points is not in it)."""
        self._materialise()
        return self._model_distribution

    @property
    def ring(self) -> Dict[Any, Any]:
        """The continuum as a dict of positions to node names."""
        self._materialise()
        return self._model_ring

    continuum = ring

    @property
    def size(self) -> int:
        """How many distinct positions the continuum has."""
        return len(self.ring)

    @property
    def _ring(self) -> Dict[Any, Any]:
        """uhashring's private ``_ring`` (position -> node name), for code that reads it."""
        self._materialise()
        return self._model_ring

    @property
    def _keys(self) -> List[Any]:
        """uhashring's private ``_keys`` (the sorted positions), for code that reads it."""
        self._materialise()
        return self._model_keys
