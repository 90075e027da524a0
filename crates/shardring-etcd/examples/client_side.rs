//! Client-side sharding without a proxy: a program that embeds a `SharedRing` following a pool in etcd
//! and talks to the memcached servers directly, placing every key exactly where `shardring proxy` (and
//! nutcracker) would for the same members: the pool's ketama ring with its hash and hash tag.
//!
//! ```text
//! cargo run -p shardring-etcd --example client_side -- --etcd http://127.0.0.1:2379 --pool alpha \
//!     set user:1 hello          # STORED, on the server that owns user:1
//!     get user:1                # hello
//!     route user:1 user:2       # KEY<TAB>SERVER<TAB>ADDRESS
//!     demo 10                   # set and get keys for 10 s, printing every ring change as it happens
//! ```
//!
//! Flags: `--etcd URL` (default `http://127.0.0.1:2379`), `--pool NAME` (required), `--prefix P`
//! (default `/shardring/`), `--hash H` (twemproxy's hash names, default `fnv1a_64`), `--hash-tag XY`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

#[path = "common/memcached.rs"]
mod memcached;
use shardring::hash::TwemproxyHash;
use shardring::membership::{Follower, Member};
use shardring::shared::SharedRing;
use shardring::Ring;
use shardring_etcd::{follow, twemproxy_ketama, EtcdSource, FollowStats};
use tokio_util::sync::CancellationToken;

/// What the command line asked for.
struct Options {
    etcd: String,
    pool: String,
    prefix: String,
    hash: TwemproxyHash,
    hash_tag: Option<[u8; 2]>,
    command: Vec<String>,
}

fn options() -> Result<Options> {
    let mut args = std::env::args().skip(1);
    let mut o = Options {
        etcd: "http://127.0.0.1:2379".into(),
        pool: String::new(),
        prefix: shardring_etcd::layout::DEFAULT_PREFIX.into(),
        hash: TwemproxyHash::Fnv1a64,
        hash_tag: None,
        command: Vec::new(),
    };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow!("{a} needs a value"));
        match a.as_str() {
            "--etcd" => o.etcd = value()?,
            "--pool" => o.pool = value()?,
            "--prefix" => o.prefix = value()?,
            "--hash" => o.hash = value()?.parse()?,
            "--hash-tag" => o.hash_tag = Some(shardring::compat::twemproxy::hash_tag(&value()?)?),
            _ => {
                o.command.push(a);
                o.command.extend(args.by_ref());
            }
        }
    }
    if o.pool.is_empty() || o.command.is_empty() {
        bail!("usage: client_side --pool NAME [--etcd URL] [--prefix P] [--hash H] [--hash-tag XY] set KEY VALUE | get KEY | route KEY... | demo SECONDS");
    }
    Ok(o)
}

/// The embedded ring and where each of its servers listens.
struct Client {
    ring: Arc<SharedRing<Ring>>,
    /// Server name → address, as of the latest snapshot (names are what the ring reports).
    addrs: Arc<Mutex<HashMap<String, String>>>,
    /// The servers' connections.
    servers: memcached::Servers,
}

impl Client {
    /// The server that owns `key` and its address.
    fn route(&self, key: &str) -> Result<(String, String)> {
        let name = self
            .ring
            .lookup_with(key, |n| n.name().to_string())
            .ok_or_else(|| anyhow!("the pool has no servers"))?;
        let addr = self
            .addrs
            .lock()
            .map_err(|_| anyhow!("address map poisoned"))?
            .get(&name)
            .cloned()
            .unwrap_or_else(|| name.clone());
        Ok((name, addr))
    }

    async fn set(&mut self, key: &str, value: &[u8]) -> Result<String> {
        let (_, addr) = self.route(key)?;
        self.servers.set(&addr, key, value).await
    }

    async fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        let (_, addr) = self.route(key)?;
        self.servers.get(&addr, key).await
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    let source = EtcdSource::builder(&[o.etcd.as_str()], o.pool.as_str())
        .prefix(o.prefix.as_str())
        .build();
    // Start from one read, so a missing etcd is a clear error rather than an empty ring.
    let first = source
        .read()
        .await
        .with_context(|| format!("reading pool {} from {}", o.pool, o.etcd))?;
    let addrs: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let (hash, tag) = (o.hash, o.hash_tag);
    let build = {
        let addrs = Arc::clone(&addrs);
        move |members: &[Member]| {
            if let Ok(mut a) = addrs.lock() {
                for m in members {
                    a.insert(m.name().to_string(), m.addr().to_string());
                }
            }
            twemproxy_ketama(members, hash, tag)
        }
    };
    let build_first = build.clone();
    let ring = Arc::new(SharedRing::new(build_first(first.snapshot.members())?));
    let mut follower = Follower::new(Arc::clone(&ring), build).assume_current(first.snapshot);
    let stats = Arc::new(FollowStats::default());
    let stop = CancellationToken::new();
    let following = {
        let (stats, stop) = (Arc::clone(&stats), stop.clone());
        tokio::spawn(async move { follow(&source, &mut follower, &stats, stop).await })
    };
    let mut client = Client {
        ring: Arc::clone(&ring),
        addrs,
        servers: memcached::Servers::default(),
    };
    let args: Vec<&str> = o.command.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["set", key, value] => println!("{}", client.set(key, value.as_bytes()).await?),
        ["get", key] => match client.get(key).await? {
            Some(v) => println!("{}", String::from_utf8_lossy(&v)),
            None => println!("(miss)"),
        },
        ["route", keys @ ..] => {
            for key in keys {
                let (name, addr) = client.route(key)?;
                println!("{key}\t{name}\t{addr}");
            }
        }
        ["demo", seconds] => {
            let until = Instant::now() + Duration::from_secs(seconds.parse()?);
            let mut generation = ring.generation();
            let (mut hits, mut misses, mut i) = (0u64, 0u64, 0u64);
            while Instant::now() < until {
                let key = format!("demo:{}", i % 1000);
                if i < 1000 {
                    client.set(&key, key.as_bytes()).await?;
                } else if client.get(&key).await?.is_some() {
                    hits += 1;
                } else {
                    // A key whose server changed: fetch it from its new owner next time.
                    misses += 1;
                    client.set(&key, key.as_bytes()).await?;
                }
                if ring.generation() != generation {
                    generation = ring.generation();
                    let servers: Vec<String> = ring
                        .load()
                        .nodes()
                        .iter()
                        .map(|n| n.name().to_string())
                        .collect();
                    println!("ring changed (generation {generation}): {servers:?}; hits {hits}, misses {misses}");
                }
                i += 1;
                if i % 1000 == 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            println!("hits {hits}, misses {misses}");
        }
        _ => bail!("unknown command {:?}", o.command),
    }
    stop.cancel();
    let _ = following.await;
    Ok(())
}
