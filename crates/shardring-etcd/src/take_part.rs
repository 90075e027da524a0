//! Taking part in a pool's planned changes: what every participant (a proxy, a client-side ring)
//! runs beside the ring it serves, so that `shardring migrate` never takes its silence for agreement.
//!
//! - [`take_part`] registers the participant under `proxies/<id>` (a lease) and `roster/<id>` (no
//!   lease: it stays known when the lease lapses) with what it serves, rewrites the value whenever
//!   that changes, and after each renewal of the lease confirms the participant's [`Fence`].
//! - [`confirmation`] is what a renewal confirms: the renewal's time when no change is under way;
//!   during one, only once the pool has been read from etcd and applied (a participant back from a
//!   partition renews before its watch has caught up with a cut-over it missed).
//!
//! The registration itself (leases, re-registration after an outage longer than the lease, the
//! roster entry left on a crash and removed on a clean stop) is [`admin::register_proxy`].

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::source::PoolRead;
use crate::{admin, EtcdSource, Fence, Registration};

/// How often the registration task looks for a new renewal to confirm.
const CONFIRM_EVERY: Duration = Duration::from_millis(250);

/// Who a participant is in its pool's roster: where, under which id, with which lease.
#[derive(Debug, Clone, Copy)]
pub struct Seat<'a> {
    /// The pool's source.
    pub source: &'a EtcdSource,
    /// The participant's id (`proxies/<id>`, `roster/<id>`).
    pub id: &'a str,
    /// Its registration's lease.
    pub ttl: Duration,
}

/// Keeps the participant `seat.id` registered for the pool with the latest value of `serving`,
/// until `stop`, under a lease of `seat.ttl`: registers (retrying every second while etcd cannot be
/// reached), rewrites the value whenever `serving` changes, and after each renewal confirms `fence`
/// at what `confirm` makes of it (see [`confirmation`]). At `stop` the lease is revoked and the
/// roster entry removed (a clean stop); a process that dies leaves both to expire and to the
/// operator.
///
/// `registered` is the registration when the participant made it already (before it served: see
/// [`register_before_serving`]); otherwise this registers first.
pub async fn take_part<C, F>(
    seat: Seat<'_>,
    mut serving: watch::Receiver<Registration>,
    fence: &Fence,
    mut confirm: C,
    stop: CancellationToken,
    registered: Option<admin::RegistrationHandle>,
) where
    C: FnMut(Instant) -> F,
    F: Future<Output = Option<Instant>>,
{
    let Seat { source, id, ttl } = seat;
    fence.follow(ttl);
    let handle = match registered {
        Some(h) => h,
        None => loop {
            let value = serving.borrow_and_update().clone();
            tokio::select! {
                () = stop.cancelled() => return,
                r = admin::register_proxy(source, id, &value, ttl) => match r {
                    Ok(h) => break h,
                    Err(e) => {
                        tracing::warn!(pool = %source.pool(), error = %crate::error_chain(&e), "cannot register this participant in etcd; retrying");
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        },
    };
    tracing::info!(pool = %source.pool(), key = handle.key(), "registered in etcd");
    let mut confirmations = tokio::time::interval(CONFIRM_EVERY);
    let mut checked = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = confirmations.tick() => {
                let renewed = handle.confirmed_at();
                if let Some(at) = renewed.filter(|_| renewed != checked) {
                    checked = renewed;
                    if let Some(at) = confirm(at).await {
                        fence.confirm(at);
                    }
                }
            }
            changed = serving.changed() => {
                if changed.is_err() {
                    break;
                }
                let value = serving.borrow_and_update().clone();
                if let Err(e) = handle.update(&value).await {
                    tracing::warn!(pool = %source.pool(), error = %crate::error_chain(&e), "cannot update this participant's registration in etcd");
                }
            }
        }
    }
    if let Err(e) = handle.revoke().await {
        tracing::debug!(error = %crate::error_chain(&e), "registration not revoked");
    }
}

/// What a renewal of the registration at `renewed` confirms: that time, when no planned change is
/// known (`planned` false: nothing is fenced then). During one, etcd is read, the read handed to
/// `apply` (which applies it as an update and says whether it took it), and only then is the
/// earlier of the renewal and the read's start confirmed. `None` when etcd cannot be read or
/// `apply` refuses the read (the fence stays as it is).
pub async fn confirmation(
    source: &EtcdSource,
    renewed: Instant,
    planned: bool,
    apply: impl FnOnce(PoolRead) -> bool,
) -> Option<Instant> {
    if !planned {
        return Some(renewed);
    }
    let asked = Instant::now();
    match source.read().await {
        Ok(read) => apply(read).then(|| renewed.min(asked)),
        Err(e) => {
            tracing::debug!(pool = %source.pool(), error = %crate::error_chain(&e), "cannot read the pool from etcd to confirm this participant's place");
            None
        }
    }
}

/// Registers the participant of `seat` with `value` before it serves anything, so that no change can be
/// planned, copied and cut over between its first read of the pool and its registration without
/// waiting for it; the caller then reads the pool again and applies it (a next membership published
/// in between is seen there). `None` when etcd cannot take the registration now ([`take_part`] then
/// keeps trying).
pub async fn register_before_serving(
    seat: Seat<'_>,
    value: &Registration,
) -> Option<admin::RegistrationHandle> {
    let Seat { source, id, ttl } = seat;
    match admin::register_proxy(source, id, value, ttl).await {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(pool = %source.pool(), error = %crate::error_chain(&e), "cannot register this participant in etcd before serving; retrying in the background");
            None
        }
    }
}
