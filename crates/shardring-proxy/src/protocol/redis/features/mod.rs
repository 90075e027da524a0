//! What a Redis pool does beyond placing keys, as leaves the planner calls: transactions and
//! blocking commands, publish/subscribe, replicas, hot keys, split keys, rate limits, dual writes, and the
//! commands across every server (`SCAN`, `KEYS`, …). Each takes the request,
//! its route and what it needs of the pool's settings, and returns its own types (an outcome, the
//! frames to send, a merge state); only the planner turns them into steps.

pub(crate) mod cluster;
pub(crate) mod dual_writes;
pub(crate) mod hot_keys;
pub(crate) mod pubsub;
pub(crate) mod rate_limits;
pub(crate) mod replicas;
pub(crate) mod span;
pub(crate) mod split;
pub(crate) mod transaction;
