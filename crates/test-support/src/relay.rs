//! A TCP relay from a free 127.0.0.1 port to a target (etcd, for the tests that cut one participant's
//! path to it while the others, and the test itself, still reach it), with the two faults a network
//! has: a **cut** (every connection dropped, new ones refused: what a crashed peer or a firewall's
//! reject looks like) and a **blackhole** (nothing passes any more, but nothing is closed either: a
//! silent partition, where packets are dropped and both ends learn of it only by their own
//! timeouts). Bytes held back by a blackhole stay in the sockets' buffers and pass once it is
//! [`restore`](Relay::restore)d, as retransmitted segments do after a partition heals.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What passes through the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Everything.
    Open,
    /// Nothing, and connections are closed (new ones at once).
    Cut,
    /// Nothing, silently: connections stay open, new ones are accepted and left hanging.
    Blackhole,
}

/// A TCP relay to one target. Must be created inside a tokio runtime, whose tasks carry it.
#[derive(Debug)]
pub struct Relay {
    /// The relay's own port.
    pub port: u16,
    /// What passes now.
    mode: watch::Sender<Mode>,
    /// The tasks copying live connections, aborted by a cut.
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// The accept loop.
    accept: JoinHandle<()>,
}

impl Relay {
    /// Starts relaying to `target` (`127.0.0.1:PORT`). Must run inside a tokio runtime.
    pub async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a relay port");
        let port = listener.local_addr().expect("relay address").port();
        let (mode, _) = watch::channel(Mode::Open);
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (mode, conns) = (mode.clone(), Arc::clone(&conns));
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let mut gate = mode.subscribe();
                    if *gate.borrow() == Mode::Cut {
                        continue; // dropped: the client sees the connection closed
                    }
                    let target = target.clone();
                    let task = tokio::spawn(async move {
                        if !passable(&mut gate).await {
                            return;
                        }
                        let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                            return;
                        };
                        let (in_read, in_write) = inbound.into_split();
                        let (out_read, out_write) = outbound.into_split();
                        tokio::select! {
                            () = pump(in_read, out_write, gate.clone()) => {}
                            () = pump(out_read, in_write, gate) => {}
                        }
                    });
                    if let Ok(mut c) = conns.lock() {
                        c.retain(|t| !t.is_finished());
                        c.push(task);
                    }
                }
            })
        };
        Relay {
            port,
            mode,
            conns,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT` of the relay.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Drops every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
        if let Ok(mut c) = self.conns.lock() {
            for task in c.drain(..) {
                task.abort();
            }
        }
    }

    /// Stops passing anything, silently: no connection is closed, new ones hang.
    pub fn blackhole(&self) {
        self.mode.send_replace(Mode::Blackhole);
    }

    /// Passes connections through again (after a blackhole, what was held back passes too).
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Open);
    }
}

/// Waits while the relay holds traffic back; `false` once it is cut.
async fn passable(gate: &mut watch::Receiver<Mode>) -> bool {
    loop {
        match *gate.borrow_and_update() {
            Mode::Open => return true,
            Mode::Cut => return false,
            Mode::Blackhole => {}
        }
        if gate.changed().await.is_err() {
            return false;
        }
    }
}

/// Copies `from` to `to` while the gate lets bytes pass, until either end closes or the relay is cut.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut gate: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !passable(&mut gate).await {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Read before the blackhole began, but it is held back like everything after.
        if !passable(&mut gate).await || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
