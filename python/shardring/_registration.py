"""A participant's registration in etcd, kept alive in a thread (the Rust side's
``shardring_etcd::admin::register_proxy`` and its ``RegistrationHandle``, request for request).

The value says which memberships the participant serves (``layout::format_registration``)::

    current=<digest> next=<digest|-> current_revision=<n> next_revision=<n>

and is written, in one transaction, to ``<prefix><pool>/proxies/<id>`` under a lease and to
``<prefix><pool>/roster/<id>`` without one (plus `` instance=<...>``, which process wrote it): a lease
vanishes with silence, and silence is not agreement, so ``shardring migrate`` waits for every
participant of the roster, and one whose lease lapsed blocks each step until it is back or an
operator forgets it.

The lease is renewed every quarter of its time to live. When etcd cannot be reached the thread
backs off (0.1 s doubling to ``retry_max``) and, before renewing again, asks what is left of the
lease: etcd answers a renewal of an expired lease with TTL 0 (or refuses it), so a participant cut
off for longer than its lease grants a new one and writes the last value again, and its
registration survives an outage of etcd. A value that could not be written is written again after
the next renewal. :meth:`Registrar.close` is the clean stop: the lease is revoked (the key goes at
once) and the roster entry deleted, only while it is still this process's.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from typing import NamedTuple, Optional

from ._gateway import Gateway, b64

__all__ = ["DEFAULT_TTL", "Registrar", "Registration"]

log = logging.getLogger("shardring.etcd")

#: The lease a registration is under unless told otherwise (the proxy's).
DEFAULT_TTL = 10.0


class Registration(NamedTuple):
    """What a participant serves: the digests of its memberships and the revisions they were read
    at (``layout::Registration``)."""

    #: The digest of the current membership.
    current: str
    #: The digest of the next membership it dual-writes to, ``None`` when there is none.
    next: Optional[str]
    #: The etcd revision the current membership was read at.
    current_revision: int
    #: The etcd revision the next membership was read at (0 when there is none).
    next_revision: int

    def format(self) -> str:
        """The value as etcd holds it."""
        return (
            f"current={self.current} next={self.next or '-'} "
            f"current_revision={self.current_revision} next_revision={self.next_revision}"
        )


def check_id(participant_id: str) -> str:
    """``participant_id``, or ``ValueError`` when it cannot be a key's last part."""
    if not participant_id or "/" in participant_id or any(c.isspace() for c in participant_id):
        raise ValueError(f"the participant id {participant_id!r} is empty or contains '/' or whitespace")
    return participant_id


class Registrar:
    """Keeps ``proxies/<id>`` (under a lease) and ``roster/<id>`` holding the latest value."""

    def __init__(
        self,
        gateway: Gateway,
        proxies_prefix: bytes,
        roster_prefix: bytes,
        participant_id: str,
        value: Registration,
        ttl: float = DEFAULT_TTL,
        retry_max: float = 5.0,
    ) -> None:
        check_id(participant_id)
        self._gateway = gateway
        #: ``proxies/<id>``.
        self.key = proxies_prefix + participant_id.encode()
        #: ``roster/<id>``.
        self.roster_key = roster_prefix + participant_id.encode()
        #: Which process wrote the roster entry: a clean stop removes only its own, never a
        #: successor's of the same id. Its pid and the time it registered, as the Rust side's.
        self.instance = f"{os.getpid()}.{time.time_ns():x}"
        #: The lease's time to live, whole seconds (rounded up, at least 1).
        self.ttl = max(1, -int(-ttl // 1))
        self._retry_max = retry_max
        #: Held over every write, so writes land in the order they were asked for and a
        #: re-registration writes the latest value.
        self._lock = threading.Lock()
        self._value = value
        #: Whether the latest value may not be in etcd (its write failed).
        self._dirty = False
        self._lease = 0
        self._confirmed: Optional[float] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def value(self) -> Registration:
        """The latest value asked for."""
        return self._value

    @property
    def lease(self) -> int:
        """The lease the key is under now (a new one after a re-registration)."""
        return self._lease

    @property
    def confirmed_at(self) -> Optional[float]:
        """When etcd last confirmed the registration (renewed its lease, or granted one and took the
        value), as ``time.monotonic()``: the time the confirmed request was sent, so never later
        than the truth. ``None`` before the first."""
        return self._confirmed

    def start(self) -> None:
        """Registers (raising ``OSError`` when etcd cannot be reached), then keeps the lease alive
        in a daemon thread."""
        with self._lock:
            self._grant_and_put()
        self._thread = threading.Thread(target=self._run, name="shardring-etcd-lease", daemon=True)
        self._thread.start()

    def update(self, value: Registration) -> None:
        """Writes ``value`` as the registration, under the same lease. Kept when the write fails
        (``OSError`` is logged, not raised): it is written again after the next renewal."""
        with self._lock:
            self._value = value
            try:
                self._put()
            except OSError as e:
                log.warning(
                    "cannot update the registration %s in etcd (%s); written again after the next renewal",
                    self.key.decode(), e,
                )

    def close(self) -> None:
        """The clean stop: stops renewing, revokes the lease (its key goes at once) and takes this
        process's entry out of the roster. Best effort: when etcd cannot be reached the key goes
        when the lease expires and the entry stays (``shardring members forget`` removes it)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._gateway.timeout + 1)
        with self._lock:
            try:
                self._gateway.revoke(self._lease)
            except OSError as e:
                log.warning("could not revoke the lease of %s (%s); it expires by itself", self.key.decode(), e)
            try:
                self._leave_roster()
            except OSError as e:
                log.warning("could not take %s out of the roster (%s); `shardring members forget` does", self.roster_key.decode(), e)

    def abandon(self) -> None:
        """Stops renewing *without* revoking: the key stays until the lease runs out and the roster
        entry stays, as when the process dies (for tests)."""
        self._stop.set()

    # The requests, each under the lock.

    def _confirm(self, at: float) -> None:
        self._confirmed = at if self._confirmed is None else max(self._confirmed, at)

    def _put(self) -> None:
        """The value under the lease and into the roster, in one transaction."""
        text = self._value.format()
        self._dirty = True
        self._gateway.txn(
            [
                {"requestPut": {"key": b64(self.key), "value": b64(text.encode()), "lease": str(self._lease)}},
                {"requestPut": {"key": b64(self.roster_key), "value": b64(f"{text} instance={self.instance}".encode())}},
            ]
        )
        self._dirty = False

    def _grant_and_put(self) -> None:
        self._lease = self._gateway.grant(self.ttl)
        asked = time.monotonic()
        self._put()
        self._confirm(asked)

    def _leave_roster(self) -> None:
        reply = self._gateway.post("/v3/kv/range", {"key": b64(self.roster_key)})
        kvs = reply.get("kvs", [])
        if not kvs:
            return
        value = base64.b64decode(kvs[0].get("value", "")).decode("utf-8", "replace")
        if f"instance={self.instance}" not in value.split():
            return  # a successor of the same id wrote it: it is theirs
        self._gateway.txn(
            [{"requestDeleteRange": {"key": b64(self.roster_key)}}],
            compare=[{
                "key": b64(self.roster_key),
                "result": "EQUAL",
                "target": "MOD",
                "mod_revision": kvs[0]["mod_revision"],
            }],
        )

    # The keep-alive thread.

    def _register_again(self) -> None:
        """The lease is gone (it expired while etcd could not be reached, or was revoked): a new
        one, and the last value under it."""
        with self._lock:
            old = self._lease
            self._grant_and_put()
        log.info("the lease of %s was gone (%x); registered again under %x", self.key.decode(), old, self._lease)

    def _run(self) -> None:
        interval = max(self.ttl / 4, 0.1)
        backoff = 0.1
        lost = False
        while not self._stop.is_set():
            try:
                if lost and self._gateway.time_to_live(self._lease) <= 0:
                    self._register_again()
                else:
                    asked = time.monotonic()
                    if self._gateway.keep_alive(self._lease) <= 0:
                        self._register_again()
                    else:
                        if self._dirty:
                            with self._lock:
                                self._put()
                        # Only once the latest value is in etcd: a renewal of a lease whose key
                        # was never written confirms nothing anyone can see.
                        self._confirm(asked)
                if lost:
                    log.info("etcd reachable again; registration %s kept", self.key.decode())
                lost = False
                backoff = 0.1
                self._stop.wait(interval)
            except (OSError, ValueError, KeyError) as e:
                if self._stop.is_set():
                    return
                log.warning(
                    "cannot keep the registration %s alive (%s); retrying in %.1f s", self.key.decode(), e, backoff
                )
                lost = True
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._retry_max)
