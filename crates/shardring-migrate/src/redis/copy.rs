//! Moving one batch of keys to one target: verify first, copy what differs, verify what was
//! copied, until a pass finds nothing different.
//!
//! # Why this order, and why it is correct while the proxies dual-write
//!
//! The source is authoritative: every write of a moving key reaches it (reads stay there), so its
//! value is complete. The target may hold
//!
//! - a **partial** value: a dual-written in-place update (`HSET`, `RPUSH`, `INCR`, `XADD`…) of a
//!   key the target did not have yet creates a value holding only that update;
//! - a **stale** value: a write that ran on the target *before* our `RESTORE` and on the source
//!   *after* our snapshot (`DUMP`, or `MIGRATE`'s own) is overwritten on the target by the older
//!   snapshot: the write's effect is lost there;
//! - a **revived** key: a delete that ran on the target before our `RESTORE` and on the source
//!   after the snapshot leaves the key on the target only.
//!
//! So every copy replaces (`REPLACE`: the source's value wins over whatever dual writes built), and
//! every copy is checked afterwards: the value (its dump, or where the dumps differ a canonical
//! digest) and the expiry on both servers (see [`super::verify`]). A key that differs and exists on
//! the source is copied again; one missing on the source is unlinked from the target. The keys
//! acted on are verified again in the next pass, until a pass finds them equal (an unlinked key
//! too: if the difference was a dual write in flight, the source has the key by the next pass and
//! it is copied); after [`MAX_PASSES`] a key still different is counted failed and logged.
//!
//! The next pass waits until the key has **settled**: it begins at least [`SETTLE`] after this
//! run's write. Equal is not done while a dual write may still be in flight across our own write.
//! A proxy sends a dual write to both servers at once, and they apply it at different moments. Say
//! the target applied an `HINCRBY` just before our `RESTORE … REPLACE` erased it there, and the
//! source gets it only after an immediate verify has read both sides equal. Then the source holds
//! one more increment than the target, for good. (`MIGRATE` makes this likely: it blocks the source
//! while the target takes the proxy's half at once.) The same goes for an `UNLINK` of ours and a
//! dual write that creates the key. So a key this run writes is parked ([`Engine::recheck`]), and
//! is compared once it has settled. The worker does that after each later batch, so it does not
//! wait, and at the end of the run it waits for the last keys only (one [`SETTLE`]).
//!
//! The first pass must not overwrite a key the target already holds without comparing it first: on
//! a rerun (or a target dual writes already completed) the keys already equal are left alone
//! (`skipped`), only missing or different ones are copied.
//!
//! - `DUMP`/`RESTORE` restores without `REPLACE` in the first pass: a key the target lacks (every
//!   key of a first run, bar the few dual writes reached first) is written with no reading of the
//!   target at all; one it holds is refused (`BUSYKEY`), written nothing, and compared in the next
//!   pass like any other. A rerun so reads the source once more than it must; a first run saves a
//!   pipeline of `DUMP`s and `PTTL`s on the target per batch (two commands a key of its five).
//! - `MIGRATE` cannot (one `BUSYKEY` fails the whole batch): its first pass reads the target first
//!   (a `DUMP` of a key it lacks is a nil) and the source only for the keys the target has.
//!
//! # Tallies (per moving key, exactly one outcome)
//!
//! - `copied`: written by this run, equal at the end;
//! - `skipped`: equal at the end without this run writing it;
//! - `gone`: missing on the source at the end (deleted or expired meanwhile; a copy on the target is
//!   unlinked);
//! - `failed`: refused by the target or the source, or still different after [`MAX_PASSES`];
//! - `recopied` counts the extra writes (each copy of a key after its first), not keys;
//! - `bytes`: per write, `MEMORY USAGE` on the source (`MIGRATE`) or the `DUMP` payload's length.

use std::collections::VecDeque;
use std::time::Instant;

use super::conn::{Conn, Pipeline};
use super::verify::{compare, dumps, settle, Digest};
use crate::{Endpoint, Job, MigrateError, Progress, SETTLE};
use shardring_resp::Value;

/// Batches in flight at once per job (each on its own connections): enough to keep the source busy
/// while a batch's replies travel, few enough to leave the live traffic its share of the servers.
pub const WORKERS: usize = 4;
/// Verify passes per batch before a key still different is given up (failed).
pub const MAX_PASSES: usize = 20;
/// How far apart the two `PTTL`s may be and still count as the same expiry (they are read at
/// different instants, and `MIGRATE`'s relative TTL drifts by its round trip).
pub const TTL_SLACK_MS: i64 = 2000;

/// How keys travel from the source to a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transfer {
    /// `MIGRATE host port "" db timeout COPY REPLACE [AUTH pw] KEYS …` sent to the source: one round
    /// trip a batch, the source serialising each key atomically with its TTL and restoring it on the
    /// target itself. The source must reach the target at the target's `addr` (TCP only), with the
    /// target's password. It holds the source until the target has restored the batch (~250 µs
    /// for 20 small keys, where their dumps take ~20: BENCHMARKS.md, "migrate (redis): where the
    /// servers' time goes"), a pause the live traffic on the source waits out; the values do not
    /// pass through this command, which matters when it runs far from the servers.
    Migrate,
    /// `PTTL` and `DUMP` pipelined on the source, then `RESTORE … REPLACE` pipelined on the target
    /// through our own connections, the expiry relative like `MIGRATE`'s (the `PTTL` less the time
    /// since it was read). Works across passwords and unix sockets, and holds the source only for
    /// the dumps, where `MIGRATE` holds it until the target has restored the batch: the default.
    #[default]
    DumpRestore,
}

/// Whether a `RESTORE` may overwrite what the target holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restore {
    /// `REPLACE`: the source's value wins (every copy after the first pass's).
    Replace,
    /// Refused (`BUSYKEY`) where the target holds the key: the first pass's, before any comparison.
    IfAbsent,
}

/// One key of a batch in flight.
#[derive(Debug, Clone, Copy, Default)]
struct State {
    /// This run wrote it at least once.
    written: bool,
    /// When this run's last write of it (a copy, or an unlink) was answered.
    last_write: Option<Instant>,
    /// Its size on the source (`MEMORY USAGE`, read by the first pass for `MIGRATE`'s rate limit
    /// and byte tally; `DUMP`/`RESTORE` counts the dump's length instead).
    bytes: u64,
}

/// A pass's reading of the target.
#[derive(Debug)]
struct Read {
    /// The target's digests.
    digests: Vec<Digest>,
    /// The keys' sizes on the source (0: not read).
    sizes: Vec<u64>,
}

/// `MEMORY USAGE key SAMPLES 0` of each key, pipelined (0 for a key missing or refused).
///
/// # Errors
/// When the server fails.
pub async fn sizes(conn: &mut Conn, keys: &[&[u8]]) -> Result<Vec<u64>, MigrateError> {
    let mut p = Pipeline::new();
    for k in keys {
        p.cmd(&[&b"MEMORY"[..], b"USAGE", k, b"SAMPLES", b"0"]);
    }
    let replies = conn.run(&p).await?;
    Ok(replies
        .iter()
        .map(|r| u64::try_from(r.integer().unwrap_or(0)).unwrap_or(0))
        .collect())
}

/// A job's connections and settings.
#[derive(Debug)]
pub struct Engine {
    job: Job,
    transfer: Transfer,
    /// The source's connection.
    pub source: Conn,
    targets: Vec<Option<Conn>>,
    /// Keys this run wrote (or found equal too soon after it wrote them), in the order written: each
    /// compared once it has settled.
    parked: VecDeque<Parked>,
}

/// A key waiting out [`SETTLE`] after this run's last write of it.
#[derive(Debug)]
struct Parked {
    target: usize,
    key: Vec<u8>,
    state: State,
    /// The pass that wrote it (or found it equal too soon).
    pass: usize,
}

impl Parked {
    /// When a comparison may count it done.
    fn settled_at(&self) -> Instant {
        self.state
            .last_write
            .map_or_else(Instant::now, |w| w + SETTLE)
    }
}

impl Engine {
    /// Connects to the source (the targets are connected to when their first batch comes).
    ///
    /// # Errors
    /// When the source cannot be reached or refuses the password or database.
    pub async fn new(job: Job, transfer: Transfer) -> Result<Engine, MigrateError> {
        let source = Conn::connect(&job.source, job.timeout).await?;
        let targets = job.targets.iter().map(|_| None).collect();
        Ok(Engine {
            job,
            transfer,
            source,
            targets,
            parked: VecDeque::new(),
        })
    }

    /// Target `t`'s connection, connecting first.
    async fn target(&mut self, t: usize) -> Result<&mut Conn, MigrateError> {
        let ep = self
            .job
            .targets
            .get(t)
            .ok_or_else(|| route_error(&self.job, t))?;
        let slot = &mut self.targets[t];
        if slot.is_none() {
            *slot = Some(Conn::connect(ep, self.job.timeout).await?);
        }
        slot.as_mut().ok_or_else(|| route_error(&self.job, t))
    }

    /// Moves `keys` (distinct, each counted `moving` already) to target `t`; see the module's
    /// documentation for the passes and the tallies.
    ///
    /// # Errors
    /// When a server fails or refuses the connection's credentials; keys refused one by one are
    /// counted failed instead.
    pub async fn move_batch(&mut self, t: usize, keys: &[Vec<u8>]) -> Result<(), MigrateError> {
        let state = vec![State::default(); keys.len()];
        self.passes(t, keys, state, 0).await?;
        self.recheck(false).await
    }

    /// Compares the parked keys that have settled (every parked key when `all`, waiting for the
    /// last to settle and for those it copies again: the end of a run).
    ///
    /// # Errors
    /// As [`Engine::move_batch`].
    pub async fn recheck(&mut self, all: bool) -> Result<(), MigrateError> {
        loop {
            if all {
                let Some(last) = self.parked.iter().map(Parked::settled_at).max() else {
                    return Ok(());
                };
                tokio::time::sleep_until(last.into()).await;
            }
            // Parked about in the order written, so the first not settled ends the ready ones.
            let now = Instant::now();
            let ready = self
                .parked
                .iter()
                .take_while(|k| k.settled_at() <= now)
                .count();
            if ready == 0 {
                return Ok(());
            }
            let mut by_target: Vec<Vec<Parked>> = Vec::new();
            for k in self.parked.drain(..ready) {
                if by_target.len() <= k.target {
                    by_target.resize_with(k.target + 1, Vec::new);
                }
                by_target[k.target].push(k);
            }
            for (t, group) in by_target.into_iter().enumerate() {
                for chunk in group.chunks(self.job.batch.max(1)) {
                    let Some(pass) = chunk.iter().map(|k| k.pass).max() else {
                        continue;
                    };
                    let keys: Vec<Vec<u8>> = chunk.iter().map(|k| k.key.clone()).collect();
                    let state = chunk.iter().map(|k| k.state).collect();
                    self.passes(t, &keys, state, (pass + 1).min(MAX_PASSES))
                        .await?;
                }
            }
        }
    }

    /// The passes of `keys` to target `t` from pass `from` (0: a new batch), their states so far
    /// in `state`: each key ends with an outcome, or is parked when this run writes it (to be
    /// compared once it has settled, by the next pass: [`Engine::recheck`]).
    async fn passes(
        &mut self,
        t: usize,
        keys: &[Vec<u8>],
        mut state: Vec<State>,
        from: usize,
    ) -> Result<(), MigrateError> {
        let progress = self.job.progress.clone();
        let p = &*progress;
        let mut todo: Vec<usize> = (0..keys.len()).collect();
        for pass in from..=MAX_PASSES {
            if todo.is_empty() {
                break;
            }
            if pass == 0 && self.transfer == Transfer::DumpRestore {
                let (written, held) = self.dump_restore(t, keys, &todo, Restore::IfAbsent).await?;
                let at = Instant::now();
                for &i in &written {
                    state[i].written = true;
                    state[i].last_write = Some(at);
                }
                self.park(t, keys, &state, &written, pass);
                // Nothing written, so compared at once.
                todo = held;
                continue;
            }
            let batch: Vec<&[u8]> = todo.iter().map(|&i| keys[i].as_slice()).collect();
            let read_at = Instant::now();
            let (src, dst) = self.read_pass(t, &batch, pass == 0).await?;
            let (mut copy, mut unlink, mut early) = (Vec::new(), Vec::new(), Vec::new());
            let settled = |s: &State| s.last_write.is_none_or(|w| w + SETTLE <= read_at);
            for (((&i, s), d), &size) in todo.iter().zip(&src).zip(&dst.digests).zip(&dst.sizes) {
                if size > 0 {
                    state[i].bytes = size;
                }
                if let Some(e) = s
                    .as_ref()
                    .and_then(|s| s.error.as_ref())
                    .or(d.error.as_ref())
                {
                    tracing::warn!(key = %show(&keys[i]), error = %e, "cannot digest the key");
                    Progress::add(&p.failed, 1);
                    continue;
                }
                let Some(s) = s else {
                    // Not on the target: copied without reading it first.
                    copy.push(i);
                    continue;
                };
                match (&s.value, &d.value) {
                    (None, Some(_)) => unlink.push(i),
                    _ if !s.same_as(d, TTL_SLACK_MS) => copy.push(i),
                    // Equal (or gone on both), but read before it settled: not done yet.
                    _ if !settled(&state[i]) => early.push(i),
                    (None, None) => Progress::add(&p.gone, 1),
                    _ if state[i].written => Progress::add(&p.copied, 1),
                    _ => Progress::add(&p.skipped, 1),
                }
            }
            self.park(t, keys, &state, &early, pass);
            if pass == MAX_PASSES {
                for &i in copy.iter().chain(&unlink) {
                    tracing::warn!(key = %show(&keys[i]), passes = MAX_PASSES,
                        "the key still differs on the target: given up");
                }
                Progress::add(&p.failed, (copy.len() + unlink.len()) as u64);
                break;
            }
            if !unlink.is_empty() {
                let target = self.target(t).await?;
                let which: Vec<&[u8]> = unlink.iter().map(|&i| keys[i].as_slice()).collect();
                target.unlink(&which).await?;
                let at = Instant::now();
                for &i in &unlink {
                    state[i].last_write = Some(at);
                }
            }
            let copied = if copy.is_empty() {
                Vec::new()
            } else {
                self.copy(t, keys, &copy, &mut state).await?
            };
            // `copied` is a key's outcome, counted when it verifies equal: here only the extra writes.
            let at = Instant::now();
            for &i in &copied {
                if state[i].written {
                    Progress::add(&p.recopied, 1);
                }
                state[i].written = true;
                state[i].last_write = Some(at);
            }
            self.park(t, keys, &state, &copied, pass);
            self.park(t, keys, &state, &unlink, pass);
            break;
        }
        Ok(())
    }

    /// Parks `keys[i]` for each `i` of `which`, found or written by pass `pass`.
    fn park(&mut self, t: usize, keys: &[Vec<u8>], state: &[State], which: &[usize], pass: usize) {
        self.parked.extend(which.iter().map(|&i| Parked {
            target: t,
            key: keys[i].clone(),
            state: state[i],
            pass,
        }));
    }

    /// One pass's reading of `batch` on the source and target `t` ([`compare`]): the source's
    /// readings (`None`: not read), the target's, and the keys' sizes on the source (0: not read).
    ///
    /// `MIGRATE`'s first pass (`DUMP`/`RESTORE` has none: it restores without `REPLACE` instead)
    /// reads the target first (with the source's `MEMORY USAGE` for the rate limit and the byte
    /// tally, at the same time), and reads on the source only the keys the target has: a key it
    /// lacks is copied either way, and the source is the busiest server of a run (every key of a
    /// batch is scanned, read and serialised there). Later passes read both sides at once.
    async fn read_pass(
        &mut self,
        t: usize,
        batch: &[&[u8]],
        first: bool,
    ) -> Result<(Vec<Option<Digest>>, Read), MigrateError> {
        self.target(t).await?;
        let Some(target) = self.targets[t].as_mut() else {
            return Err(route_error(&self.job, t));
        };
        if !first {
            let (src, digests) = compare(&mut self.source, target, batch).await?;
            let sizes = vec![0; digests.len()];
            return Ok((src.into_iter().map(Some).collect(), Read { digests, sizes }));
        }
        let source = &mut self.source;
        let want_sizes = self.transfer == Transfer::Migrate;
        let (sizes, dst) = tokio::join!(
            async {
                if want_sizes {
                    sizes(source, batch).await
                } else {
                    Ok(vec![0; batch.len()])
                }
            },
            dumps(target, batch)
        );
        let (sizes, mut dst) = (sizes?, dst?);
        let present: Vec<usize> = (0..batch.len())
            .filter(|&i| dst[i].value.is_some() || dst[i].error.is_some())
            .collect();
        let mut src: Vec<Option<Digest>> = vec![None; batch.len()];
        if !present.is_empty() {
            let keys: Vec<&[u8]> = present.iter().map(|&i| batch[i]).collect();
            let mut s = dumps(source, &keys).await?;
            let mut d: Vec<Digest> = present.iter().map(|&i| dst[i].clone()).collect();
            settle(source, target, &keys, &mut s, &mut d).await?;
            for ((i, s), d) in present.into_iter().zip(s).zip(d) {
                src[i] = Some(s);
                dst[i] = d;
            }
        }
        Ok((
            src,
            Read {
                digests: dst,
                sizes,
            },
        ))
    }

    /// Copies `keys[i]` for each `i` of `which` to target `t`: the indexes written (or found gone on
    /// the source: the next pass tells), the others counted failed.
    async fn copy(
        &mut self,
        t: usize,
        keys: &[Vec<u8>],
        which: &[usize],
        state: &mut [State],
    ) -> Result<Vec<usize>, MigrateError> {
        match self.transfer {
            Transfer::Migrate => {
                let bytes = which.iter().map(|&i| state[i].bytes).sum();
                if let Some(rate) = &self.job.rate {
                    rate.acquire(which.len() as u64, bytes).await;
                }
                let refused = self.migrate(t, keys, which).await?;
                let ok: Vec<usize> = match refused {
                    None => which.to_vec(),
                    // One key's refusal fails the whole MIGRATE's reply: find which, one by one.
                    Some(_) if which.len() > 1 => {
                        let mut ok = Vec::new();
                        for &i in which {
                            match self.migrate(t, keys, &[i]).await? {
                                None => ok.push(i),
                                Some(e) => self.refused(&keys[i], &e),
                            }
                        }
                        ok
                    }
                    Some(e) => {
                        self.refused(&keys[which[0]], &e);
                        Vec::new()
                    }
                };
                let written: u64 = ok.iter().map(|&i| state[i].bytes).sum();
                Progress::add(&self.job.progress.bytes, written);
                Ok(ok)
            }
            Transfer::DumpRestore => {
                Ok(self.dump_restore(t, keys, which, Restore::Replace).await?.0)
            }
        }
    }

    /// A key the target (or the source) refused: counted failed and logged.
    fn refused(&self, key: &[u8], error: &str) {
        tracing::warn!(key = %show(key), source = %self.job.source.name, error, "the key was not copied");
        Progress::add(&self.job.progress.failed, 1);
    }

    /// One `MIGRATE … COPY REPLACE … KEYS` of `which` to target `t`: `None` when it went (`+OK`, or
    /// `+NOKEY`: none of them exists any more), `Some(error)` for a refusal that may concern a key.
    ///
    /// # Errors
    /// The source cannot reach the target (`IOERR`), or the target refuses its password: every key
    /// would fail the same way.
    async fn migrate(
        &mut self,
        t: usize,
        keys: &[Vec<u8>],
        which: &[usize],
    ) -> Result<Option<String>, MigrateError> {
        let job = &self.job;
        let ep: &Endpoint = job.targets.get(t).ok_or_else(|| route_error(job, t))?;
        let Some((host, port)) = ep.host_port() else {
            return Err(self.source.refused(format!(
                "MIGRATE needs a TCP address for {} (it is {}): use the DUMP/RESTORE transfer",
                ep.name, ep.addr
            )));
        };
        let port = port.to_string();
        let db = ep.db.to_string();
        // MIGRATE's own I/O timeout below ours, so its IOERR names the problem before we time out.
        let ms = (job.timeout.as_millis() / 2).max(1).to_string();
        let mut args: Vec<&[u8]> = vec![
            b"MIGRATE",
            host.as_bytes(),
            port.as_bytes(),
            b"",
            db.as_bytes(),
            ms.as_bytes(),
            b"COPY",
            b"REPLACE",
        ];
        if let Some(pw) = &ep.auth {
            args.extend([&b"AUTH"[..], pw.as_bytes()]);
        }
        args.push(b"KEYS");
        args.extend(which.iter().map(|&i| keys[i].as_slice()));
        let reply = self.source.call(&args).await?;
        match reply {
            Value::Simple(_) => Ok(None),
            Value::Error(e) => {
                let fatal = e.starts_with("IOERR")
                    || ["NOAUTH", "WRONGPASS", "NOPERM", "invalid password", "AUTH"]
                        .iter()
                        .any(|w| e.contains(w));
                if fatal {
                    return Err(self
                        .source
                        .refused(format!("MIGRATE to {} ({}): {e}", ep.name, ep.addr)));
                }
                Ok(Some(e))
            }
            other => Err(self.source.refused(format!("MIGRATE answered {other:?}"))),
        }
    }

    /// `PTTL` + `DUMP` of `which` on the source, `RESTORE` on target `t` (`mode`): the indexes
    /// restored or gone on the source (the next pass tells), and those the target already held
    /// ([`Restore::IfAbsent`]: nothing written, to be compared); the others are counted failed.
    ///
    /// The expiry travels as `MIGRATE` sends it, relative: the `PTTL` read less the time since the
    /// read was sent (the rate limit's wait included), so the copy never outlives its source and
    /// the servers' clocks need not agree (`ABSTTL` would need them to).
    async fn dump_restore(
        &mut self,
        t: usize,
        keys: &[Vec<u8>],
        which: &[usize],
        mode: Restore,
    ) -> Result<(Vec<usize>, Vec<usize>), MigrateError> {
        let mut p = Pipeline::new();
        for &i in which {
            p.cmd(&[&b"PTTL"[..], &keys[i]]);
            p.cmd(&[&b"DUMP"[..], &keys[i]]);
        }
        let read_at = Instant::now();
        let replies = self.source.run(&p).await?;
        let (mut dumped, mut ok, mut bytes) = (Vec::new(), Vec::new(), 0u64);
        for (&i, pair) in which.iter().zip(replies.chunks_exact(2)) {
            let [ttl, dump] = pair else { continue };
            let payload = match dump {
                Value::Bulk(b) => b,
                Value::Null => {
                    ok.push(i); // gone on the source: the next pass counts it.
                    continue;
                }
                other => {
                    self.refused(&keys[i], &format!("DUMP: {other:?}"));
                    continue;
                }
            };
            let ttl = match ttl.integer() {
                Some(-2) => {
                    ok.push(i);
                    continue;
                }
                Some(ms) => ms,
                None => {
                    self.refused(&keys[i], &format!("PTTL: {ttl:?}"));
                    continue;
                }
            };
            bytes += payload.len() as u64;
            dumped.push((i, ttl, payload));
        }
        if dumped.is_empty() {
            return Ok((ok, Vec::new()));
        }
        if let Some(rate) = &self.job.rate {
            rate.acquire(dumped.len() as u64, bytes).await;
        }
        let since_read = i64::try_from(read_at.elapsed().as_millis()).unwrap_or(i64::MAX);
        let mut restore = Pipeline::new();
        let mut sent = Vec::new();
        for (i, ttl, payload) in dumped {
            let ttl = match ttl {
                // No expiry (-1; anything else negative is not a TTL Redis gives).
                ms if ms < 0 => 0,
                // Expired since the read: gone on the source too by now (the next pass tells).
                ms if ms <= since_read => {
                    ok.push(i);
                    continue;
                }
                ms => ms - since_read,
            }
            .to_string();
            let mut args = vec![&b"RESTORE"[..], &keys[i], ttl.as_bytes(), payload];
            if mode == Restore::Replace {
                args.push(b"REPLACE");
            }
            restore.cmd(&args);
            sent.push((i, payload.len() as u64));
        }
        let mut held = Vec::new();
        if restore.is_empty() {
            return Ok((ok, held));
        }
        let replies = self.target(t).await?.run(&restore).await?;
        let mut written_bytes = 0;
        for (&(i, size), r) in sent.iter().zip(&replies) {
            match r.error() {
                None => {
                    ok.push(i);
                    written_bytes += size;
                }
                Some(e) if mode == Restore::IfAbsent && e.starts_with("BUSYKEY") => held.push(i),
                Some(e) => {
                    let e = format!("RESTORE on {}: {e}", self.job.targets[t].name);
                    self.refused(&keys[i], &e);
                }
            }
        }
        Progress::add(&self.job.progress.bytes, written_bytes);
        Ok((ok, held))
    }
}

/// The route named a target the job does not have.
pub fn route_error(job: &Job, t: usize) -> MigrateError {
    MigrateError::Protocol {
        server: job.source.name.clone(),
        reason: format!(
            "the route sent a key to target {t}, but the job has {} targets",
            job.targets.len()
        ),
    }
}

/// A key for a log line (lossy UTF-8, cut at 200 bytes).
pub fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(200)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_restore_is_the_default_transfer_and_keys_show_cut() {
        assert_eq!(Transfer::default(), Transfer::DumpRestore);
        assert_eq!(show(&[b'a'; 300]).len(), 200);
        assert_eq!(show(b"\xffk"), "\u{fffd}k");
    }
}
