//! nginx's `hash KEY consistent` (ngx_http_upstream_hash_module, nginx 1.22 as Debian ships it).
//!
//! Each `server ADDRESS weight=W;` of the upstream block gets `160 × W` points. ADDRESS is split as
//! written into host and port (at the last `:` followed only by digits; `unix:PATH` has no port), and
//! point `j` is CRC-32 of `host`, a NUL byte, `port`, then point `j-1` as four little-endian bytes (0 for
//! the first) — the scheme of Perl's Cache::Memcached::Fast. Keys are hashed with CRC-32. Equal points
//! are kept once, by the server listed first in the block, and so here: the ring follows the order of
//! `servers` for ties (checked on `testdata/nginx/ties400.tsv`, a real collision).
//!
//! Not reproducible: an empty key, which nginx does not hash at all but hands to round robin (so it
//! goes to a different server from one request to the next); the ring here places it at CRC-32 of
//! nothing, 0. Not modelled: servers marked `down` or failing (nginx walks on to the next point), and a `server`
//! whose host name resolves to several addresses (nginx makes one peer per address, all with the same
//! name, and picks among them by weighted round robin). The node names are the addresses as written.
//!
//! Proven on `testdata/nginx/` (made by `scripts/regen-golden/nginx.py` with Debian's nginx).

use crate::hash::HashFunction;
use crate::ring::PointScheme;
use crate::{Error, Ring};

/// The ring of an upstream block with these `(address as written, weight)` servers.
///
/// ```
/// let ring = shardring::compat::nginx::ring(&[("127.0.0.1:8081", 1), ("127.0.0.1:8082", 2)])?;
/// assert_eq!(ring.point_count(), 480);
/// # Ok::<(), shardring::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidWeight`] for weight 0, [`Error::DuplicateNode`], [`Error::EmptyName`].
pub fn ring(servers: &[(&str, u32)]) -> Result<Ring, Error> {
    servers
        .iter()
        .fold(
            Ring::builder()
                .point_scheme(PointScheme::Nginx)
                .hash(HashFunction::Crc32),
            |b, &(addr, weight)| b.node(addr, f64::from(weight)),
        )
        .build()
}
