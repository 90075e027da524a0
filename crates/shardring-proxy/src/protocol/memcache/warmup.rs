//! Warm-up after a ring change on the memcached protocol (`--warmup-window`): a `get` of a key that
//! moved is read on its new server with a reservation, retried on its previous server after a miss, and
//! a hit there is copied to the new server with its flags and remaining TTL.
//!
//! The recipe is reserve-then-CAS, not `add`:
//! 1. new server: `mg <key> v f t c N2`. A hit is answered as usual. A miss creates an empty
//!    placeholder item (for 2 s) and returns it with `W` (this request won the right to fill it) and
//!    its CAS value;
//! 2. previous server: `mg <key> v f t` (value, client flags, remaining TTL; `t-1` is no expiry);
//! 3. a hit there is returned to the client at once, and copied: `ms <key> <len> C<cas> T<ttl> F<flags>`
//!    (a TTL over 30 days is sent as an absolute Unix time, as memcached reads it). A miss there removes
//!    the placeholder (`md <key> C<cas>`).
//!
//! Why not `ms … ME` (add): add only refuses to overwrite a value that exists. A client that deletes the
//! key after step 2 read the old copy would see it come back when the add lands. The CAS copy fails
//! (`EX`, `NF`) if anything wrote or deleted the key on the new server after step 1, so it neither
//! overwrites a newer value nor resurrects a deleted key; `warmup_copies_refused` counts those. The
//! cost: two round trips more for a key that moved and missed, one more (the copy, not waited for)
//! when the previous server had it, and during the 2 s a plain `get` from a client that bypasses the
//! proxy may see the empty placeholder.
//!
//! While the window is open a write or delete of a moved key is also sent as a `delete` to its previous
//! server (before the write itself), so a later fallback cannot find the stale copy.
//!
//! A multi-get does the same per key: round one sends the usual `get` lines for the keys that stayed
//! and one `mg … N2` per moved key (pipelined with them on each new server's connection), round two
//! one `mg` per missed key to its previous server (pipelined: one round trip per old server, in
//! parallel), then the copies; values come back in the client's key order ([`WarmMulti`], through
//! the seam's [`Protocol::phase`]). A multi-get falls back only to previous servers still in the pool.
//! `gets`, `gat`s and meta reads read the new ring only.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::plan::{Finish, Memcache, Merge};
use super::request::{Command, GetKind, Request};
use super::response::ResponseKind;
use super::response::ValueBlocks;
use crate::metrics::PoolStats;
use crate::protocol::{
    Answer, Part, PartReply, Phase, PlanContext, Protocol, Recovery, Reply, Step,
};

/// How long the reservation of step 1 lives, in seconds.
const RESERVATION_TTL: u32 = 2;

/// memcached's bound between relative TTLs and absolute Unix times.
const THIRTY_DAYS: i64 = 30 * 24 * 3600;

/// A warm-up `get`: the key, to turn meta replies back into `VALUE` replies and to copy.
#[derive(Debug)]
pub struct WarmGet {
    /// The key.
    key: Bytes,
    /// Where fallbacks, recoveries and copies are counted.
    stats: Arc<PoolStats>,
}

/// A copy's reply, counted when it was refused.
#[derive(Debug)]
pub struct CopyResult {
    /// Where refusals are counted.
    stats: Arc<PoolStats>,
}

/// A one-key `get` of a key that moved, while a warm-up window is open: the [`Step::Fallback`].
pub(super) fn read(req: &Request, ctx: &PlanContext<'_>) -> Option<Step<Memcache>> {
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
    let key = req.bytes(key);
    let previous = ctx.moved_from(key)?;
    let server = ctx.server_for(key)?;
    let line = |flags: &str| {
        let mut b = BytesMut::with_capacity(key.len() + 24);
        b.extend_from_slice(b"mg ");
        b.extend_from_slice(key);
        b.extend_from_slice(flags.as_bytes());
        b.extend_from_slice(b"\r\n");
        b.freeze()
    };
    Some(Step::Fallback {
        server,
        frame: line(&format!(" v f t c N{RESERVATION_TTL}")),
        previous,
        fallback: line(" v f t"),
        kind: ResponseKind::Meta,
        finish: Finish::Warm(WarmGet {
            key: Bytes::copy_from_slice(key),
            stats: Arc::clone(ctx.stats),
        }),
    })
}

/// A write of a key that moved, while a warm-up window is open: `step`, after a `delete` of the key's
/// copy on its previous server.
pub(super) fn write(key: &[u8], step: Step<Memcache>, ctx: &PlanContext<'_>) -> Step<Memcache> {
    let Some(previous) = ctx.moved_from(key) else {
        return step;
    };
    let mut frame = BytesMut::with_capacity(key.len() + 10);
    if key.iter().all(|b| b.is_ascii_graphic()) {
        frame.extend_from_slice(b"delete ");
        frame.extend_from_slice(key);
    } else {
        // A binary key (a meta command's `b` flag): the meta delete takes it in base64.
        use base64::Engine as _;
        frame.extend_from_slice(b"md ");
        frame.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(key)
                .as_bytes(),
        );
        frame.extend_from_slice(b" b");
    }
    frame.extend_from_slice(b"\r\n");
    Step::AlsoPrevious {
        previous,
        frame: frame.freeze(),
        kind: ResponseKind::Line,
        step: Box::new(step),
    }
}

/// A meta reply's parts: the status line's tokens and the data block, if any.
struct MetaReply<'a> {
    /// `VA`, `EN`, `HD`, …
    status: &'a [u8],
    /// The flag tokens after the status (and after the length for `VA`).
    flags: Vec<&'a [u8]>,
    /// The value (for `VA`).
    data: &'a [u8],
}

impl<'a> MetaReply<'a> {
    fn parse(reply: &'a [u8]) -> Option<MetaReply<'a>> {
        let eol = memchr::memmem::find(reply, b"\r\n")?;
        let mut tokens = reply[..eol].split(|&b| b == b' ').filter(|t| !t.is_empty());
        let status = tokens.next()?;
        let (len, flags): (usize, Vec<&[u8]>) = if status == b"VA" {
            let len = std::str::from_utf8(tokens.next()?).ok()?.parse().ok()?;
            (len, tokens.collect())
        } else {
            (0, tokens.collect())
        };
        let data = if status == b"VA" {
            reply.get(eol + 2..eol + 2 + len)?
        } else {
            &[]
        };
        Some(MetaReply {
            status,
            flags,
            data,
        })
    }

    /// The value of flag `f` (the bytes after its letter).
    fn flag(&self, f: u8) -> Option<&'a [u8]> {
        self.flags
            .iter()
            .find(|t| t.first() == Some(&f))
            .map(|t| &t[1..])
    }

    fn has(&self, f: u8) -> bool {
        self.flags.iter().any(|t| t == &[f])
    }

    /// An empty item made by a reservation (ours: `W`, or another client's: `Z`).
    fn is_reservation(&self) -> bool {
        self.status == b"VA" && self.data.is_empty() && (self.has(b'W') || self.has(b'Z'))
    }
}

/// The `get` answer for a meta reply: `VALUE <key> <flags> <len>` and the data, then `END`; a miss (or
/// a reservation) is `END`; anything else (an error) as it is.
fn as_get_answer(key: &[u8], reply: &Bytes) -> Answer {
    let Some(m) = MetaReply::parse(reply) else {
        return Answer::Bytes(reply.clone());
    };
    match m.status {
        b"VA" if !m.is_reservation() => {
            let block = value_block(key, &m);
            let mut out = BytesMut::with_capacity(block.len() + 5);
            out.extend_from_slice(&block);
            out.extend_from_slice(b"END\r\n");
            Answer::Bytes(out.freeze())
        }
        b"VA" | b"EN" => Answer::fixed(b"END\r\n"),
        _ => Answer::Bytes(reply.clone()),
    }
}

/// `T` for a copy: the remaining TTL `t` (`-1`: none) as memcached reads an exptime.
fn copy_ttl(t: i64) -> i64 {
    match t {
        t if t < 0 => 0,
        // 0 left would mean "never expires" to memcached: keep it expiring, in a second.
        0 => 1,
        t if t <= THIRTY_DAYS => t,
        t => i64::try_from(crate::metrics::unix_time())
            .unwrap_or(i64::MAX)
            .saturating_add(t),
    }
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
    pub(super) fn missed(&self, reply: &Reply) -> bool {
        matches!(reply, Ok(b) if MetaReply::parse(b).is_some_and(|m| m.is_reservation()))
    }

    /// Steps 2 and 3: the answer from the previous server's reply, and the copy or the release.
    pub(super) fn recover(self, current: &Bytes, previous: Reply) -> Recovery<Memcache> {
        let (block, follow_up) = recover_key(&self.key, current, &previous, &self.stats);
        let answer = match block {
            Some(block) => {
                let mut out = BytesMut::with_capacity(block.len() + 5);
                out.extend_from_slice(&block);
                out.extend_from_slice(b"END\r\n");
                Answer::Bytes(out.freeze())
            }
            None => Answer::fixed(b"END\r\n"),
        };
        Recovery { answer, follow_up }
    }
}

/// A key's `VALUE` block (without `END`) from a meta hit.
fn value_block(key: &[u8], m: &MetaReply<'_>) -> Bytes {
    let flags = m.flag(b'f').unwrap_or(b"0");
    let mut out = BytesMut::with_capacity(key.len() + m.data.len() + 40);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" ");
    out.extend_from_slice(flags);
    out.extend_from_slice(format!(" {}\r\n", m.data.len()).as_bytes());
    out.extend_from_slice(m.data);
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

/// A follow-up request: bytes, reply framing, and the finish its reply goes through.
type FollowUp = (Bytes, ResponseKind, Finish);

/// Steps 2 and 3 for one key: its `VALUE` block when the previous server had it, and the copy (or the
/// release of the reservation) to send to the new server. `current` is the new server's reply to
/// step 1 (the reservation).
fn recover_key(
    key: &[u8],
    current: &Bytes,
    previous: &Reply,
    stats: &Arc<PoolStats>,
) -> (Option<Bytes>, Option<FollowUp>) {
    stats.warmup_fallbacks.inc();
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
        stats.warmup_recovered.inc();
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
            ms.extend_from_slice(format!(" T{} F", copy_ttl(t)).as_bytes());
            ms.extend_from_slice(m.flag(b'f').unwrap_or(b"0"));
            ms.extend_from_slice(b"\r\n");
            ms.extend_from_slice(m.data);
            ms.extend_from_slice(b"\r\n");
            stats.warmup_copies.inc();
            Some((
                ms.freeze(),
                ResponseKind::Line,
                Finish::Copied(CopyResult {
                    stats: Arc::clone(stats),
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
    /// Moved: this part's `mg` to its new server `new`; `old` is its previous server (index now).
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
pub struct WarmMulti {
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
/// request back when none moved (or the previous server of each left the pool).
pub(super) fn read_multi(req: Request, ctx: &PlanContext<'_>) -> Result<Step<Memcache>, Request> {
    let Command::Get {
        kind: GetKind::Get,
        keys,
        more: false,
        ..
    } = &req.command
    else {
        return Err(req);
    };
    let moved: Vec<Option<usize>> = keys
        .iter()
        .map(|k| {
            ctx.moved_from(req.bytes(k))
                .and_then(|old| ctx.previous_now.get(old).copied().flatten())
        })
        .collect();
    if keys.len() < 2 || moved.iter().all(Option::is_none) {
        return Err(req);
    }
    let mut lines: Vec<(usize, BytesMut)> = Vec::new();
    let mut parts: Vec<Part<Memcache>> = Vec::new();
    let mut slots = Vec::with_capacity(keys.len());
    for (k, old) in keys.iter().zip(&moved) {
        let key = req.bytes(k);
        let Some(new) = ctx.server_for(key) else {
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
            server,
            frame: line.freeze(),
            kind: ResponseKind::Values,
        });
    }
    let n = keys.len();
    Ok(Step::FanOut {
        parts,
        merge: Merge::WarmMulti(WarmMulti {
            slots,
            values: vec![None; n],
            waiting: Vec::new(),
            stats: Arc::clone(ctx.stats),
            request: req,
        }),
    })
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
                let (block, follow_up) = recover_key(key, &reservation, &reply.reply, &self.stats);
                self.values[i] = block;
                if let Some((frame, kind, finish)) = follow_up {
                    follow_ups.push((
                        Part {
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
        Phase::Again {
            parts: next,
            merge: Merge::WarmMulti(self),
            follow_ups: Vec::new(),
        }
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
            self.stats.warmup_copies_refused.inc();
        }
    }
}

/// The protocol hooks, for `plan.rs`.
pub(super) fn fall_back(finish: &Finish, reply: &Reply) -> bool {
    matches!(finish, Finish::Warm(w) if w.missed(reply))
}

/// [`Protocol::recover`] for memcached.
pub(super) fn recover(finish: Finish, current: Reply, previous: Reply) -> Recovery<Memcache> {
    match (finish, current) {
        (Finish::Warm(w), Ok(bytes)) => w.recover(&bytes, previous),
        (finish, current) => Recovery {
            answer: Memcache::finish(finish, current),
            follow_up: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_replies_become_get_answers() {
        let a = as_get_answer(b"k", &Bytes::from_static(b"VA 3 f7 t100 c4\r\nabc\r\n"));
        assert!(matches!(a, Answer::Bytes(b) if &b[..] == b"VALUE k 7 3\r\nabc\r\nEND\r\n"));
        let a = as_get_answer(b"k", &Bytes::from_static(b"VA 0 f0 t-1 c5 W\r\n\r\n"));
        assert!(matches!(a, Answer::Bytes(b) if &b[..] == b"END\r\n"));
        let a = as_get_answer(b"k", &Bytes::from_static(b"VA 0 f0 t-1 c5\r\n\r\n"));
        assert!(
            matches!(a, Answer::Bytes(b) if &b[..] == b"VALUE k 0 0\r\n\r\nEND\r\n"),
            "an empty value is a hit"
        );
        let a = as_get_answer(b"k", &Bytes::from_static(b"EN\r\n"));
        assert!(matches!(a, Answer::Bytes(b) if &b[..] == b"END\r\n"));
    }

    #[test]
    fn copies_keep_the_remaining_ttl_by_memcacheds_rules() {
        assert_eq!(copy_ttl(-1), 0, "t-1: no expiry");
        assert_eq!(copy_ttl(100), 100);
        assert_eq!(copy_ttl(0), 1);
        let far = copy_ttl(THIRTY_DAYS + 10);
        assert!(
            far > 1_700_000_000,
            "over 30 days is sent as a Unix time: {far}"
        );
    }
}
