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
//! Over 16-byte keys, at 1000 nodes × 160 points, cold pool, single ring lookups (`Ring::lookup_hash`
//! after the hash) are a few percent faster through [`crc32`] than through `crc32fast` (BENCHMARKS.md,
//! "lookup-floors", its CRC-32 rows). A cold lookup is bound by how many lookups the CPU keeps in
//! flight, and the tables take several times the instructions of the multiplies for a 16-byte key, so
//! the fastest bare hash is not the fastest lookup: over the cold pool the bare hash alone is no faster
//! than `crc32fast`'s (BENCHMARKS.md, the bare-hash table, `crc32 (shardring)` against
//! `crc32 (crc32fast)`). In a loop of bare hashes, where nothing else waits, the tables win for short
//! keys, so batches, which hash a chunk of keys in a loop of their own, take [`crc32_throughput`]
//! (BENCHMARKS.md, `shardring-ring-crc32` batched).

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
/// many independent instructions keep the CPU busier than the multiplies' chain of dependent
/// ones (batched CRC-32 ring lookups measured faster with the tables when this was written). The same
/// values as [`crc32`].
#[inline(always)]
pub(crate) fn crc32_throughput(key: &[u8]) -> u32 {
    if key.len() <= THROUGHPUT_TABLES {
        tables::crc32(key)
    } else {
        crc32(key)
    }
}

/// The longest key [`crc32_throughput`] hashes through the tables: up to 32 bytes they took less
/// time a key than the multiplies in a loop of bare hashes, and from 48 bytes more (a one-off loop
/// when this was written; no kept command times the two paths apart).
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
