//! A recorded history of versioned reads and writes through several participants (proxies or
//! client-side rings), and the checker the fault-injection tests judge it by.
//!
//! Every key has one writer, which writes versions 1, 2, 3… in order, each through one of the
//! participants; readers read any key through any participant. Both record when each operation
//! began and ended. The invariant a planned membership change must keep:
//!
//! - **no stale read**: a read returns a version at least as new as every write of its key that was
//!   acknowledged (to any client, through any participant) before the read began (a miss counts as
//!   version 0);
//! - **no lost write**: the final reads, made once the change is over and every fault healed, are
//!   reads like the others, so a write acknowledged and then lost shows as a stale final read.
//!
//! Errors are not violations (they cost availability, which the report counts per participant,
//! phase and kind: `fenced` and the rest).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A write acknowledged.
    Written,
    /// A read's answer: the version read, `None` for a miss.
    Read(Option<u64>),
    /// An error answer, or no answer (the text says which).
    Failed(String),
}

/// One operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// Which participant it went through.
    pub participant: usize,
    /// The key's index.
    pub key: usize,
    /// `Some(version)` for a write of it, `None` for a read.
    pub write: Option<u64>,
    /// When it was sent, since the history began.
    pub start: Duration,
    /// When its answer came.
    pub end: Duration,
    /// What it did.
    pub outcome: Outcome,
}

/// The history: operations and the phases the test marked.
#[derive(Debug)]
pub struct History {
    began: Instant,
    ops: Mutex<Vec<Op>>,
    phases: Mutex<Vec<(Duration, String)>>,
}

impl Default for History {
    fn default() -> History {
        History {
            began: Instant::now(),
            ops: Mutex::default(),
            phases: Mutex::new(vec![(Duration::ZERO, "before".into())]),
        }
    }
}

/// A read that returned an older version than one acknowledged before it began.
#[derive(Debug, Clone)]
pub struct Stale {
    /// The participant it went through.
    pub participant: usize,
    /// The key's index.
    pub key: usize,
    /// The phase it began in.
    pub phase: String,
    /// The version read (0: a miss).
    pub read: u64,
    /// The newest version acknowledged before the read began.
    pub acknowledged: u64,
    /// When the read began.
    pub at: Duration,
}

/// One participant's tallies in one phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Reads answered (a value or a miss).
    pub reads: u64,
    /// Writes acknowledged.
    pub writes: u64,
    /// Errors that say the participant fenced the key.
    pub fenced: u64,
    /// Other errors (connection refused while a participant is down, timeouts…).
    pub errors: u64,
    /// Reads older than a write acknowledged before they began.
    pub stale: u64,
    /// When the first fenced answer's request began and the last one's ended.
    pub fenced_span: Option<(Duration, Duration)>,
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Per (phase, participant), phases in the order they began.
    pub tallies: Vec<((String, usize), Tally)>,
    /// Every stale read (the final phase's are lost writes).
    pub stale: Vec<Stale>,
    /// The keys some participant answered with a fenced error.
    pub fenced_keys: std::collections::BTreeSet<usize>,
}

impl History {
    /// When each phase began, in order.
    pub fn phases(&self) -> Vec<(Duration, String)> {
        self.phases.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Now, as the history counts.
    pub fn now(&self) -> Duration {
        self.began.elapsed()
    }

    /// Records an operation that began at `start` (from [`now`](History::now)) and ended now.
    pub fn record(
        &self,
        participant: usize,
        key: usize,
        write: Option<u64>,
        start: Duration,
        outcome: Outcome,
    ) {
        let end = self.now();
        if let Ok(mut ops) = self.ops.lock() {
            ops.push(Op {
                participant,
                key,
                write,
                start,
                end,
                outcome,
            });
        }
    }

    /// A new phase begins now (operations are counted in the phase they began in).
    pub fn phase(&self, name: &str) {
        let at = self.now();
        if let Ok(mut p) = self.phases.lock() {
            p.push((at, name.to_owned()));
        }
    }

    /// The phase at `at`.
    fn phase_at(phases: &[(Duration, String)], at: Duration) -> &str {
        phases
            .iter()
            .rev()
            .find(|(t, _)| *t <= at)
            .map_or("before", |(_, n)| n.as_str())
    }

    /// Checks the history.
    pub fn check(&self) -> Report {
        let ops = self.ops.lock().map(|o| o.clone()).unwrap_or_default();
        let phases = self.phases.lock().map(|p| p.clone()).unwrap_or_default();
        // Per key, the acknowledged writes by when they ended (one writer per key: versions rise).
        let mut acked: BTreeMap<usize, Vec<(Duration, u64)>> = BTreeMap::new();
        for op in &ops {
            if let (Some(v), Outcome::Written) = (op.write, &op.outcome) {
                acked.entry(op.key).or_default().push((op.end, v));
            }
        }
        for list in acked.values_mut() {
            list.sort();
            // Newest acknowledged so far, at each end time.
            let mut max = 0;
            for e in list.iter_mut() {
                max = max.max(e.1);
                e.1 = max;
            }
        }
        let mut tallies: BTreeMap<(usize, usize), Tally> = BTreeMap::new();
        let order = |name: &str| phases.iter().position(|(_, n)| n == name).unwrap_or(0);
        let mut report = Report::default();
        for op in &ops {
            let phase = Self::phase_at(&phases, op.start);
            let t = tallies.entry((order(phase), op.participant)).or_default();
            match (&op.outcome, op.write) {
                (Outcome::Failed(text), _) => {
                    if text.contains("fenced") {
                        t.fenced += 1;
                        report.fenced_keys.insert(op.key);
                        let (from, to) = t.fenced_span.unwrap_or((op.start, op.end));
                        t.fenced_span = Some((from.min(op.start), to.max(op.end)));
                    } else {
                        t.errors += 1;
                    }
                }
                (_, Some(_)) => t.writes += 1,
                (Outcome::Read(got), None) => {
                    t.reads += 1;
                    let before = acked.get(&op.key).and_then(|l| {
                        let i = l.partition_point(|(end, _)| *end < op.start);
                        i.checked_sub(1).map(|i| l[i].1)
                    });
                    let (read, acknowledged) = (got.unwrap_or(0), before.unwrap_or(0));
                    if read < acknowledged {
                        t.stale += 1;
                        report.stale.push(Stale {
                            participant: op.participant,
                            key: op.key,
                            phase: phase.to_owned(),
                            read,
                            acknowledged,
                            at: op.start,
                        });
                    }
                }
                (Outcome::Written, None) => t.errors += 1,
            }
        }
        report.tallies = tallies
            .into_iter()
            .map(|((p, participant), t)| ((phases[p].1.clone(), participant), t))
            .collect();
        report
    }
}

impl Report {
    /// Fenced answers per participant, over every phase.
    pub fn fenced(&self, participant: usize) -> u64 {
        self.tallies
            .iter()
            .filter(|((_, p), _)| *p == participant)
            .map(|(_, t)| t.fenced)
            .sum()
    }

    /// Stale reads outside the final phase, and lost writes (stale final reads).
    pub fn violations(&self) -> (usize, usize) {
        let lost = self.stale.iter().filter(|s| s.phase == "final").count();
        (self.stale.len() - lost, lost)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<12} {:>4} {:>8} {:>8} {:>7} {:>15} {:>7} {:>6}",
            "phase", "who", "reads", "writes", "fenced", "fenced from-to", "errors", "stale"
        )?;
        for ((phase, p), t) in &self.tallies {
            let span = t.fenced_span.map_or(String::from("-"), |(a, b)| {
                format!("{:.1}-{:.1} s", a.as_secs_f64(), b.as_secs_f64())
            });
            writeln!(
                f,
                "{phase:<12} {p:>4} {:>8} {:>8} {:>7} {span:>15} {:>7} {:>6}",
                t.reads, t.writes, t.fenced, t.errors, t.stale
            )?;
        }
        for s in self.stale.iter().take(10) {
            writeln!(
                f,
                "stale: participant {} key {} read v{} after v{} was acknowledged ({} at {:?})",
                s.participant, s.key, s.read, s.acknowledged, s.phase, s.at
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_older_than_an_acknowledged_write_is_stale_and_a_concurrent_one_is_not() {
        let h = History::default();
        let t0 = h.now();
        h.record(0, 7, Some(1), t0, Outcome::Written);
        std::thread::sleep(Duration::from_millis(2));
        // Concurrent with version 2's write: either answer is right.
        let w2 = h.now();
        let r1 = h.now();
        h.record(1, 7, None, r1, Outcome::Read(Some(1)));
        h.record(0, 7, Some(2), w2, Outcome::Written);
        std::thread::sleep(Duration::from_millis(2));
        h.phase("final");
        let r2 = h.now();
        h.record(1, 7, None, r2, Outcome::Read(Some(1)));
        h.record(1, 8, None, r2, Outcome::Read(None));
        h.record(
            1,
            7,
            None,
            r2,
            Outcome::Failed("SERVER_ERROR fenced".into()),
        );
        let report = h.check();
        assert_eq!(report.violations(), (0, 1), "{report}");
        let final_tally = &report
            .tallies
            .iter()
            .find(|((p, who), _)| p == "final" && *who == 1)
            .unwrap()
            .1;
        assert_eq!(
            (final_tally.reads, final_tally.fenced, final_tally.stale),
            (2, 1, 1)
        );
    }
}
