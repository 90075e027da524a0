//! Split keys on redis pools (`--hot-key-split`) against real redis-server backends, through two
//! proxies: a split key's `GET`s spread over its copies (filled from the owner with the TTL), a read
//! after an acknowledged write through either proxy never returns the value before it (`SET`,
//! `INCR`, `APPEND`, `DEL`, `MSET`, `EXPIRE`), other reads (`HGETALL`, `LRANGE`, …) spread too,
//! over copies of the key's own type, leftovers of an earlier split are never read, a
//! transaction or a blocking command that writes a split key is refused, a RESP3 client's miss is
//! RESP3's null.

use shardring_proxy::config::{ProxyConfig, SplitConfig};
use shardring_proxy::PoolConfig;
use test_support::redis::{bulk, redises, RedisServer};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmds, direct, pool, read_replies};

/// How many servers hold a split key here.
const COPIES: usize = 3;

/// The pool over `servers` splitting the keys `text` lists.
fn config(servers: &[RedisServer], text: &str) -> PoolConfig {
    let mut c = pool(servers, "");
    c.remedies.split = Some(SplitConfig::parse(COPIES, text).expect("a valid split file"));
    c
}

/// Reloads `proxy` (started with `base`) with the split keys `text` lists.
fn split(proxy: &RunningProxy, base: &PoolConfig, text: &str) {
    let mut pool = base.clone();
    pool.remedies.split = Some(SplitConfig::parse(COPIES, text).expect("a valid split file"));
    proxy
        .proxy
        .reload(ProxyConfig { pools: vec![pool] })
        .expect("reload");
}

/// How many of `servers` hold `key`, and with which values.
async fn held(servers: &[RedisServer], key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for s in servers {
        let v = cmds(&mut direct(s).await, &["GET", key]).await;
        if v != "$-1\r\n" {
            out.push(v);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_keys_gets_spread_and_never_read_a_value_older_than_the_last_write() {
    let Some(servers) = redises(5, &[]) else {
        return;
    };
    let key = "hot:redis";
    let (base_a, base_b) = (
        config(&servers, &format!("write {key}\n")),
        config(&servers, &format!("write {key}\n")),
    );
    let a = RunningProxy::start(base_a.clone()).await;
    let b = RunningProxy::start(base_b.clone()).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    assert_eq!(
        cmds(&mut ca, &["SET", key, "v0", "PX", "60000"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        held(&servers, key).await.len(),
        1,
        "write phase: the owner alone"
    );
    split(&a, &base_a, &format!("read {key}\n"));
    split(&b, &base_b, &format!("read {key}\n"));
    for _ in 0..2 * COPIES {
        for c in [&mut ca, &mut cb] {
            assert_eq!(cmds(c, &["GET", key]).await, bulk("v0"));
        }
    }
    assert_eq!(
        held(&servers, key).await,
        vec![bulk("v0"); COPIES],
        "filled copies"
    );
    // The fill kept the TTL.
    let mut ttls = Vec::new();
    for s in &servers {
        let t = cmds(&mut direct(s).await, &["PTTL", key]).await;
        if t != ":-2\r\n" {
            ttls.push(t);
        }
    }
    assert!(
        ttls.iter()
            .all(|t| t.trim_start_matches(':').trim_end().parse::<i64>().unwrap() > 50_000),
        "{ttls:?}"
    );
    // Writes of every kind through one proxy, reads through both.
    type Step<'a> = (&'a [&'a str], &'a str, Option<&'a str>);
    let steps: [Step<'_>; 7] = [
        (&["SET", key, "1"], "+OK\r\n", Some("1")),
        (&["INCR", key], ":2\r\n", Some("2")),
        (&["APPEND", key, "x"], ":2\r\n", Some("2x")),
        (&["MSET", key, "m", "other", "o"], "+OK\r\n", Some("m")),
        (&["SET", key, "e"], "+OK\r\n", Some("e")),
        (&["DEL", key], ":1\r\n", None),
        (&["SET", key, "last"], "+OK\r\n", Some("last")),
    ];
    for (n, (command, answer, want)) in steps.iter().enumerate() {
        let writer = if n % 2 == 0 { &mut ca } else { &mut cb };
        assert_eq!(cmds(writer, command).await, *answer, "{command:?}");
        for _ in 0..2 * COPIES {
            for c in [&mut ca, &mut cb] {
                let got = cmds(c, &["GET", key]).await;
                let expected = want.map_or_else(|| "$-1\r\n".to_owned(), bulk);
                assert_eq!(got, expected, "after {command:?}");
            }
        }
    }
    // A pipelined write then read on one connection reads the write.
    for i in 0..20 {
        let v = format!("p{i}");
        let req = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{v}\r\n*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n",
            key.len(),
            v.len(),
            key.len()
        );
        ca.send(req.as_bytes()).await;
        let replies = read_replies(&mut ca, 2).await;
        assert_eq!(replies[1], bulk(&v).into_bytes(), "pipelined read of {v}");
    }
    let stats = &a.proxy.views()[0].pool;
    assert!(stats.split_reads.get() > 0 && stats.split_fills.get() > 0);
    assert_eq!(stats.split_invalidations_failed.get(), 0);
    a.stop().await;
    b.stop().await;
}

/// How many of `servers` hold `key` (of any type).
async fn holders(servers: &[RedisServer], key: &str) -> usize {
    let mut n = 0;
    for s in servers {
        if cmds(&mut direct(s).await, &["EXISTS", key]).await == ":1\r\n" {
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_keys_other_reads_spread_whatever_its_type_and_never_read_a_value_older_than_the_last_write(
) {
    let Some(servers) = redises(5, &[]) else {
        return;
    };
    let (hash, list) = ("hot:hash", "hot:list");
    let text = format!("write {hash}\nwrite {list}\n");
    let (base_a, base_b) = (config(&servers, &text), config(&servers, &text));
    let a = RunningProxy::start(base_a.clone()).await;
    let b = RunningProxy::start(base_b.clone()).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    assert_eq!(
        cmds(&mut ca, &["HSET", hash, "f1", "v1", "f2", "v2"]).await,
        ":2\r\n"
    );
    assert_eq!(cmds(&mut ca, &["PEXPIRE", hash, "60000"]).await, ":1\r\n");
    assert_eq!(
        cmds(&mut ca, &["RPUSH", list, "a", "b", "c"]).await,
        ":3\r\n"
    );
    split(&a, &base_a, &format!("read {hash}\nread {list}\n"));
    split(&b, &base_b, &format!("read {hash}\nread {list}\n"));
    let all = format!(
        "*4\r\n{}{}{}{}",
        bulk("f1"),
        bulk("v1"),
        bulk("f2"),
        bulk("v2")
    );
    let abc = format!("*3\r\n{}{}{}", bulk("a"), bulk("b"), bulk("c"));
    // One command a loop: the proxy's turns over the owner and the copies are shared by its split
    // keys, so a fixed mix of reads per loop could keep meeting the same servers.
    let reads: [(&[&str], String); 6] = [
        (&["HGETALL", hash], all),
        (&["HGET", hash, "f1"], bulk("v1")),
        // What a copy not filled would also say: the owner's answer.
        (&["HGET", hash, "none"], "$-1\r\n".to_owned()),
        (&["HMGET", hash, "none"], "*1\r\n$-1\r\n".to_owned()),
        (&["LRANGE", list, "0", "-1"], abc),
        (&["LLEN", list], ":3\r\n".to_owned()),
    ];
    for (read, want) in &reads {
        for _ in 0..3 * COPIES {
            for c in [&mut ca, &mut cb] {
                assert_eq!(cmds(c, read).await, *want, "{read:?}");
            }
        }
    }
    // The reads filled the copies, of the keys' own types, the hash's with its TTL.
    assert_eq!(holders(&servers, hash).await, COPIES, "the hash's copies");
    assert_eq!(holders(&servers, list).await, COPIES, "the list's copies");
    for s in &servers {
        let t = cmds(&mut direct(s).await, &["PTTL", hash]).await;
        let ms: i64 = t.trim_start_matches(':').trim_end().parse().unwrap();
        assert!(ms == -2 || (50_000..=60_000).contains(&ms), "{t}");
    }
    // A reply that could be a miss (a field the hash lacks) from a copy that holds the key: the
    // owner answers, and the copy is not filled again (no `DUMP` of the whole key per such read).
    let fills = a.proxy.views()[0].pool.split_fills.get();
    for _ in 0..3 * COPIES {
        assert_eq!(cmds(&mut ca, &["HGET", hash, "none"]).await, "$-1\r\n");
    }
    assert_eq!(
        a.proxy.views()[0].pool.split_fills.get(),
        fills,
        "fills of held copies"
    );
    // `TTL` reads the owner: a copy's may be shorter, never longer, but the owner's has no cap.
    assert_eq!(cmds(&mut ca, &["PERSIST", hash]).await, ":1\r\n");
    for c in [&mut ca, &mut cb] {
        assert_eq!(cmds(c, &["TTL", hash]).await, ":-1\r\n");
    }
    // Writes through one proxy, reads through both: never the value before the write.
    type Step<'a> = (&'a [&'a str], &'a [&'a str], String);
    let steps: [Step<'_>; 5] = [
        (
            &["HSET", hash, "f1", "w1"],
            &["HGET", hash, "f1"],
            bulk("w1"),
        ),
        (
            &["HDEL", hash, "f2"],
            &["HGETALL", hash],
            format!("*2\r\n{}{}", bulk("f1"), bulk("w1")),
        ),
        (&["DEL", hash], &["HGETALL", hash], "*0\r\n".to_owned()),
        (
            &["HSET", hash, "f3", "v3"],
            &["HGET", hash, "f3"],
            bulk("v3"),
        ),
        (&["LPUSH", list, "z"], &["LINDEX", list, "0"], bulk("z")),
    ];
    for (n, (write, read, want)) in steps.iter().enumerate() {
        let writer = if n % 2 == 0 { &mut ca } else { &mut cb };
        cmds(writer, write).await;
        for _ in 0..3 * COPIES {
            for c in [&mut ca, &mut cb] {
                assert_eq!(cmds(c, read).await, *want, "after {write:?}");
            }
        }
    }
    // A RESP3 client's read of a missing hash: RESP3's empty map, from the owner.
    let mut r3 = Client::connect(&a.addr).await;
    assert!(cmds(&mut r3, &["HELLO", "3"]).await.starts_with('%'));
    assert_eq!(cmds(&mut r3, &["DEL", hash]).await, ":1\r\n");
    for _ in 0..2 * COPIES {
        assert_eq!(cmds(&mut r3, &["HGETALL", hash]).await, "%0\r\n");
    }
    let stats = &a.proxy.views()[0].pool;
    assert!(stats.split_reads.get() > 0 && stats.split_fills.get() > 0);
    assert_eq!(stats.split_invalidations_failed.get(), 0);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_are_never_read_and_transactions_and_blocking_writes_of_a_split_key_are_refused()
{
    let Some(servers) = redises(4, &[]) else {
        return;
    };
    let key = "news";
    let base = config(&servers, &format!("write {key}\n"));
    let p = RunningProxy::start(base.clone()).await;
    let mut c = p.client().await;
    assert_eq!(cmds(&mut c, &["SET", key, "old"]).await, "+OK\r\n");
    split(&p, &base, &format!("read {key}\n"));
    for _ in 0..2 * COPIES {
        assert_eq!(cmds(&mut c, &["GET", key]).await, bulk("old"));
    }
    // The owner's value has no TTL; its copies live at most a minute.
    let mut ttls = Vec::new();
    for s in &servers {
        ttls.push(cmds(&mut direct(s).await, &["PTTL", key]).await);
    }
    assert_eq!(
        ttls.iter().filter(|t| *t == ":-1\r\n").count(),
        1,
        "{ttls:?}"
    );
    assert_eq!(
        ttls.iter()
            .filter(|t| {
                let ms: i64 = t.trim_start_matches(':').trim_end().parse().unwrap();
                (1..=60_000).contains(&ms)
            })
            .count(),
        COPIES - 1,
        "{ttls:?}"
    );
    split(&p, &base, &format!("write {key}\n"));
    split(&p, &base, "");
    assert_eq!(cmds(&mut c, &["SET", key, "new"]).await, "+OK\r\n");
    split(&p, &base, &format!("write {key}\n"));
    split(&p, &base, &format!("read {key}\n"));
    for _ in 0..4 * COPIES {
        assert_eq!(cmds(&mut c, &["GET", key]).await, bulk("new"));
    }
    // A transaction that writes it: refused, discarded.
    assert_eq!(cmds(&mut c, &["MULTI"]).await, "+OK\r\n");
    assert!(cmds(&mut c, &["SET", key, "t"])
        .await
        .starts_with("-ERR a key this command writes is split"));
    assert!(cmds(&mut c, &["EXEC"]).await.starts_with("-EXECABORT"));
    // One that only reads it goes through.
    assert_eq!(cmds(&mut c, &["MULTI"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["GET", key]).await, "+QUEUED\r\n");
    assert_eq!(
        cmds(&mut c, &["EXEC"]).await,
        format!("*1\r\n{}", bulk("new"))
    );
    // A blocking write of a split key.
    assert!(cmds(&mut c, &["BLPOP", key, "1"])
        .await
        .starts_with("-ERR a key this command writes is split"));
    // A RESP3 client's miss is RESP3's null.
    let mut r3 = Client::connect(&p.addr).await;
    assert!(cmds(&mut r3, &["HELLO", "3"]).await.starts_with('%'));
    assert_eq!(cmds(&mut r3, &["DEL", key]).await, ":1\r\n");
    for _ in 0..2 * COPIES {
        assert_eq!(cmds(&mut r3, &["GET", key]).await, "_\r\n");
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicas_a_split_keys_copies_follow_its_replicas_and_never_read_a_value_older_than_the_last_write(
) {
    let Some(servers) = redises(6, &[]) else {
        return;
    };
    let key = "hot:replicated";
    let with = |text: &str| {
        let mut c = config(&servers, text);
        c.remedies.replicas = 2;
        c
    };
    let (base_a, base_b) = (
        with(&format!("write {key}\n")),
        with(&format!("write {key}\n")),
    );
    let a = RunningProxy::start(base_a.clone()).await;
    let b = RunningProxy::start(base_b.clone()).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    assert_eq!(cmds(&mut ca, &["SET", key, "v0"]).await, "+OK\r\n");
    assert_eq!(
        held(&servers, key).await,
        vec![bulk("v0"); 2],
        "both replicas"
    );
    split(&a, &base_a, &format!("read {key}\n"));
    split(&b, &base_b, &format!("read {key}\n"));
    let mut stale = Vec::new();
    for round in 1..=20 {
        let value = format!("v{round}");
        let (writer, command): (&mut Client, &[&str]) = match round % 4 {
            0 => (&mut ca, &["SET", key, &value]),
            1 => (&mut cb, &["MSET", key, &value, "other", "o"]),
            2 => (&mut ca, &["SET", key, &value, "PX", "60000"]),
            _ => (&mut cb, &["SET", key, &value]),
        };
        assert_eq!(cmds(writer, command).await, "+OK\r\n", "{command:?}");
        for _ in 0..2 * COPIES {
            for c in [&mut ca, &mut cb] {
                let got = cmds(c, &["GET", key]).await;
                if got != bulk(&value) {
                    stale.push(format!("wrote {value}, read {got:?}"));
                }
            }
        }
    }
    assert!(stale.is_empty(), "{} stale reads: {stale:?}", stale.len());
    // The replicas have every write, the two copies after them were filled: R + S - 1 servers.
    assert_eq!(held(&servers, key).await, vec![bulk("v20"); 4]);
    assert_eq!(cmds(&mut cb, &["DEL", key]).await, ":1\r\n");
    for _ in 0..2 * COPIES {
        assert_eq!(cmds(&mut ca, &["GET", key]).await, "$-1\r\n");
    }
    assert!(held(&servers, key).await.is_empty());
    a.stop().await;
    b.stop().await;
}
