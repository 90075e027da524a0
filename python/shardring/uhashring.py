"""A drop-in for uhashring's ``HashRing`` in its ketama mode, on the shardring library.

Switch by changing one import::

    # from uhashring import HashRing
    from shardring.uhashring import HashRing

    ring = HashRing(nodes={"cache1": 1, "cache2": 2}, hash_fn="ketama")
    ring.get_node("user:42")

Every key goes to the node uhashring's ``HashRing(..., hash_fn="ketama")`` sends it to (the library's
``compat="uhashring"`` ring, checked against uhashring itself): same constructor, same node
configuration (names, or a dict of names to weights or to ``{"hostname", "instance", "port",
"vnodes", "weight"}`` dicts), same ``weight_fn``, same methods, same answers, keys hashed as uhashring
hashes them (``str(key)`` in UTF-8, so ``b"k"`` is the text ``"b'k'"``, as there).

Only the ketama mode is reproduced: uhashring's default mode places nodes on MD5's full 128 bits,
which a 32-bit ring cannot, and a ``hash_fn`` of your own is code the library cannot run. Those, a
``replicas`` other than 4 and per-node ``vnodes`` that differ are refused with ``ValueError`` rather
than placed differently.
"""

from __future__ import annotations

from bisect import bisect
from collections import Counter
from hashlib import md5
from typing import Any, Callable, Dict, Iterator, KeysView, List, Optional, Tuple, Union

from ._shardring import Ring

__all__ = ["HashRing"]

_NodeConf = Dict[str, Any]


class HashRing:
    """uhashring's ``HashRing`` (``hash_fn="ketama"``), placing with the shardring library."""

    def __init__(self, nodes: Union[str, list, dict] = [], **kwargs: Any) -> None:  # noqa: B006 (uhashring's signature)
        hash_fn = kwargs.get("hash_fn", None)
        if hash_fn != "ketama":
            raise ValueError(
                "shardring.uhashring reproduces uhashring's ketama mode only: pass hash_fn='ketama' "
                "(uhashring's default mode places nodes on 128-bit MD5 values, which a 32-bit ring "
                "cannot reproduce, and a hash function of your own cannot be run by the library)"
            )
        replicas = kwargs.get("replicas", 4)
        if replicas != 4:
            raise ValueError(f"replicas={replicas!r}: only uhashring's default of 4 is reproduced")
        vnodes = kwargs.get("vnodes", None)
        self._default_vnodes: int = 40 if vnodes is None else vnodes
        weight_fn = kwargs.get("weight_fn", None)
        if weight_fn and not callable(weight_fn):
            raise TypeError("weight_fn should be a callable function")
        self._weight_fn: Optional[Callable[..., int]] = weight_fn
        self._nodes: Dict[str, _NodeConf] = {}
        self._ring_obj = Ring(compat="uhashring", vnodes=self._default_vnodes)
        self._points_cache: Optional[List[Tuple[int, str]]] = None
        self._configure_nodes(nodes)
        self._create_ring()

    # Configuration, as uhashring reads it.

    def _configure_nodes(self, nodes: Union[str, list, dict]) -> bool:
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

    def _create_ring(self) -> None:
        """Rebuilds the ring from the configuration (uhashring's ketama mode rebuilds it whole)."""
        vnodes = {c["vnodes"] for c in self._nodes.values()}
        if len(vnodes) > 1:
            raise ValueError(
                f"nodes have different vnodes {sorted(vnodes)}: only one vnodes for every node is reproduced"
            )
        ring_vnodes = vnodes.pop() if vnodes else self._default_vnodes
        weights = []
        for name, conf in self._nodes.items():
            weight = conf["weight"]
            if isinstance(weight, bool) or not isinstance(weight, int):
                raise ValueError(f"node {name!r} has weight {weight!r}: uhashring's ketama mode takes whole numbers")
            weights.append((name, float(weight)))
        self._ring_obj = Ring(weights, compat="uhashring", vnodes=ring_vnodes)
        self._points_cache = None

    @staticmethod
    def _key(key: Any) -> str:
        # uhashring hashes str(key) (its ketama hashi: md5(str(key).encode("utf-8"))).
        return key if type(key) is str else str(key)

    def _points(self) -> List[Tuple[int, str]]:
        if self._points_cache is None:
            self._points_cache = self._ring_obj.points()
        return self._points_cache

    # Membership.

    def __setitem__(self, nodename: str, conf: Union[int, _NodeConf] = {"weight": 1}) -> None:  # noqa: B006
        """Adds the node ``nodename`` with its configuration (or changes it)."""
        if self._configure_nodes({nodename: conf}):
            self._create_ring()

    add_node = __setitem__

    def __delitem__(self, nodename: str) -> None:
        """Removes the node ``nodename``; ``KeyError`` when there is none."""
        if nodename not in self._nodes:
            raise KeyError(
                "node '{}' not found, available nodes: {}".format(nodename, self._nodes.keys())
            )
        self._nodes.pop(nodename)
        self._create_ring()

    remove_node = __delitem__

    def regenerate(self) -> None:
        """Re-evaluates ``weight_fn`` for every node and rebuilds the ring."""
        self._configure_nodes(dict(self._nodes))
        self._create_ring()

    # Lookups.

    def get_node(self, key: Any) -> Optional[str]:
        """The name of the node of ``key`` (``None`` on an empty ring)."""
        if not self._nodes:
            return None
        # (`_key`, inlined: this is the call users make per request.)
        return self._ring_obj.lookup(key if type(key) is str else str(key))

    def _get(self, key: Any, what: str) -> Any:
        name = self.get_node(key)
        if name is None:
            return None
        if what == "dict":
            return self._nodes[name]
        return self._nodes[name][what]

    def get(self, key: Any) -> Optional[_NodeConf]:
        """The configuration dict of the node of ``key``."""
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

    def hashi(self, key: Any, replica: int = 0) -> int:
        """uhashring's ketama hash of ``key``: four bytes of its MD5, little-endian."""
        dh = md5(str(key).encode("utf-8")).digest()
        rd = replica * 4
        return (dh[3 + rd] << 24) | (dh[2 + rd] << 16) | (dh[1 + rd] << 8) | dh[0 + rd]

    get_key = hashi

    def _get_pos(self, key: Any) -> int:
        positions = [p for p, _ in self._points()]
        p = bisect(positions, self.hashi(key))
        return 0 if p == len(positions) else p

    def get_node_pos(self, key: Any) -> Optional[int]:
        """The index in the continuum of the point that owns ``key``."""
        if not self._nodes:
            return None
        return self._get_pos(key)

    def get_server(self, key: Any) -> Optional[Tuple[int, str]]:
        """The ``(position, nodename)`` point that owns ``key``."""
        name = self.get_node(key)
        if name is None:
            return None
        points = self._points()
        pos = self._get_pos(key)
        return (points[pos][0], name)

    def get_instances(self) -> list:
        """The ``instance`` of every node that has one."""
        return [c.get("instance") for c in self._nodes.values() if c.get("instance")]

    def get_nodes(self) -> KeysView[str]:
        """The names of the nodes (a dict keys view, as uhashring's)."""
        return self._nodes.keys()

    def get_points(self) -> List[Tuple[int, str]]:
        """Every point of the continuum: ``(position, nodename)`` in ring order."""
        return list(self._points())

    def range(self, key: Any, size: Optional[int] = None, unique: bool = True) -> Iterator[_NodeConf]:
        """The configurations of the nodes clockwise from ``key``: each node once (``unique``), or
        one per point; at most ``size``."""
        if not self._nodes:
            return
        if unique:
            names = self._ring_obj.replicas(self._key(key), size or len(self._nodes))
            for name in names:
                yield self._nodes[name]
            return
        points = self._points()
        pos = self._get_pos(key)
        for i, (_, name) in enumerate(points[pos:] + points[:pos]):
            if size is not None and i == size:
                break
            yield self._nodes[name]

    def iterate_nodes(self, key: Any, distinct: bool = True) -> Iterator[Optional[str]]:
        """The node names clockwise from ``key`` (each once when ``distinct``)."""
        if not self._nodes:
            yield None
            return
        for conf in self.range(key, unique=distinct):
            yield conf["nodename"]

    def print_continuum(self) -> None:
        """Prints the continuum as uhashring does."""
        points = self._points()
        if points:
            print(f"Numpoints in continuum: {len(points)}")
        else:
            print("Continuum empty")
        for point, node in points:
            print(f"{node} ({point})")

    @property
    def conf(self) -> Dict[str, _NodeConf]:
        """The nodes' configurations by name."""
        return self._nodes

    nodes = conf

    @property
    def distribution(self) -> Counter:
        """How many points each node has."""
        return Counter(name for _, name in self._points())

    @property
    def ring(self) -> Dict[int, str]:
        """The continuum as a dict of positions to node names."""
        return dict(self._points())

    continuum = ring

    @property
    def size(self) -> int:
        """How many points the continuum has."""
        return len(self._points())
