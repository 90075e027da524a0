//! The migration plan between two rings: which hash ranges change owner.

use super::Ring;

/// A range of key hashes, `first..=last`, that one node owns before a change and another after it.
///
/// Keys whose hash falls in the range must be copied from `from` to `to` before the change takes effect
/// (or they are cache misses after it). A range never wraps: one that would is split at the top of the
/// circle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The first hash of the range.
    pub first: u32,
    /// The last hash of the range (inclusive).
    pub last: u32,
    /// The owner before the change; `None` if the old ring was empty.
    pub from: Option<String>,
    /// The owner after the change; `None` if the new ring is empty.
    pub to: Option<String>,
}

/// The plan from `old` to `new`, in hash order, adjacent ranges with the same owners merged.
pub(super) fn plan(old: &Ring, new: &Ring) -> Vec<Migration> {
    // Every boundary where either ring's owner may change: the points of both rings. Between two
    // consecutive boundaries b_prev < h <= b the owner in each ring is constant.
    let mut cuts: Vec<u32> = old
        .points
        .iter()
        .chain(&new.points)
        .map(|p| p.position)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();

    let owner = |ring: &Ring, h: u32| ring.lookup_hash(h).map(|n| n.name().to_string());
    let mut plan: Vec<Migration> = Vec::new();
    let mut push = |first: u32, last: u32, from: Option<String>, to: Option<String>| {
        if from == to {
            return;
        }
        if let Some(prev) = plan.last_mut() {
            if prev.from == from && prev.to == to && prev.last.checked_add(1) == Some(first) {
                prev.last = last;
                return;
            }
        }
        plan.push(Migration {
            first,
            last,
            from,
            to,
        });
    };

    if cuts.is_empty() {
        return Vec::new();
    }
    // Ranges (prev, cut] for consecutive cuts, with the range from 0 to the first cut first.
    let mut start = 0u32;
    for &cut in &cuts {
        push(start, cut, owner(old, cut), owner(new, cut));
        match cut.checked_add(1) {
            Some(next) => start = next,
            None => return plan,
        }
    }
    // Past the last cut (which is below u32::MAX here) every hash wraps to each ring's first point, which
    // is where a lookup of u32::MAX lands.
    push(start, u32::MAX, owner(old, u32::MAX), owner(new, u32::MAX));
    plan
}
