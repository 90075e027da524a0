"""The fence of a participant that cannot confirm its place in etcd (the proxy's ``fence.rs``).

While a pool has a next membership, ``shardring migrate`` copies the keys that move and cuts over
once every participant of the pool's roster acknowledges each step. A participant cut off from etcd
(or paused) cannot acknowledge, so the migration waits for it; but an operator may take it out of
the roster (``shardring members forget``), after which the others stop writing the old owners. So a
participant whose registration has not been confirmed by etcd for 60 % of its lease's time to live
(renewals come every quarter of it: two late ones cost nothing, and it fences well before the lease
lapses, the earliest anyone may act on its absence) refuses every key whose owner differs between
its current and next membership, and serves every other key as usual. Without a planned change
nothing is fenced: a participant merely cut off keeps serving everything, as before.

The cost is availability, only for the keys that move and only while the participant cannot renew
its registration during a change; never a stale value.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

__all__ = ["FENCE_SHARE_OF_TTL", "Fence"]

#: How long after its last confirmation a participant fences, as a share of its lease's TTL.
FENCE_SHARE_OF_TTL = 0.6


class Fence:
    """Whether a participant's place in etcd is confirmed; times are ``time.monotonic()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: How long without a confirmation fences; ``None`` until registered (never fenced).
        self._after: Optional[float] = None
        #: When etcd last confirmed the registration.
        self._confirmed = 0.0

    def follow(self, ttl: float) -> None:
        """The participant registers under a lease of ``ttl`` seconds: from now on a confirmation
        older than 60 % of it fences. Counts as a confirmation."""
        with self._lock:
            self._after = ttl * FENCE_SHARE_OF_TTL
            self._confirmed = max(self._confirmed, time.monotonic())

    def confirm(self, at: float) -> None:
        """The registration was confirmed at ``at`` (kept only when newer than the last)."""
        with self._lock:
            self._confirmed = max(self._confirmed, at)

    def unconfirmed_for(self) -> Optional[float]:
        """How long the registration has gone unconfirmed, in seconds, when that is longer than the
        fence time; ``None`` while confirmed (or not registered)."""
        after = self._after
        if after is None:
            return None
        since = time.monotonic() - self._confirmed
        return since if since > after else None
