//! spymemcached's key hashes (`net.spy.memcached.DefaultHashAlgorithm`, spymemcached 2.12), byte-exact.
//!
//! Java hashes a `String`, not bytes, so a byte key is first read as Java's `new String(bytes, UTF_8)`
//! reads it: valid UTF-8 as written, each malformed sequence as one U+FFFD (the replacement Rust's
//! `from_utf8_lossy` makes too, checked against Java on the golden keys with invalid bytes). Then:
//!
//! | name | spymemcached | what it hashes |
//! |---|---|---|
//! | `KETAMA_HASH` | MD5, first four digest bytes little-endian | the string's UTF-8 bytes |
//! | `NATIVE_HASH` | `String.hashCode()` (`s[0]·31^(n-1) + …` over UTF-16 units), as 32 unsigned bits | UTF-16 units |
//! | `FNV1_32_HASH`, `FNV1A_32_HASH` | FNV-1 and FNV-1a, 32-bit | UTF-16 units (`charAt`), each xored whole |
//! | `FNV1_64_HASH`, `FNV1A_64_HASH` | FNV-1 and FNV-1a, 64-bit, cut to the low 32 bits | UTF-16 units |
//! | `CRC_HASH` | `(crc32 >> 16) & 0x7fff`: 15 bits | the string's UTF-8 bytes |
//!
//! For ASCII keys the FNV variants equal the byte-wise ones; for any other character they do not
//! (spymemcached xors a whole 16-bit unit where a byte-wise FNV takes its UTF-8 bytes one by one).
//! None of these allocate: the key is decoded as it is hashed.

use std::fmt;
use std::str::FromStr;

use md5::{Digest, Md5};

use crate::Error;

/// One of spymemcached's `DefaultHashAlgorithm`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JavaHash {
    /// `KETAMA_HASH`: MD5 of the UTF-8 bytes, first word little-endian. spymemcached's ketama default.
    Ketama,
    /// `NATIVE_HASH`: `String.hashCode()`.
    Native,
    /// `FNV1_32_HASH`.
    Fnv1_32,
    /// `FNV1A_32_HASH`.
    Fnv1a32,
    /// `FNV1_64_HASH`, low 32 bits.
    Fnv1_64,
    /// `FNV1A_64_HASH`, low 32 bits.
    Fnv1a64,
    /// `CRC_HASH`: 15 bits of CRC-32.
    Crc,
}

impl JavaHash {
    /// Every hash, in `DefaultHashAlgorithm`'s order but with the ketama default first.
    pub const ALL: &'static [JavaHash] = &[
        JavaHash::Ketama,
        JavaHash::Native,
        JavaHash::Fnv1_32,
        JavaHash::Fnv1a32,
        JavaHash::Fnv1_64,
        JavaHash::Fnv1a64,
        JavaHash::Crc,
    ];

    /// spymemcached's name for it (`KETAMA_HASH`, …).
    pub const fn name(self) -> &'static str {
        match self {
            JavaHash::Ketama => "KETAMA_HASH",
            JavaHash::Native => "NATIVE_HASH",
            JavaHash::Fnv1_32 => "FNV1_32_HASH",
            JavaHash::Fnv1a32 => "FNV1A_32_HASH",
            JavaHash::Fnv1_64 => "FNV1_64_HASH",
            JavaHash::Fnv1a64 => "FNV1A_64_HASH",
            JavaHash::Crc => "CRC_HASH",
        }
    }

    /// The name as [`HashFunction`](crate::HashFunction) spells it: `spymemcached:KETAMA_HASH`, ….
    pub const fn qualified_name(self) -> &'static str {
        match self {
            JavaHash::Ketama => "spymemcached:KETAMA_HASH",
            JavaHash::Native => "spymemcached:NATIVE_HASH",
            JavaHash::Fnv1_32 => "spymemcached:FNV1_32_HASH",
            JavaHash::Fnv1a32 => "spymemcached:FNV1A_32_HASH",
            JavaHash::Fnv1_64 => "spymemcached:FNV1_64_HASH",
            JavaHash::Fnv1a64 => "spymemcached:FNV1A_64_HASH",
            JavaHash::Crc => "spymemcached:CRC_HASH",
        }
    }

    /// The hash of `key` read as a Java string, as `DefaultHashAlgorithm.hash(String)` returns it.
    pub fn hash32(self, key: &[u8]) -> u32 {
        match self {
            JavaHash::Ketama => {
                let mut md5 = Md5::new();
                utf8_lossy_bytes(key, |b| md5.update(b));
                let d: [u8; 16] = md5.finalize().into();
                u32::from_le_bytes([d[0], d[1], d[2], d[3]])
            }
            JavaHash::Crc => {
                let mut crc = crc32fast::Hasher::new();
                utf8_lossy_bytes(key, |b| crc.update(b));
                (crc.finalize() >> 16) & 0x7fff
            }
            JavaHash::Native => {
                let mut h = 0u32;
                utf16_units(key, |u| h = h.wrapping_mul(31).wrapping_add(u32::from(u)));
                h
            }
            JavaHash::Fnv1_32 => {
                let mut h = FNV_32_INIT;
                utf16_units(key, |u| h = h.wrapping_mul(FNV_32_PRIME) ^ u32::from(u));
                h
            }
            JavaHash::Fnv1a32 => {
                let mut h = FNV_32_INIT;
                utf16_units(key, |u| h = (h ^ u32::from(u)).wrapping_mul(FNV_32_PRIME));
                h
            }
            JavaHash::Fnv1_64 => {
                let mut h = FNV_64_INIT;
                utf16_units(key, |u| h = h.wrapping_mul(FNV_64_PRIME) ^ u64::from(u));
                h as u32
            }
            JavaHash::Fnv1a64 => {
                let mut h = FNV_64_INIT;
                utf16_units(key, |u| h = (h ^ u64::from(u)).wrapping_mul(FNV_64_PRIME));
                h as u32
            }
        }
    }
}

const FNV_32_INIT: u32 = 2_166_136_261;
const FNV_32_PRIME: u32 = 16_777_619;
const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 1_099_511_628_211;

/// The UTF-8 encoding of `new String(key, UTF_8)`, in pieces: the valid runs as they are, and
/// U+FFFD's three bytes for each malformed sequence.
fn utf8_lossy_bytes(key: &[u8], mut f: impl FnMut(&[u8])) {
    for chunk in key.utf8_chunks() {
        f(chunk.valid().as_bytes());
        if !chunk.invalid().is_empty() {
            f("\u{FFFD}".as_bytes());
        }
    }
}

/// The UTF-16 code units of `new String(key, UTF_8)`, what Java's `charAt` walks.
fn utf16_units(key: &[u8], mut f: impl FnMut(u16)) {
    for chunk in key.utf8_chunks() {
        chunk.valid().encode_utf16().for_each(&mut f);
        if !chunk.invalid().is_empty() {
            f(0xFFFD);
        }
    }
}

impl fmt::Display for JavaHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for JavaHash {
    type Err = Error;

    /// spymemcached's names, case-insensitive, with or without `_HASH` (`KETAMA_HASH`, `ketama`,
    /// `fnv1a_32`, `native`, …); `-` and `_` alike.
    fn from_str(s: &str) -> Result<JavaHash, Error> {
        let wanted = s.trim().to_ascii_uppercase().replace('-', "_");
        let bare = wanted.strip_suffix("_HASH").unwrap_or(&wanted);
        JavaHash::ALL
            .iter()
            .copied()
            .find(|h| h.name().strip_suffix("_HASH") == Some(bare))
            .ok_or_else(|| Error::UnknownHash {
                name: s.to_string(),
                known: JavaHash::ALL
                    .iter()
                    .map(|h| h.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `String.hashCode` of a few strings, as Java prints them (`"abc".hashCode()` is 96354).
    #[test]
    fn native_is_string_hash_code() {
        assert_eq!(JavaHash::Native.hash32(b""), 0);
        assert_eq!(JavaHash::Native.hash32(b"abc"), 96354);
        // "hello world".hashCode() = 1794106052; "polygenelubricants".hashCode() = Integer.MIN_VALUE.
        assert_eq!(JavaHash::Native.hash32(b"hello world"), 1_794_106_052);
        assert_eq!(JavaHash::Native.hash32(b"polygenelubricants"), 0x8000_0000);
        // U+1F600 is two UTF-16 units, 0xD83D 0xDE00: 0xD83D·31 + 0xDE00.
        assert_eq!(
            JavaHash::Native.hash32("😀".as_bytes()),
            0xD83D * 31 + 0xDE00
        );
    }

    #[test]
    fn fnv_of_ascii_equals_the_byte_wise_fnv() {
        for key in [&b""[..], b"a", b"user:42", b"10.0.0.1:11211-7"] {
            assert_eq!(JavaHash::Fnv1_32.hash32(key), crate::hash::fnv1_32(key));
            assert_eq!(JavaHash::Fnv1a32.hash32(key), crate::hash::fnv1a_32(key));
            assert_eq!(
                JavaHash::Fnv1_64.hash32(key),
                crate::hash::fnv1_64(key) as u32
            );
            assert_eq!(
                JavaHash::Fnv1a64.hash32(key),
                crate::hash::fnv1a_64(key) as u32
            );
            assert_eq!(JavaHash::Ketama.hash32(key), crate::hash::md5_u32(key));
        }
        // "é" is one UTF-16 unit 0xE9 but two UTF-8 bytes.
        assert_ne!(
            JavaHash::Fnv1a32.hash32("é".as_bytes()),
            crate::hash::fnv1a_32("é".as_bytes())
        );
        assert_eq!(
            JavaHash::Fnv1a32.hash32("é".as_bytes()),
            (FNV_32_INIT ^ 0xE9).wrapping_mul(FNV_32_PRIME)
        );
    }

    #[test]
    fn malformed_utf8_reads_as_replacement_characters() {
        let lossy = String::from_utf8_lossy(b"a\xffb\xe0\x80c").into_owned();
        for h in JavaHash::ALL {
            assert_eq!(
                h.hash32(b"a\xffb\xe0\x80c"),
                h.hash32(lossy.as_bytes()),
                "{h}"
            );
        }
    }

    #[test]
    fn names_parse() {
        for &h in JavaHash::ALL {
            assert_eq!(h.name().parse::<JavaHash>().unwrap(), h);
        }
        assert_eq!("ketama".parse::<JavaHash>().unwrap(), JavaHash::Ketama);
        assert_eq!("fnv1a-32".parse::<JavaHash>().unwrap(), JavaHash::Fnv1a32);
        assert!("md5".parse::<JavaHash>().is_err());
    }
}
