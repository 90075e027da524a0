//! The original last.fm libketama, and uhashring's ketama mode (Python, PyPI), which copies it.
//!
//! Both give a server `k` MD5 digests of `"{server}-{i}"` for `i` in `0..k`, four points per digest (its
//! four little-endian words), and hash a key with MD5's first little-endian word. They differ in four
//! places, so they are two modes here:
//!
//! | | libketama | uhashring (`hash_fn="ketama"`) |
//! |---|---|---|
//! | digests per server | `floorf(m/M × 40.0 × n)`, single precision (`m`: the server's memory) | `(vnodes × n × w) // W` in integers, vnodes 40 by default |
//! | key exactly on a point | that point's server (first point ≥ hash) | the *next* point's server (`bisect_right`: first point > hash) |
//! | two servers on one point | the server listed first (stable sort) | the server added last (a dict entry overwritten) |
//! | keys | C strings: bytes up to the first NUL | Python `str(key)` encoded as UTF-8 (a `bytes` key is hashed as its `repr`) |
//!
//! The digest counts agree unless single precision lands `m/M × 40 × n` just below a whole number: for
//! equal weights that happens at 61 servers (libketama gives each 39 digests, uhashring 40) and at no
//! other count from 1 to 100 (a test checks this). libketama also limits a server address to 21
//! characters. No package ships libketama, so this mode is proven against
//! uhashring on the inputs where the two agree (integer weights, keys that are valid UTF-8 without NUL,
//! no key hash equal to a point), and its differences are tested against a model of the C code.

use crate::hash::HashFunction;
use crate::ring::PointScheme;
use crate::{Error, Ring};

/// The libketama ring of `(address, memory)` servers, as `ketama_roll` builds it from a server file.
///
/// ```
/// let ring = shardring::compat::libketama::libketama_ring(&[("10.0.0.1:11211", 600), ("10.0.0.2:11211", 300)])?;
/// assert!(ring.lookup("foo").is_some());
/// # Ok::<(), shardring::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidWeight`] for memory 0, [`Error::DuplicateNode`], [`Error::EmptyName`].
pub fn libketama_ring(servers: &[(&str, u64)]) -> Result<Ring, Error> {
    build(PointScheme::Libketama, 40, servers)
}

/// The default `vnodes` of uhashring's ketama mode.
pub const UHASHRING_VNODES: u32 = 40;

/// The ring of `uhashring.HashRing(nodes, hash_fn="ketama", vnodes=vnodes)` where `nodes` maps each name
/// to its weight (`{"name": {"weight": w}}`), in that insertion order.
///
/// Not modelled: a per-node `vnodes` in a node's configuration (uhashring allows one; here all nodes
/// share `vnodes`), a `weight_fn`, and the `replicas` argument of its ketama mode (4 here, its default).
///
/// ```
/// use shardring::compat::libketama::{uhashring_ring, UHASHRING_VNODES};
/// let ring = uhashring_ring(&[("node1", 1), ("node2", 1)], UHASHRING_VNODES)?;
/// assert_eq!(ring.point_count(), 320);
/// # Ok::<(), shardring::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidWeight`] for weight 0, [`Error::DuplicateNode`], [`Error::EmptyName`],
/// [`Error::InvalidSetting`] for vnodes 0.
pub fn uhashring_ring(nodes: &[(&str, u64)], vnodes: u32) -> Result<Ring, Error> {
    build(PointScheme::Uhashring, vnodes, nodes)
}

fn build(scheme: PointScheme, vnodes: u32, servers: &[(&str, u64)]) -> Result<Ring, Error> {
    servers
        .iter()
        .fold(
            Ring::builder()
                .point_scheme(scheme)
                .vnodes(vnodes)
                .hash(HashFunction::Md5),
            |b, &(name, weight)| b.node(name, weight as f64),
        )
        .build()
}
