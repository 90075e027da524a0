//! The memcached text protocol, as much of it as the experiment forwards: `get <key>` and
//! `set <key> <flags> <exptime> <bytes>` requests, and the replies they get. Pure functions over byte
//! slices, no I/O, so both data paths share them and the tests can feed them any split of any input.
//!
//! "Incomplete" is a normal answer (`Ok(None)`): the caller reads more and asks again. Anything else the
//! experiment does not forward (other commands, multi-key `get`, `noreply`) is an error, and the client
//! connection is closed after the answers before it: the evaluation is about the I/O path, not coverage.

use std::fmt;
use std::ops::Range;

/// The longest command line accepted (memcached's key limit is 250 bytes; a `set` line is far shorter
/// than this). Past it without a line end, the input is refused rather than buffered without bound.
pub const MAX_LINE: usize = 2048;

/// The largest value accepted in a `set` or in a `get` reply (memcached's default item size limit).
pub const MAX_VALUE: usize = 1 << 20;

/// The longest key memcached takes.
const MAX_KEY: usize = 250;

/// How a server's reply to a request is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// `VALUE … END` or a bare `END` (or an error line).
    Get,
    /// One status line (`STORED`, `NOT_STORED`, an error …).
    Store,
}

/// One complete request at the front of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Bytes of the whole request, data block included: what is forwarded, and consumed.
    pub len: usize,
    /// Where the key is inside those bytes: what is routed on.
    pub key: Range<usize>,
    /// How to frame the reply.
    pub kind: ReplyKind,
}

/// Why a request (or a reply) cannot be forwarded. The connection is closed after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// No line end within [`MAX_LINE`] bytes.
    LineTooLong,
    /// A command other than single-key `get` and `set` without `noreply`.
    Unsupported,
    /// Wrong number of fields, a bad number, a key too long.
    BadFormat,
    /// A value longer than [`MAX_VALUE`].
    TooLarge,
    /// A data block not followed by `\r\n`, or a reply not ending as the protocol says.
    BadData,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::LineTooLong => "line too long",
            Malformed::Unsupported => "command not supported by this experiment",
            Malformed::BadFormat => "bad command line format",
            Malformed::TooLarge => "object too large",
            Malformed::BadData => "bad data chunk",
        })
    }
}

/// The first line of `buf` without its `\r\n`, and the length with it; `Ok(None)` when incomplete.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, Malformed> {
    match memchr::memchr(b'\n', &buf[..buf.len().min(MAX_LINE)]) {
        Some(nl) if nl > 0 && buf[nl - 1] == b'\r' => Ok(Some((&buf[..nl - 1], nl + 1))),
        Some(_) => Err(Malformed::BadFormat),
        None if buf.len() >= MAX_LINE => Err(Malformed::LineTooLong),
        None => Ok(None),
    }
}

/// A decimal field.
fn number<T: std::str::FromStr>(field: &[u8]) -> Result<T, Malformed> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Malformed::BadFormat)
}

/// `len` bytes of data after a line of `line_len` bytes, then `\r\n`: the total, or `Ok(None)` when not
/// all there yet.
fn data_block(buf: &[u8], line_len: usize, len: usize) -> Result<Option<usize>, Malformed> {
    if len > MAX_VALUE {
        return Err(Malformed::TooLarge);
    }
    let end = line_len + len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(Malformed::BadData);
    }
    Ok(Some(end))
}

/// Decodes the request at the front of `buf`.
///
/// # Errors
/// [`Malformed`] when it cannot be forwarded; the stream is not resynchronised.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, Malformed> {
    let Some((text, line_len)) = line(buf)? else {
        return Ok(None);
    };
    let mut fields = text.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let command = fields.next().ok_or(Malformed::BadFormat)?;
    let key = fields.next().ok_or(Malformed::BadFormat)?;
    if key.len() > MAX_KEY {
        return Err(Malformed::BadFormat);
    }
    // Where the key sits in `buf`: both are slices of it.
    let start = key.as_ptr() as usize - buf.as_ptr() as usize;
    let key_range = start..start + key.len();
    match command {
        b"get" => {
            if fields.next().is_some() {
                return Err(Malformed::Unsupported);
            }
            Ok(Some(Request {
                len: line_len,
                key: key_range,
                kind: ReplyKind::Get,
            }))
        }
        b"set" => {
            let rest: Vec<&[u8]> = fields.collect();
            let [flags, exptime, bytes] = rest[..] else {
                return Err(if rest.len() == 4 {
                    Malformed::Unsupported
                } else {
                    Malformed::BadFormat
                });
            };
            number::<u32>(flags)?;
            number::<i64>(exptime)?;
            let Some(len) = data_block(buf, line_len, number(bytes)?)? else {
                return Ok(None);
            };
            Ok(Some(Request {
                len,
                key: key_range,
                kind: ReplyKind::Store,
            }))
        }
        _ => Err(Malformed::Unsupported),
    }
}

/// The length of the complete reply at the front of `buf`, framed as `kind`; `Ok(None)` when incomplete.
///
/// # Errors
/// [`Malformed`] when the server's bytes are not a reply of that kind: the server connection is dropped.
pub fn reply_len(buf: &[u8], kind: ReplyKind) -> Result<Option<usize>, Malformed> {
    let Some((text, line_len)) = line(buf)? else {
        return Ok(None);
    };
    let error = text == b"ERROR"
        || text.starts_with(b"CLIENT_ERROR ")
        || text.starts_with(b"SERVER_ERROR ");
    match kind {
        ReplyKind::Store => Ok(Some(line_len)),
        ReplyKind::Get if text == b"END" || error => Ok(Some(line_len)),
        ReplyKind::Get => {
            let fields: Vec<&[u8]> = text.split(|&b| b == b' ').collect();
            let (b"VALUE", 4 | 5) = (fields[0], fields.len()) else {
                return Err(Malformed::BadData);
            };
            let Some(end) = data_block(buf, line_len, number(fields[3])?)? else {
                return Ok(None);
            };
            match buf.get(end..end + 5) {
                None if b"END\r\n".starts_with(&buf[end..]) => Ok(None),
                Some(b"END\r\n") => Ok(Some(end + 5)),
                _ => Err(Malformed::BadData),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_is_one_line_routed_on_its_key() {
        let r = parse_request(b"get foo\r\nget bar\r\n").unwrap().unwrap();
        assert_eq!(r.len, 9);
        assert_eq!(r.key, 4..7);
        assert_eq!(r.kind, ReplyKind::Get);
    }

    #[test]
    fn a_set_includes_its_data_block() {
        let buf = b"set k 0 0 3\r\nabc\r\nget k\r\n";
        let r = parse_request(buf).unwrap().unwrap();
        assert_eq!(r.len, 18);
        assert_eq!(&buf[r.key.clone()], b"k");
        assert_eq!(r.kind, ReplyKind::Store);
    }

    /// Every input, cut anywhere, is incomplete before the cut and whole after it.
    #[test]
    fn any_prefix_of_a_request_or_reply_is_incomplete() {
        let req = b"set key 1 2 5\r\nhello\r\n";
        for cut in 0..req.len() {
            assert_eq!(parse_request(&req[..cut]), Ok(None), "cut at {cut}");
        }
        let reply = b"VALUE key 1 5\r\nhello\r\nEND\r\n";
        for cut in 0..reply.len() {
            assert_eq!(
                reply_len(&reply[..cut], ReplyKind::Get),
                Ok(None),
                "cut at {cut}"
            );
        }
        assert_eq!(reply_len(reply, ReplyKind::Get), Ok(Some(reply.len())));
    }

    #[test]
    fn replies_are_framed_by_kind() {
        assert_eq!(reply_len(b"END\r\nEND\r\n", ReplyKind::Get), Ok(Some(5)));
        assert_eq!(reply_len(b"STORED\r\n", ReplyKind::Store), Ok(Some(8)));
        assert_eq!(
            reply_len(b"SERVER_ERROR out of memory\r\n", ReplyKind::Get),
            Ok(Some(28))
        );
        assert_eq!(
            reply_len(b"VALUE k 0 1 99\r\nx\r\nEND\r\n", ReplyKind::Get),
            Ok(Some(24))
        );
    }

    /// The table of what is refused: each is an error, none a panic or an endless wait.
    #[test]
    fn malformed_requests_are_refused() {
        let long = vec![b'a'; MAX_LINE + 1];
        let cases: &[(&[u8], Malformed)] = &[
            (b"\r\n", Malformed::BadFormat),
            (b"get\r\n", Malformed::BadFormat),
            (b"get a\n", Malformed::BadFormat),
            (b"get a b\r\n", Malformed::Unsupported),
            (b"delete a\r\n", Malformed::Unsupported),
            (b"set a 0 0 1 noreply\r\nx\r\n", Malformed::Unsupported),
            (b"set a 0 0\r\n", Malformed::BadFormat),
            (b"set a x 0 1\r\nx\r\n", Malformed::BadFormat),
            (b"set a 0 0 -1\r\n", Malformed::BadFormat),
            (b"set a 0 0 99999999999\r\n", Malformed::TooLarge),
            (b"set a 0 0 1\r\nxyz\r\n", Malformed::BadData),
            (&long, Malformed::LineTooLong),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_request(input),
                Err(*want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let key = format!("get {}\r\n", "k".repeat(MAX_KEY + 1));
        assert_eq!(parse_request(key.as_bytes()), Err(Malformed::BadFormat));
    }

    #[test]
    fn malformed_replies_are_refused() {
        assert_eq!(
            reply_len(b"VALUE\r\n", ReplyKind::Get),
            Err(Malformed::BadData)
        );
        assert_eq!(
            reply_len(b"STORED\r\n", ReplyKind::Get),
            Err(Malformed::BadData)
        );
        assert_eq!(
            reply_len(b"VALUE k 0 1\r\nx\r\nENX\r\n", ReplyKind::Get),
            Err(Malformed::BadData)
        );
        assert_eq!(
            reply_len(b"VALUE k 0 nan\r\n", ReplyKind::Get),
            Err(Malformed::BadFormat)
        );
    }

    /// No input makes the parsers panic: every byte string up to length 3 over a small alphabet, and
    /// random mutations of real requests.
    #[test]
    fn no_input_panics() {
        let alphabet = b" \r\n0get";
        let mut inputs: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..3 {
            let next: Vec<Vec<u8>> = inputs
                .iter()
                .flat_map(|i| alphabet.iter().map(move |&b| [i.as_slice(), &[b]].concat()))
                .collect();
            inputs.extend(next);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for base in [
            &b"set key 0 0 5\r\nhello\r\n"[..],
            b"VALUE key 0 5\r\nhello\r\nEND\r\n",
        ] {
            for _ in 0..2000 {
                let mut m = base.to_vec();
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % m.len() as u64) as usize;
                m[at] = (seed >> 32) as u8;
                inputs.push(m);
            }
        }
        for input in &inputs {
            let _ = parse_request(input);
            let _ = reply_len(input, ReplyKind::Get);
            let _ = reply_len(input, ReplyKind::Store);
        }
    }
}
