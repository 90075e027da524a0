//! XXH3-64, from `xxhash-rust`: the library's default key hash.

/// XXH3-64 of `key` with seed 0.
#[inline]
pub fn xxh3_64(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors() {
        // xxHash's own sanity values for XXH3_64bits with seed 0.
        assert_eq!(xxh3_64(b""), 0x2D06_8005_38D3_94C2);
        assert_eq!(xxh3_64(b"a"), 0xE6C6_32B6_1E96_4E1F);
        assert_eq!(xxh3_64(b"abc"), 0x78AF_5F94_892F_3950);
    }
}
