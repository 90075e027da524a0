//! The request parser: one memcached request from the front of a buffer, one function per command family.

use std::ops::Range;

use super::request::*;

/// Finds the end of the first line: `(line without its terminator, length including it)`.
fn line_end(buf: &[u8]) -> Option<(usize, usize)> {
    let nl = memchr::memchr(b'\n', buf)?;
    let end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    Some((end, nl + 1))
}

/// Up to 24 tokens of a line (memcached's `MAX_TOKENS`); more are counted but not stored.
pub(super) struct Tokens {
    ranges: [Range<usize>; 24],
    pub(super) len: usize,
}

impl Tokens {
    pub(super) fn split(line: &[u8], max: usize) -> Tokens {
        const EMPTY: Range<usize> = 0..0;
        let mut t = Tokens {
            ranges: [EMPTY; 24],
            len: 0,
        };
        let mut i = 0;
        while i < line.len() {
            while i < line.len() && line[i] == b' ' {
                i += 1;
            }
            if i >= line.len() {
                break;
            }
            let start = i;
            while i < line.len() && line[i] != b' ' {
                i += 1;
            }
            if t.len < max.min(24) {
                t.ranges[t.len] = start..i;
            }
            t.len += 1;
        }
        t
    }

    pub(super) fn get(&self, i: usize) -> Range<usize> {
        self.ranges[i].clone()
    }
}

pub(super) fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

fn parse_i64(b: &[u8]) -> Option<i64> {
    match b.split_first() {
        Some((b'-', rest)) => parse_u64(rest)
            .and_then(|v| i64::try_from(v).ok())
            .map(|v| -v),
        _ => parse_u64(b).and_then(|v| i64::try_from(v).ok()),
    }
}

/// Parses the first request in `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole request (and is within the limits),
/// `Ok(Some(parsed))` for a request occupying `buf[..parsed.len]`, and `Err` for a refused one.
///
/// # Errors
/// A [`RequestError`] saying what to reply and how much input to drop.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<Parsed>, RequestError> {
    use RequestErrorKind as E;
    let Some((end, line_len)) = line_end(buf) else {
        if buf.len() > limits.max_line_len {
            return Err(RequestError {
                kind: E::LineTooLong,
                consumed: buf.len(),
                skip: 0,
                close: true,
            });
        }
        return Ok(None);
    };
    if end > limits.max_line_len {
        return Err(RequestError {
            kind: E::LineTooLong,
            consumed: line_len,
            skip: 0,
            close: true,
        });
    }
    let line = &buf[..end];
    let tokens = Tokens::split(line, 24);
    if tokens.len == 0 {
        return Err(RequestError::line(E::BadFormat, line_len));
    }
    let bad = |kind| Err(RequestError::line(kind, line_len));
    let n = tokens.len;
    let word = &line[tokens.get(0)];
    let key_ok = |r: &Range<usize>| r.len() <= limits.max_key_len;
    // `noreply` as the last token: its range with the space before it.
    let noreply_at = |i: usize| -> Option<Range<usize>> {
        (n == i + 1 && n <= 24 && &line[tokens.get(i)] == b"noreply").then(|| {
            let r = tokens.get(i);
            r.start - 1..r.end
        })
    };
    match word {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let kind = match word {
                b"get" => GetKind::Get,
                b"gets" => GetKind::Gets,
                b"gat" => GetKind::Gat,
                _ => GetKind::Gats,
            };
            let touch = matches!(kind, GetKind::Gat | GetKind::Gats);
            let first_key = if touch { 2 } else { 1 };
            if n <= first_key {
                return bad(E::BadFormat);
            }
            let exptime = if touch {
                let r = tokens.get(1);
                if parse_i64(&line[r.clone()]).is_none() {
                    return bad(E::InvalidExptime);
                }
                Some(r)
            } else {
                None
            };
            // A get line may hold more than 24 tokens: walk it again without the token cap.
            let mut keys = Vec::with_capacity(n - first_key);
            let mut i = 0;
            let mut index = 0;
            while i < line.len() {
                while i < line.len() && line[i] == b' ' {
                    i += 1;
                }
                if i >= line.len() {
                    break;
                }
                let start = i;
                while i < line.len() && line[i] != b' ' {
                    i += 1;
                }
                if index >= first_key {
                    if i - start > limits.max_key_len {
                        return bad(E::KeyTooLong);
                    }
                    keys.push(start..i);
                }
                index += 1;
            }
            Ok(Some(Parsed {
                len: line_len,
                command: Command::Get {
                    kind,
                    exptime,
                    keys,
                },
                strip: None,
            }))
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let cas = word == b"cas";
            let base = if cas { 6 } else { 5 };
            if n != base && n != base + 1 {
                return bad(E::BadFormat);
            }
            let strip = if n == base + 1 {
                match noreply_at(base) {
                    Some(r) => Some(r),
                    None => return bad(E::BadFormat),
                }
            } else {
                None
            };
            let key = tokens.get(1);
            let vlen = parse_u64(&line[tokens.get(4)]);
            let numbers_ok = parse_u64(&line[tokens.get(2)])
                .is_some_and(|f| f <= u64::from(u32::MAX))
                && parse_i64(&line[tokens.get(3)]).is_some()
                && (!cas || parse_u64(&line[tokens.get(5)]).is_some());
            let Some(vlen) = vlen else {
                // The data block's length is unknown: its bytes will be read as commands (as memcached does).
                return bad(E::BadFormat);
            };
            let refuse = |kind| Err(RequestError::with_block(kind, line_len, vlen));
            if !key_ok(&key) {
                return refuse(E::KeyTooLong);
            }
            if !numbers_ok {
                return refuse(E::BadFormat);
            }
            if vlen > limits.max_value_len as u64 {
                return refuse(E::ValueTooLarge);
            }
            data_block(buf, line_len, vlen as usize).map(|o| {
                o.map(|total| Parsed {
                    len: total,
                    command: Command::Keyed {
                        key,
                        noreply: strip.is_some(),
                    },
                    strip,
                })
            })
        }
        b"delete" | b"incr" | b"decr" | b"touch" => {
            // delete <key> [0] [noreply] (a time of 0 is still accepted by memcached)
            let (min, max) = if word == b"delete" { (2, 4) } else { (3, 4) };
            if n < min || n > max {
                return bad(E::BadFormat);
            }
            let strip = noreply_at(n - 1);
            let args = n - usize::from(strip.is_some());
            let key = tokens.get(1);
            if !key_ok(&key) {
                return bad(E::KeyTooLong);
            }
            match word {
                b"delete" => {
                    if args == 3 && &line[tokens.get(2)] != b"0" {
                        return bad(E::BadFormat);
                    }
                    if args > 3 {
                        return bad(E::BadFormat);
                    }
                }
                b"touch" => {
                    if args != 3 {
                        return bad(E::BadFormat);
                    }
                    if parse_i64(&line[tokens.get(2)]).is_none() {
                        return bad(E::InvalidExptime);
                    }
                }
                _ => {
                    if args != 3 {
                        return bad(E::BadFormat);
                    }
                    if parse_u64(&line[tokens.get(2)]).is_none() {
                        return bad(E::InvalidDelta);
                    }
                }
            }
            Ok(Some(Parsed {
                len: line_len,
                command: Command::Keyed {
                    key,
                    noreply: strip.is_some(),
                },
                strip,
            }))
        }
        b"mg" | b"ms" | b"md" | b"ma" | b"me" => {
            let kind = match word {
                b"mg" => MetaKind::Get,
                b"ms" => MetaKind::Set,
                b"md" => MetaKind::Delete,
                b"ma" => MetaKind::Arithmetic,
                _ => MetaKind::Debug,
            };
            if !(2..=24).contains(&n) {
                return bad(E::BadFormat);
            }
            let key = tokens.get(1);
            let first_flag = if kind == MetaKind::Set { 3 } else { 2 };
            let mut strip = None;
            let mut base64 = false;
            for i in first_flag..n {
                let r = tokens.get(i);
                if r.len() == 1 && line[r.start] == b'q' {
                    strip = Some(r.start - 1..r.end);
                }
                base64 |= r.len() == 1 && line[r.start] == b'b';
            }
            // The `b` flag: the key token is base64, and the server stores the decoded bytes. Routing
            // hashes the decoded key, so `mg <base64> b` finds what `get <key>` stored.
            let key_error = if !key_ok(&key) {
                Some(E::KeyTooLong)
            } else if base64
                && decode_base64_key(&line[key.clone()], &mut [0u8; MAX_KEY_LEN]).is_none()
            {
                Some(E::BadBase64Key)
            } else {
                None
            };
            if kind == MetaKind::Set {
                if n < 3 {
                    return bad(E::BadFormat);
                }
                let Some(vlen) = parse_u64(&line[tokens.get(2)]) else {
                    return bad(E::BadNumber);
                };
                // A refused `ms` has its data block skipped too, as a refused `set` has.
                if let Some(kind) = key_error {
                    return Err(RequestError::with_block(kind, line_len, vlen));
                }
                if vlen > limits.max_value_len as u64 {
                    return Err(RequestError::with_block(E::ValueTooLarge, line_len, vlen));
                }
                let quiet = strip.is_some();
                return data_block(buf, line_len, vlen as usize).map(|o| {
                    o.map(|total| Parsed {
                        len: total,
                        command: Command::Meta {
                            kind,
                            key,
                            quiet,
                            base64,
                        },
                        strip,
                    })
                });
            }
            if let Some(kind) = key_error {
                return bad(kind);
            }
            let quiet = strip.is_some();
            Ok(Some(Parsed {
                len: line_len,
                command: Command::Meta {
                    kind,
                    key,
                    quiet,
                    base64,
                },
                strip,
            }))
        }
        // Commands without arguments; like memcached 1.6, extra tokens are ignored.
        b"mn" | b"version" | b"quit" => {
            let command = match word {
                b"mn" => Command::MetaNoop,
                b"version" => Command::Version,
                _ => Command::Quit,
            };
            Ok(Some(Parsed {
                len: line_len,
                command,
                strip: None,
            }))
        }
        b"verbosity" => {
            // memcached 1.6: `verbosity <level> [anything]`, silent when the last token is `noreply`
            // (`verbosity noreply` included); the level itself is the server's business.
            if !(2..=3).contains(&n) {
                return bad(E::BadFormat);
            }
            let strip = noreply_at(n - 1);
            if strip.is_none() && parse_u64(&line[tokens.get(1)]).is_none() {
                return bad(E::BadFormat);
            }
            Ok(Some(Parsed {
                len: line_len,
                command: Command::Verbosity {
                    noreply: strip.is_some(),
                },
                strip,
            }))
        }
        b"flush_all" => {
            let strip = noreply_at(n - 1);
            let args = n - usize::from(strip.is_some());
            if args > 2 {
                return bad(E::BadFormat);
            }
            if args == 2 && parse_i64(&line[tokens.get(1)]).is_none() {
                return bad(E::InvalidExptime);
            }
            Ok(Some(Parsed {
                len: line_len,
                command: Command::FlushAll {
                    noreply: strip.is_some(),
                },
                strip,
            }))
        }
        b"stats" => {
            let request = match (n > 1).then(|| &line[tokens.get(1)]) {
                None => StatsRequest::Proxy,
                Some(b"reset") if n == 2 => StatsRequest::Reset,
                Some(b"detail") if n == 3 && &line[tokens.get(2)] != b"dump" => {
                    StatsRequest::Toggle
                }
                Some(
                    b"settings" | b"items" | b"slabs" | b"sizes" | b"conns" | b"detail"
                    | b"cachedump" | b"extstore",
                ) => StatsRequest::PerServer,
                // `stats noreply`, `stats foo`: memcached answers ERROR.
                Some(_) => return bad(E::UnknownCommand),
            };
            Ok(Some(Parsed {
                len: line_len,
                command: Command::Stats(request),
                strip: None,
            }))
        }
        _ => bad(E::UnknownCommand),
    }
}

/// Decodes a base64 key (standard alphabet, padded, as memcached's `b` flag wants) into `out`; `None`
/// when it is not base64 or decodes to nothing.
pub(super) fn decode_base64_key<'a>(
    token: &[u8],
    out: &'a mut [u8; MAX_KEY_LEN],
) -> Option<&'a [u8]> {
    use base64::Engine as _;
    let len = base64::engine::general_purpose::STANDARD
        .decode_slice(token, out)
        .ok()?;
    (len > 0).then(|| &out[..len])
}

/// The total length of a request whose line is `line_len` bytes and whose data block is `vlen` bytes, once
/// all of it is in `buf`.
fn data_block(buf: &[u8], line_len: usize, vlen: usize) -> Result<Option<usize>, RequestError> {
    let total = line_len + vlen + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[line_len + vlen..total] != b"\r\n" {
        return Err(RequestError {
            kind: RequestErrorKind::BadDataChunk,
            consumed: total,
            skip: 0,
            close: true,
        });
    }
    Ok(Some(total))
}
