//! The resumable reply framer: finds where a server's reply ends, for every RESP2 and RESP3 type, without
//! building it.
//!
//! | first byte | type | framing |
//! |---|---|---|
//! | `+` `-` `:` | simple string, error, integer (RESP2) | one line |
//! | `_` `#` `,` `(` | null, boolean, double, big number (RESP3) | one line |
//! | `$` `!` `=` | bulk string (`$-1` is RESP2's null), bulk error, verbatim string | a length line, the data, `\r\n` |
//! | `*` `~` `>` | array (`*-1` is RESP2's null array), set, push | a count line, that many values |
//! | `%` `\|` | map, attribute | a count line, twice that many values; an attribute is followed by the value it describes, which belongs to the same reply |
//! | `$?` | streamed string | `;<n>` chunks ended by `;0` |
//! | `*?` `~?` `%?` `>?` | streamed aggregate | values until `.` |
//!
//! Servers are trusted to frame, not to be small: lengths, nesting and the whole reply are bounded by
//! [`ReplyLimits`], and a reply over them, or bytes that are not RESP, make a [`ReplyError`]: the server
//! connection is out of step and must be closed.

use crate::error::{bad, ReplyError};
use crate::limits::ReplyLimits;
use crate::line::{find_crlf, LineEnd};
use crate::number::parse_redis_int;

/// A whole reply found by [`ReplyFramer::frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed {
    /// Its length: the reply is `input[..len]`.
    pub len: usize,
    /// Its first byte: `-` or `!` for an error, `>` for a push (out of band in RESP3, not the answer to a
    /// request), `|` when an attribute precedes the value.
    pub kind: u8,
}

impl Framed {
    /// Whether the reply is an error (`-…` or `!…`).
    #[inline]
    pub fn is_error(&self) -> bool {
        matches!(self.kind, b'-' | b'!')
    }

    /// Whether the reply is a RESP3 push, which answers no request.
    #[inline]
    pub fn is_push(&self) -> bool {
        self.kind == b'>'
    }
}

/// An aggregate the framer is inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Values still to come.
    Counted(u64),
    /// A streamed aggregate: values until `.`.
    Streamed,
    /// A streamed string: `;<n>` chunks until `;0`.
    Chunks,
}

/// What comes next at the framer's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Next {
    /// The type byte of a value.
    #[default]
    Value,
    /// The data and `\r\n` of a bulk value ending at this offset.
    Data(usize),
    /// A `;<n>` chunk header of a streamed string.
    ChunkHeader,
}

/// The reply framer. It keeps its place across calls: the caller passes the same input, grown by what it
/// read since (the input always starts at the current reply's first byte), and only new bytes are looked
/// at, so a large `MGET` reply arriving in many reads is framed once.
#[derive(Debug, Clone, Default)]
pub struct ReplyFramer {
    /// The bounds it enforces.
    limits: ReplyLimits,
    /// Bytes of the current reply already framed.
    pos: usize,
    /// The aggregates it is inside, outermost first.
    stack: Vec<Level>,
    /// What comes next at `pos`.
    next: Next,
}

impl ReplyFramer {
    /// A framer enforcing `limits`.
    #[inline]
    pub fn new(limits: ReplyLimits) -> ReplyFramer {
        ReplyFramer {
            limits,
            ..ReplyFramer::default()
        }
    }

    /// Bytes of the current reply already framed: the next call looks at the input from about here.
    #[inline]
    pub fn framed(&self) -> usize {
        self.pos
    }

    /// Forgets the current reply.
    #[inline]
    pub fn reset(&mut self) {
        self.pos = 0;
        self.stack.clear();
        self.next = Next::Value;
    }

    /// Frames the first reply of `buf`, carrying on from the previous call.
    ///
    /// Returns `Ok(None)` when `buf` does not yet hold the whole reply, `Ok(Some(framed))` for a whole one
    /// (`buf[..framed.len]`; the caller drops those bytes and the framer starts afresh).
    ///
    /// `buf` must be the input of the previous call with bytes appended, until `Some` or `Err`.
    ///
    /// # Errors
    /// A [`ReplyError`] when the bytes are not RESP or pass the limits; the framer is reset.
    pub fn frame(&mut self, buf: &[u8]) -> Result<Option<Framed>, ReplyError> {
        match self.step(buf) {
            Ok(Some(len)) => {
                self.reset();
                Ok(Some(Framed { len, kind: buf[0] }))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    /// A line starting at `from`: `Ok(Some(index of its \r))`.
    fn line(&self, buf: &[u8], from: usize) -> Result<Option<usize>, ReplyError> {
        match find_crlf(buf, from, self.limits.max_line_len) {
            LineEnd::At(cr) => Ok(Some(cr)),
            LineEnd::Incomplete => Ok(None),
            LineEnd::TooLong => Err(bad("line too long")),
            LineEnd::BareCr => Err(bad("line not ended by \\r\\n")),
        }
    }

    /// One value ended at `self.pos`: count it in the aggregates it closes. `true` when the reply is
    /// whole.
    fn value_done(&mut self) -> bool {
        while let Some(top) = self.stack.last_mut() {
            match top {
                Level::Counted(n) => {
                    *n -= 1;
                    if *n > 0 {
                        return false;
                    }
                    // The aggregate is whole: it is one value of the one around it.
                    self.stack.pop();
                }
                Level::Streamed | Level::Chunks => return false,
            }
        }
        true
    }

    fn push(&mut self, level: Level) -> Result<(), ReplyError> {
        if self.stack.len() >= self.limits.max_depth {
            return Err(bad("nested too deep"));
        }
        self.stack.push(level);
        Ok(())
    }

    fn check_len(&self, end: usize) -> Result<(), ReplyError> {
        if end > self.limits.max_reply_len {
            return Err(bad("reply too large"));
        }
        Ok(())
    }

    fn step(&mut self, buf: &[u8]) -> Result<Option<usize>, ReplyError> {
        loop {
            match self.next {
                Next::Data(end) => {
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(bad("bulk data not ended by \\r\\n"));
                    }
                    self.pos = end;
                    self.next = Next::Value;
                    // A chunk of a streamed string is followed by the next chunk's header.
                    if self.stack.last() == Some(&Level::Chunks) {
                        self.next = Next::ChunkHeader;
                        continue;
                    }
                    if self.value_done() {
                        return Ok(Some(self.pos));
                    }
                }
                Next::ChunkHeader => {
                    let Some(&c) = buf.get(self.pos) else {
                        return Ok(None);
                    };
                    if c != b';' {
                        return Err(bad("expected a ';' chunk in a streamed string"));
                    }
                    let Some(cr) = self.line(buf, self.pos + 1)? else {
                        return Ok(None);
                    };
                    let len = parse_redis_int(&buf[self.pos + 1..cr])
                        .filter(|&n| n >= 0)
                        .ok_or(bad("bad chunk length"))? as u64;
                    self.pos = cr + 2;
                    if len == 0 {
                        // `;0` ends the string, which is one value of what holds it.
                        self.stack.pop();
                        self.next = Next::Value;
                        if self.value_done() {
                            return Ok(Some(self.pos));
                        }
                        continue;
                    }
                    if len > self.limits.max_bulk_len as u64 {
                        return Err(bad("bulk too long"));
                    }
                    let end = self.pos + len as usize + 2;
                    self.check_len(end)?;
                    self.next = Next::Data(end);
                }
                Next::Value => {
                    let Some(&kind) = buf.get(self.pos) else {
                        return Ok(None);
                    };
                    let Some(cr) = self.line(buf, self.pos + 1)? else {
                        return Ok(None);
                    };
                    let line = &buf[self.pos + 1..cr];
                    let after = cr + 2;
                    self.check_len(after)?;
                    match kind {
                        b'+' | b'-' => {}
                        b':' => {
                            parse_redis_int(line).ok_or(bad("bad integer"))?;
                        }
                        b'_' => {
                            if !line.is_empty() {
                                return Err(bad("bad null"));
                            }
                        }
                        b'#' => {
                            if line != b"t" && line != b"f" {
                                return Err(bad("bad boolean"));
                            }
                        }
                        b',' => {
                            if line.is_empty() {
                                return Err(bad("bad double"));
                            }
                        }
                        b'(' => {
                            let digits = line.strip_prefix(b"-").unwrap_or(line);
                            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                                return Err(bad("bad big number"));
                            }
                        }
                        b'$' | b'!' | b'=' => {
                            self.pos = after;
                            if kind == b'$' && line == b"?" {
                                self.push(Level::Chunks)?;
                                self.next = Next::ChunkHeader;
                                continue;
                            }
                            let len = match parse_redis_int(line) {
                                Some(-1) if kind == b'$' => {
                                    if self.value_done() {
                                        return Ok(Some(self.pos));
                                    }
                                    continue;
                                }
                                Some(n) if n >= 0 => n as u64,
                                _ => return Err(bad("bad bulk length")),
                            };
                            if len > self.limits.max_bulk_len as u64 {
                                return Err(bad("bulk too long"));
                            }
                            if kind == b'=' && len < 4 {
                                return Err(bad("verbatim string without its format"));
                            }
                            let end = after + len as usize + 2;
                            self.check_len(end)?;
                            self.next = Next::Data(end);
                            continue;
                        }
                        b'*' | b'~' | b'>' | b'%' | b'|' => {
                            self.pos = after;
                            if line == b"?" && kind != b'|' {
                                self.push(Level::Streamed)?;
                                continue;
                            }
                            let n = match parse_redis_int(line) {
                                Some(-1) if kind == b'*' => {
                                    if self.value_done() {
                                        return Ok(Some(self.pos));
                                    }
                                    continue;
                                }
                                Some(n) if n >= 0 => n as u64,
                                _ => return Err(bad("bad aggregate length")),
                            };
                            // Each value takes at least 3 bytes: a count that cannot fit is refused now.
                            let values = match kind {
                                b'%' => n.saturating_mul(2),
                                // The attribute's pairs, then the value they describe.
                                b'|' => n.saturating_mul(2).saturating_add(1),
                                _ => n,
                            };
                            self.check_len(
                                usize::try_from(values.saturating_mul(3))
                                    .unwrap_or(usize::MAX)
                                    .saturating_add(after),
                            )?;
                            if values == 0 {
                                if self.value_done() {
                                    return Ok(Some(self.pos));
                                }
                                continue;
                            }
                            self.push(Level::Counted(values))?;
                            continue;
                        }
                        b'.' => {
                            if !line.is_empty() || self.stack.last() != Some(&Level::Streamed) {
                                return Err(bad("'.' outside a streamed aggregate"));
                            }
                            self.pos = after;
                            self.stack.pop();
                            if self.value_done() {
                                return Ok(Some(self.pos));
                            }
                            continue;
                        }
                        _ => return Err(bad("unknown type byte")),
                    }
                    // A one-line value.
                    self.pos = after;
                    if self.value_done() {
                        return Ok(Some(self.pos));
                    }
                }
            }
        }
    }
}

/// The length of the first whole reply in `buf` (a fresh framer; for replies already in memory).
///
/// # Errors
/// A [`ReplyError`] when the bytes are not RESP or pass the limits.
pub fn reply_len(buf: &[u8], limits: ReplyLimits) -> Result<Option<usize>, ReplyError> {
    Ok(ReplyFramer::new(limits).frame(buf)?.map(|f| f.len))
}

/// The ranges of the values of a whole aggregate reply (`*`, `~`, `>`, `%` flattened to keys and
/// values), or `None` when `reply` is not a counted aggregate (a null, a streamed one, an error).
pub fn elements(reply: &[u8], limits: ReplyLimits) -> Option<Vec<std::ops::Range<usize>>> {
    let kind = *reply.first()?;
    if !matches!(kind, b'*' | b'~' | b'>' | b'%') {
        return None;
    }
    let LineEnd::At(cr) = find_crlf(reply, 1, limits.max_line_len) else {
        return None;
    };
    let n = parse_redis_int(&reply[1..cr]).filter(|&n| n >= 0)? as usize;
    let n = if kind == b'%' { n.checked_mul(2)? } else { n };
    let mut out = Vec::with_capacity(n.min(reply.len() / 3));
    let mut at = cr + 2;
    let mut framer = ReplyFramer::new(limits);
    for _ in 0..n {
        let len = framer.frame(&reply[at..]).ok()??.len;
        out.push(at..at + len);
        at += len;
    }
    Some(out)
}
