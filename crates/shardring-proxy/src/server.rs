//! The accept loop of one pool.
//!
//! [`run`] takes its listener and its shutdown trigger as arguments (tests bind `127.0.0.1:0` and stop it
//! when they like). A semaphore caps clients at `client_connections`. Each client is one task
//! ([`crate::session`]); an error on one client connection ends that connection only.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::Pool;
use crate::config::DEFAULT_CLIENT_CONNECTIONS;
use crate::drain::Drain;
use crate::net::Listener;
use crate::protocol::Protocol;
use crate::session::serve_client;

/// Serves `pool`'s clients from `listener` until `shutdown` completes, then stops accepting, lets every
/// client's in-flight requests finish, and returns once every client task has ended.
pub(crate) async fn run<P: Protocol>(
    listener: Listener,
    pool: Arc<Pool<P>>,
    shutdown: impl Future<Output = ()>,
) {
    let drain = Arc::new(Drain::default());
    let tracker = TaskTracker::new();
    let (cap, keepalive) = {
        let c = pool.current.load();
        let cap = match c.config.client_connections {
            0 => DEFAULT_CLIENT_CONNECTIONS,
            n => n,
        };
        (cap, c.config.tcpkeepalive)
    };
    let permits = Arc::new(Semaphore::new(cap as usize));
    let accepting = CancellationToken::new();
    let accept = async {
        loop {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                return;
            };
            let Some(stream) = listener.accept(keepalive, &accepting).await else {
                return;
            };
            let pool = Arc::clone(&pool);
            let drain = Arc::clone(&drain);
            tracker.spawn(async move {
                serve_client(stream, pool, drain).await;
                drop(permit);
            });
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
