//! Asking one cluster node for the slot map: a connection opened as the pool's server connections
//! are (TLS when they use it, `AUTH` with the pool's password), `CLUSTER SHARDS`, or `CLUSTER SLOTS`
//! when the node is older than Redis 7, and the reply read whole within [`LIMITS`].

use std::time::Duration;

use bytes::BytesMut;
use shardring_resp::{ReplyLimits, ReplyReader, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::map::{self, ClusterMap, Ports};
use crate::protocol::redis::Request;
use crate::sentinel::{Connect, SentinelStream};

/// The reader's limits for a slot map: a thousand-node cluster's `CLUSTER SHARDS` is some hundreds
/// of KiB; nothing a node sends should come near this.
const LIMITS: ReplyLimits = ReplyLimits {
    max_bulk_len: 64 << 10,
    max_depth: 8,
    max_reply_len: 16 << 20,
    max_line_len: 64 << 10,
};

/// How a node is reached and authenticated.
#[derive(Clone)]
pub(crate) struct NodeAccess {
    /// Opens a connection (TCP, or TLS as the pool's servers).
    pub(crate) connect: Connect,
    /// The nodes' ports the pool's connections use (TLS ones with `--server-tls`).
    pub(crate) ports: Ports,
    /// `AUTH [user] password`, when the pool has `redis_auth`.
    pub(crate) auth: Option<(Option<String>, String)>,
    /// The bound on one whole ask: connect, `AUTH`, the map.
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for NodeAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAccess")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl NodeAccess {
    /// The slot map as the node at `addr` knows it.
    ///
    /// # Errors
    /// Why the node gave none: unreachable, timed out, refused the password, not a cluster node, or
    /// a reply that is not a map.
    pub(crate) async fn slot_map(&self, addr: &str) -> Result<ClusterMap, String> {
        match tokio::time::timeout(self.timeout, self.ask(addr)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
        }
    }

    async fn ask(&self, addr: &str) -> Result<ClusterMap, String> {
        let mut stream = (self.connect)(addr.to_owned())
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let mut buf = BytesMut::new();
        if let Some((user, password)) = &self.auth {
            let mut args = vec!["AUTH"];
            args.extend(user.as_deref());
            args.push(password);
            let reply = exchange(&mut stream, &mut buf, &args).await?;
            if let Some(e) = reply.error() {
                return Err(format!("AUTH refused: {e}"));
            }
        }
        let reply = exchange(&mut stream, &mut buf, &["CLUSTER", "SHARDS"]).await?;
        match reply.error() {
            None => map::from_shards(&reply, addr, self.ports),
            // Older than Redis 7 (`unknown subcommand`): the slots reply has the same masters.
            Some(e) if e.contains("subcommand") || e.contains("unknown") => {
                let reply = exchange(&mut stream, &mut buf, &["CLUSTER", "SLOTS"]).await?;
                match reply.error() {
                    // Before Redis 7 a node has one port for clients: the one it lists.
                    None => map::from_slots(&reply, addr),
                    Some(e) => Err(e.to_owned()),
                }
            }
            Some(e) => Err(e.to_owned()),
        }
    }
}

/// Sends one command and reads its reply.
async fn exchange(
    stream: &mut SentinelStream,
    buf: &mut BytesMut,
    args: &[&str],
) -> Result<Value, String> {
    stream
        .write_all(&Request::from_args(args).frame)
        .await
        .map_err(|e| format!("lost: {e}"))?;
    let mut reader = ReplyReader::new(LIMITS);
    loop {
        match reader.read(buf) {
            Ok(Some((value, len))) => {
                let _ = buf.split_to(len);
                return Ok(value);
            }
            Ok(None) => {}
            Err(e) => return Err(format!("malformed reply: {}", e.reason)),
        }
        let mut chunk = [0u8; 16 << 10];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("lost: {e}"))?;
        if n == 0 {
            return Err("closed by the node".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
