//! `shardring.placement_digest`: the identity of a twemproxy pool's placement, as the proxy reports
//! it in its etcd registration (`current=<digest> next=<digest|->`) and its stats JSON.
//!
//! A client-side ring that takes part in a planned membership change (`shardring migrate`) registers
//! the digests of the placements it serves, and `shardring migrate` goes on only once every
//! participant reports the ones it wants; so the digest must be the proxy's to the byte. It is: the
//! servers become the library's `TwemproxyServer`s exactly as the proxy turns etcd's members into
//! them (`Member::to_twemproxy`) or reads a server line, and the digest is the library's own
//! (`shardring::compat::twemproxy::PlacementSpec::digest`, pinned by a test there).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shardring::compat::twemproxy::{Distribution, PlacementSpec, TwemproxyServer};
use shardring::hash::TwemproxyHash;

use crate::pool_file;
use crate::recipe::Recipe;

/// One server as Python gives it: a twemproxy server line, or an etcd member.
#[derive(Debug, FromPyObject)]
pub(crate) enum Server {
    /// `host:port:weight [name]`, as in a pool's `servers:` list.
    Line(String),
    /// `(name, address, weight)`, as etcd holds it under `<prefix><pool>/servers/` (a member whose
    /// name is its address is an unnamed server).
    Member(String, String, u32),
}

/// `shardring.placement_digest(servers, *, hash="fnv1a_64", hash_tag=None, distribution="ketama")`:
/// 16 hex digits that are the same for two placements exactly when they send every key to the same
/// server. `servers` holds twemproxy server lines (`"10.0.0.1:11211:1 cache-a"`) or etcd members
/// (`("cache-a", "10.0.0.1:11211", 1)`), in any order (nutcracker sorts them before placing keys).
///
/// Raises `ValueError` for a server, hash, hash tag or distribution that is not one.
#[pyfunction]
#[pyo3(signature = (servers, *, hash="fnv1a_64", hash_tag=None, distribution="ketama"))]
pub(crate) fn placement_digest(
    servers: Vec<Server>,
    hash: &str,
    hash_tag: Option<&str>,
    distribution: &str,
) -> PyResult<String> {
    let (mut lines, mut members) = (Vec::new(), Vec::new());
    for server in servers {
        match server {
            Server::Line(line) => lines.push(line),
            Server::Member(name, addr, weight) => members.push((name, addr, weight)),
        }
    }
    // Each kind through its own reader (the ones `Ring.from_twemproxy_servers` and
    // `Ring.from_members` use), then one list: the digest sorts the servers itself.
    let mut spec = Twemproxy::of(pool_file::from_servers(
        &lines,
        hash,
        hash_tag,
        distribution,
    )?)?;
    let members = Twemproxy::of(pool_file::from_members(
        members,
        hash,
        hash_tag,
        distribution,
    )?)?;
    spec.servers.extend(members.servers);
    Ok(PlacementSpec {
        servers: &spec.servers,
        hash: spec.hash,
        hash_tag: spec.hash_tag,
        distribution: spec.distribution,
    }
    .digest())
}

/// A twemproxy recipe's parts, owned (what a [`PlacementSpec`] borrows).
struct Twemproxy {
    /// `hash`.
    hash: TwemproxyHash,
    /// `hash_tag`.
    hash_tag: Option<[u8; 2]>,
    /// `distribution`.
    distribution: Distribution,
    /// `servers`.
    servers: Vec<TwemproxyServer>,
}

impl Twemproxy {
    /// The parts of a recipe the twemproxy readers made.
    fn of(recipe: Recipe) -> PyResult<Twemproxy> {
        match recipe {
            Recipe::Twemproxy {
                hash,
                hash_tag,
                distribution,
                servers,
            } => Ok(Twemproxy {
                hash,
                hash_tag,
                distribution,
                servers,
            }),
            _ => Err(PyValueError::new_err("not a twemproxy placement")),
        }
    }
}
