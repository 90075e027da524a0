//! `/hotkeys`: each pool's heaviest keys at the last refresh (every 100 ms), with their estimated
//! request counts over the sliding window and the server each goes to now. Pools without detection
//! (`--hot-keys`) are listed with `"keys": null`.
//!
//! Keys appear here only: never as Prometheus labels (label values that change with traffic would grow
//! the scraper's series without bound), and not in the stats JSON either, because nutcracker's readers
//! take every object inside a pool's object for a server (see [`super::render_twemproxy_json`]).

use serde_json::{json, Value};

use super::counters::{HotKeysReport, PoolView};
use super::http::{Reply, Request};

/// A pool's ranking as JSON: `{"window_ms": W, "keys": [{"key", "count", "server"}, …]}`.
fn keys_json(report: &HotKeysReport) -> Value {
    let keys: Vec<Value> = report
        .keys
        .iter()
        .map(|k| json!({ "key": k.key, "count": k.count, "server": k.server }))
        .collect();
    json!({ "window_ms": report.window_ms, "keys": keys })
}

/// Every pool's ranking, in pool order: `{"pools": [{"pool": NAME, "window_ms": W, "keys": [{"key",
/// "count", "server"}, …]}, …]}`; `"window_ms"` and `"keys"` are `null` for a pool without detection,
/// so that a reader can tell "off" from "nothing hot yet" (`[]`).
pub fn hot_keys_json(views: &[PoolView]) -> Value {
    let pools: Vec<Value> = views
        .iter()
        .map(|v| {
            let mut pool = match v.pool.hot_keys.load_full() {
                Some(report) => keys_json(&report),
                None => json!({ "window_ms": null, "keys": null }),
            };
            pool["pool"] = json!(v.pool.name);
            pool
        })
        .collect();
    json!({ "pools": pools })
}

/// The `/hotkeys` handler: [`hot_keys_json`], read through `views` on every request.
pub fn hot_keys_endpoint<'a, F>(views: F) -> impl Fn(&Request<'_>) -> Reply + Send + Sync + 'a
where
    F: Fn() -> Vec<PoolView> + Send + Sync + 'a,
{
    move |_| Reply::json(&hot_keys_json(&views()))
}
