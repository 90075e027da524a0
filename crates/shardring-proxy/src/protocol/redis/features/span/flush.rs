//! `FLUSHDB`/`FLUSHALL [ASYNC|SYNC]` across the servers: every server of the pool, those a planned
//! change adds too (they hold the copies dual writes made, which would come back at the cut-over),
//! ejected or not. `+OK` only when every server said `+OK`; otherwise the first error, naming its
//! server and how many servers did flush, so a client never takes a partial flush for a whole one.
//!
//! With `--hot-keys`, the hot-key cache is emptied when the flush is planned and again when the
//! servers have answered, so no value read before the flush is served from it afterwards (a read
//! that raced the flush may have filled it in between), as a write invalidates its keys.

use std::sync::Arc;

use bytes::Bytes;

use super::{every, got, Got, Spanning};
use crate::error::BackendError;
use crate::hot_keys::HotKeys;
use crate::protocol::redis::features::replicas::Next;
use crate::protocol::redis::merge::failure;
use crate::protocol::redis::request::Request;
use crate::protocol::route::Placer;
use crate::protocol::{Answer, PartReply};

/// A flush between its round and its answer.
#[derive(Debug)]
pub(crate) struct Flushing {
    /// `FLUSHDB` or `FLUSHALL`, for the error.
    pub(super) name: &'static str,
    /// The pool's hot keys, whose cache is emptied again once the servers have flushed.
    pub(super) hot: Option<Arc<HotKeys>>,
}

/// Empties the hot-key cache of `hot`, when it has one.
fn forget_hot(hot: Option<&Arc<HotKeys>>) {
    if let Some(cache) = hot.and_then(|h| h.cache()) {
        cache.clear();
    }
}

/// Every server's flush; Redis's `syntax error` for options it would refuse, before any server is
/// flushed.
pub(super) fn plan(req: &Request, ctx: &Placer<'_>) -> Next<Spanning> {
    let name = if req
        .arg(0)
        .is_some_and(|n| n.eq_ignore_ascii_case(b"flushall"))
    {
        "FLUSHALL"
    } else {
        "FLUSHDB"
    };
    let options_ok = match req.argc() {
        1 => true,
        2 => req
            .arg(1)
            .is_some_and(|o| o.eq_ignore_ascii_case(b"async") || o.eq_ignore_ascii_case(b"sync")),
        _ => false,
    };
    if !options_ok {
        return Next::Answer(Answer::fixed(b"-ERR syntax error\r\n"));
    }
    let servers = ctx.servers();
    if servers == 0 {
        return Next::Answer(Answer::Failed(BackendError::NoServer));
    }
    forget_hot(ctx.hot);
    let hot = ctx.hot.map(Arc::clone);
    Next::Send(
        every(servers, &req.frame),
        Spanning::Flush(Flushing { name, hot }),
    )
}

/// `+OK` when every server said so, else the first error with how many servers flushed.
pub(super) fn merge(flushing: &Flushing, replies: &[PartReply<'_>]) -> Bytes {
    forget_hot(flushing.hot.as_ref());
    let flushed = replies
        .iter()
        .filter(|r| matches!(&r.reply, Ok(b) if &b[..] == b"+OK\r\n"))
        .count();
    if flushed == replies.len() {
        return Bytes::from_static(b"+OK\r\n");
    }
    let first = replies.iter().find_map(|r| match got(r) {
        Got::Error(e) => Some(e),
        Got::Reply(b) if b != b"+OK\r\n" => Some(failure(&format!(
            "unexpected reply from server {} to {}",
            r.server, flushing.name
        ))),
        Got::Reply(_) => None,
    });
    let first = first.unwrap_or_else(|| failure("a server did not flush"));
    if first.first() != Some(&b'-') {
        // A RESP3 blob error: passed as it is.
        return first;
    }
    // The error line without its CRLF, then how far the flush went.
    let line = first.strip_suffix(b"\r\n").unwrap_or(&first);
    let mut out = Vec::with_capacity(line.len() + 64);
    out.extend_from_slice(line);
    out.extend_from_slice(
        format!(
            "; {} flushed {flushed} of {} servers\r\n",
            flushing.name,
            replies.len()
        )
        .as_bytes(),
    );
    Bytes::from(out)
}
