//! CRC-32 (IEEE 802.3 polynomial, reflected; zlib's `crc32`), from `crc32fast`.

/// CRC-32/ISO-HDLC of `key`, as zlib's `crc32(0, key, len)` computes it.
#[inline]
pub fn crc32(key: &[u8]) -> u32 {
    crc32fast::hash(key)
}

#[cfg(test)]
mod tests {
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
}
