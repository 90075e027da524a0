//! Which placements the proxies of the pool serve: `shardring migrate` copies nothing until every
//! proxy dual-writes (it serves the current membership now and the next one next), and reports the
//! cut-over done only once every proxy serves the next one.
//!
//! Without etcd the proxies are named (`--proxies HOST:PORT,…`, their stats ports): each one's
//! stats JSON says, per pool, `membership_current` and `membership_next` (digests of the placements,
//! which leave out the listen address that differs between proxies). With etcd they register
//! themselves under the pool's prefix with a lease (`proxies/<id>`), with the same two digests, and
//! in its roster without one (`roster/<id>`): a participant of the roster that is not registered is
//! waited for like one that lags, never counted as agreeing.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::serving::Serving;

/// Where the pool's proxies are found.
#[derive(Debug)]
pub(super) enum Proxies {
    /// Their stats endpoints (`HOST:PORT`).
    Stats(Vec<String>),
    /// Registered in etcd.
    Etcd(Box<shardring_etcd::EtcdSource>),
}

impl Proxies {
    /// What the pool's participants are called: in etcd any participant (a proxy, or an application
    /// embedding a client-side ring) registers; named stats ports are proxies.
    pub fn noun(&self) -> &'static str {
        match self {
            Proxies::Stats(_) => "proxy",
            Proxies::Etcd(_) => "participant",
        }
    }

    /// What each proxy serves for `pool`, or why it cannot be told.
    pub async fn serving(&self, pool: &str) -> Result<Vec<(String, Result<Serving>)>> {
        match self {
            Proxies::Stats(addrs) => {
                let asks = addrs
                    .iter()
                    .map(|a| async move { (a.clone(), stats(a, pool).await) });
                Ok(futures_util::future::join_all(asks).await)
            }
            Proxies::Etcd(source) => super::etcd::registrations(source).await,
        }
    }

    /// Waits until every proxy serves `wanted` for `pool` (polling), for at most `timeout`.
    ///
    /// # Errors
    /// When some proxy does not within `timeout`: each one that lags is named with what it
    /// serves and how that differs ([`Serving::lag`], `known` naming the migration's own
    /// placements by digest), or why it could not be asked. With etcd, when no proxy is
    /// registered.
    pub async fn wait_for(
        &self,
        pool: &str,
        wanted: &Serving,
        known: &[(&str, &str)],
        timeout: Duration,
        what: &str,
    ) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let answers = self.serving(pool).await?;
            let lagging: Vec<String> = answers
                .iter()
                .filter_map(|(name, r)| match r {
                    Ok(s) if s.serves(wanted) => None,
                    Ok(s) => Some(format!("{name} serves {s}: {}", s.lag(wanted, known))),
                    Err(e) => Some(format!("{name}: {e:#}")),
                })
                .collect();
            if answers.is_empty() {
                if Instant::now() >= deadline {
                    bail!("no participant of pool {pool} is registered in etcd: none would {what}");
                }
            } else if lagging.is_empty() {
                return Ok(answers.len());
            } else if Instant::now() >= deadline {
                let agreeing: Vec<&str> = answers
                    .iter()
                    .filter(|(_, r)| r.as_ref().is_ok_and(|s| s.serves(wanted)))
                    .map(|(name, _)| name.as_str())
                    .collect();
                let others = if agreeing.is_empty() {
                    String::new()
                } else {
                    format!(
                        "\nthe others serve what was wanted: {}",
                        agreeing.join(", ")
                    )
                };
                let noun = match self {
                    Proxies::Stats(_) => "proxies",
                    Proxies::Etcd(_) => "participants",
                };
                bail!(
                    "{} of {} {noun} do not {what} after {:?} (wanted {wanted}):\n  {}{others}",
                    lagging.len(),
                    answers.len(),
                    timeout,
                    lagging.join("\n  ")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What the proxy whose stats port is `addr` serves for `pool` (twemproxy's stats JSON: sent on
/// connect, then the connection closes).
async fn stats(addr: &str, pool: &str) -> Result<Serving> {
    let json = crate::cmd::fleet::stats_json(addr).await?;
    let field = |name: &str| -> Result<String> {
        json.get(pool)
            .with_context(|| format!("it has no pool {pool}"))?
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .with_context(|| format!("its stats have no {name} (not a shardring proxy, or older)"))
    };
    let text = |name: &str| {
        json[pool]
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    Ok(Serving {
        current: field("membership_current")?,
        next: field("membership_next")?,
        current_text: text("membership_current_text"),
        next_text: text("membership_next_text"),
    })
}
