//! A cluster pool's redirections, followed inside the proxy: a request that a node answers with
//! `-MOVED slot host:port` is sent again to that master (and the slot-map follower asked for a new
//! map), one answered `-ASK slot host:port` is sent there once behind `ASKING` (the slot is being
//! migrated: its new master has the key, or will take it), and only the final reply reaches the
//! client. A client never sees a redirection (`crate::cluster`).
//!
//! The planner wraps every request of a cluster pool that goes to servers ([`Redirecting`]): the
//! frames sent are kept (cheap `Bytes` handles), the replies that are redirections are sent again
//! (at most [`MAX_HOPS`] times), and the rest go on to what the request would have become anyway:
//! its finish (a single server's reply) or its merge (a split, a span).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::super::exchange::last_reply;
use super::super::finish::{Finish, RedisMerge};
use super::super::reply::Resp;
use crate::cluster::ClusterSignal;
use crate::config::PoolConfig;
use crate::error::BackendError;
use crate::protocol::{PartReply, Reply};

/// How many times one request is redirected before its redirection is answered as an error (a
/// cluster in the middle of a reshard redirects once, twice when a map is very stale; a loop
/// between two nodes that disagree must end).
pub(crate) const MAX_HOPS: u8 = 5;

/// `ASKING`, sent before a request redirected by `-ASK`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// A cluster pool's masters by address, and its follower's signal.
#[derive(Debug, Clone)]
pub(crate) struct Redirects {
    /// Each master's index in the pool, by `host:port`.
    masters: HashMap<String, usize>,
    /// Told of every redirection followed; a `MOVED` asks it for a new map.
    signal: Arc<ClusterSignal>,
}

impl Redirects {
    /// The redirections of cluster pool `config`; `None` for other pools.
    pub(crate) fn of(
        config: &PoolConfig,
        signal: Option<&Arc<ClusterSignal>>,
    ) -> Option<Redirects> {
        config.cluster()?;
        let masters = config
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{}:{}", s.host, s.port), i))
            .collect();
        Some(Redirects {
            masters,
            signal: signal.map_or_else(Arc::default, Arc::clone),
        })
    }
}

/// What a redirected request's replies come to.
#[derive(Debug)]
pub(crate) enum Inner {
    /// A request to one server: its finish.
    Finish(Finish),
    /// An exchange's round: its merge.
    Merge(RedisMerge),
}

/// One part of a request as sent: its server, frame and framing, and whether it went behind
/// `ASKING` (its reply is then two: `ASKING`'s `+OK`, and the request's).
#[derive(Debug)]
struct Sent {
    server: usize,
    frame: Bytes,
    kind: Resp,
    asked: bool,
}

/// A request of a cluster pool on its way: its parts as sent, the replies in so far, and what they
/// come to.
#[derive(Debug)]
pub(crate) struct Redirecting {
    inner: Inner,
    parts: Vec<Sent>,
    /// Each part's reply once in, with its server's address.
    replies: Vec<Option<(Reply, String)>>,
    /// The parts the round in flight carries, in its order.
    waiting: Vec<usize>,
    hops: u8,
}

/// What a round's replies lead to.
#[derive(Debug)]
pub(crate) enum Next {
    /// Send these parts (server, frame, framing) again, and read their replies with this.
    Resend(Vec<(usize, Bytes, Resp)>, Redirecting),
    /// Every reply is final: a single server's, through its finish.
    Finish(Finish, Reply),
    /// Every reply is final: the parts', in order, to the merge.
    Merge(RedisMerge, Vec<(Reply, String)>),
}

impl Redirecting {
    /// A request sent as `parts` (server, frame, framing), whose final replies go to `inner`.
    pub(crate) fn new(inner: Inner, parts: Vec<(usize, Bytes, Resp)>) -> Redirecting {
        let count = parts.len();
        Redirecting {
            inner,
            parts: parts
                .into_iter()
                .map(|(server, frame, kind)| Sent {
                    server,
                    frame,
                    kind,
                    asked: false,
                })
                .collect(),
            replies: (0..count).map(|_| None).collect(),
            waiting: (0..count).collect(),
            hops: 0,
        }
    }

    /// Takes a round's replies: the redirected parts to send again, or every final reply.
    pub(crate) fn advance(mut self, redirects: &Redirects, replies: Vec<PartReply<'_>>) -> Next {
        let mut again = Vec::new();
        let waiting = std::mem::take(&mut self.waiting);
        for (&pos, r) in waiting.iter().zip(replies) {
            let part = &mut self.parts[pos];
            let mut reply = r.reply;
            if part.asked {
                part.asked = false;
                reply = reply.map(|run| last_reply(run, 2));
            }
            // A master that fails may have been failed over: the map is read again soon.
            if reply
                .as_ref()
                .is_err_and(BackendError::counts_against_server)
            {
                redirects.signal.stale();
            }
            if let Ok(bytes) = &reply {
                if let Some(redirect) = redirection(bytes) {
                    match self.follow(redirects, pos, &redirect, r.server) {
                        Ok(()) => {
                            again.push(pos);
                            continue;
                        }
                        Err(e) => reply = Err(e),
                    }
                }
            }
            self.replies[pos] = Some((reply, r.server.to_owned()));
        }
        if !again.is_empty() {
            self.hops += 1;
            let sends = again
                .iter()
                .map(|&pos| {
                    let p = &self.parts[pos];
                    if p.asked {
                        let mut frame = BytesMut::with_capacity(ASKING.len() + p.frame.len());
                        frame.extend_from_slice(ASKING);
                        frame.extend_from_slice(&p.frame);
                        (p.server, frame.freeze(), Resp::Replies(2))
                    } else {
                        (p.server, p.frame.clone(), p.kind)
                    }
                })
                .collect();
            self.waiting = again;
            return Next::Resend(sends, self);
        }
        let replies: Vec<(Reply, String)> = self
            .replies
            .into_iter()
            .map(|r| r.unwrap_or((Err(BackendError::NoServer), String::new())))
            .collect();
        match self.inner {
            Inner::Finish(finish) => {
                let reply = replies
                    .into_iter()
                    .next()
                    .map_or(Err(BackendError::NoServer), |(r, _)| r);
                Next::Finish(finish, reply)
            }
            Inner::Merge(merge) => Next::Merge(merge, replies),
        }
    }

    /// Points part `pos` where `redirect` says, from the server at `from`; the error to answer when
    /// it cannot be followed.
    fn follow(
        &mut self,
        redirects: &Redirects,
        pos: usize,
        redirect: &Redirect<'_>,
        from: &str,
    ) -> Result<(), BackendError> {
        redirects.signal.redirected();
        if !redirect.ask {
            redirects.signal.stale();
        }
        // An empty host is the node's own (`cluster-announce-ip` unset, hostname unknown).
        let addr = match redirect.host {
            "" => format!(
                "{}:{}",
                crate::backend::stream::host_of(from),
                redirect.port
            ),
            host => format!("{host}:{}", redirect.port),
        };
        let Some(&server) = redirects.masters.get(&addr) else {
            redirects.signal.stale();
            return Err(BackendError::Redirected {
                reason: format!(
                    "slot {} moved to {addr}, which the proxy is not connected to yet",
                    redirect.slot
                ),
            });
        };
        if self.hops >= MAX_HOPS {
            return Err(BackendError::Redirected {
                reason: format!(
                    "slot {} still redirected after {MAX_HOPS} hops (the cluster's nodes disagree)",
                    redirect.slot
                ),
            });
        }
        let part = &mut self.parts[pos];
        part.server = server;
        part.asked = redirect.ask;
        Ok(())
    }
}

/// A redirection reply, parsed.
#[derive(Debug, PartialEq, Eq)]
struct Redirect<'a> {
    /// `ASK` (once) rather than `MOVED` (for good).
    ask: bool,
    slot: u16,
    host: &'a str,
    port: u16,
}

/// The redirection `reply` is, if it is one: `-MOVED <slot> <host>:<port>` or `-ASK …`.
fn redirection(reply: &[u8]) -> Option<Redirect<'_>> {
    let (ask, rest) = if let Some(rest) = reply.strip_prefix(b"-MOVED ") {
        (false, rest)
    } else {
        (true, reply.strip_prefix(b"-ASK ")?)
    };
    let line = std::str::from_utf8(rest.strip_suffix(b"\r\n")?).ok()?;
    let (slot, addr) = line.split_once(' ')?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(Redirect {
        ask,
        slot: slot.parse().ok()?,
        host,
        port: port.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_are_parsed_and_nothing_else_is_one() {
        assert_eq!(
            redirection(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(Redirect {
                ask: false,
                slot: 3999,
                host: "127.0.0.1",
                port: 6381
            })
        );
        assert_eq!(
            redirection(b"-ASK 1 ::1:7000\r\n"),
            Some(Redirect {
                ask: true,
                slot: 1,
                host: "::1",
                port: 7000
            })
        );
        assert_eq!(redirection(b"-MOVED 5 :7000\r\n").map(|r| r.host), Some(""));
        for not in [
            &b"-ERR MOVED 1 a:1\r\n"[..],
            b"+MOVED 1 a:1\r\n",
            b"-MOVED x a:1\r\n",
            b"-MOVED 1 a\r\n",
            b"-MOVED 1 a:1",
            b"$5\r\nMOVED\r\n",
        ] {
            assert_eq!(redirection(not), None, "{not:?}");
        }
    }
}
