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

use std::sync::Arc;

use super::plan::{Finish, Memcache};
use super::request::{Command, MetaKind, Request};
use super::response::status_code;
use super::route::Keys;
use crate::metrics::PoolStats;
use crate::protocol::{Answer, Part, PartReply, Placement, Protocol, Reply, Round, Step};

/// A write sent to several replicas: how their replies become one answer.
#[derive(Debug)]
pub struct ReplicatedWrite {
    /// How the chosen reply becomes the answer.
    finish: Finish,
    /// Where disagreements are counted.
    stats: Arc<PoolStats>,
}

/// Whether `command` changes the item (and so goes to every replica).
pub(super) fn is_write(command: &Command) -> bool {
    match command {
        Command::Keyed { .. } => true,
        Command::Meta { kind, .. } => matches!(
            kind,
            MetaKind::Set | MetaKind::Delete | MetaKind::Arithmetic
        ),
        _ => false,
    }
}

/// A one-key write to every live replica of `key` (routing bytes), or `None` when the key has one
/// server (the caller forwards as usual).
pub(super) fn write(
    req: &Request,
    key: &[u8],
    finish: Finish,
    ctx: &Keys<'_>,
) -> Result<Step<Memcache>, Finish> {
    if ctx.replicas() < 2 {
        return Err(finish);
    }
    let mut servers = Vec::with_capacity(ctx.replicas());
    ctx.replicas_for(key, &mut servers);
    if servers.len() < 2 {
        return Err(finish);
    }
    let frame = req.to_forward();
    let kind = req.command.response_kind();
    Ok(Step::Exchange(Round::new(
        servers
            .into_iter()
            .map(|server| Part {
                placement: Placement::Current,
                server,
                frame: frame.clone(),
                kind,
            })
            .collect(),
        super::plan::Merge::Replicated(ReplicatedWrite {
            finish,
            stats: Arc::clone(ctx.stats),
        }),
    )))
}

/// The servers a one-key read tries, in order, or `None` when the pool has no replicas.
pub(super) fn read_servers(key: &[u8], ctx: &Keys<'_>) -> Option<Vec<usize>> {
    if ctx.replicas() < 2 {
        return None;
    }
    let mut servers = Vec::with_capacity(ctx.replicas());
    ctx.replicas_for(key, &mut servers);
    Some(servers)
}

/// Whether a replicated read tries the next replica after `reply`.
pub(super) fn retry(read_miss: bool, reply: &Reply) -> bool {
    match reply {
        Err(_) => true,
        Ok(b) if b.starts_with(b"SERVER_ERROR") => true,
        Ok(b) => read_miss && (&b[..] == b"END\r\n" || b.starts_with(b"EN\r\n")),
    }
}

impl ReplicatedWrite {
    /// The first reply that is not a server failure (else the first reply), finished as the client
    /// asked; replies whose status differs are counted as a disagreement.
    pub(super) fn merge(self, mut replies: Vec<PartReply<'_>>) -> Answer {
        let status = |r: &Reply| -> Option<Vec<u8>> {
            match r {
                Ok(b) if !b.starts_with(b"SERVER_ERROR") => Some(status_code(b).to_vec()),
                _ => None,
            }
        };
        let first = replies.first().map(|r| status(&r.reply));
        if replies.iter().any(|r| Some(status(&r.reply)) != first) {
            self.stats.replica_disagreements.inc();
        }
        let chosen = replies
            .iter()
            .position(|r| status(&r.reply).is_some())
            .unwrap_or(0);
        if chosen >= replies.len() {
            let none = Err(crate::error::BackendError::NoServer);
            return Memcache::finish(self.finish, none);
        }
        let reply = replies.swap_remove(chosen).reply;
        Memcache::finish(self.finish, reply)
    }
}
