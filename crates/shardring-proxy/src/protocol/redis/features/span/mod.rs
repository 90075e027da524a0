//! The commands of the whole keyspace, across every server of a pool: what users of every Redis
//! proxy ask for, and what a sharded keyspace can answer soundly when each command keeps the promise
//! Redis makes for it.
//!
//! | command | servers | answer |
//! |---|---|---|
//! | `SCAN cursor [MATCH p] [COUNT n] [TYPE t]` | one at a time, in index order | the server's keys; a cursor naming the server and its own cursor ([`cursor`]) |
//! | `KEYS pattern` | every server holding keys | their arrays concatenated (each key once in a pool with `--replicas`); an error past `--redis-keys-limit` keys |
//! | `DBSIZE` | every server holding keys | the sum of their counts |
//! | `RANDOMKEY` | every server holding keys | a random one of the non-empty servers' keys; nil when all are empty |
//! | `FLUSHDB`/`FLUSHALL [ASYNC\|SYNC]` | every server, those a planned change adds too | `+OK` when all say so, else the first error, naming its server and how many were flushed |
//! | `INFO keyspace` (`all`, `everything`) | every server holding keys | the `db` lines summed (`avg_ttl` weighted by `expires`); the proxy's other sections as the proxy answers them |
//!
//! "Every server holding keys" is the file's servers, ejected or not: a server that cannot answer
//! fails the command with its error, since an answer without its keys would be a wrong one (a
//! `KEYS` missing keys, a `RANDOMKEY` nil from a pool that has keys, a `DBSIZE` short by a
//! server's keys). Inside `MULTI` these commands are refused (a
//! transaction runs on one server). `SELECT` is the proxy's: the pool's `redis_db` only, as the
//! server connections are shared by every client.
//!
//! In a pool with `--replicas`, each key is on several servers: a `SCAN` may return it once per
//! copy (Redis's promise is "at least once"), and `INFO keyspace`, like `DBSIZE`, counts copies.
//!
//! Each command here is a leaf: it takes the request and the pool's scope and returns the parts to
//! send with its state ([`Next`]), then the answer from its replies; the planner makes the rounds.

mod cursor;
mod dbsize;
mod flush;
mod info;
mod keys;
mod random;
mod scan;

use bytes::{BufMut, Bytes, BytesMut};

use super::replicas::Next;
use crate::error::BackendError;
use crate::protocol::redis::command::Span;
use crate::protocol::redis::merge::failure;
use crate::protocol::redis::request::{put_header, Request};
use crate::protocol::redis::settings::Settings;
use crate::protocol::redis::Flavor;
use crate::protocol::route::Placer;
use crate::protocol::{Answer, PartReply};

/// A command across servers between its rounds.
#[derive(Debug)]
pub(crate) enum Spanning {
    /// `SCAN`: which server was asked, and what the next cursor needs.
    Scan(scan::Scanning),
    /// `KEYS`.
    Keys(keys::Listing),
    /// `RANDOMKEY`.
    RandomKey,
    /// `DBSIZE`.
    DbSize,
    /// `FLUSHDB`/`FLUSHALL`.
    Flush(flush::Flushing),
    /// `INFO` with the keyspace section.
    Info(info::Summing),
}

/// What `req`, a command across servers, sends first (or its answer, when it needs no server).
pub(crate) fn plan(
    span: Span,
    req: &Request,
    flavor: Flavor,
    settings: &Settings,
    ctx: &Placer<'_>,
) -> Next<Spanning> {
    let scope = &settings.span;
    match span {
        Span::Info => info::plan(req, flavor, settings, ctx),
        Span::Flush => flush::plan(req, ctx),
        _ if scope.servers == 0 => Next::Answer(Answer::Failed(BackendError::NoServer)),
        Span::Scan => scan::plan(req, settings),
        Span::Keys => Next::Send(
            every(scope.servers, &req.frame),
            Spanning::Keys(keys::Listing {
                limit: scope.keys_limit,
                replicated: ctx.replicas() > 1,
                limits: settings.reply_limits,
            }),
        ),
        Span::RandomKey => Next::Send(every(scope.servers, &req.frame), Spanning::RandomKey),
        Span::DbSize => Next::Send(every(scope.servers, &req.frame), Spanning::DbSize),
    }
}

/// The answer to a command across servers from its round's replies, or its next round.
pub(crate) fn advance(state: Spanning, replies: Vec<PartReply<'_>>) -> Next<Spanning> {
    let answer = match state {
        Spanning::Scan(scanning) => return scan::advance(scanning, &replies),
        Spanning::Keys(listing) => keys::merge(&listing, &replies),
        Spanning::RandomKey => random::merge(&replies, crate::router::random_u64()),
        Spanning::DbSize => dbsize::merge(&replies),
        Spanning::Flush(flushing) => flush::merge(&flushing, &replies),
        Spanning::Info(summing) => return Next::Answer(info::merge(summing, &replies)),
    };
    Next::Answer(Answer::Bytes(answer))
}

/// `frame` to each of the servers `0..servers`.
fn every(servers: usize, frame: &Bytes) -> Vec<(usize, Bytes)> {
    (0..servers).map(|s| (s, frame.clone())).collect()
}

/// A request of `args`, as a server is sent it.
fn frame(args: &[&[u8]]) -> Bytes {
    let size = args.iter().map(|a| a.len() + 16).sum::<usize>() + 16;
    let mut out = BytesMut::with_capacity(size);
    put_header(&mut out, b'*', args.len());
    for a in args {
        put_header(&mut out, b'$', a.len());
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

/// What one server gave: its reply, or the reply that stands for its failure.
enum Got<'a> {
    /// A reply that is not an error.
    Reply(&'a [u8]),
    /// An error reply, or the failure to get one, as the client's error naming the server.
    Error(Bytes),
}

/// `reply` of `server`, with an error (the server's own or the failure to reach it) made the
/// client's, naming the server.
fn got<'a>(reply: &'a PartReply<'_>) -> Got<'a> {
    match &reply.reply {
        Ok(bytes) if is_error(bytes) => Got::Error(named(bytes, reply.server)),
        Ok(bytes) => Got::Reply(bytes),
        Err(e) => {
            let why = e.to_string();
            if why.contains(reply.server) {
                Got::Error(failure(&why))
            } else {
                Got::Error(failure(&format!("{why} (server {})", reply.server)))
            }
        }
    }
}

fn is_error(reply: &[u8]) -> bool {
    matches!(reply.first(), Some(b'-' | b'!'))
}

/// A server's error line `-CODE text`, as `-CODE text (server ADDR)`: its code kept for clients
/// that look at it. A RESP3 blob error (`!`) is passed as it is.
fn named(error: &[u8], server: &str) -> Bytes {
    match error.strip_suffix(b"\r\n") {
        Some(line) if error.first() == Some(&b'-') => {
            let mut out = BytesMut::with_capacity(line.len() + server.len() + 16);
            out.put_slice(line);
            out.put_slice(b" (server ");
            out.put_slice(server.as_bytes());
            out.put_slice(b")\r\n");
            out.freeze()
        }
        _ => Bytes::copy_from_slice(error),
    }
}

/// An aggregate's header `*<n>\r\n` at the front of `reply`: its count and where its elements begin.
fn array_header(reply: &[u8]) -> Option<(u64, usize)> {
    let rest = reply.strip_prefix(b"*")?;
    let end = memchr::memchr(b'\r', rest)?;
    let count = parse_u64(&rest[..end])?;
    (rest.get(end + 1) == Some(&b'\n')).then_some((count, end + 3))
}

/// A bulk or verbatim string's content (`$<n>\r\n…\r\n`, `=<n>\r\ntxt:…\r\n`, the `txt:` left out).
fn string_content(reply: &[u8]) -> Option<&[u8]> {
    let kind = *reply.first()?;
    if kind != b'$' && kind != b'=' {
        return None;
    }
    let end = memchr::memchr(b'\r', reply)?;
    let len = usize::try_from(parse_u64(&reply[1..end])?).ok()?;
    let body = reply.get(end + 2..end + 2 + len)?;
    if kind == b'=' {
        return body.get(4..);
    }
    Some(body)
}

/// A decimal number of ASCII digits only, that fits 64 bits.
fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests;
