//! libmemcached 1.1 (libhashkit): the four ketama continua and their key hashes.
//!
//! | mode | how libmemcached is set up | points per server | point string | point hash | default key hash |
//! |---|---|---|---|---|---|
//! | [`Ketama`](LibmemcachedMode::Ketama) | `MEMCACHED_BEHAVIOR_KETAMA` = 1 | 100 | `host-i`, or `host:port-i` unless port 11211 | the key hash | `default` (one_at_a_time) |
//! | [`KetamaWeighted`](LibmemcachedMode::KetamaWeighted) | `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` = 1 | `floor(w/W·40·n)·4` | as above | MD5, 4 points a digest | `md5` |
//! | [`Spy`](LibmemcachedMode::Spy) | `MEMCACHED_BEHAVIOR_DISTRIBUTION` = `CONSISTENT_KETAMA_SPY` | 100 | `/host:port-i` | the key hash | `default` |
//! | [`SpyWeighted`](LibmemcachedMode::SpyWeighted) | `KETAMA_WEIGHTED` = 1, then distribution `CONSISTENT_KETAMA_SPY` | `floor(w/W·40·n)·4` | `/host:port-i` | MD5, 4 points a digest | `md5` |
//!
//! What the program does and its documentation does not say:
//! - In the unweighted modes the *key* hash (`MEMCACHED_BEHAVIOR_HASH`) also places the points, so changing
//!   the key hash moves the servers too; `MEMCACHED_BEHAVIOR_KETAMA_HASH` changes nothing there.
//! - `MEMCACHED_BEHAVIOR_KETAMA` alone leaves the key hash at `default` (one_at_a_time), not MD5;
//!   `KETAMA_WEIGHTED` switches the key hash to MD5.
//! - **Weighting switches itself on.** Adding a server of weight > 1 (`memcached_server_add_with_weight`
//!   under a consistent distribution, or `memcached_server_push` always) sets the weighted flag, so
//!   [`Ketama`](LibmemcachedMode::Ketama) and [`Spy`](LibmemcachedMode::Spy) over servers of unequal
//!   weight build the weighted continuum — while keeping their key hash (one_at_a_time by default). This
//!   builder does the same: any weight above 1 makes the continuum weighted.
//! - The continuum is built when a server is added or the distribution is set, with the key hash set at
//!   that moment; a key hash set later (`MEMCACHED_BEHAVIOR_HASH`) changes the keys' hash but not the
//!   points of the unweighted modes. This builder models the usual order: behaviors first, then servers.
//! - The weighted point count is computed in single precision, so servers of equal weight may get 156
//!   points instead of 160.
//! - Debian's libhashkit is built without `hsieh` (it hashes every key to the same value), so that hash is
//!   not offered here.
//! - With one server every key goes to it without hashing (as any ring of one node does here).
//! - When points of two servers collide (common with the 15-bit `crc` hash), the server added first
//!   owns the point; the ring follows the order of [`LibmemcachedBuilder::server`] calls.
//! - The SPY modes are libmemcached's idea of Java's spymemcached: points of `/host:port-i`, with the
//!   host as given to libmemcached. libmemcached's own comment says spymemcached writes
//!   `hostname/ip:port-index` (or `/ip:port-index` without a host name), so the two can agree only for
//!   some ways of naming servers. These modes are proven against libmemcached. Real spymemcached 2.12
//!   differs (no leading `/`, 160 MD5 points, last-listed wins ties): see [`super::spymemcached`], which
//!   is proven against the Java library.
//!
//! Proven on `testdata/libmemcached/` (made by `scripts/regen-golden/libmemcached.py` with a small C
//! program calling `memcached_generate_hash`).

use std::fmt;
use std::str::FromStr;

use crate::hash::{HashFunction, TwemproxyHash};
use crate::ring::PointScheme;
use crate::{Error, Ring};

/// Which of libmemcached's ketama distributions to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LibmemcachedMode {
    /// `MEMCACHED_BEHAVIOR_KETAMA`: unweighted, 100 points per server hashed with the key hash.
    Ketama,
    /// `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`: weighted, MD5 points, MD5 keys by default.
    KetamaWeighted,
    /// `MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY`, unweighted.
    Spy,
    /// `MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY` after `KETAMA_WEIGHTED`: libmemcached's rendering
    /// of spymemcached's ketama.
    SpyWeighted,
}

impl LibmemcachedMode {
    /// The name `shardring lookup --compat` takes.
    pub const fn name(self) -> &'static str {
        match self {
            LibmemcachedMode::Ketama => "libmemcached",
            LibmemcachedMode::KetamaWeighted => "libmemcached-weighted",
            LibmemcachedMode::Spy => "libmemcached-spy",
            LibmemcachedMode::SpyWeighted => "libmemcached-spy-weighted",
        }
    }

    /// The key hash libmemcached uses in this mode unless told otherwise.
    pub const fn default_hash(self) -> HashFunction {
        match self {
            LibmemcachedMode::Ketama | LibmemcachedMode::Spy => {
                HashFunction::Twemproxy(TwemproxyHash::OneAtATime)
            }
            LibmemcachedMode::KetamaWeighted | LibmemcachedMode::SpyWeighted => {
                HashFunction::Twemproxy(TwemproxyHash::Md5)
            }
        }
    }

    fn scheme(self) -> PointScheme {
        match self {
            LibmemcachedMode::Ketama => PointScheme::Libmemcached,
            LibmemcachedMode::KetamaWeighted => PointScheme::LibmemcachedWeighted,
            LibmemcachedMode::Spy => PointScheme::LibmemcachedSpy,
            LibmemcachedMode::SpyWeighted => PointScheme::LibmemcachedSpyWeighted,
        }
    }
}

impl fmt::Display for LibmemcachedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// libmemcached's key hash names (`MEMCACHED_HASH_*` in lower case), as the C program and
/// `memcached_behavior_set(MEMCACHED_BEHAVIOR_HASH, …)` know them.
pub const HASH_NAMES: &[&str] = &[
    "default", "md5", "crc", "fnv1_64", "fnv1a_64", "fnv1_32", "fnv1a_32", "murmur", "jenkins",
    "murmur3",
];

/// The library's function for a libmemcached hash name (`default`, `md5`, `crc`, `fnv1_64`, `fnv1a_64`,
/// `fnv1_32`, `fnv1a_32`, `murmur`, `jenkins`, `murmur3`; case-insensitive, `MEMCACHED_HASH_` prefix
/// allowed).
///
/// # Errors
/// [`Error::UnknownHash`] for any other name, including `hsieh` (Debian's build lacks it).
pub fn hash_by_name(name: &str) -> Result<HashFunction, Error> {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower.strip_prefix("memcached_hash_").unwrap_or(&lower);
    let tw = |h| Ok(HashFunction::Twemproxy(h));
    match bare {
        "default" | "one_at_a_time" => tw(TwemproxyHash::OneAtATime),
        "md5" => tw(TwemproxyHash::Md5),
        "crc" => tw(TwemproxyHash::Crc32),
        "fnv1_64" => tw(TwemproxyHash::Fnv1_64),
        "fnv1a_64" => tw(TwemproxyHash::Fnv1a64),
        "fnv1_32" => tw(TwemproxyHash::Fnv1_32),
        "fnv1a_32" => tw(TwemproxyHash::Fnv1a32),
        "murmur" => tw(TwemproxyHash::Murmur),
        "jenkins" => tw(TwemproxyHash::Jenkins),
        "murmur3" => Ok(HashFunction::HashkitMurmur3),
        _ => Err(Error::UnknownHash {
            name: name.to_string(),
            known: HASH_NAMES.join(", "),
        }),
    }
}

/// Builds a [`Ring`] placing keys exactly as a libmemcached client with these servers does.
///
/// ```
/// use shardring::compat::libmemcached::{LibmemcachedBuilder, LibmemcachedMode};
///
/// let ring = LibmemcachedBuilder::new(LibmemcachedMode::KetamaWeighted)
///     .server("10.0.0.1", 11211, 1)
///     .server("10.0.0.2", 11211, 2)
///     .build()?;
/// let server = ring.lookup("user:42").unwrap();
/// assert!(server.name() == "10.0.0.1:11211" || server.name() == "10.0.0.2:11211");
/// # Ok::<(), shardring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct LibmemcachedBuilder {
    /// The distribution.
    mode: LibmemcachedMode,
    /// The key hash, when not the mode's default.
    hash: Option<HashFunction>,
    /// (host, port, weight) in the order they were added.
    servers: Vec<(String, u16, u32)>,
}

impl LibmemcachedBuilder {
    /// A builder for `mode` with no servers.
    pub fn new(mode: LibmemcachedMode) -> LibmemcachedBuilder {
        LibmemcachedBuilder {
            mode,
            hash: None,
            servers: Vec::new(),
        }
    }

    /// The key hash (`MEMCACHED_BEHAVIOR_HASH`), see [`hash_by_name`].
    ///
    /// By default, this is the mode's [`default_hash`](LibmemcachedMode::default_hash).
    pub fn hash(mut self, hash: HashFunction) -> LibmemcachedBuilder {
        self.hash = Some(hash);
        self
    }

    /// Adds a server as `memcached_server_add_with_weight(host, port, weight)` does. `host` is used as
    /// written (libmemcached hashes the name, not the address it resolves to).
    pub fn server(
        mut self,
        host: impl Into<String>,
        port: u16,
        weight: u32,
    ) -> LibmemcachedBuilder {
        self.servers.push((host.into(), port, weight));
        self
    }

    /// Builds the ring. Nodes are named `host:port`.
    ///
    /// Weight 0 is refused here; libmemcached would accept it and give the server no points. The
    /// continuum kind (weighted or not) is fixed here from the weights; membership changes on the built
    /// ring keep it, so after adding a server of weight > 1 to an unweighted ring, build anew.
    ///
    /// # Errors
    /// [`Error::InvalidWeight`] for weight 0, [`Error::DuplicateNode`] for a repeated `host:port`,
    /// [`Error::EmptyName`] for an empty host.
    pub fn build(self) -> Result<Ring, Error> {
        let spy = matches!(
            self.mode,
            LibmemcachedMode::Spy | LibmemcachedMode::SpyWeighted
        );
        // libmemcached turns weighting on when a server of weight > 1 joins.
        let weighted = self.servers.iter().any(|&(_, _, w)| w > 1);
        let scheme = match (self.mode, weighted) {
            (LibmemcachedMode::Ketama, true) => PointScheme::LibmemcachedWeighted,
            (LibmemcachedMode::Spy, true) => PointScheme::LibmemcachedSpyWeighted,
            (mode, _) => mode.scheme(),
        };
        let mut builder = Ring::builder()
            .point_scheme(scheme)
            .hash(self.hash.unwrap_or(self.mode.default_hash()));
        for (host, port, weight) in self.servers {
            if host.is_empty() {
                return Err(Error::EmptyName);
            }
            let name = format!("{host}:{port}");
            let identity = if spy {
                format!("/{host}:{port}")
            } else if port == 11211 {
                host
            } else {
                name.clone()
            };
            builder = builder.node_with_identity(name, identity, f64::from(weight));
        }
        builder.build()
    }
}

impl FromStr for LibmemcachedMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<LibmemcachedMode, Error> {
        [
            LibmemcachedMode::Ketama,
            LibmemcachedMode::KetamaWeighted,
            LibmemcachedMode::Spy,
            LibmemcachedMode::SpyWeighted,
        ]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| Error::InvalidSetting {
            setting: "compat",
            reason: format!("unknown libmemcached mode {s:?}"),
        })
    }
}
