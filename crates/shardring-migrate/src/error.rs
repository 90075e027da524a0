//! Why a copy stopped.

/// Why a job stopped. A key that could not be copied is not an error: it is counted as failed in
/// the [`crate::Report`] and the job goes on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// A server could not be reached, or its connection failed.
    #[error("{server}: {source}")]
    Io {
        /// The server's name.
        server: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A server did not answer within the job's timeout.
    #[error("{server}: no answer within {timeout:?}")]
    Timeout {
        /// The server's name.
        server: String,
        /// The timeout.
        timeout: std::time::Duration,
    },
    /// A server answered what the protocol does not allow, or refused what the copy needs.
    #[error("{server}: {reason}")]
    Protocol {
        /// The server's name.
        server: String,
        /// What it said, or what was wrong.
        reason: String,
    },
}
