//! How a node's name becomes its points on the circle.

use crate::hash::{HashFunction, KeyHash};
use crate::Node;

/// The rule that turns a node into its positions on the 32-bit circle.
///
/// Compatibility modes (ketama and friends) add their own variants; every variant is deterministic and
/// depends only on the node, the ring's key hash and its points per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PointScheme {
    /// The library's own scheme. A node of weight `w` gets `max(1, round(vnodes × w))` points; point `i`
    /// (counting from 0) sits at `hash32("{name}-{i}")`, with the ring's key hash and `i` in decimal.
    ///
    /// A node's points depend on nothing but its own name and weight, so adding, removing or re-weighting
    /// one node never moves another node's points; and since point `i` does not depend on the count,
    /// raising a node's weight keeps its old points and adds new ones (keys only move *to* it).
    Plain,
}

/// What a scheme may look at when it places a node's points.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SchemeInput {
    /// Points per node of weight 1.
    pub vnodes: u32,
    /// The ring's key hash.
    pub hash: HashFunction,
}

impl PointScheme {
    /// How many points `node` gets.
    pub(crate) fn point_count(self, node: &Node, input: SchemeInput) -> u64 {
        match self {
            PointScheme::Plain => {
                let wanted = (f64::from(input.vnodes) * node.weight()).round();
                // `as` saturates for floats beyond u64's range; the caller checks the limit.
                (wanted as u64).max(1)
            }
        }
    }

    /// Appends `count` positions of `node` to `out`.
    pub(crate) fn positions(self, node: &Node, count: u64, input: SchemeInput, out: &mut Vec<u32>) {
        self.for_each_position(node, count, input, |p| out.push(p));
    }

    /// Calls `f` with each of the `count` positions of `node`, in point order.
    #[inline]
    pub(crate) fn for_each_position(
        self,
        node: &Node,
        count: u64,
        input: SchemeInput,
        f: impl FnMut(u32),
    ) {
        match self {
            PointScheme::Plain => match input.hash {
                // The default hash gets its own copy of the loop, without a dispatch per point.
                HashFunction::Xxh3 => plain(
                    node.name(),
                    count,
                    |key| crate::hash::xxh3_64(key) as u32,
                    f,
                ),
                other => plain(node.name(), count, |key| other.hash32(key), f),
            },
        }
    }
}

/// Point names formatted per batch before any of them is hashed.
const BATCH: usize = 64;

/// The plain scheme's positions: `hash("{name}-{i}")` for `i` in `0..count`.
///
/// The names of a batch of points are written first and hashed after: hashing a name right after
/// writing its last digits makes the hash's 8-byte loads wait for those byte stores (a failed
/// store-to-load forward), which used to cost more than the hash itself.
#[inline(always)]
fn plain(name: &str, count: u64, hash: impl Fn(&[u8]) -> u32, mut f: impl FnMut(u32)) {
    let prefix = name.len() + 1;
    let stride = prefix + 20;
    let slots = (count as usize).clamp(1, BATCH);
    let mut buf = vec![0u8; slots * stride];
    for slot in buf.chunks_exact_mut(stride) {
        slot[..name.len()].copy_from_slice(name.as_bytes());
        slot[name.len()] = b'-';
    }
    let mut lens = [0usize; BATCH];
    let mut i = 0u64;
    while i < count {
        let n = ((count - i) as usize).min(slots);
        for (k, len) in lens[..n].iter_mut().enumerate() {
            let slot = &mut buf[k * stride..(k + 1) * stride];
            *len = prefix + write_decimal(&mut slot[prefix..], i + k as u64);
        }
        for (k, &len) in lens[..n].iter().enumerate() {
            f(hash(&buf[k * stride..k * stride + len]));
        }
        i += n as u64;
    }
}

/// "00", "01", … "99": two digits per lookup.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `n` in decimal at the start of `out` (at least 20 bytes) and returns its length. Point
/// numbers are almost always below 1000, which take one branch and at most two stores.
#[inline]
fn write_decimal(out: &mut [u8], n: u64) -> usize {
    let pair = |k: u64| {
        let k = 2 * k as usize;
        [PAIRS[k], PAIRS[k + 1]]
    };
    if n < 10 {
        out[0] = b'0' + n as u8;
        1
    } else if n < 100 {
        out[..2].copy_from_slice(&pair(n));
        2
    } else if n < 1000 {
        out[0] = b'0' + (n / 100) as u8;
        out[1..3].copy_from_slice(&pair(n % 100));
        3
    } else {
        let mut len = 1;
        let mut rest = n / 10;
        while rest > 0 {
            len += 1;
            rest /= 10;
        }
        let mut n = n;
        for d in out[..len].iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_suffixes_format_like_display() {
        let mut out = [0u8; 20];
        for n in (0..100_000u64).chain([u64::MAX, 10_000_000_000]) {
            let len = write_decimal(&mut out, n);
            assert_eq!(&out[..len], n.to_string().as_bytes());
        }
    }

    #[test]
    fn batches_give_every_point_in_order() {
        let node = Node::new("10.0.0.1:11211").unwrap();
        let input = SchemeInput {
            vnodes: 1,
            hash: HashFunction::Crc32,
        };
        for count in [0u64, 1, 63, 64, 65, 200] {
            let mut got = Vec::new();
            PointScheme::Plain.positions(&node, count, input, &mut got);
            let want: Vec<u32> = (0..count)
                .map(|i| crate::hash::crc32(format!("10.0.0.1:11211-{i}").as_bytes()))
                .collect();
            assert_eq!(got, want);
        }
    }
}
