//! Writing a pool's membership: what `shardring members` does (publish a YAML pool, add, remove,
//! re-weight, register under a lease), what `shardring migrate` does (publish a next membership, cut
//! over to it, drop it: [`publish_next`], [`cut_over`], [`drop_next`]), and what each proxy does
//! ([`register_proxy`], read back with [`list_proxies`]). Every write keeps to the
//! [layout](crate::layout).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use shardring::membership::{Member, MembershipSnapshot};
use tokio_util::sync::CancellationToken;

use crate::error::EtcdError;
use crate::kind::{Kind, Kinds};
pub use crate::layout::Registration;
use crate::layout::{format_registration, format_value, parse_registration, MemberSet};
use crate::source::{EtcdSource, PoolRead};

/// What [`publish`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// The revision of the transaction (0 when nothing had to change).
    pub revision: i64,
    /// Members written (new or changed).
    pub written: usize,
    /// Members deleted (in etcd, not in the new set).
    pub deleted: usize,
}

fn failed(source: &EtcdSource, what: String, e: etcd_client::Error) -> EtcdError {
    EtcdError::Request {
        endpoints: source.endpoints().to_vec(),
        what,
        source: e.into(),
    }
}

/// Makes the pool's servers in etcd exactly `members`, in one transaction (so followers see one
/// revision and build one ring): writes the new and changed ones, deletes the ones not in `members`.
/// Guarded by the revision it read, so a concurrent writer makes it fail rather than be overwritten.
/// etcd caps a transaction's operations (`--max-txn-ops`, 128 by default): a pool whose publication
/// changes more servers than that is refused by etcd as a whole (raise the limit, or publish in steps).
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached, or [`EtcdError::Refused`] when the pool changed between
/// the read and the write (run it again).
pub async fn publish(source: &EtcdSource, members: &[Member]) -> Result<Published, EtcdError> {
    publish_kind(source, members, Kind::Ring).await
}

/// [`publish`] of a member set of `kind`: the pool's `kind` key is written in the same
/// transaction (deleted for a ring), so that no participant reads the servers without it.
///
/// # Errors
/// As [`publish`]; [`EtcdError::Refused`] for [`Kind::Unknown`].
pub async fn publish_kind(
    source: &EtcdSource,
    members: &[Member],
    kind: Kind,
) -> Result<Published, EtcdError> {
    let mut client = source.connect().await?;
    let keys = source.keys();
    let prefix = keys.servers_prefix().to_string();
    let current = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| failed(source, format!("range {prefix}"), e))?;
    let read_revision = current.header().map_or(0, |h| h.revision());
    let kind_key = keys.kind_key(MemberSet::Current);
    let kind_now = client
        .get(kind_key, None)
        .await
        .map_err(|e| failed(source, format!("get {kind_key}"), e))?;
    let mut ops = kind_ops(kind_key, kind_now.kvs().first(), kind)?;
    // A changed kind is a key written (or deleted: counted as written, it says what the servers are).
    let mut out = Published {
        written: ops.len(),
        ..Published::default()
    };
    for kv in current.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let keep = keys
            .name_of(&key)
            .is_some_and(|name| members.iter().any(|m| m.name() == name));
        if !keep {
            ops.push(TxnOp::delete(kv.key().to_vec(), None));
            out.deleted += 1;
        }
    }
    for m in members {
        let key = keys.server_key(m.name());
        let value = format_value(m);
        let unchanged = current
            .kvs()
            .iter()
            .any(|kv| kv.key() == key.as_bytes() && kv.value() == value.as_bytes());
        if !unchanged {
            ops.push(TxnOp::put(key, value, None));
            out.written += 1;
        }
    }
    if ops.is_empty() {
        return Ok(out);
    }
    // Nothing under the prefix, nor the kind, may have changed since the read: no key's mod
    // revision past it.
    let txn = Txn::new()
        .when([
            Compare::mod_revision(prefix.as_str(), CompareOp::Less, read_revision + 1)
                .with_prefix(),
            kind_unchanged(kind_key, kind_now.kvs().first(), read_revision),
        ])
        .and_then(ops);
    let response = client
        .txn(txn)
        .await
        .map_err(|e| failed(source, format!("publish to {prefix}"), e))?;
    if !response.succeeded() {
        return Err(EtcdError::Refused(format!(
            "{prefix} changed while publishing; nothing was written, run it again"
        )));
    }
    out.revision = response.header().map_or(0, |h| h.revision());
    Ok(out)
}

/// Writes one member (adds it, or changes its address or weight), optionally under a lease so that it
/// leaves the pool when the lease expires. Returns the write's revision.
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached or refuses.
pub async fn put_member(
    source: &EtcdSource,
    member: &Member,
    lease: Option<i64>,
) -> Result<i64, EtcdError> {
    let mut client = source.connect().await?;
    let key = source.keys().server_key(member.name());
    let options = lease.map(|id| PutOptions::new().with_lease(id));
    let r = client
        .put(key.as_str(), format_value(member), options)
        .await
        .map_err(|e| failed(source, format!("put {key}"), e))?;
    Ok(r.header().map_or(0, |h| h.revision()))
}

/// Deletes the member named `name`. Returns the delete's revision.
///
/// # Errors
/// [`EtcdError::Refused`] when there is no such member; [`EtcdError`] when etcd cannot be reached.
pub async fn remove_member(source: &EtcdSource, name: &str) -> Result<i64, EtcdError> {
    let mut client = source.connect().await?;
    let key = source.keys().server_key(name);
    let r = client
        .delete(key.as_str(), None)
        .await
        .map_err(|e| failed(source, format!("delete {key}"), e))?;
    if r.deleted() == 0 {
        return Err(EtcdError::Refused(format!("no server {name:?} at {key}")));
    }
    Ok(r.header().map_or(0, |h| h.revision()))
}

/// The names of the pools that have at least one server key under `source`'s prefix, sorted: for
/// telling a pool that does not exist from an empty one, and naming the ones that do.
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached.
pub async fn pools(source: &EtcdSource) -> Result<Vec<String>, EtcdError> {
    let mut client = source.connect().await?;
    let prefix = source.prefix();
    let all = client
        .get(
            prefix.as_str(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .map_err(|e| failed(source, format!("range {prefix}"), e))?;
    let mut names: Vec<String> = all
        .kvs()
        .iter()
        .filter_map(|kv| {
            let key = String::from_utf8_lossy(kv.key());
            let rest = key.strip_prefix(prefix.as_str())?;
            let (pool, tail) = rest.split_once('/')?;
            tail.starts_with("servers/").then(|| pool.to_owned())
        })
        .collect();
    names.dedup();
    Ok(names)
}

/// The pool as it is now (members, malformed keys, revision).
///
/// # Errors
/// As [`EtcdSource::read`].
pub async fn list(source: &EtcdSource) -> Result<PoolRead, EtcdError> {
    source.read().await
}

/// The members of `read` with `member` added or replaced.
pub fn with_member(read: &MembershipSnapshot, member: Member) -> Vec<Member> {
    let mut members: Vec<Member> = read
        .members()
        .iter()
        .filter(|m| m.name() != member.name())
        .cloned()
        .collect();
    members.push(member);
    members
}

/// A client for what this module does not cover (leases in tests and tools).
///
/// # Errors
/// As [`EtcdSource::connect`].
pub async fn client(source: &EtcdSource) -> Result<Client, EtcdError> {
    source.connect().await
}

// ---------------------------------------------------------------------------------------------------
// The next membership and cut-over (what `shardring migrate` runs).

/// Runs `request` within the source's request timeout, naming `what` in its error.
async fn timed<T>(
    source: &EtcdSource,
    what: impl Into<String>,
    request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    let what = what.into();
    match tokio::time::timeout(source.request_timeout(), request).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(failed(source, what, e)),
        Err(_) => Err(EtcdError::Timeout {
            endpoints: source.endpoints().to_vec(),
            what,
            timeout: source.request_timeout(),
        }),
    }
}

/// The revision in a response header (0 when it has none).
fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map_or(0, etcd_client::ResponseHeader::revision)
}

/// `members` by name, refusing an empty set and repeated names.
fn by_name<'m>(
    members: &'m [Member],
    what: &str,
) -> Result<BTreeMap<&'m str, &'m Member>, EtcdError> {
    if members.is_empty() {
        return Err(EtcdError::Refused(format!(
            "an empty {what}: a pool with no next servers has no planned change (drop the next membership instead)"
        )));
    }
    let mut out = BTreeMap::new();
    for m in members {
        if out.insert(m.name(), m).is_some() {
            return Err(EtcdError::Refused(format!(
                "the server name {:?} is given twice in the {what}",
                m.name()
            )));
        }
    }
    Ok(out)
}

/// The compares that hold only while nothing under `prefix` changed since `kvs` were read at `revision`:
/// no key under it written after `revision` (a new or changed key), and each key read still at its mod
/// revision (a deleted one has none).
fn unchanged_since(prefix: &str, revision: i64, kvs: &[&etcd_client::KeyValue]) -> Vec<Compare> {
    let mut compares =
        vec![Compare::mod_revision(prefix, CompareOp::Less, revision + 1).with_prefix()];
    compares.extend(
        kvs.iter().map(|kv| {
            Compare::mod_revision(kv.key().to_vec(), CompareOp::Equal, kv.mod_revision())
        }),
    );
    compares
}

/// The operations that make the kind key `key` (now `now`) say `kind`: none when it does already,
/// a delete for a ring (no key means a ring), a put otherwise.
fn kind_ops(
    key: &str,
    now: Option<&etcd_client::KeyValue>,
    kind: Kind,
) -> Result<Vec<TxnOp>, EtcdError> {
    let was = now.map_or(Kind::Ring, |kv| {
        Kind::parse(kv.key(), kv.value()).unwrap_or(Kind::Unknown)
    });
    Ok(match kind {
        Kind::Unknown => {
            return Err(EtcdError::Refused(format!(
                "{key}: a member set's kind is a ring or a Redis Cluster"
            )))
        }
        _ if was == kind && (kind != Kind::Ring || now.is_none()) => Vec::new(),
        Kind::Ring => vec![TxnOp::delete(key, None)],
        _ => vec![TxnOp::put(key, kind.as_str(), None)],
    })
}

/// That the kind key `key` is as it was read at `revision` (`read`: its key-value then, if it
/// existed): the same mod revision when it existed (a deleted key's is 0, so a delete counts), none
/// past `revision` when it did not.
fn kind_unchanged(key: &str, read: Option<&etcd_client::KeyValue>, revision: i64) -> Compare {
    match read {
        Some(kv) => Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
        None => Compare::mod_revision(key, CompareOp::Less, revision + 1),
    }
}

/// How many times [`publish_next`] reads and writes again when another writer got in between.
const PUBLISH_NEXT_ATTEMPTS: usize = 5;

/// Makes the pool's next membership (`next/`) exactly `members`, in one transaction: deletes the next
/// servers not in `members`, writes the new and changed ones. The transaction is guarded by what it
/// read, and read and written again (a few times) when another writer changed `next/` in between, so
/// the outcome is `members` whatever ran concurrently. Returns the transaction's revision (the read's
/// when nothing had to change). The same `--max-txn-ops` limit as [`publish`] applies.
///
/// # Errors
/// [`EtcdError::Refused`] for an empty `members` (use [`drop_next`]) or a name given twice;
/// [`EtcdError::Changed`] when other writers kept changing `next/`; [`EtcdError`] when etcd cannot be
/// reached.
pub async fn publish_next(source: &EtcdSource, members: &[Member]) -> Result<i64, EtcdError> {
    publish_next_kind(source, members, Kind::Ring).await
}

/// [`publish_next`] of a member set of `kind`: the pool's `next-kind` key is written in the same
/// transaction (deleted for a ring).
///
/// # Errors
/// As [`publish_next`]; [`EtcdError::Refused`] for [`Kind::Unknown`].
pub async fn publish_next_kind(
    source: &EtcdSource,
    members: &[Member],
    kind: Kind,
) -> Result<i64, EtcdError> {
    let wanted = by_name(members, "next membership")?;
    let kind_key = source.keys().kind_key(MemberSet::Next).to_owned();
    let mut client = source.connect().await?;
    let keys = source.keys();
    let prefix = keys.next_prefix().to_string();
    let mut read_revision = 0;
    for _ in 0..PUBLISH_NEXT_ATTEMPTS {
        let read = timed(
            source,
            format!("range {prefix}"),
            client.get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        read_revision = revision_of(read.header());
        let kind_now = timed(
            source,
            format!("get {kind_key}"),
            client.get(kind_key.as_str(), None),
        )
        .await?;
        let mut ops = kind_ops(&kind_key, kind_now.kvs().first(), kind)?;
        for kv in read.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if !keys
                .next_name_of(&key)
                .is_some_and(|n| wanted.contains_key(n))
            {
                ops.push(TxnOp::delete(kv.key().to_vec(), None));
            }
        }
        for m in wanted.values() {
            let key = keys.next_key(m.name());
            let value = format_value(m);
            if !read
                .kvs()
                .iter()
                .any(|kv| kv.key() == key.as_bytes() && kv.value() == value.as_bytes())
            {
                ops.push(TxnOp::put(key, value, None));
            }
        }
        if ops.is_empty() {
            return Ok(read_revision);
        }
        let kvs: Vec<_> = read.kvs().iter().collect();
        let mut compares = unchanged_since(&prefix, read_revision, &kvs);
        compares.push(kind_unchanged(
            &kind_key,
            kind_now.kvs().first(),
            read_revision,
        ));
        let txn = Txn::new().when(compares).and_then(ops);
        let response = timed(source, format!("publish to {prefix}"), client.txn(txn)).await?;
        if response.succeeded() {
            return Ok(revision_of(response.header()));
        }
        tracing::debug!(%prefix, read_revision, "next membership changed while publishing it; again");
    }
    Err(EtcdError::Changed {
        prefix,
        read_revision,
        what: format!("publishing the next membership ({PUBLISH_NEXT_ATTEMPTS} attempts)"),
    })
}

/// The pool's current and next membership, read at one revision (both snapshots carry it); the next is
/// `None` when no server under `next/` could be read. Malformed servers are left out (and logged), as
/// [`EtcdSource::read`] leaves them out. Reads `next/` whether or not `source` was built
/// [`with_next`](crate::EtcdSourceBuilder::with_next).
///
/// # Errors
/// As [`EtcdSource::read`].
pub async fn read_planned(
    source: &EtcdSource,
) -> Result<(MembershipSnapshot, Option<MembershipSnapshot>), EtcdError> {
    let read = source.read_planned().await?;
    for bad in &read.malformed {
        tracing::warn!(%bad, "skipping a malformed server");
    }
    Ok((read.snapshot, read.next))
}

/// Cuts over to the next membership: in **one** transaction, the servers under `next/` become the
/// servers under `servers/`, and the old servers become the next (a swap), so that proxies that have
/// switched dual-write back to the old owners while others still read from them. An earlier
/// change's deletion still pending ([`drop_next_pending_deletion`]) is given up in the same
/// transaction: its keys may be this change's to copy. Returns the transaction's revision;
/// [`drop_next`] then ends the change.
///
/// The transaction is guarded: it writes only if nothing under `servers/` or `next/` changed since they
/// were read (no key written after the read's revision, every key read still at its mod revision, so an
/// added, changed or deleted server all count). With `expected_revision`, the read is made *at* that
/// revision (e.g. that of the [`Update::Planned`](crate::Update::Planned) a migration copied keys
/// for), so a change made at any time after it makes the cut-over fail; with `None`, at the current one.
/// etcd's `--max-txn-ops` (128 by default) caps the compares too: one per key under `servers/` and
/// `next/`, plus five, so larger pools need the limit raised.
///
/// # Errors
/// - [`EtcdError::NoNext`] when there is no server under `next/`;
/// - [`EtcdError::Changed`] when `servers/` or `next/` changed since the read (nothing was written);
/// - [`EtcdError::Malformed`] when a server under either cannot be read (nothing was written);
/// - [`EtcdError::Request`] when etcd cannot be reached, or `expected_revision` is compacted away or in
///   the future.
pub async fn cut_over(
    source: &EtcdSource,
    expected_revision: Option<i64>,
) -> Result<i64, EtcdError> {
    let mut client = source.connect().await?;
    let keys = source.keys();
    let pool = keys.pool_prefix().to_string();
    let mut options = GetOptions::new().with_prefix();
    if let Some(revision) = expected_revision {
        options = options.with_revision(revision);
    }
    let what = match expected_revision {
        Some(r) => format!("range {pool} at revision {r}"),
        None => format!("range {pool}"),
    };
    let read = timed(source, what, client.get(pool.as_str(), Some(options))).await?;
    let read_revision = expected_revision.unwrap_or_else(|| revision_of(read.header()));
    let (mut current, mut next) = (Vec::new(), Vec::new());
    let (mut current_kvs, mut next_kvs) = (Vec::new(), Vec::new());
    let mut kinds = Kinds::default();
    let (mut kind_kv, mut next_kind_kv) = (None, None);
    for kv in read.kvs() {
        if let Some(set) = keys.kind_of(kv.key()) {
            let kind = Kind::parse(kv.key(), kv.value()).map_err(EtcdError::Malformed)?;
            match set {
                MemberSet::Current => (kinds.current, kind_kv) = (kind, Some(kv)),
                MemberSet::Next => (kinds.next, next_kind_kv) = (kind, Some(kv)),
            }
        } else if kv.key().starts_with(keys.servers_prefix().as_bytes()) {
            current.push(
                keys.parse(kv.key(), kv.value())
                    .map_err(EtcdError::Malformed)?,
            );
            current_kvs.push(kv);
        } else if kv.key().starts_with(keys.next_prefix().as_bytes()) {
            next.push(
                keys.parse_next(kv.key(), kv.value())
                    .map_err(EtcdError::Malformed)?,
            );
            next_kvs.push(kv);
        }
    }
    if next.is_empty() {
        return Err(EtcdError::NoNext {
            next_prefix: keys.next_prefix().to_string(),
        });
    }
    let mut ops = Vec::new();
    // servers/ := next; next/ := the old servers. Each key is deleted or put, never both (etcd refuses a
    // transaction that writes one key twice).
    swap_ops(&mut ops, &current, &next, |n| keys.server_key(n));
    swap_ops(&mut ops, &next, &current, |n| keys.next_key(n));
    // The kinds go with their sets: kind := next-kind, next-kind := kind.
    for (set, kind) in [
        (MemberSet::Current, kinds.next),
        (MemberSet::Next, kinds.current),
    ] {
        ops.push(match kind {
            Kind::Ring => TxnOp::delete(keys.kind_key(set), None),
            _ => TxnOp::put(keys.kind_key(set), kind.as_str(), None),
        });
    }
    ops.push(TxnOp::put(
        keys.cut_over_key(),
        read_revision.to_string(),
        None,
    ));
    ops.push(TxnOp::delete(keys.delete_moved_key(), None));
    let mut compares = unchanged_since(keys.servers_prefix(), read_revision, &current_kvs);
    compares.extend(unchanged_since(
        keys.next_prefix(),
        read_revision,
        &next_kvs,
    ));
    compares.push(kind_unchanged(
        keys.kind_key(MemberSet::Current),
        kind_kv,
        read_revision,
    ));
    compares.push(kind_unchanged(
        keys.kind_key(MemberSet::Next),
        next_kind_kv,
        read_revision,
    ));
    let txn = Txn::new().when(compares).and_then(ops);
    let response = timed(source, format!("cut over {pool}"), client.txn(txn)).await?;
    if !response.succeeded() {
        return Err(EtcdError::Changed {
            prefix: pool,
            read_revision,
            what: "cutting over to the next membership".into(),
        });
    }
    Ok(revision_of(response.header()))
}

/// The operations that turn the set `from` (as it is under `key_of`) into `to`: deletes of the names
/// not in `to`, puts of the new and changed members.
fn swap_ops(ops: &mut Vec<TxnOp>, from: &[Member], to: &[Member], key_of: impl Fn(&str) -> String) {
    for old in from {
        if !to.iter().any(|m| m.name() == old.name()) {
            ops.push(TxnOp::delete(key_of(old.name()), None));
        }
    }
    for new in to {
        if !from.contains(new) {
            ops.push(TxnOp::put(key_of(new.name()), format_value(new), None));
        }
    }
}

/// Deletes the next membership (the change is finished, or called off): proxies stop dual-writing.
/// The cut-over mark goes with it, in the same transaction. Returns the delete's revision (also
/// when there was nothing to delete).
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached.
pub async fn drop_next(source: &EtcdSource) -> Result<i64, EtcdError> {
    drop_next_recording(source, None).await
}

/// [`drop_next`], recording in the same transaction that the change's moved keys are still to be
/// deleted from their old servers: `record` (the migration's own text) is kept under the pool's
/// `delete-moved` key until [`clear_pending_deletion`], so a deletion that fails is not forgotten
/// with the next membership.
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached.
pub async fn drop_next_pending_deletion(
    source: &EtcdSource,
    record: &str,
) -> Result<i64, EtcdError> {
    drop_next_recording(source, Some(record)).await
}

async fn drop_next_recording(source: &EtcdSource, record: Option<&str>) -> Result<i64, EtcdError> {
    let mut client = source.connect().await?;
    let keys = source.keys();
    let prefix = keys.next_prefix().to_string();
    let mut ops = vec![
        TxnOp::delete(prefix.as_str(), Some(DeleteOptions::new().with_prefix())),
        TxnOp::delete(keys.kind_key(MemberSet::Next), None),
        TxnOp::delete(keys.cut_over_key(), None),
    ];
    if let Some(record) = record {
        ops.push(TxnOp::put(keys.delete_moved_key(), record, None));
    }
    let r = timed(
        source,
        format!("delete {prefix}"),
        client.txn(Txn::new().and_then(ops)),
    )
    .await?;
    Ok(revision_of(r.header()))
}

/// The record [`drop_next_pending_deletion`] left, while the deletion it stands for is not done.
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached.
pub async fn pending_deletion(source: &EtcdSource) -> Result<Option<String>, EtcdError> {
    let mut client = source.connect().await?;
    let key = source.keys().delete_moved_key();
    let read = timed(source, format!("get {key}"), client.get(key, None)).await?;
    Ok(read
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
}

/// Removes the record of a pending deletion (done, or given up: the servers changed since).
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached.
pub async fn clear_pending_deletion(source: &EtcdSource) -> Result<i64, EtcdError> {
    let mut client = source.connect().await?;
    let key = source.keys().delete_moved_key();
    let r = timed(source, format!("delete {key}"), client.delete(key, None)).await?;
    Ok(revision_of(r.header()))
}

/// Whether the pool is between a [`cut_over`] and the [`drop_next`] that finishes its change (a
/// migration stopped there: `next/` holds the membership that was current before): the revision
/// the cut-over read the memberships at, when so.
///
/// # Errors
/// [`EtcdError`] when etcd cannot be reached.
pub async fn cut_over_pending(source: &EtcdSource) -> Result<Option<i64>, EtcdError> {
    let mut client = source.connect().await?;
    let key = source.keys().cut_over_key();
    let read = timed(source, format!("get {key}"), client.get(key, None)).await?;
    Ok(read.kvs().first().map(|kv| {
        String::from_utf8_lossy(kv.value())
            .trim()
            .parse()
            .unwrap_or(0)
    }))
}

// ---------------------------------------------------------------------------------------------------
// Proxy registrations.

/// The lease a proxy's registration is under unless told otherwise.
pub const DEFAULT_REGISTRATION_TTL: Duration = Duration::from_secs(10);

/// A proxy's registration under `proxies/<id>`, kept alive by a spawned task until this is dropped
/// (which revokes the lease, best-effort, so the key goes at once), [`revoke`](RegistrationHandle::revoke)d
/// or [`abandon`](RegistrationHandle::abandon)ed.
///
/// The task renews the lease every quarter of its time to live. When etcd is lost it logs, backs off
/// (the source's `retry_min` to `retry_max`) and tries again; when the lease is gone by then (it expired,
/// or was revoked), it grants a new one and writes the last value again, so the registration survives
/// an outage of etcd.
pub struct RegistrationHandle {
    /// What the handle and its task share.
    shared: Arc<Registered>,
    /// Stops the task.
    stop: CancellationToken,
    /// The keep-alive task.
    task: Option<tokio::task::JoinHandle<()>>,
}

/// What a registration handle and its keep-alive task share.
struct Registered {
    /// Where to write.
    source: EtcdSource,
    /// `proxies/<id>`.
    key: String,
    /// `roster/<id>`: the same value without a lease, so that the participant is still known when
    /// its lease lapses.
    roster_key: String,
    /// Which process wrote the roster entry (`instance=` in its value): a clean stop removes the entry
    /// only when it is still this process's, never a successor's of the same id.
    instance: String,
    /// The lease's time to live, in seconds.
    ttl: i64,
    /// A connection (cloned for each request).
    client: Client,
    /// The last value asked for, and the lease it is written under; held over each write, so that
    /// writes land in the order they were asked for and a re-registration writes the latest value.
    held: tokio::sync::Mutex<Held>,
    /// The lease now, for reading without the lock.
    lease: AtomicI64,
    /// Whether the task revokes the lease when it stops.
    revoke_on_stop: AtomicBool,
    /// When etcd last confirmed the registration (a lease renewed or granted and written): what a
    /// participant's fence reads.
    confirmed: std::sync::Mutex<Option<std::time::Instant>>,
}

/// The value and the lease.
#[derive(Debug)]
struct Held {
    /// The last value asked for.
    value: Registration,
    /// The lease it is under.
    lease: i64,
}

impl Registered {
    /// Grants a lease and writes the value under it.
    async fn grant_and_put(&self, held: &mut Held) -> Result<(), EtcdError> {
        let mut client = self.client.clone();
        let lease = timed(
            &self.source,
            format!("grant a {} s lease for {}", self.ttl, self.key),
            client.lease_grant(self.ttl, None),
        )
        .await?;
        // The new lease is the registration's only once the value is written under it: a lease
        // kept alive with nothing written under it would confirm a place the participant does not
        // have (its fence lifted, its key absent). Until then the old lease stays, which the
        // keep-alive task finds gone and replaces again.
        let previous = std::mem::replace(&mut held.lease, lease.id());
        let asked = std::time::Instant::now();
        if let Err(e) = self.put(held).await {
            held.lease = previous;
            return Err(e);
        }
        self.lease.store(lease.id(), Ordering::Relaxed);
        self.confirm(asked);
        Ok(())
    }

    /// etcd confirmed the registration as of `at` (when the request that it answered was sent).
    fn confirm(&self, at: std::time::Instant) {
        if let Ok(mut c) = self.confirmed.lock() {
            *c = Some(c.map_or(at, |prev| prev.max(at)));
        }
    }

    /// Writes the held value under the held lease, and into the roster, in one transaction.
    async fn put(&self, held: &Held) -> Result<(), EtcdError> {
        let mut client = self.client.clone();
        let value = format_registration(&held.value);
        let txn = Txn::new().and_then([
            TxnOp::put(
                self.key.as_str(),
                value.as_str(),
                Some(PutOptions::new().with_lease(held.lease)),
            ),
            TxnOp::put(
                self.roster_key.as_str(),
                format!("{value} instance={}", self.instance),
                None,
            ),
        ]);
        timed(&self.source, format!("put {}", self.key), client.txn(txn))
            .await
            .map(drop)
    }

    /// Takes this process's entry out of the roster (a clean stop): deleted only while it is still
    /// the one this process wrote.
    async fn leave_roster(&self) -> Result<(), EtcdError> {
        let mut client = self.client.clone();
        let read = timed(
            &self.source,
            format!("get {}", self.roster_key),
            client.get(self.roster_key.as_str(), None),
        )
        .await?;
        let Some(kv) = read.kvs().first() else {
            return Ok(());
        };
        let mine = String::from_utf8_lossy(kv.value())
            .split_whitespace()
            .any(|t| t.strip_prefix("instance=") == Some(self.instance.as_str()));
        if !mine {
            return Ok(());
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(
                self.roster_key.as_str(),
                CompareOp::Equal,
                kv.mod_revision(),
            )])
            .and_then([TxnOp::delete(self.roster_key.as_str(), None)]);
        timed(
            &self.source,
            format!("delete {}", self.roster_key),
            client.txn(txn),
        )
        .await
        .map(drop)
    }

    /// Keeps the lease alive until `stop` (`Ok(true)`), the lease is found gone and replaced
    /// (`Ok(false)`: keep the new one alive), or a failure.
    async fn keep(
        &self,
        stop: &CancellationToken,
        interval: Duration,
        lost: &mut bool,
    ) -> Result<bool, EtcdError> {
        let mut client = self.client.clone();
        let lease = self.lease.load(Ordering::Relaxed);
        if *lost {
            // After a failure, ask first whether the lease outlived it: etcd refuses a keep-alive of
            // an expired lease ("lease not found") rather than answering it with TTL 0, so without
            // this a proxy cut off for longer than its lease would retry the dead lease forever and
            // never register again. An unknown lease has TTL -1.
            let ttl = timed(
                &self.source,
                format!("read lease {lease:x} of {}", self.key),
                client.lease_time_to_live(lease, None),
            )
            .await?
            .ttl();
            if ttl <= 0 {
                return self.register_again(lease, lost).await;
            }
        }
        let what = format!("keep lease {lease:x} of {} alive", self.key);
        let (mut keeper, mut stream) =
            timed(&self.source, what.as_str(), client.lease_keep_alive(lease)).await?;
        loop {
            let asked = std::time::Instant::now();
            let answer = async {
                keeper.keep_alive().await?;
                stream.message().await
            };
            let answer = timed(&self.source, what.as_str(), answer).await?;
            let Some(answer) = answer else {
                return Err(EtcdError::Refused(format!(
                    "{what}: etcd closed the stream"
                )));
            };
            if answer.ttl() <= 0 {
                // The lease is gone (revoked, or expired with the keep-alive stream still open).
                return self.register_again(lease, lost).await;
            }
            self.confirm(asked);
            if std::mem::take(lost) {
                tracing::info!(key = %self.key, "etcd reachable again; proxy registration kept");
            }
            tokio::select! {
                () = stop.cancelled() => return Ok(true),
                () = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// The lease `old` is gone (it expired while etcd could not be reached, or was revoked): a new one
    /// is granted and the last value written under it. `Ok(false)`: keep the new lease alive.
    async fn register_again(&self, old: i64, lost: &mut bool) -> Result<bool, EtcdError> {
        let mut held = self.held.lock().await;
        self.grant_and_put(&mut held).await?;
        tracing::info!(key = %self.key, old = format!("{old:x}"), new = format!("{:x}", held.lease), "proxy registration's lease was gone; registered again under a new one");
        *lost = false;
        Ok(false)
    }

    /// The keep-alive task: [`keep`](Registered::keep) with back-off until `stop`, then a revoke.
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        // A quarter of the time to live: a participant fences after 60 % of it without a renewal
        // (`shardring_proxy`'s fence), so a late renewal or two costs nothing.
        let interval = Duration::from_millis(u64::try_from(self.ttl).unwrap_or(1) * 1000 / 4)
            .max(Duration::from_millis(100));
        let (retry_min, retry_max) = self.source.retry_bounds();
        let mut backoff = retry_min;
        let mut lost = false;
        loop {
            match self.keep(&stop, interval, &mut lost).await {
                Ok(true) => break,
                Ok(false) => backoff = retry_min,
                Err(error) => {
                    if stop.is_cancelled() {
                        break;
                    }
                    tracing::warn!(
                        key = %self.key,
                        error = %crate::error::error_chain(&error),
                        retry_in = ?backoff,
                        "cannot keep the proxy registration alive; retrying"
                    );
                    lost = true;
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(retry_max);
                }
            }
        }
        if self.revoke_on_stop.load(Ordering::Relaxed) {
            if let Err(error) = self.revoke().await {
                tracing::warn!(key = %self.key, error = %crate::error::error_chain(&error), "could not revoke the proxy registration's lease; it expires by itself");
            }
            if let Err(error) = self.leave_roster().await {
                tracing::warn!(key = %self.roster_key, error = %crate::error::error_chain(&error), "could not take this proxy out of the roster; `shardring members forget` does");
            }
        }
    }

    /// Revokes the lease (its key goes with it).
    async fn revoke(&self) -> Result<(), EtcdError> {
        let lease = self.lease.load(Ordering::Relaxed);
        let mut client = self.client.clone();
        timed(
            &self.source,
            format!("revoke lease {lease:x} of {}", self.key),
            client.lease_revoke(lease),
        )
        .await
        .map(drop)
    }
}

impl RegistrationHandle {
    /// Writes `value` as the registration, under the same lease. The value is kept even when the write
    /// fails: the keep-alive task writes it again when it has to register anew.
    ///
    /// # Errors
    /// [`EtcdError::Refused`] for a value that would not read back the same ([`Registration::check`]);
    /// [`EtcdError`] when etcd cannot be reached.
    pub async fn update(&self, value: &Registration) -> Result<(), EtcdError> {
        value.check().map_err(EtcdError::Refused)?;
        let mut held = self.shared.held.lock().await;
        held.value = value.clone();
        self.shared.put(&held).await
    }

    /// The key written: `<prefix><pool>/proxies/<id>`.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// When etcd last confirmed this registration (renewed its lease, or granted one and took the
    /// value): a participant that has gone longer than its fence time without one fences the keys a
    /// planned change moves. The time the confirmed request was sent, so never later than the truth.
    pub fn confirmed_at(&self) -> Option<std::time::Instant> {
        self.shared.confirmed.lock().ok().and_then(|c| *c)
    }

    /// The lease's time to live.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.shared.ttl).unwrap_or(0))
    }

    /// The lease the key is under now (a new one after a re-registration).
    pub fn lease(&self) -> i64 {
        self.shared.lease.load(Ordering::Relaxed)
    }

    /// Stops keeping the lease alive and revokes it, so the key goes at once, and takes this
    /// participant out of the roster (a clean stop: it serves nothing any more).
    ///
    /// # Errors
    /// [`EtcdError`] when etcd cannot be reached (the key then goes when the lease expires, and the
    /// roster entry stays until `shardring members forget` removes it).
    pub async fn revoke(mut self) -> Result<(), EtcdError> {
        self.shared.revoke_on_stop.store(false, Ordering::Relaxed);
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.shared.revoke().await?;
        self.shared.leave_roster().await
    }

    /// Stops keeping the lease alive *without* revoking it: the key stays until the lease's time to live
    /// runs out, as when the proxy's process dies; the roster entry stays.
    pub fn abandon(mut self) {
        self.shared.revoke_on_stop.store(false, Ordering::Relaxed);
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for RegistrationHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrationHandle")
            .field("key", &self.shared.key)
            .field("ttl", &self.shared.ttl)
            .field("lease", &self.lease())
            .finish_non_exhaustive()
    }
}

impl Drop for RegistrationHandle {
    fn drop(&mut self) {
        // The task sees it, stops, and revokes the lease (unless revoked or abandoned already).
        self.stop.cancel();
    }
}

/// Registers the proxy `id` under `<prefix><pool>/proxies/<id>` with `value`, under a lease of `ttl`
/// (whole seconds, rounded up; e.g. [`DEFAULT_REGISTRATION_TTL`]) kept alive by a spawned task until
/// the handle goes (see [`RegistrationHandle`]). Must run inside a tokio runtime.
///
/// # Errors
/// [`EtcdError::Refused`] for an empty id or one with a `/`, or a value that would not read back the
/// same ([`Registration::check`]); [`EtcdError`] when etcd cannot be reached.
pub async fn register_proxy(
    source: &EtcdSource,
    id: &str,
    value: &Registration,
    ttl: Duration,
) -> Result<RegistrationHandle, EtcdError> {
    if id.is_empty() || id.contains('/') || id.contains(char::is_whitespace) {
        return Err(EtcdError::Refused(format!(
            "the proxy id {id:?} is empty or contains '/' or whitespace"
        )));
    }
    value.check().map_err(EtcdError::Refused)?;
    let ttl = i64::try_from(ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1);
    let shared = Arc::new(Registered {
        source: source.clone(),
        key: source.keys().proxy_key(id),
        roster_key: source.keys().roster_key(id),
        instance: instance(),
        ttl,
        client: source.connect().await?,
        held: tokio::sync::Mutex::new(Held {
            value: value.clone(),
            lease: 0,
        }),
        lease: AtomicI64::new(0),
        revoke_on_stop: AtomicBool::new(true),
        confirmed: std::sync::Mutex::new(None),
    });
    {
        let mut held = shared.held.lock().await;
        shared.grant_and_put(&mut held).await?;
    }
    let stop = CancellationToken::new();
    let task = tokio::spawn(Arc::clone(&shared).run(stop.clone()));
    Ok(RegistrationHandle {
        shared,
        stop,
        task: Some(task),
    })
}

/// A name for this process's registrations that no other process is likely to have: its pid and
/// the time it registered.
fn instance() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}.{nanos:x}", std::process::id())
}

/// Every participant of the pool's roster, by id (sorted), with the last registration it wrote:
/// the ones registered now and the ones whose lease lapsed without a clean stop.
///
/// # Errors
/// [`EtcdError::Malformed`] for an entry that cannot be read; [`EtcdError`] when etcd cannot be
/// reached.
pub async fn list_roster(source: &EtcdSource) -> Result<Vec<(String, Registration)>, EtcdError> {
    let keys = source.keys();
    list_registrations(source, keys.roster_prefix(), |k| keys.roster_id_of(k)).await
}

/// What [`forget_participant`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgotten {
    /// The participant's last registration, as the roster held it.
    pub last: Registration,
    /// The revision of the delete.
    pub revision: i64,
}

/// Takes the participant `id` out of the pool's roster, so that `shardring migrate` no longer waits
/// for it: for a participant that is gone for good. Refused while its registration is live (its
/// lease kept alive: it runs and reaches etcd), so a participant that could still answer for itself
/// is never dropped.
///
/// # Errors
/// [`EtcdError::Refused`] when `id` is registered now or is not in the roster; [`EtcdError`] when
/// etcd cannot be reached.
pub async fn forget_participant(source: &EtcdSource, id: &str) -> Result<Forgotten, EtcdError> {
    let keys = source.keys();
    let (live, roster) = (keys.proxy_key(id), keys.roster_key(id));
    let mut client = source.connect().await?;
    let read = timed(
        source,
        format!("get {roster}"),
        client.get(roster.as_str(), None),
    )
    .await?;
    let Some(kv) = read.kvs().first() else {
        return Err(EtcdError::Refused(format!(
            "{id} is not in the roster of pool {}",
            source.pool()
        )));
    };
    let last = parse_registration(kv.key(), kv.value()).map_err(EtcdError::Malformed)?;
    // Deleted only while no live registration exists and the entry is the one read.
    let txn = Txn::new()
        .when([
            Compare::version(live.as_str(), CompareOp::Equal, 0),
            Compare::mod_revision(roster.as_str(), CompareOp::Equal, kv.mod_revision()),
        ])
        .and_then([TxnOp::delete(roster.as_str(), None)]);
    let response = timed(source, format!("delete {roster}"), client.txn(txn)).await?;
    if !response.succeeded() {
        return Err(EtcdError::Refused(format!(
            "{id} is registered now (its lease is kept alive: it runs and reaches etcd), or wrote \
             its entry again: it answers for itself; stop it first"
        )));
    }
    Ok(Forgotten {
        last,
        revision: revision_of(response.header()),
    })
}

/// Every proxy registered for the pool, by id (sorted).
///
/// # Errors
/// [`EtcdError::Malformed`] for a registration that cannot be read (a migration must not take an
/// unreadable proxy for one that is not there); [`EtcdError`] when etcd cannot be reached.
pub async fn list_proxies(source: &EtcdSource) -> Result<Vec<(String, Registration)>, EtcdError> {
    let keys = source.keys();
    list_registrations(source, keys.proxies_prefix(), |k| keys.proxy_id_of(k)).await
}

/// The registrations under `prefix`, by the id `id_of` reads from each key.
async fn list_registrations(
    source: &EtcdSource,
    prefix: &str,
    id_of: impl Fn(&str) -> Option<&str>,
) -> Result<Vec<(String, Registration)>, EtcdError> {
    let mut client = source.connect().await?;
    let read = timed(
        source,
        format!("range {prefix}"),
        client.get(prefix, Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let mut out = Vec::with_capacity(read.kvs().len());
    for kv in read.kvs() {
        let value = parse_registration(kv.key(), kv.value()).map_err(EtcdError::Malformed)?;
        let key = String::from_utf8_lossy(kv.key());
        let id = id_of(&key).ok_or_else(|| {
            EtcdError::Malformed(crate::error::MalformedValue {
                key: key.to_string(),
                value: String::from_utf8_lossy(kv.value()).into_owned(),
                reason: format!("the key is not {prefix}<id>"),
            })
        })?;
        out.push((id.to_owned(), value));
    }
    Ok(out)
}
