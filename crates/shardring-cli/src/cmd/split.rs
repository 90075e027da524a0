//! `shardring split`: split a pool's hot keys over several servers, or merge them back, one phase at
//! a time with every proxy confirming each (the proxies' `--hot-key-split` and
//! `--hot-key-split-keys FILE`; `shardring_config::SplitConfig` says what the phases mean).
//!
//! - `add KEY…`: the keys are listed `write` (the proxies keep their copies from going stale), the
//!   file rewritten and the proxies reloaded, and only once every proxy's stats say it serves that
//!   file (`split_digest`) are they listed `read` (reads spread), confirmed the same way.
//! - `remove KEY…`: `write` again (reads back on the owner), confirmed, then left out, confirmed.
//! - `auto`: every `--interval`, each key the proxies' hot-key detection tracks (their `/hotkeys`,
//!   summed over the proxies) is given as many servers as its load wants (`--copy-load`: what one
//!   copy may take, as a share of a server's mean load, the pool's load read from the proxies'
//!   stats); keys that cooled are merged back; `--once` does one round.
//!
//! A key's number of servers changes the same way: `write` over the larger number first.
//!
//! A proxy that does not confirm a phase stops the run before the next one (exit 2), the file left
//! in the phase every proxy may serve: a key is never listed `read` while a proxy may still not
//! split it, nor left out while one may still read its copies. A rerun of the same command goes on
//! from there.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shardring_config::{escape_split_key, SplitConfig, SplitKey, SplitPhase};
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
    /// How many servers hold every key of the pool: the proxies' --replicas. A split key's copies
    /// follow its replica set on the ring (a key split over S is on R + S - 1 servers): `auto`
    /// gives a key at most the servers after its replicas, and a merged key's copies are deleted
    /// from there, its replicas left alone.
    #[arg(long, default_value_t = 1, value_name = "R",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    replicas: usize,
    /// The pool's YAML file, as the proxies read it: with it, a key merged back has its copies
    /// deleted from their servers once no proxy reads them (without it they stay until evicted,
    /// expired or overwritten; a later split of the key deletes them before reading them).
    #[arg(short = 'c', long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    action: Action,
}

/// What `shardring split` does.
#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Split these keys (as clients name them, `%XX` for a byte an argument cannot carry, as in the
    /// file): `write` on every proxy, then `read`.
    Add {
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
        /// How many servers hold each (by default --copies).
        #[arg(long, value_name = "N")]
        copies_each: Option<usize>,
    },
    /// Merge these keys back onto their owners (`%XX` as for `add`): `write` on every proxy, then
    /// left out.
    Remove {
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Split the keys the proxies' hot-key detection ranks hot, each over as many servers as its
    /// load wants, and merge back those that cooled, every --interval.
    Auto {
        /// The proxies' --metrics-addr (HOST:PORT, comma-separated), whose /hotkeys rank the keys.
        #[arg(long, value_delimiter = ',', value_name = "HOST:PORT", required = true)]
        hot_keys_from: Vec<String>,
        /// What one copy of a split key may take, as a share of a server's mean load: a key that
        /// takes more than twice this is split, over as many servers as keep each copy under it
        /// (all of them at most); it is merged back once it takes less than this.
        #[arg(long, default_value_t = 0.02, value_name = "SHARE")]
        copy_load: f64,
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

/// What the split keys should become: each key named, split over this many servers (`Some`) or not
/// split (`None`); keys not named stay as they are.
type Target = BTreeMap<Vec<u8>, Option<usize>>;

async fn split(args: Args) -> Result<()> {
    match &args.action {
        Action::Add { keys, copies_each } => {
            let copies = copies_each.unwrap_or(args.copies);
            let target = keys
                .iter()
                .map(|k| (k.as_bytes().to_vec(), Some(copies)))
                .collect();
            transition(&args, &target).await?;
            for k in keys {
                println!("split {k} over {copies} servers");
            }
            Ok(())
        }
        Action::Remove { keys } => {
            let target = named(keys)?.into_iter().map(|k| (k, None)).collect();
            transition(&args, &target).await?;
            for k in keys {
                println!("merged {k} back onto its owner");
            }
            Ok(())
        }
        Action::Auto {
            hot_keys_from,
            copy_load,
            interval,
            once,
        } => loop {
            let load = Load::measure(&args, hot_keys_from).await?;
            let split = read_file(&args)?;
            let target = plan_auto(&load, &split, *copy_load, args.replicas);
            if !target.is_empty() {
                transition(&args, &target).await?;
                for (k, c) in &target {
                    let k = escape_split_key(k);
                    match c {
                        Some(c) => println!("split {k} over {c} servers"),
                        None => println!("merged {k} back onto its owner"),
                    }
                }
            }
            if *once {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(*interval)).await;
        },
    }
}

/// The keys named on the command line, `%XX` read as in the file.
fn named(keys: &[String]) -> Result<Vec<Vec<u8>>> {
    keys.iter()
        .map(|k| shardring_config::unescape_split_key(k).map_err(|e| anyhow::anyhow!("key {e}")))
        .collect()
}

/// Takes the split keys to `target` in two phases, each written, reloaded and confirmed by every
/// proxy: first every key that changes is listed `write` (over the larger of its servers before
/// and after, so that no proxy reads a copy another proxy does not delete after its writes), then
/// each as `target` says. A rerun of a run that stopped between them goes on from the first.
async fn transition(args: &Args, target: &Target) -> Result<()> {
    let now = read_file(args)?;
    let mut first = now.clone();
    let mut last = now.clone();
    for (key, want) in target {
        let was = now.keys.get(key).copied();
        let unchanged = matches!(
            (was, want),
            (Some(SplitKey { phase: SplitPhase::Read, copies }), Some(c)) if copies == *c
        );
        if unchanged {
            continue;
        }
        let widest = was.map_or(0, |k| k.copies).max(want.unwrap_or(0));
        if widest >= 2 {
            first.keys.insert(
                key.clone(),
                SplitKey {
                    phase: SplitPhase::Write,
                    copies: widest,
                },
            );
        }
        match want {
            Some(copies) => {
                last.keys.insert(
                    key.clone(),
                    SplitKey {
                        phase: SplitPhase::Read,
                        copies: *copies,
                    },
                );
            }
            None => {
                last.keys.remove(key);
            }
        }
    }
    // Written and confirmed even when unchanged: a rerun's proxies may not have reloaded it.
    apply(args, &first, "the changing split keys as write").await?;
    if last != first {
        apply(args, &last, "the split keys as wanted").await?;
    }
    // Merged back, and no proxy reads their copies: they go.
    let merged: Vec<(&Vec<u8>, usize)> = first
        .keys
        .iter()
        .filter(|(k, _)| !last.keys.contains_key(*k))
        .map(|(k, s)| (k, s.copies))
        .collect();
    if let (Some(path), false) = (&args.config, merged.is_empty()) {
        delete_copies(path, &args.pool, args.replicas, &merged).await?;
    }
    Ok(())
}

/// Deletes the copies of `merged` keys (each with the servers it had) from their servers (those
/// after its `replicas` on the ring), the owner's and replicas' values kept; a Redis copy's fill
/// reservation too.
async fn delete_copies(
    path: &Path,
    pool: &str,
    replicas: usize,
    merged: &[(&Vec<u8>, usize)],
) -> Result<()> {
    let pool = super::migrate::pool_in(path, Some(pool))?;
    let (placement, server_of) = fleet::placed(&pool)?;
    let mut per_server: BTreeMap<usize, Vec<Vec<u8>>> = BTreeMap::new();
    let mut walk = Vec::new();
    for (key, copies) in merged {
        placement.replicas_into(key, (replicas + copies).saturating_sub(1), &mut walk);
        for s in walk
            .iter()
            .skip(replicas)
            .filter_map(|&i| server_of.get(i).copied().flatten())
        {
            let keys = per_server.entry(s).or_default();
            keys.push((*key).clone());
            if pool.is_redis() {
                keys.push(shardring_config::fill_reservation(key));
            }
        }
    }
    let timeout = Duration::from_secs(10);
    let mut deleted = 0;
    for (s, keys) in &per_server {
        let ep = fleet::endpoint(&pool.servers[*s], &pool);
        let held = if pool.is_redis() {
            shardring_migrate::redis::delete_keys(&ep, keys, timeout).await
        } else {
            shardring_migrate::memcache::delete_keys(&ep, keys, timeout).await
        }
        .with_context(|| format!("deleting merged keys' copies on {}", ep.name))?;
        deleted += held;
    }
    eprintln!(
        "shardring: deleted {deleted} copies of {} merged keys on {} servers",
        merged.len(),
        per_server.len()
    );
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
    "# shardring split: `write KEY N` (copies kept fresh) or `read KEY N` (reads spread), N servers\n"
        .to_owned()
        + &split.text()
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

/// What the pool's proxies see: its servers, its requests a second, and each hot key's.
#[derive(Debug, Default)]
struct Load {
    /// How many servers the pool has.
    servers: usize,
    /// Requests a second over every proxy.
    rate: f64,
    /// Each key the proxies' detection tracks, with its requests a second over every proxy.
    keys: Vec<(Vec<u8>, f64)>,
}

impl Load {
    /// Measures it: the pool's requests counted twice a second apart on every proxy's stats port,
    /// and each proxy's `/hotkeys` (a key's count over the window, which covers between half of
    /// it and all of it: taken over three quarters of it).
    async fn measure(args: &Args, from: &[String]) -> Result<Load> {
        let first = requests(args).await?;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = requests(args).await?;
        let rate = second.1.saturating_sub(first.1) as f64 / started.elapsed().as_secs_f64();
        let mut keys: HashMap<Vec<u8>, f64> = HashMap::new();
        for addr in from {
            let json = hot_keys(addr)
                .await
                .with_context(|| format!("reading {addr}/hotkeys"))?;
            let pools = json["pools"].as_array().cloned().unwrap_or_default();
            let Some(p) = pools.iter().find(|p| p["pool"] == args.pool.as_str()) else {
                bail!("{addr}/hotkeys has no pool {}", args.pool);
            };
            let (Some(list), Some(window)) = (p["keys"].as_array(), p["window_ms"].as_u64()) else {
                bail!(
                    "{addr}: pool {} has no hot-key detection (start the proxy with --hot-keys)",
                    args.pool
                );
            };
            let seconds = window as f64 * 0.75 / 1000.0;
            for k in list {
                // A key that is not UTF-8 shows with U+FFFD there, not as it is: left alone (`add`
                // it by hand with `%XX`).
                if let (Some(key), Some(count)) = (
                    k["key"].as_str().filter(|k| !k.contains('\u{fffd}')),
                    k["count"].as_u64(),
                ) {
                    *keys.entry(key.as_bytes().to_vec()).or_default() += count as f64 / seconds;
                }
            }
        }
        let mut keys: Vec<(Vec<u8>, f64)> = keys.into_iter().collect();
        keys.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(Load {
            servers: first.0,
            rate,
            keys,
        })
    }
}

/// The pool's servers and its requests so far over every proxy (their stats' per-server
/// `requests`).
async fn requests(args: &Args) -> Result<(usize, u64)> {
    let (mut servers, mut total) = (0, 0);
    for addr in &args.proxies {
        let json = fleet::stats_json(addr)
            .await
            .with_context(|| format!("reading the stats of {addr}"))?;
        let Some(pool) = json[&args.pool].as_object() else {
            bail!("{addr} has no pool {}", args.pool);
        };
        let per_server: Vec<u64> = pool
            .values()
            .filter_map(|v| v.as_object())
            .filter_map(|s| s.get("requests").and_then(serde_json::Value::as_u64))
            .collect();
        servers = servers.max(per_server.len());
        total += per_server.iter().sum::<u64>();
    }
    if servers == 0 {
        bail!("the proxies' stats list no server of pool {}", args.pool);
    }
    Ok((servers, total))
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

/// What one round of `auto` changes. A key's copies are its load over what one copy may take
/// (`copy_load` of a server's mean load), rounded up, at least 2 and at most every server (with
/// `replicas`, every server from the replica set on: the owner and those after its replicas): a
/// key taking more than two copies' worth is split; a split key taking less than one copy's worth
/// (or no longer ranked) is merged back; a split key's copies change only when they would change
/// by half or more.
fn plan_auto(load: &Load, split: &SplitConfig, copy_load: f64, replicas: usize) -> Target {
    let mean = load.rate / load.servers.max(1) as f64;
    let unit = (mean * copy_load).max(f64::MIN_POSITIVE);
    let most = (load.servers + 1).saturating_sub(replicas.max(1));
    let mut target = Target::new();
    let ranked: HashMap<&[u8], f64> = load.keys.iter().map(|(k, r)| (k.as_slice(), *r)).collect();
    for (key, rate) in &load.keys {
        let wanted = ((rate / unit).ceil().min(most as f64) as usize).max(2);
        if *rate < unit {
            continue;
        }
        match split.keys.get(key) {
            None if *rate > 2.0 * unit => {
                target.insert(key.clone(), Some(wanted));
            }
            Some(k) if k.phase == SplitPhase::Read => {
                let (now, want) = (k.copies as f64, wanted as f64);
                if want > now * 1.5 || want * 1.5 < now {
                    target.insert(key.clone(), Some(wanted));
                }
            }
            // Listed `write` (a run stopped between phases): on to `read`.
            Some(_) => {
                target.insert(key.clone(), Some(wanted));
            }
            _ => {}
        }
    }
    for key in split.keys.keys() {
        let rate = ranked.get(key.as_slice()).copied().unwrap_or(0.0);
        if rate < unit {
            target.insert(key.clone(), None);
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(keys: &[(&str, f64)]) -> Load {
        Load {
            servers: 20,
            rate: 100_000.0,
            keys: keys
                .iter()
                .map(|(k, r)| (k.as_bytes().to_vec(), *r))
                .collect(),
        }
    }

    #[test]
    fn auto_gives_each_hot_key_copies_for_its_load_and_merges_back_cooled_ones() {
        // A server's mean load is 5,000/s; one copy may take 2 % of it, 100/s.
        let split =
            SplitConfig::parse(3, "read warm 4\nread cooled 4\nwrite half 3\nread big 20\n")
                .unwrap();
        let plan = plan_auto(
            &load(&[
                ("top", 15_000.0),
                ("new", 250.0),
                ("tepid", 150.0),
                ("warm", 500.0),
                ("half", 290.0),
                ("big", 1_500.0),
                ("cooled", 50.0),
            ]),
            &split,
            0.02,
            1,
        );
        let want: Target = [
            // All 20 servers at most; 250/s wants 3.
            ("top", Some(20)),
            ("new", Some(3)),
            // warm wants 5 (4 now): unchanged; big wants 15 (20 now): unchanged.
            // half is listed write: on to read.
            ("half", Some(3)),
            ("cooled", None),
        ]
        .into_iter()
        .map(|(k, c)| (k.as_bytes().to_vec(), c))
        .collect();
        assert_eq!(plan, want);
        // With 3 replicas, top has at most the 18 servers from its replica set on.
        let with_replicas = plan_auto(&load(&[("top", 15_000.0)]), &split, 0.02, 3);
        assert_eq!(with_replicas[&b"top".to_vec()], Some(18));
        // tepid (1.5 copies' worth) is not split; once split, it stays.
        let split = SplitConfig::parse(3, "read tepid 3\n").unwrap();
        assert_eq!(
            plan_auto(&load(&[("tepid", 150.0)]), &split, 0.02, 1),
            Target::new()
        );
    }

    #[test]
    fn keys_on_the_command_line_take_the_files_escapes() {
        assert_eq!(
            named(&["a%20b".to_owned(), "news:1".to_owned()]).unwrap(),
            [b"a b".to_vec(), b"news:1".to_vec()]
        );
        assert!(named(&["50%".to_owned()]).is_err());
    }

    #[test]
    fn the_file_written_reads_back_as_the_same_split_keys() {
        let split = SplitConfig::parse(2, "read a%20b\nwrite c 5\n").unwrap();
        let again = SplitConfig::parse(2, &file_text(&split)).unwrap();
        assert_eq!(again, split);
    }
}
