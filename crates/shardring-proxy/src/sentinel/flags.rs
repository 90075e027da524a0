//! The Sentinel flags (`--sentinel`, `--sentinel-auth`): a redis pool whose masters the Sentinels
//! name. Redis pools only: a memcached pool named by one is refused.

use crate::config::{ConfigErrors, PoolConfig, ProtocolConfig, SentinelConfig};
use crate::flags::per_pool::{for_pool, named, pool_prefixed, refuse_unknown};
use crate::flags::ApplyToPools;

/// The redis pools' Sentinels. [`Default`]: none given, the file's addresses.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct SentinelFlags {
    /// Redis pools: follow each server's master through these Sentinels; every server line's name
    /// is its master group (`host:port:weight group`, placement by name, so a failover moves no key).
    /// `POOL=HOST:PORT,...` for one pool (repeat for several), a bare list for every redis pool.
    /// Sentinels speak TLS when the pool's servers do (--server-tls, the same CA).
    #[arg(long, value_name = "[POOL=]HOST:PORT,...", value_parser = parse_sentinels)]
    pub sentinel: Vec<(Option<String>, Vec<String>)>,
    /// The Sentinels' password (their `requirepass`), as --sentinel: `POOL=PASSWORD` or `PASSWORD`.
    #[arg(long, value_name = "[POOL=]PASSWORD", value_parser = parse_sentinel_auth)]
    pub sentinel_auth: Vec<(Option<String>, String)>,
}

impl ApplyToPools for SentinelFlags {
    /// Every redis pool, or the ones named.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for pool in pools.iter_mut() {
            let name = pool.name.as_str();
            match &mut pool.protocol {
                ProtocolConfig::Memcache(_) => {
                    if named(&self.sentinel)
                        .chain(named(&self.sentinel_auth))
                        .any(|p| p == name)
                    {
                        errors.push(
                            name,
                            "--sentinel: redis pools only, and this is a memcached pool".into(),
                        );
                    }
                }
                ProtocolConfig::Redis(r) => {
                    let password = for_pool(&self.sentinel_auth, name);
                    r.sentinel = for_pool(&self.sentinel, name).map(|addrs| SentinelConfig {
                        addrs: addrs.clone(),
                        password: password.cloned(),
                    });
                    if r.sentinel.is_none() && password.is_some() {
                        errors.push(name, "--sentinel-auth needs --sentinel".into());
                    }
                }
            }
        }
        refuse_unknown("--sentinel", named(&self.sentinel), pools, &mut errors);
        refuse_unknown(
            "--sentinel-auth",
            named(&self.sentinel_auth),
            pools,
            &mut errors,
        );
        errors.into_result()
    }
}

/// `HOST:PORT,...` or `POOL=HOST:PORT,...` → (pool, Sentinel addresses).
fn parse_sentinels(text: &str) -> Result<(Option<String>, Vec<String>), String> {
    let (pool, list) = pool_prefixed(text);
    let addrs: Vec<String> = list.split(',').map(str::trim).map(str::to_owned).collect();
    for a in &addrs {
        let port_ok = a.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(format!(
                "not a Sentinel address: {a:?} in {text:?} ([POOL=]HOST:PORT,HOST:PORT...)"
            ));
        }
    }
    Ok((pool, addrs))
}

/// `PASSWORD` or `POOL=PASSWORD` → (pool, password). A password with `=` in it needs the `POOL=`.
fn parse_sentinel_auth(text: &str) -> Result<(Option<String>, String), String> {
    let (pool, password) = pool_prefixed(text);
    if password.is_empty() {
        return Err("an empty Sentinel password".into());
    }
    Ok((pool, password.to_owned()))
}
