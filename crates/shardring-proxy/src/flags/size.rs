//! The `SIZE` values of the flags that bound bytes (`--max-value-size`, `--max-request-size`,
//! `--hot-cache-size`): bytes, or a number with a `k`, `m` or `g` suffix, as memcached's `-I` reads
//! them.

/// The largest size a flag takes: memcached's own limit for `-I`, and the default of Redis's
/// `client-query-buffer-limit`.
const MAX_SIZE: usize = 1 << 30;

/// `1048576`, `512k`, `2m` → bytes.
pub(crate) fn parse_size(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&text[..i], 1 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&text[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    let size = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("not a size: {text:?} (bytes, or a number with k, m or g)"))?;
    if size == 0 || size > MAX_SIZE {
        return Err(format!("must be between 1 byte and 1g, not {text}"));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_memcacheds() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1024m"), Ok(1 << 30));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        for bad in [
            "",
            "0",
            "k",
            "1.5m",
            "-1",
            "1025m",
            "99999999999999999999",
            "2g",
            "1t",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
