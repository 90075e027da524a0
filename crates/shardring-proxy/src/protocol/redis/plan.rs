//! The Redis protocol on the seam: what each request becomes ([`Step`]), how replies become answers, the
//! server connections' handshakes (`AUTH`, then `HELLO 3` for the RESP3 set, then `SELECT`), and the
//! health probe (`PING`).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use shardring_resp::ReplyLimits;

use super::client_state::ClientState;
use super::codec::RequestCodec;
use super::command::{self, KeyArgs, Local, Merge, Route, Routed, Spec, CROSSSLOT};
use super::connection_mode::{self, Mode};
use super::exchange::merge_replies;
use super::features::cluster::{self, One, Redirecting, Redirects};
use super::features::dual_writes;
use super::features::hot_keys::{self, HotInvalidate, HotRead};
use super::features::pubsub;
use super::features::rate_limits;
use super::features::replicas::{self, Next};
use super::features::span;
use super::features::split;
use super::features::transaction::{self, Outcome};
use super::finish::{Finish, RedisMerge};
use super::local::{self, NOAUTH};
use super::merge::{self, Part as MergePart};
use super::reply::{last_reply, Resp};
use super::request::Request;
use super::settings::Settings;
use super::Flavor;
use crate::config::PoolConfig;
use crate::error::BackendError;
use crate::metrics::PoolStats;
use crate::protocol::route::{Placer, Remedies};
use crate::protocol::{
    Answer, Back, Handed, Leave, Part, PartReply, Phase, Placement, PlanContext, Protocol, Reply,
    Round, Step,
};
use crate::split::{SplitRead, SplitRoute};

/// A split's working list (a key's bytes, owner, slot, …): inline up to 16 keys, as most
/// multi-key commands have.
type Inline<T> = smallvec::SmallVec<[T; 16]>;

/// A replicated command's first step: its answer, or its first round with its state as `merge`.
/// Each frame to its server of the current placement, as a part of an exchange's round.
fn parts(sends: Vec<(usize, Bytes)>) -> Vec<Part<Redis>> {
    sends
        .into_iter()
        .map(|(server, frame)| Part {
            placement: Placement::Current,
            server,
            frame,
            kind: Resp::Reply,
        })
        .collect()
}

fn start<S>(next: Next<S>, merge: impl FnOnce(S) -> RedisMerge) -> Step<Redis> {
    match next {
        Next::Answer(a) => Step::Answer(a),
        Next::Send(sends, s) => Step::Exchange(Round::new(parts(sends), merge(s))),
    }
}

/// A replicated command after a round: its answer, or another round.
fn again<S>(next: Next<S>, merge: impl FnOnce(S) -> RedisMerge) -> Phase<Redis> {
    match next {
        Next::Answer(answer) => Phase::Done {
            answer,
            follow_ups: Vec::new(),
        },
        Next::Send(sends, s) => Phase::Again(Round::new(parts(sends), merge(s))),
    }
}

/// A cluster pool's step, its redirections followed (`features/cluster.rs`): what goes to servers
/// keeps its frames, a forward in its finish (a reply that sends it on makes it an exchange then,
/// [`Protocol::sends_on`]), an exchange in its merge. A read, when `reads` (the pool reads from
/// replicas), goes to the reader the read policy picks: a forward, or a split `MGET`'s parts.
///
/// A key without a server while the proxy is `fenced` is the fence's refusal (which names the
/// planned change), not a slot the map lacks.
fn redirecting(step: Step<Redis>, reads: Option<&Redirects>, fenced: bool) -> Step<Redis> {
    match step {
        Step::Forward {
            server: Some(master),
            frame,
            kind,
            finish,
        } => {
            let server = reads.map_or(master, |r| r.reader(master));
            let one = One::read(server, master, frame.clone(), kind, finish);
            Step::Forward {
                server: Some(server),
                frame,
                kind,
                finish: Finish::Cluster(Box::new(one)),
            }
        }
        // No master for the key's slot (no map read yet, or the slot unassigned): Redis Cluster's
        // own word, which cluster clients know to retry.
        Step::Forward { server: None, .. } if fenced => {
            Step::Answer(Answer::Failed(crate::error::BackendError::NoServer))
        }
        Step::Forward { server: None, .. } => Step::Answer(Answer::fixed(cluster::SLOT_NOT_SERVED)),
        Step::Exchange(mut round) => {
            let reads = reads.filter(|_| matches!(round.exchange, RedisMerge::Values { .. }));
            let mut fallbacks = Vec::new();
            if let Some(r) = reads {
                fallbacks = vec![None; round.parts.len()];
                for (part, fallback) in round.parts.iter_mut().zip(&mut fallbacks) {
                    let reader = r.reader(part.server);
                    if reader != part.server {
                        *fallback = Some(part.server);
                        part.server = reader;
                    }
                }
            }
            Step::Exchange(redirecting_round(round, &fallbacks))
        }
        step => step,
    }
}

/// A cluster pool's round, its redirections followed; `fallbacks` the master of each part sent to
/// a replica (none for the rounds after the first, and for writes).
fn redirecting_round(round: Round<Redis>, fallbacks: &[Option<usize>]) -> Round<Redis> {
    let sent = round.parts.iter().enumerate().map(|(i, p)| {
        let fallback = fallbacks.get(i).copied().flatten();
        (p.server, p.frame.clone(), p.kind, fallback)
    });
    let state = Redirecting::many(round.exchange, sent);
    Round {
        parts: round.parts,
        exchange: RedisMerge::Cluster(state),
        follow_ups: round.follow_ups,
    }
}

impl Redis {
    /// A dual write failed: when the next membership is a Redis Cluster, its map may have changed
    /// (a master killed and its replica promoted, a slot moved): its follower reads it again now,
    /// not at its next turn.
    fn next_owner_failed(&self) {
        if let Some(signal) = &self.next_cluster {
            signal.stale();
        }
    }
}

fn answer(reply: Bytes) -> Step<Redis> {
    Step::Answer(Answer::Bytes(reply))
}

/// The Redis protocol, with one pool's settings, hot keys and replica placement.
#[derive(Debug, Clone)]
pub(crate) struct Redis {
    /// The pool's settings (`redis_auth`, `redis_db`, limits, replicas).
    pub(crate) settings: Settings,
    /// What the pool adds to placing keys: hot keys (`--hot-keys`) and replicas.
    pub(crate) remedies: Remedies,
    /// A cluster pool's masters, to follow redirections to (`features/cluster.rs`); `None` for
    /// other pools.
    pub(crate) cluster: Option<Redirects>,
    /// While the next membership is a Redis Cluster: its follower's signal, given when a dual
    /// write fails (`features/dual_writes.rs`).
    pub(crate) next_cluster: Option<Arc<crate::cluster::ClusterSignal>>,
}

impl Protocol for Redis {
    type Decoder = RequestCodec;
    type Request = Request;
    type Finish = Finish;
    type Exchange = RedisMerge;
    type ClientState = ClientState;
    type Mode = Mode<Redis>;

    fn new(
        config: &PoolConfig,
        pool: &crate::protocol::PoolState<'_>,
    ) -> Result<Redis, crate::error::ProxyError> {
        let settings = Settings::from_pool(config);
        let remedies = Remedies::build(config, pool)?;
        let cluster = Redirects::of(config, pool.cluster);
        Ok(Redis {
            settings,
            remedies,
            cluster,
            next_cluster: pool.next_cluster.cloned(),
        })
    }

    fn decoder(&self) -> RequestCodec {
        RequestCodec::new(self.settings.limits)
    }

    fn plan(&self, req: Request, client: &mut ClientState, ctx: &PlanContext<'_>) -> Step<Redis> {
        if let Some(redirects) = &self.cluster {
            // Only a pool that reads from replicas asks whether this is a read.
            let read = redirects.reads_from_replicas()
                && command::index_of_request(&req)
                    .is_some_and(|i| !replicas::is_write(&command::TABLE[i]));
            return redirecting(
                self.plan_request(req, client, ctx),
                read.then_some(redirects),
                ctx.routing.is_masked(),
            );
        }
        self.plan_request(req, client, ctx)
    }

    async fn serve_mode<H: Handed<Redis> + Send>(
        mode: Mode<Redis>,
        client: &mut H,
    ) -> std::io::Result<Back> {
        connection_mode::serve(mode, client).await
    }

    fn lane(client: &ClientState) -> usize {
        match client.flavor {
            Flavor::Resp2 => 0,
            Flavor::Resp3 => 1,
        }
    }

    #[inline(always)]
    fn sends_on(finish: &Finish, reply: &Reply) -> bool {
        matches!(finish, Finish::Cluster(_)) && cluster::sends_on(reply)
    }

    fn go_on(finish: Finish) -> Result<Box<RedisMerge>, Finish> {
        match finish {
            Finish::Cluster(one) => Ok(Box::new(RedisMerge::Cluster(Redirecting::One(one)))),
            finish => Err(finish),
        }
    }

    fn finish(finish: Finish, reply: Reply) -> Answer {
        match (reply, finish) {
            (reply, Finish::Cluster(one)) => Self::finish(one.into_finish(), reply),
            (reply, Finish::Invalidate(boxed)) => {
                let (invalidate, then) = *boxed;
                invalidate.done();
                Self::finish(then, reply)
            }
            (Ok(bytes), Finish::Fill(fill)) => {
                fill.fill(&bytes);
                Answer::Bytes(bytes)
            }
            (Ok(bytes), Finish::Plain | Finish::Values(_)) => Answer::Bytes(bytes),
            (reply, Finish::Filled(stats)) => {
                split::count_fill(&stats, &reply);
                Answer::Nothing
            }
            (Err(e), Finish::Plain | Finish::Exec(_) | Finish::Fill(_)) => Answer::Failed(e),
            (Ok(bytes), Finish::Exec(replies)) => Answer::Bytes(last_reply(bytes, replies)),
            (Err(e), Finish::Values(n)) => {
                let why = e.to_string();
                let held: Vec<usize> = (0..n).collect();
                Answer::Bytes(merge::merge_values(
                    n,
                    &[(&held, MergePart::Failed(&why))],
                    ReplyLimits::default(),
                    merge::PartialReads::Answered,
                ))
            }
        }
    }

    fn advance(&self, merge: RedisMerge, replies: Vec<PartReply<'_>>) -> Phase<Redis> {
        let merge = match merge {
            RedisMerge::Cluster(state) => return self.advance_redirecting(state, replies),
            RedisMerge::Replicated(state) => {
                return again(replicas::advance(*state, replies), |s| {
                    RedisMerge::Replicated(Box::new(s))
                })
            }
            RedisMerge::ReplicatedValues(state) => {
                return again(replicas::advance_values(*state, replies), |s| {
                    RedisMerge::ReplicatedValues(Box::new(s))
                })
            }
            RedisMerge::Span(state) => {
                return again(span::advance(*state, replies), |s| {
                    RedisMerge::Span(Box::new(s))
                })
            }
            RedisMerge::Invalidating(boxed) => {
                let (invalidate, inner) = *boxed;
                invalidate.done();
                return self.advance(inner, replies);
            }
            RedisMerge::DualSplit(boxed, stats) => {
                let (inner, owners) = *boxed;
                let mut replies = replies;
                let next = replies.split_off(owners.min(replies.len()));
                if let Some(failed) = dual_writes::count_split(&stats, &next) {
                    self.next_owner_failed();
                    return Phase::Done {
                        answer: Answer::Failed(failed),
                        follow_ups: Vec::new(),
                    };
                }
                return self.advance(inner, replies);
            }
            RedisMerge::Dual(stats) => {
                let answer = dual_writes::answer(&stats, replies);
                if matches!(answer, Answer::Failed(_)) {
                    self.next_owner_failed();
                }
                return Phase::Done {
                    answer,
                    follow_ups: Vec::new(),
                };
            }
            RedisMerge::SplitWrite(write) => return self.advance_split_write(*write, replies),
            RedisMerge::SplitGet(get) => {
                let stats = get.stats();
                return split_get(get.advance(replies), &stats);
            }
            RedisMerge::SplitClean(cleaning) => {
                let mut replies = replies;
                let copies = replies.split_off(1.min(replies.len()));
                cleaning.done(split::kept(&copies).is_none());
                let answer = match replies.pop().map(|r| r.reply) {
                    Some(Ok(b)) => Answer::Bytes(b),
                    Some(Err(e)) => Answer::Failed(e),
                    None => Answer::Failed(BackendError::NoServer),
                };
                return Phase::Done {
                    answer,
                    follow_ups: Vec::new(),
                };
            }
            merge => merge,
        };
        Phase::Done {
            answer: merge_replies(merge, replies),
            follow_ups: Vec::new(),
        }
    }

    fn encode_failure(error: &BackendError, out: &mut BytesMut) {
        if let BackendError::Fenced { .. } | BackendError::Redirected { .. } = error {
            // Redis Cluster's word for "not now, retry": cluster clients retry on it.
            out.extend_from_slice(b"-TRYAGAIN ");
            out.extend_from_slice(error.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
            return;
        }
        out.extend_from_slice(&merge::failure(&error.to_string()));
    }

    fn command_names() -> &'static [&'static str] {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| command::TABLE.iter().map(|s| s.name).collect())
    }

    fn command_index(request: &Request) -> Option<usize> {
        command::index_of_request(request)
    }

    fn in_order(&self, merge: &RedisMerge) -> bool {
        // The client's next request (a GET of the key it just wrote, say) waits until the copies
        // are deleted.
        matches!(merge, RedisMerge::SplitWrite(_))
    }
}

impl Redis {
    /// A cluster pool's round after its replies: the redirected parts sent again, or the final
    /// replies to the request's finish or merge.
    #[cold]
    fn advance_redirecting(
        &self,
        state: Redirecting<Finish, RedisMerge>,
        replies: Vec<PartReply<'_>>,
    ) -> Phase<Redis> {
        let Some(redirects) = &self.cluster else {
            return Phase::Done {
                answer: Answer::Failed(BackendError::NoServer),
                follow_ups: Vec::new(),
            };
        };
        match state.advance(redirects, replies) {
            cluster::Next::Resend(sends, state) => Phase::Again(Round::new(
                sends
                    .into_iter()
                    .map(|(server, frame, kind)| Part {
                        placement: Placement::Current,
                        server,
                        frame,
                        kind,
                    })
                    .collect(),
                RedisMerge::Cluster(state),
            )),
            cluster::Next::Finish(finish, reply) => Phase::Done {
                answer: Self::finish(finish, reply),
                follow_ups: Vec::new(),
            },
            cluster::Next::Merge(merge, replies) => {
                let parts = replies
                    .into_iter()
                    .map(|(reply, server)| PartReply {
                        reply,
                        server: redirects.addr(server),
                    })
                    .collect();
                match self.advance(merge, parts) {
                    Phase::Again(round) => Phase::Again(redirecting_round(round, &[])),
                    done => done,
                }
            }
        }
    }

    /// What `req` becomes, before a cluster pool's redirections are wrapped around it.
    #[inline(always)]
    fn plan_request(
        &self,
        req: Request,
        client: &mut ClientState,
        ctx: &PlanContext<'_>,
    ) -> Step<Redis> {
        let ctx = &Placer::new(ctx, &self.remedies);
        // Redis's order: unknown command and arity first, then authentication.
        let routed = command::route(&req);
        // What needs a client's state beyond its flavor and name, or a connection of its own, is
        // planned apart: most requests are neither.
        let special = match &routed {
            Ok(r) => matches!(
                r.route,
                Route::Transaction(..)
                    | Route::Block(_)
                    | Route::PubSub(_)
                    | Route::Local(Local::Reset)
            ),
            Err(_) => false,
        };
        if special || client.rare.is_some() {
            if let Some(step) = self.plan_special(&req, &routed, client, ctx) {
                return step;
            }
        }
        let routed = match routed {
            Ok(r) => r,
            Err(reply) => return answer(reply),
        };
        if self.settings.auth.is_some()
            && !client.authenticated
            && !matches!(
                routed.route,
                Route::Local(Local::Auth | Local::Hello | Local::Quit | Local::Reset)
            )
        {
            return Step::Answer(Answer::fixed(NOAUTH));
        }
        if ctx.limited() {
            if let Err(refused) = rate_limits::admit(&req, &routed.route, ctx) {
                return Step::Answer(Answer::Failed(refused));
            }
        }
        match routed.route {
            Route::Local(Local::Quit) => Step::Leave(Leave::Close(local::answer(
                Local::Quit,
                &req,
                client,
                &self.settings,
                ctx,
            ))),
            Route::Local(l) => Step::Answer(local::answer(l, &req, client, &self.settings, ctx)),
            Route::Keys(keys) => {
                let req = if ctx.splits() {
                    match self.keyed_split(req, routed.spec, &keys, ctx) {
                        Ok(step) => return step,
                        Err(req) => req,
                    }
                } else {
                    req
                };
                self.keyed_any(req, routed.spec, &keys, ctx)
            }
            Route::Split { merge, keys, step } => {
                let plan = |ctx: &Placer<'_>| {
                    if let Some(hot) = ctx.hot {
                        return self.hot_split(hot, &req, routed.spec, merge, &keys, step, ctx);
                    }
                    self.split_keys(&req, routed.spec, merge, &keys, step, ctx)
                };
                if ctx.splits() && replicas::is_write(routed.spec) {
                    let names = keys.iter().map(|&k| req.arg(k).unwrap_or_default());
                    let deletes = split_deletes(names, ctx);
                    return with_copy_deletes(plan(ctx), deletes, ctx);
                }
                plan(ctx)
            }
            // `transaction::plan` and `pubsub::plan` took these (a blocking command whose keys
            // found no place lands here: any server refuses it alike).
            Route::Block(_) | Route::Transaction(..) | Route::PubSub(_) => Step::Forward {
                server: ctx.live_servers().first().copied(),
                frame: req.frame,
                kind: Resp::Reply,
                finish: Finish::Plain,
            },
            Route::AnyServer => Step::Forward {
                server: ctx.live_servers().first().copied(),
                frame: req.frame,
                kind: Resp::Reply,
                finish: Finish::Plain,
            },
            Route::Span(s) => start(
                span::plan(s, &req, client.flavor, &self.settings, ctx),
                |state| RedisMerge::Span(Box::new(state)),
            ),
        }
    }

    /// `RESET`, transactions, blocking commands and a subscriber's requests; `None` to plan the request
    /// as usual. Out of line: most requests are none of these.
    #[cold]
    fn plan_special(
        &self,
        req: &Request,
        routed: &Result<Routed, Bytes>,
        client: &mut ClientState,
        ctx: &Placer<'_>,
    ) -> Option<Step<Redis>> {
        if let Ok(Routed {
            route: Route::Local(Local::Reset),
            ..
        }) = routed
        {
            return Some(reset(client));
        }
        let in_transaction = client.rare().is_some_and(|r| r.transaction.is_some());
        // Authentication first, as for every command (inside MULTI, the queue refuses it and
        // discards the transaction, as Redis does).
        let queueing = client
            .rare()
            .and_then(|r| r.transaction.as_ref())
            .is_some_and(transaction::Transaction::queueing);
        if self.settings.auth.is_some()
            && !client.authenticated
            && !queueing
            && routed.as_ref().is_ok_and(|r| {
                matches!(
                    r.route,
                    Route::Transaction(..) | Route::Block(_) | Route::PubSub(_)
                )
            })
        {
            return Some(Step::Answer(Answer::fixed(NOAUTH)));
        }
        if in_transaction || routed.as_ref().is_ok_and(Routed::in_transaction) {
            if let Some(outcome) =
                transaction::plan(&self.settings, ctx.hot, req, routed, client, ctx)
            {
                let step = match outcome {
                    Outcome::Answer(a) => Step::Answer(a),
                    Outcome::Close(a) => Step::Leave(Leave::Close(a)),
                    Outcome::Send {
                        server,
                        frame,
                        kind,
                        finish,
                    } => Step::Forward {
                        server,
                        frame,
                        kind,
                        finish,
                    },
                };
                // Pinned to a server (`WATCH`, a blocking command): served on a connection of its
                // own, in a mode of its own (`connection_mode.rs`).
                if client.pinned().is_some() {
                    return Some(Step::Leave(Leave::Enter(Mode::Pinned(Box::new(step)))));
                }
                return Some(step);
            }
        }
        if pubsub::concerns(routed, client) {
            return pubsub::plan(req, routed, client, ctx).map(|sends| match sends {
                Ok(sends) => Step::Leave(Leave::Enter(Mode::Subscribe {
                    sends,
                    answer: Answer::Nothing,
                })),
                Err(answer) => Step::Answer(answer),
            });
        }
        None
    }

    /// A server connection's first requests: `AUTH` (when `redis_auth`), `HELLO 3` (RESP3 connections),
    /// then `SELECT` (when `redis_db` is not 0) — after `AUTH`, since an unauthenticated `SELECT` fails
    /// (nutcracker sends it first, and so silently writes to db 0).
    pub(super) fn greeting(&self, resp3: bool) -> Vec<(Bytes, Resp)> {
        let mut out = Vec::new();
        match (&self.settings.user, &self.settings.auth) {
            (Some(user), Some(pass)) => out.push((
                Request::from_args(&["AUTH", user.as_str(), pass.as_str()]).frame,
                Resp::Reply,
            )),
            (None, Some(pass)) => {
                out.push((
                    Request::from_args(&["AUTH", pass.as_str()]).frame,
                    Resp::Reply,
                ));
            }
            _ => {}
        }
        if resp3 {
            out.push((Request::from_args(&["HELLO", "3"]).frame, Resp::Reply));
        }
        if self.settings.db != 0 {
            out.push((
                Request::from_args(&["SELECT".to_string(), self.settings.db.to_string()]).frame,
                Resp::Reply,
            ));
        }
        // A cluster pool that reads from replicas: a replica serves reads of its master's slots
        // only to a connection that said READONLY (a master takes it and changes nothing).
        if self
            .cluster
            .as_ref()
            .is_some_and(Redirects::reads_from_replicas)
        {
            out.push((Request::from_args(&["READONLY"]).frame, Resp::Reply));
        }
        out
    }

    /// A command of keys, past the split keys: the hot keys' way, or the plain one.
    #[inline(always)]
    fn keyed_any(
        &self,
        req: Request,
        spec: &Spec,
        keys: &KeyArgs,
        ctx: &Placer<'_>,
    ) -> Step<Redis> {
        if let Some(hot) = ctx.hot {
            return self.hot_keys(hot, req, spec, keys, ctx);
        }
        self.keyed(req, spec, keys, ctx)
    }

    /// A command of keys in a pool with split keys (`features/split.rs`): a write of split keys,
    /// then their copies' deletes; a read of a split key alone (`GET`, `HGETALL`, …) in the `read`
    /// phase from the owner or a copy; `Err(req)` when no key of the command is split.
    #[cold]
    fn keyed_split(
        &self,
        req: Request,
        spec: &Spec,
        keys: &KeyArgs,
        ctx: &Placer<'_>,
    ) -> Result<Step<Redis>, Request> {
        let names: Vec<&[u8]> = keys
            .iter()
            .map(|k| req.arg(k).unwrap_or_default())
            .collect();
        let routes: Vec<(usize, Option<usize>, Box<SplitRoute>)> = names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let owner = ctx.server_for(n);
                ctx.split_route(n, owner).map(|r| (i, owner, r))
            })
            .collect();
        if routes.is_empty() {
            return Err(req);
        }
        if replicas::is_write(spec) {
            let deletes = split::copy_deletes(
                routes
                    .iter()
                    .map(|(i, _, r)| (names[*i], r.copies.as_slice())),
            );
            let deletes = deletes.into_iter().collect::<Vec<_>>();
            return Ok(with_copy_deletes(
                self.keyed_any(req, spec, keys, ctx),
                deletes,
                ctx,
            ));
        }
        // A read of the split key alone, `GET` or another the copies can answer.
        let spread = names.len() == 1 && split::spreads(spec);
        if let ([(0, Some(owner), route)], true) = (routes.as_slice(), spread) {
            match route.read() {
                SplitRead::Copy(copy) => {
                    let key = Bytes::copy_from_slice(names[0]);
                    let get = spec.name == "get";
                    return Ok(split_get_step(
                        split::SplitGet::start(&req, &key, *owner, copy, get, ctx.stats),
                        ctx.stats,
                    ));
                }
                SplitRead::Clean(cleaning) => {
                    let deletes = split::copy_deletes([(names[0], route.copies.as_slice())]);
                    ctx.stats.split_invalidations.add(deletes.len() as u64);
                    let mut sends = vec![(*owner, req.frame.clone())];
                    sends.extend(deletes);
                    return Ok(Step::Exchange(Round::new(
                        parts(sends),
                        RedisMerge::SplitClean(Box::new(cleaning)),
                    )));
                }
                SplitRead::Owner => {}
            }
        }
        Ok(self.keyed_any(req, spec, keys, ctx))
    }

    /// A write of split keys after its own rounds: its next round, or the copies' deletes, or
    /// (after them) the answer.
    fn advance_split_write(
        &self,
        mut write: split::SplitWrite<Finish, RedisMerge>,
        replies: Vec<PartReply<'_>>,
    ) -> Phase<Redis> {
        let (answer, follow_ups) =
            match std::mem::replace(&mut write.stage, split::Writing::Deleting(Answer::Nothing)) {
                split::Writing::Finish(finish) => {
                    let reply = replies
                        .into_iter()
                        .next()
                        .map_or(Err(BackendError::NoServer), |r| r.reply);
                    (Self::finish(finish, reply), Vec::new())
                }
                split::Writing::Merge(merge) => match self.advance(merge, replies) {
                    Phase::Again(round) => {
                        write.stage = split::Writing::Merge(round.exchange);
                        return Phase::Again(Round {
                            parts: round.parts,
                            exchange: RedisMerge::SplitWrite(Box::new(write)),
                            follow_ups: round.follow_ups,
                        });
                    }
                    Phase::Done { answer, follow_ups } => (answer, follow_ups),
                },
                split::Writing::Deleting(answer) => {
                    write.stage = split::Writing::Deleting(answer);
                    return Phase::Done {
                        answer: write.answer(&replies),
                        follow_ups: Vec::new(),
                    };
                }
            };
        let deletes = write.deleting(answer);
        Phase::Again(Round {
            parts: parts(deletes),
            exchange: RedisMerge::SplitWrite(Box::new(write)),
            follow_ups,
        })
    }

    /// A command to the one server of its keys (`-CROSSSLOT` when they are on several). Inlined: the
    /// request is moved in, which out of line is a copy of it per request.
    #[inline(always)]
    fn keyed(&self, req: Request, spec: &Spec, keys: &KeyArgs, ctx: &Placer<'_>) -> Step<Redis> {
        if ctx.replicas() > 1 {
            return start(replicas::plan(&req, spec, keys, ctx), |s| {
                RedisMerge::Replicated(Box::new(s))
            });
        }
        let mut owner = None;
        for k in keys.iter() {
            let server = ctx.server_for(req.arg(k).unwrap_or_default());
            match (owner, server) {
                (_, None) => {
                    owner = None;
                    break;
                }
                (None, s) => owner = s,
                (Some(o), Some(s)) if o != s => return Step::Answer(Answer::fixed(CROSSSLOT)),
                _ => {}
            }
        }
        if ctx.changing() && replicas::is_write(spec) {
            let names = keys.iter().map(|k| req.arg(k).unwrap_or_default());
            if let (Some(now), Some(next)) = (owner, dual_writes::next_owner(names, owner, ctx)) {
                let part = |server| Part {
                    placement: Placement::Current,
                    server,
                    frame: req.frame.clone(),
                    kind: Resp::Reply,
                };
                return Step::Exchange(Round::new(
                    vec![part(now), part(next)],
                    RedisMerge::Dual(Arc::clone(ctx.stats)),
                ));
            }
            // Keys that share a server now but not next (no hash tag) cannot be dual-written as
            // one command: refused while the change is under way, as it would be lost at the
            // cut-over (`features/dual_writes.rs`).
            let mut names = keys.iter().map(|k| req.arg(k).unwrap_or_default());
            if owner.is_some() && names.any(|k| ctx.next_owner(k, owner).is_some()) {
                return Step::Answer(Answer::fixed(dual_writes::APART));
            }
        }
        Step::Forward {
            server: owner,
            frame: req.frame,
            kind: Resp::Reply,
            finish: Finish::Plain,
        }
    }

    /// A split command (`MGET`, `MSET`, `DEL`, …).
    #[inline]
    fn split_keys(
        &self,
        req: &Request,
        spec: &Spec,
        merge: Merge,
        keys: &[usize],
        step: usize,
        ctx: &Placer<'_>,
    ) -> Step<Redis> {
        if let (true, Merge::Values) = (ctx.replicas() > 1, merge) {
            return start(replicas::mget(&self.settings, req, keys, ctx), |s| {
                RedisMerge::ReplicatedValues(Box::new(s))
            });
        }
        // Only a replicated pool, or one with a next membership, asks (a search of the write list).
        let write = (ctx.replicas() > 1 || ctx.changing()) && replicas::is_write(spec);
        self.split(req, merge, keys, step, write, ctx)
    }

    /// [`Redis::keyed`] in a pool with hot-key detection: a `GET` of a top key from the cache, a
    /// write invalidating (`features/hot_keys.rs`).
    #[cold]
    fn hot_keys(
        &self,
        hot: &Arc<crate::hot_keys::HotKeys>,
        req: Request,
        spec: &Spec,
        keys: &KeyArgs,
        ctx: &Placer<'_>,
    ) -> Step<Redis> {
        let names = || keys.iter().map(|k| req.arg(k).unwrap_or_default());
        if spec.name == "get" {
            return match hot_keys::get(hot, req.arg(1).unwrap_or_default()) {
                HotRead::Cached(answer) => Step::Answer(answer),
                HotRead::Fill(fill) => match self.keyed(req, spec, keys, ctx) {
                    Step::Forward {
                        server,
                        frame,
                        kind,
                        finish: Finish::Plain,
                    } => Step::Forward {
                        server,
                        frame,
                        kind,
                        finish: Finish::Fill(Box::new(fill)),
                    },
                    step => step,
                },
                HotRead::Plain => self.keyed(req, spec, keys, ctx),
            };
        }
        if !replicas::is_write(spec) {
            hot_keys::read(hot, names());
            return self.keyed(req, spec, keys, ctx);
        }
        let invalidate = hot_keys::write(hot, names());
        with_invalidation(self.keyed(req, spec, keys, ctx), invalidate)
    }

    /// [`Redis::split_keys`] in a pool with hot-key detection.
    #[cold]
    #[allow(clippy::too_many_arguments)] // the split's own inputs, and the hot keys
    fn hot_split(
        &self,
        hot: &Arc<crate::hot_keys::HotKeys>,
        req: &Request,
        spec: &Spec,
        merge: Merge,
        keys: &[usize],
        step: usize,
        ctx: &Placer<'_>,
    ) -> Step<Redis> {
        let names = || keys.iter().map(|&k| req.arg(k).unwrap_or_default());
        if !replicas::is_write(spec) {
            hot_keys::read(hot, names());
            return self.split_keys(req, spec, merge, keys, step, ctx);
        }
        let invalidate = hot_keys::write(hot, names());
        with_invalidation(
            self.split_keys(req, spec, merge, keys, step, ctx),
            invalidate,
        )
    }

    /// `MGET`, `MSET`, `DEL`, …: as received when every key lives on one server, else one request per
    /// server.
    fn split(
        &self,
        req: &Request,
        merge: Merge,
        keys: &[usize],
        step: usize,
        write: bool,
        ctx: &Placer<'_>,
    ) -> Step<Redis> {
        // The working lists of a split, on the stack up to `SPLIT_INLINE` keys: a command of a
        // few keys costs no allocation for them (6 allocations a 10-key `MSET` before).
        let key_bytes: Inline<&[u8]> = keys
            .iter()
            .map(|&k| req.arg(k).unwrap_or_default())
            .collect();
        let mut owners: Inline<Option<usize>> = smallvec::smallvec![None; keys.len()];
        // A cluster's keys: each slot computed once, for its master and for the split by slot.
        let by_slot = ctx.by_slot();
        let slots: Inline<u16> = if by_slot {
            let slots: Inline<u16> = key_bytes
                .iter()
                .map(|k| shardring_resp::key_slot(k))
                .collect();
            ctx.servers_for_slots(&slots, &mut owners);
            slots
        } else {
            ctx.servers_for(&key_bytes, &mut owners);
            Inline::new()
        };
        let unrouted: Vec<usize> = (0..keys.len()).filter(|&p| owners[p].is_none()).collect();
        if !unrouted.is_empty() && merge != Merge::Values {
            return Step::Answer(Answer::Failed(BackendError::NoServer));
        }
        // Sized up front (a filtered collect grows as it goes).
        let (mut routed_keys, mut positions) = (
            Inline::<usize>::with_capacity(keys.len()),
            Inline::<usize>::with_capacity(keys.len()),
        );
        for (p, &k) in keys.iter().enumerate() {
            if owners[p].is_some() {
                routed_keys.push(k);
                positions.push(p);
            }
        }
        let mut next = positions
            .iter()
            .map(|&p| (owners[p].unwrap_or(0), slots.get(p).copied().unwrap_or(0)));
        let mut subs = merge::split(req, &routed_keys, step, |_| next.next().unwrap_or((0, 0)));
        let follow_ups = if write && ctx.replicas() > 1 {
            replica_writes(req, &routed_keys, &positions, &owners, step, ctx)
        } else {
            Vec::new()
        };
        let next_parts = if write && ctx.changing() {
            next_owner_writes(req, &routed_keys, &positions, &owners, step, ctx)
        } else {
            Vec::new()
        };
        if let (true, [_], true, true) = (
            unrouted.is_empty(),
            subs.as_slice(),
            follow_ups.is_empty(),
            next_parts.is_empty(),
        ) {
            let sub = subs.swap_remove(0);
            return Step::Forward {
                server: Some(sub.server),
                frame: sub.frame,
                kind: Resp::Reply,
                finish: match (merge, self.settings.partial_reads) {
                    (Merge::Values, merge::PartialReads::Answered) => Finish::Values(keys.len()),
                    _ => Finish::Plain,
                },
            };
        }
        ctx.stats.fragments.add(subs.len() as u64);
        // `split` numbered keys among the routed ones; map back to the request's positions (in
        // place: each part's list becomes its `held`).
        // Which keys each part holds matters to a merge of values only.
        let values = merge == Merge::Values;
        let mut held: Vec<merge::KeyList> = Vec::with_capacity(if values { subs.len() } else { 0 });
        let mut parts: Vec<Part<Redis>> = Vec::with_capacity(subs.len() + 1);
        for s in subs {
            if values {
                let mut keys = s.keys;
                for k in &mut keys {
                    *k = positions[*k];
                }
                held.push(keys);
            }
            parts.push(Part {
                placement: Placement::Current,
                server: s.server,
                frame: s.frame,
                kind: Resp::Reply,
            });
        }
        let owners = parts.len();
        let merge = match merge {
            Merge::Values => RedisMerge::Values {
                key_count: keys.len(),
                held,
                unrouted,
                limits: self.settings.reply_limits,
                partial: self.settings.partial_reads,
            },
            Merge::AllOk => RedisMerge::AllOk,
            Merge::Sum => RedisMerge::Sum,
        };
        let merge = if next_parts.is_empty() {
            merge
        } else {
            parts.extend(next_parts);
            RedisMerge::DualSplit(Box::new((merge, owners)), Arc::clone(ctx.stats))
        };
        Step::Exchange(Round {
            parts,
            exchange: merge,
            follow_ups,
        })
    }
}

/// A split write's copies for the keys' other live replicas (the owners' parts answer the
/// client): the keys of each further replica in turn, split by server, sent without waiting.
fn replica_writes(
    req: &Request,
    routed_keys: &[usize],
    positions: &[usize],
    owners: &[Option<usize>],
    step: usize,
    ctx: &Placer<'_>,
) -> Vec<crate::protocol::FollowUp<Redis>> {
    let others: Vec<Vec<usize>> = routed_keys
        .iter()
        .zip(positions)
        .map(|(&k, &p)| {
            let mut list = ctx.live_replicas(req.arg(k).unwrap_or_default());
            list.retain(|&s| Some(s) != owners[p]);
            list
        })
        .collect();
    let mut out = Vec::new();
    for layer in 0..ctx.replicas().saturating_sub(1) {
        let (keys, servers): (Vec<usize>, Vec<usize>) = routed_keys
            .iter()
            .zip(&others)
            .filter_map(|(&k, list)| list.get(layer).map(|&s| (k, s)))
            .unzip();
        // Replicas: pools that are not clusters (whose groups are servers).
        out.extend(parts_to(req, &keys, &servers, step, false).map(|part| (part, Finish::Plain)));
    }
    out
}

/// A split write's copies for the keys whose owner changes (the pool has a next membership): the
/// keys of each next owner, split by server, as parts of the same round (`features/dual_writes.rs`).
fn next_owner_writes(
    req: &Request,
    routed_keys: &[usize],
    positions: &[usize],
    owners: &[Option<usize>],
    step: usize,
    ctx: &Placer<'_>,
) -> Vec<Part<Redis>> {
    let (keys, servers): (Vec<usize>, Vec<usize>) = routed_keys
        .iter()
        .zip(positions)
        .filter_map(|(&k, &p)| {
            ctx.next_owner(req.arg(k).unwrap_or_default(), owners[p])
                .map(|s| (k, s))
        })
        .unzip();
    if keys.is_empty() {
        return Vec::new();
    }
    // Onto a Redis Cluster: one part a slot (a node refuses keys of two with `-CROSSSLOT`).
    parts_to(req, &keys, &servers, step, ctx.next_by_slot()).collect()
}

/// A split write's copies of `keys` (argument indexes), `keys[i]` to `servers[i]`: one part per
/// server (per slot of it when `by_slot`: the servers are a Redis Cluster's), each a command of
/// the keys it takes.
fn parts_to<'a>(
    req: &'a Request,
    keys: &[usize],
    servers: &[usize],
    step: usize,
    by_slot: bool,
) -> impl Iterator<Item = Part<Redis>> + 'a {
    let mut next = servers.iter().copied();
    merge::split(req, keys, step, |key| {
        let slot = if by_slot {
            shardring_resp::key_slot(key)
        } else {
            0
        };
        (next.next().unwrap_or(0), slot)
    })
    .into_iter()
    .map(|sub| Part {
        placement: Placement::Current,
        server: sub.server,
        frame: sub.frame,
        kind: Resp::Reply,
    })
}

/// `RESET`: the connection as new (RESP2, no name, not authenticated), its transaction, watch and
/// subscriptions ended (the session closes their connections), as Redis resets it.
fn reset(client: &mut ClientState) -> Step<Redis> {
    client.flavor = Flavor::Resp2;
    client.authenticated = false;
    let sends = pubsub::reset(client);
    client.rare = None;
    let answer = Answer::fixed(b"+RESET\r\n");
    if sends.is_empty() {
        return Step::Answer(answer);
    }
    Step::Leave(Leave::Enter(Mode::Subscribe { sends, answer }))
}

/// The deletes after a write of `keys` of which some are split: one per copy server.
fn split_deletes<'k>(
    keys: impl Iterator<Item = &'k [u8]>,
    ctx: &Placer<'_>,
) -> Vec<(usize, Bytes)> {
    let routes: Vec<(&[u8], Box<SplitRoute>)> = keys
        .filter_map(|k| ctx.split_route(k, ctx.server_for(k)).map(|r| (k, r)))
        .collect();
    split::copy_deletes(routes.iter().map(|(k, r)| (*k, r.copies.as_slice())))
}

/// `step` (a write), then `deletes` (its split keys' copies), answered once they are; `step` as it
/// is when there is nothing to delete.
fn with_copy_deletes(
    step: Step<Redis>,
    deletes: Vec<(usize, Bytes)>,
    ctx: &Placer<'_>,
) -> Step<Redis> {
    if deletes.is_empty() {
        return step;
    }
    let write =
        |stage| RedisMerge::SplitWrite(Box::new(split::SplitWrite::new(stage, deletes, ctx.stats)));
    match step {
        Step::Forward {
            server: Some(server),
            frame,
            kind,
            finish,
        } => Step::Exchange(Round::new(
            vec![Part {
                placement: Placement::Current,
                server,
                frame,
                kind,
            }],
            write(split::Writing::Finish(finish)),
        )),
        Step::Exchange(round) => Step::Exchange(Round {
            parts: round.parts,
            exchange: write(split::Writing::Merge(round.exchange)),
            follow_ups: round.follow_ups,
        }),
        // No server, or answered here: nothing was written.
        other => other,
    }
}

/// A split key's `GET` at its start.
fn split_get_step(then: split::Then, stats: &Arc<PoolStats>) -> Step<Redis> {
    match split_get(then, stats) {
        Phase::Again(round) => Step::Exchange(round),
        Phase::Done { answer, .. } => Step::Answer(answer),
    }
}

/// A split key's `GET` after a round: its next round, or its answer and the copy's fill.
fn split_get(then: split::Then, stats: &Arc<PoolStats>) -> Phase<Redis> {
    match then {
        split::Then::Send(sends, get) => Phase::Again(Round::new(
            parts(sends),
            RedisMerge::SplitGet(Box::new(get)),
        )),
        split::Then::Answer(answer, fill) => Phase::Done {
            answer,
            follow_ups: fill
                .into_iter()
                .map(|(server, frame)| {
                    (
                        Part {
                            placement: Placement::Current,
                            server,
                            frame,
                            kind: Resp::Reply,
                        },
                        Finish::Filled(Arc::clone(stats)),
                    )
                })
                .collect(),
        },
    }
}

/// `step` with `invalidate` run again when its reply arrives (a write of hot keys).
fn with_invalidation(step: Step<Redis>, invalidate: Option<HotInvalidate>) -> Step<Redis> {
    let Some(invalidate) = invalidate else {
        return step;
    };
    match step {
        Step::Forward {
            server,
            frame,
            kind,
            finish,
        } => Step::Forward {
            server,
            frame,
            kind,
            finish: Finish::Invalidate(Box::new((invalidate, finish))),
        },
        Step::Exchange(mut round) => {
            round.exchange = RedisMerge::Invalidating(Box::new((invalidate, round.exchange)));
            Step::Exchange(round)
        }
        // Answered here (refused, or no server): the invalidation at plan time stands.
        step => step,
    }
}
