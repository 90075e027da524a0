//! The memcache engine (being written).

use crate::{Job, MigrateError, Report, Survey};

/// Enumerates the source's keys and counts, per target, those that move and their bytes.
///
/// # Errors
/// When a server cannot be reached or answers out of protocol.
pub async fn survey(job: &Job) -> Result<Survey, MigrateError> {
    let _ = job;
    Err(MigrateError::Protocol {
        server: job.source.name.clone(),
        reason: "not written yet".into(),
    })
}

/// Copies every key of the source that moves to its target.
///
/// # Errors
/// When a server cannot be reached or answers out of protocol.
pub async fn copy(job: &Job) -> Result<Report, MigrateError> {
    Err(MigrateError::Protocol {
        server: job.source.name.clone(),
        reason: "not written yet".into(),
    })
}

/// After the cut-over: deletes from the source every key whose owner changed.
///
/// # Errors
/// When a server cannot be reached or answers out of protocol.
pub async fn delete_moved(job: &Job) -> Result<Report, MigrateError> {
    Err(MigrateError::Protocol {
        server: job.source.name.clone(),
        reason: "not written yet".into(),
    })
}
