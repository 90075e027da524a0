//! `shardring members participants` and `forget`: the pool's roster, every proxy (and client-side
//! ring) that registered and has not left cleanly, and taking one out that is gone for good.
//!
//! `shardring migrate` waits at each step for every participant of the roster, so a participant
//! cut off from etcd, paused or killed blocks the migration rather than being counted as agreeing
//! (a lease that lapsed is silence, not a yes). When one is gone for good (its machine retired), an
//! operator takes it out here; that is refused while its registration is live.

use std::io::{self, Write};

use anyhow::Result;
use shardring_etcd::{admin, EtcdSource};

/// Prints each participant: `ID<TAB>live|absent<TAB>current=… next=…` (its registration now, or the
/// last one it wrote).
pub(super) async fn list(source: &EtcdSource) -> Result<()> {
    let live = admin::list_proxies(source).await?;
    let roster = admin::list_roster(source).await?;
    let mut out = io::stdout().lock();
    for (id, last) in &roster {
        let (state, shown) = match live.iter().find(|(l, _)| l == id) {
            Some((_, now)) => ("live", now),
            None => ("absent", last),
        };
        writeln!(
            out,
            "{id}\t{state}\t{}",
            shardring_etcd::layout::format_registration(shown)
        )?;
    }
    // Registered without a roster entry: written by a proxy older than the roster.
    for (id, now) in live
        .iter()
        .filter(|(l, _)| !roster.iter().any(|(r, _)| r == l))
    {
        writeln!(
            out,
            "{id}\tlive\t{}",
            shardring_etcd::layout::format_registration(now)
        )?;
    }
    Ok(())
}

/// Takes `id` out of the roster, saying what that risks; only with `stopped` (the operator's word
/// that its process is gone).
pub(super) async fn forget(source: &EtcdSource, id: &str, stopped: bool) -> Result<()> {
    if !stopped {
        anyhow::bail!(
            "{id} is not forgotten without --stopped: a participant that is only cut off from etcd \
             (or paused) goes on serving what it last knew (it fences the keys a change it knows \
             moves, but not those of a change it never saw, and it serves them again once it \
             reaches etcd), so once a migration cuts over without it, its reads of the keys that \
             moved may be stale. Stop its process for good, then run this again with --stopped"
        );
    }
    let gone = admin::forget_participant(source, id).await?;
    let knew_a_change = gone.last.next.is_some();
    eprintln!(
        "forgot {id} of pool {} at revision {} (it last served {})",
        source.pool(),
        gone.revision,
        shardring_etcd::layout::format_registration(&gone.last)
    );
    eprintln!(
        "shardring: migrations no longer wait for {id}. If it is still running, cut off from etcd, \
         it serves what it last knew{}; when it reaches etcd again it registers, and is in the \
         roster again.",
        if knew_a_change {
            " (it knew the planned change: it dual-writes the keys that move)"
        } else {
            " (it knew no planned change: after a cut-over its reads of moved keys are stale): make \
             sure it is stopped"
        }
    );
    Ok(())
}
