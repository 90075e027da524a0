//! The Redis protocol on the seam: what each request becomes ([`Step`]), how replies become answers, the
//! server connections' handshakes (`AUTH`, then `HELLO 3` for the RESP3 set, then `SELECT`), and the
//! health probe (`PING`).

use bytes::{Bytes, BytesMut};

use super::client_state::ClientState;
use super::command::{self, Local, Merge, Route, CROSSSLOT};
use super::local::{self, NOAUTH};
use super::merge::{self, Part as MergePart};
use super::reply::{ReplyFramer, ReplyLimits};
use super::request::{Decoded, Limits, Request, RequestCodec};
use super::settings::Redis;
use super::Flavor;
use crate::config::{PoolConfig, RedisConfig};
use crate::error::BackendError;
use crate::protocol::{
    Answer, FrameError, Incoming, Part, PartReply, Phase, Placement, PlanContext, Protocol, Reply,
    ReplyScanner, RequestDecoder, Round, Step,
};

/// Redis replies frame themselves: one kind for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resp;

/// How a single server's reply becomes the client's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// As it is; a failure becomes `-ERR <reason>`.
    Plain,
    /// An `MGET` of this many keys, all on one server: a failure becomes an error element per key, as
    /// when the keys are split.
    Values(usize),
}

/// What a fan-out merges.
#[derive(Debug)]
pub(crate) enum RedisMerge {
    /// A split `MGET`.
    Values {
        /// The request's number of keys.
        key_count: usize,
        /// For each part, the positions of the keys it holds.
        held: Vec<Vec<usize>>,
        /// Keys no live server holds: an error element each.
        unrouted: Vec<usize>,
        /// The reply framer's limits.
        limits: ReplyLimits,
    },
    /// A split `MSET`.
    AllOk,
    /// A split `DEL`/`UNLINK`/`TOUCH`/`EXISTS`, or `DBSIZE` on every server.
    Sum,
}

/// The reply framer of one server connection; resumes a long reply where the last read left off.
#[derive(Debug, Default)]
pub(crate) struct RespScanner(ReplyFramer);

impl ReplyScanner for RespScanner {
    type Kind = Resp;

    fn frame(
        &mut self,
        buf: &[u8],
        _kind: Resp,
        _max_value_len: usize,
    ) -> Result<Option<usize>, FrameError> {
        self.0
            .frame(buf)
            .map(|f| f.map(|f| f.len))
            .map_err(|e| FrameError { reason: e.reason })
    }

    fn reset(&mut self) {
        self.0.reset();
    }
}

fn answer(reply: Bytes) -> Step<Redis> {
    Step::Answer(Answer::Bytes(reply))
}

impl Protocol for Redis {
    type Decoder = RequestCodec;
    type Request = Request;
    type ReplyKind = Resp;
    type ReplyScanner = RespScanner;
    type Finish = Finish;
    type Exchange = RedisMerge;
    type ClientState = ClientState;

    fn new(
        config: &PoolConfig,
        _pool: &crate::protocol::PoolState<'_>,
    ) -> Result<Redis, crate::error::ProxyError> {
        // Only a redis pool is served by this protocol (`pool/mod.rs` picks it by the pool's
        // protocol); the defaults stand in rather than a panic.
        let defaults = RedisConfig::default();
        let settings = config.redis().unwrap_or(&defaults);
        Ok(Redis {
            auth: settings.auth.clone(),
            db: settings.db,
            limits: Limits {
                max_bulk_len: settings.limits.max_bulk_len,
                max_request_len: settings.limits.max_request_len,
                ..Limits::default()
            },
            reply_limits: ReplyLimits::default(),
        })
    }

    fn decoder(&self) -> RequestCodec {
        RequestCodec::new(self.limits)
    }

    fn plan(&self, req: Request, client: &mut ClientState, ctx: &PlanContext<'_>) -> Step<Redis> {
        // Redis's order: unknown command and arity first, then authentication.
        let routed = match command::route(&req) {
            Ok(r) => r,
            Err(reply) => return answer(reply),
        };
        if self.auth.is_some()
            && !client.authenticated
            && !matches!(
                routed.route,
                Route::Local(Local::Auth | Local::Hello | Local::Quit | Local::Reset)
            )
        {
            return Step::Answer(Answer::fixed(NOAUTH));
        }
        match routed.route {
            Route::Local(l) => local::answer(l, &req, client, self, ctx),
            Route::Keys(keys) => {
                let mut owner = None;
                for k in keys.iter() {
                    let server = ctx.server_for(req.arg(k).unwrap_or_default());
                    match (owner, server) {
                        (_, None) => {
                            owner = None;
                            break;
                        }
                        (None, s) => owner = s,
                        (Some(o), Some(s)) if o != s => {
                            return Step::Answer(Answer::fixed(CROSSSLOT))
                        }
                        _ => {}
                    }
                }
                Step::Forward {
                    server: owner,
                    frame: req.frame,
                    kind: Resp,
                    finish: Finish::Plain,
                }
            }
            Route::Split { merge, keys, step } => self.split(&req, merge, &keys, step, ctx),
            Route::Broadcast(merge) => {
                let parts: Vec<Part<Redis>> = ctx
                    .live_servers()
                    .iter()
                    .map(|&server| Part {
                        placement: Placement::Current,
                        server,
                        frame: req.frame.clone(),
                        kind: Resp,
                    })
                    .collect();
                if parts.is_empty() {
                    return Step::Answer(Answer::Failed(BackendError::NoServer));
                }
                let merge = match merge {
                    Merge::Sum => RedisMerge::Sum,
                    Merge::AllOk => RedisMerge::AllOk,
                    Merge::Values => RedisMerge::Sum,
                };
                Step::Exchange(Round::new(parts, merge))
            }
            Route::AnyServer => Step::Forward {
                server: ctx.live_servers().first().copied(),
                frame: req.frame,
                kind: Resp,
                finish: Finish::Plain,
            },
        }
    }

    fn lane(client: &ClientState) -> usize {
        match client.flavor {
            Flavor::Resp2 => 0,
            Flavor::Resp3 => 1,
        }
    }

    fn finish(finish: Finish, reply: Reply) -> Answer {
        match (reply, finish) {
            (Ok(bytes), _) => Answer::Bytes(bytes),
            (Err(e), Finish::Plain) => Answer::Failed(e),
            (Err(e), Finish::Values(n)) => {
                let why = e.to_string();
                let held: Vec<usize> = (0..n).collect();
                Answer::Bytes(merge::merge_values(
                    n,
                    &[(&held, MergePart::Failed(&why))],
                    ReplyLimits::default(),
                ))
            }
        }
    }

    fn advance(&self, merge: RedisMerge, replies: Vec<PartReply<'_>>) -> Phase<Redis> {
        Phase::Done {
            answer: merge_replies(merge, replies),
            follow_ups: Vec::new(),
        }
    }

    fn encode_failure(error: &BackendError, out: &mut BytesMut) {
        out.extend_from_slice(&merge::failure(&error.to_string()));
    }

    fn probe_request(&self) -> &'static [u8] {
        b"PING\r\n"
    }

    fn probe_answered(reply: &[u8]) -> Option<bool> {
        if reply.ends_with(b"\r\n") || reply.len() >= 128 {
            // `-NOAUTH` (a pool with `redis_auth`: the probe does not authenticate) is a live server too.
            Some(reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH"))
        } else {
            None
        }
    }

    fn handshake(&self) -> Vec<(Bytes, Resp)> {
        self.greeting(false)
    }

    fn handshakes(&self) -> Vec<Vec<(Bytes, Resp)>> {
        vec![self.greeting(false), self.greeting(true)]
    }

    fn is_error_reply(reply: &[u8]) -> bool {
        matches!(reply.first(), Some(b'-' | b'!'))
    }

    fn command_names() -> &'static [&'static str] {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| command::TABLE.iter().map(|s| s.name).collect())
    }

    fn command_index(request: &Request) -> Option<usize> {
        command::index_of_request(request)
    }
}

impl Redis {
    /// A server connection's first requests: `AUTH` (when `redis_auth`), `HELLO 3` (RESP3 connections),
    /// then `SELECT` (when `redis_db` is not 0) — after `AUTH`, since an unauthenticated `SELECT` fails
    /// (nutcracker sends it first, and so silently writes to db 0).
    fn greeting(&self, resp3: bool) -> Vec<(Bytes, Resp)> {
        let mut out = Vec::new();
        if let Some(pass) = &self.auth {
            out.push((Request::from_args(&["AUTH", pass.as_str()]).frame, Resp));
        }
        if resp3 {
            out.push((Request::from_args(&["HELLO", "3"]).frame, Resp));
        }
        if self.db != 0 {
            out.push((
                Request::from_args(&["SELECT".to_string(), self.db.to_string()]).frame,
                Resp,
            ));
        }
        out
    }

    /// `MGET`, `MSET`, `DEL`, …: as received when every key lives on one server, else one request per
    /// server.
    fn split(
        &self,
        req: &Request,
        merge: Merge,
        keys: &[usize],
        step: usize,
        ctx: &PlanContext<'_>,
    ) -> Step<Redis> {
        let key_bytes: Vec<&[u8]> = keys
            .iter()
            .map(|&k| req.arg(k).unwrap_or_default())
            .collect();
        let mut owners = vec![None; keys.len()];
        ctx.servers_for(&key_bytes, &mut owners);
        let unrouted: Vec<usize> = (0..keys.len()).filter(|&p| owners[p].is_none()).collect();
        if !unrouted.is_empty() && merge != Merge::Values {
            return Step::Answer(Answer::Failed(BackendError::NoServer));
        }
        let routed_keys: Vec<usize> = (0..keys.len())
            .filter(|&p| owners[p].is_some())
            .map(|p| keys[p])
            .collect();
        let positions: Vec<usize> = (0..keys.len()).filter(|&p| owners[p].is_some()).collect();
        let mut next = positions.iter().map(|&p| owners[p].unwrap_or(0));
        let mut subs = merge::split(req, &routed_keys, step, |_| next.next().unwrap_or(0));
        if let (true, [_]) = (unrouted.is_empty(), subs.as_slice()) {
            let sub = subs.swap_remove(0);
            return Step::Forward {
                server: Some(sub.server),
                frame: sub.frame,
                kind: Resp,
                finish: match merge {
                    Merge::Values => Finish::Values(keys.len()),
                    _ => Finish::Plain,
                },
            };
        }
        ctx.stats.fragments.add(subs.len() as u64);
        // `split` numbered keys among the routed ones; map back to the request's positions.
        let held: Vec<Vec<usize>> = subs
            .iter()
            .map(|s| s.keys.iter().map(|&i| positions[i]).collect())
            .collect();
        let parts = subs
            .into_iter()
            .map(|s| Part {
                placement: Placement::Current,
                server: s.server,
                frame: s.frame,
                kind: Resp,
            })
            .collect();
        let merge = match merge {
            Merge::Values => RedisMerge::Values {
                key_count: keys.len(),
                held,
                unrouted,
                limits: self.reply_limits,
            },
            Merge::AllOk => RedisMerge::AllOk,
            Merge::Sum => RedisMerge::Sum,
        };
        Step::Exchange(Round::new(parts, merge))
    }
}

/// A fan-out's answer from its parts' replies, in the order of its parts.
fn merge_replies(merge: RedisMerge, replies: Vec<PartReply<'_>>) -> Answer {
    let reasons: Vec<String> = replies
        .iter()
        .map(|r| {
            r.reply
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .collect();
    let parts: Vec<MergePart<'_>> = replies
        .iter()
        .zip(&reasons)
        .map(|(r, why)| match &r.reply {
            Ok(b) => MergePart::Reply(b),
            Err(_) => MergePart::Failed(why),
        })
        .collect();
    Answer::Bytes(match merge {
        RedisMerge::AllOk => merge::merge_all_ok(&parts),
        RedisMerge::Sum => merge::merge_sum(&parts),
        RedisMerge::Values {
            key_count,
            held,
            unrouted,
            limits,
        } => {
            let mut with: Vec<(&[usize], MergePart<'_>)> =
                held.iter().map(Vec::as_slice).zip(parts).collect();
            if !unrouted.is_empty() {
                with.push((&unrouted, MergePart::Failed("no server available")));
            }
            merge::merge_values(key_count, &with, limits)
        }
    })
}

impl RequestDecoder for RequestCodec {
    type Request = Request;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Incoming<Request>>> {
        Ok(
            tokio_util::codec::Decoder::decode(self, buf)?.map(|d| match d {
                Decoded::Request(r) => Incoming::Request(r),
                Decoded::Refused(err) => Incoming::Refused {
                    reply: err.kind.reply(),
                    reason: err.kind.to_string(),
                    close: err.close,
                },
            }),
        )
    }

    fn max_buffer(&self) -> usize {
        self.limits().max_request_len
    }
}
