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

use super::super::reply::{last_reply, Resp};
use crate::cluster::ClusterSignal;
use crate::config::{PoolConfig, ReadPolicy, SlotTable};
use crate::error::BackendError;
use crate::protocol::{PartReply, Reply};
use shardring::compat::twemproxy::TwemproxyServer;

/// How many times one request is redirected before its redirection is answered as an error (a
/// cluster in the middle of a reshard redirects once, twice when a map is very stale; a loop
/// between two nodes that disagree must end).
pub(crate) const MAX_HOPS: u8 = 5;

/// The answer for a key whose slot has no master in the proxy's map (none read yet, or the slot
/// unassigned): Redis Cluster's own error, with why.
pub(crate) const SLOT_NOT_SERVED: &[u8] =
    b"-CLUSTERDOWN Hash slot not served (the proxy's slot map has no master for it)\r\n";

/// `ASKING`, sent before a request redirected by `-ASK`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// A cluster pool's masters by address, and its follower's signal.
#[derive(Debug, Clone)]
pub(crate) struct Redirects {
    /// Each server's index in the pool (masters, then replicas), by its address
    /// ([`TwemproxyServer::address`]: `host:port`, `[v6]:port`).
    servers: HashMap<String, usize>,
    /// Each server's `host:port`, by index.
    addrs: Vec<String>,
    /// Told of every redirection followed; a `MOVED` asks it for a new map.
    signal: Arc<ClusterSignal>,
    /// The map, for each master's replicas.
    table: Option<Arc<SlotTable>>,
    /// Where reads go.
    reads: ReadPolicy,
}

impl Redirects {
    /// The redirections of cluster pool `config`; `None` for other pools.
    pub(crate) fn of(
        config: &PoolConfig,
        signal: Option<&Arc<ClusterSignal>>,
    ) -> Option<Redirects> {
        let cluster = config.cluster()?;
        let addrs: Vec<String> = config
            .servers
            .iter()
            .map(TwemproxyServer::address)
            .collect();
        let servers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.clone(), i))
            .collect();
        Some(Redirects {
            table: cluster.slots.clone(),
            reads: cluster.reads,
            servers,
            addrs,
            signal: Arc::clone(signal?),
        })
    }

    /// The address of server `server` (an index in the pool), for messages that name it.
    pub(crate) fn addr(&self, server: usize) -> &str {
        self.addrs.get(server).map_or("", String::as_str)
    }

    /// Whether reads may go elsewhere than the slot's master (`--redis-cluster-reads`): the
    /// connections then say `READONLY` first.
    pub(crate) fn reads_from_replicas(&self) -> bool {
        self.reads != ReadPolicy::Master
    }

    /// Where a read for master `master` goes by the read policy: one of its replicas, or itself;
    /// picked per request.
    pub(crate) fn reader(&self, master: usize) -> usize {
        let Some(table) = &self.table else {
            return master;
        };
        let replicas = table.replicas_of(master).count();
        let choices = match self.reads {
            ReadPolicy::Master => return master,
            ReadPolicy::PreferReplica if replicas == 0 => return master,
            ReadPolicy::PreferReplica => replicas,
            ReadPolicy::Any => replicas + 1,
        };
        let pick = usize::try_from(crate::router::random_u64() % choices as u64).unwrap_or(0);
        table.replicas_of(master).nth(pick).unwrap_or(master)
    }
}

/// One part of a request as sent: its server, frame and framing, and whether it went behind
/// `ASKING` (its reply is then two: `ASKING`'s `+OK`, and the request's).
#[derive(Debug)]
struct Sent {
    server: usize,
    frame: Bytes,
    kind: Resp,
    asked: bool,
    /// A read sent to a replica: its master, where it goes again if the replica fails.
    fallback: Option<usize>,
}

/// A request of a cluster pool on its way: its parts as sent, the replies in so far, and what they
/// come to. A request to one server, the common case, keeps only that.
#[derive(Debug)]
pub(crate) enum Redirecting<F, M> {
    /// A request to one server, whose final reply goes to its finish.
    One(Box<One<F>>),
    /// An exchange's round, whose final replies go to its merge.
    Many(Box<Many<M>>),
}

/// [`Redirecting::One`].
#[derive(Debug)]
pub(crate) struct One<F> {
    sent: Sent,
    finish: F,
    hops: u8,
}

/// [`Redirecting::Many`].
#[derive(Debug)]
pub(crate) struct Many<M> {
    merge: M,
    parts: Vec<Sent>,
    /// Each part's reply once in (its server is its part's: where it went last).
    replies: Vec<Option<Reply>>,
    /// The parts the round in flight carries, in its order.
    waiting: Vec<usize>,
    hops: u8,
}

/// What a round's replies lead to.
#[derive(Debug)]
pub(crate) enum Next<F, M> {
    /// Send these parts (server, frame, framing) again, and read their replies with this.
    Resend(Vec<(usize, Bytes, Resp)>, Redirecting<F, M>),
    /// Every reply is final: a single server's, through its finish.
    Finish(F, Reply),
    /// Every reply is final: the parts', in order, each with its server (an index in the pool:
    /// [`Redirects::addr`] names it), to the merge.
    Merge(M, Vec<(Reply, usize)>),
}

impl Sent {
    fn new(server: usize, frame: Bytes, kind: Resp) -> Sent {
        Sent {
            server,
            frame,
            kind,
            asked: false,
            fallback: None,
        }
    }

    /// The reply as the request's own: `ASKING`'s `+OK` taken off when it went behind one.
    fn own_reply(&mut self, reply: Reply) -> Reply {
        if !std::mem::take(&mut self.asked) {
            return reply;
        }
        reply.map(|run| last_reply(run, 2))
    }

    /// What to send again: behind `ASKING` after an `ASK`.
    fn again(&self) -> (usize, Bytes, Resp) {
        if !self.asked {
            return (self.server, self.frame.clone(), self.kind);
        }
        let mut frame = BytesMut::with_capacity(ASKING.len() + self.frame.len());
        frame.extend_from_slice(ASKING);
        frame.extend_from_slice(&self.frame);
        (self.server, frame.freeze(), Resp::Replies(2))
    }

    /// Points this part where `reply` redirects it, if it is a redirection: `Ok(true)` to send it
    /// again, `Ok(false)` when the reply is final, the error to answer when it cannot be followed.
    fn redirect(
        &mut self,
        redirects: &Redirects,
        reply: &Reply,
        from: &str,
        hops: u8,
    ) -> Result<bool, BackendError> {
        let bytes = match reply {
            Ok(bytes) => bytes,
            Err(e) => {
                // A master that fails may have been failed over: the map is read again soon.
                if e.counts_against_server() {
                    redirects.signal.stale();
                    // A replica that fails a read: its master answers it.
                    if let Some(master) = self.fallback.take() {
                        self.server = master;
                        return Ok(true);
                    }
                }
                return Ok(false);
            }
        };
        // A replica still loading its data: its master answers.
        if bytes.starts_with(b"-LOADING") {
            if let Some(master) = self.fallback.take() {
                self.server = master;
                return Ok(true);
            }
        }
        let Some(redirect) = redirection(bytes) else {
            return Ok(false);
        };
        redirects.signal.redirected();
        if !redirect.ask {
            redirects.signal.stale();
        }
        // An empty host is the node's own (`cluster-announce-ip` unset, hostname unknown).
        let from = match from {
            "" => redirects.addrs.get(self.server).map_or("", String::as_str),
            from => from,
        };
        let host = match redirect.host {
            "" => crate::backend::stream::host_of(from),
            host => host,
        };
        // Spelled as the pool's servers are (an IPv6 host bracketed; Redis sends it bare).
        let addr = TwemproxyServer {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: redirect.port,
            weight: 1,
            name: None,
        }
        .address();
        let Some(&server) = redirects.servers.get(&addr) else {
            redirects.signal.stale();
            return Err(BackendError::Redirected {
                reason: format!(
                    "slot {} moved to {addr}, which the proxy is not connected to yet",
                    redirect.slot
                ),
            });
        };
        if hops >= MAX_HOPS {
            return Err(BackendError::Redirected {
                reason: format!(
                    "slot {} still redirected after {MAX_HOPS} hops (the cluster's nodes disagree)",
                    redirect.slot
                ),
            });
        }
        self.server = server;
        self.asked = redirect.ask;
        self.fallback = None;
        Ok(true)
    }
}

impl<F> One<F> {
    /// A request forwarded to one server, whose final reply goes to `finish`.
    pub(crate) fn new(server: usize, frame: Bytes, kind: Resp, finish: F) -> One<F> {
        One {
            sent: Sent::new(server, frame, kind),
            finish,
            hops: 0,
        }
    }

    /// A read forwarded to `reader` (a replica) for master `master`, which answers it if the
    /// replica fails.
    pub(crate) fn read(
        reader: usize,
        master: usize,
        frame: Bytes,
        kind: Resp,
        finish: F,
    ) -> One<F> {
        let mut one = One::new(reader, frame, kind, finish);
        one.sent.fallback = (reader != master).then_some(master);
        one
    }

    /// The request's own finish (its reply is final).
    pub(crate) fn into_finish(self) -> F {
        self.finish
    }
}

impl<F, M> Redirecting<F, M> {
    /// A round sent as `parts` (server, frame, framing, and the master a read sent to a replica
    /// falls back to), whose final replies go to `merge`.
    pub(crate) fn many(
        merge: M,
        parts: impl ExactSizeIterator<Item = (usize, Bytes, Resp, Option<usize>)>,
    ) -> Redirecting<F, M> {
        let count = parts.len();
        Redirecting::Many(Box::new(Many {
            merge,
            parts: parts
                .map(|(server, frame, kind, fallback)| Sent {
                    fallback,
                    ..Sent::new(server, frame, kind)
                })
                .collect(),
            replies: (0..count).map(|_| None).collect(),
            waiting: (0..count).collect(),
            hops: 0,
        }))
    }

    /// Takes a round's replies: the redirected parts to send again, or every final reply.
    pub(crate) fn advance(self, redirects: &Redirects, replies: Vec<PartReply<'_>>) -> Next<F, M> {
        match self {
            Redirecting::One(one) => One::advance(one, redirects, replies),
            Redirecting::Many(many) => Many::advance(many, redirects, replies),
        }
    }
}

impl<F> One<F> {
    fn advance<M>(
        mut self: Box<One<F>>,
        redirects: &Redirects,
        replies: Vec<PartReply<'_>>,
    ) -> Next<F, M> {
        let Some(r) = replies.into_iter().next() else {
            return Next::Finish(self.finish, Err(BackendError::NoServer));
        };
        let reply = self.sent.own_reply(r.reply);
        match self.sent.redirect(redirects, &reply, r.server, self.hops) {
            Ok(false) => Next::Finish(self.finish, reply),
            Err(e) => Next::Finish(self.finish, Err(e)),
            Ok(true) => {
                self.hops += 1;
                let again = vec![self.sent.again()];
                Next::Resend(again, Redirecting::One(self))
            }
        }
    }
}

impl<M> Many<M> {
    fn advance<F>(
        mut self: Box<Many<M>>,
        redirects: &Redirects,
        replies: Vec<PartReply<'_>>,
    ) -> Next<F, M> {
        let mut again = Vec::new();
        let waiting = std::mem::take(&mut self.waiting);
        for (&pos, r) in waiting.iter().zip(replies) {
            let part = &mut self.parts[pos];
            let mut reply = part.own_reply(r.reply);
            match part.redirect(redirects, &reply, r.server, self.hops) {
                Ok(true) => {
                    again.push(pos);
                    continue;
                }
                Ok(false) => {}
                Err(e) => reply = Err(e),
            }
            self.replies[pos] = Some(reply);
        }
        if !again.is_empty() {
            self.hops += 1;
            let sends = again.iter().map(|&pos| self.parts[pos].again()).collect();
            self.waiting = again;
            return Next::Resend(sends, Redirecting::Many(self));
        }
        let replies = self
            .replies
            .into_iter()
            .zip(&self.parts)
            .map(|(r, part)| (r.unwrap_or(Err(BackendError::NoServer)), part.server))
            .collect();
        Next::Merge(self.merge, replies)
    }
}

/// Whether a reply sends its request on: a redirection to follow, or a failure that may be a
/// failover the map should learn of.
#[inline(always)]
pub(crate) fn sends_on(reply: &Reply) -> bool {
    match reply {
        Ok(bytes) => {
            bytes.first() == Some(&b'-')
                && (bytes.starts_with(b"-MOVED ")
                    || bytes.starts_with(b"-ASK ")
                    || bytes.starts_with(b"-LOADING"))
        }
        Err(e) => e.counts_against_server(),
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

    proptest::proptest! {
        /// Any reply is a redirection or not, never a panic; one that is reads back as written.
        #[test]
        fn any_reply_parses_or_not(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
                                   slot in 0u16..16384, port in 1u16..=65535, ask in proptest::prelude::any::<bool>()) {
            let _ = redirection(&bytes);
            let kind = if ask { "ASK" } else { "MOVED" };
            let text = format!("-{kind} {slot} 10.1.2.3:{port}\r\n");
            let r = redirection(text.as_bytes()).expect("a redirection");
            proptest::prop_assert_eq!((r.ask, r.slot, r.host, r.port), (ask, slot, "10.1.2.3", port));
            proptest::prop_assert!(sends_on(&Ok(bytes::Bytes::from(text))));
        }
    }

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
