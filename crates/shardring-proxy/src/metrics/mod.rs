//! Counters, and what reads them: twemproxy's stats JSON on the stats port (nutcracker's shape exactly,
//! so existing scrapers keep working), and, over a small HTTP server, Prometheus metrics on `/metrics`
//! and what does not fit nutcracker's shape as JSON (`/hotkeys`, `/command-latency`).
//!
//! - `counters`: the tallies the request path bumps ([`Counter`], [`Histogram`], [`PoolStats`],
//!   [`ServerStats`]; relaxed atomics, nothing else on that path);
//! - `twemproxy_json`: [`render_twemproxy_json`] and its listener, [`serve_json`] (nutcracker's
//!   write-and-close, not HTTP). Only scalars, pools and servers: nutcracker's readers take every object
//!   in a pool for a server;
//! - `prometheus`: the bridge to the Prometheus project's client (`prometheus-client`), which reads the
//!   counters at scrape time and encodes them as Prometheus text 0.0.4 ([`render_prometheus`]) or
//!   OpenMetrics ([`render_openmetrics`]), whichever the scraper's `Accept` asks for;
//! - `http`: an HTTP/1.1 server (hyper) over a table of endpoints ([`Router`], [`serve_http`]); `/metrics`
//!   is one endpoint ([`serve_prometheus`]), and more are added by registering a handler;
//! - `hot_keys`: the `/hotkeys` endpoint ([`hot_keys_endpoint`], [`hot_keys_json`]): each pool's
//!   heaviest keys as JSON;
//! - `command_latency`: the `/command-latency` endpoint ([`command_latency_endpoint`],
//!   [`command_latency_json`]): each command's latency in Redis pools as JSON;
//! - `flags`: `--metrics-addr`, where the HTTP server listens.

mod command_latency;
mod counters;
mod families;
pub(crate) mod flags;
mod hot_keys;
mod http;
mod prometheus;
mod twemproxy_json;

pub use command_latency::{command_latency_endpoint, command_latency_json};
pub use counters::{
    unix_time, CommandLatency, Counter, Histogram, HotKeyRow, HotKeysReport, Placements, PoolStats,
    PoolView, ServerStats,
};
pub use hot_keys::{hot_keys_endpoint, hot_keys_json};
pub use http::{serve_http, Reply, Request, Router};
pub use prometheus::{
    metrics_endpoint, render, render_openmetrics, render_prometheus, serve_prometheus, Format,
};
pub use twemproxy_json::{render_twemproxy_json, serve_json, POOL_STATS, SERVER_STATS};
