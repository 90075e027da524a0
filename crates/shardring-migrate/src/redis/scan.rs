//! Enumerating a database with `SCAN cursor COUNT 1000` until the cursor is back to 0.
//!
//! `SCAN` guarantees every key present for the whole scan is returned at least once, and may return a
//! key more than once (when the table is rehashed meanwhile): callers deduplicate what they act on.

use super::conn::Conn;
use super::resp::Reply;
use crate::MigrateError;

/// Keys asked for per `SCAN` call (a hint: Redis returns about that many).
pub const SCAN_COUNT: &str = "1000";

/// A scan in progress.
#[derive(Debug)]
pub struct Scan {
    cursor: Vec<u8>,
    done: bool,
}

impl Default for Scan {
    fn default() -> Scan {
        Scan::new()
    }
}

impl Scan {
    /// A scan from the start.
    pub fn new() -> Scan {
        Scan {
            cursor: b"0".to_vec(),
            done: false,
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
            .call(&[&b"SCAN"[..], &self.cursor, b"COUNT", SCAN_COUNT.as_bytes()])
            .await?;
        let bad = |why: &str| conn.refused(format!("SCAN: {why}: {reply:?}"));
        let Reply::Array(parts) = &reply else {
            return Err(bad("not an array"));
        };
        let [Reply::Bulk(cursor), Reply::Array(keys)] = parts.as_slice() else {
            return Err(bad("not a cursor and keys"));
        };
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            match k {
                Reply::Bulk(k) => out.push(k.clone()),
                _ => return Err(bad("a key that is not a bulk string")),
            }
        }
        self.done = cursor.as_slice() == b"0";
        self.cursor = cursor.clone();
        Ok(Some(out))
    }
}
