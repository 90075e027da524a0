//! Prometheus metrics: the bridge from our counters to the Prometheus project's client
//! (`prometheus-client`), which encodes them as Prometheus text 0.0.4 or OpenMetrics 1.0.0.
//!
//! The request path never sees prometheus-client: it bumps our own relaxed atomics
//! ([`super::Counter`], [`super::Histogram`]), and a scrape reads them through a
//! [`Collector`] built for that scrape (a [`Scrape`]), so the cost of the metrics library is paid per
//! scrape, not per request.
//!
//! # Names
//! Family names are written without the `_total` suffix; the encoder adds it to counters' samples (and to
//! their `# TYPE` line in the 0.0.4 format), and adds a unit suffix where a unit is given. The sample
//! names are those the proxy has always exposed, but one: the accepted-connections counter is
//! `shardring_proxy_pool_client_connections_accepted_total` (it was `..._client_connections_total`),
//! because in OpenMetrics that counter's family would be called `shardring_proxy_pool_client_connections`,
//! the name of the open-connections gauge, and two families may not share a name. In the 0.0.4 text the
//! first latency bucket reads `le="5e-05"` (it was `"0.00005"`; prometheus-client formats bounds as Go's
//! client does, and OpenMetrics keeps `0.00005`); the other bounds read as before.
//!
//! # Cost
//! A scrape costs a few microseconds per server, somewhat more than the hand-written text this replaced
//! and than twemproxy's JSON, once per scrape interval (BENCHMARKS.md, "proxy: the cost of one /metrics
//! scrape"). Nothing is added per request.

use std::fmt;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio_util::sync::CancellationToken;

use super::counters::{PoolView, ServerStats, BUCKETS_US};
use super::families::{Kind, POOL_FAMILIES, SERVER_FAMILIES};
use super::http::{serve_http, Reply, Request, Router};

/// The `Content-Type` of OpenMetrics text 1.0.0.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// Prometheus text 0.0.4: what every scraper reads, and what `promtool check metrics` checks. The
    /// default when the client states no preference.
    Prometheus,
    /// OpenMetrics text 1.0.0 (`# UNIT` lines, counters' families named without `_total`, `# EOF`).
    /// Prometheus asks for it first.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of a reply in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when it lists
    /// `application/openmetrics-text` (version 1.0.0, 0.0.1 or none; both versions parse the same in
    /// Prometheus) with a quality above 0 and at least that of `text/plain`, `text/*` or `*/*`;
    /// otherwise, and without the header, Prometheus text.
    ///
    /// Prometheus 2.x sends `application/openmetrics-text;version=1.0.0,application/openmetrics-text;
    /// version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1` (OpenMetrics); curl sends `*/*`
    /// (Prometheus text).
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let (mut q, mut version) = (1.0_f64, None);
            for param in parts {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    // An unreadable quality counts as "not acceptable".
                    "q" => {
                        q = value
                            .parse()
                            .ok()
                            .filter(|q: &f64| q.is_finite())
                            .unwrap_or(0.0)
                    }
                    "version" => version = Some(value.to_owned()),
                    _ => {}
                }
            }
            match media.as_str() {
                "application/openmetrics-text"
                    if matches!(version.as_deref(), None | Some("1.0.0" | "0.0.1")) =>
                {
                    openmetrics = openmetrics.max(q);
                }
                "text/plain" if matches!(version.as_deref(), None | Some("0.0.4")) => {
                    text = text.max(q);
                }
                "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// One scrape's view of the counters, handed to prometheus-client as a [`Collector`]: it owns the pools'
/// `Arc`s, so it lives as long as the registry the encoders need, and reads each atomic once, while
/// encoding.
#[derive(Debug)]
struct Scrape {
    /// Whole seconds since the proxy started.
    uptime_seconds: u64,
    /// The pools and their current servers.
    pools: Vec<PoolView>,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let uptime = ConstGauge::new(self.uptime_seconds);
        uptime.encode(encoder.encode_descriptor(
            "shardring_proxy_uptime",
            "Seconds since the proxy started.",
            Some(&Unit::Seconds),
            uptime.metric_type(),
        )?)?;

        for (name, kind, help, read) in POOL_FAMILIES {
            let rows = self
                .pools
                .iter()
                .map(|v| ([("pool", v.pool.name.as_str())], read(&v.pool)));
            family(&mut encoder, name, None, kind, help, rows)?;
        }

        for (name, bytes, kind, help, read) in SERVER_FAMILIES {
            let unit = bytes.then_some(Unit::Bytes);
            let rows = self.servers().map(|(pool, s)| (labels(pool, s), read(s)));
            family(&mut encoder, name, unit.as_ref(), kind, help, rows)?;
        }

        let mut latency = encoder.encode_descriptor(
            "shardring_proxy_server_latency",
            "Request round-trip time to the server.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (pool, s) in self.servers() {
            let (counts, sum_us) = s.latency.read();
            let mut buckets = [(f64::INFINITY, 0); BUCKETS_US.len() + 1];
            for (i, bucket) in buckets.iter_mut().enumerate() {
                // The last bound stays +Inf: the overflow bucket.
                if let Some(&bound_us) = BUCKETS_US.get(i) {
                    bucket.0 = bound_us as f64 / 1e6;
                }
                bucket.1 = counts[i];
            }
            let count = counts.iter().sum();
            let labels = labels(pool, s);
            latency
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(sum_us as f64 / 1e6, count, &buckets, None)?;
        }

        let mut commands = encoder.encode_descriptor(
            "shardring_proxy_command_latency",
            "Time from a client request decoded to its answer ready, by command (Redis pools).",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for v in &self.pools {
            for c in v.pool.commands.iter() {
                let (counts, sum_us) = c.latency.read();
                let count: u64 = counts.iter().sum();
                // Only the commands clients sent: a table of ~230 empty histograms helps nobody.
                if count == 0 {
                    continue;
                }
                let mut buckets = [(f64::INFINITY, 0); BUCKETS_US.len() + 1];
                for (i, bucket) in buckets.iter_mut().enumerate() {
                    if let Some(&bound_us) = BUCKETS_US.get(i) {
                        bucket.0 = bound_us as f64 / 1e6;
                    }
                    bucket.1 = counts[i];
                }
                let labels = [("pool", v.pool.name.as_str()), ("command", c.name)];
                commands
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(sum_us as f64 / 1e6, count, &buckets, None)?;
            }
        }
        Ok(())
    }
}

impl Scrape {
    /// Every (pool name, server) pair, pool by pool in config order.
    fn servers(&self) -> impl Iterator<Item = (&str, &ServerStats)> + '_ {
        self.pools.iter().flat_map(|v| {
            v.servers
                .iter()
                .map(move |s| (v.pool.name.as_str(), s.as_ref()))
        })
    }
}

/// The labels of a server's samples.
fn labels<'a>(pool: &'a str, s: &'a ServerStats) -> [(&'static str, &'a str); 2] {
    [("pool", pool), ("server", s.name.as_str())]
}

/// Writes one family of plain counters or gauges: its descriptor, then one sample per row.
fn family<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    unit: Option<&Unit>,
    kind: Kind,
    help: &str,
    rows: impl Iterator<Item = (L, u64)>,
) -> fmt::Result {
    let metric_type = match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    };
    let mut family = encoder.encode_descriptor(name, help, unit, metric_type)?;
    for (labels, value) in rows {
        let sample = family.encode_family(&labels)?;
        match kind {
            Kind::Counter => ConstCounter::new(value).encode(sample)?,
            Kind::Gauge => ConstGauge::new(value).encode(sample)?,
        }
    }
    Ok(())
}

/// The pools' metrics in `format`. The collector owns its views (`Arc`s: a caller's copy is cheap, and
/// the endpoint moves its own in).
///
/// # Errors
/// Only if prometheus-client refuses what it is given (it writes into a `String`, which cannot fail).
fn try_render(
    format: Format,
    started: Instant,
    pools: Vec<PoolView>,
) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        uptime_seconds: started.elapsed().as_secs(),
        pools,
    }));
    let mut out = String::with_capacity(4096);
    match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
    }
    Ok(out)
}

/// The pools' metrics in `format`; on the (unexpected) failure of the encoder, an empty exposition and a
/// logged error.
pub fn render(format: Format, started: Instant, pools: &[PoolView]) -> String {
    try_render(format, started, pools.to_vec()).unwrap_or_else(|_| {
        tracing::error!(?format, "cannot encode the metrics");
        match format {
            Format::OpenMetrics => "# EOF\n".to_owned(),
            _ => String::new(),
        }
    })
}

/// Prometheus text exposition (version 0.0.4).
pub fn render_prometheus(started: Instant, pools: &[PoolView]) -> String {
    render(Format::Prometheus, started, pools)
}

/// OpenMetrics text exposition (version 1.0.0, ending in `# EOF`).
pub fn render_openmetrics(started: Instant, pools: &[PoolView]) -> String {
    render(Format::OpenMetrics, started, pools)
}

/// The `/metrics` handler: reads the counters through `views` on every request and answers in the format
/// the request's `Accept` asks for ([`Format::from_accept`]).
pub fn metrics_endpoint<'a, F>(
    started: Instant,
    views: F,
) -> impl Fn(&Request<'_>) -> Reply + Send + Sync + 'a
where
    F: Fn() -> Vec<PoolView> + Send + Sync + 'a,
{
    move |request| {
        let format = Format::from_accept(request.header("accept"));
        match try_render(format, started, views()) {
            Ok(text) => Reply::ok(format.content_type(), text),
            Err(_) => {
                tracing::error!(?format, "cannot encode the metrics");
                Reply::error(500, "cannot encode the metrics\n")
            }
        }
    }
}

/// Serves the pools' metrics at `GET /metrics` (and `HEAD`), HTTP/1.1 with keep-alive, in the format the
/// scraper asks for, and beside them, as JSON, what the stats JSON leaves out to keep nutcracker's shape:
/// the hot keys at `/hotkeys` ([`super::hot_keys_json`]) and each command's latency at
/// `/command-latency` ([`super::command_latency_json`]). Anything else gets 404 (or 405 for other
/// methods on those paths). Returns once `stop` is cancelled. See [`serve_http`] for the connection
/// limits.
///
/// `views` is `Send + Sync` because every open connection may call it and the future is meant to be
/// spawned.
pub async fn serve_prometheus<F>(
    listener: tokio::net::TcpListener,
    started: Instant,
    views: F,
    stop: CancellationToken,
) where
    F: Fn() -> Vec<PoolView> + Send + Sync,
{
    let views = std::sync::Arc::new(views);
    let (v, h) = (std::sync::Arc::clone(&views), std::sync::Arc::clone(&views));
    let router = Router::new()
        .route("/metrics", metrics_endpoint(started, move || v()))
        .route("/hotkeys", super::hot_keys::hot_keys_endpoint(move || h()))
        .route(
            "/command-latency",
            super::command_latency::command_latency_endpoint(move || views()),
        );
    serve_http(listener, &router, stop).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::metrics::PoolStats;

    fn view() -> Vec<PoolView> {
        let pool = Arc::new(PoolStats::new("alpha"));
        pool.total_connections.add(3);
        let s = Arc::new(ServerStats::new("cache-a"));
        s.requests.add(7);
        s.request_bytes.add(70);
        s.latency.observe(Duration::from_micros(80));
        s.latency.observe(Duration::from_secs(5));
        vec![PoolView {
            pool,
            placements: Default::default(),
            servers: vec![s],
        }]
    }

    #[test]
    fn prometheus_histogram_is_cumulative() {
        let text = render_prometheus(Instant::now(), &view());
        assert!(text.contains(
            "shardring_proxy_server_latency_seconds_bucket{pool=\"alpha\",server=\"cache-a\",le=\"0.0001\"} 1"
        ), "{text}");
        assert!(text.contains(
            "shardring_proxy_server_latency_seconds_bucket{pool=\"alpha\",server=\"cache-a\",le=\"+Inf\"} 2"
        ), "{text}");
        assert!(
            text.contains(
                "shardring_proxy_server_latency_seconds_count{pool=\"alpha\",server=\"cache-a\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "shardring_proxy_server_requests_total{pool=\"alpha\",server=\"cache-a\"} 7"
            ),
            "{text}"
        );
    }

    /// The sample names users scrape, in both formats (one renamed; see the module docs).
    #[test]
    fn sample_names_are_the_same_in_both_formats() {
        let samples = |text: &str| -> Vec<String> {
            let mut names: Vec<String> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_owned())
                .collect();
            names.dedup();
            names
        };
        let prometheus = samples(&render_prometheus(Instant::now(), &view()));
        let openmetrics = samples(&render_openmetrics(Instant::now(), &view()));
        // Within a histogram the two encoders order `_bucket`, `_sum` and `_count` differently.
        let sorted = |mut names: Vec<String>| {
            names.sort();
            names
        };
        assert_eq!(sorted(prometheus.clone()), sorted(openmetrics));
        let expected = [
            "shardring_proxy_uptime_seconds",
            "shardring_proxy_pool_client_connections",
            "shardring_proxy_pool_client_connections_accepted_total",
            "shardring_proxy_pool_client_eof_total",
            "shardring_proxy_pool_client_err_total",
            "shardring_proxy_pool_requests_total",
            "shardring_proxy_pool_client_errors_total",
            "shardring_proxy_pool_forward_errors_total",
            "shardring_proxy_pool_server_ejects_total",
            "shardring_proxy_pool_descriptor_shortages_total",
            "shardring_proxy_pool_client_tls_handshake_errors_total",
            "shardring_proxy_pool_membership_revision",
            "shardring_proxy_pool_membership_updated_timestamp_seconds",
            "shardring_proxy_pool_membership_errors_total",
            "shardring_proxy_pool_membership_malformed_total",
            "shardring_proxy_pool_replica_failovers_total",
            "shardring_proxy_pool_replica_disagreements_total",
            "shardring_proxy_pool_dual_writes_total",
            "shardring_proxy_pool_dual_write_disagreements_total",
            "shardring_proxy_pool_fenced_total",
            "shardring_proxy_pool_cluster_redirections_total",
            "shardring_proxy_pool_cluster_map_changes_total",
            "shardring_proxy_pool_warmup_open",
            "shardring_proxy_pool_warmup_fallbacks_total",
            "shardring_proxy_pool_warmup_recovered_total",
            "shardring_proxy_pool_warmup_copies_total",
            "shardring_proxy_pool_warmup_copies_refused_total",
            "shardring_proxy_pool_split_reads_total",
            "shardring_proxy_pool_split_copy_misses_total",
            "shardring_proxy_pool_split_fills_total",
            "shardring_proxy_pool_split_fills_refused_total",
            "shardring_proxy_pool_split_invalidations_total",
            "shardring_proxy_pool_split_invalidations_failed_total",
            "shardring_proxy_pool_gutter_requests_total",
            "shardring_proxy_pool_hot_cache_hits_total",
            "shardring_proxy_pool_hot_cache_fills_total",
            "shardring_proxy_pool_hot_cache_invalidations_total",
            "shardring_proxy_pool_key_rate_limited_total",
            "shardring_proxy_pool_pool_rate_limited_total",
            "shardring_proxy_pool_transactions_total",
            "shardring_proxy_pool_transactions_aborted_total",
            "shardring_proxy_pool_blocking_requests_total",
            "shardring_proxy_pool_subscriptions_total",
            "shardring_proxy_server_requests_total",
            "shardring_proxy_server_responses_total",
            "shardring_proxy_server_request_bytes_total",
            "shardring_proxy_server_response_bytes_total",
            "shardring_proxy_server_errors_total",
            "shardring_proxy_server_eof_total",
            "shardring_proxy_server_timeouts_total",
            "shardring_proxy_server_ejections_total",
            "shardring_proxy_server_connections",
            "shardring_proxy_server_ejected",
            "shardring_proxy_server_dedicated_connections",
            "shardring_proxy_server_dedicated_refused_total",
            "shardring_proxy_server_handshake_errors_tolerated_total",
            "shardring_proxy_server_tls_handshake_errors_total",
            "shardring_proxy_server_outlier_ejections_total",
            "shardring_proxy_server_outlier_ejected",
            "shardring_proxy_server_breaker_rejected_total",
            "shardring_proxy_server_pending_overflows_total",
            "shardring_proxy_server_latency_seconds_bucket",
            "shardring_proxy_server_latency_seconds_sum",
            "shardring_proxy_server_latency_seconds_count",
        ];
        assert_eq!(prometheus, expected);
    }

    #[test]
    #[ignore = "prints both renderings for a reader"]
    fn print_both_formats() {
        println!("{}", render_prometheus(Instant::now(), &view()));
        println!("{}", render_openmetrics(Instant::now(), &view()));
    }

    #[test]
    fn label_values_are_escaped() {
        let pool = Arc::new(PoolStats::new("a\"b\\c\nd"));
        let views = vec![PoolView {
            pool,
            placements: Default::default(),
            servers: vec![],
        }];
        let text = render_prometheus(Instant::now(), &views);
        assert!(
            text.contains(r#"shardring_proxy_pool_requests_total{pool="a\"b\\c\nd"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn openmetrics_names_families_without_total_and_ends_in_eof() {
        let text = render_openmetrics(Instant::now(), &view());
        assert!(text.contains("# TYPE shardring_proxy_server_requests counter\n"));
        assert!(text.contains("# UNIT shardring_proxy_server_latency_seconds seconds\n"));
        assert!(text.ends_with("# EOF\n"), "{text}");
        let text = render_prometheus(Instant::now(), &view());
        assert!(text.contains("# TYPE shardring_proxy_server_requests_total counter\n"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn accept_picks_openmetrics_only_when_asked() {
        let cases = [
            (None, Format::Prometheus),
            (Some("*/*"), Format::Prometheus),
            (Some("text/plain"), Format::Prometheus),
            (Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Format::Prometheus),
            // Prometheus 2.x's default.
            (
                Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
                Format::OpenMetrics,
            ),
            // Prometheus with scrape_protocols set, text first.
            (
                Some("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,*/*;q=0.1"),
                Format::Prometheus,
            ),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (Some("Application/OpenMetrics-Text; Version=\"1.0.0\""), Format::OpenMetrics),
            (Some("application/openmetrics-text;version=2.0.0"), Format::Prometheus),
            (Some("application/openmetrics-text;q=0"), Format::Prometheus),
            (Some("application/openmetrics-text;q=bogus"), Format::Prometheus),
            (Some("application/openmetrics-text;q=NaN"), Format::Prometheus),
            (Some(",;;=,"), Format::Prometheus),
        ];
        for (accept, want) in cases {
            assert_eq!(Format::from_accept(accept), want, "{accept:?}");
        }
    }
}
