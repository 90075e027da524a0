//! The hot-key flags (`--hot-keys`, `--hot-keys-window`, `--hot-cache-ttl`, `--hot-cache-size`):
//! detection, and the cache of the top keys' replies, in every pool of either protocol.

use std::time::Duration;

use crate::config::{ConfigErrors, HotKeysConfig, PoolConfig};
use crate::flags::size::parse_size;
use crate::flags::ApplyToPools;

/// `--hot-keys-window`'s default, in milliseconds (as [`HotKeysConfig::new`]'s).
const DEFAULT_WINDOW_MS: u64 = 10_000;

/// Hot-key detection and the hot-key cache. [`Default`]: none given, detection off.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct HotKeyFlags {
    /// Track each pool's K heaviest keys over a sliding window (a count-min sketch; shown in the stats
    /// JSON and at /hotkeys beside /metrics). Off by default.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub hot_keys: Option<u16>,
    /// The hot-key window in milliseconds (counts cover between half of it and all of it).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_WINDOW_MS, requires = "hot_keys",
          value_parser = clap::value_parser!(u64).range(2..=3_600_000))]
    pub hot_keys_window: u64,
    /// Serve `get`s of the top keys from a cache in the proxy, each reply for at most MS milliseconds
    /// after it was fetched; writes through the proxy invalidate it. Needs --hot-keys.
    #[arg(long, value_name = "MS", requires = "hot_keys",
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub hot_cache_ttl: Option<u64>,
    /// The hot-key cache's size bound: bytes, or with a `k`/`m` suffix. [default: 1m]
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "hot_cache_ttl")]
    pub hot_cache_size: Option<usize>,
}

impl Default for HotKeyFlags {
    fn default() -> HotKeyFlags {
        HotKeyFlags {
            hot_keys: None,
            hot_keys_window: DEFAULT_WINDOW_MS,
            hot_cache_ttl: None,
            hot_cache_size: None,
        }
    }
}

impl HotKeyFlags {
    /// The hot-key settings the flags ask for: `None` without `--hot-keys`.
    fn config(&self) -> Option<HotKeysConfig> {
        self.hot_keys.map(|k| {
            let mut h = HotKeysConfig::new(usize::from(k));
            h.window = Duration::from_millis(self.hot_keys_window);
            h.cache_ttl = self.hot_cache_ttl.map(Duration::from_millis);
            if let Some(size) = self.hot_cache_size {
                h.cache_bytes = size as u64;
            }
            h
        })
    }
}

impl ApplyToPools for HotKeyFlags {
    /// Every pool, memcached (one of its remedies) or redis alike.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let config = self.config();
        for pool in pools {
            pool.remedies.hot_keys.clone_from(&config);
        }
        Ok(())
    }
}
