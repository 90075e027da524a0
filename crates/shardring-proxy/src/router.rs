//! Key → server: a pool's [`Placement`] over its live servers, published with arc-swap so lookups never
//! lock and ejection, rejoin and reload swap it whole.

use arc_swap::ArcSwap;
use shardring::{HashFunction, Node, Placement, Ring};

use crate::config::{Distribution, PoolConfig};
use crate::error::ProxyError;

/// One state of a pool's placement.
#[derive(Debug)]
pub struct Routing {
    /// The placement over the live servers only.
    placement: Box<dyn Placement>,
    /// For each placement node index, the server's index in the pool's server list.
    servers: Vec<usize>,
    /// The hash tag, applied before the placement sees a key.
    hash_tag: Option<[u8; 2]>,
}

impl Routing {
    /// The index (in the pool's server list) of the server that owns `key`; `None` when no server is live.
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        let key = hash_tagged(key, self.hash_tag);
        self.placement.locate(key).map(|i| self.servers[i])
    }

    /// How many servers the placement holds.
    pub fn live_servers(&self) -> usize {
        self.servers.len()
    }
}

/// twemproxy's hash tag: with tag `{}`, `user:{42}:name` hashes as `42`. A key without both tag bytes (or
/// with nothing between them) hashes whole.
pub fn hash_tagged(key: &[u8], tag: Option<[u8; 2]>) -> &[u8] {
    let Some([open, close]) = tag else {
        return key;
    };
    let Some(start) = memchr::memchr(open, key) else {
        return key;
    };
    let rest = &key[start + 1..];
    match memchr::memchr(close, rest) {
        Some(end) if end > 0 => &rest[..end],
        _ => key,
    }
}

/// The `hash` values twemproxy accepts.
pub const TWEMPROXY_HASHES: &[&str] = &[
    "one_at_a_time",
    "md5",
    "crc16",
    "crc32",
    "crc32a",
    "fnv1_64",
    "fnv1a_64",
    "fnv1_32",
    "fnv1a_32",
    "hsieh",
    "murmur",
    "jenkins",
];

/// Builds the placement of `pool` over the servers whose `live` flag is set.
///
/// Until the library's twemproxy-exact ketama lands, `ketama` is shardring's [`Ring`] (xxh3, 160 points
/// per unit of weight) over the servers' names and weights: consistent hashing with the same names and
/// weights, but not yet nutcracker's exact continuum, so switching from nutcracker still moves keys. The
/// pool's `hash` is checked against twemproxy's list. (The library's ring hashes its point names with the
/// key hash, and FNV-1a's low bits spread similar names like `10.0.0.1:11211-7` poorly, so the interim
/// ring does not use the configured hash.)
///
/// # Errors
/// [`ProxyError::Placement`] for a hash or distribution that is not supported, or bad weights.
pub fn build_placement(pool: &PoolConfig, live: &[bool]) -> Result<Routing, ProxyError> {
    if !TWEMPROXY_HASHES.contains(&pool.hash.as_str()) {
        return Err(ProxyError::Placement {
            pool: pool.name.clone(),
            reason: format!(
                "unknown hash {:?}; twemproxy's hashes are {}",
                pool.hash,
                TWEMPROXY_HASHES.join(", ")
            ),
        });
    }
    let hash = HashFunction::Xxh3;
    if pool.distribution != Distribution::Ketama {
        return Err(ProxyError::Placement {
            pool: pool.name.clone(),
            reason: format!(
                "distribution {:?} is not supported yet; use ketama",
                pool.distribution
            ),
        });
    }
    let mut builder = Ring::builder().hash(hash);
    let mut servers = Vec::new();
    for (i, s) in pool.servers.iter().enumerate() {
        if live.get(i).copied().unwrap_or(false) {
            builder = builder.node(s.label(), f64::from(s.weight));
            servers.push(i);
        }
    }
    let ring = builder.build().map_err(|e| ProxyError::Placement {
        pool: pool.name.clone(),
        reason: e.to_string(),
    })?;
    // The ring orders its nodes by its own rules: map them back to server indices by name.
    let by_name: Vec<usize> = Placement::nodes(&ring)
        .iter()
        .map(|n: &Node| {
            pool.servers
                .iter()
                .position(|s| s.label() == n.name())
                .unwrap_or(0)
        })
        .collect();
    debug_assert_eq!(by_name.len(), servers.len());
    Ok(Routing {
        placement: Box::new(ring),
        servers: by_name,
        hash_tag: pool.hash_tag,
    })
}

/// A pool's current routing, swapped atomically.
#[derive(Debug)]
pub struct Router {
    /// The published state.
    current: ArcSwap<Routing>,
}

impl Router {
    /// A router starting at `routing`.
    pub fn new(routing: Routing) -> Router {
        Router {
            current: ArcSwap::from_pointee(routing),
        }
    }

    /// The current routing (a cheap snapshot; hold it for one request).
    pub fn load(&self) -> arc_swap::Guard<std::sync::Arc<Routing>> {
        self.current.load()
    }

    /// Publishes a new routing; requests already routed keep their servers.
    pub fn store(&self, routing: Routing) {
        self.current.store(std::sync::Arc::new(routing));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_cut_the_key_like_twemproxy() {
        let t = Some(*b"{}");
        assert_eq!(hash_tagged(b"user:{42}:name", t), b"42");
        assert_eq!(hash_tagged(b"user:{}:name", t), b"user:{}:name");
        assert_eq!(hash_tagged(b"user:{42", t), b"user:{42");
        assert_eq!(hash_tagged(b"plain", t), b"plain");
        assert_eq!(hash_tagged(b"a{b}", None), b"a{b}");
    }

    #[test]
    fn ejected_servers_get_no_keys_and_the_rest_stay_put() {
        let pool = PoolConfig::new(
            "p",
            "127.0.0.1:0",
            &["127.0.0.1:1:1", "127.0.0.1:2:1", "127.0.0.1:3:1"],
        )
        .unwrap();
        let all = build_placement(&pool, &[true, true, true]).unwrap();
        let two = build_placement(&pool, &[true, false, true]).unwrap();
        for i in 0..2000 {
            let key = format!("key:{i}");
            let before = all.server_for(key.as_bytes()).unwrap();
            let after = two.server_for(key.as_bytes()).unwrap();
            assert_ne!(after, 1);
            if before != 1 {
                assert_eq!(before, after);
            }
        }
        let none = build_placement(&pool, &[false, false, false]).unwrap();
        assert_eq!(none.server_for(b"x"), None);
    }
}
