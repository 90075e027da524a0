"""A sharded memcached client on pymemcache that sends every key where nutcracker would.

::

    from shardring.pymemcache import Client

    # The servers and placement of a twemproxy pool (its hash, distribution, hash_tag, weights, names):
    cache = Client("/etc/nutcracker.yml", pool="alpha")
    # Or a list of servers, placed as twemproxy's defaults do (fnv1a_64, ketama) or by any compat mode:
    cache = Client(["10.0.0.1:11211", "10.0.0.2:11211"], hash_tag="{}")
    cache = Client({"10.0.0.1:11211": 1, "10.0.0.2:11211": 2}, compat="libmemcached")

    cache.set("user:42", b"...")
    cache.get_many(["user:1", "user:2"])  # one get_many per server

Applications that talk to memcached directly and one that goes through the proxy (or nutcracker)
agree on every key, so the two can be mixed and either replaced by the other without moving keys.
The key placed is the key as sent: ``key_prefix`` included, a ``str`` in UTF-8.

Each server has its own pymemcache ``Client`` (or ``PooledClient`` with ``use_pooling=True``), made
with the keyword arguments given here (``serde``, ``connect_timeout``, ``timeout``, ``no_delay``,
``ignore_exc``, ``default_noreply``, ``tls_context``, ...). Multi-key calls are split per server and
their answers merged. A server that fails raises pymemcache's error (or, with ``ignore_exc=True``,
answers as a miss); keys are never moved to other servers, as nutcracker without
``auto_eject_hosts`` does not move them.

With ``etcd="http://127.0.0.1:2379"`` the servers come from etcd under ``<prefix><pool>/servers/``
(the proxy's layout, see ``shardring._etcd``) and follow every change there; the placement settings
are the YAML pool's when a file is given, else the keyword arguments'.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from pymemcache.client.base import Client as _BaseClient  # type: ignore[import-untyped]
from pymemcache.client.base import PooledClient as _PooledClient  # type: ignore[import-untyped]

from . import _etcd
from ._shardring import Ring, read_twemproxy

__all__ = ["Client"]

Key = Union[str, bytes]
_Server = Union[Tuple[str, int], str]


def _server_of(node: str) -> _Server:
    """Where a node named by its address listens: ``(host, port)``, or a unix socket path.

    ``host:port`` and ``[v6]:port``; spymemcached's ``name/host:port`` and ``/host:port`` (the text
    Java prints for an address); a path for a unix socket.
    """
    text = node
    if "/" in text:
        tail = text.rsplit("/", 1)[1]
        if ":" in tail and tail.rsplit(":", 1)[1].isdigit():
            text = tail
        elif text.startswith("/"):
            return text
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"node {node!r} is not host:port (a client needs each server's address)")
    return (host.strip("[]"), int(port))


class _Settings(NamedTuple):
    """A twemproxy pool's placement settings (what etcd membership is placed with)."""

    hash: str
    hash_tag: Optional[str]
    distribution: str


class _Routing:
    """One membership: the ring and a client per node; replaced whole when membership changes."""

    __slots__ = ("ring", "clients")

    def __init__(self, ring: Ring, clients: Dict[str, Any]) -> None:
        self.ring = ring
        self.clients = clients


class Client:
    """A memcached client over several servers, each key sent where nutcracker sends it.

    ``servers`` is the path of a twemproxy YAML file (``pool`` names its pool when it has several), or
    the servers: a list of ``host:port`` (or ``(host:port, weight)``), or a dict of ``host:port`` to
    weights. Without a file, ``compat`` picks the placement: ``"twemproxy"`` (the default: nutcracker's
    ketama with ``hash``, ``hash_tag`` and ``distribution`` as a pool's keys; ``hash`` defaults to
    ``fnv1a_64``), any other mode of :class:`shardring.Ring` (with ``hash`` named as that program
    names it), or ``None`` for the library's own ring.
    """

    def __init__(
        self,
        servers: Union[str, "os.PathLike[str]", Sequence[Any], Mapping[str, float]],
        *,
        pool: Optional[str] = None,
        compat: Optional[str] = "twemproxy",
        hash: Optional[str] = None,
        hash_tag: Optional[str] = None,
        distribution: str = "ketama",
        etcd: Optional[str] = None,
        etcd_prefix: str = _etcd.DEFAULT_PREFIX,
        allow_empty: bool = False,
        use_pooling: bool = False,
        key_prefix: bytes = b"",
        allow_unicode_keys: bool = False,
        **client_kwargs: Any,
    ) -> None:
        self._key_prefix = key_prefix
        self._client_kwargs = dict(
            client_kwargs, key_prefix=key_prefix, allow_unicode_keys=allow_unicode_keys
        )
        self._client_class = _PooledClient if use_pooling else _BaseClient
        self._lock = threading.Lock()
        self._etcd: Optional[_etcd.EtcdPool] = None
        addresses: Dict[str, _Server]
        if isinstance(servers, (str, os.PathLike)):
            config = read_twemproxy(servers, pool)
            if config.redis:
                raise ValueError(f"pool {config.name!r} is a redis pool, not memcached")
            addresses = {
                node: (host if port == 0 else (host, port))
                for node, host, port, _ in config.servers
            }
            settings = _Settings(config.hash, config.hash_tag, config.distribution)
            pool = config.name
            # With etcd the servers are etcd's: the file's may be placed by `random`, or be none.
            ring = config.ring() if etcd is None else None
        else:
            nodes = self._nodes(servers)
            settings = _Settings(hash or "fnv1a_64", hash_tag, distribution)
            if compat == "twemproxy":
                ring = Ring.from_twemproxy_servers(
                    [f"{name}:{_whole(name, weight)}" for name, weight in nodes],
                    hash=settings.hash,
                    hash_tag=settings.hash_tag,
                    distribution=settings.distribution,
                )
            else:
                if hash_tag is not None or distribution != "ketama":
                    raise ValueError("hash_tag and distribution are twemproxy's (compat='twemproxy')")
                ring = Ring(nodes, compat=compat, hash=hash)
            addresses = {name: _server_of(name) for name, _ in nodes}
        if etcd is not None:
            if pool is None:
                raise ValueError("etcd= needs pool= (the pool whose servers etcd holds)")
            if compat != "twemproxy":
                raise ValueError("etcd membership is a twemproxy pool's (compat='twemproxy')")
            self._settings = settings
            self._etcd = _etcd.EtcdPool(etcd, pool, etcd_prefix, allow_empty=allow_empty)
            members = self._etcd.start(self._membership)
            self._routing = self._route(members, {})
        else:
            assert ring is not None
            self._routing = _Routing(ring, {n: self._connect(addresses[n]) for n in ring.nodes})

    @staticmethod
    def _nodes(servers: Any) -> List[Tuple[str, float]]:
        if isinstance(servers, Mapping):
            return [(str(n), float(w)) for n, w in servers.items()]
        nodes = []
        for s in servers:
            if isinstance(s, str):
                nodes.append((s, 1.0))
            else:
                name, weight = s
                nodes.append((name, float(weight)))
        return nodes

    def _connect(self, server: _Server) -> Any:
        return self._client_class(server, **self._client_kwargs)

    def _route(self, members: List[_etcd.Member], old: Dict[str, Any]) -> _Routing:
        s = self._settings
        ring = Ring.from_members(members, hash=s.hash, hash_tag=s.hash_tag, distribution=s.distribution)
        reuse = {getattr(c, "server", None): c for c in old.values()}
        clients = {}
        for name, addr, _ in members:
            server = _server_of(addr) if not addr.startswith("/") else addr
            clients[name] = reuse.pop(server, None) or self._connect(server)
        for stale in reuse.values():
            stale.close()
        return _Routing(ring, clients)

    def _membership(self, members: List[_etcd.Member]) -> None:
        """A new membership from etcd: one swap of the ring and the clients (servers whose address is
        unchanged keep their connections)."""
        with self._lock:
            self._routing = self._route(members, self._routing.clients)

    # Routing.

    def _wire_key(self, key: Key) -> bytes:
        """The key as pymemcache sends it (what nutcracker hashes)."""
        if isinstance(key, str):
            key = key.encode("utf-8")
        elif not isinstance(key, bytes):
            raise TypeError(f"a key must be str or bytes, not {type(key).__name__}")
        return self._key_prefix + key

    def _client_for(self, key: Key) -> Any:
        routing = self._routing
        return routing.clients[routing.ring.lookup(self._wire_key(key))]

    def _split(self, keys: Iterable[Key]) -> List[Tuple[Any, List[Key]]]:
        """The keys grouped by server (one ``lookup_many`` for all), each group in input order."""
        keys = list(keys)
        routing = self._routing
        owners = routing.ring.lookup_many([self._wire_key(k) for k in keys])
        groups: Dict[str, List[Key]] = defaultdict(list)
        for key, owner in zip(keys, owners):
            groups[owner].append(key)
        return [(routing.clients[node], group) for node, group in groups.items()]

    def server_for(self, key: Key) -> str:
        """The node (server name, else ``host:port``) ``key`` is sent to."""
        return self._routing.ring.lookup(self._wire_key(key))

    @property
    def ring(self) -> Ring:
        """The ring keys are placed on (the current one, when membership follows etcd)."""
        return self._routing.ring

    @property
    def clients(self) -> Dict[str, Any]:
        """Each node's pymemcache client."""
        return dict(self._routing.clients)

    # One key.

    def set(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` on the key's server (pymemcache's ``set``)."""
        return self._client_for(key).set(key, value, *args, **kwargs)

    def add(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` unless the key's server has it (pymemcache's ``add``)."""
        return self._client_for(key).add(key, value, *args, **kwargs)

    def replace(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` if the key's server has it (pymemcache's ``replace``)."""
        return self._client_for(key).replace(key, value, *args, **kwargs)

    def append(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Appends ``value`` to the value of ``key`` on the key's server (pymemcache's ``append``)."""
        return self._client_for(key).append(key, value, *args, **kwargs)

    def prepend(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Prepends ``value`` to the value of ``key`` on the key's server (pymemcache's ``prepend``)."""
        return self._client_for(key).prepend(key, value, *args, **kwargs)

    def cas(self, key: Key, value: Any, cas: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` if its CAS token is still ``cas`` (pymemcache's ``cas``)."""
        return self._client_for(key).cas(key, value, cas, *args, **kwargs)

    def get(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """The value of ``key`` from the key's server, or the default (pymemcache's ``get``)."""
        return self._client_for(key).get(key, *args, **kwargs)

    def gets(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """``(value, cas)`` of ``key`` from the key's server (pymemcache's ``gets``)."""
        return self._client_for(key).gets(key, *args, **kwargs)

    def delete(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """Deletes ``key`` on the key's server (pymemcache's ``delete``)."""
        return self._client_for(key).delete(key, *args, **kwargs)

    def incr(self, key: Key, value: int, *args: Any, **kwargs: Any) -> Any:
        """Adds ``value`` to the number under ``key`` on the key's server (pymemcache's ``incr``)."""
        return self._client_for(key).incr(key, value, *args, **kwargs)

    def decr(self, key: Key, value: int, *args: Any, **kwargs: Any) -> Any:
        """Subtracts ``value`` from the number under ``key`` on the key's server (pymemcache's ``decr``)."""
        return self._client_for(key).decr(key, value, *args, **kwargs)

    def touch(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """Sets a new expiry time for ``key`` on the key's server (pymemcache's ``touch``)."""
        return self._client_for(key).touch(key, *args, **kwargs)

    # Many keys: one call per server.

    def get_many(self, keys: Iterable[Key], *args: Any, **kwargs: Any) -> Dict[Key, Any]:
        """The values of the keys found, from one ``get_many`` per server."""
        found: Dict[Key, Any] = {}
        for client, group in self._split(keys):
            found.update(client.get_many(group, *args, **kwargs))
        return found

    get_multi = get_many

    def gets_many(self, keys: Iterable[Key], *args: Any, **kwargs: Any) -> Dict[Key, Any]:
        """``(value, cas)`` of the keys found, from one ``gets_many`` per server."""
        found: Dict[Key, Any] = {}
        for client, group in self._split(keys):
            found.update(client.gets_many(group, *args, **kwargs))
        return found

    def set_many(self, values: Mapping[Key, Any], *args: Any, **kwargs: Any) -> List[Key]:
        """Stores every value with one ``set_many`` per server; returns the keys that failed."""
        failed: List[Key] = []
        for client, group in self._split(values.keys()):
            failed += client.set_many({k: values[k] for k in group}, *args, **kwargs)
        return failed

    set_multi = set_many

    def delete_many(self, keys: Iterable[Key], *args: Any, **kwargs: Any) -> bool:
        """Deletes the keys with one ``delete_many`` per server."""
        done = True
        for client, group in self._split(keys):
            done = client.delete_many(group, *args, **kwargs) and done
        return done

    delete_multi = delete_many

    # Every server.

    def flush_all(self, *args: Any, **kwargs: Any) -> bool:
        """``flush_all`` on every server."""
        return all([c.flush_all(*args, **kwargs) for c in self._routing.clients.values()])

    def stats(self, *args: Any) -> Dict[str, Any]:
        """Each node's ``stats``."""
        return {n: c.stats(*args) for n, c in self._routing.clients.items()}

    def version(self) -> Dict[str, Any]:
        """Each node's ``version``."""
        return {n: c.version() for n, c in self._routing.clients.items()}

    def close(self) -> None:
        """Stops following etcd and closes every connection."""
        if self._etcd is not None:
            self._etcd.stop()
        for c in self._routing.clients.values():
            c.close()

    disconnect_all = close

    def quit(self) -> None:
        """Sends ``quit`` to every server."""
        for c in self._routing.clients.values():
            c.quit()

    def __enter__(self) -> "Client":
        """The client itself: ``with Client(...) as cache:`` closes it on leaving."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the client (``close``)."""
        self.close()


def _whole(name: str, weight: float) -> int:
    if weight != int(weight) or weight < 1:
        raise ValueError(f"node {name!r} has weight {weight}: twemproxy takes whole-number weights from 1")
    return int(weight)
