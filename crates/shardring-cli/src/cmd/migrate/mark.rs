//! The cut-over mark of a migration without etcd: one comment line at the top of the `--to` file,
//! written in the same replacement of that file that makes the old servers its pool's next ones,
//! and removed in the one that drops them.
//!
//! Why a mark: after the cut-over the files say "now: the new servers, next: the old ones", which
//! is exactly what a migration back would look like. A rerun (the operator's answer to a first
//! run that exited non-zero because a proxy could not be confirmed) must tell the two apart, or it
//! copies the keys back and reverses the change. etcd keeps the same mark under the pool's prefix
//! (`shardring_etcd::admin::cut_over_pending`); a file has no other place for it.
//!
//! Proxies read it too (`shardring proxy --next-config`: [`Mark::apply`]): a proxy that starts or
//! reloads after the `--to` file was written and before its own file was (a restart in that
//! window) would otherwise read the old servers in both files, serve them alone and write no
//! moving key to its new owner, while proxies that switched read from there.
//!
//! The mark names the pool and the digests of both placements (what the rerun checks it against),
//! and lists the new servers: the `--to` file is replaced before the proxies' files, so a run that
//! stops between those writes leaves the new servers written nowhere else.

use std::str::FromStr;

use anyhow::{bail, Context, Result};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring_config::{PoolConfig, ProxyConfig};

use super::plan::Change;

/// What a cut-over mark line starts with.
const PREFIX: &str = "# shardring migrate cut over: ";

/// What a pending deletion's mark line starts with.
const DELETING_PREFIX: &str = "# shardring migrate deleting moved keys: ";

/// The step of a change a mark records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Cut over, the old membership not dropped yet: `servers` are the new ones.
    CutOver,
    /// Finished, the moved keys not yet deleted from their old servers (`--delete-moved` failed):
    /// `servers` are the old ones. Written with the drop of the next membership, removed once the
    /// deletion is done (or given up for a new change); etcd keeps the same line under the pool's
    /// `delete-moved` key.
    Deleting,
}

impl Step {
    fn prefix(self) -> &'static str {
        match self {
            Step::CutOver => PREFIX,
            Step::Deleting => DELETING_PREFIX,
        }
    }

    /// The step a mark line records, and the rest of it.
    fn of(line: &str) -> Option<(Step, &str)> {
        [Step::CutOver, Step::Deleting]
            .into_iter()
            .find_map(|s| Some((s, line.trim_end().strip_prefix(s.prefix())?)))
    }
}

/// A step of one pool's change, recorded in the `--to` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// What it records.
    pub step: Step,
    /// The pool that was cut over (a file may hold several pools, each with its own change).
    pub pool: String,
    /// The digest of the placement the pool had before the cut-over.
    pub from: String,
    /// The digest of the placement it has after.
    pub to: String,
    /// The servers after the cut-over ([`Step::CutOver`]: the `--to` file's own list is the old one
    /// until `next` is dropped), or before it ([`Step::Deleting`]: the ones to delete from).
    pub servers: Vec<TwemproxyServer>,
    /// Whether `servers` are a Redis Cluster's seeds (`kind=redis-cluster` in the line): a change
    /// onto a cluster, whose pool a proxy must then place by the cluster's slot map.
    pub cluster: bool,
}

impl Mark {
    /// The record of `change`'s cut-over: the servers it was cut over to.
    pub(super) fn cut_over(change: &Change) -> Mark {
        Mark::of(Step::CutOver, change, &change.next)
    }

    /// The record of `change`'s moved keys still to be deleted from their old servers.
    pub(super) fn deleting(change: &Change) -> Mark {
        Mark::of(Step::Deleting, change, &change.now)
    }

    /// The mark of `step` of `change`, listing `pool`'s servers.
    fn of(step: Step, change: &Change, pool: &PoolConfig) -> Mark {
        Mark {
            step,
            pool: change.now.name.clone(),
            from: change.now.membership().digest(),
            to: change.next.membership().digest(),
            servers: pool.servers.clone(),
            cluster: pool.cluster().is_some(),
        }
    }

    /// `config` with each pool whose `next_text` (the `--next-config` file's text) has a mark, and
    /// whose own servers are still the ones that mark was cut over from, given the mark's servers:
    /// the state every proxy is in once its own file is rewritten. With the lines that say so, for
    /// the log. A pool whose servers are neither (a file edited since) is left as its file says,
    /// and a mark that does not parse is ignored: `shardring migrate` refuses both.
    pub fn apply(mut config: ProxyConfig, next_text: &str) -> (ProxyConfig, Vec<String>) {
        let mut notes = Vec::new();
        for pool in &mut config.pools {
            let mark = match Mark::find(next_text, &pool.name) {
                Ok(Some(mark)) if mark.step == Step::CutOver => mark,
                Ok(_) => continue,
                Err(e) => {
                    notes.push(format!(
                        "pool {}: the next file's {e:#}: ignored",
                        pool.name
                    ));
                    continue;
                }
            };
            if pool.membership().digest() == mark.from {
                notes.push(format!(
                    "pool {}: the next file marks a cut-over from placement {} (this file's) to {}: \
                     serving the marked servers until this file is rewritten",
                    pool.name, mark.from, mark.to
                ));
                pool.set_servers(mark.servers, mark.cluster);
            }
        }
        (config, notes)
    }

    /// Whether this record is of the change from `old` to `new` (their placements' digests): a
    /// deletion it records is still the one to do while the pool's servers are `new`.
    pub(super) fn is_change(&self, old: &PoolConfig, new: &PoolConfig) -> bool {
        old.membership().digest() == self.from && new.membership().digest() == self.to
    }

    /// What a run that does the deletion this records says (`place`: where the record is).
    pub(super) fn resuming_deletion(&self, place: &str) -> String {
        format!(
            "shardring: pool {}'s change from {} to {} is done but its moved keys were not all \
             deleted from their old servers (recorded {place}): deleting them",
            self.pool, self.from, self.to
        )
    }

    /// What a run that gives up the deletion this records says, and `why`.
    pub(super) fn giving_up_deletion(&self, why: &str) -> String {
        format!(
            "shardring: warning: pool {}'s change from {} to {} left moved keys on their old servers \
             (--delete-moved was not finished); {why}, so that deletion is given up (the keys stay \
             there; a copy onto such a server compares and replaces what it finds)",
            self.pool, self.from, self.to
        )
    }

    /// The comment line, with its newline.
    pub fn line(&self) -> String {
        let servers: Vec<String> = self.servers.iter().map(ToString::to_string).collect();
        format!(
            "{}pool={} from={} to={} {}servers={}\n",
            self.step.prefix(),
            self.pool,
            self.from,
            self.to,
            if self.cluster {
                "kind=redis-cluster "
            } else {
                ""
            },
            servers.join(",")
        )
    }

    /// The mark of `pool` in `text`, if any.
    ///
    /// # Errors
    /// When a mark line of `pool` does not parse (a hand edit), or there are two: guessing could
    /// reverse the change.
    pub fn find(text: &str, pool: &str) -> Result<Option<Mark>> {
        let mut found = None;
        for line in text.lines() {
            let Some(mark) = Mark::parse(line) else {
                continue;
            };
            let mark = mark.with_context(|| format!("the mark {line:?}"))?;
            if mark.pool != pool {
                continue;
            }
            if found.is_some() {
                bail!("two marks of pool {pool}");
            }
            found = Some(mark);
        }
        Ok(found)
    }

    /// The mark `line` is, if it is one (`Some(Err)`: a mark line that does not parse).
    pub fn parse(line: &str) -> Option<Result<Mark>> {
        let (step, rest) = Step::of(line)?;
        Some(rest.parse::<Fields>().map(|f| Mark {
            step,
            pool: f.pool,
            from: f.from,
            to: f.to,
            servers: f.servers,
            cluster: f.cluster,
        }))
    }

    /// `text` with pool `pool`'s marks (of any step) removed.
    pub fn without(text: &str, pool: &str) -> String {
        text.split_inclusive('\n')
            .filter(|line| {
                let of_pool = Mark::parse(line).is_some_and(|m| m.is_ok_and(|m| m.pool == pool));
                !of_pool
            })
            .collect()
    }

    /// `text` with this mark as its first line (and no other of its pool).
    pub fn put(&self, text: &str) -> String {
        let mut out = self.line();
        if text.contains("\r\n") {
            out = out.replace('\n', "\r\n");
        }
        out.push_str(&Mark::without(text, &self.pool));
        out
    }
}

/// A mark line's fields.
struct Fields {
    pool: String,
    from: String,
    to: String,
    servers: Vec<TwemproxyServer>,
    cluster: bool,
}

impl FromStr for Fields {
    type Err = anyhow::Error;

    /// `pool=P from=D to=D [kind=redis-cluster] servers=S,S` (the line after its prefix), in that
    /// order.
    fn from_str(rest: &str) -> Result<Fields> {
        let rest = rest.trim();
        let (rest, cluster) = match rest.split_once(" kind=redis-cluster ") {
            Some((head, tail)) => (format!("{head} {tail}"), true),
            None => (rest.to_owned(), false),
        };
        let mut words = rest.splitn(4, ' ');
        let mut field = |name: &str| -> Result<String> {
            words
                .next()
                .and_then(|w| w.strip_prefix(name)?.strip_prefix('='))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .with_context(|| format!("no {name}="))
        };
        let (pool, from, to) = (field("pool")?, field("from")?, field("to")?);
        // Last, as a server's name follows its address after a space.
        let list = field("servers")?;
        let servers = list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<TwemproxyServer>()
                    .map_err(|e| anyhow::anyhow!("server {s:?}: {e}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Fields {
            pool,
            from,
            to,
            servers,
            cluster,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(pool: &str) -> Mark {
        Mark {
            step: Step::CutOver,
            pool: pool.to_owned(),
            from: "aa11".to_owned(),
            to: "bb22".to_owned(),
            servers: ["127.0.0.1:11211:1 mc-a", "127.0.0.1:11212:2"]
                .iter()
                .map(|s| s.parse().unwrap())
                .collect(),
            cluster: false,
        }
    }

    #[test]
    fn a_mark_reads_back_as_written() {
        let text = mark("alpha").put("alpha:\n  servers:\n   - 127.0.0.1:11213:1\n");
        assert!(text.starts_with(
            "# shardring migrate cut over: pool=alpha from=aa11 to=bb22 servers=127.0.0.1:11211:1 mc-a,127.0.0.1:11212:2\nalpha:\n"
        ));
        assert_eq!(Mark::find(&text, "alpha").unwrap(), Some(mark("alpha")));
        assert_eq!(Mark::find(&text, "beta").unwrap(), None);
        let cluster = Mark {
            cluster: true,
            ..mark("alpha")
        };
        let line = cluster.line();
        assert!(
            line.contains(" to=bb22 kind=redis-cluster servers=127.0.0.1:11211:1 mc-a,"),
            "{line}"
        );
        assert_eq!(Mark::find(&line, "alpha").unwrap(), Some(cluster));
        assert_eq!(
            Mark::without(&text, "alpha"),
            "alpha:\n  servers:\n   - 127.0.0.1:11213:1\n"
        );
    }

    #[test]
    fn each_pool_has_its_own_mark_and_putting_one_replaces_it() {
        let text = mark("beta").put(&mark("alpha").put("alpha:\n"));
        let mut again = mark("alpha");
        again.to = "cc33".to_owned();
        let text = again.put(&text);
        assert_eq!(Mark::find(&text, "alpha").unwrap(), Some(again));
        assert_eq!(Mark::find(&text, "beta").unwrap(), Some(mark("beta")));
        assert_eq!(text.matches(PREFIX).count(), 2, "{text}");
    }

    #[test]
    fn a_proxy_reading_a_cut_over_onto_a_cluster_serves_the_seeds_as_a_cluster() {
        let file =
            "alpha:\n  listen: 127.0.0.1:22121\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n";
        let config = ProxyConfig::from_yaml(file).unwrap();
        let now = &config.pools[0];
        let seeds = [TwemproxyServer::from_str("127.0.0.1:7000:1").unwrap()];
        let mut next = now.clone();
        next.servers = seeds.to_vec();
        next.redis_mut().unwrap().cluster = Some(shardring_config::ClusterConfig::new(vec![
            "127.0.0.1:7000".into(),
        ]));
        let mark = Mark {
            step: Step::CutOver,
            pool: "alpha".into(),
            from: now.membership().digest(),
            to: next.membership().digest(),
            servers: seeds.to_vec(),
            cluster: true,
        };
        let (served, notes) = Mark::apply(config.clone(), &mark.put(file));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let pool = &served.pools[0];
        assert_eq!(pool.servers, seeds);
        assert_eq!(
            pool.membership().digest(),
            mark.to,
            "served as the cluster it was cut over to"
        );
    }

    #[test]
    fn a_mark_that_does_not_parse_is_an_error_not_ignored() {
        let text = "# shardring migrate cut over: pool=alpha from=aa11\nalpha:\n";
        assert!(Mark::find(text, "alpha").is_err());
        let two = format!("{}{}", mark("alpha").line(), mark("alpha").line());
        assert!(Mark::find(&two, "alpha").is_err());
    }
}
