//! The cluster starter against a real 3-master, 3-replica Redis Cluster: every slot served, keys
//! written straight to their slot's master (by `shardring_resp::key_slot`, so a wrong slot shows as a
//! `MOVED`) and read back, then a master killed and its replica promoted, the window measured.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shardring_resp::key_slot;
use test_support::resp_conn::{Reply, RespConn};
use test_support::{RedisCluster, Role};

/// How long the killed master's replica may take to be promoted: the node timeout (2 s) for the
/// failure to be seen, the gossip that makes it a majority's view, then the election (0.5-1 s).
const PROMOTION: Duration = Duration::from_secs(15);

/// Every slot's master, as a live node sees it; panics naming a slot no master serves.
fn masters_by_slot(cluster: &RedisCluster) -> Vec<String> {
    let map = cluster
        .slot_map()
        .expect("a live node answers CLUSTER SLOTS");
    map.into_iter()
        .enumerate()
        .map(|(slot, m)| m.unwrap_or_else(|| panic!("no master serves slot {slot}")))
        .collect()
}

#[test]
fn keys_go_to_their_slots_master_and_survive_a_master_failover() {
    let started = Instant::now();
    let Some(mut cluster) = RedisCluster::start(3, 1) else {
        return;
    };
    println!(
        "cluster of 6 started and settled in {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.nodes().len(), 6);
    let masters: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.role == Role::Master)
        .map(|n| n.addr.clone())
        .collect();
    assert_eq!(masters.len(), 3, "{:?}", cluster.nodes());
    assert_eq!(cluster.seeds().len(), 6);

    // Every slot is served, by one of the three masters, each serving some.
    let by_slot = masters_by_slot(&cluster);
    let mut served: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &by_slot {
        assert!(masters.contains(m), "{m} serves a slot but is no master");
        *served.entry(m).or_default() += 1;
    }
    assert_eq!(served.values().sum::<usize>(), 16384);
    assert_eq!(served.len(), 3, "{served:?}");

    // 1000 keys, hash tags among them, each SET on the master of its slot: a MOVED would fail it.
    let keys: Vec<Vec<u8>> = (0..1000)
        .map(|i| match i % 4 {
            0 => format!("{{user{}}}.following", i / 4).into_bytes(),
            1 => format!("key:{i}").into_bytes(),
            2 => [b"bin\x00\xff{".as_slice(), &i.to_string().into_bytes()].concat(),
            _ => format!("x{{}}{i}").into_bytes(),
        })
        .collect();
    let mut conns: BTreeMap<String, RespConn> = masters
        .iter()
        .map(|m| {
            (
                m.clone(),
                RespConn::connect(m).expect("connect to a master"),
            )
        })
        .collect();
    let value = |key: &[u8]| [b"v:".as_slice(), key].concat();
    for key in &keys {
        let master = &by_slot[usize::from(key_slot(key))];
        let reply = conns
            .get_mut(master)
            .unwrap()
            .call(&[b"SET", key, &value(key)]);
        assert_eq!(
            reply.unwrap(),
            Reply::Status("OK".into()),
            "SET {key:?} on {master}"
        );
    }
    for key in &keys {
        let master = &by_slot[usize::from(key_slot(key))];
        let reply = conns.get_mut(master).unwrap().call(&[b"GET", key]);
        assert_eq!(reply.unwrap(), Reply::Bulk(value(key)), "GET {key:?}");
    }
    // Every write reached its master's replica before the kill (WAIT 1 replica, 5 s at most).
    for (m, conn) in &mut conns {
        let reply = conn.call_str(&["WAIT", "1", "5000"]).unwrap();
        assert_eq!(reply, Reply::Integer(1), "WAIT on {m}");
    }
    drop(conns);

    // Kill the master of slot 0; its replica must take its slots over.
    let victim = by_slot[0].clone();
    let victim_slots: Vec<u16> = (0..16384u16)
        .filter(|&s| by_slot[usize::from(s)] == victim)
        .collect();
    let killed_at = Instant::now();
    cluster.kill(&victim);
    let promoted = loop {
        let elapsed = killed_at.elapsed();
        assert!(
            elapsed < PROMOTION,
            "no replica of {victim} promoted within {PROMOTION:?}\n{}",
            cluster.logs()
        );
        if let Some(m) = cluster.master_of_slot(0) {
            if m != victim && cluster.role(&m) == Some(Role::Master) {
                break m;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let window = killed_at.elapsed();
    let was = cluster
        .nodes()
        .iter()
        .find(|n| n.addr == promoted)
        .map(|n| n.role);
    assert_eq!(
        was,
        Some(Role::Replica),
        "{promoted} was no replica at start"
    );
    assert_eq!(
        cluster.master_of_slot(0).as_deref(),
        Some(promoted.as_str())
    );
    println!(
        "failover window: {window:?} from killing master {victim} to its replica {promoted} serving its {} slots",
        victim_slots.len()
    );
    // The promoted replica was the victim's, and every other slot kept its master.
    let after = masters_by_slot(&cluster);
    for slot in 0..16384usize {
        let want = if by_slot[slot] == victim {
            &promoted
        } else {
            &by_slot[slot]
        };
        assert_eq!(&after[slot], want, "slot {slot} after the failover");
    }
    // The victim's keys are all on the promoted replica (WAIT made sure they were replicated).
    let mut conn = RespConn::connect(&promoted).unwrap();
    let mut read = 0;
    for key in keys
        .iter()
        .filter(|k| by_slot[usize::from(key_slot(k))] == victim)
    {
        let reply = conn.call(&[b"GET", key]).unwrap();
        assert_eq!(reply, Reply::Bulk(value(key)), "GET {key:?} after failover");
        read += 1;
    }
    assert!(read > 0, "the victim held none of the 1000 keys");
    println!(
        "{read} keys of the killed master read back from {promoted}; whole test {:?}",
        started.elapsed()
    );
}
