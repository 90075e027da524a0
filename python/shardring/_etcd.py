"""A pool's membership from etcd, with the proxy's key contract (``crates/shardring-etcd/src/layout.rs``)::

    <prefix><pool>/servers/<name>  =  host:port[:weight]

``<prefix>`` is ``/shardring/`` unless told otherwise; ``<name>`` is the server's name, or its
``host:port`` for an unnamed server (placed as nutcracker places one); the weight is 1 when left out;
an IPv6 host is in brackets, a unix socket is its path. A value that is none of these is skipped and
logged, the rest of the pool still applies.

Membership is followed as whole snapshots, as the proxy does: the pool's keys are read at a revision,
then watched from the next one, and every change reads the whole pool again and hands it on, so a
lost or repeated event cannot leave a wrong membership. An empty pool is refused (the servers kept)
unless allowed, a snapshot equal to the last changes nothing, and while etcd cannot be reached the
current servers stay and the follower reconnects with back-off.

It speaks etcd's JSON gateway (``/v3/kv/range``, ``/v3/watch``, on the client port) with the standard
library, so it needs no package of its own.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import threading
import urllib.parse
from typing import Callable, List, Optional, Tuple

__all__ = ["DEFAULT_PREFIX", "EtcdPool", "Member", "parse_value"]

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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of everything under ``prefix`` (etcd's ``--prefix``)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


class EtcdPool:
    """One pool's servers in etcd at ``endpoint`` (``http://host:port``), followed in a thread.

    ``on_change(members)`` is called with every new membership (a list of ``(name, address,
    weight)``, sorted by name) after :meth:`start`'s first read, from the follower's thread.
    """

    def __init__(
        self,
        endpoint: str,
        pool: str,
        prefix: str = DEFAULT_PREFIX,
        allow_empty: bool = False,
        timeout: float = 5.0,
        retry_max: float = 5.0,
    ) -> None:
        url = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if url.scheme != "http":
            raise ValueError(f"etcd endpoint {endpoint!r}: only http:// is supported")
        if not url.hostname:
            raise ValueError(f"etcd endpoint {endpoint!r} has no host")
        self._host = url.hostname
        self._port = url.port or 2379
        self._servers = f"{prefix}{pool}/servers/".encode()
        self._allow_empty = allow_empty
        self._timeout = timeout
        self._retry_max = retry_max
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._watch_conn: Optional[http.client.HTTPConnection] = None
        self._members: Optional[List[Member]] = None
        self._revision = 0
        #: Values skipped because they are not ``host:port[:weight]``, in total.
        self.malformed = 0

    def _post(self, path: str, body: dict) -> dict:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise OSError(f"etcd {path}: HTTP {response.status}: {data[:200]!r}")
            return json.loads(data)
        finally:
            conn.close()

    def read(self) -> Tuple[List[Member], int]:
        """The pool's members now and the revision they were read at."""
        reply = self._post(
            "/v3/kv/range",
            {"key": _b64(self._servers), "range_end": _b64(_prefix_end(self._servers))},
        )
        members: List[Member] = []
        for kv in reply.get("kvs", []):
            key = base64.b64decode(kv["key"])
            value = base64.b64decode(kv.get("value", ""))
            try:
                name = key[len(self._servers):].decode("utf-8")
                if not name:
                    raise ValueError("the key is not <prefix><pool>/servers/<name>")
                addr, weight = parse_value(value.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                self.malformed += 1
                log.warning("etcd key %r = %r skipped: %s", key, value, e)
                continue
            members.append((name, addr, weight))
        members.sort()
        return members, int(reply["header"]["revision"])

    def start(self, on_change: Callable[[List[Member]], None]) -> List[Member]:
        """Reads the pool once (raising ``OSError`` when etcd cannot be reached, ``ValueError`` when
        the pool is empty and that is not allowed), then follows it in a daemon thread."""
        members, revision = self.read()
        if not members and not self._allow_empty:
            raise ValueError(
                f"etcd holds no servers under {self._servers.decode()!r} (allow_empty=True to start empty)"
            )
        self._members, self._revision = members, revision
        self._thread = threading.Thread(
            target=self._follow, args=(on_change,), name="shardring-etcd", daemon=True
        )
        self._thread.start()
        return members

    def stop(self) -> None:
        """Stops following (the thread ends within the connection's timeout)."""
        self._stop.set()
        conn = self._watch_conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._timeout + 1)

    def _apply(self, on_change: Callable[[List[Member]], None]) -> None:
        members, revision = self.read()
        if revision < self._revision or members == self._members:
            return
        if not members and not self._allow_empty:
            log.warning("etcd pool %r is empty: keeping the current servers", self._servers.decode())
            return
        self._members, self._revision = members, revision
        on_change(members)

    def _follow(self, on_change: Callable[[List[Member]], None]) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                # A change between the first read and the watch is caught: the watch starts at the
                # revision after the one the members were read at.
                self._watch(on_change)
                backoff = 0.1
            except (OSError, ValueError, KeyError, http.client.HTTPException) as e:
                if self._stop.is_set():
                    return
                log.warning("etcd watch failed (%s); retrying in %.1f s", e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._retry_max)
                try:
                    self._apply(on_change)
                except (OSError, ValueError, KeyError, http.client.HTTPException):
                    pass

    def _watch(self, on_change: Callable[[List[Member]], None]) -> None:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=None)
        self._watch_conn = conn
        try:
            body = {
                "create_request": {
                    "key": _b64(self._servers),
                    "range_end": _b64(_prefix_end(self._servers)),
                    "start_revision": str(self._revision + 1),
                }
            }
            conn.request("POST", "/v3/watch", json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise OSError(f"etcd /v3/watch: HTTP {response.status}")
            while not self._stop.is_set():
                line = response.readline()
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
                if result.get("events"):
                    self._apply(on_change)
        finally:
            self._watch_conn = None
            conn.close()
