//! Pools that take their servers' addresses from Sentinels (`--sentinel`): the composition of
//! [`Sentinels`] with the running pools. Each server line's name is its master group; at start every
//! group is resolved and the pool reloaded with the masters' addresses, then a watch follows every
//! `+switch-master` and reloads the pool with the moved server's new address. Placement is by name, so
//! a failover moves no key: a reload keeps every server whose address is unchanged (its connections
//! too) and gives the moved one new connections, to the new master.
//!
//! A SIGHUP reload re-reads the file: the addresses the Sentinels gave are kept over the file's
//! ([`SentinelFollowers::keep_masters`]), as etcd's servers are. Changing a pool's Sentinels needs a
//! restart. While a group has no known master, its server keeps its last address (at start, the
//! file's): requests to it fail fast with that server's error (refused, or `READONLY` from a demoted
//! master), never hang longer than the pool's `timeout`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{tcp_connect, Connect, Connecting, SentinelStream, Sentinels};
use crate::backend::stream::host_of;
use crate::config::ProxyConfig;
use crate::pool::ServedPool;
use crate::tls::connector::ServerTls;

/// Each followed pool's masters as last known, by pool name, then group: what a file reload keeps.
#[derive(Debug, Default, Clone)]
pub struct SentinelFollowers {
    masters: Arc<Mutex<HashMap<String, HashMap<String, String>>>>,
}

impl SentinelFollowers {
    /// `config` with every followed pool's servers at the addresses the Sentinels gave.
    pub fn keep_masters(&self, mut config: ProxyConfig) -> ProxyConfig {
        let Ok(masters) = self.masters.lock() else {
            return config;
        };
        for pool in &mut config.pools {
            if let Some(groups) = masters.get(&pool.name) {
                for server in &mut pool.servers {
                    if let Some(addr) = server.name.as_ref().and_then(|n| groups.get(n)) {
                        set_addr(server, addr);
                    }
                }
            }
        }
        config
    }
}

/// `server` at `host:port` (a `[v6]:port` too); unchanged when `addr` is not one.
fn set_addr(server: &mut shardring::compat::twemproxy::TwemproxyServer, addr: &str) -> bool {
    let Some(Ok(port)) = addr.rsplit_once(':').map(|(_, port)| port.parse::<u16>()) else {
        return false;
    };
    let host = host_of(addr);
    if server.host == host && server.port == port {
        return false;
    }
    server.host = host.to_owned();
    server.port = port;
    true
}

/// The connector to Sentinels (and to a cluster's nodes, `crate::cluster`): TLS when the pool's servers take TLS (the same CA and client
/// certificate), plain TCP otherwise.
pub(crate) fn connector(tls: Option<ServerTls>) -> Connect {
    let Some(tls) = tls else {
        return tcp_connect();
    };
    Arc::new(move |addr: String| -> Connecting {
        let tls = tls.clone();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(addr.as_str()).await?;
            let _ = tcp.set_nodelay(true);
            let stream = tls.connect(host_of(&addr), tcp).await.map_err(|e| {
                std::io::Error::other(format!(
                    "TLS handshake failed: {}",
                    crate::tls::handshake_cause(&e)
                ))
            })?;
            Ok(Box::new(stream) as SentinelStream)
        })
    })
}

/// Moves `pool`'s server of `group` to `addr` (a reload of the pool's current config with that one
/// address changed); nothing when it is there already.
fn move_server(pool: &dyn ServedPool, group: &str, addr: &str) {
    let mut config = pool.config();
    let Some(server) = config
        .servers
        .iter_mut()
        .find(|s| s.name.as_deref() == Some(group))
    else {
        return;
    };
    let from = format!("{}:{}", server.host, server.port);
    if !set_addr(server, addr) {
        return;
    }
    match pool.reload(config.clone()) {
        Ok(()) => {
            tracing::info!(pool = %config.name, group, from, to = addr, "master moved: the server's connections follow it")
        }
        Err(e) => {
            tracing::error!(pool = %config.name, group, to = addr, error = %e, "cannot move the server to its new master")
        }
    }
}

/// Starts following every pool that names Sentinels: resolves each group now (before the first
/// client), moves the servers there, and spawns a watch per pool until `stop`.
pub async fn start(pools: &[Arc<dyn ServedPool>], stop: CancellationToken) -> SentinelFollowers {
    let followers = SentinelFollowers::default();
    for pool in pools {
        let config = pool.config();
        let Some(settings) = config.redis().and_then(|r| r.sentinel.clone()) else {
            continue;
        };
        // The pool's own server TLS, as it runs (read from the files once, with the pool's).
        let mut sentinels =
            Sentinels::new(settings.addrs.clone()).connect(connector(pool.tls().servers));
        if let Some(password) = &settings.password {
            sentinels = sentinels.password(password.clone());
        }
        let sentinels = Arc::new(sentinels);
        let groups: Vec<String> = config
            .servers
            .iter()
            .filter_map(|s| s.name.clone())
            .collect();
        let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
        for (group, answer) in refs.iter().zip(sentinels.resolve(&refs).await) {
            match answer {
                Ok(addr) => {
                    remember(&followers, &config.name, group, &addr);
                    move_server(pool.as_ref(), group, &addr);
                }
                Err(e) => tracing::error!(
                    pool = %config.name,
                    group,
                    error = %e,
                    "no master known for the group yet; its server keeps the file's address until the Sentinels name one"
                ),
            }
        }
        let (pool, followers_now, name) =
            (Arc::clone(pool), followers.clone(), config.name.clone());
        tokio::spawn(Arc::clone(&sentinels).watch(
            groups,
            move |group, addr| {
                remember(&followers_now, &name, group, addr);
                move_server(pool.as_ref(), group, addr);
            },
            stop.clone(),
        ));
    }
    followers
}

fn remember(followers: &SentinelFollowers, pool: &str, group: &str, addr: &str) {
    if let Ok(mut m) = followers.masters.lock() {
        m.entry(pool.to_owned())
            .or_default()
            .insert(group.to_owned(), addr.to_owned());
    }
}
