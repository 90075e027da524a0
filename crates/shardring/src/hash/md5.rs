//! MD5, from the `md-5` crate, and ketama's way of reading a 32-bit value out of the digest.

use md5::{Digest, Md5};

/// The 16-byte MD5 digest of `key`.
#[inline]
pub fn md5_digest(key: &[u8]) -> [u8; 16] {
    Md5::digest(key).into()
}

/// The first four bytes of the MD5 digest, read little-endian.
///
/// This is how libketama, libmemcached and twemproxy turn a key into a ring position, so the same
/// function serves their compatibility modes.
#[inline]
pub fn md5_u32(key: &[u8]) -> u32 {
    let d = md5_digest(key);
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1321_vectors() {
        let hex = |d: [u8; 16]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(md5_digest(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(md5_digest(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(md5_digest(b"message digest")),
            "f96b697d7cb7938d525a2f31aaf161d0"
        );
        // d4 1d 8c d9 read little-endian.
        assert_eq!(md5_u32(b""), 0xd98c_1dd4);
    }
}
