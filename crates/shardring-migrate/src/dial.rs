//! Opening a connection to a server, as both engines do: TCP (Nagle off: batches are written whole)
//! or a unix socket when the address is a path, within the job's timeout.

use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

use crate::{Endpoint, MigrateError};

/// A connected socket: tokio-util's `Either` reads and writes whichever it holds.
pub(crate) type Stream = Either<TcpStream, UnixStream>;

/// Connects to `ep` within `timeout`.
///
/// # Errors
/// [`MigrateError::Timeout`], or [`MigrateError::Io`] with why the server could not be reached.
pub(crate) async fn dial(ep: &Endpoint, timeout: Duration) -> Result<Stream, MigrateError> {
    let connecting = async {
        if ep.addr.starts_with('/') {
            UnixStream::connect(&ep.addr).await.map(Either::Right)
        } else {
            let s = TcpStream::connect(&ep.addr).await?;
            s.set_nodelay(true)?;
            Ok(Either::Left(s))
        }
    };
    tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| MigrateError::Timeout {
            server: ep.name.clone(),
            timeout,
        })?
        .map_err(|source| MigrateError::Io {
            server: ep.name.clone(),
            source,
        })
}
