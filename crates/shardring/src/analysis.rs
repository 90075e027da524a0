//! Measuring a placement: how evenly keys spread, and how many move when membership changes.
//!
//! Everything here works on any [`Placement`], so every algorithm is measured by the same code on the
//! same keys.

use std::collections::BTreeMap;

use crate::Placement;

/// A set of keys stored back to back in one buffer, so a million keys are two allocations, not a million.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    /// Every key's bytes, concatenated.
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<usize>,
}

impl KeySet {
    /// `count` deterministic keys `key:0`, `key:1`, …: the keys `shardring analyze` uses.
    pub fn synthetic(count: usize) -> KeySet {
        let mut set = KeySet {
            bytes: Vec::with_capacity(count * 11),
            ends: Vec::with_capacity(count),
        };
        let mut buf = itoa_buffer();
        for i in 0..count {
            set.bytes.extend_from_slice(b"key:");
            set.bytes.extend_from_slice(format_u64(&mut buf, i as u64));
            set.ends.push(set.bytes.len());
        }
        set
    }

    /// Adds one key.
    pub fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The keys in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.ends.iter().enumerate().map(|(i, &end)| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.bytes[start..end]
        })
    }
}

impl<K: AsRef<[u8]>> FromIterator<K> for KeySet {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> KeySet {
        let mut set = KeySet::default();
        for key in iter {
            set.push(key.as_ref());
        }
        set
    }
}

fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// Writes `n` in decimal into the end of `buf` and returns the digits, without allocating.
fn format_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// How many keys each node got, against what its weight entitles it to.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// Each node's name and key count, in the placement's node order.
    pub counts: Vec<(String, u64)>,
    /// Keys per node on average (`keys / nodes`).
    pub mean: f64,
    /// Standard deviation of each node's count from its expected count (its weight's share of the keys);
    /// with equal weights this is the plain standard deviation of the counts.
    pub stddev: f64,
    /// The smallest count.
    pub min: u64,
    /// The largest count.
    pub max: u64,
    /// The largest count relative to its node's expected count: `max / mean` with equal weights. 1.0 is
    /// perfect balance.
    pub peak_to_mean: f64,
}

impl Spread {
    /// The standard deviation as a percentage of the mean.
    pub fn stddev_percent(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            100.0 * self.stddev / self.mean
        }
    }
}

/// Counts where each key of `keys` goes. An empty placement gives an empty spread of zeros.
pub fn spread(placement: &dyn Placement, keys: &KeySet) -> Spread {
    let nodes = placement.nodes();
    let mut counts = vec![0u64; nodes.len()];
    for key in keys.iter() {
        if let Some(i) = placement.locate(key) {
            counts[i] += 1;
        }
    }
    let total_weight: f64 = nodes.iter().map(|n| n.weight()).sum();
    let total_keys = counts.iter().sum::<u64>() as f64;
    let expected = |i: usize| total_keys * nodes[i].weight() / total_weight;

    let n = nodes.len().max(1) as f64;
    let variance = (0..nodes.len())
        .map(|i| (counts[i] as f64 - expected(i)).powi(2))
        .sum::<f64>()
        / n;
    let peak_to_mean = (0..nodes.len())
        .map(|i| {
            let e = expected(i);
            if e > 0.0 {
                counts[i] as f64 / e
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max);
    Spread {
        mean: if nodes.is_empty() {
            0.0
        } else {
            total_keys / n
        },
        stddev: variance.sqrt(),
        min: counts.iter().copied().min().unwrap_or(0),
        max: counts.iter().copied().max().unwrap_or(0),
        peak_to_mean,
        counts: nodes
            .iter()
            .zip(counts)
            .map(|(node, c)| (node.name().to_string(), c))
            .collect(),
    }
}

/// How keys moved between two states of a placement.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Movement {
    /// How many keys were compared.
    pub keys: u64,
    /// How many changed owner (by node name).
    pub moved: u64,
    /// Moved keys by their old owner.
    pub moved_from: BTreeMap<String, u64>,
    /// Moved keys by their new owner.
    pub moved_to: BTreeMap<String, u64>,
}

impl Movement {
    /// The fraction of keys that moved.
    pub fn fraction(&self) -> f64 {
        if self.keys == 0 {
            0.0
        } else {
            self.moved as f64 / self.keys as f64
        }
    }
}

/// Compares where each key goes in `before` and in `after`, by node name.
pub fn movement(before: &dyn Placement, after: &dyn Placement, keys: &KeySet) -> Movement {
    // Map each old node index to the new index of the same name, once, so the loop compares integers.
    let after_index: std::collections::HashMap<&str, usize> = after
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name(), i))
        .collect();
    let translate: Vec<Option<usize>> = before
        .nodes()
        .iter()
        .map(|n| after_index.get(n.name()).copied())
        .collect();

    let mut moved_pairs: BTreeMap<(Option<usize>, Option<usize>), u64> = BTreeMap::new();
    let mut movement = Movement::default();
    for key in keys.iter() {
        movement.keys += 1;
        let old = before.locate(key);
        let new = after.locate(key);
        if old.and_then(|i| translate[i]) != new || (old.is_none() && new.is_some()) {
            movement.moved += 1;
            *moved_pairs.entry((old, new)).or_default() += 1;
        }
    }
    for ((old, new), count) in moved_pairs {
        if let Some(i) = old {
            *movement
                .moved_from
                .entry(before.nodes()[i].name().to_string())
                .or_default() += count;
        }
        if let Some(i) = new {
            *movement
                .moved_to
                .entry(after.nodes()[i].name().to_string())
                .or_default() += count;
        }
    }
    movement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ring;

    #[test]
    fn synthetic_keys_are_the_documented_ones() {
        let keys = KeySet::synthetic(12);
        let v: Vec<&[u8]> = keys.iter().collect();
        assert_eq!(v[0], b"key:0");
        assert_eq!(v[11], b"key:11");
        assert_eq!(keys.len(), 12);
    }

    #[test]
    fn spread_of_an_empty_placement_is_zero() {
        let s = spread(&Ring::new(), &KeySet::synthetic(10));
        assert_eq!((s.mean, s.min, s.max, s.peak_to_mean), (0.0, 0, 0, 0.0));
    }

    #[test]
    fn spread_counts_every_key() {
        let ring = Ring::builder().nodes(["a", "b", "c"]).build().unwrap();
        let s = spread(&ring, &KeySet::synthetic(3000));
        assert_eq!(s.counts.iter().map(|c| c.1).sum::<u64>(), 3000);
        assert!((s.mean - 1000.0).abs() < 1e-9);
        assert!(s.peak_to_mean >= 1.0 && s.peak_to_mean < 1.5, "{s:?}");
    }

    #[test]
    fn weighted_spread_is_judged_against_weight() {
        let ring = Ring::builder()
            .node("a", 1.0)
            .node("b", 3.0)
            .build()
            .unwrap();
        let s = spread(&ring, &KeySet::synthetic(40_000));
        let b = s.counts.iter().find(|c| c.0 == "b").unwrap().1 as f64;
        assert!((b / 40_000.0 - 0.75).abs() < 0.06, "{s:?}");
        assert!(s.peak_to_mean < 1.2, "{s:?}");
    }

    #[test]
    fn movement_counts_by_name() {
        let before = Ring::builder().nodes(["a", "b", "c"]).build().unwrap();
        let mut after = before.clone();
        after.add("d", 1.0).unwrap();
        let m = movement(&before, &after, &KeySet::synthetic(10_000));
        assert!(m.moved > 0);
        assert_eq!(m.moved_to.keys().collect::<Vec<_>>(), vec!["d"]);
        assert_eq!(m.moved_to["d"], m.moved);
        let same = movement(&before, &before, &KeySet::synthetic(1000));
        assert_eq!(same.moved, 0);
    }
}
