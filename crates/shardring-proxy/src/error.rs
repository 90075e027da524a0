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
    #[error("cannot listen on {addr} ({what})")]
    Bind {
        /// The address.
        addr: String,
        /// Whose address it is: a pool's, the stats port's or the metrics listener's.
        what: BindTarget,
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
    #[error("membership")]
    Membership(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Another I/O failure.
    #[error("I/O error")]
    Io(#[from] io::Error),
}

/// Whose address a [`ProxyError::Bind`] could not bind, as the message names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindTarget {
    /// A pool's `listen`.
    Pool(String),
    /// The stats port (`-s/--stats-port`, `-a/--stats-addr`).
    Stats,
    /// The Prometheus listener (`--metrics-addr`).
    Metrics,
}

impl std::fmt::Display for BindTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindTarget::Pool(pool) => write!(f, "pool {pool}'s listen"),
            BindTarget::Stats => f.write_str("the stats port, -s/--stats-port and -a/--stats-addr"),
            BindTarget::Metrics => f.write_str("the metrics listener, --metrics-addr"),
        }
    }
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
    /// The TCP connection was made and the TLS handshake failed: a certificate problem or a TLS
    /// setting the server does not share, not the server being down.
    #[error("cannot connect to {addr}: TLS handshake failed: {reason}")]
    Tls {
        /// The server.
        addr: String,
        /// The cause, in words (an unknown CA, a name mismatch, an expiry, the server's alert).
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
    /// The proxy follows etcd, a planned change moves the key's owner, and the proxy has not
    /// confirmed its registration for longer than its fence time (`fence`): it refuses the
    /// key rather than risk a stale value.
    #[error("fenced: this proxy has not confirmed its place in etcd for {unconfirmed_ms} ms during a planned change that moves this key (or no server is live for it); try again")]
    Fenced {
        /// How long the registration has gone unconfirmed.
        unconfirmed_ms: u64,
    },
    /// The server's circuit breaker is open (`--circuit-breakers`): it was ejected for failing or
    /// answering slowly, and is refused until a probe passes, so its keys fail fast instead of
    /// waiting for a timeout.
    #[error("circuit open for {addr}: {reason}")]
    CircuitOpen {
        /// The server.
        addr: String,
        /// Why, and for how long (`ejected for 812 ms more after 5 consecutive failures …`).
        reason: String,
    },
    /// The server has its cap of requests pending (`--max-pending`): this one is refused at once
    /// rather than queued behind them.
    #[error("{addr} has {pending} requests pending, the most allowed (--max-pending)")]
    Overloaded {
        /// The server.
        addr: String,
        /// The cap.
        pending: u32,
    },
    /// A key of the request, or the pool, is over its rate limit (`--key-rate-limit`,
    /// `--pool-rate-limit`): refused at once, never sent.
    #[error("rate limited: {what} is over its limit of {rate} requests a second ({flag})")]
    RateLimited {
        /// `a key` or `the pool`.
        what: &'static str,
        /// The limit.
        rate: u32,
        /// The flag that set it.
        flag: &'static str,
    },
    /// A cluster node redirected the request where the proxy cannot follow (to a master it has no
    /// connections to yet, or round and round): answered as Redis Cluster's `TRYAGAIN`, never as
    /// the redirection itself.
    #[error("{reason}")]
    Redirected {
        /// What the node said, and why it was not followed.
        reason: String,
    },
    /// A split key's write reached its owner, and a copy of the key could not be deleted after it
    /// (`--hot-key-split`): that copy may still hold the value before the write, so the write is
    /// not acknowledged.
    #[error("split key's copy on {addr} not deleted after the write ({reason}); the owner has the write: write again")]
    SplitCopyKept {
        /// The copy's server.
        addr: String,
        /// What it answered, or why it did not.
        reason: String,
    },
    /// A dual write's next owner (a planned change) refused the write for the state of its server
    /// (out of memory, read-only, a redirection) while the owner now took it: the write is not
    /// acknowledged, since once the copy is done nothing would bring it there and the cut-over
    /// would lose it (`protocol::planned`).
    #[error("the planned change's next owner {addr} refused the write ({reply}); the owner now has it: write again")]
    NextRefused {
        /// The next owner.
        addr: String,
        /// What it answered.
        reply: String,
    },
    /// The server was removed by a reload while the request waited.
    #[error("server removed")]
    Removed,
    /// The proxy could not open a connection to the server for want of a descriptor or socket memory
    /// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`): the proxy's failure, never counted against the
    /// server ([`crate::descriptors`]).
    #[error("proxy out of local resources: {reason}")]
    LocalResources {
        /// The cause, as text.
        reason: String,
    },
    /// A client needed a connection of its own to the server (a Redis `WATCH` or blocking
    /// command), and the server had its bound of them open.
    #[error("{addr} has {limit} connections of single clients open, the most allowed (--redis-dedicated-connections)")]
    OwnConnectionsExhausted {
        /// The server.
        addr: String,
        /// The bound.
        limit: u32,
    },
}

impl BackendError {
    /// Whether this failure counts toward ejecting the server: every failure but the proxy's own
    /// shortage of descriptors, and the answers that need no server.
    pub fn counts_against_server(&self) -> bool {
        !matches!(
            self,
            BackendError::LocalResources { .. }
                | BackendError::NoServer
                | BackendError::Fenced { .. }
                | BackendError::Redirected { .. }
                | BackendError::Removed
                | BackendError::OwnConnectionsExhausted { .. }
                | BackendError::CircuitOpen { .. }
                | BackendError::Overloaded { .. }
                | BackendError::RateLimited { .. }
                | BackendError::SplitCopyKept { .. }
                | BackendError::NextRefused { .. }
        )
    }

    /// Why, without the server's address: for log lines that name the server once, by its name.
    pub(crate) fn cause(&self) -> Cause<'_> {
        Cause(self)
    }
}

/// A [`BackendError`]'s cause alone (`connect failed: Connection refused (os error 111)`, `timed
/// out waiting for a reply`, `connection lost: closed by server`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cause<'a>(&'a BackendError);

impl std::fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            BackendError::Connect { reason, .. } => write!(f, "connect failed: {reason}"),
            BackendError::Tls { reason, .. } => write!(f, "TLS handshake failed: {reason}"),
            BackendError::Timeout { .. } => f.write_str("timed out waiting for a reply"),
            BackendError::Lost { reason, .. } => write!(f, "connection lost: {reason}"),
            BackendError::Refused { reply, .. } => write!(f, "answered {reply}"),
            other => std::fmt::Display::fmt(other, f),
        }
    }
}

/// Why no master address could be had from the Sentinels ([`crate::sentinel::Sentinels::master`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SentinelError {
    /// The pool names no Sentinel to ask.
    #[error("no Sentinel addresses to ask")]
    NoSentinels,
    /// Every Sentinel was asked and none gave the group's master: each one's reason, in the order
    /// they were asked.
    #[error("master group {group}: no Sentinel gave its master ({})", Failures(.failures))]
    Unresolved {
        /// The master group (the server's name).
        group: String,
        /// What each Sentinel did instead.
        failures: Vec<SentinelFailure>,
    },
}

impl SentinelError {
    /// Whether every Sentinel answered and none monitors the group: the group's name is wrong (or the
    /// Sentinels were not told of it), which retrying will not mend.
    pub fn is_unknown_group(&self) -> bool {
        match self {
            SentinelError::NoSentinels => false,
            SentinelError::Unresolved { failures, .. } => {
                !failures.is_empty()
                    && failures
                        .iter()
                        .all(|f| f.cause == SentinelCause::UnknownGroup)
            }
        }
    }
}

/// One Sentinel's part of a [`SentinelError::Unresolved`]: `addr: cause`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{addr}: {cause}")]
pub struct SentinelFailure {
    /// The Sentinel's `host:port`.
    pub addr: String,
    /// What it did instead of naming the master.
    pub cause: SentinelCause,
}

/// Why one Sentinel did not name a group's master. Causes are kept as text: one failure is reported
/// for many groups, and in stats and logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SentinelCause {
    /// The connection could not be opened.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The connection, the password check or the answer took longer than the timeout.
    #[error("no answer within the timeout")]
    Timeout,
    /// The connection broke or was closed before the answer.
    #[error("connection lost: {0}")]
    Lost(String),
    /// The Sentinel refused the password (`AUTH`): its error reply.
    #[error("refused the password: {0}")]
    AuthRefused(String),
    /// The Sentinel requires a password and none is set (`NOAUTH`).
    #[error("requires a password and none is set: {0}")]
    AuthRequired(String),
    /// The Sentinel answered, and monitors no master group of that name.
    #[error("monitors no such master group")]
    UnknownGroup,
    /// The Sentinel answered with an error reply.
    #[error("answered {0}")]
    Refused(String),
    /// The Sentinel's reply was not RESP, too large, or not the shape the command has.
    #[error("malformed reply: {0}")]
    Malformed(String),
}

/// A list of [`SentinelFailure`]s, `; `-separated, for [`SentinelError::Unresolved`]'s message.
struct Failures<'a>(&'a [SentinelFailure]);

impl std::fmt::Display for Failures<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, failure) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{failure}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_server_failures_count_toward_ejecting_a_server() {
        let addr = || "127.0.0.1:11211".to_owned();
        for counted in [
            BackendError::Connect {
                addr: addr(),
                reason: "Connection refused (os error 111)".into(),
            },
            BackendError::Timeout { addr: addr() },
            BackendError::Lost {
                addr: addr(),
                reason: "closed by server".into(),
            },
        ] {
            assert!(counted.counts_against_server(), "{counted}");
            assert!(
                !counted.cause().to_string().contains("127.0.0.1"),
                "{counted}"
            );
        }
        let local = BackendError::LocalResources {
            reason: "Too many open files (os error 24)".into(),
        };
        assert!(!local.counts_against_server());
        assert_eq!(
            local.to_string(),
            "proxy out of local resources: Too many open files (os error 24)"
        );
    }
}
