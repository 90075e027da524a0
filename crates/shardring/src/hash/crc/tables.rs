//! CRC-32 by slicing tables: sixteen 1 KiB tables, so that each byte of a 16-byte block is looked up
//! in its own and the lookups are independent of each other. In a loop of bare hashes the fastest
//! CRC-32 of short keys here (a one-off loop when this was written), and what keys under 16 bytes and
//! the last bytes of longer ones take.
//! The tables are built at compile time from the polynomial.

/// The reflected IEEE 802.3 polynomial.
const POLYNOMIAL: u32 = 0xEDB8_8320;

/// `TABLES[0]` is the classic byte-at-a-time table; `TABLES[k][b]` is the CRC of byte `b` followed by
/// `k` zero bytes, so the bytes of a block can be looked up independently and XORed together.
static TABLES: [[u32; 256]; 16] = tables();

const fn tables() -> [[u32; 256]; 16] {
    let mut tables = [[0u32; 256]; 16];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                POLYNOMIAL ^ (crc >> 1)
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut k = 1;
    while k < 16 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous >> 8) ^ tables[0][(previous & 0xff) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
}

/// CRC-32/ISO-HDLC of `key` through the tables.
#[inline(always)]
pub(super) fn crc32(key: &[u8]) -> u32 {
    !advance(!0, key)
}

/// The running (inverted) CRC `crc` advanced over `bytes`: 16-byte blocks, then an 8-byte and a
/// 4-byte one, then single bytes.
#[inline(always)]
pub(super) fn advance(mut crc: u32, bytes: &[u8]) -> u32 {
    let (blocks, rest) = bytes.as_chunks::<16>();
    for block in blocks {
        crc = fold(crc, block);
    }
    let (eight, rest) = rest.as_chunks::<8>();
    for block in eight {
        crc = fold(crc, block);
    }
    let (four, rest) = rest.as_chunks::<4>();
    for block in four {
        crc = fold(crc, block);
    }
    for &byte in rest {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(byte)) & 0xff) as usize];
    }
    crc
}

/// `crc` advanced over `block` (4, 8 or 16 bytes): the running CRC is XORed into the block's first four
/// bytes, and byte `i` of the block is looked up in the table of the `N - 1 - i` zero bytes after it.
#[inline(always)]
fn fold<const N: usize>(crc: u32, block: &[u8; N]) -> u32 {
    let head = (crc ^ u32::from_le_bytes([block[0], block[1], block[2], block[3]])).to_le_bytes();
    let mut folded = 0;
    // A plain counted loop over a constant `N`, which LLVM unrolls into one load and one XOR a byte;
    // an iterator chain (`enumerate().skip(4)`) stayed a loop, with more instructions a byte.
    for i in 0..N {
        let byte = if i < 4 { head[i] } else { block[i] };
        folded ^= TABLES[N - 1 - i][usize::from(byte)];
    }
    folded
}
