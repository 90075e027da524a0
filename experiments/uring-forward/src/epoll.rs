//! `--io epoll`: tokio's current-thread runtime (mio, epoll), as the real proxy runs on a small machine.
//!
//! Tasks are spawned with `spawn_local` on a `LocalRuntime` (tokio's current-thread scheduler without the
//! `Send` bound; `--cfg tokio_unstable`, set in this crate's `.cargo/config.toml`), so the shared state is
//! the same `Rc` as under monoio and the scheduling is the current-thread scheduler's, not a `LocalSet`'s.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use crate::forward::{serve_client, Links};
use crate::io::{ReadHalf, Runtime, WriteHalf};

/// The tokio runtime, as seen by the data path.
#[derive(Debug)]
pub(crate) struct Tokio;

impl ReadHalf for OwnedReadHalf {
    async fn read(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        // `read_buf` fills the spare capacity after `buf.len()`, as the trait asks.
        let r = self.read_buf(&mut buf).await;
        (r, buf)
    }
}

impl WriteHalf for OwnedWriteHalf {
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let r = AsyncWriteExt::write_all(self, &buf).await;
        (r, buf)
    }

    async fn shutdown(&mut self) {
        let _ = AsyncWriteExt::shutdown(self).await;
    }
}

impl Runtime for Tokio {
    type Reader = OwnedReadHalf;
    type Writer = OwnedWriteHalf;

    fn spawn(task: impl Future<Output = ()> + 'static) {
        drop(tokio::task::spawn_local(task));
    }

    async fn connect(addr: SocketAddr) -> io::Result<(OwnedReadHalf, OwnedWriteHalf)> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(s.into_split())
    }

    async fn yield_now() {
        // tokio's own: the task runs again after the I/O driver has been polled, as in the real proxy.
        tokio::task::yield_now().await;
    }
}

/// Serves `listen`, forwarding to `backends`, until the process is killed.
///
/// # Errors
/// Building the runtime or binding the listener.
pub(crate) fn run(listen: SocketAddr, backends: Vec<SocketAddr>) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build_local(tokio::runtime::LocalOptions::default())?;
    rt.block_on(async move {
        let listener = TcpListener::bind(listen).await?;
        let links = Links::start::<Tokio>(&backends);
        eprintln!("uring-forward: --io epoll (tokio current-thread) on {listen}");
        loop {
            let (s, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: this connection only.
                    eprintln!("accept: {e}");
                    continue;
                }
            };
            let _ = s.set_nodelay(true);
            let (rd, wr) = s.into_split();
            Tokio::spawn(serve_client::<Tokio>(rd, wr, links.clone()));
        }
    })
}
