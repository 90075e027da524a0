//! Redis Sentinel: where each master group's master is now, and when it moves.
//!
//! A Redis pool may name Sentinels instead of fixed masters: each server line's *name* (twemproxy's
//! `host:port:weight name`) is then its master group, and the server's address is whatever the
//! Sentinels say that group's master is. Keys are placed by server name, so a failover moves no key:
//! only the connections of that one server move to the new master.
//!
//! - [`Sentinels::master`] asks the Sentinels in turn (`SENTINEL get-master-addr-by-name`), the first
//!   answer winning;
//! - [`Sentinels::watch`] follows failovers: it keeps a `+switch-master` subscription on every Sentinel
//!   it can reach and reports each group's master whenever it changes, re-resolving every group after
//!   each (re)connect (a switch announced while a subscription was down is still seen) and
//!   periodically as a safety net.
//!
//! A pool's Sentinels are given by `shardring proxy --sentinel` ([`crate::flags::SentinelFlags`]).
//!
//! The client speaks RESP2 only (no `HELLO`), sends `AUTH <password>` first when a password is set, and
//! opens connections through a [`Connect`] it is given ([`tcp_connect`] by default), so Sentinels over
//! TLS need only another connector. A Sentinel's replies are read by the workspace's RESP reader
//! (`shardring-resp`, as the proxy's reply framer and `shardring migrate` read theirs) with a 64 KiB
//! bound, RESP2 only: a malformed, hostile or endless reply is an error for that Sentinel, never a panic
//! or an unbounded buffer.

mod conn;
mod connect;
pub(crate) mod flags;
pub mod follow;
mod stats;
mod watch;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use shardring_resp::Value;

use self::conn::Conn;
pub use self::connect::{tcp_connect, AsyncReadWrite, Connect, Connecting, SentinelStream};
pub use self::stats::SentinelStats;
pub use crate::error::{SentinelCause, SentinelError, SentinelFailure};

/// The channels a watch subscribes to on each Sentinel: `+switch-master` moves masters; `+odown` and
/// `-odown` (a master objectively down, and back) are only logged.
const CHANNELS: [&str; 3] = ["+switch-master", "+odown", "-odown"];

/// The first wait before reconnecting to a lost Sentinel; it doubles up to [`Sentinels::retry_max`].
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// A set of Sentinels monitoring the same master groups, and how to talk to them.
pub struct Sentinels {
    /// The Sentinels' `host:port`s, asked in this order.
    addrs: Vec<String>,
    /// Sent with `AUTH` before anything else, when set (the Sentinels' `requirepass`).
    password: Option<String>,
    /// Opens the connections (plain TCP by default; TLS is another connector).
    connect: Connect,
    /// The bound on one exchange with one Sentinel: connecting, `AUTH`, and the answer.
    timeout: Duration,
    /// The longest wait between attempts to reach a lost Sentinel.
    retry_max: Duration,
    /// How often a watch re-resolves every group, and how long a subscription may stay silent
    /// before it is sent a `PING`.
    refresh: Duration,
    /// What the watch has seen.
    stats: Arc<SentinelStats>,
}

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinels")
            .field("addrs", &self.addrs)
            // Never the password itself: this ends up in logs.
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("retry_max", &self.retry_max)
            .field("refresh", &self.refresh)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Sentinels {
    /// The Sentinels at `addrs` (`host:port`, asked in this order). By default there is no password,
    /// connections are plain TCP ([`tcp_connect`]), the timeout is 1 s, the reconnection back-off grows
    /// to 5 s, and a watch re-resolves every 10 s.
    pub fn new(addrs: impl IntoIterator<Item = impl Into<String>>) -> Sentinels {
        Sentinels {
            addrs: addrs.into_iter().map(Into::into).collect(),
            password: None,
            connect: tcp_connect(),
            timeout: Duration::from_secs(1),
            retry_max: Duration::from_secs(5),
            refresh: Duration::from_secs(10),
            stats: Arc::default(),
        }
    }

    /// The Sentinels' password (their `requirepass`), sent with `AUTH` on every connection before
    /// anything else. By default, this is `None`: nothing is sent.
    pub fn password(mut self, password: impl Into<String>) -> Sentinels {
        self.password = Some(password.into());
        self
    }

    /// How connections are opened. By default, this is [`tcp_connect`].
    pub fn connect(mut self, connect: Connect) -> Sentinels {
        self.connect = connect;
        self
    }

    /// The bound on one exchange with one Sentinel: connecting (and any TLS handshake), the password
    /// check, and its answer, together. A Sentinel that takes longer counts as failed and the next
    /// one is asked. By default, this is 1 s (a Sentinel answers from memory).
    pub fn timeout(mut self, timeout: Duration) -> Sentinels {
        self.timeout = timeout;
        self
    }

    /// The longest wait between attempts to reach a lost Sentinel: the first is 100 ms, each next one
    /// twice the last, up to this. By default, this is 5 s.
    pub fn retry_max(mut self, wait: Duration) -> Sentinels {
        self.retry_max = wait;
        self
    }

    /// How often a watch re-resolves every group whatever the subscriptions say, a safety net for a
    /// lost message; also how long a subscription may stay silent before the Sentinel is sent a `PING`
    /// (one that does not answer within the timeout is taken as lost). By default, this is 10 s.
    pub fn refresh(mut self, every: Duration) -> Sentinels {
        self.refresh = every;
        self
    }

    /// The Sentinels' addresses, in the order they are asked.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// What watches have seen: shared by every watch of these Sentinels, and live.
    pub fn stats(&self) -> Arc<SentinelStats> {
        Arc::clone(&self.stats)
    }

    /// The address (`host:port`) of `group`'s master, as the first Sentinel that knows it says.
    ///
    /// The Sentinels are asked in turn; one that cannot be reached, refuses the password, or does not
    /// monitor the group is passed over for the next.
    ///
    /// # Errors
    /// [`SentinelError::Unresolved`] with each Sentinel's reason when none names the master
    /// ([`SentinelError::is_unknown_group`] when they all answered that they do not monitor it);
    /// [`SentinelError::NoSentinels`] when there are none to ask.
    pub async fn master(&self, group: &str) -> Result<String, SentinelError> {
        self.resolve(&[group])
            .await
            .pop()
            .unwrap_or(Err(SentinelError::NoSentinels))
    }

    /// Each of `groups`' masters, in order: each Sentinel in turn is asked, on one connection, for the
    /// groups no earlier one answered.
    pub(crate) async fn resolve(&self, groups: &[&str]) -> Vec<Result<String, SentinelError>> {
        if self.addrs.is_empty() {
            return groups
                .iter()
                .map(|_| Err(SentinelError::NoSentinels))
                .collect();
        }
        let mut found: Vec<Option<String>> = vec![None; groups.len()];
        let mut failures: Vec<Vec<SentinelFailure>> = vec![Vec::new(); groups.len()];
        for addr in &self.addrs {
            let pending: Vec<usize> = (0..groups.len()).filter(|&i| found[i].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            let names: Vec<&str> = pending.iter().map(|&i| groups[i]).collect();
            let failed = |i: usize, cause: SentinelCause| {
                tracing::debug!(sentinel = %addr, group = groups[i], %cause, "the Sentinel did not name the master");
                SentinelFailure {
                    addr: addr.clone(),
                    cause,
                }
            };
            match self
                .ask(addr, "get-master-addr-by-name", &names, master_reply)
                .await
            {
                Ok(answers) => {
                    for (&i, answer) in pending.iter().zip(answers) {
                        match answer {
                            Ok(master) => found[i] = Some(master),
                            Err(cause) => failures[i].push(failed(i, cause)),
                        }
                    }
                }
                Err(cause) => {
                    for &i in &pending {
                        failures[i].push(failed(i, cause.clone()));
                    }
                }
            }
        }
        found
            .into_iter()
            .zip(failures)
            .zip(groups)
            .map(|((master, failures), group)| {
                master.ok_or_else(|| SentinelError::Unresolved {
                    group: (*group).to_string(),
                    failures,
                })
            })
            .collect()
    }

    /// Asks the Sentinel at `addr` `SENTINEL <subcommand> <group>` for each of `groups`, pipelined on
    /// one connection (after `AUTH`), within the timeout, and reads each answer with `answer`. The
    /// outer error is the Sentinel's (no connection, password refused), the inner ones each group's.
    pub(crate) async fn ask<T>(
        &self,
        addr: &str,
        subcommand: &str,
        groups: &[&str],
        answer: fn(Value) -> Result<T, SentinelCause>,
    ) -> Result<Vec<Result<T, SentinelCause>>, SentinelCause> {
        let exchange = async {
            let mut conn = self.open(addr).await?;
            let asks: Vec<[&str; 3]> = groups.iter().map(|g| ["SENTINEL", subcommand, g]).collect();
            let mut commands: Vec<&[&str]> = Vec::with_capacity(asks.len() + 1);
            let auth = self.password.as_deref().map(|p| ["AUTH", p]);
            if let Some(auth) = &auth {
                commands.push(auth);
            }
            commands.extend(asks.iter().map(|a| a.as_slice()));
            conn.send(&commands).await?;
            if auth.is_some() {
                auth_reply(conn.read().await?)?;
            }
            let mut answers = Vec::with_capacity(groups.len());
            for _ in groups {
                answers.push(answer(conn.read().await?));
            }
            Ok(answers)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(SentinelCause::Timeout))
    }

    /// A connection to the Sentinel at `addr`, subscribed to [`CHANNELS`] (after `AUTH`), within the
    /// timeout.
    async fn subscribe(&self, addr: &str) -> Result<Conn, SentinelCause> {
        let exchange = async {
            let mut conn = self.open(addr).await?;
            let subscribe: Vec<&str> = std::iter::once("SUBSCRIBE").chain(CHANNELS).collect();
            let auth = self.password.as_deref().map(|p| ["AUTH", p]);
            let mut commands: Vec<&[&str]> = Vec::with_capacity(2);
            if let Some(auth) = &auth {
                commands.push(auth);
            }
            commands.push(&subscribe);
            conn.send(&commands).await?;
            if auth.is_some() {
                auth_reply(conn.read().await?)?;
            }
            for channel in CHANNELS {
                match conn.read().await? {
                    Value::Array(v)
                        if v.len() == 3
                            && v[0].text() == Some("subscribe")
                            && v[1].text() == Some(channel) => {}
                    Value::Error(e) => return Err(refused(e)),
                    other => {
                        return Err(SentinelCause::Malformed(format!(
                            "{other:?} where the confirmation of SUBSCRIBE {channel} was expected"
                        )))
                    }
                }
            }
            Ok(conn)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(SentinelCause::Timeout))
    }

    /// A new connection to `addr`, through the connector.
    async fn open(&self, addr: &str) -> Result<Conn, SentinelCause> {
        (self.connect)(addr.to_string())
            .await
            .map(Conn::new)
            .map_err(|e| SentinelCause::Connect(e.to_string()))
    }
}

/// The cause for an error reply: `NOAUTH` is a missing password, `ERR No such master` an unknown
/// group, anything else the Sentinel's refusal.
pub(crate) fn refused(error: String) -> SentinelCause {
    if error.starts_with("NOAUTH") {
        SentinelCause::AuthRequired(error)
    } else if error.starts_with("ERR No such master") {
        // `SENTINEL MASTER`'s answer for a group it does not monitor.
        SentinelCause::UnknownGroup
    } else {
        SentinelCause::Refused(error)
    }
}

/// `AUTH`'s reply: `+OK`, else the password was refused (`WRONGPASS`, or `ERR` when the Sentinel has
/// no password).
fn auth_reply(reply: Value) -> Result<(), SentinelCause> {
    match reply {
        ok if ok.is_simple("OK") => Ok(()),
        Value::Error(e) => Err(SentinelCause::AuthRefused(e)),
        other => Err(SentinelCause::Malformed(format!(
            "{other:?} in answer to AUTH"
        ))),
    }
}

/// `SENTINEL get-master-addr-by-name`'s reply: `[ip, port]`, or a null for a group it does not
/// monitor.
fn master_reply(reply: Value) -> Result<String, SentinelCause> {
    match reply {
        Value::Array(v) if v.len() == 2 => match (v[0].text(), v[1].text()) {
            (Some(host), Some(port)) => host_port(host, port)
                .map_err(|why| SentinelCause::Malformed(format!("{why} in the master's address"))),
            _ => Err(SentinelCause::Malformed(
                "a master address that is not two strings".into(),
            )),
        },
        Value::Null => Err(SentinelCause::UnknownGroup),
        Value::Error(e) => Err(refused(e)),
        other => Err(SentinelCause::Malformed(format!(
            "{other:?} where a master address was expected"
        ))),
    }
}

/// `host:port` for an address a Sentinel names as an IP (or hostname) and a port, with an IPv6
/// address in brackets (`[::1]:6379`), as a connect takes it.
///
/// # Errors
/// What is wrong, when the host is empty or has spaces, or the port is not 1 to 65535.
pub(crate) fn host_port(host: &str, port: &str) -> Result<String, &'static str> {
    if host.is_empty()
        || host
            .bytes()
            .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
    {
        return Err("bad host");
    }
    let port: u16 = port.parse().ok().filter(|&p| p != 0).ok_or("bad port")?;
    if host.contains(':') && !host.starts_with('[') {
        Ok(format!("[{host}]:{port}"))
    } else {
        Ok(format!("{host}:{port}"))
    }
}
