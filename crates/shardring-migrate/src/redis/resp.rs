//! RESP2, the part a client needs: commands encoded as arrays of bulk strings, and replies parsed
//! incrementally from a buffer (simple strings, errors, integers, bulk strings, nulls, arrays, nested).
//!
//! Our own, small, because the engine needs nothing else from a client library: pipelining is "write
//! n commands, read n replies". The parser never panics: every length is checked, a reply nested deeper
//! than [`MAX_DEPTH`] or longer than [`MAX_BULK`] is a protocol error, and an incomplete reply is
//! `Ok(None)` (read more and call again).

use std::fmt;

/// The deepest nesting of arrays accepted (Redis's replies here nest at most 3 deep; a hostile or
/// broken peer must not recurse us into a stack overflow).
pub const MAX_DEPTH: usize = 32;
/// The longest bulk string accepted: Redis's own `proto-max-bulk-len` default (512 MB).
pub const MAX_BULK: usize = 512 * 1024 * 1024;
/// The most elements one array may announce (a lie about the count must not allocate gigabytes).
pub const MAX_ARRAY: usize = 64 * 1024 * 1024;

/// One reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(Vec<u8>),
    /// `-ERR …`: the text after the `-`.
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nfoo`.
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`.
    Nil,
    /// `*n` and its elements.
    Array(Vec<Reply>),
}

impl Reply {
    /// The error's text, when it is one.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reply::Error(e) => Some(e),
            _ => None,
        }
    }

    /// The integer, when it is one.
    pub fn integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a bulk or simple string.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) | Reply::Simple(b) => Some(b),
            _ => None,
        }
    }

    /// Whether it is the simple string `s` (`OK`, `NOKEY`).
    pub fn is_simple(&self, s: &str) -> bool {
        matches!(self, Reply::Simple(b) if b == s.as_bytes())
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Simple(b) => write!(f, "+{}", String::from_utf8_lossy(b)),
            Reply::Error(e) => write!(f, "-{e}"),
            Reply::Integer(n) => write!(f, ":{n}"),
            Reply::Bulk(b) if b.len() > 64 => write!(f, "${} bytes", b.len()),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => write!(f, "nil"),
            Reply::Array(a) => f.debug_list().entries(a).finish(),
        }
    }
}

/// Appends the command `args` to `out` as an array of bulk strings.
pub fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    header(out, b'*', args.len());
    for a in args {
        let a = a.as_ref();
        header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends `*n\r\n` or `$n\r\n`.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Why the bytes are not RESP2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a RESP2 reply: {}", self.0)
    }
}

/// Parses one reply from the start of `buf`: `Ok(Some((reply, bytes used)))`, `Ok(None)` when `buf`
/// holds only the start of one.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ParseError> {
    let mut pos = 0;
    Ok(parse_at(buf, &mut pos, 0)?.map(|r| (r, pos)))
}

/// Parses the reply at `*pos`, moving `*pos` past it.
fn parse_at(buf: &[u8], pos: &mut usize, depth: usize) -> Result<Option<Reply>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError(format!("arrays nested deeper than {MAX_DEPTH}")));
    }
    let Some(line) = line(buf, *pos)? else {
        return Ok(None);
    };
    let (kind, text) = match buf.get(*pos..line) {
        Some([k, rest @ ..]) => (*k, rest),
        _ => return Err(ParseError("an empty line".into())),
    };
    let after = line + 2;
    let reply = match kind {
        b'+' => Reply::Simple(text.to_vec()),
        b'-' => Reply::Error(String::from_utf8_lossy(text).into_owned()),
        b':' => Reply::Integer(number(text)?),
        b'$' => {
            let n = number(text)?;
            if n < 0 {
                Reply::Nil
            } else {
                let n = usize::try_from(n).map_err(|_| ParseError("bulk length".into()))?;
                if n > MAX_BULK {
                    return Err(ParseError(format!("a bulk string of {n} bytes")));
                }
                let end = after + n;
                match buf.get(end..end + 2) {
                    None => return Ok(None),
                    Some(b"\r\n") => {}
                    Some(_) => return Err(ParseError("a bulk string not ended by CRLF".into())),
                }
                *pos = end + 2;
                return Ok(Some(Reply::Bulk(buf[after..end].to_vec())));
            }
        }
        b'*' => {
            let n = number(text)?;
            if n < 0 {
                Reply::Nil
            } else {
                let n = usize::try_from(n).map_err(|_| ParseError("array length".into()))?;
                if n > MAX_ARRAY {
                    return Err(ParseError(format!("an array of {n} elements")));
                }
                *pos = after;
                // Capacity bounded by what the buffer could hold (3 bytes an element at least).
                let mut items = Vec::with_capacity(n.min(buf.len().saturating_sub(after) / 3 + 1));
                for _ in 0..n {
                    match parse_at(buf, pos, depth + 1)? {
                        Some(r) => items.push(r),
                        None => return Ok(None),
                    }
                }
                return Ok(Some(Reply::Array(items)));
            }
        }
        other => {
            return Err(ParseError(format!(
                "a reply starting with byte {other:#04x}"
            )))
        }
    };
    *pos = after;
    Ok(Some(reply))
}

/// The index of the `\r` ending the line that starts at `from`, `None` while the buffer does not hold
/// all of it; a `\n` without its `\r` is an error.
fn line(buf: &[u8], from: usize) -> Result<Option<usize>, ParseError> {
    let Some(rest) = buf.get(from..) else {
        return Ok(None);
    };
    match memchr::memchr(b'\n', rest) {
        None => Ok(None),
        Some(i) if i > 0 && rest[i - 1] == b'\r' => Ok(Some(from + i - 1)),
        Some(_) => Err(ParseError("a line ended by LF without CR".into())),
    }
}

/// A decimal integer line.
fn number(text: &[u8]) -> Result<i64, ParseError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ParseError(format!(
                "{:?} is not a number",
                String::from_utf8_lossy(text)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &[u8]) -> Reply {
        let (r, used) = parse(s).unwrap().unwrap();
        assert_eq!(used, s.len(), "{s:?}");
        r
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &["SET", "k", ""]);
        encode(&mut out, &[b"GET".as_slice(), b"a\r\nb"]);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n"
        );
    }

    #[test]
    fn parses_every_kind_of_reply() {
        assert_eq!(one(b"+OK\r\n"), Reply::Simple(b"OK".to_vec()));
        assert_eq!(one(b"-ERR no\r\n"), Reply::Error("ERR no".into()));
        assert_eq!(one(b":-12\r\n"), Reply::Integer(-12));
        assert_eq!(one(b"$5\r\na\r\nbc\r\n"), Reply::Bulk(b"a\r\nbc".to_vec()));
        assert_eq!(one(b"$0\r\n\r\n"), Reply::Bulk(vec![]));
        assert_eq!(one(b"$-1\r\n"), Reply::Nil);
        assert_eq!(one(b"*-1\r\n"), Reply::Nil);
        assert_eq!(one(b"*0\r\n"), Reply::Array(vec![]));
        assert_eq!(
            one(b"*2\r\n$1\r\n0\r\n*3\r\n:1\r\n$-1\r\n*1\r\n+x\r\n"),
            Reply::Array(vec![
                Reply::Bulk(b"0".to_vec()),
                Reply::Array(vec![
                    Reply::Integer(1),
                    Reply::Nil,
                    Reply::Array(vec![Reply::Simple(b"x".to_vec())])
                ])
            ])
        );
    }

    #[test]
    fn a_pipeline_parses_reply_after_reply() {
        let buf = b"+OK\r\n:1\r\n$1\r\nv\r\n";
        let (a, n) = parse(buf).unwrap().unwrap();
        let (b, m) = parse(&buf[n..]).unwrap().unwrap();
        let (c, o) = parse(&buf[n + m..]).unwrap().unwrap();
        assert_eq!(
            (a, b, c),
            (
                Reply::Simple(b"OK".to_vec()),
                Reply::Integer(1),
                Reply::Bulk(b"v".to_vec())
            )
        );
        assert_eq!(n + m + o, buf.len());
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete() {
        let full = b"*3\r\n$3\r\nabc\r\n*2\r\n:5\r\n+OK\r\n$-1\r\n";
        for i in 0..full.len() {
            assert_eq!(parse(&full[..i]), Ok(None), "prefix {i}");
        }
        assert!(parse(full).unwrap().is_some());
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [
            &b"?x\r\n"[..],
            b":abc\r\n",
            b"$abc\r\n",
            b"$3\r\nabcd\r\n",
            b"*x\r\n",
            b"$99999999999999999999\r\n",
            b"$9223372036854775807\r\n",
            b"*9223372036854775807\r\n",
            b"\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: every byte string from a small alphabet up to length 7.
        let alphabet = b"*$:+-1\r\n0x";
        let mut buf = Vec::new();
        fn walk(buf: &mut Vec<u8>, alphabet: &[u8], left: usize) {
            let _ = parse(buf);
            if left == 0 {
                return;
            }
            for &b in alphabet {
                buf.push(b);
                walk(buf, alphabet, left - 1);
                buf.pop();
            }
        }
        walk(&mut buf, alphabet, 6);
    }
}
