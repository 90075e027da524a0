//! A subscriber's connection to one server (Redis pub/sub): not a request/reply pipeline but a
//! stream. What the client sends (`SUBSCRIBE`, `UNSUBSCRIBE`, …) is written as it comes, and every
//! frame the server sends (confirmations, messages) goes to the client's session as it arrives, in
//! the server's order, so the messages of one channel (which lives on one server) keep their order.
//!
//! The session's queue of pushes is bounded: a client that reads slower than its channels publish
//! stops this task reading, the server's output buffer for the connection grows, and the server
//! applies its own `client-output-buffer-limit pubsub` and closes it, as it would a slow subscriber
//! of its own. A connection that closes or fails ends the client's subscriptions there: the session
//! is told ([`Push::Lost`]) and closes the client, as a server would.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::connections::{Backend, OwnSlot};
use super::stream::ServerStream;
use crate::error::BackendError;
use crate::protocol::{Protocol, ReplyScanner};

/// How many frames from a client's subscription connections wait for it before they stop reading.
pub(crate) const PUSH_QUEUE: usize = 1024;

/// What a subscription connection tells its session.
#[derive(Debug)]
pub(crate) enum Push {
    /// A frame from server `server` (its index in the pool, as the plan numbered it).
    Frame(usize, Bytes),
    /// A connection closed or failed (why, with the server's address): the client's subscriptions
    /// there are gone.
    Lost(String),
}

/// A subscriber's connection to one server; closed when dropped.
#[derive(Debug)]
pub(crate) struct SubscriptionConnection {
    /// What the client sends to the server.
    out: mpsc::UnboundedSender<Bytes>,
    /// The connection's task.
    task: AbortHandle,
    /// Its place in the server's bound of connections of single clients.
    _slot: OwnSlot,
}

impl SubscriptionConnection {
    /// Sends `frame` to the server.
    pub(crate) fn send(&self, frame: Bytes) {
        // A closed task has told the session already (Push::Lost).
        let _ = self.out.send(frame);
    }
}

impl Drop for SubscriptionConnection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<P: Protocol> Backend<P> {
    /// A subscriber's connection to this server, greeted for `lane`, its frames going to `pushes`
    /// tagged `server`; on the caller's runtime (a session's worker).
    ///
    /// # Errors
    /// [`BackendError::OwnConnectionsExhausted`] when the server has its bound of connections of
    /// single clients open.
    pub(crate) fn subscription(
        self: &Arc<Self>,
        server: usize,
        lane: usize,
        kind: P::ReplyKind,
        pushes: mpsc::Sender<Push>,
    ) -> Result<SubscriptionConnection, BackendError> {
        let slot = self.own_slot()?;
        let (out, queued) = mpsc::unbounded_channel();
        let backend = Arc::clone(self);
        let task = tokio::spawn(async move {
            let why = match backend.greeted(lane).await {
                Ok(stream) => {
                    backend.stats.server_connections.inc();
                    let why = match stream {
                        ServerStream::Tcp(mut s) => {
                            let (rd, wr) = s.split();
                            stream_frames::<P>(rd, wr, queued, &pushes, server, kind).await
                        }
                        ServerStream::Unix(mut s) => {
                            let (rd, wr) = s.split();
                            stream_frames::<P>(rd, wr, queued, &pushes, server, kind).await
                        }
                        ServerStream::Tls(s) => {
                            let (rd, wr) = tokio::io::split(*s);
                            stream_frames::<P>(rd, wr, queued, &pushes, server, kind).await
                        }
                    };
                    backend.stats.server_connections.dec();
                    why
                }
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = why {
                let _ = pushes
                    .send(Push::Lost(format!("{}: {why}", backend.addr())))
                    .await;
            }
        });
        Ok(SubscriptionConnection {
            out,
            task: task.abort_handle(),
            _slot: slot,
        })
    }
}

/// Writes what the client sends and hands on every frame the server sends, until the session drops
/// its end (`None`) or the connection fails (why).
async fn stream_frames<P: Protocol>(
    mut rd: impl AsyncRead + Unpin,
    mut wr: impl AsyncWrite + Unpin,
    mut queued: mpsc::UnboundedReceiver<Bytes>,
    pushes: &mpsc::Sender<Push>,
    server: usize,
    kind: P::ReplyKind,
) -> Option<String> {
    let mut scanner = P::ReplyScanner::default();
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        tokio::select! {
            frame = queued.recv() => match frame {
                Some(frame) => {
                    if let Err(e) = wr.write_all(&frame).await {
                        return Some(e.to_string());
                    }
                }
                None => return None,
            },
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) => return Some("closed by server".into()),
                Ok(_) => loop {
                    match scanner.frame(&buf, kind, usize::MAX) {
                        Ok(Some(len)) => {
                            scanner.reset();
                            let frame = buf.split_to(len).freeze();
                            if pushes.send(Push::Frame(server, frame)).await.is_err() {
                                return None;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => return Some(e.to_string()),
                    }
                },
                Err(e) => return Some(e.to_string()),
            },
        }
    }
}
