//! The command table: for every command, its arity, where its keys are, and what the proxy does with it.
//! One table drives routing, splitting and refusals (Envoy's redis_proxy keeps one too), so what is
//! supported is read in one place:
//!
//! | action | commands |
//! |---|---|
//! | to the key's server | every single-key command (`GET`, `SET k v GET`, `EXPIRE k 10 NX`, `HGETALL`, …) |
//! | split by server, merged | `MGET` (values in request order), `MSET` (`+OK`), `DEL` `UNLINK` `TOUCH` `EXISTS` (sums) |
//! | to the one server all keys are on, else `-CROSSSLOT` | `SINTER` `SUNIONSTORE` `RPOPLPUSH` `LMOVE` `SMOVE` `PFCOUNT` `PFMERGE` `COPY` `RENAME` `Z*STORE` `EVAL`/`EVALSHA`/`FCALL` with keys, `MSETNX`, `BITOP`, `XREAD`, … |
//! | across every server (`features/span/`) | `SCAN` (a cursor that names the server and its own cursor), `DBSIZE` (summed; a server down fails it), `KEYS` (concatenated, `--redis-keys-limit`), `RANDOMKEY` (a random non-empty server's), `FLUSHDB` `FLUSHALL` (`+OK` when every server says so), `INFO keyspace`/`all`/`everything` (the `db` lines summed) |
//! | to any one server | `LOLWUT`, `TIME`; and a keyed command whose key arguments are malformed (`EVAL s x`), so Redis's own error answers |
//! | by the proxy | `PING` `ECHO` `QUIT` `SELECT` (the pool's `redis_db` only: the server connections are shared, so a client cannot switch them) `AUTH` `HELLO` `RESET` `CLIENT SETNAME/GETNAME/ID/SETINFO/INFO` `COMMAND` `INFO` (other sections than the keyspace) `CONFIG GET` |
//! | to the one server all keys are on, on a connection of the client's own | blocking commands: `BLPOP` `BRPOP` `BLMOVE` `BLMPOP` `BRPOPLPUSH` `BZPOPMIN` `BZPOPMAX` `BZMPOP`, `XREAD`/`XREADGROUP … BLOCK` |
//! | a transaction on one server (`features/transaction.rs`) | `MULTI` `EXEC` `DISCARD` `WATCH` `UNWATCH` |
//! | to the channel's server, as a key | `PUBLISH` `SPUBLISH` |
//! | a subscriber's, on connections of its own (`features/pubsub.rs`) | `SUBSCRIBE` `SSUBSCRIBE` `UNSUBSCRIBE` `SUNSUBSCRIBE` on the channel's server; `PSUBSCRIBE` `PUNSUBSCRIBE` on every server |
//! | refused, naming the command | no sound meaning across servers (`SWAPDB` `PUBSUB` …), scripts without keys (`EVAL` with numkeys 0), administration; and the commands that span servers inside `MULTI` (a transaction runs on one server) |
//!
//! Names are matched without regard to case; arities follow Redis 7 (a positive arity is exact, a negative
//! one a minimum, the command name counted), so `wrong number of arguments` is answered here, in Redis's
//! words, before anything is sent.

use bytes::{BufMut, Bytes, BytesMut};

use super::keys::{blocks, find_keys};
pub use super::keys::{KeyArgs, Keys};
use super::request::Request;

/// How the replies of a split (or broadcast) command are merged into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// `MGET`: each server's array, its values put back in the request's order.
    Values,
    /// `MSET`: `+OK` when every server said `+OK`.
    AllOk,
    /// `DEL`, `UNLINK`, `TOUCH`, `EXISTS`: the integers added up.
    Sum,
}

/// The commands the proxy answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// `PING [message]`
    Ping,
    /// `ECHO message`
    Echo,
    /// `QUIT`: `+OK`, then close.
    Quit,
    /// `SELECT db`: `+OK` for the pool's `redis_db`, an error for any other.
    Select,
    /// `AUTH [user] password`, against the pool's `redis_auth`.
    Auth,
    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`
    Hello,
    /// `RESET`: the connection back to RESP2, no name, not authenticated.
    Reset,
    /// `CLIENT SETNAME/GETNAME/ID/SETINFO/INFO`
    Client,
    /// `COMMAND [COUNT|INFO|DOCS …]`, for clients that probe at connect.
    Command,
    /// `INFO [section]`
    Info,
    /// `CONFIG GET`: what clients probe at connect (redis-benchmark asks `save` and `appendonly`).
    Config,
}

/// What the proxy does with a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// To the server of its keys; when they live on different servers, `-CROSSSLOT`.
    Forward,
    /// Each server gets the keys it holds, and the replies are merged.
    Split(Merge),
    /// Answered by the proxy.
    Local(Local),
    /// To any one server: the answer does not depend on keys.
    AnyServer,
    /// A blocking command: to the server of its keys, on a connection of the client's own, so the
    /// connections clients share are not stalled while it waits.
    Block,
    /// One of the commands of a transaction.
    Transaction(Txn),
    /// A subscriber's command (`features/pubsub.rs`).
    PubSub(Sub),
    /// A command of the whole keyspace, across every server (`features/span/`).
    Span(Span),
    /// Refused with an error naming the command and this reason.
    Refuse(&'static str),
}

/// The commands of the whole keyspace that go across every server (`protocol/redis/features/span/`
/// says what each does and why its answer keeps Redis's promises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// `SCAN cursor [MATCH p] [COUNT n] [TYPE t]`: one server at a time, the cursor naming it.
    Scan,
    /// `KEYS pattern`: every server's, concatenated, under the pool's size guard.
    Keys,
    /// `RANDOMKEY`: a random key of a random non-empty server.
    RandomKey,
    /// `DBSIZE`: every server's count, summed; a server down fails it, naming the server.
    DbSize,
    /// `FLUSHDB`/`FLUSHALL [ASYNC|SYNC]`: every server; `+OK` only when all say so.
    Flush,
    /// `INFO [section…]`: the keyspace section summed over the servers when asked for; the rest
    /// the proxy answers itself.
    Info,
}

/// A subscriber's commands (`protocol/redis/features/pubsub.rs` says what each does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sub {
    /// `SUBSCRIBE channel…`: on each channel's server.
    Subscribe,
    /// `SSUBSCRIBE shardchannel…`: on each channel's server.
    SSubscribe,
    /// `PSUBSCRIBE pattern…`: on every server.
    PSubscribe,
    /// `UNSUBSCRIBE [channel…]`
    Unsubscribe,
    /// `SUNSUBSCRIBE [shardchannel…]`
    SUnsubscribe,
    /// `PUNSUBSCRIBE [pattern…]`
    PUnsubscribe,
}

/// The commands of a transaction (`protocol/redis/features/transaction.rs` says what each does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Txn {
    /// `MULTI`: the commands that follow are queued until `EXEC`.
    Multi,
    /// `EXEC`: the queued commands, sent to their server as one transaction.
    Exec,
    /// `DISCARD`: the queued commands dropped.
    Discard,
    /// `WATCH key…`: `EXEC` fails if one of these keys changes first.
    Watch,
    /// `UNWATCH`
    Unwatch,
}

/// One command's entry in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Its name, lower case (as Redis names it in errors).
    pub name: &'static str,
    /// Redis 7's arity: exact when positive, a minimum when negative, the name counted.
    pub arity: i8,
    /// Where its keys are.
    pub keys: Keys,
    /// What the proxy does.
    pub action: Action,
}

impl Spec {
    /// Whether `argc` arguments (the name counted) are what this command takes.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let arity = i64::from(self.arity);
        let argc = argc as i64;
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }
}

const NO_SHARD: &str = "it needs every server's keyspace";
const PUBSUB: &str = "it needs every server's channels";
const ADMIN: &str = "administrative commands go to each server directly";
const CLUSTER: &str = "replication and cluster commands go to each server directly";
const NO_KEYS: &str = "a script without keys cannot be placed: pass the keys it uses";

const K1: Keys = Keys::Range {
    first: 1,
    last: 1,
    step: 1,
};
const K12: Keys = Keys::Range {
    first: 1,
    last: 2,
    step: 1,
};
const K2: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};
const KALL: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 1,
};
const KPAIRS: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 2,
};
const NK1: Keys = Keys::NumKeys { at: 1 };
const NK2: Keys = Keys::NumKeys { at: 2 };
/// Every argument but the last (`BLPOP k1 k2 timeout`).
const KBUTLAST: Keys = Keys::Range {
    first: 1,
    last: -2,
    step: 1,
};

const fn fwd(name: &'static str, arity: i8, keys: Keys) -> Spec {
    Spec {
        name,
        arity,
        keys,
        action: Action::Forward,
    }
}

const fn k1(name: &'static str, arity: i8) -> Spec {
    fwd(name, arity, K1)
}

const fn split(name: &'static str, arity: i8, keys: Keys, merge: Merge) -> Spec {
    Spec {
        name,
        arity,
        keys,
        action: Action::Split(merge),
    }
}

const fn local(name: &'static str, arity: i8, local: Local) -> Spec {
    Spec {
        name,
        arity,
        keys: Keys::None,
        action: Action::Local(local),
    }
}

const fn refuse(name: &'static str, arity: i8, why: &'static str) -> Spec {
    Spec {
        name,
        arity,
        keys: Keys::None,
        action: Action::Refuse(why),
    }
}

const fn block(name: &'static str, arity: i8, keys: Keys) -> Spec {
    Spec {
        name,
        arity,
        keys,
        action: Action::Block,
    }
}

const fn txn(name: &'static str, arity: i8, keys: Keys, txn: Txn) -> Spec {
    Spec {
        name,
        arity,
        keys,
        action: Action::Transaction(txn),
    }
}

const fn pubsub(name: &'static str, arity: i8, sub: Sub) -> Spec {
    Spec {
        name,
        arity,
        keys: Keys::None,
        action: Action::PubSub(sub),
    }
}

const fn span(name: &'static str, arity: i8, span: Span) -> Spec {
    Spec {
        name,
        arity,
        keys: Keys::None,
        action: Action::Span(span),
    }
}

const fn any(name: &'static str, arity: i8) -> Spec {
    Spec {
        name,
        arity,
        keys: Keys::None,
        action: Action::AnyServer,
    }
}

/// Every command the proxy knows, sorted by name (a test checks it).
pub static TABLE: &[Spec] = &[
    k1("append", 3),
    refuse("asking", 1, CLUSTER),
    local("auth", -2, Local::Auth),
    refuse("bgrewriteaof", 1, ADMIN),
    refuse("bgsave", -1, ADMIN),
    k1("bitcount", -2),
    k1("bitfield", -2),
    k1("bitfield_ro", -2),
    fwd(
        "bitop",
        -4,
        Keys::Range {
            first: 2,
            last: -1,
            step: 1,
        },
    ),
    k1("bitpos", -3),
    block("blmove", 6, K12),
    block("blmpop", -5, NK2),
    block("blpop", -3, KBUTLAST),
    block("brpop", -3, KBUTLAST),
    block("brpoplpush", 4, K12),
    block("bzmpop", -5, NK2),
    block("bzpopmax", -3, KBUTLAST),
    block("bzpopmin", -3, KBUTLAST),
    local("client", -2, Local::Client),
    refuse("cluster", -2, CLUSTER),
    local("command", -1, Local::Command),
    local("config", -2, Local::Config),
    fwd("copy", -3, K12),
    span("dbsize", 1, Span::DbSize),
    refuse("debug", -2, ADMIN),
    k1("decr", 2),
    k1("decrby", 3),
    split("del", -2, KALL, Merge::Sum),
    txn("discard", 1, Keys::None, Txn::Discard),
    k1("dump", 2),
    local("echo", 2, Local::Echo),
    fwd("eval", -3, NK2),
    fwd("eval_ro", -3, NK2),
    fwd("evalsha", -3, NK2),
    fwd("evalsha_ro", -3, NK2),
    txn("exec", 1, Keys::None, Txn::Exec),
    split("exists", -2, KALL, Merge::Sum),
    k1("expire", -3),
    k1("expireat", -3),
    k1("expiretime", 2),
    refuse("failover", -1, CLUSTER),
    fwd("fcall", -3, NK2),
    fwd("fcall_ro", -3, NK2),
    span("flushall", -1, Span::Flush),
    span("flushdb", -1, Span::Flush),
    refuse("function", -2, ADMIN),
    k1("geoadd", -5),
    k1("geodist", -4),
    k1("geohash", -2),
    k1("geopos", -2),
    fwd("georadius", -6, Keys::KeyAndStore),
    k1("georadius_ro", -6),
    fwd("georadiusbymember", -5, Keys::KeyAndStore),
    k1("georadiusbymember_ro", -5),
    k1("geosearch", -7),
    fwd("geosearchstore", -8, K12),
    k1("get", 2),
    k1("getbit", 3),
    k1("getdel", 2),
    k1("getex", -2),
    k1("getrange", 4),
    k1("getset", 3),
    k1("hdel", -3),
    local("hello", -1, Local::Hello),
    k1("hexists", 3),
    k1("hget", 3),
    k1("hgetall", 2),
    k1("hincrby", 4),
    k1("hincrbyfloat", 4),
    k1("hkeys", 2),
    k1("hlen", 2),
    k1("hmget", -3),
    k1("hmset", -4),
    k1("hrandfield", -2),
    k1("hscan", -3),
    k1("hset", -4),
    k1("hsetnx", 4),
    k1("hstrlen", 3),
    k1("hvals", 2),
    k1("incr", 2),
    k1("incrby", 3),
    k1("incrbyfloat", 3),
    span("info", -1, Span::Info),
    span("keys", 2, Span::Keys),
    refuse("lastsave", 1, ADMIN),
    refuse("latency", -2, ADMIN),
    fwd("lcs", -3, K12),
    k1("lindex", 3),
    k1("linsert", 5),
    k1("llen", 2),
    fwd("lmove", 5, K12),
    fwd("lmpop", -4, NK1),
    any("lolwut", -1),
    k1("lpop", -2),
    k1("lpos", -3),
    k1("lpush", -3),
    k1("lpushx", -3),
    k1("lrange", 4),
    k1("lrem", 4),
    k1("lset", 4),
    k1("ltrim", 4),
    refuse("memory", -2, ADMIN),
    split("mget", -2, KALL, Merge::Values),
    refuse("migrate", -6, CLUSTER),
    refuse("module", -2, ADMIN),
    refuse("monitor", 1, ADMIN),
    k1("move", 3),
    split("mset", -3, KPAIRS, Merge::AllOk),
    fwd("msetnx", -3, KPAIRS),
    txn("multi", 1, Keys::None, Txn::Multi),
    fwd("object", -2, K2),
    k1("persist", 2),
    k1("pexpire", -3),
    k1("pexpireat", -3),
    k1("pexpiretime", 2),
    k1("pfadd", -2),
    fwd("pfcount", -2, KALL),
    refuse("pfdebug", 3, ADMIN),
    fwd("pfmerge", -2, KALL),
    refuse("pfselftest", 1, ADMIN),
    local("ping", -1, Local::Ping),
    k1("psetex", 4),
    pubsub("psubscribe", -2, Sub::PSubscribe),
    refuse("psync", -3, CLUSTER),
    k1("pttl", 2),
    k1("publish", 3),
    refuse("pubsub", -2, PUBSUB),
    pubsub("punsubscribe", -1, Sub::PUnsubscribe),
    local("quit", -1, Local::Quit),
    span("randomkey", 1, Span::RandomKey),
    refuse("readonly", 1, CLUSTER),
    refuse("readwrite", 1, CLUSTER),
    fwd("rename", 3, K12),
    fwd("renamenx", 3, K12),
    refuse("replconf", -1, CLUSTER),
    refuse("replicaof", 3, CLUSTER),
    local("reset", 1, Local::Reset),
    k1("restore", -4),
    refuse("restore-asking", -4, CLUSTER),
    refuse("role", 1, CLUSTER),
    k1("rpop", -2),
    fwd("rpoplpush", 3, K12),
    k1("rpush", -3),
    k1("rpushx", -3),
    k1("sadd", -3),
    refuse("save", 1, ADMIN),
    span("scan", -2, Span::Scan),
    k1("scard", 2),
    refuse("script", -2, ADMIN),
    fwd("sdiff", -2, KALL),
    fwd("sdiffstore", -3, KALL),
    local("select", 2, Local::Select),
    k1("set", -3),
    k1("setbit", 4),
    k1("setex", 4),
    k1("setnx", 3),
    k1("setrange", 4),
    refuse("shutdown", -1, ADMIN),
    fwd("sinter", -2, KALL),
    fwd("sintercard", -3, NK1),
    fwd("sinterstore", -3, KALL),
    k1("sismember", 3),
    refuse("slaveof", 3, CLUSTER),
    refuse("slowlog", -2, ADMIN),
    k1("smembers", 2),
    k1("smismember", -3),
    fwd("smove", 4, K12),
    fwd("sort", -2, Keys::KeyAndStore),
    k1("sort_ro", -2),
    k1("spop", -2),
    k1("spublish", 3),
    k1("srandmember", -2),
    k1("srem", -3),
    k1("sscan", -3),
    pubsub("ssubscribe", -2, Sub::SSubscribe),
    k1("strlen", 2),
    pubsub("subscribe", -2, Sub::Subscribe),
    k1("substr", 4),
    fwd("sunion", -2, KALL),
    fwd("sunionstore", -3, KALL),
    pubsub("sunsubscribe", -1, Sub::SUnsubscribe),
    refuse("swapdb", 3, NO_SHARD),
    refuse("sync", 1, CLUSTER),
    any("time", 1),
    split("touch", -2, KALL, Merge::Sum),
    k1("ttl", 2),
    k1("type", 2),
    split("unlink", -2, KALL, Merge::Sum),
    pubsub("unsubscribe", -1, Sub::Unsubscribe),
    txn("unwatch", 1, Keys::None, Txn::Unwatch),
    refuse("wait", 3, CLUSTER),
    refuse("waitaof", 4, CLUSTER),
    txn("watch", -2, KALL, Txn::Watch),
    k1("xack", -4),
    k1("xadd", -5),
    k1("xautoclaim", -6),
    k1("xclaim", -6),
    k1("xdel", -3),
    fwd("xgroup", -2, K2),
    fwd("xinfo", -2, K2),
    k1("xlen", 2),
    k1("xpending", -3),
    k1("xrange", -4),
    fwd("xread", -4, Keys::Streams { group: false }),
    fwd("xreadgroup", -7, Keys::Streams { group: true }),
    k1("xrevrange", -4),
    k1("xsetid", -3),
    k1("xtrim", -4),
    k1("zadd", -4),
    k1("zcard", 2),
    k1("zcount", 4),
    fwd("zdiff", -3, NK1),
    fwd("zdiffstore", -4, Keys::DestNumKeys),
    k1("zincrby", 4),
    fwd("zinter", -3, NK1),
    fwd("zintercard", -3, NK1),
    fwd("zinterstore", -4, Keys::DestNumKeys),
    k1("zlexcount", 4),
    fwd("zmpop", -4, NK1),
    k1("zmscore", -3),
    k1("zpopmax", -2),
    k1("zpopmin", -2),
    k1("zrandmember", -2),
    k1("zrange", -4),
    k1("zrangebylex", -4),
    k1("zrangebyscore", -4),
    fwd("zrangestore", -5, K12),
    k1("zrank", -3),
    k1("zrem", -3),
    k1("zremrangebylex", 4),
    k1("zremrangebyrank", 4),
    k1("zremrangebyscore", 4),
    k1("zrevrange", -4),
    k1("zrevrangebylex", -4),
    k1("zrevrangebyscore", -4),
    k1("zrevrank", -3),
    k1("zscan", -3),
    k1("zscore", 3),
    fwd("zunion", -3, NK1),
    fwd("zunionstore", -4, Keys::DestNumKeys),
];

/// The longest command name in the table, and so the longest worth looking up.
const MAX_NAME: usize = 24;

/// The table's entry for a command name, matched without regard to case.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    index_of(name).map(|i| &TABLE[i])
}

/// The index in [`TABLE`] of `req`'s command, looked up on the first call and kept in the request.
pub fn index_of_request(req: &Request) -> Option<usize> {
    *req.command.get_or_init(|| req.arg(0).and_then(index_of))
}

/// The index in [`TABLE`] of a command name, matched without regard to case.
///
/// Every request looks its command up, so names are compared as integers: each name, lowercased and
/// packed big-endian into three words with zero padding and its length (`packed`), is found by
/// hashing those words into a table of indexes four times as large as [`TABLE`] (most names on
/// their first probe), then comparing at most three words and a length, not bytes. The length
/// goes with the words, so a name with zero bytes at its end (`GET\0`) is not taken for the name
/// without them. (A binary search over the packed names, before, took about 250 instructions a
/// request; scripts/proxy-instructions.)
pub fn index_of(name: &[u8]) -> Option<usize> {
    let key = packed(name)?;
    let index = names_index();
    let mask = index.slots.len() - 1;
    let mut at = index.slot_of(&key);
    loop {
        let i = usize::from(*index.slots.get(at)?).checked_sub(1)?;
        if index.keys.get(i) == Some(&key) {
            return Some(i);
        }
        at = (at + 1) & mask;
    }
}

/// A name, lowercased and packed big-endian into words.
type Packed = ([u64; MAX_NAME / 8], u8);

/// A name, lowercased, packed big-endian into words, and its length; `None` when it is longer than any
/// command's.
fn packed(name: &[u8]) -> Option<Packed> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut bytes = [0u8; MAX_NAME];
    for (d, s) in bytes.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let words = std::array::from_fn(|w| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[w * 8..w * 8 + 8]);
        u64::from_be_bytes(word)
    });
    // At most MAX_NAME (24): fits.
    Some((words, name.len() as u8))
}

/// [`TABLE`]'s names, packed, and an open-addressed table of their indexes.
struct NamesIndex {
    /// Each table name packed as [`packed`] packs it, in the table's order.
    keys: Box<[Packed]>,
    /// A power of two at least four times the table's length: 0 for a free slot, else a table
    /// index plus one; a name's index is at its [`NamesIndex::slot_of`] or the first slots after it.
    slots: Box<[u16]>,
    /// 64 less the bits of a slot's number.
    shift: u32,
}

impl NamesIndex {
    /// Where a packed name's search starts: its words mixed into one and spread by a
    /// multiplication (Fibonacci hashing), the product's high bits the slot.
    fn slot_of(&self, (words, len): &Packed) -> usize {
        let mixed =
            words[0] ^ words[1].rotate_left(21) ^ words[2].rotate_left(42) ^ u64::from(*len);
        (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }
}

fn names_index() -> &'static NamesIndex {
    static INDEX: std::sync::OnceLock<NamesIndex> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let keys: Box<[Packed]> = TABLE
            .iter()
            // Every name fits (a test checks it); one that did not would never match.
            .map(|spec| packed(spec.name.as_bytes()).unwrap_or(([u64::MAX; MAX_NAME / 8], u8::MAX)))
            .collect();
        let len = (keys.len() * 4).next_power_of_two();
        let mut index = NamesIndex {
            keys,
            slots: vec![0u16; len].into_boxed_slice(),
            shift: 64 - len.trailing_zeros(),
        };
        let mask = len - 1;
        for i in 0..index.keys.len() {
            let mut at = index.slot_of(&index.keys[i]);
            while index.slots[at] != 0 {
                at = (at + 1) & mask;
            }
            // The table has far fewer than 65,535 commands (a test checks it).
            index.slots[at] = u16::try_from(i + 1).unwrap_or(u16::MAX);
        }
        index
    })
}

/// Where a request goes, once its keys are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To the server of these keys; when they are on different servers, [`CROSSSLOT`].
    Keys(KeyArgs),
    /// Split by server (keys at these indexes; with `step` 2 each key's value follows it) and merged.
    Split {
        /// How the replies merge.
        merge: Merge,
        /// The keys' argument indexes, in request order.
        keys: Vec<usize>,
        /// 1, or 2 when each key is followed by its value (`MSET`).
        step: usize,
    },
    /// To any one server.
    AnyServer,
    /// Answered by the proxy.
    Local(Local),
    /// A blocking command on the server of these keys (the same server for all, else
    /// [`CROSSSLOT`]), on a connection of the client's own.
    Block(KeyArgs),
    /// A transaction's command, with its keys (`WATCH`'s; none for the others).
    Transaction(Txn, KeyArgs),
    /// A subscriber's command.
    PubSub(Sub),
    /// A command of the whole keyspace, across every server.
    Span(Span),
}

/// A routed request: its table entry and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// The command's entry.
    pub spec: &'static Spec,
    /// Where it goes.
    pub route: Route,
}

impl Routed {
    /// Whether the request is a transaction's or a blocking command (`features/transaction.rs` plans it).
    pub fn in_transaction(&self) -> bool {
        matches!(self.route, Route::Transaction(..) | Route::Block(_))
    }
}

/// `-NOAUTH`, nutcracker's words for a command before `AUTH` on a pool with `redis_auth`.
pub(crate) const NOAUTH: &[u8] = b"-NOAUTH Authentication required\r\n";

/// The error for keys on different servers, in Redis Cluster's words so clients know it
/// (redis-py raises `ClusterCrossSlotError`); a hash tag (`{user1}.a`, `{user1}.b`) puts keys together.
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same server\r\n";

/// Appends `s` to `out` as C's `%.*s` would print it: at most `max` bytes, stopping at a NUL, and with
/// CR and LF made spaces (Redis's `addReplyErrorFormat` does that so the error stays one line).
fn put_c_str(out: &mut BytesMut, s: &[u8], max: usize) -> usize {
    let s = &s[..s.len().min(max)];
    let s = match memchr::memchr(0, s) {
        Some(nul) => &s[..nul],
        None => s,
    };
    for &c in s {
        out.put_u8(if c == b'\r' || c == b'\n' { b' ' } else { c });
    }
    s.len()
}

/// Redis 7's reply to an unknown command:
/// `-ERR unknown command 'foo', with args beginning with: 'a' 'b' ` (the name cut at 128 bytes, the
/// arguments listed while they take under 128 bytes, each cut to what is left of those 128).
pub fn unknown_command(req: &Request) -> Bytes {
    let mut out = BytesMut::with_capacity(200);
    out.put_slice(b"-ERR unknown command '");
    put_c_str(&mut out, req.arg(0).unwrap_or_default(), 128);
    out.put_slice(b"', with args beginning with: ");
    let mut listed = 0;
    for arg in req.arg_slices().skip(1) {
        if listed >= 128 {
            break;
        }
        out.put_u8(b'\'');
        listed += put_c_str(&mut out, arg, 128 - listed) + 3;
        out.put_slice(b"' ");
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// Redis 7's reply to a wrong argument count: `-ERR wrong number of arguments for 'get' command` (the
/// name as Redis spells it: lower case, `client|setname` for a subcommand).
pub fn wrong_arity(full_name: &str) -> Bytes {
    Bytes::from(format!(
        "-ERR wrong number of arguments for '{full_name}' command\r\n"
    ))
}

/// The reply to a refused command: `-ERR KEYS is not supported by the proxy: <why>`.
pub fn refused(spec: &Spec, why: &str) -> Bytes {
    Bytes::from(format!(
        "-ERR {} is not supported by the proxy: {why}\r\n",
        spec.name.to_ascii_uppercase()
    ))
}

/// Finds where a request goes: its table entry and its keys. The error is the reply to send instead —
/// an unknown command, a wrong argument count, a refusal — and never closes the connection.
///
/// # Errors
/// The error reply, in Redis 7's words where Redis has them.
pub fn route(req: &Request) -> Result<Routed, Bytes> {
    let Some(spec) = index_of_request(req).map(|i| &TABLE[i]) else {
        return Err(unknown_command(req));
    };
    if !spec.arity_ok(req.argc()) {
        return Err(wrong_arity(spec.name));
    }
    let route = match spec.action {
        Action::Refuse(why) => return Err(refused(spec, why)),
        Action::Local(local) => Route::Local(local),
        Action::AnyServer => Route::AnyServer,
        Action::Split(merge) => {
            let step = match spec.keys {
                Keys::Range { step, .. } => usize::from(step),
                _ => 1,
            };
            match find_keys(req, spec.keys) {
                Some(keys) => Route::Split {
                    merge,
                    keys: keys.iter().collect(),
                    step,
                },
                None => return Err(wrong_arity(spec.name)),
            }
        }
        Action::Transaction(txn) => match find_keys(req, spec.keys) {
            Some(keys) => Route::Transaction(txn, keys),
            None => return Err(wrong_arity(spec.name)),
        },
        Action::PubSub(sub) => Route::PubSub(sub),
        Action::Span(span) => Route::Span(span),
        Action::Block => match find_keys(req, spec.keys) {
            Some(keys) if !keys.is_empty() => Route::Block(keys),
            // `BLMPOP 0 9 k`: Redis refuses it at once, without blocking.
            Some(_) | None => Route::AnyServer,
        },
        Action::Forward => {
            let streams = matches!(spec.keys, Keys::Streams { .. });
            match find_keys(req, spec.keys) {
                Some(keys) if streams && !keys.is_empty() && blocks(req) => Route::Block(keys),
                Some(keys) if !keys.is_empty() => Route::Keys(keys),
                Some(_) if matches!(spec.keys, Keys::NumKeys { at: 2 }) => {
                    return Err(refused(spec, NO_KEYS))
                }
                // Key arguments Redis will refuse (`EVAL s x`, `ZUNION 0`, `OBJECT HELP`): any server
                // answers in Redis's own words, touching nothing.
                Some(_) | None => Route::AnyServer,
            }
        }
    };
    Ok(Routed { spec, route })
}

#[cfg(test)]
mod index_tests {
    use super::*;

    /// Every name is found within a few probes of where its search starts: the hash spreads the
    /// names, so a lookup stays a probe or two.
    #[test]
    fn every_name_is_near_its_slot() {
        let index = names_index();
        assert!(TABLE.len() < usize::from(u16::MAX));
        let mask = index.slots.len() - 1;
        let mut total = 0;
        for (i, key) in index.keys.iter().enumerate() {
            let start = index.slot_of(key);
            let at = (0..index.slots.len())
                .find(|&d| usize::from(index.slots[(start + d) & mask]) == i + 1)
                .expect("every name has a slot");
            assert!(at < 4, "{} is {at} probes from its slot", TABLE[i].name);
            total += at;
        }
        assert!(
            total * 4 < TABLE.len(),
            "{total} extra probes over {} names",
            TABLE.len()
        );
    }
}
