//! Measuring a placement: how evenly keys spread, and how many move when membership changes.
//!
//! Everything here works on any [`Placement`], so every algorithm is measured by the same code on the
//! same keys.

use std::collections::BTreeMap;

use crate::decimal::format_u64;
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
        let mut buf = [0u8; 20];
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

/// Passes over the keys [`report`] times lookups with (it keeps the fastest).
const TIMED_PASSES: usize = 3;

/// Keys placed per [`Placement::locate_many`] call by the measurements here.
pub const PLACE_BATCH: usize = 1024;

/// Places every key of `keys` with `placement` in batches of [`PLACE_BATCH`] (so a ring overlaps the
/// keys' cache misses; see [`Ring::lookup_many`](crate::Ring::lookup_many)), and calls `each` with every
/// key's index and owner, in order.
pub fn place_all(
    placement: &dyn Placement,
    keys: &KeySet,
    mut each: impl FnMut(usize, Option<usize>),
) {
    let mut batch: Vec<&[u8]> = Vec::with_capacity(PLACE_BATCH.min(keys.len()));
    let mut owners = vec![None; PLACE_BATCH.min(keys.len())];
    let mut first = 0;
    let mut flush = |batch: &mut Vec<&[u8]>, first: &mut usize| {
        let owners = &mut owners[..batch.len()];
        placement.locate_many(batch, owners);
        for (j, &owner) in owners.iter().enumerate() {
            each(*first + j, owner);
        }
        *first += batch.len();
        batch.clear();
    };
    for key in keys.iter() {
        batch.push(key);
        if batch.len() == PLACE_BATCH {
            flush(&mut batch, &mut first);
        }
    }
    if !batch.is_empty() {
        flush(&mut batch, &mut first);
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
    place_all(placement, keys, |_, owner| {
        if let Some(i) = owner {
            counts[i] += 1;
        }
    });
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

    // Where every key was, placed in batches; then where each is now, compared as it comes.
    let mut old_owners = Vec::with_capacity(keys.len());
    place_all(before, keys, |_, owner| old_owners.push(owner));
    let mut moved_pairs: BTreeMap<(Option<usize>, Option<usize>), u64> = BTreeMap::new();
    let mut movement = Movement::default();
    place_all(after, keys, |i, new| {
        let old = old_owners[i];
        movement.keys += 1;
        if old.and_then(|i| translate[i]) != new || (old.is_none() && new.is_some()) {
            movement.moved += 1;
            *moved_pairs.entry((old, new)).or_default() += 1;
        }
    });
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
    fn place_all_places_every_key_in_order_as_locate_does() {
        let ring = Ring::builder().nodes(["a", "b", "c"]).build().unwrap();
        for count in [0, 1, PLACE_BATCH - 1, PLACE_BATCH, 2 * PLACE_BATCH + 3] {
            let keys = KeySet::synthetic(count);
            let mut seen = Vec::new();
            place_all(&ring, &keys, |i, owner| seen.push((i, owner)));
            let want: Vec<(usize, Option<usize>)> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (i, ring.lookup_index(k)))
                .collect();
            assert_eq!(seen, want, "{count} keys");
        }
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

/// One algorithm measured on one key set: the row of `shardring analyze`.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// How many nodes the placement had.
    pub nodes: usize,
    /// How many keys were placed.
    pub keys: usize,
    /// The spread of the keys over the nodes.
    pub spread: Spread,
    /// Fraction of keys moved when one node was added.
    pub moved_on_add: f64,
    /// The least possible fraction for an add: 1/(N+1).
    pub ideal_on_add: f64,
    /// Whether every key that moved on add moved to the new node.
    pub add_moved_only_to_new: bool,
    /// Fraction of keys moved when one node (from the middle of the list) was removed.
    pub moved_on_remove: f64,
    /// The least possible fraction for a remove: 1/N.
    pub ideal_on_remove: f64,
    /// Whether every key that moved on remove had been on the removed node.
    pub remove_moved_only_its_keys: bool,
    /// Time to build the placement from the node list.
    pub build_time: std::time::Duration,
    /// Mean time of one single lookup ([`Placement::locate`]: hash + search), in nanoseconds, over one
    /// pass of the key set (the fastest of three): every key is read once a pass, so the keys are cold; the placement's structures
    /// stay cached only when they are small (see `memory_bytes`).
    pub lookup_ns: f64,
    /// As `lookup_ns`, placing the keys in batches of [`PLACE_BATCH`] with
    /// [`Placement::locate_many`].
    pub lookup_batch_ns: f64,
    /// Heap bytes of the lookup structures.
    pub memory_bytes: usize,
}

/// Builds a placement with `build`, measures its spread over `keys`, times its build and lookups, and
/// measures movement when the node `added` joins and when the middle node of the list leaves.
///
/// # Errors
/// Whatever `build` or the membership changes return.
pub fn report<F>(
    build: F,
    nodes: &[crate::Node],
    added: crate::Node,
    keys: &KeySet,
) -> Result<Report, crate::Error>
where
    F: Fn(&[crate::Node]) -> Result<Box<dyn Placement>, crate::Error>,
{
    use std::time::Instant;

    let started = Instant::now();
    let placement = build(nodes)?;
    let build_time = started.elapsed();

    // The best of a few passes, single and batched interleaved, so that a burst of other work on the
    // machine during one pass does not decide the figure.
    let per_key =
        |elapsed: std::time::Duration| elapsed.as_nanos() as f64 / keys.len().max(1) as f64;
    let (mut lookup_ns, mut lookup_batch_ns) = (f64::INFINITY, f64::INFINITY);
    let mut found = 0usize;
    for _ in 0..TIMED_PASSES {
        let started = Instant::now();
        for key in keys.iter() {
            found = found.wrapping_add(placement.locate(std::hint::black_box(key)).unwrap_or(0));
        }
        lookup_ns = lookup_ns.min(per_key(started.elapsed()));

        let started = Instant::now();
        place_all(
            placement.as_ref(),
            std::hint::black_box(keys),
            |_, owner| {
                found = found.wrapping_add(owner.unwrap_or(0));
            },
        );
        lookup_batch_ns = lookup_batch_ns.min(per_key(started.elapsed()));
    }
    std::hint::black_box(found);

    let spread = spread(placement.as_ref(), keys);

    let mut grown = placement.clone_box();
    let added_name = added.name().to_string();
    grown.add(added)?;
    let add = movement(placement.as_ref(), grown.as_ref(), keys);

    let (moved_on_remove, remove_moved_only_its_keys) = match nodes.get(nodes.len() / 2) {
        Some(victim) if nodes.len() > 1 => {
            let mut shrunk = placement.clone_box();
            shrunk.remove(victim.name())?;
            let remove = movement(placement.as_ref(), shrunk.as_ref(), keys);
            let only = remove.moved_from.keys().all(|n| n == victim.name());
            (remove.fraction(), only)
        }
        _ => (0.0, true),
    };
    let n = nodes.len().max(1) as f64;
    Ok(Report {
        algorithm: placement.algorithm(),
        nodes: nodes.len(),
        keys: keys.len(),
        spread,
        moved_on_add: add.fraction(),
        ideal_on_add: 1.0 / (n + 1.0),
        add_moved_only_to_new: add.moved_to.keys().all(|n| *n == added_name),
        moved_on_remove,
        ideal_on_remove: 1.0 / n,
        remove_moved_only_its_keys,
        build_time,
        lookup_ns,
        lookup_batch_ns,
        memory_bytes: placement.memory_bytes(),
    })
}
