//! Reaching a pool's proxies from the commands that change what they serve (`migrate`, `split`):
//! each proxy's stats JSON (twemproxy's stats port: sent on connect, then the connection closes),
//! and the operator's reload command run after a file is rewritten.

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
