//! `/metrics` over HTTP, checked by independent programs and against what HTTP/1.1 says: Prometheus's own
//! `promtool check metrics` reads the Prometheus text of a proxy that served traffic, Python's
//! `prometheus_client` OpenMetrics parser (strict: it rejects clashing families, a missing `# EOF`)
//! reads the OpenMetrics text, a real Prometheus server scrapes the endpoint (negotiating OpenMetrics)
//! and stores every family, and raw sockets check HEAD, keep-alive, 400, 404, 405, 431, the header
//! timeout and the connection limit. The programs come from Debian (`prometheus`,
//! `python3-prometheus-client`; `.ci/run` installs them); outside CI a test skips when its program is
//! missing, in CI (`CI` set, not `false`) it fails.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use shardring_proxy::metrics::{self, PoolStats, PoolView, Reply, Router, ServerStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::common::{pool_config, RunningProxy, IO_TIMEOUT};
use test_support::memcacheds;

/// What Prometheus 2.x sends when scraping (its default scrape protocols).
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Whether this run must have every checker installed (`CI` set to anything but `false`/`0`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Runs `program args` with `stdin` as its input; `None` (the test skips) when it cannot be started
/// outside CI.
fn run_with_stdin(program: &str, args: &[&str], stdin: &[u8]) -> Option<Output> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if !in_ci() => {
            eprintln!("skipping: {program} not runnable here ({e}); .ci/run installs it");
            return None;
        }
        Err(e) => panic!("{program} must be installed in CI: {e}"),
    };
    let mut input = child.stdin.take().expect("piped stdin");
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = input.write_all(&stdin);
    });
    let output = child.wait_with_output().expect("the checker ran");
    writer.join().expect("the stdin writer");
    Some(output)
}

/// A metrics listener on a free port, stopped on drop.
struct Endpoint {
    /// Where it listens.
    addr: SocketAddr,
    /// Cancels it.
    stop: CancellationToken,
    /// The serving task.
    task: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// `serve_prometheus` over fixed views.
    async fn prometheus(views: Vec<PoolView>) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(metrics::serve_prometheus(
            listener,
            std::time::Instant::now(),
            move || views.clone(),
            stop.clone(),
        ));
        Endpoint {
            addr,
            stop,
            task: Some(task),
        }
    }

    /// `serve_http` over the router `make` builds (inside the task: a router may borrow).
    async fn router(make: fn() -> Router<'static>) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move { metrics::serve_http(listener, &make(), s).await });
        Endpoint {
            addr,
            stop,
            task: Some(task),
        }
    }

    async fn connect(&self) -> TcpStream {
        tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(self.addr))
            .await
            .expect("connect in time")
            .expect("connect")
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// One HTTP response as read off the wire.
#[derive(Debug)]
struct Response {
    /// The status line, e.g. `HTTP/1.1 200 OK`.
    status_line: String,
    /// Header names (lowercased) and values, in order.
    headers: Vec<(String, String)>,
    /// Exactly `Content-Length` bytes (none when `head_only`).
    body: Vec<u8>,
}

impl Response {
    fn status(&self) -> u16 {
        self.status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response: the head byte by byte up to the blank line (so nothing of a next response is
/// consumed), then `Content-Length` bytes of body unless `head_only` (the answer to a HEAD).
async fn read_response(stream: &mut TcpStream, head_only: bool) -> Response {
    let read = async {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut b).await.expect("read");
            assert_eq!(
                n,
                1,
                "closed inside a response head: {:?}",
                String::from_utf8_lossy(&head)
            );
            head.push(b[0]);
        }
        let head = String::from_utf8(head).expect("an ASCII head");
        let mut lines = head.split("\r\n").filter(|l| !l.is_empty());
        let status_line = lines.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .expect("a Content-Length");
        let mut body = vec![0u8; if head_only { 0 } else { length }];
        stream.read_exact(&mut body).await.expect("the whole body");
        Response {
            status_line,
            headers,
            body,
        }
    };
    tokio::time::timeout(IO_TIMEOUT, read)
        .await
        .expect("a response in time")
}

/// Sends `request` (raw bytes) and reads the response.
async fn exchange(stream: &mut TcpStream, request: &str) -> Response {
    stream.write_all(request.as_bytes()).await.expect("write");
    read_response(stream, request.starts_with("HEAD ")).await
}

/// Asserts the server closes `stream` within `within`, sending nothing more.
async fn expect_closed(stream: &mut TcpStream, within: Duration) {
    let mut b = [0u8; 256];
    let n = tokio::time::timeout(within, stream.read(&mut b))
        .await
        .expect("the server closed the connection in time")
        .unwrap_or(0);
    assert_eq!(
        n,
        0,
        "expected EOF, got {:?}",
        String::from_utf8_lossy(&b[..n])
    );
}

/// A pool with one server that has counted a little of everything, and names that need escaping.
fn sample_views() -> Vec<PoolView> {
    let pool = Arc::new(PoolStats::new("alpha"));
    pool.total_connections.add(3);
    pool.client_connections.set(1);
    pool.requests.add(9);
    let a = Arc::new(ServerStats::new("cache-a"));
    a.requests.add(7);
    a.request_bytes.add(70);
    a.latency.observe(Duration::from_micros(80));
    a.latency.observe(Duration::from_secs(5));
    let odd = Arc::new(ServerStats::new("10.0.0.1:11211 \"odd\\name\""));
    vec![PoolView {
        placements: Default::default(),
        pool,
        servers: vec![a, odd],
    }]
}

const GET: &str = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_what_a_proxy_that_served_traffic_exposes() {
    let servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut client = proxy.client().await;
    for i in 0..20 {
        client
            .check(format!("set k{i} 0 0 1\r\nv\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    client.check(b"get nothing\r\n", b"END\r\n").await;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let p = Arc::clone(&proxy.proxy);
    let task = tokio::spawn(metrics::serve_prometheus(
        listener,
        proxy.proxy.started(),
        move || p.views(),
        stop.clone(),
    ));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let response = exchange(&mut stream, GET).await;
    assert_eq!(response.status_line, "HTTP/1.1 200 OK");
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = response.text();
    let sent: u64 = text
        .lines()
        .filter(|l| l.starts_with("shardring_proxy_server_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(sent, 21, "{text}");

    if let Some(out) = run_with_stdin("promtool", &["check", "metrics"], text.as_bytes()) {
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool: {said}\n{text}");
        assert_eq!(said.trim(), "", "promtool found problems\n{text}");
    }
    stop.cancel();
    tokio::time::timeout(IO_TIMEOUT, task)
        .await
        .expect("the listener stops")
        .unwrap();
    proxy.stop().await;
}

#[tokio::test]
async fn promtool_accepts_escaped_label_values_and_a_histogram_with_overflow() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    let text = exchange(&mut stream, GET).await.text();
    assert!(
        text.contains(r#"server="10.0.0.1:11211 \"odd\\name\""}"#),
        "{text}"
    );
    if let Some(out) = run_with_stdin("promtool", &["check", "metrics"], text.as_bytes()) {
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool: {said}\n{text}"
        );
    }
}

/// The OpenMetrics parser of Python's `prometheus_client` (Debian's python3-prometheus-client), run by
/// the first interpreter that has it; prints each family as `name type unit`.
const OPENMETRICS_CHECK: &str = "
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    print(f.name, f.type, f.unit or '-')
";

/// Runs [`OPENMETRICS_CHECK`] over `text`; `None` when no interpreter has the module (outside CI).
fn openmetrics_parse(text: &str) -> Option<Output> {
    // Debian's interpreter first: a python3 earlier on PATH (pyenv, venv) may lack Debian's modules.
    for python in ["/usr/bin/python3", "python3"] {
        let has = Command::new(python)
            .args(["-c", "import prometheus_client.openmetrics.parser"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if has {
            return run_with_stdin(python, &["-c", OPENMETRICS_CHECK], text.as_bytes());
        }
    }
    assert!(
        !in_ci(),
        "python3-prometheus-client must be installed in CI"
    );
    eprintln!(
        "skipping: no python3 with prometheus_client; .ci/run installs python3-prometheus-client"
    );
    None
}

#[tokio::test]
async fn prometheus_gets_openmetrics_and_a_strict_parser_reads_it() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n");
    let response = exchange(&mut stream, &request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = response.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    if let Some(out) = openmetrics_parse(&text) {
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "the OpenMetrics parser refused it: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        for family in [
            "shardring_proxy_pool_client_connections gauge -",
            "shardring_proxy_pool_client_connections_accepted counter -",
            "shardring_proxy_server_request_bytes counter bytes",
            "shardring_proxy_server_latency_seconds histogram seconds",
            "shardring_proxy_uptime_seconds gauge seconds",
        ] {
            assert!(said.lines().any(|l| l == family), "{family} in\n{said}");
        }
    }

    // A client that asks for nothing in particular (curl: */*) gets Prometheus text.
    let response = exchange(
        &mut stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
    )
    .await;
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
}

#[tokio::test]
async fn head_answers_with_gets_headers_and_no_body() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    let get = exchange(&mut stream, GET).await;
    let head = exchange(&mut stream, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(head.status_line, "HTTP/1.1 200 OK");
    assert_eq!(head.header("content-type"), get.header("content-type"));
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
    // No body followed the HEAD's head: the next bytes on the connection are the next response.
    let again = exchange(&mut stream, GET).await;
    assert_eq!(again.status_line, "HTTP/1.1 200 OK");
    assert_eq!(again.body.len(), get.body.len());
}

#[tokio::test]
async fn one_connection_carries_several_requests_in_turn_and_pipelined() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    for _ in 0..3 {
        let r = exchange(&mut stream, GET).await;
        assert_eq!(r.status(), 200);
        assert_ne!(r.header("connection"), Some("close"));
    }
    // Two requests in one write: two responses, in order.
    stream
        .write_all(format!("{GET}GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut stream, false).await.status(), 200);
    assert_eq!(read_response(&mut stream, false).await.status(), 404);
    // `Connection: close` is honoured: answered, then closed.
    let r = exchange(
        &mut stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status(), 200);
    expect_closed(&mut stream, IO_TIMEOUT).await;
}

#[tokio::test]
async fn an_http_1_0_client_is_answered_and_closed() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    let r = exchange(&mut stream, "GET /metrics HTTP/1.0\r\n\r\n").await;
    assert_eq!(r.status(), 200);
    expect_closed(&mut stream, IO_TIMEOUT).await;
}

#[tokio::test]
async fn a_malformed_request_gets_400_and_the_connection_closes() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    for bad in [
        "GET /metrics\r\n\r\n",
        "NOT HTTP AT ALL\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ] {
        let mut stream = endpoint.connect().await;
        stream.write_all(bad.as_bytes()).await.unwrap();
        let r = read_response(&mut stream, false).await;
        assert_eq!(r.status(), 400, "{bad:?}: {r:?}");
        expect_closed(&mut stream, IO_TIMEOUT).await;
    }
    // The listener goes on serving.
    let mut stream = endpoint.connect().await;
    assert_eq!(exchange(&mut stream, GET).await.status(), 200);
}

#[tokio::test]
async fn a_request_head_too_large_gets_431() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    // The server may answer and close before reading all of it.
    let _ = stream.write_all(big.as_bytes()).await;
    let r = read_response(&mut stream, false).await;
    assert_eq!(r.status(), 431, "{r:?}");
}

#[tokio::test]
async fn an_unknown_path_gets_404_and_another_method_405() {
    let endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    let r = exchange(&mut stream, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status_line, "HTTP/1.1 404 Not Found");
    assert!(r.text().contains("/metrics"), "{}", r.text());
    let r = exchange(&mut stream, "GET /metrics/x HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 404);
    // The query is not part of the path.
    let r = exchange(&mut stream, "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 200);
    let r = exchange(
        &mut stream,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert_eq!(r.status_line, "HTTP/1.1 405 Method Not Allowed");
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    // Still the same connection.
    assert_eq!(exchange(&mut stream, GET).await.status(), 200);
}

#[tokio::test]
async fn a_registered_json_endpoint_is_served_beside_metrics() {
    let endpoint = Endpoint::router(|| {
        Router::new()
            .route("/metrics", |_| Reply::ok("text/plain", "up 1\n"))
            .route("/hotkeys", |r| {
                Reply::json(&serde_json::json!({ "query": r.query() }))
            })
    })
    .await;
    let mut stream = endpoint.connect().await;
    let r = exchange(
        &mut stream,
        "GET /hotkeys?top=5 HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.text(), r#"{"query":"top=5"}"#);
    let r = exchange(&mut stream, "GET /membership HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 404);
    assert!(r.text().contains("/metrics /hotkeys"), "{}", r.text());
}

/// What the stats JSON leaves out to keep nutcracker's shape is served beside `/metrics`, as JSON, on
/// the same connection: `/command-latency` (each command sent, per Redis pool) and `/hotkeys`.
#[tokio::test]
async fn command_latency_and_hot_keys_are_served_beside_metrics() {
    let redis = Arc::new(PoolStats::with_commands("beta", &["get", "set"]));
    redis.commands[1].latency.observe(Duration::from_micros(80));
    let mut views = sample_views();
    views.push(PoolView {
        pool: redis,
        placements: Default::default(),
        servers: vec![Arc::new(ServerStats::new("rd0"))],
    });
    let endpoint = Endpoint::prometheus(views).await;
    let mut stream = endpoint.connect().await;
    let r = exchange(
        &mut stream,
        "GET /command-latency HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_str(&r.text()).expect("JSON");
    assert_eq!(v["pools"][0]["pool"], "alpha");
    assert!(v["pools"][0]["commands"].is_null(), "{v}");
    assert_eq!(v["pools"][1]["pool"], "beta");
    assert_eq!(v["pools"][1]["commands"]["set"]["requests"], 1, "{v}");
    assert!(v["pools"][1]["commands"].get("get").is_none(), "{v}");
    let r = exchange(&mut stream, "GET /hotkeys HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_str(&r.text()).expect("JSON");
    assert_eq!(v["pools"][1]["pool"], "beta");
    assert!(v["pools"][1]["keys"].is_null(), "no detection: {v}");
    let r = exchange(&mut stream, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 404);
    assert!(
        r.text().contains("/metrics /hotkeys /command-latency"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn an_idle_or_slow_connection_is_closed_after_the_header_timeout() {
    let endpoint = Endpoint::router(|| {
        Router::new()
            .route("/metrics", |_| Reply::ok("text/plain", "up 1\n"))
            .header_timeout(Duration::from_millis(200))
    })
    .await;
    // Idle from the start.
    let mut idle = endpoint.connect().await;
    expect_closed(&mut idle, Duration::from_secs(5)).await;
    // Half a head, then silence.
    let mut slow = endpoint.connect().await;
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let mut b = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut b))
        .await
        .expect("closed in time")
        .unwrap_or(0);
    // hyper may say 408 before closing; it must not answer the half request.
    assert!(
        n == 0 || b.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&b[..n])
    );
    // Idle after a request (keep-alive): closed too.
    let mut kept = endpoint.connect().await;
    let r = exchange(&mut kept, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 200);
    expect_closed(&mut kept, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn connections_past_the_limit_wait_for_a_free_slot() {
    let endpoint = Endpoint::router(|| {
        Router::new()
            .route("/metrics", |_| Reply::ok("text/plain", "up 1\n"))
            .max_connections(1)
    })
    .await;
    let mut first = endpoint.connect().await;
    let r = exchange(&mut first, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 200);
    // The first connection holds the only slot (keep-alive): the second is not served yet...
    let mut second = endpoint.connect().await;
    second
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), second.read(&mut b))
            .await
            .is_err(),
        "the second connection was served while the first held the only slot"
    );
    // ...until the first goes away.
    drop(first);
    assert_eq!(read_response(&mut second, false).await.status(), 200);
}

#[tokio::test]
async fn stop_ends_the_listener_and_its_idle_connections() {
    let mut endpoint = Endpoint::prometheus(sample_views()).await;
    let mut stream = endpoint.connect().await;
    assert_eq!(exchange(&mut stream, GET).await.status(), 200);
    endpoint.stop.cancel();
    let task = endpoint.task.take().unwrap();
    tokio::time::timeout(IO_TIMEOUT, task)
        .await
        .expect("serve_prometheus returns after stop")
        .unwrap();
    expect_closed(&mut stream, IO_TIMEOUT).await;
}

#[tokio::test]
async fn a_large_scrape_arrives_whole_and_matches_the_renderer() {
    // 10 pools × 100 servers: megabytes, far past hyper's write buffer.
    let views: Vec<PoolView> = (0..10)
        .map(|p| PoolView {
            placements: Default::default(),
            pool: Arc::new(PoolStats::new(&format!("pool-{p}"))),
            servers: (0..100)
                .map(|s| Arc::new(ServerStats::new(&format!("10.0.{p}.{s}:11211"))))
                .collect(),
        })
        .collect();
    let expected = metrics::render_prometheus(std::time::Instant::now(), &views);
    let endpoint = Endpoint::prometheus(views).await;
    let mut stream = endpoint.connect().await;
    for _ in 0..2 {
        let r = exchange(&mut stream, GET).await;
        assert_eq!(r.status(), 200);
        // Uptime may differ by a second; everything else is the same text.
        let strip = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with("shardring_proxy_uptime_seconds "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(r.body.len() > 1_000_000, "{} bytes", r.body.len());
        assert!(
            strip(&r.text()) == strip(&expected),
            "the scraped text differs from the renderer's"
        );
    }
}

/// A Prometheus server (Debian's `prometheus`) scraping one target every second, killed on drop with its
/// data directory removed.
struct PrometheusServer {
    /// The process.
    child: std::process::Child,
    /// Its web address, `127.0.0.1:port`.
    web: String,
    /// Config and TSDB directory.
    dir: std::path::PathBuf,
}

impl PrometheusServer {
    /// Starts Prometheus scraping `target`; `None` when it is not installed outside CI.
    fn start(target: SocketAddr) -> Option<PrometheusServer> {
        let dir = std::env::temp_dir().join(format!(
            "shardring-prometheus-{}-{}",
            std::process::id(),
            target.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: proxy\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = test_support::free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => Some(PrometheusServer {
                child,
                web: format!("127.0.0.1:{port}"),
                dir,
            }),
            Err(e) if !in_ci() => {
                eprintln!("skipping: prometheus not runnable here ({e}); .ci/run installs it");
                let _ = std::fs::remove_dir_all(&dir);
                None
            }
            Err(e) => panic!("prometheus must be installed in CI: {e}"),
        }
    }

    /// `GET path` on its HTTP API as JSON, or `None` while it is not answering yet.
    async fn api(&self, path: &str) -> Option<serde_json::Value> {
        let mut stream = TcpStream::connect(&self.web).await.ok()?;
        // HTTP/1.0, so that the body comes whole (not chunked) and the connection closes after it.
        let request = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        tokio::time::timeout(IO_TIMEOUT, stream.read_to_end(&mut raw))
            .await
            .ok()?
            .ok()?;
        let raw = String::from_utf8_lossy(&raw);
        let (_, body) = raw.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_negotiates_openmetrics_and_stores_every_family() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let seen_accept = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&seen_accept);
    let stop = CancellationToken::new();
    let s = stop.clone();
    let task = tokio::spawn(async move {
        let views = sample_views();
        let metrics = metrics::metrics_endpoint(std::time::Instant::now(), move || views.clone());
        let router = Router::new().route("/metrics", move |r| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(r.header("accept").unwrap_or_default().to_owned());
            }
            metrics(r)
        });
        metrics::serve_http(listener, &router, s).await;
    });
    let Some(prometheus) = PrometheusServer::start(target) else {
        return;
    };

    // Wait (bounded) for a scrape to be stored: the query answers with the sample.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let query =
        "/api/v1/query?query=shardring_proxy_server_requests_total%7Bserver%3D%22cache-a%22%7D";
    let value = loop {
        let got = prometheus.api(query).await;
        let value = got.as_ref().and_then(|v| {
            v["data"]["result"][0]["value"][1]
                .as_str()
                .map(str::to_owned)
        });
        if let Some(value) = value {
            break value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus stored no scrape in 60 s; last answer {got:?}; targets {:?}",
            prometheus.api("/api/v1/targets").await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(value, "7");

    let targets = prometheus.api("/api/v1/targets").await.expect("targets");
    let active = &targets["data"]["activeTargets"][0];
    assert_eq!(active["health"], "up", "{targets}");
    assert_eq!(active["lastError"], "", "{targets}");

    // Prometheus asked for OpenMetrics first, so that is what it parsed.
    let accept = seen_accept
        .lock()
        .unwrap()
        .first()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        metrics::Format::from_accept(Some(&accept)),
        metrics::Format::OpenMetrics,
        "{accept}"
    );

    // Every family arrived with its type (histograms by their base name, counters without `_total`).
    let metadata = prometheus.api("/api/v1/metadata").await.expect("metadata");
    for (family, kind) in [
        ("shardring_proxy_uptime_seconds", "gauge"),
        ("shardring_proxy_pool_client_connections", "gauge"),
        (
            "shardring_proxy_pool_client_connections_accepted",
            "counter",
        ),
        ("shardring_proxy_server_request_bytes", "counter"),
        ("shardring_proxy_server_latency_seconds", "histogram"),
    ] {
        assert_eq!(
            metadata["data"][family][0]["type"], kind,
            "{family} in {metadata}"
        );
    }
    drop(prometheus);
    stop.cancel();
    let _ = tokio::time::timeout(IO_TIMEOUT, task).await;
}
