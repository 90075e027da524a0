//! The Redis engine against real redis-servers (skipped when redis-server is not installed, outside
//! CI). The route: keys whose last byte is an even digit move to target 0, the others stay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardring_migrate::redis::conn::{Conn, Pipeline};
use shardring_migrate::redis::Value;
use shardring_migrate::redis::{self, Transfer};
use shardring_migrate::{Endpoint, Job, MigrateError, Report, Route};
use test_support::RedisServer;

fn even_moves() -> Route {
    Arc::new(|k: &[u8]| match k.last() {
        Some(b'0' | b'2' | b'4' | b'6' | b'8') => Some(0),
        _ => None,
    })
}

fn ep(s: &RedisServer, auth: Option<&str>, db: u32) -> Endpoint {
    Endpoint {
        addr: s.addr.clone(),
        name: s.addr.clone(),
        auth: auth.map(str::to_string),
        db,
    }
}

fn job(src: Endpoint, dst: Endpoint) -> Job {
    Job::new(src, vec![dst], even_moves())
}

async fn conn(ep: &Endpoint) -> Conn {
    Conn::connect(ep, Duration::from_secs(5)).await.unwrap()
}

async fn cmd(c: &mut Conn, args: &[&str]) -> Value {
    let r = c.call(args).await.unwrap();
    let shown: Vec<&str> = args.iter().map(|a| &a[..a.len().min(40)]).collect();
    assert!(r.error().is_none(), "{shown:?}: {r:?}");
    r
}

/// Runs `work` on a thread and runtime of its own, so a copy under test never starves it of turns.
fn on_own_runtime(
    work: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
}

fn servers(extra: &[&str]) -> Option<(RedisServer, RedisServer)> {
    Some((RedisServer::start(extra)?, RedisServer::start(extra)?))
}

/// The key's type and contents in a comparable form, and its PTTL.
async fn value(c: &mut Conn, key: &str) -> (String, i64) {
    let ty = cmd(c, &["TYPE", key]).await;
    let ty = String::from_utf8_lossy(ty.bytes().unwrap()).into_owned();
    let mut content = match ty.as_str() {
        "string" => format!("{:?}", cmd(c, &["GET", key]).await),
        "list" => format!("{:?}", cmd(c, &["LRANGE", key, "0", "-1"]).await),
        "zset" => format!(
            "{:?}",
            cmd(c, &["ZRANGE", key, "0", "-1", "WITHSCORES"]).await
        ),
        "stream" => format!("{:?}", cmd(c, &["XRANGE", key, "-", "+"]).await),
        "hash" | "set" => {
            let r = cmd(c, &[if ty == "hash" { "HGETALL" } else { "SMEMBERS" }, key]).await;
            let Value::Array(items) = r else { panic!() };
            let mut items: Vec<String> = if ty == "hash" {
                items.chunks(2).map(|p| format!("{p:?}")).collect()
            } else {
                items.iter().map(|i| format!("{i:?}")).collect()
            };
            items.sort();
            items.join(",")
        }
        "none" => String::new(),
        other => panic!("type {other}"),
    };
    content.insert_str(0, &format!("{ty}:"));
    let pttl = cmd(c, &["PTTL", key]).await.integer().unwrap();
    (content, pttl)
}

async fn assert_same(src: &mut Conn, dst: &mut Conn, key: &str) {
    let (a, at) = value(src, key).await;
    let (b, bt) = value(dst, key).await;
    assert_eq!(a, b, "{key}");
    assert!(!a.ends_with(':'), "{key} exists on the source");
    if at < 0 || bt < 0 {
        assert_eq!(at, bt, "{key}: PTTL");
    } else {
        assert!((at - bt).abs() <= 2000, "{key}: PTTL {at} vs {bt}");
    }
}

/// How many `DUMP`s the server ran since its statistics were reset (`INFO commandstats`).
async fn dump_calls(c: &mut Conn) -> u64 {
    let info = cmd(c, &["INFO", "commandstats"]).await;
    let Value::Bulk(text) = info else {
        panic!("INFO: {info:?}")
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_dump:calls="))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap_or("0").parse().unwrap()
        })
}

async fn exists(c: &mut Conn, key: &str) -> bool {
    cmd(c, &["EXISTS", key]).await.integer() == Some(1)
}

/// One key of every type, each with (`…:t0`) and without (`…:n2`) an expiry, plus keys that stay.
async fn fill_every_type(c: &mut Conn) -> Vec<String> {
    let mut moving = Vec::new();
    for (suffix, ttl) in [("t0", true), ("n2", false)] {
        let k = |ty: &str| format!("{ty}:{suffix}");
        cmd(c, &["SET", &k("string"), "hello world"]).await;
        cmd(c, &["HSET", &k("hash"), "a", "1", "b", "2", "c", "3"]).await;
        cmd(c, &["RPUSH", &k("list"), "x", "y", "z", "x"]).await;
        cmd(c, &["SADD", &k("set"), "m1", "m2", "m3"]).await;
        cmd(c, &["ZADD", &k("zset"), "1.5", "a", "2", "b", "-3", "c"]).await;
        cmd(c, &["XADD", &k("stream"), "1-1", "f", "v"]).await;
        cmd(c, &["XADD", &k("stream"), "2-1", "f", "w", "g", "x"]).await;
        cmd(c, &["XGROUP", "CREATE", &k("stream"), "grp", "0"]).await;
        cmd(c, &["SET", &format!("{{user1}}:a{suffix}"), "tagged"]).await;
        for ty in ["string", "hash", "list", "set", "zset", "stream"] {
            if ttl {
                cmd(c, &["PEXPIRE", &k(ty), "600000"]).await;
            }
            moving.push(k(ty));
        }
        moving.push(format!("{{user1}}:a{suffix}"));
    }
    for i in [1, 3, 5] {
        cmd(c, &["SET", &format!("stay{i}"), "here"]).await;
    }
    moving
}

#[tokio::test]
async fn every_type_arrives_equal_with_its_ttl_and_keys_that_stay_do_not() {
    for transfer in [Transfer::Migrate, Transfer::DumpRestore] {
        let Some((a, b)) = servers(&[]) else { return };
        let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
        let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
        let moving = fill_every_type(&mut ca).await;
        cmd(&mut cb, &["CONFIG", "RESETSTAT"]).await;
        let r = redis::copy_with(&job(sa.clone(), sb.clone()), transfer)
            .await
            .unwrap();
        assert_eq!(r.moving, moving.len() as u64, "{transfer:?} {r:?}");
        // DUMP/RESTORE's first pass restores without reading the target first: its only reading
        // is the one once the copy has settled (`copy::SETTLE`), one DUMP a key. MIGRATE's reads
        // it before too.
        let reads = if transfer == Transfer::DumpRestore {
            1
        } else {
            2
        };
        assert_eq!(
            dump_calls(&mut cb).await,
            reads * moving.len() as u64,
            "{transfer:?}"
        );
        assert_eq!(r.copied, moving.len() as u64, "{transfer:?} {r:?}");
        assert_eq!((r.failed, r.gone, r.skipped), (0, 0, 0), "{r:?}");
        assert_eq!(r.scanned, moving.len() as u64 + 3);
        assert!(r.bytes > 0);
        for k in &moving {
            assert_same(&mut ca, &mut cb, k).await;
        }
        assert!(cmd(&mut cb, &["PTTL", "hash:t0"]).await.integer().unwrap() > 590_000);
        let groups = cmd(&mut cb, &["XINFO", "GROUPS", "stream:t0"]).await;
        assert!(format!("{groups:?}").contains("\"grp\""), "{groups:?}");
        for i in [1, 3, 5] {
            assert!(!exists(&mut cb, &format!("stay{i}")).await);
        }
        // The rerun copies nothing.
        let again = redis::copy_with(&job(sa, sb), transfer).await.unwrap();
        assert_eq!(again.skipped, moving.len() as u64, "{again:?}");
        assert_eq!((again.copied, again.recopied, again.failed), (0, 0, 0));
    }
}

#[tokio::test]
async fn a_partial_value_on_the_target_is_replaced_and_a_different_one_recopied_on_rerun() {
    let Some((a, b)) = servers(&[]) else { return };
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
    cmd(&mut ca, &["HSET", "h0", "a", "1", "b", "2", "c", "3"]).await;
    cmd(&mut cb, &["HSET", "h0", "a", "1"]).await;
    cmd(&mut ca, &["RPUSH", "l2", "1", "2", "3"]).await;
    cmd(&mut cb, &["RPUSH", "l2", "3"]).await;
    cmd(&mut ca, &["SET", "n4", "10"]).await;
    cmd(&mut cb, &["INCR", "n4"]).await;
    cmd(&mut ca, &["SET", "same6", "v"]).await;
    cmd(&mut cb, &["SET", "same6", "v"]).await;
    // The same value, a different expiry: copied too.
    cmd(&mut ca, &["SET", "ttl8", "v", "EX", "1000"]).await;
    cmd(&mut cb, &["SET", "ttl8", "v"]).await;
    let r = redis::copy(&job(sa.clone(), sb.clone())).await.unwrap();
    assert_eq!(
        (r.moving, r.copied, r.skipped, r.failed),
        (5, 4, 1, 0),
        "{r:?}"
    );
    for k in ["h0", "l2", "n4", "same6", "ttl8"] {
        assert_same(&mut ca, &mut cb, k).await;
    }
    cmd(&mut cb, &["HSET", "h0", "z", "stale"]).await;
    let r = redis::copy(&job(sa, sb)).await.unwrap();
    assert_eq!((r.copied, r.skipped), (1, 4), "{r:?}");
    assert_same(&mut ca, &mut cb, "h0").await;
}

/// A hash that once held a value longer than `hash-max-listpack-value` stays a hashtable on its
/// server once that field is gone;
/// the same fields written afresh, or restored from its dump, are a listpack: two dumps, one value.
/// The verify pass must call them equal (by the canonical digest), not copy them again forever.
#[tokio::test]
async fn one_value_in_two_encodings_is_equal_not_copied_again() {
    for transfer in [Transfer::Migrate, Transfer::DumpRestore] {
        let Some((a, b)) = servers(&[]) else { return };
        let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
        let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
        for key in ["grown0", "fresh2"] {
            let long = "x".repeat(100);
            cmd(
                &mut ca,
                &["HSET", key, "f0", "v", "f1", "v", "f2", "v", "long", &long],
            )
            .await;
            cmd(&mut ca, &["HDEL", key, "long"]).await;
        }
        // On the target already, written afresh (as dual writes would have built it).
        cmd(
            &mut cb,
            &["HSET", "grown0", "f0", "v", "f1", "v", "f2", "v"],
        )
        .await;
        let encoding = |r: Value| String::from_utf8_lossy(r.bytes().unwrap()).into_owned();
        assert_eq!(
            encoding(cmd(&mut ca, &["OBJECT", "ENCODING", "grown0"]).await),
            "hashtable"
        );
        assert_eq!(
            encoding(cmd(&mut cb, &["OBJECT", "ENCODING", "grown0"]).await),
            "listpack"
        );
        let r = redis::copy_with(&job(sa.clone(), sb.clone()), transfer)
            .await
            .unwrap();
        assert_eq!(
            (r.moving, r.skipped, r.copied, r.recopied, r.failed),
            (2, 1, 1, 0, 0),
            "{transfer:?} {r:?}"
        );
        for k in ["grown0", "fresh2"] {
            assert_same(&mut ca, &mut cb, k).await;
        }
        let again = redis::copy_with(&job(sa, sb), transfer).await.unwrap();
        assert_eq!(
            (again.skipped, again.copied),
            (2, 0),
            "{transfer:?} {again:?}"
        );
    }
}

#[tokio::test]
async fn a_key_deleted_on_the_source_during_the_copy_is_removed_from_the_target() {
    let Some((a, b)) = servers(&[]) else { return };
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
    cmd(&mut ca, &["SET", "race0", "v"]).await;
    cmd(&mut ca, &["SET", "keep2", "v"]).await;
    // As if a dual-written DEL reached the source after our scan and the target before our copy,
    // and the copy revived it there: the target holds it, the source no more.
    cmd(&mut cb, &["SET", "race0", "revived"]).await;
    let addr = a.addr.clone();
    let route: Route = Arc::new(move |k: &[u8]| {
        if k == b"race0" {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.write_all(b"*2\r\n$3\r\nDEL\r\n$5\r\nrace0\r\n").unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).unwrap();
        }
        even_moves()(k)
    });
    let r = redis::copy(&Job::new(sa, vec![sb], route)).await.unwrap();
    assert_eq!(
        (r.moving, r.copied, r.gone, r.failed),
        (2, 1, 1, 0),
        "{r:?}"
    );
    assert!(!exists(&mut cb, "race0").await);
    assert!(exists(&mut cb, "keep2").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_write_whose_source_half_lands_after_the_copy_verified_is_copied_before_the_end() {
    for transfer in [Transfer::Migrate, Transfer::DumpRestore] {
        let Some((a, b)) = servers(&[]) else { return };
        let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
        let mut ca = conn(&sa).await;
        cmd(&mut ca, &["HSET", "count0", "a", "1"]).await;
        // The late half of a dual write: an `HINCRBY` whose target half the copy erased (or that
        // had not reached the target yet) reaches the source only once the copy is on the target,
        // as a proxy's does when the source is slow (`MIGRATE` blocks it).
        let (source, target) = (sa.clone(), sb.clone());
        let late = on_own_runtime(async move {
            let (mut cs, mut ct) = (conn(&source).await, conn(&target).await);
            while cmd(&mut ct, &["EXISTS", "count0"]).await != Value::Integer(1) {}
            cmd(&mut cs, &["HINCRBY", "count0", "a", "1"]).await;
        });
        let r = redis::copy_with(&job(sa.clone(), sb.clone()), transfer)
            .await
            .unwrap();
        late.join().unwrap();
        // Equal right after the copy is not done: the key is compared again once it has settled,
        // finds the source's increment, and is copied again before the run ends.
        assert_eq!(
            (r.moving, r.copied, r.failed),
            (1, 1, 0),
            "{transfer:?} {r:?}"
        );
        assert!(r.recopied >= 1, "{transfer:?} {r:?}");
        let mut cb = conn(&sb).await;
        assert_eq!(
            cmd(&mut cb, &["HGET", "count0", "a"]).await,
            Value::Bulk(b"2".to_vec()),
            "{transfer:?}"
        );
    }
}

#[tokio::test]
async fn redis_auth_works_with_migrate_and_dump_restore_and_a_wrong_one_is_an_error() {
    for transfer in [Transfer::Migrate, Transfer::DumpRestore] {
        let Some((a, b)) = servers(&["--requirepass", "pw"]) else {
            return;
        };
        let (sa, sb) = (ep(&a, Some("pw"), 0), ep(&b, Some("pw"), 0));
        let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
        for i in 0..10 {
            cmd(&mut ca, &["SET", &format!("k{i}"), "v"]).await;
        }
        let r = redis::copy_with(&job(sa.clone(), sb.clone()), transfer)
            .await
            .unwrap();
        assert_eq!((r.copied, r.failed), (5, 0), "{transfer:?} {r:?}");
        assert_same(&mut ca, &mut cb, "k4").await;
        assert!(!exists(&mut cb, "k5").await);
        let wrong = ep(&a, Some("nope"), 0);
        let e = redis::copy_with(&job(wrong, sb.clone()), transfer)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("WRONGPASS"), "{e}");
        let none = ep(&a, None, 0);
        let e = redis::survey(&job(none, sb.clone())).await.unwrap_err();
        assert!(e.to_string().contains("NOAUTH"), "{e}");
    }
    // MIGRATE with the target's password wrong: the source's AUTH to it fails, an error.
    let Some((a, b)) = servers(&["--requirepass", "pw"]) else {
        return;
    };
    let (sa, mut sb) = (ep(&a, Some("pw"), 0), ep(&b, Some("pw"), 0));
    let mut ca = conn(&sa).await;
    cmd(&mut ca, &["SET", "k0", "v"]).await;
    sb.auth = Some("nope".into());
    let e = redis::copy(&job(sa, sb)).await.unwrap_err();
    assert!(matches!(e, MigrateError::Protocol { .. }), "{e}");
}

#[tokio::test]
async fn a_database_other_than_0_is_used_on_both_sides() {
    for transfer in [Transfer::Migrate, Transfer::DumpRestore] {
        let Some((a, b)) = servers(&[]) else { return };
        let (sa, sb) = (ep(&a, None, 3), ep(&b, None, 5));
        let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
        let mut c0 = conn(&ep(&a, None, 0)).await;
        cmd(&mut c0, &["SET", "db0key0", "not me"]).await;
        cmd(&mut ca, &["SET", "x0", "v"]).await;
        cmd(&mut ca, &["HSET", "y2", "f", "v"]).await;
        let r = redis::copy_with(&job(sa, sb), transfer).await.unwrap();
        assert_eq!((r.scanned, r.copied), (2, 2), "{r:?}");
        assert_same(&mut ca, &mut cb, "x0").await;
        assert_same(&mut ca, &mut cb, "y2").await;
        let mut t0 = conn(&ep(&b, None, 0)).await;
        assert_eq!(cmd(&mut t0, &["DBSIZE"]).await.integer(), Some(0));
    }
}

#[tokio::test]
async fn survey_counts_moving_keys_and_bytes_and_delete_moved_removes_only_them() {
    let Some((a, b)) = servers(&[]) else { return };
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let mut ca = conn(&sa).await;
    let mut p = Pipeline::new();
    for i in 0..1000 {
        p.cmd(&["SET", &format!("key:{i}"), "0123456789"]);
    }
    ca.run(&p).await.unwrap();
    let mut j = job(sa.clone(), sb.clone());
    j.batch = 64;
    let s = redis::survey(&j).await.unwrap();
    assert_eq!(s.keys, 1000);
    assert_eq!(s.moving, vec![500]);
    assert!(s.moving_bytes[0] >= 500 * 10, "{s:?}");
    let r = redis::delete_moved(&j).await.unwrap();
    assert_eq!(
        (r.scanned, r.moving, r.copied, r.gone),
        (1000, 500, 500, 0),
        "{r:?}"
    );
    assert_eq!(cmd(&mut ca, &["DBSIZE"]).await.integer(), Some(500));
    assert!(exists(&mut ca, "key:1").await);
    assert!(!exists(&mut ca, "key:2").await);
}

#[tokio::test]
async fn an_unreachable_target_is_an_error_naming_it() {
    let Some((a, mut b)) = servers(&[]) else {
        return;
    };
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let mut ca = conn(&sa).await;
    cmd(&mut ca, &["SET", "k0", "v"]).await;
    b.kill();
    let mut j = job(sa, sb);
    j.timeout = Duration::from_secs(2);
    let e = redis::copy(&j).await.unwrap_err();
    assert!(e.to_string().contains(&b.addr), "{e}");
}

async fn throughput(transfer: Transfer, batch: usize) -> (Report, f64) {
    let (a, b) = servers(&[]).unwrap();
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let mut ca = conn(&sa).await;
    let value = "v".repeat(100);
    for chunk in 0..100 {
        let mut p = Pipeline::new();
        for i in 0..1000 {
            p.cmd(&["SET", &format!("key:{chunk}:{i}0"), &value]);
        }
        ca.run(&p).await.unwrap();
    }
    // Every key moves (they all end in 0).
    let mut j = job(sa, sb);
    j.batch = batch;
    let t0 = Instant::now();
    let r = redis::copy_with(&j, transfer).await.unwrap();
    let secs = t0.elapsed().as_secs_f64();
    if std::env::var_os("SHOW_STATS").is_some() {
        for s in [&a, &b] {
            let mut c = conn(&ep(s, None, 0)).await;
            let Value::Bulk(info) = cmd(&mut c, &["INFO", "commandstats"]).await else {
                panic!()
            };
            println!("{}", String::from_utf8_lossy(&info));
        }
    }
    (r, secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_of_100k_small_keys() {
    if RedisServer::start(&[]).is_none() {
        return;
    }
    for (transfer, batch) in [
        (Transfer::Migrate, 100),
        (Transfer::Migrate, 500),
        (Transfer::DumpRestore, 100),
        (Transfer::DumpRestore, 500),
    ] {
        let (r, secs) = throughput(transfer, batch).await;
        assert_eq!((r.copied, r.failed), (100_000, 0), "{r:?}");
        println!(
            "{transfer:?} batch {batch}: 100000 keys of 100 bytes in {secs:.2} s: {:.0} keys/s, \
             {:.1} MB/s of values, {:.1} MB/s counted in `bytes` ({} bytes)",
            100_000.0 / secs,
            100_000.0 * 100.0 / secs / 1e6,
            r.bytes as f64 / secs / 1e6,
            r.bytes
        );
    }
}

#[tokio::test]
async fn keys_the_target_refuses_are_counted_failed_and_the_run_goes_on() {
    for transfer in [Transfer::Migrate, Transfer::DumpRestore] {
        let Some(a) = RedisServer::start(&[]) else {
            return;
        };
        let Some(b) =
            RedisServer::start(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"])
        else {
            return;
        };
        let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
        let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
        for i in 0..6 {
            cmd(&mut ca, &["SET", &format!("k{i}"), "v"]).await;
        }
        // Over its maxmemory, the target refuses every write with -OOM.
        cmd(
            &mut cb,
            &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        )
        .await;
        cmd(&mut cb, &["CONFIG", "SET", "maxmemory", "1"]).await;
        let r = redis::copy_with(&job(sa, sb), transfer).await.unwrap();
        assert_eq!(
            (r.moving, r.failed, r.copied),
            (3, 3, 0),
            "{transfer:?} {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_never_settles_is_given_up_as_failed() {
    let Some((a, b)) = servers(&[]) else { return };
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let mut ca = conn(&sa).await;
    cmd(&mut ca, &["SET", "hot0", "source"]).await;
    cmd(&mut ca, &["SET", "calm2", "1"]).await;
    // Something keeps changing the target's copy (as no dual write would).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, target) = (stop.clone(), sb.clone());
        on_own_runtime(async move {
            let mut cb = conn(&target).await;
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                cb.call(&["SET", "hot0", &n.to_string()]).await.unwrap();
            }
        })
    };
    // The writer is at it before the copy starts (its values never equal the source's).
    let mut cb = conn(&sb).await;
    while cmd(&mut cb, &["EXISTS", "hot0"]).await != redis::Value::Integer(1) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let r = redis::copy(&job(sa, sb)).await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    // Whether a pass ever finds the copy between the writer's writes depends on the scheduler:
    // the run must end (bounded passes) with every key accounted for, and a key given up only
    // after every pass copied it: the first pass's restore is refused (the target holds the key)
    // with DUMP/RESTORE, and each later pass but the last writes it, so 19 writes, 18 again.
    assert_eq!(r.copied + r.failed, 2, "{r:?}");
    assert!(r.failed <= 1, "{r:?}");
    if r.failed == 1 {
        assert!(r.recopied >= 18, "{r:?}");
    }
}

#[tokio::test]
async fn unix_sockets_work_with_dump_restore_and_migrate_says_it_needs_tcp() {
    let dir = std::env::temp_dir();
    let pid = std::process::id();
    let (pa, pb) = (
        dir.join(format!("shardring-migrate-{pid}-a.sock")),
        dir.join(format!("shardring-migrate-{pid}-b.sock")),
    );
    let (pa, pb) = (
        pa.to_string_lossy().into_owned(),
        pb.to_string_lossy().into_owned(),
    );
    let Some(a) = RedisServer::start(&["--unixsocket", &pa]) else {
        return;
    };
    let Some(b) = RedisServer::start(&["--unixsocket", &pb]) else {
        return;
    };
    let (sa, sb) = (Endpoint::new(&pa, "a"), Endpoint::new(&pb, "b"));
    let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
    cmd(&mut ca, &["SET", "k0", "v", "PX", "50000"]).await;
    let r = redis::copy_with(&job(sa.clone(), sb.clone()), Transfer::DumpRestore)
        .await
        .unwrap();
    assert_eq!(r.copied, 1, "{r:?}");
    assert_same(&mut ca, &mut cb, "k0").await;
    cmd(&mut ca, &["SET", "k2", "v"]).await;
    let e = redis::copy_with(&job(sa, sb), Transfer::Migrate)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("TCP"), "{e}");
    drop((a, b));
}

#[tokio::test]
async fn the_rate_limit_paces_the_copy() {
    let Some((a, b)) = servers(&[]) else { return };
    let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
    let mut ca = conn(&sa).await;
    let mut p = Pipeline::new();
    for i in 0..2000 {
        p.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    ca.run(&p).await.unwrap();
    let mut j = job(sa, sb);
    // 1000 keys move: a second's worth (500) at once, the other 500 over about a second.
    j.rate = Some(Arc::new(shardring_migrate::RateLimit::new(Some(500), None)));
    let t0 = Instant::now();
    let r = redis::copy(&j).await.unwrap();
    assert_eq!(r.copied, 1000);
    assert!(
        t0.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn keys_go_to_the_target_their_route_names() {
    let Some((a, b)) = servers(&[]) else { return };
    let Some(c) = RedisServer::start(&[]) else {
        return;
    };
    let (sa, sb, sc) = (ep(&a, None, 0), ep(&b, None, 0), ep(&c, None, 0));
    let mut ca = conn(&sa).await;
    let mut p = Pipeline::new();
    for i in 0..1000 {
        p.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    ca.run(&p).await.unwrap();
    // Last digit 0-3: target 0; 4-6: target 1; 7-9 stay.
    let route: Route = Arc::new(|k: &[u8]| match k.last() {
        Some(b'0'..=b'3') => Some(0),
        Some(b'4'..=b'6') => Some(1),
        _ => None,
    });
    let mut j = Job::new(sa, vec![sb.clone(), sc.clone()], route);
    j.batch = 7;
    let s = redis::survey(&j).await.unwrap();
    assert_eq!((s.keys, s.moving.clone()), (1000, vec![400, 300]), "{s:?}");
    let r = redis::copy(&j).await.unwrap();
    assert_eq!((r.moving, r.copied, r.failed), (700, 700, 0), "{r:?}");
    let (mut cb, mut cc) = (conn(&sb).await, conn(&sc).await);
    assert_eq!(cmd(&mut cb, &["DBSIZE"]).await.integer(), Some(400));
    assert_eq!(cmd(&mut cc, &["DBSIZE"]).await.integer(), Some(300));
    assert!(exists(&mut cb, "k13").await && exists(&mut cc, "k14").await);
}

#[tokio::test]
async fn a_server_that_does_not_answer_times_out() {
    // Connections are accepted (the listen backlog) but nothing ever answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let mut src = Endpoint::new(&addr, "silent");
    src.auth = Some("pw".into());
    let mut j = job(src, Endpoint::new("127.0.0.1:1", "nowhere"));
    j.timeout = Duration::from_millis(300);
    let e = redis::copy(&j).await.unwrap_err();
    assert!(matches!(e, MigrateError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("silent"), "{e}");
}

/// A 3-master cluster, its masters as targets, and the route of every key to its slot's master;
/// `None` when redis-server is not installed.
fn cluster_targets() -> Option<(test_support::RedisCluster, Vec<Endpoint>, Route)> {
    let cluster = test_support::RedisCluster::start(3, 0)?;
    let targets: Vec<Endpoint> = cluster
        .nodes()
        .iter()
        .map(|n| Endpoint::new(n.addr.clone(), n.addr.clone()))
        .collect();
    let route = by_slot(&cluster, &targets);
    Some((cluster, targets, route))
}

/// Every key to its slot's master in `cluster` (the masters in `targets`' order).
fn by_slot(cluster: &test_support::RedisCluster, targets: &[Endpoint]) -> Route {
    let map = cluster.slot_map().expect("the cluster's slot map");
    let index: Vec<Option<usize>> = map
        .iter()
        .map(|m| {
            m.as_ref()
                .and_then(|m| targets.iter().position(|t| &t.addr == m))
        })
        .collect();
    Arc::new(move |k: &[u8]| index[usize::from(shardring_resp::key_slot(k))])
}

#[tokio::test]
async fn keys_go_into_a_redis_cluster_each_to_its_slots_master_and_are_verified_there() {
    // A ketama pool's servers onto a 3-master cluster: every key to the master of its slot. The
    // cluster already holds a partial value of some keys (dual writes before the copy), several of
    // them on one master in different slots, so the verify's digests and the cleanup of keys gone
    // from the source run on a cluster node, which refuses a command whose keys are in two slots.
    for transfer in [Transfer::DumpRestore, Transfer::Migrate] {
        let Some((a, b)) = servers(&[]) else { return };
        let Some((_cluster, targets, route)) = cluster_targets() else {
            return;
        };
        let (sa, sb) = (ep(&a, None, 0), ep(&b, None, 0));
        let (mut ca, mut cb) = (conn(&sa).await, conn(&sb).await);
        let mut moving = fill_every_type(&mut ca).await;
        moving.extend(["stay1", "stay3", "stay5"].map(String::from));
        for i in 0..40 {
            cmd(&mut cb, &["SET", &format!("b:{i}"), &format!("v{i}")]).await;
            cmd(&mut cb, &["HSET", &format!("h:{i}"), "f", "1", "g", "2"]).await;
        }
        // Partial values on the cluster: a hash with a field the source does not have.
        let mut on_cluster = Vec::new();
        for t in &targets {
            on_cluster.push(conn(t).await);
        }
        for i in 0..40 {
            let key = format!("h:{i}");
            let t = route(key.as_bytes()).unwrap();
            cmd(&mut on_cluster[t], &["HSET", &key, "partial", "x"]).await;
        }
        // Gone from the source during the copy (a dual-written DEL that reached the cluster's side
        // first was revived there by an earlier copy): removed from the cluster by the verify.
        for i in 0..20 {
            let key = format!("gone:{i}");
            cmd(&mut ca, &["SET", &key, "v"]).await;
            let t = route(key.as_bytes()).unwrap();
            cmd(&mut on_cluster[t], &["SET", &key, "revived"]).await;
        }
        let source = a.addr.clone();
        let deleting: Route = {
            let route = Arc::clone(&route);
            let deleted = Arc::new(std::sync::atomic::AtomicBool::new(false));
            Arc::new(move |k: &[u8]| {
                if k.starts_with(b"gone:")
                    && !deleted.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    use std::io::{Read, Write};
                    let mut s = std::net::TcpStream::connect(&source).unwrap();
                    let mut del = String::from("*21\r\n$3\r\nDEL\r\n");
                    for i in 0..20 {
                        let key = format!("gone:{i}");
                        del.push_str(&format!("${}\r\n{key}\r\n", key.len()));
                    }
                    s.write_all(del.as_bytes()).unwrap();
                    let mut buf = [0u8; 5];
                    s.read_exact(&mut buf).unwrap();
                }
                route(k)
            })
        };
        let ra = redis::copy_with(&Job::new(sa.clone(), targets.clone(), deleting), transfer)
            .await
            .unwrap_or_else(|e| panic!("{transfer:?}: {e}"));
        let rb = redis::copy_with(
            &Job::new(sb.clone(), targets.clone(), route.clone()),
            transfer,
        )
        .await
        .unwrap_or_else(|e| panic!("{transfer:?}: {e}"));
        assert_eq!((ra.failed, rb.failed), (0, 0), "{transfer:?} {ra:?} {rb:?}");
        assert_eq!(ra.gone, 20, "{transfer:?} {ra:?}");
        assert_eq!(rb.moving, 80, "{transfer:?} {rb:?}");
        for k in &moving {
            let t = route(k.as_bytes()).unwrap();
            assert_same(&mut ca, &mut on_cluster[t], k).await;
        }
        for i in 0..40 {
            for k in [format!("b:{i}"), format!("h:{i}")] {
                let t = route(k.as_bytes()).unwrap();
                assert_same(&mut cb, &mut on_cluster[t], &k).await;
            }
            let key = format!("gone:{}", i % 20);
            let t = route(key.as_bytes()).unwrap();
            assert!(
                !exists(&mut on_cluster[t], &key).await,
                "{transfer:?}: {key}"
            );
        }
        // Each key is on its slot's master alone.
        let mut total = 0;
        for c in &mut on_cluster {
            total += cmd(c, &["DBSIZE"]).await.integer().unwrap();
        }
        assert_eq!(total, (moving.len() + 80) as i64, "{transfer:?}");
    }
}

#[tokio::test]
async fn a_key_sent_to_a_cluster_master_that_does_not_serve_its_slot_stops_the_job_or_fails() {
    // As when the slot map moved under the copy: the node answers MOVED; the key is never taken for
    // copied (counted failed, or the job stops naming the node and the redirection), so no cut-over
    // follows, and a rerun with the map read again copies it.
    for transfer in [Transfer::DumpRestore, Transfer::Migrate] {
        let Some(a) = RedisServer::start(&[]) else {
            return;
        };
        let Some((_cluster, targets, right)) = cluster_targets() else {
            return;
        };
        let sa = ep(&a, None, 0);
        let mut ca = conn(&sa).await;
        for i in 0..10 {
            cmd(&mut ca, &["SET", &format!("k{i}"), "v"]).await;
        }
        let wrong: Route = {
            let right = Arc::clone(&right);
            Arc::new(move |k: &[u8]| {
                let t = right(k)?;
                Some(if k == b"k3" { (t + 1) % 3 } else { t })
            })
        };
        match redis::copy_with(&Job::new(sa, targets.clone(), wrong), transfer).await {
            Ok(r) => assert!(r.failed >= 1 && r.copied <= 9, "{transfer:?} {r:?}"),
            Err(e) => assert!(e.to_string().contains("MOVED"), "{transfer:?}: {e}"),
        }
    }
}
