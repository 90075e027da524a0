//! `shardring members`: a pool's servers in etcd (the layout of `shardring_etcd::layout`): publish a
//! YAML pool's servers (the migration path from a static file), list them, add / remove / re-weight one,
//! and watch changes with the keys each one moves.
//!
//! Every change prints the migration plan it causes (before it is made, for add / remove / weight; as
//! it happens, for watch): for each pair of servers, the share of the key space that moves from one to
//! the other, computed on the pool's ring (its hash and hash tag from `--config`, else twemproxy's
//! defaults); `--ranges` prints every hash range as `shardring ring --diff` does.

mod roster;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use shardring::hash::TwemproxyHash;
use shardring::membership::{Member, MembershipSnapshot};
use shardring::ring::Migration;
use shardring::Ring;
use shardring_config::{PoolConfig, ProxyConfig};
use shardring_etcd::layout::{parse_value, DEFAULT_PREFIX};
use shardring_etcd::{admin, twemproxy_ketama, EtcdSource, Kind, Update};
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The etcd endpoints, comma-separated.
    #[arg(
        long,
        default_value = "http://127.0.0.1:2379",
        value_name = "URL[,URL...]"
    )]
    etcd: String,
    /// The key prefix pools live under (a trailing / is added when missing).
    #[arg(long, default_value = DEFAULT_PREFIX, value_name = "P",
          value_parser = shardring_proxy::membership::parse_prefix)]
    etcd_prefix: String,
    /// The pool (required unless --config has exactly one).
    #[arg(long, value_name = "NAME")]
    pool: Option<String>,
    /// A twemproxy YAML file: the servers to publish, and the pool's hash and hash tag for migration
    /// plans.
    #[arg(long, short = 'c', value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Print every hash range that changes owner (FROM_POINT, TO_POINT, OLD, NEW), not just the shares.
    #[arg(long, global = true)]
    ranges: bool,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Make the pool's servers in etcd exactly those of the YAML pool (--config), in one transaction.
    /// A pool marked `# shardring: redis-cluster` is published as a Redis Cluster's seeds (the
    /// pool's `kind` key, `next-kind` with --next).
    Publish {
        /// Print what would change without writing.
        #[arg(long)]
        dry_run: bool,
        /// Publish them as the pool's next membership (`next/`, beside the current one) for
        /// `shardring migrate --etcd`: the proxies dual-write until the migration cuts over.
        #[arg(long)]
        next: bool,
    },
    /// Print the pool's servers: NAME<TAB>ADDRESS<TAB>WEIGHT, and the revision on stderr.
    List,
    /// Add a server, or change its address or weight: SERVER is host:port[:weight].
    Add {
        /// host:port[:weight]
        server: String,
        /// The server's name (by default its host:port, placed as nutcracker places an unnamed server).
        #[arg(long)]
        name: Option<String>,
        /// Start a pool that has no server in etcd yet with this one (by default that is refused, so
        /// that a misspelt --pool does not make a new pool).
        #[arg(long)]
        create: bool,
    },
    /// Remove the server named NAME.
    Remove {
        /// The server's name (host:port for an unnamed one).
        name: String,
    },
    /// Change the weight of the server named NAME.
    Weight {
        /// The server's name.
        name: String,
        /// The new weight (a whole number, at least 1).
        weight: u32,
    },
    /// Print each change as it happens, with the keys it moves. Runs until interrupted.
    Watch {
        /// Stop after this many changes.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Print the pool's participants (the roster: every proxy that registered and did not stop
    /// cleanly): ID<TAB>live|absent<TAB>what it serves (now, or last seen). `shardring migrate`
    /// waits for each of them at every step.
    Participants,
    /// Take the participant ID out of the roster, for one gone for good (its machine retired), so
    /// that migrations no longer wait for it. Refused while it is registered (its lease alive), and
    /// without --stopped.
    Forget {
        /// The participant's id, as `participants` prints it.
        id: String,
        /// Say that its process is stopped for good. A participant that is only cut off from etcd
        /// fences the keys a change it knows moves, but one that knew no change serves them from
        /// their old owners, and one that reaches etcd again serves before its view is known to be
        /// current: so only a stopped one may be forgotten.
        #[arg(long)]
        stopped: bool,
    },
}

/// The pool's placement settings for migration plans.
#[derive(Debug, Clone, Copy)]
struct Hashing {
    hash: TwemproxyHash,
    hash_tag: Option<[u8; 2]>,
}

impl Hashing {
    fn ring(self, members: &[Member]) -> Result<Ring> {
        Ok(twemproxy_ketama(members, self.hash, self.hash_tag)?)
    }
}

fn read_config(path: &std::path::Path) -> Result<ProxyConfig> {
    crate::compat::load_config(path).map_err(|e| crate::compat::config_problems(path, &e))
}

fn pick_pool<'c>(config: &'c ProxyConfig, name: Option<&str>) -> Result<&'c PoolConfig> {
    match name {
        Some(n) => config
            .pools
            .iter()
            .find(|p| p.name == n)
            .ok_or_else(|| anyhow!("the configuration has no pool {n:?}")),
        None if config.pools.len() == 1 => Ok(&config.pools[0]),
        None => bail!("the configuration has several pools; say which with --pool"),
    }
}

pub fn run(args: Args) -> Result<()> {
    let config = args.config.as_deref().map(read_config).transpose()?;
    let pool_config = config
        .as_ref()
        .map(|c| pick_pool(c, args.pool.as_deref()))
        .transpose()?;
    let pool = match (&args.pool, pool_config) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => p.name.clone(),
        (None, None) => bail!("--pool NAME is required (or --config with one pool)"),
    };
    let hashing = match pool_config {
        Some(p) => {
            if p.distribution != shardring::compat::twemproxy::Distribution::Ketama {
                eprintln!(
                    "shardring: pool {pool} uses distribution {}; the plans below are for ketama",
                    p.distribution
                );
            }
            Hashing {
                hash: p.hash,
                hash_tag: p.hash_tag,
            }
        }
        None => Hashing {
            hash: TwemproxyHash::Fnv1a64,
            hash_tag: None,
        },
    };
    let endpoints: Vec<&str> = args.etcd.split(',').map(str::trim).collect();
    let source = EtcdSource::builder(&endpoints, pool.as_str())
        .prefix(args.etcd_prefix.as_str())
        .debounce(Duration::ZERO)
        .build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let ranges = args.ranges;
    runtime.block_on(async {
        match args.action {
            Action::Publish { dry_run, next } => {
                let pool_config = pool_config
                    .ok_or_else(|| anyhow!("publish needs --config FILE with the pool"))?;
                // A cluster pool's servers are its seeds, published with its kind (the
                // layout's `kind`/`next-kind`): its slot map, not a ring, places its keys.
                let kind = if pool_config.cluster().is_some() {
                    Kind::RedisCluster
                } else {
                    Kind::Ring
                };
                let members = pool_config
                    .servers
                    .iter()
                    .map(Member::from_twemproxy)
                    .collect::<Result<Vec<_>, _>>()?;
                let current = source.read().await?.snapshot;
                let planned = MembershipSnapshot::new(0, members.clone())?;
                if kind.is_cluster() {
                    eprintln!(
                        "pool {pool} is a Redis Cluster (`# shardring: redis-cluster`): its {} \
                         servers are seeds, and the cluster's slot map places every key",
                        members.len()
                    );
                } else {
                    print_change(&current, &planned, hashing, ranges)?;
                }
                if dry_run {
                    eprintln!("(dry run: nothing written)");
                    return Ok(());
                }
                if next {
                    let revision = admin::publish_next_kind(&source, &members, kind).await?;
                    eprintln!(
                        "published {} servers{} to {} at revision {revision}: the proxies dual-write \
                         the keys that move until `shardring migrate --etcd` cuts over",
                        members.len(),
                        if kind.is_cluster() { " (a Redis Cluster's seeds)" } else { "" },
                        source.keys().next_prefix(),
                    );
                    return Ok(());
                }
                let done = admin::publish_kind(&source, &members, kind).await?;
                if done.written + done.deleted == 0 {
                    eprintln!("etcd already has exactly these servers; nothing written");
                    return Ok(());
                }
                eprintln!(
                    "published {} servers to {} at revision {} ({} written, {} deleted)",
                    members.len(),
                    source.keys().servers_prefix(),
                    done.revision,
                    done.written,
                    done.deleted
                );
                Ok(())
            }
            Action::List => {
                // One read of the whole pool: its servers and what they are (the layout's `kind`).
                let planned = EtcdSource::builder(&endpoints, pool.as_str())
                    .prefix(args.etcd_prefix.as_str())
                    .with_next(true)
                    .build();
                let read = planned.read().await?;
                require_pool(&source, &read).await?;
                let mut out = io::stdout().lock();
                for m in read.snapshot.members() {
                    writeln!(out, "{}\t{}\t{}", m.name(), m.addr(), m.weight())?;
                }
                for bad in &read.malformed {
                    eprintln!("shardring: {bad}");
                }
                eprintln!("revision {}", read.snapshot.revision());
                if read.kinds.current != Kind::Ring {
                    eprintln!(
                        "kind {}: the servers are a Redis Cluster's seeds; its slot map places the keys",
                        read.kinds.current
                    );
                }
                Ok(())
            }
            Action::Add {
                server,
                name,
                create,
            } => {
                let (addr, weight) =
                    parse_value(&server).map_err(|e| anyhow!("{server:?}: {e}"))?;
                let member = Member::new(name.unwrap_or_else(|| addr.clone()), addr, weight)?;
                if !create {
                    require_pool(&source, &source.read().await?).await?;
                }
                change(&source, hashing, ranges, |current| {
                    if let Some(other) = current
                        .members()
                        .iter()
                        .find(|m| m.addr() == member.addr() && m.name() != member.name())
                    {
                        bail!(
                            "server {} already has the address {}: one server, one address \
                             (to rename it, remove {} first)",
                            other.name(),
                            other.addr(),
                            other.name()
                        );
                    }
                    Ok(admin::with_member(current, member.clone()))
                })
                .await?;
                let revision = admin::put_member(&source, &member, None).await?;
                eprintln!("wrote {} at revision {revision}", member.name());
                Ok(())
            }
            Action::Remove { name } => {
                require_pool(&source, &source.read().await?).await?;
                change(&source, hashing, ranges, |current| {
                    current
                        .get(&name)
                        .ok_or_else(|| anyhow!("the pool has no server {name:?}"))?;
                    Ok(current
                        .members()
                        .iter()
                        .filter(|m| m.name() != name)
                        .cloned()
                        .collect())
                })
                .await?;
                let revision = admin::remove_member(&source, &name).await?;
                eprintln!("removed {name} at revision {revision}");
                Ok(())
            }
            Action::Weight { name, weight } => {
                require_pool(&source, &source.read().await?).await?;
                let mut changed = None;
                change(&source, hashing, ranges, |current| {
                    let m = current
                        .get(&name)
                        .ok_or_else(|| anyhow!("the pool has no server {name:?}"))?;
                    let m = Member::new(m.name(), m.addr(), weight)?;
                    changed = Some(m.clone());
                    Ok(admin::with_member(current, m))
                })
                .await?;
                let member = changed.ok_or_else(|| anyhow!("nothing to change"))?;
                let revision = admin::put_member(&source, &member, None).await?;
                eprintln!("re-weighted {name} to {weight} at revision {revision}");
                Ok(())
            }
            Action::Watch { count } => watch(&source, hashing, ranges, count).await,
            Action::Participants => roster::list(&source).await,
            Action::Forget { id, stopped } => roster::forget(&source, &id, stopped).await,
        }
    })
}

/// An error naming the pools etcd has when `read` (of the source's pool) found no key at all: the
/// pool does not exist, and a command on it is most likely a misspelt `--pool`.
async fn require_pool(source: &EtcdSource, read: &shardring_etcd::PoolRead) -> Result<()> {
    if !read.snapshot.is_empty() || !read.malformed.is_empty() {
        return Ok(());
    }
    let pools = admin::pools(source).await?;
    bail!(
        "etcd has no pool {:?} under {} (pools there: {}); `shardring members publish --config FILE` \
         makes one, or `add --create`",
        source.pool(),
        source.prefix(),
        if pools.is_empty() {
            "none".to_owned()
        } else {
            pools.join(", ")
        }
    )
}

/// Reads the pool, computes the members after `edit`, and prints the change's migration plan.
async fn change(
    source: &EtcdSource,
    hashing: Hashing,
    ranges: bool,
    edit: impl FnOnce(&MembershipSnapshot) -> Result<Vec<Member>>,
) -> Result<()> {
    let current = source.read().await?.snapshot;
    let next = MembershipSnapshot::new(current.revision(), edit(&current)?)?;
    print_change(&current, &next, hashing, ranges)
}

async fn watch(
    source: &EtcdSource,
    hashing: Hashing,
    ranges: bool,
    count: Option<u64>,
) -> Result<()> {
    let stop = CancellationToken::new();
    let mut previous: Option<MembershipSnapshot> = None;
    let mut seen = 0u64;
    let mut failure: Option<anyhow::Error> = None;
    let stopper = stop.clone();
    source
        .watch(
            |update| match update {
                Update::Snapshot(next) => {
                    let printed = match &previous {
                        None => {
                            let r = print_members(&next);
                            eprintln!(
                                "watching {} from revision {}",
                                source.keys().servers_prefix(),
                                next.revision()
                            );
                            r
                        }
                        Some(prev) if prev.same_members(&next) => Ok(()),
                        Some(prev) => {
                            seen += 1;
                            print_change(prev, &next, hashing, ranges)
                        }
                    };
                    if let Err(e) = printed {
                        failure = Some(e);
                        stopper.cancel();
                    }
                    previous = Some(next);
                    if count.is_some_and(|c| seen >= c) {
                        stopper.cancel();
                    }
                }
                Update::Malformed(bad) => eprintln!("shardring: {bad}"),
                Update::Lost { error, retry_in } => {
                    eprintln!(
                        "shardring: {}; retrying in {retry_in:?}",
                        shardring_etcd::error_chain(&error)
                    )
                }
                Update::Resync { compacted } => {
                    eprintln!("shardring: compacted at {compacted}; reading the pool afresh")
                }
                _ => {}
            },
            stop.clone(),
        )
        .await;
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn print_members(snapshot: &MembershipSnapshot) -> Result<()> {
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "# revision {}: {} servers",
        snapshot.revision(),
        snapshot.members().len()
    )?;
    for m in snapshot.members() {
        writeln!(out, "{}\t{}\t{}", m.name(), m.addr(), m.weight())?;
    }
    out.flush()?;
    Ok(())
}

/// Prints `# revision R: +added -removed ~changed`, then the plan from the old ring to the new one:
/// `OLD<TAB>NEW<TAB>SHARE` per pair (share of the key space, in percent), or every range with `--ranges`.
fn print_change(
    old: &MembershipSnapshot,
    new: &MembershipSnapshot,
    hashing: Hashing,
    ranges: bool,
) -> Result<()> {
    // A planned change is computed on the revision it was read at; a watched one is that revision.
    let label = if old.revision() == new.revision() || new.revision() == 0 {
        "planned on the pool at revision"
    } else {
        "revision"
    };
    let new_revision_shown = if new.revision() == 0 {
        old.revision()
    } else {
        new.revision()
    };
    let mut what = Vec::new();
    for m in new.members() {
        match old.get(m.name()) {
            None => what.push(format!("+{}", m.name())),
            Some(o) if o != m => what.push(format!(
                "~{} ({} w{} -> {} w{})",
                m.name(),
                o.addr(),
                o.weight(),
                m.addr(),
                m.weight()
            )),
            Some(_) => {}
        }
    }
    for m in old.members() {
        if new.get(m.name()).is_none() {
            what.push(format!("-{}", m.name()));
        }
    }
    let plan = hashing
        .ring(old.members())?
        .migration_to(&hashing.ring(new.members())?);
    let moved: f64 = plan.iter().map(share).fold(0.0, |a, b| a + b);
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "# {label} {}: {}; {:.3}% of keys move",
        new_revision_shown,
        if what.is_empty() {
            "no change".to_string()
        } else {
            what.join(" ")
        },
        moved * 100.0
    )?;
    let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "-".into());
    if ranges {
        super::ring::write_ranges(&mut out, &plan)?;
    } else {
        let mut pairs: BTreeMap<(String, String), f64> = BTreeMap::new();
        for m in &plan {
            *pairs.entry((name(&m.from), name(&m.to))).or_default() += share(m);
        }
        for ((from, to), s) in pairs {
            writeln!(out, "{from}\t{to}\t{:.3}%", s * 100.0)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The share of the 32-bit key space a range covers.
fn share(m: &Migration) -> f64 {
    (f64::from(m.last) - f64::from(m.first) + 1.0) / 4_294_967_296.0
}
