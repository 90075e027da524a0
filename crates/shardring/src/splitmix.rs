//! SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014): the
//! standard tiny generator, deterministic and well mixed. JumpBackHash draws from it seeded with the
//! key; the proxy's `distribution: random` draws from a shared counter through [`SplitMix64::mix`].
//! Nothing here is for secrets.

/// The golden-ratio increment the state advances by.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    /// The generator's state, advanced by [`GOLDEN_GAMMA`] on every draw.
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed` (its first output is `mix(seed + GOLDEN_GAMMA)`).
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        SplitMix64::mix(self.state)
    }

    /// The output function alone: a state (already advanced) to its value. Lets a shared atomic counter
    /// stand in for the state.
    #[inline]
    pub fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference sequence for seed 0 (from the paper's Java `SplittableRandom` / Vigna's C code).
    #[test]
    fn matches_the_reference_sequence() {
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(g.next_u64(), 0x06c4_5d18_8009_454f);
    }
}
