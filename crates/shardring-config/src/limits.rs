//! Request size limits: every buffer the proxy keeps per connection is bounded by them.

/// The longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;

/// The value limit of a memcached pool before any of its servers has said its own: memcached's
/// upper bound for `-I` (1 GiB), so that no value a memcached could store is refused while the pool's
/// servers have not answered yet (the first requests after start, or every server down). It bounds what
/// one client connection can make the proxy buffer in that time; afterwards the servers' own limit
/// does (1 MiB each with memcached's default `-I`).
pub const VALUE_LEN_CEILING: usize = 1 << 30;

/// Input size limits *(proxy-only settings)*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest key. By default, this is 250 (memcached's `KEY_MAX_LENGTH`).
    pub max_key_len: usize,
    /// The largest value in a storage command. When `value_len_from_servers` (the default), a bound
    /// only until every server has answered: then the largest `item_size_max` the pool's servers
    /// report is the limit. By default, this is [`VALUE_LEN_CEILING`].
    pub max_value_len: usize,
    /// Ask each server its `item_size_max` (`stats settings`) when a connection to it opens, and refuse
    /// only values larger than the largest any of the pool's servers reported: so the proxy refuses
    /// no value a server of the pool would store (a smaller value over its own server's limit gets
    /// that server's answer, as from memcached), and buffers no more than the servers would take. `--max-value-size`
    /// turns it off (its size is then the limit). By default, this is true.
    pub value_len_from_servers: bool,
    /// The longest command line other than a retrieval command's (whose keys stream through without a
    /// line limit). By default, this is 64 KiB.
    pub max_line_len: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_key_len: MAX_KEY_LEN,
            max_value_len: VALUE_LEN_CEILING,
            value_len_from_servers: true,
            max_line_len: 64 << 10,
        }
    }
}

/// A redis pool's input size limits *(proxy-only settings)*: with the defaults, every request Redis
/// itself accepts passes; lower ones bound what one client can make the proxy buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisLimits {
    /// The longest argument (bulk string). By default, this is 512 MiB (Redis's `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// The longest request, all its arguments and headers together. By default, this is 1 GiB
    /// (Redis's `client-query-buffer-limit`).
    pub max_request_len: usize,
}

impl Default for RedisLimits {
    fn default() -> RedisLimits {
        RedisLimits {
            max_bulk_len: 512 << 20,
            max_request_len: 1 << 30,
        }
    }
}

impl Limits {
    /// The most bytes one request can occupy in a buffer: a line, a value and its `\r\n`.
    pub fn max_request_len(&self) -> usize {
        self.max_line_len + self.max_value_len + 2
    }
}
