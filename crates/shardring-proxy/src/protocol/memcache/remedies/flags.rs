//! The memcached remedies' flags (`--replicas`, `--replica-read-miss`, `--gutter`, `--gutter-ttl`,
//! `--warmup-window`): fewer misses when servers fail or move (`protocol/memcache/remedies/`). Given
//! for every pool they set the memcached pools, and the user is told for each redis pool that it is
//! left alone; a redis pool takes a replica count that names it (`protocol/redis/features/replicas.rs`).

use std::time::Duration;

use shardring::compat::twemproxy::TwemproxyServer;

use crate::config::{ConfigErrors, GutterConfig, PoolConfig, ProtocolConfig};

use crate::flags::per_pool::{for_pool, named, own, refuse_unknown};
use crate::flags::ApplyToPools;

/// `--gutter-ttl`'s default, in seconds: the gutter holds a dead server's hot keys for moments, not its
/// data set.
const DEFAULT_GUTTER_TTL: u32 = 10;

/// The memcached remedies. [`Default`]: none given, every remedy off.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct RemedyFlags {
    /// Keep every key on R servers: its owner (placed as nutcracker places it) and the ring's next
    /// distinct servers. Writes go to all live ones, reads to the first live one and on to the next on
    /// an error, so a dead server costs no misses. `R` applies to every memcached pool, `POOL=R` to one
    /// pool, memcached or redis (repeat the flag for several; a pool's own setting wins over the plain
    /// one; a redis pool's writes are the commands Redis flags `write`). [default: 1]
    #[arg(long, value_name = "[POOL=]R", value_parser = parse_replicas)]
    pub replicas: Vec<(Option<String>, u16)>,
    /// With --replicas, a read that misses also tries the next replica (a restarted, empty server then
    /// still reads what its peers kept), at one more round trip per miss.
    #[arg(long)]
    pub replica_read_miss: bool,
    /// A gutter pool for pools without replicas (Facebook's design): while a server is ejected, its
    /// keys go to these servers (`HOST:PORT[:WEIGHT]`, comma-separated) with their TTLs capped, instead
    /// of to the next servers of the ring. Needs auto_eject_hosts in the pool to take effect.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',', value_parser = parse_gutter_server)]
    pub gutter: Vec<TwemproxyServer>,
    /// The longest TTL, in seconds, of a value stored in the gutter.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_GUTTER_TTL, requires = "gutter",
          value_parser = clap::value_parser!(u32).range(1..=2_592_000))]
    pub gutter_ttl: u32,
    /// For this many milliseconds after a reload changes a pool's servers, a key that moved is still
    /// found on its previous server: a `get` that misses on the key's new server is retried there and
    /// a hit is copied over (with its flags and remaining TTL, never over a newer write or a delete),
    /// and any other command of the key (append, incr, delete, cas, gets, the meta commands, …) copies
    /// it first, then applies, so it answers as if the key had never moved. Off by default.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub warmup_window: Option<u64>,
}

impl Default for RemedyFlags {
    fn default() -> RemedyFlags {
        RemedyFlags {
            replicas: Vec::new(),
            replica_read_miss: false,
            gutter: Vec::new(),
            gutter_ttl: DEFAULT_GUTTER_TTL,
            warmup_window: None,
        }
    }
}

impl ApplyToPools for RemedyFlags {
    /// A memcached pool takes every remedy, with its own replica count or the plain one (1 when none
    /// is given); a redis pool takes only a replica count that names it: one given for every pool is
    /// the memcached pools' remedy, and redis pools, often stores, are named to take it.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        for pool in pools.iter_mut() {
            match &mut pool.protocol {
                ProtocolConfig::Memcache(m) => {
                    pool.remedies.replicas =
                        for_pool(&self.replicas, &pool.name).map_or(1, |n| usize::from(*n));
                    let r = &mut m.remedies;
                    r.replica_read_miss = self.replica_read_miss;
                    r.gutter = (!self.gutter.is_empty()).then(|| GutterConfig {
                        servers: self.gutter.clone(),
                        ttl_cap: self.gutter_ttl,
                    });
                    r.warmup_window = self.warmup_window.map(Duration::from_millis);
                }
                ProtocolConfig::Redis(_) => {
                    if let Some(n) = own(&self.replicas, &pool.name) {
                        pool.remedies.replicas = usize::from(*n);
                    }
                }
            }
        }
        let mut errors = ConfigErrors::default();
        refuse_unknown("--replicas", named(&self.replicas), pools, &mut errors);
        errors.into_result()
    }

    /// The remedies given for every pool, once for each redis pool.
    fn unused(&self, pools: &[PoolConfig]) -> Vec<String> {
        let flags = [
            ("--replicas", self.replicas.iter().any(|(p, _)| p.is_none())),
            ("--warmup-window", self.warmup_window.is_some()),
            ("--gutter", !self.gutter.is_empty()),
        ];
        let given: Vec<&str> = flags
            .iter()
            .filter(|(_, on)| *on)
            .map(|(f, _)| *f)
            .collect();
        if given.is_empty() {
            return Vec::new();
        }
        pools
            .iter()
            .filter(|p| p.is_redis())
            .map(|p| {
                format!(
                    "{} {} to memcached pools only, not to redis pool {:?}",
                    given.join(", "),
                    if given.len() == 1 { "applies" } else { "apply" },
                    p.name
                )
            })
            .collect()
    }
}

/// `R` or `POOL=R` → (pool, R), R between 1 and 16.
fn parse_replicas(text: &str) -> Result<(Option<String>, u16), String> {
    let (pool, count) = match text.rsplit_once('=') {
        Some((pool, count)) if !pool.is_empty() => (Some(pool.to_owned()), count),
        _ => (None, text),
    };
    match count.parse::<u16>() {
        Ok(r) if (1..=16).contains(&r) => Ok((pool, r)),
        _ => Err(format!(
            "not a replica count between 1 and 16: {text:?} (R or POOL=R)"
        )),
    }
}

/// `host:port` or `host:port:weight` → a server (weight 1 when not given).
fn parse_gutter_server(text: &str) -> Result<TwemproxyServer, String> {
    let with_weight = if text.matches(':').count() >= 2 {
        text.to_owned()
    } else {
        format!("{text}:1")
    };
    with_weight
        .parse::<TwemproxyServer>()
        .map_err(|e| format!("gutter server {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_counts_name_a_pool_or_every_pool() {
        assert_eq!(parse_replicas("2"), Ok((None, 2)));
        assert_eq!(parse_replicas("alpha=3"), Ok((Some("alpha".into()), 3)));
        for bad in ["0", "17", "x", "alpha=", "=2x", "alpha=0"] {
            assert!(parse_replicas(bad).is_err(), "{bad:?}");
        }
    }
}
