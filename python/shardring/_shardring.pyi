"""Type stubs of the native module ``shardring._shardring`` (re-exported by ``shardring``)."""

import os
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str
#: The names ``compat=`` takes: every mode of ``shardring lookup --compat``.
COMPAT_MODES: List[str]
#: The names ``algorithm=`` takes.
ALGORITHMS: List[str]
#: The library's own key hashes (``hash=`` without ``compat``; ``twemproxy:NAME`` and
#: ``spymemcached:NAME`` are accepted too).
HASHES: List[str]

Key = Union[str, bytes]
Nodes = Union[Mapping[str, float], Iterable[Union[str, Tuple[str, float]]]]
PathLike = Union[str, "os.PathLike[str]"]

class ConfigError(ValueError):
    """A twemproxy configuration with problems; ``problems`` lists every one."""

    problems: List["ConfigProblem"]

class EmptyRingError(LookupError):
    """A key was looked up on a ring without nodes."""

class ConfigProblem:
    """One problem of a configuration file."""

    @property
    def line(self) -> int:
        """The 1-based line (0: the whole file)."""
    @property
    def key(self) -> str:
        """``POOL.KEY``, ``POOL``, or empty."""
    @property
    def message(self) -> str:
        """What is wrong."""

class Migration:
    """Key hashes ``first..=last`` that ``old`` owns before a change and ``new`` after it."""

    @property
    def first(self) -> int:
        """The first hash of the range."""
    @property
    def last(self) -> int:
        """The last hash of the range (inclusive)."""
    @property
    def old(self) -> Optional[str]:
        """The owner before the change (``None``: the ring was empty)."""
    @property
    def new(self) -> Optional[str]:
        """The owner after the change (``None``: the ring becomes empty)."""

class TwemproxyPool:
    """One pool of a twemproxy YAML file."""

    @property
    def name(self) -> str:
        """The pool's name."""
    @property
    def redis(self) -> bool:
        """``redis: true``: a Redis pool, else memcached."""
    @property
    def hash(self) -> str:
        """The key hash, as twemproxy names it (``fnv1a_64`` when the file has none)."""
    @property
    def hash_tag(self) -> Optional[str]:
        """The two hash tag characters, e.g. ``"{}"``, or ``None``."""
    @property
    def distribution(self) -> str:
        """``ketama``, ``modula`` or ``random``."""
    @property
    def servers(self) -> List[Tuple[str, str, int, int]]:
        """``(node, host, port, weight)`` in file order (a unix socket: its path, port 0)."""
    def ring(self) -> "Ring":
        """Where nutcracker sends each key (``ValueError`` for ``distribution: random``)."""

def read_twemproxy(path: PathLike, pool: Optional[str] = None) -> TwemproxyPool:
    """One pool of a twemproxy YAML file (``ConfigError`` listing every problem of a bad one)."""

def placement_digest(
    servers: Sequence[Union[str, Tuple[str, str, int]]],
    *,
    hash: str = "fnv1a_64",
    hash_tag: Optional[str] = None,
    distribution: str = "ketama",
) -> str:
    """The digest of a twemproxy pool's placement, as the proxy reports it (16 hex digits): of server
    lines (``host:port:weight [name]``) or etcd's ``(name, address, weight)`` members, in any order,
    with the pool's settings (``ValueError`` for a bad one)."""

class Ring:
    """A consistent-hash placement of keys on named nodes."""

    def __init__(
        self,
        nodes: Optional[Nodes] = None,
        *,
        hash: Optional[str] = None,
        vnodes: Optional[int] = None,
        algorithm: Optional[str] = None,
        compat: Optional[str] = None,
        template: Optional[str] = None,
        digest: Optional[str] = None,
        ties: Optional[str] = None,
        line_table: bool = False,
    ) -> None:
        """A ring over ``nodes``: a dict of names to weights, or a list of names (weight 1) and
        ``(name, weight)`` pairs; ``algorithm``, ``hash`` and ``vnodes`` without ``compat``, or a
        program's ring byte for byte with ``compat`` (``ValueError`` for a bad setting)."""
    @staticmethod
    def from_twemproxy(path: PathLike, pool: Optional[str] = None) -> "Ring":
        """The ring of a twemproxy YAML pool, placing keys as nutcracker does."""
    @staticmethod
    def from_twemproxy_servers(
        servers: Sequence[str],
        *,
        hash: str = "fnv1a_64",
        hash_tag: Optional[str] = None,
        distribution: str = "ketama",
    ) -> "Ring":
        """The ring of twemproxy server lines (``host:port:weight [name]``) and a pool's settings."""
    @staticmethod
    def from_members(
        members: Sequence[Tuple[str, str, int]],
        *,
        hash: str = "fnv1a_64",
        hash_tag: Optional[str] = None,
        distribution: str = "ketama",
    ) -> "Ring":
        """The ring of a pool's ``(name, address, weight)`` members as etcd holds them."""
    def lookup(self, key: Key) -> str:
        """The node that owns ``key`` (``EmptyRingError`` on an empty ring)."""
    def lookup_many(self, keys: Iterable[Key]) -> List[str]:
        """The owners of many keys, in order, placed in batches."""
    def replicas(self, key: Key, n: int) -> List[str]:
        """Up to ``n`` distinct nodes for ``key``, the owner first."""
    def add(self, name: str, weight: float = 1.0) -> None:
        """Adds the node ``name`` of ``weight``; only keys that now belong to it move."""
    def remove(self, name: str) -> None:
        """Removes the node ``name``; only its keys move (``ValueError`` when there is none)."""
    def set_weight(self, name: str, weight: float) -> None:
        """Changes the weight of the node ``name``."""
    @property
    def nodes(self) -> Dict[str, float]:
        """The nodes and their weights."""
    @property
    def algorithm(self) -> str:
        """``ring`` for the library's ring and every program's ring, else the algorithm's name."""
    def shares(self) -> Dict[str, float]:
        """Each node's share of the circle (point rings only)."""
    def points(self) -> List[Tuple[int, str]]:
        """Every point in ring order (point rings only)."""
    def diff(self, other: "Ring") -> List[Migration]:
        """The hash ranges whose owner changes from this ring to ``other`` (point rings only)."""
    def __len__(self) -> int:
        """The number of nodes."""
    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a node of the ring."""
