//! The split keys' exchanges on the memcached protocol (`crate::split`; the rules are the leaf
//! `remedies::split`): a write of a split key, then its copies' deletes ([`SplitWrite`]); a spread
//! read's first cleaning of the copies, beside the owner's read ([`SplitClean`]). A read from a
//! copy is the warm-up's copying `get` ([`super::warmup::copying_get`]), filled from the owner.

use std::sync::Arc;

use bytes::Bytes;

use super::{advance, current_part, done, Finish, Memcache, Merge};
use crate::error::BackendError;
use crate::metrics::PoolStats;
use crate::protocol::memcache::remedies::split::{delete_line, gone};
use crate::protocol::memcache::response::ResponseKind;
use crate::protocol::{Answer, PartReply, Phase, Protocol, Reply, Round, Step};
use crate::split::Cleaning;

/// A write of a split key as an exchange: the write's own (to the owner, and wherever else it
/// goes), then the copies' deletes; the client is answered once those answered, and a later
/// request of the client waits for that ([`Protocol::in_order`]), so that its own next `get` cannot
/// read a copy the write has not deleted yet.
#[derive(Debug)]
pub(crate) struct SplitWrite {
    /// Where the exchange is.
    stage: WriteStage,
    /// Each copy's server and the delete sent there (a multi-key `gat` may name several split
    /// keys: each key's copies, each with its key's delete).
    deletes: Vec<(usize, Bytes)>,
    /// Where the deletes are counted.
    stats: Arc<PoolStats>,
}

/// Where a [`SplitWrite`] is.
#[derive(Debug)]
enum WriteStage {
    /// The write's own exchange is under way.
    Writing(Box<Merge>),
    /// The copies are being deleted; the write's answer.
    Deleting(Answer),
}

/// `step`, a write of split key `key` (its routing bytes), then the deletes of its `copies`.
pub(super) fn write(
    step: Step<Memcache>,
    key: &[u8],
    copies: &[usize],
    stats: &Arc<PoolStats>,
) -> Step<Memcache> {
    let delete = delete_line(key);
    let deletes = copies.iter().map(|&c| (c, delete.clone())).collect();
    write_then_delete(step, deletes, stats)
}

/// `step`, a write, then the `deletes` (each copy's server and its key's delete line).
pub(super) fn write_then_delete(
    step: Step<Memcache>,
    deletes: Vec<(usize, Bytes)>,
    stats: &Arc<PoolStats>,
) -> Step<Memcache> {
    if deletes.is_empty() {
        return step;
    }
    let wrap = |inner: Merge| {
        Merge::SplitWrite(SplitWrite {
            stage: WriteStage::Writing(Box::new(inner)),
            deletes,
            stats: Arc::clone(stats),
        })
    };
    match step {
        Step::Forward {
            server: Some(server),
            frame,
            kind,
            finish,
        } => Step::Exchange(Round::new(
            vec![current_part(server, frame, kind)],
            wrap(Merge::One(finish)),
        )),
        Step::Exchange(round) => Step::Exchange(Round {
            parts: round.parts,
            exchange: wrap(round.exchange),
            follow_ups: round.follow_ups,
        }),
        // No server (the write fails, nothing changed), or answered without one.
        other => other,
    }
}

impl SplitWrite {
    /// After a round: the write's next round, the copies' deletes, or the answer.
    pub(super) fn advance(mut self, replies: Vec<PartReply<'_>>) -> Phase<Memcache> {
        match std::mem::replace(&mut self.stage, WriteStage::Deleting(Answer::Nothing)) {
            WriteStage::Writing(inner) => match advance(*inner, replies) {
                Phase::Again(round) => {
                    self.stage = WriteStage::Writing(Box::new(round.exchange));
                    Phase::Again(Round {
                        parts: round.parts,
                        exchange: Merge::SplitWrite(self),
                        follow_ups: round.follow_ups,
                    })
                }
                Phase::Done { answer, follow_ups } => {
                    let parts = self
                        .deletes
                        .iter()
                        .map(|(c, delete)| current_part(*c, delete.clone(), ResponseKind::Line))
                        .collect();
                    self.stats
                        .split_invalidations
                        .add(self.deletes.len() as u64);
                    self.stage = WriteStage::Deleting(answer);
                    Phase::Again(Round {
                        parts,
                        exchange: Merge::SplitWrite(self),
                        follow_ups,
                    })
                }
            },
            WriteStage::Deleting(answer) => match kept(&replies) {
                None => done(answer),
                Some(error) => {
                    self.stats.split_invalidations_failed.inc();
                    // A `noreply` write stays silent (its client reads no answer); counted.
                    done(match answer {
                        Answer::Nothing => Answer::Nothing,
                        _ => Answer::Failed(error),
                    })
                }
            },
        }
    }
}

/// The failure of the first copy whose delete did not answer deleted or not found, if any.
fn kept(replies: &[PartReply<'_>]) -> Option<BackendError> {
    crate::split::kept(replies, gone)
}

/// A spread read's first cleaning: the owner's read and the copies' deletes in one round; the read
/// answers, and the key's reads spread once every delete said deleted or not found.
#[derive(Debug)]
pub(crate) struct SplitClean {
    /// How the owner's reply becomes the answer.
    finish: Finish,
    /// The cleaning, to report.
    cleaning: Cleaning,
}

/// `step` (a spreadable read of split key `key`, to its owner) with the deletes of its `copies`
/// beside it; a step that is not a plain forward goes as it is (the next read cleans).
pub(super) fn clean(
    step: Step<Memcache>,
    key: &[u8],
    copies: &[usize],
    cleaning: Cleaning,
    stats: &PoolStats,
) -> Step<Memcache> {
    let Step::Forward {
        server: Some(owner),
        frame,
        kind,
        finish,
    } = step
    else {
        return step;
    };
    let delete = delete_line(key);
    let mut parts = vec![current_part(owner, frame, kind)];
    parts.extend(
        copies
            .iter()
            .map(|&c| current_part(c, delete.clone(), ResponseKind::Line)),
    );
    stats.split_invalidations.add(copies.len() as u64);
    Step::Exchange(Round::new(
        parts,
        Merge::SplitClean(SplitClean { finish, cleaning }),
    ))
}

impl SplitClean {
    /// The owner's answer; the cleaning reported.
    pub(super) fn merge(self, replies: Vec<PartReply<'_>>) -> Answer {
        let mut replies = replies.into_iter();
        let owner: Reply = replies
            .next()
            .map_or(Err(BackendError::NoServer), |r| r.reply);
        let cleaned = replies.all(|r| matches!(&r.reply, Ok(b) if gone(b)));
        self.cleaning.done(cleaned);
        Memcache::finish(self.finish, owner)
    }
}
