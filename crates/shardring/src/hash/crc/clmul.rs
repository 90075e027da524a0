//! CRC-32 of keys of 16 to 127 bytes by carry-less multiplication (x86-64 `pclmulqdq`), after Gopal et
//! al., *Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction* (Intel, 2009): each
//! 16-byte block is folded into the next by multiplying it by a power of x modulo the polynomial,
//! then the last 128 bits are reduced to 64, to 32, and to the CRC by a Barrett reduction. The key's
//! last bytes (fewer than 16) continue through the tables from the CRC of its blocks.
//!
//! A fraction of the instructions the tables take for a 16-byte key; a cold ring lookup, bound by how
//! many lookups the CPU keeps in flight, gains a few percent from that (see the parent module).

#![allow(
    unsafe_code,
    reason = "carry-less multiplies exist only as target-feature intrinsics, and single CRC-32 ring \
              lookups are faster with them than with crc32fast (hash/crc/mod.rs says by how much)"
)]

use std::sync::atomic::{AtomicU8, Ordering};

use core::arch::x86_64::{
    __m128i, _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtsi32_si128, _mm_extract_epi32,
    _mm_loadu_si128, _mm_set_epi32, _mm_set_epi64x, _mm_srli_si128, _mm_xor_si128,
};

// The constants of the bit-reflected IEEE 802.3 polynomial, as the paper derives them (each a
// 33-bit remainder, bit-reflected and shifted left by one).
/// x^(128+32) mod P: folds a block's low 64 bits across one block.
const X160: i64 = 0x1_7519_97d0;
/// x^(128-32) mod P: folds its high 64 bits, and the first step of the 128-to-64-bit reduction.
const X96: i64 = 0x0_ccaa_009e;
/// x^64 mod P: the second step, 96 to 64 bits.
const X64: i64 = 0x1_63cd_6124;
/// P(x) itself, for the Barrett reduction.
const P: i64 = 0x1_db71_0641;
/// Barrett's μ = floor(x^64 / P(x)).
const MU: i64 = 0x1_f701_1641;

/// Whether this CPU has `pclmulqdq` and SSE4.1: [`UNKNOWN`] until the first call asks std.
static FEATURES: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const PRESENT: u8 = 1;
const ABSENT: u8 = 2;

/// The CRC-32 of `key`, which holds at least one 16-byte block; `None` when the CPU lacks
/// `pclmulqdq` or SSE4.1, and the caller takes another path.
#[inline(always)]
pub(super) fn crc32(key: &[u8]) -> Option<u32> {
    if !has_features() {
        return None;
    }
    let (blocks, rest) = key.as_chunks::<16>();
    let (first, blocks) = blocks.split_first()?;
    // SAFETY: `fold_blocks` needs `pclmulqdq` and SSE4.1 (SSE2 is in the x86-64 baseline), both
    // detected on this CPU by `has_features` (std's detection, remembered); it has no other
    // precondition.
    let crc = unsafe { fold_blocks(first, blocks) };
    Some(!super::tables::advance(!crc, rest))
}

/// Whether the CPU has what [`fold_blocks`] needs: one load and compare once known. std caches its own
/// answer too, but asking it for two features takes several more instructions, which a cold ring
/// lookup of a CRC-32 key (short, and bound by how many lookups are in flight) pays in time.
#[inline(always)]
fn has_features() -> bool {
    match FEATURES.load(Ordering::Relaxed) {
        PRESENT => true,
        ABSENT => false,
        _ => detect(),
    }
}

#[cold]
#[inline(never)]
fn detect() -> bool {
    let present =
        std::is_x86_feature_detected!("pclmulqdq") && std::is_x86_feature_detected!("sse4.1");
    FEATURES.store(if present { PRESENT } else { ABSENT }, Ordering::Relaxed);
    present
}

/// The CRC-32 of `first` followed by `blocks`.
#[target_feature(enable = "pclmulqdq,sse4.1")]
fn fold_blocks(first: &[u8; 16], blocks: &[[u8; 16]]) -> u32 {
    let fold_by_one = _mm_set_epi64x(X96, X160);
    // The CRC's initial value (all ones) enters as the first four bytes' complement.
    let mut x = _mm_xor_si128(load(first), _mm_cvtsi32_si128(-1));
    for block in blocks {
        x = _mm_xor_si128(
            load(block),
            _mm_xor_si128(
                _mm_clmulepi64_si128::<0x00>(x, fold_by_one),
                _mm_clmulepi64_si128::<0x11>(x, fold_by_one),
            ),
        );
    }
    // 128 bits to 96: the low 64 bits times x^96, plus the high 64.
    let x = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x10>(x, fold_by_one),
        _mm_srli_si128::<8>(x),
    );
    // 96 bits to 64: the low 32 bits times x^64, plus the rest.
    let low32 = _mm_set_epi32(0, 0, 0, -1);
    let x = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(_mm_and_si128(x, low32), _mm_set_epi64x(0, X64)),
        _mm_srli_si128::<4>(x),
    );
    // Barrett: T1 = (R mod x^32) · μ, T2 = (T1 mod x^32) · P, CRC = (R ^ T2) / x^32 (reflected: the
    // upper half of the low 64 bits).
    let p_mu = _mm_set_epi64x(MU, P);
    let t1 = _mm_clmulepi64_si128::<0x10>(_mm_and_si128(x, low32), p_mu);
    let t2 = _mm_clmulepi64_si128::<0x00>(_mm_and_si128(t1, low32), p_mu);
    !(_mm_extract_epi32::<1>(_mm_xor_si128(x, t2)) as u32)
}

/// The 16 bytes of `block` as a vector.
#[target_feature(enable = "sse2")]
fn load(block: &[u8; 16]) -> __m128i {
    // SAFETY: `block` is 16 readable bytes, and an unaligned load needs no alignment.
    unsafe { _mm_loadu_si128(block.as_ptr().cast()) }
}
