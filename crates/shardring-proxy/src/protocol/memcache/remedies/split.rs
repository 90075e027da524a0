//! Split keys on the memcached protocol (`--hot-key-split`, `crate::split`): what each command does
//! with a split key, and the delete that keeps a copy from going stale. The planner's split
//! exchanges (`plan/split.rs`) send them.
//!
//! - A plain one-key `get` is the read that spreads: in the `read` phase it goes to the owner or a
//!   copy in turn, a copy that misses filled from the owner (the warm-up's reserve-then-CAS copy).
//! - A command that changes the key goes to the owner, then the key's copies are deleted: every
//!   storage command, `delete`, `incr`/`decr`, `touch`, `gat`/`gats` (they change the TTL; a
//!   multi-key one deletes the copies of every split key it names), `ms`, `md`, `ma`, and an `mg`
//!   with `T` (touch) or `N` (vivify).
//! - Every other read goes to the owner and leaves the copies alone: `gets` and an `mg` (their CAS
//!   values are the owner's, which a later `cas` is checked against), an `me`, a multi-get.

use bytes::{Bytes, BytesMut};

use crate::protocol::memcache::request::{Command, GetKind, MetaKind, Request};

/// What a command does with a split key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::protocol::memcache) enum Use {
    /// A plain one-key `get`: spread in the `read` phase.
    Spread,
    /// Reads the owner's own item: to the owner, the copies left alone.
    OwnerRead,
    /// Changes the key: to the owner, then the copies deleted.
    Write,
}

/// What `req` does with its (split) key.
pub(in crate::protocol::memcache) fn usage(req: &Request) -> Use {
    match &req.command {
        Command::Get {
            kind: GetKind::Get,
            keys,
            more: false,
            ..
        } if keys.len() == 1 => Use::Spread,
        Command::Get {
            kind: GetKind::Gat | GetKind::Gats,
            ..
        } => Use::Write,
        Command::Get { .. } => Use::OwnerRead,
        Command::Keyed { .. } => Use::Write,
        Command::Meta {
            kind: MetaKind::Set | MetaKind::Delete | MetaKind::Arithmetic,
            ..
        } => Use::Write,
        Command::Meta {
            kind: MetaKind::Get,
            ..
        } if touches(req) => Use::Write,
        _ => Use::OwnerRead,
    }
}

/// Whether an `mg` changes its item: a `T` (touch) or `N` (vivify on a miss) flag.
fn touches(req: &Request) -> bool {
    let eol = memchr::memmem::find(&req.frame, b"\r\n").unwrap_or(req.frame.len());
    req.frame[..eol]
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .skip(2)
        .any(|t| matches!(t.first(), Some(b'T' | b'N')))
}

/// The delete of `key` (the routing key's bytes) on a server other than its owner (a split key's
/// copy, a moved key's previous server): `md <key>`, a binary key in base64.
pub(in crate::protocol::memcache) fn delete_line(key: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(key.len() + 10);
    frame.extend_from_slice(b"md ");
    if key.iter().all(|b| b.is_ascii_graphic()) {
        frame.extend_from_slice(key);
    } else {
        use base64::Engine as _;
        frame.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(key)
                .as_bytes(),
        );
        frame.extend_from_slice(b" b");
    }
    frame.extend_from_slice(b"\r\n");
    frame.freeze()
}

/// Whether a copy's reply to [`delete_line`] says the copy is gone (deleted, or not there).
pub(in crate::protocol::memcache) fn gone(reply: &[u8]) -> bool {
    reply.starts_with(b"HD") || reply.starts_with(b"NF")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_reads_spread_reads_the_owner_or_writes() {
        let cases: [(&[u8], Use); 16] = [
            (b"get k\r\n", Use::Spread),
            (b"get k j\r\n", Use::OwnerRead),
            (b"gets k\r\n", Use::OwnerRead),
            (b"gat 10 k\r\n", Use::Write),
            (b"gats 10 k\r\n", Use::Write),
            (b"set k 0 0 1\r\nx\r\n", Use::Write),
            (b"add k 0 0 1 noreply\r\nx\r\n", Use::Write),
            (b"cas k 0 0 1 5\r\nx\r\n", Use::Write),
            (b"incr k 1\r\n", Use::Write),
            (b"touch k 10\r\n", Use::Write),
            (b"delete k\r\n", Use::Write),
            (b"mg k v c\r\n", Use::OwnerRead),
            (b"mg k v T30\r\n", Use::Write),
            (b"mg k N30 v\r\n", Use::Write),
            (b"ms k 1 T0\r\nx\r\n", Use::Write),
            (b"ma k\r\n", Use::Write),
        ];
        for (line, want) in cases {
            let req = Request::from_line(line);
            assert_eq!(usage(&req), want, "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(usage(&Request::from_line(b"md k q\r\n")), Use::Write);
        assert_eq!(usage(&Request::from_line(b"me k\r\n")), Use::OwnerRead);
    }

    #[test]
    fn a_copy_is_deleted_by_its_key_or_its_base64() {
        assert_eq!(&delete_line(b"news:1")[..], b"md news:1\r\n");
        assert_eq!(&delete_line(b"a b")[..], b"md YSBi b\r\n");
        assert!(gone(b"HD\r\n") && gone(b"NF\r\n"));
        assert!(!gone(b"SERVER_ERROR out of memory\r\n"));
    }
}
