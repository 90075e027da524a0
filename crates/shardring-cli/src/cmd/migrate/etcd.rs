//! The migration's etcd side: the pool now and next from `servers/` and `next/`, the proxies from
//! their registrations under `proxies/`, and the cut-over as etcd transactions (the layout of
//! `shardring_etcd::layout`).

use anyhow::{bail, Context, Result};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring_config::PoolConfig;
use shardring_etcd::{admin, twemproxy_servers, EtcdSource, Kind, Kinds};

use super::mark::{Mark, Step};
use super::plan::Change;
use super::serving::Serving;
use super::Stage;

/// The etcd source of `pool` under `prefix` at `urls`.
pub(super) fn source(urls: &str, prefix: &str, pool: &str) -> EtcdSource {
    let endpoints: Vec<&str> = urls.split(',').map(str::trim).collect();
    EtcdSource::builder(&endpoints, pool)
        .prefix(prefix)
        .with_next(true)
        .build()
}

/// The change from etcd's `servers/` to its `next/`, with `now`'s other settings (the file's), and
/// where a run begins: a migration stopped after the cut-over (a participant that did not follow)
/// left the old membership under `next/` and the cut-over mark; that change is resumed (the old
/// membership is the change's `now`), never taken for one back to it. With no `next/`, a deletion
/// a finished change recorded (`delete-moved`) is the run: that change again, its keys deleted.
///
/// # Errors
/// When etcd cannot be read, or the pool has no next membership and no deletion to do.
pub(super) async fn change(
    source: &EtcdSource,
    mut now: PoolConfig,
    all_keys: bool,
) -> Result<(Change, Stage)> {
    let read = source
        .read()
        .await
        .context("reading the pool's memberships from etcd")?;
    for bad in &read.malformed {
        eprintln!("shardring: skipping {bad}");
    }
    let (current, next, kinds) = (read.snapshot, read.next, read.kinds);
    let deleting = pending_deletion(source, &now).await?;
    let Some(next) = next else {
        let current_servers = twemproxy_servers(current.members())?;
        if let Some(mark) = deleting {
            let old_kind = if mark.cluster {
                Kind::RedisCluster
            } else {
                Kind::Ring
            };
            let old = of_kind(&now, mark.servers.clone(), old_kind)?;
            now = of_kind(&now, current_servers, kinds.current)?;
            if mark.is_change(&old, &now) {
                eprintln!("{}", mark.resuming_deletion("in etcd"));
                return Ok((Change::new(old, now, all_keys)?, Stage::Deleting));
            }
            eprintln!(
                "{}",
                mark.giving_up_deletion("the pool's servers changed since")
            );
            admin::clear_pending_deletion(source)
                .await
                .context("removing the pool's pending deletion from etcd")?;
        }
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
    if let (Some(mark), None) = (&deleting, cut_over) {
        eprintln!(
            "{}",
            mark.giving_up_deletion("a new change is planned (its cut-over drops the record)")
        );
    }
    let (from, to, kinds) = match cut_over {
        Some(revision) => {
            eprintln!(
                "shardring: pool {} was cut over (the memberships read at revision {revision}) and \
                 its change not finished: resuming it (every participant must serve the new \
                 membership; then the old one is dropped)",
                now.name
            );
            (
                next,
                current,
                Kinds {
                    current: kinds.next,
                    next: kinds.current,
                },
            )
        }
        None => (current, next, kinds),
    };
    let then = of_kind(&now, twemproxy_servers(to.members())?, kinds.next)?;
    now = of_kind(&now, twemproxy_servers(from.members())?, kinds.current)?;
    let stage = if cut_over.is_some() {
        Stage::CutOver
    } else {
        Stage::Fresh
    };
    Ok((Change::new(now, then, all_keys)?, stage))
}

/// `base` with `servers` as a member set of `kind`: a ring over them, or a Redis Cluster whose
/// seeds they are (the layout's `kind`/`next-kind`; the file's cluster settings, if any, kept).
fn of_kind(base: &PoolConfig, servers: Vec<TwemproxyServer>, kind: Kind) -> Result<PoolConfig> {
    let cluster = match kind {
        Kind::Ring => false,
        Kind::RedisCluster if base.is_redis() => true,
        Kind::RedisCluster => bail!(
            "pool {}: etcd says a member set of it is a Redis Cluster (its `kind` or \
             `next-kind` key), and the file makes it a memcached pool",
            base.name
        ),
        other => bail!(
            "pool {}: etcd says a member set of it is {other} (its `kind` or `next-kind` \
             key), which this version cannot place",
            base.name
        ),
    };
    let mut pool = base.clone();
    pool.set_servers(servers, cluster);
    Ok(pool)
}

/// The deletion a finished change of `now`'s pool recorded, if any (a record that does not read
/// is an error: guessing could delete keys that did not move).
async fn pending_deletion(source: &EtcdSource, now: &PoolConfig) -> Result<Option<Mark>> {
    let Some(text) = admin::pending_deletion(source)
        .await
        .context("reading the pool's pending deletion from etcd")?
    else {
        return Ok(None);
    };
    let key = source.keys().delete_moved_key();
    match Mark::parse(&text) {
        Some(Ok(mark)) if mark.step == Step::Deleting && mark.pool == now.name => Ok(Some(mark)),
        _ => bail!(
            "{key} holds {text:?}, not a deletion of pool {}'s moved keys: remove it (`etcdctl del \
             {key}`) once you know what it is",
            now.name
        ),
    }
}

/// Makes next current and current next, in one transaction (refused if either changed since they
/// were read), which also gives up a deletion an earlier change left pending.
pub(super) async fn cut_over(source: &EtcdSource) -> Result<()> {
    let revision = admin::cut_over(source, None)
        .await
        .context("cutting over in etcd")?;
    eprintln!("shardring: cut over in etcd at revision {revision}");
    Ok(())
}

/// Drops the next membership (the change is done: no more dual writes), recording the deletion of
/// the moved keys still to do when `delete`.
pub(super) async fn drop_next(source: &EtcdSource, change: &Change, delete: bool) -> Result<()> {
    let dropped = if delete {
        admin::drop_next_pending_deletion(source, &Mark::deleting(change).line()).await
    } else {
        admin::drop_next(source).await
    };
    dropped.context("dropping the next membership in etcd")?;
    Ok(())
}

/// The moved keys are deleted: the record of the deletion goes.
pub(super) async fn deleted(source: &EtcdSource) -> Result<()> {
    admin::clear_pending_deletion(source)
        .await
        .context("removing the pool's pending deletion from etcd")?;
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
