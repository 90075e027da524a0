//! Where a RESP line ends: every header, simple string, error and number is a line ended by `\r\n`.

/// What [`find_crlf`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnd {
    /// The line ends with the `\r` at this index, followed by `\n`.
    At(usize),
    /// Not yet: more input may bring it.
    Incomplete,
    /// No `\r` within the allowed length.
    TooLong,
    /// A `\r` followed by something other than `\n`.
    BareCr,
}

/// Looks for the `\r\n` ending a line that starts at `from` and is at most `max` bytes long.
///
/// Only the first `max + 1` bytes from `from` are searched, so a line that never ends costs its limit,
/// not the whole buffer, on every read.
// `#[inline]`: on the proxy's hot path from another crate (its request scanner and the reply framer).
#[inline]
pub fn find_crlf(buf: &[u8], from: usize, max: usize) -> LineEnd {
    let from = from.min(buf.len());
    let window = &buf[from..buf.len().min(from.saturating_add(max).saturating_add(1))];
    match memchr::memchr(b'\r', window) {
        Some(i) => match buf.get(from + i + 1) {
            None => LineEnd::Incomplete,
            Some(b'\n') => LineEnd::At(from + i),
            Some(_) => LineEnd::BareCr,
        },
        None if buf.len() - from > max => LineEnd::TooLong,
        None => LineEnd::Incomplete,
    }
}
