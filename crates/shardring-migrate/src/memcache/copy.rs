//! The copy of one batch of keys: read from the source, add to the targets, check the source again
//! and copy once more by CAS what changed meanwhile.
//!
//! Why each step is safe while the proxies dual-write every change of a moving key to both owners:
//!
//! - **Add, never set**: a target that already holds the key (`NS`, nothing written) got it from a
//!   dual write, from a previous run, or from an earlier change that left it there (a run without
//!   `--delete-moved`, or a server removed and later added back): its value is read and compared
//!   with the source's. Equal, the key is skipped (what makes a rerun resume cheaply). Different,
//!   the key is checked like a copy a dual write replaced (below): once the source stays unchanged
//!   for a round, the source's value is set over the target's by CAS. Taking `NS` alone as "the
//!   target is newer" kept a leftover of an earlier change, which the cut-over then served: a value
//!   older than ones acknowledged since.
//! - **The source's CAS read again after the add**: a change the dual write could not apply to the
//!   target (an `append`/`incr` answered `NOT_STORED`/`NOT_FOUND` because the target had no copy yet)
//!   shows as a new CAS on the source. The value is read again and set on the target *by CAS against
//!   our copy*; `NF` means a dual delete removed our copy (nothing to do). `EX` means a dual write
//!   replaced our copy since: the target's value is read and compared with the source's. Equal, the
//!   target is as new as the source: done. Different, either the target holds a write whose source
//!   leg has not landed yet (it will change the source's CAS, seen next round) or the target missed
//!   a write and a later one landed on the stale copy (an append after a missed append): when the
//!   source's CAS stays the same for a round, the source's value is set over the target's by CAS
//!   against the value compared. Taking `EX` alone as "the target is as new" would lose the missed
//!   append for good.
//! - **A key gone from the source after the read** (deleted or expired): our copy is deleted from the
//!   target by CAS against our copy, so a value a dual write put there since is kept.
//! - **Checked once settled**: a check round reads the source at least [`SETTLE`] after our write
//!   it checks. A proxy's dual write reaches its two servers at different moments: an `incr` the
//!   target answered `NOT_FOUND` (no copy yet) may reach the source only after a check read at
//!   once, and the source would then stay one write ahead for good. The keys waiting are parked,
//!   and the copier checks them after its later batches ([`Copier::finish`] waits for the last).
//!
//! Every round trip is one pipelined batch per server (never one per key).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use crate::{Job, MigrateError, Progress, SETTLE};

use super::conn::{Conn, Reply};

/// How many times a batch's changed keys are copied again before they are given up as failed (a
/// key rewritten faster than a round trip: its dual writes keep the target current anyway).
const MAX_ROUNDS: usize = 20;

/// How many times a key the target held at the add and no longer at the comparison is added
/// again before it is counted failed (it comes and goes faster than a round trip).
const ADD_ATTEMPTS: usize = 3;

/// memcached reads an exptime above 30 days as a unix time, not as seconds from now.
const MAX_RELATIVE_TTL: i64 = 30 * 24 * 3600;

/// A key read from the source.
#[derive(Debug, Clone)]
struct Fetched {
    key: Vec<u8>,
    target: usize,
    flags: u64,
    /// The exptime that gives the copy the source's expiry ([`exptime`]).
    exptime: i64,
    /// The source's CAS when read.
    cas: u64,
    value: Bytes,
}

/// A key added to its target.
#[derive(Debug, Clone)]
struct Stored {
    key: Vec<u8>,
    target: usize,
    /// The source's CAS of the value copied.
    src_cas: u64,
    /// Our copy's CAS on the target (what a CAS-guarded set or delete compares with).
    tgt_cas: u64,
    /// The target's value was found different from the source's after a dual write replaced our
    /// copy: if the source stays unchanged for a round, the target missed a write (an append or
    /// incr before it had a copy) and is set to the source's value by CAS.
    diverged: bool,
    /// When a check may read it ([`SETTLE`] after our write).
    settles: Instant,
    /// The check rounds it has been through.
    rounds: usize,
}

impl Stored {
    /// `f` as written to (or found on) its target with CAS `tgt_cas`, to be checked once settled.
    fn of(f: Fetched, tgt_cas: u64, diverged: bool, rounds: usize) -> Stored {
        Stored {
            key: f.key,
            target: f.target,
            src_cas: f.cas,
            tgt_cas,
            diverged,
            settles: Instant::now() + SETTLE,
            rounds,
        }
    }
}

/// What one batch of a target's pipeline does.
#[derive(Debug)]
enum Op {
    /// `ms … ME`: add, unless the target holds the key.
    Add(Fetched),
    /// `ms … C<cas>`: replace our copy (the CAS it had) with a newer value; the key's rounds so far.
    Replace(Fetched, u64, usize),
    /// `md … C<cas>`: delete our copy, unless it was replaced since.
    Delete(Stored),
    /// `mg … v c`: the target's value, to compare with the source's (held here); the key's rounds.
    Compare(Fetched, usize),
}

impl Op {
    fn target(&self) -> usize {
        match self {
            Op::Add(f) | Op::Replace(f, _, _) | Op::Compare(f, _) => f.target,
            Op::Delete(s) => s.target,
        }
    }
}

/// The keys of a batch read from the source ([`Copier::read`]), to be written by
/// [`Copier::write`].
#[derive(Debug)]
pub struct ReadBatch {
    items: Vec<Fetched>,
}

impl ReadBatch {
    /// How many keys were found on the source (the others were counted gone or failed).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none was found.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The keys of a batch added to their targets ([`Copier::write`]), to be checked by
/// [`Copier::check`].
#[derive(Debug)]
pub struct WrittenBatch {
    stored: Vec<Stored>,
}

impl WrittenBatch {
    /// How many keys were added (the others were counted skipped or failed).
    pub fn len(&self) -> usize {
        self.stored.len()
    }

    /// Whether none was added.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
    }
}

/// The copy's connections: one to the source for reads, one per target (opened on its first key,
/// kept for the job).
///
/// [`Copier::copy_keys`] copies a batch; its three steps ([`Copier::read`], [`Copier::write`],
/// [`Copier::check`]) are public so a test can change the source between them. Each key of a batch
/// ends counted in exactly one of `copied`, `skipped`, `gone` and `failed` of the job's
/// [`Progress`]; `recopied` counts the extra CAS copies of keys that changed (such a key is also
/// counted in one of the four), `bytes` every value byte written to a target.
#[derive(Debug)]
pub struct Copier<'j> {
    job: &'j Job,
    source: Conn,
    targets: Vec<Option<Conn>>,
    /// The request being built (kept to reuse its allocation).
    req: Vec<u8>,
    /// Keys written and not checked yet, about in the order written: each checked once settled.
    parked: VecDeque<Stored>,
}

impl<'j> Copier<'j> {
    /// Connects to the job's source (targets are connected on their first key).
    ///
    /// # Errors
    /// When the source cannot be reached within the job's timeout.
    pub async fn connect(job: &'j Job) -> Result<Copier<'j>, MigrateError> {
        Ok(Copier {
            job,
            source: Conn::connect(&job.source, job.timeout).await?,
            targets: job.targets.iter().map(|_| None).collect(),
            req: Vec::new(),
            parked: VecDeque::new(),
        })
    }

    fn progress(&self) -> &Progress {
        &self.job.progress
    }

    /// Copies a batch of keys (each with its target's index): read, write, and park them to be
    /// checked once settled; then checks the keys of earlier batches that have settled. Call
    /// [`Copier::finish`] after the last batch.
    ///
    /// # Errors
    /// When a server fails, times out or answers out of protocol.
    pub async fn copy_keys(&mut self, keys: Vec<(Vec<u8>, usize)>) -> Result<(), MigrateError> {
        let read = self.read(keys).await?;
        let written = self.write(read).await?;
        self.parked.extend(written.stored);
        self.check_settled(false).await
    }

    /// Checks every key still parked, waiting for each to settle.
    ///
    /// # Errors
    /// When a server fails, times out or answers out of protocol.
    pub async fn finish(&mut self) -> Result<(), MigrateError> {
        self.check_settled(true).await
    }

    /// Reads the keys' values, flags, TTLs and CASes from the source (`mg <key> v f t c`): a key not
    /// there is counted `gone`, an error reply or a target index out of range `failed`.
    ///
    /// # Errors
    /// When the source fails, times out or answers out of protocol.
    pub async fn read(&mut self, keys: Vec<(Vec<u8>, usize)>) -> Result<ReadBatch, MigrateError> {
        let n_targets = self.targets.len();
        let (keys, bad): (Vec<_>, Vec<_>) = keys.into_iter().partition(|(_, t)| *t < n_targets);
        for (key, target) in &bad {
            tracing::warn!(
                key = %String::from_utf8_lossy(key),
                target,
                "the route names a target the job does not have"
            );
        }
        Progress::add(&self.progress().failed, bad.len() as u64);
        let (replies, clock) = self.read_source(keys.iter().map(|(k, _)| &k[..])).await?;
        let mut items = Vec::with_capacity(keys.len());
        for ((key, target), reply) in keys.into_iter().zip(replies) {
            match fetched(key, target, reply, clock) {
                Ok(item) => items.push(item),
                Err(Missing::Gone) => Progress::add(&self.progress().gone, 1),
                Err(Missing::Failed(key, reply)) => {
                    self.failed(&self.job.source.name, &key, &reply)
                }
            }
        }
        Ok(ReadBatch { items })
    }

    /// Adds the keys read to their targets (`ms <key> … ME c`, pipelined per target), after the job's
    /// rate limit allows the batch. Where the target holds the key (`NS`) its value is read (`mg
    /// <key> v c`): equal to the source's, the key is counted `skipped`; different, it is parked to
    /// be checked as diverged (the source's value set over it once the source stays unchanged); gone
    /// meanwhile, added again (up to `ADD_ATTEMPTS` times). An error (too large, out of memory) is
    /// counted `failed`.
    ///
    /// # Errors
    /// When a target fails, times out or answers out of protocol.
    pub async fn write(&mut self, batch: ReadBatch) -> Result<WrittenBatch, MigrateError> {
        let bytes = batch.items.iter().map(|f| f.value.len() as u64).sum();
        self.acquire(batch.items.len() as u64, bytes).await;
        let mut stored = Vec::new();
        let mut items = batch.items;
        for _ in 0..ADD_ATTEMPTS {
            let ops = items.into_iter().map(Op::Add).collect();
            let mut held = Vec::new();
            for (op, reply) in self.on_targets(ops).await? {
                let Op::Add(f) = op else { continue };
                match (reply.status(), reply.flag::<u64>(b'c')) {
                    (b"HD", Some(cas)) => {
                        Progress::add(&self.progress().bytes, f.value.len() as u64);
                        stored.push(Stored::of(f, cas, false, 0));
                    }
                    (b"NS", _) => held.push(Op::Compare(f, 0)),
                    _ => self.failed(self.target_name(f.target), &f.key, &reply),
                }
            }
            items = Vec::new();
            for (op, reply) in self.on_targets(held).await? {
                let Op::Compare(f, _) = op else { continue };
                match (reply.status(), reply.flag::<u64>(b'c'), &reply.value) {
                    (b"VA", _, Some(v)) if *v == f.value => {
                        Progress::add(&self.progress().skipped, 1);
                    }
                    // A dual write the source has not applied yet (its CAS changes, and the key
                    // is copied again), or a leftover of an earlier change: checked as diverged.
                    (b"VA", Some(cas), Some(_)) => stored.push(Stored::of(f, cas, true, 0)),
                    // Deleted or evicted from the target since the add: added again.
                    (b"EN", _, _) => items.push(f),
                    _ => self.failed(self.target_name(f.target), &f.key, &reply),
                }
            }
            if items.is_empty() {
                break;
            }
        }
        for f in items {
            tracing::warn!(
                server = self.target_name(f.target),
                key = %String::from_utf8_lossy(&f.key),
                "the target held the key at each add and not at each comparison; not copied"
            );
            Progress::add(&self.progress().failed, 1);
        }
        Ok(WrittenBatch { stored })
    }

    /// Checks the keys added (with the keys still parked), each once it has settled, waiting
    /// for it: reads the source's CAS (`mg <key> c`). Unchanged, the key is `copied`; gone, our
    /// copy is deleted by CAS and the key counted `gone`; changed, the new value is read and set on
    /// the target by CAS against our copy (`recopied`), and checked again once settled, up to 20
    /// rounds (then `failed`).
    ///
    /// # Errors
    /// When a server fails, times out or answers out of protocol.
    pub async fn check(&mut self, batch: WrittenBatch) -> Result<(), MigrateError> {
        self.parked.extend(batch.stored);
        self.check_settled(true).await
    }

    /// Runs a check round on the parked keys that have settled (on every parked key when `all`,
    /// waiting for them, until none is left), in batches of the job's size.
    async fn check_settled(&mut self, all: bool) -> Result<(), MigrateError> {
        loop {
            if all {
                let Some(last) = self.parked.iter().map(|s| s.settles).max() else {
                    return Ok(());
                };
                tokio::time::sleep_until(last.into()).await;
            }
            let now = Instant::now();
            let ready = self.parked.iter().take_while(|s| s.settles <= now).count();
            if ready == 0 {
                return Ok(());
            }
            let ready: Vec<Stored> = self.parked.drain(..ready).collect();
            for chunk in ready.chunks(self.job.batch.max(1)) {
                for s in self.check_round(chunk.to_vec()).await? {
                    if s.rounds < MAX_ROUNDS {
                        self.parked.push_back(s);
                        continue;
                    }
                    tracing::warn!(
                        server = self.job.source.name,
                        key = %String::from_utf8_lossy(&s.key),
                        "the key kept changing on the source through {MAX_ROUNDS} copies; given up (its dual writes keep the target current)"
                    );
                    Progress::add(&self.progress().failed, 1);
                }
            }
        }
    }

    /// One check round ([`Copier::check`]); the keys to check once more, each once settled.
    async fn check_round(&mut self, pending: Vec<Stored>) -> Result<Vec<Stored>, MigrateError> {
        self.req.clear();
        for s in &pending {
            meta(&mut self.req, b"mg", &s.key, b" c u");
        }
        let mut req = std::mem::take(&mut self.req);
        let replies = self.source.exchange(&mut req, pending.len()).await;
        self.req = req;
        let mut ops = Vec::new();
        let mut changed = Vec::new();
        for (s, reply) in pending.into_iter().zip(replies?) {
            match (reply.status(), reply.flag::<u64>(b'c')) {
                (b"HD", Some(cas)) if cas == s.src_cas && !s.diverged => {
                    Progress::add(&self.progress().copied, 1);
                }
                // Changed on the source, or unchanged while the target differs from it.
                (b"HD", Some(_)) => changed.push(s),
                (b"EN", _) => ops.push(Op::Delete(s)),
                _ => self.failed(&self.job.source.name, &s.key, &reply),
            }
        }
        if !changed.is_empty() {
            // The keys' budget is taken before the source is read, not between the read and the
            // write: a key written more often than the rate allows would otherwise change again
            // during every wait and never settle (given up after MAX_ROUNDS).
            self.acquire(changed.len() as u64, 0).await;
            let (replies, clock) = self.read_source(changed.iter().map(|s| &s.key[..])).await?;
            for (s, reply) in changed.into_iter().zip(replies) {
                match fetched(s.key.clone(), s.target, reply, clock) {
                    Ok(f) => ops.push(Op::Replace(f, s.tgt_cas, s.rounds)),
                    Err(Missing::Gone) => ops.push(Op::Delete(s)),
                    Err(Missing::Failed(key, reply)) => {
                        self.failed(&self.job.source.name, &key, &reply)
                    }
                }
            }
            let bytes = ops
                .iter()
                .map(|op| match op {
                    Op::Replace(f, _, _) => f.value.len() as u64,
                    _ => 0,
                })
                .sum();
            self.acquire_bytes(bytes).await;
        }
        let mut again = Vec::new();
        let mut compare = Vec::new();
        for (op, reply) in self.on_targets(ops).await? {
            match op {
                Op::Delete(s) => {
                    // HD: our copy deleted; EX: a dual write replaced it (kept); NF: already gone.
                    if !matches!(reply.status(), b"HD" | b"EX" | b"NF") {
                        tracing::warn!(
                            server = self.target_name(s.target),
                            key = %String::from_utf8_lossy(&s.key),
                            reply = reply.text(),
                            "could not delete the copy of a key gone from the source"
                        );
                    }
                    Progress::add(&self.progress().gone, 1);
                }
                Op::Replace(f, _, rounds) => match (reply.status(), reply.flag::<u64>(b'c')) {
                    (b"HD", Some(cas)) => {
                        Progress::add(&self.progress().recopied, 1);
                        Progress::add(&self.progress().bytes, f.value.len() as u64);
                        again.push(Stored::of(f, cas, false, rounds + 1));
                    }
                    // A dual write replaced our copy since: if the target now holds the source's
                    // value it is as new as the source; compared below.
                    (b"EX", _) => compare.push(Op::Compare(f, rounds)),
                    // A dual delete removed our copy.
                    (b"NF", _) => Progress::add(&self.progress().gone, 1),
                    _ => self.failed(self.target_name(f.target), &f.key, &reply),
                },
                Op::Add(_) | Op::Compare(..) => {}
            }
        }
        for (op, reply) in self.on_targets(compare).await? {
            let Op::Compare(f, rounds) = op else { continue };
            match (reply.status(), reply.flag::<u64>(b'c'), &reply.value) {
                (b"VA", _, Some(v)) if *v == f.value => Progress::add(&self.progress().copied, 1),
                // Different: a write the source has not seen yet (it will change the source's CAS
                // and be read next round), or one the target missed (the source stays unchanged
                // next round, and its value is set over the target's by CAS).
                (b"VA", Some(cas), Some(_)) => again.push(Stored::of(f, cas, true, rounds + 1)),
                (b"EN", _, _) => Progress::add(&self.progress().gone, 1),
                _ => self.failed(self.target_name(f.target), &f.key, &reply),
            }
        }
        Ok(again)
    }

    /// `mg <key> v f t c` for each key, one round trip; with the source's clock when a key has more
    /// than 30 days left (its copy's exptime is then a unix time: [`Conn::clock`] says why the
    /// source's clock and not ours), a second round trip only then.
    async fn read_source<'k>(
        &mut self,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> Result<(Vec<Reply>, i64), MigrateError> {
        self.req.clear();
        let mut n = 0;
        for key in keys {
            meta(&mut self.req, b"mg", key, b" v f t c u");
            n += 1;
        }
        let mut req = std::mem::take(&mut self.req);
        let replies = self.source.exchange(&mut req, n).await;
        self.req = req;
        let replies = replies?;
        let far = replies
            .iter()
            .any(|r| r.flag::<i64>(b't').is_some_and(|t| t > MAX_RELATIVE_TTL));
        let clock = if far {
            self.source.clock().await?.unwrap_or_else(unix_now)
        } else {
            unix_now()
        };
        Ok((replies, clock))
    }

    /// Runs `ops` on their targets, one pipelined round trip per target; each op with its reply.
    async fn on_targets(&mut self, ops: Vec<Op>) -> Result<Vec<(Op, Reply)>, MigrateError> {
        let mut groups: Vec<Vec<Op>> = self.targets.iter().map(|_| Vec::new()).collect();
        for op in ops {
            // The index was checked by `read`; an op out of range has nowhere to go.
            if let Some(g) = groups.get_mut(op.target()) {
                g.push(op);
            }
        }
        let mut out = Vec::new();
        for (t, group) in groups.into_iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            self.req.clear();
            for op in &group {
                write_op(&mut self.req, op);
            }
            let mut req = std::mem::take(&mut self.req);
            let replies = match self.target(t).await {
                Ok(conn) => conn.exchange(&mut req, group.len()).await,
                Err(e) => Err(e),
            };
            self.req = req;
            out.extend(group.into_iter().zip(replies?));
        }
        Ok(out)
    }

    /// Target `t`'s connection, opened on first use.
    async fn target(&mut self, t: usize) -> Result<&mut Conn, MigrateError> {
        let job = self.job;
        let (Some(slot), Some(ep)) = (self.targets.get_mut(t), job.targets.get(t)) else {
            return Err(MigrateError::Protocol {
                server: format!("target {t}"),
                reason: "the route names a target the job does not have".into(),
            });
        };
        if slot.is_none() {
            *slot = Some(Conn::connect(ep, job.timeout).await?);
        }
        slot.as_mut().ok_or_else(|| MigrateError::Protocol {
            server: ep.name.clone(),
            reason: "no connection".into(),
        })
    }

    fn target_name(&self, t: usize) -> &str {
        self.job.targets.get(t).map_or("?", |e| &e.name)
    }

    async fn acquire(&self, keys: u64, bytes: u64) {
        if let (Some(rate), true) = (&self.job.rate, keys > 0) {
            rate.acquire(keys, bytes).await;
        }
    }

    /// Takes `bytes` from the byte budget alone (the keys' taken already).
    async fn acquire_bytes(&self, bytes: u64) {
        if let (Some(rate), true) = (&self.job.rate, bytes > 0) {
            rate.acquire(0, bytes).await;
        }
    }

    fn failed(&self, server: &str, key: &[u8], reply: &Reply) {
        tracing::warn!(
            server,
            key = %String::from_utf8_lossy(key),
            reply = reply.text(),
            "key not copied"
        );
        Progress::add(&self.progress().failed, 1);
    }
}

/// Why a read found no value.
enum Missing {
    /// `EN`: not on the source (deleted or expired).
    Gone,
    /// Any other reply.
    Failed(Vec<u8>, Reply),
}

/// A `VA` reply to `mg <key> v f t c` as a key to copy; `clock` is the source's when the reply was
/// read.
fn fetched(key: Vec<u8>, target: usize, reply: Reply, clock: i64) -> Result<Fetched, Missing> {
    if reply.status() == b"EN" {
        return Err(Missing::Gone);
    }
    let (b"VA", Some(value), Some(cas)) =
        (reply.status(), reply.value.clone(), reply.flag::<u64>(b'c'))
    else {
        return Err(Missing::Failed(key, reply));
    };
    Ok(Fetched {
        key,
        target,
        flags: reply.flag(b'f').unwrap_or(0),
        exptime: exptime(reply.flag(b't').unwrap_or(-1), clock),
        cas,
        value,
    })
}

/// The exptime that gives a copy the `ttl` seconds the source's item has left: 0 (never) for -1; a
/// unix time above memcached's 30-day limit of relative exptimes (`now`: the source's clock when
/// `ttl` was read); 1 s for an item in its last second (`t0`: still live on the source, so copied,
/// and expiring as it would there).
pub(crate) fn exptime(ttl: i64, now: i64) -> i64 {
    match ttl {
        t if t < 0 => 0,
        0 => 1,
        t if t > MAX_RELATIVE_TTL => now + t,
        t => t,
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn write_op(req: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Add(f) => set(req, f, b" ME c"),
        Op::Replace(f, cas, _) => set(req, f, format!(" C{cas} c").as_bytes()),
        Op::Delete(s) => meta(req, b"md", &s.key, format!(" C{}", s.tgt_cas).as_bytes()),
        Op::Compare(f, _) => meta(req, b"mg", &f.key, b" v c"),
    }
}

/// `ms <key> <len> F<flags> T<exptime><mode>\r\n<value>\r\n`.
fn set(req: &mut Vec<u8>, f: &Fetched, mode: &[u8]) {
    let args = format!(" {} F{} T{}", f.value.len(), f.flags, f.exptime);
    let mut flags = args.into_bytes();
    flags.extend_from_slice(mode);
    meta(req, b"ms", &f.key, &flags);
    req.extend_from_slice(&f.value);
    req.extend_from_slice(b"\r\n");
}

/// `<cmd> <key><args>\r\n`, the key base64-encoded with the `b` flag when it holds a byte the text
/// protocol cannot carry (a space or a control character: only a binary-mode client can store such a
/// key, and only binary mode can name it).
pub(crate) fn meta(req: &mut Vec<u8>, cmd: &[u8], key: &[u8], args: &[u8]) {
    req.extend_from_slice(cmd);
    req.push(b' ');
    let binary = key.iter().any(|&b| b <= b' ' || b == 0x7f);
    if binary {
        base64(req, key);
    } else {
        req.extend_from_slice(key);
    }
    req.extend_from_slice(args);
    if binary {
        req.extend_from_slice(b" b");
    }
    req.extend_from_slice(b"\r\n");
}

/// Standard base64 with padding, as memcached's `b` flag reads it.
fn base64(out: &mut Vec<u8>, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptimes() {
        let now = 1_700_000_000;
        assert_eq!(exptime(-1, now), 0);
        assert_eq!(exptime(0, now), 1);
        assert_eq!(exptime(100, now), 100);
        assert_eq!(exptime(MAX_RELATIVE_TTL, now), MAX_RELATIVE_TTL);
        assert_eq!(exptime(40 * 86400, now), now + 40 * 86400);
    }

    #[test]
    fn keys_a_text_line_cannot_carry_go_in_base64() {
        let mut req = Vec::new();
        meta(&mut req, b"mg", b"plain%\xc3\xa9", b" c");
        assert_eq!(req, b"mg plain%\xc3\xa9 c\r\n");
        req.clear();
        meta(&mut req, b"md", b"binary key", b"");
        assert_eq!(req, b"md YmluYXJ5IGtleQ== b\r\n");
        for (data, want) in [
            (&b""[..], &b""[..]),
            (b"f", b"Zg=="),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"foob", b"Zm9vYg=="),
        ] {
            let mut out = Vec::new();
            base64(&mut out, data);
            assert_eq!(out, want);
        }
    }
}
