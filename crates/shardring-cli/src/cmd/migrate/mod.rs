//! `shardring migrate`: move a pool's keys to their next owners before its ring changes, then cut
//! over, with every proxy agreeing at each step.
//!
//! 1. The plan: the pool now and next (two YAML files, or etcd's `servers/` and `next/`), each
//!    server's keys that move and where (`--dry-run` stops here).
//! 2. Every proxy must dual-write (serve now's placement, and next's as next) before a key is
//!    copied: `--proxies` stats ports, or etcd registrations.
//! 3. The copy (`shardring_migrate`'s engines), paced by `--rate`/`--rate-bytes`; a failed key
//!    stops the run before the cut-over (a rerun copies only what is missing).
//! 4. The cut-over: the next membership becomes current and the old one next (files rewritten and
//!    `--reload-command` run, or one etcd transaction), so proxies that switched dual-write back
//!    to the old owners while others have not switched; once every proxy serves it, the next
//!    membership is dropped (no more dual writes) and, with `--delete-moved`, the moved keys are
//!    deleted from their old servers.
//!
//! An abort before step 4 leaves the ring as it was: the copies are extra keys on their next
//! owners, which a rerun skips. A run stopped after the cut-over (a proxy that could not be
//! confirmed) leaves a mark (etcd's, or a comment line in the `--to` file: `mark.rs`), and a rerun
//! resumes that change from the cut-over rather than taking the swapped files for a change back.
//! With `--delete-moved`, the drop of the next membership records the deletion still to do (etcd's
//! `delete-moved` key, or a mark): a deletion that fails (an old server unreachable) is done by a
//! rerun, and given up (with a warning) if a new change is planned first.

mod etcd;
mod files;
pub(crate) mod mark;
mod plan;
mod priority;
mod progress;
mod proxies;
mod serving;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use priority::Priority;
use shardring_config::{PoolConfig, ProxyConfig};
use shardring_etcd::layout::DEFAULT_PREFIX;
use shardring_migrate::{Job, Progress, RateLimit, Report, Survey};

use self::plan::Change;
use self::proxies::Proxies;
use self::serving::Serving;
use crate::compat::{config_problems, load_config};

/// The default pace, in keys a second: chosen by the live load's p99 through the proxy during a copy
/// on this project's 2-core benchmark machine (BENCHMARKS.md, "migrate: copy speed and live
/// latency" and "migrate: live latency during a copy").
const DEFAULT_RATE: u64 = 2_000;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The proxies' twemproxy YAML file: the pool now (its servers, unless --etcd, and its
    /// settings). Give it once per file when several proxies on this host have their own: the
    /// cut-over rewrites the pool's `servers:` in each.
    #[arg(long, short = 'c', value_name = "FILE", required = true)]
    config: Vec<PathBuf>,
    /// The next membership's YAML file (the proxies' --next-config): the pool of the same name
    /// gives the servers (and hash, hash tag, distribution) next. The cut-over gives it the old
    /// servers and a `# shardring migrate cut over: …` line until the change is done: a rerun of the
    /// same command then resumes the change.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "etcd",
        conflicts_with = "etcd"
    )]
    to: Option<PathBuf>,
    /// The pool (required when the file has several).
    #[arg(long, value_name = "NAME")]
    pool: Option<String>,
    /// Take the memberships from etcd (`servers/` now, `next/` next) instead of the files, and the
    /// proxies from their registrations.
    #[arg(long, value_name = "URL[,URL...]")]
    etcd: Option<String>,
    /// The etcd key prefix pools live under.
    #[arg(long, default_value = DEFAULT_PREFIX, value_name = "P",
          value_parser = shardring_proxy::membership::parse_prefix)]
    etcd_prefix: String,
    /// The proxies' stats endpoints (HOST:PORT, comma-separated): each must dual-write before the
    /// copy and serve the next membership before the cut-over is done. Needed without --etcd.
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT")]
    proxies: Vec<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// At most this many keys copied a second (0: as fast as the servers go).
    #[arg(long, default_value_t = DEFAULT_RATE, value_name = "KEYS")]
    rate: u64,
    /// At most this many bytes copied a second (suffixes k, M, G; 0: unlimited).
    #[arg(long, default_value = "32M", value_name = "BYTES", value_parser = parse_bytes)]
    rate_bytes: u64,
    /// Keys per pipelined batch. By default, a hundredth of --rate between 10 and 100 (500 when
    /// unlimited): at a low rate, small batches keep each server's pause for them short.
    #[arg(long, value_name = "N")]
    batch: Option<usize>,
    /// Allow a next membership with another hash, hash tag or distribution (it moves nearly every
    /// key).
    #[arg(long)]
    all_keys: bool,
    /// After the cut-over, delete the moved keys from their old servers.
    #[arg(long)]
    delete_moved: bool,
    /// Run this (with `sh -c`) after each rewrite of the files, to make the proxies reload them
    /// (e.g. `systemctl reload shardring`, `pkill -HUP -f 'shardring proxy'`). Without it, reload
    /// them yourself when asked.
    #[arg(long, value_name = "CMD")]
    reload_command: Option<String>,
    /// How long to wait for every proxy at each step (seconds).
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    confirm_timeout: u64,
    /// Copy, then stop before the cut-over (the proxies keep dual-writing).
    #[arg(long)]
    copy_only: bool,
    /// How Redis keys travel: `dump-restore` (DUMP on the source, RESTORE … REPLACE on the target
    /// through this command, the TTL relative: no clock needs to agree; it holds the source only
    /// for the dumps) or `migrate` (MIGRATE … COPY REPLACE from the source to the target, which
    /// must reach each other at the files' addresses with the pool's password; it holds the source
    /// until the target has restored each batch, but the values do not travel through this
    /// command: for a run far from the servers).
    #[arg(long, value_enum, default_value_t = Transfer::DumpRestore)]
    transfer: Transfer,
    /// This command's CPU priority: `idle` (the default; Linux's idle class, `chrt --idle`: the copy
    /// runs on CPU time nothing else wants and never cuts in front of a server, a proxy or their
    /// clients when it wakes), or a nice value from 0 (as started) to 19, which only lowers its
    /// share. On a machine with no idle CPU at all the idle class slows the copy far below
    /// `--rate`: pass a nice value there.
    #[arg(long, default_value_t = DEFAULT_NICE, value_name = "idle|N")]
    nice: Priority,
}

/// The default `--nice`: the copy is background work (BENCHMARKS.md, "migrate: the copy in the idle
/// CPU class", has the live p99 with `idle` and 10).
const DEFAULT_NICE: Priority = Priority::Idle;

/// The default `--batch` for `--rate` keys a second: a hundredth of it, 10 to 100 (each batch is one
/// pause of the servers for the live traffic, so a slow copy takes short ones), or 500 when
/// unlimited (the batch is the round trip the copy waits on).
fn default_batch(rate: u64) -> usize {
    match rate {
        0 => 500,
        rate => usize::try_from(rate / 100).unwrap_or(100).clamp(10, 100),
    }
}

/// `--transfer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Transfer {
    /// MIGRATE … COPY REPLACE KEYS.
    Migrate,
    /// DUMP, then RESTORE … REPLACE.
    DumpRestore,
}

/// `32M` → 33554432.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (e.g. 32M)"))?;
    let scale: u64 = match unit {
        "" => 1,
        "k" | "K" | "kB" | "KB" => 1 << 10,
        "M" | "MB" => 1 << 20,
        "G" | "GB" => 1 << 30,
        _ => return Err(format!("{text:?}: unknown unit (k, M or G)")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Runs the migration.
pub fn run(args: Args) -> Result<()> {
    // Before the runtime's threads start: they take their creator's.
    args.nice.apply()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(migrate(args))
}

/// The pool named by `--pool` (or the only one) in `path`.
pub(super) fn pool_in(path: &std::path::Path, pool: Option<&str>) -> Result<PoolConfig> {
    let config: ProxyConfig = load_config(path).map_err(|e| config_problems(path, &e))?;
    config
        .pool(pool)
        .cloned()
        .map_err(|e| config_problems(path, &e))
}

/// Checks that every one of `configs` places `now`'s pool as `now` does.
fn agree(configs: &[PathBuf], now: &PoolConfig) -> Result<()> {
    for other in &configs[1..] {
        let p = pool_in(other, Some(&now.name))?;
        if p.membership().digest() != now.membership().digest() {
            bail!(
                "{} places pool {} otherwise than {}: the proxies must agree on the pool now",
                other.display(),
                now.name,
                configs[0].display()
            );
        }
    }
    Ok(())
}

/// Where a run of `migrate` begins, as the memberships and marks it finds say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// A change planned and not cut over: from the copy on.
    Fresh,
    /// A change cut over and not finished (a run stopped there): from the cut-over on.
    CutOver,
    /// A change finished whose moved keys are still to be deleted (`--delete-moved` failed): the
    /// deletion only.
    Deleting,
}

async fn migrate(args: Args) -> Result<()> {
    let now = pool_in(&args.config[0], args.pool.as_deref())?;
    let pool = now.name.clone();
    let (mut change, proxies, stage) = match (&args.etcd, &args.to) {
        (Some(urls), _) => {
            agree(&args.config, &now)?;
            let source = etcd::source(urls, &args.etcd_prefix, &pool);
            let (change, stage) = etcd::change(&source, now, args.all_keys).await?;
            (change, Proxies::Etcd(Box::new(source)), stage)
        }
        (None, Some(to)) => {
            let (change, stage) = files::change(&args.config, to, now, args.all_keys)?;
            (change, Proxies::Stats(args.proxies.clone()), stage)
        }
        (None, None) => bail!("--to FILE or --etcd URL says what the pool is next"),
    };
    if matches!(&proxies, Proxies::Stats(list) if list.is_empty()) && !args.dry_run {
        bail!(
            "--proxies HOST:PORT,… is needed: the copy starts only once every proxy of the pool \
             dual-writes, and the cut-over is done only once every one serves the next membership \
             (their stats ports tell)"
        );
    }
    change.read_cluster().await?;
    let jobs: Vec<Job> = change
        .jobs()?
        .into_iter()
        .map(|mut job| {
            job.batch = args.batch.unwrap_or(default_batch(args.rate)).max(1);
            job
        })
        .collect();
    let redis = change.now.is_redis();
    let wait = Duration::from_secs(args.confirm_timeout);
    let digest = |p: &PoolConfig| p.membership().digest();
    let (old, new) = (digest(&change.now), digest(&change.next));
    let known = [(old.as_str(), "old"), (new.as_str(), "new")];
    if args.dry_run && stage != Stage::Fresh {
        return Ok(());
    }
    if stage == Stage::Fresh && !copy(&args, &change, &jobs, &proxies, &known).await? {
        return Ok(());
    }
    // Deleting still pending after a finished change: a rerun must delete too.
    let delete = args.delete_moved || stage == Stage::Deleting;
    if stage != Stage::Deleting {
        cut_over(&args, &change, &proxies, stage, &known, delete).await?;
    }
    let done = Serving::of(&change.next, &change.next);
    let n = proxies
        .wait_for(
            &pool,
            &done,
            &known,
            wait,
            "serve the next membership alone",
        )
        .await?;
    println!(
        "cut over: every {} ({n}) serves placement {new}; the old one is no longer written",
        proxies.noun()
    );
    if delete {
        eprintln!("shardring: deleting the moved keys from their old servers");
        let progress = Arc::new(Progress::default());
        let jobs: Vec<Job> = jobs
            .into_iter()
            .map(|mut j| {
                j.progress = Arc::clone(&progress);
                j
            })
            .collect();
        delete_all(&jobs, redis).await.context(
            "deleting the moved keys from their old servers (the change itself is done; a rerun \
             of the same command deletes them)",
        )?;
        match &proxies {
            Proxies::Etcd(source) => etcd::deleted(source).await?,
            Proxies::Stats(_) => files::deleted(args.to.as_deref().context("--to FILE")?, &pool)?,
        }
        let r = progress.report();
        println!(
            "deleted {} moved keys ({}) from their old servers ({} keys scanned, {} moving, {} gone \
             meanwhile, {} failed)",
            r.copied,
            plan::bytes(r.bytes),
            r.scanned,
            r.moving,
            r.gone,
            r.failed
        );
    }
    Ok(())
}

/// Step 4: next becomes current and the old membership next, every participant serves that, then
/// next is dropped (recording the deletion still to do when `delete`). From the cut-over's write
/// on, [`Stage::CutOver`] resumes it.
async fn cut_over(
    args: &Args,
    change: &Change,
    proxies: &Proxies,
    stage: Stage,
    known: &[(&str, &str)],
    delete: bool,
) -> Result<()> {
    let pool = &change.now.name;
    let wait = Duration::from_secs(args.confirm_timeout);
    let swapped = Serving::of(&change.next, &change.now);
    match proxies {
        Proxies::Etcd(source) => {
            if stage == Stage::Fresh {
                etcd::cut_over(source).await?;
            }
            proxies
                .wait_for(pool, &swapped, known, wait, "serve the next membership")
                .await?;
            etcd::drop_next(source, change, delete).await?;
        }
        Proxies::Stats(_) => {
            let to = args.to.as_deref().context("--to FILE")?;
            // Resumed too: a run stopped between the files' writes left some unwritten.
            files::cut_over(&args.config, to, change)?;
            super::fleet::reload(args.reload_command.as_deref())?;
            proxies
                .wait_for(pool, &swapped, known, wait, "serve the next membership")
                .await?;
            files::drop_next(to, change, delete)?;
            super::fleet::reload(args.reload_command.as_deref())?;
        }
    }
    Ok(())
}

/// Steps 1 to 3: the plan printed, every proxy dual-writing, the copy. `Ok(false)` when the run
/// stops there (`--dry-run`, `--copy-only`).
async fn copy(
    args: &Args,
    change: &Change,
    jobs: &[Job],
    proxies: &Proxies,
    known: &[(&str, &str)],
) -> Result<bool> {
    let redis = change.now.is_redis();
    let surveys = survey_all(jobs, redis).await?;
    let (moving, _) = plan::print(change, jobs, &surveys);
    if args.dry_run {
        return Ok(false);
    }
    let wait = Duration::from_secs(args.confirm_timeout);
    let pool = &change.now.name;
    let dual = Serving::of(&change.now, &change.next);
    let n = proxies
        .wait_for(
            pool,
            &dual,
            known,
            wait,
            "dual-write (serve the next membership as next)",
        )
        .await?;
    eprintln!(
        "shardring: every {} ({n}) dual-writes; copying",
        proxies.noun()
    );

    // The copy.
    let progress = Arc::new(Progress::default());
    let rate = (args.rate > 0 || args.rate_bytes > 0).then(|| {
        Arc::new(RateLimit::new(
            Some(args.rate).filter(|&r| r > 0),
            Some(args.rate_bytes).filter(|&r| r > 0),
        ))
    });
    let display = progress::Display::start(Arc::clone(&progress), moving);
    let started = Instant::now();
    let transfer = match args.transfer {
        Transfer::Migrate => shardring_migrate::redis::Transfer::Migrate,
        Transfer::DumpRestore => shardring_migrate::redis::Transfer::DumpRestore,
    };
    let result = copy_all(jobs, redis.then_some(transfer), &progress, rate.as_ref()).await;
    display.finish();
    let report = progress.report();
    println!(
        "{}",
        progress::summary(&report, started.elapsed().as_secs_f64())
    );
    result?;
    if report.failed > 0 {
        bail!(
            "{} keys could not be copied (see the log above): not cutting over; the proxies keep \
             dual-writing, and a rerun copies only what is missing",
            report.failed
        );
    }
    if args.copy_only {
        eprintln!("shardring: --copy-only: stopping before the cut-over (the proxies dual-write)");
        return Ok(false);
    }
    Ok(true)
}

/// Every job's survey, at once.
async fn survey_all(jobs: &[Job], redis: bool) -> Result<Vec<Survey>> {
    let surveys = jobs.iter().map(|job| async move {
        let survey = if redis {
            shardring_migrate::redis::survey(job).await
        } else {
            shardring_migrate::memcache::survey(job).await
        };
        survey.with_context(|| format!("surveying {}", job.source.name))
    });
    futures_util::future::join_all(surveys)
        .await
        .into_iter()
        .collect()
}

/// Every job's copy, at once, into `progress`, at `rate` (Redis pools: by `redis`).
async fn copy_all(
    jobs: &[Job],
    redis: Option<shardring_migrate::redis::Transfer>,
    progress: &Arc<Progress>,
    rate: Option<&Arc<RateLimit>>,
) -> Result<Report> {
    let copies = jobs.iter().filter(|j| !j.targets.is_empty()).map(|job| {
        let mut job = job.clone();
        job.progress = Arc::clone(progress);
        job.rate = rate.cloned();
        tokio::spawn(async move {
            let r = match redis {
                Some(transfer) => shardring_migrate::redis::copy_with(&job, transfer).await,
                None => shardring_migrate::memcache::copy(&job).await,
            };
            r.with_context(|| format!("copying from {}", job.source.name))
        })
    });
    for r in futures_util::future::join_all(copies).await {
        r.context("a copy task failed")??;
    }
    Ok(progress.report())
}

/// Every job's deletion of its moved keys, at once.
async fn delete_all(jobs: &[Job], redis: bool) -> Result<()> {
    let deletes = jobs.iter().map(|job| async move {
        let r = if redis {
            shardring_migrate::redis::delete_moved(job).await
        } else {
            shardring_migrate::memcache::delete_moved(job).await
        };
        r.with_context(|| format!("deleting the moved keys of {}", job.source.name))
    });
    for r in futures_util::future::join_all(deletes).await {
        r?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_units() {
        assert_eq!(parse_bytes("32M"), Ok(32 << 20));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("10k"), Ok(10 << 10));
        assert!(parse_bytes("12x").is_err());
        assert!(parse_bytes("").is_err());
    }
}
