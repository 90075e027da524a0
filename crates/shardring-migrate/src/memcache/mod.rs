//! The memcache engine (memcached 1.6, meta protocol).
//!
//! Keys are enumerated with `lru_crawler metadump hash` (`all` on servers before 1.6.9: [`Walk`]),
//! streamed: each batch of `job.batch` moving keys is copied while the rest of the dump waits. A
//! dump under live load can still miss an item (an LRU walk misses items moved between LRUs as it
//! passes; a hash walk, items moved while the table grows), so the dump is repeated until a pass
//! finds no new moving key (at most [`MAX_PASSES`] passes; the keys already handled are remembered).
//!
//! A batch is read from the source with `mg`, added to its targets with `ms … ME` (never over a value
//! a dual write put there), then the source's CAS is read again and what changed meanwhile is set
//! again by CAS: see [`Copier`] for why each step is safe while the proxies dual-write.
//!
//! The copy keeps three kinds of connection, each for the whole job: one for the dump, one for the
//! source's reads, one per target (opened on its first key). Every step is one pipelined round trip
//! per server and batch, each within `job.timeout`.

use std::collections::HashSet;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::{Job, MigrateError, Progress, Report, Survey};

mod conn;
mod copy;
pub mod metadump;

pub use copy::{Copier, ReadBatch, WrittenBatch};

use conn::Conn;
use metadump::{Dump, Walk};

/// The most dumps one job reads; a source still showing new moving keys after that (a workload
/// writing new keys that move faster than a dump reads them) is logged and left to the dual writes.
pub const MAX_PASSES: usize = 10;

/// Deletes `keys` from the server at `ep` in one pipelined round trip (`md`); how many it held. For
/// `shardring split`: a merged-back key's copies.
///
/// # Errors
/// When the server cannot be reached, times out, or answers a delete with an error.
pub async fn delete_keys(
    ep: &crate::Endpoint,
    keys: &[Vec<u8>],
    timeout: std::time::Duration,
) -> Result<usize, MigrateError> {
    let mut conn = Conn::connect(ep, timeout).await?;
    let mut req = Vec::new();
    for key in keys {
        copy::meta(&mut req, b"md", key, b"");
    }
    let replies = conn.exchange(&mut req, keys.len()).await?;
    let mut held = 0;
    for r in &replies {
        match r.status() {
            b"HD" => held += 1,
            b"NF" => {}
            _ => {
                return Err(MigrateError::Protocol {
                    server: conn.name().to_owned(),
                    reason: format!("md answered {}", r.text()),
                })
            }
        }
    }
    Ok(held)
}

/// Enumerates the source's keys (one dump) and counts, per target, those that move and their bytes
/// (memcached's item size: header, key and value).
///
/// `keys` counts the dump's lines; under live load a pass can miss an item or list one twice, so the
/// figures are an estimate. The job's [`Progress`] is left alone.
///
/// # Errors
/// When the source cannot be reached, times out, or refuses the dump (its LRU crawler disabled, or
/// busy for a minute).
pub async fn survey(job: &Job) -> Result<Survey, MigrateError> {
    let mut conn = Conn::connect(&job.source, job.timeout).await?;
    let mut survey = Survey {
        keys: 0,
        moving: vec![0; job.targets.len()],
        moving_bytes: vec![0; job.targets.len()],
    };
    let mut dump = Dump::start(&mut conn, &mut Walk::Hash).await?;
    while let Some(entry) = dump.next(&mut conn).await? {
        survey.keys += 1;
        if let Some(t) = (job.route)(&entry.key) {
            if let (Some(n), Some(b)) = (survey.moving.get_mut(t), survey.moving_bytes.get_mut(t)) {
                *n += 1;
                *b += entry.size;
            }
        }
    }
    Ok(survey)
}

/// Copies every key of the source that moves to its target, and returns the job's tallies
/// (`job.progress.report()`, which other jobs sharing it add to).
///
/// The tallies, as this job adds to them: `scanned` every dump line of every pass; `moving` each
/// moving key once; then each moving key in exactly one of `copied` (the target holds the source's
/// value, or a newer one a dual write put over our copy), `skipped` (the target had the key before
/// our add: a dual write's or a previous run's), `gone` (deleted or expired on the source before the
/// copy was checked; a copy already made was deleted again by CAS) and `failed` (refused by the
/// target, e.g. too large, or changing through 20 copies; logged). `recopied` counts the extra CAS
/// copies of keys that changed after their read; `bytes` every value byte written to a target.
///
/// TTLs: an item without expiry is copied without; one with time left keeps it to the second (as
/// a unix time, from the source's own clock, when over memcached's 30 days of relative exptimes); one
/// in its last second is copied
/// with 1 s. Flags are kept. Source reads do not bump the items in the source's LRU (`mg … u`).
///
/// A rerun resumes: what an earlier run copied is skipped.
///
/// # Errors
/// When a server cannot be reached, fails, times out (`job.timeout` per round trip) or answers out of
/// protocol; the keys copied so far stay copied.
pub async fn copy(job: &Job) -> Result<Report, MigrateError> {
    let mut moving = Feed::start(job).await?;
    let mut copier = Copier::connect(job).await?;
    while let Some(batch) = moving.next().await? {
        let keys = batch.into_iter().map(|(key, t, _)| (key, t)).collect();
        copier.copy_keys(keys).await?;
    }
    copier.finish().await?;
    Ok(job.progress.report())
}

/// After the cut-over: deletes from the source every key the route says moves (`md <key>`,
/// pipelined in batches, within the job's rate limit on keys; no byte budget is taken), dumping again
/// until a pass finds no new moving key, and returns the job's tallies.
///
/// The tallies, as this job adds to them: `scanned` every dump line; `moving` each moving key once;
/// `copied` the keys deleted; `bytes` their item sizes (memcached's, from the dump); `gone` the keys
/// already absent when deleted (`NF`: expired, evicted or deleted meanwhile); `failed` any other reply
/// (logged).
///
/// # Errors
/// When the source cannot be reached, fails, times out or answers out of protocol.
pub async fn delete_moved(job: &Job) -> Result<Report, MigrateError> {
    let mut moving = Feed::start(job).await?;
    let mut conn = Conn::connect(&job.source, job.timeout).await?;
    let p = &job.progress;
    let mut req = Vec::new();
    while let Some(batch) = moving.next().await? {
        if let Some(rate) = &job.rate {
            rate.acquire(batch.len() as u64, 0).await;
        }
        req.clear();
        for (key, _, _) in &batch {
            copy::meta(&mut req, b"md", key, b"");
        }
        let replies = conn.exchange(&mut req, batch.len()).await?;
        for ((key, _, size), reply) in batch.into_iter().zip(replies) {
            match reply.status() {
                b"HD" => {
                    Progress::add(&p.copied, 1);
                    Progress::add(&p.bytes, size);
                }
                b"NF" => Progress::add(&p.gone, 1),
                _ => {
                    tracing::warn!(
                        server = job.source.name,
                        key = %String::from_utf8_lossy(&key),
                        reply = reply.text(),
                        "moved key not deleted"
                    );
                    Progress::add(&p.failed, 1);
                }
            }
        }
    }
    Ok(job.progress.report())
}

/// A moving key, its target's index and its item size.
type Batch = Vec<(Vec<u8>, usize, u64)>;

/// [`Moving`] run by a task of its own, so reading and parsing the dump overlaps with the copy's
/// round trips instead of adding to them. Aborted when dropped.
///
/// The dump is read as fast as the server sends it, the batches queued without bound: a hash walk
/// holds a lock of the server's hash table while its client does not read, and the source's reads
/// of the copy (another connection) then wait for it. With a bounded queue the copy, waiting on
/// such a read, stopped reading the dump: memcached 1.6.18 stalled until the copy's timeout. The
/// queue holds moving keys only, which [`Moving`] keeps anyway to skip them in later passes.
struct Feed {
    rx: mpsc::UnboundedReceiver<Result<Batch, MigrateError>>,
    task: JoinHandle<()>,
    /// The source's name, for errors.
    source: String,
}

impl Feed {
    /// Connects (so an unreachable source fails here) and starts the task.
    async fn start(job: &Job) -> Result<Feed, MigrateError> {
        let mut moving = Moving::connect(job.clone()).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let item = match moving.next_batch().await {
                    Ok(None) => return,
                    Ok(Some(batch)) => Ok(batch),
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.send(item).is_err() || failed {
                    return;
                }
            }
        });
        Ok(Feed {
            rx,
            task,
            source: job.source.name.clone(),
        })
    }

    /// The next batch; `None` when the dumps are done.
    async fn next(&mut self) -> Result<Option<Batch>, MigrateError> {
        match self.rx.recv().await {
            Some(item) => item.map(Some),
            // The task ended: done, unless it panicked (in the route, say).
            None => match (&mut self.task).await {
                Ok(()) => Ok(None),
                Err(e) => Err(MigrateError::Protocol {
                    server: self.source.clone(),
                    reason: format!("the dump's task failed: {e}"),
                }),
            },
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The source's moving keys in batches, over as many dumps as it takes for one to show no new moving
/// key (at most [`MAX_PASSES`]). Counts `scanned` and `moving`.
struct Moving {
    job: Job,
    conn: Conn,
    /// The dump being read, if one is.
    dump: Option<Dump>,
    /// How many dumps were started.
    passes: usize,
    /// New moving keys found by the current dump.
    new: usize,
    /// Every moving key handed out (so a later pass hands out only what earlier ones missed).
    handled: HashSet<Vec<u8>>,
    /// How the dumps walk the items (the hash table unless the server refuses it).
    walk: Walk,
}

impl Moving {
    async fn connect(job: Job) -> Result<Moving, MigrateError> {
        Ok(Moving {
            conn: Conn::connect(&job.source, job.timeout).await?,
            job,
            dump: None,
            passes: 0,
            new: 0,
            handled: HashSet::new(),
            walk: Walk::Hash,
        })
    }

    /// Up to `job.batch` moving keys not handed out before, each with its target and item size;
    /// `None` when done.
    async fn next_batch(&mut self) -> Result<Option<Batch>, MigrateError> {
        let want = self.job.batch.max(1);
        let mut batch = Vec::with_capacity(want);
        let p = &self.job.progress;
        while batch.len() < want {
            let dump = match &mut self.dump {
                Some(d) => d,
                None => {
                    if self.passes > 0 && self.new == 0 {
                        break;
                    }
                    if self.passes == MAX_PASSES {
                        tracing::warn!(
                            server = self.job.source.name,
                            "new moving keys still found after {MAX_PASSES} dumps; leaving them to the dual writes"
                        );
                        self.new = 0;
                        break;
                    }
                    self.passes += 1;
                    self.new = 0;
                    self.dump
                        .insert(Dump::start(&mut self.conn, &mut self.walk).await?)
                }
            };
            let Some(entry) = dump.next(&mut self.conn).await? else {
                self.dump = None;
                continue;
            };
            Progress::add(&p.scanned, 1);
            let Some(t) = (self.job.route)(&entry.key) else {
                continue;
            };
            if self.handled.contains(&entry.key) {
                continue;
            }
            self.handled.insert(entry.key.clone());
            Progress::add(&p.moving, 1);
            self.new += 1;
            batch.push((entry.key, t, entry.size));
        }
        Ok((!batch.is_empty()).then_some(batch))
    }
}
