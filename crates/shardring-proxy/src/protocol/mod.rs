//! The protocol seam: what a wire protocol gives the proxy, and the protocols themselves.
//!
//! The client session (`session.rs`), the accept loop (`server.rs`) and the server
//! connections (`backend/`) are generic over `Protocol` and know nothing of any wire format. A
//! protocol decodes client requests (within its limits), plans each one (`Step`: answer here, send to one
//! server, or an exchange of one or more rounds with several), frames server replies (`ReplyScanner`),
//! encodes the proxy's own errors, and says what its health probe sends and accepts. What a protocol does
//! beyond placing keys (memcached's replicas, gutter, warm-up, hot keys) is written inside it, as
//! exchanges: the seam does not know of it. Adding a protocol is new files under `protocol/` plus the one
//! line in `pool/mod.rs`'s `build_pool` where a pool picks its protocol.
//!
//! The request path reads in one direction: socket → `RequestDecoder::decode` → `Protocol::plan`
//! (router, placement) → backend connection (`ReplyScanner::frame`) → `Protocol::finish` or
//! `Protocol::advance` → session → socket. A forward's reply that sends its request on
//! (`Protocol::sends_on`: a cluster's redirection) continues as an exchange.
//!
//! The seam is crate-private (no one outside can implement it); public are the two protocols' codecs
//! and reply framers, by name, in [`memcache`] and [`redis`], for the fuzz targets, the benches and
//! tools that speak the protocols.
//!
//! Everything here is pure: no I/O, no tasks. Incomplete input is a normal state (`Ok(None)`).

mod dialect;
mod handoff;
pub mod memcache;
pub(crate) mod planned;
pub mod redis;
pub(crate) mod replicated;
pub(crate) mod route;

pub(crate) use self::dialect::Dialect;
pub(crate) use self::handoff::{Back, Event, Handed};

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::config::PoolConfig;
use crate::error::{BackendError, ProxyError};
use crate::hot_keys::HotKeys;
use crate::metrics::PoolStats;
use crate::router::Routing;

/// A server's reply (the bytes of one framed reply), or why there is none.
pub(crate) type Reply = Result<Bytes, BackendError>;

/// A wire protocol, as the proxy's generic parts see it.
///
/// One value per pool version (built from its config by [`Protocol::new`]); requests are planned against
/// it, so settings such as limits or auth live in it.
pub(crate) trait Protocol: Dialect + Sized + Send + Sync + fmt::Debug + 'static {
    /// The per-connection request decoder.
    type Decoder: RequestDecoder<Request = Self::Request>;
    /// A decoded client request.
    type Request: Send;
    /// How a single server's reply becomes the client's answer (for example, hidden for `noreply`).
    /// Not `Copy`: a finish may carry what a reply must update (e.g. a cache to fill).
    type Finish: Send + Unpin + fmt::Debug + 'static;
    /// What an [`Step::Exchange`] keeps between its rounds and reads its replies with (a fan-out's
    /// merge, a warm-up's stage).
    type Exchange: Send + fmt::Debug + 'static;
    /// A connection mode a client enters ([`Leave::Enter`]), as the request that enters it was
    /// planned: what [`Protocol::serve_mode`] starts from. Memcached has none.
    type Mode: Send + fmt::Debug + 'static;
    /// What the protocol remembers about one client connection between its requests (Redis: the RESP
    /// version `HELLO` chose, whether it authenticated, its name); `()` when nothing.
    type ClientState: Default + Send + 'static;

    /// The protocol's value for one version of a pool: its settings, and the state of what it does
    /// beyond placing keys (memcached's replica lists, gutter and hot keys), built from `config` and
    /// what the pool keeps across its versions (`pool`).
    ///
    /// # Errors
    /// [`ProxyError::Placement`] when a placement of its own (a gutter's) cannot be built.
    fn new(config: &PoolConfig, pool: &PoolState<'_>) -> Result<Self, ProxyError>;

    /// A decoder for a new client connection.
    fn decoder(&self) -> Self::Decoder;

    /// Decides what to do with one request of a client connection whose state is `client`.
    fn plan(
        &self,
        request: Self::Request,
        client: &mut Self::ClientState,
        ctx: &PlanContext<'_>,
    ) -> Step<Self>;

    /// Which set of server connections serves a client in this state: each server has one set of
    /// connections per entry of [`Dialect::handshakes`] (Redis: RESP2 ones, and RESP3 ones for clients
    /// that said `HELLO 3`, so replies keep the shape the client asked for). When it changes, the
    /// session waits for the client's answers in flight before sending more, so no request overtakes an
    /// earlier one on another connection. By default, 0.
    fn lane(_client: &Self::ClientState) -> usize {
        0
    }

    /// Serves a client the session handed over for a connection mode of this protocol
    /// ([`Leave::Enter`]: Redis's subscribers, a client inside `WATCH` or blocked in `BLPOP`), through
    /// what the session lends it ([`Handed`]), until the mode ends ([`Back::Session`]) or the client
    /// is to be closed ([`Back::Close`]). The session writes every answer in flight before, so the
    /// mode's task starts with the client's request order kept.
    ///
    /// # Errors
    /// Writing to, or reading from, the client failed.
    fn serve_mode<H: Handed<Self> + Send>(
        mode: Self::Mode,
        client: &mut H,
    ) -> impl std::future::Future<Output = io::Result<Back>> + Send;

    /// The client's answer from the single server a [`Step::Forward`] went to.
    fn finish(finish: Self::Finish, reply: Reply) -> Answer;

    /// Whether a [`Step::Forward`]'s reply sends the request on rather than answering it (a Redis
    /// Cluster's redirection): the forward then becomes the exchange [`Protocol::go_on`] gives,
    /// whose first round's reply this is, read by [`Protocol::advance`] of the pool as it is then.
    /// So a request whose reply might send it on still goes the forward's way, without an
    /// exchange's cost, until one does. A check by reference: the common answer moves nothing. By
    /// default, never.
    #[inline(always)]
    fn sends_on(finish: &Self::Finish, reply: &Reply) -> bool {
        let _ = (finish, reply);
        false
    }

    /// The exchange a forward whose reply [`Protocol::sends_on`] becomes, or its finish back when
    /// it has none (the reply then answers). Called only then. By default, the finish back.
    fn go_on(finish: Self::Finish) -> Result<Box<Self::Exchange>, Self::Finish> {
        Err(finish)
    }

    /// Writes the client's answer for a request its server failed (`SERVER_ERROR …`, `-ERR …`).
    fn encode_failure(error: &BackendError, out: &mut BytesMut);

    /// The commands whose latency the pool tallies (the `command` label of
    /// `shardring_proxy_command_latency_seconds`). By default, none.
    fn command_names() -> &'static [&'static str] {
        &[]
    }

    /// Which of [`Protocol::command_names`] `request` is; `None` when it is not tallied. By default, none.
    fn command_index(_request: &Self::Request) -> Option<usize> {
        None
    }

    /// An [`Step::Exchange`]'s next move after the replies of its round: the answer, or another
    /// round (a warm-up's copy, a replicated read's next replica).
    fn advance(&self, exchange: Self::Exchange, replies: Vec<PartReply<'_>>) -> Phase<Self>;

    /// Whether the client's later requests wait until this [`Step::Exchange`] is answered before they
    /// are sent: an exchange of several rounds on one key whose later rounds a later request of the
    /// same key must not overtake (a warm-up's copy, then the command). By default, never.
    fn in_order(&self, exchange: &Self::Exchange) -> bool {
        let _ = exchange;
        false
    }
}

/// What a pool keeps across its versions that a protocol's value may use.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolState<'a> {
    /// The pool's hot-key detection and cache, when on.
    pub(crate) hot: Option<&'a Arc<HotKeys>>,
    /// A cluster pool's signal to its slot-map follower (`crate::cluster`); `None` for other pools.
    pub(crate) cluster: Option<&'a Arc<crate::cluster::ClusterSignal>>,
    /// The same signal while the pool's next membership is a cluster: a dual write its master did
    /// not take (killed, failed over, resharded) has the follower read that map again at once.
    pub(crate) next_cluster: Option<&'a Arc<crate::cluster::ClusterSignal>>,
}

/// What a server said about itself in reply to the protocol's [`Dialect::introductions`], kept with the
/// server (a reload that keeps the server keeps them) and updated each time a connection to it opens.
#[derive(Debug, Default)]
pub(crate) struct ServerFacts {
    /// The largest value it stores (memcached's `item_size_max`); 0 until it has said.
    max_value_len: AtomicUsize,
    /// It closed a connection on the introductions, or answered them out of step: its connections
    /// skip them from then on (what it would have said stays unknown).
    refuses_introductions: AtomicBool,
    /// It did not answer them in time: its connections skip them until then, and the next one after
    /// asks again. Not for good: a server paused (or busy) while a connection opened answers later
    /// ones, and what it says (its item size) would otherwise stay unknown for the proxy's life.
    introductions_unanswered_until: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long the connections of a server that left the introductions unanswered go without them.
pub(crate) const INTRODUCTIONS_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Bumped whenever any server's facts change, so that readers of many servers' facts (a connection's
/// request decoder) recompute only then, not on every request.
static FACTS_CHANGED: AtomicU64 = AtomicU64::new(0);

impl ServerFacts {
    /// The largest value the server said it stores, if it has said.
    pub(crate) fn max_value_len(&self) -> Option<usize> {
        // Relaxed: a lone number, read after the change counter that says it is new.
        Some(self.max_value_len.load(Ordering::Relaxed)).filter(|&n| n > 0)
    }

    /// Whether a connection opening at `now` skips the introductions.
    pub(crate) fn skips_introductions(&self, now: std::time::Instant) -> bool {
        self.refuses_introductions.load(Ordering::Relaxed)
            || self
                .introductions_unanswered_until
                .lock()
                .is_ok_and(|until| until.is_some_and(|t| now < t))
    }

    /// Marks the server as one whose connections skip the introductions for good (it closed the
    /// connection on them, or answered out of step).
    pub(crate) fn set_refuses_introductions(&self) {
        self.refuses_introductions.store(true, Ordering::Relaxed);
    }

    /// The server left the introductions unanswered at `now`: its connections skip them for
    /// [`INTRODUCTIONS_RETRY`], then ask again.
    pub(crate) fn set_introductions_unanswered(&self, now: std::time::Instant) {
        if let Ok(mut until) = self.introductions_unanswered_until.lock() {
            *until = Some(now + INTRODUCTIONS_RETRY);
        }
    }

    /// Records the largest value the server stores.
    pub(crate) fn set_max_value_len(&self, len: usize) {
        if self.max_value_len.swap(len, Ordering::Relaxed) != len {
            // Release, paired with the Acquire in `facts_changed`: a reader that sees the new count
            // sees the new value.
            FACTS_CHANGED.fetch_add(1, Ordering::Release);
        }
    }
}

/// How many times servers' facts have changed since start: recompute what depends on them when it
/// differs from the count last seen.
pub(crate) fn facts_changed() -> u64 {
    FACTS_CHANGED.load(Ordering::Acquire)
}

/// What [`Protocol::advance`] decides after a round's replies.
#[derive(Debug)]
pub(crate) enum Phase<P: Protocol> {
    /// The answer, and requests to send without waiting (each reply goes to its finish, then is
    /// dropped).
    Done {
        /// The client's answer.
        answer: Answer,
        /// Fire-and-forget requests (copies).
        follow_ups: Vec<FollowUp<P>>,
    },
    /// Another round.
    Again(Round<P>),
}

/// A request sent without waiting for it: its reply goes to its finish, then is dropped.
pub(crate) type FollowUp<P> = (Part<P>, <P as Protocol>::Finish);

/// One round of an [`Step::Exchange`]: requests to send at once, and what reads their replies.
#[derive(Debug)]
pub(crate) struct Round<P: Protocol> {
    /// The requests whose replies [`Protocol::advance`] reads, in this order.
    pub parts: Vec<Part<P>>,
    /// What reads them.
    pub exchange: P::Exchange,
    /// Requests sent before the parts, whose replies are not waited for (the invalidation of a key's
    /// old copy).
    pub follow_ups: Vec<FollowUp<P>>,
}

impl<P: Protocol> Round<P> {
    /// A round of `parts` read by `exchange`, with nothing sent beside them.
    pub(crate) fn new(parts: Vec<Part<P>>, exchange: P::Exchange) -> Round<P> {
        Round {
            parts,
            exchange,
            follow_ups: Vec::new(),
        }
    }
}

/// Reads client requests off the front of a connection's buffer.
pub(crate) trait RequestDecoder: Send + Sync + 'static {
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
pub(crate) enum Incoming<R> {
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
pub(crate) enum Step<P: Protocol> {
    /// Answer here, in order, without a server.
    Answer(Answer),
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
    /// An exchange with servers of one or more rounds: send the round's parts (each to a server of
    /// the current placement, or of the previous one while a warm-up window keeps it), then
    /// [`Protocol::advance`] with their replies answers or sends the next round. A fan-out and its
    /// merge, a replicated read that tries the next replica, a warm-up's copy are all exchanges.
    Exchange(Round<P>),
    /// The session stops serving the client itself, once the answers before are written: it closes
    /// the connection, or hands the client to the protocol for a connection mode.
    Leave(Leave<P>),
}

/// How the session stops serving a client itself ([`Step::Leave`]).
#[derive(Debug)]
pub(crate) enum Leave<P: Protocol> {
    /// Answer (in order), then close the connection.
    Close(Answer),
    /// Hand the client to [`Protocol::serve_mode`] for this mode; the session takes it back when the
    /// mode ends.
    Enter(P::Mode),
}

/// One server's share of an exchange's round.
#[derive(Debug)]
pub(crate) struct Part<P: Protocol> {
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
pub(crate) enum Placement {
    /// The pool as the plan saw it.
    Current,
    /// The pool before the last ring change, while a warm-up window is open (the version
    /// [`PlanContext`]'s previous routing indexes). A part sent there once that version is gone gets
    /// [`BackendError::Removed`] as its reply.
    Previous,
}

/// A fan-out part's reply, with the server it came from (for error messages).
#[derive(Debug)]
pub(crate) struct PartReply<'a> {
    /// The reply.
    pub reply: Reply,
    /// The server's address.
    pub server: &'a str,
}

/// A reply for the client, once known.
#[derive(Debug)]
pub(crate) enum Answer {
    /// These bytes.
    Bytes(Bytes),
    /// Nothing (`noreply`, quiet commands).
    Nothing,
    /// A server failed: the protocol's [`Protocol::encode_failure`] of this.
    Failed(BackendError),
}

impl Answer {
    /// A fixed reply.
    pub(crate) fn fixed(bytes: &'static [u8]) -> Answer {
        Answer::Bytes(Bytes::from_static(bytes))
    }
}

/// Frames server replies on one server connection.
pub(crate) trait ReplyScanner: Default + Send + Sync + 'static {
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

/// What [`Protocol::plan`] may look at: the pool's placement and tallies. Keys are placed through a
/// [`route::Placer`] made of it and the pool's [`route::Remedies`].
#[derive(Debug)]
pub(crate) struct PlanContext<'a> {
    /// Key → server over the live servers.
    pub(crate) routing: &'a Routing,
    /// The previous ring while a warm-up window is open.
    pub(crate) previous: Option<PreviousRouting<'a>>,
    /// The next membership's placement while the pool has one that places keys differently
    /// (indices into the pool's servers, as `routing`'s): writes of a key whose owner there
    /// differs go to both owners ([`route::Placer::next_owner`]).
    pub(crate) next: Option<&'a Routing>,
    /// The pool's tallies (`stats` answers, fragment counts), shared: merges and finishes that count after
    /// the plan keep a handle.
    pub stats: &'a Arc<PoolStats>,
    /// When the pool started, for uptime.
    pub started: std::time::Instant,
}

/// The placement before the last ring change, while a warm-up window keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreviousRouting<'a> {
    /// Key → server among the previous ring's servers ([`Placement::Previous`] indices).
    pub routing: &'a Routing,
    /// For each server of the previous ring, its index now (`None` when it left the pool).
    pub now: &'a [Option<usize>],
}
