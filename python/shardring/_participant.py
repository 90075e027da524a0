"""A client-side ring that takes part in a pool's planned membership changes exactly as a
``shardring proxy --etcd`` does (the proxy's ``membership.rs``), so that ``shardring migrate`` is as
safe with applications that shard keys themselves as with proxies:

1. it **registers** in etcd (``shardring._registration``): ``proxies/<id>`` under a lease, and
   ``roster/<id>``, so every migration waits for it;
2. it follows the pool's current **and next** membership (``servers/`` and ``next/``, read at one
   revision: ``shardring._etcd``), and while a next membership places keys differently its consumer
   **dual-writes** every key that moves (to its owner now and its owner next);
3. it **acknowledges** by writing which memberships it serves (their digests, as the proxy computes
   them: :func:`shardring.placement_digest`) after every change it applied, and only once applied;
4. it **fences** (``shardring._fence``) the keys that move when it cannot confirm its place in etcd
   during a change.

Confirmations follow the proxy's: every 250 ms, when etcd renewed the registration since the last
look, the fence is confirmed as of that renewal; during a change, a participant coming back from a
partition renews before its watch has caught up with what happened meanwhile (a cut-over, the next
membership dropped by a migration that went on), so the pool is read and applied first, and the
earlier of the renewal and the read's start is confirmed.

A snapshot equal to the one in use changes nothing, an older one is ignored, an empty current
membership is refused (the servers kept) unless ``allow_empty``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import socket
import tempfile
import threading
import time
from typing import Callable, List, NamedTuple, Optional, Tuple

from . import _etcd
from ._fence import Fence
from ._gateway import Gateway
from ._registration import DEFAULT_TTL, Registrar, Registration, check_id
from ._shardring import placement_digest

__all__ = ["Memberships", "Participant", "Settings"]

log = logging.getLogger("shardring.etcd")

#: How often a renewal of the registration is looked for (the proxy's 250 ms).
CONFIRM_EVERY = 0.25


class Settings(NamedTuple):
    """A twemproxy pool's placement settings (what etcd's members are placed with)."""

    #: ``hash``.
    hash: str
    #: ``hash_tag``, or ``None``.
    hash_tag: Optional[str]
    #: ``distribution``.
    distribution: str

    def digest(self, members: List[_etcd.Member]) -> str:
        """The digest of ``members`` placed with these settings, as the proxy computes it."""
        return placement_digest(
            members, hash=self.hash, hash_tag=self.hash_tag, distribution=self.distribution
        )


class Memberships(NamedTuple):
    """What the consumer is to serve."""

    #: The current membership (keys are read from and written to its owners).
    current: List[_etcd.Member]
    #: The next membership while it places keys differently from the current one (writes of the
    #: keys that move go to their owners there too); ``None`` otherwise.
    next: Optional[List[_etcd.Member]]
    #: The etcd revision both were read at.
    revision: int


class Participant:
    """One pool followed in etcd by a participant registered as ``participant_id``.

    ``apply(memberships)`` is called (from :meth:`start`, then from this object's threads) with
    every new state; it must serve it before it returns (a ``ValueError`` refuses it, the old one
    stays), since the registration that follows tells ``shardring migrate`` it does.
    """

    def __init__(
        self,
        endpoint: str,
        pool: str,
        settings: Settings,
        apply: Callable[[Memberships], None],
        *,
        prefix: str = _etcd.DEFAULT_PREFIX,
        participant_id: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        allow_empty: bool = False,
        timeout: float = 2.0,
        retry_max: float = 5.0,
    ) -> None:
        self._gateway = Gateway(endpoint, timeout)
        self._keys = _etcd.PoolKeys(prefix, pool)
        self._pool = _etcd.EtcdPool(self._gateway, self._keys, retry_max)
        if not ttl > 0:
            raise ValueError(f"the registration's lease must last some time, not {ttl!r} s")
        self._settings = settings
        self._consumer = apply
        #: The lease's time to live, whole seconds as etcd grants them (rounded up).
        self._ttl = math.ceil(ttl)
        self._retry_max = retry_max
        self._allow_empty = allow_empty
        self._slot_fd: Optional[int] = None
        if participant_id is None:
            participant_id, self._slot_fd = _claim_default_id(endpoint, prefix, pool)
        #: This participant's id (``proxies/<id>``, ``roster/<id>``).
        self.id = check_id(participant_id)
        #: Whether this participant's place in etcd is confirmed.
        self.fence = Fence()
        self._lock = threading.RLock()
        #: The raw read in use (next as etcd holds it) and what was handed to the consumer.
        self._read: Optional[_etcd.Planned] = None
        self._serving: Optional[Memberships] = None
        self._registrar: Optional[Registrar] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def key(self) -> str:
        """The registration's key, ``<prefix><pool>/proxies/<id>``."""
        return (self._keys.proxies + self.id.encode()).decode()

    @property
    def registration(self) -> Optional[Registration]:
        """The latest registration value (what this participant acknowledges serving)."""
        return None if self._registrar is None else self._registrar.value

    @property
    def instance(self) -> str:
        """Which process wrote the roster entry (its ``instance=``): a clean stop deletes the entry
        only while it is still this one's."""
        return "" if self._registrar is None else self._registrar.instance

    @property
    def lease(self) -> int:
        """The lease the registration is under now (0 before it registered)."""
        return 0 if self._registrar is None else self._registrar.lease

    @property
    def serving(self) -> Optional[Memberships]:
        """What the consumer serves now."""
        return self._serving

    def start(self) -> Memberships:
        """Reads the pool (``OSError`` when etcd cannot be reached, ``ValueError`` when its current
        membership is empty and that is not allowed), hands it to the consumer, registers, reads the
        pool again, and follows it. Registering before the second read closes a gap: a next
        membership published before it is seen by that read, and one published after it sees this
        participant in the roster."""
        try:
            planned = self._pool.read()
            if not planned.current and not self._allow_empty:
                raise ValueError(
                    f"etcd holds no servers under {self._keys.servers.decode()!r} (allow_empty=True to start empty)"
                )
            with self._lock:
                if not self._apply(planned):
                    raise ValueError(f"the servers under {self._keys.servers.decode()!r} were refused (see the log)")
                self.fence.follow(self._ttl)
                registrar = Registrar(
                    self._gateway, self._keys.proxies, self._keys.roster, self.id, self._value(), self._ttl,
                    self._retry_max,
                )
                registrar.start()
                self._registrar = registrar
            self.refresh()
        except BaseException:
            self.close()
            raise
        self._pool.follow(self._refresh_quietly)
        self._thread = threading.Thread(target=self._confirm_loop, name="shardring-etcd-confirm", daemon=True)
        self._thread.start()
        assert self._serving is not None
        return self._serving

    def close(self) -> None:
        """Stops following, revokes the registration and leaves the roster (a clean stop)."""
        self._stop.set()
        self._pool.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._gateway.timeout + 1)
        if self._registrar is not None:
            self._registrar.close()
        _release_slot(self._slot_fd)
        self._slot_fd = None

    def abandon(self) -> None:
        """Stops following and renewing without a clean stop, as when the process dies: the
        registration lapses with its lease and the roster entry stays (for tests)."""
        self._stop.set()
        self._pool.stop()
        if self._registrar is not None:
            self._registrar.abandon()
        _release_slot(self._slot_fd)
        self._slot_fd = None

    def refresh(self) -> bool:
        """Reads the pool and applies it: whether what etcd holds is served now (``OSError`` when
        etcd cannot be read)."""
        return self._apply(self._pool.read())

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except OSError as e:
            log.warning("cannot read pool %s from etcd (%s); the current servers stay", self._keys.pool.decode(), e)

    def _value(self) -> Registration:
        """The registration of what the consumer serves."""
        s = self._serving
        assert s is not None
        nxt = None if s.next is None else self._settings.digest(s.next)
        return Registration(
            current=self._settings.digest(s.current),
            next=nxt,
            current_revision=s.revision,
            next_revision=s.revision if nxt is not None else 0,
        )

    def _apply(self, planned: _etcd.Planned) -> bool:
        """Serves ``planned`` unless it is older, equal, or refused; then registers what is served.
        Whether what etcd holds is served."""
        with self._lock:
            old = self._read
            if old is not None and planned.revision < old.revision:
                return True
            if old is not None and (old.current, old.next) == (planned.current, planned.next):
                return True
            if not planned.current and not self._allow_empty:
                log.error(
                    "etcd has no servers under %s (revision %d); refused, the current servers stay",
                    self._keys.servers.decode(), planned.revision,
                )
                return False
            try:
                now = self._settings.digest(planned.current)
                following = planned.next
                if following is not None and self._settings.digest(following) == now:
                    following = None  # it places every key where the current one does
                memberships = Memberships(planned.current, following, planned.revision)
                self._consumer(memberships)
            except ValueError as e:
                log.error("servers from etcd refused (revision %d): %s; the current servers stay", planned.revision, e)
                return False
            log.info(
                "pool %s: %d servers from etcd at revision %d%s",
                self._keys.pool.decode(), len(planned.current), planned.revision,
                "" if following is None else f", dual-writing to the next {len(following)}",
            )
            self._read, self._serving = planned, memberships
            registrar = self._registrar
            if registrar is not None:
                value = self._value()
                if (value.current, value.next) != (registrar.value.current, registrar.value.next):
                    registrar.update(value)
            return True

    def _confirmation(self, renewed: float) -> Optional[float]:
        """What a renewal at ``renewed`` confirms (see the module's docs); ``None`` when etcd cannot
        be read or its membership is refused (the fence stays)."""
        read = self._read
        if read is None or read.next is None:
            return renewed
        asked = time.monotonic()
        try:
            if not self.refresh():
                return None
        except OSError as e:
            log.debug("cannot read the pool from etcd to confirm this participant's place (%s)", e)
            return None
        return min(renewed, asked)

    def _confirm_loop(self) -> None:
        checked: Optional[float] = None
        while not self._stop.wait(CONFIRM_EVERY):
            registrar = self._registrar
            renewed = None if registrar is None else registrar.confirmed_at
            if renewed is not None and renewed != checked:
                checked = renewed
                at = self._confirmation(renewed)
                if at is not None:
                    self.fence.confirm(at)


# The default participant id.

try:
    import fcntl
except ImportError:  # pragma: no cover (not on Windows)
    fcntl = None  # type: ignore[assignment]

def _claim_default_id(endpoint: str, prefix: str, pool: str) -> Tuple[str, Optional[int]]:
    """A participant id for this process: ``<hostname>-py<slot>``, the slot being the lowest one no
    other running process (or client of this one) of this host holds for the pool. A process
    restarted after a crash gets its predecessor's slot, so the roster entry a migration waits for
    is answered again rather than left behind. Each slot is a lock file (``flock``) in the temporary
    directory, held by the open file returned with the id, released by ``close()`` or when the
    process ends. Where that cannot be done, the id is ``<hostname>-py-<pid>``, which a restart does
    not reuse."""
    host = "".join("_" if c == "/" or c.isspace() else c for c in socket.gethostname()) or "localhost"
    if fcntl is not None:
        scope = hashlib.sha256(f"{endpoint}\0{prefix}\0{pool}".encode()).hexdigest()[:16]
        try:
            directory = os.path.join(tempfile.gettempdir(), "shardring-participants")
            os.makedirs(directory, exist_ok=True)
            for slot in range(4096):
                fd = os.open(os.path.join(directory, f"{scope}.{slot}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                return f"{host}-py{slot}", fd
        except OSError as e:
            log.warning("cannot take a participant slot (%s); using the pid as the participant id", e)
    return f"{host}-py-{os.getpid()}", None


def _release_slot(fd: Optional[int]) -> None:
    """Gives the slot whose lock file is open as ``fd`` back (closing it releases the lock)."""
    if fd is not None:
        os.close(fd)
