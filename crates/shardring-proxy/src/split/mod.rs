//! Split keys (`--hot-key-split [POOL=]S --hot-key-split-keys [POOL=]FILE`): hot keys kept on
//! several servers (S, or the number the file gives the key), their reads spread over them, so that
//! one key's readers load those servers rather than one.
//!
//! Which keys are split, and in which phase, is the file's ([`crate::config::SplitConfig`]): the
//! same on every proxy of the pool, changed one phase at a time. This module is the set as one pool
//! version serves it, and what it says about one key ([`SplitSet::route`]); the protocol's leaf turns
//! that into requests (memcached: `protocol/memcache/remedies/split.rs`).
//!
//! A split key's servers are its owner (the server nutcracker places it on) and the ring's next
//! distinct servers, as many as the key's copies (an ejected one is left out while it is). The rules, for
//! every phase:
//!
//! - a write goes to the owner; once the owner has answered, the copies are deleted, and only then is
//!   the client answered. The owner alone orders the key's writes (concurrent writers through
//!   different proxies cannot leave the copies in another order than the owner), and a copy never
//!   holds a value older than the owner's last acknowledged write. A copy that cannot be deleted
//!   fails the write's answer (it may hold the old value);
//! - in the `read` phase a read goes to one of the S servers, in turn; a copy that does not hold the
//!   key is filled from the owner by reserve-then-CAS (the warm-up's copy: the reservation is undone
//!   by any write's delete that lands after it, so a fill never puts back a value older than the
//!   last write);
//! - before this proxy first reads a key from its copies, it deletes them ([`Cleaning`]): copies
//!   filled during an earlier `read` phase were not kept fresh while the key was not split, and must
//!   not be read now. The reads of that key stay on the owner until the deletes have all answered.
//!   The same when the key's live copies change (a server ejected or back).
//!
//! With replicas (`--replicas R`), the key's replica set stands for its owner: every write goes to
//! each replica as without a split, then the copies, the ring's next `S - 1` distinct servers after
//! the replicas, are deleted; reads spread over the owner and the copies, and the other replicas
//! stay where a read goes when the owner fails. A key split over S in a pool of R replicas is on
//! `R + S - 1` servers.
//!
//! What keeps reads fresh across proxies is the order of the phases: every proxy serves a key in
//! `write` (deleting the copies after its writes) before any proxy reads it from a copy, and every
//! proxy is back in `write` before any forgets the key.
//!
//! What it does not cover: proxies that disagree on whether a copy's server is live. One that
//! ejected the server (`auto_eject_hosts`) no longer deletes the copies there after its writes,
//! while one that did not may read them once the server answers again. A copy therefore lives at
//! most [`COPY_LIFETIME`] (its fill's TTL, shorter than the owner's when that is longer), which
//! bounds how stale such a read can be; then it is filled again.

pub(crate) mod flags;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::config::{SplitConfig, SplitPhase};
use crate::router::Routing;

/// The longest a copy lives: a fill's TTL is the owner's remaining TTL, at most this.
pub(crate) const COPY_LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a cleaning that has not reported back holds off another one, in milliseconds (its
/// client may have gone; the next read then cleans again).
const CLEANING_HOLD_MS: u64 = 1_000;

/// One pool version's split keys.
#[derive(Debug)]
pub(crate) struct SplitSet {
    /// Each split key's index in `keys`.
    index: HashMap<Bytes, usize>,
    /// Each split key's phase and cleaning.
    keys: Vec<KeyState>,
    /// Which server the next spread read goes to (a turn counter, modulo the key's servers).
    turn: AtomicUsize,
    /// What the cleanings' times count from.
    epoch: Instant,
}

/// One split key in this pool version.
#[derive(Debug)]
struct KeyState {
    /// Its phase.
    phase: SplitPhase,
    /// How many servers hold it.
    copies: usize,
    /// The [`signature`] of the copies this proxy last deleted (0: none yet): reads spread only
    /// while the key's live copies are these.
    cleaned: AtomicU64,
    /// When a cleaning last started (ms since `epoch`, plus one; 0: never).
    claimed_ms: AtomicU64,
}

/// Where a split key goes, as [`SplitSet::route`] says.
#[derive(Debug)]
pub(crate) struct SplitRoute {
    /// Its live copies other than the owner: deleted after every write.
    pub(crate) copies: Vec<usize>,
    /// The set the key is in.
    set: Arc<SplitSet>,
    /// The key's index there.
    key: usize,
}

/// Where a spreadable read of a split key goes.
#[derive(Debug)]
pub(crate) enum SplitRead {
    /// To the owner (the `write` phase, a cleaning under way, or its turn).
    Owner,
    /// To this copy (a server index in the pool), filled from the owner when it misses.
    Copy(usize),
    /// To the owner, with the copies deleted in the same round: this proxy's first read of the key
    /// from its copies (or of new copies); reads spread once the deletes have all answered.
    Clean(Cleaning),
}

impl SplitRoute {
    /// Where a spreadable read (memcached's one-key `get`) of the key goes now: asked only by
    /// such a read, since it may start a cleaning.
    pub(crate) fn read(&self) -> SplitRead {
        let state = &self.set.keys[self.key];
        if state.phase == SplitPhase::Write || self.copies.is_empty() {
            return SplitRead::Owner;
        }
        let signature = signature(&self.copies);
        if state.cleaned.load(Ordering::Acquire) == signature {
            let turn = self.set.turn.fetch_add(1, Ordering::Relaxed) % (self.copies.len() + 1);
            return match turn {
                0 => SplitRead::Owner,
                n => SplitRead::Copy(self.copies[n - 1]),
            };
        }
        if self.set.claim(state) {
            SplitRead::Clean(Cleaning {
                set: Arc::clone(&self.set),
                key: self.key,
                signature,
            })
        } else {
            SplitRead::Owner
        }
    }
}

/// A cleaning under way: report how its deletes went with [`Cleaning::done`].
#[derive(Debug)]
pub(crate) struct Cleaning {
    /// The set the key is in.
    set: Arc<SplitSet>,
    /// The key's index there.
    key: usize,
    /// The copies being deleted.
    signature: u64,
}

impl Cleaning {
    /// The deletes have all answered (`ok`: each said deleted or not found): the key's reads spread
    /// from now on; otherwise the next read cleans again.
    pub(crate) fn done(self, ok: bool) {
        let state = &self.set.keys[self.key];
        if ok {
            state.cleaned.store(self.signature, Ordering::Release);
        }
        state.claimed_ms.store(0, Ordering::Relaxed);
    }
}

impl SplitSet {
    /// The split keys of `config`.
    pub(crate) fn new(config: &SplitConfig) -> SplitSet {
        let mut index = HashMap::with_capacity(config.keys.len());
        let mut keys = Vec::with_capacity(config.keys.len());
        for (key, k) in &config.keys {
            index.insert(Bytes::copy_from_slice(key), keys.len());
            keys.push(KeyState {
                phase: k.phase,
                copies: k.copies,
                cleaned: AtomicU64::new(0),
                claimed_ms: AtomicU64::new(0),
            });
        }
        SplitSet {
            index,
            keys,
            turn: AtomicUsize::new(0),
            epoch: Instant::now(),
        }
    }

    /// Where `key` goes when it is split (`None` otherwise): `owner` is its server now, `full` the
    /// placement over every server (whose replica walk names the copies), `live` the placement now,
    /// `replicas` how many servers hold every key of the pool (`--replicas`; 1: none).
    ///
    /// With replicas, the key's replica set (the walk's first `replicas` servers, every write sent
    /// to each) stands for its owner: the copies are the walk's next `copies - 1` servers, so the
    /// key is on `replicas + copies - 1` servers and its reads spread over the owner and the copies
    /// (the other replicas stay what they are without a split: where a read goes when the owner
    /// fails). A replica is never a copy: a copy is deleted after every write and filled from the
    /// owner, which a replica, written by every write, must not be.
    pub(crate) fn route(
        self: &Arc<SplitSet>,
        key: &[u8],
        owner: usize,
        full: &Routing,
        live: &Routing,
        replicas: usize,
    ) -> Option<Box<SplitRoute>> {
        let &k = self.index.get(key)?;
        let count = self.keys[k].copies;
        let replicas = replicas.max(1);
        let mut copies = Vec::with_capacity(replicas + count - 1);
        full.replicas_into(key, replicas + count - 1, &mut copies);
        copies.drain(..replicas.min(copies.len()));
        copies.retain(|&s| s != owner && live.is_live(s));
        copies.truncate(count - 1);
        Some(Box::new(SplitRoute {
            copies,
            set: Arc::clone(self),
            key: k,
        }))
    }

    /// Whether this read may start a cleaning of `state` (none started within the hold).
    fn claim(&self, state: &KeyState) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = state.claimed_ms.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= CLEANING_HOLD_MS)
            && state
                .claimed_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// The failure of the first copy whose delete did not answer as `gone` says a delete that went
/// does, if any: what fails a write of a split key (the copy may still hold the value before it).
pub(crate) fn kept(
    replies: &[crate::protocol::PartReply<'_>],
    gone: impl Fn(&[u8]) -> bool,
) -> Option<crate::error::BackendError> {
    replies.iter().find_map(|r| {
        let reason = match &r.reply {
            Ok(b) if gone(b) => return None,
            Ok(b) => format!(
                "it answered {}",
                String::from_utf8_lossy(b.trim_ascii_end())
            ),
            Err(e) => e.to_string(),
        };
        Some(crate::error::BackendError::SplitCopyKept {
            addr: r.server.to_owned(),
            reason,
        })
    })
}

/// A nonzero fingerprint of a list of copies (server indexes).
fn signature(copies: &[usize]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &c in copies {
        h = (h ^ c as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::router::build_placement;

    fn pool(n: usize) -> PoolConfig {
        let servers: Vec<String> = (0..n)
            .map(|i| format!("10.0.0.{}:11211:1", i + 1))
            .collect();
        let refs: Vec<&str> = servers.iter().map(String::as_str).collect();
        PoolConfig::new("p", "127.0.0.1:0", &refs).unwrap()
    }

    fn set(text: &str, copies: usize) -> Arc<SplitSet> {
        Arc::new(SplitSet::new(&SplitConfig::parse(copies, text).unwrap()))
    }

    #[test]
    fn a_read_phase_key_is_cleaned_once_then_read_from_each_of_its_servers_in_turn() {
        let config = pool(5);
        let full = build_placement(config.placement_spec(), &[true; 5]).unwrap();
        let split = set("read hot\nwrite warm\n", 3);
        let owner = full.server_for(b"hot").unwrap();
        let route = |s: &Arc<SplitSet>| s.route(b"hot", owner, &full, &full, 1).unwrap();
        let read = |s: &Arc<SplitSet>| route(s).read();
        assert!(split.route(b"cold", 0, &full, &full, 1).is_none());
        let first = route(&split);
        let mut walk = Vec::new();
        full.replicas_into(b"hot", 3, &mut walk);
        assert_eq!(first.copies, walk[1..]);
        let SplitRead::Clean(cleaning) = first.read() else {
            panic!("the first read cleans");
        };
        // While it runs, reads stay on the owner.
        assert!(matches!(read(&split), SplitRead::Owner));
        cleaning.done(true);
        let mut seen = std::collections::BTreeMap::new();
        for _ in 0..300 {
            let server = match read(&split) {
                SplitRead::Owner => owner,
                SplitRead::Copy(c) => c,
                SplitRead::Clean(_) => panic!("cleaned already"),
            };
            *seen.entry(server).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen.values().all(|&n| n == 100), "{seen:?}");
        // A write-phase key reads from its owner, and still names its copies.
        let warm_owner = full.server_for(b"warm").unwrap();
        let warm = split.route(b"warm", warm_owner, &full, &full, 1).unwrap();
        assert!(matches!(warm.read(), SplitRead::Owner));
        assert_eq!(warm.copies.len(), 2);
    }

    #[test]
    fn with_replicas_the_copies_follow_the_replica_set_and_are_never_replicas() {
        let config = pool(6);
        let full = build_placement(config.placement_spec(), &[true; 6]).unwrap();
        let split = set("read hot\n", 3);
        let owner = full.server_for(b"hot").unwrap();
        let mut walk = Vec::new();
        full.replicas_into(b"hot", 4, &mut walk);
        assert_eq!(walk[0], owner);
        let route = split.route(b"hot", owner, &full, &full, 2).unwrap();
        assert_eq!(
            route.copies,
            walk[2..],
            "the replica {} is not a copy",
            walk[1]
        );
        // Three replicas of a key split over 3: five servers hold it, two of them copies.
        let route = split.route(b"hot", owner, &full, &full, 3).unwrap();
        full.replicas_into(b"hot", 5, &mut walk);
        assert_eq!(route.copies, walk[3..]);
        // A dead replica is not replaced by a copy, nor a dead copy by a replica.
        let mut live = [true; 6];
        live[walk[1]] = false;
        live[walk[3]] = false;
        let now = build_placement(config.placement_spec(), &live).unwrap();
        let route = split.route(b"hot", owner, &full, &now, 3).unwrap();
        assert_eq!(route.copies, [walk[4]]);
    }

    #[test]
    fn a_failed_cleaning_is_tried_again_and_new_copies_are_cleaned_again() {
        let config = pool(4);
        let full = build_placement(config.placement_spec(), &[true; 4]).unwrap();
        let split = set("read hot\n", 3);
        let owner = full.server_for(b"hot").unwrap();
        let SplitRead::Clean(c) = split.route(b"hot", owner, &full, &full, 1).unwrap().read()
        else {
            panic!("cleans first");
        };
        c.done(false);
        let SplitRead::Clean(c) = split.route(b"hot", owner, &full, &full, 1).unwrap().read()
        else {
            panic!("cleans again after a failure");
        };
        c.done(true);
        let copy = split.route(b"hot", owner, &full, &full, 1).unwrap().copies[0];
        // A copy's server is ejected: the key's copies are the others, cleaned first.
        let mut live = [true; 4];
        live[copy] = false;
        let now = build_placement(config.placement_spec(), &live).unwrap();
        let route = split.route(b"hot", owner, &full, &now, 1).unwrap();
        assert!(!route.copies.contains(&copy));
        assert_eq!(route.copies.len(), 1);
        assert!(matches!(route.read(), SplitRead::Clean(_)));
    }
}
