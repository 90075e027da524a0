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
    // 19 digits fit a `u64` (its largest has 20): no overflow to check on the way, only the range
    // of an `i64` at the end (one more below zero than above it).
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(c - b'0');
    }
    if negative {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Redis's rule read through Rust's own parser: the same text back, and within `i64`.
    fn naive(b: &[u8]) -> Option<i64> {
        let s = std::str::from_utf8(b).ok()?;
        let v: i64 = s.parse().ok()?;
        (v.to_string() == s && s != "-0").then_some(v)
    }

    proptest! {
        #[test]
        fn reads_what_redis_reads(s in "-?[0-9+ a]{0,21}") {
            prop_assert_eq!(parse_redis_int(s.as_bytes()), naive(s.as_bytes()));
        }

        #[test]
        fn every_i64_round_trips(v in any::<i64>()) {
            prop_assert_eq!(parse_redis_int(v.to_string().as_bytes()), Some(v));
        }
    }

    #[test]
    fn the_edges() {
        assert_eq!(parse_redis_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_redis_int(b"9223372036854775808"), None);
        assert_eq!(parse_redis_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_redis_int(b"-9223372036854775809"), None);
        assert_eq!(parse_redis_int(b"99999999999999999999"), None);
        for bad in [&b""[..], b"-", b"-0", b"007", b"+1", b" 1", b"1 "] {
            assert_eq!(parse_redis_int(bad), None, "{bad:?}");
        }
        assert_eq!(parse_redis_int(b"0"), Some(0));
    }
}
