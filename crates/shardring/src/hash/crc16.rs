//! CRC-16/XMODEM (polynomial 0x1021, initial value 0, not reflected, no final xor): the `crc16` of
//! twemproxy's hash list and of Redis Cluster's key slots. One table for both, built at compile time
//! so it cannot drift from the polynomial; twemproxy's variant steps a wider accumulator over it
//! ([`crate::hash::twemproxy::crc16`]).

/// Entry `i` is the checksum register after shifting byte `i` through it from zero.
pub(crate) static TABLE: [u16; 256] = table();

/// Builds [`TABLE`] bit by bit (polynomial 0x1021, most significant bit first).
const fn table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        // `i < 256`, so the cast keeps every bit.
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// CRC-16/XMODEM of `bytes` (Redis's `crc16.c`). The checksum of `"123456789"` is `0x31C3`.
pub fn crc16_xmodem(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| crc16_xmodem_step(crc, b))
}

/// The CRC-16/XMODEM register `crc` after one more byte: [`crc16_xmodem`] is this folded over the
/// bytes from 0. For a caller that looks at each byte as it goes (Redis Cluster's key slot, which
/// hashes the whole key unless it finds a `{`).
#[inline]
pub fn crc16_xmodem_step(crc: u16, byte: u8) -> u16 {
    // The index is the register's top byte xor the input byte: always below 256.
    (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ byte)]
}
