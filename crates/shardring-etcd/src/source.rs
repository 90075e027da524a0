//! [`EtcdSource`]: one pool's members read from etcd as whole [`MembershipSnapshot`]s.
//!
//! # How no change is missed or applied twice
//! The source reads the pool with one range request, which etcd answers at one store revision `R`, then
//! watches the pool's prefix from `R + 1`. Every change after the range therefore arrives exactly once,
//! in revision order. It keeps the member set itself and hands out the whole set after each change, so
//! a consumer never patches anything: a repeated snapshot (after a reconnect) builds nothing in a
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

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions};
use shardring::membership::{Member, MembershipSnapshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{EtcdError, MalformedValue};
use crate::layout::{PoolKeys, DEFAULT_PREFIX};

/// What the source tells its consumer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Update {
    /// The pool's whole member set at a revision (after the first range, after each change or burst,
    /// after a resync).
    Snapshot(MembershipSnapshot),
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
}

/// The member set the source keeps between snapshots: every key of the pool, read or not.
#[derive(Debug, Default)]
struct State {
    /// The revision the set is at: the range's, then each applied event's.
    revision: i64,
    /// Server name → member; malformed keys are absent.
    members: BTreeMap<String, Member>,
}

impl State {
    fn snapshot(&self) -> MembershipSnapshot {
        // Names are unique map keys, so this cannot fail; an empty one is the fallback that never happens.
        MembershipSnapshot::new(
            u64::try_from(self.revision).unwrap_or(0),
            self.members.values().cloned().collect(),
        )
        .unwrap_or_else(|_| {
            MembershipSnapshot::new(0, Vec::new()).expect("an empty snapshot has no duplicates")
        })
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
        }
    }

    /// The pool's keys.
    pub fn keys(&self) -> &PoolKeys {
        &self.keys
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
                source,
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
        })
    }

    /// Ranges the pool's prefix into `state` (replacing it) and returns the keys that could not be read.
    async fn range(
        &self,
        client: &mut Client,
        state: &mut State,
    ) -> Result<Vec<MalformedValue>, EtcdError> {
        let prefix = self.keys.servers_prefix();
        let what = format!("range {prefix}");
        let get = client.get(prefix, Some(GetOptions::new().with_prefix()));
        let response = match tokio::time::timeout(self.settings.request_timeout, get).await {
            Ok(Ok(r)) => r,
            Ok(Err(source)) => return Err(self.request_error(what, source)),
            Err(_) => return Err(self.timeout(&what)),
        };
        let revision = response.header().map_or(0, |h| h.revision());
        let mut members = BTreeMap::new();
        let mut malformed = Vec::new();
        for kv in response.kvs() {
            match self.keys.parse(kv.key(), kv.value()) {
                Ok(m) => {
                    members.insert(m.name().to_string(), m);
                }
                Err(bad) => malformed.push(bad),
            }
        }
        *state = State { revision, members };
        Ok(malformed)
    }

    fn request_error(&self, what: String, source: etcd_client::Error) -> EtcdError {
        EtcdError::Request {
            endpoints: self.settings.endpoints.clone(),
            what,
            source,
        }
    }

    /// Follows the pool until `stop` is cancelled, handing every [`Update`] to `sink`: first a snapshot
    /// from a range, then one per change (or per debounced burst), reconnecting and resyncing by itself
    /// as the [module docs](self) describe. Never returns an error: failures are `Update::Lost` and are
    /// retried.
    pub async fn watch(&self, mut sink: impl FnMut(Update), stop: CancellationToken) {
        let mut state: Option<State> = None;
        let mut backoff = self.settings.retry_min;
        loop {
            match self
                .session(&mut state, &mut sink, &stop, &mut backoff)
                .await
            {
                SessionEnd::Stopped => return,
                SessionEnd::Compacted(compacted) => {
                    // The kept set is still right as of its revision; only the watch cannot resume.
                    if let Some(s) = &mut state {
                        s.revision = -1;
                    }
                    tracing::warn!(prefix = %self.keys.servers_prefix(), compacted, "watched revision compacted; reading the pool afresh");
                    sink(Update::Resync { compacted });
                }
                SessionEnd::Failed(error) => {
                    tracing::warn!(error = %error, retry_in = ?backoff, "etcd membership source lost; keeping the current servers");
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
    ) -> SessionEnd {
        let prefix = self.keys.servers_prefix().to_string();
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
                    sink(Update::Snapshot(fresh.snapshot()));
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
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return SessionEnd::Failed(self.request_error(format!("watch {prefix}"), source))
            }
            Err(_) => return SessionEnd::Failed(self.timeout(&format!("watch {prefix}"))),
        };
        // When the first change of the current burst arrived; `None` when nothing is pending.
        let mut pending_since: Option<Instant> = None;
        let debounce = self.settings.debounce;
        loop {
            let deadline = pending_since.map(|t| t + debounce);
            let message = tokio::select! {
                () = stop.cancelled() => return SessionEnd::Stopped,
                () = sleep_until(deadline) => {
                    pending_since = None;
                    sink(Update::Snapshot(state.snapshot()));
                    continue;
                }
                m = stream.message() => m,
            };
            let response = match message {
                Ok(Some(r)) => r,
                other => {
                    // Whatever arrived before the break is etcd's state at its revision: pass it on.
                    if pending_since.is_some() {
                        sink(Update::Snapshot(state.snapshot()));
                    }
                    let reason = match other {
                        Err(e) => e.to_string(),
                        _ => "the stream closed".to_string(),
                    };
                    return SessionEnd::Failed(EtcdError::WatchEnded { prefix, reason });
                }
            };
            if response.compact_revision() > 0 {
                if pending_since.is_some() {
                    sink(Update::Snapshot(state.snapshot()));
                }
                return SessionEnd::Compacted(response.compact_revision());
            }
            if response.canceled() {
                if pending_since.is_some() {
                    sink(Update::Snapshot(state.snapshot()));
                }
                return SessionEnd::Failed(EtcdError::WatchEnded {
                    prefix,
                    reason: format!("cancelled by etcd: {}", response.cancel_reason()),
                });
            }
            if response.created() {
                *backoff = self.settings.retry_min;
            }
            let events = response.events();
            if events.is_empty() {
                // A progress notification: nothing of ours changed up to the header's revision, so a
                // later resume may start past it (and is less likely to meet a compaction).
                if let Some(h) = response.header() {
                    if pending_since.is_none() && h.revision() > state.revision {
                        state.revision = h.revision();
                    }
                }
                continue;
            }
            for (i, event) in events.iter().enumerate() {
                let Some(kv) = event.kv() else { continue };
                let put = matches!(event.event_type(), EventType::Put);
                if let Some(bad) =
                    state.apply(&self.keys, put, kv.key(), kv.value(), kv.mod_revision())
                {
                    tracing::warn!(%bad, "skipping a malformed server");
                    sink(Update::Malformed(bad));
                }
                let revision_complete = events
                    .get(i + 1)
                    .and_then(|next| next.kv())
                    .is_none_or(|next| next.mod_revision() != kv.mod_revision());
                if debounce.is_zero() {
                    if revision_complete {
                        sink(Update::Snapshot(state.snapshot()));
                    }
                } else if pending_since.is_none() {
                    pending_since = Some(Instant::now());
                }
            }
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
