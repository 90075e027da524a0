//! Which backend a key goes to: FNV-1a 64 modulo the backend count. Placement quality is not what this
//! experiment measures; a hash that spreads keys evenly over the backends is all the data path needs.

/// The index in `0..backends` of the backend serving `key`; `backends` must be non-zero.
pub fn backend_for(key: &[u8], backends: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % backends.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_over_every_backend() {
        let mut counts = [0usize; 4];
        for i in 0..10_000 {
            counts[backend_for(format!("memload:{i:08}").as_bytes(), 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 2000), "{counts:?}");
    }
}
