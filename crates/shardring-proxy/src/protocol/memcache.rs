//! The memcached text protocol: a pure request parser (what clients send), a pure response framer (what
//! servers send back), and a [`Decoder`] wrapping the request parser for connections.
//!
//! Nothing here does I/O. Incomplete input is a normal state (`Ok(None)`), never an error: the caller reads
//! more and asks again. Parsed requests do not copy: a [`Request`] is the frame's bytes plus the byte ranges
//! of its keys inside them.
//!
//! What a malformed request gets, and whether the connection can go on afterwards:
//!
//! | input | reply | then |
//! |---|---|---|
//! | unknown command | `ERROR` | next line |
//! | bad token count, bad number, key over 250 bytes | `CLIENT_ERROR <reason>` (memcached's reasons where it has one: `invalid numeric delta argument`, `invalid exptime argument`, `error decoding key`) | next line; a storage command whose length parsed has its data block skipped too |
//! | value over the configured maximum | `SERVER_ERROR object too large for cache` (memcached's words) | the data block is skipped as it arrives, never buffered |
//! | data block not followed by `\r\n` | `CLIENT_ERROR bad data chunk` | connection closed: where the next request starts is unknowable |
//! | line longer than the line limit | `CLIENT_ERROR line too long` | connection closed |

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// The longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;

/// Input size limits; every buffer the proxy keeps per connection is bounded by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest key. By default, this is 250 (memcached's `KEY_MAX_LENGTH`).
    pub max_key_len: usize,
    /// The largest value in a storage command. By default, this is 1 MiB (memcached's default item size).
    pub max_value_len: usize,
    /// The longest command line (a multi-get names many keys on one line). By default, this is 64 KiB.
    pub max_line_len: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_key_len: MAX_KEY_LEN,
            max_value_len: 1 << 20,
            max_line_len: 64 << 10,
        }
    }
}

impl Limits {
    /// The most bytes one request can occupy in a buffer: a line, a value and its `\r\n`.
    pub fn max_request_len(&self) -> usize {
        self.max_line_len + self.max_value_len + 2
    }
}

/// The retrieval commands, which take many keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKind {
    /// `get <key>*`
    Get,
    /// `gets <key>*`: values with their CAS.
    Gets,
    /// `gat <exptime> <key>*`: get and touch.
    Gat,
    /// `gats <exptime> <key>*`: get and touch, with CAS.
    Gats,
}

impl GetKind {
    /// The command word.
    pub fn word(self) -> &'static str {
        match self {
            GetKind::Get => "get",
            GetKind::Gets => "gets",
            GetKind::Gat => "gat",
            GetKind::Gats => "gats",
        }
    }
}

/// The meta commands routed by key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    /// `mg`
    Get,
    /// `ms` (with a data block)
    Set,
    /// `md`
    Delete,
    /// `ma`
    Arithmetic,
    /// `me`: the item's metadata, one line (`ME <key> …` or `EN`).
    Debug,
}

impl MetaKind {
    /// Whether a response line with this status code is one that the `q` flag hides.
    pub fn quiet_hides(self, status: &[u8]) -> bool {
        match self {
            MetaKind::Get => status == b"EN",
            MetaKind::Set => status == b"HD",
            MetaKind::Delete | MetaKind::Arithmetic => status == b"HD" || status == b"NF",
            MetaKind::Debug => status == b"EN",
        }
    }
}

/// A parsed request. Byte ranges index the request's frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// get/gets/gat/gats with one or more keys.
    Get {
        /// Which retrieval command.
        kind: GetKind,
        /// The exptime token of gat/gats.
        exptime: Option<Range<usize>>,
        /// The keys, in the client's order (repeats kept).
        keys: Vec<Range<usize>>,
    },
    /// set/add/replace/append/prepend/cas with a data block; delete; incr/decr; touch: one key, one reply
    /// line.
    Keyed {
        /// The key.
        key: Range<usize>,
        /// The client asked for no reply.
        noreply: bool,
    },
    /// mg/ms/md/ma/me with flags passed through.
    Meta {
        /// Which meta command.
        kind: MetaKind,
        /// The key token (as sent; base64 when the `b` flag is given).
        key: Range<usize>,
        /// The `q` flag was given: hide the replies it hides.
        quiet: bool,
        /// The `b` flag was given: the key token is base64, routed by its decoded bytes.
        base64: bool,
    },
    /// `mn`: answered in order by the proxy.
    MetaNoop,
    /// `version`
    Version,
    /// `quit`
    Quit,
    /// `verbosity <n> [noreply]`
    Verbosity {
        /// The client asked for no reply.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`
    FlushAll {
        /// The client asked for no reply.
        noreply: bool,
    },
    /// `stats [args]`, answered by the proxy.
    Stats(StatsRequest),
}

/// What a `stats` request asks; the proxy answers each itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsRequest {
    /// `stats`: the proxy's own counters, under memcached's names where they exist.
    Proxy,
    /// `stats reset`: answered `RESET`; the proxy's counters are cumulative (scrapers take rates).
    Reset,
    /// `stats detail on|off`: answered `OK`.
    Toggle,
    /// `stats items|slabs|settings|sizes|conns|detail dump|cachedump|extstore`: facts of each server,
    /// not of the proxy; answered with an empty list (`END`). Ask the servers directly.
    PerServer,
}

impl Command {
    /// The response framing a server's reply to this command has.
    pub fn response_kind(&self) -> ResponseKind {
        match self {
            Command::Get { .. } => ResponseKind::Values,
            Command::Meta {
                kind: MetaKind::Get | MetaKind::Arithmetic,
                ..
            } => ResponseKind::Meta,
            _ => ResponseKind::Line,
        }
    }
}

/// A request: its bytes as received, and what they mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The whole request: the command line and its data block, if any.
    pub frame: Bytes,
    /// The parsed command; its ranges index `frame`.
    pub command: Command,
    /// The token (with its leading space) that the proxy removes before forwarding: `noreply`, or a meta
    /// command's `q`. The proxy always takes the server's reply so each server connection stays in step,
    /// and hides it itself.
    pub strip: Option<Range<usize>>,
}

impl Request {
    /// The bytes of a range of the frame (a key).
    pub fn bytes(&self, range: &Range<usize>) -> &[u8] {
        &self.frame[range.clone()]
    }

    /// Calls `place` with the bytes a key is placed by: the key itself, or for a meta command with the
    /// `b` flag its base64-decoded bytes (decoded on the stack only then; the parser has checked that
    /// such a key decodes).
    pub fn with_routing_key<R>(&self, key: &Range<usize>, place: impl FnOnce(&[u8]) -> R) -> R {
        let raw = self.bytes(key);
        match self.command {
            Command::Meta { base64: true, .. } => {
                let mut decoded = [0u8; MAX_KEY_LEN];
                place(decode_base64_key(raw, &mut decoded).unwrap_or(raw))
            }
            _ => place(raw),
        }
    }

    /// The bytes to send to a server: the frame without the stripped token.
    pub fn to_forward(&self) -> Bytes {
        match &self.strip {
            None => self.frame.clone(),
            Some(r) => {
                let mut out = BytesMut::with_capacity(self.frame.len());
                out.extend_from_slice(&self.frame[..r.start]);
                out.extend_from_slice(&self.frame[r.end..]);
                out.freeze()
            }
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestErrorKind {
    /// Not a command this proxy knows.
    #[error("unknown command")]
    UnknownCommand,
    /// Wrong number of tokens, or an empty line.
    #[error("bad command line format")]
    BadFormat,
    /// A numeric field did not parse.
    #[error("bad number")]
    BadNumber,
    /// The delta of `incr`/`decr` is not an unsigned 64-bit number (memcached's words).
    #[error("invalid numeric delta argument")]
    InvalidDelta,
    /// An expiration time is not a number (memcached's words).
    #[error("invalid exptime argument")]
    InvalidExptime,
    /// A key longer than the limit.
    #[error("key too long")]
    KeyTooLong,
    /// A value over the configured maximum.
    #[error("object too large for cache")]
    ValueTooLarge,
    /// A meta command's `b` flag with a key that is not base64 (memcached's words).
    #[error("error decoding key")]
    BadBase64Key,
    /// A data block not followed by `\r\n`.
    #[error("bad data chunk")]
    BadDataChunk,
    /// No end of line within the line limit.
    #[error("line too long")]
    LineTooLong,
}

impl RequestErrorKind {
    /// The reply line the client gets.
    pub fn reply(self) -> &'static [u8] {
        match self {
            RequestErrorKind::UnknownCommand => b"ERROR\r\n",
            RequestErrorKind::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            RequestErrorKind::BadNumber => b"CLIENT_ERROR bad number\r\n",
            RequestErrorKind::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            RequestErrorKind::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            RequestErrorKind::KeyTooLong => b"CLIENT_ERROR key too long\r\n",
            RequestErrorKind::ValueTooLarge => b"SERVER_ERROR object too large for cache\r\n",
            RequestErrorKind::BadBase64Key => b"CLIENT_ERROR error decoding key\r\n",
            RequestErrorKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            RequestErrorKind::LineTooLong => b"CLIENT_ERROR line too long\r\n",
        }
    }
}

/// A refused request: what to reply, and how to get back in step with the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestError {
    /// Why.
    pub kind: RequestErrorKind,
    /// Bytes of the input that belong to the refused request and are dropped now.
    pub consumed: usize,
    /// Further bytes, not yet necessarily received, to drop as they arrive (a refused data block).
    pub skip: u64,
    /// The stream cannot be resynchronised: reply, then close.
    pub close: bool,
}

impl RequestError {
    /// A refused storage command whose line is `consumed` bytes: its data block of `vlen` bytes and
    /// `\r\n` is skipped as it arrives, so the next request is read in step.
    fn with_block(kind: RequestErrorKind, consumed: usize, vlen: u64) -> RequestError {
        RequestError {
            kind,
            consumed,
            skip: vlen.saturating_add(2),
            close: false,
        }
    }

    fn line(kind: RequestErrorKind, consumed: usize) -> RequestError {
        RequestError {
            kind,
            consumed,
            skip: 0,
            close: false,
        }
    }
}

/// A request found by [`parse_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Its length in the input: the line and its data block.
    pub len: usize,
    /// What it is; ranges index the input.
    pub command: Command,
    /// The token to strip before forwarding (see [`Request::strip`]).
    pub strip: Option<Range<usize>>,
}

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
struct Tokens {
    ranges: [Range<usize>; 24],
    len: usize,
}

impl Tokens {
    fn split(line: &[u8], max: usize) -> Tokens {
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

    fn get(&self, i: usize) -> Range<usize> {
        self.ranges[i].clone()
    }
}

fn parse_u64(b: &[u8]) -> Option<u64> {
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
fn decode_base64_key<'a>(token: &[u8], out: &'a mut [u8; MAX_KEY_LEN]) -> Option<&'a [u8]> {
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

/// One item out of the request decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A request to serve.
    Request(Request),
    /// A refused request: reply this, and close afterwards when `close`.
    Refused(RequestError),
}

/// The request parser as a [`Decoder`]: frames requests, refuses bad ones, and drops refused data blocks
/// as they arrive, so no buffer grows past [`Limits::max_request_len`].
#[derive(Debug, Clone, Default)]
pub struct RequestCodec {
    /// The limits the parser enforces.
    limits: Limits,
    /// Bytes of a refused data block still to drop.
    skip: u64,
    /// A refusal that closes the stream was returned: give nothing more.
    closed: bool,
}

impl RequestCodec {
    /// A codec enforcing `limits`.
    pub fn new(limits: Limits) -> RequestCodec {
        RequestCodec {
            limits,
            skip: 0,
            closed: false,
        }
    }
}

impl Decoder for RequestCodec {
    type Item = Decoded;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, std::io::Error> {
        if self.closed {
            buf.clear();
            return Ok(None);
        }
        if self.skip > 0 {
            let n = usize::try_from(self.skip)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            buf.advance(n);
            self.skip -= n as u64;
            if self.skip > 0 {
                return Ok(None);
            }
        }
        match parse_request(buf, &self.limits) {
            Ok(None) => Ok(None),
            Ok(Some(Parsed {
                len,
                command,
                strip,
            })) => {
                let frame = buf.split_to(len).freeze();
                Ok(Some(Decoded::Request(Request {
                    frame,
                    command,
                    strip,
                })))
            }
            Err(err) => {
                buf.advance(err.consumed.min(buf.len()));
                if err.close {
                    self.closed = true;
                    buf.clear();
                } else {
                    self.skip = err.skip;
                }
                Ok(Some(Decoded::Refused(err)))
            }
        }
    }
}

/// The framing of a server's reply, which depends on the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// One line (`STORED`, `DELETED`, a number, `VERSION …`, `HD …`).
    Line,
    /// `VALUE` blocks ended by `END` (get/gets/gat/gats).
    Values,
    /// A meta reply: `VA <len> <flags>` with a data block, or one line.
    Meta,
}

/// A server reply that cannot be framed: the server connection is out of step and must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed server response: {reason}")]
pub struct ResponseError {
    /// What was wrong.
    pub reason: &'static str,
}

fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR")
}

/// Returns the length of the first complete reply of `kind` in `buf`, or `Ok(None)` when more input is
/// needed. Values longer than `max_value_len` are refused.
///
/// # Errors
/// A [`ResponseError`] when the bytes are not a reply of that kind.
pub fn parse_response(
    buf: &[u8],
    kind: ResponseKind,
    max_value_len: usize,
) -> Result<Option<usize>, ResponseError> {
    parse_response_from(buf, kind, max_value_len, &mut 0)
}

/// The largest whole reply accepted (a multi-get's `VALUE` blocks together): a bound on what one request
/// can make the proxy buffer.
pub const MAX_REPLY_LEN: usize = 256 << 20;

/// [`parse_response`] that resumes a values reply where the last call left off: `resume` holds the length
/// of the complete `VALUE` blocks already checked (0 to start), so a large multi-get reply arriving in
/// many reads is scanned once, not once per read. Reset it to 0 after each complete reply.
///
/// # Errors
/// A [`ResponseError`] when the bytes are not a reply of that kind, or the reply exceeds
/// [`MAX_REPLY_LEN`].
pub fn parse_response_from(
    buf: &[u8],
    kind: ResponseKind,
    max_value_len: usize,
    resume: &mut usize,
) -> Result<Option<usize>, ResponseError> {
    const MAX_RESPONSE_LINE: usize = 8 << 10;
    let mut at = if kind == ResponseKind::Values {
        (*resume).min(buf.len())
    } else {
        0
    };
    loop {
        let rest = &buf[at..];
        let Some(nl) = memchr::memchr(b'\n', rest) else {
            if rest.len() > MAX_RESPONSE_LINE {
                return Err(ResponseError {
                    reason: "line too long",
                });
            }
            return Ok(None);
        };
        if nl == 0 || rest[nl - 1] != b'\r' {
            return Err(ResponseError {
                reason: "line not ended by \\r\\n",
            });
        }
        let line = &rest[..nl - 1];
        let line_len = nl + 1;
        if is_error_line(line) {
            // An error ends any reply, also in the middle of a multi-get? Only at its start.
            if at == 0 {
                return Ok(Some(line_len));
            }
            return Err(ResponseError {
                reason: "error line inside a value list",
            });
        }
        match kind {
            ResponseKind::Line => return Ok(Some(line_len)),
            ResponseKind::Meta => {
                if let Some(args) = line.strip_prefix(b"VA ") {
                    let len = args
                        .split(|&c| c == b' ')
                        .next()
                        .and_then(parse_u64)
                        .ok_or(ResponseError {
                            reason: "bad VA length",
                        })?;
                    if len > max_value_len as u64 {
                        return Err(ResponseError {
                            reason: "value too large",
                        });
                    }
                    let total = line_len + len as usize + 2;
                    if rest.len() < total {
                        return Ok(None);
                    }
                    if &rest[total - 2..total] != b"\r\n" {
                        return Err(ResponseError {
                            reason: "bad data block",
                        });
                    }
                    return Ok(Some(total));
                }
                return Ok(Some(line_len));
            }
            ResponseKind::Values => {
                if line == b"END" {
                    return Ok(Some(at + line_len));
                }
                let Some(header) = parse_value_header(line) else {
                    return Err(ResponseError {
                        reason: "expected VALUE or END",
                    });
                };
                if header.len > max_value_len as u64 {
                    return Err(ResponseError {
                        reason: "value too large",
                    });
                }
                let total = line_len + header.len as usize + 2;
                if at + total > MAX_REPLY_LEN {
                    return Err(ResponseError {
                        reason: "reply too large",
                    });
                }
                if rest.len() < total {
                    return Ok(None);
                }
                if &rest[total - 2..total] != b"\r\n" {
                    return Err(ResponseError {
                        reason: "bad data block",
                    });
                }
                at += total;
                *resume = at;
            }
        }
    }
}

/// A `VALUE <key> <flags> <bytes> [<cas>]` line's key (a range of the line) and data length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueHeader {
    /// The key's range within the line.
    pub key: Range<usize>,
    /// The data block's length.
    pub len: u64,
}

/// Parses a `VALUE` line (without its `\r\n`).
pub fn parse_value_header(line: &[u8]) -> Option<ValueHeader> {
    let rest = line.strip_prefix(b"VALUE ")?;
    let t = Tokens::split(rest, 4);
    if t.len != 3 && t.len != 4 {
        return None;
    }
    parse_u64(&rest[t.get(1)])?;
    let len = parse_u64(&rest[t.get(2)])?;
    if t.len == 4 {
        parse_u64(&rest[t.get(3)])?;
    }
    let k = t.get(0);
    Some(ValueHeader {
        key: k.start + 6..k.end + 6,
        len,
    })
}

/// The `VALUE` blocks of a complete, well-framed values reply (one [`parse_response`] accepted), each as
/// `(key, whole block including its \r\n)`. Stops at `END` or at anything else.
#[derive(Debug, Clone)]
pub struct ValueBlocks<'a> {
    /// What is left of the reply.
    rest: &'a [u8],
}

impl<'a> ValueBlocks<'a> {
    /// Iterates over the blocks of `reply`.
    pub fn new(reply: &'a [u8]) -> ValueBlocks<'a> {
        ValueBlocks { rest: reply }
    }
}

impl<'a> Iterator for ValueBlocks<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        let nl = memchr::memchr(b'\n', self.rest)?;
        if nl == 0 {
            return None;
        }
        let line = &self.rest[..nl - 1];
        let header = parse_value_header(line)?;
        let total = (nl + 1).checked_add(usize::try_from(header.len).ok()?)? + 2;
        if self.rest.len() < total {
            return None;
        }
        let (block, rest) = self.rest.split_at(total);
        self.rest = rest;
        Some((&line[header.key], block))
    }
}

/// The status code of a one-line or meta reply: its first token (`HD`, `EN`, `STORED`, …).
pub fn status_code(reply: &[u8]) -> &[u8] {
    let end = reply
        .iter()
        .position(|&c| c == b' ' || c == b'\r' || c == b'\n')
        .unwrap_or(reply.len());
    &reply[..end]
}

/// Whether a reply is an error line (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`).
pub fn is_error_reply(reply: &[u8]) -> bool {
    let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
    is_error_line(line)
}

#[cfg(test)]
mod tests;
