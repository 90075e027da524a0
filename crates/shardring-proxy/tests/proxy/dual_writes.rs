//! Dual writes against real servers: a pool with a next membership (one server added, or one
//! removed) writes each key whose owner changes on its owner now and its owner next, answers with
//! the owner now's reply, reads from the owner now only, and leaves the keys that stay alone. The
//! stats report the digests of both placements.

use shardring_proxy::config::NextMembership;
use shardring_proxy::PoolConfig;
use test_support::memcacheds;
use test_support::redis::RedisServer;

use crate::common::{pool_config, Client, RunningProxy};
use crate::redis_common::{cmds, direct, pool as redis_pool};

/// The index (in `next`'s servers) of each key's owner now and next.
fn owners(now: &PoolConfig, next: &PoolConfig, key: &str) -> (String, String) {
    let a = now.placement().unwrap();
    let b = next.placement().unwrap();
    (
        a.lookup(key.as_bytes()).unwrap().name().to_owned(),
        b.lookup(key.as_bytes()).unwrap().name().to_owned(),
    )
}

/// The first line of a `get` of `key` sent straight to a server.
async fn first_line(d: &mut Client, key: &str) -> String {
    d.send(format!("get {key}\r\n").as_bytes()).await;
    d.read_line().await
}

/// Four memcached servers, a pool of the first three whose next membership is all four (one
/// added), and the next membership's server names (owners are indexes among them).
fn one_added(servers: &[test_support::Memcached]) -> (PoolConfig, PoolConfig, Vec<String>) {
    // md5 spreads these similar keys evenly over so few servers.
    let mut config = pool_config(&servers[..3]);
    config.hash = shardring_proxy::config::TwemproxyHash::Md5;
    let mut next = pool_config(servers);
    next.hash = config.hash;
    config.next = Some(NextMembership::of(&next));
    let names = next.servers.iter().map(|s| s.display_name()).collect();
    (config, next, names)
}

/// Which way a test's planned change goes: one server added or removed.
#[derive(Clone, Copy)]
enum Change {
    /// The pool is the first three servers; next, all four.
    Added,
    /// The pool is all four; next, the first three.
    Removed,
}

/// Four redis-servers, and a pool of them whose next membership is `change`, md5-hashed (it spreads
/// these similar keys evenly over so few servers, whatever their ports): the servers, the pool, and
/// its next membership. `None` when redis-server is not installed.
fn redis_change(change: Change) -> Option<(Vec<RedisServer>, PoolConfig, PoolConfig)> {
    let servers = (0..4)
        .map(|_| RedisServer::start(&[]))
        .collect::<Option<Vec<_>>>()?;
    let (now, next) = match change {
        Change::Added => (&servers[..3], &servers[..]),
        Change::Removed => (&servers[..], &servers[..3]),
    };
    let mut config = redis_pool(now, "  hash: md5\n");
    let next = redis_pool(next, "  hash: md5\n");
    config.next = Some(NextMembership::of(&next));
    Some((servers, config, next))
}

/// A client straight to each of `servers`.
async fn direct_clients(servers: &[test_support::Memcached]) -> Vec<Client> {
    let mut clients = Vec::new();
    for s in servers {
        clients.push(Client::connect(&s.addr).await);
    }
    clients
}

#[tokio::test]
async fn memcached_writes_of_moving_keys_reach_both_owners_and_reads_stay() {
    let servers = memcacheds(4);
    let (config, next, names) = one_added(&servers);
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let mut direct_clients = direct_clients(&servers).await;
    let (mut moving, mut staying) = (0, 0);
    for i in 0..300 {
        let key = format!("dual:{i}");
        let (now, then) = owners(&config, &next, &key);
        let (now, then) = (
            names.iter().position(|n| *n == now).unwrap(),
            names.iter().position(|n| *n == then).unwrap(),
        );
        c.check(
            format!("set {key} 7 0 2\r\nv1\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
        // noreply stays quiet, and reaches both.
        c.send(format!("append {key} 0 0 2 noreply\r\nv2\r\n").as_bytes())
            .await;
        c.check(
            format!("get {key}\r\n").as_bytes(),
            format!("VALUE {key} 7 4\r\nv1v2\r\nEND\r\n").as_bytes(),
        )
        .await;
        let at_now = first_line(&mut direct_clients[now], &key).await;
        assert_eq!(at_now, format!("VALUE {key} 7 4\r\n"));
        direct_clients[now].read_line().await;
        direct_clients[now].read_line().await;
        if now != then {
            moving += 1;
            let at_next = first_line(&mut direct_clients[then], &key).await;
            assert_eq!(
                at_next,
                format!("VALUE {key} 7 4\r\n"),
                "{key} on its next owner"
            );
            direct_clients[then].read_line().await;
            direct_clients[then].read_line().await;
            // A cas with the owner's unique reaches the next owner too (as a set), and one that
            // the owner refuses does not.
            c.send(format!("gets {key}\r\n").as_bytes()).await;
            let head = c.read_line().await;
            let unique = head.trim_end().rsplit(' ').next().unwrap().to_owned();
            c.read_line().await;
            c.read_line().await;
            c.check(
                format!("cas {key} 8 0 2 {unique}\r\nv3\r\n").as_bytes(),
                b"STORED\r\n",
            )
            .await;
            c.check(
                format!("cas {key} 9 0 2 {unique}\r\nv4\r\n").as_bytes(),
                b"EXISTS\r\n",
            )
            .await;
            direct_clients[then]
                .check(
                    format!("get {key}\r\n").as_bytes(),
                    format!("VALUE {key} 8 2\r\nv3\r\nEND\r\n").as_bytes(),
                )
                .await;
            // A delete reaches both too.
            c.check(format!("delete {key}\r\n").as_bytes(), b"DELETED\r\n")
                .await;
            direct_clients[then]
                .check(format!("get {key}\r\n").as_bytes(), b"END\r\n")
                .await;
        } else {
            staying += 1;
        }
    }
    assert!(
        moving > 20 && staying > 100,
        "{moving} moving, {staying} staying"
    );
    // The added server got only the moving keys' writes (nothing read from it).
    let mut d = Client::connect(&servers[3].addr).await;
    d.send(b"stats\r\n").await;
    let mut gets = None;
    loop {
        let line = d.read_line().await;
        if line.starts_with("STAT cmd_get ") {
            gets = line.trim_end().rsplit(' ').next().map(str::to_owned);
        }
        if line == "END\r\n" {
            break;
        }
    }
    // Only the test's own direct gets (three a moving key).
    let direct_gets: u64 = gets.unwrap().parse().unwrap();
    assert!(
        direct_gets <= 3 * moving as u64,
        "{direct_gets} gets on the added server"
    );
    let views = proxy.proxy.views();
    let placements = &views[0].placements;
    assert_eq!(placements.current, config.placement_spec().digest());
    assert_eq!(placements.next, next.placement_spec().digest());
    assert!(views[0].pool.dual_writes.get() >= 2 * moving as u64);
    proxy.stop().await;
}

#[tokio::test]
async fn memcached_without_a_next_membership_or_with_an_equal_one_writes_once() {
    let servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.next = Some(NextMembership::of(&config));
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    for i in 0..50 {
        c.check(
            format!("set same:{i} 0 0 1\r\nx\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
    }
    let views = proxy.proxy.views();
    assert_eq!(views[0].pool.dual_writes.get(), 0);
    assert_eq!(views[0].placements.current, views[0].placements.next);
    proxy.stop().await;
}

#[tokio::test]
async fn redis_writes_of_moving_keys_reach_both_owners_split_writes_too() {
    let Some((servers, config, next)) = redis_change(Change::Removed) else {
        return;
    };
    let names: Vec<String> = config.servers.iter().map(|s| s.display_name()).collect();
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let mut direct_clients = Vec::new();
    for s in &servers {
        direct_clients.push(direct(s).await);
    }
    let mut moving = 0;
    for i in 0..200 {
        let key = format!("r:{i}");
        let (now, then) = owners(&config, &next, &key);
        let now = names.iter().position(|n| *n == now).unwrap();
        let then = names.iter().position(|n| *n == then).unwrap();
        assert_eq!(cmds(&mut c, &["HSET", &key, "f", "1"]).await, ":1\r\n");
        assert_eq!(cmds(&mut c, &["HINCRBY", &key, "f", "2"]).await, ":3\r\n");
        assert_eq!(
            cmds(
                &mut c,
                &["MSET", &format!("{key}:a"), "x", &format!("{key}:b"), "y"]
            )
            .await,
            "+OK\r\n"
        );
        assert_eq!(
            cmds(&mut direct_clients[now], &["HGET", &key, "f"]).await,
            "$1\r\n3\r\n"
        );
        if now != then {
            moving += 1;
            assert_eq!(
                cmds(&mut direct_clients[then], &["HGET", &key, "f"]).await,
                "$1\r\n3\r\n",
                "{key} on its next owner"
            );
            assert_eq!(cmds(&mut c, &["DEL", &key]).await, ":1\r\n");
            assert_eq!(
                cmds(&mut direct_clients[then], &["EXISTS", &key]).await,
                ":0\r\n"
            );
        } else {
            assert_eq!(
                cmds(&mut direct_clients[then], &["EXISTS", &key]).await,
                ":1\r\n"
            );
        }
    }
    assert!(moving > 20, "{moving} moving");
    // Every MSET key that moves reached its next owner (the split write's copies).
    for i in 0..200 {
        for suffix in ["a", "b"] {
            let key = format!("r:{i}:{suffix}");
            let (_, then) = owners(&config, &next, &key);
            let then = names.iter().position(|n| *n == then).unwrap();
            let want = if suffix == "a" {
                "$1\r\nx\r\n"
            } else {
                "$1\r\ny\r\n"
            };
            assert_eq!(
                cmds(&mut direct_clients[then], &["GET", &key]).await,
                want,
                "{key}"
            );
        }
    }
    let views = proxy.proxy.views();
    assert_eq!(views[0].placements.next, next.placement_spec().digest());
    proxy.stop().await;
}

/// A write whose next owner cannot be reached is not acknowledged: once the copy is done nothing
/// would bring it there, and the cut-over would lose it. Keys that stay, and reads, are served.
#[tokio::test]
async fn a_write_its_next_owner_did_not_take_is_not_acknowledged() {
    let mut servers = memcacheds(4);
    let mut config = pool_config(&servers[..3]);
    config.hash = shardring_proxy::config::TwemproxyHash::Md5;
    let mut next = pool_config(&servers);
    next.hash = config.hash;
    config.next = Some(NextMembership::of(&next));
    let proxy = RunningProxy::start(config.clone()).await;
    let added = next.servers[3].display_name();
    servers[3].kill();
    let mut c = proxy.client().await;
    let (mut refused, mut stored) = (0, 0);
    for i in 0..200 {
        let key = format!("dual:{i}");
        let (_, then) = owners(&config, &next, &key);
        c.send(format!("set {key} 0 0 2\r\nv1\r\n").as_bytes())
            .await;
        let line = c.read_line().await;
        if then == added {
            assert!(line.starts_with("SERVER_ERROR"), "{key}: {line:?}");
            refused += 1;
        } else {
            assert_eq!(line, "STORED\r\n", "{key}");
            stored += 1;
        }
    }
    assert!(
        refused > 10 && stored > 10,
        "{refused} refused, {stored} stored"
    );
    proxy.stop().await;

    // Redis: the same for a one-key write and a split one.
    let Some((mut rs, config, next)) = redis_change(Change::Added) else {
        return;
    };
    let added = next.servers[3].display_name();
    let proxy = RunningProxy::start(config.clone()).await;
    rs[3].kill();
    let mut c = proxy.client().await;
    let mut refused = 0;
    for i in 0..100 {
        let key = format!("r:{i}");
        let (_, then) = owners(&config, &next, &key);
        let set = cmds(&mut c, &["SET", &key, "v"]).await;
        let mset = cmds(&mut c, &["MSET", &key, "v", "{x}other", "w"]).await;
        if then == added {
            assert!(set.starts_with('-'), "{key}: {set:?}");
            assert!(mset.starts_with('-'), "{key}: {mset:?}");
            refused += 1;
        } else {
            assert_eq!(set, "+OK\r\n", "{key}");
        }
    }
    assert!(refused > 5, "{refused}");
    proxy.stop().await;
}

/// Transactions and blocking commands run on one server and are not dual-written: while a change is
/// planned, one that writes a key the change moves is refused with `-TRYAGAIN` (it would be lost at
/// the cut-over), and the same commands on keys that stay are served.
#[tokio::test]
async fn a_transaction_or_blocking_pop_of_a_moving_key_is_refused_during_a_change() {
    let Some((_rs, config, next)) = redis_change(Change::Removed) else {
        return;
    };
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let (mut moving, mut staying) = (None, None);
    for i in 0..200 {
        let key = format!("t:{i}");
        let (now, then) = owners(&config, &next, &key);
        if now != then {
            moving.get_or_insert(key);
        } else {
            staying.get_or_insert(key);
        }
    }
    let (moving, staying) = (moving.unwrap(), staying.unwrap());
    // A transaction writing a key that stays: served.
    assert_eq!(cmds(&mut c, &["MULTI"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["SET", &staying, "1"]).await, "+QUEUED\r\n");
    assert_eq!(cmds(&mut c, &["EXEC"]).await, "*1\r\n+OK\r\n");
    // One writing a key that moves: refused, nothing applied.
    assert_eq!(cmds(&mut c, &["MULTI"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["SET", &moving, "1"]).await, "+QUEUED\r\n");
    let exec = cmds(&mut c, &["EXEC"]).await;
    assert!(exec.starts_with("-TRYAGAIN"), "{exec:?}");
    assert_eq!(cmds(&mut c, &["EXISTS", &moving]).await, ":0\r\n");
    // A blocking pop of a key that moves: refused; of one that stays: served.
    assert_eq!(cmds(&mut c, &["RPUSH", &moving, "x"]).await, ":1\r\n");
    let pop = cmds(&mut c, &["BLPOP", &moving, "1"]).await;
    assert!(pop.starts_with("-TRYAGAIN"), "{pop:?}");
    assert_eq!(cmds(&mut c, &["DEL", &staying]).await, ":1\r\n");
    assert_eq!(cmds(&mut c, &["RPUSH", &staying, "y"]).await, ":1\r\n");
    let popped = cmds(&mut c, &["BLPOP", &staying, "1"]).await;
    assert!(popped.starts_with("*2\r\n"), "{popped:?}");
    proxy.stop().await;
}

/// A write whose keys share a server now but not next cannot be dual-written as one command: refused
/// during the change; keys that stay together are served.
#[tokio::test]
async fn a_write_whose_keys_a_change_moves_apart_is_refused_during_it() {
    let Some((_rs, config, next)) = redis_change(Change::Removed) else {
        return;
    };
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    // Two keys on one server now, whose owners next differ (one moves, one stays there).
    let keys: Vec<String> = (0..400).map(|i| format!("a:{i}")).collect();
    let mut pair = None;
    'outer: for a in &keys {
        for b in &keys {
            let ((na, xa), (nb, xb)) = (owners(&config, &next, a), owners(&config, &next, b));
            if na == nb && xa != xb {
                pair = Some((a.clone(), b.clone()));
                break 'outer;
            }
        }
    }
    let (a, b) = pair.expect("two keys together now and apart next");
    let reply = cmds(&mut c, &["RENAME", &a, &b]).await;
    assert!(reply.starts_with("-TRYAGAIN"), "{reply:?}");
    // With one hash tag they stay together: served (here, no such key: Redis's own error).
    let tagged = cmds(&mut c, &["RENAME", "{t}a", "{t}b"]).await;
    assert!(tagged.starts_with("-ERR no such key"), "{tagged:?}");
    proxy.stop().await;
}

/// The TTL a server gives `key` (`mg <key> t`): `None` when it does not hold it, -1 for none.
async fn ttl(d: &mut Client, key: &str) -> Option<i64> {
    d.send(format!("mg {key} t\r\n").as_bytes()).await;
    let line = d.read_line().await;
    let ttl = line.trim_end().strip_prefix("HD t")?;
    Some(ttl.parse().unwrap())
}

#[tokio::test]
async fn memcached_gat_and_gats_of_moving_keys_touch_their_next_owner() {
    let servers = memcacheds(4);
    let (config, next, names) = one_added(&servers);
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let mut direct_clients = direct_clients(&servers).await;
    let owner = |key: &str| {
        let (now, then) = owners(&config, &next, key);
        (
            names.iter().position(|n| *n == now).unwrap(),
            names.iter().position(|n| *n == then).unwrap(),
        )
    };
    // Every key on its owner now and (as a copy would have put it) on its owner next, without a TTL.
    let keys: Vec<String> = (0..60).map(|i| format!("gat:{i}")).collect();
    for key in &keys {
        let (now, then) = owner(key);
        for s in [now, then] {
            direct_clients[s]
                .check(
                    format!("set {key} 3 0 1\r\nv\r\n").as_bytes(),
                    b"STORED\r\n",
                )
                .await;
        }
    }
    // `gat` one key at a time, then `gats` of the rest at once: the new TTL on both owners.
    let (one, rest) = keys.split_at(30);
    for key in one {
        c.check(
            format!("gat 1000 {key}\r\n").as_bytes(),
            format!("VALUE {key} 3 1\r\nv\r\nEND\r\n").as_bytes(),
        )
        .await;
    }
    c.send(format!("gats 2000 {}\r\n", rest.join(" ")).as_bytes())
        .await;
    for _ in rest {
        assert!(c.read_line().await.starts_with("VALUE "));
        c.read_line().await;
    }
    assert_eq!(c.read_line().await, "END\r\n");
    let mut moving = 0;
    for (i, key) in keys.iter().enumerate() {
        let want = if i < 30 { 1000 } else { 2000 };
        let (now, then) = owner(key);
        let at_now = ttl(&mut direct_clients[now], key).await.unwrap();
        assert!(
            (want - 5..=want).contains(&at_now),
            "{key} on its owner now: {at_now}"
        );
        if now == then {
            continue;
        }
        moving += 1;
        // The touch goes beside the read, without waiting: it lands at once, not before the answer.
        let mut at_next = None;
        for _ in 0..100 {
            at_next = ttl(&mut direct_clients[then], key).await;
            if at_next != Some(-1) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let at_next = at_next.unwrap();
        assert!(
            (want - 5..=want).contains(&at_next),
            "{key} on its next owner: {at_next}"
        );
    }
    assert!(moving >= 5, "{moving} moving keys");
    proxy.stop().await;
}

/// A write whose next owner refuses it for the state of its server (memcached: an item over its
/// size limit, `SERVER_ERROR`; Redis: `-OOM` over its maxmemory) while the owner now stores it is
/// not acknowledged either, with and without replicas; a Redis pool with replicas writes a moving
/// key on its owner next too. Writes of keys that stay are served.
#[tokio::test]
async fn a_write_its_next_owner_refused_is_not_acknowledged_with_and_without_replicas() {
    let value = "x".repeat(2000);
    for replicas in [1, 2] {
        // The added server takes items of at most 1 kB.
        let mut servers = memcacheds(3);
        servers.push(test_support::Memcached::start_with(&[
            "-I",
            "1k",
            "-o",
            "slab_chunk_max=1024",
        ]));
        let mut config = pool_config(&servers[..3]);
        config.hash = shardring_proxy::config::TwemproxyHash::Md5;
        config.remedies.replicas = replicas;
        let mut next = pool_config(&servers);
        next.hash = config.hash;
        config.next = Some(NextMembership::of(&next));
        let added = next.servers[3].display_name();
        let proxy = RunningProxy::start(config.clone()).await;
        let mut c = proxy.client().await;
        let (mut refused, mut stored) = (0, 0);
        for i in 0..200 {
            let key = format!("big:{i}");
            let (_, then) = owners(&config, &next, &key);
            c.send(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes())
                .await;
            let line = c.read_line().await;
            if then == added {
                assert!(
                    line.starts_with("SERVER_ERROR the planned change's next owner")
                        && line.contains(&servers[3].addr),
                    "replicas {replicas}, {key}: {line:?}"
                );
                refused += 1;
            } else {
                assert_eq!(line, "STORED\r\n", "replicas {replicas}, {key}");
                stored += 1;
            }
        }
        assert!(
            refused > 10 && stored > 10,
            "{refused} refused, {stored} stored"
        );
        proxy.stop().await;
    }

    for replicas in [1, 2] {
        let Some((rs, mut config, next)) = redis_change(Change::Added) else {
            return;
        };
        config.remedies.replicas = replicas;
        let added = next.servers[3].display_name();
        let proxy = RunningProxy::start(config.clone()).await;
        let mut c = proxy.client().await;
        let mut on_added = direct(&rs[3]).await;
        // Before it is full, a moving key's write reaches the added server (with replicas too).
        let mut moving = Vec::new();
        for i in 0..100 {
            let key = format!("r:{i}");
            let (_, then) = owners(&config, &next, &key);
            assert_eq!(cmds(&mut c, &["SET", &key, "v"]).await, "+OK\r\n");
            if then == added {
                assert_eq!(
                    cmds(&mut on_added, &["GET", &key]).await,
                    "$1\r\nv\r\n",
                    "replicas {replicas}: {key} on its next owner"
                );
                moving.push(key);
            }
        }
        assert!(moving.len() > 5, "{moving:?}");
        assert_eq!(
            cmds(
                &mut on_added,
                &["CONFIG", "SET", "maxmemory-policy", "noeviction"]
            )
            .await,
            "+OK\r\n"
        );
        assert_eq!(
            cmds(&mut on_added, &["CONFIG", "SET", "maxmemory", "1"]).await,
            "+OK\r\n"
        );
        for i in 0..100 {
            let key = format!("r:{i}");
            let (_, then) = owners(&config, &next, &key);
            let set = cmds(&mut c, &["SET", &key, "w"]).await;
            let mset = cmds(&mut c, &["MSET", &key, "w", "{x}other", "o"]).await;
            if then == added {
                assert!(
                    set.starts_with("-ERR the planned change's next owner") && set.contains("OOM"),
                    "replicas {replicas}, {key}: {set:?}"
                );
                assert!(
                    mset.starts_with("-ERR"),
                    "replicas {replicas}, {key}: {mset:?}"
                );
            } else {
                assert_eq!(set, "+OK\r\n", "replicas {replicas}, {key}");
            }
        }
        proxy.stop().await;
    }
}

/// A `flush_all` during a planned change reaches the server it adds too: the copies dual writes made
/// there would otherwise come back at the cut-over, flushed keys read again.
#[tokio::test]
async fn memcached_flush_all_during_a_change_empties_the_added_server_too() {
    let servers = memcacheds(4);
    let (config, next, names) = one_added(&servers);
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let mut on_added = 0;
    for i in 0..100 {
        let key = format!("f:{i}");
        c.check(
            format!("set {key} 0 0 1\r\nv\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
        let (_, then) = owners(&config, &next, &key);
        on_added += usize::from(then == names[3]);
    }
    assert!(on_added > 5, "{on_added}");
    let mut added = Client::connect(&servers[3].addr).await;
    added.send(b"stats\r\n").await;
    let mut items = 0;
    loop {
        let line = added.read_line().await;
        if let Some(n) = line.strip_prefix("STAT curr_items ") {
            items = n.trim_end().parse::<usize>().unwrap();
        }
        if line == "END\r\n" {
            break;
        }
    }
    assert_eq!(items, on_added, "the dual writes' copies");
    c.check(b"flush_all\r\n", b"OK\r\n").await;
    for i in 0..100 {
        let key = format!("f:{i}");
        assert_eq!(first_line(&mut added, &key).await, "END\r\n", "{key}");
    }
    proxy.stop().await;
}

/// An `EVALSHA` of a script that the server a change adds has not cached is refused there
/// (`-NOSCRIPT`): the write is not acknowledged. One `EVAL` through the proxy loads it on both
/// owners, and the `EVALSHA` then goes through.
#[tokio::test]
async fn redis_evalsha_of_a_script_the_next_owner_lacks_is_refused_until_an_eval_loads_it() {
    let Some((rs, config, next)) = redis_change(Change::Added) else {
        return;
    };
    let added = next.servers[3].display_name();
    let script = "return redis.call('SET', KEYS[1], ARGV[1])";
    // Cached on the servers of the pool now, before the change (as a client's earlier EVAL would).
    let mut sha = String::new();
    for s in &rs[..3] {
        let reply = cmds(&mut direct(s).await, &["SCRIPT", "LOAD", script]).await;
        sha = reply.lines().nth(1).unwrap().to_owned();
    }
    let key = (0..200)
        .map(|i| format!("s:{i}"))
        .find(|k| owners(&config, &next, k).1 == added)
        .expect("a key that moves to the added server");
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let refused = cmds(&mut c, &["EVALSHA", &sha, "1", &key, "v1"]).await;
    assert!(
        refused.starts_with("-ERR the planned change's next owner") && refused.contains("NOSCRIPT"),
        "{refused:?}"
    );
    assert_eq!(
        cmds(&mut c, &["EVAL", script, "1", &key, "v2"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        cmds(&mut c, &["EVALSHA", &sha, "1", &key, "v3"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        cmds(&mut direct(&rs[3]).await, &["GET", &key]).await,
        "$2\r\nv3\r\n"
    );
    proxy.stop().await;
}

/// A `cas` of a moving key in a pool with replicas reaches its owner next as the value it stored:
/// its unique is the owner's, which the owner next does not share, so it goes on as a `set` once
/// stored (as without replicas).
#[tokio::test]
async fn memcached_cas_of_a_moving_key_with_replicas_reaches_its_next_owner() {
    let servers = memcacheds(4);
    let (mut config, next, names) = one_added(&servers);
    config.remedies.replicas = 2;
    let proxy = RunningProxy::start(config.clone()).await;
    let mut c = proxy.client().await;
    let mut added = Client::connect(&servers[3].addr).await;
    let mut moving = 0;
    for i in 0..100 {
        let key = format!("cas:{i}");
        if owners(&config, &next, &key).1 != names[3] {
            continue;
        }
        moving += 1;
        c.check(
            format!("set {key} 0 0 2\r\nv1\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
        c.send(format!("gets {key}\r\n").as_bytes()).await;
        let line = c.read_line().await;
        let unique = line.trim_end().rsplit(' ').next().unwrap().to_owned();
        c.read_n(4).await;
        assert_eq!(c.read_line().await, "END\r\n");
        c.check(
            format!("cas {key} 0 0 2 {unique}\r\nv2\r\n").as_bytes(),
            b"STORED\r\n",
        )
        .await;
        added.send(format!("get {key}\r\n").as_bytes()).await;
        assert_eq!(
            added.read_line().await,
            format!("VALUE {key} 0 2\r\n"),
            "{key}"
        );
        assert_eq!(added.read_line().await, "v2\r\n", "{key} on its next owner");
        assert_eq!(added.read_line().await, "END\r\n");
    }
    assert!(moving > 5, "{moving}");
    proxy.stop().await;
}

/// A direct call to a cluster node (or any redis server), panicking with what it said when it fails.
fn call_node(addr: &str, args: &[&str]) -> test_support::resp_conn::Reply {
    test_support::resp_conn::RespConn::connect(addr)
        .and_then(|mut c| c.call_str(args))
        .unwrap_or_else(|e| panic!("{addr} {args:?}: {e}"))
}

/// What `key` holds on its slot's master, asked directly.
fn on_cluster(cluster: &test_support::redis_cluster::RedisCluster, key: &str) -> Option<String> {
    let master = cluster
        .master_of_slot(key_slot(key) as u16)
        .expect("a master");
    call_node(&master, &["GET", key]).text()
}

/// A pool over `server` whose next membership is `cluster` (seeded by all its nodes), as a file
/// marked `# shardring: redis-cluster` gives it.
fn onto_cluster(
    server: &RedisServer,
    cluster: &test_support::redis_cluster::RedisCluster,
) -> PoolConfig {
    let mut config = redis_pool(std::slice::from_ref(server), "");
    let seeds = cluster.seeds();
    let lines: Vec<String> = seeds.iter().map(|s| format!("{s}:1")).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let next = PoolConfig::new("alpha", "127.0.0.1:0", &refs).unwrap();
    config.next = Some(NextMembership {
        cluster: Some(shardring_proxy::config::ClusterConfig::new(seeds)),
        ..NextMembership::of(&next)
    });
    config
}

/// A pool whose next membership is a Redis Cluster (its file marks it so; here, set as the file
/// would): once the proxy has read the cluster's slot map, a write goes to the key's server now
/// and to its slot's master, a split write is split by slot there (a node refuses two slots), and
/// a one-server write whose keys are in two slots is refused (`CROSSSLOT` there would lose it).
/// Before the map is read, nothing is dual-written and the next membership is not reported.
#[tokio::test]
async fn redis_writes_onto_a_next_cluster_go_to_each_keys_slot_master_split_by_slot() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let Some(cluster) = test_support::redis_cluster::RedisCluster::start(3, 0) else {
        return;
    };
    let config = onto_cluster(&server, &cluster);
    let proxy = RunningProxy::start(config.clone()).await;
    let pool = std::sync::Arc::clone(&proxy.proxy.pools()[0]);
    // No map yet: no next membership reported, nothing dual-written.
    let view = pool.view().placements;
    assert_eq!(view.next, view.current, "reported before the map was read");
    let mut c = proxy.client().await;
    assert_eq!(cmds(&mut c, &["SET", "early", "1"]).await, "+OK\r\n");
    assert_eq!(on_cluster(&cluster, "early"), None);
    let stop = tokio_util::sync::CancellationToken::new();
    let _followers =
        shardring_proxy::cluster::follow::start(proxy.proxy.pools(), stop.clone()).await;
    let view = pool.view().placements;
    assert_ne!(
        view.next, view.current,
        "the map is read: the next membership is reported"
    );
    assert!(
        view.next_text.contains("redis-cluster"),
        "{}",
        view.next_text
    );
    let mut c = proxy.client().await;
    for i in 0..50 {
        let key = format!("one:{i}");
        assert_eq!(
            cmds(&mut c, &["SET", &key, &format!("v{i}")]).await,
            "+OK\r\n"
        );
        assert_eq!(on_cluster(&cluster, &key), Some(format!("v{i}")), "{key}");
    }
    // Twenty keys over many slots in one MSET: each on its slot's master.
    let mut mset = vec!["MSET".to_owned()];
    for i in 0..20 {
        mset.push(format!("many:{i}"));
        mset.push(format!("m{i}"));
    }
    let args: Vec<&str> = mset.iter().map(String::as_str).collect();
    assert_eq!(cmds(&mut c, &args).await, "+OK\r\n");
    for i in 0..20 {
        assert_eq!(
            on_cluster(&cluster, &format!("many:{i}")),
            Some(format!("m{i}"))
        );
    }
    let del: Vec<String> = (0..20).map(|i| format!("many:{i}")).collect();
    let mut args = vec!["DEL"];
    args.extend(del.iter().map(String::as_str));
    assert_eq!(cmds(&mut c, &args).await, ":20\r\n");
    assert_eq!(on_cluster(&cluster, "many:3"), None);
    // One server now, two slots next (of one master, or of two): refused, nothing applied; one
    // hash tag: served.
    let master = |k: &str| {
        let slot = key_slot(k) as u16;
        (slot, cluster.master_of_slot(slot))
    };
    let (first, _) = master("one:1");
    let same_master = (2..50)
        .map(|i| format!("one:{i}"))
        .find(|k| {
            let (slot, m) = master(k);
            slot != first && m == master("one:1").1
        })
        .expect("a key of another slot of the same master");
    for other in ["one:2", same_master.as_str()] {
        let reply = cmds(&mut c, &["RENAME", "one:1", other]).await;
        assert!(
            reply.starts_with("-TRYAGAIN"),
            "RENAME one:1 {other}: {reply:?}"
        );
        assert_eq!(cmds(&mut c, &["EXISTS", "one:1"]).await, ":1\r\n");
    }
    assert_eq!(cmds(&mut c, &["SET", "{t}a", "x"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["RENAME", "{t}a", "{t}b"]).await, "+OK\r\n");
    assert_eq!(on_cluster(&cluster, "{t}b"), Some("x".into()));
    assert_eq!(on_cluster(&cluster, "{t}a"), None);
    // Reads stay on the server now.
    let mut d = direct(&server).await;
    assert_eq!(cmds(&mut d, &["SET", "one:7", "only-now"]).await, "+OK\r\n");
    assert_eq!(cmds(&mut c, &["GET", "one:7"]).await, "$8\r\nonly-now\r\n");
    stop.cancel();
    proxy.stop().await;
}

/// A master of the next cluster killed while the proxy dual-writes onto it: only the writes of its
/// slots fail (not acknowledged: the cut-over would lose them), and only until its replica is
/// promoted and the proxy has read the new map; then they are dual-written to the new master, and
/// every key there and on the server now holds its last acknowledged value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_cluster_master_killed_costs_only_its_slots_writes_until_its_replica_is_promoted() {
    let Some(server) = RedisServer::start(&[]) else {
        return;
    };
    let Some(mut cluster) = test_support::redis_cluster::RedisCluster::start_with(
        3,
        1,
        &["--cluster-require-full-coverage", "no"],
    ) else {
        return;
    };
    let config = onto_cluster(&server, &cluster);
    let proxy = RunningProxy::start(config).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let _followers =
        shardring_proxy::cluster::follow::start(proxy.proxy.pools(), stop.clone()).await;
    let mut c = proxy.client().await;
    let map = cluster.slot_map().expect("a map");
    let owner = |k: &str| map[key_slot(k)].clone();
    let keys: Vec<String> = (0..200).map(|i| format!("fo:{i}")).collect();
    let victim = owner(&keys[0]).expect("a master");
    for k in &keys {
        assert_eq!(cmds(&mut c, &["SET", k, "0"]).await, "+OK\r\n");
    }
    cluster.kill(&victim);
    let killed = std::time::Instant::now();
    let mut acked: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let (mut failed, mut served_after, mut last_failure) = (0u32, 0u32, None);
    let mut round = 0u64;
    loop {
        round += 1;
        for k in &keys {
            let reply = cmds(&mut c, &["SET", k, &round.to_string()]).await;
            if reply == "+OK\r\n" {
                acked.insert(k, round);
                if owner(k).as_deref() == Some(victim.as_str()) {
                    served_after += 1;
                }
                continue;
            }
            assert_eq!(
                owner(k).as_deref(),
                Some(victim.as_str()),
                "{k} (not the killed master's) failed: {reply:?}"
            );
            failed += 1;
            last_failure = Some(killed.elapsed());
        }
        let quiet = last_failure.map_or(killed.elapsed(), |t| killed.elapsed() - t);
        if served_after > 0 && quiet > std::time::Duration::from_secs(2) {
            break;
        }
        assert!(
            killed.elapsed() < std::time::Duration::from_secs(30),
            "the killed master's keys still fail 30 s on ({failed} failures)\n{}",
            cluster.logs()
        );
    }
    eprintln!(
        "next cluster failover: the lost master's keys' writes failed for {:?} ({failed} requests), then were dual-written",
        last_failure.unwrap_or_default()
    );
    assert!(failed > 0, "the killed master's writes never failed");
    // Every key holds its last acknowledged value through the proxy (the server now) and on its
    // slot's master now (the promoted replica for the victim's).
    for k in &keys {
        let want = acked[k.as_str()].to_string();
        assert_eq!(
            cmds(&mut c, &["GET", k]).await,
            format!("${}\r\n{want}\r\n", want.len())
        );
        let slot = key_slot(k);
        let master = cluster.master_of_slot(slot as u16).expect("a master");
        assert_eq!(
            call_node(&master, &["GET", k]).text(),
            Some(want),
            "{k} on {master}"
        );
    }
    stop.cancel();
    proxy.stop().await;
}

/// `key`'s Redis Cluster slot.
fn key_slot(key: &str) -> usize {
    usize::from(shardring_resp::key_slot(key.as_bytes()))
}
