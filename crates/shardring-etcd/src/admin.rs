//! Writing a pool's membership: what `shardring members` does (publish a YAML pool, add, remove,
//! re-weight, register under a lease). Every write keeps to the [layout](crate::layout).

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use shardring::membership::{Member, MembershipSnapshot};

use crate::error::EtcdError;
use crate::layout::format_value;
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
    let mut client = source.connect().await?;
    let keys = source.keys();
    let prefix = keys.servers_prefix().to_string();
    let current = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| failed(source, format!("range {prefix}"), e))?;
    let read_revision = current.header().map_or(0, |h| h.revision());
    let mut ops = Vec::new();
    let mut out = Published::default();
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
    // Nothing under the prefix may have changed since the read: no key's mod revision past it.
    let txn = Txn::new()
        .when([
            Compare::mod_revision(prefix.as_str(), CompareOp::Less, read_revision + 1)
                .with_prefix(),
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
