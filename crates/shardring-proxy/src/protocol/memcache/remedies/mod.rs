//! What the memcached protocol does beyond placing keys, each a leaf: it reads the key's route
//! ([`super::route`]) and the request, and gives plain answers (which servers, whether to retry,
//! which reply wins, a capped frame, a cache hit) that the planner (`plan.rs`) turns into steps and
//! exchanges.
//!
//! - [`dual_writes`]: while the pool has a next membership, which replies of a write sent to a
//!   key's owner now and next disagree;
//! - [`hot_keys`]: the hot-key cache's reads, fills and invalidations;
//! - [`rate_limits`]: which keys of a request count against the rate limits, and the refusal;
//! - [`replicas`]: which commands are writes, which servers a replicated read or write goes to, when
//!   a read tries the next replica, which replica's reply the client gets;
//! - [`split`]: what each command does with a split key (spread, owner, write), and the delete that
//!   keeps a copy from going stale;
//! - [`gutter`]: the TTL cap of a write sent to a gutter server;
//! - [`warmup`]: the warm-up's rules: which way a command of a moved key goes, the copy's meta
//!   commands, their replies read as a `get` answer.
//!
//! The warm-up's exchanges of several rounds (reserve, read the old copy, copy, then the command) are
//! written inside the planner (`plan/warmup.rs`), which builds their parts and finishes; so are the
//! split keys' (`plan/split.rs`: a write then its copies' deletes, a read with its first cleaning).

/// memcached's bound between relative TTLs and absolute Unix times: an exptime above it is a Unix
/// time. Both the gutter's cap and the warm-up's copy read and write TTLs by this rule.
pub(in crate::protocol::memcache) const THIRTY_DAYS: i64 = 30 * 24 * 3600;

pub(super) mod dual_writes;
pub(crate) mod flags;
pub(super) mod gutter;
pub(super) mod hot_keys;
pub(super) mod rate_limits;
pub(super) mod replicas;
pub(super) mod split;
pub(super) mod warmup;
