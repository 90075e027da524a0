//! The reply framer: where one server reply ends, and the pieces of a multi-get reply.

use std::ops::Range;

use super::tokens::parse_u64;
use crate::protocol::{FrameError, ReplyScanner};

/// The framing of a server's reply, which depends on the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// One line (`STORED`, `DELETED`, a number, `VERSION …`, `HD …`).
    Line,
    /// `VALUE` blocks ended by `END` (get/gets/gat/gats).
    Values,
    /// A meta reply: `VA <len> <flags>` with a data block, or one line.
    Meta,
    /// `STAT <name> <value>` lines ended by `END` (`stats settings`, asked of each server).
    Stats,
}

/// A server reply that cannot be framed (the seam's [`FrameError`]).
pub type ResponseError = FrameError;

fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR")
}

/// Returns the length of the first complete reply of `kind` in `buf`, or `Ok(None)` when more input is
/// needed. Values longer than `max_value_len` are refused.
///
/// # Errors
/// A [`ResponseError`] when the bytes are not a reply of that kind.
pub fn parse_response(
    buf: &[u8],
    kind: ResponseKind,
    max_value_len: usize,
) -> Result<Option<usize>, ResponseError> {
    parse_response_from(buf, kind, max_value_len, &mut 0)
}

/// A server's `item_size_max` in its reply to `stats settings`, if the reply states one.
pub fn item_size_max(stats: &[u8]) -> Option<usize> {
    stats
        .split(|&c| c == b'\n')
        .find_map(|line| line.strip_prefix(b"STAT item_size_max "))
        .map(|v| v.strip_suffix(b"\r").unwrap_or(v))
        .and_then(parse_u64)
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v > 0)
}

/// The largest whole reply accepted (a multi-get's `VALUE` blocks together): a bound on what one request
/// can make the proxy buffer.
pub const MAX_REPLY_LEN: usize = 256 << 20;

/// [`parse_response`] that resumes a values reply where the last call left off: `resume` holds the length
/// of the complete `VALUE` blocks already checked (0 to start), so a large multi-get reply arriving in
/// many reads is scanned once, not once per read. Reset it to 0 after each complete reply.
///
/// # Errors
/// A [`ResponseError`] when the bytes are not a reply of that kind, or the reply exceeds
/// [`MAX_REPLY_LEN`].
pub fn parse_response_from(
    buf: &[u8],
    kind: ResponseKind,
    max_value_len: usize,
    resume: &mut usize,
) -> Result<Option<usize>, ResponseError> {
    let mut at = if kind == ResponseKind::Values {
        (*resume).min(buf.len())
    } else {
        0
    };
    loop {
        let rest = &buf[at..];
        let Some((line, line_len)) = next_line(rest)? else {
            return Ok(None);
        };
        if is_error_line(line) {
            // An error ends any reply, also in the middle of a multi-get? Only at its start.
            if at == 0 {
                return Ok(Some(line_len));
            }
            return Err(bad("error line inside a value list"));
        }
        match kind {
            ResponseKind::Line => return Ok(Some(line_len)),
            ResponseKind::Stats => {
                if line == b"END" {
                    return Ok(Some(at + line_len));
                }
                if !line.starts_with(b"STAT ") {
                    // A server that does not know the request and answers it with one line of its
                    // own stays in step; inside a list of stats, anything else is out of step.
                    if at == 0 {
                        return Ok(Some(line_len));
                    }
                    return Err(bad("expected STAT or END"));
                }
                if at + line_len > MAX_REPLY_LEN {
                    return Err(bad("reply too large"));
                }
                at += line_len;
            }
            ResponseKind::Meta => return meta_reply(rest, line, line_len, max_value_len),
            ResponseKind::Values => {
                if line == b"END" {
                    return Ok(Some(at + line_len));
                }
                let Some(total) = value_item(rest, line, line_len, at, max_value_len)? else {
                    return Ok(None);
                };
                at += total;
                *resume = at;
            }
        }
    }
}

/// The longest line a reply's header may be before its `\r\n`.
const MAX_RESPONSE_LINE: usize = 8 << 10;

/// The reply's first line without its `\r\n`, and the line's length with it; `None` until the
/// line is whole.
#[inline]
fn next_line(rest: &[u8]) -> Result<Option<(&[u8], usize)>, ResponseError> {
    let Some(nl) = memchr::memchr(b'\n', rest) else {
        if rest.len() > MAX_RESPONSE_LINE {
            return Err(bad("line too long"));
        }
        return Ok(None);
    };
    if nl == 0 || rest[nl - 1] != b'\r' {
        return Err(bad("line not ended by \\r\\n"));
    }
    Ok(Some((&rest[..nl - 1], nl + 1)))
}

/// A meta command's reply whose first line is `line` (of `line_len` bytes): that line, or with
/// `VA <len>` the value block after it too; `None` until the block is whole.
#[inline]
fn meta_reply(
    rest: &[u8],
    line: &[u8],
    line_len: usize,
    max_value_len: usize,
) -> Result<Option<usize>, ResponseError> {
    let Some(args) = line.strip_prefix(b"VA ") else {
        return Ok(Some(line_len));
    };
    let len = args
        .split(|&c| c == b' ')
        .next()
        .and_then(parse_u64)
        .ok_or(bad("bad VA length"))?;
    if len > max_value_len as u64 {
        return Err(bad("value too large"));
    }
    data_block(rest, line_len + len as usize + 2)
}

/// One `VALUE` item of a retrieval's reply (`line` is its header, of `line_len` bytes, `at` bytes
/// into the reply): the item's length with its data block; `None` until the block is whole.
#[inline]
fn value_item(
    rest: &[u8],
    line: &[u8],
    line_len: usize,
    at: usize,
    max_value_len: usize,
) -> Result<Option<usize>, ResponseError> {
    let Some(header) = parse_value_header(line) else {
        return Err(bad("expected VALUE or END"));
    };
    if header.len > max_value_len as u64 {
        return Err(bad("value too large"));
    }
    let total = line_len + header.len as usize + 2;
    if at + total > MAX_REPLY_LEN {
        return Err(bad("reply too large"));
    }
    data_block(rest, total)
}

/// `total`, once `rest` holds that many bytes and they end with a data block's `\r\n`.
#[inline]
fn data_block(rest: &[u8], total: usize) -> Result<Option<usize>, ResponseError> {
    if rest.len() < total {
        return Ok(None);
    }
    if &rest[total - 2..total] != b"\r\n" {
        return Err(bad("bad data block"));
    }
    Ok(Some(total))
}

/// A reply the connection cannot stay in step after.
fn bad(reason: &'static str) -> ResponseError {
    ResponseError { reason }
}

/// A `VALUE <key> <flags> <bytes> [<cas>]` line's key (a range of the line) and data length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueHeader {
    /// The key's range within the line.
    pub key: Range<usize>,
    /// The data block's length.
    pub len: u64,
}

/// Parses a `VALUE` line (without its `\r\n`): the key, then two or three decimal numbers (flags,
/// length, and `gets`' cas), each at most 20 digits and within `u64`, separated by runs of spaces.
///
/// One pass that checks the digits as it walks them: every `get` reply has one such line per value
/// (ten for a 10-key `get`), and splitting it into tokens first, then parsing each number, was a
/// noticeable share of a proxied `get`'s work.
pub fn parse_value_header(line: &[u8]) -> Option<ValueHeader> {
    let rest = line.strip_prefix(b"VALUE ")?;
    let skip_spaces = |mut i: usize| {
        while rest.get(i) == Some(&b' ') {
            i += 1;
        }
        i
    };
    let key_start = skip_spaces(0);
    // memchr: a key is often tens of bytes, where its setup costs less than a byte-at-a-time walk.
    let key_end = key_start + memchr::memchr(b' ', &rest[key_start..])?;
    let mut numbers = [0u64; 3];
    let mut count = 0;
    let mut i = skip_spaces(key_end);
    while i < rest.len() {
        let number = numbers.get_mut(count)?;
        let start = i;
        while let Some(&c) = rest.get(i).filter(|&&c| c != b' ') {
            let digit = c.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            *number = number.checked_mul(10)?.checked_add(u64::from(digit))?;
            i += 1;
        }
        if i - start > 20 {
            return None;
        }
        count += 1;
        i = skip_spaces(i);
    }
    if count < 2 {
        return None;
    }
    Some(ValueHeader {
        key: key_start + 6..key_end + 6,
        len: numbers[1],
    })
}

/// The `VALUE` blocks of a complete, well-framed values reply (one [`parse_response`] accepted), each as
/// `(key, whole block including its \r\n)`. Stops at `END` or at anything else.
#[derive(Debug, Clone)]
pub struct ValueBlocks<'a> {
    /// What is left of the reply.
    rest: &'a [u8],
}

impl<'a> ValueBlocks<'a> {
    /// Iterates over the blocks of `reply`.
    pub fn new(reply: &'a [u8]) -> ValueBlocks<'a> {
        ValueBlocks { rest: reply }
    }
}

impl<'a> Iterator for ValueBlocks<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        let nl = memchr::memchr(b'\n', self.rest)?;
        if nl == 0 {
            return None;
        }
        let line = &self.rest[..nl - 1];
        let header = parse_value_header(line)?;
        let total = (nl + 1).checked_add(usize::try_from(header.len).ok()?)? + 2;
        if self.rest.len() < total {
            return None;
        }
        let (block, rest) = self.rest.split_at(total);
        self.rest = rest;
        Some((&line[header.key], block))
    }
}

/// The status code of a one-line or meta reply: its first token (`HD`, `EN`, `STORED`, …).
pub fn status_code(reply: &[u8]) -> &[u8] {
    let end = reply
        .iter()
        .position(|&c| c == b' ' || c == b'\r' || c == b'\n')
        .unwrap_or(reply.len());
    &reply[..end]
}

/// Whether a reply is an error line (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`).
pub fn is_error_reply(reply: &[u8]) -> bool {
    let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
    is_error_line(line)
}

/// The memcached reply framer of one server connection: resumes a long multi-get reply where the last
/// read left off.
#[derive(Debug, Default)]
pub(crate) struct ResponseScanner {
    /// How much of the front reply's `VALUE` blocks has been checked.
    resume: usize,
}

impl ReplyScanner for ResponseScanner {
    type Kind = ResponseKind;

    fn frame(
        &mut self,
        buf: &[u8],
        kind: ResponseKind,
        max_value_len: usize,
    ) -> Result<Option<usize>, FrameError> {
        parse_response_from(buf, kind, max_value_len, &mut self.resume)
    }

    fn reset(&mut self) {
        self.resume = 0;
    }
}

/// A meta reply's parts: the status line's tokens and the data block, if any.
pub(crate) struct MetaReply<'a> {
    /// `VA`, `EN`, `HD`, …
    pub(crate) status: &'a [u8],
    /// The flag tokens after the status (and after the length for `VA`).
    flags: Vec<&'a [u8]>,
    /// The value (for `VA`).
    pub(crate) data: &'a [u8],
}

impl<'a> MetaReply<'a> {
    /// The parts of `reply`, when it is a meta reply.
    pub(crate) fn parse(reply: &'a [u8]) -> Option<MetaReply<'a>> {
        let eol = memchr::memmem::find(reply, b"\r\n")?;
        let mut tokens = reply[..eol].split(|&b| b == b' ').filter(|t| !t.is_empty());
        let status = tokens.next()?;
        let (len, flags): (usize, Vec<&[u8]>) = if status == b"VA" {
            let len = std::str::from_utf8(tokens.next()?).ok()?.parse().ok()?;
            (len, tokens.collect())
        } else {
            (0, tokens.collect())
        };
        let data = if status == b"VA" {
            reply.get(eol + 2..eol + 2 + len)?
        } else {
            &[]
        };
        Some(MetaReply {
            status,
            flags,
            data,
        })
    }

    /// The value of flag `f` (the bytes after its letter).
    pub(crate) fn flag(&self, f: u8) -> Option<&'a [u8]> {
        self.flags
            .iter()
            .find(|t| t.first() == Some(&f))
            .map(|t| &t[1..])
    }

    /// Whether flag `f` is there, alone.
    pub(crate) fn has(&self, f: u8) -> bool {
        self.flags.iter().any(|t| t == &[f])
    }

    /// An empty item made by a reservation (ours: `W`, or another client's: `Z`).
    pub(crate) fn is_reservation(&self) -> bool {
        self.status == b"VA" && self.data.is_empty() && (self.has(b'W') || self.has(b'Z'))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The naive parse (the one-pass parse replaced it): split into tokens, then parse each number.
    fn naive(line: &[u8]) -> Option<ValueHeader> {
        let rest = line.strip_prefix(b"VALUE ")?;
        let mut tokens = Vec::new();
        let mut at = 0;
        for piece in rest.split(|&c| c == b' ') {
            if !piece.is_empty() {
                tokens.push(at..at + piece.len());
            }
            at += piece.len() + 1;
        }
        if tokens.len() != 3 && tokens.len() != 4 {
            return None;
        }
        let numbers: Vec<u64> = tokens[1..]
            .iter()
            .map(|t| parse_u64(&rest[t.clone()]))
            .collect::<Option<_>>()?;
        Some(ValueHeader {
            key: tokens[0].start + 6..tokens[0].end + 6,
            len: numbers[1],
        })
    }

    proptest! {
        #[test]
        fn the_value_header_parses_as_the_naive_parse(line in proptest::collection::vec(
            proptest::sample::select(b"VALUE k019 x\r".to_vec()), 0..40)) {
            let mut with_prefix = b"VALUE ".to_vec();
            with_prefix.extend_from_slice(&line);
            prop_assert_eq!(parse_value_header(&with_prefix), naive(&with_prefix));
            prop_assert_eq!(parse_value_header(&line), naive(&line));
        }

        #[test]
        fn numbers_parse_as_the_naive_parse(flags in "[0-9]{0,22}", len in "[0-9]{0,22}",
                                            cas in proptest::option::of("[0-9]{0,22}"),
                                            gaps in proptest::collection::vec(1..3usize, 4)) {
            let sp = |n: usize| " ".repeat(n);
            let line = format!("VALUE{}key{}{flags}{}{len}{}", sp(gaps[0]), sp(gaps[1]), sp(gaps[2]),
                cas.map(|c| format!("{}{c}", sp(gaps[3]))).unwrap_or_default());
            prop_assert_eq!(parse_value_header(line.as_bytes()), naive(line.as_bytes()));
        }
    }

    #[test]
    fn a_value_header_gives_its_key_and_length() {
        let h = parse_value_header(b"VALUE some:key 5 100 77").unwrap();
        assert_eq!(
            h,
            ValueHeader {
                key: 6..14,
                len: 100
            }
        );
        assert_eq!(parse_value_header(b"VALUE k 0 18446744073709551616"), None);
        assert_eq!(parse_value_header(b"VALUE k 0 1 2 3"), None);
        assert_eq!(parse_value_header(b"VALUE k 0"), None);
        assert_eq!(parse_value_header(b"VALUE k 0 -1"), None);
    }
}
