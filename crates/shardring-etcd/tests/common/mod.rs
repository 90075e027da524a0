//! What the etcd tests share: a source on a test etcd that notices a lost connection in a second
//! and comes back fast.

use std::time::Duration;

use shardring_etcd::EtcdSource;

/// A source of pool `pool` at `url`, without debounce, with short retries and timeouts, following
/// the next membership when `with_next`.
pub fn test_source(url: &str, pool: &str, with_next: bool) -> EtcdSource {
    EtcdSource::builder(&[url], pool)
        .debounce(Duration::ZERO)
        .retry_min(Duration::from_millis(50))
        .retry_max(Duration::from_millis(400))
        .request_timeout(Duration::from_secs(1))
        .with_next(with_next)
        .build()
}
