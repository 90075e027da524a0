//! Replaying synthetic traffic against a ring, round by round: the engine behind `shardring simulate`.
//!
//! Each round sends `requests` requests, drawn from a [`Workload`] over a universe of `keys` keys, to the
//! current ring and measures how evenly the nodes were loaded. With the [rebalancer](crate::rebalance) on,
//! it runs once after every round, so the next round sees its new ring. With [bounded
//! loads](crate::bounded) on, every request of a round stays in flight until the round ends (the paper's
//! static setting: a round is one batch of balls placed into bins), so no node serves more than
//! `⌈c · requests / nodes⌉` requests in a round.
//!
//! Everything is deterministic: the same settings and seed give the same rounds on every machine.

use std::fmt;
use std::io::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use crate::bounded::BoundedLoads;
use crate::load::LoadStats;
use crate::rebalance::{RebalanceOutcome, Rebalancer, RebalancerBuilder};
use crate::shared::SharedRing;
use crate::{Error, Ring};

/// Which keys requests ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Workload {
    /// Every key of the universe equally often.
    Uniform,
    /// Key of rank `r` (from 1) with probability proportional to `r^-s`: a few keys get most requests, as
    /// in real caches. `s` around 1 is typical; the larger, the more skewed.
    Zipf {
        /// The exponent `s`, greater than 0.
        exponent: f64,
    },
}

impl FromStr for Workload {
    type Err = Error;

    /// `uniform`, or `zipf:S` with `S` a number greater than 0 (e.g. `zipf:1.1`).
    fn from_str(s: &str) -> Result<Workload, Error> {
        let invalid = |reason: String| Error::InvalidSetting {
            setting: "workload",
            reason,
        };
        if s == "uniform" {
            return Ok(Workload::Uniform);
        }
        let Some(exponent) = s.strip_prefix("zipf:") else {
            return Err(invalid(format!(
                "{s:?} is neither `uniform` nor `zipf:S` (e.g. zipf:1.1)"
            )));
        };
        match exponent.parse::<f64>() {
            Ok(e) if e.is_finite() && e > 0.0 => Ok(Workload::Zipf { exponent: e }),
            _ => Err(invalid(format!(
                "zipf exponent {exponent:?} is not a number greater than 0"
            ))),
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::Uniform => f.write_str("uniform"),
            Workload::Zipf { exponent } => write!(f, "zipf:{exponent}"),
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-studied generator whose output is fixed by its
/// seed on every platform, which is all a reproducible simulation needs. Not for cryptography.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    /// The generator's whole state.
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)` by multiply-shift (bias below n / 2^64, far under anything measured here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Draws key numbers in `[0, keys)` from a workload.
#[derive(Debug, Clone)]
enum Sampler {
    /// Uniform over the universe.
    Uniform {
        /// The universe size.
        keys: u64,
    },
    /// Inverse-CDF sampling: `cdf[i]` is the probability of ranks 1..=i+1.
    Zipf {
        /// Cumulative probabilities, non-decreasing, ending at 1.
        cdf: Vec<f64>,
    },
}

impl Sampler {
    fn new(workload: Workload, keys: u64) -> Sampler {
        match workload {
            Workload::Uniform => Sampler::Uniform { keys },
            Workload::Zipf { exponent } => {
                let mut cdf = Vec::with_capacity(keys as usize);
                let mut sum = 0.0;
                for rank in 1..=keys {
                    sum += (rank as f64).powf(-exponent);
                    cdf.push(sum);
                }
                cdf.iter_mut().for_each(|c| *c /= sum);
                Sampler::Zipf { cdf }
            }
        }
    }

    fn sample(&self, rng: &mut SplitMix64) -> u64 {
        match self {
            Sampler::Uniform { keys } => rng.below(*keys),
            Sampler::Zipf { cdf } => {
                let u = rng.next_f64();
                // The first rank whose cumulative probability exceeds u; clamped against rounding at 1.
                (cdf.partition_point(|&c| c <= u) as u64).min(cdf.len() as u64 - 1)
            }
        }
    }
}

/// The default number of nodes: 10.
pub const DEFAULT_NODES: usize = 10;
/// The default requests per round: 100,000.
pub const DEFAULT_REQUESTS: u64 = 100_000;
/// The default number of rounds: 10.
pub const DEFAULT_ROUNDS: usize = 10;
/// The default key universe: 1,000,000 keys.
pub const DEFAULT_KEYS: u64 = 1_000_000;
/// The default seed.
pub const DEFAULT_SEED: u64 = 0x5EED;

/// Sets up a [`Simulation`].
///
/// ```
/// use shardring::simulate::{SimulationBuilder, Workload};
///
/// let rounds = SimulationBuilder::new()
///     .workload("zipf:1.1".parse()?)
///     .nodes(5)
///     .vnodes(40)
///     .requests(10_000)
///     .rounds(2)
///     .keys(1000)
///     .bounded(1.25)
///     .build()?
///     .run()?;
/// assert_eq!(rounds.len(), 2);
/// assert!(rounds.iter().all(|r| r.stats.peak_to_mean <= 1.25));
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SimulationBuilder {
    /// Which keys requests ask for.
    workload: Workload,
    /// How many nodes, named `node-0`, `node-1`, ….
    nodes: usize,
    /// Points per node at the start.
    vnodes: u32,
    /// Requests per round.
    requests: u64,
    /// How many rounds.
    rounds: usize,
    /// The key universe: keys are `key:0` … `key:{keys-1}`.
    keys: u64,
    /// The generator's seed.
    seed: u64,
    /// The rebalancer's settings, when it runs after every round.
    rebalance: Option<RebalancerBuilder>,
    /// The balance factor, when lookups are bounded.
    bounded: Option<f64>,
}

impl Default for SimulationBuilder {
    fn default() -> SimulationBuilder {
        SimulationBuilder::new()
    }
}

impl SimulationBuilder {
    /// Every setting at its default.
    pub fn new() -> SimulationBuilder {
        SimulationBuilder {
            workload: Workload::Uniform,
            nodes: DEFAULT_NODES,
            vnodes: crate::ring::DEFAULT_VNODES,
            requests: DEFAULT_REQUESTS,
            rounds: DEFAULT_ROUNDS,
            keys: DEFAULT_KEYS,
            seed: DEFAULT_SEED,
            rebalance: None,
            bounded: None,
        }
    }

    /// Which keys requests ask for.
    ///
    /// By default, this is [`Workload::Uniform`].
    pub fn workload(mut self, workload: Workload) -> SimulationBuilder {
        self.workload = workload;
        self
    }

    /// How many nodes (of weight 1, named `node-0`, `node-1`, …).
    ///
    /// By default, this is 10.
    pub fn nodes(mut self, nodes: usize) -> SimulationBuilder {
        self.nodes = nodes;
        self
    }

    /// Points per node at the start.
    ///
    /// By default, this is 160 (the ring's default).
    pub fn vnodes(mut self, vnodes: u32) -> SimulationBuilder {
        self.vnodes = vnodes;
        self
    }

    /// Requests per round.
    ///
    /// By default, this is 100,000.
    pub fn requests(mut self, requests: u64) -> SimulationBuilder {
        self.requests = requests;
        self
    }

    /// How many rounds.
    ///
    /// By default, this is 10.
    pub fn rounds(mut self, rounds: usize) -> SimulationBuilder {
        self.rounds = rounds;
        self
    }

    /// The key universe size. A Zipf workload keeps a table of 8 bytes per key.
    ///
    /// By default, this is 1,000,000.
    pub fn keys(mut self, keys: u64) -> SimulationBuilder {
        self.keys = keys;
        self
    }

    /// The seed of the request generator.
    ///
    /// By default, this is 0x5EED.
    pub fn seed(mut self, seed: u64) -> SimulationBuilder {
        self.seed = seed;
        self
    }

    /// Runs the rebalancer with these settings after every round (its `interval` is not used).
    ///
    /// By default, the rebalancer is off.
    pub fn rebalance(mut self, settings: RebalancerBuilder) -> SimulationBuilder {
        self.rebalance = Some(settings);
        self
    }

    /// Bounds loads with balance factor `c` (caps ignore the weights the rebalancer sets).
    ///
    /// By default, lookups are not bounded.
    pub fn bounded(mut self, c: f64) -> SimulationBuilder {
        self.bounded = Some(c);
        self
    }

    /// Checks the settings and builds the starting ring.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for zero nodes, requests, rounds or keys, a key universe too large for a
    /// Zipf table (over 2^27 keys), or a bad rebalancer setting or balance factor; ring errors as from
    /// [`RingBuilder::build`](crate::RingBuilder::build).
    pub fn build(self) -> Result<Simulation, Error> {
        let positive = |setting: &'static str, value: u64| {
            if value == 0 {
                Err(Error::InvalidSetting {
                    setting,
                    reason: "must be at least 1".into(),
                })
            } else {
                Ok(())
            }
        };
        positive("nodes", self.nodes as u64)?;
        positive("requests", self.requests)?;
        positive("rounds", self.rounds as u64)?;
        positive("keys", self.keys)?;
        if matches!(self.workload, Workload::Zipf { .. }) && self.keys > 1 << 27 {
            return Err(Error::InvalidSetting {
                setting: "keys",
                reason: format!("{} keys is more than a Zipf table of 2^27 keys", self.keys),
            });
        }
        if let Some(c) = self.bounded {
            // Validates the factor the same way bounded lookups will.
            BoundedLoads::new(Ring::new(), c)?;
        }
        let ring = Ring::builder()
            .vnodes(self.vnodes)
            .nodes((0..self.nodes).map(|i| format!("node-{i}")))
            .build()?;
        let shared = Arc::new(SharedRing::new(ring));
        let rebalancer = self
            .rebalance
            .map(|settings| settings.build(Arc::clone(&shared)))
            .transpose()?;
        Ok(Simulation {
            sampler: Sampler::new(self.workload, self.keys),
            workload: self.workload,
            requests: self.requests,
            rounds: self.rounds,
            seed: self.seed,
            bounded: self.bounded,
            shared,
            rebalancer,
        })
    }
}

/// A configured simulation; [`run`](Simulation::run) plays it.
#[derive(Debug)]
pub struct Simulation {
    /// Which keys requests ask for, as set.
    workload: Workload,
    /// Draws key numbers.
    sampler: Sampler,
    /// Requests per round.
    requests: u64,
    /// How many rounds.
    rounds: usize,
    /// The generator's seed.
    seed: u64,
    /// The balance factor, when bounded.
    bounded: Option<f64>,
    /// The ring the requests go to, rebalanced between rounds when the rebalancer is on.
    shared: Arc<SharedRing<Ring>>,
    /// Runs after every round, when on.
    rebalancer: Option<Rebalancer>,
}

/// One node's part in a round.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRound {
    /// The node's name.
    pub name: String,
    /// The points it had during the round.
    pub points: usize,
    /// The requests it served.
    pub requests: u64,
}

/// What happened in one round.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundReport {
    /// The round's number, from 1.
    pub round: usize,
    /// The load statistics of the round (node indices as in `nodes`).
    pub stats: LoadStats,
    /// Each node, in a fixed order.
    pub nodes: Vec<NodeRound>,
    /// What the rebalancer did after the round, when it is on.
    pub rebalance: Option<RebalanceOutcome>,
}

impl RoundReport {
    /// The name of the most loaded node.
    pub fn max_node(&self) -> &str {
        self.stats.max_node.map_or("", |i| &self.nodes[i].name)
    }

    /// The name of the least loaded node.
    pub fn min_node(&self) -> &str {
        self.stats.min_node.map_or("", |i| &self.nodes[i].name)
    }
}

impl Simulation {
    /// The workload being replayed.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// Plays every round and returns their reports.
    ///
    /// # Errors
    /// A rebalancer error ([`Error::TooManyPoints`] past the ring's point limit).
    pub fn run(&self) -> Result<Vec<RoundReport>, Error> {
        let mut reports = Vec::with_capacity(self.rounds);
        self.run_with(|r| reports.push(r))?;
        Ok(reports)
    }

    /// Plays every round, handing each report to `each` as soon as the round ends.
    ///
    /// # Errors
    /// As [`run`](Simulation::run).
    pub fn run_with(&self, mut each: impl FnMut(RoundReport)) -> Result<(), Error> {
        let mut rng = SplitMix64::new(self.seed);
        let mut key = Vec::with_capacity(32);
        for round in 1..=self.rounds {
            let snapshot = self.shared.snapshot();
            let ring: &Ring = snapshot.placement();
            let mut served = vec![0u64; ring.len()];
            match self.bounded {
                Some(c) => {
                    let bounded = BoundedLoads::unweighted(ring.clone(), c)?;
                    let mut in_flight = Vec::with_capacity(self.requests as usize);
                    for _ in 0..self.requests {
                        fill_key(&mut key, self.sampler.sample(&mut rng));
                        if let Some(guard) = bounded.take(&key) {
                            served[guard.index()] += 1;
                            snapshot.load().record(guard.index());
                            in_flight.push(guard);
                        }
                    }
                }
                None => {
                    for _ in 0..self.requests {
                        fill_key(&mut key, self.sampler.sample(&mut rng));
                        if let Some(i) = ring.lookup_index(&key) {
                            served[i] += 1;
                            snapshot.load().record(i);
                        }
                    }
                }
            }
            let points = ring.point_counts();
            let nodes = ring
                .nodes()
                .iter()
                .zip(points)
                .zip(&served)
                .map(|((n, points), &requests)| NodeRound {
                    name: n.name().to_string(),
                    points,
                    requests,
                })
                .collect();
            let rebalance = match &self.rebalancer {
                Some(r) => Some(r.rebalance_once()?),
                None => None,
            };
            each(RoundReport {
                round,
                stats: LoadStats::from_counts(&served),
                nodes,
                rebalance,
            });
        }
        Ok(())
    }
}

/// Writes key number `n` as `key:{n}` into `buf`, reusing its allocation.
fn fill_key(buf: &mut Vec<u8>, n: u64) {
    buf.clear();
    // Writing into a Vec cannot fail.
    let _ = write!(buf, "key:{n}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse_and_print() {
        assert_eq!("uniform".parse::<Workload>().unwrap(), Workload::Uniform);
        assert_eq!(
            "zipf:1.1".parse::<Workload>().unwrap(),
            Workload::Zipf { exponent: 1.1 }
        );
        assert_eq!(Workload::Zipf { exponent: 1.1 }.to_string(), "zipf:1.1");
        for bad in [
            "", "zipf", "zipf:", "zipf:0", "zipf:-1", "zipf:nan", "normal",
        ] {
            assert!(
                matches!(bad.parse::<Workload>(), Err(Error::InvalidSetting { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn splitmix_matches_its_reference_output() {
        // First outputs of SplitMix64 seeded with 1234567, from the reference C implementation.
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        assert!((0..1000).all(|_| rng.below(10) < 10));
    }

    #[test]
    fn zipf_favours_low_ranks() {
        let sampler = Sampler::new(Workload::Zipf { exponent: 1.1 }, 1000);
        let mut rng = SplitMix64::new(1);
        let mut hits = [0u32; 1000];
        for _ in 0..100_000 {
            hits[sampler.sample(&mut rng) as usize] += 1;
        }
        // P(rank 1) = 1 / H(1000, 1.1) ≈ 0.18; rank 2 gets 2^-1.1 of that.
        assert!((16_000..20_000).contains(&hits[0]), "{}", hits[0]);
        assert!(hits[0] > hits[1] && hits[1] > hits[9] && hits[9] > hits[999]);
    }

    #[test]
    fn same_seed_same_rounds() {
        let sim = || {
            SimulationBuilder::new()
                .nodes(4)
                .vnodes(10)
                .requests(2000)
                .rounds(3)
                .keys(500)
                .rebalance(RebalancerBuilder::new())
                .build()
                .unwrap()
                .run()
                .unwrap()
        };
        assert_eq!(sim(), sim());
    }

    #[test]
    fn bounded_rounds_respect_the_cap_where_plain_ones_do_not() {
        let base = || {
            SimulationBuilder::new()
                .workload(Workload::Zipf { exponent: 1.1 })
                .nodes(8)
                .vnodes(40)
                .requests(8000)
                .rounds(1)
                .keys(10_000)
        };
        let plain = base().build().unwrap().run().unwrap();
        assert!(plain[0].stats.peak_to_mean > 1.25);
        let bounded = base().bounded(1.25).build().unwrap().run().unwrap();
        // ⌈1.25 · 8000 / 8⌉ = 1250 = 1.25 × the mean of 1000.
        assert!(bounded[0].stats.peak_to_mean <= 1.25);
        assert_eq!(bounded[0].stats.total, 8000.0);
    }

    /// The acceptance scenario of the issue, in the library: 20 nodes × 20 points under uniform traffic,
    /// rebalanced after every round, get below peak/mean 1.25 within 10 rounds.
    #[test]
    fn rebalancing_uniform_traffic_gets_below_1_25_within_10_rounds() {
        let rounds = SimulationBuilder::new()
            .nodes(20)
            .vnodes(20)
            .rebalance(RebalancerBuilder::new())
            .build()
            .unwrap()
            .run()
            .unwrap();
        assert!(rounds[0].stats.peak_to_mean > 1.25, "nothing to fix");
        let first = rounds.iter().position(|r| r.stats.peak_to_mean < 1.25);
        assert!(
            first.is_some(),
            "{:?}",
            rounds
                .iter()
                .map(|r| r.stats.peak_to_mean)
                .collect::<Vec<_>>()
        );
        assert!(rounds
            .iter()
            .flat_map(|r| &r.nodes)
            .all(|n| (5..=80).contains(&n.points)));
    }

    #[test]
    fn rejects_empty_settings() {
        for b in [
            SimulationBuilder::new().nodes(0),
            SimulationBuilder::new().requests(0),
            SimulationBuilder::new().rounds(0),
            SimulationBuilder::new().keys(0),
            SimulationBuilder::new().bounded(0.9),
        ] {
            assert!(matches!(b.build(), Err(Error::InvalidSetting { .. })));
        }
    }
}
