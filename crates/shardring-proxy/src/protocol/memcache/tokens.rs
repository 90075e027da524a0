//! The memcached text protocol's lexical pieces: lines, space-separated tokens, decimal numbers.

use std::ops::Range;

/// Finds the end of the first line: `(line without its terminator, length including it)`.
pub(super) fn line_end(buf: &[u8]) -> Option<(usize, usize)> {
    let nl = memchr::memchr(b'\n', buf)?;
    let end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    Some((end, nl + 1))
}

/// Up to 24 tokens of a line (memcached's `MAX_TOKENS`); more are counted but not stored.
pub(super) struct Tokens {
    ranges: [Range<usize>; 24],
    pub(super) len: usize,
}

impl Tokens {
    pub(super) fn split(line: &[u8], max: usize) -> Tokens {
        const EMPTY: Range<usize> = 0..0;
        let mut t = Tokens {
            ranges: [EMPTY; 24],
            len: 0,
        };
        let mut i = 0;
        while i < line.len() {
            while i < line.len() && line[i] == b' ' {
                i += 1;
            }
            if i >= line.len() {
                break;
            }
            let start = i;
            while i < line.len() && line[i] != b' ' {
                i += 1;
            }
            if t.len < max.min(24) {
                t.ranges[t.len] = start..i;
            }
            t.len += 1;
        }
        t
    }

    pub(super) fn get(&self, i: usize) -> Range<usize> {
        self.ranges[i].clone()
    }
}

pub(super) fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

pub(super) fn parse_i64(b: &[u8]) -> Option<i64> {
    match b.split_first() {
        Some((b'-', rest)) => parse_u64(rest)
            .and_then(|v| i64::try_from(v).ok())
            .map(|v| -v),
        _ => parse_u64(b).and_then(|v| i64::try_from(v).ok()),
    }
}

/// Every space-separated token of a line with its offset, without a cap on their number (a retrieval
/// line may name any number of keys).
pub(super) fn spaced_tokens(line: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < line.len() && line[at] == b' ' {
            at += 1;
        }
        if at >= line.len() {
            return None;
        }
        let start = at;
        while at < line.len() && line[at] != b' ' {
            at += 1;
        }
        Some((start, &line[start..at]))
    })
}
