//! What moves: the pool now and next, placed through the library exactly as the proxy places them
//! (nutcracker's hash, hash tag, distribution, weights and names), and one copy job per server of
//! the pool now, whose route sends each key it owns now to its owner next.

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use shardring::compat::twemproxy::{ketama_ring, Distribution};
use shardring_config::PoolConfig;
use shardring_migrate::{Endpoint, Job, Survey};
use shardring_proxy::cluster::read::SlotMap;

/// How long one seed node may take to give its cluster's slot map.
const MAP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A planned change of one pool.
#[derive(Debug)]
pub(super) struct Change {
    /// The pool as the proxies serve it now.
    pub now: PoolConfig,
    /// The pool next (its servers and placement; its other settings are `now`'s). When it is a
    /// Redis Cluster (`# shardring: redis-cluster` in the `--to` file), its servers are the seeds.
    pub next: PoolConfig,
    /// When next is a Redis Cluster: its masters and slots ([`Change::read_cluster`]), which place
    /// the keys the copy sends.
    pub cluster: Option<SlotMap>,
}

impl Change {
    /// The change from `now` to `next`, checked: the same protocol, database and password, and the
    /// same placement rules unless `all_keys` (a new hash, hash tag or distribution moves nearly
    /// every key).
    ///
    /// # Errors
    /// What cannot be migrated safely, said plainly.
    pub fn new(now: PoolConfig, next: PoolConfig, all_keys: bool) -> Result<Change> {
        if now.membership().digest() == next.membership().digest() {
            bail!(
                "pool {}: the next membership places every key where it is now: nothing to migrate",
                now.name
            );
        }
        if now.cluster().is_some() && next.cluster().is_some() {
            bail!(
                "pool {}: now and next are both Redis Clusters: reshard the cluster itself \
                 (redis-cli --cluster reshard); the proxy follows its slot map",
                now.name
            );
        }
        if now.cluster().is_some() {
            bail!(
                "pool {}: a change from a Redis Cluster onto other servers is not supported (only \
                 onto a cluster, from a ring of redis servers)",
                now.name
            );
        }
        if now.is_redis() != next.is_redis() {
            bail!(
                "pool {}: the next file speaks the other protocol (redis:)",
                now.name
            );
        }
        if let (Some(a), Some(b)) = (now.redis(), next.redis()) {
            if a.db != b.db || a.auth != b.auth {
                bail!(
                    "pool {}: redis_db or redis_auth differ between now and next; both memberships' \
                     servers must take the pool's database and password",
                    now.name
                );
            }
        }
        if next.cluster().is_some() {
            if let Some(db) = now.redis().map(|r| r.db).filter(|&db| db != 0) {
                bail!(
                    "pool {}: redis_db: {db}: the next membership is a Redis Cluster, which has \
                     database 0 only",
                    now.name
                );
            }
            if !all_keys {
                bail!(
                    "pool {}: the next membership is a Redis Cluster, which places every key by its \
                     slot: nearly every key moves; pass --all-keys to copy them all",
                    now.name
                );
            }
        }
        let (a, b) = (now.placement_spec(), next.placement_spec());
        if !a.same_rules(&b) && !all_keys {
            bail!(
                "pool {}: the next membership changes the hash, hash tag or distribution \
                 ({} {} → {} {}), which moves nearly every key, not only those of the servers that \
                 change; pass --all-keys to copy them all",
                now.name,
                a.hash,
                a.distribution,
                b.hash,
                b.distribution
            );
        }
        Ok(Change {
            now,
            next,
            cluster: None,
        })
    }

    /// Reads the next cluster's slot map from its seeds, when next is a Redis Cluster (plain TCP,
    /// with the pool's password). The map read here places the copies; the proxies follow the
    /// cluster's own, which is the same unless the cluster is resharded during the copy (a key a
    /// master refuses with `MOVED` is then never taken for copied: a rerun copies it where the
    /// map then says).
    ///
    /// # Errors
    /// When no seed gives a map.
    pub async fn read_cluster(&mut self) -> Result<()> {
        let Some(cluster) = self.next.cluster() else {
            return Ok(());
        };
        let auth = self
            .now
            .redis()
            .and_then(|r| r.auth.clone().map(|p| (r.user.clone(), p)));
        let map = shardring_proxy::cluster::read::slot_map(&cluster.seeds, auth, MAP_TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!(e))
            .with_context(|| {
                format!(
                    "pool {}: reading the next membership's Redis Cluster slot map from its seeds ({})",
                    self.now.name,
                    cluster.seeds.join(", ")
                )
            })?;
        if map.slots.served() < shardring_config::SLOTS {
            bail!(
                "pool {}: the next membership's Redis Cluster serves {} of {} slots: every slot \
                 needs a master before keys can be moved onto it",
                self.now.name,
                map.slots.served(),
                shardring_config::SLOTS
            );
        }
        self.cluster = Some(map);
        Ok(())
    }

    /// The servers keys move onto: the next membership's, or its cluster's masters.
    pub fn targets(&self) -> Vec<Endpoint> {
        match &self.cluster {
            Some(map) => map
                .masters
                .iter()
                .map(|m| {
                    let mut e = Endpoint::new(m.clone(), m.clone());
                    e.auth = self.now.redis().and_then(|r| r.auth.clone());
                    e
                })
                .collect(),
            None => self
                .next
                .servers
                .iter()
                .map(|s| crate::cmd::fleet::endpoint(s, &self.now))
                .collect(),
        }
    }

    /// The protocol's name, for messages.
    pub fn protocol(&self) -> &'static str {
        if self.now.is_redis() {
            "redis"
        } else {
            "memcached"
        }
    }

    /// For each server now, whether any key it owns now can be owned by another server next.
    ///
    /// With `ketama` and the same hash and hash tag on both sides, a server keeps every key when no
    /// hash range of its changes owner (the plan `ring --diff` prints) and it keeps its address: a
    /// server that stays in a removal, say, loses nothing, and its keys need not even be scanned
    /// (a scan of a whole server at full speed is a burst of pauses its live clients wait out).
    /// Otherwise (`modula`, or new placement rules) any server may lose keys.
    pub fn may_lose_keys(&self) -> Vec<bool> {
        let (a, b) = (self.now.placement_spec(), self.next.placement_spec());
        let all = vec![true; self.now.servers.len()];
        if !a.same_rules(&b) || a.distribution != Distribution::Ketama || self.cluster.is_some() {
            return all;
        }
        let ring = |pool: &PoolConfig| ketama_ring(&pool.servers, pool.hash, pool.hash_tag);
        let (Ok(now), Ok(next)) = (ring(&self.now), ring(&self.next)) else {
            return all;
        };
        let moving: HashSet<String> = now
            .migration_to(&next)
            .into_iter()
            .filter_map(|m| m.from)
            .collect();
        self.now
            .servers
            .iter()
            .map(|s| {
                let name = s.display_name();
                let stays_put = self
                    .next
                    .servers
                    .iter()
                    .any(|n| n.display_name() == name && n.same_address(s));
                !stays_put || moving.contains(&name)
            })
            .collect()
    }

    /// One copy job per server now that may lose keys ([`Change::may_lose_keys`]): its keys whose
    /// owner next is another server go there.
    ///
    /// # Errors
    /// When a placement cannot be built (`distribution: random` places no key reproducibly).
    pub fn jobs(&self) -> Result<Vec<Job>> {
        let placed = crate::cmd::fleet::placed;
        let now = Arc::new(placed(&self.now)?);
        let targets = self.targets();
        if self.next.cluster().is_some() && self.cluster.is_none() {
            bail!("the next cluster's slot map is not read (Change::read_cluster)");
        }
        if let Some(map) = &self.cluster {
            let slots = Arc::new(map.slots.clone());
            return Ok(self
                .now
                .servers
                .iter()
                .enumerate()
                .map(|(source, server)| {
                    let (now, slots) = (Arc::clone(&now), Arc::clone(&slots));
                    let route = move |key: &[u8]| -> Option<usize> {
                        let owner = now.0.locate(key).and_then(|i| now.1[i])?;
                        if owner != source {
                            return None;
                        }
                        slots.owner(usize::from(shardring_resp::key_slot(key)))
                    };
                    Job::new(
                        crate::cmd::fleet::endpoint(server, &self.now),
                        targets.clone(),
                        Arc::new(route),
                    )
                })
                .collect());
        }
        let next = Arc::new(placed(&self.next)?);
        let loses = self.may_lose_keys();
        let jobs = self
            .now
            .servers
            .iter()
            .enumerate()
            .filter(|&(source, _)| loses[source])
            .map(|(source, server)| {
                let (now, next) = (Arc::clone(&now), Arc::clone(&next));
                // The next server at the source's own address (if it stays): its keys stay.
                let stays = self
                    .next
                    .servers
                    .iter()
                    .position(|n| n.same_address(server));
                let route = move |key: &[u8]| -> Option<usize> {
                    let owner = now.0.locate(key).and_then(|i| now.1[i])?;
                    if owner != source {
                        return None;
                    }
                    let target = next.0.locate(key).and_then(|i| next.1[i])?;
                    (Some(target) != stays).then_some(target)
                };
                Job::new(
                    crate::cmd::fleet::endpoint(server, &self.now),
                    targets.clone(),
                    Arc::new(route),
                )
            })
            .collect();
        Ok(jobs)
    }
}

/// Bytes in a short human form (`2.6 MB`).
pub(super) fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1} kB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// The plan as printed (`--dry-run`, and before every copy): per server now, its keys, those that
/// move and where.
pub(super) fn print(change: &Change, jobs: &[Job], surveys: &[Survey]) -> (u64, u64) {
    let n = change.now.servers.len();
    let sizes = match &change.cluster {
        Some(map) => format!(
            "{n} servers → a Redis Cluster of {} masters ({} slots)",
            map.masters.len(),
            map.slots.served()
        ),
        None => format!("{n} → {} servers", change.next.servers.len()),
    };
    println!(
        "pool {} ({}): {sizes}, placement {} → {}",
        change.now.name,
        change.protocol(),
        change.now.membership().digest(),
        change.next.membership().digest(),
    );
    let (mut all, mut moving, mut moving_bytes) = (0u64, 0u64, 0u64);
    for server in &change.now.servers {
        let name = server.display_name();
        let Some((job, survey)) = jobs
            .iter()
            .zip(surveys)
            .find(|(j, _)| j.source.name == name)
        else {
            println!("  {name}: keeps every key (none of its hash ranges moves: not scanned)");
            continue;
        };
        let n: u64 = survey.moving.iter().sum();
        let b: u64 = survey.moving_bytes.iter().sum();
        all += survey.keys;
        moving += n;
        moving_bytes += b;
        let to: Vec<String> = job
            .targets
            .iter()
            .zip(survey.moving.iter().zip(&survey.moving_bytes))
            .filter(|(_, (&n, _))| n > 0)
            .map(|(t, (n, b))| format!("{} {n} ({})", t.name, bytes(*b)))
            .collect();
        let gone = !change
            .next
            .servers
            .iter()
            .any(|s| s.display_name() == job.source.name);
        println!(
            "  {}{}: {} keys, {} move ({}){}{}",
            job.source.name,
            if gone { " (leaves)" } else { "" },
            survey.keys,
            n,
            bytes(b),
            if to.is_empty() { "" } else { " → " },
            to.join(", ")
        );
    }
    let whole = change.now.servers.len() - jobs.len();
    println!(
        "  total: {moving} of {all} keys{} move ({})",
        if whole == 0 { "" } else { " scanned" },
        bytes(moving_bytes)
    );
    (moving, moving_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(servers: &[&str]) -> PoolConfig {
        PoolConfig::new("p", "127.0.0.1:1", servers).unwrap()
    }

    fn change(now: &[&str], next: &[&str]) -> Change {
        Change::new(pool(now), pool(next), false).unwrap()
    }

    const ABC: [&str; 3] = [
        "127.0.0.1:11211:1 a",
        "127.0.0.1:11212:1 b",
        "127.0.0.1:11213:1 c",
    ];

    #[test]
    fn in_a_removal_only_the_server_that_leaves_loses_keys() {
        assert_eq!(
            change(&ABC, &ABC[..2]).may_lose_keys(),
            [false, false, true]
        );
        let jobs = change(&ABC, &ABC[..2]).jobs().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].source.name, "c");
    }

    #[test]
    fn in_an_addition_every_server_gives_ranges_to_the_new_one() {
        let mut next = ABC.to_vec();
        next.push("127.0.0.1:11214:1 d");
        assert_eq!(change(&ABC, &next).may_lose_keys(), [true, true, true]);
    }

    #[test]
    fn a_server_that_keeps_its_name_but_moves_address_loses_every_key() {
        let next = [ABC[0], "127.0.0.1:11299:1 b", ABC[2]];
        assert_eq!(change(&ABC, &next).may_lose_keys(), [false, true, false]);
    }

    #[test]
    fn with_modula_any_server_may_lose_keys() {
        let mut now = pool(&ABC);
        let mut next = pool(&ABC[..2]);
        now.distribution = Distribution::Modula;
        next.distribution = Distribution::Modula;
        let change = Change::new(now, next, false).unwrap();
        assert_eq!(change.may_lose_keys(), [true, true, true]);
    }
}
