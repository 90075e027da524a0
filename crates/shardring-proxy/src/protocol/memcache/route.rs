//! Where a memcached key goes: the pool's placement now, and what the remedies add to it (each key's
//! replica list, the gutter server of a key whose server is ejected and the TTL cap there, the key's
//! server on the previous ring while a warm-up window is open).
//!
//! The planner places keys through a [`Placer`] built per request from the seam's [`PlanContext`] and
//! the protocol's own placements: one [`Route`] per key, computed once, which the remedies read.

use std::sync::Arc;

use crate::hot_keys::HotKeys;
use crate::metrics::PoolStats;
use crate::protocol::{PlanContext, PreviousRouting};
use crate::router::{Gutter, Routing};

/// What the memcached protocol places keys with, for one request.
#[derive(Debug)]
pub(super) struct Placer<'a> {
    /// Key → server over the live servers.
    routing: &'a Routing,
    /// The pool's tallies.
    pub(super) stats: &'a Arc<PoolStats>,
    /// The pool's hot-key detection and cache, when on.
    pub(super) hot: Option<&'a Arc<HotKeys>>,
    /// The placement over every server, ejected or not, when keys have replicas or a gutter: where
    /// a key's replica list and its owner while ejected come from.
    full: Option<&'a Routing>,
    /// The gutter pool, when the pool has one: a dead server's keys go there (with `full`).
    gutter: Option<&'a Gutter>,
    /// How many servers hold each key (1 without replicas).
    replicas: usize,
    /// The previous ring while a warm-up window is open.
    pub(super) previous: Option<PreviousRouting<'a>>,
    /// The next membership's placement while the pool has one (dual writes).
    next: Option<&'a Routing>,
}

impl<'a> Placer<'a> {
    /// The placements of one request: the seam's, and the protocol's own.
    pub(super) fn new(
        ctx: &PlanContext<'a>,
        hot: Option<&'a Arc<HotKeys>>,
        full: Option<&'a Routing>,
        gutter: Option<&'a Gutter>,
        replicas: usize,
    ) -> Placer<'a> {
        Placer {
            routing: ctx.routing,
            stats: ctx.stats,
            hot,
            full,
            gutter,
            replicas,
            previous: ctx.previous,
            next: ctx.next,
        }
    }

    /// The server (index in the pool) that owns `key`; `None` when no server is live. With a gutter, a
    /// key whose server is ejected goes to its gutter server rather than to the next live server.
    pub(super) fn server_for(&self, key: &[u8]) -> Option<usize> {
        if let (Some(gutter), Some(full)) = (self.gutter, self.full) {
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
    pub(super) fn gutter_ttl_cap(&self, server: usize) -> Option<u32> {
        self.gutter.filter(|g| g.holds(server)).map(|g| g.ttl_cap)
    }

    /// The owners of many keys at once (`out[i]` for `keys[i]`): one batch through the placement,
    /// which overlaps the keys' cache misses (key by key when a gutter may take some of them).
    pub(super) fn servers_for(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        if self.gutter.is_some() {
            for (key, o) in keys.iter().zip(out.iter_mut()) {
                *o = self.server_for(key);
            }
        } else {
            self.routing.servers_for(keys, out);
        }
    }

    /// Whether the proxy is fenced (`crate::fence`): keys it leaves without a server are refused,
    /// and a multi-get with one fails whole rather than read it as a miss.
    pub(super) fn fenced(&self) -> bool {
        self.routing.is_masked()
    }

    /// The servers in the placement now (not ejected), for requests sent to every server.
    pub(super) fn live_servers(&self) -> &[usize] {
        self.routing.servers()
    }

    /// Where `key` goes, placed once: its server now, its live replica list when keys have
    /// replicas (the owner placed as nutcracker places it over all the pool's servers, then the ring's
    /// next distinct servers, dead ones left out; the server now when all of them are dead), the TTL
    /// cap when that server is a gutter server, and its server on the previous ring when it moved.
    pub(super) fn route(&self, key: &[u8]) -> Route {
        let server = self.server_for(key);
        let replicas = match (self.full, self.replicas > 1) {
            (Some(full), true) => {
                let mut out = Vec::with_capacity(self.replicas);
                full.replicas_into(key, self.replicas, &mut out);
                out.retain(|&s| self.routing.is_live(s));
                if out.is_empty() {
                    out.extend(server);
                }
                Some(out)
            }
            _ => None,
        };
        Route {
            server,
            replicas,
            ttl_cap: server.and_then(|s| self.gutter_ttl_cap(s)),
            previous: self.moved_from(key, server),
            next: self
                .next
                .and_then(|n| n.server_for(key))
                .filter(|&n| Some(n) != server),
        }
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
    pub(super) fn replicas(&self) -> usize {
        self.replicas
    }
}

/// Where one key goes, as [`Placer::route`] places it: what the planner and the remedies read.
#[derive(Debug)]
pub(super) struct Route {
    /// Its server now (a gutter server while its own is ejected); `None` when no server is live.
    pub(super) server: Option<usize>,
    /// The live servers of its replica list, owner first, when keys have replicas.
    pub(super) replicas: Option<Vec<usize>>,
    /// `server` is a gutter server: what a write sent there caps its TTL to.
    pub(super) ttl_cap: Option<u32>,
    /// While a warm-up window is open and the key moved: its server on the previous ring.
    pub(super) previous: Option<usize>,
    /// While the pool has a next membership and the key's owner there is not `server`: that owner,
    /// where its writes go too.
    pub(super) next: Option<usize>,
}

impl Route {
    /// The server a read goes to first: the first live replica, or the server now.
    pub(super) fn first(&self) -> Option<usize> {
        match &self.replicas {
            Some(replicas) => replicas.first().copied(),
            None => self.server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::router::build_placement;

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
        config: &'a PoolConfig,
    ) -> PlanContext<'a> {
        PlanContext {
            routing,
            previous,
            next: None,
            stats,
            config,
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_replicated_keys_route_lists_its_live_replicas_owner_first_and_reads_from_the_first() {
        let config = pool(4);
        let full = placed(&config, &[true; 4]);
        let stats = Arc::new(PoolStats::new("p"));
        for key in (0..50).map(|i| format!("key{i}")) {
            let mut replicas = Vec::new();
            full.replicas_into(key.as_bytes(), 3, &mut replicas);
            // The owner is ejected: the route keeps the other two, in the ring's order.
            let mut live = [true; 4];
            live[replicas[0]] = false;
            let routing = placed(&config, &live);
            let ctx = context(&routing, None, &stats, &config);
            let placer = Placer::new(&ctx, None, Some(&full), None, 3);
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
        let ctx = context(&routing, Some(previous), &stats, &config);
        let placer = Placer::new(&ctx, None, None, None, 1);
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
