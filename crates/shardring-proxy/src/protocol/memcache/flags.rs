//! The memcached pools' own flag (`--multiget-all-or-nothing`): how a multi-get answers when one of
//! its servers fails (`protocol/memcache/`).

use crate::config::{ConfigErrors, PoolConfig};

use crate::flags::ApplyToPools;

/// How memcached pools answer. [`Default`]: none given, a multi-get returns the keys it could fetch.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct MemcacheFlags {
    /// A multi-get fails whole (`SERVER_ERROR`) when one of its servers fails, as in twemproxy; by
    /// default the keys that could be fetched are returned.
    #[arg(long)]
    pub multiget_all_or_nothing: bool,
}

impl ApplyToPools for MemcacheFlags {
    /// Every memcached pool; redis pools have no such choice.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        for m in pools.iter_mut().filter_map(PoolConfig::memcache_mut) {
            m.multiget_all_or_nothing = self.multiget_all_or_nothing;
        }
        Ok(())
    }
}
