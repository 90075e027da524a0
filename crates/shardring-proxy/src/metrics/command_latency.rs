//! `/command-latency`: each command's latency (Redis pools), for the commands clients sent, as JSON
//! beside `/metrics` (where the same histograms are `shardring_proxy_command_latency_seconds`).
//!
//! Not in the stats JSON: nutcracker's readers (telegraf, the New Relic and Diamond collectors,
//! hand-written scripts) take every object inside a pool's object for a server and read
//! `server["requests"]` from it, so a table of commands there breaks them (see
//! [`super::render_twemproxy_json`]).

use serde_json::{json, Map, Value};

use super::counters::{CommandLatency, PoolView, BUCKETS_US};
use super::http::{Reply, Request};

/// One pool's table: `{"get": {"requests": n, "latency_sum_us": s, "latency_us": {"50": c, …, "+Inf":
/// c}}, …}`, the bucket counts not cumulative (each is the requests answered within its bound and above
/// the previous one), the same buckets as the Prometheus histogram. Only the commands sent (a table of
/// ~230 empty rows helps nobody).
fn commands_json(commands: &[CommandLatency]) -> Value {
    let mut out = Map::new();
    for c in commands {
        let (buckets, sum_us) = c.latency.read();
        let requests: u64 = buckets.iter().sum();
        if requests == 0 {
            continue;
        }
        let mut by_bound = Map::new();
        for (count, bound) in buckets.iter().zip(BUCKETS_US.iter().map(|b| b.to_string())) {
            by_bound.insert(bound, json!(count));
        }
        by_bound.insert("+Inf".into(), json!(buckets[BUCKETS_US.len()]));
        out.insert(
            c.name.to_owned(),
            json!({"requests": requests, "latency_sum_us": sum_us, "latency_us": by_bound}),
        );
    }
    Value::Object(out)
}

/// Every pool's table, in pool order: `{"pools": [{"pool": NAME, "commands": {"get": {"requests": n,
/// "latency_sum_us": s, "latency_us": {"50": c, …, "+Inf": c}}, …}}, …]}`, for the commands sent only,
/// the bucket counts not cumulative (each is the requests answered within its bound and above the
/// previous one; the bounds are the Prometheus histogram's, in microseconds). `"commands"` is `null`
/// for a pool whose protocol does not name its commands (memcached), so that a reader can tell "not
/// measured" from "nothing sent yet" (`{}`).
pub fn command_latency_json(views: &[PoolView]) -> Value {
    let pools: Vec<Value> = views
        .iter()
        .map(|v| {
            let commands = if v.pool.commands.is_empty() {
                Value::Null
            } else {
                commands_json(&v.pool.commands)
            };
            json!({ "pool": v.pool.name, "commands": commands })
        })
        .collect();
    json!({ "pools": pools })
}

/// The `/command-latency` handler: [`command_latency_json`], read through `views` on every request.
pub fn command_latency_endpoint<'a, F>(
    views: F,
) -> impl Fn(&Request<'_>) -> Reply + Send + Sync + 'a
where
    F: Fn() -> Vec<PoolView> + Send + Sync + 'a,
{
    move |_| Reply::json(&command_latency_json(&views()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::metrics::PoolStats;

    #[test]
    fn each_command_sent_and_only_those_with_its_buckets() {
        let redis = Arc::new(PoolStats::with_commands("beta", &["get", "set", "mget"]));
        redis.commands[0].latency.observe(Duration::from_micros(40));
        redis.commands[0].latency.observe(Duration::from_micros(70));
        redis.commands[2].latency.observe(Duration::from_secs(3));
        let views = vec![
            PoolView {
                pool: Arc::new(PoolStats::new("alpha")),
                placements: Default::default(),
                servers: Vec::new(),
            },
            PoolView {
                pool: redis,
                placements: Default::default(),
                servers: Vec::new(),
            },
        ];
        let v = command_latency_json(&views);
        assert_eq!(v["pools"][0]["pool"], "alpha");
        assert!(
            v["pools"][0]["commands"].is_null(),
            "a memcached pool measures no commands"
        );
        assert_eq!(v["pools"][1]["pool"], "beta");
        let table = &v["pools"][1]["commands"];
        assert_eq!(table["get"]["requests"], 2);
        assert_eq!(table["get"]["latency_sum_us"], 110);
        assert_eq!(table["get"]["latency_us"]["50"], 1);
        assert_eq!(table["get"]["latency_us"]["100"], 1);
        assert_eq!(table["get"]["latency_us"]["+Inf"], 0);
        assert_eq!(table["mget"]["latency_us"]["+Inf"], 1);
        assert!(table.get("set").is_none(), "set was never sent");
    }

    #[test]
    fn a_redis_pool_with_nothing_sent_has_an_empty_table() {
        let views = vec![PoolView {
            pool: Arc::new(PoolStats::with_commands("beta", &["get"])),
            placements: Default::default(),
            servers: Vec::new(),
        }];
        assert_eq!(
            command_latency_json(&views),
            json!({ "pools": [{ "pool": "beta", "commands": {} }] })
        );
    }
}
