//! The resumable request scanner: RESP arrays of bulk strings and inline commands, as Redis 7 reads them.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use shardring_resp::{find_crlf, LineEnd};

use super::inline::split_inline;
use super::parse_redis_int;

/// Input size limits; every buffer the proxy keeps per client connection is bounded by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest bulk string (one argument). By default, this is 512 MiB (Redis's
    /// `proto-max-bulk-len`), so every value Redis accepts passes.
    pub max_bulk_len: usize,
    /// The most arguments in one request. By default, this is 1,048,576 (Redis allows up to 2³¹−1; a
    /// request that large would cost the proxy 16 bytes an argument in ranges).
    pub max_args: usize,
    /// The longest request, all its bulk strings and headers together. By default, this is 1 GiB (Redis's
    /// `client-query-buffer-limit`). A request is refused as soon as a header shows it would pass this,
    /// before its bytes are buffered.
    pub max_request_len: usize,
    /// The longest inline command line, and the longest `*<n>`/`$<n>` header line. By default, this is
    /// 64 KiB (Redis's `PROTO_INLINE_MAX_SIZE`).
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bulk_len: 512 << 20,
            max_args: 1 << 20,
            max_request_len: 1 << 30,
            max_inline_len: 64 << 10,
        }
    }
}

/// Why a request was refused. Each is a protocol error: see the table in [the module docs](super).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestErrorKind {
    /// `*<n>` where `n` is not a number Redis accepts, or is over 2³¹−1.
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    /// `*<n>` with `n` over [`Limits::max_args`].
    #[error("{count} arguments, over the proxy's limit of {limit}")]
    TooManyArgs {
        /// The count the client sent.
        count: i64,
        /// The limit.
        limit: usize,
    },
    /// An array element that does not start with `$`.
    #[error("expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
    /// `$<n>` where `n` is not a number or is negative.
    #[error("invalid bulk length")]
    InvalidBulkLength,
    /// `$<n>` with `n` over [`Limits::max_bulk_len`].
    #[error("bulk length {len} over the proxy's limit of {limit}")]
    BulkTooLong {
        /// The length the client sent.
        len: i64,
        /// The limit.
        limit: usize,
    },
    /// The request would be longer than [`Limits::max_request_len`].
    #[error("request over the proxy's limit of {limit} bytes")]
    RequestTooLong {
        /// The limit.
        limit: usize,
    },
    /// Bulk data or a header line not ended by `\r\n`.
    #[error("expected '\\r\\n'")]
    ExpectedCrlf,
    /// A `*<n>` line over [`Limits::max_inline_len`].
    #[error("too big mbulk count string")]
    MultibulkHeaderTooLong,
    /// A `$<n>` line over [`Limits::max_inline_len`].
    #[error("too big bulk count string")]
    BulkHeaderTooLong,
    /// An inline command line over [`Limits::max_inline_len`].
    #[error("too big inline request")]
    InlineTooLong,
    /// An inline command whose quotes do not close (or a closing quote followed by more than a space).
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
}

impl RequestErrorKind {
    /// The error reply the client gets (`-ERR Protocol error: …\r\n`).
    pub fn reply(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64);
        out.put_slice(b"-ERR Protocol error: ");
        // The messages are ours and hold no CR or LF; `ExpectedBulk` shows a client byte, kept printable.
        match self {
            RequestErrorKind::ExpectedBulk(c) if !c.is_ascii_graphic() && *c != b' ' => {
                out.put_slice(format!("expected '$', got '\\x{c:02x}'").as_bytes());
            }
            RequestErrorKind::ExpectedCrlf => out.put_slice(b"expected '\\r\\n'"),
            other => out.put_slice(other.to_string().as_bytes()),
        }
        out.put_slice(b"\r\n");
        out.freeze()
    }
}

/// A refused request: what to reply, and how to get back in step with the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// Why.
    pub kind: RequestErrorKind,
    /// Bytes of the input that belong to the refused request and are dropped now; when `close`, all that
    /// was buffered.
    pub consumed: usize,
    /// The stream cannot be resynchronised: reply, then close (Redis closes after every protocol error).
    pub close: bool,
}

/// A request's argument ranges: three are kept inline, so `GET key` and `SET key value` are decoded
/// without a heap allocation (it was the one allocation left on a proxied `GET`).
pub type Args = smallvec::SmallVec<[Range<usize>; 3]>;

/// What one state of the scanner came to: it moved on to its next state, or it needs more bytes.
/// Small on purpose: a whole request is taken in [`RequestScanner::scan`] itself, so no step
/// returns one (a step that did cost ~2 % instructions per Redis request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// The state moved on: scan on.
    Next,
    /// More bytes are needed.
    Wait,
}

/// A whole request found by [`RequestScanner::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scanned {
    /// A RESP array of bulk strings occupying `input[..len]`; `args` index the input (the command name is
    /// `args[0]`). An empty `args` (`*0`, `*-1`) gets no reply, as in Redis.
    Array {
        /// The frame's length.
        len: usize,
        /// Each argument's bytes, without its header or `\r\n`.
        args: Args,
    },
    /// An inline command line occupying `input[..len]`, split as Redis splits it (quotes, `\x41`
    /// escapes): the arguments are owned, since unescaping changes them. Empty for a blank line.
    Inline {
        /// The line's length with its `\n`.
        len: usize,
        /// The arguments, unescaped.
        args: Vec<Vec<u8>>,
    },
}

/// Where the scanner is inside the current request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// At the first byte of a request.
    #[default]
    Start,
    /// Inside an array, before the header of one of its remaining `remaining` bulk strings.
    Array {
        /// Bulk strings still to come.
        remaining: usize,
    },
    /// Inside an array, after the header of a bulk string of `len` bytes starting at `pos`.
    Bulk {
        /// Bulk strings still to come after this one.
        remaining: usize,
        /// Its length.
        len: usize,
    },
    /// Inside an inline line: no `\n` among the bytes before `pos`.
    Inline,
}

/// The request scanner. It keeps its place across calls: the caller passes the same input, grown by what
/// it read since (the input always starts at the current request's first byte), and only the new bytes
/// are looked at.
#[derive(Debug, Clone, Default)]
pub struct RequestScanner {
    /// The limits it enforces.
    limits: Limits,
    /// Where it is in the current request.
    state: State,
    /// Bytes of the current request already scanned.
    pos: usize,
    /// The arguments of the current array found so far.
    args: Args,
}

impl RequestScanner {
    /// A scanner enforcing `limits`.
    pub fn new(limits: Limits) -> RequestScanner {
        RequestScanner {
            limits,
            ..RequestScanner::default()
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes of the current request already scanned: the next call looks at the input from about here.
    pub fn scanned(&self) -> usize {
        self.pos
    }

    /// Forgets the current request (after a refusal, or when the caller drops the input).
    pub fn reset(&mut self) {
        self.state = State::Start;
        self.pos = 0;
        self.args.clear();
    }

    fn refuse(&mut self, kind: RequestErrorKind, consumed: usize, close: bool) -> RequestError {
        self.reset();
        RequestError {
            kind,
            consumed,
            close,
        }
    }

    /// Scans the first request of `buf`, carrying on from the previous call.
    ///
    /// Returns `Ok(None)` when `buf` does not yet hold the whole request (and it is within the limits),
    /// `Ok(Some(scanned))` for a whole one (the caller then drops its bytes from the front of `buf`), and
    /// `Err` for a refused one. After `Some` or `Err` the scanner starts afresh.
    ///
    /// `buf` must be the input of the previous call with bytes appended, until `Some` or `Err`.
    ///
    /// # Errors
    /// A [`RequestError`] saying what to reply and how much input to drop.
    pub fn scan(&mut self, buf: &[u8]) -> Result<Option<Scanned>, RequestError> {
        // A request whose bytes are all in, as most are, in one pass with nothing kept between
        // its arguments; anything else (a part still to come, a number written oddly, a limit)
        // goes through the states below from the request's start, which answer it exactly.
        if self.state == State::Start {
            if let Some(whole) = self.whole_array(buf) {
                return Ok(Some(whole));
            }
        }
        // Each state's step is inlined here (`#[inline(always)]`): the scanner runs once per
        // request, and a call per argument showed as +2 % instructions per Redis request.
        loop {
            let turn = match self.state {
                State::Start => self.array_header(buf)?,
                State::Array { remaining: 0 } => {
                    let len = self.pos;
                    let args = std::mem::take(&mut self.args);
                    self.reset();
                    return Ok(Some(Scanned::Array { len, args }));
                }
                State::Array { remaining } => self.bulk_header(buf, remaining)?,
                State::Bulk { remaining, len } => self.bulk(buf, remaining, len)?,
                State::Inline => return self.inline(buf),
            };
            if turn == Turn::Wait {
                return Ok(None);
            }
        }
    }

    /// The request at the start of `buf` when it is an array of bulk strings whose bytes are all
    /// in, each length written in at most 9 digits and within every limit: what the states would
    /// find, in one pass over its headers (`scripts/proxy-instructions`: a `GET` about 200
    /// instructions fewer). `None` for anything else, which the states then read from the start.
    #[inline(always)]
    fn whole_array(&self, buf: &[u8]) -> Option<Scanned> {
        let limits = &self.limits;
        if buf.first() != Some(&b'*') {
            return None;
        }
        let (count, mut pos) = short_number(buf, 1, limits.max_inline_len)?;
        if count == 0 || count > limits.max_args {
            return None;
        }
        let mut args = Args::new();
        args.reserve(count.min(4096));
        for _ in 0..count {
            if buf.get(pos) != Some(&b'$') {
                return None;
            }
            let (len, data) = short_number(buf, pos + 1, limits.max_inline_len)?;
            // No overflow: `len` has at most 9 digits, and `data` is within `buf`. The request's
            // length is checked as its arguments end: one that is all in passes the limit only if
            // each argument's end does (the states look ahead, for a request not yet all in).
            let end = data + len + 2;
            if len > limits.max_bulk_len
                || end > limits.max_request_len
                || buf.get(end - 2..end)? != b"\r\n"
            {
                return None;
            }
            args.push(data..data + len);
            pos = end;
        }
        Some(Scanned::Array { len: pos, args })
    }

    /// A request's first line: `*<count>` starts an array (refused when its count cannot be
    /// served), anything else an inline command.
    #[inline(always)]
    fn array_header(&mut self, buf: &[u8]) -> Result<Turn, RequestError> {
        use RequestErrorKind as E;
        let Some(&first) = buf.first() else {
            return Ok(Turn::Wait);
        };
        if first != b'*' {
            self.state = State::Inline;
            return Ok(Turn::Next);
        }
        let cr = match find_crlf(buf, 1, self.limits.max_inline_len) {
            LineEnd::At(cr) => cr,
            LineEnd::Incomplete => return Ok(Turn::Wait),
            LineEnd::TooLong => {
                return Err(self.refuse(E::MultibulkHeaderTooLong, buf.len(), true))
            }
            LineEnd::BareCr => return Err(self.refuse(E::ExpectedCrlf, buf.len(), true)),
        };
        let count = match parse_redis_int(&buf[1..cr]) {
            Some(n) if n <= i64::from(i32::MAX) => n,
            _ => return Err(self.refuse(E::InvalidMultibulkLength, buf.len(), true)),
        };
        let header = cr + 2;
        if count <= 0 {
            // An empty array: whole at its header.
            self.args.clear();
            self.pos = header;
            self.state = State::Array { remaining: 0 };
            return Ok(Turn::Next);
        }
        let count = count as usize;
        if count > self.limits.max_args {
            let limit = self.limits.max_args;
            return Err(self.refuse(
                E::TooManyArgs {
                    count: count as i64,
                    limit,
                },
                buf.len(),
                true,
            ));
        }
        // Each argument takes at least 6 bytes (`$0\r\n\r\n`): a count that cannot fit is refused now.
        if header.saturating_add(count.saturating_mul(6)) > self.limits.max_request_len {
            let limit = self.limits.max_request_len;
            return Err(self.refuse(E::RequestTooLong { limit }, buf.len(), true));
        }
        self.args.clear();
        self.args.reserve(count.min(4096));
        self.pos = header;
        self.state = State::Array { remaining: count };
        Ok(Turn::Next)
    }

    /// The next argument's `$<len>` line, `remaining` (at least one) arguments to go; a length that
    /// cannot be served is refused before its bytes are buffered.
    #[inline(always)]
    fn bulk_header(&mut self, buf: &[u8], remaining: usize) -> Result<Turn, RequestError> {
        use RequestErrorKind as E;
        let Some(&c) = buf.get(self.pos) else {
            return Ok(Turn::Wait);
        };
        if c != b'$' {
            return Err(self.refuse(E::ExpectedBulk(c), buf.len(), true));
        }
        let cr = match find_crlf(buf, self.pos + 1, self.limits.max_inline_len) {
            LineEnd::At(cr) => cr,
            LineEnd::Incomplete => return Ok(Turn::Wait),
            LineEnd::TooLong => return Err(self.refuse(E::BulkHeaderTooLong, buf.len(), true)),
            LineEnd::BareCr => return Err(self.refuse(E::ExpectedCrlf, buf.len(), true)),
        };
        let len = match parse_redis_int(&buf[self.pos + 1..cr]) {
            Some(n) if n >= 0 => n,
            _ => return Err(self.refuse(E::InvalidBulkLength, buf.len(), true)),
        };
        if len as u64 > self.limits.max_bulk_len as u64 {
            let limit = self.limits.max_bulk_len;
            return Err(self.refuse(E::BulkTooLong { len, limit }, buf.len(), true));
        }
        let len = len as usize;
        let data = cr + 2;
        // What is still to come is at least this bulk and 6 bytes for each later argument.
        let least = (data + len + 2).saturating_add((remaining - 1).saturating_mul(6));
        if least > self.limits.max_request_len {
            let limit = self.limits.max_request_len;
            return Err(self.refuse(E::RequestTooLong { limit }, buf.len(), true));
        }
        self.pos = data;
        self.state = State::Bulk {
            remaining: remaining - 1,
            len,
        };
        Ok(Turn::Next)
    }

    /// An argument's `len` bytes and their `\r\n`, once all are in.
    #[inline(always)]
    fn bulk(&mut self, buf: &[u8], remaining: usize, len: usize) -> Result<Turn, RequestError> {
        let end = self.pos + len + 2;
        if buf.len() < end {
            return Ok(Turn::Wait);
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(self.refuse(RequestErrorKind::ExpectedCrlf, buf.len(), true));
        }
        self.args.push(self.pos..self.pos + len);
        self.pos = end;
        self.state = State::Array { remaining };
        Ok(Turn::Next)
    }

    /// An inline command (a line a person typed), once its `\n` is in.
    fn inline(&mut self, buf: &[u8]) -> Result<Option<Scanned>, RequestError> {
        use RequestErrorKind as E;
        let from = self.pos.min(buf.len());
        let Some(nl) = memchr::memchr(b'\n', &buf[from..]).map(|i| from + i) else {
            if buf.len() > self.limits.max_inline_len {
                return Err(self.refuse(E::InlineTooLong, buf.len(), true));
            }
            self.pos = buf.len();
            return Ok(None);
        };
        if nl > self.limits.max_inline_len {
            return Err(self.refuse(E::InlineTooLong, buf.len(), true));
        }
        let line = match buf[..nl].strip_suffix(b"\r") {
            Some(line) => line,
            None => &buf[..nl],
        };
        let len = nl + 1;
        match split_inline(line) {
            Some(args) => {
                self.reset();
                Ok(Some(Scanned::Inline { len, args }))
            }
            None => Err(self.refuse(E::UnbalancedQuotes, len, false)),
        }
    }
}

/// The number at `buf[at..]` and where the line after it starts, when it is 1 to 9 digits as Redis
/// writes them (no leading zero but `0` itself; at most `max` of them) followed by `\r\n`; `None`
/// otherwise, whether it is wrong or only not all in yet.
#[inline(always)]
fn short_number(buf: &[u8], at: usize, max: usize) -> Option<(usize, usize)> {
    let line = buf.get(at..)?;
    let mut value = 0usize;
    let mut digits = 0;
    loop {
        match *line.get(digits)? {
            c @ b'0'..=b'9' if digits < 9 => {
                value = value * 10 + usize::from(c - b'0');
                digits += 1;
            }
            b'\r' => break,
            _ => return None,
        }
    }
    let leading_zero = line[0] == b'0' && digits > 1;
    if digits == 0 || digits > max || leading_zero || line.get(digits + 1) != Some(&b'\n') {
        return None;
    }
    Some((value, at + digits + 2))
}

/// A request: the RESP array to forward, and its arguments' ranges inside it. Two requests are equal when
/// their bytes and arguments are (the cached command lookup is derived from them).
#[derive(Debug, Clone)]
pub struct Request {
    /// The whole request as a RESP array of bulk strings: the client's bytes, or for an inline command
    /// the array it stands for.
    pub frame: Bytes,
    /// Each argument's range in `frame`; never empty (the command name is `args[0]`).
    pub args: Args,
    /// The command's index in the command table, looked up once for the request's latency tally and its
    /// routing alike ([`command::index_of_request`](super::command::index_of_request)).
    pub(super) command: std::cell::OnceCell<Option<usize>>,
}

impl PartialEq for Request {
    fn eq(&self, other: &Request) -> bool {
        self.frame == other.frame && self.args == other.args
    }
}

impl Eq for Request {}

impl Request {
    /// The bytes of argument `i`, if there is one.
    pub fn arg(&self, i: usize) -> Option<&[u8]> {
        self.args.get(i).map(|r| &self.frame[r.clone()])
    }

    /// The number of arguments, the command name included.
    pub fn argc(&self) -> usize {
        self.args.len()
    }

    /// The arguments' bytes, in order.
    pub fn arg_slices(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.args.iter().map(|r| &self.frame[r.clone()])
    }

    /// A request made of `args`, encoded as a RESP array (inline commands; requests the proxy sends).
    pub fn from_args<A: AsRef<[u8]>>(args: &[A]) -> Request {
        let size: usize = args.iter().map(|a| a.as_ref().len() + 16).sum::<usize>() + 16;
        let mut out = BytesMut::with_capacity(size);
        let mut ranges = Args::with_capacity(args.len());
        put_header(&mut out, b'*', args.len());
        for a in args {
            let a = a.as_ref();
            put_header(&mut out, b'$', a.len());
            ranges.push(out.len()..out.len() + a.len());
            out.put_slice(a);
            out.put_slice(b"\r\n");
        }
        Request {
            frame: out.freeze(),
            args: ranges,
            command: std::cell::OnceCell::new(),
        }
    }
}

/// Writes `<kind><n>\r\n`.
pub(crate) fn put_header(out: &mut BytesMut, kind: u8, n: usize) {
    // One write of the whole line: a split command writes one per argument.
    let mut buf = [0u8; 24];
    let end = buf.len() - 2;
    buf[end..].copy_from_slice(b"\r\n");
    let at = decimal_into(&mut buf[..end], n as u64) - 1;
    buf[at] = kind;
    out.put_slice(&buf[at..]);
}

/// How many bytes [`put_header`] writes for `n`: the kind, the digits, CR LF.
pub(crate) fn header_len(n: usize) -> usize {
    let mut buf = [0u8; 20];
    buf.len() - decimal_into(&mut buf, n as u64) + 3
}

/// Writes `n` in decimal.
pub(crate) fn put_int(out: &mut BytesMut, n: i64) {
    let mut buf = [0u8; 20];
    let at = decimal_into(&mut buf, n.unsigned_abs());
    if n < 0 {
        out.put_u8(b'-');
    }
    out.put_slice(&buf[at..]);
}

/// Writes `v`'s decimal digits at the end of `buf` (20 bytes hold any `u64`); where they start.
fn decimal_into(buf: &mut [u8], mut v: u64) -> usize {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return at;
        }
    }
}
