//! [`EtcdSource`]: one pool's members read from etcd as whole [`MembershipSnapshot`]s.
//!
//! # How no change is missed or applied twice
//! The source reads the pool with one range request, which etcd answers at one store revision `R`, then
//! watches the pool's prefix from `R + 1`. Every change after the range therefore arrives exactly once,
//! in revision order. A resumed watch starts after the last revision whose changes were applied (or
//! that a progress notification vouched for), never after the revision etcd's answer to the watch's
//! creation carries: that is etcd's current revision, and the changes up to it are still to come. It
//! keeps the member set itself and hands out the whole set after each change, so a consumer never
//! patches anything: a repeated snapshot (after a reconnect) builds nothing in a
//! [`Follower`](shardring::membership::Follower).
//!
//! # Revisions, bursts and debounce
//! All events of one etcd revision (one transaction: `shardring members publish` writes a whole pool in
//! one) become one snapshot. With a debounce (100 ms by default) every change received within the
//! debounce after the first pending one is folded into the same snapshot, so a burst of writes is one
//! ring change; the delay from a write to its snapshot is bounded by the debounce even while writes go on.
//!
//! # Faults
//! - **etcd lost** (connection refused or reset, the stream ends, a request times out): the consumer
//!   keeps its last ring; the source reports [`Update::Lost`], waits (exponential back-off from
//!   [`retry_min`](EtcdSourceBuilder::retry_min) to [`retry_max`](EtcdSourceBuilder::retry_max)),
//!   reconnects and resumes the watch from the last revision it has, + 1.
//! - **Compaction** past that revision: etcd cancels the watch; the source reports
//!   [`Update::Resync`] and reads the pool afresh with a new range (the consumer gets the whole current
//!   set, which builds nothing if it did not change).
//! - **A malformed value**: reported as [`Update::Malformed`] and left out of the snapshots until the
//!   key is fixed or deleted.
//! - **An empty pool** is passed on as an empty snapshot; refusing it is the follower's job
//!   ([`Follower::allow_empty`](shardring::membership::Follower::allow_empty)).
//!
//! # The next membership
//! A source built [`with_next(true)`](EtcdSourceBuilder::with_next) follows a pool's planned change too
//! (the [layout](crate::layout#the-next-membership-next)): it ranges and watches the whole pool prefix
//! `<prefix><pool>/` (one range, one watch), reads `servers/` and `next/` into two member sets and their kinds, ignores
//! every other key (the proxies' registrations), and hands out [`Update::Planned`] with both sets in
//! place of [`Update::Snapshot`]. Both sets come from the same revision, so a cut-over (one transaction
//! that swaps them) arrives as one update with both sides swapped, never half of it. The revision,
//! debounce, resume and compaction rules are those above; a revision that changed only ignored keys
//! (a proxy's registration) hands out nothing, but still moves the resume point.

use std::collections::BTreeMap;
// Relaxed: the flag only decides whether a log line is written, by this one task.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions, WatchStream};
use shardring::membership::{Member, MembershipSnapshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{EtcdError, MalformedValue};
use crate::kind::{Kind, Kinds};
use crate::layout::{MemberSet, PoolKeys, DEFAULT_PREFIX};

/// What the source tells its consumer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Update {
    /// The pool's whole member set at a revision (after the first range, after each change or burst,
    /// after a resync).
    Snapshot(MembershipSnapshot),
    /// From a source built [`with_next(true)`](EtcdSourceBuilder::with_next), in place of
    /// [`Update::Snapshot`]: the pool's current and next member sets at one revision (both snapshots
    /// carry it), handed out when the same things happen as a snapshot would be.
    Planned {
        /// The servers under `servers/`.
        current: MembershipSnapshot,
        /// The servers under `next/`; `None` when no server there could be read (no change planned).
        next: Option<MembershipSnapshot>,
        /// What each set is (`kind`, `next-kind`): a ring, or a Redis Cluster's seeds.
        kinds: Kinds,
    },
    /// A server key could not be read; that server is left out.
    Malformed(MalformedValue),
    /// etcd could not be reached or the watch broke; the source retries after `retry_in`.
    Lost {
        /// What went wrong.
        error: EtcdError,
        /// How long until the next attempt.
        retry_in: Duration,
    },
    /// The watched revision was compacted; the source reads the pool afresh.
    Resync {
        /// The compaction revision etcd reported.
        compacted: i64,
    },
}

/// Builds an [`EtcdSource`]; see each setter for its default.
#[derive(Debug, Clone)]
pub struct EtcdSourceBuilder {
    /// The etcd endpoints (`http://127.0.0.1:2379`).
    endpoints: Vec<String>,
    /// The pool whose servers are read.
    pool: String,
    /// The key prefix pools live under.
    prefix: String,
    /// How long changes are folded into one snapshot.
    debounce: Duration,
    /// The first back-off after a failure.
    retry_min: Duration,
    /// The longest back-off.
    retry_max: Duration,
    /// How long a connect or a range may take.
    request_timeout: Duration,
    /// HTTP/2 keep-alive ping interval on the connection (detects a silent partition mid-watch).
    keep_alive: Duration,
    /// Whether the next membership is followed too ([`Update::Planned`]).
    with_next: bool,
}

impl EtcdSourceBuilder {
    /// The key prefix. By default, this is [`DEFAULT_PREFIX`] (`/shardring/`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> EtcdSourceBuilder {
        self.prefix = prefix.into();
        self
    }

    /// How long to fold changes into one snapshot after the first one arrives; zero emits one snapshot
    /// per etcd revision. By default, this is 100 ms.
    pub fn debounce(mut self, debounce: Duration) -> EtcdSourceBuilder {
        self.debounce = debounce;
        self
    }

    /// The wait after the first failure; each further failure doubles it up to
    /// [`retry_max`](EtcdSourceBuilder::retry_max). By default, this is 100 ms.
    pub fn retry_min(mut self, wait: Duration) -> EtcdSourceBuilder {
        self.retry_min = wait;
        self
    }

    /// The longest wait between attempts. By default, this is 5 s.
    pub fn retry_max(mut self, wait: Duration) -> EtcdSourceBuilder {
        self.retry_max = wait;
        self
    }

    /// How long connecting and a range request may take before they count as failed. By default, this
    /// is 2 s.
    pub fn request_timeout(mut self, timeout: Duration) -> EtcdSourceBuilder {
        self.request_timeout = timeout;
        self
    }

    /// The keep-alive ping interval of the connection; a watch that gets no pong within the
    /// [request timeout](EtcdSourceBuilder::request_timeout) counts as lost (a silent partition; a
    /// closed or reset connection is seen at once). By default, this is 10 s: etcd closes connections
    /// that ping more often than its `--grpc-keepalive-min-time` (5 s by default), so keep it above that.
    pub fn keep_alive(mut self, interval: Duration) -> EtcdSourceBuilder {
        self.keep_alive = interval;
        self
    }

    /// Whether to follow the pool's next membership too: range and watch all of `<prefix><pool>/` and
    /// hand out [`Update::Planned`] (current and next at one revision) instead of [`Update::Snapshot`];
    /// [`read`](EtcdSource::read) then fills [`PoolRead::next`]. See the [module docs](self#the-next-membership).
    /// By default, this is false: only `servers/` is read and watched.
    pub fn with_next(mut self, yes: bool) -> EtcdSourceBuilder {
        self.with_next = yes;
        self
    }

    /// The source.
    pub fn build(self) -> EtcdSource {
        let keys = PoolKeys::new(&self.prefix, &self.pool);
        EtcdSource {
            keys,
            settings: self,
        }
    }
}

/// One pool's membership in etcd: [`read`](EtcdSource::read) it once, or [`watch`](EtcdSource::watch)
/// it. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct EtcdSource {
    /// The settings it was built with.
    settings: EtcdSourceBuilder,
    /// The pool's keys.
    keys: PoolKeys,
}

/// A read of the whole pool.
#[derive(Debug, Clone)]
pub struct PoolRead {
    /// The members that could be read, at the range's revision.
    pub snapshot: MembershipSnapshot,
    /// The keys that could not.
    pub malformed: Vec<MalformedValue>,
    /// The next membership at the same revision, read only by a source built
    /// [`with_next(true)`](EtcdSourceBuilder::with_next) (always `None` otherwise); `None` when no server
    /// under `next/` could be read.
    pub next: Option<MembershipSnapshot>,
    /// What each set is (`kind`, `next-kind`), read only with the next membership (rings
    /// otherwise).
    pub kinds: Kinds,
}

/// The member set the source keeps between snapshots: every key of the pool, read or not.
#[derive(Debug, Default)]
struct State {
    /// The revision the set is at: the range's, then each applied event's.
    revision: i64,
    /// Server name → member; malformed keys are absent.
    members: BTreeMap<String, Member>,
    /// With the next membership followed: `next/` name → member; malformed keys are absent.
    next: BTreeMap<String, Member>,
    /// Whether the next membership is followed (planned updates, the whole pool prefix watched).
    planned: bool,
    /// With the next membership followed: what each set is.
    kinds: Kinds,
}

/// A snapshot of `members` at `revision`.
fn snapshot_of(revision: i64, members: &BTreeMap<String, Member>) -> MembershipSnapshot {
    // Names are unique map keys, so this cannot fail; an empty one is the fallback that never happens.
    MembershipSnapshot::new(
        u64::try_from(revision).unwrap_or(0),
        members.values().cloned().collect(),
    )
    .unwrap_or_else(|_| {
        MembershipSnapshot::new(0, Vec::new()).expect("an empty snapshot has no duplicates")
    })
}

/// The kind a `kind` key's event leaves (a delete: a ring; a value that does not read:
/// [`Kind::Unknown`], with why).
fn read_kind(put: bool, key: &[u8], value: &[u8]) -> (Kind, Option<MalformedValue>) {
    if !put {
        return (Kind::Ring, None);
    }
    match Kind::parse(key, value) {
        Ok(kind) => (kind, None),
        Err(bad) => (Kind::Unknown, Some(bad)),
    }
}

/// Which member set of the pool `key` is under (by its bytes, so that a key that is not UTF-8 is
/// reported as malformed rather than ignored), `None` for any other key.
fn set_of(keys: &PoolKeys, key: &[u8]) -> Option<MemberSet> {
    if key.starts_with(keys.servers_prefix().as_bytes()) {
        Some(MemberSet::Current)
    } else if key.starts_with(keys.next_prefix().as_bytes()) {
        Some(MemberSet::Next)
    } else {
        None
    }
}

impl State {
    fn snapshot(&self) -> MembershipSnapshot {
        snapshot_of(self.revision, &self.members)
    }

    /// The next membership, when one is planned.
    fn next_snapshot(&self) -> Option<MembershipSnapshot> {
        (!self.next.is_empty()).then(|| snapshot_of(self.revision, &self.next))
    }

    /// What to hand out for the state as it is: a snapshot, or both sets.
    fn update(&self) -> Update {
        if self.planned {
            Update::Planned {
                current: self.snapshot(),
                next: self.next_snapshot(),
                kinds: self.kinds,
            }
        } else {
            Update::Snapshot(self.snapshot())
        }
    }

    /// Whether a change of `key` changes what [`update`](State::update) hands out (or reports it
    /// malformed): any key for a source of `servers/` alone (it watches nothing else), only keys
    /// under `servers/` and `next/` and the kinds for a planned one.
    fn concerns(&self, keys: &PoolKeys, key: &[u8]) -> bool {
        !self.planned || set_of(keys, key).is_some() || keys.kind_of(key).is_some()
    }
}

impl State {
    /// Applies one watch event: a put adds or replaces its server, or drops it when the value is
    /// malformed (returned, to be reported); a delete removes it. Keys outside the pool change nothing
    /// but the revision.
    fn apply(
        &mut self,
        keys: &PoolKeys,
        put: bool,
        key: &[u8],
        value: &[u8],
        revision: i64,
    ) -> Option<MalformedValue> {
        self.revision = self.revision.max(revision);
        if self.planned {
            if let Some(set) = keys.kind_of(key) {
                let (kind, bad) = read_kind(put, key, value);
                match set {
                    MemberSet::Current => self.kinds.current = kind,
                    MemberSet::Next => self.kinds.next = kind,
                }
                return bad;
            }
            // Any other key (a proxy's registration) changes nothing but the revision.
            let set = set_of(keys, key)?;
            let name = std::str::from_utf8(key).ok().and_then(|k| match set {
                MemberSet::Current => keys.name_of(k),
                MemberSet::Next => keys.next_name_of(k),
            });
            let (map, parsed) = match set {
                MemberSet::Current => (&mut self.members, put.then(|| keys.parse(key, value))),
                MemberSet::Next => (&mut self.next, put.then(|| keys.parse_next(key, value))),
            };
            return match parsed {
                Some(Ok(m)) => {
                    map.insert(m.name().to_string(), m);
                    None
                }
                other => {
                    if let Some(name) = name {
                        map.remove(name);
                    }
                    other.and_then(Result::err)
                }
            };
        }
        let name = std::str::from_utf8(key).ok().and_then(|k| keys.name_of(k));
        if !put {
            if let Some(name) = name {
                self.members.remove(name);
            }
            return None;
        }
        match keys.parse(key, value) {
            Ok(m) => {
                self.members.insert(m.name().to_string(), m);
                None
            }
            Err(bad) => {
                if let Some(name) = name {
                    self.members.remove(name);
                }
                Some(bad)
            }
        }
    }
}

/// How a watch session ended.
enum SessionEnd {
    /// Asked to stop.
    Stopped,
    /// The watched revision is gone: range again at once.
    Compacted(i64),
    /// A failure: back off, then reconnect.
    Failed(EtcdError),
}

impl EtcdSource {
    /// A source for `pool` at `endpoints` (e.g. `["http://127.0.0.1:2379"]`).
    pub fn builder(endpoints: &[impl AsRef<str>], pool: impl Into<String>) -> EtcdSourceBuilder {
        EtcdSourceBuilder {
            endpoints: endpoints.iter().map(|e| e.as_ref().to_string()).collect(),
            pool: pool.into(),
            prefix: DEFAULT_PREFIX.to_string(),
            debounce: Duration::from_millis(100),
            retry_min: Duration::from_millis(100),
            retry_max: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            keep_alive: Duration::from_secs(10),
            with_next: false,
        }
    }

    /// The pool's keys.
    pub fn keys(&self) -> &PoolKeys {
        &self.keys
    }

    /// The key prefix pools live under ([normalised](crate::layout::normalise_prefix)).
    pub fn prefix(&self) -> String {
        crate::layout::normalise_prefix(&self.settings.prefix)
    }

    /// Whether the source follows the next membership too ([`EtcdSourceBuilder::with_next`]).
    pub fn follows_next(&self) -> bool {
        self.settings.with_next
    }

    /// The prefix the source ranges and watches: `servers/`, or the whole pool's with the next
    /// membership followed.
    fn watched_prefix(&self) -> &str {
        if self.settings.with_next {
            self.keys.pool_prefix()
        } else {
            self.keys.servers_prefix()
        }
    }

    /// How long a request may take ([`EtcdSourceBuilder::request_timeout`]).
    pub(crate) fn request_timeout(&self) -> Duration {
        self.settings.request_timeout
    }

    /// The back-off bounds ([`EtcdSourceBuilder::retry_min`], [`EtcdSourceBuilder::retry_max`]).
    pub(crate) fn retry_bounds(&self) -> (Duration, Duration) {
        (self.settings.retry_min, self.settings.retry_max)
    }

    /// The pool.
    pub fn pool(&self) -> &str {
        &self.settings.pool
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.settings.endpoints
    }

    /// A connected client (the connection itself is made lazily, on the first request).
    ///
    /// # Errors
    /// [`EtcdError::Endpoints`] or [`EtcdError::Timeout`].
    pub async fn connect(&self) -> Result<Client, EtcdError> {
        let s = &self.settings;
        let options = ConnectOptions::new()
            .with_connect_timeout(s.request_timeout)
            .with_keep_alive(s.keep_alive, s.request_timeout)
            .with_keep_alive_while_idle(true);
        let connect = Client::connect(&s.endpoints, Some(options));
        match tokio::time::timeout(s.request_timeout, connect).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(source)) => Err(EtcdError::Endpoints {
                endpoints: s.endpoints.clone(),
                source: source.into(),
            }),
            Err(_) => Err(self.timeout("connect")),
        }
    }

    fn timeout(&self, what: &str) -> EtcdError {
        EtcdError::Timeout {
            endpoints: self.settings.endpoints.clone(),
            what: what.to_string(),
            timeout: self.settings.request_timeout,
        }
    }

    /// Reads the whole pool once, with one range request.
    ///
    /// # Errors
    /// When etcd cannot be reached or answers with an error: [`EtcdError::Request`],
    /// [`EtcdError::Timeout`], [`EtcdError::Endpoints`].
    pub async fn read(&self) -> Result<PoolRead, EtcdError> {
        let mut client = self.connect().await?;
        let mut state = State::default();
        let malformed = self.range(&mut client, &mut state).await?;
        Ok(PoolRead {
            snapshot: state.snapshot(),
            malformed,
            next: state.next_snapshot(),
            kinds: state.kinds,
        })
    }

    /// Reads the pool's current and next membership at one revision, whether or not the source was
    /// built [`with_next`](EtcdSourceBuilder::with_next) (one range of `<prefix><pool>/`).
    pub(crate) async fn read_planned(&self) -> Result<PoolRead, EtcdError> {
        let planned = EtcdSource {
            settings: self.settings.clone().with_next(true),
            keys: self.keys.clone(),
        };
        planned.read().await
    }

    /// Ranges the pool's prefix into `state` (replacing it) and returns the keys that could not be read.
    async fn range(
        &self,
        client: &mut Client,
        state: &mut State,
    ) -> Result<Vec<MalformedValue>, EtcdError> {
        let prefix = self.watched_prefix();
        let what = format!("range {prefix}");
        let get = client.get(prefix, Some(GetOptions::new().with_prefix()));
        let response = match tokio::time::timeout(self.settings.request_timeout, get).await {
            Ok(Ok(r)) => r,
            Ok(Err(source)) => return Err(self.request_error(what, source)),
            Err(_) => return Err(self.timeout(&what)),
        };
        let revision = response.header().map_or(0, |h| h.revision());
        let planned = self.settings.with_next;
        let mut members = BTreeMap::new();
        let mut next = BTreeMap::new();
        let mut malformed = Vec::new();
        let mut kinds = Kinds::default();
        for kv in response.kvs() {
            if let Some(set) = self.keys.kind_of(kv.key()).filter(|_| planned) {
                let (kind, bad) = read_kind(true, kv.key(), kv.value());
                match set {
                    MemberSet::Current => kinds.current = kind,
                    MemberSet::Next => kinds.next = kind,
                }
                malformed.extend(bad);
                continue;
            }
            let (map, parsed) = match (planned, set_of(&self.keys, kv.key())) {
                (false, _) | (true, Some(MemberSet::Current)) => {
                    (&mut members, self.keys.parse(kv.key(), kv.value()))
                }
                (true, Some(MemberSet::Next)) => {
                    (&mut next, self.keys.parse_next(kv.key(), kv.value()))
                }
                (true, None) => continue,
            };
            match parsed {
                Ok(m) => {
                    map.insert(m.name().to_string(), m);
                }
                Err(bad) => malformed.push(bad),
            }
        }
        *state = State {
            revision,
            members,
            next,
            planned,
            kinds,
        };
        Ok(malformed)
    }

    fn request_error(&self, what: String, source: etcd_client::Error) -> EtcdError {
        EtcdError::Request {
            endpoints: self.settings.endpoints.clone(),
            what,
            source: source.into(),
        }
    }

    /// Follows the pool until `stop` is cancelled, handing every [`Update`] to `sink`: first a snapshot
    /// from a range, then one per change (or per debounced burst), reconnecting and resyncing by itself
    /// as the [module docs](self) describe. Never returns an error: failures are `Update::Lost` and are
    /// retried.
    pub async fn watch(&self, mut sink: impl FnMut(Update), stop: CancellationToken) {
        let mut state: Option<State> = None;
        let mut backoff = self.settings.retry_min;
        // Whether the last session failed: the next one that gets an answer says etcd is back.
        let lost = AtomicBool::new(false);
        loop {
            match self
                .session(&mut state, &mut sink, &stop, &mut backoff, &lost)
                .await
            {
                SessionEnd::Stopped => return,
                SessionEnd::Compacted(compacted) => {
                    // The kept set is still right as of its revision; only the watch cannot resume.
                    if let Some(s) = &mut state {
                        s.revision = -1;
                    }
                    tracing::warn!(prefix = %self.watched_prefix(), compacted, "watched revision compacted; reading the pool afresh");
                    sink(Update::Resync { compacted });
                }
                SessionEnd::Failed(error) => {
                    tracing::warn!(
                        endpoints = ?self.settings.endpoints,
                        prefix = %self.watched_prefix(),
                        error = %crate::error::error_chain(&error),
                        retry_in = ?backoff,
                        "etcd membership source lost; keeping the current servers"
                    );
                    lost.store(true, Ordering::Relaxed);
                    sink(Update::Lost {
                        error,
                        retry_in: backoff,
                    });
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(self.settings.retry_max);
                }
            }
        }
    }

    /// One connection: range when there is no usable state, then watch until something ends it.
    async fn session(
        &self,
        state: &mut Option<State>,
        sink: &mut impl FnMut(Update),
        stop: &CancellationToken,
        backoff: &mut Duration,
        lost: &AtomicBool,
    ) -> SessionEnd {
        let prefix = self.watched_prefix().to_string();
        let back = || {
            if lost.swap(false, Ordering::Relaxed) {
                tracing::info!(
                    endpoints = ?self.settings.endpoints,
                    prefix = %prefix,
                    "etcd membership source reachable again; following the pool"
                );
            }
        };
        let mut client = tokio::select! {
            () = stop.cancelled() => return SessionEnd::Stopped,
            c = self.connect() => match c {
                Ok(c) => c,
                Err(e) => return SessionEnd::Failed(e),
            },
        };
        let needs_range = state.as_ref().is_none_or(|s| s.revision < 0);
        if needs_range {
            let mut fresh = State::default();
            let ranged = tokio::select! {
                () = stop.cancelled() => return SessionEnd::Stopped,
                r = self.range(&mut client, &mut fresh) => r,
            };
            match ranged {
                Ok(malformed) => {
                    for bad in malformed {
                        tracing::warn!(%bad, "skipping a malformed server");
                        sink(Update::Malformed(bad));
                    }
                    sink(fresh.update());
                    *state = Some(fresh);
                    *backoff = self.settings.retry_min;
                }
                Err(e) => return SessionEnd::Failed(e),
            }
        }
        let Some(state) = state.as_mut() else {
            return SessionEnd::Failed(EtcdError::WatchEnded {
                prefix,
                reason: "no state after a range".into(),
            });
        };
        let start = state.revision + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_progress_notify();
        let watch = client.watch(prefix.as_str(), Some(options));
        let mut stream = match tokio::time::timeout(self.settings.request_timeout, watch).await {
            Ok(Ok(s)) => {
                back();
                s
            }
            Ok(Err(source)) => {
                return SessionEnd::Failed(self.request_error(format!("watch {prefix}"), source))
            }
            Err(_) => return SessionEnd::Failed(self.timeout(&format!("watch {prefix}"))),
        };
        self.consume(state, &mut stream, sink, stop, backoff).await
    }

    /// Applies one watch's responses to `state` until the watch ends, handing out snapshots as the
    /// [module docs](self) describe. `state.revision` is where a resumed watch starts (+ 1), so it only
    /// ever moves to a revision whose events of ours have all been applied.
    async fn consume(
        &self,
        state: &mut State,
        stream: &mut impl Responses,
        sink: &mut impl FnMut(Update),
        stop: &CancellationToken,
        backoff: &mut Duration,
    ) -> SessionEnd {
        let prefix = self.watched_prefix().to_string();
        // When the first change of the current burst arrived; `None` when nothing is pending.
        let mut pending_since: Option<Instant> = None;
        let debounce = self.settings.debounce;
        loop {
            let deadline = pending_since.map(|t| t + debounce);
            let message = tokio::select! {
                () = stop.cancelled() => return SessionEnd::Stopped,
                () = sleep_until(deadline) => {
                    pending_since = None;
                    sink(state.update());
                    continue;
                }
                m = stream.next() => m,
            };
            let response = match message {
                Ok(Some(r)) => r,
                other => {
                    // Whatever arrived before the break is etcd's state at its revision: pass it on.
                    if pending_since.is_some() {
                        sink(state.update());
                    }
                    let reason = match other {
                        Err(e) => e,
                        _ => "the stream closed".to_string(),
                    };
                    return SessionEnd::Failed(EtcdError::WatchEnded { prefix, reason });
                }
            };
            if response.compacted > 0 {
                if pending_since.is_some() {
                    sink(state.update());
                }
                return SessionEnd::Compacted(response.compacted);
            }
            if let Some(reason) = response.canceled {
                if pending_since.is_some() {
                    sink(state.update());
                }
                return SessionEnd::Failed(EtcdError::WatchEnded {
                    prefix,
                    reason: format!("cancelled by etcd: {reason}"),
                });
            }
            if response.created {
                *backoff = self.settings.retry_min;
            }
            if response.events.is_empty() {
                // A progress notification: etcd sends one only to a watcher it has sent every event up
                // to the header's revision, so nothing of ours changed up to there and a later resume
                // may start past it (and is less likely to meet a compaction). Not the created
                // response: its header is etcd's current revision whatever the watch's start, and the
                // events from the start up to it are still to come; a watch that broke before they
                // arrived would resume past them, and a delete among them (a lease that expired while
                // the source was away) would never be seen.
                if let Some(revision) = response.header.filter(|_| !response.created) {
                    if pending_since.is_none() && revision > state.revision {
                        state.revision = revision;
                    }
                }
                continue;
            }
            let events = &response.events;
            // Whether the revision being read changed anything handed out (a planned source ignores
            // the proxies' registrations).
            let mut revision_concerns = false;
            for (i, event) in events.iter().enumerate() {
                let concerns = state.concerns(&self.keys, &event.key);
                revision_concerns |= concerns;
                if let Some(bad) = state.apply(
                    &self.keys,
                    event.put,
                    &event.key,
                    &event.value,
                    event.revision,
                ) {
                    tracing::warn!(%bad, "skipping a malformed server");
                    sink(Update::Malformed(bad));
                }
                let revision_complete = events
                    .get(i + 1)
                    .is_none_or(|next| next.revision != event.revision);
                if debounce.is_zero() {
                    if revision_complete {
                        if revision_concerns {
                            sink(state.update());
                        }
                        revision_concerns = false;
                    }
                } else if concerns && pending_since.is_none() {
                    pending_since = Some(Instant::now());
                }
            }
        }
    }
}

/// One watch response, owned and reduced to what a session reads (so that a test can play etcd's side
/// of an interleaving).
#[derive(Debug, Default)]
struct Response {
    /// The response to the watch's creation.
    created: bool,
    /// Why etcd cancelled the watch, when it did.
    canceled: Option<String>,
    /// The compaction revision past the watch's start, when etcd reports one (the watch is cancelled).
    compacted: i64,
    /// The header's revision.
    header: Option<i64>,
    /// The events, in revision order.
    events: Vec<Event>,
}

/// One change of one key.
#[derive(Debug)]
struct Event {
    /// A put (else a delete).
    put: bool,
    /// The key.
    key: Vec<u8>,
    /// The value put (empty for a delete).
    value: Vec<u8>,
    /// The change's revision (a delete's is the delete's own).
    revision: i64,
}

impl Response {
    fn from_etcd(r: &etcd_client::WatchResponse) -> Response {
        Response {
            created: r.created(),
            canceled: r.canceled().then(|| r.cancel_reason().to_string()),
            compacted: r.compact_revision(),
            header: r.header().map(|h| h.revision()),
            events: r
                .events()
                .iter()
                .filter_map(|e| {
                    let kv = e.kv()?;
                    Some(Event {
                        put: matches!(e.event_type(), EventType::Put),
                        key: kv.key().to_vec(),
                        value: kv.value().to_vec(),
                        revision: kv.mod_revision(),
                    })
                })
                .collect(),
        }
    }
}

/// Where a session reads its watch responses from: etcd's stream, or a test's script.
trait Responses {
    /// The next response; `Ok(None)` when the stream closed, `Err` with the reason when it broke.
    async fn next(&mut self) -> Result<Option<Response>, String>;
}

impl Responses for WatchStream {
    async fn next(&mut self) -> Result<Option<Response>, String> {
        match self.message().await {
            Ok(r) => Ok(r.as_ref().map(Response::from_etcd)),
            // In words: the client's own text shows its transport error's `Debug` form.
            Err(e) => Err(crate::error::ClientError::from(e).to_string()),
        }
    }
}

/// Sleeps until `deadline`, or forever when there is none.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::layout::parse_value;

    /// One event: a put of one of a few values (some malformed) or a delete, on one of a few names,
    /// sometimes outside the pool.
    fn events() -> impl Strategy<Value = Vec<(bool, usize, usize, bool)>> {
        prop::collection::vec(
            (
                any::<bool>(),
                0usize..5,
                0usize..6,
                prop::bool::weighted(0.1),
            ),
            0..60,
        )
    }

    /// etcd's side of one watch, played from a script: each item is one response, or the break that
    /// ends the watch; past the end the stream stays open and quiet (as a quiet pool's does).
    struct Script(std::collections::VecDeque<Result<Response, String>>);

    impl Responses for Script {
        async fn next(&mut self) -> Result<Option<Response>, String> {
            match self.0.pop_front() {
                Some(r) => r.map(Some),
                None => std::future::pending().await,
            }
        }
    }

    fn put(keys: &PoolKeys, name: &str, value: &str, revision: i64) -> Event {
        Event {
            put: true,
            key: keys.server_key(name).into_bytes(),
            value: value.as_bytes().to_vec(),
            revision,
        }
    }

    fn delete(keys: &PoolKeys, name: &str, revision: i64) -> Event {
        Event {
            put: false,
            key: keys.server_key(name).into_bytes(),
            value: Vec::new(),
            revision,
        }
    }

    fn clone_event(e: &Event) -> Event {
        Event {
            put: e.put,
            key: e.key.clone(),
            value: e.value.clone(),
            revision: e.revision,
        }
    }

    /// What etcd sends a watch from `start` when its current revision is `current`: the created
    /// response (whose header is `current`), then the first `delivered` of the events of `history` from
    /// `start` on, one response each, then a break.
    fn watch_from(start: i64, current: i64, history: &[Event], delivered: usize) -> Script {
        let created = Response {
            created: true,
            header: Some(current),
            ..Response::default()
        };
        let events = history
            .iter()
            .filter(|e| e.revision >= start && e.revision <= current)
            .take(delivered)
            .map(|e| {
                Ok(Response {
                    header: Some(current),
                    events: vec![clone_event(e)],
                    ..Response::default()
                })
            });
        let mut script: std::collections::VecDeque<_> =
            std::iter::once(Ok(created)).chain(events).collect();
        script.push_back(Err("connection reset".to_string()));
        Script(script)
    }

    fn names(snapshot: &MembershipSnapshot) -> Vec<&str> {
        snapshot.members().iter().map(|m| m.name()).collect()
    }

    /// The interleaving behind a dead server kept in the ring: the source's watch breaks, the server's
    /// lease expires while it reconnects, and the next watch breaks again after its created response
    /// but before etcd sent the delete. The third watch must start at the delete, not past it.
    #[tokio::test]
    async fn a_delete_not_yet_sent_when_a_resumed_watch_breaks_is_sent_to_the_next_one() {
        let source = EtcdSource::builder(&["http://127.0.0.1:1"], "alpha")
            .debounce(Duration::ZERO)
            .build();
        let keys = source.keys().clone();
        let mut state = State::default();
        for (name, addr) in [("cache-0", "10.0.0.1:11211"), ("cache-1", "10.0.0.2:11211")] {
            state.apply(
                &keys,
                true,
                keys.server_key(name).as_bytes(),
                addr.as_bytes(),
                2,
            );
        }
        // etcd's history after the source's range at revision 2: a server registered under a lease,
        // then the lease's expiry deleting it.
        let history = [
            put(&keys, "cache-5", "10.0.0.5:11211", 3),
            delete(&keys, "cache-5", 4),
        ];
        let mut snapshots = Vec::new();
        let mut starts = Vec::new();
        let stop = CancellationToken::new();
        let mut backoff = Duration::ZERO;
        // Watch 1 (from 3, etcd at 3): the put, then a break. Watch 2 (etcd at 4 by then): the
        // created response, then a break before the delete. Watch 3: everything from its start.
        for (current, delivered) in [(3, 1), (4, 0), (4, usize::MAX)] {
            let start = state.revision + 1;
            starts.push(start);
            let mut script = watch_from(start, current, &history, delivered);
            let mut sink = |u| {
                if let Update::Snapshot(s) = u {
                    snapshots.push(s);
                }
            };
            let end = source
                .consume(&mut state, &mut script, &mut sink, &stop, &mut backoff)
                .await;
            assert!(matches!(end, SessionEnd::Failed(_)));
        }
        let last = snapshots.last().expect("snapshots");
        assert_eq!(
            names(last),
            ["cache-0", "cache-1"],
            "the watches started at {starts:?}; snapshots {snapshots:?}"
        );
        assert_eq!(last.revision(), 4);
        assert_eq!(starts, [3, 4, 4], "where each watch started");
    }

    /// A progress notification (no events, not the created response) does move the resume point: etcd
    /// sends one only when every event up to its revision has been sent.
    #[tokio::test]
    async fn a_progress_notification_moves_the_resume_point_and_the_created_response_does_not() {
        let source = EtcdSource::builder(&["http://127.0.0.1:1"], "alpha").build();
        let mut state = State {
            revision: 2,
            ..State::default()
        };
        let created = Response {
            created: true,
            header: Some(7),
            ..Response::default()
        };
        let progress = Response {
            header: Some(9),
            ..Response::default()
        };
        let stop = CancellationToken::new();
        let mut backoff = Duration::ZERO;
        let mut script = Script(vec![Ok(created), Err("reset".to_string())].into());
        source
            .consume(&mut state, &mut script, &mut |_| {}, &stop, &mut backoff)
            .await;
        assert_eq!(state.revision, 2);
        let mut script = Script(vec![Ok(progress), Err("reset".to_string())].into());
        source
            .consume(&mut state, &mut script, &mut |_| {}, &stop, &mut backoff)
            .await;
        assert_eq!(state.revision, 9);
    }

    /// A script whose responses arrive at the given offsets from `start` (on tokio's clock, so a test
    /// with paused time steps through them without waiting). Cancel-safe, as etcd's stream is: a
    /// response is taken only once it has arrived.
    struct Timed {
        start: Instant,
        script: std::collections::VecDeque<(Duration, Result<Response, String>)>,
    }

    impl Responses for Timed {
        async fn next(&mut self) -> Result<Option<Response>, String> {
            let Some(&(at, _)) = self.script.front() else {
                return std::future::pending().await;
            };
            tokio::time::sleep_until(self.start + at).await;
            match self.script.pop_front() {
                Some((_, r)) => r.map(Some),
                None => Ok(None),
            }
        }
    }

    /// Writes that go on longer than the debounce still reach the consumer: every snapshot is handed
    /// out exactly one debounce after the first change it carries, and carries every change received
    /// until then.
    #[tokio::test(start_paused = true)]
    async fn a_debounced_snapshot_follows_its_first_change_by_the_debounce_while_writes_go_on() {
        let debounce = Duration::from_millis(100);
        let source = EtcdSource::builder(&["http://127.0.0.1:1"], "alpha")
            .debounce(debounce)
            .build();
        let keys = source.keys().clone();
        let started = Instant::now();
        // One new server every 30 ms for 300 ms (revisions 3 to 13), then a quiet second and a break.
        let mut script: std::collections::VecDeque<_> = (0..11)
            .map(|i: i64| {
                let event = put(&keys, &format!("s{i:02}"), "10.0.0.1:11211", 3 + i);
                let response = Response {
                    header: Some(3 + i),
                    events: vec![event],
                    ..Response::default()
                };
                (Duration::from_millis(30 * i as u64), Ok(response))
            })
            .collect();
        script.push_back((Duration::from_secs(2), Err("reset".to_string())));
        let script = Timed {
            start: started,
            script,
        };
        let mut out: Vec<(Duration, MembershipSnapshot)> = Vec::new();
        let mut sink = |u| {
            if let Update::Snapshot(s) = u {
                out.push((started.elapsed(), s));
            }
        };
        let mut state = State {
            revision: 2,
            ..State::default()
        };
        let stop = CancellationToken::new();
        let mut backoff = Duration::ZERO;
        source
            .consume(&mut state, &mut { script }, &mut sink, &stop, &mut backoff)
            .await;
        let got: Vec<(u128, u64, usize)> = out
            .iter()
            .map(|(at, s)| (at.as_millis(), s.revision(), s.members().len()))
            .collect();
        // First changes at 0, 120 and 240 ms; each snapshot one debounce later, with what arrived by then.
        assert_eq!(got, [(100, 6, 4), (220, 10, 8), (340, 13, 11)]);
    }

    /// A planned source: a swap of current and next in one revision is one update with both sides
    /// swapped; a revision that only touches a proxy's registration hands out nothing but moves the
    /// resume point.
    #[tokio::test]
    async fn a_planned_source_hands_out_both_sets_per_revision_and_ignores_registrations() {
        let source = EtcdSource::builder(&["http://127.0.0.1:1"], "alpha")
            .debounce(Duration::ZERO)
            .with_next(true)
            .build();
        let keys = source.keys().clone();
        let mut state = State {
            planned: true,
            ..State::default()
        };
        let ev = |put: bool, key: String, value: &str, revision| Event {
            put,
            key: key.into_bytes(),
            value: value.as_bytes().to_vec(),
            revision,
        };
        state.apply(
            &keys,
            true,
            keys.server_key("a").as_bytes(),
            b"10.0.0.1:1",
            2,
        );
        state.apply(&keys, true, keys.next_key("b").as_bytes(), b"10.0.0.2:1", 2);
        let next_kind = keys.kind_key(MemberSet::Next).to_owned();
        let kind = keys.kind_key(MemberSet::Current).to_owned();
        state.apply(&keys, true, next_kind.as_bytes(), b"redis-cluster", 2);
        assert_eq!(state.kinds.next, Kind::RedisCluster);
        let responses = vec![
            Ok(Response {
                header: Some(3),
                events: vec![ev(true, keys.proxy_key("p1"), "anything", 3)],
                ..Response::default()
            }),
            Ok(Response {
                header: Some(4),
                events: vec![
                    ev(false, keys.server_key("a"), "", 4),
                    ev(true, keys.server_key("b"), "10.0.0.2:1", 4),
                    ev(false, keys.next_key("b"), "", 4),
                    ev(true, keys.next_key("a"), "10.0.0.1:1", 4),
                    ev(true, kind.clone(), "redis-cluster", 4),
                    ev(false, next_kind.clone(), "", 4),
                ],
                ..Response::default()
            }),
            Ok(Response {
                header: Some(5),
                events: vec![ev(false, keys.next_key("a"), "", 5)],
                ..Response::default()
            }),
            Err("reset".to_string()),
        ];
        let mut got = Vec::new();
        let mut sink = |u| {
            if let Update::Planned {
                current,
                next,
                kinds,
            } = u
            {
                got.push((
                    current.revision(),
                    names(&current).join(","),
                    next.map(|n| names(&n).join(",")),
                    (kinds.current, kinds.next),
                ));
            }
        };
        let stop = CancellationToken::new();
        let mut backoff = Duration::ZERO;
        let mut script = Script(responses.into());
        source
            .consume(&mut state, &mut script, &mut sink, &stop, &mut backoff)
            .await;
        assert_eq!(
            got,
            [
                (
                    4,
                    "b".to_string(),
                    Some("a".to_string()),
                    (Kind::RedisCluster, Kind::Ring)
                ),
                (5, "b".to_string(), None, (Kind::RedisCluster, Kind::Ring))
            ]
        );
        assert_eq!(state.revision, 5);
    }

    const VALUES: [&str; 6] = [
        "10.0.0.1:11211",
        "10.0.0.2:11211:2",
        "[::1]:11212:3",
        "no-port",
        "h:0",
        "cache.local:11213\n",
    ];

    proptest! {
        /// The kept set equals the naive one: the last value put under each name of the pool, deleted
        /// names gone, malformed values left out.
        #[test]
        fn events_fold_into_the_naive_member_set(evs in events()) {
            let keys = PoolKeys::new(DEFAULT_PREFIX, "alpha");
            let other = PoolKeys::new(DEFAULT_PREFIX, "beta");
            let mut state = State::default();
            let mut naive: BTreeMap<String, &str> = BTreeMap::new();
            let mut malformed = 0;
            for (revision, &(put, name, value, foreign)) in evs.iter().enumerate() {
                let name = format!("s{name}");
                let key = if foreign { other.server_key(&name) } else { keys.server_key(&name) };
                let value = VALUES[value];
                let bad = state.apply(&keys, put, key.as_bytes(), value.as_bytes(), revision as i64 + 1);
                prop_assert_eq!(state.revision, revision as i64 + 1);
                malformed += usize::from(bad.is_some());
                if foreign {
                    continue;
                }
                if put {
                    naive.insert(name, value);
                } else {
                    naive.remove(&name);
                }
            }
            let expected: Vec<(String, String, u32)> = naive
                .iter()
                .filter_map(|(n, v)| parse_value(v).ok().map(|(a, w)| (n.clone(), a, w)))
                .collect();
            let got: Vec<(String, String, u32)> = state
                .snapshot()
                .members()
                .iter()
                .map(|m| (m.name().to_string(), m.addr().to_string(), m.weight()))
                .collect();
            prop_assert_eq!(got, expected);
            let bad_puts = evs
                .iter()
                .filter(|&&(put, _, v, _)| put && parse_value(VALUES[v]).is_err())
                .count();
            // Foreign keys are malformed too (not under the pool), whatever their value.
            let foreign_good_puts = evs
                .iter()
                .filter(|&&(put, _, v, f)| put && f && parse_value(VALUES[v]).is_ok())
                .count();
            prop_assert_eq!(malformed, bad_puts + foreign_good_puts);
        }
    }
}
