"""A pool's memberships from etcd, with the proxy's key contract (``crates/shardring-etcd/src/layout.rs``)::

    <prefix><pool>/servers/<name>  =  host:port[:weight]     the current membership
    <prefix><pool>/next/<name>     =  host:port[:weight]     the next one, during a planned change
    <prefix><pool>/proxies/<id>    =  a participant's registration, under a lease
    <prefix><pool>/roster/<id>     =  the same, without one
    <prefix><pool>/cut-over        =  a mark ``shardring migrate`` leaves (ignored here)

``<prefix>`` is ``/shardring/`` unless told otherwise; ``<name>`` is the server's name, or its
``host:port`` for an unnamed server (placed as nutcracker places one); the weight is 1 when left out;
an IPv6 host is in brackets, a unix socket is its path. A value that is none of these is skipped and
logged, the rest of the pool still applies.

Memberships are followed as whole snapshots, as the proxy does: the pool's keys are read with one
range over ``<prefix><pool>/`` (so ``servers/`` and ``next/`` come from one revision, and a cut-over,
which swaps them in one transaction, is never seen half done), then watched from the next revision;
every change of a server key reads the whole pool again and hands it on, so a lost or repeated event
cannot leave a wrong membership. While etcd cannot be reached the follower reconnects with back-off.
What a snapshot changes (and whether an empty one is refused) is the consumer's to decide.

It speaks etcd's JSON gateway (``shardring._gateway``) with the standard library, so it needs no
package of its own.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import threading
from typing import Callable, List, NamedTuple, Optional, Tuple

from ._gateway import Gateway

__all__ = ["DEFAULT_PREFIX", "EtcdPool", "Member", "Planned", "PoolKeys", "parse_value"]

log = logging.getLogger("shardring.etcd")

#: The prefix pools live under unless told otherwise (the proxy's ``--etcd-prefix`` default).
DEFAULT_PREFIX = "/shardring/"

#: ``(name, address, weight)``: one server of a pool.
Member = Tuple[str, str, int]

_INT_MAX = 2**31 - 1


def _weight(text: str) -> int:
    if text and text.isdigit() and text.isascii():
        w = int(text)
        if 1 <= w <= _INT_MAX:
            return w
    raise ValueError(f"the weight {text!r} is not a whole number from 1 to {_INT_MAX}")


def parse_value(value: str) -> Tuple[str, int]:
    """Splits a member's value, ``host:port[:weight]``, into its address and weight.

    The rules of ``layout::parse_value``: surrounding whitespace is ignored, an IPv6 host keeps its
    brackets, a value starting with ``/`` is a unix socket path with an optional ``:weight``.
    Raises ``ValueError`` saying why a value is not one.
    """
    value = value.strip()
    if not value:
        raise ValueError("the value is empty (expected host:port[:weight])")
    if value.startswith("/"):
        path, sep, w = value.rpartition(":")
        if sep and w.isascii() and w.isdigit():
            return path, _weight(w)
        return value, 1
    if value.startswith("["):
        inner, sep, rest = value[1:].partition("]")
        if not sep:
            raise ValueError("an IPv6 address lacks its closing bracket")
        if not rest.startswith(":"):
            raise ValueError("expected :port after the IPv6 address")
        host, rest = f"[{inner}]", rest[1:]
    else:
        host, sep, rest = value.partition(":")
        if not sep:
            raise ValueError("expected host:port[:weight]")
    if not host or host == "[]" or any(c.isspace() for c in host):
        raise ValueError("the host is empty or contains spaces")
    port, sep, w = rest.partition(":")
    weight = _weight(w) if sep else 1
    if not (port and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"the port {port!r} is not a number from 1 to 65535")
    return f"{host}:{port}", weight


class PoolKeys:
    """Where one pool's keys live (``layout::PoolKeys``)."""

    def __init__(self, prefix: str, pool: str) -> None:
        if not prefix.endswith("/"):
            prefix += "/"  # `/cache` means `/cache/`, never `/cachealpha/...`
        base = f"{prefix}{pool}/"
        #: ``<prefix><pool>/``: every key of the pool.
        self.pool = base.encode()
        #: ``servers/``: the current membership.
        self.servers = f"{base}servers/".encode()
        #: ``next/``: the next membership.
        self.next = f"{base}next/".encode()
        #: ``proxies/``: the participants' registrations, under leases.
        self.proxies = f"{base}proxies/".encode()
        #: ``roster/``: the participants seen, without leases.
        self.roster = f"{base}roster/".encode()

    def concerns(self, key: bytes) -> bool:
        """Whether ``key`` is a server of either membership (a registration's is not)."""
        return key.startswith(self.servers) or key.startswith(self.next)


class Planned(NamedTuple):
    """A pool's memberships at one revision."""

    #: ``servers/``, sorted by name.
    current: List[Member]
    #: ``next/``, sorted by name; ``None`` when no server there could be read (no change planned).
    next: Optional[List[Member]]
    #: The etcd revision they were read at.
    revision: int


class EtcdPool:
    """One pool's memberships in etcd, read at will and followed in a thread.

    ``on_change()`` is called from the follower's thread whenever a server key of either
    membership changed (and after the watch was lost and found again); it is expected to
    :meth:`read` the pool and apply what it finds.
    """

    def __init__(self, gateway: Gateway, keys: PoolKeys, retry_max: float = 5.0) -> None:
        self._gateway = gateway
        self._keys = keys
        self._retry_max = retry_max
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._watch_conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()
        #: The newest revision read so far: a resumed watch starts after it.
        self._revision = 0
        #: Values skipped because they are not ``host:port[:weight]``, in total.
        self.malformed = 0

    def read(self) -> Planned:
        """The pool's memberships now, with one range request. Raises ``OSError`` when etcd cannot
        be reached."""
        reply = self._gateway.range(self._keys.pool)
        current: List[Member] = []
        following: List[Member] = []
        for kv in reply.get("kvs", []):
            key = base64.b64decode(kv["key"])
            if key.startswith(self._keys.servers):
                into, prefix = current, self._keys.servers
            elif key.startswith(self._keys.next):
                into, prefix = following, self._keys.next
            else:
                continue
            value = base64.b64decode(kv.get("value", ""))
            try:
                name = key[len(prefix):].decode("utf-8")
                if not name:
                    raise ValueError(f"the key is not {prefix.decode()}<name>")
                addr, weight = parse_value(value.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                self.malformed += 1
                log.warning("etcd key %r = %r skipped: %s", key, value, e)
                continue
            into.append((name, addr, weight))
        revision = int(reply["header"]["revision"])
        with self._lock:
            self._revision = max(self._revision, revision)
        return Planned(sorted(current), sorted(following) or None, revision)

    def follow(self, on_change: Callable[[], None]) -> None:
        """Follows the pool in a daemon thread, from the revision after the newest :meth:`read`."""
        self._thread = threading.Thread(
            target=self._follow, args=(on_change,), name="shardring-etcd-watch", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops following (the thread ends within a request's timeout)."""
        self._stop.set()
        conn = self._watch_conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._gateway.timeout + 1)

    def _follow(self, on_change: Callable[[], None]) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                self._watch(on_change)
                backoff = 0.1
            except (OSError, ValueError, KeyError) as e:
                if self._stop.is_set():
                    return
                log.warning("etcd watch failed (%s); retrying in %.1f s", e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._retry_max)
                try:
                    on_change()
                except (OSError, ValueError, KeyError):
                    pass

    def _watch(self, on_change: Callable[[], None]) -> None:
        with self._lock:
            # A change between the last read and the watch is caught: the watch starts at the
            # revision after the newest one read.
            start = self._revision + 1
        conn, response = self._gateway.watch(self._keys.pool, start)
        self._watch_conn = conn
        try:
            while not self._stop.is_set():
                try:
                    line = response.readline()
                except http.client.HTTPException as e:
                    raise OSError(f"etcd watch: {e!r}") from e
                if not line:
                    raise OSError("etcd closed the watch")
                if not line.strip():
                    continue
                message = json.loads(line)
                if "error" in message:
                    raise OSError(f"etcd watch: {message['error']}")
                result = message.get("result", {})
                if result.get("canceled"):
                    raise OSError(f"etcd canceled the watch: {result.get('cancel_reason', '')}")
                events = result.get("events", [])
                # The participants' registrations change under the same prefix: only a server
                # key of either membership asks for a new read.
                if any(self._keys.concerns(base64.b64decode(e["kv"]["key"])) for e in events):
                    on_change()
        finally:
            self._watch_conn = None
            conn.close()
