//! An application with a client-side ring that takes part in `shardring migrate`: it follows the
//! pool's current and next membership in etcd ([`Participant`]), registers in the pool's roster,
//! writes every key whose owner changes to both owners while a change is under way, and refuses the
//! keys that move while it cannot confirm its place in etcd. `migrate` waits for it as for a proxy.
//!
//! ```text
//! cargo run -p shardring-etcd --example participant -- --pool alpha --id app-1 demo 60
//! # in another shell, while it runs:
//! shardring members -c next.yml publish --next && shardring migrate --etcd http://127.0.0.1:2379 -c nutcracker.yml
//! ```
//!
//! `demo SECONDS` writes and reads 1,000 keys for that long, each write carrying a counter, and
//! checks every read against the last write acknowledged (a stale read would be printed and
//! counted); it prints each change of memberships it serves. `set KEY VALUE` and `get KEY` do one
//! operation. Flags: `--etcd URL` (default `http://127.0.0.1:2379`), `--pool NAME` and `--id ID`
//! (required: the participant's name in the roster, kept across restarts), `--prefix P`, `--hash H`,
//! `--hash-tag XY`.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

#[path = "common/memcached.rs"]
mod memcached;
use memcached::Servers;
use shardring::compat::twemproxy::hash_tag;
use shardring_etcd::{EtcdSource, Participant, PoolRules};

struct Options {
    etcd: String,
    pool: String,
    id: String,
    prefix: String,
    rules: PoolRules,
    command: Vec<String>,
}

fn options() -> Result<Options> {
    let mut args = std::env::args().skip(1);
    let mut o = Options {
        etcd: "http://127.0.0.1:2379".into(),
        pool: String::new(),
        id: String::new(),
        prefix: shardring_etcd::layout::DEFAULT_PREFIX.into(),
        rules: PoolRules::default(),
        command: Vec::new(),
    };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow!("{a} needs a value"));
        match a.as_str() {
            "--etcd" => o.etcd = value()?,
            "--pool" => o.pool = value()?,
            "--id" => o.id = value()?,
            "--prefix" => o.prefix = value()?,
            "--hash" => o.rules.hash = value()?.parse()?,
            "--hash-tag" => o.rules.hash_tag = Some(hash_tag(&value()?)?),
            _ => {
                o.command.push(a);
                o.command.extend(args.by_ref());
            }
        }
    }
    if o.pool.is_empty() || o.id.is_empty() || o.command.is_empty() {
        bail!("usage: participant --pool NAME --id ID [--etcd URL] [--prefix P] [--hash H] [--hash-tag XY] set KEY VALUE | get KEY | demo SECONDS");
    }
    Ok(o)
}

/// A write: to the owner now, and to the next owner while the key moves; acknowledged once both
/// took it.
async fn set(p: &Participant, servers: &mut Servers, key: &str, value: &[u8]) -> Result<()> {
    let view = p.view();
    let route = view
        .route(key.as_bytes())?
        .ok_or_else(|| anyhow!("the pool has no servers"))?;
    for m in route.writes() {
        let status = servers.set(m.addr(), key, value).await?;
        if status != "STORED" {
            bail!("{}: {status}", m.addr());
        }
    }
    Ok(())
}

/// A read: from the owner now.
async fn get(p: &Participant, servers: &mut Servers, key: &str) -> Result<Option<Vec<u8>>> {
    let view = p.view();
    let route = view
        .route(key.as_bytes())?
        .ok_or_else(|| anyhow!("the pool has no servers"))?;
    servers.get(route.owner.addr(), key).await
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    let source = EtcdSource::builder(&[o.etcd.as_str()], o.pool.as_str())
        .prefix(o.prefix.as_str())
        .with_next(true)
        .build();
    let p = Participant::start(&source, &o.id, o.rules)
        .await
        .with_context(|| format!("taking part in pool {} at {}", o.pool, o.etcd))?;
    let mut servers = Servers::default();
    let args: Vec<&str> = o.command.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["set", key, value] => {
            set(&p, &mut servers, key, value.as_bytes()).await?;
            println!("STORED");
        }
        ["get", key] => match get(&p, &mut servers, key).await? {
            Some(v) => println!("{}", String::from_utf8_lossy(&v)),
            None => println!("(miss)"),
        },
        ["demo", seconds] => demo(&p, &mut servers, seconds.parse()?).await,
        _ => bail!("unknown command {:?}", o.command),
    }
    p.stop().await;
    Ok(())
}

/// Writes and reads 1,000 keys for `seconds`, checking every read against the last acknowledged
/// write of its key.
async fn demo(p: &Participant, servers: &mut Servers, seconds: u64) {
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut acknowledged = vec![0u64; 1000];
    let (mut reads, mut writes, mut fenced, mut errors, mut stale) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut serving = p.registration();
    println!(
        "serving {} (next {})",
        serving.current,
        serving.next.as_deref().unwrap_or("-")
    );
    let mut i = 0usize;
    while Instant::now() < until {
        let k = i % acknowledged.len();
        let key = format!("demo:{k}");
        let result = if i.is_multiple_of(2) {
            let version = acknowledged[k] + 1;
            set(p, servers, &key, version.to_string().as_bytes())
                .await
                .map(|()| {
                    acknowledged[k] = version;
                    writes += 1;
                })
        } else {
            get(p, servers, &key).await.map(|v| {
                reads += 1;
                let got: u64 = v
                    .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
                    .unwrap_or(0);
                if got < acknowledged[k] {
                    stale += 1;
                    println!("STALE {key}: read {got}, {} acknowledged", acknowledged[k]);
                }
            })
        };
        if let Err(e) = result {
            if e.downcast_ref::<shardring_etcd::Fenced>().is_some() {
                fenced += 1;
            } else {
                errors += 1;
                servers.reset();
            }
        }
        let now = p.registration();
        if (&now.current, &now.next) != (&serving.current, &serving.next) {
            serving = now;
            println!(
                "serving {} (next {}); reads {reads}, writes {writes}, fenced {fenced}, errors {errors}, stale {stale}",
                serving.current,
                serving.next.as_deref().unwrap_or("-")
            );
        }
        i += 1;
        if i.is_multiple_of(200) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    println!("reads {reads}, writes {writes}, fenced {fenced}, errors {errors}, stale {stale}");
}
