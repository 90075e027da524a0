//! `--io uring`: monoio on io_uring, falling back to monoio's epoll driver where io_uring is unavailable
//! (an old kernel, `kernel.io_uring_disabled`, a seccomp filter); `--io monoio-epoll` forces that fallback,
//! which separates what the runtime changes from what io_uring changes. `--io uring-tuned` sets the ring
//! up the way io_uring's authors advise for one thread that owns its ring (`SINGLE_ISSUER`,
//! `COOP_TASKRUN`, `DEFER_TASKRUN`: completions are run when the thread waits, not by interrupting it),
//! so that io_uring is judged at its best and not only at monoio's defaults.
//!
//! Under io_uring every read and write is a submission; monoio runs all ready tasks, then submits what
//! they queued and waits for completions in one `io_uring_enter`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use monoio::buf::IoBufMut;
use monoio::io::{
    AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, OwnedReadHalf, OwnedWriteHalf, Splitable,
};
use monoio::net::{TcpListener, TcpStream};

use crate::forward::{serve_client, Links};
use crate::io::{ReadHalf, Runtime, WriteHalf};

/// The monoio runtime (either driver), as seen by the data path.
#[derive(Debug)]
pub(crate) struct Monoio;

impl ReadHalf for OwnedReadHalf<TcpStream> {
    async fn read(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        // Read into the spare capacity only: a `Vec` as an `IoBufMut` would be written from its start.
        let (len, cap) = (buf.len(), buf.capacity());
        let (r, slice) = AsyncReadRent::read(self, buf.slice_mut(len..cap)).await;
        (r, slice.into_inner())
    }
}

impl WriteHalf for OwnedWriteHalf<TcpStream> {
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let (r, buf) = AsyncWriteRentExt::write_all(self, buf).await;
        (r.map(drop), buf)
    }

    async fn shutdown(&mut self) {
        let _ = AsyncWriteRent::shutdown(self).await;
    }
}

impl Runtime for Monoio {
    type Reader = OwnedReadHalf<TcpStream>;
    type Writer = OwnedWriteHalf<TcpStream>;

    fn spawn(task: impl Future<Output = ()> + 'static) {
        drop(monoio::spawn(task));
    }

    async fn connect(addr: SocketAddr) -> io::Result<(Self::Reader, Self::Writer)> {
        let s = TcpStream::connect_addr(addr).await?;
        s.set_nodelay(true)?;
        Ok(s.into_split())
    }

    fn yield_now() -> impl Future<Output = ()> {
        YieldNow(false)
    }
}

/// Pending once, waking itself: monoio queues the task behind every task already ready, and runs them
/// all before it submits and waits.
#[derive(Debug)]
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// Which monoio driver to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// io_uring if the kernel allows it, else epoll.
    UringOrFallback,
    /// io_uring set up for a single issuer with deferred task work, else epoll.
    UringTunedOrFallback,
    /// epoll (monoio's "legacy" driver), always.
    Epoll,
}

/// Serves `listen`, forwarding to `backends`, until the process is killed.
///
/// # Errors
/// Building the runtime or binding the listener.
pub(crate) fn run(listen: SocketAddr, backends: Vec<SocketAddr>, driver: Driver) -> io::Result<()> {
    let serve = move |name: &'static str| async move {
        let listener = TcpListener::bind(listen)?;
        let links = Links::start::<Monoio>(&backends);
        eprintln!("uring-forward: monoio on its {name} driver, on {listen}");
        loop {
            let (s, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("accept: {e}");
                    continue;
                }
            };
            let _ = s.set_nodelay(true);
            let (rd, wr) = s.into_split();
            Monoio::spawn(serve_client::<Monoio>(rd, wr, links.clone()));
        }
    };
    let uring = driver != Driver::Epoll && monoio::utils::detect_uring();
    if uring && driver == Driver::UringTunedOrFallback {
        let mut setup = io_uring::IoUring::builder();
        setup
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_defer_taskrun();
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .uring_builder(setup)
            .build()?
            .block_on(serve("io_uring (single issuer, deferred task work)"))
    } else if uring {
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .build()?
            .block_on(serve("io_uring"))
    } else {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()?
            .block_on(serve("legacy (epoll)"))
    }
}
