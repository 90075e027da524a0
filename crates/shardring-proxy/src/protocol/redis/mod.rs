//! The Redis protocol (RESP2 and RESP3): a resumable request scanner (what clients send), the command table
//! that says how each command is routed, and the merge functions for commands split across servers. What
//! servers send back is framed by `shardring-resp`'s resumable reply framer, re-exported here
//! ([`ReplyFramer`], shared with `shardring migrate`).
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
mod codec;
pub mod command;
mod connection_mode;
mod dialect;
mod exchange;
mod features;
mod finish;
pub(crate) mod flags;
mod flavor;
mod info;
mod inline;
mod keys;
mod local;
pub mod merge;
mod plan;
mod reply;
mod request;
mod settings;
mod writes;

pub use codec::{Decoded, RequestCodec};
pub use flavor::Flavor;
pub(crate) use plan::Redis;
pub use request::{Args, Limits, Request, RequestError, RequestErrorKind, RequestScanner, Scanned};
pub(crate) use shardring_resp::parse_redis_int;
pub use shardring_resp::{elements, reply_len, Framed, ReplyError, ReplyFramer, ReplyLimits};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod oracle_tests;
