//! spymemcached 2.12's `KetamaNodeLocator` (Java; what `KetamaConnectionFactory` and
//! `ConnectionFactoryBuilder.setLocatorType(CONSISTENT)` give).
//!
//! Read from the bytecode of Debian's `libspymemcached-java` 2.12.3 (`javap -c`), and proven on
//! `testdata/spymemcached/`, which that jar produced (`scripts/regen-golden/spymemcached.py`).
//!
//! - **Node keys.** The default key format (`KetamaNodeKeyFormatter.Format.SPYMEMCACHED`) is
//!   `String.valueOf(node.getSocketAddress())` with one leading `/` removed, and point names are
//!   `"{key}-{i}"`. Java prints an `InetSocketAddress` as `hostname/address:port`: an address made from
//!   a literal (`new InetSocketAddress("10.0.0.1", 11211)`) is `/10.0.0.1:11211`, so its key is
//!   `10.0.0.1:11211`; one made from a host name (`AddrUtil.getAddresses("cache1:11211")` resolves it)
//!   keeps the name, `cache1/10.0.0.1:11211`; an unresolved one is `cache1/<unresolved>:11211`
//!   (Java 14 and later); IPv6 is written in full, in brackets: `/[0:0:0:0:0:0:0:1]:11211` (Java 14 and
//!   later); an IPv4-mapped IPv6 address is an IPv4 address to Java. So **the same server has a
//!   different ring position depending on whether it was named by address or by host name**, and the
//!   node names given here must be the text Java prints (with or without the leading `/`): the
//!   [`java_address`] helpers write it.
//! - **Points.** Without weights and with `KETAMA_HASH` keys, each node gets `repetitions / 4` MD5
//!   digests (160 repetitions by default), four little-endian words each. With another key hash
//!   (`NATIVE_HASH`, `FNV1_32_HASH`, …) it gets `repetitions` points, that hash of each point name.
//!   With a weights map (`KetamaNodeLocator(nodes, alg, weights, config)`, non-empty) the count is
//!   ketama's weighted formula in single precision (as twemproxy's) and the points are MD5 whatever the
//!   key hash; equal weights in a map may therefore give 156 points where no map gives 160.
//! - **Lookups** take the first point at or after the key's hash, past the last the first (the
//!   `tailMap` / `firstKey` dance). **Ties**: points live in a `TreeMap`, and `put` overwrites, so of
//!   nodes sharing a point the one listed last wins.
//! - **Keys** are Java strings: bytes are read as `new String(bytes, UTF_8)` and hashed as
//!   [`JavaHash`] says (FNV and `NATIVE_HASH` over UTF-16 units).
//!
//! Where libmemcached's `CONSISTENT_KETAMA_SPY` ([`super::libmemcached`], `libmemcached-spy*`) differs
//! from real spymemcached 2.12 — the two never agree on a server named by address:
//!
//! | | libmemcached SPY | spymemcached 2.12 |
//! |---|---|---|
//! | point name | `/host:port-i` (with the `/`) | `host:port-i` for an address, `name/addr:port-i` for a host name |
//! | unweighted points | 100, hashed with the key hash (one_at_a_time) | 160: 40 MD5 digests × 4 (with `KETAMA_HASH`) |
//! | default key hash, unweighted | one_at_a_time | MD5 (`KETAMA_HASH`) |
//! | ties | the server added first | the server added last |
//!
//! libmemcached's point names keep the `/` that spymemcached's `toString()` text starts with and 2.12
//! strips, so even `libmemcached-spy-weighted` (MD5 points, MD5 keys, the same weighted count) gives a
//! server named by address other points than spymemcached does. `compat_spymemcached.rs` counts the
//! golden keys the two place differently.
//!
//! The other key format, `LIBMEMCACHED` ([`KeyFormat::Libmemcached`]: `getHostName()`, and `:port`
//! unless 11211, libmemcached's own point names), is offered by the builder and proven on the goldens of
//! servers named by host name; for an address given as a literal Java asks reverse DNS, which no one
//! can reproduce offline (the builder assumes the lookup fails). With it and a weights map,
//! spymemcached builds libmemcached's `KETAMA_WEIGHTED` continuum (ties excepted: libmemcached's first
//! server wins), so the two agree on every key that is valid UTF-8 (`compat_spymemcached.rs` checks it
//! on the goldens; Java reads other bytes as U+FFFD, libmemcached hashes them as they are).
//!
//! Not modelled: a `KetamaNodeLocatorConfiguration` that names nodes its own way, failover
//! (`getSequence`), and nodes missing from a weights map (a `NullPointerException` in Java).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use crate::hash::{HashFunction, JavaHash};
use crate::ring::PointScheme;
pub use crate::ring::SpymemcachedKeyFormat as KeyFormat;
use crate::{Error, Ring};

/// spymemcached's default node repetitions (`DefaultKetamaNodeLocatorConfiguration`).
pub const DEFAULT_REPETITIONS: u32 = 160;

/// Builds a [`Ring`] placing keys exactly as spymemcached's `KetamaNodeLocator` over these nodes.
///
/// ```
/// use shardring::compat::spymemcached::SpymemcachedBuilder;
///
/// let ring = SpymemcachedBuilder::new()
///     .node("/10.0.0.1:11211", 1)
///     .node("cache2/10.0.0.2:11211", 1)
///     .build()?;
/// assert_eq!(ring.point_count(), 320);
/// assert!(ring.lookup("user:42").is_some());
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SpymemcachedBuilder {
    /// The key hash (`DefaultHashAlgorithm`).
    hash: JavaHash,
    /// Whether a weights map is given; `None`: when some weight is not 1.
    weighted: Option<bool>,
    /// `getNodeRepetitions()`.
    repetitions: u32,
    /// `KetamaNodeKeyFormatter.Format`.
    key_format: KeyFormat,
    /// (InetSocketAddress text, weight) in list order.
    nodes: Vec<(String, u32)>,
}

impl Default for SpymemcachedBuilder {
    fn default() -> SpymemcachedBuilder {
        SpymemcachedBuilder::new()
    }
}

impl SpymemcachedBuilder {
    /// A builder with no nodes.
    pub fn new() -> SpymemcachedBuilder {
        SpymemcachedBuilder {
            hash: JavaHash::Ketama,
            weighted: None,
            repetitions: DEFAULT_REPETITIONS,
            key_format: KeyFormat::Spymemcached,
            nodes: Vec::new(),
        }
    }

    /// The key hash. By default, this is `KETAMA_HASH` (what `KetamaConnectionFactory` uses).
    pub fn hash(mut self, hash: JavaHash) -> SpymemcachedBuilder {
        self.hash = hash;
        self
    }

    /// Whether the locator was given a (non-empty) weights map. By default, this is true exactly when
    /// some node's weight is not 1 (spymemcached has no other way to weigh nodes); set it to build
    /// what a map of equal weights builds.
    pub fn weighted(mut self, yes: bool) -> SpymemcachedBuilder {
        self.weighted = Some(yes);
        self
    }

    /// Node repetitions (`KetamaNodeLocatorConfiguration.getNodeRepetitions()`). By default, this is
    /// 160.
    pub fn repetitions(mut self, repetitions: u32) -> SpymemcachedBuilder {
        self.repetitions = repetitions;
        self
    }

    /// The node key format (`KetamaNodeKeyFormatter.Format`). By default, this is
    /// [`KeyFormat::Spymemcached`], spymemcached's own default.
    pub fn key_format(mut self, format: KeyFormat) -> SpymemcachedBuilder {
        self.key_format = format;
        self
    }

    /// Adds a node by the text Java prints for its `InetSocketAddress` (`/10.0.0.1:11211`,
    /// `cache1/10.0.0.1:11211`, `cache1/<unresolved>:11211`; the leading `/` may be left out). The
    /// node is named by that text as given. List order is the order of these calls.
    pub fn node(mut self, address_text: impl Into<String>, weight: u32) -> SpymemcachedBuilder {
        self.nodes.push((address_text.into(), weight));
        self
    }

    /// Builds the ring.
    ///
    /// # Errors
    /// [`Error::InvalidWeight`] for weight 0, [`Error::DuplicateNode`], [`Error::EmptyName`],
    /// [`Error::InvalidSetting`] for fewer than 1 repetition (4 with MD5 points).
    pub fn build(self) -> Result<Ring, Error> {
        let weighted = self
            .weighted
            .unwrap_or_else(|| self.nodes.iter().any(|&(_, w)| w != 1));
        let md5_points = weighted || self.hash == JavaHash::Ketama;
        if self.repetitions == 0 || (md5_points && self.repetitions < 4) {
            return Err(Error::InvalidSetting {
                setting: "vnodes",
                reason: format!(
                    "spymemcached needs at least {} node repetitions here, got {}",
                    if md5_points { 4 } else { 1 },
                    self.repetitions
                ),
            });
        }
        self.nodes
            .into_iter()
            .fold(
                Ring::builder()
                    .point_scheme(PointScheme::Spymemcached {
                        weighted,
                        key_format: self.key_format,
                    })
                    .vnodes(self.repetitions)
                    .hash(HashFunction::Java(self.hash)),
                |b, (name, weight)| b.node(name, f64::from(weight)),
            )
            .build()
    }
}

/// The text Java prints for `new InetSocketAddress(address, port)` made from an address literal:
/// `/10.0.0.1:11211`, `/[0:0:0:0:0:0:0:1]:11211` (IPv6 in full, as Java 14 and later print it; an
/// IPv4-mapped address as IPv4, as Java parses it).
///
/// ```
/// use shardring::compat::spymemcached::java_address;
/// assert_eq!(java_address("10.0.0.1:11211".parse().unwrap()), "/10.0.0.1:11211");
/// assert_eq!(java_address("[::1]:11211".parse().unwrap()), "/[0:0:0:0:0:0:0:1]:11211");
/// ```
pub fn java_address(addr: SocketAddr) -> String {
    java_host_address(None, addr)
}

/// The text Java prints for an `InetSocketAddress` of host name `host` resolved to `addr`
/// (`cache1/10.0.0.1:11211`), or for `addr` alone when `host` is `None`.
pub fn java_host_address(host: Option<&str>, addr: SocketAddr) -> String {
    let mut out = String::from(host.unwrap_or(""));
    out.push('/');
    let ip = match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    match (ip, addr) {
        (IpAddr::V4(v4), _) => {
            let _ = write!(out, "{v4}");
        }
        (IpAddr::V6(v6), a) => {
            // Inet6Address.getHostAddress: eight groups in lower-case hex, none omitted, then the
            // scope id.
            out.push('[');
            for (k, seg) in v6.segments().iter().enumerate() {
                if k > 0 {
                    out.push(':');
                }
                let _ = write!(out, "{seg:x}");
            }
            if let SocketAddr::V6(a6) = a {
                if a6.scope_id() != 0 {
                    let _ = write!(out, "%{}", a6.scope_id());
                }
            }
            out.push(']');
        }
    }
    let _ = write!(out, ":{}", addr.port());
    out
}

/// The text Java prints for `InetSocketAddress.createUnresolved(host, port)` (Java 14 and later):
/// `cache1/<unresolved>:11211`.
pub fn java_unresolved(host: &str, port: u16) -> String {
    format!("{host}/<unresolved>:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_print_as_java_prints_them() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(java_address(a("10.0.0.4:11211")), "/10.0.0.4:11211");
        assert_eq!(
            java_address(a("[fe80::1:2]:11212")),
            "/[fe80:0:0:0:0:0:1:2]:11212"
        );
        assert_eq!(
            java_address(a("[::ffff:10.0.0.9]:11211")),
            "/10.0.0.9:11211"
        );
        assert_eq!(
            java_host_address(Some("cache1"), a("10.0.0.1:11211")),
            "cache1/10.0.0.1:11211"
        );
        assert_eq!(
            java_unresolved("cache3", 11211),
            "cache3/<unresolved>:11211"
        );
    }

    #[test]
    fn the_leading_slash_does_not_change_the_points() {
        let build = |names: [&str; 2]| {
            SpymemcachedBuilder::new()
                .node(names[0], 1)
                .node(names[1], 1)
                .build()
                .unwrap()
        };
        let with = build(["/10.0.0.1:11211", "/10.0.0.2:11211"]);
        let without = build(["10.0.0.1:11211", "10.0.0.2:11211"]);
        assert_eq!(with.point_count(), 320);
        for i in 0..1000 {
            let key = format!("key{i}");
            let a = with.lookup(&key).unwrap().name();
            assert_eq!(&a[1..], without.lookup(&key).unwrap().name(), "{key}");
        }
    }

    #[test]
    fn too_few_repetitions_are_refused() {
        assert!(SpymemcachedBuilder::new()
            .repetitions(3)
            .node("a:1", 1)
            .build()
            .is_err());
        assert!(SpymemcachedBuilder::new()
            .hash(JavaHash::Native)
            .repetitions(1)
            .node("a:1", 1)
            .build()
            .is_ok());
    }
}
