//! The request limits' flags (`--max-value-size`, `--max-request-size`): what one client can make
//! the proxy buffer, in either protocol's pools (the protocols' decoders refuse what is over them).

use crate::config::{ConfigErrors, PoolConfig, ProtocolConfig};

use super::size::parse_size;
use super::ApplyToPools;

/// The request limits, for every pool. [`Default`]: none given, each protocol's own defaults.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct LimitFlags {
    /// The largest value a client may store, for every pool (memcached's `-I`): bytes, or with a
    /// `k`, `m` or `g` suffix. Larger ones get `SERVER_ERROR object too large for cache`. By
    /// default, a memcached pool asks each server its `item_size_max` (`stats settings`) and takes the
    /// largest, so it refuses no value its servers would store (up to 1g until every server has said);
    /// this flag overrides that. In redis pools, the longest argument (Redis's
    /// `proto-max-bulk-len`): a longer one gets a protocol error and the connection is closed before
    /// it is buffered. [default: the servers' own for memcached pools, 512m for redis pools]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_value_size: Option<usize>,
    /// Redis pools: the longest request a client may send, all its arguments together (Redis's
    /// `client-query-buffer-limit`), which bounds what one client can make the proxy buffer: a longer
    /// one gets a protocol error and the connection is closed before it is buffered. Bytes, or with
    /// a `k`, `m` or `g` suffix. [default: 1g]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_request_size: Option<usize>,
}

impl ApplyToPools for LimitFlags {
    /// A memcached pool takes the value size as its limit (its servers are then not asked theirs); a
    /// redis pool takes it as its argument limit, and the request size as its request limit.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        for pool in pools {
            match &mut pool.protocol {
                ProtocolConfig::Memcache(m) => {
                    if let Some(size) = self.max_value_size {
                        m.limits.max_value_len = size;
                        m.limits.value_len_from_servers = false;
                    }
                }
                ProtocolConfig::Redis(r) => {
                    if let Some(size) = self.max_value_size {
                        r.limits.max_bulk_len = size;
                    }
                    if let Some(size) = self.max_request_size {
                        r.limits.max_request_len = size;
                    }
                }
            }
        }
        Ok(())
    }
}
