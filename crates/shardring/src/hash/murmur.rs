//! MurmurHash3, x86_32 variant (Austin Appleby's `MurmurHash3_x86_32`).
//!
//! Written here: it is short, and the crates that offer it either read through `std::io::Read` or pull in
//! more than this one function. Checked against the reference implementation's published values below.

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

/// MurmurHash3_x86_32 of `key` with `seed`. Blocks are read little-endian, as on the reference's x86.
#[inline]
pub fn murmur3_32(key: &[u8], seed: u32) -> u32 {
    let mut h = seed;
    let mut blocks = key.chunks_exact(4);
    for block in &mut blocks {
        let k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        h ^= mix_k(k);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let k = tail_le(tail);
        h ^= mix_k(k);
    }
    h ^= key.len() as u32;
    fmix32(h)
}

/// The 1–3 bytes left after the 4-byte blocks, read little-endian into a `u32`: the tail step shared by
/// MurmurHash3 and twemproxy's MurmurHash2 (both C versions do it with a fall-through switch).
#[inline]
pub(crate) fn tail_le(tail: &[u8]) -> u32 {
    tail.iter()
        .rev()
        .fold(0u32, |acc, &b| (acc << 8) | u32::from(b))
}

#[inline]
fn mix_k(k: u32) -> u32 {
    k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
}

#[inline]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values of the reference MurmurHash3_x86_32 (widely republished, e.g. in SMHasher's verification
    // discussions and Wikipedia's example section).
    #[test]
    fn published_vectors() {
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514E_28B7);
        assert_eq!(murmur3_32(b"", 0xffff_ffff), 0x81F1_6F39);
        assert_eq!(murmur3_32(b"\0\0\0\0", 0), 0x2362_F9DE);
        assert_eq!(murmur3_32(b"aaaa", 0x9747_b28c), 0x5A97_808A);
        assert_eq!(murmur3_32(b"aaa", 0x9747_b28c), 0x283E_0130);
        assert_eq!(murmur3_32(b"aa", 0x9747_b28c), 0x5D21_1726);
        assert_eq!(murmur3_32(b"a", 0x9747_b28c), 0x7FA0_9EA6);
        assert_eq!(murmur3_32(b"abcd", 0x9747_b28c), 0xF047_8627);
        assert_eq!(murmur3_32(b"Hello, world!", 0x9747_b28c), 0x2488_4CBA);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0x9747_b28c),
            0x2FA8_26CD
        );
    }
}
