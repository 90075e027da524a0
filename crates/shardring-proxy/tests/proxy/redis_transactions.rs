//! Redis pools' transactions, watches, blocking commands and authentication as deployed, against real
//! redis-server backends on free 127.0.0.1 ports. Skipped outside CI when redis-server is missing.

use std::time::{Duration, Instant};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmds, direct, pool, read_replies};
use shardring_proxy::config::{PoolConfig, ProtocolConfig};
use shardring_proxy::protocol::redis::Request;
use test_support::redis::{bulk, redises, RedisServer};

/// The server (index into `servers`) that holds `key` once the proxy has written it.
async fn owner(proxy: &RunningProxy, servers: &[RedisServer], key: &str) -> usize {
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", key, "probe"]).await, "+OK\r\n");
    let mut found = None;
    for (i, s) in servers.iter().enumerate() {
        if cmds(&mut direct(s).await, &["EXISTS", key]).await == ":1\r\n" {
            assert!(found.is_none(), "{key} on two servers");
            found = Some(i);
        }
    }
    assert_eq!(cmds(&mut c, &["DEL", key]).await, ":1\r\n");
    found.expect("the key is on one server")
}

/// Two keys that live on different servers. Keys that differ only in their last characters land
/// close together under twemproxy's FNV-1a, so the candidates are spread.
async fn apart(proxy: &RunningProxy, servers: &[RedisServer]) -> (String, String) {
    let key = |i: u64| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let first = owner(proxy, servers, &key(0)).await;
    for i in 1..200 {
        if owner(proxy, servers, &key(i)).await != first {
            return (key(0), key(i));
        }
    }
    let addrs: Vec<&str> = servers.iter().map(|s| s.addr.as_str()).collect();
    panic!("200 keys on server {first} of {addrs:?}");
}

/// Sends `args` pipelined, one frame each, and reads as many replies.
async fn pipeline(c: &mut Client, commands: &[&[&str]]) -> Vec<String> {
    let mut out = Vec::new();
    for args in commands {
        out.extend_from_slice(&Request::from_args(args).frame);
    }
    c.send(&out).await;
    read_replies(c, commands.len())
        .await
        .into_iter()
        .map(|r| String::from_utf8_lossy(&r).into_owned())
        .collect()
}

/// A redis pool's config with these proxy-only settings changed.
fn redis_pool(
    servers: &[RedisServer],
    extra: &str,
    set: impl FnOnce(&mut shardring_proxy::config::RedisConfig),
) -> PoolConfig {
    let mut config = pool(servers, extra);
    if let ProtocolConfig::Redis(r) = &mut config.protocol {
        set(r);
    }
    config
}

/// The gauge of the first pool's servers' connections of single clients, summed.
fn own_connections(proxy: &RunningProxy) -> u64 {
    proxy.proxy.views()[0]
        .servers
        .iter()
        .map(|s| s.dedicated_connections.get())
        .sum()
}

/// Waits (bounded) until `own_connections` is `n`.
async fn until_own_connections(proxy: &RunningProxy, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while own_connections(proxy) != n {
        assert!(
            Instant::now() < deadline,
            "{} connections of single clients open, expected {n}",
            own_connections(proxy)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_runs_whole_on_its_server_and_a_refused_one_runs_nothing() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    // As redis-py's pipeline(transaction=True) sends it: all at once.
    let replies = pipeline(
        &mut c,
        &[
            &["MULTI"],
            &["SET", "{t}k", "1"],
            &["INCR", "{t}k"],
            &["GET", "{t}k"],
            &["PING"],
            &["EXEC"],
        ],
    )
    .await;
    assert_eq!(
        replies,
        [
            "+OK\r\n",
            "+QUEUED\r\n",
            "+QUEUED\r\n",
            "+QUEUED\r\n",
            "+QUEUED\r\n",
            "*4\r\n+OK\r\n:2\r\n$1\r\n2\r\n+PONG\r\n"
        ]
    );
    // The case: a key on another server refuses the transaction, and nothing of it runs.
    let (a, b) = apart(&proxy, &servers).await;
    let replies = pipeline(
        &mut c,
        &[
            &["MULTI"],
            &["SET", &a, "1"],
            &["SET", &b, "2"],
            &["INCR", &a],
            &["EXEC"],
            &["EXISTS", &a, &b],
            &["PING"],
        ],
    )
    .await;
    assert_eq!(
        replies,
        [
            "+OK\r\n",
            "+QUEUED\r\n",
            "-CROSSSLOT Keys in request don't hash to the same server\r\n",
            "+QUEUED\r\n",
            "-EXECABORT Transaction discarded because of previous errors.\r\n",
            ":0\r\n",
            "+PONG\r\n"
        ]
    );
    for s in &servers {
        assert_eq!(
            cmds(&mut direct(s).await, &["EXISTS", &a, &b]).await,
            ":0\r\n"
        );
    }
    // What Redis refuses while queueing discards the transaction too; what it answers as an error
    // without discarding (a nested MULTI, WATCH inside MULTI) leaves it as it was.
    let replies = pipeline(
        &mut c,
        &[
            &["MULTI"],
            &["MULTI"],
            &["WATCH", "x"],
            &["SET", "{t}n", "5"],
            &["EXEC"],
            &["MULTI"],
            &["NOSUCHCOMMAND"],
            &["SET", "{t}n", "6"],
            &["EXEC"],
            &["MULTI"],
            &["KEYS", "*"],
            &["EXEC"],
            &["MULTI"],
            &["SET", "{t}n", "7"],
            &["DISCARD"],
            &["GET", "{t}n"],
            &["EXEC"],
            &["DISCARD"],
        ],
    )
    .await;
    assert_eq!(replies[0], "+OK\r\n");
    assert_eq!(replies[1], "-ERR MULTI calls can not be nested\r\n");
    assert_eq!(replies[2], "-ERR WATCH inside MULTI is not allowed\r\n");
    assert_eq!(replies[4], "*1\r\n+OK\r\n");
    assert!(replies[6].starts_with("-ERR unknown command 'NOSUCHCOMMAND'"));
    assert!(replies[8].starts_with("-EXECABORT"));
    // KEYS spans every server, which a transaction on one server cannot.
    assert_eq!(
        replies[10],
        "-ERR KEYS inside MULTI is not supported by the proxy\r\n"
    );
    assert!(replies[11].starts_with("-EXECABORT"));
    assert_eq!(replies[14], "+OK\r\n");
    assert_eq!(replies[15], bulk("5"));
    assert_eq!(replies[16], "-ERR EXEC without MULTI\r\n");
    assert_eq!(replies[17], "-ERR DISCARD without MULTI\r\n");
    let stats = &proxy.proxy.views()[0].pool;
    assert_eq!(stats.transactions.get(), 2);
    assert_eq!(stats.transactions_aborted.get(), 3);
    // No transaction needed a connection of its own.
    assert_eq!(own_connections(&proxy), 0);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_fails_exec_when_its_key_changes_on_a_connection_of_its_own() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    let mut other = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", "{w}n", "10"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["WATCH", "{w}n", "{w}m"]).await, "+OK\r\n");
    assert_eq!(own_connections(&proxy), 1);
    assert_eq!(cmds(&mut c, &["GET", "{w}n"]).await, bulk("10"));
    assert_eq!(cmds(&mut other, &["INCR", "{w}n"]).await, ":11\r\n");
    let replies = pipeline(&mut c, &[&["MULTI"], &["INCR", "{w}n"], &["EXEC"]]).await;
    // The watched key changed: nothing ran, and EXEC ended the watch.
    assert_eq!(replies, ["+OK\r\n", "+QUEUED\r\n", "*-1\r\n"]);
    assert_eq!(cmds(&mut c, &["GET", "{w}n"]).await, bulk("11"));
    until_own_connections(&proxy, 0).await;
    // Unchanged, it runs.
    assert_eq!(cmds(&mut c, &["WATCH", "{w}n"]).await, "+OK\r\n");
    let replies = pipeline(&mut c, &[&["MULTI"], &["INCR", "{w}n"], &["EXEC"]]).await;
    assert_eq!(replies, ["+OK\r\n", "+QUEUED\r\n", "*1\r\n:12\r\n"]);
    // UNWATCH and DISCARD end a watch too; a key on another server than the watched ones is refused.
    let (a, b) = apart(&proxy, &servers).await;
    assert_eq!(cmds(&mut c, &["WATCH", &a]).await, "+OK\r\n");
    assert!(cmds(&mut c, &["WATCH", &b]).await.starts_with("-CROSSSLOT"));
    assert!(cmds(&mut c, &["WATCH", &a, &b])
        .await
        .starts_with("-CROSSSLOT"));
    let replies = pipeline(&mut c, &[&["MULTI"], &["SET", &b, "1"], &["EXEC"]]).await;
    assert!(replies[1].starts_with("-CROSSSLOT"), "{replies:?}");
    assert!(replies[2].starts_with("-EXECABORT"), "{replies:?}");
    until_own_connections(&proxy, 0).await;
    assert_eq!(cmds(&mut c, &["WATCH", &a]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["UNWATCH"]).await, "+OK\r\n");
    until_own_connections(&proxy, 0).await;
    assert_eq!(cmds(&mut c, &["WATCH", &a]).await, "+OK\r\n");
    let replies = pipeline(&mut c, &[&["MULTI"], &["DISCARD"]]).await;
    assert_eq!(replies, ["+OK\r\n", "+OK\r\n"]);
    until_own_connections(&proxy, 0).await;
    // A client that leaves inside a watch gives its connection back.
    assert_eq!(cmds(&mut c, &["WATCH", &a]).await, "+OK\r\n");
    assert_eq!(own_connections(&proxy), 1);
    drop(c);
    until_own_connections(&proxy, 0).await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_pop_waits_as_long_as_the_client_asked_on_a_connection_of_its_own() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    // The pool's timeout is far shorter than the pops' waits: it must not cut them.
    let proxy = RunningProxy::start(pool(&servers, "  timeout: 200\n")).await;
    let mut c = proxy.client().await;
    let started = Instant::now();
    assert_eq!(
        cmds(&mut c, &["BLPOP", "{q}a", "{q}b", "1"]).await,
        "*-1\r\n"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    // A producer on another client wakes it.
    let addr = proxy.addr.clone();
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut p = Client::connect(&addr).await;
        cmds(&mut p, &["RPUSH", "{q}b", "job"]).await
    });
    assert_eq!(
        cmds(&mut c, &["BLPOP", "{q}a", "{q}b", "0"]).await,
        "*2\r\n$4\r\n{q}b\r\n$3\r\njob\r\n"
    );
    assert_eq!(producer.await.unwrap(), ":1\r\n");
    // The connection is kept while the client loops on blocking pops, and given back when it
    // sends anything else.
    assert_eq!(own_connections(&proxy), 1);
    assert_eq!(cmds(&mut c, &["GET", "x"]).await, "$-1\r\n");
    until_own_connections(&proxy, 0).await;
    // A client that leaves in the middle of a pop frees the server's connection at once.
    let mut leaver = proxy.client().await;
    leaver
        .send(&Request::from_args(&["BRPOP", "{q}c", "0"]).frame)
        .await;
    until_own_connections(&proxy, 1).await;
    drop(leaver);
    until_own_connections(&proxy, 0).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut blocked = 0;
        for s in &servers {
            let list = cmds(&mut direct(s).await, &["CLIENT", "LIST"]).await;
            blocked += list.matches("cmd=brpop").count();
        }
        if blocked == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{blocked} server connections still blocked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Inside a transaction a blocking command does not block (Redis's rule): it is queued.
    let replies = pipeline(&mut c, &[&["MULTI"], &["BLPOP", "{q}a", "0"], &["EXEC"]]).await;
    assert_eq!(replies, ["+OK\r\n", "+QUEUED\r\n", "*1\r\n*-1\r\n"]);
    // XREAD BLOCK too.
    let started = Instant::now();
    assert_eq!(
        cmds(&mut c, &["XREAD", "BLOCK", "500", "STREAMS", "{q}s", "$"]).await,
        "*-1\r\n"
    );
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert_eq!(proxy.proxy.views()[0].pool.blocking_requests.get(), 4);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_clients_get_resp3_on_their_own_connections_and_in_transactions() {
    let Some(servers) = redises(1, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    assert!(cmds(&mut c, &["HELLO", "3"]).await.starts_with("%7"));
    assert_eq!(cmds(&mut c, &["BLPOP", "{q}a", "0.2"]).await, "_\r\n");
    assert_eq!(cmds(&mut c, &["HSET", "{q}h", "f", "v"]).await, ":1\r\n");
    let replies = pipeline(&mut c, &[&["MULTI"], &["HGETALL", "{q}h"], &["EXEC"]]).await;
    assert_eq!(replies[2], "*1\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_of_connections_of_their_own_a_client_gets_an_error_and_nothing_is_sent() {
    let Some(servers) = redises(1, &[]) else {
        return;
    };
    let proxy =
        RunningProxy::start(redis_pool(&servers, "", |r| r.dedicated_connections = 1)).await;
    let mut holder = proxy.client().await;
    assert_eq!(cmds(&mut holder, &["WATCH", "{b}k"]).await, "+OK\r\n");
    let mut c = proxy.client().await;
    let refused = cmds(&mut c, &["BLPOP", "{b}q", "0"]).await;
    assert!(
        refused.starts_with("-ERR ") && refused.contains("--redis-dedicated-connections"),
        "{refused}"
    );
    let refused = cmds(&mut c, &["WATCH", "{b}k"]).await;
    assert!(
        refused.contains("--redis-dedicated-connections"),
        "{refused}"
    );
    // The refused WATCH left no watch behind: a transaction runs on the shared connections.
    let replies = pipeline(&mut c, &[&["MULTI"], &["SET", "{b}k", "1"], &["EXEC"]]).await;
    assert_eq!(replies, ["+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"]);
    assert_eq!(own_connections(&proxy), 1);
    assert_eq!(proxy.proxy.views()[0].servers[0].dedicated_refused.get(), 2);
    // The holder's watch saw that write.
    let replies = pipeline(&mut holder, &[&["MULTI"], &["SET", "{b}k", "2"], &["EXEC"]]).await;
    assert_eq!(replies[2], "*-1\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_auth_in_front_of_servers_without_a_password_is_served() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    // Operators set the proxy's password first and the servers' after (nutcracker ignores AUTH's
    // reply, so this works there).
    let proxy = RunningProxy::start(pool(&servers, "  redis_auth: s3cret\n")).await;
    let mut c = proxy.client().await;
    // Before AUTH, what takes a connection of its own or a transaction is refused like the rest.
    for args in [
        &["MULTI"][..],
        &["WATCH", "k"],
        &["BLPOP", "q", "1"],
        &["SUBSCRIBE", "ch"],
        &["PSUBSCRIBE", "p*"],
        &["EXEC"],
    ] {
        assert_eq!(
            cmds(&mut c, args).await,
            "-NOAUTH Authentication required\r\n",
            "{args:?}"
        );
    }
    assert_eq!(cmds(&mut c, &["AUTH", "s3cret"]).await, "+OK\r\n");
    for i in 0..10 {
        assert_eq!(
            cmds(&mut c, &["SET", &format!("a{i}"), "v"]).await,
            "+OK\r\n"
        );
        assert_eq!(cmds(&mut c, &["GET", &format!("a{i}")]).await, bulk("v"));
    }
    let tolerated: u64 = proxy.proxy.views()[0]
        .servers
        .iter()
        .map(|s| s.handshake_errors_tolerated.get())
        .sum();
    assert!(tolerated >= 1, "{tolerated}");
    proxy.stop().await;
    // A wrong password is still refused, with the server's words.
    let Some(locked) = redises(1, &["--requirepass", "right"]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&locked, "  redis_auth: wrong\n")).await;
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["AUTH", "wrong"]).await, "+OK\r\n");
    let refused = cmds(&mut c, &["GET", "k"]).await;
    assert!(
        refused.starts_with("-ERR cannot connect to") && refused.contains("WRONGPASS"),
        "{refused}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_gets_the_servers_own_noperm_and_other_users_are_refused() {
    let Some(servers) = redises(1, &["--requirepass", "adminpw"]) else {
        return;
    };
    let mut admin = direct(&servers[0]).await;
    assert_eq!(cmds(&mut admin, &["AUTH", "adminpw"]).await, "+OK\r\n");
    assert_eq!(
        cmds(
            &mut admin,
            &["ACL", "SETUSER", "app", "on", ">apppw", "~*", "+@all", "-del"]
        )
        .await,
        "+OK\r\n"
    );
    let proxy = RunningProxy::start(redis_pool(&servers, "  redis_auth: apppw\n", |r| {
        r.user = Some("app".into());
    }))
    .await;
    let mut c = proxy.client().await;
    assert_eq!(
        cmds(&mut c, &["AUTH", "bob", "apppw"]).await,
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["AUTH", "app", "nope"]).await,
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(cmds(&mut c, &["AUTH", "app", "apppw"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["SET", "k", "v"]).await, "+OK\r\n");
    // Redis's own words (7.0: "this user has no permissions to run the 'del' command").
    let noperm = cmds(&mut c, &["DEL", "k"]).await;
    assert!(
        noperm.starts_with("-NOPERM ") && noperm.contains("'del'"),
        "{noperm}"
    );
    // The servers saw the user: the key is app's.
    assert_eq!(cmds(&mut admin, &["GET", "k"]).await, bulk("v"));
    let mut c3 = proxy.client().await;
    assert!(cmds(&mut c3, &["HELLO", "3", "AUTH", "app", "apppw"])
        .await
        .starts_with("%7"));
    assert_eq!(cmds(&mut c3, &["GET", "k"]).await, bulk("v"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_the_password_makes_new_server_connections_with_it() {
    let Some(servers) = redises(1, &["--requirepass", "one"]) else {
        return;
    };
    let old = pool(&servers, "  redis_auth: one\n");
    let mut new = pool(&servers, "  redis_auth: two\n");
    new.listen = old.listen.clone();
    let proxy = RunningProxy::start(old).await;
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["AUTH", "one"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["SET", "k", "1"]).await, "+OK\r\n");
    // The operator rotates the password: the server's first, then the proxy's.
    let mut admin = direct(&servers[0]).await;
    assert_eq!(cmds(&mut admin, &["AUTH", "one"]).await, "+OK\r\n");
    assert_eq!(
        cmds(&mut admin, &["CONFIG", "SET", "requirepass", "two"]).await,
        "+OK\r\n"
    );
    proxy
        .proxy
        .reload(shardring_proxy::ProxyConfig { pools: vec![new] })
        .expect("reload");
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["AUTH", "two"]).await, "+OK\r\n");
    // A connection made now greets with the new password (one kept from before would still work
    // only until it reconnects).
    assert_eq!(cmds(&mut c, &["GET", "k"]).await, bulk("1"));
    let list = cmds(
        &mut admin,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .await;
    assert!(list.starts_with(':'), "{list}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = cmds(&mut c, &["GET", "k"]).await;
        if got == bulk("1") {
            break;
        }
        assert!(Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.stop().await;
}
