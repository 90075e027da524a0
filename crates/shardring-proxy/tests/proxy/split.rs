//! Split keys (`--hot-key-split`) against real memcached servers, through two proxies at once: a
//! split key's reads spread over its copies, a read after an acknowledged write through either proxy
//! never returns the value before it, copies left from an earlier split are never read, and a copy
//! that cannot be deleted fails the write.

use shardring_proxy::config::{ProxyConfig, SplitConfig};
use shardring_proxy::PoolConfig;
use test_support::{memcacheds, Memcached};

use crate::common::{pool_config, Client, RunningProxy};

/// How many servers hold a split key here.
const COPIES: usize = 3;

/// The pool over `servers` splitting the keys `text` lists.
fn config(servers: &[Memcached], text: &str) -> PoolConfig {
    let mut c = pool_config(servers);
    c.remedies.split = Some(SplitConfig::parse(COPIES, text).expect("a valid split file"));
    c
}

/// Reloads `proxy` with the split keys `text` lists.
fn split(proxy: &RunningProxy, servers: &[Memcached], text: &str) {
    proxy
        .proxy
        .reload(ProxyConfig {
            pools: vec![config(servers, text)],
        })
        .expect("reload");
}

/// The value `get key` reads through `c` (`None`: a miss).
async fn get(c: &mut Client, key: &str) -> Option<String> {
    c.send(format!("get {key}\r\n").as_bytes()).await;
    let line = c.read_line().await;
    if line == "END\r\n" {
        return None;
    }
    assert!(line.starts_with("VALUE "), "{line:?}");
    let len: usize = line.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    let data = c.read_n(len + 2).await;
    assert_eq!(c.read_line().await, "END\r\n");
    Some(String::from_utf8_lossy(&data[..len]).into_owned())
}

/// `set key value` through `c`, answered `STORED`.
async fn set(c: &mut Client, key: &str, value: &str) {
    let req = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
    c.check(req.as_bytes(), b"STORED\r\n").await;
}

/// Each server's `cmd_get`.
async fn gets_per_server(servers: &[Memcached]) -> Vec<u64> {
    let mut out = Vec::new();
    for s in servers {
        let mut c = Client::connect(&s.addr).await;
        c.send(b"stats\r\n").await;
        let mut gets = 0;
        loop {
            let line = c.read_line().await;
            if let Some(n) = line.strip_prefix("STAT cmd_get ") {
                gets = n.trim_end().parse().unwrap();
            }
            if line == "END\r\n" {
                break;
            }
        }
        out.push(gets);
    }
    out
}

/// How many of `servers` hold `key`, asked directly.
async fn holders(servers: &[Memcached], key: &str) -> usize {
    let mut n = 0;
    for s in servers {
        n += usize::from(holds(s, key).await.is_some());
    }
    n
}

/// Whether server `s` holds `key`, asked directly.
async fn holds(s: &Memcached, key: &str) -> Option<String> {
    let mut c = Client::connect(&s.addr).await;
    get(&mut c, key).await
}

#[tokio::test]
async fn a_split_keys_reads_spread_over_its_copies_and_never_read_a_value_older_than_the_last_write(
) {
    let servers = memcacheds(5);
    let keys: Vec<String> = (0..6).map(|i| format!("hot:{i}")).collect();
    let write: String = keys.iter().map(|k| format!("write {k}\n")).collect();
    let read: String = keys.iter().map(|k| format!("read {k}\n")).collect();
    // Two proxies, as every proxy of a pool would: `write` on both before `read` on either.
    let a = RunningProxy::start(config(&servers, &write)).await;
    let b = RunningProxy::start(config(&servers, &write)).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    for k in &keys {
        set(&mut ca, k, "v0").await;
    }
    split(&a, &servers, &read);
    split(&b, &servers, &read);
    let before = gets_per_server(&servers).await;
    let mut stale = Vec::new();
    for round in 1..=40 {
        for (i, k) in keys.iter().enumerate() {
            let value = format!("v{round}");
            // The writer alternates between the proxies; every read through both must see it.
            if (round + i) % 2 == 0 {
                set(&mut ca, k, &value).await;
            } else {
                set(&mut cb, k, &value).await;
            }
            for _ in 0..COPIES {
                for c in [&mut ca, &mut cb] {
                    let got = get(c, k).await;
                    if got.as_deref() != Some(value.as_str()) {
                        stale.push(format!("{k}: wrote {value}, read {got:?}"));
                    }
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "{} stale reads: {:?}",
        stale.len(),
        &stale[..stale.len().min(10)]
    );
    // The reads went to three servers a key, not one.
    let after = gets_per_server(&servers).await;
    let served: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let busy = served.iter().filter(|&&n| n > 0).count();
    assert!(busy >= COPIES, "reads per server: {served:?}");
    let views = a.proxy.views();
    let stats = &views[0].pool;
    assert!(stats.split_reads.get() > 0, "no read went to a copy");
    assert!(stats.split_fills.get() > 0, "no copy was filled");
    assert!(stats.split_invalidations.get() > 0, "no copy was deleted");
    assert_eq!(stats.split_invalidations_failed.get(), 0);
    // The stats say which split keys each proxy serves: the same on both.
    let (da, db) = (
        a.proxy.views()[0].placements.split.clone(),
        b.proxy.views()[0].placements.split.clone(),
    );
    assert_eq!(da, db);
    assert_eq!(
        da,
        SplitConfig::parse(COPIES, &read).unwrap().digest(),
        "the digest of the file"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn copies_left_from_an_earlier_split_are_deleted_before_a_proxy_reads_them() {
    let servers = memcacheds(5);
    let key = "news:1";
    let p = RunningProxy::start(config(&servers, &format!("write {key}\n"))).await;
    let mut c = p.client().await;
    set(&mut c, key, "old").await;
    split(&p, &servers, &format!("read {key}\n"));
    // Reads fill the copies with "old".
    for _ in 0..10 {
        assert_eq!(get(&mut c, key).await.as_deref(), Some("old"));
    }
    let held = {
        let mut n = 0;
        for s in &servers {
            n += usize::from(holds(s, key).await.as_deref() == Some("old"));
        }
        n
    };
    assert_eq!(held, COPIES, "the owner and both copies hold the value");
    // The owner's value has no TTL; its copies live at most a minute.
    let mut ttls = Vec::new();
    for s in &servers {
        let mut d = Client::connect(&s.addr).await;
        d.send(format!("mg {key} t\r\n").as_bytes()).await;
        ttls.push(d.read_line().await);
    }
    assert_eq!(
        ttls.iter().filter(|t| *t == "HD t-1\r\n").count(),
        1,
        "{ttls:?}"
    );
    let capped = ttls.iter().filter(|t| {
        t.strip_prefix("HD t")
            .and_then(|n| n.trim_end().parse::<i64>().ok())
            .is_some_and(|n| (1..=60).contains(&n))
    });
    assert_eq!(capped.count(), COPIES - 1, "{ttls:?}");
    // The key is merged back (`write`, then gone); a write then reaches its owner only, and the
    // copies keep the old value.
    split(&p, &servers, &format!("write {key}\n"));
    split(&p, &servers, "");
    set(&mut c, key, "new").await;
    // Split again: no read may find the old copies.
    split(&p, &servers, &format!("write {key}\n"));
    split(&p, &servers, &format!("read {key}\n"));
    for _ in 0..30 {
        assert_eq!(get(&mut c, key).await.as_deref(), Some("new"));
    }
    p.stop().await;
}

#[tokio::test]
async fn every_command_that_changes_a_split_key_leaves_no_copy_behind() {
    let servers = memcacheds(5);
    let p = RunningProxy::start(config(&servers, "read n\nread s\n")).await;
    let mut c = p.client().await;
    c.check(b"set n 0 0 1\r\n5\r\n", b"STORED\r\n").await;
    set(&mut c, "s", "ab").await;
    // Spread reads fill the copies.
    for _ in 0..6 {
        get(&mut c, "n").await;
        get(&mut c, "s").await;
    }
    // A command, its answer, the key, and what every read of the key then finds.
    type Step<'a> = (&'a [u8], &'a [u8], &'a str, Option<&'a str>);
    let steps: [Step<'_>; 6] = [
        (b"incr n 3\r\n", b"8\r\n", "n", Some("8")),
        (b"append s 0 0 1\r\nc\r\n", b"STORED\r\n", "s", Some("abc")),
        (
            b"prepend s 0 0 1\r\nz\r\n",
            b"STORED\r\n",
            "s",
            Some("zabc"),
        ),
        (b"ms s 2 MS\r\nxy\r\n", b"HD\r\n", "s", Some("xy")),
        (b"decr n 1\r\n", b"7\r\n", "n", Some("7")),
        (b"delete s\r\n", b"DELETED\r\n", "s", None),
    ];
    for (req, answer, key, want) in steps {
        c.check(req, answer).await;
        for _ in 0..2 * COPIES {
            assert_eq!(
                get(&mut c, key).await.as_deref(),
                want,
                "after {}",
                String::from_utf8_lossy(req)
            );
        }
    }
    // A `gets` reads the owner's CAS value, which a `cas` then matches.
    c.send(b"gets n\r\n").await;
    let line = c.read_line().await;
    let cas = line.trim_end().rsplit(' ').next().unwrap().to_owned();
    c.read_n(3).await;
    assert_eq!(c.read_line().await, "END\r\n");
    c.check(
        format!("cas n 0 0 2 {cas}\r\n42\r\n").as_bytes(),
        b"STORED\r\n",
    )
    .await;
    for _ in 0..2 * COPIES {
        assert_eq!(get(&mut c, "n").await.as_deref(), Some("42"));
    }
    p.stop().await;
}

#[tokio::test]
async fn a_copy_that_cannot_be_deleted_fails_the_write_and_noreply_stays_silent() {
    let mut servers = memcacheds(4);
    let key = "k";
    let p = RunningProxy::start(config(&servers, &format!("write {key}\n"))).await;
    let mut c = p.client().await;
    set(&mut c, key, "1").await;
    // In the `write` phase only the owner holds it; spread reads then fill the copies.
    let mut owner = None;
    for (i, s) in servers.iter().enumerate() {
        if holds(s, key).await.is_some() {
            owner = Some(i);
        }
    }
    let owner = owner.expect("the owner holds the key");
    split(&p, &servers, &format!("read {key}\n"));
    for _ in 0..6 {
        get(&mut c, key).await;
    }
    let mut copy = None;
    for (i, s) in servers.iter().enumerate() {
        if i != owner && holds(s, key).await.is_some() {
            copy = Some(i);
        }
    }
    let copy = copy.expect("a copy was filled");
    servers[copy].kill();
    c.send(format!("set {key} 0 0 1\r\n2\r\n").as_bytes()).await;
    let line = c.read_line().await;
    assert!(
        line.starts_with("SERVER_ERROR split key's copy on ") && line.contains(&servers[copy].addr),
        "{line:?}"
    );
    // The owner took the write.
    assert_eq!(holds(&servers[owner], key).await.as_deref(), Some("2"));
    // noreply: nothing on the wire, the next command answers.
    c.send(format!("set {key} 0 0 1 noreply\r\n3\r\n").as_bytes())
        .await;
    c.check(b"mn\r\n", b"MN\r\n").await;
    assert!(p.proxy.views()[0].pool.split_invalidations_failed.get() >= 2);
    p.stop().await;
}

#[tokio::test]
async fn with_replicas_a_split_key_is_written_to_its_replicas_and_read_from_the_owner_and_the_copies_after_them(
) {
    // Two replicas, a key split over 3: the owner and its replica take every write, the ring's
    // next two servers after them are the copies; the reads go to the owner and the copies.
    let servers = memcacheds(6);
    let key = "hot:replicated";
    let with = |text: &str| {
        let mut c = config(&servers, text);
        c.remedies.replicas = 2;
        c
    };
    let a = RunningProxy::start(with(&format!("write {key}\n"))).await;
    let b = RunningProxy::start(with(&format!("write {key}\n"))).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    set(&mut ca, key, "v0").await;
    let mut replicas = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        if holds(s, key).await.is_some() {
            replicas.push(i);
        }
    }
    assert_eq!(replicas.len(), 2, "written to both replicas");
    for p in [&a, &b] {
        p.proxy
            .reload(ProxyConfig {
                pools: vec![with(&format!("read {key}\n"))],
            })
            .expect("reload");
    }
    let before = gets_per_server(&servers).await;
    let mut stale = Vec::new();
    for round in 1..=30 {
        let value = format!("v{round}");
        set(if round % 2 == 0 { &mut ca } else { &mut cb }, key, &value).await;
        for _ in 0..2 * COPIES {
            for c in [&mut ca, &mut cb] {
                let got = get(c, key).await;
                if got.as_deref() != Some(value.as_str()) {
                    stale.push(format!("wrote {value}, read {got:?}"));
                }
            }
        }
    }
    assert!(stale.is_empty(), "{} stale reads: {stale:?}", stale.len());
    let after = gets_per_server(&servers).await;
    let served: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let mut holders = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        if let Some(v) = holds(s, key).await {
            assert_eq!(v, "v30", "server {i} holds an old value");
            holders.push(i);
        }
    }
    // Both replicas have every write; the two copies were filled from the owner.
    assert!(replicas.iter().all(|r| holders.contains(r)), "{holders:?}");
    assert_eq!(holders.len(), 4, "R + S - 1 servers hold it: {holders:?}");
    let copies: Vec<usize> = holders
        .iter()
        .copied()
        .filter(|h| !replicas.contains(h))
        .collect();
    assert!(copies.iter().all(|&c| served[c] > 0), "{served:?}");
    // Of the replicas, the owner alone is read (the other is where a read goes when it fails).
    assert_eq!(
        replicas.iter().filter(|&&r| served[r] > 0).count(),
        1,
        "reads per server {served:?}, replicas {replicas:?}"
    );
    // Nothing else is read.
    assert!(
        (0..servers.len())
            .filter(|i| !holders.contains(i))
            .all(|i| served[i] == 0),
        "{served:?}"
    );
    a.stop().await;
    b.stop().await;
}

/// A multi-key `gat`/`gats` changes the TTL of every key it names on its owner: the copies of the
/// split ones are deleted before it is answered (a copy would outlive the owner's new TTL).
#[tokio::test]
async fn a_multi_key_gat_deletes_the_copies_of_the_split_keys_it_names() {
    let servers = memcacheds(5);
    let p = RunningProxy::start(config(&servers, "read n\n")).await;
    let mut c = p.client().await;
    set(&mut c, "n", "nv").await;
    set(&mut c, "plain", "pv").await;
    for kind in ["gat", "gats"] {
        // Spread reads fill the copies.
        for _ in 0..4 * COPIES {
            assert_eq!(get(&mut c, "n").await.as_deref(), Some("nv"));
        }
        assert_eq!(
            holders(&servers, "n").await,
            COPIES,
            "the copies are filled"
        );
        c.send(format!("{kind} 1 plain n\r\n").as_bytes()).await;
        let mut lines = Vec::new();
        loop {
            let line = c.read_line().await;
            if line == "END\r\n" {
                break;
            }
            lines.push(line);
        }
        assert_eq!(lines.len(), 4, "two values: {lines:?}");
        assert_eq!(
            holders(&servers, "n").await,
            1,
            "{kind}: only the owner holds n"
        );
    }
    // The owner's TTL is the gat's: gone a second or two later, through every server.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert_eq!(holders(&servers, "n").await, 0);
    assert_eq!(get(&mut c, "n").await, None);
    p.stop().await;
}
