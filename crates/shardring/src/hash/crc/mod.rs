//! CRC-32 (IEEE 802.3 polynomial, reflected; zlib's `crc32`), computed three ways by key length, all
//! giving zlib's value.
//!
//! A cache key is a few dozen bytes, and a ring lookup hashes one per call, so the short lengths
//! decide a CRC-32 ring's speed. `crc32fast` (the crate pingora-ketama hashes with) checks the CPU's
//! features and dispatches on every call, then folds 16 to 127 bytes with carry-less multiplies out of
//! line. Here:
//! - keys under 16 bytes go through slicing tables ([`tables`]): no block to multiply;
//! - keys of 16 to 127 bytes, on x86-64 CPUs with `pclmulqdq` (every x86-64 CPU since 2010), fold
//!   their 16-byte blocks with carry-less multiplies ([`clmul`]) and finish their last few bytes
//!   through the tables;
//! - longer keys, and CPUs without `pclmulqdq`, go to `crc32fast`, whose wider folds win there.
//!
//! Over 16-byte keys, at 1000 nodes × 160 points, cold pool, 2026-12-01:
//! - single ring lookups (`Ring::lookup_hash` after the hash): 12.8–13.0 ns through [`crc32`]
//!   against 13.1–13.6 through `crc32fast` (`bench/src/bin/lookup-floors.rs`, its CRC-32 rows, two
//!   runs); in criterion, `shardring-ring-crc32` took 11.5–11.6 ns a lookup with `crc32fast` or the
//!   tables alone and 10.7–11.4 since (`scripts/bench-report --quick`, BENCHMARKS.md). A cold lookup
//!   is bound by how many lookups the CPU keeps in flight, and the tables take about three times the
//!   instructions of the multiplies for a 16-byte key, so the fastest bare hash is not the fastest
//!   lookup. A multiply path specialised to exactly 16 bytes and inlined into the loop (a scratch
//!   experiment, not kept) took 8.0 ns; the general path here (the feature check, the length dispatch,
//!   and a call a `#[target_feature]` function cannot inline away) does not come near that;
//! - bare hashes in a loop, where nothing else waits: the tables are fastest up to 32 bytes (16 bytes
//!   3.1 ns, multiplies 5.0, `crc32fast` 5.7, through a function pointer in a scratch loop), the
//!   multiplies from 48 to 96 bytes (64 bytes 7.6 against 8.3 for `crc32fast`). So batches, which hash
//!   a chunk of keys in a loop of their own, take [`crc32_throughput`] (batched CRC-32 ring lookups
//!   9.3 → 6.7–6.9 ns, BENCHMARKS.md).

#[cfg(target_arch = "x86_64")]
mod clmul;
mod tables;

/// Keys at least this long, and shorter than [`LONG`], fold through [`clmul`] where the CPU has it.
#[cfg(target_arch = "x86_64")]
const BLOCK: usize = 16;

/// Keys this long or longer go to `crc32fast` (its fold by four blocks and its AVX-512 fold start at
/// 128 bytes).
const LONG: usize = 128;

/// CRC-32/ISO-HDLC of `key`, as zlib's `crc32(0, key, len)` computes it.
#[inline]
pub fn crc32(key: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if (BLOCK..LONG).contains(&key.len()) {
        if let Some(crc) = clmul::crc32(key) {
            return crc;
        }
    }
    if key.len() < LONG {
        tables::crc32(key)
    } else {
        crc32fast::hash(key)
    }
}

/// [`crc32`] for a loop that hashes many keys back to back and waits on nothing else, as the first
/// pass of `Ring::lookup_many`: keys up to [`THROUGHPUT_TABLES`] bytes go through the tables, whose
/// fifty-odd independent instructions keep the CPU busier than the multiplies' chain of dependent
/// ones (batched CRC-32 ring lookups, 1000 nodes, cold pool, criterion `--quick`: 6.7 ns a key with
/// the tables against 8.3 with the multiplies). The same values as [`crc32`].
#[inline(always)]
pub(crate) fn crc32_throughput(key: &[u8]) -> u32 {
    if key.len() <= THROUGHPUT_TABLES {
        tables::crc32(key)
    } else {
        crc32(key)
    }
}

/// The longest key [`crc32_throughput`] hashes through the tables: up to 32 bytes they take less
/// time a key than the multiplies in a loop of bare hashes (32 bytes: 5.5 against 6.3 ns; 48: 8.5
/// against 6.7; one-off loop through a function pointer over 2M random keys, 2026-12-01).
const THROUGHPUT_TABLES: usize = 32;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn published_vectors() {
        // The CRC catalogue's check value, and zlib's values for short strings.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"a"), 0xE8B7_BE43);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    /// Bytes that are not a repeating pattern, for keys of every length.
    fn bytes(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn every_length_matches_crc32fast_on_every_path() {
        let bytes = bytes(300);
        for len in 0..=bytes.len() {
            let key = &bytes[..len];
            let want = crc32fast::hash(key);
            assert_eq!(crc32(key), want, "{len} bytes");
            assert_eq!(tables::crc32(key), want, "{len} bytes, tables");
            assert_eq!(crc32_throughput(key), want, "{len} bytes, for throughput");
            #[cfg(target_arch = "x86_64")]
            if len >= BLOCK {
                let multiplies = clmul::crc32(key);
                let cpu_has_them = std::is_x86_feature_detected!("pclmulqdq")
                    && std::is_x86_feature_detected!("sse4.1");
                assert_eq!(multiplies.is_some(), cpu_has_them);
                if let Some(crc) = multiplies {
                    assert_eq!(crc, want, "{len} bytes, carry-less multiplies");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn matches_crc32fast(key in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(crc32(&key), crc32fast::hash(&key));
            prop_assert_eq!(tables::crc32(&key), crc32fast::hash(&key));
        }
    }
}
