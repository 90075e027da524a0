"""Where a sharded client sends each key: one membership state, replaced whole when it changes.

A state holds the current ring and a client per node, and during a planned change (a next
membership that places keys differently) the next ring and a client per node of it too. A server
whose address is in both memberships has one client, so "the owner next differs" is a question of
identity: a different server, whatever the nodes are called.

Writes count themselves in and out of the state they were routed by, so that a membership change
can wait for the writes routed by the state it replaced before it is acknowledged: a participant
that tells ``shardring migrate`` it dual-writes must not have a single-owner write still in flight.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ._shardring import Ring

__all__ = ["Routing"]


class Routing:
    """One membership state (see the module's docs)."""

    __slots__ = ("ring", "clients", "next_ring", "next_clients", "_writes", "_idle")

    def __init__(
        self,
        ring: Ring,
        clients: Dict[str, Any],
        next_ring: Optional[Ring] = None,
        next_clients: Optional[Dict[str, Any]] = None,
    ) -> None:
        #: The current ring: every read, and every write, goes to its owner there.
        self.ring = ring
        #: Each current node's client.
        self.clients = clients
        #: The next ring during a planned change (writes of the keys that move go to their owner
        #: there too); ``None`` otherwise.
        self.next_ring = next_ring
        #: Each next node's client (a server in both memberships has the same client in both).
        self.next_clients = next_clients or {}
        #: Writes routed by this state and not finished.
        self._writes = 0
        #: Notified when ``_writes`` falls to 0.
        self._idle = threading.Condition(threading.Lock())

    def every_client(self) -> List[Any]:
        """Each server's client once: the current membership's, then the next one's others."""
        seen: Dict[int, Any] = {}
        for c in list(self.clients.values()) + list(self.next_clients.values()):
            seen.setdefault(id(c), c)
        return list(seen.values())

    def next_owner(self, wire_key: bytes, owner: str) -> Optional[Any]:
        """The client of the key's next owner when it is another server than its owner now
        (``owner``); ``None`` when the key stays (or no change is planned)."""
        if self.next_ring is None:
            return None
        client = self.next_clients[self.next_ring.lookup(wire_key)]
        return None if client is self.clients[owner] else client

    def next_owners(self, wire_keys: Sequence[bytes], owners: Sequence[str]) -> List[Optional[Any]]:
        """:meth:`next_owner` of many keys (one batched lookup)."""
        if self.next_ring is None:
            return [None] * len(owners)
        out: List[Optional[Any]] = []
        for owner, node in zip(owners, self.next_ring.lookup_many(list(wire_keys))):
            client = self.next_clients[node]
            out.append(None if client is self.clients[owner] else client)
        return out

    # In-flight writes.

    def write_begins(self) -> None:
        """A write routed by this state starts."""
        with self._idle:
            self._writes += 1

    def write_ends(self) -> None:
        """It ended (answered or failed)."""
        with self._idle:
            self._writes -= 1
            if self._writes == 0:
                self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Waits until no write routed by this state is in flight, for at most ``timeout`` seconds:
        whether none is."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._writes > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True


def grouped(items: Iterable[Tuple[Any, Any]]) -> List[Tuple[Any, List[Any]]]:
    """``(server, item)`` pairs as ``(server, [items...])``, servers by identity, in first-seen
    order, each group in input order."""
    groups: Dict[int, List[Any]] = defaultdict(list)
    servers: Dict[int, Any] = {}
    for server, item in items:
        servers.setdefault(id(server), server)
        groups[id(server)].append(item)
    return [(servers[k], groups[k]) for k in servers]
