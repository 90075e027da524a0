"""Consistent hashing on the shardring library: every client places keys exactly alike.

- :class:`Ring`: the library's consistent-hash ring (virtual nodes, weights), the other algorithms by
  name (``jump``, ``rendezvous``, ``maglev``, ...), and other programs' rings byte for byte
  (``compat="twemproxy"``, ``"libmemcached"``, ``"spymemcached"``, ``"uhashring"``, ...).
  ``lookup``, batched ``lookup_many``, ``replicas``, membership changes, ``shares`` and ``diff``.
- :meth:`Ring.from_twemproxy` and :func:`read_twemproxy`: a twemproxy (nutcracker) YAML pool, placed
  as nutcracker places it (hash, distribution, hash tags, weights, server names).
- :mod:`shardring.uhashring`: ``HashRing``, a drop-in for uhashring 2.5's (every mode and node
  configuration, the same node for every key).
- :mod:`shardring.pymemcache`: ``Client``, a sharded memcached client that sends each key where
  nutcracker would, optionally following membership in etcd and taking part in a planned change
  (``shardring migrate``) as a proxy does.
- :func:`placement_digest`: the digest of a twemproxy pool's placement, as the proxy reports it.

Errors: ``ValueError`` (with the library's message) for bad input, :class:`ConfigError` (a
``ValueError``) listing every problem of a bad configuration file, :class:`EmptyRingError` (a
``LookupError``) for a lookup on a ring without nodes, ``TypeError`` for a key that is neither
``str`` nor ``bytes``.
"""

from ._shardring import (
    ALGORITHMS,
    COMPAT_MODES,
    HASHES,
    ConfigError,
    ConfigProblem,
    EmptyRingError,
    Migration,
    Ring,
    TwemproxyPool,
    __version__,
    placement_digest,
    read_twemproxy,
)

__all__ = [
    "ALGORITHMS",
    "COMPAT_MODES",
    "HASHES",
    "ConfigError",
    "ConfigProblem",
    "EmptyRingError",
    "Migration",
    "Ring",
    "TwemproxyPool",
    "__version__",
    "placement_digest",
    "read_twemproxy",
]
