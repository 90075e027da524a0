//! The source's keys, from `lru_crawler metadump hash` (or `all`: [`Walk`]): one line per item,
//! `key=<url-encoded key> exp=<unix time or -1> la=<..> cas=<..> fetch=<yes|no> cls=<n> size=<n>`,
//! each ending in a bare `\n`, then `END\r\n`.
//!
//! Lines are read as `name=value` tokens so a version that adds fields (or reorders them) still
//! parses; a line without a decodable key is skipped with a warning, never a reason to stop.
//!
//! The dump is streamed: the copy works on a batch while the rest of the dump waits in the socket
//! (memcached's crawler thread waits for the client to read, and other requests are served
//! meanwhile). Nothing may be written on a dump's connection until its `END`: the crawler reads and
//! discards what a client sends during a dump.

use std::time::{Duration, Instant};

use crate::MigrateError;

use super::conn::Conn;

/// How long a busy crawler (another dump, or an `lru_crawler crawl` running on the server) is waited
/// for before the job gives up.
const BUSY_WAIT: Duration = Duration::from_secs(60);

/// How often the crawler is asked again while busy.
const BUSY_RETRY: Duration = Duration::from_millis(200);

/// How the crawler walks the items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// `lru_crawler metadump hash` (memcached 1.6.9 and later): the hash table, bucket by bucket.
    /// An item present for the whole walk is listed however often it is read meanwhile.
    Hash,
    /// `lru_crawler metadump all`: each LRU from its tail, for servers that refuse `hash`. It misses
    /// items the LRU maintainer moves between LRUs while it walks, which a read sets off: right
    /// after a read of each of 1000 keys (and again a second later), a dump of memcached 1.6.18
    /// listed none of them, and a dump 200 ms later all 1000.
    Lru,
}

impl Walk {
    fn command(self) -> &'static [u8] {
        match self {
            Walk::Hash => b"lru_crawler metadump hash\r\n",
            Walk::Lru => b"lru_crawler metadump all\r\n",
        }
    }
}

/// One item of the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key, decoded.
    pub key: Vec<u8>,
    /// The item's size as memcached counts it (header, key and value); 0 when the line has none.
    pub size: u64,
}

/// What one line of the dump is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// An item.
    Entry(Entry),
    /// `END`: the dump is complete.
    End,
    /// `BUSY …`: another crawl is running; ask again later.
    Busy,
    /// An error the server answered instead of a dump (`ERROR …`, `CLIENT_ERROR …`, …).
    Refused(String),
    /// Not a line we can use (logged and skipped).
    Malformed(&'static str),
}

/// Reads one line of the dump (without its line end).
pub fn parse_line(line: &[u8]) -> Line {
    if line == b"END" {
        return Line::End;
    }
    if line.starts_with(b"BUSY") {
        return Line::Busy;
    }
    for refusal in [
        &b"ERROR"[..],
        b"CLIENT_ERROR",
        b"SERVER_ERROR",
        b"BADCLASS",
        b"NOTSTARTED",
    ] {
        if line.starts_with(refusal) {
            return Line::Refused(String::from_utf8_lossy(line).into_owned());
        }
    }
    let mut key = None;
    let mut size = 0;
    for token in line.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        let Some(eq) = token.iter().position(|&b| b == b'=') else {
            return Line::Malformed("a token without '='");
        };
        let (name, value) = (&token[..eq], &token[eq + 1..]);
        match name {
            b"key" => match url_decode(value) {
                Some(k) if !k.is_empty() => key = Some(k),
                _ => return Line::Malformed("a key that does not decode"),
            },
            b"size" => match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                Some(s) => size = s,
                None => return Line::Malformed("a size that is not a number"),
            },
            _ => {}
        }
    }
    match key {
        Some(key) => Line::Entry(Entry { key, size }),
        None => Line::Malformed("no key"),
    }
}

/// Decodes `%XX` escapes (memcached escapes every byte but letters, digits and `-._~`); `None` on a
/// truncated or non-hex escape. A `+` stays a `+` (memcached writes a space as `%20`).
pub fn url_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hi = hex(*s.get(i + 1)?)?;
            let lo = hex(*s.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A dump being read, on a connection of its own (passed to each call: nothing else may use it
/// until the dump ends).
#[derive(Debug)]
pub(crate) struct Dump {
    /// The first entry, read while checking the crawler was not busy.
    first: Option<Entry>,
    done: bool,
}

impl Dump {
    /// Starts a dump of every item, walking as `walk` says (a server that refuses the hash walk
    /// turns it to [`Walk::Lru`], for this dump and the caller's next), asking again while the
    /// crawler is busy (up to a minute).
    pub async fn start(conn: &mut Conn, walk: &mut Walk) -> Result<Dump, MigrateError> {
        let deadline = Instant::now() + BUSY_WAIT;
        loop {
            conn.send(walk.command()).await?;
            // The first line tells a dump from a refusal; malformed lines before it are skipped.
            loop {
                let line = conn.read_line().await?;
                match parse_line(&line) {
                    Line::Entry(e) => {
                        return Ok(Dump {
                            first: Some(e),
                            done: false,
                        })
                    }
                    Line::End => {
                        return Ok(Dump {
                            first: None,
                            done: true,
                        })
                    }
                    Line::Busy => break,
                    // Older than 1.6.9: `hash` read as a slab class list (`BADCLASS …`).
                    Line::Refused(reason) if *walk == Walk::Hash => {
                        tracing::info!(
                            server = conn.name(),
                            reason,
                            "the server has no hash walk (memcached before 1.6.9); dumping by LRU, \
                             which can miss keys read during the dump (later passes find them)"
                        );
                        *walk = Walk::Lru;
                        break;
                    }
                    Line::Refused(reason) => {
                        return Err(MigrateError::Protocol {
                            server: conn.name().to_string(),
                            reason: format!("lru_crawler metadump: {reason}"),
                        })
                    }
                    Line::Malformed(why) => warn_malformed(conn.name(), &line, why),
                }
            }
            if Instant::now() >= deadline {
                return Err(MigrateError::Protocol {
                    server: conn.name().to_string(),
                    reason: format!("the LRU crawler stayed busy for {BUSY_WAIT:?}"),
                });
            }
            tracing::debug!(server = conn.name(), "LRU crawler busy; asking again");
            tokio::time::sleep(BUSY_RETRY).await;
        }
    }

    /// The next item, or `None` after `END`.
    pub async fn next(&mut self, conn: &mut Conn) -> Result<Option<Entry>, MigrateError> {
        if let Some(e) = self.first.take() {
            return Ok(Some(e));
        }
        while !self.done {
            let line = conn.read_line().await?;
            match parse_line(&line) {
                Line::Entry(e) => return Ok(Some(e)),
                Line::End => self.done = true,
                Line::Busy | Line::Refused(_) => {
                    return Err(MigrateError::Protocol {
                        server: conn.name().to_string(),
                        reason: format!(
                            "lru_crawler metadump: {} in the middle of a dump",
                            String::from_utf8_lossy(&line)
                        ),
                    })
                }
                Line::Malformed(why) => warn_malformed(conn.name(), &line, why),
            }
        }
        Ok(None)
    }
}

fn warn_malformed(server: &str, line: &[u8], why: &str) {
    tracing::warn!(
        server,
        line = %String::from_utf8_lossy(line),
        "skipping a metadump line: {why}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &[u8], size: u64) -> Line {
        Line::Entry(Entry {
            key: key.to_vec(),
            size,
        })
    }

    #[test]
    fn a_line_of_memcached_1_6() {
        assert_eq!(
            parse_line(b"key=plain exp=-1 la=1796298309 cas=2 fetch=yes cls=1 size=65"),
            entry(b"plain", 65)
        );
    }

    #[test]
    fn keys_are_url_decoded() {
        assert_eq!(
            parse_line(b"key=a%25b%C3%A9 exp=1796298408 size=71"),
            entry("a%bé".as_bytes(), 71)
        );
        assert_eq!(parse_line(b"key=k%01%20x+y size=1"), entry(b"k\x01 x+y", 1));
        assert_eq!(url_decode(b"%2f%2F"), Some(b"//".to_vec()));
    }

    #[test]
    fn unknown_fields_and_order_are_ignored() {
        assert_eq!(
            parse_line(b"size=9 ttl=12 key=k%5F new=field flag=x  extra="),
            entry(b"k_", 9)
        );
        assert_eq!(parse_line(b"key=nosize exp=-1"), entry(b"nosize", 0));
    }

    #[test]
    fn malformed_lines_are_skipped_not_fatal() {
        for line in [
            &b""[..],
            b"garbage",
            b"key=%",
            b"key=%4",
            b"key=%zz size=1",
            b"key= size=1",
            b"exp=-1 size=3",
            b"key=k size=big",
            b"key=k size=-1",
            b"\xff\xfe=\x00",
        ] {
            assert!(
                matches!(parse_line(line), Line::Malformed(_)),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn end_busy_and_refusals() {
        assert_eq!(parse_line(b"END"), Line::End);
        assert_eq!(
            parse_line(b"BUSY currently processing crawler request"),
            Line::Busy
        );
        assert!(matches!(
            parse_line(b"ERROR lru crawler disabled"),
            Line::Refused(_)
        ));
        assert!(matches!(
            parse_line(b"CLIENT_ERROR bad command line format"),
            Line::Refused(_)
        ));
    }
}
