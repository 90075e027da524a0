//! The few RESP2 values a Sentinel sends, decoded from one whole reply, and the commands sent to it.
//!
//! Where a reply ends is the proxy's own reply framer's business ([`ReplyFramer`], with small limits:
//! see [`LIMITS`]); this only turns one framed reply into a [`Value`]. It never panics and never trusts
//! a length: a value that does not fit in the reply, or a RESP3 type (a Sentinel is never sent `HELLO
//! 3`), is an error.
//!
//! [`ReplyFramer`]: crate::protocol::redis::ReplyFramer

use crate::protocol::redis::{parse_redis_int, ReplyLimits};

/// The largest Sentinel reply read: a master's address, a subscription confirmation or an event's
/// message is well under 1 KiB; anything near this is a confused or hostile peer, and is refused before
/// more of it is buffered.
pub(crate) const MAX_REPLY: usize = 64 << 10;

/// The framer's limits for Sentinel replies: none is nested more than two deep (a message is an array
/// of strings), none is longer than [`MAX_REPLY`].
pub(crate) const LIMITS: ReplyLimits = ReplyLimits {
    max_bulk_len: MAX_REPLY,
    max_depth: 4,
    max_reply_len: MAX_REPLY,
    max_line_len: MAX_REPLY,
};

/// One RESP2 value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// `+…`.
    Simple(String),
    /// `-…`: an error reply, its text.
    Error(String),
    /// `:…`.
    Integer(i64),
    /// `$…`.
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`.
    Nil,
    /// `*…`.
    Array(Vec<Value>),
}

impl Value {
    /// The value as text when it is a simple or bulk string.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Value::Simple(s) => Some(s),
            Value::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

/// Decodes `reply`, which must be exactly one value.
///
/// # Errors
/// What is wrong, when `reply` is not exactly one RESP2 value nested at most [`LIMITS`]' depth.
pub(crate) fn decode(reply: &[u8]) -> Result<Value, &'static str> {
    let mut at = 0;
    let value = value(reply, &mut at, 0)?;
    if at != reply.len() {
        return Err("bytes after the reply");
    }
    Ok(value)
}

fn value(b: &[u8], at: &mut usize, depth: usize) -> Result<Value, &'static str> {
    if depth >= LIMITS.max_depth {
        return Err("nested too deep");
    }
    let kind = *b.get(*at).ok_or("truncated reply")?;
    *at += 1;
    let line = line(b, at)?;
    match kind {
        b'+' => Ok(Value::Simple(String::from_utf8_lossy(line).into_owned())),
        b'-' => Ok(Value::Error(String::from_utf8_lossy(line).into_owned())),
        b':' => parse_redis_int(line)
            .map(Value::Integer)
            .ok_or("bad integer"),
        b'$' => {
            let len = match parse_redis_int(line) {
                Some(-1) => return Ok(Value::Nil),
                Some(n) => usize::try_from(n).map_err(|_| "bad bulk length")?,
                None => return Err("bad bulk length"),
            };
            let end = at.checked_add(len).ok_or("bad bulk length")?;
            let data = b.get(*at..end).ok_or("truncated reply")?;
            if b.get(end..end.saturating_add(2)) != Some(b"\r\n".as_slice()) {
                return Err("bulk data not ended by \\r\\n");
            }
            *at = end + 2;
            Ok(Value::Bulk(data.to_vec()))
        }
        b'*' => {
            let n = match parse_redis_int(line) {
                Some(-1) => return Ok(Value::Nil),
                Some(n) => usize::try_from(n).map_err(|_| "bad array length")?,
                None => return Err("bad array length"),
            };
            // Each value takes at least 3 bytes: a count the reply cannot hold allocates nothing.
            if n > b.len().saturating_sub(*at) / 3 {
                return Err("truncated reply");
            }
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                values.push(value(b, at, depth + 1)?);
            }
            Ok(Value::Array(values))
        }
        _ => Err("not a RESP2 value"),
    }
}

/// The line starting at `*at`, without its `\r\n`; `*at` moves past it.
fn line<'a>(b: &'a [u8], at: &mut usize) -> Result<&'a [u8], &'static str> {
    let rest = b.get(*at..).ok_or("truncated reply")?;
    let cr = memchr::memchr(b'\r', rest).ok_or("truncated reply")?;
    if rest.get(cr + 1) != Some(&b'\n') {
        return Err("line not ended by \\r\\n");
    }
    *at += cr + 2;
    Ok(&rest[..cr])
}

/// Appends the command `args` to `out`, as an array of bulk strings.
pub(crate) fn command(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// `host:port` for an address a Sentinel names as an IP (or hostname) and a port, with an IPv6
/// address in brackets (`[::1]:6379`), as a connect takes it.
///
/// # Errors
/// What is wrong, when the host is empty or has spaces, or the port is not 1 to 65535.
pub(crate) fn host_port(host: &str, port: &str) -> Result<String, &'static str> {
    if host.is_empty()
        || host
            .bytes()
            .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
    {
        return Err("bad host");
    }
    let port: u16 = port.parse().ok().filter(|&p| p != 0).ok_or("bad port")?;
    if host.contains(':') && !host.starts_with('[') {
        Ok(format!("[{host}]:{port}"))
    } else {
        Ok(format!("{host}:{port}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::redis::ReplyFramer;

    #[test]
    fn the_replies_a_sentinel_sends_decode() {
        let bulk = |s: &str| Value::Bulk(s.as_bytes().to_vec());
        let cases: &[(&[u8], Value)] = &[
            (b"+OK\r\n", Value::Simple("OK".into())),
            (
                b"-WRONGPASS invalid username-password pair\r\n",
                Value::Error("WRONGPASS invalid username-password pair".into()),
            ),
            (b":3\r\n", Value::Integer(3)),
            (b"$-1\r\n", Value::Nil),
            (b"*-1\r\n", Value::Nil),
            (b"$0\r\n\r\n", bulk("")),
            (
                b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n",
                Value::Array(vec![bulk("127.0.0.1"), bulk("6379")]),
            ),
            (
                b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n",
                Value::Array(vec![
                    bulk("subscribe"),
                    bulk("+switch-master"),
                    Value::Integer(1),
                ]),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                decode(input).as_ref(),
                Ok(want),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// Every malformed reply is an error, from the framer or the decoder, and none panics.
    #[test]
    fn malformed_replies_are_errors() {
        let cases: &[&[u8]] = &[
            b"?what\r\n",
            b"$5\r\nab\r\n",
            b"$2\r\nabcd\r\n",
            b"$-2\r\n",
            b"$x\r\n",
            b"*-2\r\n",
            b"*99999999999999999999\r\n",
            b":12a\r\n",
            b"+OK\rX",
            b"%1\r\n+a\r\n+b\r\n",
            b"_\r\n",
            b">2\r\n+a\r\n+b\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n+deep\r\n",
            b"+OK\r\n+extra\r\n",
            b"",
        ];
        for input in cases {
            let framed = ReplyFramer::new(LIMITS).frame(input);
            let decoded = decode(input);
            assert!(
                framed.is_err() || decoded.is_err(),
                "{} was accepted: {framed:?} {decoded:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn a_reply_over_the_limit_is_refused_before_it_is_read() {
        let header = format!("${}\r\n", MAX_REPLY + 1);
        assert!(ReplyFramer::new(LIMITS).frame(header.as_bytes()).is_err());
        let line = vec![b'+'; MAX_REPLY + 2];
        assert!(ReplyFramer::new(LIMITS).frame(&line).is_err());
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        command(&mut out, &["AUTH", "sécret"]);
        assert_eq!(out, b"*2\r\n$4\r\nAUTH\r\n$7\r\ns\xc3\xa9cret\r\n");
    }

    #[test]
    fn addresses_are_host_port_with_ipv6_in_brackets() {
        assert_eq!(
            host_port("10.0.0.1", "6380").as_deref(),
            Ok("10.0.0.1:6380")
        );
        assert_eq!(host_port("::1", "6380").as_deref(), Ok("[::1]:6380"));
        assert_eq!(host_port("redis-a", "1").as_deref(), Ok("redis-a:1"));
        for (host, port) in [
            ("", "1"),
            ("a b", "1"),
            ("h", "0"),
            ("h", "65536"),
            ("h", "x"),
        ] {
            assert!(host_port(host, port).is_err(), "{host} {port}");
        }
    }
}
