//! `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]` across the servers: one server at a time,
//! in index order, each from its own cursor 0 to its own 0, the proxy's cursor carrying which server
//! and where (`cursor.rs` says how, and why every key present for the whole scan is returned).
//!
//! The options are passed to the server as the client gave them, so `MATCH`, `COUNT` and `TYPE`
//! mean what they mean to Redis, on each server's share of the keys, and a malformed option gets
//! Redis's own error. A server that finishes with an empty page hands over to the next server in
//! the same request, so a client does not page through empty answers at each server's end.

use bytes::{BufMut, Bytes, BytesMut};
use shardring_resp::{elements, ReplyLimits};

use super::cursor::{self, Position};
use super::{frame, got, parse_u64, string_content, Got, Spanning};
use crate::protocol::redis::features::replicas::Next;
use crate::protocol::redis::merge::failure;
use crate::protocol::redis::request::{put_header, Request};
use crate::protocol::redis::settings::Settings;
use crate::protocol::{Answer, PartReply};

/// A `SCAN` between its rounds.
#[derive(Debug)]
pub(crate) struct Scanning {
    /// The server asked, and the cursor it was sent.
    at: Position,
    /// The client's request: its options go to the next server when this one's page is empty.
    req: Request,
    /// How many servers the pool scans.
    servers: usize,
    /// The digest of their list, for the cursors.
    membership: u64,
    /// The reply framer's limits, to read the server's reply.
    limits: ReplyLimits,
}

/// `SCAN`'s first round: its cursor's server, sent its own cursor and the client's options.
pub(super) fn plan(req: &Request, settings: &Settings) -> Next<Spanning> {
    let scope = &settings.span;
    let text = req.arg(1).unwrap_or_default();
    let at = match cursor::decode(text, scope.servers, scope.membership) {
        Ok(at) => at,
        Err(e) => return Next::Answer(Answer::Bytes(failure(&e.to_string()))),
    };
    let scanning = Scanning {
        at,
        req: req.clone(),
        servers: scope.servers,
        membership: scope.membership,
        limits: settings.reply_limits,
    };
    Next::Send(
        vec![(at.server, scanning.frame())],
        Spanning::Scan(scanning),
    )
}

impl Scanning {
    /// `SCAN <the server's cursor> <the client's options>`.
    fn frame(&self) -> Bytes {
        let cursor = self.at.cursor.to_string();
        let mut args: Vec<&[u8]> = Vec::with_capacity(self.req.argc());
        args.push(b"SCAN");
        args.push(cursor.as_bytes());
        args.extend(self.req.arg_slices().skip(2));
        frame(&args)
    }
}

/// The answer from the server's page, or the next server's round when this one ended empty.
pub(super) fn advance(mut scanning: Scanning, replies: &[PartReply<'_>]) -> Next<Spanning> {
    let Some(reply) = replies.first() else {
        return Next::Answer(Answer::Bytes(failure("no server answered SCAN")));
    };
    let bytes = match got(reply) {
        Got::Reply(bytes) => bytes,
        Got::Error(e) => return Next::Answer(Answer::Bytes(e)),
    };
    let Some((next, keys)) = page(bytes, scanning.limits) else {
        return Next::Answer(Answer::Bytes(failure(&format!(
            "unexpected reply from server {} to SCAN",
            reply.server
        ))));
    };
    let at = scanning.at;
    let after = if next != 0 {
        Some(Position {
            server: at.server,
            cursor: next,
        })
    } else if at.server + 1 < scanning.servers {
        Some(Position {
            server: at.server + 1,
            cursor: 0,
        })
    } else {
        None
    };
    let cursor = match after {
        // This server is done and gave nothing: the next one's first page answers instead.
        Some(p) if next == 0 && keys.is_empty() => {
            scanning.at = p;
            let frame = scanning.frame();
            return Next::Send(vec![(p.server, frame)], Spanning::Scan(scanning));
        }
        Some(p) => match cursor::encode(p, scanning.servers, scanning.membership) {
            Ok(c) => c,
            Err(e) => {
                return Next::Answer(Answer::Bytes(failure(&format!(
                    "SCAN on server {}: {e}",
                    reply.server
                ))))
            }
        },
        None => 0,
    };
    let cursor = cursor.to_string();
    let mut out = BytesMut::with_capacity(bytes.len() + 32);
    put_header(&mut out, b'*', 2);
    put_header(&mut out, b'$', cursor.len());
    out.put_slice(cursor.as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(keys.whole);
    Next::Answer(Answer::Bytes(out.freeze()))
}

/// The keys of a server's page.
struct Keys<'a> {
    /// The keys' aggregate, as the server sent it (RESP2 or RESP3 alike).
    whole: &'a [u8],
    /// How many keys it holds.
    count: u64,
}

impl Keys<'_> {
    fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A `SCAN` reply's cursor and keys: `*2\r\n$<n>\r\n<cursor>\r\n*<k>\r\n…`; `None` for anything
/// else.
fn page(reply: &[u8], limits: ReplyLimits) -> Option<(u64, Keys<'_>)> {
    if reply.first() != Some(&b'*') {
        return None;
    }
    let parts = elements(reply, limits)?;
    let [cursor, keys] = parts.as_slice() else {
        return None;
    };
    let cursor = parse_u64(string_content(&reply[cursor.clone()])?)?;
    let whole = &reply[keys.clone()];
    let (count, _) = super::array_header(whole)?;
    Some((cursor, Keys { whole, count }))
}
