//! The warm-up's leaf rules (`--warmup-window`): which way a command of a moved key goes, the meta
//! commands that copy a key between its previous and its new server, and how their replies read as
//! the client's answer. The planner's warm-up exchanges (`warmup.rs`, beside the planner) send them.

use bytes::{Bytes, BytesMut};

use crate::protocol::memcache::request::{Command, Request};
use crate::protocol::memcache::response::MetaReply;
use crate::protocol::Answer;

/// How long the reservation of step 1 lives, in seconds.
pub(in crate::protocol::memcache) const RESERVATION_TTL: u32 = 2;

use super::THIRTY_DAYS;

/// How a one-key command of a moved key is sent during a warm-up window.
pub(in crate::protocol::memcache) enum MovedPath {
    /// Its result does not depend on the key's value (`set`, `ms` in set mode without a CAS): to the
    /// new server, after a delete of the old copy.
    Overwrite,
    /// A delete (`delete`, `md` without `C`, `I` or `x`): to both servers at once; it deleted when
    /// either had the key.
    DeleteBoth,
    /// Anything else: copy the old value first, then send the command (the planner's warm-up exchange).
    CopyFirst,
}

/// Which [`MovedPath`] a request of a moved key takes.
pub(in crate::protocol::memcache) fn moved_path(req: &Request) -> MovedPath {
    let eol = memchr::memmem::find(&req.frame, b"\r\n").unwrap_or(req.frame.len());
    let mut tokens = req.frame[..eol]
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty());
    let word = tokens.next().unwrap_or_default();
    let flag = |t: &&[u8], letters: &[u8]| t.first().is_some_and(|c| letters.contains(c));
    match (&req.command, word) {
        (Command::Keyed { .. }, b"set") => MovedPath::Overwrite,
        (Command::Keyed { .. }, b"delete") => MovedPath::DeleteBoth,
        (Command::Meta { .. }, b"ms") => {
            // `ms <key> <datalen> <flags>*`: a plain set unless a mode other than set, or a CAS
            // (compare, or invalidate with one), makes the old value matter.
            let mut flags = tokens.skip(2);
            let depends = flags.any(|t| {
                flag(&t, b"CI") || (flag(&t, b"M") && !matches!(t.get(1), Some(b'S' | b's')))
            });
            if depends {
                MovedPath::CopyFirst
            } else {
                MovedPath::Overwrite
            }
        }
        (Command::Meta { .. }, b"md") => {
            if tokens.skip(1).any(|t| flag(&t, b"CIx")) {
                MovedPath::CopyFirst
            } else {
                MovedPath::DeleteBoth
            }
        }
        _ => MovedPath::CopyFirst,
    }
}

/// A key as meta commands take it: the token, and whether it is base64 (a binary key, the `b` flag).
#[derive(Debug)]
pub(in crate::protocol::memcache) struct MetaKey {
    /// The key, or its base64.
    pub(in crate::protocol::memcache) token: Bytes,
    /// The token is base64.
    pub(in crate::protocol::memcache) base64: bool,
}

impl MetaKey {
    /// The key of `req` (its token `range`) as meta commands take it.
    pub(in crate::protocol::memcache) fn of(
        req: &Request,
        range: &std::ops::Range<usize>,
    ) -> MetaKey {
        MetaKey {
            token: req.frame.slice(range.clone()),
            base64: matches!(req.command, Command::Meta { base64: true, .. }),
        }
    }

    /// `<command> <key>[ <middle>][ b] <flags>\r\n`.
    pub(in crate::protocol::memcache) fn line(
        &self,
        command: &str,
        middle: &str,
        flags: &str,
    ) -> BytesMut {
        let mut b = BytesMut::with_capacity(self.token.len() + middle.len() + flags.len() + 16);
        b.extend_from_slice(command.as_bytes());
        b.extend_from_slice(b" ");
        b.extend_from_slice(&self.token);
        if !middle.is_empty() {
            b.extend_from_slice(b" ");
            b.extend_from_slice(middle.as_bytes());
        }
        if self.base64 {
            b.extend_from_slice(b" b");
        }
        if !flags.is_empty() {
            b.extend_from_slice(b" ");
            b.extend_from_slice(flags.as_bytes());
        }
        b.extend_from_slice(b"\r\n");
        b
    }
}

/// Whether a delete's reply says it deleted (`DELETED`, or `HD` for `md`).
pub(in crate::protocol::memcache) fn deleted(reply: &[u8]) -> bool {
    reply.starts_with(b"DELETED") || reply.starts_with(b"HD")
}

/// The `get` answer for a meta reply: `VALUE <key> <flags> <len>` and the data, then `END`; a miss (or
/// a reservation) is `END`; anything else (an error) as it is.
pub(in crate::protocol::memcache) fn as_get_answer(key: &[u8], reply: &Bytes) -> Answer {
    let Some(m) = MetaReply::parse(reply) else {
        return Answer::Bytes(reply.clone());
    };
    match m.status {
        b"VA" if !m.is_reservation() => {
            let block = value_block(key, &m);
            let mut out = BytesMut::with_capacity(block.len() + 5);
            out.extend_from_slice(&block);
            out.extend_from_slice(b"END\r\n");
            Answer::Bytes(out.freeze())
        }
        b"VA" | b"EN" => Answer::fixed(b"END\r\n"),
        _ => Answer::Bytes(reply.clone()),
    }
}

/// `T` for a copy: the remaining TTL `t` (`-1`: none) as memcached reads an exptime.
pub(in crate::protocol::memcache) fn copy_ttl(t: i64) -> i64 {
    match t {
        t if t < 0 => 0,
        // 0 left would mean "never expires" to memcached: keep it expiring, in a second.
        0 => 1,
        t if t <= THIRTY_DAYS => t,
        t => i64::try_from(crate::metrics::unix_time())
            .unwrap_or(i64::MAX)
            .saturating_add(t),
    }
}

/// A key's `VALUE` block (without `END`) from a meta hit.
pub(in crate::protocol::memcache) fn value_block(key: &[u8], m: &MetaReply<'_>) -> Bytes {
    let flags = m.flag(b'f').unwrap_or(b"0");
    let mut out = BytesMut::with_capacity(key.len() + m.data.len() + 40);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" ");
    out.extend_from_slice(flags);
    out.extend_from_slice(format!(" {}\r\n", m.data.len()).as_bytes());
    out.extend_from_slice(m.data);
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_replies_become_get_answers() {
        let a = as_get_answer(b"k", &Bytes::from_static(b"VA 3 f7 t100 c4\r\nabc\r\n"));
        assert!(matches!(a, Answer::Bytes(b) if &b[..] == b"VALUE k 7 3\r\nabc\r\nEND\r\n"));
        let a = as_get_answer(b"k", &Bytes::from_static(b"VA 0 f0 t-1 c5 W\r\n\r\n"));
        assert!(matches!(a, Answer::Bytes(b) if &b[..] == b"END\r\n"));
        let a = as_get_answer(b"k", &Bytes::from_static(b"VA 0 f0 t-1 c5\r\n\r\n"));
        assert!(
            matches!(a, Answer::Bytes(b) if &b[..] == b"VALUE k 0 0\r\n\r\nEND\r\n"),
            "an empty value is a hit"
        );
        let a = as_get_answer(b"k", &Bytes::from_static(b"EN\r\n"));
        assert!(matches!(a, Answer::Bytes(b) if &b[..] == b"END\r\n"));
    }

    #[test]
    fn only_what_depends_on_the_old_value_is_copied_first() {
        for (line, path) in [
            (&b"set k 0 0 1\r\nx\r\n"[..], "overwrite"),
            (b"ms k 1 T0 F5 q\r\nx\r\n", "overwrite"),
            (b"ms k 1 MS\r\nx\r\n", "overwrite"),
            (b"ms k 1 Ms\r\nx\r\n", "overwrite"),
            (b"ms k 1 MA\r\nx\r\n", "copy"),
            (b"ms k 1 ME\r\nx\r\n", "copy"),
            (b"ms k 1 C12\r\nx\r\n", "copy"),
            (b"ms k 1 I C12\r\nx\r\n", "copy"),
            (b"delete k\r\n", "both"),
            (b"delete k noreply\r\n", "both"),
            (b"md k q O5 k\r\n", "both"),
            (b"md k C12\r\n", "copy"),
            (b"md k I T30\r\n", "copy"),
            (b"md k x\r\n", "copy"),
            (b"append k 0 0 1\r\nx\r\n", "copy"),
            (b"cas k 0 0 1 5\r\nx\r\n", "copy"),
            (b"incr k 1\r\n", "copy"),
            (b"touch k 10\r\n", "copy"),
            (b"mg k v\r\n", "copy"),
            (b"ma k\r\n", "copy"),
            (b"me k\r\n", "copy"),
        ] {
            let got = match moved_path(&Request::from_line(line)) {
                MovedPath::Overwrite => "overwrite",
                MovedPath::DeleteBoth => "both",
                MovedPath::CopyFirst => "copy",
            };
            assert_eq!(got, path, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn copies_keep_the_remaining_ttl_by_memcacheds_rules() {
        assert_eq!(copy_ttl(-1), 0, "t-1: no expiry");
        assert_eq!(copy_ttl(100), 100);
        assert_eq!(copy_ttl(0), 1);
        let far = copy_ttl(THIRTY_DAYS + 10);
        assert!(
            far > 1_700_000_000,
            "over 30 days is sent as a Unix time: {far}"
        );
    }
}
