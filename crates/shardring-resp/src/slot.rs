//! Where Redis Cluster keeps a key: its hash slot, CRC16 of the key (or of its hash tag) mod 16384.
//!
//! A proxy in front of a cluster must put every key on the node the cluster itself would, byte for
//! byte, or each request costs a `MOVED` round trip; `shardring migrate` must copy each key into its
//! slot's master. Both sit above this crate, so the rule lives here, once, beside the replies that
//! carry the slot map.
//!
//! The rule is `keyHashSlot` of Redis's `cluster.c`:
//! - the key's first `{`, then the first `}` after it; when both exist and enclose at least one byte,
//!   only those bytes are hashed (the *hash tag*), so `{user1000}.following` and
//!   `{user1000}.followers` share a slot;
//! - otherwise (no `{`, no `}` after it, or an empty tag `{}`) the whole key is hashed.
//!
//! The checksum is CRC-16/XMODEM (polynomial 0x1021, initial value 0, not reflected, no final xor), as
//! the Redis Cluster specification gives it; its low 14 bits are the slot.
//!
//! ```
//! use shardring_resp::{hash_tag, key_slot};
//!
//! assert_eq!(key_slot(b"123456789"), 0x31C3 % 16384);
//! assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
//! assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}"); // an empty tag: the whole key
//! ```

/// How many hash slots a Redis cluster has: a slot is a number below this.
pub const SLOT_COUNT: u16 = 16384;

/// CRC-16/XMODEM of `bytes` (the `crc16` of Redis's `crc16.c`): polynomial 0x1021, initial value 0, no
/// reflection, no final xor. The checksum of `"123456789"` is `0x31C3`. The library's table, shared
/// with twemproxy's `crc16` ([`shardring::hash::crc16_xmodem`]).
pub fn crc16(bytes: &[u8]) -> u16 {
    shardring::hash::crc16_xmodem(bytes)
}

/// The bytes of `key` Redis Cluster hashes: the hash tag (between the first `{` and the first `}`
/// after it) when it is not empty, else the whole key.
///
/// Keys with the same hash tag are in the same slot, which is what lets a multi-key command or a
/// transaction run on one node; a proxy splitting a command by slot can group keys by this.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let after = &key[open + 1..];
    match after.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &after[..close],
        _ => key,
    }
}

/// The hash slot Redis Cluster keeps `key` in: [`crc16`] of its [`hash_tag`] mod [`SLOT_COUNT`], as
/// `CLUSTER KEYSLOT` answers. Always below [`SLOT_COUNT`].
pub fn key_slot(key: &[u8]) -> u16 {
    // Most keys have no `{`: one pass checksums the whole key while looking for one, and a key
    // that has one goes the hash tag's way (a search, then the checksum).
    let mut crc = 0u16;
    for &b in key {
        if b == b'{' {
            return crc16(hash_tag(key)) & (SLOT_COUNT - 1);
        }
        crc = shardring::hash::crc16_xmodem_step(crc, b);
    }
    crc & (SLOT_COUNT - 1)
}

#[cfg(test)]
mod tests;
