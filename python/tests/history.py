"""A recorded history of versioned reads and writes through several participants, and the checker a
planned change is judged by: crates/test-support/src/history.rs, in Python.

Every key has one writer, which writes versions 1, 2, 3... in order, each through one of the
participants; readers read any key through any participant. Both record when each operation began
and ended. The invariant:

- **no stale read**: a read returns a version at least as new as every write of its key that was
  acknowledged (to any client, through any participant) before the read began (a miss counts as
  version 0);
- **no lost write**: the final reads, made once the change is over and every fault healed, are reads
  like the others, so a write acknowledged and then lost shows as a stale final read.

Errors are not violations (they cost availability, which the report counts per participant and
phase: fenced and the rest).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple


@dataclass
class Op:
    """One operation."""

    participant: int
    key: int
    #: The version written, ``None`` for a read.
    write: Optional[int]
    start: float
    end: float
    #: ``"written"``, ``"read"``, ``"fenced"`` or ``"error"``.
    outcome: str
    #: The version read (0: a miss), or the error's text.
    detail: object = None


@dataclass
class Tally:
    """One participant's tallies in one phase."""

    reads: int = 0
    writes: int = 0
    fenced: int = 0
    errors: int = 0
    stale: int = 0
    #: When the first fenced answer's request began and the last one's ended.
    fenced_span: Optional[Tuple[float, float]] = None


@dataclass
class Report:
    """What the checker found."""

    tallies: Dict[Tuple[str, int], Tally] = field(default_factory=dict)
    #: ``(participant, key, phase, version read, version acknowledged, at)`` of every stale read.
    stale: List[Tuple[int, int, str, int, int, float]] = field(default_factory=list)
    fenced_keys: Set[int] = field(default_factory=set)
    errors: List[str] = field(default_factory=list)

    def violations(self) -> Tuple[int, int]:
        """Stale reads outside the final phase, and lost writes (stale final reads)."""
        lost = sum(1 for s in self.stale if s[2] == "final")
        return len(self.stale) - lost, lost

    def fenced(self, participant: int) -> int:
        return sum(t.fenced for (_, p), t in self.tallies.items() if p == participant)

    def fenced_span(self, participant: int) -> Optional[Tuple[float, float]]:
        spans = [t.fenced_span for (_, p), t in self.tallies.items() if p == participant and t.fenced_span]
        if not spans:
            return None
        return min(s[0] for s in spans), max(s[1] for s in spans)

    def __str__(self) -> str:
        lines = [f"{'phase':<12} {'who':>4} {'reads':>8} {'writes':>8} {'fenced':>7} {'fenced from-to':>15} "
                 f"{'errors':>7} {'stale':>6}"]
        for (phase, p), t in self.tallies.items():
            span = "-" if t.fenced_span is None else f"{t.fenced_span[0]:.1f}-{t.fenced_span[1]:.1f} s"
            lines.append(f"{phase:<12} {p:>4} {t.reads:>8} {t.writes:>8} {t.fenced:>7} {span:>15} "
                         f"{t.errors:>7} {t.stale:>6}")
        for s in self.stale[:10]:
            lines.append(f"stale: participant {s[0]} key {s[1]} read v{s[3]} after v{s[4]} was "
                         f"acknowledged ({s[2]} at {s[5]:.3f} s)")
        for e in self.errors[:5]:
            lines.append(f"error: {e}")
        return "\n".join(lines)


class History:
    """Operations and the phases the test marked, from any thread."""

    def __init__(self) -> None:
        self._began = time.monotonic()
        self._lock = threading.Lock()
        self._ops: List[Op] = []
        self._phases: List[Tuple[float, str]] = [(0.0, "before")]

    def now(self) -> float:
        return time.monotonic() - self._began

    def phase(self, name: str) -> None:
        """A new phase begins now (operations count in the phase they began in)."""
        with self._lock:
            self._phases.append((self.now(), name))

    def phases(self) -> List[Tuple[float, str]]:
        with self._lock:
            return list(self._phases)

    def record(self, participant: int, key: int, write: Optional[int], start: float, outcome: str,
               detail: object = None) -> None:
        op = Op(participant, key, write, start, self.now(), outcome, detail)
        with self._lock:
            self._ops.append(op)

    def check(self) -> Report:
        with self._lock:
            ops, phases = list(self._ops), list(self._phases)
        acked: Dict[int, List[Tuple[float, int]]] = defaultdict(list)
        for op in ops:
            if op.write is not None and op.outcome == "written":
                acked[op.key].append((op.end, op.write))
        for k, writes in acked.items():
            writes.sort()
            newest = 0
            for i, (end, v) in enumerate(writes):
                newest = max(newest, v)
                writes[i] = (end, newest)
        ends = {k: [e for e, _ in w] for k, w in acked.items()}
        starts = [t for t, _ in phases]

        def phase_at(at: float) -> str:
            return phases[max(0, bisect.bisect_right(starts, at) - 1)][1]

        report = Report()
        order = {name: i for i, (_, name) in enumerate(phases)}
        tallies: Dict[Tuple[int, int], Tally] = {}
        for op in ops:
            phase = phase_at(op.start)
            t = tallies.setdefault((order[phase], op.participant), Tally())
            if op.outcome == "fenced":
                t.fenced += 1
                report.fenced_keys.add(op.key)
                a, b = t.fenced_span or (op.start, op.end)
                t.fenced_span = (min(a, op.start), max(b, op.end))
            elif op.outcome == "error":
                t.errors += 1
                report.errors.append(f"participant {op.participant} key {op.key} ({phase}): {op.detail}")
            elif op.write is not None:
                t.writes += 1
            else:
                t.reads += 1
                i = bisect.bisect_left(ends.get(op.key, []), op.start)
                acknowledged = acked[op.key][i - 1][1] if i > 0 else 0
                read = int(op.detail or 0)  # type: ignore[call-overload]
                if read < acknowledged:
                    t.stale += 1
                    report.stale.append((op.participant, op.key, phase, read, acknowledged, op.start))
        report.tallies = {(phases[p][1], who): t for (p, who), t in sorted(tallies.items())}
        return report
