//! Key → server: a pool's [`Placement`] over its live servers, published with arc-swap so lookups never
//! lock and ejection, rejoin and reload swap it whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use shardring::compat::twemproxy::{self, Distribution, TwemproxyServer};
use shardring::splitmix::{SplitMix64, GOLDEN_GAMMA};
use shardring::Placement;

use crate::config::{PlacementSpec, PoolConfig, SlotTable};

/// One state of a pool's placement.
#[derive(Debug)]
pub(crate) struct Routing {
    /// How keys find servers.
    how: How,
    /// For each placement node index (or random pick), the server's index in the pool's server list.
    servers: Vec<usize>,
    /// For each server of the pool (by index), whether this placement holds it.
    live: Vec<bool>,
    /// The number a [`Router`] published it under, unique in the process ([`Routing::published`]);
    /// 0 for a routing no router published (a next membership's, a fenced mask).
    published: u64,
}

/// The placement kinds.
#[derive(Debug)]
enum How {
    /// A reproducible placement (ketama, modula); its hash tag is applied inside it.
    Placement(Box<dyn Placement>),
    /// twemproxy's `random`: any live server, per request.
    Random,
    /// A Redis Cluster's slot map (`crate::cluster`): a key's slot (CRC16 of it or of its
    /// `{hash tag}`, as Redis Cluster defines them) names its master. Indices are the pool's.
    Slots(Arc<SlotTable>),
    /// A fenced proxy's routing (`crate::fence`): the first's owner of a key when the second (the
    /// next membership) gives the same, else none.
    Masked(Box<(Arc<Routing>, Arc<Routing>)>),
}

impl Routing {
    /// The index (in the pool's server list) of the server that owns `key`; `None` when no server is live.
    pub(crate) fn server_for(&self, key: &[u8]) -> Option<usize> {
        match &self.how {
            How::Placement(p) => p.locate(key).map(|i| self.servers[i]),
            How::Random if self.servers.is_empty() => None,
            How::Random => {
                let r = random_u64() % self.servers.len() as u64;
                Some(self.servers[r as usize])
            }
            How::Slots(table) => table
                .owner(usize::from(shardring_resp::key_slot(key)))
                .filter(|&s| self.is_live(s)),
            How::Masked(both) => {
                let (now, next) = &**both;
                let owner = now.server_for(key)?;
                (next.server_for(key) == Some(owner)).then_some(owner)
            }
        }
    }

    /// Whether keys are placed by a Redis Cluster's slot map: a multi-key command is then split by
    /// slot, not only by server (a cluster refuses keys of two slots in one command).
    pub(crate) fn by_slot(&self) -> bool {
        match &self.how {
            How::Slots(_) => true,
            // A fenced cluster pool still splits by slot (what it serves goes to cluster nodes).
            How::Masked(both) => both.0.by_slot(),
            How::Placement(_) | How::Random => false,
        }
    }

    /// Which publication of a pool's router this is: two routings a router published are the same
    /// one exactly when their numbers are equal. Unlike the routing's address, a number is never
    /// given again, so a routing freed and a new one built at its address are never taken for each
    /// other (a session compares them to keep its requests in order across a change: `session`).
    #[inline(always)]
    pub(crate) fn published(&self) -> u64 {
        self.published
    }

    /// `now` with every key whose owner differs in `next` (or that `next` does not place) left
    /// without a server: what a fenced proxy serves. Built per request, on that cold path only.
    pub(crate) fn masked(now: Arc<Routing>, next: Arc<Routing>) -> Routing {
        Routing {
            servers: now.servers.clone(),
            live: now.live.clone(),
            how: How::Masked(Box::new((now, next))),
            published: 0,
        }
    }

    /// The owners of many keys (`out[i]` for `keys[i]`), as [`Routing::server_for`] gives them.
    pub(crate) fn servers_for(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        match &self.how {
            // One batch through the placement: a ring overlaps the keys' cache misses.
            How::Placement(p) => {
                p.locate_many(keys, out);
                for o in out.iter_mut() {
                    *o = o.map(|i| self.servers[i]);
                }
            }
            How::Random | How::Slots(_) | How::Masked(_) => {
                for (key, o) in keys.iter().zip(out.iter_mut()) {
                    *o = self.server_for(key);
                }
            }
        }
    }

    /// The owners of keys of Redis Cluster slots `slots` (`out[i]` for `slots[i]`); `None` for
    /// every one when keys are not placed by a slot map, and when fenced (whether a key moves is
    /// known by the key, not by its slot: each is refused, the fence's cost).
    pub(crate) fn servers_for_slots(&self, slots: &[u16], out: &mut [Option<usize>]) {
        for (slot, o) in slots.iter().zip(out.iter_mut()) {
            *o = match &self.how {
                How::Slots(table) => table.owner(usize::from(*slot)).filter(|&s| self.is_live(s)),
                _ => None,
            };
        }
    }

    /// Fills `out` with up to `count` distinct servers for `key`, the first being
    /// [`Routing::server_for`]'s (the library's replica walk: the ring's next distinct nodes). Only
    /// reproducible placements have replicas; `random` gives its one pick.
    pub(crate) fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        out.clear();
        match &self.how {
            How::Placement(p) => {
                p.replicas_into(key, count, out);
                for o in out.iter_mut() {
                    *o = self.servers[*o];
                }
            }
            How::Random | How::Slots(_) => out.extend(self.server_for(key)),
            How::Masked(both) => {
                if self.server_for(key).is_some() {
                    both.0.replicas_into(key, count, out);
                }
            }
        }
    }

    /// Whether this is a fenced proxy's routing ([`Routing::masked`]): a key it leaves without a
    /// server is refused, never read as a miss.
    pub(crate) fn is_masked(&self) -> bool {
        matches!(self.how, How::Masked(_))
    }

    /// Whether the placement holds server `server` (index in the pool).
    pub(crate) fn is_live(&self, server: usize) -> bool {
        self.live.get(server).copied().unwrap_or(false)
    }

    /// How many servers the pool has, live or not.
    pub(crate) fn total_servers(&self) -> usize {
        self.live.len()
    }

    /// How many servers the placement holds.
    pub(crate) fn live_servers(&self) -> usize {
        self.servers.len()
    }

    /// The servers the placement holds (indices in the pool's server list).
    pub(crate) fn servers(&self) -> &[usize] {
        &self.servers
    }

    /// This routing with its server indices renumbered: server `i` of the list it was built over
    /// is server `to[i]` of a list of `total` (a next membership's servers among the pool's).
    pub(crate) fn renumbered(mut self, to: &[usize], total: usize) -> Routing {
        let mut live = vec![false; total];
        for s in &mut self.servers {
            *s = to.get(*s).copied().unwrap_or(*s);
            if let Some(l) = live.get_mut(*s) {
                *l = true;
            }
        }
        self.live = live;
        self
    }
}

/// A cheap, well-mixed per-call number for `distribution: random` and `RANDOMKEY`'s pick of a
/// server (the library's SplitMix64 over a shared counter); nothing here needs unpredictability.
pub(crate) fn random_u64() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0x853c_49e6_748f_ea9b);
    // Relaxed: each caller only needs a distinct counter value, nothing is published through it.
    let state = STATE
        .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
        .wrapping_add(GOLDEN_GAMMA);
    SplitMix64::mix(state)
}

/// Builds the routing of pool `config` over the servers whose `live` flag is set: its cluster's slot
/// map for a Redis Cluster pool (no map read yet: no key has a server), else [`build_placement`].
///
/// # Errors
/// The library's, for servers it refuses (duplicate names, weight 0).
pub(crate) fn build_routing(
    config: &PoolConfig,
    live: &[bool],
) -> Result<Routing, shardring::Error> {
    let Some(cluster) = config.cluster() else {
        return build_placement(config.placement_spec(), live);
    };
    let live: Vec<bool> = (0..config.servers.len())
        .map(|i| live.get(i).copied().unwrap_or(false))
        .collect();
    let table = cluster.slots.clone().unwrap_or_default();
    // The masters that serve slots: what a command across every server goes to. A master without
    // slots (one being added, or a replica a node has not yet heard is one) holds no key of its own.
    let servers = (0..live.len())
        .filter(|&i| live[i] && table.serves_any(i))
        .collect();
    Ok(Routing {
        how: How::Slots(table),
        servers,
        live,
        published: 0,
    })
}

impl Routing {
    /// A next membership's cluster map (`table`, over the pool's `total` servers): every master
    /// that serves a slot is in it. What dual writes to a cluster go by.
    pub(crate) fn slots(table: SlotTable, total: usize) -> Routing {
        let servers: Vec<usize> = (0..total).filter(|&i| table.serves_any(i)).collect();
        let mut live = vec![false; total];
        for &s in &servers {
            live[s] = true;
        }
        Routing {
            how: How::Slots(Arc::new(table)),
            servers,
            live,
            published: 0,
        }
    }
}

/// Builds the placement of `spec` over the servers whose `live` flag is set: nutcracker's own placement
/// (the library's byte-exact `ketama` and `modula`), so with every server live a key goes where
/// nutcracker sends it, and with some ejected it goes where nutcracker sends it after ejecting the same
/// servers (nutcracker too rebuilds its continuum over the live servers only).
///
/// # Errors
/// The library's, for servers it refuses (duplicate names, weight 0).
pub(crate) fn build_placement(
    spec: PlacementSpec<'_>,
    live: &[bool],
) -> Result<Routing, shardring::Error> {
    let picked: Vec<usize> = (0..spec.servers.len())
        .filter(|&i| live.get(i).copied().unwrap_or(false))
        .collect();
    let live_flags: Vec<bool> = (0..spec.servers.len())
        .map(|i| live.get(i).copied().unwrap_or(false))
        .collect();
    if spec.distribution == Distribution::Random {
        return Ok(Routing {
            how: How::Random,
            servers: picked,
            live: live_flags,
            published: 0,
        });
    }
    let live_servers: Vec<TwemproxyServer> =
        picked.iter().map(|&i| spec.servers[i].clone()).collect();
    let placement =
        twemproxy::placement(&live_servers, spec.hash, spec.hash_tag, spec.distribution)?;
    // The placement orders its nodes by its own rules: map them back to server indices by name (names
    // are unique: the library refused the servers otherwise).
    let servers = placement
        .nodes()
        .iter()
        .filter_map(|n| {
            spec.servers
                .iter()
                .position(|s| s.display_name() == n.name())
        })
        .collect();
    Ok(Routing {
        how: How::Placement(placement),
        servers,
        live: live_flags,
        published: 0,
    })
}

/// A gutter pool: where a dead server's keys go instead of its successors.
#[derive(Debug)]
pub(crate) struct Gutter {
    /// The placement over the gutter servers (indices among them).
    routing: Routing,
    /// Where the gutter servers start in the pool's server list (after the pool's own servers).
    offset: usize,
    /// The longest TTL, in seconds, a value stored in the gutter gets.
    pub(crate) ttl_cap: u32,
}

impl Gutter {
    /// The gutter of the pool placed by `pool` (its servers placed with the pool's hash and
    /// distribution, and listed after the pool's own).
    ///
    /// # Errors
    /// The library's, for servers it refuses.
    pub(crate) fn build(
        pool: PlacementSpec<'_>,
        gutter: &crate::config::GutterConfig,
    ) -> Result<Gutter, shardring::Error> {
        let spec = PlacementSpec {
            servers: &gutter.servers,
            ..pool
        };
        Ok(Gutter {
            routing: build_placement(spec, &vec![true; gutter.servers.len()])?,
            offset: pool.servers.len(),
            ttl_cap: gutter.ttl_cap,
        })
    }

    /// The gutter server (index in the pool's server list) for `key`.
    pub(crate) fn server_for(&self, key: &[u8]) -> Option<usize> {
        self.routing.server_for(key).map(|i| i + self.offset)
    }

    /// Whether `server` (index in the pool's server list) is a gutter server.
    pub(crate) fn holds(&self, server: usize) -> bool {
        server >= self.offset
    }
}

/// The number the next routing published takes ([`Routing::published`]); 0 is never given.
static PUBLICATIONS: AtomicU64 = AtomicU64::new(1);

/// `routing`, numbered for publication.
fn numbered(mut routing: Routing) -> Routing {
    // Relaxed: only the number's uniqueness matters, which every ordering gives. Readers see it
    // through the routing's publication (arc-swap's store and load order what the routing holds).
    routing.published = PUBLICATIONS.fetch_add(1, Ordering::Relaxed);
    routing
}

/// A pool's current routing, swapped atomically.
#[derive(Debug)]
pub(crate) struct Router {
    /// The published state.
    current: ArcSwap<Routing>,
}

impl Router {
    /// A router starting at `routing`.
    pub(crate) fn new(routing: Routing) -> Router {
        Router {
            current: ArcSwap::from_pointee(numbered(routing)),
        }
    }

    /// The current routing (a cheap snapshot; hold it for one request).
    pub(crate) fn load(&self) -> arc_swap::Guard<std::sync::Arc<Routing>> {
        self.current.load()
    }

    /// Publishes a new routing; requests already routed keep their servers.
    pub(crate) fn store(&self, routing: Routing) {
        self.current.store(std::sync::Arc::new(numbered(routing)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pool: &PoolConfig) -> PlacementSpec<'_> {
        PlacementSpec {
            servers: &pool.servers,
            hash: pool.hash,
            hash_tag: pool.hash_tag,
            distribution: pool.distribution,
        }
    }

    #[test]
    fn placement_is_nutcrackers() {
        let mut pool = PoolConfig::new(
            "p",
            "127.0.0.1:0",
            &["127.0.0.1:11211:1", "127.0.0.1:11212:1 b"],
        )
        .unwrap();
        pool.hash_tag = Some(*b"{}");
        let r = build_placement(spec(&pool), &[true, true]).unwrap();
        let lib = twemproxy::placement(&pool.servers, pool.hash, pool.hash_tag, pool.distribution)
            .unwrap();
        for i in 0..500 {
            let key = format!("k{{{i}}}x");
            let want = lib.lookup(key.as_bytes()).unwrap().name().to_owned();
            let got = r.server_for(key.as_bytes()).unwrap();
            assert_eq!(pool.servers[got].display_name(), want);
            assert_eq!(
                r.server_for(format!("other{{{i}}}").as_bytes()),
                Some(got),
                "hash tag"
            );
        }
    }

    #[test]
    fn a_batch_is_placed_as_its_keys_one_by_one() {
        for distribution in [Distribution::Ketama, Distribution::Modula] {
            let mut pool = PoolConfig::new(
                "p",
                "127.0.0.1:0",
                &[
                    "127.0.0.1:1:1",
                    "127.0.0.1:2:2 b",
                    "127.0.0.1:3:1",
                    "127.0.0.1:4:3",
                ],
            )
            .unwrap();
            pool.distribution = distribution;
            pool.hash_tag = Some(*b"{}");
            let r = build_placement(spec(&pool), &[true, false, true, true]).unwrap();
            let keys: Vec<String> = (0..300).map(|i| format!("k{{{}}}:{i}", i % 7)).collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let mut out = vec![None; refs.len()];
            r.servers_for(&refs, &mut out);
            let one_by_one: Vec<Option<usize>> = refs.iter().map(|k| r.server_for(k)).collect();
            assert_eq!(out, one_by_one, "{distribution:?}");
        }
    }

    #[test]
    fn random_picks_only_live_servers() {
        let mut pool =
            PoolConfig::new("p", "127.0.0.1:0", &["127.0.0.1:1:1", "127.0.0.1:2:1"]).unwrap();
        pool.distribution = Distribution::Random;
        let r = build_placement(spec(&pool), &[false, true]).unwrap();
        assert!((0..100).all(|i| r.server_for(format!("{i}").as_bytes()) == Some(1)));
    }

    #[test]
    fn ejected_servers_get_no_keys_and_the_rest_stay_put() {
        let pool = PoolConfig::new(
            "p",
            "127.0.0.1:0",
            &["127.0.0.1:1:1", "127.0.0.1:2:1", "127.0.0.1:3:1"],
        )
        .unwrap();
        let all = build_placement(spec(&pool), &[true, true, true]).unwrap();
        let two = build_placement(spec(&pool), &[true, false, true]).unwrap();
        for i in 0..2000 {
            let key = format!("key:{i}");
            let before = all.server_for(key.as_bytes()).unwrap();
            let after = two.server_for(key.as_bytes()).unwrap();
            assert_ne!(after, 1);
            if before != 1 {
                assert_eq!(before, after);
            }
        }
        let none = build_placement(spec(&pool), &[false, false, false]).unwrap();
        assert_eq!(none.server_for(b"x"), None);
    }

    #[test]
    fn replica_lists_start_at_the_owner_and_repeat_no_server() {
        let pool = PoolConfig::new(
            "p",
            "127.0.0.1:0",
            &[
                "127.0.0.1:1:1",
                "127.0.0.1:2:2",
                "127.0.0.1:3:1",
                "127.0.0.1:4:1",
            ],
        )
        .unwrap();
        let all = build_placement(spec(&pool), &[true; 4]).unwrap();
        let mut out = Vec::new();
        for i in 0..2000 {
            let key = format!("key:{i}");
            all.replicas_into(key.as_bytes(), 3, &mut out);
            assert_eq!(out.len(), 3);
            assert_eq!(Some(out[0]), all.server_for(key.as_bytes()));
            let mut seen = out.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), 3, "{out:?}");
        }
    }

    #[test]
    fn without_its_owner_a_key_goes_to_its_second_replica() {
        // Why a dead server's keys still hit with two replicas: ketama gives them to the next server
        // of the ring, which is where the second copy was written.
        let pool = PoolConfig::new(
            "p",
            "127.0.0.1:0",
            &["127.0.0.1:1:1", "127.0.0.1:2:1", "127.0.0.1:3:1"],
        )
        .unwrap();
        let all = build_placement(spec(&pool), &[true; 3]).unwrap();
        let two = build_placement(spec(&pool), &[true, false, true]).unwrap();
        let mut out = Vec::new();
        for i in 0..2000 {
            let key = format!("key:{i}");
            all.replicas_into(key.as_bytes(), 2, &mut out);
            if out[0] == 1 {
                assert_eq!(two.server_for(key.as_bytes()), Some(out[1]));
            }
        }
    }
}
