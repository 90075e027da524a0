//! The memcached text protocol: a pure request parser (what clients send), a pure response framer (what
//! servers send back), and a [`tokio_util::codec::Decoder`] wrapping the request parser for connections.
//!
//! Nothing here does I/O. Incomplete input is a normal state (`Ok(None)`), never an error: the caller reads
//! more and asks again. Parsed requests do not copy: a [`Request`] is the frame's bytes plus the byte ranges
//! of its keys inside them.
//!
//! What a malformed request gets, and whether the connection can go on afterwards (every reply text is
//! memcached 1.6.18's):
//!
//! | input | reply | then |
//! |---|---|---|
//! | unknown command | `ERROR` | next line |
//! | bad token count | `ERROR` (also with `noreply`, as memcached) | next line |
//! | bad number, key over 250 bytes | `CLIENT_ERROR <reason>` (memcached's reasons: `bad command line format`, also for a long key; `invalid numeric delta argument`, `invalid exptime argument`, `error decoding key`) | next line; a storage command whose length parsed has its data block skipped too |
//! | value over the value limit | `SERVER_ERROR object too large for cache` (memcached's words) | the data block is skipped as it arrives, never buffered |
//! | data block not followed by `\r\n` | `CLIENT_ERROR bad data chunk` | connection closed: where the next request starts is unknowable |
//! | line longer than the line limit | `CLIENT_ERROR line too long` | connection closed |
//! | first byte 0x80 (the binary protocol) | nothing | connection closed at once, the reason logged |
//!
//! A command that takes `noreply` and whose last token is `noreply` gets no reply at all once its token
//! count is right, refused or not, as from memcached (which decides it before checking anything else);
//! meta commands' errors are shown even with `q`, as memcached shows them.

mod codec;
mod dialect;
pub(crate) mod flags;
mod parse;
mod plan;
pub(crate) mod remedies;
mod request;
mod response;
mod tokens;

pub use self::codec::{Decoded, RequestCodec};
pub use self::parse::parse_request;
pub(crate) use self::plan::Memcache;
pub use self::plan::VERSION_REPLY;
pub use self::request::{
    Command, GetKind, Keys, Limits, MetaKind, Parsed, Request, RequestError, RequestErrorKind,
    StatsRequest, MAX_KEY_LEN,
};
pub use self::response::{
    is_error_reply, item_size_max, parse_response, parse_response_from, parse_value_header,
    status_code, ResponseError, ResponseKind, ValueBlocks, ValueHeader, MAX_REPLY_LEN,
};

#[cfg(test)]
mod tests;
