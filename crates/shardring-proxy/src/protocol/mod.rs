//! The protocol seam: what a wire protocol gives the proxy, and the protocols themselves.
//!
//! The client session (`session.rs`), the accept loop (`server.rs`) and the server
//! connections (`backend/`) are generic over [`Protocol`] and know nothing of any wire format. A
//! protocol decodes client requests (within its limits), plans each one ([`Step`]: answer here, send to one
//! server, or fan out to several and merge), frames server replies ([`ReplyScanner`]), encodes the proxy's
//! own errors, and says what its health probe sends and accepts. Adding a protocol is new files under
//! `protocol/` plus the one line in `pools.rs`'s `build_pool` where a pool picks its protocol.
//!
//! The request path reads in one direction: socket → [`RequestDecoder::decode`] → [`Protocol::plan`]
//! (router, placement) → backend connection ([`ReplyScanner::frame`]) → [`Protocol::finish`] or
//! [`Protocol::merge`] → session → socket.
//!
//! Everything here is pure: no I/O, no tasks. Incomplete input is a normal state (`Ok(None)`).

pub mod memcache;
pub mod redis;

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};

use crate::config::PoolConfig;
use crate::error::BackendError;
use crate::metrics::PoolStats;
use crate::router::Routing;

/// A server's reply (the bytes of one framed reply), or why there is none.
pub type Reply = Result<Bytes, BackendError>;

/// A wire protocol, as the proxy's generic parts see it.
///
/// One value per pool version (built from its config by [`Protocol::new`]); requests are planned against
/// it, so settings such as limits or auth live in it.
pub trait Protocol: Sized + Send + Sync + fmt::Debug + 'static {
    /// The per-connection request decoder.
    type Decoder: RequestDecoder<Request = Self::Request>;
    /// A decoded client request.
    type Request: Send;
    /// How a server's reply to one forwarded request is framed (chosen by the plan, per request).
    type ReplyKind: Copy + Send + Sync + fmt::Debug + 'static;
    /// The per-server-connection reply framer; it may keep state across reads of one reply.
    type ReplyScanner: ReplyScanner<Kind = Self::ReplyKind>;
    /// How a single server's reply becomes the client's answer (for example, hidden for `noreply`).
    /// Not `Copy`: a finish may carry what a reply must update (e.g. a cache to fill).
    type Finish: Send + Unpin + 'static;
    /// What a fan-out needs to merge its parts' replies into one answer.
    type Merge: Send + 'static;
    /// What the protocol remembers about one client connection between its requests (Redis: the RESP
    /// version `HELLO` chose, whether it authenticated, its name); `()` when nothing.
    type Session: Default + Send + 'static;

    /// The protocol's settings for a pool.
    fn new(config: &PoolConfig) -> Self;

    /// A decoder for a new client connection.
    fn decoder(&self) -> Self::Decoder;

    /// Decides what to do with one request of a client connection whose state is `session`.
    fn plan(
        &self,
        request: Self::Request,
        session: &mut Self::Session,
        ctx: &PlanContext<'_>,
    ) -> Step<Self>;

    /// Which set of server connections serves a client in this state: each server has one set of
    /// connections per entry of [`Protocol::handshakes`] (Redis: RESP2 ones, and RESP3 ones for clients
    /// that said `HELLO 3`, so replies keep the shape the client asked for). When it changes, the
    /// session waits for the client's answers in flight before sending more, so no request overtakes an
    /// earlier one on another connection. By default, 0.
    fn lane(_session: &Self::Session) -> usize {
        0
    }

    /// The client's answer from the single server a [`Step::Forward`] went to.
    fn finish(finish: Self::Finish, reply: Reply) -> Answer;

    /// The client's answer from a [`Step::FanOut`]'s replies, in the order of its parts.
    fn merge(merge: Self::Merge, replies: Vec<PartReply<'_>>) -> Answer;

    /// Writes the client's answer for a request its server failed (`SERVER_ERROR …`, `-ERR …`).
    fn encode_failure(error: &BackendError, out: &mut BytesMut);

    /// What the health probe sends on a fresh server connection.
    fn probe_request(&self) -> &'static [u8];

    /// Whether `reply`, the bytes read so far after a probe, is a healthy answer (`Some(true)`), a
    /// failed one (`Some(false)`), or needs more bytes (`None`).
    fn probe_answered(reply: &[u8]) -> Option<bool>;

    /// Requests sent on every new server connection before any client request (authentication, database
    /// selection), each with the framing of its reply; an error reply fails the connection. By default,
    /// none.
    fn handshake(&self) -> Vec<(Bytes, Self::ReplyKind)> {
        Vec::new()
    }

    /// The handshake of each set of server connections ([`Protocol::lane`]); the first set is the one
    /// `preconnect` opens. By default, one set with [`Protocol::handshake`].
    fn handshakes(&self) -> Vec<Vec<(Bytes, Self::ReplyKind)>> {
        vec![self.handshake()]
    }

    /// Requests sent on every new server connection before the clients' requests, whose replies tell
    /// the protocol about the server: each goes to [`Protocol::introduced`]. Unlike the handshake's,
    /// any reply is accepted, an error included, and a server that closes the connection on them or
    /// does not answer is served as before, without them (see [`ServerFacts`]). By default, none.
    fn introductions(&self) -> Vec<(Bytes, Self::ReplyKind)> {
        Vec::new()
    }

    /// Reads a server's reply to one of [`Protocol::introductions`] into what is known of it.
    fn introduced(reply: &[u8], facts: &ServerFacts) {
        let _ = (reply, facts);
    }

    /// Gives the protocol what is known of each server of the pool (the pool's servers, then its
    /// gutter's, as indexed by plans), as it is learned. By default, ignored.
    fn attach_facts(&mut self, facts: Vec<std::sync::Arc<ServerFacts>>) {
        let _ = facts;
    }

    /// The commands whose latency the pool tallies (the `command` label of
    /// `shardring_proxy_command_latency_seconds`). By default, none.
    fn command_names() -> &'static [&'static str] {
        &[]
    }

    /// Which of [`Protocol::command_names`] `request` is; `None` when it is not tallied. By default, none.
    fn command_index(_request: &Self::Request) -> Option<usize> {
        None
    }

    /// Whether a framed reply is an error reply (a failed handshake step, a refused fan-out part).
    fn is_error_reply(reply: &[u8]) -> bool;

    /// Whether a [`Step::Failover`] tries its next server after `reply`. By default, on a failure of the
    /// server (error, timeout, closed connection) only.
    fn retry(&self, finish: &Self::Finish, reply: &Reply) -> bool {
        let _ = finish;
        reply.is_err()
    }

    /// A [`Step::FanOut`]'s next move after its replies: the answer, or another round trip (a
    /// multi-get's warm-up fallbacks). By default, [`Protocol::merge`]'s answer.
    fn phase(&self, merge: Self::Merge, replies: Vec<PartReply<'_>>) -> Phase<Self> {
        Phase::Done {
            answer: Self::merge(merge, replies),
            follow_ups: Vec::new(),
        }
    }

    /// Whether the client's later requests wait until this [`Step::FanOut`] is answered before they
    /// are sent: an exchange of several rounds on one key whose later rounds a later request of the
    /// same key must not overtake (a warm-up's copy, then the command). By default, never.
    fn in_order(&self, merge: &Self::Merge) -> bool {
        let _ = merge;
        false
    }

    /// Whether a [`Step::Fallback`] asks the previous ring after `reply`. By default, never.
    fn fall_back(&self, finish: &Self::Finish, reply: &Reply) -> bool {
        let _ = (finish, reply);
        false
    }

    /// A [`Step::Fallback`]'s answer from the current server's reply and the previous ring's, and an
    /// optional follow-up to the current server. By default, the current server's reply, no follow-up.
    fn recover(&self, finish: Self::Finish, current: Reply, previous: Reply) -> Recovery<Self> {
        let _ = previous;
        Recovery {
            answer: Self::finish(finish, current),
            follow_up: None,
        }
    }
}

/// What a server said about itself in reply to the protocol's [`Protocol::introductions`], kept with the
/// server (a reload that keeps the server keeps them) and updated each time a connection to it opens.
#[derive(Debug, Default)]
pub struct ServerFacts {
    /// The largest value it stores (memcached's `item_size_max`); 0 until it has said.
    max_value_len: AtomicUsize,
    /// It closed a connection on the introductions, or did not answer them: its connections skip
    /// them from then on (what it would have said stays unknown).
    refuses_introductions: AtomicBool,
}

/// Bumped whenever any server's facts change, so that readers of many servers' facts (a connection's
/// request decoder) recompute only then, not on every request.
static FACTS_CHANGED: AtomicU64 = AtomicU64::new(0);

impl ServerFacts {
    /// The largest value the server said it stores, if it has said.
    pub fn max_value_len(&self) -> Option<usize> {
        // Relaxed: a lone number, read after the change counter that says it is new.
        Some(self.max_value_len.load(Ordering::Relaxed)).filter(|&n| n > 0)
    }

    /// Whether the server's connections skip the introductions.
    pub fn refuses_introductions(&self) -> bool {
        self.refuses_introductions.load(Ordering::Relaxed)
    }

    /// Marks the server as one whose connections skip the introductions.
    pub fn set_refuses_introductions(&self) {
        self.refuses_introductions.store(true, Ordering::Relaxed);
    }

    /// Records the largest value the server stores.
    pub fn set_max_value_len(&self, len: usize) {
        if self.max_value_len.swap(len, Ordering::Relaxed) != len {
            // Release, paired with the Acquire in `facts_changed`: a reader that sees the new count
            // sees the new value.
            FACTS_CHANGED.fetch_add(1, Ordering::Release);
        }
    }
}

/// How many times servers' facts have changed since start: recompute what depends on them when it
/// differs from the count last seen.
pub fn facts_changed() -> u64 {
    FACTS_CHANGED.load(Ordering::Acquire)
}

/// What [`Protocol::phase`] decides after a fan-out's replies.
#[derive(Debug)]
pub enum Phase<P: Protocol> {
    /// The answer, and requests to send without waiting (each reply goes to its finish, then is
    /// dropped).
    Done {
        /// The client's answer.
        answer: Answer,
        /// Fire-and-forget requests (copies).
        follow_ups: Vec<(Part<P>, P::Finish)>,
    },
    /// Another round trip: send `parts`, then call [`Protocol::phase`] with `merge` and their replies.
    Again {
        /// The next round's requests.
        parts: Vec<Part<P>>,
        /// What the next round merges.
        merge: P::Merge,
        /// Fire-and-forget requests sent now.
        follow_ups: Vec<(Part<P>, P::Finish)>,
    },
}

/// What [`Protocol::recover`] decides.
#[derive(Debug)]
pub struct Recovery<P: Protocol> {
    /// The client's answer.
    pub answer: Answer,
    /// A request to send to the key's current server (bytes, reply framing, and the finish its reply
    /// goes through before it is dropped).
    pub follow_up: Option<(Bytes, P::ReplyKind, P::Finish)>,
}

/// Reads client requests off the front of a connection's buffer.
pub trait RequestDecoder: Send + Sync + 'static {
    /// What it decodes.
    type Request;

    /// Takes the next request (or refusal) off the front of `buf`; `Ok(None)` when more bytes are needed.
    /// Not called with an empty `buf`, which always needs more bytes (a decoder keeps no answer for it).
    ///
    /// # Errors
    /// Only for failures of the stream itself; malformed input is an [`Incoming::Refused`].
    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Incoming<Self::Request>>>;

    /// Stop reading from the client while this many bytes wait in its buffer: a whole request of the
    /// largest allowed size fits.
    fn max_buffer(&self) -> usize;
}

/// One item out of a [`RequestDecoder`].
#[derive(Debug)]
pub enum Incoming<R> {
    /// A request to plan.
    Request(R),
    /// A refused request: send `reply`, and close the connection after it when `close` (the input cannot
    /// be resynchronised).
    Refused {
        /// The error reply; empty when the client asked for none (memcached's `noreply`).
        reply: Bytes,
        /// Why, for the log.
        reason: String,
        /// Close after the reply.
        close: bool,
    },
}

/// What the session does with one request.
#[derive(Debug)]
pub enum Step<P: Protocol> {
    /// Answer here, in order, without a server.
    Answer(Answer),
    /// Answer (in order), then close the connection.
    Close(Answer),
    /// Send `frame` to one server and answer with [`Protocol::finish`] of its reply.
    Forward {
        /// The server's index in the pool; `None` when no server is live for the key.
        server: Option<usize>,
        /// The bytes to send.
        frame: Bytes,
        /// How the reply is framed.
        kind: P::ReplyKind,
        /// How the reply becomes the answer.
        finish: P::Finish,
    },
    /// Send `frame` to `servers[0]`; while [`Protocol::retry`] says so of a reply and servers remain, send
    /// it to the next; answer with [`Protocol::finish`] of the last reply. For replicated reads: the
    /// first send happens at once (pipelined), a retry when the failed reply comes back. An empty list
    /// answers [`BackendError::NoServer`].
    Failover {
        /// The servers to try, in order (indices in the pool).
        servers: Vec<usize>,
        /// The bytes to send to each.
        frame: Bytes,
        /// How each reply is framed.
        kind: P::ReplyKind,
        /// How the last reply becomes the answer.
        finish: P::Finish,
    },
    /// Warm-up after a ring change: send `frame` to `server` (its owner now); when
    /// [`Protocol::fall_back`] says so of the reply, send `fallback` to `previous` (its owner on the
    /// previous ring, an index among *that* ring's servers) and answer with [`Protocol::recover`] of
    /// both replies, which may also ask for a follow-up request to `server` (a copy), sent at once and
    /// whose reply goes to [`Protocol::finish`] and is then dropped. When the previous ring is gone by
    /// the time the step starts, it is a plain [`Step::Forward`] of `frame`.
    Fallback {
        /// The key's server now.
        server: usize,
        /// The bytes to send to it.
        frame: Bytes,
        /// The key's server on the previous ring (index in the previous ring's server list).
        previous: usize,
        /// The bytes to send there after a miss.
        fallback: Bytes,
        /// How both replies are framed.
        kind: P::ReplyKind,
        /// How the replies become the answer.
        finish: P::Finish,
    },
    /// Send `frame` to `previous` (a server of the previous ring; its reply is dropped), then do `step`:
    /// a write during a warm-up window also invalidates the key's old copy.
    AlsoPrevious {
        /// The key's server on the previous ring.
        previous: usize,
        /// What to send it (a delete).
        frame: Bytes,
        /// How its reply is framed.
        kind: P::ReplyKind,
        /// The request itself.
        step: Box<Step<P>>,
    },
    /// Send each part to its server (of the current placement, or of the previous one while a
    /// warm-up window keeps it) and answer with [`Protocol::phase`] of all the replies, which may
    /// send another round ([`Protocol::merge`]'s answer by default).
    FanOut {
        /// The parts, each to one server.
        parts: Vec<Part<P>>,
        /// What the merge needs.
        merge: P::Merge,
    },
}

/// One server's share of a fan-out.
#[derive(Debug)]
pub struct Part<P: Protocol> {
    /// The server's index in `placement`.
    pub server: usize,
    /// Which version of the pool `server` indexes: a warm-up reads and cleans up a moved key on its
    /// previous server, which may have left the pool.
    pub placement: Placement,
    /// The bytes to send.
    pub frame: Bytes,
    /// How the reply is framed.
    pub kind: P::ReplyKind,
}

/// Which version of the pool a [`Part`]'s server index points into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The pool as the plan saw it.
    Current,
    /// The pool before the last ring change, while a warm-up window is open (the version
    /// [`PlanContext::moved_from`] indexes). A part sent there once that version is gone gets
    /// [`BackendError::Removed`] as its reply.
    Previous,
}

/// A fan-out part's reply, with the server it came from (for error messages).
#[derive(Debug)]
pub struct PartReply<'a> {
    /// The reply.
    pub reply: Reply,
    /// The server's address.
    pub server: &'a str,
}

/// A reply for the client, once known.
#[derive(Debug)]
pub enum Answer {
    /// These bytes.
    Bytes(Bytes),
    /// Nothing (`noreply`, quiet commands).
    Nothing,
    /// A server failed: the protocol's [`Protocol::encode_failure`] of this.
    Failed(BackendError),
}

impl Answer {
    /// A fixed reply.
    pub fn fixed(bytes: &'static [u8]) -> Answer {
        Answer::Bytes(Bytes::from_static(bytes))
    }
}

/// Frames server replies on one server connection.
pub trait ReplyScanner: Default + Send + Sync + 'static {
    /// The framing a request asks for.
    type Kind: Copy;

    /// The length of the first complete reply of `kind` at the front of `buf`, or `Ok(None)` when more
    /// bytes are needed. State kept between calls (to resume a long reply) belongs to the reply at the
    /// front; [`ReplyScanner::reset`] is called after each complete reply and when the connection is
    /// replaced.
    ///
    /// # Errors
    /// When the bytes are not a reply of that kind: the connection is out of step and is closed.
    fn frame(
        &mut self,
        buf: &[u8],
        kind: Self::Kind,
        max_value_len: usize,
    ) -> Result<Option<usize>, FrameError>;

    /// Forgets the state of a reply.
    fn reset(&mut self);
}

/// A server reply that cannot be framed: the server connection is out of step and must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed server response: {reason}")]
pub struct FrameError {
    /// What was wrong.
    pub reason: &'static str,
}

/// What [`Protocol::plan`] may look at: the pool's placement and tallies.
#[derive(Debug)]
pub struct PlanContext<'a> {
    /// Key → server over the live servers.
    pub(crate) routing: &'a Routing,
    /// The pool's tallies (`stats` answers, fragment counts), shared: merges and finishes that count after
    /// the plan keep a handle.
    pub stats: &'a std::sync::Arc<PoolStats>,
    /// The pool's config.
    pub config: &'a PoolConfig,
    /// How many servers the pool has, live or not.
    pub servers: usize,
    /// When the pool started, for uptime.
    pub started: std::time::Instant,
    /// The pool's hot-key detection and cache, when on: the protocol counts the keys it plans and
    /// serves reads of the top keys from the cache.
    pub(crate) hot: Option<&'a std::sync::Arc<crate::hotkeys::HotKeys>>,
    /// The placement over every server of the pool, ejected or not, when keys have replicas: where a
    /// key's replica list comes from.
    pub(crate) full: Option<&'a Routing>,
    /// The gutter pool, when the pool has one: a dead server's keys go there (with `full`).
    pub(crate) gutter: Option<&'a crate::router::Gutter>,
    /// The previous ring while a warm-up window is open: key → server among the previous ring's servers.
    pub(crate) previous: Option<&'a Routing>,
    /// For each server of the previous ring, its index now (`None` when it left the pool).
    pub(crate) previous_now: &'a [Option<usize>],
}

impl PlanContext<'_> {
    /// The server (index in the pool) that owns `key`; `None` when no server is live. With a gutter, a
    /// key whose server is ejected goes to its gutter server rather than to the next live server.
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        if let (Some(gutter), Some(full)) = (self.gutter, self.full) {
            match full.server_for(key) {
                Some(owner) if self.routing.is_live(owner) => return Some(owner),
                _ => {
                    if let Some(g) = gutter.server_for(key) {
                        self.stats.gutter_requests.inc();
                        return Some(g);
                    }
                }
            }
        }
        self.routing.server_for(key)
    }

    /// The gutter's TTL cap when `server` is a gutter server: what a write sent there must cap its
    /// TTL to.
    pub fn gutter_ttl_cap(&self, server: usize) -> Option<u32> {
        self.gutter.filter(|g| g.holds(server)).map(|g| g.ttl_cap)
    }

    /// The owners of many keys at once (`out[i]` for `keys[i]`): one batch through the placement,
    /// which overlaps the keys' cache misses (key by key when a gutter may take some of them).
    pub fn servers_for(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        if self.gutter.is_some() {
            for (key, o) in keys.iter().zip(out.iter_mut()) {
                *o = self.server_for(key);
            }
        } else {
            self.routing.servers_for(keys, out);
        }
    }

    /// The servers in the placement now (not ejected), for requests sent to every server.
    pub fn live_servers(&self) -> &[usize] {
        self.routing.servers()
    }

    /// The first live server of `key`'s replica list: [`PlanContext::server_for`] without replicas.
    pub fn first_replica(&self, key: &[u8]) -> Option<usize> {
        if self.full.is_some() && self.config.remedies().replicas > 1 {
            let mut out = Vec::with_capacity(self.config.remedies().replicas);
            self.replicas_for(key, &mut out);
            out.first().copied()
        } else {
            self.server_for(key)
        }
    }

    /// While a warm-up window is open and `key` moved: its server on the previous ring (an index among
    /// that ring's servers, for [`Step::Fallback`] and [`Step::AlsoPrevious`]). `None` otherwise.
    pub fn moved_from(&self, key: &[u8]) -> Option<usize> {
        let old = self.previous?.server_for(key)?;
        let now = self.server_for(key);
        match self.previous_now.get(old).copied().flatten() {
            Some(same) if Some(same) == now => None,
            _ => Some(old),
        }
    }

    /// How many servers hold each key (1 when the pool has no replicas).
    pub fn replicas(&self) -> usize {
        self.config.remedies().replicas
    }

    /// Fills `out` with the live servers of `key`'s replica list, owner first (the owner placed as
    /// nutcracker places it over all the pool's servers, then the ring's next distinct servers, dead
    /// ones left out). When all of them are dead, or the pool has no replicas, the one server
    /// [`PlanContext::server_for`] gives, if any.
    pub fn replicas_for(&self, key: &[u8], out: &mut Vec<usize>) {
        out.clear();
        if let (Some(full), true) = (self.full, self.config.remedies().replicas > 1) {
            full.replicas_into(key, self.config.remedies().replicas, out);
            out.retain(|&s| self.routing.is_live(s));
        }
        if out.is_empty() {
            out.extend(self.server_for(key));
        }
    }
}
