//! Redis Cluster pools (`--redis-cluster`) against a real cluster of `redis-server --cluster-enabled
//! yes` nodes made by `redis-cli --cluster create`: keys placed by the cluster's slot map, multi-key
//! commands split by slot, commands across every master, and a slot migrated under the proxy's feet
//! (`ASK` while it moves, `MOVED` after) without a client seeing a redirection.

use std::time::{Duration, Instant};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmd, cmds, read_replies};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring_proxy::config::ServerTlsConfig;
use shardring_proxy::config::{ClusterConfig, PoolConfig, ProtocolConfig, RedisConfig};
use shardring_proxy::protocol::redis::Request;
use test_support::redis_cluster::{ClusterTls, RedisCluster};
use test_support::resp_conn::{Reply, RespConn};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// A cluster pool over `cluster`'s nodes as seeds, reading its map every `refresh`.
fn cluster_pool(cluster: &RedisCluster, refresh: Duration) -> PoolConfig {
    pool_over(cluster.seeds(), refresh)
}

/// A cluster pool over `seeds`, reading its map every `refresh`.
fn pool_over(seeds: Vec<String>, refresh: Duration) -> PoolConfig {
    let lines: Vec<String> = seeds.iter().map(|s| format!("{s}:1")).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut pool = PoolConfig::new("alpha", "127.0.0.1:0", &refs).expect("pool");
    pool.timeout = Some(Duration::from_millis(1000));
    let mut c = ClusterConfig::new(seeds);
    c.refresh = refresh;
    pool.protocol = ProtocolConfig::Redis(RedisConfig {
        cluster: Some(c),
        ..RedisConfig::default()
    });
    pool
}

/// A proxy serving `pool`, with its slot-map follower running until the token is cancelled.
async fn start(pool: PoolConfig) -> (RunningProxy, CancellationToken) {
    let proxy = RunningProxy::start_pools(vec![pool]).await;
    let stop = CancellationToken::new();
    let _followers =
        shardring_proxy::cluster::follow::start(proxy.proxy.pools(), stop.clone()).await;
    (proxy, stop)
}

/// Whether a reply is a redirection, which a client of the proxy must never see.
fn is_redirection(reply: &[u8]) -> bool {
    reply.starts_with(b"-MOVED") || reply.starts_with(b"-ASK")
}

/// A direct call to a node, panicking with what it said when it fails.
fn call(addr: &str, args: &[&str]) -> Reply {
    RespConn::connect(addr)
        .and_then(|mut c| c.call_str(args))
        .unwrap_or_else(|e| panic!("{addr} {args:?}: {e}"))
}

fn node_id(addr: &str) -> String {
    call(addr, &["CLUSTER", "MYID"]).text().expect("an id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_pool_places_every_key_at_its_slots_master_and_splits_by_slot() {
    let Some(cluster) = RedisCluster::start(3, 0) else {
        return;
    };
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(2))).await;
    assert_eq!(
        proxy.proxy.pools()[0].config().servers.len(),
        3,
        "the masters became the pool's servers"
    );
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..600).map(|i| format!("key:{i}")).collect();
    // MSETs of 50 keys in as many slots: split by slot, not only by master.
    let batches: Vec<&[String]> = keys.chunks(50).collect();
    for batch in &batches {
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in *batch {
            args.push(k.as_bytes());
            args.push(k.as_bytes());
        }
        c.send(&Request::from_args(&args).frame).await;
    }
    for r in read_replies(&mut c, batches.len()).await {
        assert_eq!(r, b"+OK\r\n", "{:?}", String::from_utf8_lossy(&r));
    }
    // Each key at its slot's master, as the cluster itself says.
    let map = cluster.slot_map().expect("a map");
    for k in keys.iter().step_by(7) {
        let slot = shardring_resp::key_slot(k.as_bytes());
        let owner = map[usize::from(slot)].clone().expect("a master");
        let reply = call(&owner, &["GET", k]);
        assert_eq!(reply.text().as_deref(), Some(k.as_str()), "{k} at {owner}");
    }
    // MGET across slots, answered in the request's order.
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().take(100).map(|k| k.as_bytes()));
    let reply = String::from_utf8_lossy(&cmd(&mut c, &args).await).into_owned();
    for k in keys.iter().take(100) {
        assert!(reply.contains(&format!("\r\n{k}\r\n")), "{k} in the MGET");
    }
    assert!(reply.starts_with("*100\r\n"), "{reply:.200}");
    // Keys sharing a hash tag share a slot: a multi-key command on them goes whole.
    assert_eq!(cmds(&mut c, &["SADD", "{u1}:a", "x", "y"]).await, ":2\r\n");
    assert_eq!(cmds(&mut c, &["SADD", "{u1}:b", "y", "z"]).await, ":2\r\n");
    assert_eq!(
        cmds(&mut c, &["SINTERCARD", "2", "{u1}:a", "{u1}:b"]).await,
        ":1\r\n"
    );
    // Commands across every master.
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, ":602\r\n");
    assert_eq!(
        cmds(&mut c, &["DEL", "{u1}:a", "{u1}:b", "key:0", "key:1"]).await,
        ":4\r\n"
    );
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, ":598\r\n");
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_the_proxy_is_followed_by_ask_then_moved_and_no_client_sees_either() {
    let Some(cluster) = RedisCluster::start(3, 0) else {
        return;
    };
    // A map read once at start, then only when a redirection asks: the proxy's map is stale for
    // the whole migration, and every request of the slot meets its redirections.
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(600))).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..40).map(|i| format!("{{mig}}:{i}")).collect();
    for k in &keys {
        assert_eq!(cmds(&mut c, &["SET", k, "v1"]).await, "+OK\r\n");
    }
    let slot = shardring_resp::key_slot(b"{mig}");
    let from = cluster.master_of_slot(slot).expect("the slot's master");
    let to = cluster
        .nodes()
        .iter()
        .map(|n| n.addr.clone())
        .find(|a| *a != from)
        .expect("another master");
    let (from_id, to_id) = (node_id(&from), node_id(&to));
    let slot_s = slot.to_string();
    call(&to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]);
    call(&from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]);
    let (to_host, to_port) = to.rsplit_once(':').expect("host:port");
    let migrate = |batch: &[String]| {
        let mut args = vec!["MIGRATE", to_host, to_port, "", "0", "5000", "KEYS"];
        args.extend(batch.iter().map(String::as_str));
        assert_eq!(call(&from, &args), Reply::Status("OK".into()));
    };
    // Half moved: the moved half is answered by `ASK`, followed behind `ASKING`.
    migrate(&keys[..20]);
    for k in &keys {
        let reply = cmd(&mut c, &[b"GET", k.as_bytes()]).await;
        assert!(
            !is_redirection(&reply),
            "{k}: {:?}",
            String::from_utf8_lossy(&reply)
        );
        assert_eq!(reply, b"$2\r\nv1\r\n", "{k}");
    }
    // A new key of the migrating slot is created on its new master (the old one says `ASK`).
    assert_eq!(cmds(&mut c, &["SET", "{mig}:new", "n"]).await, "+OK\r\n");
    assert_eq!(
        call(&to, &["ASKING"]),
        Reply::Status("OK".into()),
        "the importing node takes ASKING"
    );
    assert_eq!(cmds(&mut c, &["GET", "{mig}:new"]).await, "$1\r\nn\r\n");
    // The rest moved and the slot handed over: `MOVED`, followed, and the map read again.
    migrate(&keys[20..]);
    for node in cluster.nodes() {
        call(&node.addr, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
    }
    let changes_before = proxy.proxy.pools()[0].cluster_signal().changes();
    for k in &keys {
        let reply = cmd(&mut c, &[b"SET", k.as_bytes(), b"v2"]).await;
        assert_eq!(
            reply,
            b"+OK\r\n",
            "{k}: {:?}",
            String::from_utf8_lossy(&reply)
        );
    }
    for k in &keys {
        assert_eq!(
            call(&to, &["GET", k]).text().as_deref(),
            Some("v2"),
            "{k} written at its new master"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let changes = proxy.proxy.pools()[0].cluster_signal().changes();
        if changes > changes_before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a MOVED makes the proxy read the map again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let redirections = proxy.proxy.pools()[0].cluster_signal().redirections();
    let mut client: Client = proxy.client().await;
    assert_eq!(cmds(&mut client, &["GET", "{mig}:3"]).await, "$2\r\nv2\r\n");
    assert_eq!(
        proxy.proxy.pools()[0].cluster_signal().redirections(),
        redirections,
        "with the new map, the slot's requests go straight to its master"
    );
    stop.cancel();
    proxy.stop().await;
}

/// Hands `slot` from master `from` to master `to` as `redis-cli --cluster reshard` does: the slot
/// marked importing and migrating, `keys` moved by `MIGRATE`, then given to `to` on every node (`to`
/// first, then `from`, as Redis's documentation orders it), so no node serves it twice.
fn hand_over(cluster: &RedisCluster, slot: u16, from: &str, to: &str, keys: &[&str]) {
    let (from_id, to_id) = (node_id(from), node_id(to));
    let slot_s = slot.to_string();
    call(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]);
    call(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]);
    let (to_host, to_port) = to.rsplit_once(':').expect("host:port");
    let mut args = vec!["MIGRATE", to_host, to_port, "", "0", "5000", "KEYS"];
    args.extend_from_slice(keys);
    let migrated = call(from, &args);
    assert!(
        migrated == Reply::Status("OK".into()) || migrated == Reply::Status("NOKEY".into()),
        "MIGRATE: {migrated:?}"
    );
    let mut order: Vec<&str> = vec![to, from];
    order.extend(
        cluster
            .nodes()
            .iter()
            .map(|n| n.addr.as_str())
            .filter(|a| *a != to && *a != from),
    );
    for node in order {
        call(node, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
    }
}

/// Issue #45: a pipelined client's writes of one key, some planned by a stale map (sent to the slot's
/// old master, which answers `MOVED`) and the later ones after the map was read again (sent straight
/// to the new master), must still land in the client's order. Without a barrier the later writes
/// overtook the redirected earlier ones, and the key ended with an older value than the client's last
/// write.
///
/// The window: a session has at most 256 requests in flight, so of one write of 500 `SET`s the first
/// 256 go by the stale map, and the rest are decoded as answers go out, one by one, while the
/// redirected ones are sent on one at a time, in order; once the `MOVED` the first one met has made
/// the proxy read the map again, the next are decoded against the new one. Each round hands the slot
/// to the next master, so the proxy's map is stale again. Every other round the client shuts down its
/// writing right after the pipeline: what the proxy holds back then is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_writes_to_a_slot_that_moved_land_in_the_clients_order() {
    const ROUNDS: usize = 12;
    const WRITES: usize = 500;
    let Some(cluster) = RedisCluster::start(3, 0) else {
        return;
    };
    // The map is read at start and then only when a redirection asks for it.
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(600))).await;
    let signal = || proxy.proxy.pools()[0].cluster_signal();
    let key = "{order}:k";
    let slot = shardring_resp::key_slot(b"{order}");
    let masters: Vec<String> = cluster.seeds();
    let mut reader = proxy.client().await;
    assert_eq!(cmds(&mut reader, &["SET", key, "v0"]).await, "+OK\r\n");
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        let from = cluster.master_of_slot(slot).expect("the slot's master");
        let at = masters.iter().position(|m| *m == from).expect("a master");
        let to = masters[(at + 1) % masters.len()].clone();
        hand_over(&cluster, slot, &from, &to, &[key]);
        let changes_before = signal().changes();
        let mut pipeline = Vec::new();
        for i in 1..=WRITES {
            let value = format!("r{round}:v{i}");
            pipeline.extend_from_slice(
                &Request::from_args(&[b"SET", key.as_bytes(), value.as_bytes()]).frame,
            );
        }
        let mut c = proxy.client().await;
        c.send(&pipeline).await;
        let half_closed = round % 2 == 1;
        if half_closed {
            c.stream.shutdown().await.expect("shut down writing");
        }
        for (i, reply) in read_replies(&mut c, WRITES).await.iter().enumerate() {
            assert_eq!(
                reply,
                b"+OK\r\n",
                "round {round}, write {}: {:?}",
                i + 1,
                String::from_utf8_lossy(reply)
            );
        }
        if half_closed {
            c.expect_closed().await;
        }
        let last = format!("r{round}:v{WRITES}");
        let at_to = call(&to, &["GET", key]).text();
        let through = cmds(&mut reader, &["GET", key]).await;
        if at_to.as_deref() != Some(last.as_str()) {
            wrong.push(format!("round {round}: {to} holds {at_to:?}, not {last}"));
        } else {
            assert_eq!(
                through,
                format!("${}\r\n{last}\r\n", last.len()),
                "round {round}"
            );
        }
        // The map read again before the next round moves the slot, and the follower's least gap
        // between reads passed, so the next round's first `MOVED` has the map read at once.
        let deadline = Instant::now() + Duration::from_secs(5);
        while signal().changes() == changes_before {
            assert!(
                Instant::now() < deadline,
                "round {round}: a MOVED makes the proxy read the map"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    eprintln!(
        "{} of {ROUNDS} rounds ended with an older write last: {wrong:#?}",
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {ROUNDS} rounds: {wrong:#?}",
        wrong.len()
    );
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_costs_only_its_own_slots_until_its_replica_is_promoted() {
    master_lost(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_costs_only_its_own_slots_until_its_replica_is_promoted() {
    master_lost(Fault::Pause).await;
}

/// How a master is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL: its connections are refused at once.
    Kill,
    /// SIGSTOP: its connections stay open and nothing is answered (each request waits out the
    /// pool's timeout).
    Pause,
}

/// A master lost under a write load through the proxy: only its keys fail, until its replica is
/// promoted and the proxy reads the new map; then every key reads back its last acknowledged value.
async fn master_lost(fault: Fault) {
    // Live masters keep their slots served while one is down (the cluster's default would stop
    // serving every slot until the failover).
    let Some(mut cluster) =
        RedisCluster::start_with(3, 1, &["--cluster-require-full-coverage", "no"])
    else {
        return;
    };
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(2))).await;
    let mut c = proxy.client().await;
    let map = cluster.slot_map().expect("a map");
    let keys: Vec<String> = (0..200).map(|i| format!("fo:{i}")).collect();
    let owner = |k: &str| map[usize::from(shardring_resp::key_slot(k.as_bytes()))].clone();
    let victim = owner(&keys[0]).expect("a master");
    for k in &keys {
        assert_eq!(cmds(&mut c, &["SET", k, "0"]).await, "+OK\r\n");
    }
    match fault {
        Fault::Kill => cluster.kill(&victim),
        Fault::Pause => cluster.pause(&victim),
    }
    let killed = Instant::now();
    let (mut failed, mut served_after, mut last_failure) = (0u32, 0u32, None::<Duration>);
    let mut round = 0u64;
    loop {
        round += 1;
        let value = round.to_string();
        for k in &keys {
            let reply = cmd(&mut c, &[b"SET", k.as_bytes(), value.as_bytes()]).await;
            assert!(
                !is_redirection(&reply),
                "{k}: {:?}",
                String::from_utf8_lossy(&reply)
            );
            if reply == b"+OK\r\n" {
                if owner(k).as_deref() == Some(victim.as_str()) {
                    served_after += 1;
                }
                continue;
            }
            assert_eq!(
                owner(k).as_deref(),
                Some(victim.as_str()),
                "{k} (not the killed master's) failed: {:?}",
                String::from_utf8_lossy(&reply)
            );
            failed += 1;
            last_failure = Some(killed.elapsed());
        }
        let quiet = last_failure.map_or(killed.elapsed(), |t| killed.elapsed() - t);
        if served_after > 0 && quiet > Duration::from_secs(2) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the killed master's keys still fail 30 s on ({failed} failures)\n{}",
            cluster.logs()
        );
    }
    eprintln!(
        "failover ({fault:?}): the lost master's keys failed for {:?} after the fault ({failed} requests), then were served",
        last_failure.unwrap_or_default()
    );
    // Every key holds the last value acknowledged.
    let last = round.to_string();
    for k in &keys {
        assert_eq!(
            cmds(&mut c, &["GET", k]).await,
            format!("${}\r\n{last}\r\n", last.len())
        );
    }
    stop.cancel();
    proxy.stop().await;
}

/// A client's versioned writes and reads of its own keys through the proxy until `stop`: every read
/// must give the version last acknowledged (the client is the keys' only writer). Gives the requests
/// made and the failures seen (each failure's text); panics on a redirection or a wrong value.
async fn versioned_load(
    addr: String,
    client: usize,
    keys: usize,
    stop: tokio_util::sync::CancellationToken,
) -> (u64, Vec<String>) {
    let mut c = Client::connect(&addr).await;
    let mut acked = vec![0u64; keys];
    let (mut requests, mut failures) = (0u64, Vec::new());
    let mut version = 0u64;
    while !stop.is_cancelled() {
        version += 1;
        for (i, last) in acked.iter_mut().enumerate() {
            let key = format!("load:{client}:{i}");
            let value = version.to_string();
            let reply = cmd(&mut c, &[b"SET", key.as_bytes(), value.as_bytes()]).await;
            requests += 1;
            assert!(
                !is_redirection(&reply),
                "{key}: {:?}",
                String::from_utf8_lossy(&reply)
            );
            if reply == b"+OK\r\n" {
                *last = version;
            } else {
                failures.push(String::from_utf8_lossy(&reply).into_owned());
            }
            let reply = cmd(&mut c, &[b"GET", key.as_bytes()]).await;
            requests += 1;
            assert!(
                !is_redirection(&reply),
                "{key}: {:?}",
                String::from_utf8_lossy(&reply)
            );
            if reply.starts_with(b"$") {
                let want = last.to_string();
                assert_eq!(
                    String::from_utf8_lossy(&reply),
                    format!("${}\r\n{want}\r\n", want.len()),
                    "{key}: a read after the write of version {last} was acknowledged"
                );
            } else {
                failures.push(String::from_utf8_lossy(&reply).into_owned());
            }
        }
    }
    (requests, failures)
}

/// `redis-cli --cluster reshard` of `slots` slots from node id `from` to node id `to`, through the
/// node at `seed`, on a blocking thread; panics with redis-cli's output when it fails.
async fn reshard(seed: &str, from: &str, to: &str, slots: usize) {
    let (seed, from, to, slots) = (
        seed.to_owned(),
        from.to_owned(),
        to.to_owned(),
        slots.to_string(),
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("redis-cli")
            .args(["--cluster", "reshard", &seed, "--cluster-from", &from])
            .args(["--cluster-to", &to, "--cluster-slots", &slots])
            .args(["--cluster-yes", "--cluster-pipeline", "20"])
            .output()
            .expect("redis-cli runs")
    })
    .await
    .expect("the reshard thread");
    assert!(
        out.status.success(),
        "redis-cli --cluster reshard: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops the [`versioned_load`] tasks and sums what they saw: requests made, failures' texts.
async fn finish_loads(
    stop: CancellationToken,
    loads: Vec<tokio::task::JoinHandle<(u64, Vec<String>)>>,
) -> (u64, Vec<String>) {
    stop.cancel();
    let (mut requests, mut failures) = (0, Vec::new());
    for load in loads {
        let (r, f) = load.await.expect("a load task");
        requests += r;
        failures.extend(f);
    }
    (requests, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_resharding_under_load_shows_clients_no_redirection_no_stale_value_and_no_error()
{
    let Some(cluster) = RedisCluster::start(3, 0) else {
        return;
    };
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(2))).await;
    let load_stop = CancellationToken::new();
    let loads: Vec<_> = (0..4)
        .map(|client| {
            tokio::spawn(versioned_load(
                proxy.addr.clone(),
                client,
                50,
                load_stop.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Two reshards by redis-cli itself, a thousand slots each, while the load runs.
    let nodes: Vec<String> = cluster.nodes().iter().map(|n| n.addr.clone()).collect();
    let ids: Vec<String> = nodes.iter().map(|a| node_id(a)).collect();
    let redirections_before = proxy.proxy.pools()[0].cluster_signal().redirections();
    for (from, to) in [(0, 1), (1, 2)] {
        reshard(&nodes[0], &ids[from], &ids[to], 1000).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (requests, failures) = finish_loads(load_stop, loads).await;
    let redirections = proxy.proxy.pools()[0].cluster_signal().redirections() - redirections_before;
    eprintln!(
        "resharding 2000 slots under load: {requests} requests, {} failures, {redirections} redirections followed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "failures: {:?}",
        &failures[..failures.len().min(5)]
    );
    assert!(
        redirections > 0,
        "the reshard redirected nothing: the test proves nothing"
    );
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_sharded_pubsub_and_blocking_pops_work_through_a_cluster_pool() {
    let Some(cluster) = RedisCluster::start(3, 0) else {
        return;
    };
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(2))).await;
    let mut sub = proxy.client().await;
    let mut c = proxy.client().await;
    // Channels in different slots: a plain channel reaches every node of a cluster; a shard channel
    // lives at its slot's master, which the proxy subscribes at.
    assert!(cmds(&mut sub, &["SUBSCRIBE", "news"])
        .await
        .contains("subscribe"));
    let shard_channels = ["orders{a}", "orders{b}", "orders{c}"];
    for ch in shard_channels {
        assert!(
            cmds(&mut sub, &["SSUBSCRIBE", ch])
                .await
                .contains("ssubscribe"),
            "{ch}"
        );
    }
    assert_eq!(cmds(&mut c, &["PUBLISH", "news", "hello"]).await, ":1\r\n");
    let message =
        String::from_utf8_lossy(&crate::redis_common::read_reply(&mut sub).await).into_owned();
    assert!(
        message.contains("news") && message.contains("hello"),
        "{message}"
    );
    for ch in shard_channels {
        assert_eq!(cmds(&mut c, &["SPUBLISH", ch, "x"]).await, ":1\r\n", "{ch}");
        let m =
            String::from_utf8_lossy(&crate::redis_common::read_reply(&mut sub).await).into_owned();
        assert!(m.contains("smessage") && m.contains(ch), "{ch}: {m}");
    }
    // A blocking pop on its key's master, woken by a push through another client.
    let mut blocked = proxy.client().await;
    blocked
        .send(&Request::from_args(&[&b"BLPOP"[..], b"jobs", b"5"]).frame)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cmds(&mut c, &["RPUSH", "jobs", "j1"]).await, ":1\r\n");
    assert_eq!(
        String::from_utf8_lossy(&crate::redis_common::read_reply(&mut blocked).await),
        "*2\r\n$4\r\njobs\r\n$2\r\nj1\r\n"
    );
    stop.cancel();
    proxy.stop().await;
}

/// How many `GET`s the node at `addr` has served since its stats were reset.
fn gets_served(addr: &str) -> u64 {
    let info = call(addr, &["INFO", "commandstats"])
        .text()
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_replicas_by_choice_and_to_the_master_when_a_replica_fails() {
    let Some(mut cluster) = RedisCluster::start(3, 1) else {
        return;
    };
    let mut pool = cluster_pool(&cluster, Duration::from_secs(2));
    if let Some(c) = pool.redis_mut().and_then(|r| r.cluster.as_mut()) {
        c.reads = shardring_proxy::config::ReadPolicy::PreferReplica;
    }
    let (proxy, stop) = start(pool).await;
    assert_eq!(
        proxy.proxy.pools()[0].config().servers.len(),
        6,
        "the masters, then their replicas"
    );
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..120).map(|i| format!("ro:{i}")).collect();
    for k in &keys {
        assert_eq!(cmds(&mut c, &["SET", k, k]).await, "+OK\r\n");
    }
    // Every write on every replica before the reads (`WAIT` on a master's own connection).
    let masters: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.role == test_support::redis_cluster::Role::Master)
        .map(|n| n.addr.clone())
        .collect();
    let replicas: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.role == test_support::redis_cluster::Role::Replica)
        .map(|n| n.addr.clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !keys.iter().all(|k| {
        replicas.iter().any(|r| {
            RespConn::connect(r)
                .and_then(|mut c| {
                    c.call_str(&["READONLY"])?;
                    c.call_str(&["GET", k])
                })
                .ok()
                .and_then(|v| v.text())
                .as_deref()
                == Some(k.as_str())
        })
    }) {
        assert!(Instant::now() < deadline, "the replicas did not catch up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in cluster.nodes() {
        call(&node.addr, &["CONFIG", "RESETSTAT"]);
    }
    for k in &keys {
        assert_eq!(
            cmds(&mut c, &["GET", k]).await,
            format!("${}\r\n{k}\r\n", k.len())
        );
    }
    let by_replicas: u64 = replicas.iter().map(|r| gets_served(r)).sum();
    let by_masters: u64 = masters.iter().map(|m| gets_served(m)).sum();
    assert_eq!(
        (by_replicas, by_masters),
        (120, 0),
        "every read at a replica"
    );
    // A write still goes to the master, and a split read's parts to replicas.
    assert_eq!(cmds(&mut c, &["SET", "ro:0", "new"]).await, "+OK\r\n");
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().skip(1).take(30).map(|k| k.as_bytes()));
    let reply = String::from_utf8_lossy(&cmd(&mut c, &args).await).into_owned();
    assert!(
        reply.starts_with("*30\r\n") && reply.contains("ro:30"),
        "{reply:.200}"
    );
    // A replica killed: its master's reads go to the master, without an error.
    let victim = replicas[0].clone();
    cluster.kill(&victim);
    for k in &keys {
        let reply = cmds(&mut c, &["GET", k]).await;
        assert!(reply.starts_with('$'), "{k}: {reply}");
    }
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_added_and_resharded_onto_under_load_costs_clients_nothing() {
    let Some(mut cluster) = RedisCluster::start(3, 0) else {
        return;
    };
    let (proxy, stop) = start(cluster_pool(&cluster, Duration::from_secs(2))).await;
    let load_stop = CancellationToken::new();
    let loads: Vec<_> = (0..3)
        .map(|client| {
            tokio::spawn(versioned_load(
                proxy.addr.clone(),
                client,
                60,
                load_stop.clone(),
            ))
        })
        .collect();
    let added = tokio::task::spawn_blocking(move || {
        let addr = cluster.add_master();
        (cluster, addr)
    })
    .await
    .expect("the add-node thread");
    let (cluster, added) = added;
    // The proxy learns of the new master from its next read of the map.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !proxy.proxy.pools()[0]
        .config()
        .servers
        .iter()
        .any(|s| s.address() == added)
    {
        assert!(Instant::now() < deadline, "the proxy never saw {added}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seed = cluster.nodes()[0].addr.clone();
    reshard(&seed, &node_id(&seed), &node_id(&added), 1500).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (requests, failures) = finish_loads(load_stop, loads).await;
    let on_new = call(&added, &["DBSIZE"]);
    eprintln!(
        "a master added and 1500 slots resharded onto it under load: {requests} requests, {} failures; it holds {on_new:?} keys",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "failures: {:?}",
        &failures[..failures.len().min(5)]
    );
    assert!(matches!(on_new, Reply::Integer(n) if n > 0), "{on_new:?}");
    stop.cancel();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_password_is_served_with_the_pools_redis_auth() {
    let Some(cluster) =
        RedisCluster::start_with(3, 1, &["--requirepass", "s3cret", "--masterauth", "s3cret"])
    else {
        return;
    };
    let mut pool = cluster_pool(&cluster, Duration::from_secs(2));
    if let Some(r) = pool.redis_mut() {
        r.auth = Some("s3cret".into());
    }
    let (proxy, stop) = start(pool).await;
    assert_eq!(
        proxy.proxy.pools()[0].config().servers.len(),
        3,
        "the map read with the password"
    );
    let mut c = proxy.client().await;
    assert!(cmds(&mut c, &["GET", "a"]).await.starts_with("-NOAUTH"));
    assert_eq!(cmds(&mut c, &["AUTH", "s3cret"]).await, "+OK\r\n");
    for i in 0..50 {
        let k = format!("auth:{i}");
        assert_eq!(cmds(&mut c, &["SET", &k, "v"]).await, "+OK\r\n", "{k}");
    }
    let mut args: Vec<String> = vec!["MGET".into()];
    args.extend((0..50).map(|i| format!("auth:{i}")));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(cmds(&mut c, &refs).await.starts_with("*50\r\n$1\r\nv\r\n"));
    assert_eq!(cluster.password(), Some("s3cret"));
    stop.cancel();
    proxy.stop().await;
}

/// A cluster whose nodes speak TLS (to clients, on the bus, to replicas), the pool's seeds their TLS
/// addresses and `--server-tls` its connections: the map's masters are the nodes' TLS ports
/// (`CLUSTER SHARDS` lists `port` and `tls-port`; taking `port` sent TLS handshakes to plain
/// ports), and every command works over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_is_served_over_its_nodes_tls_ports() {
    let pki = crate::tls::Pki::new("cluster");
    let leaf = pki.leaf("node", &["127.0.0.1"], false);
    let tls = ClusterTls {
        cert: leaf.cert.clone(),
        key: leaf.key.clone(),
        ca: pki.ca_pem.clone(),
    };
    let Some(cluster) = RedisCluster::start_tls(3, 1, &tls) else {
        return;
    };
    let tls_seeds = cluster.tls_seeds();
    // The map read at start and on a redirection only: the handover below meets a stale map.
    let mut pool = pool_over(tls_seeds.clone(), Duration::from_secs(600));
    pool.server_tls = Some(ServerTlsConfig {
        ca: Some(pki.ca_pem.clone()),
        ..ServerTlsConfig::default()
    });
    let (proxy, stop) = start(pool).await;
    let servers: Vec<String> = proxy.proxy.pools()[0]
        .config()
        .servers
        .iter()
        .map(TwemproxyServer::address)
        .collect();
    assert_eq!(servers.len(), 3, "the masters: {servers:?}");
    assert!(
        servers.iter().all(|s| tls_seeds.contains(s)),
        "the masters' TLS addresses: {servers:?} of {tls_seeds:?}"
    );
    let mut c = proxy.client().await;
    for i in 0..200 {
        let k = format!("tls:{i}");
        assert_eq!(cmds(&mut c, &["SET", &k, &k]).await, "+OK\r\n", "{k}");
    }
    let mut args: Vec<String> = vec!["MGET".into()];
    args.extend((0..200).map(|i| format!("tls:{i}")));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let got = cmds(&mut c, &refs).await;
    assert!(got.starts_with("*200\r\n$5\r\ntls:0\r\n"), "{got}");
    assert_eq!(cmds(&mut c, &["DBSIZE"]).await, ":200\r\n");
    // Each key is on its slot's master (asked on its plain port).
    for i in (0..200).step_by(17) {
        let k = format!("tls:{i}");
        let slot = shardring_resp::key_slot(k.as_bytes());
        let master = cluster.master_of_slot(slot).expect("a master");
        assert_eq!(
            call(&master, &["GET", &k]).text().as_deref(),
            Some(k.as_str())
        );
    }
    // An empty slot handed to another master: the old one answers `MOVED` with the new one's TLS
    // port (the client's connection is TLS), which the proxy knows and follows at once; a plain
    // port would be an unknown master (`-TRYAGAIN` to the client).
    let slot = shardring_resp::key_slot(b"{tlsmv}");
    let from = cluster.master_of_slot(slot).expect("the slot's master");
    let to = cluster
        .nodes()
        .iter()
        .filter(|n| n.role == test_support::redis_cluster::Role::Master)
        .map(|n| n.addr.clone())
        .find(|a| *a != from)
        .expect("another master");
    let to_id = node_id(&to);
    for node in cluster.nodes() {
        call(
            &node.addr,
            &["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &to_id],
        );
    }
    let redirections = proxy.proxy.pools()[0].cluster_signal().redirections();
    assert_eq!(cmds(&mut c, &["SET", "{tlsmv}:x", "v"]).await, "+OK\r\n");
    assert!(proxy.proxy.pools()[0].cluster_signal().redirections() > redirections);
    assert_eq!(
        call(&to, &["GET", "{tlsmv}:x"]).text().as_deref(),
        Some("v")
    );
    stop.cancel();
    proxy.stop().await;
}
