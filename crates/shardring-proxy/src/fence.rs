//! Fencing in the proxy: a pool that follows etcd and cannot confirm its place there refuses the
//! keys a planned change moves (memcached `SERVER_ERROR`, Redis `-TRYAGAIN`), rather than serve them
//! from an owner that may no longer be written. The [`Fence`] itself (when a participant fences, and
//! why) is the library's, shared with the client-side rings; a fenced pool's routing masks the
//! keys that move (`crate::router`), and [`explain`] turns the missing server into the error the
//! client gets.

use std::time::Duration;

use crate::error::BackendError;

pub use shardring::fence::Fence;

/// A failure to answer, as the client gets it: a key without a server while the proxy is fenced
/// (`unconfirmed`: how long it has gone without a renewal, during a planned change) is refused
/// as fenced, which says why and that a retry may succeed; counted in `fenced`, logged at most once
/// every few seconds. Any other failure as it is.
pub(crate) fn explain(
    error: BackendError,
    fence: &Fence,
    unconfirmed: Option<Duration>,
    stats: &crate::metrics::PoolStats,
) -> BackendError {
    match (error, unconfirmed) {
        (BackendError::NoServer, Some(unconfirmed)) => {
            stats.fenced.inc();
            if fence.log_now() {
                tracing::warn!(pool = %stats.name, unconfirmed = ?unconfirmed, "cannot confirm this proxy's registration in etcd during a planned change: refusing the keys that move");
            }
            BackendError::Fenced {
                unconfirmed_ms: u64::try_from(unconfirmed.as_millis()).unwrap_or(u64::MAX),
            }
        }
        (error, _) => error,
    }
}
