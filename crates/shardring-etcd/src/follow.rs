//! Driving a [`Follower`] from an [`EtcdSource`]: the loop an embedded client runs, and the placement
//! that puts keys where the proxy (and nutcracker) put them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shardring::compat::twemproxy::{ketama_ring, TwemproxyServer};
use shardring::hash::TwemproxyHash;
use shardring::membership::{Follower, Member};
use shardring::{Error, Placement, Ring};
use tokio_util::sync::CancellationToken;

use crate::kind::Kind;
use crate::source::{EtcdSource, Update};

/// The twemproxy servers `members` stand for, in their (name) order.
///
/// # Errors
/// [`Error::InvalidSetting`] for a member whose address is not `host:port` (the etcd source never hands
/// one out: it checks values as it reads them).
pub fn twemproxy_servers(members: &[Member]) -> Result<Vec<TwemproxyServer>, Error> {
    members
        .iter()
        .map(|m| {
            m.to_twemproxy().map_err(|e| Error::InvalidSetting {
                setting: "server",
                reason: e.to_string(),
            })
        })
        .collect()
}

/// nutcracker's ketama ring over `members` with this key hash and hash tag: exactly the placement the
/// proxy builds for a pool with `distribution: ketama` and the same servers.
///
/// # Errors
/// As [`ketama_ring`].
pub fn twemproxy_ketama(
    members: &[Member],
    hash: TwemproxyHash,
    hash_tag: Option<[u8; 2]>,
) -> Result<Ring, Error> {
    ketama_ring(&twemproxy_servers(members)?, hash, hash_tag)
}

/// Counters of a [`follow`] loop, shared with whoever reports them.
#[derive(Debug, Default)]
pub struct FollowStats {
    /// The revision of the last snapshot applied (or found unchanged).
    pub revision: AtomicU64,
    /// Snapshots that built and published a new placement.
    pub published: AtomicU64,
    /// Snapshots refused (empty, stale, unbuildable) and connection losses.
    pub errors: AtomicU64,
    /// Malformed server values seen.
    pub malformed: AtomicU64,
}

/// Applies every snapshot of `source` (the current membership of an [`Update::Planned`]) to `follower`
/// until `stop`, logging what it refuses and counting
/// into `stats`. The follower's ring keeps serving whatever happens to etcd.
pub async fn follow<P, B>(
    source: &EtcdSource,
    follower: &mut Follower<P, B>,
    stats: &Arc<FollowStats>,
    stop: CancellationToken,
) where
    P: Placement,
    B: FnMut(&[Member]) -> Result<P, Error>,
{
    source
        .watch(
            |update| match update {
                // A planned source's servers that are a Redis Cluster's seeds (its `kind` key) are
                // no ring: refused, the ring kept (a source of `servers/` alone reads no kind).
                Update::Planned { kinds, .. } if kinds.current != Kind::Ring => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(kind = %kinds.current, "the pool's servers are not a ring (its `kind` key); refused, the current ring stays");
                }
                // A planned source's current membership is the ring; its next is the proxy's business
                // (dual writes), not a follower's.
                Update::Snapshot(snapshot) | Update::Planned { current: snapshot, .. } => {
                    let revision = snapshot.revision();
                    match follower.apply(snapshot) {
                        Ok(applied) => {
                            // Relaxed: these are statistics, read on their own; nothing is ordered by them.
                            stats.revision.store(revision, Ordering::Relaxed);
                            if matches!(applied, shardring::membership::Applied::Published { .. }) {
                                stats.published.fetch_add(1, Ordering::Relaxed);
                            }
                            tracing::debug!(revision, ?applied, "membership snapshot");
                        }
                        Err(e) => {
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(error = %e, "membership snapshot refused; the current ring stays");
                        }
                    }
                }
                Update::Malformed(_) => {
                    stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
                Update::Lost { .. } => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            },
            stop,
        )
        .await;
}
