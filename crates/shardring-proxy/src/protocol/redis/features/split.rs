//! Split keys on Redis pools (`--hot-key-split`, `crate::split`): the frames and the state of a
//! split key's reads and writes; the planner turns them into steps.
//!
//! - A write of a split key (every command Redis flags `write`, and scripts) goes to the owner as
//!   usual; once it is answered, each copy server gets `DEL key reservation` ([`copy_deletes`]), and
//!   only then is the client answered. An integer is a delete that went; anything else fails the
//!   write with the copy named.
//! - A `GET` of a key in the `read` phase goes to the owner or a copy in turn ([`SplitGet`]). A copy
//!   that holds it answers as a server does. A copy that does not is filled from the owner with the
//!   memcached copy's reserve-then-CAS, made of Redis commands: a reservation beside the key
//!   (`SET shardring:split-fill:KEY TOKEN NX PX 2000`), then the owner's value and remaining TTL in one
//!   script (`GET` and `PTTL`), answered to the client, then a script on the copy that sets the key
//!   (with that TTL, at most `crate::split::COPY_LIFETIME`) only while the reservation is still the
//!   token. A write's `DEL key reservation`
//!   landing after the reservation removes it, so a fill never puts back a value older than the
//!   last write, nor brings back a deleted key. The reservation is an ordinary key for two seconds:
//!   a `SCAN` through the proxy may list it meanwhile.
//! - Any other read of a split key alone ([`spreads`]: a command the table does not flag `write`,
//!   `HGET`, `HGETALL`, `LRANGE`, `SMEMBERS`, `ZSCORE`, …) goes to the owner or a copy in turn too.
//!   A copy's reply answers only when it shows the copy holds the key ([`found`]: a value, a positive
//!   count, an aggregate holding one); any other reply (a null, an empty list, a 0, an error) may be
//!   a copy not filled yet, so the owner answers, and the copy, if it does not hold the key, is
//!   filled beside it under the same reservation, with the owner's `DUMP` and remaining TTL and a
//!   `RESTORE` (any type). The TTL
//!   family and `OBJECT` read the owner alone: a copy's TTL is capped and its metadata its own.
//! - Every write of a split key goes to the owner, as above. Inside a transaction or as a blocking
//!   command, a write of a split key is refused (`transaction.rs`): it could not delete the copies
//!   after it.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::BackendError;
use crate::metrics::PoolStats;
use crate::protocol::redis::request::Request;
use crate::protocol::route::Placer;
use crate::protocol::{Answer, PartReply, Reply};

/// What a write of a split key in a transaction or a blocking command is answered (the transaction
/// is discarded, as for any refused command).
pub(crate) const IN_TRANSACTION: &[u8] = b"-ERR a key this command writes is split over several servers (--hot-key-split): write it outside MULTI and without blocking\r\n";

/// Whether one of `keys` (argument positions of `req`) is a split key of the pool.
pub(crate) fn any_split(
    req: &Request,
    keys: impl IntoIterator<Item = usize>,
    ctx: &Placer<'_>,
) -> bool {
    ctx.splits()
        && keys.into_iter().any(|k| {
            let name = req.arg(k).unwrap_or_default();
            ctx.split_route(name, ctx.server_for(name)).is_some()
        })
}

/// How long a fill's reservation lives, in milliseconds.
const RESERVATION_MS: &str = "2000";

/// The owner's value and remaining TTL, read at one instant: `{0}` when it has no value, else `{1,
/// value, pttl}` (integers and a bulk string read alike in RESP2 and RESP3).
const READ_OWNER: &str =
    "local v = redis.call('GET', KEYS[1]) if not v then return {0} end return {1, v, redis.call('PTTL', KEYS[1])}";

/// The fill on a copy: the value set (with the TTL when it has one) only while the reservation is
/// still this fill's token; 1 when set, 0 otherwise.
const FILL_COPY: &str =
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end redis.call('DEL', KEYS[2]) \
     if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) \
     else redis.call('SET', KEYS[1], ARGV[2]) end return 1";

/// The owner's serialized value (`DUMP`, any type) and remaining TTL, read at one instant, in
/// [`READ_OWNER`]'s shape.
const DUMP_OWNER: &str =
    "local v = redis.call('DUMP', KEYS[1]) if not v then return {0} end return {1, v, redis.call('PTTL', KEYS[1])}";

/// A fill's reservation on a copy that does not hold the key (`+OK`; `0` when it holds it, a null
/// when another fill holds the reservation), for a read whose reply could not tell.
const RESERVE_ABSENT: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end \
     return redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2])";

/// [`FILL_COPY`] for a value of any type: `RESTORE` of the owner's `DUMP` with its TTL (always
/// given: capped at the copy's lifetime), only while the reservation is still this fill's token.
const RESTORE_COPY: &str =
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end redis.call('DEL', KEYS[2]) \
     redis.call('RESTORE', KEYS[1], ARGV[3], ARGV[2], 'REPLACE') return 1";

/// The reads [`spreads`] leaves to the owner, sorted (searched by halves).
const OWNER_ONLY: &[&str] = &[
    "eval_ro",
    "evalsha_ro",
    "expiretime",
    "fcall_ro",
    "memory",
    "object",
    "pexpiretime",
    "pttl",
    "ttl",
];

/// Reads a split key's copy may answer besides `GET`: every command of one key the table does not
/// flag `write`, but those whose answer a copy would get wrong (its TTL is capped at the copy's
/// lifetime; its encoding, idle time and memory are its own) and scripts (which may read more than
/// they say).
pub(crate) fn spreads(spec: &crate::protocol::redis::command::Spec) -> bool {
    !crate::protocol::redis::features::replicas::is_write(spec)
        && OWNER_ONLY.binary_search(&spec.name).is_err()
}

/// Whether a copy's reply to a read (not `GET`) shows that the copy holds the key, so that it
/// answers: a non-empty string, a positive integer, a double, a big number, `true`, or an
/// aggregate holding such a value (`HMGET` of a missing key is an array of nils). A null, an empty
/// string or aggregate, 0 or a negative number, `false`, a status or an error may come from a copy
/// that is not filled yet (or was emptied by a write): the owner answers those.
pub(crate) fn found(reply: &[u8]) -> bool {
    match reply.first() {
        Some(b'$') => !matches!(reply, b"$-1\r\n" | b"$0\r\n\r\n"),
        Some(b':') => matches!(reply.get(1), Some(b'1'..=b'9')),
        Some(b',' | b'(') => true,
        Some(b'#') => reply.starts_with(b"#t"),
        Some(b'*' | b'~' | b'%') => {
            shardring_resp::elements(reply, shardring_resp::ReplyLimits::default())
                .is_some_and(|elements| elements.into_iter().any(|r| found(&reply[r])))
        }
        _ => false,
    }
}

/// The key that holds a fill's reservation on a copy.
use crate::config::fill_reservation as reservation;

/// The deletes after a write of the split `keys`, each with its copies: one `DEL` a copy server, of
/// each key it holds and the key's reservation.
pub(crate) fn copy_deletes<'k>(
    keys: impl IntoIterator<Item = (&'k [u8], &'k [usize])>,
) -> Vec<(usize, Bytes)> {
    let mut per_server: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
    for (key, copies) in keys {
        for &c in copies {
            let at = match per_server.iter().position(|(s, _)| *s == c) {
                Some(at) => at,
                None => {
                    per_server.push((c, vec![b"DEL".to_vec()]));
                    per_server.len() - 1
                }
            };
            per_server[at].1.push(key.to_vec());
            per_server[at].1.push(reservation(key));
        }
    }
    per_server
        .into_iter()
        .map(|(s, args)| (s, Request::from_args(&args).frame))
        .collect()
}

/// The failure of the first copy whose delete did not answer an integer (what `DEL` answers), if
/// any.
pub(crate) fn kept(replies: &[PartReply<'_>]) -> Option<BackendError> {
    crate::split::kept(replies, |b| b.starts_with(b":"))
}

/// A write of split keys as an exchange: the write's own (a forward's finish `F`, or an exchange's
/// merge `M`), then the copies' deletes; the planner drives it.
#[derive(Debug)]
pub(crate) struct SplitWrite<F, M> {
    /// Where it is.
    pub(crate) stage: Writing<F, M>,
    /// The copies' deletes, sent once the write is answered.
    deletes: Vec<(usize, Bytes)>,
    /// Where the deletes are counted.
    stats: Arc<PoolStats>,
}

/// Where a [`SplitWrite`] is.
#[derive(Debug)]
pub(crate) enum Writing<F, M> {
    /// A forward's reply, through this finish.
    Finish(F),
    /// An exchange's round, through this merge.
    Merge(M),
    /// The deletes were sent; the write's answer.
    Deleting(Answer),
}

impl<F, M> SplitWrite<F, M> {
    /// The write at `stage`, then `deletes`.
    pub(crate) fn new(
        stage: Writing<F, M>,
        deletes: Vec<(usize, Bytes)>,
        stats: &Arc<PoolStats>,
    ) -> Self {
        SplitWrite {
            stage,
            deletes,
            stats: Arc::clone(stats),
        }
    }

    /// The write is answered with `answer`: the deletes to send now.
    pub(crate) fn deleting(&mut self, answer: Answer) -> Vec<(usize, Bytes)> {
        self.stage = Writing::Deleting(answer);
        self.stats
            .split_invalidations
            .add(self.deletes.len() as u64);
        std::mem::take(&mut self.deletes)
    }

    /// The deletes' replies: the write's answer, or the failure of a copy not deleted.
    pub(crate) fn answer(self, replies: &[PartReply<'_>]) -> Answer {
        let Writing::Deleting(answer) = self.stage else {
            return Answer::Failed(BackendError::NoServer);
        };
        match kept(replies) {
            None => answer,
            Some(error) => {
                self.stats.split_invalidations_failed.inc();
                Answer::Failed(error)
            }
        }
    }
}

/// What a split key's `GET` does next.
#[derive(Debug)]
pub(crate) enum Then {
    /// Send these (server, frame) and come back with the state.
    Send(Vec<(usize, Bytes)>, SplitGet),
    /// The answer, and a request to send without waiting for it (the fill of a copy).
    Answer(Answer, Option<(usize, Bytes)>),
}

/// A `GET` of a split key from a copy, filled from the owner when the copy does not hold it.
#[derive(Debug)]
pub(crate) struct SplitGet {
    /// The key.
    key: Bytes,
    /// The client's `GET`, as received.
    frame: Bytes,
    /// The key's owner.
    owner: usize,
    /// The copy read first.
    copy: usize,
    /// A `GET` (its miss answered and its copy filled as a string), or another read ([`spreads`]).
    get: bool,
    /// Where the exchange is.
    stage: Stage,
    /// Where fills are counted.
    stats: Arc<PoolStats>,
}

/// Where a [`SplitGet`] is.
#[derive(Debug)]
enum Stage {
    /// The copy's `GET` was sent.
    Copy,
    /// The copy missed (its null reply, in the client's RESP version, kept to answer a miss with);
    /// the reservation was sent with this token.
    Reserve { null: Bytes, token: String },
    /// The owner's value was asked for, by script, after the copy reserved the fill for `token`.
    Owner { null: Bytes, token: String },
    /// A read other than `GET`: the owner's `DUMP` was asked for, by script, and the client's read
    /// sent to the owner after it, once the copy reserved the fill for `token`.
    Dumped { token: String },
    /// The owner's `GET` as received was sent: its reply is the answer.
    Plain,
}

impl SplitGet {
    /// A read (`req`, a `GET` when `get`) of split key `key` from `copy`, `owner` its owner.
    pub(crate) fn start(
        req: &Request,
        key: &[u8],
        owner: usize,
        copy: usize,
        get: bool,
        stats: &Arc<PoolStats>,
    ) -> Then {
        stats.split_reads.inc();
        Then::Send(
            vec![(copy, req.frame.clone())],
            SplitGet {
                key: Bytes::copy_from_slice(key),
                frame: req.frame.clone(),
                owner,
                copy,
                get,
                stage: Stage::Copy,
                stats: Arc::clone(stats),
            },
        )
    }

    /// After a round's replies (one, or the owner's two after [`Stage::Dumped`]).
    pub(crate) fn advance(mut self, replies: Vec<PartReply<'_>>) -> Then {
        let mut replies = replies.into_iter().map(|r| r.reply);
        let reply: Reply = replies.next().unwrap_or(Err(BackendError::NoServer));
        match std::mem::replace(&mut self.stage, Stage::Plain) {
            Stage::Copy if !self.get => match reply {
                Ok(b) if found(&b) => Then::Answer(Answer::Bytes(b), None),
                Ok(_) => {
                    self.stats.split_copy_misses.inc();
                    self.reserve(Bytes::new())
                }
                Err(_) => self.plain(),
            },
            Stage::Copy => match reply {
                Ok(b) if is_null(&b) => {
                    self.stats.split_copy_misses.inc();
                    self.reserve(b)
                }
                Ok(b) => Then::Answer(Answer::Bytes(b), None),
                // The copy failed: the owner answers.
                Err(_) => self.plain(),
            },
            Stage::Reserve { token, .. } if !self.get => match reply {
                Ok(b) if b.starts_with(b"+OK") => {
                    let dump = self.on_key(DUMP_OWNER);
                    self.stage = Stage::Dumped { token };
                    let read = self.frame.clone();
                    Then::Send(vec![(self.owner, dump), (self.owner, read)], self)
                }
                _ => self.plain(),
            },
            Stage::Dumped { token } => {
                let answer = match replies.next().unwrap_or(Err(BackendError::NoServer)) {
                    Ok(b) => Answer::Bytes(b),
                    Err(e) => Answer::Failed(e),
                };
                let fill = match reply.as_deref().ok().and_then(owner_value) {
                    Some(Some((value, ttl))) => Some(self.fill(RESTORE_COPY, &token, value, ttl)),
                    // The owner holds no value, or its dump failed: nothing to fill.
                    _ => None,
                };
                Then::Answer(answer, fill)
            }
            Stage::Reserve { null, token } => match reply {
                Ok(b) if b.starts_with(b"+OK") => {
                    let read = self.on_key(READ_OWNER);
                    self.stage = Stage::Owner { null, token };
                    Then::Send(vec![(self.owner, read)], self)
                }
                // Another fill holds the reservation (or the copy failed): read the owner.
                _ => self.plain(),
            },
            Stage::Owner { null, token } => match reply.as_deref().ok().and_then(owner_value) {
                Some(None) => Then::Answer(Answer::Bytes(null), None),
                Some(Some((value, ttl))) => {
                    let fill = self.fill(FILL_COPY, &token, value, ttl);
                    let mut bulk = format!("${}\r\n", value.len()).into_bytes();
                    bulk.extend_from_slice(value);
                    bulk.extend_from_slice(b"\r\n");
                    Then::Answer(Answer::Bytes(Bytes::from(bulk)), Some(fill))
                }
                // Not a string (the owner's GET answers WRONGTYPE), or the owner failed: its own
                // GET answers.
                None => self.plain(),
            },
            Stage::Plain => Then::Answer(
                match reply {
                    Ok(b) => Answer::Bytes(b),
                    Err(e) => Answer::Failed(e),
                },
                None,
            ),
        }
    }

    /// Where it counts.
    pub(crate) fn stats(&self) -> Arc<PoolStats> {
        Arc::clone(&self.stats)
    }

    /// `script` run on the key (`EVAL script 1 key`): the owner's value read by [`READ_OWNER`] or
    /// [`DUMP_OWNER`].
    fn on_key(&self, script: &str) -> Bytes {
        Request::from_args(&[&b"EVAL"[..], script.as_bytes(), b"1", &self.key]).frame
    }

    /// The copy's fill with the owner's `value` and `ttl` by `script` ([`FILL_COPY`] for a
    /// string, [`RESTORE_COPY`] for a dump), under the reservation `token` holds; counted.
    fn fill(&self, script: &str, token: &str, value: &[u8], ttl: i64) -> (usize, Bytes) {
        self.stats.split_fills.inc();
        let frame = Request::from_args(&[
            &b"EVAL"[..],
            script.as_bytes(),
            b"2",
            &self.key,
            &reservation(&self.key),
            token.as_bytes(),
            value,
            copy_ttl(ttl).to_string().as_bytes(),
        ])
        .frame;
        (self.copy, frame)
    }

    /// The copy missed: reserve its fill (`null` kept to answer a `GET` the owner misses too).
    fn reserve(mut self, null: Bytes) -> Then {
        let token = format!("{:016x}", token());
        let reservation = reservation(&self.key);
        let reserve = if self.get {
            Request::from_args(&[
                &b"SET"[..],
                &reservation,
                token.as_bytes(),
                b"NX",
                b"PX",
                RESERVATION_MS.as_bytes(),
            ])
        } else {
            // Another read's answer may look like a miss on a copy that holds the key (a member
            // not in the set, `TYPE`): the copy is filled (a `DUMP` of the whole key) only when
            // it does not hold it.
            Request::from_args(&[
                &b"EVAL"[..],
                RESERVE_ABSENT.as_bytes(),
                b"2",
                &self.key,
                &reservation,
                token.as_bytes(),
                RESERVATION_MS.as_bytes(),
            ])
        }
        .frame;
        self.stage = Stage::Reserve { null, token };
        Then::Send(vec![(self.copy, reserve)], self)
    }

    /// The owner's read, as received, answers.
    fn plain(mut self) -> Then {
        self.stage = Stage::Plain;
        Then::Send(vec![(self.owner, self.frame.clone())], self)
    }
}

/// A copy's TTL in milliseconds for the owner's `ttl` (`PTTL`: negative when it has none): the
/// owner's, at most the copy's lifetime, and at least 1 (0 would be none at all, where the owner's
/// value has less than a millisecond to live).
fn copy_ttl(ttl: i64) -> i64 {
    let most = crate::split::COPY_LIFETIME.as_millis() as i64;
    if ttl < 0 {
        most
    } else {
        ttl.clamp(1, most)
    }
}

/// A copy's fill answered: 0 is a fill a write's delete of the reservation made fail.
pub(crate) fn count_fill(stats: &PoolStats, reply: &Reply) {
    if matches!(reply, Ok(b) if &b[..] == b":0\r\n") {
        stats.split_fills_refused.inc();
    }
}

/// Whether a `GET` reply is a null (RESP2's `$-1`, RESP3's `_`).
fn is_null(reply: &[u8]) -> bool {
    reply == b"$-1\r\n" || reply == b"_\r\n"
}

/// The owner's value and remaining TTL from [`READ_OWNER`]'s reply: `Some(None)` when it has none,
/// `None` when the reply is not the script's.
fn owner_value(reply: &[u8]) -> Option<Option<(&[u8], i64)>> {
    if reply == b"*1\r\n:0\r\n" {
        return Some(None);
    }
    let rest = reply.strip_prefix(b"*3\r\n:1\r\n$")?;
    let eol = rest.iter().position(|&b| b == b'\r')?;
    let len: usize = std::str::from_utf8(&rest[..eol]).ok()?.parse().ok()?;
    let value = rest.get(eol + 2..eol + 2 + len)?;
    let tail = rest.get(eol + 2 + len..)?.strip_prefix(b"\r\n:")?;
    let ttl: i64 = std::str::from_utf8(tail.strip_suffix(b"\r\n")?)
        .ok()?
        .parse()
        .ok()?;
    Some(Some((value, ttl)))
}

/// A fill's token: unique enough that two fills never take one for the other.
fn token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    shardring::hash::xxh3_64(
        &[
            n.to_le_bytes(),
            nanos.to_le_bytes(),
            u64::from(std::process::id()).to_le_bytes(),
        ]
        .concat(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owners_script_reply_reads_as_a_value_and_its_ttl_or_none() {
        assert_eq!(owner_value(b"*1\r\n:0\r\n"), Some(None));
        assert_eq!(
            owner_value(b"*3\r\n:1\r\n$4\r\na\r\nb\r\n:-1\r\n"),
            Some(Some((&b"a\r\nb"[..], -1)))
        );
        assert_eq!(
            owner_value(b"*3\r\n:1\r\n$0\r\n\r\n:1500\r\n"),
            Some(Some((&b""[..], 1500)))
        );
        assert_eq!(owner_value(b"-WRONGTYPE Operation\r\n"), None);
        assert_eq!(owner_value(b"*3\r\n:1\r\n$9\r\nab\r\n:1\r\n"), None);
    }

    #[test]
    fn a_copys_reply_answers_only_when_it_shows_the_key_is_there() {
        for yes in [
            &b"$1\r\nv\r\n"[..],
            b":3\r\n",
            b",1.5\r\n",
            b"(12345678901234567890\r\n",
            b"#t\r\n",
            b"*2\r\n$-1\r\n$1\r\nv\r\n",
            b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n",
            b"~2\r\n:0\r\n*1\r\n$1\r\nx\r\n",
        ] {
            assert!(found(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"$-1\r\n"[..],
            b"_\r\n",
            b"$0\r\n\r\n",
            b":0\r\n",
            b":-2\r\n",
            b"#f\r\n",
            b"+none\r\n",
            b"-WRONGTYPE Operation against a key\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"%0\r\n",
            b"*2\r\n$-1\r\n_\r\n",
            b"*2\r\n:0\r\n:0\r\n",
            b"*1\r\n*0\r\n",
            b"",
        ] {
            assert!(!found(no), "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn the_reads_a_copy_never_answers_are_listed_sorted() {
        assert!(OWNER_ONLY.windows(2).all(|w| w[0] < w[1]), "{OWNER_ONLY:?}");
    }

    #[test]
    fn a_copys_ttl_is_the_owners_within_its_lifetime_and_never_none() {
        let most = crate::split::COPY_LIFETIME.as_millis() as i64;
        assert_eq!(copy_ttl(-1), most);
        assert_eq!(copy_ttl(0), 1);
        assert_eq!(copy_ttl(1500), 1500.min(most));
        assert_eq!(copy_ttl(most * 10), most);
    }

    #[test]
    fn a_writes_deletes_go_to_each_copy_server_once_with_each_keys_reservation() {
        let deletes = copy_deletes([(&b"a"[..], &[1usize, 2][..]), (&b"b"[..], &[2usize][..])]);
        assert_eq!(deletes.len(), 2);
        assert_eq!(deletes[0].0, 1);
        assert_eq!(
            deletes[0].1,
            Request::from_args(&[&b"DEL"[..], b"a", b"shardring:split-fill:a"]).frame
        );
        assert_eq!(
            deletes[1].1,
            Request::from_args(&[
                &b"DEL"[..],
                b"a",
                b"shardring:split-fill:a",
                b"b",
                b"shardring:split-fill:b"
            ])
            .frame
        );
    }
}
