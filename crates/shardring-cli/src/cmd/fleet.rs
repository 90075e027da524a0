//! Reaching a pool's proxies and servers from the commands that change what they serve (`migrate`,
//! `split`): each proxy's stats JSON (twemproxy's stats port: sent on connect, then the connection
//! closes), the operator's reload command run after a file is rewritten, and a server as the proxy
//! dials it.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::AsyncReadExt;

/// How long one stats endpoint may take to answer.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(3);

/// The stats JSON of the proxy whose stats port is `addr`.
///
/// # Errors
/// When it does not answer within [`STATS_TIMEOUT`], or not with JSON.
pub async fn stats_json(addr: &str) -> Result<serde_json::Value> {
    let read = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let mut text = Vec::new();
        s.read_to_end(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    let text = tokio::time::timeout(STATS_TIMEOUT, read)
        .await
        .context("no answer in time")?
        .context("cannot read its stats")?;
    serde_json::from_slice(&text).context("its stats are not JSON")
}

/// Runs the reload command (`sh -c`), or asks the operator to reload when there is none.
///
/// # Errors
/// When the command cannot run or fails.
pub fn reload(command: Option<&str>) -> Result<()> {
    let Some(command) = command else {
        eprintln!("shardring: the files are rewritten: reload every proxy now (SIGHUP)");
        return Ok(());
    };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("the reload command {command:?} failed ({status})");
    }
    Ok(())
}

/// How a command reaches `server` of `pool`: its address as the proxy dials it, its name, and the
/// pool's password and database.
pub fn endpoint(
    server: &shardring::compat::twemproxy::TwemproxyServer,
    pool: &shardring_config::PoolConfig,
) -> shardring_migrate::Endpoint {
    let mut e = shardring_migrate::Endpoint::new(server.address(), server.display_name());
    if let Some(r) = pool.redis() {
        e.auth = r.auth.clone();
        e.db = r.db;
    }
    e
}

/// A pool's placement, and the pool's server (index in its list) of each of the placement's nodes.
pub type Placed = (Box<dyn shardring::Placement>, Vec<Option<usize>>);

/// `pool`'s placement, and the pool's server of each of its nodes.
///
/// # Errors
/// When the placement cannot be built (`distribution: random` places no key reproducibly).
pub fn placed(pool: &shardring_config::PoolConfig) -> Result<Placed> {
    let placement = pool.placement().map_err(|e| {
        anyhow::anyhow!(
            "pool {}: {e}: this needs a reproducible placement",
            pool.name
        )
    })?;
    let servers = placement
        .nodes()
        .iter()
        .map(|n| {
            pool.servers
                .iter()
                .position(|s| s.display_name() == n.name())
        })
        .collect();
    Ok((placement, servers))
}
