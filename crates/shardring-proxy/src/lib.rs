//! # shardring-proxy
//!
//! A memcached and Redis sharding proxy that reads twemproxy's (nutcracker's) pools and places keys with
//! shardring exactly where nutcracker places them, so switching moves no key.
//!
//! Why use it instead of twemproxy:
//! - memcached pools speak more of the protocol: gat/gats, touch, the meta commands (mg/ms/md/ma/me/mn, flags passed through),
//!   flush_all, verbosity, stats, 250-byte keys; unknown or malformed commands get `ERROR` or
//!   `CLIENT_ERROR` and the connection goes on wherever the protocol allows;
//! - a multi-get returns the keys it could fetch when one server is down (twemproxy's all-or-nothing is an
//!   option);
//! - an active health check: dead servers are ejected without client traffic and rejoin only once they
//!   answer;
//! - reload on SIGHUP, a bad new config refused and the running one kept;
//! - twemproxy's stats JSON plus Prometheus metrics with per-server latency histograms;
//! - Redis pools (`redis: true`) speak RESP2 and RESP3 end to end, inline commands, twemproxy's
//!   commands and multi-key splits, with Redis's own error wording for what they refuse;
//! - thread per core: each worker thread accepts its own clients and serves them with its own server
//!   connections (`workers`).
//!
//! ## Layout
//! A request's path, in one direction: `net` (listeners) → `server` (accept loop) → `session` (one
//! client: decode, plan, answer in order) → [`protocol`] (the seam, and [`protocol::memcache`] and
//! [`protocol::redis`]: pure decoder, planner, reply framer) → `router` (key → server) → `backend` (each server's pipelined
//! connections, health probes, ejection) → back through the protocol's framer and merge to the session.
//! Around it: [`config`] (twemproxy's YAML, one type per pool), [`flags`] (what the command line
//! sets that twemproxy has no key for: each feature's flags, beside it), `pool` (a pool at run time, its
//! versions swapped whole on reload), [`Proxy`], [`metrics`], [`run`] (the process:
//! stats listeners, the operator's [`signals`], SIGTERM drain), [`workers`] (thread per core: each worker accepts
//! and serves its own clients with its own server connections), [`Admission`] (which worker takes
//! the next client) and [`descriptors`] (the descriptor limit, and a shortage of descriptors told from
//! a failing server).
//!
//! One meaning per name:
//! - a *pool* is one `pools:` entry served: its settings are [`config::PoolConfig`] (`crates/shardring-config/src/pool.rs`); at run
//!   time it is a `Pool` of one protocol (`pool/current.rs`), whose current `PoolVersion` (the servers,
//!   protocol value and router built from one version of its config, `pool/version.rs`) a reload
//!   replaces whole; `ServedPool` is a pool of any protocol, as [`Proxy`] holds it (`pool/mod.rs`);
//! - a server's *connections* (`backend/connections.rs`: `Backend`) are its pipelined connections on
//!   each worker; a `ConnectionRoute` picks the one a client's request takes;
//! - a *session* (`session.rs`) is one client connection's task; a protocol's `ClientState` is what
//!   that protocol remembers about one client between its requests (Redis's in
//!   `protocol/redis/client_state.rs`), kept by the session;
//! - a memcached *route* (`protocol/memcache/route.rs`) is one key's owner, replicas, gutter cap and
//!   previous owner, computed once per key;
//! - *hot keys*: `hot_keys/` finds them and caches their values, `protocol/memcache/remedies/hot_keys.rs`
//!   is how memcached requests read, fill and invalidate that cache, `metrics/hot_keys.rs` serves them
//!   at `/hotkeys`.
//!
//! ## Example
//! ```no_run
//! use shardring_proxy::{config::PoolConfig, config::ProxyConfig, Proxy};
//!
//! # async fn demo() -> Result<(), shardring_proxy::ProxyError> {
//! let pool = PoolConfig::new("alpha", "127.0.0.1:22121", &["127.0.0.1:11211:1", "127.0.0.1:11212:1"])?;
//! let proxy = Proxy::new(ProxyConfig { pools: vec![pool] })?;
//! let listeners = proxy.bind().await?;
//! proxy.serve(listeners, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(())
//! # }
//! ```

#![warn(unreachable_pub)]

mod admission;
mod backend;
mod buffers;
pub mod cluster;
/// The configuration: the `shardring-config` crate (twemproxy's YAML, one [`PoolConfig`] per pool).
/// What twemproxy has no key for, the proxy's flags set ([`flags`]).
pub mod config {
    pub use shardring_config::*;
}
pub mod descriptors;
mod drain;
mod error;
mod fence;
pub mod flags;
mod hot_keys;
#[cfg(feature = "etcd")]
pub mod membership;
pub mod metrics;
mod net;
mod pool;
pub mod protocol;
mod proxy;
mod rate_limit;
mod router;
mod run;
pub mod sentinel;
mod server;
mod session;
pub mod shutdown;
pub mod signals;
mod split;
mod tls;
mod version;
pub mod workers;

pub use crate::admission::Admission;
pub use crate::config::{ConfigErrors, PoolConfig, ProxyConfig};
pub use crate::error::{BackendError, BindTarget, ProxyError};
pub use crate::fence::Fence;
pub use crate::net::Listener;
pub use crate::pool::ServedPool;
pub use crate::proxy::Proxy;
pub use crate::run::{run, RunOptions};
pub use crate::signals::LogControl;

pub use crate::version::NAME_VERSION;
