//! The gutter pool on the memcached protocol: a write sent to a gutter server has its TTL capped, so the
//! gutter only holds a dead server's keys for moments and a value written there cannot outlive the
//! outage by much (the gutter is not invalidated when the server returns).
//!
//! Capped: `set`/`add`/`replace`/`append`/`prepend`/`cas` (the exptime token), `touch`, one-server
//! `gat`/`gats`, and `ms` (its `T` flag, added when absent). memcached's TTL rules apply: 0 means no
//! expiry (capped to the cap), a negative TTL expires at once (kept), a TTL over 30 days is an absolute
//! Unix time (turned into the seconds left, then capped).

use bytes::{Bytes, BytesMut};

use super::THIRTY_DAYS;

/// The TTL a value stored in the gutter gets, in seconds from now (negative: expired at once).
pub(in crate::protocol::memcache) fn capped(ttl: i64, cap: u32, now: u64) -> i64 {
    let cap = i64::from(cap);
    match ttl {
        t if t < 0 => t,
        0 => cap,
        t if t <= THIRTY_DAYS => t.min(cap),
        t => {
            let left = t - i64::try_from(now).unwrap_or(i64::MAX);
            if left <= 0 {
                -1
            } else {
                left.min(cap)
            }
        }
    }
}

/// `frame` with its TTL capped to `cap` seconds, or `frame` itself for a command without a TTL (or a
/// TTL token that does not parse: the server will refuse it as it would have anyway).
pub(in crate::protocol::memcache) fn cap_ttl(frame: &Bytes, cap: u32) -> Bytes {
    let Some(eol) = memchr::memmem::find(frame, b"\r\n") else {
        return frame.clone();
    };
    let mut tokens: Vec<Vec<u8>> = frame[..eol]
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let now = crate::metrics::unix_time();
    let ttl_at = match tokens.first().map(Vec::as_slice) {
        Some(b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas") => Some(3),
        Some(b"touch") => Some(2),
        Some(b"gat" | b"gats") => Some(1),
        Some(b"ms") => None,
        _ => return frame.clone(),
    };
    match ttl_at {
        Some(i) => {
            let Some(ttl) = tokens
                .get(i)
                .and_then(|t| std::str::from_utf8(t).ok())
                .and_then(|t| t.parse::<i64>().ok())
            else {
                return frame.clone();
            };
            tokens[i] = capped(ttl, cap, now).to_string().into_bytes();
        }
        None => {
            // ms <key> <datalen> <flags>*: the T flag is the TTL.
            let at = tokens.iter().skip(3).position(|t| t.first() == Some(&b'T'));
            match at {
                Some(p) => {
                    let ttl = std::str::from_utf8(&tokens[p + 3][1..])
                        .ok()
                        .and_then(|t| t.parse::<i64>().ok())
                        .unwrap_or(0);
                    tokens[p + 3] = format!("T{}", capped(ttl, cap, now)).into_bytes();
                }
                None => tokens.push(format!("T{cap}").into_bytes()),
            }
        }
    }
    let mut out = BytesMut::with_capacity(frame.len() + 16);
    out.extend_from_slice(&tokens.join(&b' '));
    out.extend_from_slice(&frame[eol..]);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_capped_by_memcacheds_rules() {
        let now = 1_800_000_000;
        assert_eq!(capped(0, 10, now), 10, "no expiry becomes the cap");
        assert_eq!(capped(5, 10, now), 5);
        assert_eq!(capped(3600, 10, now), 10);
        assert_eq!(capped(-1, 10, now), -1, "expired stays expired");
        assert_eq!(
            capped(now as i64 + 4, 10, now),
            4,
            "absolute times count from now"
        );
        assert_eq!(capped(now as i64 + 4000, 10, now), 10);
        assert_eq!(
            capped(now as i64 - 5, 10, now),
            -1,
            "an absolute time past is expired"
        );
    }

    #[test]
    fn frames_get_the_capped_ttl_and_keep_their_data() {
        let cap = |f: &'static [u8]| cap_ttl(&Bytes::from_static(f), 10);
        assert_eq!(
            &cap(b"set k 5 0 3\r\nabc\r\n")[..],
            b"set k 5 10 3\r\nabc\r\n"
        );
        assert_eq!(
            &cap(b"cas k 5 7 3 99\r\nabc\r\n")[..],
            b"cas k 5 7 3 99\r\nabc\r\n"
        );
        assert_eq!(&cap(b"touch k 3600\r\n")[..], b"touch k 10\r\n");
        assert_eq!(&cap(b"gat 0 a b\r\n")[..], b"gat 10 a b\r\n");
        assert_eq!(
            &cap(b"ms k 3 T0 F5\r\nabc\r\n")[..],
            b"ms k 3 T10 F5\r\nabc\r\n"
        );
        assert_eq!(
            &cap(b"ms k 3 F5\r\nabc\r\n")[..],
            b"ms k 3 F5 T10\r\nabc\r\n"
        );
        assert_eq!(&cap(b"delete k\r\n")[..], b"delete k\r\n");
        assert_eq!(&cap(b"incr k 1\r\n")[..], b"incr k 1\r\n");
    }
}
