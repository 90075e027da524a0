//! # shardring-resp
//!
//! Redis's replies (RESP2 and RESP3) read as shardring's proxy and `shardring migrate` read them: a
//! resumable [`ReplyFramer`] that finds where a reply ends without building it, and a [`ReplyReader`]
//! that reads whole replies into [`Value`]s.
//!
//! - The proxy only needs to know where each server reply ends, to forward it: [`ReplyFramer::frame`]
//!   looks at each byte once however the reply is split into reads, allocates nothing but its nesting
//!   stack, and enforces [`ReplyLimits`] before buffering what a length announces.
//! - A client needs the values (`SCAN`'s cursor and keys, `DUMP`'s payloads): [`ReplyReader::read`]
//!   frames the same way, then reads the whole reply into a [`Value`].
//!
//! Nothing here does I/O, and incomplete input is a normal state (`Ok(None)`: read more and call again),
//! never an error. Bytes that are not RESP, or a reply over the limits, are a [`ReplyError`]: the
//! connection is out of step and must be closed.
//!
//! ```
//! use shardring_resp::{ReplyFramer, ReplyLimits, ReplyReader, Value};
//!
//! // A reply arriving in two reads: the second call carries on where the first stopped.
//! let reply = b"*2\r\n$5\r\nhello\r\n:42\r\n";
//! let mut framer = ReplyFramer::new(ReplyLimits::default());
//! assert_eq!(framer.frame(&reply[..9]), Ok(None));
//! assert_eq!(framer.frame(reply).unwrap().unwrap().len, reply.len());
//!
//! // The same reply read into a value.
//! let mut reader = ReplyReader::new(ReplyLimits::default());
//! let (value, len) = reader.read(reply).unwrap().unwrap();
//! assert_eq!(len, reply.len());
//! assert_eq!(
//!     value,
//!     Value::Array(vec![Value::Bulk(b"hello".to_vec()), Value::Integer(42)])
//! );
//! ```
//!
//! ## Why a crate of its own
//! The proxy and `shardring migrate` both talk to Redis, and `shardring-migrate` must not depend on the
//! proxy (nor its runtime: TLS, the metrics server, etcd). One reader below both means one set of rules
//! for what a reply is, one fuzz target and one differential test against a maintained codec
//! (`redis-protocol`).
//!
//! What Redis accepts and sends is what is read: integers and lengths as Redis's `string2ll` reads them
//! ([`parse_redis_int`]: no `+`, no leading zero), lines ended by `\r\n` only ([`find_crlf`]). The
//! proxy's request scanner uses both.
//!
//! ## Redis Cluster's key slots
//! [`key_slot`] is where Redis Cluster keeps a key (CRC16 of the key or its `{hash tag}`, mod 16384),
//! exactly as `CLUSTER KEYSLOT` answers: the proxy routing to a cluster and the migrator copying into
//! one both need it, and this crate is the Redis knowledge below both.
//!
//! This crate has no cargo features.

mod error;
mod framer;
mod limits;
mod line;
mod number;
mod reader;
mod slot;
mod value;

pub use error::ReplyError;
pub use framer::{elements, reply_len, Framed, ReplyFramer};
pub use limits::ReplyLimits;
pub use line::{find_crlf, LineEnd};
pub use number::parse_redis_int;
pub use reader::ReplyReader;
pub use slot::{crc16, hash_tag, key_slot, SLOT_COUNT};
pub use value::Value;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod oracle_tests;
