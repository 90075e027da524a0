//! Replicated pools on the memcached protocol (`--replicas R`): which commands are writes (sent to
//! every live replica) and which are reads (sent to the first live replica, on to the next on an error),
//! and what the client sees when replicas disagree.
//!
//! - Writes: set/add/replace/append/prepend/cas, delete, incr/decr, touch, `ms`, `md`, `ma`. Each goes
//!   to every live server of the key's replica list, in one pipelined round trip (a fan-out).
//! - Reads: a one-key `get`/`gets`/`gat`/`gats`, `mg`, `me`: to the first live replica; on an error
//!   (`SERVER_ERROR`, a timeout, a closed connection) to the next, one round trip more per failed
//!   replica; on a miss too with `--replica-read-miss`. Multi-key retrievals are split by each key's
//!   first live replica, without failover (a key whose server fails mid-request reads as a miss).
//! - When replicas disagree (a write that reached 1 of 2, `NOT_STORED` on one and `STORED` on the
//!   other): the client gets the first replica's reply that is not a server failure (the owner's when
//!   it answered), and `replica_disagreements` counts it. A replica that missed a write keeps its old
//!   value (or none) until the next write of the key: reads of it go to the owner first, so a client
//!   can read the old value from an owner that missed a write while it was being restarted. A
//!   restarted (empty) owner reads as misses until its keys are written again, unless
//!   `--replica-read-miss` is on.

use crate::protocol::memcache::request::{Command, MetaKind};
use crate::protocol::memcache::response::status_code;
use crate::protocol::route::Route;
use crate::protocol::{PartReply, Reply};

/// Whether `command` changes the item (and so goes to every replica).
pub(in crate::protocol::memcache) fn is_write(command: &Command) -> bool {
    match command {
        Command::Keyed { .. } => true,
        Command::Meta { kind, .. } => matches!(
            kind,
            MetaKind::Set | MetaKind::Delete | MetaKind::Arithmetic
        ),
        _ => false,
    }
}

/// The servers a one-key write goes to (every live replica of its key), or `None` when the key has
/// one server (the caller forwards as usual).
pub(in crate::protocol::memcache) fn write_servers(route: &mut Route) -> Option<Vec<usize>> {
    route.replicas.take().filter(|servers| servers.len() >= 2)
}

/// The servers a one-key read tries, in order, or `None` when the pool has no replicas.
pub(in crate::protocol::memcache) fn read_servers(route: &mut Route) -> Option<Vec<usize>> {
    route.replicas.take()
}

/// Whether a replicated read tries the next replica after `reply`.
pub(in crate::protocol::memcache) fn retry(read_miss: bool, reply: &Reply) -> bool {
    match reply {
        Err(_) => true,
        Ok(b) if b.starts_with(b"SERVER_ERROR") => true,
        Ok(b) => read_miss && (&b[..] == b"END\r\n" || b.starts_with(b"EN\r\n")),
    }
}

/// Which of a replicated write's replies the client gets, and whether their statuses differ (a
/// disagreement, counted by the caller): [`crate::protocol::replicated::chosen`], with
/// `SERVER_ERROR` a server failure.
pub(in crate::protocol::memcache) fn chosen(replies: &[PartReply<'_>]) -> (Option<usize>, bool) {
    crate::protocol::replicated::chosen(replies, |r| match r {
        Ok(b) if !b.starts_with(b"SERVER_ERROR") => Some(status_code(b)),
        _ => None,
    })
}
