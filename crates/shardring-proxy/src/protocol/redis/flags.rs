//! The redis pools' own flags (`--redis-user`, `--redis-dedicated-connections`,
//! `--redis-partial-reads`, `--redis-keys-limit`): how the proxy authenticates to Redis servers,
//! how many connections of their own its clients may pin, how a split read answers when a server
//! fails, and how many keys a `KEYS` across the servers may answer (`protocol/redis/`). A memcached
//! pool named by one is refused.

use crate::config::{ConfigErrors, PoolConfig, ProtocolConfig};

use crate::flags::per_pool::{
    for_pool, named, parse_pool_switch, refuse_unknown, switched_on, switches_named,
};
use crate::flags::ApplyToPools;

/// The redis pools' own settings. [`Default`]: none given, nutcracker's behaviour.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct RedisFlags {
    /// Redis pools: the Redis 6 ACL user the proxy authenticates its server connections as, with the
    /// pool's redis_auth as its password (`AUTH NAME PASSWORD`); clients may then name this user (or
    /// `default`) in AUTH and HELLO. `NAME` applies to every redis pool, `POOL=NAME` to one. By
    /// default, Redis's `default` user (`AUTH PASSWORD`, as nutcracker sends).
    #[arg(long, value_name = "[POOL=]NAME", value_parser = parse_redis_user)]
    pub redis_user: Vec<(Option<String>, String)>,
    /// Redis pools: the most connections of their own each server may have at once, for clients
    /// inside WATCH … EXEC or running a blocking command (BLPOP, XREAD BLOCK, …); a client that needs
    /// one past this gets an error and nothing is sent. [default: 64]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub redis_dedicated_connections: Option<u32>,
    /// Redis pools: an MGET one of whose servers fails answers the keys that could be read and an
    /// error element for each other key, instead of one error naming the server (the default, as
    /// nutcracker answers). Only for clients that check each element's type: redis-py and most
    /// clients return such an element as the key's value. Every redis pool, or `=POOL`.
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch)]
    pub redis_partial_reads: Vec<Option<String>>,
    /// Redis pools: the most keys a KEYS answer may hold, counted over every server's reply; a KEYS
    /// that would answer more gets an error naming this flag (use SCAN, which pages through every
    /// server). Every redis pool. [default: 1000000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_keys_limit: Option<u64>,
}

impl ApplyToPools for RedisFlags {
    /// Every redis pool, or the ones named.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for pool in pools.iter_mut() {
            let name = pool.name.as_str();
            match &mut pool.protocol {
                ProtocolConfig::Memcache(_) => {
                    if named(&self.redis_user).any(|p| p == name) {
                        errors.push(
                            name,
                            "redis user: redis pools only, and this is a memcached pool".into(),
                        );
                    }
                    if switches_named(&self.redis_partial_reads).any(|p| p == name) {
                        errors.push(
                            name,
                            "--redis-partial-reads: redis pools only, and this is a memcached pool"
                                .into(),
                        );
                    }
                }
                ProtocolConfig::Redis(r) => {
                    if let Some(user) = for_pool(&self.redis_user, name) {
                        r.user = Some(user.clone());
                    }
                    if let Some(n) = self.redis_dedicated_connections {
                        r.dedicated_connections = n;
                    }
                    r.partial_reads = switched_on(&self.redis_partial_reads, name);
                    if let Some(n) = self.redis_keys_limit {
                        r.keys_limit = n;
                    }
                }
            }
        }
        refuse_unknown("--redis-user", named(&self.redis_user), pools, &mut errors);
        refuse_unknown(
            "--redis-partial-reads",
            switches_named(&self.redis_partial_reads),
            pools,
            &mut errors,
        );
        errors.into_result()
    }
}

/// `NAME` or `POOL=NAME` → (pool, user).
fn parse_redis_user(text: &str) -> Result<(Option<String>, String), String> {
    let (pool, user) = match text.split_once('=') {
        Some((pool, user)) if !pool.is_empty() => (Some(pool.to_owned()), user),
        _ => (None, text),
    };
    if user.is_empty() || user.contains(char::is_whitespace) {
        return Err(format!(
            "not a user name: {text:?} (NAME or POOL=NAME, without spaces)"
        ));
    }
    Ok((pool, user.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_users_name_a_pool_or_every_pool_and_have_no_spaces() {
        assert_eq!(parse_redis_user("app"), Ok((None, "app".into())));
        assert_eq!(
            parse_redis_user("rd=app"),
            Ok((Some("rd".into()), "app".into()))
        );
        for bad in ["", "rd=", "a b", "rd=a b"] {
            assert!(parse_redis_user(bad).is_err(), "{bad:?}");
        }
    }
}
