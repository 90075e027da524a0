//! Enumerating a database with `SCAN cursor COUNT n` until the cursor is back to 0.
//!
//! `SCAN` guarantees every key present for the whole scan is returned at least once, and may return a
//! key more than once (when the table is rehashed meanwhile): callers deduplicate what they act on.
//!
//! One `SCAN` call runs whole on the server's one thread: with `COUNT 1000` it holds it for the best
//! part of a millisecond, which the live traffic waits out (BENCHMARKS.md, "migrate: copy speed and
//! live latency"). So the count follows the copy's batch ([`count_for`]): small batches (a rate
//! limit) scan in small steps.

use super::conn::Conn;
use crate::MigrateError;
use shardring_resp::Value;

/// The `SCAN` count for a job copying `batch` keys a round trip: five batches' worth, between 50
/// and 1000 (a hint: Redis returns about that many keys a call, fewer when most of them do not move).
pub fn count_for(batch: usize) -> usize {
    batch.saturating_mul(5).clamp(50, 1000)
}

/// A scan in progress.
#[derive(Debug)]
pub struct Scan {
    cursor: Vec<u8>,
    done: bool,
    /// `COUNT`, as sent.
    count: Vec<u8>,
}

impl Scan {
    /// A scan from the start, asking for about `count` keys a call.
    pub fn new(count: usize) -> Scan {
        Scan {
            cursor: b"0".to_vec(),
            done: false,
            count: count.max(1).to_string().into_bytes(),
        }
    }

    /// The next keys (possibly none: `SCAN` may return an empty page before the end), or `None` at
    /// the end.
    ///
    /// # Errors
    /// When the server fails or answers something other than `SCAN`'s reply.
    pub async fn next(&mut self, conn: &mut Conn) -> Result<Option<Vec<Vec<u8>>>, MigrateError> {
        if self.done {
            return Ok(None);
        }
        let reply = conn
            .call(&[&b"SCAN"[..], &self.cursor, b"COUNT", &self.count])
            .await?;
        let bad = |why: &str| conn.refused(format!("SCAN: {why}: {reply:?}"));
        let Value::Array(parts) = &reply else {
            return Err(bad("not an array"));
        };
        let [Value::Bulk(cursor), Value::Array(keys)] = parts.as_slice() else {
            return Err(bad("not a cursor and keys"));
        };
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            match k {
                Value::Bulk(k) => out.push(k.clone()),
                _ => return Err(bad("a key that is not a bulk string")),
            }
        }
        self.done = cursor.as_slice() == b"0";
        self.cursor = cursor.clone();
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_count_follows_the_batch_within_its_bounds() {
        assert_eq!(count_for(20), 100, "the default rate's batches");
        assert_eq!(count_for(1), 50);
        assert_eq!(count_for(500), 1000, "unlimited: as before");
        assert_eq!(count_for(usize::MAX), 1000);
    }
}
