//! How a single server's reply becomes the client's answer ([`Finish`]): a plain type on the
//! protocol's low floor, built by the planner and the features, applied by the planner's `finish`.

use super::hot_keys::{HotFill, HotInvalidate};

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
    /// A `GET` of a hot key: its reply fills the hot-key cache (`hot_keys.rs`). Boxed, as are the
    /// other large variants here and in the planner's `RedisMerge`: a finish is moved with every request.
    Fill(Box<HotFill>),
    /// A write of hot keys: the reply invalidates them again, then finishes as the inner finish.
    Invalidate(Box<(HotInvalidate, Finish)>),
}
