//! What a memcached client request is: its command, its keys as ranges of its bytes, and why one is refused.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::response::ResponseKind;

pub use crate::config::{Limits, MAX_KEY_LEN};

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
    /// The retrieval command named by `word`.
    pub fn from_word(word: &[u8]) -> Option<GetKind> {
        match word {
            b"get" => Some(GetKind::Get),
            b"gets" => Some(GetKind::Gets),
            b"gat" => Some(GetKind::Gat),
            b"gats" => Some(GetKind::Gats),
            _ => None,
        }
    }

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
            // As memcached 1.6.18: a quiet `mg` hides a miss; `ms` and `md` hide success (`HD`) and
            // show `NS`, `EX` and `NF`; `ma` hides a successful change (`HD`, or `VA` with `v`) and
            // shows `NF`; `me` hides nothing. (One case cannot be told from the reply: a quiet `ma`
            // with `N` that creates its key is answered by memcached, and hidden here.)
            MetaKind::Get => status == b"EN",
            MetaKind::Set | MetaKind::Delete => status == b"HD",
            MetaKind::Arithmetic => status == b"HD" || status == b"VA",
            MetaKind::Debug => false,
        }
    }
}

/// A retrieval's key ranges: one is kept inline, so the common one-key `get` parses without a heap
/// allocation (a list on the heap was one of the few allocations a proxied `get` makes).
pub type Keys = smallvec::SmallVec<[Range<usize>; 1]>;

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
        keys: Keys,
        /// More keys of the same client line follow in further requests (a line too long to wait for is
        /// streamed through in pieces): this piece's answer has no `END`.
        more: bool,
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
    #[inline]
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
    /// Not a command this proxy knows, or a known one with too few or too many tokens (memcached answers
    /// both `ERROR`).
    #[error("unknown command")]
    UnknownCommand,
    /// A token that does not parse (memcached's words).
    #[error("bad command line format")]
    BadFormat,
    /// `delete` with a time other than 0, or an extra token other than `noreply` (memcached's words).
    #[error("bad command line format.  Usage: delete <key> [noreply]")]
    DeleteUsage,
    /// A numeric field did not parse.
    #[error("bad number")]
    BadNumber,
    /// The delta of `incr`/`decr` is not an unsigned 64-bit number (memcached's words).
    #[error("invalid numeric delta argument")]
    InvalidDelta,
    /// An expiration time is not a number (memcached's words).
    #[error("invalid exptime argument")]
    InvalidExptime,
    /// A key longer than the limit (memcached 1.6 answers it with its format error).
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
    /// A request in memcached's binary protocol (first byte 0x80), which the proxy does not speak:
    /// the connection is closed at once, without a reply, as nutcracker does (waiting for a newline
    /// would leave the client hanging until its own timeout).
    #[error("binary protocol request (first byte 0x80): only the text protocol is served")]
    BinaryProtocol,
}

impl RequestErrorKind {
    /// The reply line the client gets.
    pub fn reply(self) -> &'static [u8] {
        match self {
            RequestErrorKind::UnknownCommand => b"ERROR\r\n",
            RequestErrorKind::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            RequestErrorKind::DeleteUsage => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            RequestErrorKind::BadNumber => b"CLIENT_ERROR bad number\r\n",
            RequestErrorKind::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            RequestErrorKind::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            RequestErrorKind::KeyTooLong => b"CLIENT_ERROR bad command line format\r\n",
            RequestErrorKind::ValueTooLarge => b"SERVER_ERROR object too large for cache\r\n",
            RequestErrorKind::BadBase64Key => b"CLIENT_ERROR error decoding key\r\n",
            RequestErrorKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            RequestErrorKind::LineTooLong => b"CLIENT_ERROR line too long\r\n",
            RequestErrorKind::BinaryProtocol => b"",
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
    /// The refused command carried `noreply` (its last token), so the client gets no reply at all, as
    /// from memcached: any reply would be read as the answer to its next command. Never set for a
    /// line memcached answers `ERROR` (a command with the wrong number of tokens), nor for meta
    /// commands, whose errors memcached shows even with `q`.
    pub noreply: bool,
}

impl RequestError {
    /// A refused storage command whose line is `consumed` bytes: its data block of `vlen` bytes and
    /// `\r\n` is skipped as it arrives, so the next request is read in step.
    pub(super) fn with_block(kind: RequestErrorKind, consumed: usize, vlen: u64) -> RequestError {
        RequestError {
            kind,
            consumed,
            skip: vlen.saturating_add(2),
            close: false,
            noreply: false,
        }
    }

    /// A refusal after which the stream cannot be resynchronised.
    pub(super) fn closing(kind: RequestErrorKind, consumed: usize) -> RequestError {
        RequestError {
            kind,
            consumed,
            skip: 0,
            close: true,
            noreply: false,
        }
    }

    pub(super) fn line(kind: RequestErrorKind, consumed: usize) -> RequestError {
        RequestError {
            kind,
            consumed,
            skip: 0,
            close: false,
            noreply: false,
        }
    }

    /// The same refusal, silent when `noreply` (the command's last token is `noreply`).
    pub(super) fn silent_if(self, noreply: bool) -> RequestError {
        RequestError { noreply, ..self }
    }

    /// The bytes the client gets: the error reply, or nothing for a `noreply` command.
    pub fn reply(&self) -> &'static [u8] {
        if self.noreply {
            b""
        } else {
            self.kind.reply()
        }
    }
}

/// A request found by [`parse_request`](super::parse_request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Its length in the input: the line and its data block.
    pub len: usize,
    /// What it is; ranges index the input.
    pub command: Command,
    /// The token to strip before forwarding (see [`Request::strip`]).
    pub strip: Option<Range<usize>>,
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

#[cfg(test)]
impl Request {
    /// The request `line` (a whole frame) parses to under the default limits, for unit tests.
    pub(crate) fn from_line(line: &[u8]) -> Request {
        let parsed = super::parse::parse_request(line, &Limits::default())
            .expect("a request that parses")
            .expect("a whole request");
        Request {
            frame: Bytes::copy_from_slice(line),
            command: parsed.command,
            strip: parsed.strip,
        }
    }
}
