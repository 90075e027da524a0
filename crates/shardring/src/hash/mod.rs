//! Deterministic key hashes.
//!
//! Every function here gives the same answer in every process, on every platform and in every release: two
//! clients that agree on the hash agree on where a key lives. Nothing is randomly seeded.
//!
//! The ring is a 32-bit circle, so every hash yields a `u32` through [`KeyHash::hash32`]. Hashes whose
//! native width is 64 bits are truncated to their low 32 bits there (as the C programs this library is
//! compatible with do when they store them in a `uint32_t`), and give their full value through
//! [`KeyHash::hash64`].
//!
//! | name | function | native width |
//! |---|---|---|
//! | `xxh3` | XXH3-64, seed 0 (the default) | 64 |
//! | `crc32` | CRC-32/ISO-HDLC (IEEE 802.3, zlib's `crc32`) | 32 |
//! | `fnv1-32`, `fnv1a-32` | FNV-1 and FNV-1a, 32-bit | 32 |
//! | `fnv1-64`, `fnv1a-64` | FNV-1 and FNV-1a, 64-bit | 64 |
//! | `murmur3` | MurmurHash3 x86_32, seed 0 | 32 |
//! | `md5` | MD5; the first four digest bytes read little-endian (ketama's convention) | 32 |
//! | `twemproxy:NAME` | twemproxy's twelve hashes, byte-exact ([`twemproxy`]; NAME as in its config) | 32 |
//! | `hashkit-murmur3` | libmemcached's `murmur3` ([`twemproxy::hashkit_murmur3`]) | 32 |
//! | `spymemcached:NAME` | spymemcached's `DefaultHashAlgorithm`s over Java strings ([`java`]) | 32 |

mod crc;
pub(crate) mod crc16;
mod fnv;
pub mod java;
mod md5;
pub(crate) mod murmur;
mod xxh;

/// twemproxy's twelve key hashes: they live with the rest of twemproxy's knowledge, in
/// [`crate::compat::twemproxy::hash`], and are found here too.
pub use crate::compat::twemproxy::hash as twemproxy;

use std::fmt;
use std::str::FromStr;

pub use self::crc::crc32;
pub(crate) use self::crc::crc32_throughput;
pub use self::crc16::{crc16_xmodem, crc16_xmodem_step};
pub use self::fnv::{fnv1_32, fnv1_64, fnv1a_32, fnv1a_64};
pub use self::java::JavaHash;
pub use self::md5::{md5_digest, md5_u32};
pub use self::murmur::murmur3_32;
pub use self::twemproxy::TwemproxyHash;
pub use self::xxh::xxh3_64;
pub(crate) use self::xxh::Xxh3Numbered;

use crate::Error;

/// A deterministic hash of a byte key onto the ring's 32-bit circle.
///
/// Implement it to bring your own hash; the built-in ones are the variants of [`HashFunction`].
pub trait KeyHash {
    /// The key's position on the 32-bit circle.
    fn hash32(&self, key: &[u8]) -> u32;

    /// A 64-bit hash of the key, for placements that want more bits (jump, rendezvous).
    ///
    /// By default this is [`hash32`](KeyHash::hash32) widened; 64-bit hashes override it with their full
    /// value.
    fn hash64(&self, key: &[u8]) -> u64 {
        u64::from(self.hash32(key))
    }
}

/// The built-in hash functions, selectable by name at run time.
///
/// `HashFunction::from_str` accepts the names of the table in the [module docs](self) (case-insensitive,
/// `_` and `-` alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HashFunction {
    /// XXH3-64 with seed 0: fast and well mixed. The default.
    #[default]
    Xxh3,
    /// CRC-32 (IEEE).
    Crc32,
    /// FNV-1, 32-bit.
    Fnv1_32,
    /// FNV-1a, 32-bit.
    Fnv1a32,
    /// FNV-1, 64-bit.
    Fnv1_64,
    /// FNV-1a, 64-bit.
    Fnv1a64,
    /// MurmurHash3 x86_32 with seed 0.
    Murmur3,
    /// MD5, first four digest bytes little-endian.
    Md5,
    /// One of twemproxy's twelve hashes, byte-exact with nutcracker (and with libmemcached's hashes of the
    /// same names). Named `twemproxy:NAME`.
    Twemproxy(TwemproxyHash),
    /// libmemcached's `murmur3`: MurmurHash3 x86_32 seeded with `0xdeadbeef × length`.
    HashkitMurmur3,
    /// One of spymemcached's hashes, over the key read as a Java string. Named `spymemcached:NAME`.
    Java(JavaHash),
}

impl HashFunction {
    /// Every built-in hash, in the order of the module docs' table.
    pub const ALL: &'static [HashFunction] = &[
        HashFunction::Xxh3,
        HashFunction::Crc32,
        HashFunction::Fnv1_32,
        HashFunction::Fnv1a32,
        HashFunction::Fnv1_64,
        HashFunction::Fnv1a64,
        HashFunction::Murmur3,
        HashFunction::Md5,
    ];

    /// The hash's name, as accepted by `from_str`.
    pub const fn name(self) -> &'static str {
        match self {
            HashFunction::Xxh3 => "xxh3",
            HashFunction::Crc32 => "crc32",
            HashFunction::Fnv1_32 => "fnv1-32",
            HashFunction::Fnv1a32 => "fnv1a-32",
            HashFunction::Fnv1_64 => "fnv1-64",
            HashFunction::Fnv1a64 => "fnv1a-64",
            HashFunction::Murmur3 => "murmur3",
            HashFunction::Md5 => "md5",
            HashFunction::Twemproxy(h) => h.qualified_name(),
            HashFunction::HashkitMurmur3 => "hashkit-murmur3",
            HashFunction::Java(h) => h.qualified_name(),
        }
    }

    fn known_names() -> String {
        let mut names: Vec<&str> = HashFunction::ALL.iter().map(|h| h.name()).collect();
        names.extend(TwemproxyHash::ALL.iter().map(|h| h.qualified_name()));
        names.push(HashFunction::HashkitMurmur3.name());
        names.extend(JavaHash::ALL.iter().map(|h| h.qualified_name()));
        names.join(", ")
    }
}

impl KeyHash for HashFunction {
    #[inline]
    fn hash32(&self, key: &[u8]) -> u32 {
        match self {
            HashFunction::Xxh3 => xxh3_64(key) as u32,
            HashFunction::Crc32 => crc32(key),
            HashFunction::Fnv1_32 => fnv1_32(key),
            HashFunction::Fnv1a32 => fnv1a_32(key),
            HashFunction::Fnv1_64 => fnv1_64(key) as u32,
            HashFunction::Fnv1a64 => fnv1a_64(key) as u32,
            HashFunction::Murmur3 => murmur3_32(key, 0),
            HashFunction::Md5 => md5_u32(key),
            HashFunction::Twemproxy(h) => h.hash32(key),
            HashFunction::HashkitMurmur3 => twemproxy::hashkit_murmur3(key),
            HashFunction::Java(h) => h.hash32(key),
        }
    }

    #[inline]
    fn hash64(&self, key: &[u8]) -> u64 {
        match self {
            HashFunction::Xxh3 => xxh3_64(key),
            HashFunction::Fnv1_64 => fnv1_64(key),
            HashFunction::Fnv1a64 => fnv1a_64(key),
            other => u64::from(other.hash32(key)),
        }
    }
}

impl fmt::Display for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HashFunction {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        if let Some(bare) = s.trim().strip_prefix("twemproxy:") {
            return bare
                .parse::<TwemproxyHash>()
                .map(HashFunction::Twemproxy)
                .map_err(|_| Error::UnknownHash {
                    name: s.to_string(),
                    known: HashFunction::known_names(),
                });
        }
        if let Some(bare) = s.trim().strip_prefix("spymemcached:") {
            return bare
                .parse::<JavaHash>()
                .map(HashFunction::Java)
                .map_err(|_| Error::UnknownHash {
                    name: s.to_string(),
                    known: HashFunction::known_names(),
                });
        }
        if s.trim().eq_ignore_ascii_case("hashkit-murmur3") {
            return Ok(HashFunction::HashkitMurmur3);
        }
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        let found = HashFunction::ALL.iter().copied().find(|h| {
            h.name() == wanted
                // Also accept the names without the dash before the width ("fnv1a32").
                || h.name().replace('-', "") == wanted.replace('-', "")
        });
        found.ok_or_else(|| Error::UnknownHash {
            name: s.to_string(),
            known: HashFunction::known_names(),
        })
    }
}

impl<H: KeyHash + ?Sized> KeyHash for &H {
    fn hash32(&self, key: &[u8]) -> u32 {
        (**self).hash32(key)
    }
    fn hash64(&self, key: &[u8]) -> u64 {
        (**self).hash64(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &h in HashFunction::ALL {
            assert_eq!(h.name().parse::<HashFunction>().unwrap(), h);
            assert_eq!(h.to_string().parse::<HashFunction>().unwrap(), h);
        }
        assert_eq!(
            "FNV1A_64".parse::<HashFunction>().unwrap(),
            HashFunction::Fnv1a64
        );
        assert_eq!(
            "fnv1a32".parse::<HashFunction>().unwrap(),
            HashFunction::Fnv1a32
        );
        for &t in TwemproxyHash::ALL {
            let h = HashFunction::Twemproxy(t);
            assert_eq!(h.name().parse::<HashFunction>().unwrap(), h);
        }
        assert_eq!(
            "hashkit-murmur3".parse::<HashFunction>().unwrap(),
            HashFunction::HashkitMurmur3
        );
        for &j in JavaHash::ALL {
            let h = HashFunction::Java(j);
            assert_eq!(h.name().parse::<HashFunction>().unwrap(), h);
        }
        let err = "sha1".parse::<HashFunction>().unwrap_err();
        assert!(err.to_string().contains("xxh3"), "{err}");
    }

    #[test]
    fn sixty_four_bit_hashes_truncate_to_low_bits() {
        let key = b"truncate me";
        assert_eq!(HashFunction::Xxh3.hash32(key), xxh3_64(key) as u32);
        assert_eq!(HashFunction::Fnv1a64.hash64(key), fnv1a_64(key));
        assert_eq!(HashFunction::Crc32.hash64(key), u64::from(crc32(key)));
    }
}
