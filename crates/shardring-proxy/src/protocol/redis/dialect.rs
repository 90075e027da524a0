//! How redis pools speak to their servers ([`Dialect`]): `PING` as the health probe, the handshake
//! (`AUTH`, `HELLO 3` for the RESP3 connection set, `SELECT`), Redis's error replies, and no timeout
//! on a blocking command's reply.

use bytes::Bytes;

use super::plan::Redis;
use super::reply::{Resp, RespScanner};
use crate::protocol::Dialect;

impl Dialect for Redis {
    type ReplyKind = Resp;

    type ReplyScanner = RespScanner;

    fn reply_timed(kind: Resp) -> bool {
        kind != Resp::Unbounded
    }

    fn probe_request(&self) -> &'static [u8] {
        b"PING\r\n"
    }

    fn probe_answered(reply: &[u8]) -> Option<bool> {
        if reply.ends_with(b"\r\n") || reply.len() >= 128 {
            // `-NOAUTH` (a pool with `redis_auth`: the probe does not authenticate) is a live server too.
            Some(reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH"))
        } else {
            None
        }
    }

    fn handshakes(&self) -> Vec<Vec<(Bytes, Resp)>> {
        vec![self.greeting(false), self.greeting(true)]
    }

    fn is_error_reply(reply: &[u8]) -> bool {
        matches!(reply.first(), Some(b'-' | b'!'))
    }

    fn handshake_error_tolerated(reply: &[u8]) -> Option<&'static str> {
        // Redis 5's words, then Redis 6 and 7's: the server has no password. nutcracker sends AUTH
        // and ignores the reply, so operators set the proxy's password before the servers'.
        let text = reply.strip_prefix(b"-ERR ").unwrap_or_default();
        (text.starts_with(b"Client sent AUTH, but no password is set")
            || text.starts_with(b"AUTH <password> called without any password configured"))
        .then_some("the server has no password: redis_auth is not needed there yet")
    }
}
