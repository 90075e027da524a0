//! Decimal formatting without allocation, for point names and synthetic keys built in hot loops.

/// Writes `n` in decimal into the end of `buf` and returns the digits.
pub(crate) fn format_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_display() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 159, 1_000_000, u64::MAX] {
            assert_eq!(format_u64(&mut buf, n), n.to_string().as_bytes());
        }
    }
}
