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

use std::ops::ControlFlow;

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

/// What one step of the framer came to: go on at `pos` with what `next` says, or stop with what
/// [`ReplyFramer::frame`] returns (`None`: more bytes are needed; `Some(len)`: the reply is whole).
type Turn = ControlFlow<Option<usize>>;

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
    // Not `#[inline]`: one out-of-line call per reply, as when the framer was the proxy's own. `step`
    // and its pieces are inlined into it, as the single `step` was: the pieces every reply goes through
    // (and `value_done`, `push`) are `#[inline(always)]`, since with `#[inline]` alone LLVM kept
    // `value_done` and `one_line` out of line, a call per value (scripts/proxy-instructions).
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
    #[inline(always)]
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

    #[inline(always)]
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

    /// Frames from `self.pos` on, one thing at a time as [`Next`] says, until the reply is whole or the
    /// input ends.
    fn step(&mut self, buf: &[u8]) -> Result<Option<usize>, ReplyError> {
        loop {
            let turn = match self.next {
                Next::Value => self.value(buf)?,
                Next::Data(end) => self.bulk_data(buf, end)?,
                Next::ChunkHeader => self.chunk_header(buf)?,
            };
            if let ControlFlow::Break(whole) = turn {
                return Ok(whole);
            }
        }
    }

    /// A value ended at `self.pos`: the reply is whole when it closes every aggregate it is in, and
    /// the next value comes otherwise.
    #[inline(always)]
    fn ended(&mut self) -> Turn {
        if self.value_done() {
            ControlFlow::Break(Some(self.pos))
        } else {
            ControlFlow::Continue(())
        }
    }

    /// A value's type byte and the line after it, handed to its type's family: one-line values here,
    /// bulk headers, aggregate headers, the end of a streamed aggregate. The whole line is read before
    /// the type byte is judged, so an unknown one is refused once its line is in.
    #[inline(always)]
    fn value(&mut self, buf: &[u8]) -> Result<Turn, ReplyError> {
        let Some(&kind) = buf.get(self.pos) else {
            return Ok(ControlFlow::Break(None));
        };
        let Some(cr) = self.line(buf, self.pos + 1)? else {
            return Ok(ControlFlow::Break(None));
        };
        let line = &buf[self.pos + 1..cr];
        let after = cr + 2;
        self.check_len(after)?;
        match kind {
            b'$' | b'!' | b'=' => self.bulk_header(kind, line, after),
            b'*' | b'~' | b'>' | b'%' | b'|' => self.aggregate_header(kind, line, after),
            b'.' => self.streamed_end(line, after),
            _ => {
                one_line(kind, line)?;
                self.pos = after;
                Ok(self.ended())
            }
        }
    }

    /// The header of a bulk string, bulk error or verbatim string (`$<n>`, `!<n>`, `=<n>`): its data
    /// comes next, bounded before any of it is buffered. `$-1` (RESP2's null) is a whole value, and `$?`
    /// starts a streamed string, whose chunks come next.
    #[inline(always)]
    fn bulk_header(&mut self, kind: u8, line: &[u8], after: usize) -> Result<Turn, ReplyError> {
        self.pos = after;
        if kind == b'$' && line == b"?" {
            self.push(Level::Chunks)?;
            self.next = Next::ChunkHeader;
            return Ok(ControlFlow::Continue(()));
        }
        let len = match parse_redis_int(line) {
            Some(-1) if kind == b'$' => return Ok(self.ended()),
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
        Ok(ControlFlow::Continue(()))
    }

    /// The header of an aggregate (`*`, `~`, `>`, `%`, `|` and a count): that many values come next
    /// (twice that for a map, and one more for an attribute: the value it describes), refused at once
    /// when they could not fit in the longest reply. `*-1` (RESP2's null array) and an empty aggregate
    /// are whole values; `?` instead of a count starts a streamed aggregate, ended by `.`.
    #[inline(always)]
    fn aggregate_header(
        &mut self,
        kind: u8,
        line: &[u8],
        after: usize,
    ) -> Result<Turn, ReplyError> {
        self.pos = after;
        if line == b"?" && kind != b'|' {
            self.push(Level::Streamed)?;
            return Ok(ControlFlow::Continue(()));
        }
        let n = match parse_redis_int(line) {
            Some(-1) if kind == b'*' => return Ok(self.ended()),
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
            return Ok(self.ended());
        }
        self.push(Level::Counted(values))?;
        Ok(ControlFlow::Continue(()))
    }

    /// `.`: the end of the streamed aggregate the framer is in (and nowhere else), which is one value
    /// of what holds it.
    #[inline]
    fn streamed_end(&mut self, line: &[u8], after: usize) -> Result<Turn, ReplyError> {
        if !line.is_empty() || self.stack.last() != Some(&Level::Streamed) {
            return Err(bad("'.' outside a streamed aggregate"));
        }
        self.pos = after;
        self.stack.pop();
        Ok(self.ended())
    }

    /// The data of a bulk value, ending with `\r\n` at `end`: a whole value, or a chunk of a streamed
    /// string, which the next chunk's header follows.
    #[inline(always)]
    fn bulk_data(&mut self, buf: &[u8], end: usize) -> Result<Turn, ReplyError> {
        if buf.len() < end {
            return Ok(ControlFlow::Break(None));
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(bad("bulk data not ended by \\r\\n"));
        }
        self.pos = end;
        self.next = Next::Value;
        if self.stack.last() == Some(&Level::Chunks) {
            self.next = Next::ChunkHeader;
            return Ok(ControlFlow::Continue(()));
        }
        Ok(self.ended())
    }

    /// A streamed string's `;<n>` chunk header: that chunk's data comes next, bounded as a bulk
    /// string's; `;0` ends the string, which is one value of what holds it.
    #[inline]
    fn chunk_header(&mut self, buf: &[u8]) -> Result<Turn, ReplyError> {
        let Some(&c) = buf.get(self.pos) else {
            return Ok(ControlFlow::Break(None));
        };
        if c != b';' {
            return Err(bad("expected a ';' chunk in a streamed string"));
        }
        let Some(cr) = self.line(buf, self.pos + 1)? else {
            return Ok(ControlFlow::Break(None));
        };
        let len = parse_redis_int(&buf[self.pos + 1..cr])
            .filter(|&n| n >= 0)
            .ok_or(bad("bad chunk length"))? as u64;
        self.pos = cr + 2;
        if len == 0 {
            self.stack.pop();
            self.next = Next::Value;
            return Ok(self.ended());
        }
        if len > self.limits.max_bulk_len as u64 {
            return Err(bad("bulk too long"));
        }
        let end = self.pos + len as usize + 2;
        self.check_len(end)?;
        self.next = Next::Data(end);
        Ok(ControlFlow::Continue(()))
    }
}

/// Checks a one-line value (`+`, `-`, `:`, `_`, `#`, `,`, `(`) as far as framing needs: an integer as
/// Redis writes it, a null with nothing after `_`, a boolean `t` or `f`, a double with something in it
/// (its meaning is the client's), a big number's digits. Any other type byte is not RESP.
#[inline(always)]
fn one_line(kind: u8, line: &[u8]) -> Result<(), ReplyError> {
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
        _ => return Err(bad("unknown type byte")),
    }
    Ok(())
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
