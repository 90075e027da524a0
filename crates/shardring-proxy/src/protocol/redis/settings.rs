//! The [`Redis`] protocol value: one pool's Redis settings, its `redis_auth`, `redis_db` and limits.
//! How it serves requests (its [`Protocol`](crate::protocol::Protocol) methods) is in `plan.rs`; the
//! commands it answers itself, which read these settings, in `local.rs`.

use std::sync::Arc;

use super::reply::ReplyLimits;
use super::request::Limits;
use crate::router::Routing;

/// The Redis protocol, with a pool's `redis_auth`, `redis_db` and limits.
#[derive(Debug, Clone)]
pub(crate) struct Redis {
    /// `redis_auth`: what clients must AUTH with, and what the proxy AUTHs its connections with.
    pub(crate) auth: Option<String>,
    /// The ACL user `redis_auth` is the password of (`--redis-user`); `None` for Redis's `default`.
    pub(crate) user: Option<String>,
    /// `redis_db`: the database every server connection SELECTs.
    pub(crate) db: u32,
    /// The pool's hot-key detection and cache (`--hot-keys`), when on.
    pub(crate) hot: Option<Arc<crate::hot_keys::HotKeys>>,
    /// How many servers hold each key (`--replicas`; 1: no replicas).
    pub(crate) replicas: usize,
    /// The placement over every server, ejected or not, when keys have replicas: where a key's
    /// replica list comes from.
    pub(crate) full: Option<Arc<Routing>>,
    /// Client request limits.
    pub(super) limits: Limits,
    /// Server reply limits.
    pub(super) reply_limits: ReplyLimits,
    /// What a split read answers when a server fails (`--redis-partial-reads`).
    pub(super) partial_reads: super::merge::PartialReads,
}
