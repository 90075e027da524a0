//! The request parser: one memcached request from the front of a buffer, one function per command family.
//!
//! Token counts follow memcached 1.6's `process_command_ascii`: a command with too few or too many
//! tokens is answered `ERROR` (its `WANT_TOKENS` check), a token that does not parse gets
//! `CLIENT_ERROR <reason>`, and an extra last token that is not `noreply` is ignored where memcached
//! ignores it (storage commands, `incr`/`decr`/`touch`, `verbosity`).

use std::ops::Range;

use super::request::*;
use super::tokens::{line_end, parse_i64, parse_u64, spaced_tokens, Tokens};

use RequestErrorKind as E;

/// Parses the first request in `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole request (and is within the limits),
/// `Ok(Some(parsed))` for a request occupying `buf[..parsed.len]`, and `Err` for a refused one. A
/// retrieval command's line has no length limit here: the codec streams long ones through
/// ([`RequestCodec`](super::RequestCodec)).
///
/// # Errors
/// A [`RequestError`] saying what to reply and how much input to drop.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<Parsed>, RequestError> {
    // A binary-protocol request has no newline to wait for: refused as soon as its first byte is in.
    if buf.first() == Some(&BINARY_REQUEST_MAGIC) {
        return Err(RequestError::closing(E::BinaryProtocol, 0));
    }
    let Some((end, line_len)) = line_end(buf) else {
        if buf.len() > limits.max_line_len && retrieval_word(buf).is_none() {
            return Err(RequestError::closing(E::LineTooLong, buf.len()));
        }
        return Ok(None);
    };
    let text = &buf[..end];
    // Retrieval lines (most requests) are walked once for their keys, without the token table.
    let Some((_, word)) = spaced_tokens(text).next() else {
        return Err(RequestError::line(E::UnknownCommand, line_len));
    };
    if let Some(kind) = GetKind::from_word(word) {
        return retrieval(text, line_len, kind, limits);
    }
    let line = Line {
        buf,
        text,
        len: line_len,
        tokens: Tokens::split(text, 24),
        limits,
    };
    if end > limits.max_line_len {
        // Closed either way; silently for a command that asked for no reply.
        let quiet = takes_noreply(word) && line.last_is_noreply();
        return Err(RequestError::closing(E::LineTooLong, line_len).silent_if(quiet));
    }
    match word {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => line.storage(false),
        b"cas" => line.storage(true),
        b"delete" => line.delete(),
        b"incr" | b"decr" => line.arithmetic(),
        b"touch" => line.touch(),
        b"mg" => line.meta(MetaKind::Get),
        b"ms" => line.meta(MetaKind::Set),
        b"md" => line.meta(MetaKind::Delete),
        b"ma" => line.meta(MetaKind::Arithmetic),
        b"me" => line.meta(MetaKind::Debug),
        // Commands without arguments; like memcached 1.6, extra tokens are ignored.
        b"mn" => line.simple(Command::MetaNoop),
        b"version" => line.simple(Command::Version),
        b"quit" => line.simple(Command::Quit),
        b"verbosity" => line.verbosity(),
        b"flush_all" => line.flush_all(),
        b"stats" => line.stats(),
        _ => line.refuse(E::UnknownCommand),
    }
}

/// Whether the command named `word` takes `noreply` (and so is silent when refused with it).
fn takes_noreply(word: &[u8]) -> bool {
    matches!(
        word,
        b"set"
            | b"add"
            | b"replace"
            | b"append"
            | b"prepend"
            | b"cas"
            | b"delete"
            | b"incr"
            | b"decr"
            | b"touch"
            | b"verbosity"
            | b"flush_all"
    )
}

/// The first byte of every request in memcached's binary protocol; no text command starts with it.
const BINARY_REQUEST_MAGIC: u8 = 0x80;

/// The retrieval command a buffer starts with (its word and a space), if any: such a line may be
/// longer than any limit, since it is streamed through key by key.
pub(super) fn retrieval_word(buf: &[u8]) -> Option<GetKind> {
    let space = buf.iter().take(5).position(|&c| c == b' ')?;
    GetKind::from_word(&buf[..space])
}

/// The front of a retrieval line too long to wait for: its command, and the keys wholly received (each
/// followed by a space), as a request that more keys follow. `None` when not even one key is whole yet.
///
/// Returns the request and the bytes of `buf` it took (the rest starts at the next key).
///
/// # Errors
/// A key over the key limit, or a bad `gat` exptime.
pub(super) fn parse_get_prefix(
    buf: &[u8],
    kind: GetKind,
    limits: &Limits,
) -> Result<Option<(Request, usize)>, RequestError> {
    let Some(last_space) = buf.iter().rposition(|&c| c == b' ') else {
        return Ok(None);
    };
    let text = &buf[..last_space];
    let mut tokens = spaced_tokens(text).map(|(_, t)| t);
    tokens.next(); // the command word
    let exptime = match kind {
        GetKind::Gat | GetKind::Gats => match tokens.next() {
            Some(e) if parse_i64(e).is_some() => Some(e),
            Some(_) => return Err(RequestError::line(E::InvalidExptime, 0)),
            None => return Ok(None),
        },
        GetKind::Get | GetKind::Gets => None,
    };
    get_chunk(kind, exptime, tokens, true, limits).map(|r| Some((r, last_space + 1)))
}

/// Keys of a retrieval line already under way (its command was in an earlier chunk): up to the end of
/// the line when it is in `buf`, else the keys wholly received. Returns the request and the bytes it
/// took; `None` when nothing can be taken yet.
///
/// # Errors
/// A key over the key limit.
pub(super) fn parse_get_continuation(
    buf: &[u8],
    kind: GetKind,
    exptime: Option<&[u8]>,
    limits: &Limits,
) -> Result<Option<(Request, usize)>, RequestError> {
    let (text, taken, more) = match line_end(buf) {
        Some((end, len)) => (&buf[..end], len, false),
        None => match buf.iter().rposition(|&c| c == b' ') {
            Some(last_space) => (&buf[..last_space], last_space + 1, true),
            None if buf.len() > limits.max_key_len => {
                return Err(RequestError::line(E::KeyTooLong, buf.len()))
            }
            None => return Ok(None),
        },
    };
    let keys = spaced_tokens(text).map(|(_, t)| t);
    get_chunk(kind, exptime, keys, more, limits).map(|r| Some((r, taken)))
}

/// A retrieval request for some of a long line's keys, framed as a line of its own.
fn get_chunk<'a>(
    kind: GetKind,
    exptime: Option<&[u8]>,
    keys: impl Iterator<Item = &'a [u8]>,
    more: bool,
    limits: &Limits,
) -> Result<Request, RequestError> {
    let mut frame = Vec::with_capacity(4096);
    frame.extend_from_slice(kind.word().as_bytes());
    let exptime = exptime.map(|e| {
        frame.push(b' ');
        frame.extend_from_slice(e);
        frame.len() - e.len()..frame.len()
    });
    let mut ranges = Keys::new();
    for key in keys {
        if key.len() > limits.max_key_len {
            return Err(RequestError::line(E::KeyTooLong, 0));
        }
        frame.push(b' ');
        frame.extend_from_slice(key);
        ranges.push(frame.len() - key.len()..frame.len());
    }
    frame.extend_from_slice(b"\r\n");
    Ok(Request {
        frame: frame.into(),
        command: Command::Get {
            kind,
            exptime,
            keys: ranges,
            more,
        },
        strip: None,
    })
}

/// get/gets `<key>+`, gat/gats `<exptime> <key>*` (a gat without keys is answered `END`, as by
/// memcached), as the whole line `text` (`line_len` bytes with its terminator): any number of keys.
fn retrieval(
    text: &[u8],
    line_len: usize,
    kind: GetKind,
    limits: &Limits,
) -> Result<Option<Parsed>, RequestError> {
    let refuse = |kind| Err(RequestError::line(kind, line_len));
    let mut tokens = spaced_tokens(text);
    tokens.next(); // the command word
    let exptime = match kind {
        GetKind::Gat | GetKind::Gats => match tokens.next() {
            Some((at, e)) if parse_i64(e).is_some() => Some(at..at + e.len()),
            Some(_) => return refuse(E::InvalidExptime),
            None => return refuse(E::UnknownCommand),
        },
        GetKind::Get | GetKind::Gets => None,
    };
    // A one-key get stays inline, its line walked once; at the first key past the inline room,
    // room for all the rest at once (at most one key a space), not a growth every few keys.
    let mut keys = Keys::new();
    for (at, key) in tokens {
        if key.len() > limits.max_key_len {
            return refuse(E::KeyTooLong);
        }
        if keys.len() == keys.inline_size() {
            keys.reserve(memchr::memchr_iter(b' ', &text[at..]).count() + 1);
        }
        keys.push(at..at + key.len());
    }
    if keys.is_empty() && exptime.is_none() {
        return refuse(E::UnknownCommand);
    }
    Ok(Some(Parsed {
        len: line_len,
        command: Command::Get {
            kind,
            exptime,
            keys,
            more: false,
        },
        strip: None,
    }))
}

/// One whole command line at the front of the buffer.
struct Line<'a> {
    /// The whole input (a storage command's data block follows the line).
    buf: &'a [u8],
    /// The line without its terminator.
    text: &'a [u8],
    /// The line's length with its terminator.
    len: usize,
    /// Its first 24 tokens (and their count).
    tokens: Tokens,
    /// The limits.
    limits: &'a Limits,
}

impl Line<'_> {
    /// How many tokens the line has.
    fn count(&self) -> usize {
        self.tokens.len
    }

    /// The bytes of token `i`.
    fn token(&self, i: usize) -> &[u8] {
        &self.text[self.tokens.get(i)]
    }

    fn refuse<T>(&self, kind: RequestErrorKind) -> Result<T, RequestError> {
        Err(RequestError::line(kind, self.len))
    }

    /// A refusal by a command that takes `noreply`, once its token count is right: silent when the
    /// last token is `noreply`, as memcached's `set_noreply_maybe` decides before it checks anything
    /// else (so `set k 0 0 abc noreply` and `incr k noreply` get nothing, where `set k 0 0 1 2
    /// noreply`, with a token too many, gets `ERROR`).
    fn refuse_quietly<T>(&self, kind: RequestErrorKind) -> Result<T, RequestError> {
        Err(RequestError::line(kind, self.len).silent_if(self.last_is_noreply()))
    }

    /// Whether the line's last token is `noreply`.
    fn last_is_noreply(&self) -> bool {
        let n = self.count();
        n > 0 && n <= 24 && self.token(n - 1) == b"noreply"
    }

    /// A one-line request.
    fn request(
        &self,
        command: Command,
        strip: Option<Range<usize>>,
    ) -> Result<Option<Parsed>, RequestError> {
        Ok(Some(Parsed {
            len: self.len,
            command,
            strip,
        }))
    }

    /// `noreply` as token `i` when it is the last: its range with the space before it.
    fn noreply_at(&self, i: usize) -> Option<Range<usize>> {
        (self.count() == i + 1 && i < 24 && self.token(i) == b"noreply").then(|| {
            let r = self.tokens.get(i);
            r.start - 1..r.end
        })
    }

    fn key_ok(&self, key: &Range<usize>) -> bool {
        key.len() <= self.limits.max_key_len
    }

    /// set/add/replace/append/prepend `<key> <flags> <exptime> <bytes> [noreply]`, cas with `<cas>`
    /// before `[noreply]`; then a data block.
    fn storage(&self, cas: bool) -> Result<Option<Parsed>, RequestError> {
        let base = if cas { 6 } else { 5 };
        if self.count() != base && self.count() != base + 1 {
            return self.refuse(E::UnknownCommand);
        }
        let strip = self.noreply_at(base);
        let key = self.tokens.get(1);
        let Some(vlen) = parse_u64(self.token(4)) else {
            // The data block's length is unknown: its bytes will be read as commands (as memcached does).
            return self.refuse_quietly(E::BadFormat);
        };
        let numbers_ok = parse_u64(self.token(2)).is_some_and(|f| f <= u64::from(u32::MAX))
            && parse_i64(self.token(3)).is_some()
            && (!cas || parse_u64(self.token(5)).is_some());
        let quiet = self.last_is_noreply();
        let refuse = |kind| Err(RequestError::with_block(kind, self.len, vlen).silent_if(quiet));
        if !self.key_ok(&key) {
            return refuse(E::KeyTooLong);
        }
        if !numbers_ok {
            return refuse(E::BadFormat);
        }
        if vlen > self.limits.max_value_len as u64 {
            return refuse(E::ValueTooLarge);
        }
        let noreply = strip.is_some();
        self.with_data_block(vlen, Command::Keyed { key, noreply }, strip)
            .map_err(|e| e.silent_if(quiet))
    }

    /// The request once its data block of `vlen` bytes is in.
    fn with_data_block(
        &self,
        vlen: u64,
        command: Command,
        strip: Option<Range<usize>>,
    ) -> Result<Option<Parsed>, RequestError> {
        data_block(self.buf, self.len, vlen as usize).map(|o| {
            o.map(|total| Parsed {
                len: total,
                command,
                strip,
            })
        })
    }

    /// `delete <key> [0] [noreply]` (a time of 0 is still accepted by memcached 1.6).
    fn delete(&self) -> Result<Option<Parsed>, RequestError> {
        let n = self.count();
        if !(2..=4).contains(&n) {
            return self.refuse(E::UnknownCommand);
        }
        let strip = self.noreply_at(n - 1);
        let valid = match n {
            2 => true,
            3 => self.token(2) == b"0" || strip.is_some(),
            _ => self.token(2) == b"0" && strip.is_some(),
        };
        if !valid {
            return self.refuse_quietly(E::DeleteUsage);
        }
        self.keyed(strip)
    }

    /// `incr|decr <key> <delta> [noreply]`.
    fn arithmetic(&self) -> Result<Option<Parsed>, RequestError> {
        if !(3..=4).contains(&self.count()) {
            return self.refuse(E::UnknownCommand);
        }
        if parse_u64(self.token(2)).is_none() {
            return self.refuse_quietly(E::InvalidDelta);
        }
        self.keyed(self.noreply_at(3))
    }

    /// `touch <key> <exptime> [noreply]`.
    fn touch(&self) -> Result<Option<Parsed>, RequestError> {
        if !(3..=4).contains(&self.count()) {
            return self.refuse(E::UnknownCommand);
        }
        if parse_i64(self.token(2)).is_none() {
            return self.refuse_quietly(E::InvalidExptime);
        }
        self.keyed(self.noreply_at(3))
    }

    /// A one-key, one-line command whose arguments are checked.
    fn keyed(&self, strip: Option<Range<usize>>) -> Result<Option<Parsed>, RequestError> {
        let key = self.tokens.get(1);
        if !self.key_ok(&key) {
            return self.refuse_quietly(E::KeyTooLong);
        }
        let noreply = strip.is_some();
        self.request(Command::Keyed { key, noreply }, strip)
    }

    /// mg/ms/md/ma/me `<key> <flags>*` (ms: `<key> <datalen> <flags>*` and a data block), flags passed
    /// through; `q` is stripped (the proxy hides what it hides), `b` means a base64 key.
    fn meta(&self, kind: MetaKind) -> Result<Option<Parsed>, RequestError> {
        let n = self.count();
        if n < 2 {
            // memcached 1.6 answers a bare `me` with a format error, the others with ERROR.
            let kind = if kind == MetaKind::Debug {
                E::BadFormat
            } else {
                E::UnknownCommand
            };
            return self.refuse(kind);
        }
        if n > 24 {
            return self.refuse(E::BadFormat);
        }
        let key = self.tokens.get(1);
        let first_flag = if kind == MetaKind::Set { 3 } else { 2 };
        let mut strip = None;
        let mut base64 = false;
        for i in first_flag..n {
            let r = self.tokens.get(i);
            if r.len() == 1 && self.text[r.start] == b'q' {
                strip = Some(r.start - 1..r.end);
            }
            base64 |= r.len() == 1 && self.text[r.start] == b'b';
        }
        // The `b` flag: the key token is base64, and the server stores the decoded bytes. Routing
        // hashes the decoded key, so `mg <base64> b` finds what `get <key>` stored.
        let key_error = if !self.key_ok(&key) {
            Some(E::KeyTooLong)
        } else if base64
            && decode_base64_key(&self.text[key.clone()], &mut [0u8; MAX_KEY_LEN]).is_none()
        {
            Some(E::BadBase64Key)
        } else {
            None
        };
        let command = Command::Meta {
            kind,
            key,
            quiet: strip.is_some(),
            base64,
        };
        if kind == MetaKind::Set {
            let Some(vlen) = (n >= 3).then(|| parse_u64(self.token(2))).flatten() else {
                return self.refuse(E::BadFormat);
            };
            // A refused `ms` has its data block skipped too, as a refused `set` has.
            if let Some(kind) = key_error {
                return Err(RequestError::with_block(kind, self.len, vlen));
            }
            if vlen > self.limits.max_value_len as u64 {
                return Err(RequestError::with_block(E::ValueTooLarge, self.len, vlen));
            }
            return self.with_data_block(vlen, command, strip);
        }
        if let Some(kind) = key_error {
            return self.refuse(kind);
        }
        self.request(command, strip)
    }

    fn simple(&self, command: Command) -> Result<Option<Parsed>, RequestError> {
        self.request(command, None)
    }

    /// `verbosity <level> [noreply]`: silent when the last token is `noreply` (`verbosity noreply`
    /// included); the level itself is the server's business.
    fn verbosity(&self) -> Result<Option<Parsed>, RequestError> {
        let n = self.count();
        if !(2..=3).contains(&n) {
            return self.refuse(E::UnknownCommand);
        }
        let strip = self.noreply_at(n - 1);
        if strip.is_none() && parse_u64(self.token(1)).is_none() {
            return self.refuse(E::BadFormat);
        }
        let noreply = strip.is_some();
        self.request(Command::Verbosity { noreply }, strip)
    }

    /// `flush_all [delay] [noreply]`.
    fn flush_all(&self) -> Result<Option<Parsed>, RequestError> {
        let n = self.count();
        if n > 3 {
            return self.refuse(E::UnknownCommand);
        }
        let strip = self.noreply_at(n - 1);
        let args = n - usize::from(strip.is_some());
        if args >= 2 && parse_i64(self.token(1)).is_none() {
            return self.refuse_quietly(E::InvalidExptime);
        }
        let noreply = strip.is_some();
        self.request(Command::FlushAll { noreply }, strip)
    }

    /// `stats [what]`, answered by the proxy.
    fn stats(&self) -> Result<Option<Parsed>, RequestError> {
        let n = self.count();
        let request = match (n > 1).then(|| self.token(1)) {
            None => StatsRequest::Proxy,
            Some(b"reset") if n == 2 => StatsRequest::Reset,
            Some(b"detail") if n == 3 && self.token(2) != b"dump" => StatsRequest::Toggle,
            Some(
                b"settings" | b"items" | b"slabs" | b"sizes" | b"conns" | b"detail" | b"cachedump"
                | b"extstore",
            ) => StatsRequest::PerServer,
            // `stats noreply`, `stats foo`: memcached answers ERROR.
            Some(_) => return self.refuse(E::UnknownCommand),
        };
        self.request(Command::Stats(request), None)
    }
}

/// The total length of a request whose line is `line_len` bytes and whose data block is `vlen` bytes, once
/// all of it is in `buf`.
fn data_block(buf: &[u8], line_len: usize, vlen: usize) -> Result<Option<usize>, RequestError> {
    let total = line_len + vlen + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[line_len + vlen..total] != b"\r\n" {
        return Err(RequestError::closing(E::BadDataChunk, total));
    }
    Ok(Some(total))
}
