//! The proxy library's errors.

use std::io;

/// What can go wrong setting up or running the proxy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The configuration was refused; every problem is listed.
    #[error("invalid configuration: {0}")]
    Config(#[from] crate::config::ConfigErrors),
    /// A pool's placement could not be built.
    #[error("pool {pool}: {reason}")]
    Placement {
        /// The pool.
        pool: String,
        /// Why.
        reason: String,
    },
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The worker threads could not be started.
    #[error("cannot start {workers} worker threads")]
    Workers {
        /// How many were asked for.
        workers: usize,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The pools' membership could not be read from the config store at start.
    #[error("membership: {0}")]
    Membership(String),
    /// Another I/O failure.
    #[error("I/O error")]
    Io(#[from] io::Error),
}

/// Why a request to a server failed. Each becomes `SERVER_ERROR <message>` for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Connecting failed or timed out.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The server.
        addr: String,
        /// The cause, as text (the proxy answers many requests with one failure).
        reason: String,
    },
    /// No reply within the pool's `timeout`.
    #[error("timeout waiting for {addr}")]
    Timeout {
        /// The server.
        addr: String,
    },
    /// The connection broke (closed, reset, or the server sent something unframeable).
    #[error("connection to {addr} lost: {reason}")]
    Lost {
        /// The server.
        addr: String,
        /// The cause.
        reason: String,
    },
    /// The server answered a split multi-get or a broadcast `flush_all` with an error line.
    #[error("{addr} answered {reply}")]
    Refused {
        /// The server.
        addr: String,
        /// Its reply line.
        reply: String,
    },
    /// No server is live for the key (all ejected).
    #[error("no server available")]
    NoServer,
    /// The server was removed by a reload while the request waited.
    #[error("server removed")]
    Removed,
}
