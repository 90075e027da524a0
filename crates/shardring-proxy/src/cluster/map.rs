//! A cluster's slot map, read from a node's `CLUSTER SHARDS` (Redis 7) or `CLUSTER SLOTS` (older)
//! reply: its masters and the slots each serves. Pure: a reply in, a [`ClusterMap`] or why not out.
//!
//! Servers are listed in an order of their own, whatever order the node gave them in: the masters
//! that serve slots by address, then those that serve none, then the replicas by address. Two
//! proxies that read the same map number the servers alike, a map that did not change gives the
//! same list (a reload that keeps every server keeps every connection), and the masters that hold
//! keys are a prefix (what a command across every server goes to).

use shardring_resp::Value;

use crate::config::{SlotTable, SLOTS};

/// A cluster's masters, their slots and their replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterMap {
    /// Every master's `host:port`: those that serve slots, sorted, then those that serve none (a
    /// slot being migrated to one is asked there with `ASK`).
    pub(crate) masters: Vec<String>,
    /// Each master's slot ranges (both ends included), by its index in `masters`.
    pub(crate) ranges: Vec<(usize, usize, usize)>,
    /// Every online replica's `host:port` and its master's index in `masters`, sorted by address.
    pub(crate) replicas: Vec<(String, usize)>,
}

impl ClusterMap {
    /// Every server: the masters, then the replicas.
    pub(crate) fn servers(&self) -> impl Iterator<Item = &str> {
        self.masters
            .iter()
            .map(String::as_str)
            .chain(self.replicas.iter().map(|(a, _)| a.as_str()))
    }

    /// The slot table over [`ClusterMap::servers`] indices, each master's replicas with it.
    pub(crate) fn table(&self) -> SlotTable {
        let mut t = SlotTable::default();
        for &(first, last, m) in &self.ranges {
            t.assign(first, last, m);
        }
        for (i, (_, master)) in self.replicas.iter().enumerate() {
            t.add_replica(*master, self.masters.len() + i);
        }
        t
    }

    /// How many slots some master serves.
    pub(crate) fn served(&self) -> usize {
        self.table().served()
    }
}

/// Why a reply is not a slot map.
pub(crate) type MapError = String;

/// Which of a node's ports the proxy connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ports {
    /// `port`: the pool's servers are reached in plain TCP.
    Plain,
    /// `tls-port`: the pool's servers are reached over TLS (`--server-tls`). A node with both
    /// lists both in `CLUSTER SHARDS`, and a node with TLS only (`port 0`) lists no `port`: taking
    /// `port` alone left every master of such a cluster out of the map.
    Tls,
}

/// The map in a `CLUSTER SHARDS` reply (RESP2: each shard a flat list of field and value; RESP3: a
/// map). `asked` is the host the command was sent to: a node that does not know its own address
/// gives an empty one, meaning "the address you reached me at". Each node's port is the one `ports`
/// names, or its other one when it lists only that (the connection then fails, naming the node,
/// rather than the node being left out without a word).
pub(crate) fn from_shards(
    reply: &Value,
    asked: &str,
    ports: Ports,
) -> Result<ClusterMap, MapError> {
    let shards = list(reply).ok_or("CLUSTER SHARDS: not an array")?;
    let mut found: Vec<Found> = Vec::new();
    for shard in shards {
        let shard_fields = fields(shard).ok_or("CLUSTER SHARDS: a shard is not a map")?;
        let slots = field(&shard_fields, "slots")
            .and_then(list)
            .ok_or("CLUSTER SHARDS: a shard without slots")?;
        let mut ranges = Vec::new();
        for pair in slots.chunks(2) {
            let [first, last] = pair else {
                return Err("CLUSTER SHARDS: an odd slot list".into());
            };
            ranges.push((slot_number(first)?, slot_number(last)?));
        }
        let nodes = field(&shard_fields, "nodes")
            .and_then(list)
            .ok_or("CLUSTER SHARDS: a shard without nodes")?;
        // The shard's master: the one that is online when a failover leaves two saying so.
        let mut master = None;
        let mut replicas = Vec::new();
        for node in nodes {
            let n = fields(node).ok_or("CLUSTER SHARDS: a node is not a map")?;
            let text = |name| field(&n, name).and_then(Value::text).unwrap_or_default();
            let port_of = |name| {
                field(&n, name)
                    .and_then(Value::integer)
                    .filter(|p| (1..=65535).contains(p))
            };
            let (wanted, other) = match ports {
                Ports::Plain => ("port", "tls-port"),
                Ports::Tls => ("tls-port", "port"),
            };
            let port = port_of(wanted).or_else(|| port_of(other));
            let Some(port) = port else { continue };
            let online = text("health") == "online";
            let addr = address(text("ip"), port, asked);
            match text("role") {
                "master"
                    if master
                        .as_ref()
                        .is_none_or(|(_, was_online)| online && !was_online) =>
                {
                    master = Some((addr, online));
                }
                // Redis 7.0 calls a replica `loading` until its first write (offset 0): only a
                // failed one is left out; one that answers `-LOADING` hands its reads to its master.
                "replica" if text("health") != "failed" => replicas.push(addr),
                _ => {}
            }
        }
        if let Some((addr, _)) = master {
            found.push(Found {
                master: addr,
                ranges,
                replicas,
            });
        }
    }
    Ok(numbered(found))
}

/// A shard as read: its master, its slot ranges, its replicas.
struct Found {
    master: String,
    ranges: Vec<(usize, usize)>,
    replicas: Vec<String>,
}

/// The map in a `CLUSTER SLOTS` reply: one entry per slot range, `[first, last, [ip, port, …],
/// replicas…]`. Masters without slots are not in it.
pub(crate) fn from_slots(reply: &Value, asked: &str) -> Result<ClusterMap, MapError> {
    let ranges = list(reply).ok_or("CLUSTER SLOTS: not an array")?;
    let mut found: Vec<Found> = Vec::new();
    for range in ranges {
        let items = list(range).ok_or("CLUSTER SLOTS: a range is not an array")?;
        let [first, last, master, replicas @ ..] = items else {
            return Err("CLUSTER SLOTS: a range without its master".into());
        };
        let addr = slots_node(master, asked)?;
        let replicas = replicas
            .iter()
            .map(|r| slots_node(r, asked))
            .collect::<Result<Vec<_>, _>>()?;
        let r = (slot_number(first)?, slot_number(last)?);
        match found.iter_mut().find(|f| f.master == addr) {
            Some(f) => f.ranges.push(r),
            None => found.push(Found {
                master: addr,
                ranges: vec![r],
                replicas,
            }),
        }
    }
    Ok(numbered(found))
}

/// A `CLUSTER SLOTS` node, `[ip, port, id, …]`, as `host:port`.
fn slots_node(node: &Value, asked: &str) -> Result<String, MapError> {
    let node = list(node).ok_or("CLUSTER SLOTS: a node is not an array")?;
    let (Some(ip), Some(port)) = (
        node.first().and_then(Value::text),
        node.get(1)
            .and_then(Value::integer)
            .filter(|p| (1..=65535).contains(p)),
    ) else {
        return Err("CLUSTER SLOTS: a node without its address".into());
    };
    Ok(address(ip, port, asked))
}

/// The masters in the module's order (those with slots first, each part by address), their
/// ranges and replicas by that numbering.
fn numbered(mut found: Vec<Found>) -> ClusterMap {
    found.sort_by(|a, b| (a.ranges.is_empty(), &a.master).cmp(&(b.ranges.is_empty(), &b.master)));
    found.dedup_by(|b, a| {
        let same = a.master == b.master;
        if same {
            a.ranges.append(&mut b.ranges);
            a.replicas.append(&mut b.replicas);
        }
        same
    });
    let mut map = ClusterMap {
        masters: Vec::with_capacity(found.len()),
        ranges: Vec::new(),
        replicas: Vec::new(),
    };
    for (i, f) in found.into_iter().enumerate() {
        map.masters.push(f.master);
        map.ranges
            .extend(f.ranges.into_iter().map(|(first, last)| (first, last, i)));
        map.replicas.extend(f.replicas.into_iter().map(|r| (r, i)));
    }
    map.replicas.sort();
    map.replicas.dedup_by(|b, a| a.0 == b.0);
    // A node named both master and replica (a failover half seen) is a master.
    let masters = map.masters.clone();
    map.replicas.retain(|(r, _)| !masters.contains(r));
    map
}

/// `ip:port`; an empty or unknown (`?`) ip is the host the node was reached at. An IPv6 address is
/// bracketed.
fn address(ip: &str, port: i64, asked: &str) -> String {
    let host = if ip.is_empty() || ip == "?" {
        crate::backend::stream::host_of(asked)
    } else {
        ip
    };
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn slot_number(v: &Value) -> Result<usize, MapError> {
    v.integer()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n < SLOTS)
        .ok_or_else(|| format!("not a slot number: {v:?}"))
}

fn list(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(a) | Value::Set(a) => Some(a),
        _ => None,
    }
}

/// A RESP2 flat list of field and value, or a RESP3 map, as pairs.
fn fields(v: &Value) -> Option<Vec<(&Value, &Value)>> {
    match v {
        Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(a) if a.len() % 2 == 0 => Some(a.chunks(2).map(|p| (&p[0], &p[1])).collect()),
        _ => None,
    }
}

fn field<'v>(fields: &[(&'v Value, &'v Value)], name: &str) -> Option<&'v Value> {
    fields
        .iter()
        .find(|(k, _)| k.text() == Some(name))
        .map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec())
    }

    fn node(ip: &str, port: i64, role: &str, health: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            bulk("abc"),
            bulk("port"),
            Value::Integer(port),
            bulk("ip"),
            bulk(ip),
            bulk("role"),
            bulk(role),
            bulk("health"),
            bulk(health),
        ])
    }

    fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk("slots"),
            Value::Array(slots.iter().map(|&s| Value::Integer(s)).collect()),
            bulk("nodes"),
            Value::Array(nodes),
        ])
    }

    /// A node's fields with `port` and `tls-port` as given (`None`: not listed, as Redis leaves
    /// out the port a node does not have).
    fn node_ports(port: Option<i64>, tls: Option<i64>, role: &str) -> Value {
        let mut fields = vec![bulk("ip"), bulk("127.0.0.1"), bulk("role"), bulk(role)];
        fields.extend([bulk("health"), bulk("online")]);
        for (name, p) in [("port", port), ("tls-port", tls)] {
            if let Some(p) = p {
                fields.extend([bulk(name), Value::Integer(p)]);
            }
        }
        Value::Array(fields)
    }

    #[test]
    fn a_tls_pool_takes_the_nodes_tls_ports_and_a_node_with_one_port_is_never_left_out() {
        let reply = Value::Array(vec![
            shard(
                &[0, 8191],
                vec![
                    node_ports(Some(7001), Some(8001), "master"),
                    node_ports(Some(7004), Some(8004), "replica"),
                ],
            ),
            // TLS only (`port 0`): no `port` field.
            shard(&[8192, 16383], vec![node_ports(None, Some(8002), "master")]),
        ]);
        let tls = from_shards(&reply, "h:1", Ports::Tls).unwrap();
        assert_eq!(tls.masters, ["127.0.0.1:8001", "127.0.0.1:8002"]);
        assert_eq!(tls.replicas, [("127.0.0.1:8004".to_owned(), 0)]);
        let plain = from_shards(&reply, "h:1", Ports::Plain).unwrap();
        assert_eq!(plain.masters, ["127.0.0.1:7001", "127.0.0.1:8002"]);
        assert_eq!(plain.served(), 16384);
    }

    #[test]
    fn shards_give_every_master_sorted_with_its_slots_and_the_online_one_after_a_failover() {
        let reply = Value::Array(vec![
            shard(
                &[5461, 10922],
                vec![
                    node("127.0.0.1", 7002, "master", "failed"),
                    node("127.0.0.1", 7005, "master", "online"),
                ],
            ),
            shard(
                &[0, 5460],
                vec![
                    node("127.0.0.1", 7004, "replica", "online"),
                    node("", 7001, "master", "online"),
                ],
            ),
            shard(
                &[10923, 16383],
                vec![node("127.0.0.1", 7003, "master", "online")],
            ),
            shard(&[], vec![node("127.0.0.1", 7009, "master", "online")]),
        ]);
        let map = from_shards(&reply, "127.0.0.1:7003", Ports::Plain).unwrap();
        assert_eq!(
            map.masters,
            [
                "127.0.0.1:7001",
                "127.0.0.1:7003",
                "127.0.0.1:7005",
                "127.0.0.1:7009"
            ]
        );
        let t = map.table();
        assert_eq!(t.owner(0), Some(0));
        assert_eq!(t.owner(5461), Some(2));
        assert_eq!(t.owner(16383), Some(1));
        assert_eq!(map.served(), SLOTS);
        // The replica after the masters, with its master's index; the failed master is neither.
        assert_eq!(map.replicas, [("127.0.0.1:7004".to_string(), 0)]);
        assert_eq!(t.replicas_of(0).collect::<Vec<_>>(), [4]);
        assert_eq!(map.servers().count(), 5);
    }

    #[test]
    fn slots_give_the_same_map_as_shards() {
        let range = |a: i64, b: i64, port: i64| {
            Value::Array(vec![
                Value::Integer(a),
                Value::Integer(b),
                Value::Array(vec![bulk("127.0.0.1"), Value::Integer(port), bulk("id")]),
                Value::Array(vec![
                    bulk("127.0.0.1"),
                    Value::Integer(port + 3),
                    bulk("id2"),
                ]),
            ])
        };
        let reply = Value::Array(vec![
            range(10923, 16383, 7003),
            range(0, 5460, 7001),
            range(5461, 10922, 7002),
        ]);
        let map = from_slots(&reply, "x:1").unwrap();
        assert_eq!(
            map.masters,
            ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
        );
        assert_eq!(map.table().owner(10923), Some(2));
        assert_eq!(map.served(), SLOTS);
        assert_eq!(
            map.replicas,
            [
                ("127.0.0.1:7004".to_string(), 0),
                ("127.0.0.1:7005".to_string(), 1),
                ("127.0.0.1:7006".to_string(), 2)
            ]
        );
    }

    proptest::proptest! {
        /// Whatever a node sends that reads as RESP, the map readers answer a map or an error.
        #[test]
        fn any_reply_reads_as_a_map_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let limits = shardring_resp::ReplyLimits::default();
            if let Ok(Some((value, _))) = shardring_resp::ReplyReader::new(limits).read(&bytes) {
                for map in [from_shards(&value, "h:1", Ports::Plain), from_slots(&value, "h:1")].into_iter().flatten() {
                    proptest::prop_assert!(map.ranges.iter().all(|&(a, b, m)| a < SLOTS && b < SLOTS && m < map.masters.len()));
                    let _ = map.table();
                }
            }
        }

        /// Maps built of any shards read back with every slot range at its master.
        #[test]
        fn shards_of_any_shape_read_back(ranges in proptest::collection::vec((0i64..16384, 0i64..16384, 1i64..65536), 0..20)) {
            let reply = Value::Array(ranges.iter().map(|&(a, b, port)| shard(&[a.min(b), a.max(b)], vec![node("10.0.0.1", port, "master", "online")])).collect());
            let map = from_shards(&reply, "h:1", Ports::Plain).expect("a map");
            let t = map.table();
            // Each range's first slot is served by a master whose range covers it (ranges may
            // overlap: one of those masters, not necessarily this one).
            for &(a, b, _) in &ranges {
                let slot = a.min(b);
                let owner = t.owner(usize::try_from(slot).unwrap()).expect("served");
                let covering: Vec<String> = ranges
                    .iter()
                    .filter(|&&(x, y, _)| x.min(y) <= slot && slot <= x.max(y))
                    .map(|&(_, _, port)| format!("10.0.0.1:{port}"))
                    .collect();
                proptest::prop_assert!(covering.contains(&map.masters[owner]), "{} not among {covering:?}", map.masters[owner]);
            }
        }
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bad in [
            Value::Integer(1),
            Value::Array(vec![Value::Integer(1)]),
            Value::Array(vec![Value::Array(vec![
                Value::Integer(1),
                Value::Integer(99999),
            ])]),
            Value::Array(vec![shard(&[0], vec![])]),
            Value::Array(vec![shard(&[0, 20000], vec![])]),
        ] {
            assert!(from_shards(&bad, "h:1", Ports::Plain).is_err(), "{bad:?}");
            assert!(from_slots(&bad, "h:1").is_err(), "{bad:?}");
        }
    }
}
