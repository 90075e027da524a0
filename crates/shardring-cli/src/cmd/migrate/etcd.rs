//! The migration's etcd side: the pool now and next from `servers/` and `next/`, the proxies from
//! their registrations under `proxies/`, and the cut-over as etcd transactions (the layout of
//! `shardring_etcd::layout`).

use anyhow::{bail, Context, Result};
use shardring_config::PoolConfig;
use shardring_etcd::{admin, twemproxy_servers, EtcdSource};

use super::plan::Change;
use super::serving::Serving;

/// The etcd source of `pool` under `prefix` at `urls`.
pub(super) fn source(urls: &str, prefix: &str, pool: &str) -> EtcdSource {
    let endpoints: Vec<&str> = urls.split(',').map(str::trim).collect();
    EtcdSource::builder(&endpoints, pool)
        .prefix(prefix)
        .with_next(true)
        .build()
}

/// The change from etcd's `servers/` to its `next/`, with `now`'s other settings (the file's), and
/// whether it was already cut over: a migration stopped after the cut-over (a participant that
/// did not follow) left the old membership under `next/` and the cut-over mark; that change is
/// resumed (the old membership is the change's `now`), never taken for one back to it.
///
/// # Errors
/// When etcd cannot be read, or the pool has no next membership.
pub(super) async fn change(
    source: &EtcdSource,
    mut now: PoolConfig,
    all_keys: bool,
) -> Result<(Change, bool)> {
    let (current, next) = admin::read_planned(source)
        .await
        .context("reading the pool's memberships from etcd")?;
    let Some(next) = next else {
        bail!(
            "pool {} has no next membership under {} (publish one with `shardring members \
             --pool {} -c next.yml publish --next`)",
            now.name,
            source.keys().next_prefix(),
            now.name
        );
    };
    let cut_over = admin::cut_over_pending(source)
        .await
        .context("reading the pool's cut-over mark from etcd")?;
    let (from, to) = match cut_over {
        Some(revision) => {
            eprintln!(
                "shardring: pool {} was cut over (the memberships read at revision {revision}) and \
                 its change not finished: resuming it (every participant must serve the new \
                 membership; then the old one is dropped)",
                now.name
            );
            (next, current)
        }
        None => (current, next),
    };
    now.servers = twemproxy_servers(from.members())?;
    let mut then = now.clone();
    then.servers = twemproxy_servers(to.members())?;
    Ok((Change::new(now, then, all_keys)?, cut_over.is_some()))
}

/// Makes next current and current next, in one transaction (refused if either changed since they
/// were read).
pub(super) async fn cut_over(source: &EtcdSource) -> Result<()> {
    let revision = admin::cut_over(source, None)
        .await
        .context("cutting over in etcd")?;
    eprintln!("shardring: cut over in etcd at revision {revision}");
    Ok(())
}

/// Drops the next membership (the change is done: no more dual writes).
pub(super) async fn drop_next(source: &EtcdSource) -> Result<()> {
    admin::drop_next(source)
        .await
        .context("dropping the next membership in etcd")?;
    Ok(())
}

/// Every participant of the source's pool, with what each serves: the ones registered now (their
/// leased `proxies/<id>`) and the roster's others (`roster/<id>`, whose lease lapsed: cut off from
/// etcd, paused or dead), which are an error, never agreement.
pub(super) async fn registrations(source: &EtcdSource) -> Result<Vec<(String, Result<Serving>)>> {
    let live = admin::list_proxies(source)
        .await
        .context("reading the proxies' registrations from etcd")?;
    let roster = admin::list_roster(source)
        .await
        .context("reading the pool's roster from etcd")?;
    let serving = |r: &admin::Registration| Serving {
        current: r.current.clone(),
        next: r.next.clone().unwrap_or_else(|| r.current.clone()),
        ..Serving::default()
    };
    let mut out: Vec<(String, Result<Serving>)> = live
        .iter()
        .map(|(id, r)| (id.clone(), Ok(serving(r))))
        .collect();
    for (id, last) in roster {
        if live.iter().any(|(l, _)| *l == id) {
            continue;
        }
        out.push((
            id.clone(),
            Err(anyhow::anyhow!(
                "not registered (its lease lapsed: cut off from etcd, paused or dead; last seen \
                 serving {}); it must come back, or, once gone for good, be taken out with \
                 `shardring members --pool {} forget {id}`",
                serving(&last),
                source.pool()
            )),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
