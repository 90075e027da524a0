//! The accept loop of one pool on one worker.
//!
//! [`run`] takes its listener and its shutdown trigger as arguments (tests bind `127.0.0.1:0` and stop it
//! when they like). Every worker runs one for each pool, on the same listening socket
//! ([`crate::workers`]), and serves the clients it accepts on its own thread. The pool's
//! [`Admission`], shared by its workers, caps clients at `client_connections` proxy-wide and spreads
//! them evenly over the workers. Each client is one task
//! ([`crate::session`]); an error on one client connection ends that connection only.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::Admission;
use crate::drain::Drain;
use crate::net::{ClientStream, Listener};
use crate::pool::current::Pool;
use crate::protocol::Protocol;
use crate::session::serve_client;
use crate::tls::acceptor;

/// Serves `pool`'s clients from `listener` on worker `worker` (the thread this runs on), taking a
/// client when `admission` (shared by the pool's workers) says so, until `shutdown` completes; then
/// stops accepting, lets every client's in-flight requests finish, and returns once every client task
/// has ended.
pub(crate) async fn run<P: Protocol>(
    listener: Listener,
    pool: Arc<Pool<P>>,
    worker: usize,
    admission: Arc<Admission>,
    shutdown: impl Future<Output = ()>,
) {
    let drain = Arc::new(Drain::default());
    let tracker = TaskTracker::new();
    let keepalive = pool.current.load().config.tcpkeepalive;
    let accepting = CancellationToken::new();
    let accept = async {
        loop {
            let Some(permit) = admission.turn(worker).await else {
                return;
            };
            let Some(stream) = listener
                .accept(keepalive, &accepting, &pool.shared.stats)
                .await
            else {
                return;
            };
            let place = admission.admit(worker, permit);
            if let Some(n) = pool.shared.accepted.get(worker) {
                n.inc();
            }
            let tls = match &stream {
                ClientStream::Tcp(_) => pool.current.load().tls.acceptor.clone(),
                _ => None,
            };
            let (pool, drain) = (Arc::clone(&pool), Arc::clone(&drain));
            match (tls, stream) {
                // A future of its own: a plain client's task does not carry the handshake's state.
                (Some(tls), ClientStream::Tcp(tcp)) => {
                    tracker.spawn(async move {
                        match acceptor::accept(&tls, tcp).await {
                            Ok(s) => {
                                let stream = ClientStream::Tls(Box::new(s));
                                serve_client(stream, pool, worker, drain, place).await;
                            }
                            Err(e) => refused(&pool, &e),
                        }
                    });
                }
                (_, stream) => {
                    tracker.spawn(serve_client(stream, pool, worker, drain, place));
                }
            }
        }
    };
    tokio::select! {
        () = accept => {}
        () = shutdown => {}
    }
    accepting.cancel();
    drain.start();
    tracker.close();
    tracker.wait().await;
}

/// A client whose TLS handshake failed: counted, logged with its cause, and closed before any of its
/// bytes were read as a command. Logged at info: a port scan or a plaintext client is the client's
/// problem, and the count shows a trend.
fn refused<P: Protocol>(pool: &Pool<P>, e: &std::io::Error) {
    pool.shared.stats.client_tls_handshake_errors.inc();
    tracing::info!(
        pool = %pool.shared.stats.name,
        cause = %crate::tls::handshake_cause(e),
        "client TLS handshake failed; connection closed"
    );
}
