//! How servers' replies become the client's answer: one reply's [`Finish`], an exchange's
//! [`RedisMerge`]. Plain types on the protocol's low floor, built by the planner and the features,
//! applied by the planner's `finish` and `advance`.

use std::sync::Arc;

use shardring_resp::ReplyLimits;

use super::features::cluster::{One, Redirecting};
use super::features::hot_keys::{HotFill, HotInvalidate};
use super::features::replicas::{Replicated, ReplicatedValues};
use super::features::span::Spanning;
use super::features::split::{SplitGet, SplitWrite};
use super::merge::PartialReads;
use crate::metrics::PoolStats;

/// How a single server's reply becomes the client's answer.
#[derive(Debug)]
pub(crate) enum Finish {
    /// As it is; a failure becomes `-ERR <reason>`.
    Plain,
    /// An `MGET` of this many keys, all on one server, in a pool whose split reads answer in part
    /// (`--redis-partial-reads`): a failure becomes an error element per key, as when the keys are
    /// split. Otherwise such an `MGET` finishes [`Finish::Plain`]: a failure is one error.
    Values(usize),
    /// A transaction of this many replies: the answer is the last, `EXEC`'s.
    Exec(u32),
    /// A `GET` of a hot key: its reply fills the hot-key cache (`features/hot_keys.rs`). Boxed, as are the
    /// other large variants here and in the planner's `RedisMerge`: a finish is moved with every request.
    Fill(Box<HotFill>),
    /// A write of hot keys: the reply invalidates them again, then finishes as the inner finish.
    Invalidate(Box<(HotInvalidate, Finish)>),
    /// A request of a cluster pool: a redirection, or a failure, sends it on as an exchange
    /// (`features/cluster.rs`); a final reply finishes as the inner finish.
    Cluster(Box<One<Finish>>),
    /// A split key's fill of a copy, sent without waiting (`features/split.rs`): its reply counts a
    /// fill that a write's delete made fail (`split_fills_refused`).
    Filled(Arc<PoolStats>),
}

/// What a fan-out merges.
#[derive(Debug)]
pub(crate) enum RedisMerge {
    /// A split `MGET`.
    Values {
        /// The request's number of keys.
        key_count: usize,
        /// For each part, the positions of the keys it holds.
        held: Vec<super::merge::KeyList>,
        /// Keys no live server holds: an error element each.
        unrouted: Vec<usize>,
        /// The reply framer's limits.
        limits: ReplyLimits,
        /// Whether a failed part fails the whole command.
        partial: PartialReads,
    },
    /// A split `MSET`.
    AllOk,
    /// A split `DEL`/`UNLINK`/`TOUCH`/`EXISTS`, or `DBSIZE` on every server.
    Sum,
    /// A command of a replicated pool (`features/replicas.rs`).
    Replicated(Box<Replicated>),
    /// An `MGET` of a replicated pool (`features/replicas.rs`).
    ReplicatedValues(Box<ReplicatedValues>),
    /// A write of hot keys: the replies invalidate them again, then merge as the inner merge.
    Invalidating(Box<(HotInvalidate, RedisMerge)>),
    /// A write sent to its keys' owner now and owner next (`features/dual_writes.rs`).
    Dual(Arc<PoolStats>),
    /// A command across every server (`features/span/`).
    Span(Box<Spanning>),
    /// A request of a cluster pool, its redirections followed (`features/cluster.rs`).
    Cluster(Redirecting<Finish, RedisMerge>),
    /// A split write whose round ends with the next owners' parts (`features/dual_writes.rs`): the first
    /// `owners` replies merge as the inner merge, the rest are the next owners'.
    DualSplit(Box<(RedisMerge, usize)>, Arc<PoolStats>),
    /// A write of split keys, then their copies' deletes (`features/split.rs`).
    SplitWrite(Box<SplitWrite<Finish, RedisMerge>>),
    /// A read of a split key from a copy, filled from the owner on a miss (`features/split.rs`).
    SplitGet(Box<SplitGet>),
    /// A `GET` of a split key from its owner, beside its copies' first deletes: the first reply
    /// answers, the rest report the cleaning (`crate::split`).
    SplitClean(Box<crate::split::Cleaning>),
}
