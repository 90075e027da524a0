//! How a protocol speaks to its servers, apart from planning its clients' requests: the framing of a
//! reply, the health probe, the handshake and introductions of a new server connection, what an
//! error reply is, and which replies wait under the pool's `timeout`. The backend (connections,
//! health) needs only this half of a protocol; [`Protocol`](super::Protocol) adds the client's side.

use std::fmt;

use bytes::Bytes;

use super::{ReplyScanner, ServerFacts};

/// How a protocol speaks to its servers (see the [module docs](self)).
pub(crate) trait Dialect {
    /// How a server's reply to one forwarded request is framed (chosen by the plan, per request).
    type ReplyKind: Copy + Send + Sync + fmt::Debug + 'static;

    /// The per-server-connection reply framer; it may keep state across reads of one reply.
    type ReplyScanner: ReplyScanner<Kind = Self::ReplyKind>;

    /// Whether a reply of this kind must come within the pool's `timeout` (a blocking command's takes
    /// as long as the client asked). By default, every reply.
    fn reply_timed(_kind: Self::ReplyKind) -> bool {
        true
    }

    /// What the health probe sends on a fresh server connection.
    fn probe_request(&self) -> &'static [u8];

    /// Whether `reply`, the bytes read so far after a probe, is a healthy answer (`Some(true)`), a
    /// failed one (`Some(false)`), or needs more bytes (`None`).
    fn probe_answered(reply: &[u8]) -> Option<bool>;

    /// Requests sent on every new server connection before any client request (authentication,
    /// database selection), each with the framing of its reply, for each set of server connections
    /// ([`Protocol::lane`](super::Protocol::lane): the first set is the one `preconnect` opens); an error reply fails the
    /// connection. By default, one set with none.
    fn handshakes(&self) -> Vec<Vec<(Bytes, Self::ReplyKind)>> {
        vec![Vec::new()]
    }

    /// Requests sent on every new server connection before the clients' requests, whose replies tell
    /// the protocol about the server: each goes to [`Dialect::introduced`]. Unlike the handshake's,
    /// any reply is accepted, an error included, and a server that closes the connection on them or
    /// does not answer is served as before, without them (see [`ServerFacts`]). By default, none.
    fn introductions(&self) -> Vec<(Bytes, Self::ReplyKind)> {
        Vec::new()
    }

    /// Reads a server's reply to one of [`Dialect::introductions`] into what is known of it.
    fn introduced(reply: &[u8], facts: &ServerFacts) {
        let _ = (reply, facts);
    }

    /// Gives the protocol what is known of each server of the pool (the pool's servers, then its
    /// gutter's, as indexed by plans), as it is learned. By default, ignored.
    fn attach_facts(&mut self, facts: Vec<std::sync::Arc<ServerFacts>>) {
        let _ = facts;
    }

    /// Whether a framed reply is an error reply (a failed handshake step, a refused fan-out part).
    fn is_error_reply(reply: &[u8]) -> bool;

    /// Whether an error reply to a handshake step still lets the connection serve, and why (for the
    /// log): Redis's answer to `AUTH` when the server has no password. By default, none does.
    fn handshake_error_tolerated(reply: &[u8]) -> Option<&'static str> {
        let _ = reply;
        None
    }
}
