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
    type Finish: Copy + Send + Unpin + 'static;
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
}

/// Reads client requests off the front of a connection's buffer.
pub trait RequestDecoder: Send + Sync + 'static {
    /// What it decodes.
    type Request;

    /// Takes the next request (or refusal) off the front of `buf`; `Ok(None)` when more bytes are needed.
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
        /// The error reply.
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
    /// Send each part to its server and answer with [`Protocol::merge`] of all the replies.
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
    /// The server's index in the pool.
    pub server: usize,
    /// The bytes to send.
    pub frame: Bytes,
    /// How the reply is framed.
    pub kind: P::ReplyKind,
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
    /// The pool's tallies (`stats` answers, fragment counts).
    pub stats: &'a PoolStats,
    /// The pool's config.
    pub config: &'a PoolConfig,
    /// How many servers the pool has, live or not.
    pub servers: usize,
    /// When the pool started, for uptime.
    pub started: std::time::Instant,
}

impl PlanContext<'_> {
    /// The server (index in the pool) that owns `key`; `None` when no server is live.
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        self.routing.server_for(key)
    }

    /// The owners of many keys at once (`out[i]` for `keys[i]`).
    pub fn servers_for(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        self.routing.servers_for(keys, out);
    }

    /// The servers in the placement now (not ejected), for requests sent to every server.
    pub fn live_servers(&self) -> &[usize] {
        self.routing.servers()
    }
}
