//! The shutdown trigger: SIGINT or SIGTERM.
//!
//! On either, the proxy stops accepting, lets every client's in-flight requests finish and their replies
//! go out, then exits 0. A second signal is left to the caller (the CLI exits at once on it).

use std::io;

use tokio::signal::unix::{signal, SignalKind};

/// Completes on the first SIGINT or SIGTERM.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub async fn signal_received() -> io::Result<&'static str> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    })
}
