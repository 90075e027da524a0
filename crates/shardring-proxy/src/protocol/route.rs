//! Where a key goes, for every protocol: the pool's placement now, and what the remedies add to it
//! (each key's replica list, the gutter server of a key whose server is ejected and the TTL cap
//! there, its owner next while a planned change is under way, its server on the previous ring while a
//! warm-up window is open).
//!
//! A protocol's planner places keys through a [`Placer`], built per request from the seam's
//! [`PlanContext`] and the pool's [`Remedies`]: one [`Route`] per key, computed once, which the
//! protocol's features read and turn into frames. memcached and Redis place keys the same way here;
//! what differs between them is only which remedies a pool of each may have.

use std::sync::Arc;

use crate::config::PoolConfig;
use crate::error::BackendError;
use crate::error::ProxyError;
use crate::hot_keys::HotKeys;
use crate::metrics::PoolStats;
use crate::protocol::{PlanContext, PoolState, PreviousRouting};
use crate::rate_limit::RateLimiter;
use crate::router::{build_placement, Gutter, Routing};
use crate::split::{SplitRoute, SplitSet};

/// What a pool adds to placing keys, whatever its protocol: built once per pool version.
#[derive(Debug, Clone)]
pub(crate) struct Remedies {
    /// The pool's hot-key detection and cache, when on (shared by the pool's versions).
    hot: Option<Arc<HotKeys>>,
    /// The placement over every server, ejected or not, when keys have replicas or a gutter:
    /// replica lists stay put while servers come and go (only which of them are live changes).
    full: Option<Arc<Routing>>,
    /// The gutter pool's placement, when the pool has one; its servers follow the pool's.
    gutter: Option<Arc<Gutter>>,
    /// How many servers hold each key (1: no replicas).
    replicas: usize,
    /// The pool's rate limits, when it has any (this version's: a reload starts them full).
    limits: Option<Arc<RateLimiter>>,
    /// The pool's split keys, when it has any (this version's).
    split: Option<Arc<SplitSet>>,
}

impl Remedies {
    /// The remedies of `config`'s pool, whatever its protocol: its replicas, its gutter pool
    /// (memcached's), its hot keys (`pool`'s, shared by the pool's versions).
    ///
    /// # Errors
    /// When the full placement or the gutter's cannot be built.
    pub(crate) fn build(config: &PoolConfig, pool: &PoolState<'_>) -> Result<Remedies, ProxyError> {
        let replicas = config.replicas();
        let gutter = config.memcache_remedies().gutter.as_ref();
        let placement = |reason: String| ProxyError::Placement {
            pool: config.name.clone(),
            reason,
        };
        let gutter_placement = match gutter {
            Some(g) => Some(
                Gutter::build(config.placement_spec(), g)
                    .map_err(|e| placement(format!("gutter: {e}")))?,
            ),
            None => None,
        };
        let split = config
            .remedies
            .split
            .as_ref()
            .map(|s| Arc::new(SplitSet::new(s)));
        let full = if replicas > 1 || gutter_placement.is_some() || split.is_some() {
            let servers = config.servers.len() + gutter.map_or(0, |g| g.servers.len());
            let all = vec![true; servers];
            Some(Arc::new(
                build_placement(config.placement_spec(), &all)
                    .map_err(|e| placement(e.to_string()))?,
            ))
        } else {
            None
        };
        Ok(Remedies {
            hot: pool.hot.map(Arc::clone),
            full,
            gutter: gutter_placement.map(Arc::new),
            replicas: replicas.max(1),
            limits: RateLimiter::new(&config.name, config.rate_limits).map(Arc::new),
            split,
        })
    }
}

/// What a protocol places keys with, for one request: the seam's placements and the pool's
/// remedies.
#[derive(Debug)]
pub(crate) struct Placer<'a> {
    /// Key → server over the live servers.
    routing: &'a Routing,
    /// The pool's tallies.
    pub(crate) stats: &'a Arc<PoolStats>,
    /// The pool's hot-key detection and cache, when on.
    pub(crate) hot: Option<&'a Arc<HotKeys>>,
    /// The placement over every server, ejected or not, when keys have replicas or a gutter: where
    /// a key's replica list and its owner while ejected come from.
    full: Option<&'a Routing>,
    /// The gutter pool, when the pool has one: a dead server's keys go there (with `full`).
    gutter: Option<&'a Gutter>,
    /// How many servers hold each key (1 without replicas).
    replicas: usize,
    /// The previous ring while a warm-up window is open.
    pub(crate) previous: Option<PreviousRouting<'a>>,
    /// The next membership's placement while the pool has one (dual writes).
    next: Option<&'a Routing>,
    /// When the pool started, for uptime.
    pub(crate) started: std::time::Instant,
    /// The pool's rate limits, when it has any.
    limits: Option<&'a RateLimiter>,
    /// The pool's split keys, when it has any.
    split: Option<&'a Arc<SplitSet>>,
}

impl<'a> Placer<'a> {
    /// The placements of one request: the seam's, and the pool's remedies. Inlined: it is a few
    /// references copied, on every request.
    #[inline(always)]
    pub(crate) fn new(ctx: &PlanContext<'a>, remedies: &'a Remedies) -> Placer<'a> {
        Placer {
            routing: ctx.routing,
            stats: ctx.stats,
            hot: remedies.hot.as_ref(),
            full: remedies.full.as_deref(),
            gutter: remedies.gutter.as_deref(),
            replicas: remedies.replicas,
            previous: ctx.previous,
            next: ctx.next,
            started: ctx.started,
            limits: remedies.limits.as_deref(),
            split: remedies.split.as_ref(),
        }
    }

    /// Whether the pool has rate limits: only then does a request ask [`Placer::admit`].
    #[inline(always)]
    pub(crate) fn limited(&self) -> bool {
        self.limits.is_some()
    }

    /// Whether a request for `keys` (none for a request of the whole pool) may go on: always,
    /// unless the pool has rate limits and it, or one of the keys, is over its own
    /// ([`RateLimiter::admit`]). The refusal is the request's answer.
    #[inline]
    pub(crate) fn admit<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), BackendError> {
        match self.limits {
            Some(limits) => limits.admit(self.hot, keys, self.stats),
            None => Ok(()),
        }
    }

    /// The server (index in the pool) that owns `key`; `None` when no server is live. With a gutter, a
    /// key whose server is ejected goes to its gutter server rather than to the next live server.
    /// Inlined: the plans of several files call it, and out of line it is a call on every request.
    #[inline(always)]
    pub(crate) fn server_for(&self, key: &[u8]) -> Option<usize> {
        if let Some(gutter) = self.gutter {
            return self.server_or_gutter(gutter, key);
        }
        self.routing.server_for(key)
    }

    /// [`Placer::server_for`] in a pool with a gutter.
    #[cold]
    fn server_or_gutter(&self, gutter: &Gutter, key: &[u8]) -> Option<usize> {
        if let Some(full) = self.full {
            match full.server_for(key) {
                Some(owner) if self.routing.is_live(owner) => return Some(owner),
                _ => {
                    if let Some(g) = gutter.server_for(key) {
                        self.stats.gutter_requests.inc();
                        return Some(g);
                    }
                }
            }
        }
        self.routing.server_for(key)
    }

    /// The gutter's TTL cap when `server` is a gutter server: what a write sent there must cap its
    /// TTL to.
    pub(crate) fn gutter_ttl_cap(&self, server: usize) -> Option<u32> {
        self.gutter.filter(|g| g.holds(server)).map(|g| g.ttl_cap)
    }

    /// The owners of many keys at once (`out[i]` for `keys[i]`): one batch through the placement,
    /// which overlaps the keys' cache misses (key by key when a gutter may take some of them).
    pub(crate) fn servers_for(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        if self.gutter.is_some() {
            for (key, o) in keys.iter().zip(out.iter_mut()) {
                *o = self.server_for(key);
            }
        } else {
            self.routing.servers_for(keys, out);
        }
    }

    /// The owners of keys whose Redis Cluster slots are `slots` (`out[i]` for `slots[i]`), in a
    /// pool placed by a slot map ([`Placer::by_slot`]): a split computes each key's slot once.
    pub(crate) fn servers_for_slots(&self, slots: &[u16], out: &mut [Option<usize>]) {
        self.routing.servers_for_slots(slots, out);
    }

    /// Whether keys are placed by a Redis Cluster's slot map: a split is then by slot, not only by
    /// server.
    pub(crate) fn by_slot(&self) -> bool {
        self.routing.by_slot()
    }

    /// Whether the proxy is fenced (`crate::fence`): keys it leaves without a server are refused,
    /// and a multi-get with one fails whole rather than read it as a miss.
    pub(crate) fn fenced(&self) -> bool {
        self.routing.is_masked()
    }

    /// The servers in the placement now (not ejected), for requests sent to every server.
    pub(crate) fn live_servers(&self) -> &[usize] {
        self.routing.servers()
    }

    /// How many servers the pool has, live or not.
    pub(crate) fn servers(&self) -> usize {
        self.routing.total_servers()
    }

    /// Whether a planned change is under way (the pool has a next membership that places keys
    /// differently): writes of the keys it moves go to both owners.
    pub(crate) fn changing(&self) -> bool {
        self.next.is_some()
    }

    /// The next membership's servers (indices in the pool's server list), while the pool has one:
    /// those it adds hold the copies dual writes made, which a request for every server (a flush)
    /// must reach too, or they come back at the cut-over.
    pub(crate) fn next_servers(&self) -> &[usize] {
        self.next.map_or(&[][..], Routing::servers)
    }

    /// Whether the next membership is a Redis Cluster: a dual write of many keys is split by slot,
    /// and a one-server command's keys must share one.
    pub(crate) fn next_by_slot(&self) -> bool {
        self.next.is_some_and(Routing::by_slot)
    }

    /// While the pool has a next membership: `key`'s owner there when it is not `now` (its owner
    /// now), where a write of it goes too (a dual write). `None` without a next membership, or
    /// when the owner does not change.
    #[inline]
    pub(crate) fn next_owner(&self, key: &[u8], now: Option<usize>) -> Option<usize> {
        let next = self.next?.server_for(key)?;
        (Some(next) != now).then_some(next)
    }

    /// The live servers of `key`'s replica list, owner first (the owner placed as nutcracker places
    /// it over all the pool's servers, then the ring's next distinct servers, dead ones left out);
    /// empty when the pool has no replicas or every replica is dead.
    pub(crate) fn live_replicas(&self, key: &[u8]) -> Vec<usize> {
        let Some(full) = self.full.filter(|_| self.replicas > 1) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(self.replicas);
        full.replicas_into(key, self.replicas, &mut out);
        out.retain(|&s| self.routing.is_live(s));
        out
    }

    /// Where `key` goes, placed once: its server now, its live replica list when keys have
    /// replicas ([`Placer::live_replicas`]; the server now when all of them are dead), the TTL cap
    /// when that server is a gutter server, its owner next while a planned change moves it, and its
    /// server on the previous ring when it moved.
    pub(crate) fn route(&self, key: &[u8]) -> Route {
        let server = self.server_for(key);
        let replicas = (self.replicas > 1 && self.full.is_some()).then(|| {
            let mut out = self.live_replicas(key);
            if out.is_empty() {
                out.extend(server);
            }
            out
        });
        Route {
            server,
            replicas,
            ttl_cap: server.and_then(|s| self.gutter_ttl_cap(s)),
            previous: self.moved_from(key, server),
            next: self.next_owner(key, server),
        }
    }

    /// Where `key` goes when it is split (`crate::split`); `None` when it is not, or has no server.
    #[inline]
    pub(crate) fn split_route(&self, key: &[u8], owner: Option<usize>) -> Option<Box<SplitRoute>> {
        match (self.split, owner, self.full) {
            (Some(split), Some(owner), Some(full)) => {
                split.route(key, owner, full, self.routing, self.replicas)
            }
            _ => None,
        }
    }

    /// Whether the pool has split keys (`crate::split`).
    #[inline(always)]
    pub(crate) fn splits(&self) -> bool {
        self.split.is_some()
    }

    /// While a warm-up window is open and `key` (whose server is `now`) moved: its server on the
    /// previous ring (an index among that ring's servers, for parts sent to
    /// [`crate::protocol::Placement::Previous`]). `None` otherwise.
    fn moved_from(&self, key: &[u8], now: Option<usize>) -> Option<usize> {
        let previous = self.previous?;
        let old = previous.routing.server_for(key)?;
        match previous.now.get(old).copied().flatten() {
            Some(same) if Some(same) == now => None,
            _ => Some(old),
        }
    }

    /// How many servers hold each key (1 when the pool has no replicas).
    pub(crate) fn replicas(&self) -> usize {
        self.replicas
    }
}

/// Where one key goes, as [`Placer::route`] places it: what the planners and the features read.
#[derive(Debug)]
pub(crate) struct Route {
    /// Its server now (a gutter server while its own is ejected); `None` when no server is live.
    pub(crate) server: Option<usize>,
    /// The live servers of its replica list, owner first, when keys have replicas.
    pub(crate) replicas: Option<Vec<usize>>,
    /// `server` is a gutter server: what a write sent there caps its TTL to.
    pub(crate) ttl_cap: Option<u32>,
    /// While a warm-up window is open and the key moved: its server on the previous ring.
    pub(crate) previous: Option<usize>,
    /// While the pool has a next membership and the key's owner there is not `server`: that owner,
    /// where its writes go too.
    pub(crate) next: Option<usize>,
}

impl Route {
    /// The server a read goes to first: the first live replica, or the server now.
    pub(crate) fn first(&self) -> Option<usize> {
        match &self.replicas {
            Some(replicas) => replicas.first().copied(),
            None => self.server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of `n` servers (none of them started: only placed).
    fn pool(n: usize) -> PoolConfig {
        let servers: Vec<String> = (0..n)
            .map(|i| format!("10.0.0.{}:11211:1", i + 1))
            .collect();
        let refs: Vec<&str> = servers.iter().map(String::as_str).collect();
        let mut config = PoolConfig::new("p", "127.0.0.1:0", &refs).unwrap();
        // Spreads these few similar keys over every server (what the test needs of the ring).
        config.hash = shardring::hash::TwemproxyHash::Md5;
        config
    }

    fn placed(config: &PoolConfig, live: &[bool]) -> Routing {
        build_placement(config.placement_spec(), live).unwrap()
    }

    fn context<'a>(
        routing: &'a Routing,
        previous: Option<PreviousRouting<'a>>,
        stats: &'a Arc<PoolStats>,
    ) -> PlanContext<'a> {
        PlanContext {
            routing,
            previous,
            next: None,
            stats,
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_replicated_keys_route_lists_its_live_replicas_owner_first_and_reads_from_the_first() {
        let mut config = pool(4);
        config.remedies.replicas = 3;
        let full = placed(&config, &[true; 4]);
        let remedies = Remedies::build(&config, &PoolState::default()).unwrap();
        let stats = Arc::new(PoolStats::new("p"));
        for key in (0..50).map(|i| format!("key{i}")) {
            let mut replicas = Vec::new();
            full.replicas_into(key.as_bytes(), 3, &mut replicas);
            // The owner is ejected: the route keeps the other two, in the ring's order.
            let mut live = [true; 4];
            live[replicas[0]] = false;
            let routing = placed(&config, &live);
            let ctx = context(&routing, None, &stats);
            let placer = Placer::new(&ctx, &remedies);
            let route = placer.route(key.as_bytes());
            assert_eq!(route.replicas.as_deref(), Some(&replicas[1..]), "{key}");
            assert_eq!(route.first(), Some(replicas[1]));
            assert_eq!(route.server, routing.server_for(key.as_bytes()));
            assert_eq!(route.previous, None, "no warm-up window is open");
        }
    }

    #[test]
    fn a_key_that_moved_routes_to_its_server_on_the_previous_ring_and_one_that_stayed_does_not() {
        let (old_config, config) = (pool(3), pool(4));
        let old = placed(&old_config, &[true; 3]);
        let routing = placed(&config, &[true; 4]);
        let now = [Some(0), Some(1), Some(2)];
        let previous = PreviousRouting {
            routing: &old,
            now: &now,
        };
        let stats = Arc::new(PoolStats::new("p"));
        let ctx = context(&routing, Some(previous), &stats);
        let remedies = Remedies::build(&config, &PoolState::default()).unwrap();
        let placer = Placer::new(&ctx, &remedies);
        let (mut moved, mut stayed) = (0, 0);
        for key in (0..200).map(|i| format!("key{i}")) {
            let route = placer.route(key.as_bytes());
            let was = old.server_for(key.as_bytes());
            assert_eq!(route.server, routing.server_for(key.as_bytes()));
            if route.server == was {
                assert_eq!(route.previous, None, "{key} stayed on its server");
                stayed += 1;
            } else {
                assert_eq!(route.previous, was, "{key} moved");
                moved += 1;
            }
            assert_eq!(route.replicas, None, "no replicas");
            assert_eq!(route.ttl_cap, None, "no gutter");
        }
        assert!(moved > 0 && stayed > 0, "{moved} moved, {stayed} stayed");
    }
}
