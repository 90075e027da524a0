//! The memcached protocol on the seam: what each request becomes ([`Step`]), how replies become answers,
//! and what the proxy answers itself (`version`, `stats`, `mn`, `verbosity`).
//!
//! Retrieval commands whose keys live on several servers are split into one request per server (keys in
//! the client's order) and merged back in the client's order; `flush_all` goes to every live server.

/// The warm-up's exchanges of several rounds (reserve, read the old copy, copy, then the command):
/// planner code, as they build parts, rounds and finishes; the warm-up's rules they follow are the
/// leaf `remedies::warmup`.
pub(super) mod warmup;

/// The split keys' exchanges (a write then its copies' deletes, a read's first cleaning): planner
/// code; the rules are the leaf `remedies::split`.
mod split;

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use self::warmup::{CopyResult, Tally, WarmKeyed, WarmMulti, WarmOne};
use super::codec::RequestCodec;
use super::remedies::gutter;
use super::remedies::hot_keys::{self, HotFill, HotInvalidate, HotRead};
use super::remedies::rate_limits;
use super::remedies::split::{self as split_rules, Use};
use super::remedies::{dual_writes, replicas};
use super::request::{Command, GetKind, Limits, MetaKind, Request, StatsRequest};
use super::response::{is_error_reply, status_code, ResponseKind, ValueBlocks};
use crate::config::{MemcacheConfig, PoolConfig};
use crate::error::{BackendError, ProxyError};
use crate::protocol::planned::{not_taken, replicated_not_taken};
use crate::protocol::replicated::Untried;
use crate::protocol::route::{Placer, Remedies, Route};
use crate::split::{SplitRead, SplitRoute};

use crate::metrics::PoolStats;
use crate::protocol::{
    Answer, Back, Handed, Leave, Part, PartReply, Phase, Placement, PlanContext, PoolState,
    Protocol, Reply, Round, ServerFacts, Step,
};

/// The reply to `version`: the memcached protocol level the proxy speaks, then its own name and version.
/// Clients read the first word as `major.minor.micro` and refuse a reply that does not start so
/// (libmemcached's `memcached_version`, used by `memcping` and `memcstat`, fails on
/// `VERSION shardring-proxy-…`); some enable features by it (1.6 has the meta commands).
pub const VERSION_REPLY: &[u8] =
    concat!("VERSION 1.6.0 ", crate::version::name_version!(), "\r\n").as_bytes();

/// The memcached text protocol for one version of a pool: its settings, and the state of its
/// remedies (hot keys, replica lists, the gutter).
#[derive(Debug)]
pub(crate) struct Memcache {
    /// The pool's memcached settings.
    pub(super) settings: MemcacheSettings,
    /// What the pool's servers said of themselves, when the value limit is theirs
    /// ([`Limits::value_len_from_servers`]): each client connection's decoder reads the largest
    /// `item_size_max` from it.
    pub(super) servers: Option<Arc<[Arc<ServerFacts>]>>,
    /// What the pool adds to placing keys: hot keys, replicas, the gutter.
    remedies: Remedies,
}

/// What the memcached protocol reads of a pool's config, read in one place.
#[derive(Debug, Clone)]
pub(super) struct MemcacheSettings {
    /// Key, value and line limits.
    pub(super) limits: Limits,
    /// A multi-get fails whole when one of its servers fails (twemproxy's behaviour).
    all_or_nothing: bool,
    /// With replicas, a read that misses tries the next replica too.
    replica_read_miss: bool,
}

impl MemcacheSettings {
    /// The memcached settings of `config`.
    pub(super) fn from_pool(config: &PoolConfig) -> MemcacheSettings {
        // Only a memcached pool is served by this protocol (`pool/mod.rs` picks it by the pool's
        // protocol); the defaults stand in rather than a panic.
        let defaults = MemcacheConfig::default();
        let memcache = config.memcache().unwrap_or(&defaults);
        MemcacheSettings {
            limits: memcache.limits,
            all_or_nothing: memcache.multiget_all_or_nothing,
            replica_read_miss: memcache.remedies.replica_read_miss,
        }
    }
}

/// How a single server's reply becomes the client's answer.
#[derive(Debug)]
pub(crate) enum Finish {
    /// As it is.
    Plain,
    /// Hidden (the client sent `noreply`).
    NoReply,
    /// A quiet meta command: hidden when its status is one `q` hides.
    Quiet(MetaKind),
    /// A piece of a streamed retrieval line: its `VALUE` blocks without the `END` (the last piece ends
    /// the answer).
    WithoutEnd,
    /// As it is, and a `VALUE` reply fills the hot-key cache.
    Fill(HotFill),
    /// A write of a hot key: invalidate the cache again, then finish as the inner finish says.
    Invalidate(HotInvalidate, Box<Finish>),
    /// A warm-up copy's reply: counted, then dropped.
    Copied(CopyResult),
}

/// What a fan-out merges.
#[derive(Debug)]
pub(crate) enum Merge {
    /// A split multi-get.
    Get(GetMerge),
    /// A write sent to every live replica of its key.
    Replicated(ReplicatedWrite),
    /// A write of a key whose owner changes, sent to its owner now and its owner next.
    Dual(DualWrite),
    /// A `cas` of a key whose owner changes: the owner now, then (when it stored it) the value on
    /// to the next owner as a `set` (answered through [`Protocol::advance`]).
    DualCas(DualCas),
    /// A multi-get during a warm-up window (answered through [`Protocol::advance`]).
    WarmMulti(WarmMulti),
    /// A command of moved keys during a warm-up window (a one-key command, or `gets`/`gat`/`gats` of
    /// any number of keys): copy first, then apply (answered through [`Protocol::advance`]).
    WarmKeyed(WarmKeyed),
    /// `flush_all` sent to every live server (and those a planned change adds).
    FlushAll {
        /// The client asked for no reply.
        noreply: bool,
    },
    /// A one-key read of a replicated key: its replicas in turn, while a reply says to try the next.
    Failover(Failover),
    /// A one-key `get` of a key that moved, while a warm-up window is open: its new server, then its
    /// previous one after a miss.
    WarmOne(WarmOne),
    /// One request (sent with a follow-up beside it: a warm-up write's invalidation of the old copy):
    /// its reply through the finish.
    One(Finish),
    /// A write of a split key: its own exchange, then its copies' deletes (answered through
    /// [`Protocol::advance`]).
    SplitWrite(split::SplitWrite),
    /// A split key's read from its owner with the copies' first cleaning beside it.
    SplitClean(split::SplitClean),
}

/// A write sent to several replicas: how their replies become one answer.
#[derive(Debug)]
pub(crate) struct ReplicatedWrite {
    /// How the chosen reply becomes the answer.
    finish: Finish,
    /// Where disagreements are counted.
    stats: Arc<PoolStats>,
    /// While a planned change moves the key off its replica list: the part sent to its next owner
    /// (the last), whose refusal fails the write (`protocol::planned`).
    next: Option<usize>,
}

impl ReplicatedWrite {
    /// The first reply that is not a server failure (else the first reply), finished as the client
    /// asked; replies whose status differs are counted as a disagreement. Not acknowledged when the
    /// next owner did not take it.
    fn merge(self, replies: Vec<PartReply<'_>>) -> Answer {
        let chosen = ReplicatedWrite::choose(&replies, &self.stats);
        // Before the chosen reply is taken out (which moves the last part's into its place).
        let reply = match replicated_not_taken(&replies, chosen, self.next, &dual_writes::ERRORS) {
            Some(e) => Err(e),
            None => ReplicatedWrite::take(replies, chosen),
        };
        Memcache::finish(self.finish, reply)
    }

    /// Which reply a replicated write answers with ([`replicas::chosen`]); a disagreement of the
    /// replicas counted.
    fn choose(replies: &[PartReply<'_>], stats: &PoolStats) -> Option<usize> {
        let (chosen, disagree) = replicas::chosen(replies);
        if disagree {
            stats.replica_disagreements.inc();
        }
        chosen
    }

    /// The chosen reply, out of `replies`.
    fn take(mut replies: Vec<PartReply<'_>>, chosen: Option<usize>) -> Reply {
        chosen.map_or(Err(BackendError::NoServer), |i| {
            replies.swap_remove(i).reply
        })
    }
}

/// A write sent to a key's owner now and to its owner next (the pool has a next membership): the
/// client gets the owner's reply, as it would without the next membership, unless the next owner
/// could not be reached (then its failure: the write is not acknowledged).
#[derive(Debug)]
pub(crate) struct DualWrite {
    /// How the owner's reply becomes the answer.
    finish: Finish,
    /// Where dual writes and their disagreements are counted.
    stats: Arc<PoolStats>,
}

impl DualWrite {
    /// The owner's reply, finished as the client asked; counted, and counted again as a
    /// disagreement when the next owner's status differs (it had no copy yet for an `append`, or
    /// failed).
    fn merge(self, mut replies: Vec<PartReply<'_>>) -> Answer {
        self.stats.dual_writes.inc();
        if dual_writes::disagree(&replies) {
            self.stats.dual_write_disagreements.inc();
        }
        // A write the next owner did not take is not acknowledged: once the copy is done, nothing
        // would bring it there, and the cut-over would lose it (`protocol::planned`).
        let reply = match replies.as_slice() {
            [] => Err(BackendError::NoServer),
            [now, next, ..] => match not_taken(&now.reply, next, &dual_writes::ERRORS) {
                Some(e) => Err(e),
                None => replies.swap_remove(0).reply,
            },
            [_] => replies.swap_remove(0).reply,
        };
        Memcache::finish(self.finish, reply)
    }
}

/// A `cas` of a key whose owner changes, between its rounds (`dual_writes::cas_as_set`).
#[derive(Debug)]
pub(crate) struct DualCas {
    /// The next owner.
    next: usize,
    /// The `set` it gets when the owner now stores the `cas`.
    set: Bytes,
    /// How the owner's reply becomes the answer.
    finish: Finish,
    /// The owner's reply, once in (the second round's answer).
    owner: Option<Reply>,
    /// Where dual writes and their disagreements are counted.
    stats: Arc<PoolStats>,
    /// The first round went to every live replica (`--replicas`): its reply is the one a replicated
    /// write answers with.
    replicated: bool,
}

impl DualCas {
    /// After the owner's reply: the `set` to the next owner when it stored the value, else the
    /// answer; after the next owner's reply, the owner's answer.
    fn advance(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        match self.owner.take() {
            None => {
                let reply = if self.replicated {
                    let chosen = ReplicatedWrite::choose(&replies, &self.stats);
                    ReplicatedWrite::take(replies, chosen)
                } else {
                    first_reply(replies)
                };
                if !dual_writes::cas_stored(&reply) {
                    return done(Memcache::finish(self.finish, reply));
                }
                let part = current_part(self.next, self.set.clone(), ResponseKind::Line);
                self.owner = Some(reply);
                Phase::Again(Round::new(vec![part], Merge::DualCas(self)))
            }
            Some(owner) => {
                self.stats.dual_writes.inc();
                let next = replies.first();
                if !matches!(next.map(|r| &r.reply), Some(Ok(b)) if &b[..] == b"STORED\r\n") {
                    self.stats.dual_write_disagreements.inc();
                }
                // Not acknowledged unless the next owner took it (see `DualWrite::merge`).
                let answer = match next {
                    None => Err(BackendError::NoServer),
                    Some(next) => not_taken(&owner, next, &dual_writes::ERRORS).map_or(owner, Err),
                };
                done(Memcache::finish(self.finish, answer))
            }
        }
    }
}

/// `finish`, wrapped so that the reply invalidates the hot-key cache again when the key's write
/// invalidated it now.
fn invalidating(req: &Request, key: &Range<usize>, finish: Finish, ctx: &Placer<'_>) -> Finish {
    // Most pools have no hot-key detection: their writes skip the routing key's reading.
    if ctx.hot.is_none() {
        return finish;
    }
    match req.with_routing_key(key, |k| hot_keys::write(k, ctx)) {
        Some(invalidate) => Finish::Invalidate(invalidate, Box::new(finish)),
        None => finish,
    }
}

/// A one-key read of a replicated key, as an exchange: one replica per round.
#[derive(Debug)]
pub(crate) struct Failover {
    /// The replicas not tried yet, in order.
    rest: Untried,
    /// The request.
    frame: Bytes,
    /// How its replies are framed.
    kind: ResponseKind,
    /// How the last reply becomes the answer.
    finish: Finish,
    /// A miss tries the next replica too.
    read_miss: bool,
    /// Where failovers are counted.
    stats: Arc<PoolStats>,
}

impl Failover {
    /// The read of `frame` from `servers` in turn: sent to the first now, to the next while its
    /// replies say so. No server: a plain forward to none.
    fn step(
        servers: Vec<usize>,
        frame: Bytes,
        kind: ResponseKind,
        finish: Finish,
        read_miss: bool,
        stats: &Arc<PoolStats>,
    ) -> Step<Memcache> {
        let Some((first, rest)) = Untried::start(servers) else {
            return Step::Forward {
                server: None,
                frame,
                kind,
                finish,
            };
        };
        let part = current_part(first, frame.clone(), kind);
        Step::Exchange(Round::new(
            vec![part],
            Merge::Failover(Failover {
                rest,
                frame,
                kind,
                finish,
                read_miss,
                stats: Arc::clone(stats),
            }),
        ))
    }

    /// After a replica's reply: the next replica, or the answer.
    fn advance(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        let reply = first_reply(replies);
        let retry = replicas::retry(self.read_miss, &reply);
        if let Some(next) = self.rest.next(retry, &self.stats) {
            let part = current_part(next, self.frame.clone(), self.kind);
            return Phase::Again(Round::new(vec![part], Merge::Failover(self)));
        }
        done(Memcache::finish(self.finish, reply))
    }
}

/// A one-key command of a split key: `step` as it is, or, when the command changes the key, `step`
/// then the deletes of the key's copies (`remedies::split`).
#[cold]
fn split_write(
    req: &Request,
    key: &Range<usize>,
    step: Step<Memcache>,
    split: &SplitRoute,
    ctx: &Placer<'_>,
) -> Step<Memcache> {
    if split_rules::usage(req) != Use::Write {
        return step;
    }
    req.with_routing_key(key, |k| split::write(step, k, &split.copies, ctx.stats))
}

/// `step` with `follow_ups` sent beside its first round, without waiting for them: a forward
/// becomes a round of its one part ([`Merge::One`]); an answer has no round to go with.
pub(super) fn with_follow_ups(
    step: Step<Memcache>,
    follow_ups: impl IntoIterator<Item = crate::protocol::FollowUp<Memcache>>,
) -> Step<Memcache> {
    let mut round = match step {
        Step::Forward {
            server,
            frame,
            kind,
            finish,
        } => Round::new(
            server
                .map(|s| current_part(s, frame, kind))
                .into_iter()
                .collect(),
            Merge::One(finish),
        ),
        Step::Exchange(round) => round,
        answered @ (Step::Answer(_) | Step::Leave(_)) => return answered,
    };
    round.follow_ups.extend(follow_ups);
    Step::Exchange(round)
}

/// A part to a server of the current placement.
fn current_part(server: usize, frame: Bytes, kind: ResponseKind) -> Part<Memcache> {
    Part {
        placement: Placement::Current,
        server,
        frame,
        kind,
    }
}

/// The reply of a round's one part (a round of none reads as no server).
fn first_reply(replies: Vec<PartReply<'_>>) -> Reply {
    replies
        .into_iter()
        .next()
        .map_or(Err(BackendError::NoServer), |r| r.reply)
}

/// An exchange's answer, with nothing more to send.
fn done(answer: Answer) -> Phase<Memcache> {
    Phase::Done {
        answer,
        follow_ups: Vec::new(),
    }
}

/// A split multi-get: the request, and which part holds each key.
#[derive(Debug)]
pub(crate) struct GetMerge {
    /// The client's request (its keys are ranges of its frame).
    request: Request,
    /// For each key in the client's order, the index of the part that asked for it; `None` when no
    /// server was live for it.
    part_of: Vec<Option<usize>>,
    /// Fail whole when a part fails.
    all_or_nothing: bool,
    /// Fail whole when a key has no server: the proxy is fenced and that key moves (a miss would
    /// be a stale read).
    fenced: bool,
}

impl Protocol for Memcache {
    type Decoder = RequestCodec;
    type Request = Request;
    type Finish = Finish;
    type Exchange = Merge;
    type ClientState = ();
    /// memcached has no connection modes.
    type Mode = std::convert::Infallible;

    fn new(config: &PoolConfig, pool: &PoolState<'_>) -> Result<Memcache, ProxyError> {
        let settings = MemcacheSettings::from_pool(config);
        let remedies = Remedies::build(config, pool)?;
        Ok(Memcache {
            settings,
            servers: None,
            remedies,
        })
    }

    fn decoder(&self) -> RequestCodec {
        match &self.servers {
            Some(servers) => {
                RequestCodec::with_server_limits(self.settings.limits, Arc::clone(servers))
            }
            None => RequestCodec::new(self.settings.limits),
        }
    }

    fn plan(&self, req: Request, _session: &mut (), plan: &PlanContext<'_>) -> Step<Memcache> {
        let ctx = &Placer::new(plan, &self.remedies);
        if ctx.limited() {
            if let Some(refused) = rate_limits::refused(&req, ctx) {
                return Step::Answer(refused);
            }
        }
        match &req.command {
            Command::Get { .. } => self.get(req, ctx),
            Command::Keyed { key, noreply } => {
                let finish = if *noreply {
                    Finish::NoReply
                } else {
                    Finish::Plain
                };
                let finish = invalidating(&req, key, finish, ctx);
                self.forward_keyed(&req, key, finish, ctx)
            }
            Command::Meta {
                kind, key, quiet, ..
            } => {
                let finish = if *quiet {
                    Finish::Quiet(*kind)
                } else {
                    Finish::Plain
                };
                let finish = invalidating(&req, key, finish, ctx);
                self.forward_keyed(&req, key, finish, ctx)
            }
            Command::MetaNoop => Step::Answer(Answer::fixed(b"MN\r\n")),
            Command::Version => Step::Answer(Answer::fixed(VERSION_REPLY)),
            Command::Quit => Step::Leave(Leave::Close(Answer::Nothing)),
            Command::Verbosity { noreply: true } => Step::Answer(Answer::Nothing),
            Command::Verbosity { noreply: false } => Step::Answer(Answer::fixed(b"OK\r\n")),
            Command::FlushAll { noreply } => {
                let noreply = *noreply;
                hot_keys::flush(ctx);
                let frame = req.to_forward();
                // The servers a planned change adds too: the copies dual writes made there would
                // otherwise come back at the cut-over.
                let mut servers = ctx.live_servers().to_vec();
                for &s in ctx.next_servers() {
                    if !servers.contains(&s) {
                        servers.push(s);
                    }
                }
                let parts = servers
                    .into_iter()
                    .map(|server| Part {
                        placement: Placement::Current,
                        server,
                        frame: frame.clone(),
                        kind: ResponseKind::Line,
                    })
                    .collect();
                Step::Exchange(Round::new(parts, Merge::FlushAll { noreply }))
            }
            Command::Stats(request) => Step::Answer(match request {
                StatsRequest::Proxy => Answer::Bytes(local_stats(ctx)),
                StatsRequest::Reset => Answer::fixed(b"RESET\r\n"),
                StatsRequest::Toggle => Answer::fixed(b"OK\r\n"),
                StatsRequest::PerServer => Answer::fixed(b"END\r\n"),
            }),
        }
    }

    async fn serve_mode<H: Handed<Memcache> + Send>(
        mode: std::convert::Infallible,
        _client: &mut H,
    ) -> std::io::Result<Back> {
        match mode {}
    }

    fn finish(finish: Finish, reply: Reply) -> Answer {
        match (reply, finish) {
            (reply, Finish::Invalidate(inv, then)) => {
                inv.done();
                Memcache::finish(*then, reply)
            }
            (reply, Finish::Copied(c)) => {
                c.finish(&reply);
                Answer::Nothing
            }
            (Err(e), Finish::Fill(_)) => Answer::Failed(e),
            (Ok(bytes), Finish::Fill(fill)) => {
                fill.fill(&bytes);
                Answer::Bytes(bytes)
            }
            (_, Finish::NoReply) => Answer::Nothing,
            (Err(e), _) => Answer::Failed(e),
            (Ok(bytes), Finish::Plain) => Answer::Bytes(bytes),
            (Ok(bytes), Finish::WithoutEnd) => match bytes.strip_suffix(b"END\r\n") {
                Some(values) => Answer::Bytes(bytes.slice(..values.len())),
                None => Answer::Bytes(bytes),
            },
            (Ok(bytes), Finish::Quiet(kind)) => {
                if kind.quiet_hides(status_code(&bytes)) {
                    Answer::Nothing
                } else {
                    Answer::Bytes(bytes)
                }
            }
        }
    }

    fn encode_failure(error: &BackendError, out: &mut BytesMut) {
        out.extend_from_slice(b"SERVER_ERROR ");
        out.extend_from_slice(error.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    fn advance(&self, merge: Merge, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        advance(merge, replies)
    }

    fn in_order(&self, merge: &Merge) -> bool {
        matches!(merge, Merge::WarmKeyed(w) if w.rounds_follow())
            || matches!(merge, Merge::DualCas(_) | Merge::SplitWrite(_))
    }
}

/// An exchange's next move after its round's replies.
fn advance(merge: Merge, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
    match merge {
        Merge::WarmMulti(warm) => warm.phase(replies),
        Merge::WarmKeyed(warm) => warm.phase(replies),
        Merge::WarmOne(warm) => warm.advance(replies),
        Merge::Failover(failover) => failover.advance(replies),
        Merge::DualCas(cas) => cas.advance(replies),
        Merge::SplitWrite(write) => write.advance(replies),
        merge => done(Memcache::merge(merge, replies)),
    }
}

impl Memcache {
    /// A one-key command: to the key's server, as received (less a stripped `noreply`/`q`); with replicas,
    /// a write to every live replica and a read to the first, failing over to the next.
    fn forward_keyed(
        &self,
        req: &Request,
        key: &Range<usize>,
        finish: Finish,
        ctx: &Placer<'_>,
    ) -> Step<Memcache> {
        let route = req.with_routing_key(key, |k| ctx.route(k));
        if ctx.splits() {
            return self.forward_keyed_split(req, key, route, finish, ctx);
        }
        self.forward_routed(req, key, route, finish, ctx)
    }

    /// [`Memcache::forward_keyed`] in a pool with split keys: the key's own route, then the deletes
    /// of its copies when it is split and the command changes it. Out of line, so a pool without
    /// split keys carries none of it.
    #[cold]
    #[inline(never)]
    fn forward_keyed_split(
        &self,
        req: &Request,
        key: &Range<usize>,
        route: Route,
        finish: Finish,
        ctx: &Placer<'_>,
    ) -> Step<Memcache> {
        let split = req.with_routing_key(key, |k| ctx.split_route(k, route.server));
        let step = self.forward_routed(req, key, route, finish, ctx);
        match split {
            None => step,
            Some(split) => split_write(req, key, step, &split, ctx),
        }
    }

    /// [`Memcache::forward_keyed`] once the key's route is known and split keys are seen to.
    /// Inlined: out of line, every keyed request pays a call and a copy of its route.
    #[inline(always)]
    fn forward_routed(
        &self,
        req: &Request,
        key: &Range<usize>,
        route: Route,
        finish: Finish,
        ctx: &Placer<'_>,
    ) -> Step<Memcache> {
        let Some(old) = route.previous else {
            return self.forward_keyed_now(req, route, finish, ctx);
        };
        let finish = match warmup::keyed(req, key, &route, finish, ctx) {
            Ok(step) => return step,
            Err(finish) => finish,
        };
        if replicas::is_write(&req.command) {
            let step = self.forward_keyed_now(req, route, finish, ctx);
            return req.with_routing_key(key, |k| warmup::write(k, old, step));
        }
        self.forward_keyed_now(req, route, finish, ctx)
    }

    /// [`Memcache::forward_keyed`] without the warm-up's invalidation.
    fn forward_keyed_now(
        &self,
        req: &Request,
        mut route: Route,
        finish: Finish,
        ctx: &Placer<'_>,
    ) -> Step<Memcache> {
        let finish = if replicas::is_write(&req.command) {
            if let Some(mut servers) = replicas::write_servers(&mut route) {
                let (frame, kind) = (req.to_forward(), req.command.response_kind());
                let moving = route.next.filter(|n| !servers.contains(n));
                let stats = Arc::clone(ctx.stats);
                let merge = match (moving, dual_writes::cas_as_set(&frame)) {
                    // A `cas` of a moving key: to the replicas, then as a `set` to the owner next
                    // once stored (its unique is the owner's, which the owner next does not share).
                    (Some(next), Some(set)) => Merge::DualCas(DualCas {
                        next,
                        set,
                        finish,
                        owner: None,
                        stats,
                        replicated: true,
                    }),
                    // Any other write: to the owner next beside the replicas, in the same round.
                    _ => {
                        let next = moving.map(|n| {
                            servers.push(n);
                            servers.len() - 1
                        });
                        Merge::Replicated(ReplicatedWrite {
                            finish,
                            stats,
                            next,
                        })
                    }
                };
                let parts = servers
                    .into_iter()
                    .map(|server| current_part(server, frame.clone(), kind))
                    .collect();
                return Step::Exchange(Round::new(parts, merge));
            }
            if let (Some(now), Some(next)) = (route.server, route.next) {
                let (frame, kind) = (req.to_forward(), req.command.response_kind());
                if let Some(set) = dual_writes::cas_as_set(&frame) {
                    let cas = DualCas {
                        next,
                        set,
                        finish,
                        owner: None,
                        stats: Arc::clone(ctx.stats),
                        replicated: false,
                    };
                    let part = current_part(now, frame, kind);
                    return Step::Exchange(Round::new(vec![part], Merge::DualCas(cas)));
                }
                let parts = vec![
                    current_part(now, frame.clone(), kind),
                    current_part(next, frame, kind),
                ];
                let write = DualWrite {
                    finish,
                    stats: Arc::clone(ctx.stats),
                };
                return Step::Exchange(Round::new(parts, Merge::Dual(write)));
            }
            finish
        } else if let Some(servers) = replicas::read_servers(&mut route) {
            return Failover::step(
                servers,
                req.to_forward(),
                req.command.response_kind(),
                finish,
                self.settings.replica_read_miss,
                ctx.stats,
            );
        } else {
            finish
        };
        let frame = match route.ttl_cap {
            Some(cap) => gutter::cap_ttl(&req.to_forward(), cap),
            None => req.to_forward(),
        };
        Step::Forward {
            server: route.server,
            frame,
            kind: req.command.response_kind(),
            finish,
        }
    }

    /// The answer of an exchange that ends after this round (a split multi-get, a replicated write,
    /// `flush_all`, or the last round of a warm-up's command).
    pub(super) fn merge(merge: Merge, replies: Vec<PartReply<'_>>) -> Answer {
        match merge {
            Merge::Get(get) => get.merge(replies),
            Merge::Replicated(write) => write.merge(replies),
            Merge::Dual(write) => write.merge(replies),
            Merge::One(finish) => Memcache::finish(finish, first_reply(replies)),
            Merge::SplitClean(clean) => clean.merge(replies),
            // Exchanges of more rounds are not nested in others: answered with what this round
            // found.
            merge @ (Merge::WarmMulti(_)
            | Merge::WarmKeyed(_)
            | Merge::WarmOne(_)
            | Merge::DualCas(_)
            | Merge::SplitWrite(_)
            | Merge::Failover(_)) => match advance(merge, replies) {
                Phase::Done { answer, .. } => answer,
                Phase::Again(_) => Answer::Failed(BackendError::NoServer),
            },
            Merge::FlushAll { noreply } => {
                let mut failure = None;
                for r in replies {
                    match r.reply {
                        Ok(b) if &b[..] == b"OK\r\n" => {}
                        Ok(b) => failure = Some(refused(r.server, &b)),
                        Err(e) => failure = Some(e),
                    }
                }
                match (failure, noreply) {
                    (_, true) => Answer::Nothing,
                    (Some(e), false) => Answer::Failed(e),
                    (None, false) => Answer::fixed(b"OK\r\n"),
                }
            }
        }
    }

    /// get/gets/gat/gats: as received when every key lives on one server, else one request per server.
    fn get(&self, req: Request, ctx: &Placer<'_>) -> Step<Memcache> {
        let touches = dual_writes::touches(&req, ctx);
        let step = self.get_placed(req, ctx);
        if touches.is_empty() {
            return step;
        }
        ctx.stats.dual_writes.add(touches.len() as u64);
        let follow_ups = touches.into_iter().map(|(server, frame)| {
            // Dropped: the read's reply answers; the copy reads the TTL of a key not there yet.
            (
                current_part(server, frame, ResponseKind::Line),
                Finish::NoReply,
            )
        });
        with_follow_ups(step, follow_ups)
    }

    /// [`Memcache::get`] without the dual writes' touches.
    fn get_placed(&self, req: Request, ctx: &Placer<'_>) -> Step<Memcache> {
        let Command::Get { keys, more, .. } = &req.command else {
            unreachable!("get() is only called for retrieval commands")
        };
        let more = *more;
        if keys.is_empty() {
            // `gat <exptime>` alone (memcached answers END), or a streamed line's last piece.
            return Step::Answer(if more {
                Answer::Nothing
            } else {
                Answer::fixed(b"END\r\n")
            });
        }
        let fill = match hot_keys::read(&req, ctx) {
            HotRead::Cached(answer) => return Step::Answer(answer),
            HotRead::Fill(fill) => Some(fill),
            HotRead::Plain => None,
        };
        // A one-key retrieval (the common case) places its key once, for everything below.
        let route = match keys.as_slice() {
            [key] => Some(ctx.route(req.bytes(key))),
            _ => None,
        };
        if ctx.splits() {
            let split = match (keys.as_slice(), &route) {
                ([key], Some(r)) if r.previous.is_none() => {
                    ctx.split_route(req.bytes(key), r.server)
                }
                _ => None,
            };
            if let Some(split) = split {
                return self.get_split(req, fill, route, &split, ctx);
            }
            if keys.len() > 1 && split_rules::usage(&req) == Use::Write {
                return self.gat_split(req, fill, ctx);
            }
        }
        if ctx.previous.is_some() {
            if let Some(step) = route.as_ref().and_then(|r| warmup::read(&req, r, ctx)) {
                return step;
            }
            if !matches!(
                req.command,
                Command::Get {
                    kind: GetKind::Get,
                    ..
                }
            ) {
                // gets/gat/gats: the moved keys are copied first, then read where they live now,
                // so the CAS values are the new servers'.
                let step = self.get_now(req.clone(), fill, route, ctx);
                return warmup::retrieval(&req, step, ctx);
            }
            return match warmup::read_multi(req, ctx) {
                Ok(step) => step,
                Err(req) => self.get_now(req, fill, route, ctx),
            };
        }
        self.get_now(req, fill, route, ctx)
    }

    /// A one-key retrieval of a split key (`remedies::split`): a plain `get` spread over the key's
    /// servers in the `read` phase (a copy's miss filled from the owner, the first such read
    /// cleaning the copies); `gat`/`gats` as writes (the owner, then the copies deleted); `gets`
    /// from the owner.
    fn get_split(
        &self,
        req: Request,
        fill: Option<HotFill>,
        route: Option<Route>,
        split: &SplitRoute,
        ctx: &Placer<'_>,
    ) -> Step<Memcache> {
        let owner = route.as_ref().and_then(|r| r.server);
        let key = match &req.command {
            Command::Get { keys, .. } => keys.first().map(|k| req.frame.slice(k.clone())),
            _ => None,
        };
        let (Some(owner), Some(key)) = (owner, key) else {
            return self.get_now(req, fill, route, ctx);
        };
        match split_rules::usage(&req) {
            Use::Spread => match split.read() {
                SplitRead::Copy(copy) => {
                    ctx.stats.split_reads.inc();
                    warmup::copying_get(
                        &key,
                        copy,
                        (Placement::Current, owner),
                        Tally::Split,
                        ctx.stats,
                    )
                }
                SplitRead::Clean(cleaning) => {
                    // The cleaning's read goes to the owner alone, its deletes beside it in one
                    // round (with replicas, without the failover to the next: once a key).
                    let mut route = route;
                    if let Some(r) = route.as_mut() {
                        r.replicas = None;
                    }
                    let step = self.get_now(req, fill, route, ctx);
                    split::clean(step, &key, &split.copies, cleaning, ctx.stats)
                }
                SplitRead::Owner => self.get_now(req, fill, route, ctx),
            },
            Use::Write => {
                let step = self.get_now(req, fill, route, ctx);
                split::write(step, &key, &split.copies, ctx.stats)
            }
            Use::OwnerRead => self.get_now(req, fill, route, ctx),
        }
    }

    /// A multi-key `gat`/`gats` in a pool with split keys: as any, then the copies of each split
    /// key it names deleted (it changed their TTL on their owners only), answered once they are.
    #[cold]
    fn gat_split(&self, req: Request, fill: Option<HotFill>, ctx: &Placer<'_>) -> Step<Memcache> {
        let mut deletes = Vec::new();
        if let Command::Get { keys, .. } = &req.command {
            for key in keys {
                let key = req.bytes(key);
                let owner = ctx.route(key).server;
                if let Some(split) = ctx.split_route(key, owner) {
                    let delete = split_rules::delete_line(key);
                    deletes.extend(split.copies.iter().map(|&c| (c, delete.clone())));
                }
            }
        }
        let step = self.get_now(req, fill, None, ctx);
        split::write_then_delete(step, deletes, ctx.stats)
    }

    /// [`Memcache::get`] past the hot-key cache and the warm-up.
    fn get_now(
        &self,
        req: Request,
        fill: Option<HotFill>,
        mut route: Option<Route>,
        ctx: &Placer<'_>,
    ) -> Step<Memcache> {
        let Command::Get {
            kind,
            exptime,
            keys,
            more,
        } = &req.command
        else {
            unreachable!("get_now() is only called for retrieval commands")
        };
        let more = *more;
        // A one-key get (the common case) places its key without allocating.
        let mut single = [None];
        let batch;
        let owners: &[Option<usize>] = if let (Some(route), [_]) = (&route, keys.as_slice()) {
            single[0] = route.first();
            &single
        } else {
            batch = owners_of(&req, keys, ctx);
            &batch
        };
        let first = owners[0];
        if first.is_some() && owners.iter().all(|&o| o == first) {
            let finish = match (fill, more) {
                (Some(fill), _) => Finish::Fill(fill),
                (None, true) => Finish::WithoutEnd,
                (None, false) => Finish::Plain,
            };
            if keys.len() == 1 {
                if let Some(servers) = route.as_mut().and_then(replicas::read_servers) {
                    return Failover::step(
                        servers,
                        req.frame.clone(),
                        ResponseKind::Values,
                        finish,
                        self.settings.replica_read_miss,
                        ctx.stats,
                    );
                }
            }
            let frame = match first.and_then(|s| ctx.gutter_ttl_cap(s)) {
                Some(cap) => gutter::cap_ttl(&req.frame, cap),
                None => req.frame.clone(),
            };
            return Step::Forward {
                server: first,
                frame,
                kind: ResponseKind::Values,
                finish,
            };
        }
        // Split: one request per server (in the order of their first key), keys in the client's order.
        // Every part's line is written into one buffer and split off it: one allocation for all the
        // parts rather than two per part (the line, and its `freeze`).
        let mut servers: Vec<usize> = Vec::new();
        let part_of: Vec<Option<usize>> = owners
            .iter()
            .map(|owner| {
                owner.map(|o| match servers.iter().position(|&s| s == o) {
                    Some(p) => p,
                    None => {
                        servers.push(o);
                        servers.len() - 1
                    }
                })
            })
            .collect();
        let exptime = exptime.as_ref().map(|e| req.bytes(e));
        let start_len = kind.word().len() + exptime.map_or(0, |e| e.len() + 1);
        let key_bytes: usize = keys.iter().map(|k| k.len() + 1).sum();
        let mut lines = BytesMut::with_capacity(servers.len() * (start_len + 2) + key_bytes);
        let parts = servers
            .iter()
            .enumerate()
            .map(|(p, &server)| {
                lines.extend_from_slice(kind.word().as_bytes());
                if let Some(e) = exptime {
                    lines.extend_from_slice(b" ");
                    lines.extend_from_slice(e);
                }
                for (k, _) in keys.iter().zip(&part_of).filter(|(_, q)| **q == Some(p)) {
                    lines.extend_from_slice(b" ");
                    lines.extend_from_slice(req.bytes(k));
                }
                lines.extend_from_slice(b"\r\n");
                Part {
                    placement: Placement::Current,
                    server,
                    frame: lines.split().freeze(),
                    kind: ResponseKind::Values,
                }
            })
            .collect();
        ctx.stats.fragments.add(servers.len() as u64);
        Step::Exchange(Round::new(
            parts,
            Merge::Get(GetMerge {
                request: req,
                part_of,
                all_or_nothing: self.settings.all_or_nothing,
                fenced: ctx.fenced(),
            }),
        ))
    }
}

/// The server of each of a multi-get's keys: one batch through the placement (which overlaps the
/// keys' cache misses), or key by key along the replica lists when keys have replicas.
fn owners_of(req: &Request, keys: &[Range<usize>], ctx: &Placer<'_>) -> Vec<Option<usize>> {
    let mut owners = vec![None; keys.len()];
    if ctx.replicas() > 1 {
        for (owner, k) in owners.iter_mut().zip(keys) {
            *owner = ctx.route(req.bytes(k)).first();
        }
    } else {
        let key_bytes: Vec<&[u8]> = keys.iter().map(|k| req.bytes(k)).collect();
        ctx.servers_for(&key_bytes, &mut owners);
    }
    owners
}

impl GetMerge {
    /// The `VALUE` blocks of every part in the client's key order, then `END`. A failed part's keys are
    /// left out (they read as misses), unless `all_or_nothing` or every part failed; a key without a
    /// server fails the whole when `all_or_nothing` or fenced.
    fn merge(self, replies: Vec<PartReply<'_>>) -> Answer {
        let replies: Vec<Reply> = replies
            .into_iter()
            .map(|r| match r.reply {
                Ok(b) if is_error_reply(&b) => Err(refused(r.server, &b)),
                other => other,
            })
            .collect();
        if let Some(err) = replies.iter().find_map(|r| r.as_ref().err()) {
            if self.all_or_nothing || replies.iter().all(Result::is_err) {
                return Answer::Failed(err.clone());
            }
        }
        let any_unrouted = self.part_of.contains(&None);
        if replies.is_empty() || ((self.all_or_nothing || self.fenced) && any_unrouted) {
            return Answer::Failed(BackendError::NoServer);
        }
        let Command::Get { keys, more, .. } = &self.request.command else {
            return Answer::Failed(BackendError::NoServer);
        };
        let mut cursors: Vec<_> = replies
            .iter()
            .map(|r| ValueBlocks::new(r.as_deref().unwrap_or_default()).peekable())
            .collect();
        let total: usize = replies
            .iter()
            .map(|r| r.as_ref().map_or(0, Bytes::len))
            .sum();
        let mut out = BytesMut::with_capacity(total + 5);
        for (k, part) in keys.iter().zip(&self.part_of) {
            let Some(part) = *part else {
                continue;
            };
            let cursor = &mut cursors[part];
            if let Some((key, block)) = cursor.peek() {
                if *key == self.request.bytes(k) {
                    out.extend_from_slice(block);
                    cursor.next();
                }
            }
        }
        if !more {
            out.extend_from_slice(b"END\r\n");
        }
        Answer::Bytes(out.freeze())
    }
}

/// A server's error reply to a request the proxy split or broadcast, as a [`BackendError`].
fn refused(server: &str, reply: &[u8]) -> BackendError {
    BackendError::Refused {
        addr: server.to_owned(),
        reply: String::from_utf8_lossy(reply.strip_suffix(b"\r\n").unwrap_or(reply)).into_owned(),
    }
}

/// `stats` answered by the proxy: its own counters, memcached's names where they exist.
fn local_stats(ctx: &Placer<'_>) -> Bytes {
    use std::fmt::Write as _;
    let st = ctx.stats;
    let mut s = String::new();
    let _ = write!(
        s,
        "STAT pid {}\r\nSTAT uptime {}\r\nSTAT time {}\r\nSTAT version {}\r\n\
         STAT curr_connections {}\r\nSTAT total_connections {}\r\nSTAT cmd_total {}\r\n\
         STAT forward_error {}\r\nSTAT servers {}\r\nSTAT servers_live {}\r\nEND\r\n",
        std::process::id(),
        ctx.started.elapsed().as_secs(),
        crate::metrics::unix_time(),
        crate::version::NAME_VERSION,
        st.client_connections.get(),
        st.total_connections.get(),
        st.requests.get(),
        st.forward_error.get(),
        ctx.servers(),
        ctx.live_servers().len(),
    );
    Bytes::from(s)
}
