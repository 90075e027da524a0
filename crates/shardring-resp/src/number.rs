//! Integers read as Redis reads them.

/// Redis's `string2ll` on a whole field: an optional `-`, then digits without a leading zero (`0` alone
/// is fine, `-0` and `007` are not), within `i64`. Requests are held to exactly what Redis accepts, and
/// replies to what it sends.
// `#[inline]`: the proxy's request scanner calls it for every `*<n>` and `$<n>` from another crate.
#[inline]
pub fn parse_redis_int(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    if digits.len() > 19 {
        return None;
    }
    let mut v: i128 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(c - b'0');
    }
    let v = if negative { -v } else { v };
    i64::try_from(v).ok()
}
