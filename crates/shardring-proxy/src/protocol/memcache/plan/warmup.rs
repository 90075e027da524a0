//! Warm-up after a ring change on the memcached protocol (`--warmup-window`): while the window is
//! open, a key that moved still has its value on its previous server until it is copied to its new
//! one, and every command of such a key answers as if the copy had happened already.
//!
//! The copy is reserve-then-CAS, not `add`:
//! 1. new server: `mg <key> c N2` (`v f t c N2` for a `get`). A hit means the key is there already. A
//!    miss creates an empty placeholder item (for 2 s) and returns it with `W` (this request won the
//!    right to fill it) and its CAS value; `Z` means another request holds that right;
//! 2. previous server: `mg <key> v f t` (value, client flags, remaining TTL; `t-1` is no expiry);
//! 3. a hit there is copied: `ms <key> <len> C<cas> T<ttl> F<flags>` (a TTL over 30 days is sent as
//!    an absolute Unix time, as memcached reads it). A miss there removes the placeholder
//!    (`md <key> C<cas>`).
//!
//! Why not `ms … ME` (add): add only refuses to overwrite a value that exists. A client that deletes the
//! key after step 2 read the old copy would see it come back when the add lands. The CAS copy fails
//! (`EX`, `NF`) if anything wrote or deleted the key on the new server after step 1, so it neither
//! overwrites a newer value nor resurrects a deleted key; `warmup_copies_refused` counts those. During
//! the 2 s a plain `get` from a client that bypasses the proxy may see the empty placeholder.
//!
//! What each command does with a moved key:
//! - one-key `get`: steps 1–3, the value returned to the client as soon as step 2 has it, the copy not
//!   waited for ([`WarmOne`]); a multi-get does the same per key, pipelined
//!   ([`WarmMulti`]);
//! - `set`, `ms` in set mode without a CAS: the result does not depend on the old value, so the write
//!   goes to the new server after a `delete` of the old copy ([`write`]);
//! - `delete`, `md` without `C`, `I` or `x`: sent to both servers in one round; the answer is the new
//!   server's, or the old server's when only it had the key;
//! - everything else (add, replace, append, prepend, cas, incr, decr, touch, `gets`/`gat`/`gats` of
//!   any number of keys, `mg`, `ms` in other modes or with a CAS, `md` with `C`/`I`/`x`, `ma`, `me`):
//!   copy first, then apply ([`WarmKeyed`]): step 1; for the keys not there, step 2; then step 3's
//!   copy or release pipelined with the command itself on the new server's connection, whose reply
//!   is the answer. A command that changes the item then deletes the old copy, so no later fallback
//!   finds it. A `Z` (another warm-up is copying the same key) is treated as `W` with that
//!   reservation's CAS: both copy the same old value, the second copy is refused, and the command is
//!   applied after the first, so nobody waits and nothing is lost. The client's later requests are
//!   sent only once this answer is in ([`Protocol::in_order`]), so a pipelined request of the same key
//!   cannot overtake the copy.
//!
//! The cost, only for moved keys while the window is open: a `get` that misses takes two round trips
//! more; other commands one more when the key was copied already, two more when it was not (plus the
//! old copy's delete, not waited for), and the client's pipeline waits for them. Not covered: pools
//! with replicas (a write is sent as without the warm-up, after a delete of the old copy), and a CAS
//! value read before the ring change (memcached 1.6 cannot set an item's CAS, so the copy has a new one
//! and such a `cas` answers `EXISTS`).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{Finish, Memcache, Merge};
use crate::metrics::PoolStats;
use crate::protocol::memcache::remedies::warmup::{
    as_get_answer, copy_ttl, deleted, moved_path, value_block, MetaKey, MovedPath, RESERVATION_TTL,
};
use crate::protocol::memcache::request::{Command, GetKind, Request};
use crate::protocol::memcache::response::ResponseKind;
use crate::protocol::memcache::response::{MetaReply, ValueBlocks};
use crate::protocol::route::{Placer, Route};
use crate::protocol::{Answer, Part, PartReply, Phase, Placement, Protocol, Reply, Round, Step};

/// A warm-up `get`: the key, to turn meta replies back into `VALUE` replies and to copy.
#[derive(Debug)]
pub(crate) struct WarmGet {
    /// The key.
    key: Bytes,
    /// Where fallbacks, recoveries and copies are counted.
    stats: Arc<PoolStats>,
    /// Which counters: the warm-up's, or the split keys'.
    tally: Tally,
}

/// Whose copy a [`WarmOne`] makes, and so which counters count it: the same reserve-then-CAS copy
/// fills a moved key's new server during a warm-up window and a split key's copy from its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// A warm-up window's (`warmup_fallbacks`, `warmup_recovered`, `warmup_copies`,
    /// `warmup_copies_refused`).
    Warmup,
    /// A split key's (`split_copy_misses`, `split_fills`, `split_fills_refused`).
    Split,
}

impl Tally {
    /// A read missed where it went first, and falls back.
    fn fallback(self, stats: &PoolStats) {
        match self {
            Tally::Warmup => stats.warmup_fallbacks.inc(),
            Tally::Split => stats.split_copy_misses.inc(),
        }
    }

    /// The fallback found the value.
    fn recovered(self, stats: &PoolStats) {
        if self == Tally::Warmup {
            stats.warmup_recovered.inc();
        }
    }

    /// A copy is sent.
    fn copied(self, stats: &PoolStats) {
        match self {
            Tally::Warmup => stats.warmup_copies.inc(),
            Tally::Split => stats.split_fills.inc(),
        }
    }

    /// The TTL a copy of an item with `t` seconds left (-1: none) is set with: the same (a warm-up's
    /// copy), or at most [`crate::split::COPY_LIFETIME`] (a split key's copy).
    fn ttl(self, t: i64) -> i64 {
        match self {
            Tally::Warmup => copy_ttl(t),
            Tally::Split => {
                let most = crate::split::COPY_LIFETIME.as_secs() as i64;
                if t < 0 || t > most {
                    most
                } else {
                    copy_ttl(t)
                }
            }
        }
    }

    /// A copy was refused (written or deleted meanwhile).
    fn refused(self, stats: &PoolStats) {
        match self {
            Tally::Warmup => stats.warmup_copies_refused.inc(),
            Tally::Split => stats.split_fills_refused.inc(),
        }
    }
}

/// A copy's reply, counted when it was refused.
#[derive(Debug)]
pub(crate) struct CopyResult {
    /// Where refusals are counted.
    stats: Arc<PoolStats>,
    /// Which counter.
    tally: Tally,
}

/// A one-key `get` of a key that moved, while a warm-up window is open: a [`WarmOne`] exchange.
pub(super) fn read(req: &Request, route: &Route, ctx: &Placer<'_>) -> Option<Step<Memcache>> {
    let key = one_key_get(req)?;
    let previous = route.previous?;
    let server = route.server?;
    Some(copying_get(
        key,
        server,
        (Placement::Previous, previous),
        Tally::Warmup,
        ctx.stats,
    ))
}

/// The key of a plain one-key `get` (not `gets`, `gat`, a multi-get or a streamed line's piece).
pub(super) fn one_key_get(req: &Request) -> Option<&[u8]> {
    let Command::Get {
        kind: GetKind::Get,
        keys,
        more: false,
        ..
    } = &req.command
    else {
        return None;
    };
    let [key] = keys.as_slice() else {
        return None;
    };
    Some(req.bytes(key))
}

/// A `get` of `key` from `server` that, when `server` does not hold it, reads it from `from` and
/// copies it to `server` (reserve, then CAS): a [`WarmOne`] exchange.
pub(super) fn copying_get(
    key: &[u8],
    server: usize,
    from: (Placement, usize),
    tally: Tally,
    stats: &Arc<PoolStats>,
) -> Step<Memcache> {
    let line = |flags: &str| {
        let mut b = BytesMut::with_capacity(key.len() + 24);
        b.extend_from_slice(b"mg ");
        b.extend_from_slice(key);
        b.extend_from_slice(flags.as_bytes());
        b.extend_from_slice(b"\r\n");
        b.freeze()
    };
    let first = part(
        Placement::Current,
        server,
        line(&format!(" v f t c N{RESERVATION_TTL}")),
        ResponseKind::Meta,
    );
    Step::Exchange(Round::new(
        vec![first],
        Merge::WarmOne(WarmOne {
            get: WarmGet {
                key: Bytes::copy_from_slice(key),
                stats: Arc::clone(stats),
                tally,
            },
            server,
            stage: OneStage::New {
                from,
                fallback: line(" v f t"),
            },
        }),
    ))
}

/// A one-key `get` of a key that moved, as an exchange: its new server's reservation, then its
/// previous server's value after a miss; the copy (or the release) follows the answer, not waited
/// for.
#[derive(Debug)]
pub(crate) struct WarmOne {
    /// The key, and how meta replies become the `get` answer.
    get: WarmGet,
    /// The key's server now.
    server: usize,
    /// Where the exchange is.
    stage: OneStage,
}

/// Where a [`WarmOne`] is.
#[derive(Debug)]
enum OneStage {
    /// Sent to the new server.
    New {
        /// Where the key is read after a miss: its server on the previous ring (a warm-up), or its
        /// owner (a split key's copy).
        from: (Placement, usize),
        /// What to send there after a miss.
        fallback: Bytes,
    },
    /// Sent to the previous server, after a miss on the new one, whose reply (the reservation) this
    /// is.
    Previous(Bytes),
}

impl WarmOne {
    /// After the new server's reply: the answer, or the previous server's read; after that one: the
    /// answer, and the copy or the release.
    pub(super) fn advance(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        let reply = replies
            .into_iter()
            .next()
            .map_or(Err(crate::error::BackendError::Removed), |r| r.reply);
        let stage = std::mem::replace(&mut self.stage, OneStage::Previous(Bytes::new()));
        match (stage, reply) {
            (OneStage::New { from, fallback }, Ok(bytes)) if self.get.missed(&bytes) => {
                self.stage = OneStage::Previous(bytes);
                let read = part(from.0, from.1, fallback, ResponseKind::Meta);
                Phase::Again(Round::new(vec![read], Merge::WarmOne(self)))
            }
            (OneStage::New { .. }, reply) => Phase::Done {
                answer: self.get.finish(reply),
                follow_ups: Vec::new(),
            },
            // The previous ring is gone (the window closed since the plan): the new server's miss
            // is the answer.
            (OneStage::Previous(current), Err(crate::error::BackendError::Removed)) => {
                Phase::Done {
                    answer: self.get.finish(Ok(current)),
                    follow_ups: Vec::new(),
                }
            }
            (OneStage::Previous(current), previous) => {
                let server = self.server;
                let (answer, follow_up) = self.get.recover(&current, previous);
                Phase::Done {
                    answer,
                    follow_ups: follow_up
                        .map(|(frame, kind, finish)| {
                            (part(Placement::Current, server, frame, kind), finish)
                        })
                        .into_iter()
                        .collect(),
                }
            }
        }
    }
}

/// A write of a key that moved from `previous` (its server on the previous ring), while a warm-up
/// window is open: `step`, after a `delete` of the key's copy there.
pub(super) fn write(key: &[u8], previous: usize, step: Step<Memcache>) -> Step<Memcache> {
    let frame = crate::protocol::memcache::remedies::split::delete_line(key);
    let delete = (
        part(Placement::Previous, previous, frame, ResponseKind::Line),
        // Dropped: the invalidation is best effort, the write's own reply counts.
        Finish::NoReply,
    );
    super::with_follow_ups(step, [delete])
}

/// Where a [`WarmKeyed`] exchange is.
#[derive(Debug)]
enum Stage {
    /// Round one on the new servers: `mg <key> c N2` per moved key.
    Reserve,
    /// The previous servers' `mg <key> v f t`, one per key that was not on its new server.
    ReadOld,
    /// The copies (or releases), then the command, pipelined: the command's replies follow one
    /// reply per fill.
    Apply {
        /// For each fill, in order: it is a copy (a refusal is counted), not a release.
        copies: Vec<bool>,
    },
    /// A delete sent to both servers at once.
    DeleteBoth,
}

/// One moved key of a [`WarmKeyed`] exchange.
#[derive(Debug)]
struct Moved {
    /// The key, as the meta commands of the copy take it.
    key: MetaKey,
    /// Its server now.
    new: usize,
    /// Its server on the previous ring (index there).
    old: usize,
    /// The new server is a gutter server: the copy's TTL is capped to this.
    ttl_cap: Option<u32>,
    /// The reservation's CAS, while the key is to be read on its previous server.
    cas: Option<Bytes>,
}

/// The client's command itself, sent in the last round.
#[derive(Debug)]
enum Then {
    /// To one server; its reply through the finish.
    One(Part<Memcache>, Finish),
    /// A retrieval split over several servers, merged in the client's key order (boxed: a merge
    /// may be this exchange itself).
    Split(Vec<Part<Memcache>>, Box<Merge>),
}

/// A command of keys that moved and may not have been copied yet, while a warm-up window is open:
/// copy first, then apply, so the command sees the old servers' values (a multi-round
/// [`Step::Exchange`] answered through [`Protocol::advance`]).
#[derive(Debug)]
pub(crate) struct WarmKeyed {
    /// The moved keys.
    moved: Vec<Moved>,
    /// The command, as it would be sent without a warm-up.
    then: Then,
    /// The command changes the item: a key's old copy is deleted once its new server has the value.
    writes: bool,
    /// Where the exchange is.
    stage: Stage,
    /// Where fallbacks, recoveries and copies are counted.
    stats: Arc<PoolStats>,
}

/// A one-key command of a key that moved from `old` (its server on the previous ring), while a
/// warm-up window is open: the exchange that gives the answer it would get had the key been copied
/// already. `Err(finish)` when the caller's usual path does (a plain overwrite, replicas, no live
/// server).
pub(super) fn keyed(
    req: &Request,
    range: &std::ops::Range<usize>,
    route: &Route,
    finish: Finish,
    ctx: &Placer<'_>,
) -> Result<Step<Memcache>, Finish> {
    if ctx.replicas() > 1 {
        return Err(finish);
    }
    let Some(moved) = moved(req, range, route) else {
        return Err(finish);
    };
    let path = moved_path(req);
    if matches!(path, MovedPath::Overwrite) {
        return Err(finish);
    }
    let command = match moved.ttl_cap {
        None => req.to_forward(),
        Some(cap) => crate::protocol::memcache::remedies::gutter::cap_ttl(&req.to_forward(), cap),
    };
    let kind = req.command.response_kind();
    let (parts, stage) = match path {
        MovedPath::DeleteBoth => (
            vec![
                part(Placement::Current, moved.new, command.clone(), kind),
                part(Placement::Previous, moved.old, command.clone(), kind),
            ],
            Stage::DeleteBoth,
        ),
        _ => (vec![moved.reserve()], Stage::Reserve),
    };
    let then = Then::One(part(Placement::Current, moved.new, command, kind), finish);
    Ok(Step::Exchange(Round::new(
        parts,
        Merge::WarmKeyed(WarmKeyed {
            moved: vec![moved],
            then,
            writes: crate::protocol::memcache::remedies::replicas::is_write(&req.command),
            stage,
            stats: Arc::clone(ctx.stats),
        }),
    )))
}

/// `gets`/`gat`/`gats` with keys that moved, while a warm-up window is open: every moved key is
/// copied first, then `step` (the retrieval as planned without a warm-up) is sent, so the values and
/// CAS values come from the new servers. `step` itself when no key moved.
pub(super) fn retrieval(req: &Request, step: Step<Memcache>, ctx: &Placer<'_>) -> Step<Memcache> {
    let Command::Get {
        kind,
        keys,
        more: false,
        ..
    } = &req.command
    else {
        return step;
    };
    if *kind == GetKind::Get || ctx.replicas() > 1 {
        return step;
    }
    let mut moved: Vec<Moved> = Vec::new();
    for k in keys {
        if let Some(m) = self::moved(req, k, &ctx.route(req.bytes(k))) {
            // A key asked for twice is copied once.
            if !moved.iter().any(|o| o.key.token == m.key.token) {
                moved.push(m);
            }
        }
    }
    if moved.is_empty() {
        return step;
    }
    let then = match step {
        Step::Forward {
            server: Some(server),
            frame,
            kind,
            finish,
        } => Then::One(part(Placement::Current, server, frame, kind), finish),
        Step::Exchange(round) => Then::Split(round.parts, Box::new(round.exchange)),
        step => return step,
    };
    let parts = moved.iter().map(Moved::reserve).collect();
    Step::Exchange(Round::new(
        parts,
        Merge::WarmKeyed(WarmKeyed {
            moved,
            then,
            writes: false,
            stage: Stage::Reserve,
            stats: Arc::clone(ctx.stats),
        }),
    ))
}

/// The key of `range` (whose route is `route`) when it moved and has a live server now.
fn moved(req: &Request, range: &std::ops::Range<usize>, route: &Route) -> Option<Moved> {
    Some(Moved {
        key: MetaKey::of(req, range),
        new: route.server?,
        old: route.previous?,
        ttl_cap: route.ttl_cap,
        cas: None,
    })
}

/// A part of a warm-up exchange.
fn part(placement: Placement, server: usize, frame: Bytes, kind: ResponseKind) -> Part<Memcache> {
    Part {
        placement,
        server,
        frame,
        kind,
    }
}

impl Moved {
    /// Round one: the reservation on the new server.
    fn reserve(&self) -> Part<Memcache> {
        let line = self.key.line("mg", "", &format!("c N{RESERVATION_TTL}"));
        part(
            Placement::Current,
            self.new,
            line.freeze(),
            ResponseKind::Meta,
        )
    }

    /// The delete of the old copy (its reply dropped).
    fn delete_old(&self) -> (Part<Memcache>, Finish) {
        let md = self.key.line("md", "", "").freeze();
        (
            part(Placement::Previous, self.old, md, ResponseKind::Line),
            Finish::NoReply,
        )
    }

    /// The CAS copy of the old server's hit `m` into the reservation `cas`.
    fn copy(&self, cas: &[u8], m: &MetaReply<'_>) -> BytesMut {
        let t: i64 = m
            .flag(b't')
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(|t| t.parse().ok())
            .unwrap_or(-1);
        let ttl = match self.ttl_cap {
            Some(cap) => crate::protocol::memcache::remedies::gutter::capped(
                copy_ttl(t),
                cap,
                crate::metrics::unix_time(),
            ),
            None => copy_ttl(t),
        };
        let flags = format!(
            "C{} T{ttl} F{}",
            String::from_utf8_lossy(cas),
            String::from_utf8_lossy(m.flag(b'f').unwrap_or(b"0"))
        );
        let mut ms = self.key.line("ms", &m.data.len().to_string(), &flags);
        ms.extend_from_slice(m.data);
        ms.extend_from_slice(b"\r\n");
        ms
    }
}

impl WarmKeyed {
    /// The next round, or the client's answer.
    pub(super) fn phase(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        match std::mem::replace(&mut self.stage, Stage::Reserve) {
            Stage::Reserve => self.reserved(replies),
            Stage::ReadOld => self.read_old(replies),
            Stage::Apply { copies } => {
                let mut replies = replies.into_iter();
                for (copy, r) in copies.iter().zip(replies.by_ref()) {
                    if *copy && !matches!(&r.reply, Ok(b) if b.starts_with(b"HD")) {
                        // Written or deleted on the new server since the reservation.
                        self.stats.warmup_copies_refused.inc();
                    }
                }
                self.answer(replies.collect())
            }
            Stage::DeleteBoth => {
                let mut replies = replies.into_iter();
                let new = replies.next();
                let old = replies.next().map(|r| r.reply);
                let reply = match new {
                    // The new server did not have it (and did not fail): the old server's answer
                    // when it did.
                    Some(PartReply {
                        reply: Ok(b),
                        server,
                    }) if !deleted(&b)
                        && !crate::protocol::memcache::response::is_error_reply(&b) =>
                    {
                        let reply = match old {
                            Some(Ok(o)) if deleted(&o) => Ok(o),
                            _ => Ok(b),
                        };
                        PartReply { reply, server }
                    }
                    Some(other) => other,
                    None => PartReply {
                        reply: Err(crate::error::BackendError::Removed),
                        server: "",
                    },
                };
                self.answer(vec![reply])
            }
        }
    }

    /// After round one: the keys not on their new servers are read on their previous ones; when
    /// there are none, the command goes.
    fn reserved(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        let mut follow_ups = Vec::new();
        let mut reads = Vec::new();
        for (m, r) in self.moved.iter_mut().zip(replies) {
            let reservation = r.reply.as_ref().ok().and_then(|b| MetaReply::parse(b));
            m.cas = reservation
                .as_ref()
                .filter(|x| x.has(b'W') || x.has(b'Z'))
                .and_then(|x| x.flag(b'c'))
                .map(Bytes::copy_from_slice);
            let failed = match &r.reply {
                Ok(b) => crate::protocol::memcache::response::is_error_reply(b),
                Err(_) => true,
            };
            if m.cas.is_some() {
                // Not on the new server: ours to fill (`W`), or another warm-up's (`Z`), whose
                // CAS fills it as well as ours: both copy the same old value and the second copy
                // is refused; a release after a miss removes either.
                let read = m.key.line("mg", "", "v f t").freeze();
                reads.push(part(Placement::Previous, m.old, read, ResponseKind::Meta));
            } else if failed {
                if let Then::One(_, _) = self.then {
                    // Nothing was applied: the new server's failure is the answer.
                    return self.answer(vec![r]);
                }
                // A retrieval reads that key as its new server answers (a miss).
            } else if self.writes {
                // On the new server already: its old copy goes.
                follow_ups.push(m.delete_old());
            }
        }
        if reads.is_empty() {
            return self.apply(Vec::new(), follow_ups);
        }
        self.stage = Stage::ReadOld;
        Phase::Again(Round {
            parts: reads,
            exchange: Merge::WarmKeyed(self),
            follow_ups,
        })
    }

    /// After the previous servers' reads: the copies (or releases), then the command.
    fn read_old(self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        let mut fills = Vec::new();
        let mut follow_ups = Vec::new();
        let mut replies = replies.into_iter();
        for m in self.moved.iter() {
            let Some(cas) = &m.cas else {
                continue;
            };
            let Some(r) = replies.next() else {
                break;
            };
            self.stats.warmup_fallbacks.inc();
            let hit = r
                .reply
                .as_ref()
                .ok()
                .and_then(|b| MetaReply::parse(b))
                .filter(|x| x.status == b"VA" && !x.is_reservation());
            let fill = match &hit {
                Some(x) => {
                    self.stats.warmup_recovered.inc();
                    self.stats.warmup_copies.inc();
                    if self.writes {
                        follow_ups.push(m.delete_old());
                    }
                    m.copy(cas, x)
                }
                // Not there either: release the reservation, so the command finds no item.
                None => m
                    .key
                    .line("md", "", &format!("C{}", String::from_utf8_lossy(cas))),
            };
            fills.push((
                hit.is_some(),
                part(Placement::Current, m.new, fill.freeze(), ResponseKind::Line),
            ));
        }
        self.apply(fills, follow_ups)
    }

    /// The last round: `fills` (copies, `true`, and releases), then the command.
    fn apply(
        mut self,
        fills: Vec<(bool, Part<Memcache>)>,
        follow_ups: Vec<(Part<Memcache>, Finish)>,
    ) -> Phase<Memcache> {
        let (copies, mut parts): (Vec<bool>, Vec<Part<Memcache>>) = fills.into_iter().unzip();
        match &self.then {
            Then::One(p, _) => parts.push(clone_part(p)),
            Then::Split(ps, _) => parts.extend(ps.iter().map(clone_part)),
        }
        self.stage = Stage::Apply { copies };
        Phase::Again(Round {
            parts,
            exchange: Merge::WarmKeyed(self),
            follow_ups,
        })
    }

    /// The client's answer from the command's replies.
    fn answer(self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        let answer = match self.then {
            Then::One(_, finish) => {
                let reply = replies
                    .into_iter()
                    .next()
                    .map_or(Err(crate::error::BackendError::Removed), |r| r.reply);
                Memcache::finish(finish, reply)
            }
            Then::Split(_, merge) => Memcache::merge(*merge, replies),
        };
        Phase::Done {
            answer,
            follow_ups: Vec::new(),
        }
    }

    /// Whether more rounds follow the first (all but a delete sent to both servers at once).
    pub(super) fn rounds_follow(&self) -> bool {
        !matches!(self.stage, Stage::DeleteBoth)
    }
}

/// A copy of a part (its frame is shared).
fn clone_part(p: &Part<Memcache>) -> Part<Memcache> {
    part(p.placement, p.server, p.frame.clone(), p.kind)
}

impl WarmGet {
    /// The answer to the `get` when the new server answered (no fallback).
    pub(super) fn finish(self, reply: Reply) -> Answer {
        match reply {
            Ok(bytes) => as_get_answer(&self.key, &bytes),
            Err(e) => Answer::Failed(e),
        }
    }

    /// Whether the new server's reply is a miss (a reservation).
    fn missed(&self, reply: &[u8]) -> bool {
        MetaReply::parse(reply).is_some_and(|m| m.is_reservation())
    }

    /// Steps 2 and 3: the answer from the previous server's reply, and the copy or the release.
    fn recover(self, current: &Bytes, previous: Reply) -> (Answer, Option<FollowUpLine>) {
        let (block, follow_up) =
            recover_key(&self.key, current, &previous, &self.stats, self.tally);
        let answer = match block {
            Some(block) => {
                let mut out = BytesMut::with_capacity(block.len() + 5);
                out.extend_from_slice(&block);
                out.extend_from_slice(b"END\r\n");
                Answer::Bytes(out.freeze())
            }
            None => Answer::fixed(b"END\r\n"),
        };
        (answer, follow_up)
    }
}

/// A follow-up request to a key's new server: bytes, reply framing, and the finish its reply goes
/// through.
type FollowUpLine = (Bytes, ResponseKind, Finish);

/// Steps 2 and 3 for one key: its `VALUE` block when the previous server had it, and the copy (or the
/// release of the reservation) to send to the new server. `current` is the new server's reply to
/// step 1 (the reservation).
fn recover_key(
    key: &[u8],
    current: &Bytes,
    previous: &Reply,
    stats: &Arc<PoolStats>,
    tally: Tally,
) -> (Option<Bytes>, Option<FollowUpLine>) {
    tally.fallback(stats);
    let reservation = MetaReply::parse(current);
    let won = reservation.as_ref().is_some_and(|m| m.has(b'W'));
    let cas = reservation.as_ref().and_then(|m| m.flag(b'c'));
    let old = previous
        .as_ref()
        .ok()
        .and_then(|b| MetaReply::parse(b))
        .filter(|m| m.status == b"VA");
    let block = old.as_ref().map(|m| value_block(key, m));
    if block.is_some() {
        tally.recovered(stats);
    }
    let follow_up = match (won, cas, &old) {
        (true, Some(cas), Some(m)) => {
            let t: i64 = m
                .flag(b't')
                .and_then(|t| std::str::from_utf8(t).ok())
                .and_then(|t| t.parse().ok())
                .unwrap_or(-1);
            let mut ms = BytesMut::with_capacity(key.len() + m.data.len() + 64);
            ms.extend_from_slice(b"ms ");
            ms.extend_from_slice(key);
            ms.extend_from_slice(format!(" {} C", m.data.len()).as_bytes());
            ms.extend_from_slice(cas);
            ms.extend_from_slice(format!(" T{} F", tally.ttl(t)).as_bytes());
            ms.extend_from_slice(m.flag(b'f').unwrap_or(b"0"));
            ms.extend_from_slice(b"\r\n");
            ms.extend_from_slice(m.data);
            ms.extend_from_slice(b"\r\n");
            tally.copied(stats);
            Some((
                ms.freeze(),
                ResponseKind::Line,
                Finish::Copied(CopyResult {
                    stats: Arc::clone(stats),
                    tally,
                }),
            ))
        }
        (true, Some(cas), None) => {
            let mut md = BytesMut::with_capacity(key.len() + 32);
            md.extend_from_slice(b"md ");
            md.extend_from_slice(key);
            md.extend_from_slice(b" C");
            md.extend_from_slice(cas);
            md.extend_from_slice(b"\r\n");
            Some((md.freeze(), ResponseKind::Line, Finish::NoReply))
        }
        _ => None,
    };
    (block, follow_up)
}

/// Where one key of a warm multi-get is read.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// In the usual split: this part's `get` line.
    Normal(usize),
    /// Moved: this part's `mg` to its new server `new`; `old` is its previous server (index in the
    /// previous ring, which it may have left).
    Warm {
        /// The part.
        part: usize,
        /// The new server.
        new: usize,
        /// The previous server.
        old: usize,
    },
    /// No live server.
    Unrouted,
}

/// A multi-get during a warm-up window with keys that moved: one round trip to the new servers (the
/// usual `get` lines for the keys that stayed, one `mg … N2` per moved key, pipelined), then one to the
/// previous servers for the moved keys that missed (one `mg` per key, pipelined per server), then the
/// copies, as for a one-key `get`.
#[derive(Debug)]
pub(crate) struct WarmMulti {
    /// The client's request (its keys are ranges of its frame).
    request: Request,
    /// Where each key (client order) is read.
    slots: Vec<Slot>,
    /// Each key's `VALUE` block once known.
    values: Vec<Option<Bytes>>,
    /// Round two: for each of its parts, the key index, its new server and its reservation reply.
    waiting: Vec<(usize, usize, Bytes)>,
    /// Where fallbacks, recoveries and copies are counted.
    stats: Arc<PoolStats>,
}

/// A multi-get (`get` of several keys) with keys that moved, while a warm-up window is open; the
/// request back when none moved.
pub(super) fn read_multi(req: Request, ctx: &Placer<'_>) -> Result<Step<Memcache>, Request> {
    let Command::Get {
        kind: GetKind::Get,
        keys,
        more: false,
        ..
    } = &req.command
    else {
        return Err(req);
    };
    // A one-key get was routed by the caller already.
    if keys.len() < 2 {
        return Err(req);
    }
    let routes: Vec<Route> = keys.iter().map(|k| ctx.route(req.bytes(k))).collect();
    let moved: Vec<Option<usize>> = routes.iter().map(|r| r.previous).collect();
    if moved.iter().all(Option::is_none) {
        return Err(req);
    }
    let mut lines: Vec<(usize, BytesMut)> = Vec::new();
    let mut parts: Vec<Part<Memcache>> = Vec::new();
    let mut slots = Vec::with_capacity(keys.len());
    for ((k, old), route) in keys.iter().zip(&moved).zip(&routes) {
        let key = req.bytes(k);
        let Some(new) = route.server else {
            slots.push(Slot::Unrouted);
            continue;
        };
        match *old {
            Some(old) => {
                let mut b = BytesMut::with_capacity(key.len() + 24);
                b.extend_from_slice(b"mg ");
                b.extend_from_slice(key);
                b.extend_from_slice(format!(" v f t c N{RESERVATION_TTL}\r\n").as_bytes());
                parts.push(Part {
                    placement: Placement::Current,
                    server: new,
                    frame: b.freeze(),
                    kind: ResponseKind::Meta,
                });
                slots.push(Slot::Warm {
                    part: parts.len() - 1,
                    new,
                    old,
                });
            }
            None => {
                let i = match lines.iter().position(|(s, _)| *s == new) {
                    Some(i) => i,
                    None => {
                        lines.push((new, BytesMut::from(&b"get"[..])));
                        lines.len() - 1
                    }
                };
                lines[i].1.extend_from_slice(b" ");
                lines[i].1.extend_from_slice(key);
                slots.push(Slot::Normal(i));
            }
        }
    }
    // The get lines follow the mg parts: renumber the slots that read them.
    let offset = parts.len();
    for s in &mut slots {
        if let Slot::Normal(i) = s {
            *i += offset;
        }
    }
    for (server, mut line) in lines {
        line.extend_from_slice(b"\r\n");
        parts.push(Part {
            placement: Placement::Current,
            server,
            frame: line.freeze(),
            kind: ResponseKind::Values,
        });
    }
    let n = keys.len();
    Ok(Step::Exchange(Round::new(
        parts,
        Merge::WarmMulti(WarmMulti {
            slots,
            values: vec![None; n],
            waiting: Vec::new(),
            stats: Arc::clone(ctx.stats),
            request: req,
        }),
    )))
}

impl WarmMulti {
    /// After round one: the values found, and round two for the moved keys that missed; after round
    /// two: the answer and the copies.
    pub(super) fn phase(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        let Command::Get { keys, .. } = &self.request.command else {
            return Phase::Done {
                answer: Answer::fixed(b"END\r\n"),
                follow_ups: Vec::new(),
            };
        };
        let keys = keys.clone();
        if !self.waiting.is_empty() {
            let mut follow_ups = Vec::new();
            let waiting = std::mem::take(&mut self.waiting);
            for ((i, new, reservation), reply) in waiting.into_iter().zip(replies) {
                let key = self.request.bytes(&keys[i]);
                let (block, follow_up) =
                    recover_key(key, &reservation, &reply.reply, &self.stats, Tally::Warmup);
                self.values[i] = block;
                if let Some((frame, kind, finish)) = follow_up {
                    follow_ups.push((
                        Part {
                            placement: Placement::Current,
                            server: new,
                            frame,
                            kind,
                        },
                        finish,
                    ));
                }
            }
            return Phase::Done {
                answer: self.assemble(),
                follow_ups,
            };
        }
        let bodies: Vec<Bytes> = replies
            .into_iter()
            .map(|r| r.reply.unwrap_or_default())
            .collect();
        let mut cursors: Vec<_> = bodies
            .iter()
            .map(|b| ValueBlocks::new(b).peekable())
            .collect();
        let mut next = Vec::new();
        for (i, (k, slot)) in keys.iter().zip(self.slots.clone()).enumerate() {
            let key = self.request.bytes(k);
            match slot {
                Slot::Normal(part) => {
                    if let Some((got, block)) = cursors[part].peek() {
                        if *got == key {
                            self.values[i] = Some(Bytes::copy_from_slice(block));
                            cursors[part].next();
                        }
                    }
                }
                Slot::Warm { part, new, old } => match MetaReply::parse(&bodies[part]) {
                    Some(m) if m.is_reservation() => {
                        let mut b = BytesMut::with_capacity(key.len() + 16);
                        b.extend_from_slice(b"mg ");
                        b.extend_from_slice(key);
                        b.extend_from_slice(b" v f t\r\n");
                        next.push(Part {
                            placement: Placement::Previous,
                            server: old,
                            frame: b.freeze(),
                            kind: ResponseKind::Meta,
                        });
                        self.waiting.push((i, new, bodies[part].clone()));
                    }
                    Some(m) if m.status == b"VA" => self.values[i] = Some(value_block(key, &m)),
                    _ => {}
                },
                Slot::Unrouted => {}
            }
        }
        drop(cursors);
        if next.is_empty() {
            return Phase::Done {
                answer: self.assemble(),
                follow_ups: Vec::new(),
            };
        }
        Phase::Again(Round {
            parts: next,
            exchange: Merge::WarmMulti(self),
            follow_ups: Vec::new(),
        })
    }

    /// The values in the client's key order, then `END`.
    fn assemble(&self) -> Answer {
        let total: usize = self.values.iter().flatten().map(Bytes::len).sum();
        let mut out = BytesMut::with_capacity(total + 5);
        for v in self.values.iter().flatten() {
            out.extend_from_slice(v);
        }
        out.extend_from_slice(b"END\r\n");
        Answer::Bytes(out.freeze())
    }
}

impl CopyResult {
    /// Counts a refused copy (`EX`: written meanwhile, `NF`: deleted meanwhile).
    pub(super) fn finish(self, reply: &Reply) {
        if !matches!(reply, Ok(b) if b.starts_with(b"HD")) {
            self.tally.refused(&self.stats);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::memcache::MetaKind;

    /// An exchange of `command` (one key `k`, new server 4, previous server 1) at its start.
    fn exchange(command: &[u8], finish: Finish, stage: Stage) -> WarmKeyed {
        let req = Request::from_line(command);
        let writes = crate::protocol::memcache::remedies::replicas::is_write(&req.command);
        WarmKeyed {
            moved: vec![Moved {
                key: MetaKey {
                    token: Bytes::from_static(b"k"),
                    base64: false,
                },
                new: 4,
                old: 1,
                ttl_cap: None,
                cas: None,
            }],
            then: Then::One(
                part(
                    Placement::Current,
                    4,
                    req.to_forward(),
                    req.command.response_kind(),
                ),
                finish,
            ),
            writes,
            stage,
            stats: Arc::new(PoolStats::new("test")),
        }
    }

    fn replies(bytes: &[&'static [u8]]) -> Vec<PartReply<'static>> {
        bytes
            .iter()
            .map(|b| PartReply {
                reply: Ok(Bytes::from_static(b)),
                server: "s",
            })
            .collect()
    }

    /// A part as the tests compare it: placement, server, frame.
    type Sent = (Placement, usize, Vec<u8>);

    /// The next round's parts and follow-ups' frames.
    fn again(phase: Phase<Memcache>) -> (WarmKeyed, Vec<Sent>, Vec<Vec<u8>>) {
        let Phase::Again(Round {
            parts,
            exchange: Merge::WarmKeyed(w),
            follow_ups,
        }) = phase
        else {
            panic!("another round expected: {phase:?}");
        };
        let parts = parts
            .into_iter()
            .map(|p| (p.placement, p.server, p.frame.to_vec()))
            .collect();
        let follow_ups = follow_ups
            .into_iter()
            .map(|(p, _)| p.frame.to_vec())
            .collect();
        (w, parts, follow_ups)
    }

    fn done(phase: Phase<Memcache>) -> Answer {
        match phase {
            Phase::Done { answer, .. } => answer,
            other => panic!("an answer expected: {other:?}"),
        }
    }

    fn is(answer: &Answer, want: &[u8]) -> bool {
        matches!(answer, Answer::Bytes(b) if &b[..] == want)
    }

    #[test]
    fn a_key_not_copied_is_read_on_its_old_server_copied_then_appended() {
        let w = exchange(b"append k 0 0 1\r\nx\r\n", Finish::Plain, Stage::Reserve);
        let (w, parts, follow) = again(w.phase(replies(&[b"HD c7 W\r\n"])));
        assert_eq!(
            parts,
            [(Placement::Previous, 1, b"mg k v f t\r\n".to_vec())]
        );
        assert!(follow.is_empty());
        let (w, parts, follow) = again(w.phase(replies(&[b"VA 2 f42 t-1\r\nv1\r\n"])));
        assert_eq!(
            parts,
            [
                (
                    Placement::Current,
                    4,
                    b"ms k 2 C7 T0 F42\r\nv1\r\n".to_vec()
                ),
                (Placement::Current, 4, b"append k 0 0 1\r\nx\r\n".to_vec()),
            ]
        );
        assert_eq!(follow, [b"md k\r\n".to_vec()], "the old copy goes");
        let stats = Arc::clone(&w.stats);
        assert!(is(
            &done(w.phase(replies(&[b"EX\r\n", b"STORED\r\n"]))),
            b"STORED\r\n"
        ));
        assert_eq!(
            stats.warmup_copies_refused.get(),
            1,
            "a refused copy is counted"
        );
    }

    #[test]
    fn a_miss_on_both_servers_releases_the_reservation_before_the_command() {
        let w = exchange(b"incr k 1\r\n", Finish::Plain, Stage::Reserve);
        let (w, _, _) = again(w.phase(replies(&[b"HD c9 Z\r\n"])));
        let (w, parts, follow) = again(w.phase(replies(&[b"EN\r\n"])));
        assert_eq!(parts[0], (Placement::Current, 4, b"md k C9\r\n".to_vec()));
        assert!(follow.is_empty(), "nothing to delete on the old server");
        assert!(is(
            &done(w.phase(replies(&[b"HD\r\n", b"NOT_FOUND\r\n"]))),
            b"NOT_FOUND\r\n"
        ));
    }

    #[test]
    fn a_key_on_its_new_server_already_gets_the_command_and_its_old_copy_deleted() {
        let w = exchange(b"touch k 10\r\n", Finish::Plain, Stage::Reserve);
        let (w, parts, follow) = again(w.phase(replies(&[b"HD c3\r\n"])));
        assert_eq!(parts, [(Placement::Current, 4, b"touch k 10\r\n".to_vec())]);
        assert_eq!(follow, [b"md k\r\n".to_vec()]);
        assert!(is(
            &done(w.phase(replies(&[b"TOUCHED\r\n"]))),
            b"TOUCHED\r\n"
        ));
        // A read leaves the old copy.
        let w = exchange(b"mg k v\r\n", Finish::Plain, Stage::Reserve);
        let (_, _, follow) = again(w.phase(replies(&[b"HD c3\r\n"])));
        assert!(follow.is_empty());
    }

    #[test]
    fn a_failed_reservation_is_the_answer_and_noreply_hides_it() {
        let failed = || {
            vec![PartReply {
                reply: Err(crate::error::BackendError::Removed),
                server: "s",
            }]
        };
        let w = exchange(b"append k 0 0 1\r\nx\r\n", Finish::Plain, Stage::Reserve);
        assert!(matches!(done(w.phase(failed())), Answer::Failed(_)));
        let w = exchange(
            b"append k 0 0 1 noreply\r\nx\r\n",
            Finish::NoReply,
            Stage::Reserve,
        );
        assert!(matches!(done(w.phase(failed())), Answer::Nothing));
        let w = exchange(b"incr k 1\r\n", Finish::Plain, Stage::Reserve);
        let a = done(w.phase(replies(&[b"SERVER_ERROR out of memory\r\n"])));
        assert!(is(&a, b"SERVER_ERROR out of memory\r\n"));
        // No replies at all (cannot happen, but must not panic).
        let w = exchange(b"incr k 1\r\n", Finish::Plain, Stage::Reserve);
        let _ = w.phase(Vec::new());
        let w = exchange(
            b"incr k 1\r\n",
            Finish::Plain,
            Stage::Apply { copies: vec![true] },
        );
        assert!(matches!(done(w.phase(Vec::new())), Answer::Failed(_)));
    }

    #[test]
    fn a_delete_sent_to_both_servers_deleted_when_either_had_the_key() {
        for (new, old, want) in [
            (
                &b"NOT_FOUND\r\n"[..],
                &b"DELETED\r\n"[..],
                &b"DELETED\r\n"[..],
            ),
            (b"DELETED\r\n", b"NOT_FOUND\r\n", b"DELETED\r\n"),
            (b"NOT_FOUND\r\n", b"NOT_FOUND\r\n", b"NOT_FOUND\r\n"),
            (b"NOT_FOUND\r\n", b"SERVER_ERROR busy\r\n", b"NOT_FOUND\r\n"),
            (
                b"SERVER_ERROR busy\r\n",
                b"DELETED\r\n",
                b"SERVER_ERROR busy\r\n",
            ),
            (b"NF O5 kk\r\n", b"HD O5 kk\r\n", b"HD O5 kk\r\n"),
        ] {
            let w = exchange(b"delete k\r\n", Finish::Plain, Stage::DeleteBoth);
            let got = done(w.phase(vec![
                PartReply {
                    reply: Ok(Bytes::copy_from_slice(new)),
                    server: "new",
                },
                PartReply {
                    reply: Ok(Bytes::copy_from_slice(old)),
                    server: "old",
                },
            ]));
            assert!(is(&got, want), "{new:?} {old:?}: {got:?}");
        }
        let w = exchange(
            b"md k q\r\n",
            Finish::Quiet(MetaKind::Delete),
            Stage::DeleteBoth,
        );
        assert!(matches!(
            done(w.phase(replies(&[b"NF\r\n", b"HD\r\n"]))),
            Answer::Nothing
        ));
    }
}
