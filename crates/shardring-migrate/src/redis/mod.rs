//! The Redis engine: `SCAN` the source's database, `DUMP`/`RESTORE … REPLACE` (or `MIGRATE … COPY REPLACE`)
//! the keys that move in batches per target, and verify each copy against the source by a digest of
//! its value and expiry, copying again what differs (see [`copy`](mod@copy) for the reasoning).
//!
//! A target may be a Redis Cluster's master (a route that names each key's slot's master: the way
//! from a ketama pool onto a cluster): a connection finds out whether its server is a cluster node
//! (`INFO cluster`) and sends a command of many keys (the verify's digests, `UNLINK`) as one a slot
//! there, since a node refuses keys of two slots in one command. A key whose slot the target does not
//! serve (the map moved under the copy) is refused by it (`MOVED`): the key is counted failed or the
//! job stops with the node's answer, never taken for copied, and a rerun with the map read again
//! copies it.
//!
//! Files: [`conn`] (a connection and its pipelines), [`scan`] (enumeration), [`verify`] (the digest
//! script), [`copy`](mod@copy) (the passes of one batch). Replies are read by `shardring-resp`, the
//! reader the proxy frames its server replies with, into [`Value`]s.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinSet;

pub mod conn;
pub mod copy;
pub mod scan;
pub mod verify;

pub use copy::Transfer;
/// A server's reply, as [`Conn::call`](conn::Conn::call) and [`Conn::run`](conn::Conn::run) return it.
pub use shardring_resp::Value;

use conn::{Conn, Pipeline};
use copy::{route_error, Engine, WORKERS};
use scan::Scan;

use crate::{Job, MigrateError, Progress, Report, Survey};

/// The target of `key`, checked against the job's targets.
fn target_of(job: &Job, key: &[u8]) -> Result<Option<usize>, MigrateError> {
    match (job.route)(key) {
        Some(t) if t >= job.targets.len() => Err(route_error(job, t)),
        t => Ok(t),
    }
}

/// Enumerates the source's keys (`SCAN` over `job.source.db`) and counts, per target, those that
/// move and their bytes (`MEMORY USAGE key SAMPLES 0`, pipelined per batch of `job.batch` keys).
///
/// `keys` is the database's `DBSIZE` once the scan is done (a `SCAN` during a rehash may return a
/// key twice, and keeping every key of a large database in a set would cost more than it is
/// worth); moving keys are deduplicated.
///
/// # Errors
/// When the source cannot be reached, refuses the password or database, or answers out of protocol.
pub async fn survey(job: &Job) -> Result<Survey, MigrateError> {
    let mut conn = Conn::connect(&job.source, job.timeout).await?;
    let n = job.targets.len();
    let mut survey = Survey {
        keys: 0,
        moving: vec![0; n],
        moving_bytes: vec![0; n],
    };
    let mut seen = HashSet::new();
    let mut pending: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut scan = Scan::new(scan::count_for(job.batch));
    let batch = job.batch.max(1);
    loop {
        let page = scan.next(&mut conn).await?;
        let last = page.is_none();
        for key in page.unwrap_or_default() {
            if let Some(t) = target_of(job, &key)? {
                if seen.insert(key.clone()) {
                    survey.keys += 1;
                    survey.moving[t] += 1;
                    pending.push((t, key));
                }
            } else {
                survey.keys += 1;
            }
        }
        while pending.len() >= batch || (last && !pending.is_empty()) {
            let rest = pending.split_off(pending.len().min(batch));
            let chunk = std::mem::replace(&mut pending, rest);
            let mut p = Pipeline::new();
            for (_, k) in &chunk {
                p.cmd(&[&b"MEMORY"[..], b"USAGE", k, b"SAMPLES", b"0"]);
            }
            for ((t, _), r) in chunk.iter().zip(conn.run(&p).await?) {
                // Nil: gone since the scan; an error: not counted (the survey is an estimate).
                survey.moving_bytes[*t] += u64::try_from(r.integer().unwrap_or(0)).unwrap_or(0);
            }
        }
        if last {
            let mut p = Pipeline::new();
            p.cmd(&[&b"DBSIZE"[..]]);
            if let Some(size) = conn.run(&p).await?.first().and_then(|r| r.integer()) {
                survey.keys = u64::try_from(size).unwrap_or(survey.keys);
            }
            return Ok(survey);
        }
    }
}

/// Copies every key of the source that moves to its target by the default [`Transfer`]
/// (`DUMP`/`RESTORE`); see [`copy_with`].
///
/// # Errors
/// See [`copy_with`].
pub async fn copy(job: &Job) -> Result<Report, MigrateError> {
    copy_with(job, Transfer::default()).await
}

/// Copies every key of the source that moves to its target, by `transfer`, and returns the run's
/// tallies (`job.progress.report()`).
///
/// `SCAN` enumerates the source (each key returned counted `scanned`); each key the route moves is
/// counted `moving` the first time it is seen, and once `job.batch` keys wait for one target they
/// are handed, as one batch, to one of [`copy::WORKERS`] tasks (each with its own
/// connections, so the servers work on one batch while the next one travels), which moves it (see
/// [`copy`](mod@copy): verify, copy what differs, verify again), and each ends `copied`, `skipped`,
/// `gone` or `failed`. `job.rate` is acquired before each batch's copy (keys, and their `MEMORY
/// USAGE` or `DUMP` length). A rerun copies only what is missing or different on the targets.
///
/// # Errors
/// When a server cannot be reached or times out, refuses the password or database, or answers out of
/// protocol, or the source cannot reach a target (`MIGRATE`'s `IOERR`). Keys refused one by one are
/// counted `failed` and the run goes on.
pub async fn copy_with(job: &Job, transfer: Transfer) -> Result<Report, MigrateError> {
    let mut scanner = Conn::connect(&job.source, job.timeout).await?;
    let (tx, rx) = mpsc::channel::<(usize, Vec<Vec<u8>>)>(WORKERS * 2);
    let rx = Arc::new(Mutex::new(rx));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = JoinSet::new();
    for _ in 0..WORKERS {
        // Connected here, one after the other: a refused password fails the run before any copy.
        let mut engine = Engine::new(job.clone(), transfer).await?;
        let (rx, stop) = (rx.clone(), stop.clone());
        workers.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let next = rx.lock().await.recv().await;
                let Some((t, keys)) = next else { break };
                if let Err(e) = engine.move_batch(t, &keys).await {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            // The keys still parked: each is done only once compared after it settled.
            engine.recheck(true).await.inspect_err(|_| {
                stop.store(true, Ordering::Relaxed);
            })
        });
    }
    let scanned = scan_moving(job, &mut scanner, &tx, &stop).await;
    drop(tx);
    if scanned.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    let mut first = scanned.err();
    while let Some(done) = workers.join_next().await {
        let e = match done {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => MigrateError::Protocol {
                server: job.source.name.clone(),
                reason: format!("a copy worker stopped: {e}"),
            },
        };
        first.get_or_insert(e);
    }
    match first {
        Some(e) => Err(e),
        None => Ok(job.progress.report()),
    }
}

/// The scan of [`copy_with`]: counts `scanned` and `moving`, and sends each target's keys in batches
/// of `job.batch` to the workers, until the end of the scan or `stop`.
async fn scan_moving(
    job: &Job,
    conn: &mut Conn,
    tx: &mpsc::Sender<(usize, Vec<Vec<u8>>)>,
    stop: &AtomicBool,
) -> Result<(), MigrateError> {
    let p = &*job.progress;
    let batch = job.batch.max(1);
    let mut seen = HashSet::new();
    let mut pending: Vec<Vec<Vec<u8>>> = vec![Vec::new(); job.targets.len()];
    let mut scan = Scan::new(scan::count_for(job.batch));
    while let Some(page) = scan.next(conn).await? {
        Progress::add(&p.scanned, page.len() as u64);
        for key in page {
            let Some(t) = target_of(job, &key)? else {
                continue;
            };
            if !seen.insert(key.clone()) {
                continue;
            }
            Progress::add(&p.moving, 1);
            pending[t].push(key);
            if pending[t].len() >= batch {
                let keys = std::mem::take(&mut pending[t]);
                if stop.load(Ordering::Relaxed) || tx.send((t, keys)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
    for (t, keys) in pending.into_iter().enumerate() {
        if !keys.is_empty() && (stop.load(Ordering::Relaxed) || tx.send((t, keys)).await.is_err()) {
            return Ok(());
        }
    }
    Ok(())
}

/// After the cut-over: `SCAN`s the source and `UNLINK`s (one command per batch of `job.batch`) every
/// key the route says moves.
///
/// Deletes `keys` from the server at `ep` (one `UNLINK`); how many it held. For `shardring split`:
/// a merged-back key's copies (and their fills' reservations).
///
/// # Errors
/// When the server cannot be reached or times out, refuses the password or database, or refuses the
/// `UNLINK`.
pub async fn delete_keys(
    ep: &crate::Endpoint,
    keys: &[Vec<u8>],
    timeout: std::time::Duration,
) -> Result<usize, MigrateError> {
    if keys.is_empty() {
        return Ok(0);
    }
    let mut conn = Conn::connect(ep, timeout).await?;
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let held = conn.unlink(&keys).await?;
    Ok(usize::try_from(held).unwrap_or(usize::MAX))
}

/// Tallies: `scanned` every key seen, `moving` each moving key once, `copied` the keys deleted
/// (`UNLINK`'s count), `gone` the moving keys already missing when their `UNLINK` ran.
///
/// # Errors
/// When the source cannot be reached or times out, refuses the password or database, or refuses the
/// `UNLINK`.
pub async fn delete_moved(job: &Job) -> Result<Report, MigrateError> {
    let mut conn = Conn::connect(&job.source, job.timeout).await?;
    let p = &*job.progress;
    let batch = job.batch.max(1);
    let mut seen = HashSet::new();
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let mut scan = Scan::new(scan::count_for(job.batch));
    loop {
        let page = scan.next(&mut conn).await?;
        let last = page.is_none();
        let page = page.unwrap_or_default();
        Progress::add(&p.scanned, page.len() as u64);
        for key in page {
            if target_of(job, &key)?.is_some() && seen.insert(key.clone()) {
                Progress::add(&p.moving, 1);
                pending.push(key);
            }
        }
        while pending.len() >= batch || (last && !pending.is_empty()) {
            let rest = pending.split_off(pending.len().min(batch));
            let chunk = std::mem::replace(&mut pending, rest);
            let keys: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            let n = conn.unlink(&keys).await?.min(chunk.len() as u64);
            Progress::add(&p.copied, n);
            Progress::add(&p.gone, chunk.len() as u64 - n);
        }
        if last {
            return Ok(p.report());
        }
    }
}
