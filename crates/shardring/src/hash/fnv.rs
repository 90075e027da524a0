//! Fowler–Noll–Vo hashes, FNV-1 and FNV-1a, 32 and 64 bit.
//!
//! Written here rather than taken from a crate because they are five lines each and the crates in use
//! expose them through `std::hash::Hasher`, whose `write` of a slice is not specified to be byte-for-byte
//! the FNV stream for every type.

const OFFSET_32: u32 = 0x811c_9dc5;
const PRIME_32: u32 = 0x0100_0193;
const OFFSET_64: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME_64: u64 = 0x0000_0100_0000_01b3;

/// FNV-1, 32-bit: multiply, then xor each byte.
#[inline]
pub fn fnv1_32(key: &[u8]) -> u32 {
    key.iter()
        .fold(OFFSET_32, |h, &b| h.wrapping_mul(PRIME_32) ^ u32::from(b))
}

/// FNV-1a, 32-bit: xor each byte, then multiply.
#[inline]
pub fn fnv1a_32(key: &[u8]) -> u32 {
    key.iter()
        .fold(OFFSET_32, |h, &b| (h ^ u32::from(b)).wrapping_mul(PRIME_32))
}

/// FNV-1, 64-bit.
#[inline]
pub fn fnv1_64(key: &[u8]) -> u64 {
    key.iter()
        .fold(OFFSET_64, |h, &b| h.wrapping_mul(PRIME_64) ^ u64::from(b))
}

/// FNV-1a, 64-bit.
#[inline]
pub fn fnv1a_64(key: &[u8]) -> u64 {
    key.iter()
        .fold(OFFSET_64, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME_64))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors from the FNV reference test suite (Landon Curt Noll's `test_fnv.c`).
    #[test]
    fn published_vectors() {
        assert_eq!(fnv1_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
        assert_eq!(fnv1_32(b"foobar"), 0x31f0_b262);
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
        assert_eq!(fnv1_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1_64(b"a"), 0xaf63_bd4c_8601_b7be);
        assert_eq!(fnv1_64(b"foobar"), 0x340d_8765_a4dd_a9c2);
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
