//! twemproxy (nutcracker 0.5.0): its `ketama` and `modula` distributions, byte-exact.
//!
//! What nutcracker does, learnt from its source and confirmed on its own output (`testdata/twemproxy/`):
//! - **Server identity.** A server line is `host:port:weight [name]`. The string hashed into the continuum
//!   is the name when there is one; otherwise `host:port`, except that port 11211 is dropped (`host`
//!   alone), "to maintain backward compatibility with libmemcached". Lookups here report the name, else
//!   `host:port` (with the port, even for 11211), which is also what nutcracker's stats show.
//! - **Points.** `floor(w/W × 40 × n) × 4` per server, in single precision, so equal weights can give
//!   fewer than 160; four MD5 words of `"{identity}-{i}"` a digest. See [`PointScheme::Twemproxy`].
//! - **Keys.** Hashed with the pool's `hash` (default `fnv1a_64`, twemproxy's version: see
//!   [`crate::hash::twemproxy`]), after the `hash_tag` is applied (the bytes between the first opening
//!   character and the next closing one, when there is at least one; otherwise the whole key). An empty
//!   key hashes to 0 (confirmed through nutcracker's redis protocol, which can carry one). A pool of one
//!   server sends every key to it.
//! - **Server order.** nutcracker sorts a pool's servers by identity (shorter first, then byte-wise)
//!   while validating the configuration. That order breaks ties between equal points and is the order of
//!   the modula table.
//! - **`modula`**: each server appears `weight` times in that order and a key goes to entry
//!   `hash % total_weight` ([`Modula`]).
//! - **`random`** picks a server with `random()` for every request: no placement can reproduce it, and
//!   [`placement`] refuses it with [`Error::Unsupported`].
//! - `auto_eject_hosts` takes failing servers out at run time and rebuilds the continuum from the live
//!   ones (their count and total weight change the others' points too). A placement built here has
//!   every server live; removing an ejected server ([`Placement::remove`] / [`Ring::remove`]) gives
//!   exactly nutcracker's continuum while it is out (checked on `testdata/twemproxy/ketama-ejected-*`),
//!   and adding it back gives the original.

pub mod hash;
mod spec;

pub use self::spec::PlacementSpec;

use std::fmt;
use std::str::FromStr;

use crate::hash::{HashFunction, TwemproxyHash};
use crate::ring::PointScheme;
use crate::{Error, Node, Placement, Ring};

/// nutcracker leaves the port out of a server's identity when it is this one.
pub const KETAMA_DEFAULT_PORT: u16 = 11211;

/// One entry of a pool's `servers:` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwemproxyServer {
    /// The host (or IP address), or the socket path for a unix-socket server.
    pub host: String,
    /// The port; 0 for a unix-socket server.
    pub port: u16,
    /// The weight, at least 1.
    pub weight: u32,
    /// The optional name after the weight.
    pub name: Option<String>,
}

impl TwemproxyServer {
    /// What lookups report: the name, else `host:port` (the socket path for a unix socket).
    pub fn display_name(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None if self.is_unix() => self.host.clone(),
            None => format!("{}:{}", self.host, self.port),
        }
    }

    /// The string nutcracker hashes for this server's points: the name, else `host:port`, else `host`
    /// for port 11211. For an unnamed unix socket it is the path followed by `:` (nutcracker's
    /// arithmetic takes one byte past the path).
    pub fn identity(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None if self.is_unix() => format!("{}:", self.host),
            None if self.port == KETAMA_DEFAULT_PORT => self.host.clone(),
            None => format!("{}:{}", self.host, self.port),
        }
    }

    /// Where the server is dialled: `host:port`, `[v6]:port`, or the socket's path for a unix socket.
    pub fn address(&self) -> String {
        if self.is_unix() {
            self.host.clone()
        } else if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Whether `other` is the same server (the same host and port; its weight or name may differ).
    pub fn same_address(&self, other: &TwemproxyServer) -> bool {
        self.host == other.host && self.port == other.port
    }

    fn is_unix(&self) -> bool {
        self.host.starts_with('/')
    }
}

impl fmt::Display for TwemproxyServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unix() {
            write!(f, "{}:{}", self.host, self.weight)?;
        } else {
            write!(f, "{}:{}:{}", self.host, self.port, self.weight)?;
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

/// nutcracker's `nc_atoi`: decimal digits only, non-empty, fits an `int`.
pub fn nc_atoi(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok().filter(|&v| v <= i64::from(i32::MAX))
}

impl FromStr for TwemproxyServer {
    type Err = String;

    /// Parses `host:port:weight [name]` or `/path/to/socket:weight [name]` the way nutcracker does:
    /// from the end, the name after the last space, the weight after the last `:`, the port after the
    /// `:` before it. The error is nutcracker's message.
    fn from_str(value: &str) -> Result<TwemproxyServer, String> {
        let format_error = "has an invalid \"hostname:port:weight [name]\"or \"/path/unix_socket:weight [name]\" format string".to_string();
        let (rest, name) = match value.rfind(' ') {
            Some(i) => (&value[..i], Some(value[i + 1..].to_string())),
            None => (value, None),
        };
        let unix = value.starts_with('/');
        let (rest, weight) = rest.rsplit_once(':').ok_or_else(|| format_error.clone())?;
        let (host, port) = if unix {
            if rest.contains(':') {
                return Err(format_error);
            }
            (rest, None)
        } else {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| format_error.clone())?;
            if host.contains('\0') {
                return Err(format_error);
            }
            (host, Some(port))
        };
        let weight = match nc_atoi(weight) {
            None => {
                return Err(
                    "has an invalid weight in \"hostname:port:weight [name]\" format string".into(),
                )
            }
            Some(0) => {
                return Err(
                    "has a zero weight in \"hostname:port:weight [name]\" format string".into(),
                )
            }
            Some(w) => w as u32,
        };
        let port = match port {
            None => 0,
            Some(p) => match nc_atoi(p) {
                Some(p) if (1..=65535).contains(&p) => p as u16,
                _ => {
                    return Err(
                        "has an invalid port in \"hostname:port:weight [name]\" format string"
                            .into(),
                    )
                }
            },
        };
        Ok(TwemproxyServer {
            host: host.to_string(),
            port,
            weight,
            name: name.filter(|n| !n.is_empty()),
        })
    }
}

/// A pool's `distribution:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Distribution {
    /// `ketama`, the default: a consistent-hash continuum.
    #[default]
    Ketama,
    /// `modula`: hash modulo the total weight.
    Modula,
    /// `random`: a random server per request (not reproducible).
    Random,
}

impl Distribution {
    /// The name as the configuration writes it.
    pub const fn name(self) -> &'static str {
        match self {
            Distribution::Ketama => "ketama",
            Distribution::Modula => "modula",
            Distribution::Random => "random",
        }
    }
}

impl FromStr for Distribution {
    type Err = Error;

    fn from_str(s: &str) -> Result<Distribution, Error> {
        match s {
            "ketama" => Ok(Distribution::Ketama),
            "modula" => Ok(Distribution::Modula),
            "random" => Ok(Distribution::Random),
            _ => Err(Error::InvalidSetting {
                setting: "distribution",
                reason: format!("{s:?} is not ketama, modula or random"),
            }),
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks a `hash_tag:` value: exactly two bytes, as nutcracker requires.
///
/// # Errors
/// [`Error::InvalidSetting`] otherwise.
pub fn hash_tag(tag: &str) -> Result<[u8; 2], Error> {
    match tag.as_bytes() {
        &[a, b] => Ok([a, b]),
        _ => Err(Error::InvalidSetting {
            setting: "hash_tag",
            reason: "is not a valid hash tag string with two characters".into(),
        }),
    }
}

/// The ketama ring of a pool with these servers, key hash and hash tag.
///
/// ```
/// use shardring::compat::twemproxy::{ketama_ring, TwemproxyServer};
/// use shardring::hash::TwemproxyHash;
///
/// let servers: Vec<TwemproxyServer> = ["127.0.0.1:11211:1", "127.0.0.1:11212:1 cache-b"]
///     .iter()
///     .map(|s| s.parse().unwrap())
///     .collect();
/// let ring = ketama_ring(&servers, TwemproxyHash::Fnv1a64, Some(*b"{}"))?;
/// // Hash tags: both keys hash "user1", so they live together.
/// assert_eq!(ring.lookup("{user1}.a"), ring.lookup("{user1}.b"));
/// # Ok::<(), shardring::Error>(())
/// ```
///
/// # Errors
/// [`Error::DuplicateNode`] when two servers have the same display name; [`Error::InvalidWeight`] for
/// weight 0.
pub fn ketama_ring(
    servers: &[TwemproxyServer],
    hash: TwemproxyHash,
    hash_tag: Option<[u8; 2]>,
) -> Result<Ring, Error> {
    servers
        .iter()
        .fold(
            Ring::builder()
                .point_scheme(PointScheme::Twemproxy { hash_tag })
                .hash(HashFunction::Twemproxy(hash)),
            |b, s| b.node_with_identity(s.display_name(), s.identity(), f64::from(s.weight)),
        )
        .build()
}

/// twemproxy's `modula` distribution as a [`Placement`]: every server `weight` times, in nutcracker's
/// server order (identity length, then bytes), and a key at entry `hash % total_weight`.
#[derive(Debug, Clone)]
pub struct Modula {
    /// The members, in nutcracker's server order.
    nodes: Vec<Node>,
    /// Each node's index once per unit of its weight.
    table: Vec<u32>,
    /// The key hash.
    hash: TwemproxyHash,
    /// The pool's hash tag.
    hash_tag: Option<[u8; 2]>,
}

impl Modula {
    /// The modula placement of a pool.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`], [`Error::InvalidWeight`] for weight 0, [`Error::TooManyPoints`] when the
    /// weights sum past 2^26.
    pub fn new(
        servers: &[TwemproxyServer],
        hash: TwemproxyHash,
        hash_tag: Option<[u8; 2]>,
    ) -> Result<Modula, Error> {
        let mut nodes = Vec::with_capacity(servers.len());
        for s in servers {
            let node = Node::with_identity(s.display_name(), s.identity(), f64::from(s.weight))?;
            if nodes.iter().any(|n: &Node| n.name() == node.name()) {
                return Err(Error::DuplicateNode {
                    node: node.name().to_string(),
                });
            }
            nodes.push(node);
        }
        let mut modula = Modula {
            nodes,
            table: Vec::new(),
            hash,
            hash_tag,
        };
        modula.rebuild()?;
        Ok(modula)
    }

    fn rebuild(&mut self) -> Result<(), Error> {
        self.nodes.sort_by(|a, b| {
            (a.identity().len(), a.identity()).cmp(&(b.identity().len(), b.identity()))
        });
        let total: u64 = self.nodes.iter().map(|n| n.weight() as u64).sum();
        let limit = crate::ring::DEFAULT_MAX_POINTS;
        if total > limit {
            return Err(Error::TooManyPoints {
                requested: total,
                limit,
            });
        }
        self.table = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| std::iter::repeat_n(i as u32, n.weight() as usize))
            .collect();
        Ok(())
    }
}

impl Placement for Modula {
    fn algorithm(&self) -> &'static str {
        "twemproxy-modula"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn locate(&self, key: &[u8]) -> Option<usize> {
        match self.nodes.len() {
            0 => None,
            1 => Some(0),
            _ => {
                let scheme = PointScheme::Twemproxy {
                    hash_tag: self.hash_tag,
                };
                let h = scheme.key_position(HashFunction::Twemproxy(self.hash), key);
                let slot = (h as usize) % self.table.len().max(1);
                self.table.get(slot).map(|&i| i as usize)
            }
        }
    }

    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        out.clear();
        let Some(first) = self.locate(key) else {
            return;
        };
        // nutcracker has no replicas; the natural extension is the next distinct servers in table order.
        let start = self
            .table
            .iter()
            .position(|&i| i as usize == first)
            .unwrap_or(0);
        for k in 0..self.table.len() {
            if out.len() >= count {
                break;
            }
            let i = self.table[(start + k) % self.table.len()] as usize;
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }

    fn add(&mut self, node: Node) -> Result<(), Error> {
        if self.nodes.iter().any(|n| n.name() == node.name()) {
            return Err(Error::DuplicateNode {
                node: node.name().to_string(),
            });
        }
        if node.weight().fract() != 0.0 {
            return Err(Error::InvalidWeight {
                node: node.name().to_string(),
                weight: node.weight(),
            });
        }
        let before = self.clone();
        self.nodes.push(node);
        self.rebuild().inspect_err(|_| *self = before)
    }

    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        let i = self
            .nodes
            .iter()
            .position(|n| n.name() == name)
            .ok_or_else(|| Error::UnknownNode {
                node: name.to_string(),
            })?;
        let node = self.nodes.remove(i);
        self.rebuild()?;
        Ok(node)
    }

    fn memory_bytes(&self) -> usize {
        self.table.capacity() * 4
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}

/// The placement of a pool: its ketama ring or its modula table.
///
/// # Errors
/// [`Error::Unsupported`] for `random` (every request picks anew, so no placement reproduces it), and
/// the errors of [`ketama_ring`] and [`Modula::new`].
pub fn placement(
    servers: &[TwemproxyServer],
    hash: TwemproxyHash,
    hash_tag: Option<[u8; 2]>,
    distribution: Distribution,
) -> Result<Box<dyn Placement>, Error> {
    match distribution {
        Distribution::Ketama => Ok(Box::new(ketama_ring(servers, hash, hash_tag)?)),
        Distribution::Modula => Ok(Box::new(Modula::new(servers, hash, hash_tag)?)),
        Distribution::Random => Err(Error::Unsupported {
            algorithm: "twemproxy distribution random",
            what: "reproducible placement (it picks a random server for every request)",
        }),
    }
}

/// The key hash of the pool as twemproxy computes it: hash tag applied, empty key 0.
pub fn key_hash(key: &[u8], hash: TwemproxyHash, hash_tag: Option<[u8; 2]>) -> u32 {
    PointScheme::Twemproxy { hash_tag }.key_position(HashFunction::Twemproxy(hash), key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_lines() {
        let s: TwemproxyServer = "127.0.0.1:11211:1".parse().unwrap();
        assert_eq!(
            (s.identity(), s.display_name()),
            ("127.0.0.1".into(), "127.0.0.1:11211".into())
        );
        let s: TwemproxyServer = "127.0.0.1:11212:3 alpha".parse().unwrap();
        assert_eq!(
            (s.identity(), s.display_name(), s.weight),
            ("alpha".into(), "alpha".into(), 3)
        );
        let s: TwemproxyServer = "::1:11212:1".parse().unwrap();
        assert_eq!((s.host.as_str(), s.port), ("::1", 11212));
        let s: TwemproxyServer = "/tmp/mc.sock:2".parse().unwrap();
        assert_eq!((s.identity(), s.port), ("/tmp/mc.sock:".into(), 0));
        for bad in [
            "127.0.0.1:11211",
            "127.0.0.1:11211:0",
            "127.0.0.1:0:1",
            "h:70000:1",
            "h:1:x",
            "h:1:1 a b",
            "",
        ] {
            assert!(bad.parse::<TwemproxyServer>().is_err(), "{bad}");
        }
    }

    #[test]
    fn equal_weights_can_get_fewer_than_160_points() {
        let servers: Vec<TwemproxyServer> = (0..40)
            .map(|i| format!("10.0.0.{i}:11211:1").parse().unwrap())
            .collect();
        let ring = ketama_ring(&servers, TwemproxyHash::Md5, None).unwrap();
        let per_node = ring.point_count() / 40;
        assert!(per_node == 160 || per_node == 156, "{per_node}");
    }

    #[test]
    fn random_is_refused_and_modula_works() {
        let servers: Vec<TwemproxyServer> = ["a:1:1", "b:1:2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert!(placement(&servers, TwemproxyHash::Md5, None, Distribution::Random).is_err());
        let m = placement(&servers, TwemproxyHash::Md5, None, Distribution::Modula).unwrap();
        let mut out = Vec::new();
        m.replicas_into(b"k", 5, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(Some(out[0]), m.locate(b"k"));
    }
}
