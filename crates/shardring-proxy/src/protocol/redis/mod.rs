//! The Redis protocol (RESP2 and RESP3): a resumable request scanner (what clients send), a resumable reply
//! framer (what servers send back), the command table that says how each command is routed, and the merge
//! functions for commands split across servers.
//!
//! Nothing here does I/O. Incomplete input is a normal state (`Ok(None)`), never an error: the caller reads
//! more and asks again, and the scanners carry on from where they stopped, so a 10,000-key `MGET` arriving
//! in many reads is scanned once. Requests are not copied: a [`Request`] is the frame's bytes plus the byte
//! ranges of its arguments inside them (inline commands, which clients type by hand, are the exception:
//! they are rewritten as the RESP array a server is sent).
//!
//! What a malformed request gets, and whether the connection can go on afterwards. Redis closes the
//! connection after every protocol error; so do we, except where the stream is plainly still in step:
//!
//! | input | reply | then |
//! |---|---|---|
//! | `*<n>` with `n` not a number (or over 2³¹−1) | `-ERR Protocol error: invalid multibulk length` (Redis's words) | closed |
//! | `*<n>` with `n` over [`Limits::max_args`] | `-ERR Protocol error: <n> arguments, over the proxy's limit of <max>` | closed |
//! | `*0`, `*-1`, an empty inline line | nothing, as Redis | next request |
//! | an array element that is not a bulk string | `-ERR Protocol error: expected '$', got '<c>'` (Redis's words) | closed |
//! | `$<n>` with `n` not a number or negative | `-ERR Protocol error: invalid bulk length` (Redis's words) | closed |
//! | `$<n>` with `n` over [`Limits::max_bulk_len`] | `-ERR Protocol error: bulk length <n> over the proxy's limit of <max>` | closed, before buffering it |
//! | a request longer than [`Limits::max_request_len`] | `-ERR Protocol error: request over the proxy's limit of <max> bytes` | closed, before buffering it |
//! | bulk data not followed by `\r\n`, a header line not ended by `\r\n` | `-ERR Protocol error: expected '\r\n'` | closed |
//! | a header or inline line over [`Limits::max_inline_len`] | `-ERR Protocol error: too big mbulk count string` / `too big bulk count string` / `too big inline request` (Redis's words) | closed |
//! | an inline command with unbalanced quotes | `-ERR Protocol error: unbalanced quotes in request` (Redis's words) | next line (Redis closes; the line is whole, so the stream is in step) |
//!
//! A well-formed request is never refused here: unknown commands and wrong argument counts are the
//! [`command`] table's business and get Redis 7's exact errors without closing anything.
//!
//! Requests are flat arrays of bulk strings (Redis refuses anything else), so their nesting depth is 1 by
//! construction; the nesting limit is the reply framer's ([`ReplyLimits::max_depth`]).

mod client_state;
pub mod command;
mod connection_mode;
mod dialect;
mod dual_writes;
mod finish;
mod hot_keys;
mod inline;
mod keys;
mod local;
pub mod merge;
mod plan;
mod pubsub;
mod replicas;
mod reply;
mod request;
mod scanner;
mod settings;
mod transaction;
mod writes;

pub use reply::{elements, reply_len, Framed, ReplyError, ReplyFramer, ReplyLimits};
pub use request::{
    Args, Decoded, Limits, Request, RequestCodec, RequestError, RequestErrorKind, RequestScanner,
    Scanned,
};
pub(crate) use settings::Redis;

/// Which RESP version a connection speaks: `HELLO 3` switches a client to RESP3, and a RESP3 client is
/// served over backend connections that said `HELLO 3` too, so replies keep the shape the client asked for
/// (`HGETALL` is a map, `ZSCORE` a double) and the proxy's own replies use that version's null.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Flavor {
    /// RESP2, every connection's version until it says `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

impl Flavor {
    /// This version's null: `$-1\r\n` (RESP2's null bulk string) or `_\r\n`.
    pub fn null(self) -> &'static [u8] {
        match self {
            Flavor::Resp2 => b"$-1\r\n",
            Flavor::Resp3 => b"_\r\n",
        }
    }
}

/// Redis's `string2ll` on a whole field: an optional `-`, then digits without a leading zero (`0` alone
/// is fine, `-0` and `007` are not), within `i64`. Requests are held to exactly what Redis accepts.
pub(crate) fn parse_redis_int(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    if digits.len() > 19 {
        return None;
    }
    let mut v: i128 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(c - b'0');
    }
    let v = if negative { -v } else { v };
    i64::try_from(v).ok()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod oracle_tests;
