//! The migration's etcd side (being written).

use anyhow::{bail, Result};

use super::proxies::Serving;

/// The proxies registered for the source's pool, with what each serves.
pub(super) async fn registrations(
    source: &shardring_etcd::EtcdSource,
) -> Result<Vec<(String, Serving)>> {
    let _ = source;
    bail!("etcd registrations are not written yet")
}

/// The etcd source of `pool` under `prefix` at `urls`.
pub(super) fn source(urls: &str, prefix: &str, pool: &str) -> shardring_etcd::EtcdSource {
    let endpoints: Vec<&str> = urls.split(',').map(str::trim).collect();
    shardring_etcd::EtcdSource::builder(&endpoints, pool)
        .prefix(prefix)
        .build()
}

/// The change from etcd's `servers/` to its `next/`, with `now`'s settings.
pub(super) async fn change(
    source: &shardring_etcd::EtcdSource,
    now: shardring_proxy::PoolConfig,
    all_keys: bool,
) -> Result<super::plan::Change> {
    let _ = (source, now, all_keys);
    bail!("etcd migrations are not written yet")
}

/// Makes next current and current next, in one transaction.
pub(super) async fn cut_over(source: &shardring_etcd::EtcdSource) -> Result<()> {
    let _ = source;
    bail!("etcd migrations are not written yet")
}

/// Drops the next membership.
pub(super) async fn drop_next(source: &shardring_etcd::EtcdSource) -> Result<()> {
    let _ = source;
    bail!("etcd migrations are not written yet")
}
