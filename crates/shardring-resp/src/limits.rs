//! How much one reply may make its reader buffer.

/// Bounds on what one server reply can make its reader buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLimits {
    /// The longest bulk string, bulk error or verbatim string. By default, this is 512 MiB (Redis's
    /// `proto-max-bulk-len`: no value Redis stores is longer).
    pub max_bulk_len: usize,
    /// The deepest nesting of aggregates. By default, this is 128 (Redis's own replies nest at most 7
    /// deep, `COMMAND DOCS`; a script can return deeper ones, and Redis caps what it converts at 1000).
    pub max_depth: usize,
    /// The longest whole reply. By default, this is 1 GiB.
    pub max_reply_len: usize,
    /// The longest line (simple string, error, number). By default, this is 64 KiB.
    pub max_line_len: usize,
}

impl Default for ReplyLimits {
    fn default() -> ReplyLimits {
        ReplyLimits {
            max_bulk_len: 512 << 20,
            max_depth: 128,
            max_reply_len: 1 << 30,
            max_line_len: 64 << 10,
        }
    }
}
