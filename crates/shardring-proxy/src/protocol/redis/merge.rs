//! Splitting a multi-key command by server, and merging the servers' replies into the one the client
//! expects.
//!
//! A server that could not answer (dead, timed out, ejected) fails the whole command with one error
//! naming it, as nutcracker and a single-key command do: an `MGET` ([`PartialReads::Refused`], the
//! default), `MSET` and the sums (`DEL`, `EXISTS`, …), since a partial count would be a wrong one. Redis
//! itself never puts an error inside an `MGET` array, and most clients (redis-py among them) hand such an
//! element to the application as if it were the value, so error elements are only given when a pool
//! asks for them ([`PartialReads::Answered`], `--redis-partial-reads`): each failed key an error element
//! (`-ERR <reason>`), never a fake nil, and the other keys their values. Values are passed through as the servers sent them, so a RESP3 connection (whose servers speak
//! RESP3) gets RESP3 nulls (`_`) and a RESP2 one `$-1`.

use bytes::{BufMut, Bytes, BytesMut};
use shardring_resp::{elements, ReplyLimits};

use super::request::{header_len, put_header, put_int, Request};

/// The part of a split request one server gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubRequest {
    /// The server, as `server_of` numbered it.
    pub server: usize,
    /// The request to send it: the command with the keys (and values) it holds, in request order.
    pub frame: Bytes,
    /// Which of the request's keys it holds: positions in the key list (0 for the first key).
    pub keys: KeyList,
}

/// The positions of a part's keys: a few inline (a split over many servers or slots gives each
/// part one or two keys, which no allocation should cost).
pub type KeyList = smallvec::SmallVec<[usize; 4]>;

/// Splits a request whose keys are at argument indexes `keys` (each followed by `step - 1` values) by the
/// server `server_of` places each key on, and within a server by the group it names (a Redis
/// Cluster's slot: a cluster refuses one command of keys in two slots; 0 in other pools). Parts come in
/// the order their first key does; a request whose keys all go to one part is passed on as it is.
pub fn split(
    req: &Request,
    keys: &[usize],
    step: usize,
    mut server_of: impl FnMut(&[u8]) -> (usize, u16),
) -> Vec<SubRequest> {
    let mut groups: Vec<((usize, u16), KeyList)> = Vec::with_capacity(keys.len().min(64));
    for (pos, &arg) in keys.iter().enumerate() {
        let group = server_of(req.arg(arg).unwrap_or_default());
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, held)) => held.push(pos),
            None => groups.push((group, smallvec::smallvec![pos])),
        }
    }
    if let [((server, _), held)] = groups.as_mut_slice() {
        return vec![SubRequest {
            server: *server,
            frame: req.frame.clone(),
            keys: std::mem::take(held),
        }];
    }
    let name = req.arg(0).unwrap_or_default();
    // Each part's exact size, so that the parts are written into one buffer and cut from it: one
    // allocation for all the frames, and one shared count that every copy of one (kept to resend
    // it after a redirection) increments, rather than an allocation a frame and another a copy.
    let sizes: smallvec::SmallVec<[usize; 16]> = groups
        .iter()
        .map(|(_, held)| {
            header_len(1 + held.len() * step)
                + header_len(name.len())
                + name.len()
                + 2
                + held
                    .iter()
                    .map(|&p| key_args_len(req, keys[p], step))
                    .sum::<usize>()
        })
        .collect();
    let mut out = BytesMut::with_capacity(sizes.iter().sum());
    groups
        .into_iter()
        .zip(sizes)
        .map(|(((server, _), held), size)| {
            put_header(&mut out, b'*', 1 + held.len() * step);
            put_bulk(&mut out, name);
            for &p in &held {
                put_key_args(&mut out, req, keys[p], step);
            }
            debug_assert_eq!(out.len(), size);
            SubRequest {
                server,
                frame: out.split().freeze(),
                keys: held,
            }
        })
        .collect()
}

/// Arguments `first..first + count` of `req` as its frame holds them: each with its `$<len>`
/// header and `\r\n`, one after another, since a request's frame is the RESP array of its
/// arguments in order ([`Request`]). `None` for `first` 0 or arguments it does not have.
fn as_sent(req: &Request, first: usize, count: usize) -> Option<&[u8]> {
    let start = req.args.get(first.checked_sub(1)?)?.end + 2;
    let end = req.args.get((first + count).checked_sub(1)?)?.end + 2;
    let bytes = req.frame.get(start..end)?;
    (bytes.first() == Some(&b'$')).then_some(bytes)
}

/// How many bytes [`put_key_args`] writes.
fn key_args_len(req: &Request, first: usize, count: usize) -> usize {
    match as_sent(req, first, count) {
        Some(bytes) => bytes.len(),
        None => (first..first + count)
            .map(|i| {
                let len = req.arg(i).map_or(0, <[u8]>::len);
                header_len(len) + len + 2
            })
            .sum(),
    }
}

/// Writes arguments `first..first + count` of `req` (a key and its values) as bulk strings:
/// copied as the client sent them, headers and all (a decimal header costs more to encode again
/// than the few bytes it is); an argument the request lacks is written empty.
fn put_key_args(out: &mut BytesMut, req: &Request, first: usize, count: usize) {
    match as_sent(req, first, count) {
        Some(bytes) => out.put_slice(bytes),
        None => {
            for i in first..first + count {
                put_bulk(out, req.arg(i).unwrap_or_default());
            }
        }
    }
}

fn put_bulk(out: &mut BytesMut, data: &[u8]) {
    put_header(out, b'$', data.len());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// What one server gave for its part of a split request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// Its whole reply.
    Reply(&'a [u8]),
    /// No reply: why (`server timed out`, `connection refused`, …).
    Failed(&'a str),
}

/// An error reply `-ERR <reason>`, with CR and LF made spaces so it stays one line.
pub fn failure(reason: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(reason.len() + 7);
    out.put_slice(b"-ERR ");
    out.extend(
        reason
            .bytes()
            .map(|c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
    );
    out.put_slice(b"\r\n");
    out.freeze()
}

fn is_error(reply: &[u8]) -> bool {
    matches!(reply.first(), Some(b'-' | b'!'))
}

/// What a split read (`MGET`) answers when some of its keys could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartialReads {
    /// The whole command fails with the first failure, one error naming the server (as nutcracker
    /// answers, and as Redis's own `MGET`, which has no partial answer, lets clients expect).
    #[default]
    Refused,
    /// The keys that could be read get their values, the others an error element each. Clients that
    /// do not look at each element's type (redis-py returns the error object as the value) read
    /// those elements as values: only for clients that check.
    Answered,
}

/// `MGET`: `parts[i]` is what the server holding keys `held[i]` (positions in request order) gave; the
/// values are put back in request order. `key_count` is the request's number of keys. A failed part
/// fails the whole command unless `partial` is [`PartialReads::Answered`].
pub fn merge_values(
    key_count: usize,
    parts: &[(&[usize], Part<'_>)],
    limits: ReplyLimits,
    partial: PartialReads,
) -> Bytes {
    let mut slots: Vec<Option<&[u8]>> = vec![None; key_count];
    let mut owned: Vec<(usize, Bytes)> = Vec::new();
    for (held, part) in parts {
        match part {
            Part::Reply(reply) => match elements(reply, limits) {
                Some(values) if values.len() == held.len() && reply.first() == Some(&b'*') => {
                    for (&pos, range) in held.iter().zip(values) {
                        if let Some(slot) = slots.get_mut(pos) {
                            *slot = Some(&reply[range]);
                        }
                    }
                }
                _ => {
                    // A whole-reply error (`-LOADING`, `-NOAUTH`) stands for each of its keys; anything
                    // else is not an MGET reply.
                    let err = if is_error(reply) {
                        Bytes::copy_from_slice(reply)
                    } else {
                        failure("unexpected reply from server to MGET")
                    };
                    if partial == PartialReads::Refused {
                        return err;
                    }
                    owned.extend(held.iter().map(|&p| (p, err.clone())));
                }
            },
            Part::Failed(reason) => {
                let err = failure(reason);
                if partial == PartialReads::Refused {
                    return err;
                }
                owned.extend(held.iter().map(|&p| (p, err.clone())));
            }
        }
    }
    for (pos, err) in &owned {
        if let Some(slot) = slots.get_mut(*pos) {
            *slot = Some(err);
        }
    }
    let size: usize = slots
        .iter()
        .map(|s| s.map_or(8, <[u8]>::len))
        .sum::<usize>()
        + 16;
    let mut out = BytesMut::with_capacity(size);
    put_header(&mut out, b'*', key_count);
    for slot in slots {
        // Every position is some server's; one missing would be a caller's bug, and is an error element
        // rather than a fake nil.
        out.put_slice(slot.unwrap_or(b"-ERR no server answered for this key\r\n"));
    }
    out.freeze()
}

/// The first error among `parts`, as a reply.
fn first_error(parts: &[Part<'_>]) -> Option<Bytes> {
    parts.iter().find_map(|p| match p {
        Part::Failed(reason) => Some(failure(reason)),
        Part::Reply(r) if is_error(r) => Some(Bytes::copy_from_slice(r)),
        Part::Reply(_) => None,
    })
}

/// `MSET`: `+OK` when every server said `+OK`, else the first error.
pub fn merge_all_ok(parts: &[Part<'_>]) -> Bytes {
    if let Some(err) = first_error(parts) {
        return err;
    }
    if parts.iter().all(|p| *p == Part::Reply(b"+OK\r\n")) {
        Bytes::from_static(b"+OK\r\n")
    } else {
        failure("unexpected reply from server to MSET")
    }
}

/// `DEL`, `UNLINK`, `TOUCH`, `EXISTS`, `DBSIZE`: the servers' integers added up, else the first error.
pub fn merge_sum(parts: &[Part<'_>]) -> Bytes {
    if let Some(err) = first_error(parts) {
        return err;
    }
    let mut sum: i64 = 0;
    for part in parts {
        let reply = match part {
            Part::Reply(reply) => reply,
            Part::Failed(reason) => return failure(reason),
        };
        let n = reply
            .strip_prefix(b":")
            .and_then(|r| r.strip_suffix(b"\r\n"))
            .and_then(super::parse_redis_int);
        match n.and_then(|n| sum.checked_add(n)) {
            Some(s) => sum = s,
            None => return failure("unexpected reply from server to a counting command"),
        }
    }
    let mut out = BytesMut::with_capacity(24);
    out.put_u8(b':');
    put_int(&mut out, sum);
    out.put_slice(b"\r\n");
    out.freeze()
}
