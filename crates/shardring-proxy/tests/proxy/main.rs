//! The proxy's integration tests, one test binary: each file here is a module, so the crate and its
//! dependencies are linked once rather than once per file. A test keeps its name under its module's
//! (`commands::set_then_get_...`), so `cargo test -p shardring-proxy <part of a name>` still finds it,
//! and `cargo test -p shardring-proxy --test proxy <module>::` runs one file's tests.

mod common;

mod breakers;
mod commands;
mod dual_writes;
#[cfg(feature = "etcd")]
mod etcd_membership;
mod failover;
mod fence;
mod gutter;
mod hot_keys;
mod libmemcached_tools;
mod memcached_fidelity;
mod memcached_noreply;
mod memcached_value_limit;
mod metrics_http;
mod nutcracker;
mod nutcracker_stats;
mod rate_limits;
mod redis;
mod redis_cluster;
mod redis_common;
mod redis_hot_keys;
mod redis_pubsub;
mod redis_replicas;
mod redis_split;
mod redis_transactions;
mod replicas;
mod sentinel;
mod span;
mod split;
mod tls;
mod twemproxy_config;
mod warmup;
mod workers;
