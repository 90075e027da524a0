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

/// How many bytes of a line [`find_crlf`] looks through one at a time before handing the rest to memchr.
const SHORT_LINE: usize = 16;

/// Looks for the `\r\n` ending a line that starts at `from` and is at most `max` bytes long.
///
/// Only the first `max + 1` bytes from `from` are searched, so a line that never ends costs its limit,
/// not the whole buffer, on every read.
// `#[inline]`: on the proxy's hot path from another crate (its request scanner and the reply framer).
#[inline]
pub fn find_crlf(buf: &[u8], from: usize, max: usize) -> LineEnd {
    let from = from.min(buf.len());
    let window = &buf[from..buf.len().min(from.saturating_add(max).saturating_add(1))];
    // Most lines are a few bytes (a header's digits, `+OK`, a small integer): a plain loop over the
    // first bytes finds their end in fewer instructions than memchr's setup takes
    // (scripts/proxy-instructions: about 30 a line); memchr searches the rest of a longer one.
    let head = &window[..window.len().min(SHORT_LINE)];
    let cr = match head.iter().position(|&c| c == b'\r') {
        Some(i) => Some(i),
        None => memchr::memchr(b'\r', &window[head.len()..]).map(|i| head.len() + i),
    };
    match cr {
        Some(i) => match buf.get(from + i + 1) {
            None => LineEnd::Incomplete,
            Some(b'\n') => LineEnd::At(from + i),
            Some(_) => LineEnd::BareCr,
        },
        None if buf.len() - from > max => LineEnd::TooLong,
        None => LineEnd::Incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition, one byte at a time: the first `\r` within `max + 1` bytes of `from`.
    fn naive(buf: &[u8], from: usize, max: usize) -> LineEnd {
        let from = from.min(buf.len());
        for (i, &c) in buf[from..].iter().enumerate() {
            if i > max {
                return LineEnd::TooLong;
            }
            if c == b'\r' {
                return match buf.get(from + i + 1) {
                    None => LineEnd::Incomplete,
                    Some(b'\n') => LineEnd::At(from + i),
                    Some(_) => LineEnd::BareCr,
                };
            }
        }
        if buf.len() - from > max {
            LineEnd::TooLong
        } else {
            LineEnd::Incomplete
        }
    }

    proptest! {
        // Lines of every length around the short-line loop's 16 bytes, and limits on either side.
        #[test]
        fn finds_what_a_byte_by_byte_search_finds(
            buf in proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'1'), any::<u8>()], 0..48),
            from in 0usize..50,
            max in prop_oneof![0usize..40, Just(usize::MAX)],
        ) {
            prop_assert_eq!(find_crlf(&buf, from, max), naive(&buf, from, max));
        }
    }

    #[test]
    fn short_and_long_lines() {
        assert_eq!(find_crlf(b"$3\r\nfoo\r\n", 1, 64), LineEnd::At(2));
        let long = [b"+".as_slice(), &[b'x'; 40], b"\r\n"].concat();
        assert_eq!(find_crlf(&long, 1, 64), LineEnd::At(41));
        assert_eq!(find_crlf(&long, 1, 39), LineEnd::TooLong);
        assert_eq!(find_crlf(&long, 1, 40), LineEnd::At(41));
        assert_eq!(find_crlf(&long[..42], 1, 64), LineEnd::Incomplete);
        assert_eq!(find_crlf(b"+a\rb", 1, 64), LineEnd::BareCr);
    }
}
