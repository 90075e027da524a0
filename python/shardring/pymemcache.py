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

Such a client is a **participant** of the pool, exactly as a ``shardring proxy --etcd`` is, so that
``shardring migrate`` can move the pool to a next membership under live traffic from it
(``shardring._participant``): it registers in etcd as ``participant_id`` (see :class:`Client`);
while a next membership exists it dual-writes every key whose owner changes; it acknowledges each
step by registering the digests of what it serves; and while it cannot confirm its place in etcd
during a change it refuses the keys that move with :class:`FencedError`. What is dual-written, and
how, is the proxy's (``dual_writes.rs``):

- writes (``set``, ``add``, ``replace``, ``append``, ``prepend``, ``delete``, ``incr``, ``decr``,
  ``touch``, ``set_many``, ``delete_many``) of a key whose owner next is another server go to its
  owner now, then to its owner next; the caller gets the owner now's answer (or error), as without
  a change. ``cas`` goes to the owner now alone, and only when it stored the value is that value
  ``set`` (same flags and expiry) on the owner next: the owner next has its own CAS tokens.
- reads (``get``, ``gets``, ``get_many``, ``gets_many``) stay on the owner now.
- the owner next's answer is not the caller's, as through the proxy: one that differs is counted
  (:attr:`Client.dual_write_disagreements`) and logged at most every 5 s. An ``append`` or ``incr``
  the owner next answers ``NOT_STORED``/``NOT_FOUND`` (no copy yet) is expected, and repaired by
  the migration's copy, which reads the source's CAS again after copying a key. An owner next that
  *failed* (down, timed out) is counted (:attr:`Client.dual_write_failures`) and its error raised,
  as the proxy answers it: a write it did not take is not acknowledged, since once the key is
  copied nothing would bring it there and the cut-over would serve the older value.
- ``flush_all`` flushes the next membership's servers too, so that nothing flushed comes back
  with the cut-over.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from pymemcache.client.base import Client as _BaseClient  # type: ignore[import-untyped]
from pymemcache.client.base import PooledClient as _PooledClient  # type: ignore[import-untyped]
from pymemcache.exceptions import MemcacheClientError  # type: ignore[import-untyped]
from pymemcache.exceptions import MemcacheServerError  # type: ignore[import-untyped]

from . import _etcd
from ._participant import Memberships, Participant, Settings
from ._registration import DEFAULT_TTL
from ._routing import Routing, grouped
from ._shardring import Ring, read_twemproxy

__all__ = ["Client", "FencedError"]

log = logging.getLogger("shardring.pymemcache")

Key = Union[str, bytes]
_Server = Union[Tuple[str, int], str]
_R = TypeVar("_R")

#: How long a membership change waits for the writes routed by the one it replaces before it is
#: acknowledged anyway (a write stuck that long is failing).
_DRAIN_TIMEOUT = 10.0


class FencedError(MemcacheServerError):  # type: ignore[misc]
    """A key refused because this client cannot confirm its place in etcd during a planned change
    that moves it: serving it could return a value its new owner has replaced. A retry may succeed
    once etcd is reachable. A ``MemcacheServerError``, as the proxy's ``SERVER_ERROR fenced: ...``
    is through pymemcache.

    ``keys`` are the keys refused, ``unconfirmed`` how long (seconds) the place went unconfirmed.
    """

    def __init__(self, message: str, keys: Optional[List[Key]] = None, unconfirmed: float = 0.0) -> None:
        super().__init__(message)
        #: The keys refused (those of the request that move).
        self.keys = keys or []
        #: How long this client's place in etcd has gone unconfirmed, in seconds.
        self.unconfirmed = unconfirmed


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


class Client:
    """A memcached client over several servers, each key sent where nutcracker sends it.

    ``servers`` is the path of a twemproxy YAML file (``pool`` names its pool when it has several), or
    the servers: a list of ``host:port`` (or ``(host:port, weight)``), or a dict of ``host:port`` to
    weights. Without a file, ``compat`` picks the placement: ``"twemproxy"`` (the default: nutcracker's
    ketama with ``hash``, ``hash_tag`` and ``distribution`` as a pool's keys; ``hash`` defaults to
    ``fnv1a_64``), any other mode of :class:`shardring.Ring` (with ``hash`` named as that program
    names it), or ``None`` for the library's own ring.

    With ``etcd=URL`` the servers are etcd's and the client is a participant of the pool (see the
    module's docs). ``participant_id`` names it in the pool's roster (``shardring members
    participants``) and must be unique among the pool's running participants; ``shardring migrate``
    waits for every participant of the roster, so a process restarted after a crash should come
    back with the id it had (pass a stable one, e.g. host and worker number) and one retired for
    good is taken out with ``shardring members forget ID --stopped``. By default it is
    ``<hostname>-py<N>``, ``N`` the lowest number no other running client of this host holds for
    the pool (a lock file in the temporary directory), so a restarted process takes its
    predecessor's id. ``etcd_ttl`` is the registration's lease in seconds (10, as the proxy's);
    the keys that move are refused after 60 % of it without etcd's confirmation during a change.
    Construction reads the pool and registers, raising ``OSError`` when etcd cannot be reached.
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
        participant_id: Optional[str] = None,
        etcd_ttl: float = DEFAULT_TTL,
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
        self._participant: Optional[Participant] = None
        self._counts_lock = threading.Lock()
        self._counts = {"dual_writes": 0, "dual_write_failures": 0, "dual_write_disagreements": 0, "fenced": 0}
        self._logged = 0.0
        self._pool_name = pool
        addresses: Dict[str, _Server]
        if isinstance(servers, (str, os.PathLike)):
            config = read_twemproxy(servers, pool)
            if config.redis:
                raise ValueError(f"pool {config.name!r} is a redis pool, not memcached")
            addresses = {
                node: (host if port == 0 else (host, port))
                for node, host, port, _ in config.servers
            }
            settings = Settings(config.hash, config.hash_tag, config.distribution)
            pool = self._pool_name = config.name
            # With etcd the servers are etcd's: the file's may be placed by `random`, or be none.
            ring = config.ring() if etcd is None else None
        else:
            nodes = self._nodes(servers)
            settings = Settings(hash or "fnv1a_64", hash_tag, distribution)
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
        self._settings = settings
        self._routing: Routing
        if etcd is not None:
            if pool is None:
                raise ValueError("etcd= needs pool= (the pool whose servers etcd holds)")
            if compat != "twemproxy":
                raise ValueError("etcd membership is a twemproxy pool's (compat='twemproxy')")
            self._participant = Participant(
                etcd, pool, settings, self._serve, prefix=etcd_prefix, participant_id=participant_id,
                ttl=etcd_ttl, allow_empty=allow_empty,
            )
            try:
                self._participant.start()
            except BaseException:
                for c in self._routing.every_client() if hasattr(self, "_routing") else []:
                    c.close()
                raise
        else:
            assert ring is not None
            self._routing = Routing(ring, {n: self._connect(addresses[n]) for n in ring.nodes})

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

    # Membership from etcd.

    def _serve(self, m: Memberships) -> None:
        """Serves a new state from etcd (the participant's consumer): one swap of the rings and the
        clients (servers whose address is unchanged keep their connections); then waits for the
        writes routed by the old state, so that what the participant registers next is true of
        every write in flight. Raises ``ValueError`` for servers that cannot be placed."""
        s = self._settings
        ring = Ring.from_members(m.current, hash=s.hash, hash_tag=s.hash_tag, distribution=s.distribution)
        next_ring = None
        if m.next is not None:
            next_ring = Ring.from_members(m.next, hash=s.hash, hash_tag=s.hash_tag, distribution=s.distribution)
        with self._lock:
            old: Optional[Routing] = getattr(self, "_routing", None)
            reuse = {} if old is None else {getattr(c, "server", None): c for c in old.every_client()}
            kept: Dict[Any, Any] = {}

            def client(addr: str) -> Any:
                server = addr if addr.startswith("/") else _server_of(addr)
                if server not in kept:
                    kept[server] = reuse.pop(server, None) or self._connect(server)
                return kept[server]

            clients = {name: client(addr) for name, addr, _ in m.current}
            next_clients = {name: client(addr) for name, addr, _ in (m.next or [])}
            self._routing = Routing(ring, clients, next_ring, next_clients)
        if old is not None and not old.drain(_DRAIN_TIMEOUT):
            log.warning("writes routed by the previous membership still in flight after %.0f s", _DRAIN_TIMEOUT)
        for stale in reuse.values():
            stale.close()

    # Routing.

    def _wire_key(self, key: Key) -> bytes:
        """The key as pymemcache sends it (what nutcracker hashes)."""
        if isinstance(key, str):
            key = key.encode("utf-8")
        elif not isinstance(key, bytes):
            raise TypeError(f"a key must be str or bytes, not {type(key).__name__}")
        return self._key_prefix + key

    def _writing(self) -> Routing:
        """The state a write is routed by, counted in (``write_ends`` counts it out)."""
        while True:
            routing = self._routing
            routing.write_begins()
            # A swap that did not see this write begin is seen here (it swaps, then drains).
            if self._routing is routing:
                return routing
            routing.write_ends()

    def _fence(self, routing: Routing, moving: List[Key]) -> None:
        """Raises :class:`FencedError` for ``moving`` (keys whose owner changes) while this
        participant's place in etcd is unconfirmed during a planned change."""
        if not moving or routing.next_ring is None or self._participant is None:
            return
        unconfirmed = self._participant.fence.unconfirmed_for()
        if unconfirmed is None:
            return
        self._count("fenced")
        shown = ", ".join(repr(k) for k in moving[:3]) + (f" and {len(moving) - 3} more" if len(moving) > 3 else "")
        raise FencedError(
            f"fenced: this client (participant {self._participant.id} of pool {self._pool_name}) has not "
            f"confirmed its place in etcd for {unconfirmed * 1000:.0f} ms during a planned membership "
            f"change that moves {shown}: refused rather than risk a stale value; try again",
            moving,
            unconfirmed,
        )

    def _moving(self, routing: Routing, keys: List[Key]) -> Tuple[List[str], List[Optional[Any]]]:
        """Each key's owner now (node) and, when it is another server, its owner next's client."""
        wire = [self._wire_key(k) for k in keys]
        owners = routing.ring.lookup_many(wire)
        return owners, routing.next_owners(wire, owners)

    def _reading(self, key: Key) -> Any:
        """The client that answers a read of ``key`` (its owner now), unless fenced."""
        routing = self._routing
        wire = self._wire_key(key)
        owner = routing.ring.lookup(wire)
        fenced = routing.next_ring is not None and self._fenced_for() is not None
        if fenced and routing.next_owner(wire, owner) is not None:
            self._fence(routing, [key])
        return routing.clients[owner]

    def _fenced_for(self) -> Optional[float]:
        """How long this participant's place in etcd has gone unconfirmed beyond the fence time."""
        return None if self._participant is None else self._participant.fence.unconfirmed_for()

    def _split(self, keys: Iterable[Key]) -> List[Tuple[Any, List[Key]]]:
        """A read's keys grouped by owner now (one ``lookup_many`` for all), each group in input
        order, unless some move while fenced."""
        keys = list(keys)
        routing = self._routing
        if routing.next_ring is not None and self._fenced_for() is not None:
            owners, nexts = self._moving(routing, keys)
            self._fence(routing, [k for k, n in zip(keys, nexts) if n is not None])
        else:
            owners = routing.ring.lookup_many([self._wire_key(k) for k in keys])
        return grouped((routing.clients[o], k) for o, k in zip(owners, keys))

    def _count(self, what: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[what] += n

    def _next_leg(
        self, send: Callable[[Any], _R], client: Any, keys: List[Key], expected: Any
    ) -> Optional[BaseException]:
        """A dual write's second leg, to the owner next: its answer is not the caller's; it is
        counted, and logged at most every 5 s when it differs from the owner's (``expected``;
        ``None``: the owner failed). Its failure is returned, for the caller to raise: a write the
        owner next did not take is not acknowledged."""
        self._count("dual_writes", len(keys))
        try:
            answer = send(client)
        except MemcacheClientError as e:
            return e
        except Exception as e:  # noqa: BLE001 (any failure of the second leg fails the write)
            self._count("dual_write_failures", len(keys))
            self._log_leg("failed", keys, client, e)
            return e
        if expected is not None and answer != expected:
            self._count("dual_write_disagreements", len(keys))
            self._log_leg("answered otherwise", keys, client, f"{answer!r}, the owner now {expected!r}")
        return None

    def _log_leg(self, what: str, keys: List[Key], client: Any, why: Any) -> None:
        now = time.monotonic()
        if now - self._logged >= 5.0:
            self._logged = now
            log.warning(
                "dual write of %r to its next owner %s %s: %s (counted in dual_write_failures / "
                "dual_write_disagreements; logged every 5 s at most)",
                keys[0], getattr(client, "server", client), what, why,
            )

    def _write(self, key: Key, send: Callable[[Any], _R]) -> _R:
        """A one-key write: to the owner now, and during a change to the owner next as well."""
        routing = self._writing()
        try:
            wire = self._wire_key(key)
            owner = routing.ring.lookup(wire)
            client = routing.clients[owner]
            nxt = routing.next_owner(wire, owner)
            if nxt is None:
                return send(client)
            self._fence(routing, [key])
            try:
                answer = send(client)
            except MemcacheClientError:
                raise  # refused input: the owner next would refuse it too
            except Exception:
                # The write may have landed (a timeout after it was sent): the owner next gets it too.
                self._next_leg(send, nxt, [key], None)
                raise
            failed = self._next_leg(send, nxt, [key], answer)
            if failed is not None:
                raise failed
            return answer
        finally:
            routing.write_ends()

    def _write_many(self, keys: Iterable[Key], send: Callable[[Any, List[Key]], _R]) -> List[_R]:
        """A many-key write: one ``send`` per owner now, then during a change one per owner next of
        the keys that move. The owners' answers, in server order."""
        routing = self._writing()
        try:
            keys = list(keys)
            owners, nexts = self._moving(routing, keys)
            moving = [k for k, n in zip(keys, nexts) if n is not None]
            self._fence(routing, moving)
            answers: List[_R] = []
            error: Optional[BaseException] = None
            sent = set()
            for client, group in grouped((routing.clients[o], k) for o, k in zip(owners, keys)):
                sent.add(id(client))
                try:
                    answers.append(send(client, group))
                except MemcacheClientError:
                    raise
                except Exception as e:
                    error = e
                    break
            legs = ((n, k) for o, n, k in zip(owners, nexts, keys)
                    if n is not None and id(routing.clients[o]) in sent)
            for client, group in grouped(legs):
                failed = self._next_leg(functools.partial(_send_group, send, group), client, group, None)
                if error is None:
                    error = failed
            if error is not None:
                raise error
            return answers
        finally:
            routing.write_ends()

    def server_for(self, key: Key) -> str:
        """The node (server name, else ``host:port``) ``key`` is sent to."""
        return self._routing.ring.lookup(self._wire_key(key))

    def next_server_for(self, key: Key) -> Optional[str]:
        """The node ``key``'s writes also go to during a planned change (its owner in the next
        membership, when that is another server); ``None`` otherwise."""
        routing = self._routing
        if routing.next_ring is None:
            return None
        wire = self._wire_key(key)
        if routing.next_owner(wire, routing.ring.lookup(wire)) is None:
            return None
        return routing.next_ring.lookup(wire)

    @property
    def ring(self) -> Ring:
        """The ring keys are placed on (the current one, when membership follows etcd)."""
        return self._routing.ring

    @property
    def next_ring(self) -> Optional[Ring]:
        """The next membership's ring during a planned change (writes of the keys that move go to
        their owners on it too); ``None`` otherwise."""
        return self._routing.next_ring

    @property
    def clients(self) -> Dict[str, Any]:
        """Each node's pymemcache client."""
        return dict(self._routing.clients)

    @property
    def participant(self) -> Optional[Participant]:
        """This client as a participant of its pool in etcd (``id``, ``key``, ``registration``,
        ``lease``, ``fence.unconfirmed_for()``, ``serving``); ``None`` without ``etcd=``."""
        return self._participant

    @property
    def dual_writes(self) -> int:
        """Keys written to their owner next as well, so far."""
        return self._counts["dual_writes"]

    @property
    def dual_write_failures(self) -> int:
        """Of those, the ones whose owner next failed (an error, a timeout)."""
        return self._counts["dual_write_failures"]

    @property
    def dual_write_disagreements(self) -> int:
        """Of those, the ones whose owner next answered otherwise than the owner now (an
        ``append`` or ``incr`` of a key it has no copy of yet: expected before the copy)."""
        return self._counts["dual_write_disagreements"]

    @property
    def fenced(self) -> int:
        """Requests refused with :class:`FencedError`, so far."""
        return self._counts["fenced"]

    # One key.

    def set(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` on the key's server (pymemcache's ``set``)."""
        return self._write(key, lambda c: c.set(key, value, *args, **kwargs))

    def add(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` unless the key's server has it (pymemcache's ``add``)."""
        return self._write(key, lambda c: c.add(key, value, *args, **kwargs))

    def replace(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Stores ``value`` under ``key`` if the key's server has it (pymemcache's ``replace``)."""
        return self._write(key, lambda c: c.replace(key, value, *args, **kwargs))

    def append(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Appends ``value`` to the value of ``key`` on the key's server (pymemcache's ``append``)."""
        return self._write(key, lambda c: c.append(key, value, *args, **kwargs))

    def prepend(self, key: Key, value: Any, *args: Any, **kwargs: Any) -> Any:
        """Prepends ``value`` to the value of ``key`` on the key's server (pymemcache's ``prepend``)."""
        return self._write(key, lambda c: c.prepend(key, value, *args, **kwargs))

    def cas(
        self,
        key: Key,
        value: Any,
        cas: Any,
        expire: int = 0,
        noreply: Optional[bool] = False,
        flags: Optional[int] = None,
    ) -> Any:
        """Stores ``value`` under ``key`` if its CAS token is still ``cas`` (pymemcache's ``cas``).
        During a change that moves the key, the token is the owner now's: the ``cas`` goes there
        (waiting for its answer even with ``noreply``), and a stored value goes on to the owner
        next as a ``set``."""
        routing = self._writing()
        try:
            wire = self._wire_key(key)
            owner = routing.ring.lookup(wire)
            client = routing.clients[owner]
            nxt = routing.next_owner(wire, owner)
            if nxt is None:
                return client.cas(key, value, cas, expire=expire, noreply=noreply, flags=flags)
            self._fence(routing, [key])
            stored = client.cas(key, value, cas, expire=expire, noreply=False, flags=flags)
            if stored:
                failed = self._next_leg(
                    lambda c: c.set(key, value, expire=expire, noreply=False, flags=flags), nxt, [key], True
                )
                if failed is not None:
                    raise failed
            return True if noreply else stored
        finally:
            routing.write_ends()

    def get(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """The value of ``key`` from the key's server, or the default (pymemcache's ``get``)."""
        return self._reading(key).get(key, *args, **kwargs)

    def gets(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """``(value, cas)`` of ``key`` from the key's server (pymemcache's ``gets``)."""
        return self._reading(key).gets(key, *args, **kwargs)

    def delete(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """Deletes ``key`` on the key's server (pymemcache's ``delete``)."""
        return self._write(key, lambda c: c.delete(key, *args, **kwargs))

    def incr(self, key: Key, value: int, *args: Any, **kwargs: Any) -> Any:
        """Adds ``value`` to the number under ``key`` on the key's server (pymemcache's ``incr``)."""
        return self._write(key, lambda c: c.incr(key, value, *args, **kwargs))

    def decr(self, key: Key, value: int, *args: Any, **kwargs: Any) -> Any:
        """Subtracts ``value`` from the number under ``key`` on the key's server (pymemcache's ``decr``)."""
        return self._write(key, lambda c: c.decr(key, value, *args, **kwargs))

    def touch(self, key: Key, *args: Any, **kwargs: Any) -> Any:
        """Sets a new expiry time for ``key`` on the key's server (pymemcache's ``touch``)."""
        return self._write(key, lambda c: c.touch(key, *args, **kwargs))

    # Many keys: one call per server.

    def get_many(self, keys: Iterable[Key], *args: Any, **kwargs: Any) -> Dict[Key, Any]:
        """The values of the keys found, from one ``get_many`` per server (:class:`FencedError`
        for the whole call when one of the keys is fenced: a fenced key is not a miss)."""
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
        answers = self._write_many(
            values.keys(), lambda c, group: c.set_many({k: values[k] for k in group}, *args, **kwargs)
        )
        return [k for failed in answers for k in failed]

    set_multi = set_many

    def delete_many(self, keys: Iterable[Key], *args: Any, **kwargs: Any) -> bool:
        """Deletes the keys with one ``delete_many`` per server."""
        answers = self._write_many(keys, lambda c, group: c.delete_many(group, *args, **kwargs))
        return all(answers)

    delete_multi = delete_many

    # Every server.

    def flush_all(self, *args: Any, **kwargs: Any) -> bool:
        """``flush_all`` on every server (the next membership's too, during a change)."""
        return all([c.flush_all(*args, **kwargs) for c in self._routing.every_client()])

    def stats(self, *args: Any) -> Dict[str, Any]:
        """Each node's ``stats``."""
        return {n: c.stats(*args) for n, c in self._routing.clients.items()}

    def version(self) -> Dict[str, Any]:
        """Each node's ``version``."""
        return {n: c.version() for n, c in self._routing.clients.items()}

    def close(self) -> None:
        """Stops following etcd (a clean stop: the registration is revoked and this client leaves
        the roster) and closes every connection."""
        if self._participant is not None:
            self._participant.close()
        for c in self._routing.every_client():
            c.close()

    disconnect_all = close

    def quit(self) -> None:
        """Sends ``quit`` to every server."""
        for c in self._routing.every_client():
            c.quit()

    def __enter__(self) -> "Client":
        """The client itself: ``with Client(...) as cache:`` closes it on leaving."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the client (``close``)."""
        self.close()


def _send_group(send: Callable[[Any, List[Key]], _R], group: List[Key], client: Any) -> _R:
    """``send`` of ``group`` to ``client`` (a dual write's leg of a many-key write)."""
    return send(client, group)


def _whole(name: str, weight: float) -> int:
    if weight != int(weight) or weight < 1:
        raise ValueError(f"node {name!r} has weight {weight}: twemproxy takes whole-number weights from 1")
    return int(weight)
