//! `shardring split`: split a pool's hot keys over several servers, or merge them back, one phase at
//! a time with every proxy confirming each (the proxies' `--hot-key-split` and
//! `--hot-key-split-keys FILE`; `shardring_config::SplitConfig` says what the phases mean).
//!
//! - `add KEY…`: the keys are listed `write` (the proxies keep their copies from going stale), the
//!   file rewritten and the proxies reloaded, and only once every proxy's stats say it serves that
//!   file (`split_digest`) are they listed `read` (reads spread), confirmed the same way.
//! - `remove KEY…`: `write` again (reads back on the owner), confirmed, then left out, confirmed.
//! - `auto`: every `--interval`, the keys the proxies' hot-key detection ranks hottest (their
//!   `/hotkeys`, summed over the proxies) are added, and split keys that fell out of twice that
//!   ranking are removed; `--once` does one round.
//!
//! A proxy that does not confirm a phase stops the run before the next one (exit 2), the file left
//! in the phase every proxy may serve: a key is never listed `read` while a proxy may still not
//! split it, nor left out while one may still read its copies. A rerun of the same command goes on
//! from there.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shardring_config::{escape_split_key, SplitConfig, SplitPhase};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fleet;

/// `shardring split`'s arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The split keys' file the proxies read (their --hot-key-split-keys): rewritten at each phase.
    #[arg(long, value_name = "FILE")]
    keys: PathBuf,
    /// How many servers hold a split key: the proxies' --hot-key-split.
    #[arg(long, value_name = "S")]
    copies: usize,
    /// The pool.
    #[arg(long, value_name = "NAME")]
    pool: String,
    /// The proxies' stats endpoints (HOST:PORT, comma-separated): each must serve a phase before the
    /// next one is written.
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT", required = true)]
    proxies: Vec<String>,
    /// Run this (with `sh -c`) after each rewrite of the file, to make the proxies reload it (e.g.
    /// `pkill -HUP -f 'shardring proxy'`). Without it, reload them yourself when asked.
    #[arg(long, value_name = "CMD")]
    reload_command: Option<String>,
    /// How long to wait for every proxy at each phase (seconds).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    confirm_timeout: u64,
    /// What to do.
    #[command(subcommand)]
    action: Action,
}

/// What `shardring split` does.
#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Split these keys (as clients name them): `write` on every proxy, then `read`.
    Add {
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Merge these keys back onto their owners: `write` on every proxy, then left out.
    Remove {
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Split the keys the proxies' hot-key detection ranks hottest and merge back those that cooled,
    /// every --interval.
    Auto {
        /// The proxies' --metrics-addr (HOST:PORT, comma-separated), whose /hotkeys rank the keys.
        #[arg(long, value_delimiter = ',', value_name = "HOST:PORT", required = true)]
        hot_keys_from: Vec<String>,
        /// How many of the hottest keys are split; one stays split while it is among twice as many.
        #[arg(long, default_value_t = 10, value_name = "N")]
        top: usize,
        /// Seconds between rounds.
        #[arg(long, default_value_t = 5, value_name = "SECS")]
        interval: u64,
        /// One round, then exit.
        #[arg(long)]
        once: bool,
    },
}

/// Runs `shardring split`.
pub fn run(args: Args) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(split(args))
}

async fn split(args: Args) -> Result<()> {
    match &args.action {
        Action::Add { keys } => add(&args, &as_bytes(keys)).await,
        Action::Remove { keys } => remove(&args, &as_bytes(keys)).await,
        Action::Auto {
            hot_keys_from,
            top,
            interval,
            once,
        } => loop {
            let ranking = ranking(&args.pool, hot_keys_from).await?;
            let split = read_file(&args)?;
            let (adds, removes) = plan_auto(&ranking, &split, *top);
            if !removes.is_empty() {
                remove(&args, &removes).await?;
            }
            if !adds.is_empty() {
                add(&args, &adds).await?;
            }
            if *once {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(*interval)).await;
        },
    }
}

fn as_bytes(keys: &[String]) -> Vec<Vec<u8>> {
    keys.iter().map(|k| k.as_bytes().to_vec()).collect()
}

/// Splits `keys`: `write`, confirmed, then `read`, confirmed.
async fn add(args: &Args, keys: &[Vec<u8>]) -> Result<()> {
    let mut split = read_file(args)?;
    let new: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| !split.keys.contains_key(*k))
        .collect();
    for k in &new {
        split.keys.insert((*k).clone(), SplitPhase::Write);
    }
    // On a rerun with nothing new the file may still be ahead of a proxy that did not reload: it is
    // written (unchanged) and the proxies reloaded all the same.
    let what = format!("{} new split keys as write", new.len());
    apply(args, &split, &what).await?;
    let mut moved = 0;
    for k in keys {
        if let Some(phase) = split.keys.get_mut(k) {
            moved += usize::from(*phase == SplitPhase::Write);
            *phase = SplitPhase::Read;
        }
    }
    if moved > 0 {
        apply(args, &split, &format!("{moved} split keys as read")).await?;
    }
    for k in keys {
        println!("split {} over {} servers", escape_split_key(k), args.copies);
    }
    Ok(())
}

/// Merges `keys` back: `write`, confirmed, then left out, confirmed.
async fn remove(args: &Args, keys: &[Vec<u8>]) -> Result<()> {
    let mut split = read_file(args)?;
    let mut moved = 0;
    for k in keys {
        if let Some(phase) = split.keys.get_mut(k) {
            moved += usize::from(*phase == SplitPhase::Read);
            *phase = SplitPhase::Write;
        }
    }
    apply(args, &split, &format!("{moved} split keys back as write")).await?;
    let before = split.keys.len();
    split.keys.retain(|k, _| !keys.contains(k));
    if split.keys.len() < before {
        apply(
            args,
            &split,
            &format!("{} split keys left out", before - split.keys.len()),
        )
        .await?;
    }
    for k in keys {
        println!("merged {} back onto its owner", escape_split_key(k));
    }
    Ok(())
}

/// The split keys the file lists now (none when it does not exist yet).
fn read_file(args: &Args) -> Result<SplitConfig> {
    let text = match std::fs::read_to_string(&args.keys) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", args.keys.display())),
    };
    SplitConfig::parse(args.copies, &text)
        .map_err(|problems| anyhow::anyhow!("{}: {}", args.keys.display(), problems.join("; ")))
}

/// Writes `split` to the file (whole, by a rename), reloads the proxies and waits until every one
/// serves it.
async fn apply(args: &Args, split: &SplitConfig, what: &str) -> Result<()> {
    write_file(&args.keys, split)?;
    eprintln!("shardring: {what}: {}", args.keys.display());
    fleet::reload(args.reload_command.as_deref())?;
    confirm(args, split, what).await
}

/// The file's text for `split`.
fn file_text(split: &SplitConfig) -> String {
    let mut text = String::from(
        "# shardring split: one key a line, `write KEY` (copies kept fresh) or `read KEY` (reads spread)\n",
    );
    for (key, phase) in &split.keys {
        text.push_str(&format!("{} {}\n", phase.word(), escape_split_key(key)));
    }
    text
}

/// Replaces `path` with `split`'s text, at once (a proxy reloading meanwhile reads the old or the
/// new file, never half of one).
fn write_file(path: &Path, split: &SplitConfig) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, file_text(split)).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
}

/// Waits until every proxy serves `split` for the pool.
///
/// # Errors
/// When one does not within `--confirm-timeout`: each that lags is named with what it serves (exit
/// code 2: nothing unsafe was done, a rerun goes on).
async fn confirm(args: &Args, split: &SplitConfig, what: &str) -> Result<()> {
    let want = split.digest();
    let deadline = Instant::now() + Duration::from_secs(args.confirm_timeout);
    loop {
        let mut lagging = Vec::new();
        for addr in &args.proxies {
            match fleet::stats_json(addr).await {
                Ok(json) => match json[&args.pool]["split_digest"].as_str() {
                    Some(d) if d == want => {}
                    Some(d) => lagging.push(format!("{addr} serves split keys {d:?}")),
                    None => lagging.push(format!(
                        "{addr} has no split_digest for pool {} (not a shardring proxy, or older)",
                        args.pool
                    )),
                },
                Err(e) => lagging.push(format!("{addr}: {e:#}")),
            }
        }
        if lagging.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} of {} proxies do not serve {what} ({want}) after {} s; the file is left in a phase \
                 every proxy may serve, a rerun goes on:\n  {}",
                lagging.len(),
                args.proxies.len(),
                args.confirm_timeout,
                lagging.join("\n  ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The hottest keys of `pool` over the proxies whose metrics addresses are `from`: each key's
/// counts summed, hottest first.
async fn ranking(pool: &str, from: &[String]) -> Result<Vec<(Vec<u8>, u64)>> {
    let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
    for addr in from {
        let json = hot_keys(addr)
            .await
            .with_context(|| format!("reading {addr}/hotkeys"))?;
        let pools = json["pools"].as_array().cloned().unwrap_or_default();
        let Some(p) = pools.iter().find(|p| p["pool"] == pool) else {
            bail!("{addr}/hotkeys has no pool {pool}");
        };
        let Some(keys) = p["keys"].as_array() else {
            bail!("{addr}: pool {pool} has no hot-key detection (start the proxy with --hot-keys)");
        };
        for k in keys {
            if let (Some(key), Some(count)) = (k["key"].as_str(), k["count"].as_u64()) {
                *counts.entry(key.as_bytes().to_vec()).or_default() += count;
            }
        }
    }
    let mut ranked: Vec<(Vec<u8>, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(ranked)
}

/// `GET /hotkeys` from a metrics listener, as JSON.
async fn hot_keys(addr: &str) -> Result<serde_json::Value> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /hotkeys HTTP/1.1\r\nHost: shardring\r\nConnection: close\r\n\r\n")
            .await?;
        let mut text = Vec::new();
        s.read_to_end(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    let text = tokio::time::timeout(fleet::STATS_TIMEOUT, get)
        .await
        .context("no answer in time")??;
    let body = text
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| &text[i + 4..])
        .context("not an HTTP answer")?;
    serde_json::from_slice(body).context("not JSON")
}

/// What one round of `auto` changes: the top `top` keys of `ranking` not split yet, and the split
/// keys no longer among the top `2 × top`.
fn plan_auto(
    ranking: &[(Vec<u8>, u64)],
    split: &SplitConfig,
    top: usize,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let adds = ranking
        .iter()
        .take(top)
        .filter(|(k, _)| split.keys.get(k) != Some(&SplitPhase::Read))
        .map(|(k, _)| k.clone())
        .collect();
    let kept: BTreeMap<&[u8], ()> = ranking
        .iter()
        .take(top.saturating_mul(2))
        .map(|(k, _)| (k.as_slice(), ()))
        .collect();
    let removes = split
        .keys
        .keys()
        .filter(|k| !kept.contains_key(k.as_slice()))
        .cloned()
        .collect();
    (adds, removes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_splits_the_top_keys_and_merges_back_those_out_of_twice_the_top() {
        let ranking: Vec<(Vec<u8>, u64)> = (0..6)
            .map(|i| (format!("k{i}").into_bytes(), 100 - i))
            .collect();
        let split = SplitConfig::parse(3, "read k1\nwrite k0\nread k3\nread k5\n").unwrap();
        let (adds, removes) = plan_auto(&ranking, &split, 2);
        // k0 (in write) and k1 (split) are the top 2: k0 goes on to read; k3 is within the top 4,
        // k5 is not.
        assert_eq!(adds, [b"k0".to_vec()]);
        assert_eq!(removes, [b"k5".to_vec()]);
    }

    #[test]
    fn the_file_written_reads_back_as_the_same_split_keys() {
        let split = SplitConfig::parse(2, "read a%20b\nwrite c\n").unwrap();
        let again = SplitConfig::parse(2, &file_text(&split)).unwrap();
        assert_eq!(again, split);
    }
}
