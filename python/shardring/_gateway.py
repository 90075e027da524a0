"""etcd's JSON gateway (``/v3/...`` on the client port), spoken with the standard library only.

The requests the membership follower and the participant registration need: ranges, watches,
transactions, and leases. Keys and values travel base64-encoded and 64-bit numbers as strings, as
the gateway has them. Every request but a watch has a timeout (2 s, as the Rust side's), so a
silent partition (nothing refused, nothing answered) is an ``OSError`` in bounded time, never a
thread stuck for good.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["Gateway", "b64", "prefix_end"]


def b64(data: bytes) -> str:
    """``data`` as the gateway takes bytes."""
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of everything under ``prefix`` (etcd's ``--prefix``)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _keep_alive(sock: socket.socket) -> None:
    """TCP keep-alives on a watch's connection, which waits for messages without a timeout: a
    peer gone silently (a host that vanished, a connection a middlebox forgot) ends the watch in
    about a minute, and the follower reconnects, instead of waiting for events that never come."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    except OSError:
        pass  # the platform's defaults then


class Gateway:
    """One etcd endpoint (``http://host:port``; ``host:port`` alone means http)."""

    def __init__(self, endpoint: str, timeout: float = 2.0) -> None:
        url = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if url.scheme != "http":
            raise ValueError(f"etcd endpoint {endpoint!r}: only http:// is supported")
        if not url.hostname:
            raise ValueError(f"etcd endpoint {endpoint!r} has no host")
        #: Where etcd listens.
        self.host = url.hostname
        #: Its client port.
        self.port = url.port or 2379
        #: How long one request may take, in seconds.
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Gateway('http://{self.host}:{self.port}')"

    def post(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """One request and its JSON answer (a streaming one's first message, unwrapped from its
        ``result``). Raises ``OSError`` when etcd cannot be reached in time or answers an error."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.readline() if path == "/v3/lease/keepalive" else response.read()
            if response.status != 200:
                raise OSError(f"etcd {path}: HTTP {response.status}: {data[:200]!r}")
            try:
                reply = json.loads(data)
            except ValueError as e:
                raise OSError(f"etcd {path}: not JSON: {data[:200]!r}") from e
            if "error" in reply:
                raise OSError(f"etcd {path}: {reply['error']}")
            return reply.get("result", reply) if isinstance(reply, dict) else {}
        except http.client.HTTPException as e:
            raise OSError(f"etcd {path}: {e!r}") from e
        finally:
            conn.close()

    def range(self, prefix: bytes) -> Dict[str, Any]:
        """Every key under ``prefix``, at one revision (the answer's ``header.revision``)."""
        return self.post("/v3/kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})

    def txn(self, success: List[Dict[str, Any]], compare: Optional[List[Dict[str, Any]]] = None) -> bool:
        """A transaction: the ``success`` operations when every ``compare`` holds; whether they ran."""
        body: Dict[str, Any] = {"success": success}
        if compare:
            body["compare"] = compare
        return bool(self.post("/v3/kv/txn", body).get("succeeded", False))

    def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds: its id."""
        return int(self.post("/v3/lease/grant", {"TTL": ttl})["ID"])

    def keep_alive(self, lease: int) -> int:
        """Renews ``lease``: its time to live now, in seconds (0 when etcd no longer has it)."""
        return int(self.post("/v3/lease/keepalive", {"ID": str(lease)}).get("TTL", 0))

    def time_to_live(self, lease: int) -> int:
        """What is left of ``lease``, in seconds (0 or less when it expired or never was)."""
        return int(self.post("/v3/lease/timetolive", {"ID": str(lease)}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """Revokes ``lease`` (the keys under it go with it)."""
        self.post("/v3/lease/revoke", {"ID": str(lease)})

    def watch(
        self, prefix: bytes, start_revision: int
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """A watch of everything under ``prefix`` from ``start_revision``: the open connection and
        its response, whose lines are the watch's messages. Connecting and the answer's headers are
        bounded by the timeout; the messages are then waited for as long as they take."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        body = {
            "create_request": {
                "key": b64(prefix),
                "range_end": b64(prefix_end(prefix)),
                "start_revision": str(start_revision),
            }
        }
        try:
            conn.request("POST", "/v3/watch", json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise OSError(f"etcd /v3/watch: HTTP {response.status}")
            if conn.sock is not None:
                conn.sock.settimeout(None)
                _keep_alive(conn.sock)
            return conn, response
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise OSError(f"etcd /v3/watch: {e!r}") from e
