//! # shardring
//!
//! Consistent hashing for spreading keys over the servers of a cache cluster: every client agrees where a
//! key lives, load is even, and when a server joins or leaves only the keys that must move do move.
//!
//! - [`Ring`]: the consistent-hash ring with virtual nodes and weights. Nodes own points on a 32-bit circle;
//!   a key belongs to the node of the first point at or after its hash. Add, remove and re-weight nodes
//!   without touching the others' points; look keys up without allocating; walk distinct replicas.
//! - [`hash`]: deterministic key hashes (xxh3, CRC32, FNV, Murmur3, MD5), selectable by name.
//! - [`Placement`]: the trait every placement algorithm implements.
//! - [`analysis`]: spread and key-movement measurements over any placement.
//! - [`compat`]: byte-exact rings of twemproxy, libmemcached, libketama, uhashring, nginx, spymemcached
//!   (Java) and groupcache (Go); article-style rings from a point-name template in
//!   [`ring::TemplateRingBuilder`] (the twemproxy YAML reader lives in the proxy crate,
//!   `shardring_proxy::config`).
//! - [`shared`]: [`SharedRing`](shared::SharedRing), a placement shared by many threads with lock-free
//!   reads and copy-on-write changes.
//! - [`membership`]: a pool's members as whole snapshots, and a follower that makes a
//!   [`SharedRing`](shared::SharedRing) follow a stream of them atomically (no I/O; etcd is
//!   `shardring-etcd`).
//! - [`bounded`]: bounded-load lookups that cap every node's requests in flight at c × the average.
//! - [`load`]: striped per-node request counters and load statistics.
//! - [`simulate`]: replays synthetic uniform or Zipf traffic round by round, with the rebalancer and/or
//!   bounded loads (the engine of `shardring simulate`).
//! - [`rebalance`]: the adaptive virtual-node rebalancer, which scales each node's points by its load.
//!
//! ## Example
//!
//! ```
//! use shardring::Ring;
//!
//! let ring = Ring::builder()
//!     .node("10.0.0.1:11211", 1.0)
//!     .node("10.0.0.2:11211", 1.0)
//!     .node("10.0.0.3:11211", 2.0) // twice the memory, twice the keys
//!     .build()?;
//!
//! let server = ring.lookup("session:8f3a").expect("the ring has nodes");
//! println!("session:8f3a lives on {server}");
//! # Ok::<(), shardring::Error>(())
//! ```
//!
//! ## Why use this
//! - Placement never depends on insertion order, also when points collide (ties go to the smaller name).
//! - Errors, never panics: weight 0, duplicate node, empty name and too many points are [`Error`]s, and a
//!   lookup on an empty ring is `None`.
//! - Lookups are allocation-free and, with the top-bits index, a few nanoseconds past the key hash while
//!   the ring is cached. When it is not (many nodes, millions of distinct keys), place keys in batches with
//!   [`Ring::lookup_many`] or [`Placement::locate_many`]: the keys' cache misses overlap instead of
//!   queueing (BENCHMARKS.md measures both over a hot and a cold key pool).
//!
//! ## Dependencies
//! The library has no cargo features and depends only on hash crates, `thiserror` and `arc-swap` (for
//! [`SharedRing`](shared::SharedRing)'s lock-free snapshots): no async runtime, no I/O, no configuration
//! formats.
//!
//! ## Concurrency
//! [`SharedRing`](shared::SharedRing) serves lookups from any number of threads while membership changes:
//! readers load the current snapshot without locking, writers publish a new one. The
//! [rebalancer](rebalance) and [bounded loads](bounded) build on it. The library writes no synchronisation
//! of its own beyond `arc-swap`, a `Mutex` for writers, and relaxed atomic counters, each use commented
//! where it is. Building a large [`Ring`] starts threads of its own for the build's duration
//! only when asked to (`std::thread::scope`, handing work over through channels; see
//! [`RingBuilder::build_threads`]).

pub mod algo;
pub mod analysis;
pub mod bounded;
pub mod compat;
mod decimal;
mod error;
pub mod fence;
pub mod hash;
pub mod load;
pub mod membership;
mod node;
mod placement;
pub mod rebalance;
pub mod ring;
pub mod shared;
pub mod simulate;
// The PRNG behind random placement in simulations and tests: shared with the sibling crates (the
// proxy's `distribution: random`, the benches' key pools), not part of the library's API.
#[doc(hidden)]
pub mod splitmix;

pub use crate::error::Error;
pub use crate::hash::{HashFunction, KeyHash};
pub use crate::node::Node;
pub use crate::placement::Placement;
pub use crate::ring::{Ring, RingBuilder};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The "switching from twemproxy / libmemcached" text (to be merged into the README), doctested.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/switching.md")]
pub struct SwitchingDoctests;
