//! The proxy's `SCAN` cursor: which server a scan is on, that server's own cursor, and a check of the
//! pool's server list, in one unsigned 64-bit number written in decimal, as Redis writes its own.
//!
//! ```text
//!  63                       CHECK_BITS + index bits     CHECK_BITS         0
//! [ the server's own cursor | the server's index      | membership check ]
//! ```
//!
//! - `0` starts a scan at server 0, and is the last cursor of a scan, as in Redis.
//! - The index takes as few bits as the pool's server count needs (none for one server, 2 for
//!   three or four), and the server's cursor sits above it. Redis's cursors are below its hash
//!   table's size, so the proxy's stay small too: a 4-server pool of a million keys a server gives
//!   cursors under 2³⁹, and tables up to 2³⁴ buckets under 2⁵³, which clients that keep a cursor in
//!   a double (JavaScript) or a signed 64-bit integer keep exactly.
//! - The low [`CHECK_BITS`] are a digest of the pool's server addresses and `redis_db`
//!   ([`SpanScope::membership`](crate::protocol::redis::settings::SpanScope)). A cursor carries
//!   every bit of the scan's state, so any proxy with the same server list continues it, and the
//!   proxy keeps nothing per scan.
//!
//! Why every key present for the whole scan is returned at least once (Redis's promise): the scan
//! visits the servers in index order, and each server is scanned with its own cursor from its own
//! `0` until it answers `0` again, the proxy only carrying that cursor across in the upper bits. While
//! the server list is unchanged, a key present throughout stays on the server that holds it, and
//! that server's full scan returns it: Redis's promise, server by server. Keys added or deleted
//! during the scan may or may not be returned, as in Redis.
//!
//! When the server list changes mid-scan (a reload, an etcd membership change, a cut-over), keys
//! move between servers and the index in an older cursor may name another server, or none: no
//! continuation could keep the promise. The check bits see the change, and the cursor is refused
//! with `-ERR invalid cursor: …start again from cursor 0`. A change whose digest happens to agree in
//! its low [`CHECK_BITS`] bits (one in 65,536) goes unnoticed: the scan then continues on whichever
//! server the index names, and may miss or repeat keys. Ejections and returns of servers change no
//! index and no digest: a scan whose server is down fails with that server's error, and the same
//! cursor works again once it is back. A Sentinel failover keeps the file's server list, and so the
//! digest, but puts another process behind the index, whose hash table a cursor of the old master
//! does not describe: a scan across a failover may miss keys of that server, as a scan of one Redis
//! across a failover may.

/// How many low bits of a cursor check the pool's server list: 65,536 times larger cursors, for all
/// but one in 65,536 server-list changes caught (8 bits missed one in 256: too often for a scan
/// that then silently misses keys).
pub(crate) const CHECK_BITS: u32 = 16;

/// Where a scan is: a server and that server's own cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The server's index among the pool's servers.
    pub(crate) server: usize,
    /// The cursor to send it (0: from its start).
    pub(crate) cursor: u64,
}

/// Why a cursor is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CursorError {
    /// Not a decimal number that fits 64 bits (`abc`, `-1`, `18446744073709551616`), or an index
    /// past the pool's servers.
    #[error("invalid cursor")]
    Invalid,
    /// Made for another server list: the pool's servers changed since the scan began.
    #[error("invalid cursor: the pool's servers changed since this scan began; start again from cursor 0")]
    OtherMembership,
}

/// A server's own cursor too large to carry with its index and check in 64 bits (Redis's cursors
/// are below their hash table's size: this needs a table of 2⁴⁰ buckets or more even with 256 servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("server cursor {cursor} does not fit the proxy's 64-bit cursor beside a server index")]
pub(crate) struct TooLarge {
    /// The server's cursor.
    pub(crate) cursor: u64,
}

/// The bits an index takes in a pool of `servers` servers: enough for `servers - 1`.
fn index_bits(servers: usize) -> u32 {
    let largest = servers.saturating_sub(1) as u64;
    u64::BITS - largest.leading_zeros()
}

/// The check bits of a pool whose server list has digest `membership`.
fn check(membership: u64) -> u64 {
    membership & ((1 << CHECK_BITS) - 1)
}

/// The cursor text a client sent, as the position it names in a pool of `servers` servers whose
/// list has digest `membership`.
///
/// # Errors
/// [`CursorError::Invalid`] for anything but a decimal 64-bit number naming one of the pool's
/// servers; [`CursorError::OtherMembership`] for one made for another server list.
pub(crate) fn decode(
    text: &[u8],
    servers: usize,
    membership: u64,
) -> Result<Position, CursorError> {
    if text.is_empty() || text.len() > 20 || !text.iter().all(u8::is_ascii_digit) {
        return Err(CursorError::Invalid);
    }
    let mut value: u64 = 0;
    for &d in text {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or(CursorError::Invalid)?;
    }
    if value == 0 {
        return Ok(Position {
            server: 0,
            cursor: 0,
        });
    }
    if value & ((1 << CHECK_BITS) - 1) != check(membership) {
        return Err(CursorError::OtherMembership);
    }
    let bits = index_bits(servers);
    let rest = value >> CHECK_BITS;
    let server = rest & 1u64.checked_shl(bits).map_or(u64::MAX, |b| b - 1);
    let server = usize::try_from(server).map_err(|_| CursorError::Invalid)?;
    if server >= servers {
        return Err(CursorError::Invalid);
    }
    // `bits` is at most 64 - CHECK_BITS here: a shift of `rest` by it stays under 64.
    let cursor = rest.checked_shr(bits).unwrap_or(0);
    Ok(Position { server, cursor })
}

/// The cursor of `at` in a pool of `servers` servers whose list has digest `membership`; `at` must
/// not be the start (server 0, cursor 0), which is the cursor `0`.
///
/// # Errors
/// [`TooLarge`] when the server's cursor does not fit beside the index and the check.
pub(crate) fn encode(at: Position, servers: usize, membership: u64) -> Result<u64, TooLarge> {
    let bits = index_bits(servers) + CHECK_BITS;
    let too_large = TooLarge { cursor: at.cursor };
    let high = at.cursor.checked_shl(bits).ok_or(too_large)?;
    if high >> bits != at.cursor {
        return Err(too_large);
    }
    Ok(high | ((at.server as u64) << CHECK_BITS) | check(membership))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DIGEST: u64 = 0x1234_5678_9abc_de5a;

    #[test]
    fn zero_starts_at_the_first_server_and_malformed_cursors_are_invalid() {
        assert_eq!(
            decode(b"0", 3, DIGEST),
            Ok(Position {
                server: 0,
                cursor: 0
            })
        );
        for bad in [
            &b""[..],
            b"abc",
            b"-1",
            b"+5",
            b" 5",
            b"5 ",
            b"1.5",
            b"18446744073709551616",
            b"99999999999999999999999",
            b"\xff",
        ] {
            assert_eq!(
                decode(bad, 3, DIGEST),
                Err(CursorError::Invalid),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // u64::MAX decodes as a number; its check bits are not this pool's.
        assert_eq!(
            decode(b"18446744073709551615", 3, DIGEST),
            Err(CursorError::OtherMembership)
        );
    }

    #[test]
    fn an_index_past_the_pools_servers_is_invalid_and_another_membership_is_named() {
        // Three servers: two index bits, index 3 names no server.
        let index_3 = (3u64 << CHECK_BITS) | (DIGEST & 0xffff);
        assert_eq!(
            decode(index_3.to_string().as_bytes(), 3, DIGEST),
            Err(CursorError::Invalid)
        );
        let at = Position {
            server: 2,
            cursor: 77,
        };
        let cursor = encode(at, 3, DIGEST).unwrap();
        assert_eq!(
            decode(cursor.to_string().as_bytes(), 3, DIGEST ^ 1),
            Err(CursorError::OtherMembership)
        );
        assert_eq!(decode(cursor.to_string().as_bytes(), 3, DIGEST), Ok(at));
    }

    #[test]
    fn cursors_stay_small_for_small_tables() {
        // Server 3 of 4 at Redis cursor 2^20 (a table of a million buckets): under 2^39.
        let c = encode(
            Position {
                server: 3,
                cursor: 1 << 20,
            },
            4,
            DIGEST,
        )
        .unwrap();
        assert!(c < 1 << 39, "{c}");
        // One server: no index bits.
        assert_eq!(
            encode(
                Position {
                    server: 0,
                    cursor: 1
                },
                1,
                DIGEST
            ),
            Ok((1 << 16) | (DIGEST & 0xffff))
        );
    }

    #[test]
    fn a_server_cursor_too_large_to_carry_is_refused_not_truncated() {
        let at = Position {
            server: 1,
            cursor: u64::MAX >> 17,
        };
        assert_eq!(encode(at, 3, DIGEST), Err(TooLarge { cursor: at.cursor }));
        let fits = Position {
            server: 1,
            cursor: u64::MAX >> 18,
        };
        let c = encode(fits, 3, DIGEST).unwrap();
        assert_eq!(decode(c.to_string().as_bytes(), 3, DIGEST), Ok(fits));
    }

    proptest! {
        #[test]
        fn every_position_that_fits_round_trips(
            servers in 1usize..5000,
            server_seed in any::<usize>(),
            cursor in any::<u64>(),
            shift in 0u32..64,
            membership in any::<u64>(),
        ) {
            let at = Position { server: server_seed % servers, cursor: cursor >> shift };
            prop_assume!(at != Position { server: 0, cursor: 0 });
            match encode(at, servers, membership) {
                Ok(c) => {
                    prop_assert_ne!(c, 0);
                    prop_assert_eq!(decode(c.to_string().as_bytes(), servers, membership), Ok(at));
                }
                // Refused only when the cursor truly needs more bits than are left.
                Err(TooLarge { cursor }) => {
                    prop_assert_eq!(cursor, at.cursor);
                    prop_assert!(
                        u64::BITS - cursor.leading_zeros() + index_bits(servers) + CHECK_BITS > 64
                    );
                }
            }
        }

        #[test]
        fn any_text_decodes_without_panicking_to_a_server_of_the_pool(
            text in proptest::collection::vec(any::<u8>(), 0..24),
            digits in "[0-9]{1,21}",
            servers in 1usize..300,
            membership in any::<u64>(),
        ) {
            for t in [&text[..], digits.as_bytes()] {
                if let Ok(p) = decode(t, servers, membership) {
                    prop_assert!(p.server < servers);
                }
            }
        }
    }
}
