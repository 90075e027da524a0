//! Comparing a copy with its source: each key's value and expiry as both servers hold them.
//!
//! Two readings, the cheap one first:
//!
//! - [`dumps`]: `DUMP` and `PTTL` of each key, pipelined. Native commands, about a microsecond a
//!   small key on the server, where the digest script below costs five to six (its `EVALSHA` holds
//!   the server ~130 µs for 20 keys of 32 bytes: BENCHMARKS.md, "migrate (redis): where the
//!   servers' time goes"); each reading of a verify pass is a pause of a live server. Two equal dumps are the same
//!   value. Two different ones need not be different values: a dump is the server's encoding of
//!   the value (a small hash the source holds as a hashtable since it once grew is restored as a
//!   listpack), so
//! - [`digests`], where both dumps exist and differ ([`compare`] and [`settle`] do this): one
//!   `EVALSHA` per batch and server (the script loaded once per connection, loaded again on
//!   `NOSCRIPT`): for each key of `KEYS`, a SHA-1 of its type and a canonical serialisation of its
//!   contents, and its `PTTL`. Canonical
//!   means independent of the server's internal encoding and iteration order, so a value built by
//!   dual writes compares equal to the same value restored from a dump:
//!
//! - string: its bytes; list: `LRANGE 0 -1`; sorted set: `ZRANGE 0 -1 WITHSCORES` (ordered by
//!   score, then member);
//! - hash: `HGETALL` sorted by field; set: `SMEMBERS` sorted (Lua's string order: `strcoll` in the
//!   server's `LC_COLLATE`, the same on servers started alike);
//! - stream: every entry (`XRANGE - +`, ids and fields), the last generated id, and each consumer
//!   group's name, last delivered id and pending count;
//! - any other type (modules): its `DUMP`.
//!
//! Each element is written as `length:bytes`, so no two different values serialise alike. The whole
//! value is read, by either reading: a key of millions of elements blocks its server for the time of
//! that read, and its dump travels to this command.
//!
//! A key's digest is computed under `pcall`: an error on one key (a module type whose `DUMP` fails…)
//! comes back as that key's error, not as the batch's.

use super::conn::{Conn, Pipeline};
use crate::MigrateError;
use shardring_resp::Value;

/// The script (see the module's documentation).
pub const DIGEST_LUA: &str = r#"
local function add(p, s) p[#p + 1] = #s .. ':' .. s end
local function digest(k)
  local t = redis.call('TYPE', k)['ok']
  if t == 'none' then return false end
  if t == 'string' then
    -- The common case, without the table (the same serialisation as `add` would make).
    local v = redis.call('GET', k)
    return redis.sha1hex('string\n' .. #v .. ':' .. v)
  end
  local p = {t, '\n'}
  if t == 'hash' then
    local h = redis.call('HGETALL', k)
    local idx = {}
    for i = 1, #h, 2 do idx[#idx + 1] = i end
    table.sort(idx, function(a, b) return h[a] < h[b] end)
    for _, i in ipairs(idx) do add(p, h[i]); add(p, h[i + 1]) end
  elseif t == 'set' then
    local m = redis.call('SMEMBERS', k)
    table.sort(m)
    for _, v in ipairs(m) do add(p, v) end
  elseif t == 'zset' then
    for _, v in ipairs(redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')) do add(p, v) end
  elseif t == 'list' then
    for _, v in ipairs(redis.call('LRANGE', k, 0, -1)) do add(p, v) end
  elseif t == 'stream' then
    for _, e in ipairs(redis.call('XRANGE', k, '-', '+')) do
      add(p, e[1])
      for _, f in ipairs(e[2]) do add(p, f) end
      add(p, '|')
    end
    local info = redis.call('XINFO', 'STREAM', k)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then add(p, tostring(info[i + 1])) end
    end
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', k)) do
      for i = 1, #g, 2 do
        if g[i] == 'name' or g[i] == 'last-delivered-id' or g[i] == 'pending' then
          add(p, tostring(g[i + 1]))
        end
      end
    end
  else
    add(p, redis.call('DUMP', k))
  end
  return redis.sha1hex(table.concat(p))
end
local out = {}
for _, k in ipairs(KEYS) do
  local ok, d = pcall(digest, k)
  if not ok then
    out[#out + 1] = '!' .. tostring(type(d) == 'table' and d.err or d)
    out[#out + 1] = -2
  else
    out[#out + 1] = d
    out[#out + 1] = redis.call('PTTL', k)
  end
end
return out
"#;

/// One key as one server holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    /// Its dump ([`dumps`]), or the SHA-1 of its type and contents ([`digests`]); `None`: no such
    /// key. Two readings compare only when both are of the same kind.
    pub value: Option<Vec<u8>>,
    /// Its `PTTL` (-1: no expiry).
    pub pttl: i64,
    /// Why the server could not digest it.
    pub error: Option<String>,
}

impl Digest {
    /// Whether `self` (the source's) and `other` (the target's) hold the same value with about the
    /// same expiry: within `slack_ms` (the two `PTTL`s are read at different instants), or both none.
    pub fn same_as(&self, other: &Digest, slack_ms: i64) -> bool {
        self.value == other.value
            && match (self.pttl, other.pttl) {
                (a, b) if a < 0 || b < 0 => a == b,
                (a, b) => (a - b).abs() <= slack_ms,
            }
    }
}

/// The digests of `keys` on `conn`'s server, in order.
///
/// # Errors
/// When the server fails, or the script as a whole does.
pub async fn digests(conn: &mut Conn, keys: &[&[u8]]) -> Result<Vec<Digest>, MigrateError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut reloaded = false;
    loop {
        let sha = match conn.script_sha.clone() {
            Some(sha) => sha,
            None => load(conn).await?,
        };
        // One call for the batch; one a slot on a cluster node (its keys must share a slot).
        let groups = conn.slot_groups(keys);
        let mut p = Pipeline::new();
        for group in &groups {
            let nkeys = group.len().to_string();
            let mut args: Vec<&[u8]> = Vec::with_capacity(group.len() + 3);
            args.extend([&b"EVALSHA"[..], sha.as_bytes(), nkeys.as_bytes()]);
            args.extend(group.iter().map(|&i| keys[i]));
            p.cmd(&args);
        }
        let replies = conn.run(&p).await?;
        if !reloaded
            && replies
                .iter()
                .any(|r| matches!(r, Value::Error(e) if e.starts_with("NOSCRIPT")))
        {
            conn.script_sha = None;
            reloaded = true;
            continue;
        }
        let mut out: Vec<Option<Digest>> = vec![None; keys.len()];
        for (group, reply) in groups.iter().zip(replies) {
            match reply {
                Value::Error(e) => {
                    return Err(conn.refused(format!("the digest script failed: {e}")))
                }
                Value::Array(items) if items.len() == group.len() * 2 => {
                    for (&i, c) in group.iter().zip(items.chunks_exact(2)) {
                        let d = decode(c)
                            .ok_or_else(|| conn.refused(format!("digest script reply {c:?}")))?;
                        out[i] = Some(d);
                    }
                }
                other => {
                    return Err(conn.refused(format!(
                        "the digest script answered {other:?} for {} keys",
                        group.len()
                    )))
                }
            }
        }
        return out
            .into_iter()
            .map(|d| d.ok_or_else(|| conn.refused("the digest script left a key out")))
            .collect();
    }
}

/// `DUMP` and `PTTL` of each of `keys` on `conn`'s server, pipelined: a [`Digest`] whose value is
/// the dump itself (see the module's documentation).
///
/// # Errors
/// When the server fails; a key it refuses to dump is that key's error.
pub async fn dumps(conn: &mut Conn, keys: &[&[u8]]) -> Result<Vec<Digest>, MigrateError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut p = Pipeline::new();
    for k in keys {
        p.cmd(&[&b"DUMP"[..], k]);
        p.cmd(&[&b"PTTL"[..], k]);
    }
    let replies = conn.run(&p).await?;
    replies
        .chunks_exact(2)
        .map(|pair| {
            let [dump, pttl] = pair else {
                return Err(conn.refused("DUMP/PTTL: a reply is missing"));
            };
            let (value, error) = match dump {
                Value::Bulk(v) => (Some(v.clone()), None),
                Value::Null => (None, None),
                Value::Error(e) => (None, Some(format!("DUMP: {e}"))),
                other => return Err(conn.refused(format!("DUMP answered {other:?}"))),
            };
            let pttl = pttl
                .integer()
                .ok_or_else(|| conn.refused(format!("PTTL answered {pttl:?}")))?;
            Ok(Digest { value, pttl, error })
        })
        .collect()
}

/// `keys` read on the source and the target at once, comparable key by key: their dumps, or where
/// both dumps exist and differ, both sides' digests ([`settle`]).
///
/// # Errors
/// When a server fails, or the script does.
pub async fn compare(
    source: &mut Conn,
    target: &mut Conn,
    keys: &[&[u8]],
) -> Result<(Vec<Digest>, Vec<Digest>), MigrateError> {
    let (src, dst) = tokio::join!(dumps(source, keys), dumps(target, keys));
    let (mut src, mut dst) = (src?, dst?);
    settle(source, target, keys, &mut src, &mut dst).await?;
    Ok((src, dst))
}

/// Where both sides have a key and their dumps differ, replaces both readings with the digest
/// script's (read on both at once): the dumps may be one value in two encodings. A key whose
/// dumps are equal, or that one side lacks, keeps its readings.
///
/// # Errors
/// When a server fails, or the script does.
pub async fn settle(
    source: &mut Conn,
    target: &mut Conn,
    keys: &[&[u8]],
    src: &mut [Digest],
    dst: &mut [Digest],
) -> Result<(), MigrateError> {
    let differ: Vec<usize> = (0..keys.len())
        .filter(|&i| {
            let (s, d) = (&src[i], &dst[i]);
            s.value.is_some() && d.value.is_some() && s.value != d.value
        })
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    let which: Vec<&[u8]> = differ.iter().map(|&i| keys[i]).collect();
    let (s, d) = tokio::join!(digests(source, &which), digests(target, &which));
    for ((i, s), d) in differ.into_iter().zip(s?).zip(d?) {
        src[i] = s;
        dst[i] = d;
    }
    Ok(())
}

/// One key's two values.
fn decode(c: &[Value]) -> Option<Digest> {
    let [value, pttl] = c else { return None };
    let pttl = pttl.integer()?;
    Some(match value {
        Value::Null => Digest {
            value: None,
            pttl,
            error: None,
        },
        Value::Bulk(v) if v.first() == Some(&b'!') => Digest {
            value: None,
            pttl,
            error: Some(String::from_utf8_lossy(&v[1..]).into_owned()),
        },
        Value::Bulk(v) => Digest {
            value: Some(v.clone()),
            pttl,
            error: None,
        },
        _ => return None,
    })
}

/// Loads the script into the server's cache, and remembers its SHA-1 on `conn`.
async fn load(conn: &mut Conn) -> Result<String, MigrateError> {
    let reply = conn.call(&["SCRIPT", "LOAD", DIGEST_LUA]).await?;
    match reply.bytes() {
        Some(sha) if reply.error().is_none() => {
            let sha = String::from_utf8_lossy(sha).into_owned();
            conn.script_sha = Some(sha.clone());
            Ok(sha)
        }
        _ => Err(conn.refused(format!("SCRIPT LOAD failed: {reply:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(value: Option<&str>, pttl: i64) -> Digest {
        Digest {
            value: value.map(|v| v.as_bytes().to_vec()),
            pttl,
            error: None,
        }
    }

    #[test]
    fn the_same_value_with_close_expiries_is_the_same() {
        assert!(d(Some("a"), -1).same_as(&d(Some("a"), -1), 2000));
        assert!(d(Some("a"), 10_000).same_as(&d(Some("a"), 8_500), 2000));
        assert!(!d(Some("a"), 10_000).same_as(&d(Some("a"), 7_000), 2000));
        assert!(!d(Some("a"), 10_000).same_as(&d(Some("a"), -1), 2000));
        assert!(!d(Some("a"), -1).same_as(&d(Some("b"), -1), 2000));
        assert!(d(None, -2).same_as(&d(None, -2), 2000));
    }

    #[test]
    fn decodes_a_keys_two_values() {
        let r = |v: Value| decode(&[v, Value::Integer(-1)]);
        assert_eq!(r(Value::Null).unwrap().value, None);
        assert_eq!(
            r(Value::Bulk(b"ab".to_vec())).unwrap().value,
            Some(b"ab".to_vec())
        );
        assert_eq!(
            r(Value::Bulk(b"!boom".to_vec())).unwrap().error.as_deref(),
            Some("boom")
        );
        assert_eq!(r(Value::Integer(3)), None);
    }
}
