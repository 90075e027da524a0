//! XXH3-64, from `xxhash-rust`: the library's default key hash; and the same hash of numbered names
//! (a prefix followed by the decimal digits of consecutive numbers), done for whole ranges at once.

use std::ops::Range;

/// XXH3-64 of `key` with seed 0.
#[inline]
pub fn xxh3_64(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The first 128 bytes of XXH3's default secret (`kSecret` in the reference implementation), all that
/// inputs of up to 128 bytes read. `xxhash-rust` keeps its copy private; the tests check this one
/// against it on every input length.
const SECRET: [u8; 128] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
];

/// XXH64's first prime, which XXH3 multiplies the length by.
const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;

/// The little-endian word at `at`.
#[inline(always)]
fn read64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// XXH3's `mix16B` of the 16 input bytes `lo`, `hi` (two little-endian words) with the secret at
/// `secret`: one 64 × 64 → 128-bit multiply, folded.
#[inline(always)]
fn mix16(lo: u64, hi: u64, secret: usize) -> u64 {
    let product =
        u128::from(lo ^ read64(&SECRET, secret)) * u128::from(hi ^ read64(&SECRET, secret + 8));
    (product as u64) ^ ((product >> 64) as u64)
}

/// XXH3's final mix.
#[inline(always)]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(0x1656_6791_9E37_79F9);
    h ^ (h >> 32)
}

/// The decimal digits of `n` (at most 8, `digits` of them, with leading zeros if `n` is shorter) as
/// little-endian bytes: the first digit in the lowest byte, as they would be read from a string.
#[inline(always)]
fn decimal_word(mut n: u64, digits: u32) -> u64 {
    let mut word = 0u64;
    for _ in 0..digits {
        word = (word << 8) | (u64::from(b'0') + n % 10);
        n /= 10;
    }
    word
}

/// XXH3-64 of a fixed prefix followed by decimal numbers: `xxh3_64(format!("{prefix}{n}"))` for a
/// range of `n`, three to four times faster than hashing each string.
///
/// XXH3 hashes an input of 17 to 128 bytes as pairs of 16-byte blocks, one pair from each end,
/// each block mixed with its own part of the secret by a 128-bit multiply; the mixes are summed with
/// the length and the sum avalanched. With the digits at the end, every block that lies within the
/// prefix is the same for all numbers of one length, and is mixed once per length
/// ([`run`](Xxh3Numbered::run)). Of the others, one at most (a front block reaching into the digits)
/// changes only every ten numbers, and the last block differs in its top byte alone, the last digit:
/// a number costs one multiply and the avalanche.
///
/// Lengths outside 17..=128 bytes, and numbers of more than 8 digits, are left to the caller.
#[derive(Debug)]
pub(crate) struct Xxh3Numbered<'a> {
    /// The bytes before the digits.
    prefix: &'a [u8],
    /// The prefix's last 16 bytes as a little-endian number (zero bytes first when it is shorter).
    tail: u128,
}

impl<'a> Xxh3Numbered<'a> {
    /// The hasher of `prefix` followed by numbers.
    pub(crate) fn new(prefix: &'a [u8]) -> Xxh3Numbered<'a> {
        let mut tail = [0u8; 16];
        let take = prefix.len().min(16);
        tail[16 - take..].copy_from_slice(&prefix[prefix.len() - take..]);
        Xxh3Numbered {
            prefix,
            tail: u128::from_le_bytes(tail),
        }
    }

    /// Calls `f` with the hash of the prefix followed by each `n` of `numbers`, in order, when every
    /// `n` has `digits` digits and the inputs are 17 to 128 bytes long, and returns true; otherwise
    /// calls nothing and returns false.
    #[inline(always)]
    pub(crate) fn run(&self, digits: u32, numbers: Range<u64>, mut f: impl FnMut(u64)) -> bool {
        let p = self.prefix.len();
        let len = p + digits as usize;
        if !(17..=128).contains(&len) || !(1..=8).contains(&digits) {
            return false;
        }
        let first = if digits == 1 {
            0
        } else {
            10u64.pow(digits - 1)
        };
        if numbers.start < first || numbers.end > 10u64.pow(digits) {
            return false;
        }
        // The blocks within the prefix, summed with the length; and the front block, if any, that
        // reaches into the digits: how many prefix bytes it holds, and where its secret is.
        let mut input = self.prefix.to_vec();
        input.resize(len, b'0');
        let mut fixed = (len as u64).wrapping_mul(PRIME64_1);
        let mut front = None;
        for pair in 0..(len - 1) / 32 + 1 {
            let (at, secret) = (16 * pair, 32 * pair);
            if at + 16 <= p {
                fixed =
                    fixed.wrapping_add(mix16(read64(&input, at), read64(&input, at + 8), secret));
            } else {
                front = Some((p - at, secret));
            }
            if pair > 0 {
                // Back blocks other than the last end 16 bytes or more before the end, so before
                // the digits.
                let at = len - 16 * (pair + 1);
                fixed = fixed.wrapping_add(mix16(
                    read64(&input, at),
                    read64(&input, at + 8),
                    secret + 16,
                ));
            }
        }
        // The last block: the prefix's last `16 - digits` bytes, then the digits.
        let last_prefix = self.tail >> (8 * digits);
        let mut tens = numbers.start / 10;
        while 10 * tens < numbers.end {
            // The digits of `10 * tens`; the nine numbers after it differ in the last digit only.
            let word = if digits == 1 {
                u64::from(b'0')
            } else {
                decimal_word(tens, digits - 1) | (u64::from(b'0') << (8 * (digits - 1)))
            };
            let mut sum = fixed;
            if let Some((held, secret)) = front {
                let block = (self.tail >> (8 * (16 - held))) | (u128::from(word) << (8 * held));
                sum = sum.wrapping_add(mix16(block as u64, (block >> 64) as u64, secret));
            }
            let block = last_prefix | (u128::from(word) << (8 * (16 - digits)));
            let lo = block as u64;
            let hi = (block >> 64) as u64;
            let from = numbers.start.max(10 * tens) - 10 * tens;
            let to = numbers.end.min(10 * tens + 10) - 10 * tens;
            for last in from..to {
                // The last digit is the block's top byte.
                f(avalanche(sum.wrapping_add(mix16(
                    lo,
                    hi + (last << 56),
                    16,
                ))));
            }
            tens += 1;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors() {
        // xxHash's own sanity values for XXH3_64bits with seed 0.
        assert_eq!(xxh3_64(b""), 0x2D06_8005_38D3_94C2);
        assert_eq!(xxh3_64(b"a"), 0xE6C6_32B6_1E96_4E1F);
        assert_eq!(xxh3_64(b"abc"), 0x78AF_5F94_892F_3950);
    }

    /// Every prefix length, so every block layout (one to four pairs, a front block reaching into
    /// the digits or not), and every digit count the fast path takes, against `xxhash-rust`.
    #[test]
    fn numbered_names_hash_like_xxh3() {
        let bytes: Vec<u8> = (0..130u32).map(|i| (i * 37 % 251) as u8).collect();
        for p in 0..=128 {
            let prefix = &bytes[..p];
            let numbered = Xxh3Numbered::new(prefix);
            for digits in 1..=9u32 {
                let first = if digits == 1 {
                    0
                } else {
                    10u64.pow(digits - 1)
                };
                let last = 10u64.pow(digits);
                // The start and the end of the digit count, and a range that starts and ends within
                // a ten.
                for numbers in [
                    first..(first + 23).min(last),
                    last.saturating_sub(17).max(first)..last,
                    first + 3..first + 8,
                ] {
                    let mut got = Vec::new();
                    let handled = numbered.run(digits, numbers.clone(), |h| got.push(h));
                    let len = p + digits as usize;
                    assert_eq!(
                        handled,
                        (17..=128).contains(&len) && digits <= 8,
                        "{p} {digits}"
                    );
                    if handled {
                        let want: Vec<u64> = numbers
                            .map(|n| {
                                let mut input = prefix.to_vec();
                                input.extend_from_slice(n.to_string().as_bytes());
                                xxh3_64(&input)
                            })
                            .collect();
                        assert_eq!(got, want, "prefix of {p} bytes, {digits} digits");
                    } else {
                        assert!(got.is_empty());
                    }
                }
            }
        }
        // Numbers of the wrong length are refused.
        let numbered = Xxh3Numbered::new(b"a-long-enough-prefix-");
        assert!(!numbered.run(2, 5..20, |_| {}));
        assert!(!numbered.run(2, 10..101, |_| {}));
        assert!(!numbered.run(0, 0..1, |_| {}));
        assert!(!numbered.run(30, 0..1, |_| {}));
    }
}
