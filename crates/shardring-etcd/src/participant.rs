//! A client-side ring that takes part in planned membership changes exactly as a proxy does: for
//! Rust applications that talk to memcached or Redis themselves and must not race a
//! `shardring migrate`.
//!
//! A [`Participant`] follows the pool's current *and* next membership in etcd, registers in the
//! pool's roster with the digests of what it serves (the proxies' digests:
//! [`PlacementSpec::digest`]), and keeps a [`Fence`]. The application asks a [`View`] where each key
//! goes ([`View::route`]):
//!
//! - reads go to [`Route::owner`] (the owner now);
//! - writes go to the owner now and, while a next membership exists and the key's owner there
//!   differs, to [`Route::next`] too; a write is acknowledged to the application's caller only once
//!   both took it, so that the copy `shardring migrate` makes never loses it (the order: owner now
//!   first, as the proxy pipelines them);
//! - while the participant cannot confirm its place in etcd during a change, a key whose owner
//!   differs between the two memberships is refused ([`Fenced`]), every other key served.
//!
//! `migrate` then waits for the application's acknowledgement as for a proxy's, and a participant cut
//! off from etcd neither blocks the change forever (an operator can `shardring members forget` it
//! once it is gone) nor serves a value the change made stale.
//!
//! ```no_run
//! use shardring_etcd::{EtcdSource, Participant, PoolRules};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let source = EtcdSource::builder(&["http://127.0.0.1:2379"], "cache").with_next(true).build();
//! let ring = Participant::start(&source, "web-7", PoolRules::default()).await?; // the pool's hash, tag, distribution
//! let view = ring.view(); // one per request: lock-free
//! match view.route(b"user:42")? {
//!     // Err(Fenced): retry later
//!     Some(route) => {
//!         // get: route.owner.addr(); set/delete/incr…: every m in route.writes(), in order
//!         let _ = (route.owner.addr(), route.writes().count());
//!     }
//!     None => { /* the pool has no servers */ }
//! }
//! ring.stop().await; // a clean stop: lease revoked, roster entry removed
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use shardring::compat::twemproxy::{Distribution, PlacementSpec, TwemproxyServer};
use shardring::hash::TwemproxyHash;
use shardring::membership::{Member, MembershipSnapshot};
use shardring::Placement;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{admin, take_part, twemproxy_servers, EtcdError, EtcdSource, Fence, Registration};
use crate::{Kind, Kinds, PoolRead, Update};

/// The pool's placement rules, as its twemproxy YAML states them (the servers come from etcd):
/// they must be the proxies' for the digests, and every key's owner, to agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolRules {
    /// `hash`.
    pub hash: TwemproxyHash,
    /// `hash_tag`.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution` (`ketama` or `modula`; `random` places no key reproducibly).
    pub distribution: Distribution,
}

impl Default for PoolRules {
    /// nutcracker's defaults: `fnv1a_64`, no hash tag, `ketama`.
    fn default() -> PoolRules {
        PoolRules {
            hash: TwemproxyHash::Fnv1a64,
            hash_tag: None,
            distribution: Distribution::Ketama,
        }
    }
}

/// Counters of a participant, for the application to report.
#[derive(Debug, Default)]
pub struct ParticipantStats {
    /// The etcd revision of the memberships in use.
    pub revision: AtomicU64,
    /// Memberships that built and published new placements.
    pub published: AtomicU64,
    /// Memberships refused (empty, unbuildable) and connection losses.
    pub errors: AtomicU64,
    /// Malformed server values seen.
    pub malformed: AtomicU64,
    /// Keys refused while fenced.
    pub fenced: AtomicU64,
}

/// One membership, placed.
struct Placed {
    /// As etcd holds it (by name).
    snapshot: MembershipSnapshot,
    /// Key → placement node.
    placement: Box<dyn Placement>,
    /// Placement node → index in `snapshot.members()` (the placement orders its nodes by its own
    /// rules: nutcracker's sorted order).
    members_of_nodes: Vec<usize>,
    /// [`PlacementSpec::digest`] of it under the pool's rules.
    digest: String,
}

impl Placed {
    fn new(snapshot: MembershipSnapshot, rules: PoolRules) -> Result<Placed, String> {
        let servers: Vec<TwemproxyServer> =
            twemproxy_servers(snapshot.members()).map_err(|e| e.to_string())?;
        let spec = PlacementSpec {
            servers: &servers,
            hash: rules.hash,
            hash_tag: rules.hash_tag,
            distribution: rules.distribution,
        };
        let placement = spec.placement().map_err(|e| e.to_string())?;
        let members_of_nodes = placement
            .nodes()
            .iter()
            .map(|n| {
                servers
                    .iter()
                    .position(|s| s.display_name() == n.name())
                    .ok_or_else(|| {
                        format!(
                            "the placement names a server {:?} it was not given",
                            n.name()
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Placed {
            placement,
            members_of_nodes,
            digest: spec.digest(),
            snapshot,
        })
    }

    fn owner(&self, key: &[u8]) -> Option<&Member> {
        let node = self.placement.locate(key)?;
        let member = *self.members_of_nodes.get(node)?;
        self.snapshot.members().get(member)
    }
}

/// The memberships in use: swapped whole.
struct Memberships {
    current: Placed,
    next: Option<Placed>,
}

/// What the participant's tasks and its views share.
struct Shared {
    rules: PoolRules,
    allow_empty: bool,
    state: ArcSwap<Memberships>,
    /// Held over an apply, so that two never interleave.
    applying: Mutex<()>,
    fence: Fence,
    serving: watch::Sender<Registration>,
    stats: Arc<ParticipantStats>,
}

impl Shared {
    /// Swaps in `current` and `next` unless they are older or equal (or refused).
    fn apply(
        &self,
        current: MembershipSnapshot,
        next: Option<MembershipSnapshot>,
    ) -> Result<(), String> {
        let Ok(_applying) = self.applying.lock() else {
            return Err("participant state poisoned".into());
        };
        let now = self.state.load();
        if current.revision() < now.current.snapshot.revision() {
            return Ok(());
        }
        let same_next = match (&now.next, &next) {
            (None, None) => true,
            (Some(a), Some(b)) => a.snapshot.same_members(b),
            _ => false,
        };
        if now.current.snapshot.same_members(&current) && same_next {
            self.stats
                .revision
                .store(current.revision(), Ordering::Relaxed);
            self.registered(&now, current.revision());
            return Ok(());
        }
        if current.is_empty() && !self.allow_empty {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                pool_revision = current.revision(),
                "etcd has no servers for the pool; refused, the current servers stay"
            );
            return Err("empty".into());
        }
        let revision = current.revision();
        let placed = Memberships {
            current: Placed::new(current, self.rules)?,
            next: next.map(|n| Placed::new(n, self.rules)).transpose()?,
        };
        tracing::info!(
            revision,
            servers = placed.current.snapshot.members().len(),
            next = placed.next.as_ref().map(|n| n.snapshot.members().len()),
            "memberships from etcd swapped in"
        );
        self.registered(&placed, revision);
        self.state.store(Arc::new(placed));
        self.stats.revision.store(revision, Ordering::Relaxed);
        self.stats.published.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Hands what is served to the registration task (the proxies' value: digests and revision).
    fn registered(&self, m: &Memberships, revision: u64) {
        let revision = i64::try_from(revision).unwrap_or(i64::MAX);
        self.serving.send_replace(Registration {
            current: m.current.digest.clone(),
            next: m.next.as_ref().map(|n| n.digest.clone()),
            current_revision: revision,
            next_revision: if m.next.is_some() { revision } else { 0 },
        });
    }

    fn on_update(&self, update: Update) {
        let result = match update {
            Update::Snapshot(s) => self.apply(s, None),
            Update::Planned {
                current,
                next,
                kinds,
            } => ring_sets(current, next, kinds).and_then(|(c, n)| self.apply(c, n)),
            Update::Malformed(bad) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%bad, "skipping a malformed server in etcd");
                Ok(())
            }
            Update::Lost { .. } => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "memberships from etcd refused; the current ones stay");
        }
    }

    fn apply_read(&self, read: PoolRead) -> bool {
        (!read.snapshot.is_empty() || self.allow_empty)
            && ring_sets(read.snapshot, read.next, read.kinds)
                .and_then(|(c, n)| self.apply(c, n))
                .is_ok()
    }
}

/// The member sets a participant places: rings only. A current set that is a Redis Cluster (or of
/// a kind this version cannot read) is refused, a next one left out, logged: the participant then
/// does not claim to serve it, and a migration onto it waits for it (or for it to be stopped or
/// forgotten) instead of copying keys a write through it would not reach.
fn ring_sets(
    current: MembershipSnapshot,
    next: Option<MembershipSnapshot>,
    kinds: Kinds,
) -> Result<(MembershipSnapshot, Option<MembershipSnapshot>), String> {
    if kinds.current != Kind::Ring {
        return Err(format!(
            "the pool's servers are a {} (its `kind` key): a participant places rings only",
            kinds.current
        ));
    }
    if next.is_some() && kinds.next != Kind::Ring {
        tracing::warn!(kind = %kinds.next, "the pool's next membership is not a ring: this participant cannot place its keys and does not take part in the change (a migration onto it waits for this participant until it is stopped)");
        return Ok((current, None));
    }
    Ok((current, next))
}

/// A client-side ring taking part in the pool's planned changes (see the [module docs](self)).
/// Dropping it stops its tasks; [`Participant::stop`] also waits for the clean stop (its lease
/// revoked, its roster entry removed).
pub struct Participant {
    shared: Arc<Shared>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Participant {
    /// Reads the pool from `source` (built [`with_next`](crate::EtcdSourceBuilder::with_next)),
    /// places its memberships under `rules`, then follows it and keeps the participant `id`
    /// registered until stopped. `id` names the participant in the roster: keep it across restarts
    /// of the same application instance (a restarted instance answers for its predecessor's entry,
    /// so a migration waiting for it goes on) and unique among instances. Must run inside a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`EtcdError::Refused`] for a source that does not follow `next/`, an id that cannot be a key,
    /// an empty pool, or memberships that cannot be placed under `rules`; [`EtcdError`] when etcd
    /// cannot be read.
    pub async fn start(
        source: &EtcdSource,
        id: &str,
        rules: PoolRules,
    ) -> Result<Participant, EtcdError> {
        if !source.follows_next() {
            return Err(EtcdError::Refused(
                "a participant follows the next membership too: build the source with_next(true)"
                    .into(),
            ));
        }
        if id.is_empty() || id.contains('/') || id.contains(char::is_whitespace) {
            return Err(EtcdError::Refused(format!(
                "the participant id {id:?} is empty or contains '/' or whitespace"
            )));
        }
        let read = source.read().await?;
        let (snapshot, next) =
            ring_sets(read.snapshot, read.next, read.kinds).map_err(EtcdError::Refused)?;
        let read = PoolRead {
            snapshot,
            next,
            ..read
        };
        if read.snapshot.is_empty() {
            return Err(EtcdError::Refused(format!(
                "etcd has no servers under {}",
                source.keys().servers_prefix()
            )));
        }
        let first = Memberships {
            current: Placed::new(read.snapshot, rules).map_err(EtcdError::Refused)?,
            next: read
                .next
                .map(|n| Placed::new(n, rules))
                .transpose()
                .map_err(EtcdError::Refused)?,
        };
        let stats = Arc::new(ParticipantStats::default());
        let revision = first.current.snapshot.revision();
        stats.revision.store(revision, Ordering::Relaxed);
        let (serving, _) = watch::channel(Registration::default());
        let shared = Arc::new(Shared {
            rules,
            allow_empty: false,
            state: ArcSwap::from_pointee(first),
            applying: Mutex::new(()),
            fence: Fence::default(),
            serving,
            stats,
        });
        shared.registered(&shared.state.load(), revision);
        // Registered before the application routes anything, then read again: a change published
        // meanwhile is seen here, and one published later waits for this participant.
        let seat = take_part::Seat {
            source,
            id,
            ttl: admin::DEFAULT_REGISTRATION_TTL,
        };
        let value = shared.serving.borrow().clone();
        let registered = take_part::register_before_serving(seat, &value).await;
        if registered.is_some() {
            if let Ok(read) = source.read().await {
                shared.apply_read(read);
            }
        }
        let stop = CancellationToken::new();
        let watcher = {
            let (shared, source, stop) = (Arc::clone(&shared), source.clone(), stop.clone());
            tokio::spawn(async move { source.watch(|u| shared.on_update(u), stop).await })
        };
        let registration = {
            let (shared, source, stop, id) = (
                Arc::clone(&shared),
                source.clone(),
                stop.clone(),
                id.to_owned(),
            );
            tokio::spawn(async move {
                let seat = take_part::Seat {
                    source: &source,
                    id: &id,
                    ttl: admin::DEFAULT_REGISTRATION_TTL,
                };
                take_part::take_part(
                    seat,
                    shared.serving.subscribe(),
                    &shared.fence,
                    |renewed| {
                        let planned = shared.state.load().next.is_some();
                        take_part::confirmation(&source, renewed, planned, |read| {
                            shared.apply_read(read)
                        })
                    },
                    stop,
                    registered,
                )
                .await;
            })
        };
        Ok(Participant {
            shared,
            stop,
            tasks: vec![watcher, registration],
        })
    }

    /// Where keys go now: one view per request (or per batch), read without a lock.
    pub fn view(&self) -> View {
        let state = self.shared.state.load_full();
        let unconfirmed = if state.next.is_some() {
            self.shared.fence.unconfirmed_for()
        } else {
            None
        };
        View {
            state,
            unconfirmed,
            stats: Arc::clone(&self.shared.stats),
        }
    }

    /// How long the registration has gone without a confirmation from etcd, when that is longer
    /// than the fence time (whether or not a change is under way: during one, the keys that move
    /// are refused meanwhile); `None` while confirmed.
    pub fn unconfirmed_for(&self) -> Option<Duration> {
        self.shared.fence.unconfirmed_for()
    }

    /// The participant's counters.
    pub fn stats(&self) -> &Arc<ParticipantStats> {
        &self.shared.stats
    }

    /// What the participant reports in etcd now.
    pub fn registration(&self) -> Registration {
        self.shared.serving.borrow().clone()
    }

    /// Stops following etcd and leaves the roster cleanly (lease revoked, roster entry removed):
    /// for an instance that serves nothing any more.
    pub async fn stop(mut self) {
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for Participant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Participant")
            .field("rules", &self.shared.rules)
            .field("serving", &*self.shared.serving.borrow())
            .finish_non_exhaustive()
    }
}

/// The memberships at one moment, and whether the participant was fenced then.
pub struct View {
    state: Arc<Memberships>,
    unconfirmed: Option<Duration>,
    stats: Arc<ParticipantStats>,
}

/// Where one key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'a> {
    /// The owner now: reads go here, and every write.
    pub owner: &'a Member,
    /// The key's owner in the next membership when a change is under way and it differs: every
    /// write goes here too, after the owner, and is acknowledged once both took it.
    pub next: Option<&'a Member>,
}

impl Route<'_> {
    /// The servers a write goes to, in order.
    pub fn writes(&self) -> impl Iterator<Item = &Member> {
        std::iter::once(self.owner).chain(self.next)
    }
}

/// A key refused because the participant cannot confirm its place in etcd during a planned change
/// and the key's owner changes: a retry may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fenced: cannot confirm this participant's registration in etcd for {unconfirmed:?} during a planned change; keys that move are refused (retry)")]
pub struct Fenced {
    /// How long the registration has gone unconfirmed.
    pub unconfirmed: Duration,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("members", &self.members())
            .field("next_members", &self.next_members())
            .field("unconfirmed", &self.unconfirmed)
            .finish_non_exhaustive()
    }
}

impl View {
    /// Where `key` goes; `Ok(None)` when the pool has no server.
    ///
    /// # Errors
    /// [`Fenced`] for a key whose owner changes, while the participant is fenced.
    pub fn route(&self, key: &[u8]) -> Result<Option<Route<'_>>, Fenced> {
        let Some(owner) = self.state.current.owner(key) else {
            return Ok(None);
        };
        let next = match &self.state.next {
            Some(n) => match n.owner(key) {
                Some(m) if m.addr() == owner.addr() => None,
                Some(m) => Some(m),
                None => None,
            },
            None => None,
        };
        if let (Some(unconfirmed), Some(_)) = (self.unconfirmed, next) {
            self.stats.fenced.fetch_add(1, Ordering::Relaxed);
            return Err(Fenced { unconfirmed });
        }
        Ok(Some(Route { owner, next }))
    }

    /// The current membership.
    pub fn members(&self) -> &[Member] {
        self.state.current.snapshot.members()
    }

    /// The next membership, while a change is under way.
    pub fn next_members(&self) -> Option<&[Member]> {
        self.state.next.as_ref().map(|n| n.snapshot.members())
    }

    /// Whether the participant was fenced when this view was taken (keys that move are refused).
    pub fn fenced(&self) -> bool {
        self.unconfirmed.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The owner of every key is the server the library's placement names (nutcracker's, checked
    /// against nutcracker's own output in the library), also where the placement orders its nodes
    /// otherwise than etcd lists the members (by name): names of other lengths, and modula.
    #[test]
    fn a_key_goes_to_the_member_the_placement_names() {
        let members: Vec<Member> = [("aa", 1), ("b", 2), ("ccc", 1), ("d", 3)]
            .iter()
            .enumerate()
            .map(|(i, (name, w))| Member::new(*name, format!("10.0.0.{i}:11211"), *w).unwrap())
            .collect();
        let snapshot = MembershipSnapshot::new(1, members.clone()).unwrap();
        for distribution in [Distribution::Ketama, Distribution::Modula] {
            let rules = PoolRules {
                distribution,
                ..PoolRules::default()
            };
            let placed = Placed::new(snapshot.clone(), rules).unwrap();
            let servers = twemproxy_servers(&members).unwrap();
            let oracle = shardring::compat::twemproxy::placement(
                &servers,
                rules.hash,
                rules.hash_tag,
                distribution,
            )
            .unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for i in 0..2000 {
                let key = format!("key:{i}");
                let named = oracle.nodes()[oracle.locate(key.as_bytes()).unwrap()]
                    .name()
                    .to_owned();
                let owner = placed.owner(key.as_bytes()).unwrap();
                assert_eq!(owner.name(), named, "{distribution} {key}");
                seen.insert(owner.name().to_owned());
            }
            assert_eq!(seen.len(), 4, "{distribution}: every member owns keys");
        }
    }
}
