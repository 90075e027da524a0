//! Which RESP version a connection speaks ([`Flavor`]).

/// Which RESP version a connection speaks: `HELLO 3` switches a client to RESP3, and a RESP3 client is
/// served over backend connections that said `HELLO 3` too, so replies keep the shape the client asked for
/// (`HGETALL` is a map, `ZSCORE` a double) and the proxy's own replies use that version's null.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Flavor {
    /// RESP2, every connection's version until it says `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

impl Flavor {
    /// This version's null: `$-1\r\n` (RESP2's null bulk string) or `_\r\n`.
    pub fn null(self) -> &'static [u8] {
        match self {
            Flavor::Resp2 => b"$-1\r\n",
            Flavor::Resp3 => b"_\r\n",
        }
    }
}
