//! Replicated redis pools (`--replicas POOL=R`): each key on its owner (placed as nutcracker places
//! it) and the ring's next distinct servers.
//!
//! - Writes (every command redis-server flags `write`, and scripts: `writes.rs`) go to every live
//!   replica of their keys in one pipelined round trip; the client gets the first reply that is not a
//!   server failure (the owner's when it answered), and `replica_disagreements` counts a write whose
//!   replies differ (a failed replica, or replicas whose values had diverged: `INCR` answering 5 on
//!   one and 4 on the other).
//! - Reads go to the first live replica and, on a failure (an error of the connection, a timeout,
//!   `-LOADING` from a server still loading its data), to the next: `replica_failovers` counts them.
//! - A multi-key command must have one replica list for all its keys (a hash tag gives them one).
//!   Split commands: `MGET`, `EXISTS`, `TOUCH` read each key on its first live replica; `MSET`,
//!   `DEL`, `UNLINK` write each key on all of them, the owners' replies answering.
//! - What needs one server connection (transactions, `WATCH`, blocking commands, pub/sub) uses the
//!   keys' first live replica alone: a transaction is not replicated.
//! - While a planned change moves a key (a next membership), its write goes to its owner next too
//!   when that is not one of its replicas now, and is acknowledged only when the owner next took it
//!   (`dual_writes.rs`).
//!
//! Replicas are independent servers, not Redis replication: a replica that missed writes (it was
//! down) keeps what it had until the keys are written again.

use std::sync::Arc;

use bytes::Bytes;

use crate::metrics::PoolStats;
use crate::protocol::planned::replicated_not_taken;
use crate::protocol::redis::command::{KeyArgs, Spec};
use crate::protocol::redis::request::Request;
use crate::protocol::redis::settings::Settings;
use crate::protocol::redis::writes::WRITES;
use crate::protocol::replicated::Untried;
use crate::protocol::route::Placer;
use crate::protocol::{Answer, PartReply, Reply};

/// What a replicated command does next: answer, or send these parts and come back with the state
/// (the planner makes the round of them; this file builds no step).
#[derive(Debug)]
pub(crate) enum Next<S> {
    /// The answer.
    Answer(Answer),
    /// A round to send, and the state its replies are taken back with.
    Send(Vec<(usize, Bytes)>, S),
}

/// Whether `spec` changes data, and so goes to every replica.
pub(crate) fn is_write(spec: &Spec) -> bool {
    WRITES.binary_search(&spec.name).is_ok()
}

/// A replicated command's state between its rounds.
#[derive(Debug)]
pub(crate) struct Replicated {
    /// A write: every part is a replica's copy of it.
    write: bool,
    /// A write while a planned change moves its keys off their replica list: the part sent to
    /// their owner next (the last), whose refusal fails the write (`features/dual_writes.rs`).
    next: Option<usize>,
    /// A read: the replicas still to try, in order.
    untried: Untried,
    /// The request, for the next replica.
    frame: Bytes,
    /// The pool's tallies.
    stats: Arc<PoolStats>,
}

/// A one-server command (one key, or keys that share a replica list) in a replicated pool.
pub(crate) fn plan(
    req: &Request,
    spec: &Spec,
    keys: &KeyArgs,
    ctx: &Placer<'_>,
) -> Next<Replicated> {
    let mut lists = keys
        .iter()
        .map(|k| ctx.live_replicas(req.arg(k).unwrap_or_default()));
    let servers = lists.next().unwrap_or_default();
    if lists.any(|l| l != servers) {
        return Next::Answer(Answer::fixed(crate::protocol::redis::command::CROSSSLOT));
    }
    let part = |server| (server, req.frame.clone());
    let write = is_write(spec);
    let mut next = None;
    let (parts, untried) = if write {
        let mut parts: Vec<_> = servers.iter().map(|&s| part(s)).collect();
        // While a planned change is under way, the keys' owner next takes the write too (a dual
        // write), when it is not one of their replicas now.
        if ctx.changing() {
            let names = || keys.iter().map(|k| req.arg(k).unwrap_or_default());
            let now = servers.first().copied();
            match super::dual_writes::next_owner(names(), now, ctx) {
                Some(n) if !servers.contains(&n) => {
                    parts.push(part(n));
                    next = Some(parts.len() - 1);
                }
                Some(_) => {}
                None if names().any(|k| ctx.next_owner(k, now).is_some()) => {
                    return Next::Answer(Answer::fixed(super::dual_writes::APART));
                }
                None => {}
            }
        }
        (parts, Untried::default())
    } else {
        match Untried::start(servers) {
            Some((first, rest)) => (vec![part(first)], rest),
            None => (Vec::new(), Untried::default()),
        }
    };
    if parts.is_empty() {
        return Next::Answer(Answer::Failed(crate::error::BackendError::NoServer));
    }
    Next::Send(
        parts,
        Replicated {
            write,
            next,
            untried,
            frame: req.frame.clone(),
            stats: Arc::clone(ctx.stats),
        },
    )
}

/// Whether a reply is a server's failure rather than its answer: the client is better served by the
/// next replica.
fn failed(reply: &Reply) -> bool {
    match reply {
        Err(_) => true,
        Ok(b) => b.starts_with(b"-LOADING") || b.starts_with(b"-MASTERDOWN"),
    }
}

/// After a round: a write's answer, or a read's answer or its next replica.
pub(crate) fn advance(mut state: Replicated, replies: Vec<PartReply<'_>>) -> Next<Replicated> {
    let done = Next::Answer;
    let answer = |reply: Reply| match reply {
        Ok(b) => Answer::Bytes(b),
        Err(e) => Answer::Failed(e),
    };
    if state.write {
        let (chosen, disagree) = crate::protocol::replicated::chosen(&replies, |r| match r {
            Ok(b) if !failed(r) => Some(&b[..]),
            _ => None,
        });
        if disagree {
            state.stats.replica_disagreements.inc();
        }
        // Not acknowledged when the owner next did not take it (`features/dual_writes.rs`).
        if state.next.is_some() && chosen.is_some() {
            state.stats.dual_writes.inc();
        }
        if let Some(e) =
            replicated_not_taken(&replies, chosen, state.next, &super::dual_writes::ERRORS)
        {
            return done(Answer::Failed(e));
        }
        return match chosen.and_then(|i| replies.into_iter().nth(i)) {
            Some(r) => done(answer(r.reply)),
            None => done(Answer::Failed(crate::error::BackendError::NoServer)),
        };
    }
    let Some(reply) = replies.into_iter().next() else {
        return done(Answer::Failed(crate::error::BackendError::NoServer));
    };
    match state.untried.next(failed(&reply.reply), &state.stats) {
        Some(server) => {
            let part = (server, state.frame.clone());
            Next::Send(vec![part], state)
        }
        None => done(answer(reply.reply)),
    }
}

/// A replicated pool's `MGET` between its rounds: each key read on its first live replica, and the
/// keys of a part whose server failed read again on their next replica.
#[derive(Debug)]
pub(crate) struct ReplicatedValues {
    /// The request's number of keys.
    key_count: usize,
    /// Each key (by its position in the request).
    keys: Vec<Bytes>,
    /// Each key's replicas not tried yet, in order.
    untried: Vec<Vec<usize>>,
    /// Each part in flight: the positions of the keys it holds.
    in_flight: Vec<Vec<usize>>,
    /// The parts answered for good: their positions and reply, or why they failed.
    settled: Vec<(Vec<usize>, Result<Bytes, String>)>,
    /// The reply framer's limits.
    limits: shardring_resp::ReplyLimits,
    /// Whether a key no replica could read fails the whole command.
    partial: crate::protocol::redis::merge::PartialReads,
    /// The pool's tallies.
    stats: Arc<PoolStats>,
}

/// `MGET` in a replicated pool: the keys split by their first live replica.
pub(crate) fn mget(
    settings: &Settings,
    req: &Request,
    keys: &[usize],
    ctx: &Placer<'_>,
) -> Next<ReplicatedValues> {
    let mut state = ReplicatedValues {
        key_count: keys.len(),
        keys: keys
            .iter()
            .map(|&k| Bytes::copy_from_slice(req.arg(k).unwrap_or_default()))
            .collect(),
        untried: keys
            .iter()
            .map(|&k| ctx.live_replicas(req.arg(k).unwrap_or_default()))
            .collect(),
        in_flight: Vec::new(),
        settled: Vec::new(),
        limits: settings.reply_limits,
        partial: settings.partial_reads,
        stats: Arc::clone(ctx.stats),
    };
    let positions: Vec<usize> = (0..keys.len()).collect();
    match next_round(&mut state, positions) {
        Some(parts) => Next::Send(parts, state),
        None => Next::Answer(Answer::Bytes(assemble(&state))),
    }
}

/// The parts that read `positions` on each key's next untried replica (a key without one settles as
/// failed); `None` when there is nothing to send.
fn next_round(state: &mut ReplicatedValues, positions: Vec<usize>) -> Option<Vec<(usize, Bytes)>> {
    let mut by_server: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut stranded = Vec::new();
    for p in positions {
        let next = state
            .untried
            .get_mut(p)
            .filter(|l| !l.is_empty())
            .map(|l| l.remove(0));
        match next {
            Some(s) => match by_server.iter_mut().find(|(server, _)| *server == s) {
                Some((_, held)) => held.push(p),
                None => by_server.push((s, vec![p])),
            },
            None => stranded.push(p),
        }
    }
    if !stranded.is_empty() {
        state
            .settled
            .push((stranded, Err("no server available".into())));
    }
    state.in_flight.clear();
    let parts: Vec<(usize, Bytes)> = by_server
        .into_iter()
        .map(|(server, held)| {
            let mut args: Vec<&[u8]> = vec![b"MGET"];
            args.extend(held.iter().map(|&p| &state.keys[p][..]));
            let frame = Request::from_args(&args).frame;
            state.in_flight.push(held);
            (server, frame)
        })
        .collect();
    (!parts.is_empty()).then_some(parts)
}

/// The values in request order, from every settled part.
fn assemble(state: &ReplicatedValues) -> Bytes {
    let parts: Vec<(&[usize], crate::protocol::redis::merge::Part<'_>)> = state
        .settled
        .iter()
        .map(|(held, r)| {
            let part = match r {
                Ok(b) => crate::protocol::redis::merge::Part::Reply(b),
                Err(why) => crate::protocol::redis::merge::Part::Failed(why),
            };
            (&held[..], part)
        })
        .collect();
    crate::protocol::redis::merge::merge_values(
        state.key_count,
        &parts,
        state.limits,
        state.partial,
    )
}

/// After an `MGET` round: the failed parts' keys read on their next replicas, or the answer.
pub(crate) fn advance_values(
    mut state: ReplicatedValues,
    replies: Vec<PartReply<'_>>,
) -> Next<ReplicatedValues> {
    let in_flight = std::mem::take(&mut state.in_flight);
    let mut again = Vec::new();
    for (held, r) in in_flight.into_iter().zip(replies) {
        if failed(&r.reply) && held.iter().any(|&p| !state.untried[p].is_empty()) {
            again.extend(held);
            continue;
        }
        let settled = match r.reply {
            Ok(b) => Ok(b),
            Err(e) => Err(format!("{}: {e}", r.server)),
        };
        state.settled.push((held, settled));
    }
    if !again.is_empty() {
        state.stats.replica_failovers.inc();
        if let Some(parts) = next_round(&mut state, again) {
            return Next::Send(parts, state);
        }
    }
    Next::Answer(Answer::Bytes(assemble(&state)))
}
