//! Redis pools against real redis-server backends (and a live nutcracker for placement), each started on
//! a free 127.0.0.1 port and killed on drop. Skipped outside CI when redis-server is not installed
//! (`.ci/run` installs redis-server, redis-tools and nutcracker).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmd, cmds, direct, pool, read_replies, read_reply, yaml};
use shardring_proxy::config::RedisLimits;
use shardring_proxy::protocol::redis::Request;
use shardring_proxy::ProxyConfig;
use test_support::redis::{bulk, redises, resp};
use test_support::{free_port, Nutcracker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_through_nutcracker_are_read_through_shardring_and_back() {
    let Some(servers) = redises(4, &[]) else {
        return;
    };
    let mut most_used = 0;
    for extra in [
        "",
        "  hash: murmur\n",
        "  hash: md5\n  distribution: modula\n",
    ] {
        let nc_listen = format!("127.0.0.1:{}", free_port());
        let Some(nc) = Nutcracker::start(&yaml(&nc_listen, &servers, extra), &nc_listen) else {
            return;
        };
        let proxy = RunningProxy::start(pool(&servers, extra)).await;
        let mut via_nc = Client::connect(&nc.addr).await;
        let mut via_us = proxy.client().await;
        for i in 0..200 {
            let (a, b) = (
                format!("nc:{i}:{{t{}}}", i % 17),
                format!("us:{{{i}}}:{}", i * 7919),
            );
            assert_eq!(cmds(&mut via_nc, &["SET", &a, "n"]).await, "+OK\r\n");
            assert_eq!(cmds(&mut via_us, &["SET", &b, "u"]).await, "+OK\r\n");
        }
        for i in 0..200 {
            let (a, b) = (
                format!("nc:{i}:{{t{}}}", i % 17),
                format!("us:{{{i}}}:{}", i * 7919),
            );
            assert_eq!(
                cmds(&mut via_us, &["GET", &a]).await,
                bulk("n"),
                "{a} ({extra})"
            );
            assert_eq!(
                cmds(&mut via_nc, &["GET", &b]).await,
                bulk("u"),
                "{b} ({extra})"
            );
        }
        // The keys really were spread over the servers.
        let mut used = 0;
        for s in &servers {
            let mut d = direct(s).await;
            if cmds(&mut d, &["DBSIZE"]).await != ":0\r\n" {
                used += 1;
            }
            cmds(&mut d, &["FLUSHALL"]).await;
        }
        most_used = most_used.max(used);
        proxy.stop().await;
    }
    // nutcracker's fnv1a_64 spreads short similar keys poorly; md5 and murmur use every server.
    assert_eq!(most_used, 4, "keys on {most_used} servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_commands_split_and_merge_across_servers() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "  hash: md5\n")).await;
    let mut c = proxy.client().await;
    let mut mset = vec!["MSET".to_string()];
    for i in 0..50 {
        mset.push(format!("k{i}"));
        mset.push(format!("v{i}"));
    }
    let args: Vec<&str> = mset.iter().map(String::as_str).collect();
    assert_eq!(cmds(&mut c, &args).await, "+OK\r\n");
    // MGET: values in request order, repeats and misses kept.
    let got = cmds(&mut c, &["MGET", "k3", "nope", "k41", "k3", "k0"]).await;
    assert_eq!(
        got,
        format!(
            "*5\r\n{}$-1\r\n{}{}{}",
            bulk("v3"),
            bulk("v41"),
            bulk("v3"),
            bulk("v0")
        )
    );
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    let mut exists = vec!["EXISTS"];
    exists.extend(keys.iter().map(String::as_str));
    exists.push("k0");
    exists.push("missing");
    assert_eq!(
        cmds(&mut c, &exists).await,
        ":51\r\n",
        "EXISTS counts repeats, as Redis"
    );
    assert_eq!(cmds(&mut c, &["TOUCH", "k1", "k2", "zz"]).await, ":2\r\n");
    assert_eq!(cmds(&mut c, &["UNLINK", "k1", "k2", "zz"]).await, ":2\r\n");
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    assert_eq!(cmds(&mut c, &del).await, ":48\r\n");
    // The keys were spread: the MSET, EXISTS and DEL of 50 keys were split over the 3 servers (the
    // MGET, TOUCH and UNLINK of a few keys may find them on one server: the servers' ports, which
    // place the keys, change from run to run).
    let fragments = proxy.proxy.views()[0].pool.fragments.get();
    assert!(fragments >= 9, "{fragments} fragments");
    // Other multi-key commands: forwarded when one server holds every key (a hash tag), else CROSSSLOT.
    assert_eq!(cmds(&mut c, &["SADD", "{u1}.a", "x", "y"]).await, ":2\r\n");
    assert_eq!(cmds(&mut c, &["SADD", "{u1}.b", "y", "z"]).await, ":2\r\n");
    assert_eq!(
        cmds(&mut c, &["SINTER", "{u1}.a", "{u1}.b"]).await,
        "*1\r\n$1\r\ny\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["SUNIONSTORE", "{u1}.c", "{u1}.a", "{u1}.b"]).await,
        ":3\r\n"
    );
    let mut crossed = false;
    for i in 0..20 {
        let (a, b) = (format!("s{i}"), format!("t{i}"));
        let r = cmds(&mut c, &["RPOPLPUSH", &a, &b]).await;
        if r.starts_with("-CROSSSLOT") {
            crossed = true;
        } else {
            assert_eq!(r, "$-1\r\n");
        }
    }
    assert!(crossed, "some pair of keys lives on two servers");
    assert_eq!(
        cmds(
            &mut c,
            &["EVAL", "return redis.call('GET', KEYS[1])", "1", "k49"]
        )
        .await,
        "$-1\r\n"
    );
    assert_eq!(cmds(&mut c, &["SET", "k", "v", "GET"]).await, "$-1\r\n");
    assert_eq!(cmds(&mut c, &["EXPIRE", "k", "100", "NX"]).await, ":1\r\n");
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, ":4\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_binary_and_large_values_are_answered_in_order() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    let big: Vec<u8> = (0..512 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    let binary: &[u8] = b"\0\r\n$3\r\n*1\r\n\xff";
    assert_eq!(cmd(&mut c, &[b"SET", b"big", &big]).await, b"+OK\r\n");
    assert_eq!(cmd(&mut c, &[b"SET", binary, binary]).await, b"+OK\r\n");
    let mut expect = Vec::new();
    let mut pipeline = Vec::new();
    for i in 0..500 {
        let k = format!("p{i}");
        pipeline.extend_from_slice(&Request::from_args(&["SET", &k, &i.to_string()]).frame);
        pipeline.extend_from_slice(&Request::from_args(&["GET", &k]).frame);
        expect.push(b"+OK\r\n".to_vec());
        expect.push(bulk(&i.to_string()).into_bytes());
        if i % 100 == 0 {
            pipeline.extend_from_slice(&Request::from_args(&[&b"GET"[..], binary]).frame);
            expect.push([format!("${}\r\n", binary.len()).as_bytes(), binary, b"\r\n"].concat());
            pipeline.extend_from_slice(b"PING\r\n");
            expect.push(b"+PONG\r\n".to_vec());
            pipeline.extend_from_slice(&Request::from_args(&["MGET", "p0", &k, "big"]).frame);
            let mut m = format!("*3\r\n{}{}", bulk("0"), bulk(&i.to_string())).into_bytes();
            m.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
            m.extend_from_slice(&big);
            m.extend_from_slice(b"\r\n");
            expect.push(m);
        }
    }
    c.send(&pipeline).await;
    let got = read_replies(&mut c, expect.len()).await;
    assert!(got == expect, "pipelined replies out of order or wrong");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_costs_only_its_keys_and_fails_a_read_of_them_whole() {
    dead_server_costs_only_its_keys(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_partial_reads_a_dead_servers_keys_are_error_elements_of_an_mget() {
    dead_server_costs_only_its_keys(true).await;
}

/// Three servers, the second killed: its keys fail, the others' are served. An `MGET` over all of
/// them is one error naming the dead server, or with `partial` (`--redis-partial-reads`) the live
/// keys' values and an error element for each dead key.
async fn dead_server_costs_only_its_keys(partial: bool) {
    let Some(mut servers) = redises(3, &[]) else {
        return;
    };
    let mut config = pool(&servers, "  timeout: 300\n  hash: md5\n");
    if let shardring_proxy::config::ProtocolConfig::Redis(r) = &mut config.protocol {
        r.partial_reads = partial;
    }
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..30).map(|i| format!("d{i}")).collect();
    for k in &keys {
        assert_eq!(cmds(&mut c, &["SET", k, k]).await, "+OK\r\n");
    }
    let owner: Vec<usize> = keys
        .iter()
        .map(|k| proxy.proxy.pools()[0].server_for(k.as_bytes()).unwrap())
        .collect();
    servers[1].kill();
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let reply = cmds(&mut c, &mget).await;
    if partial {
        let lines: Vec<&str> = reply.split("\r\n").collect();
        assert_eq!(lines[0], "*30");
        let mut at = 1;
        for (k, &o) in keys.iter().zip(&owner) {
            if o == 1 {
                assert!(lines[at].starts_with("-ERR "), "{k}: {}", lines[at]);
                at += 1;
            } else {
                assert_eq!(
                    (lines[at], lines[at + 1]),
                    (&*format!("${}", k.len()), k.as_str())
                );
                at += 2;
            }
        }
    } else {
        // One error, naming the server, as a GET of one of its keys gets.
        assert!(
            reply.starts_with("-ERR ") && reply.contains(&servers[1].addr),
            "{reply}"
        );
        assert_eq!(reply.matches("\r\n").count(), 1, "{reply}");
    }
    // An MGET of only the dead server's keys (one server, passed on whole) and of only the live
    // servers' keys.
    let dead: Vec<&str> = keys
        .iter()
        .zip(&owner)
        .filter(|(_, &o)| o == 1)
        .map(|(k, _)| k.as_str())
        .collect();
    let reply = cmds(&mut c, &[&["MGET"][..], &dead].concat()).await;
    if partial {
        assert!(
            reply.starts_with(&format!("*{}\r\n-ERR ", dead.len())),
            "{reply}"
        );
    } else {
        assert!(
            reply.starts_with("-ERR ") && reply.contains(&servers[1].addr),
            "{reply}"
        );
    }
    let live: Vec<&str> = keys
        .iter()
        .zip(&owner)
        .filter(|(_, &o)| o != 1)
        .map(|(k, _)| k.as_str())
        .collect();
    let expect: String = std::iter::once(format!("*{}\r\n", live.len()))
        .chain(live.iter().map(|k| bulk(k)))
        .collect();
    assert_eq!(cmds(&mut c, &[&["MGET"][..], &live].concat()).await, expect);
    for (k, &o) in keys.iter().zip(&owner) {
        let r = cmds(&mut c, &["GET", k]).await;
        if o == 1 {
            assert!(r.starts_with("-ERR "), "{r}");
        } else {
            assert_eq!(r, bulk(k));
        }
    }
    // A sum that misses a server reports the failure rather than a wrong count.
    let mut del = vec!["DEL"];
    del.extend(keys.iter().map(String::as_str));
    assert!(cmds(&mut c, &del).await.starts_with("-ERR "));
    servers[1].restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let k = keys.iter().zip(&owner).find(|(_, &o)| o == 1).unwrap().0;
    loop {
        if cmds(&mut c, &["SET", k, "back"]).await == "+OK\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted server is used again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(cmds(&mut c, &["GET", k]).await, bulk("back"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_3_is_served_over_resp3_server_connections() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c2 = proxy.client().await;
    assert_eq!(cmds(&mut c2, &["HSET", "h", "f", "v"]).await, ":1\r\n");
    assert_eq!(cmds(&mut c2, &["ZADD", "z", "1.5", "m"]).await, ":1\r\n");
    assert_eq!(
        cmds(&mut c2, &["HGETALL", "h"]).await,
        "*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert_eq!(cmds(&mut c2, &["ZSCORE", "z", "m"]).await, "$3\r\n1.5\r\n");
    let mut c3 = proxy.client().await;
    let hello = cmds(&mut c3, &["HELLO", "3"]).await;
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert_eq!(
        cmds(&mut c3, &["HGETALL", "h"]).await,
        "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert_eq!(cmds(&mut c3, &["ZSCORE", "z", "m"]).await, ",1.5\r\n");
    assert_eq!(cmds(&mut c3, &["GET", "nope"]).await, "_\r\n");
    assert_eq!(cmds(&mut c3, &["CLIENT", "GETNAME"]).await, "_\r\n");
    let mget = cmds(&mut c3, &["MGET", "h0", "h1", "h2", "h3", "h4", "h5"]).await;
    assert_eq!(mget, format!("*6\r\n{}", "_\r\n".repeat(6)));
    // Back to RESP2 on the same connection.
    assert!(cmds(&mut c3, &["HELLO", "2"]).await.starts_with("*14\r\n"));
    assert_eq!(cmds(&mut c3, &["GET", "nope"]).await, "$-1\r\n");
    assert_eq!(
        cmds(&mut c3, &["HELLO", "4"]).await,
        "-NOPROTO unsupported protocol version\r\n"
    );
    // Switching in the middle of a pipeline: what follows HELLO waits for what came before, so a STRLEN
    // on a RESP3 connection sees the (slow, 8 MiB) SET sent just before on a RESP2 one.
    let mut c = proxy.client().await;
    let big = "v".repeat(8 << 20);
    for i in 0..4 {
        let k = format!("sw{i}");
        assert_eq!(cmds(&mut c, &["SET", &k, "old"]).await, "+OK\r\n");
        let mut pipeline = Vec::new();
        pipeline.extend_from_slice(&Request::from_args(&["SET", &k, &big]).frame);
        let version = if i % 2 == 0 { "3" } else { "2" };
        pipeline.extend_from_slice(&Request::from_args(&["HELLO", version]).frame);
        pipeline.extend_from_slice(&Request::from_args(&["STRLEN", &k]).frame);
        c.send(&pipeline).await;
        let replies = read_replies(&mut c, 3).await;
        assert_eq!(replies[0], b"+OK\r\n");
        assert_eq!(
            String::from_utf8_lossy(&replies[2]),
            format!(":{}\r\n", big.len()),
            "STRLEN sw{i} after the switch"
        );
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_db_are_those_of_the_pool() {
    let Some(servers) = redises(2, &["--requirepass", "s3cret"]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "  redis_auth: s3cret\n  redis_db: 2\n")).await;
    let mut c = proxy.client().await;
    assert_eq!(
        cmds(&mut c, &["GET", "k"]).await,
        "-NOAUTH Authentication required\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["AUTH", "wrong"]).await,
        "-ERR invalid password\r\n"
    );
    assert_eq!(cmds(&mut c, &["AUTH", "s3cret"]).await, "+OK\r\n");
    assert!(cmds(&mut c, &["SELECT", "0"])
        .await
        .starts_with("-ERR SELECT"));
    assert_eq!(cmds(&mut c, &["SELECT", "2"]).await, "+OK\r\n");
    for i in 0..20 {
        assert_eq!(
            cmds(&mut c, &["SET", &format!("a{i}"), "1"]).await,
            "+OK\r\n"
        );
    }
    let mut c3 = proxy.client().await;
    assert!(cmds(
        &mut c3,
        &["HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "me"]
    )
    .await
    .starts_with("%7"));
    assert_eq!(cmds(&mut c3, &["GET", "a0"]).await, bulk("1"));
    assert_eq!(cmds(&mut c3, &["CLIENT", "GETNAME"]).await, bulk("me"));
    // The keys are in db 2 of the servers, not db 0.
    let mut total = 0;
    for s in &servers {
        let mut d = direct(s).await;
        assert_eq!(cmds(&mut d, &["AUTH", "s3cret"]).await, "+OK\r\n");
        assert_eq!(cmds(&mut d, &["DBSIZE"]).await, ":0\r\n");
        assert_eq!(cmds(&mut d, &["SELECT", "2"]).await, "+OK\r\n");
        let n = cmds(&mut d, &["DBSIZE"]).await;
        total += n.trim_start_matches(':').trim().parse::<u32>().unwrap();
    }
    assert_eq!(total, 20);
    // Without redis_auth, AUTH gets nutcracker's answer.
    let Some(plain) = redises(1, &[]) else {
        return;
    };
    let open = RunningProxy::start(pool(&plain, "")).await;
    let mut o = open.client().await;
    assert_eq!(
        cmds(&mut o, &["AUTH", "x"]).await,
        "-ERR Client sent AUTH, but no password is set\r\n"
    );
    open.stop().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn well_formed_requests_never_close_and_malformed_ones_get_errors() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    assert_eq!(
        cmds(&mut c, &["NOSUCH", "a", "b"]).await,
        "-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' \r\n"
    );
    assert_eq!(
        cmds(&mut c, &["GET"]).await,
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert!(cmds(&mut c, &["SWAPDB", "0", "1"])
        .await
        .starts_with("-ERR SWAPDB is not supported"));
    assert!(cmds(&mut c, &["PUBSUB", "CHANNELS"])
        .await
        .starts_with("-ERR PUBSUB is not supported"));
    assert!(cmds(&mut c, &["EVAL", "return 1", "0"])
        .await
        .starts_with("-ERR EVAL is not supported"));
    assert_eq!(cmds(&mut c, &["ECHO", "hi"]).await, bulk("hi"));
    c.send(b"set  k  \"a b\"\r\nGET k\r\n").await;
    assert_eq!(
        read_replies(&mut c, 2).await,
        [b"+OK\r\n".to_vec(), bulk("a b").into_bytes()]
    );
    for (bad, reply) in [
        (
            &b"*1\r\n$-5\r\n"[..],
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*x\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*2\r\n*1\r\n",
            "-ERR Protocol error: expected '$', got '*'\r\n",
        ),
        (
            b"*1\r\n$3\r\nGETxx",
            "-ERR Protocol error: expected '\\r\\n'\r\n",
        ),
        (
            b"*1\r\n$999999999999\r\n",
            "-ERR Protocol error: bulk length 999999999999 over the proxy's limit of 536870912\r\n",
        ),
    ] {
        let mut b = proxy.client().await;
        b.check(b"PING\r\n", b"+PONG\r\n").await;
        b.send(bad).await;
        assert_eq!(String::from_utf8_lossy(&read_reply(&mut b).await), reply);
        b.expect_closed().await;
    }
    let mut q = proxy.client().await;
    q.send(b"PING\r\nQUIT\r\nPING\r\n").await;
    assert_eq!(
        read_replies(&mut q, 2).await,
        [b"+PONG\r\n".to_vec(), b"+OK\r\n".to_vec()]
    );
    q.expect_closed().await;
    proxy.stop().await;
}

/// Runs a program, `None` when it is not installed (outside CI).
fn run(program: &str, args: &[&str]) -> Option<std::process::Output> {
    match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => Some(o),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: {program} not runnable here ({e})");
            None
        }
        Err(e) => panic!("{program} must be installed in CI: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_and_redis_benchmark_work_unmodified() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let port = proxy.addr.rsplit(':').next().unwrap().to_owned();
    let p = port.clone();
    let cli = move |args: &[&str]| {
        let mut all = vec!["-h", "127.0.0.1", "-p", &p];
        all.extend_from_slice(args);
        run("redis-cli", &all).map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let Some(out) = tokio::task::spawn_blocking({
        let cli = cli.clone();
        move || cli(&["-2", "SET", "cli", "x"])
    })
    .await
    .unwrap() else {
        return;
    };
    assert_eq!(out, "OK\n");
    let out = tokio::task::spawn_blocking({
        let cli = cli.clone();
        move || cli(&["-3", "HSET", "ch", "a", "1"]).and(cli(&["-3", "HGETALL", "ch"]))
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        out, "a 1\n",
        "a RESP3 map, as redis-cli prints one off a terminal"
    );
    let bench = tokio::task::spawn_blocking(move || {
        run(
            "redis-benchmark",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-r",
                "100000",
                "-n",
                "2000",
                "-c",
                "8",
                "-q",
            ],
        )
    })
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8_lossy(&bench.stdout).into_owned()
        + &String::from_utf8_lossy(&bench.stderr);
    assert!(bench.status.success(), "{text}");
    for test in [
        "PING_INLINE",
        "SET",
        "GET",
        "INCR",
        "LPUSH",
        "SADD",
        "HSET",
        "ZADD",
        "LRANGE_100",
        "MSET",
    ] {
        assert!(text.contains(test), "{test} missing: {text}");
    }
    assert!(!text.to_lowercase().contains("error"), "{text}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_server_under_pipelined_load_misroutes_nothing() {
    let Some(mut servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "  timeout: 300\n  hash: md5\n")).await;
    let mut c = proxy.client().await;
    let mut errors = 0;
    for round in 0..30 {
        if round == 10 {
            servers[2].kill();
        }
        if round == 20 {
            servers[2].restart();
        }
        // 100 pipelined SET/GET pairs of unique values: each GET is its own value or an error, never
        // another key's value or a nil for a key just set.
        let mut pipeline = Vec::new();
        for i in 0..100 {
            let (k, v) = (format!("r{round}:{i}"), format!("v{round}:{i}:{}", i * 31));
            pipeline.extend_from_slice(&Request::from_args(&["SET", &k, &v]).frame);
            pipeline.extend_from_slice(&Request::from_args(&["GET", &k]).frame);
        }
        c.send(&pipeline).await;
        let replies = read_replies(&mut c, 200).await;
        for i in 0..100 {
            let v = format!("v{round}:{i}:{}", i * 31);
            let (set, get) = (
                String::from_utf8_lossy(&replies[2 * i]).into_owned(),
                String::from_utf8_lossy(&replies[2 * i + 1]).into_owned(),
            );
            if set.starts_with("-ERR ") {
                errors += 1;
                assert!(get.starts_with("-ERR ") || get == bulk(&v), "{get}");
            } else {
                assert_eq!(set, "+OK\r\n");
                assert!(
                    get == bulk(&v) || get.starts_with("-ERR "),
                    "round {round}: {get}"
                );
            }
        }
        if round >= 20 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(
        errors > 0,
        "the dead server's keys failed while it was down"
    );
    // Back: every server answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut mget = vec!["MGET".to_string()];
        mget.extend((0..100).map(|i| format!("r29:{i}")));
        let args: Vec<&str> = mget.iter().map(String::as_str).collect();
        if !cmds(&mut c, &args).await.contains("-ERR") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted server serves again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_a_server_to_a_redis_pool() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let two = pool(&servers[..2], "  hash: md5\n");
    let mut three = pool(&servers, "  hash: md5\n");
    three.listen = two.listen.clone();
    let proxy = RunningProxy::start(two).await;
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", "before", "1"]).await, "+OK\r\n");
    proxy
        .proxy
        .reload(ProxyConfig { pools: vec![three] })
        .expect("reload");
    assert_eq!(proxy.proxy.pools()[0].server_count(), 3);
    for i in 0..60 {
        assert_eq!(
            cmds(&mut c, &["SET", &format!("after{i}"), "2"]).await,
            "+OK\r\n"
        );
    }
    let mut third = direct(&servers[2]).await;
    assert_ne!(
        cmds(&mut third, &["DBSIZE"]).await,
        ":0\r\n",
        "the new server takes keys"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_word_for_word_those_of_the_redis_server() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut via_us = proxy.client().await;
    let mut redis = direct(&servers[0]).await;
    let (x200, y100) = ("x".repeat(200), "y".repeat(100));
    let cases: &[&[&str]] = &[
        &["foo"],
        &["foo", "a", "b"],
        &["FoO", &x200, "b"],
        &["foo", &y100, "abcdefghijklmnopqrstuvwxyz0123456789", "c"],
        &["foo", "a\r\nb"],
        &["get"],
        &["GET", "a", "b"],
        &["set", "k"],
        &["mset", "a", "1", "b"],
        &["expire", "k"],
        &["hello", "4"],
        &["hello", "x"],
        &["hello", "3", "foo"],
        &["client", "foo"],
        &["client", "setname"],
        &["client", "setname", "a b"],
        &["select", "x"],
        &["ping", "a", "b"],
        &["echo"],
        &["eval", "return 1", "x"],
        &["eval", "return 1", "5", "a"],
        &["zunionstore", "d", "0", "a"],
        &["xread", "streams", "a"],
    ];
    for case in cases {
        assert_eq!(
            cmds(&mut via_us, case).await,
            cmds(&mut redis, case).await,
            "{case:?}"
        );
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_shows_each_commands_latency() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    for i in 0..7 {
        cmds(&mut c, &["SET", &format!("m{i}"), "1"]).await;
    }
    for _ in 0..3 {
        cmds(&mut c, &["MGET", "m0", "m1", "m2", "m3"]).await;
    }
    cmds(&mut c, &["NOSUCH"]).await;
    let text =
        shardring_proxy::metrics::render_prometheus(proxy.proxy.started(), &proxy.proxy.views());
    for (command, n) in [("set", 7), ("mget", 3)] {
        let line = format!(
            "shardring_proxy_command_latency_seconds_count{{pool=\"alpha\",command=\"{command}\"}} {n}"
        );
        assert!(text.contains(&line), "{line} missing from:\n{text}");
    }
    assert!(
        !text.contains("command=\"get\""),
        "commands not sent are left out"
    );
    assert!(!text.contains("NOSUCH") && !text.contains("nosuch"));
    // `/command-latency` carries the same table as JSON; the stats JSON does not (nutcracker's readers
    // take every object in a pool for a server).
    let json = shardring_proxy::metrics::command_latency_json(&proxy.proxy.views());
    assert_eq!(json["pools"][0]["pool"], "alpha", "{json}");
    let table = &json["pools"][0]["commands"];
    assert_eq!(table["set"]["requests"], 7, "{table}");
    assert_eq!(table["mget"]["requests"], 3, "{table}");
    assert!(table.get("get").is_none(), "{table}");
    let stats: serde_json::Value =
        serde_json::from_str(&shardring_proxy::metrics::render_twemproxy_json(
            proxy.proxy.started(),
            &proxy.proxy.views(),
        ))
        .unwrap();
    assert!(stats["alpha"].get("command_latency").is_none(), "{stats}");
    // Prometheus's own checker reads it (when installed: .ci/run installs it).
    if let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !said.contains("error"),
            "promtool: {said}"
        );
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_clients_probe_at_connect_is_answered_by_the_proxy() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    assert_eq!(
        cmds(&mut c, &["CONFIG", "GET", "save"]).await,
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["CONFIG", "GET", "appendonly", "nosuch"]).await,
        "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
    assert!(cmds(&mut c, &["CONFIG", "SET", "save", ""])
        .await
        .starts_with("-ERR CONFIG SET is not supported"));
    let count = cmds(&mut c, &["COMMAND", "COUNT"]).await;
    assert!(
        count.trim_start_matches(':').trim().parse::<u32>().unwrap() >= 200,
        "{count}"
    );
    assert_eq!(
        cmds(&mut c, &["COMMAND", "INFO", "get", "nosuch"]).await,
        "*2\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n$-1\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["CLIENT", "SETINFO", "lib-name", "redis-py"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["CLIENT", "SETINFO", "lib-ver", "5.3.1"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["CLIENT", "SETNAME", "worker-1"]).await,
        "+OK\r\n"
    );
    assert_eq!(cmds(&mut c, &["CLIENT", "GETNAME"]).await, bulk("worker-1"));
    assert!(cmds(&mut c, &["CLIENT", "ID"]).await.starts_with(':'));
    assert!(cmds(&mut c, &["INFO"]).await.contains("redis_version:"));
    assert_eq!(cmds(&mut c, &["SELECT", "0"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["PING", "hi"]).await, bulk("hi"));
    let mut c3 = proxy.client().await;
    cmds(&mut c3, &["HELLO", "3"]).await;
    assert_eq!(
        cmds(&mut c3, &["CONFIG", "GET", "save"]).await,
        "%1\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert!(
        cmds(&mut c3, &["INFO"]).await.starts_with('='),
        "a verbatim string in RESP3"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_pool_refuses_requests_over_its_limits_before_buffering_them() {
    let Some(servers) = redises(1, &[]) else {
        return;
    };
    let mut config = pool(&servers, "");
    config.redis_mut().unwrap().limits = RedisLimits {
        max_bulk_len: 100,
        max_request_len: 300,
    };
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    // At the argument limit, within the request limit: served.
    let v100 = "v".repeat(100);
    assert_eq!(cmds(&mut c, &["SET", "k", &v100]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["GET", "k"]).await, bulk(&v100));
    // An argument over the limit is refused at its header, before its bytes arrive.
    let mut b = proxy.client().await;
    b.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$101\r\n").await;
    assert_eq!(
        String::from_utf8_lossy(&read_reply(&mut b).await),
        "-ERR Protocol error: bulk length 101 over the proxy's limit of 100\r\n"
    );
    b.expect_closed().await;
    // So is a request whose arguments are each within the limit but together over the request's.
    let mut r = proxy.client().await;
    let v90 = "v".repeat(90);
    r.send(resp(&["MSET", "a", &v90, "b", &v90, "c", &v90]).as_bytes())
        .await;
    assert_eq!(
        String::from_utf8_lossy(&read_reply(&mut r).await),
        "-ERR Protocol error: request over the proxy's limit of 300 bytes\r\n"
    );
    r.expect_closed().await;
    // The other clients go on.
    c.check(b"PING\r\n", b"+PONG\r\n").await;
    assert_eq!(cmds(&mut c, &["GET", "k"]).await, bulk(&v100));
    proxy.stop().await;
}

/// nutcracker answers a multi-key read that one of its servers cannot serve with one error, never an
/// array holding error elements (which redis-py and most clients would hand back as the values); so
/// does the proxy by default, for MGET and for every other split command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_command_with_a_dead_server_is_one_error_as_through_nutcracker() {
    let Some(mut servers) = redises(3, &[]) else {
        return;
    };
    let extra = "  timeout: 500\n  hash: md5\n";
    let nc_listen = format!("127.0.0.1:{}", free_port());
    let Some(nc) = Nutcracker::start(&yaml(&nc_listen, &servers, extra), &nc_listen) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, extra)).await;
    let mut via_us = proxy.client().await;
    let keys: Vec<String> = (0..24).map(|i| format!("split{i}")).collect();
    for k in &keys {
        assert_eq!(cmds(&mut via_us, &["SET", k, k]).await, "+OK\r\n");
    }
    assert!(
        keys.iter()
            .any(|k| proxy.proxy.pools()[0].server_for(k.as_bytes()) == Some(1)),
        "some key lives on the server about to die"
    );
    servers[1].kill();
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    let pairs: Vec<&str> = names.iter().flat_map(|k| [*k, "v"]).collect();
    for (command, nutcracker_splits_it) in [
        ([&["MGET"][..], &names].concat(), true),
        ([&["DEL"][..], &names].concat(), true),
        ([&["MSET"][..], &pairs].concat(), true),
        // Split here, not by nutcracker 0.5.0 (which closes the connection on them).
        ([&["EXISTS"][..], &names].concat(), false),
        ([&["TOUCH"][..], &names].concat(), false),
        ([&["UNLINK"][..], &names].concat(), false),
    ] {
        if nutcracker_splits_it {
            let theirs = once_answered(&nc.addr, &command);
            assert!(
                theirs.starts_with('-') && theirs.matches("\r\n").count() == 1,
                "{}: nutcracker answered {theirs:?}",
                command[0]
            );
        }
        let ours = cmds(&mut via_us, &command).await;
        assert!(
            ours.starts_with("-ERR ") && ours.matches("\r\n").count() == 1,
            "{}: {ours:?}",
            command[0]
        );
        assert!(ours.contains(&servers[1].addr), "{}: {ours:?}", command[0]);
    }
    proxy.stop().await;
}

/// `args` sent to nutcracker at `addr` on a new connection, and its reply. nutcracker closes a client
/// whose request was on a server connection it then found dead (the first requests after a kill), and
/// answers once it knows: up to five tries, each on a new connection.
fn once_answered(addr: &str, args: &[&str]) -> String {
    use std::io::{Read, Write};
    for _ in 0..5 {
        let mut s = std::net::TcpStream::connect(addr).expect("nutcracker accepts");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&Request::from_args(args).frame).unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
            if got.ends_with(b"\r\n") {
                break;
            }
        }
        if !got.is_empty() {
            return String::from_utf8_lossy(&got).into_owned();
        }
    }
    panic!("nutcracker never answered {:?}", args[0]);
}
