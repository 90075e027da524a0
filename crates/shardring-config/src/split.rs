//! A pool's split keys (*proxy-only*): hot keys kept on several servers so that their reads spread
//! over them, each in a phase every proxy of the pool agrees on.
//!
//! Consistent hashing puts every request for one key on one server; a key read by everyone (a
//! celebrity's news) is that server's load alone. A split key is kept as `copies` copies on the key's
//! owner and the ring's next distinct servers, and its reads are spread over them. Which keys are
//! split must be the same on every proxy that writes them: a proxy that does not split a key writes
//! only its owner, and a proxy that reads the key from a copy would then read an old value. So the
//! set is a file every proxy reads (`shardring proxy --hot-key-split-keys [POOL=]FILE`, read again on
//! every reload), and each key moves through two phases that the operator (or a tool) changes one at
//! a time, every proxy serving the first before any serves the second:
//!
//! - `write KEY`: the key's writes keep its copies from going stale (the proxy writes the owner, then
//!   deletes the copies), reads stay on the owner;
//! - `read KEY`: the same writes, and reads spread over the copies (a copy that does not hold the key
//!   is filled from the owner, never over a newer write).
//!
//! A key is split by listing it `write` on every proxy, then `read`; it is merged back by `write`
//! again, then by leaving it out. [`SplitConfig::digest`] (in the stats as `split_digest`) tells
//! whether every proxy serves the same set.
//!
//! The file: one key a line, `write KEY` or `read KEY`, optionally followed by the number of servers
//! that hold that key (`read news:1 12`; `--hot-key-split`'s number when left out: the hotter a key,
//! the more copies it wants); blank lines and lines starting with `#` are skipped; a key's bytes are
//! as written, except `%XX` (two hex digits) for any byte, which a space, a `%` or a byte that is not
//! printable must be written as.
//!
//! A key's number of copies changes through `write` too: a proxy reading more copies than another
//! deletes after its writes would read stale ones. From `read N` to `read M`: `write max(N, M)` on
//! every proxy first.

use std::collections::BTreeMap;

/// Which phase a split key is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SplitPhase {
    /// Writes keep the copies from going stale; reads stay on the owner.
    Write,
    /// Writes as in [`SplitPhase::Write`], and reads spread over the copies.
    Read,
}

impl SplitPhase {
    /// The word the file writes it with.
    pub fn word(self) -> &'static str {
        match self {
            SplitPhase::Write => "write",
            SplitPhase::Read => "read",
        }
    }
}

/// One split key's phase and how many servers hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitKey {
    /// Its phase.
    pub phase: SplitPhase,
    /// How many servers hold it: its owner and the ring's next distinct servers.
    pub copies: usize,
}

/// A pool's split keys: each key's phase and how many servers hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitConfig {
    /// How many servers hold a split key the file lists without a number (2 or more).
    /// `shardring proxy --hot-key-split [POOL=]S`.
    pub copies: usize,
    /// Each split key (as clients name it), its phase and copies.
    pub keys: BTreeMap<Vec<u8>, SplitKey>,
}

impl SplitConfig {
    /// The split keys of `text` (the file's contents, see the module's documentation), each held
    /// by `copies` servers.
    ///
    /// # Errors
    /// Every line that is not a phase and a key, and every key listed twice, each with its line
    /// number.
    pub fn parse(copies: usize, text: &str) -> Result<SplitConfig, Vec<String>> {
        let mut keys = BTreeMap::new();
        let mut problems = Vec::new();
        for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (phase, key, count, rest) =
                (words.next(), words.next(), words.next(), words.next());
            let phase = match phase {
                Some("write") => SplitPhase::Write,
                Some("read") => SplitPhase::Read,
                other => {
                    problems.push(format!(
                        "line {n}: {:?} is not a phase (write or read)",
                        other.unwrap_or_default()
                    ));
                    continue;
                }
            };
            let (Some(key), None) = (key, rest) else {
                problems.push(format!(
                    "line {n}: a line is a phase, one key and perhaps its copies (`{} KEY [N]`, a space in a key written %20)",
                    phase.word()
                ));
                continue;
            };
            let copies = match count.map(str::parse::<usize>) {
                None => copies,
                Some(Ok(c)) if c >= 2 => c,
                Some(_) => {
                    problems.push(format!(
                        "line {n}: {:?} is not a number of copies (2 or more)",
                        count.unwrap_or_default()
                    ));
                    continue;
                }
            };
            match unescape(key) {
                Ok(bytes) => {
                    if keys.insert(bytes, SplitKey { phase, copies }).is_some() {
                        problems.push(format!("line {n}: key {key} is listed twice"));
                    }
                }
                Err(e) => problems.push(format!("line {n}: {e}")),
            }
        }
        if problems.is_empty() {
            Ok(SplitConfig { copies, keys })
        } else {
            Err(problems)
        }
    }

    /// The file's text for these split keys (each with its copies), which reads back as them.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for (key, k) in &self.keys {
            text.push_str(&format!(
                "{} {} {}\n",
                k.phase.word(),
                escape(key),
                k.copies
            ));
        }
        text
    }

    /// A digest of the set (each key, its phase and copies): equal on two proxies exactly when they
    /// split the same keys alike.
    pub fn digest(&self) -> String {
        format!("{:016x}", shardring::hash::xxh3_64(self.text().as_bytes()))
    }

    /// Every problem with these settings in pool `n` of `servers` servers.
    ///
    /// With `replicas` (more than 1), a key's replica set stands for its owner and its copies follow
    /// it on the ring: a key split over S is on `replicas + S - 1` servers, which the pool must have.
    pub(super) fn validate(
        &self,
        n: &str,
        servers: usize,
        replicas: usize,
        errors: &mut super::ConfigErrors,
    ) {
        let most = self
            .copies
            .max(self.keys.values().map(|k| k.copies).max().unwrap_or(0));
        if self.copies < 2 || most > servers {
            errors.push(
                n,
                format!(
                    "a split key's copies must be between 2 and the number of servers ({servers}), not {most}"
                ),
            );
        } else if replicas > 1 && replicas + most - 1 > servers {
            errors.push(
                n,
                format!(
                    "a key split over {most} in a pool of {replicas} replicas is on {} servers \
                     (its replicas, then the copies after them), and the pool has {servers}",
                    replicas + most - 1,
                ),
            );
        }
    }
}

/// The key beside a Redis split key's copy that holds a fill's reservation while the copy is filled
/// from the owner (a proxy writes it; `shardring split` deletes it with a merged key's copies).
pub fn fill_reservation(key: &[u8]) -> Vec<u8> {
    let mut r = b"shardring:split-fill:".to_vec();
    r.extend_from_slice(key);
    r
}

/// A key as the file writes it: `%XX` for a space, a `%`, and any byte that is not printable ASCII.
pub fn escape(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The bytes of a key the file writes as `text` (`%XX` a byte).
///
/// # Errors
/// A `%` not followed by two hex digits.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(format!(
                    "{text:?}: % must be followed by two hex digits (a % itself is %25)"
                ));
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_lists_each_key_with_its_phase_and_escapes_read_back() {
        let text = "# launch\n\nwrite news:1\n  read  a%20b%25c%0A \nread caf\u{e9} 7\n";
        let split = SplitConfig::parse(3, text).unwrap();
        assert_eq!(split.copies, 3);
        let phase = |k: &[u8]| split.keys.get(k).map(|k| (k.phase, k.copies));
        assert_eq!(phase(b"news:1"), Some((SplitPhase::Write, 3)));
        assert_eq!(phase(b"a b%c\n"), Some((SplitPhase::Read, 3)));
        assert_eq!(phase("caf\u{e9}".as_bytes()), Some((SplitPhase::Read, 7)));
        for key in split.keys.keys() {
            assert_eq!(&unescape(&escape(key)).unwrap(), key);
        }
        assert_eq!(SplitConfig::parse(3, &split.text()).unwrap(), split);
    }

    #[test]
    fn any_keys_written_read_back_the_same() {
        // Keys of every byte, random (a fixed seed), written as `shardring split` writes the file.
        let mut seed = 1u64;
        let mut next = || {
            seed = shardring::hash::xxh3_64(&seed.to_le_bytes());
            seed
        };
        for _ in 0..500 {
            let mut split = SplitConfig {
                copies: 2,
                keys: BTreeMap::new(),
            };
            for _ in 0..(next() % 8) {
                let key: Vec<u8> = (0..1 + next() % 12).map(|_| next() as u8).collect();
                let phase = if next() % 2 == 0 {
                    SplitPhase::Write
                } else {
                    SplitPhase::Read
                };
                let copies = 2 + (next() % 30) as usize;
                split.keys.insert(key, SplitKey { phase, copies });
            }
            let again = SplitConfig::parse(2, &split.text()).unwrap();
            assert_eq!(again, split);
        }
    }

    #[test]
    fn every_bad_line_is_named_and_nothing_is_taken() {
        let text = "write k\nsplit x\nread\nread a 1\nread %zz\nwrite k\nread b 2 3\n";
        let problems = SplitConfig::parse(2, text).unwrap_err();
        assert_eq!(problems.len(), 6, "{problems:?}");
        for (p, line) in problems.iter().zip([2, 3, 4, 5, 6, 7]) {
            assert!(p.starts_with(&format!("line {line}: ")), "{p}");
        }
    }

    #[test]
    fn the_digest_follows_the_keys_their_phases_and_copies_not_the_files_order() {
        let a = SplitConfig::parse(2, "write x\nread y\n").unwrap();
        let b = SplitConfig::parse(2, "# same\nread y\nwrite x\n").unwrap();
        assert_eq!(a.digest(), b.digest());
        for other in [
            "read x\nread y\n",
            "write x\n",
            "write x\nread y\nwrite z\n",
        ] {
            assert_ne!(a.digest(), SplitConfig::parse(2, other).unwrap().digest());
        }
        assert_ne!(
            a.digest(),
            SplitConfig::parse(3, "write x\nread y\n").unwrap().digest()
        );
    }
}
