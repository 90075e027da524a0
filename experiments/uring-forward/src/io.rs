//! The seam between the data path and an I/O runtime: what [`crate::forward`] needs from one, and no more.
//!
//! The API is the completion style (buffers passed by value and handed back), because that is what an
//! io_uring runtime can offer safely: the kernel writes into a buffer after the call returns, so the
//! buffer must be owned by the operation. The readiness (epoll) runtime implements it trivially, so one
//! copy of the forwarding loop runs on both, and a difference in the figures is the runtime's, not the
//! code's.
//!
//! Futures here are not `Send`: both runtimes run every task on the proxy's one thread (tokio's
//! current-thread scheduler, monoio's thread-per-core one), so state shared by tasks is `Rc`/`Cell`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

/// The reading half of a connection.
pub(crate) trait ReadHalf: 'static {
    /// Reads what is there (at least one byte, or 0 at end of stream) into the spare capacity of `buf`,
    /// after its contents, and gives `buf` back. The caller makes sure there is spare capacity: a read into
    /// none returns 0 and would look like the end of the stream.
    fn read(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<usize>, Vec<u8>)>;
}

/// The writing half of a connection.
pub(crate) trait WriteHalf: 'static {
    /// Writes all of `buf` and gives it back.
    fn write_all(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<()>, Vec<u8>)>;
    /// Shuts the sending side down, so the peer sees the end of the stream.
    fn shutdown(&mut self) -> impl Future<Output = ()>;
}

/// An I/O runtime the data path can run on.
pub(crate) trait Runtime: 'static {
    /// The reading half of its TCP connections.
    type Reader: ReadHalf;
    /// The writing half of its TCP connections.
    type Writer: WriteHalf;
    /// Runs `task` on this thread, concurrently with the caller.
    fn spawn(task: impl Future<Output = ()> + 'static);
    /// Connects to `addr` (with `TCP_NODELAY`: requests are written in batches already).
    fn connect(addr: SocketAddr) -> impl Future<Output = io::Result<(Self::Reader, Self::Writer)>>;
    /// Lets every other ready task run once before the caller goes on: the server connection's writer
    /// waits so that the requests of all clients woken by the same events go out in one write.
    fn yield_now() -> impl Future<Output = ()>;
}
