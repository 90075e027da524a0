//! One server the copy talks to.

/// A memcached or Redis server: its address and what a connection to it must send first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, `[v6]:port`, or a unix socket's path (starting with `/`).
    pub addr: String,
    /// The server's name in the pool (its `servers:` line's name, or `host:port`), for messages.
    pub name: String,
    /// Redis: the password `AUTH` sends (`redis_auth`); none for memcached.
    pub auth: Option<String>,
    /// Redis: the database (`redis_db`); 0 for memcached.
    pub db: u32,
}

impl Endpoint {
    /// A server at `addr` named `name`, without a password, database 0.
    pub fn new(addr: impl Into<String>, name: impl Into<String>) -> Endpoint {
        Endpoint {
            addr: addr.into(),
            name: name.into(),
            auth: None,
            db: 0,
        }
    }

    /// The host and port, for a TCP address (`None` for a unix socket).
    pub fn host_port(&self) -> Option<(&str, u16)> {
        if self.addr.starts_with('/') {
            return None;
        }
        let (host, port) = self.addr.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some((host, port.parse().ok()?))
    }
}
