//! A whole reply read into a value: what a client does with a reply (`shardring migrate` reads `SCAN`'s
//! cursor and keys, `DUMP`'s payloads, a script's digests), where the proxy only frames and forwards.
//!
//! Values are read only from replies the [`ReplyFramer`](crate::ReplyFramer) found whole, so reading
//! never waits for more input and never trusts a length it has not checked: the framer has bounded the
//! nesting (so the recursion here), every length and the whole reply. What the framer leaves to the
//! client, reading checks: a double that is not a number, a verbatim string without its `xxx:` format,
//! a streamed map with a key and no value.

use std::fmt;

use crate::error::{bad, ReplyError};
use crate::line::{find_crlf, LineEnd};
use crate::number::parse_redis_int;

/// One RESP2 or RESP3 value.
///
/// Simple and bulk errors are both [`Value::Error`], and RESP2's null bulk string and null array and
/// RESP3's null are all [`Value::Null`]: no caller tells them apart, as Redis's own clients do not. A
/// streamed string is the [`Value::Bulk`] of its chunks, and a streamed aggregate the aggregate of its
/// values.
#[derive(Clone, PartialEq)]
pub enum Value {
    /// `+…`: a simple string (`OK`, `QUEUED`).
    Simple(Vec<u8>),
    /// `-…` or `!…`: an error's text, its code first (`ERR …`, `NOSCRIPT …`). Not UTF-8 is replaced
    /// (`U+FFFD`): Redis's own errors are ASCII.
    Error(String),
    /// `:…`.
    Integer(i64),
    /// `$…`: a bulk string (binary), or the chunks of a streamed one (`$?`) joined.
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or `_`.
    Null,
    /// `*…`.
    Array(Vec<Value>),
    /// `#t` or `#f`.
    Boolean(bool),
    /// `,…`: `inf`, `-inf` and `nan` included.
    Double(f64),
    /// `(…`: an integer too large for [`Value::Integer`], as its decimal digits (`-` first when
    /// negative).
    BigNumber(String),
    /// `=…`: a verbatim string, its three-letter format (`txt`, `mkd`) apart from its text.
    Verbatim {
        /// `txt` or `mkd`.
        format: [u8; 3],
        /// The text after `xxx:`.
        text: Vec<u8>,
    },
    /// `%…`: the key and value pairs, in the order sent.
    Map(Vec<(Value, Value)>),
    /// `~…`: the members, in the order sent.
    Set(Vec<Value>),
    /// `>…`: out-of-band data (a pub/sub message, a client-side caching invalidation), answering no
    /// request.
    Push(Vec<Value>),
    /// `|…`: attributes (key and value pairs about the reply, such as a key's popularity), then the value
    /// they describe.
    Attributed {
        /// The attributes' pairs.
        attributes: Vec<(Value, Value)>,
        /// The reply itself.
        value: Box<Value>,
    },
}

impl Value {
    /// The error's text, when it is one.
    pub fn error(&self) -> Option<&str> {
        match self {
            Value::Error(e) => Some(e),
            _ => None,
        }
    }

    /// The integer, when it is one.
    pub fn integer(&self) -> Option<i64> {
        match self {
            Value::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a bulk or simple string.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(b) | Value::Simple(b) => Some(b),
            _ => None,
        }
    }

    /// The text of a bulk or simple string, when it is UTF-8: for a client that compares or parses a
    /// string as text (a Sentinel's field names, addresses and epochs), where bytes that are not UTF-8
    /// are no name or number at all rather than one with `U+FFFD` in it.
    pub fn text(&self) -> Option<&str> {
        self.bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// Whether it is the simple string `s` (`OK`, `NOKEY`).
    pub fn is_simple(&self, s: &str) -> bool {
        matches!(self, Value::Simple(b) if b == s.as_bytes())
    }

    /// Reads `reply`, one whole reply as a [`ReplyFramer`](crate::ReplyFramer) framed it.
    ///
    /// # Errors
    /// A [`ReplyError`] for what framing leaves to the client (see the module's docs), or for bytes the
    /// framer would not have framed.
    pub(crate) fn from_framed(reply: &[u8]) -> Result<Value, ReplyError> {
        let mut at = 0;
        let value = read(reply, &mut at)?;
        if at != reply.len() {
            return Err(bad("bytes after the reply"));
        }
        Ok(value)
    }
}

/// Strings of up to this many bytes are shown in [`Value`]'s `Debug`; longer ones by their length (a
/// `DUMP` payload of megabytes in a test's failure message helps nobody).
const DEBUG_BYTES: usize = 64;

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Simple(b) => write!(f, "+{}", String::from_utf8_lossy(b)),
            Value::Error(e) => write!(f, "-{e}"),
            Value::Integer(n) => write!(f, ":{n}"),
            Value::Bulk(b) if b.len() > DEBUG_BYTES => write!(f, "${} bytes", b.len()),
            Value::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::Null => write!(f, "nil"),
            Value::Array(a) => f.debug_list().entries(a).finish(),
            Value::Boolean(b) => write!(f, "#{}", if *b { 't' } else { 'f' }),
            Value::Double(d) => write!(f, ",{d}"),
            Value::BigNumber(n) => write!(f, "({n}"),
            Value::Verbatim { format, text } if text.len() > DEBUG_BYTES => write!(
                f,
                "={}:{} bytes",
                String::from_utf8_lossy(format),
                text.len()
            ),
            Value::Verbatim { format, text } => write!(
                f,
                "={}:{:?}",
                String::from_utf8_lossy(format),
                String::from_utf8_lossy(text)
            ),
            Value::Map(pairs) => f
                .debug_map()
                .entries(pairs.iter().map(|(k, v)| (k, v)))
                .finish(),
            Value::Set(s) => f.debug_set().entries(s).finish(),
            Value::Push(p) => {
                write!(f, ">")?;
                f.debug_list().entries(p).finish()
            }
            Value::Attributed { attributes, value } => {
                write!(f, "|")?;
                f.debug_map()
                    .entries(attributes.iter().map(|(k, v)| (k, v)))
                    .finish()?;
                write!(f, " {value:?}")
            }
        }
    }
}

/// The line starting at `*at`, without its `\r\n`; `*at` moves past it.
fn line<'a>(b: &'a [u8], at: &mut usize) -> Result<&'a [u8], ReplyError> {
    // The framer bounded every line: no limit again here.
    let LineEnd::At(cr) = find_crlf(b, *at, usize::MAX) else {
        return Err(bad("truncated reply"));
    };
    let line = &b[*at..cr];
    *at = cr + 2;
    Ok(line)
}

/// `len` bytes of data at `*at` and the `\r\n` after them; `*at` moves past both.
fn data<'a>(b: &'a [u8], at: &mut usize, len: usize) -> Result<&'a [u8], ReplyError> {
    let end = at.checked_add(len).ok_or(bad("bad bulk length"))?;
    let data = b.get(*at..end).ok_or(bad("truncated reply"))?;
    if b.get(end..end.saturating_add(2)) != Some(b"\r\n".as_slice()) {
        return Err(bad("bulk data not ended by \\r\\n"));
    }
    *at = end + 2;
    Ok(data)
}

/// A length or count line: `None` for `-1`, RESP2's null.
fn length(line: &[u8], what: &'static str) -> Result<Option<usize>, ReplyError> {
    match parse_redis_int(line) {
        Some(-1) => Ok(None),
        Some(n) => usize::try_from(n).map(Some).map_err(|_| bad(what)),
        None => Err(bad(what)),
    }
}

/// Whether the streamed aggregate being read ends at `*at` (a `.` line); `*at` moves past it if so.
fn streamed_end(b: &[u8], at: &mut usize) -> bool {
    let end = b.get(*at..at.saturating_add(3)) == Some(b".\r\n".as_slice());
    if end {
        *at += 3;
    }
    end
}

/// The value at `*at`; `*at` moves past it.
fn read(b: &[u8], at: &mut usize) -> Result<Value, ReplyError> {
    let kind = *b.get(*at).ok_or(bad("truncated reply"))?;
    *at += 1;
    let line = line(b, at)?;
    let text = || String::from_utf8_lossy(line).into_owned();
    Ok(match kind {
        b'+' => Value::Simple(line.to_vec()),
        b'-' => Value::Error(text()),
        b':' => Value::Integer(parse_redis_int(line).ok_or(bad("bad integer"))?),
        b'_' => Value::Null,
        b'#' => Value::Boolean(line == b"t"),
        b',' => Value::Double(
            std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(bad("bad double"))?,
        ),
        b'(' => Value::BigNumber(text()),
        b'$' if line == b"?" => Value::Bulk(chunks(b, at)?),
        b'$' | b'!' | b'=' => {
            let Some(len) = length(line, "bad bulk length")? else {
                return Ok(Value::Null);
            };
            let data = data(b, at, len)?;
            match kind {
                b'$' => Value::Bulk(data.to_vec()),
                b'!' => Value::Error(String::from_utf8_lossy(data).into_owned()),
                _ => match data {
                    [a, b, c, b':', text @ ..] => Value::Verbatim {
                        format: [*a, *b, *c],
                        text: text.to_vec(),
                    },
                    _ => return Err(bad("verbatim string without its format")),
                },
            }
        }
        b'*' | b'~' | b'>' | b'%' if line == b"?" => {
            let mut values = Vec::new();
            while !streamed_end(b, at) {
                values.push(read(b, at)?);
            }
            aggregate(kind, values)?
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(n) = length(line, "bad aggregate length")? else {
                return Ok(Value::Null);
            };
            let values = match kind {
                b'%' | b'|' => n.checked_mul(2).ok_or(bad("bad aggregate length"))?,
                _ => n,
            };
            // Each value takes at least 3 bytes, so a whole reply bounds the count.
            let mut read_values = Vec::with_capacity(values.min(b.len().saturating_sub(*at) / 3));
            for _ in 0..values {
                read_values.push(read(b, at)?);
            }
            if kind == b'|' {
                Value::Attributed {
                    attributes: pairs(read_values)?,
                    value: Box::new(read(b, at)?),
                }
            } else {
                aggregate(kind, read_values)?
            }
        }
        _ => return Err(bad("unknown type byte")),
    })
}

/// The chunks of a streamed string (`;<n>` headers until `;0`), joined.
fn chunks(b: &[u8], at: &mut usize) -> Result<Vec<u8>, ReplyError> {
    let mut joined = Vec::new();
    loop {
        if b.get(*at) != Some(&b';') {
            return Err(bad("expected a ';' chunk in a streamed string"));
        }
        *at += 1;
        let len = match length(line(b, at)?, "bad chunk length")? {
            Some(0) => return Ok(joined),
            Some(len) => len,
            None => return Err(bad("bad chunk length")),
        };
        joined.extend_from_slice(data(b, at, len)?);
    }
}

/// The aggregate of type `kind` (`*`, `~`, `>`, `%`) holding `values`.
fn aggregate(kind: u8, values: Vec<Value>) -> Result<Value, ReplyError> {
    Ok(match kind {
        b'~' => Value::Set(values),
        b'>' => Value::Push(values),
        b'%' => Value::Map(pairs(values)?),
        _ => Value::Array(values),
    })
}

/// `values` taken two by two, keys first.
fn pairs(values: Vec<Value>) -> Result<Vec<(Value, Value)>, ReplyError> {
    if !values.len().is_multiple_of(2) {
        return Err(bad("a map key without its value"));
    }
    let mut pairs = Vec::with_capacity(values.len() / 2);
    let mut values = values.into_iter();
    while let (Some(k), Some(v)) = (values.next(), values.next()) {
        pairs.push((k, v));
    }
    Ok(pairs)
}
