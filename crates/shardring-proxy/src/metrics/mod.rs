//! Counters, and what reads them: twemproxy's stats JSON on the stats port (same field names, so existing
//! scrapers keep working) and Prometheus metrics on `/metrics` over a small HTTP server.
//!
//! - `counters`: the tallies the request path bumps ([`Counter`], [`Histogram`], [`PoolStats`],
//!   [`ServerStats`]; relaxed atomics, nothing else on that path);
//! - `twemproxy_json`: [`render_twemproxy_json`] and its listener, [`serve_json`] (nutcracker's
//!   write-and-close, not HTTP);
//! - `prometheus`: the bridge to the Prometheus project's client (`prometheus-client`), which reads the
//!   counters at scrape time and encodes them as Prometheus text 0.0.4 ([`render_prometheus`]) or
//!   OpenMetrics ([`render_openmetrics`]), whichever the scraper's `Accept` asks for;
//! - `http`: an HTTP/1.1 server (hyper) over a table of endpoints ([`Router`], [`serve_http`]); `/metrics`
//!   is one endpoint ([`serve_prometheus`]), and more (hot keys, membership) are added by registering a
//!   handler;
//! - `hot_keys`: the `/hotkeys` endpoint ([`hot_keys_endpoint`]): each pool's heaviest keys as JSON.

mod counters;
mod families;
mod hot_keys;
mod http;
mod prometheus;
mod twemproxy_json;

pub use counters::{
    unix_time, CommandLatency, Counter, Histogram, HotKeyRow, HotKeysReport, Placements, PoolStats,
    PoolView, ServerStats,
};
pub use hot_keys::hot_keys_endpoint;
pub use http::{serve_http, Reply, Request, Router};
pub use prometheus::{
    metrics_endpoint, render, render_openmetrics, render_prometheus, serve_prometheus, Format,
};
pub use twemproxy_json::{render_twemproxy_json, serve_json, POOL_STATS, SERVER_STATS};
