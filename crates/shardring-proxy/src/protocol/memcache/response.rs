//! The reply framer: where one server reply ends, and the pieces of a multi-get reply.

use std::ops::Range;

use super::tokens::{parse_u64, Tokens};
use crate::protocol::FrameError;

/// The framing of a server's reply, which depends on the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// One line (`STORED`, `DELETED`, a number, `VERSION …`, `HD …`).
    Line,
    /// `VALUE` blocks ended by `END` (get/gets/gat/gats).
    Values,
    /// A meta reply: `VA <len> <flags>` with a data block, or one line.
    Meta,
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
    const MAX_RESPONSE_LINE: usize = 8 << 10;
    let mut at = if kind == ResponseKind::Values {
        (*resume).min(buf.len())
    } else {
        0
    };
    loop {
        let rest = &buf[at..];
        let Some(nl) = memchr::memchr(b'\n', rest) else {
            if rest.len() > MAX_RESPONSE_LINE {
                return Err(ResponseError {
                    reason: "line too long",
                });
            }
            return Ok(None);
        };
        if nl == 0 || rest[nl - 1] != b'\r' {
            return Err(ResponseError {
                reason: "line not ended by \\r\\n",
            });
        }
        let line = &rest[..nl - 1];
        let line_len = nl + 1;
        if is_error_line(line) {
            // An error ends any reply, also in the middle of a multi-get? Only at its start.
            if at == 0 {
                return Ok(Some(line_len));
            }
            return Err(ResponseError {
                reason: "error line inside a value list",
            });
        }
        match kind {
            ResponseKind::Line => return Ok(Some(line_len)),
            ResponseKind::Meta => {
                if let Some(args) = line.strip_prefix(b"VA ") {
                    let len = args
                        .split(|&c| c == b' ')
                        .next()
                        .and_then(parse_u64)
                        .ok_or(ResponseError {
                            reason: "bad VA length",
                        })?;
                    if len > max_value_len as u64 {
                        return Err(ResponseError {
                            reason: "value too large",
                        });
                    }
                    let total = line_len + len as usize + 2;
                    if rest.len() < total {
                        return Ok(None);
                    }
                    if &rest[total - 2..total] != b"\r\n" {
                        return Err(ResponseError {
                            reason: "bad data block",
                        });
                    }
                    return Ok(Some(total));
                }
                return Ok(Some(line_len));
            }
            ResponseKind::Values => {
                if line == b"END" {
                    return Ok(Some(at + line_len));
                }
                let Some(header) = parse_value_header(line) else {
                    return Err(ResponseError {
                        reason: "expected VALUE or END",
                    });
                };
                if header.len > max_value_len as u64 {
                    return Err(ResponseError {
                        reason: "value too large",
                    });
                }
                let total = line_len + header.len as usize + 2;
                if at + total > MAX_REPLY_LEN {
                    return Err(ResponseError {
                        reason: "reply too large",
                    });
                }
                if rest.len() < total {
                    return Ok(None);
                }
                if &rest[total - 2..total] != b"\r\n" {
                    return Err(ResponseError {
                        reason: "bad data block",
                    });
                }
                at += total;
                *resume = at;
            }
        }
    }
}

/// A `VALUE <key> <flags> <bytes> [<cas>]` line's key (a range of the line) and data length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueHeader {
    /// The key's range within the line.
    pub key: Range<usize>,
    /// The data block's length.
    pub len: u64,
}

/// Parses a `VALUE` line (without its `\r\n`).
pub fn parse_value_header(line: &[u8]) -> Option<ValueHeader> {
    let rest = line.strip_prefix(b"VALUE ")?;
    let t = Tokens::split(rest, 4);
    if t.len != 3 && t.len != 4 {
        return None;
    }
    parse_u64(&rest[t.get(1)])?;
    let len = parse_u64(&rest[t.get(2)])?;
    if t.len == 4 {
        parse_u64(&rest[t.get(3)])?;
    }
    let k = t.get(0);
    Some(ValueHeader {
        key: k.start + 6..k.end + 6,
        len,
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
