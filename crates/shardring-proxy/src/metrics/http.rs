//! The HTTP side: hyper's HTTP/1.1 server over a table of endpoints.
//!
//! hyper does the protocol (request heads parsed strictly, 400 on a malformed one, keep-alive, `HEAD`
//! answered with `GET`'s headers and no body, `Date`, `Content-Length`); this file adds the routing
//! (exact paths; 404 elsewhere, 405 with `Allow` for other methods) and the limits a listener on a
//! network port needs:
//! - a connection waiting for a request head longer than the header timeout is closed (hyper's header
//!   read timeout, which also runs while a keep-alive connection sits idle between requests);
//! - at most `max_connections` connections are served at once; past that the listener stops accepting
//!   and new connections wait in the kernel's backlog;
//! - a connection lives at most `connection_lifetime`, then is shut down gracefully (the request in
//!   progress is answered), so a client that stops reading cannot hold a slot forever.
//!
//! All connections are served on the task that calls [`serve_http`] (they are polled together), so the
//! handlers need not be `'static`: they may borrow from the caller. They are `Send + Sync` so that the
//! listener's future can be spawned. Endpoints are cheap and rare (a scrape every few seconds), so one
//! task is plenty.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::net::accept_with_backoff;

/// The largest request head accepted (hyper answers 431 past it). hyper's minimum is 8 KiB.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long a connection being shut down (lifetime over, or `stop`) gets to finish its request.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What a handler sees of a request: its head. Bodies are not read (every endpoint is a `GET`).
#[derive(Debug)]
pub struct Request<'a> {
    /// The request head as hyper parsed it.
    head: &'a hyper::Request<Incoming>,
}

impl Request<'_> {
    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.head.uri().path()
    }

    /// The query string (after `?`), if any.
    pub fn query(&self) -> Option<&str> {
        self.head.uri().query()
    }

    /// The first value of header `name` (case-insensitive), if present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.headers().get(name)?.to_str().ok()
    }
}

/// A handler's answer: status, content type and body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    status: StatusCode,
    /// The `Content-Type` header.
    content_type: HeaderValue,
    /// The body (dropped by hyper for `HEAD`, after `Content-Length` is taken from it).
    body: Bytes,
}

impl Reply {
    /// 200 with `body` of type `content_type`. A content type that is not a valid header value is sent
    /// as `application/octet-stream`.
    pub fn ok(content_type: &str, body: impl Into<Bytes>) -> Reply {
        Reply {
            status: StatusCode::OK,
            content_type: HeaderValue::from_str(content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
            body: body.into(),
        }
    }

    /// 200 with `value` as JSON: what the JSON endpoints (`/hotkeys`, `/command-latency`) answer.
    pub fn json(value: &serde_json::Value) -> Reply {
        Reply::ok("application/json", value.to_string())
    }

    /// An error `status` (500 if it is not a valid status code) with a plain-text `message`.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            content_type: HeaderValue::from_static("text/plain; charset=utf-8"),
            body: Bytes::copy_from_slice(message.as_bytes()),
        }
    }
}

/// A handler: the answer to a `GET` (or `HEAD`) of its path.
type Handler<'a> = Box<dyn Fn(&Request<'_>) -> Reply + Send + Sync + 'a>;

/// The endpoints a listener serves, and its connection limits.
///
/// ```
/// use shardring_proxy::metrics::{Reply, Router};
///
/// let router = Router::new()
///     .route("/metrics", |_| Reply::ok("text/plain", "up 1\n"))
///     .route("/hotkeys", |_| Reply::json(&serde_json::json!({ "keys": [] })));
/// # let _ = router;
/// ```
pub struct Router<'a> {
    /// Exact paths and their handlers, in registration order (few, so a linear search).
    routes: Vec<(String, Handler<'a>)>,
    /// How long a connection may take to send a request head, or sit idle between requests.
    header_timeout: Duration,
    /// How many connections are served at once.
    max_connections: usize,
    /// How long one connection is served before it is shut down.
    connection_lifetime: Duration,
}

impl fmt::Debug for Router<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field(
                "routes",
                &self.routes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .field("header_timeout", &self.header_timeout)
            .field("max_connections", &self.max_connections)
            .field("connection_lifetime", &self.connection_lifetime)
            .finish()
    }
}

impl Default for Router<'_> {
    fn default() -> Self {
        Router::new()
    }
}

impl<'a> Router<'a> {
    /// No endpoints (every path is 404), default limits.
    pub fn new() -> Router<'a> {
        Router {
            routes: Vec::new(),
            header_timeout: Duration::from_secs(5),
            max_connections: 64,
            connection_lifetime: Duration::from_secs(60),
        }
    }

    /// Serves `handler` at exactly `path` (the query is ignored), for `GET` and `HEAD`. A path registered
    /// twice keeps its first handler.
    pub fn route<H>(mut self, path: &str, handler: H) -> Router<'a>
    where
        H: Fn(&Request<'_>) -> Reply + Send + Sync + 'a,
    {
        self.routes.push((path.to_owned(), Box::new(handler)));
        self
    }

    /// How long a connection may take to send a request head, including the time a keep-alive
    /// connection sits idle before its next request; then it is closed.
    ///
    /// By default, this is 5 seconds (Prometheus reconnects when its next scrape finds the connection
    /// closed).
    pub fn header_timeout(mut self, timeout: Duration) -> Router<'a> {
        self.header_timeout = timeout;
        self
    }

    /// How many connections are served at once; more wait to be accepted. 0 is taken as 1.
    ///
    /// By default, this is 64.
    pub fn max_connections(mut self, n: usize) -> Router<'a> {
        self.max_connections = n.max(1);
        self
    }

    /// How long one connection is served; then it is shut down gracefully (the request in progress is
    /// answered, within 5 seconds).
    ///
    /// By default, this is 60 seconds.
    pub fn connection_lifetime(mut self, lifetime: Duration) -> Router<'a> {
        self.connection_lifetime = lifetime;
        self
    }

    /// The response to `request`: the handler's reply for `GET`/`HEAD` of a known path, 405 for another
    /// method there, 404 for an unknown path.
    fn answer(&self, request: &hyper::Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path();
        let Some((_, handler)) = self.routes.iter().find(|(p, _)| p == path) else {
            let known = self
                .routes
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            return respond(Reply::error(404, &format!("not found; try {known}\n")));
        };
        if request.method() != Method::GET && request.method() != Method::HEAD {
            let mut response = respond(Reply::error(405, "method not allowed; use GET\n"));
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        respond(handler(&Request { head: request }))
    }
}

/// A reply as a hyper response.
fn respond(reply: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(reply.body));
    *response.status_mut() = reply.status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, reply.content_type);
    response
}

/// Serves `router`'s endpoints on `listener` until `stop` is cancelled, then gives open connections up to
/// 5 seconds to finish their request and returns. Accept errors (out of file descriptors and the like)
/// are logged and retried after a pause; an error on one connection ends that connection only.
pub async fn serve_http(listener: TcpListener, router: &Router<'_>, stop: CancellationToken) {
    let mut connections = FuturesUnordered::new();
    loop {
        let room = connections.len() < router.max_connections;
        tokio::select! {
            () = stop.cancelled() => break,
            Some(()) = connections.next(), if !connections.is_empty() => {}
            accepted = accept_with_backoff(&listener, &stop, "http"), if room => match accepted {
                Some(stream) => connections.push(serve_connection(stream, router, &stop)),
                None => break,
            },
        }
    }
    // Each connection sees `stop` too and shuts down within its grace period.
    while connections.next().await.is_some() {}
}

/// Serves one connection: hyper's HTTP/1.1 with keep-alive, until the client closes it, an error, the
/// header timeout, the connection's lifetime or `stop`.
async fn serve_connection(stream: TcpStream, router: &Router<'_>, stop: &CancellationToken) {
    let peer = stream.peer_addr().ok();
    let service =
        service_fn(|request| std::future::ready(Ok::<_, Infallible>(router.answer(&request))));
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(router.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let finished = tokio::select! {
        r = connection.as_mut() => Some(r),
        () = tokio::time::sleep(router.connection_lifetime) => None,
        () = stop.cancelled() => None,
    };
    let result = match finished {
        Some(r) => r,
        None => {
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(SHUTDOWN_GRACE, connection.as_mut())
                .await
                .unwrap_or(Ok(()))
        }
    };
    if let Err(e) = result {
        // Routine on a network port: malformed requests (answered 400 by hyper), header timeouts, resets.
        tracing::debug!(error = %e, ?peer, "metrics connection ended");
    }
}
