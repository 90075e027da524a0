//! What a pool's member set is: a ring over its servers, or a Redis Cluster whose servers are the
//! seeds (the layout's `kind` and `next-kind` keys, see [`layout`](crate::layout#the-kind-of-a-member-set-kind-next-kind)).
//!
//! A ring's servers place keys by the pool's hash; a cluster's servers are only where its slot map
//! is read, and the map places keys. A participant that follows a pool must know which, or it
//! would place a cluster's keys on a ring of its seeds.
//!
//! Only a source built [`with_next`](crate::EtcdSourceBuilder::with_next) reads the kinds (it
//! ranges and watches the whole pool); [`follow`](crate::follow()) over such a source, and a
//! [`Participant`](crate::Participant), refuse servers that are a cluster's. A source of
//! `servers/` alone reads no kind: a ring that follows one must not follow a pool that may become
//! a cluster.

use crate::error::MalformedValue;

/// What a member set is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A ring over the servers, placed by the pool's hash and distribution (no `kind` key: every
    /// pool published before kinds existed is one).
    #[default]
    Ring,
    /// A Redis Cluster: the servers are its seed nodes; its slot map places the keys.
    RedisCluster,
    /// A value this version cannot read (reported as a [`MalformedValue`]): nobody may place the
    /// set's keys, so a proxy refuses it as a current membership and makes no dual write to it.
    Unknown,
}

/// The kinds of a pool's two member sets, read at one revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Kinds {
    /// `servers/`'s (the `kind` key).
    pub current: Kind,
    /// `next/`'s (the `next-kind` key).
    pub next: Kind,
}

impl Kind {
    /// The value written for this kind (`ring` is never written: its key is deleted instead).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ring => "ring",
            Kind::RedisCluster => "redis-cluster",
            Kind::Unknown => "unknown",
        }
    }

    /// Whether this kind's keys are placed by a cluster's slot map, not by a ring.
    pub fn is_cluster(self) -> bool {
        self == Kind::RedisCluster
    }

    /// The kind a `kind` key of `key` holds (surrounding whitespace ignored).
    ///
    /// # Errors
    /// A [`MalformedValue`] for any other value: a participant that cannot tell what a member set
    /// is must not guess (it treats it as one it cannot place).
    pub fn parse(key: &[u8], value: &[u8]) -> Result<Kind, MalformedValue> {
        match std::str::from_utf8(value).map(str::trim) {
            Ok("ring") => Ok(Kind::Ring),
            Ok("redis-cluster") => Ok(Kind::RedisCluster),
            _ => Err(MalformedValue {
                key: String::from_utf8_lossy(key).into_owned(),
                value: String::from_utf8_lossy(value).into_owned(),
                reason: "a member set's kind is `ring` or `redis-cluster`".into(),
            }),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_back_and_anything_else_is_malformed() {
        for kind in [Kind::Ring, Kind::RedisCluster] {
            assert_eq!(Kind::parse(b"k", kind.as_str().as_bytes()), Ok(kind));
        }
        assert_eq!(
            Kind::parse(b"k", b" redis-cluster\n"),
            Ok(Kind::RedisCluster)
        );
        let bad = Kind::parse(b"/p/a/kind", b"cluster").unwrap_err();
        assert_eq!(
            (bad.key.as_str(), bad.value.as_str()),
            ("/p/a/kind", "cluster")
        );
        assert!(Kind::parse(b"k", b"").is_err());
        assert!(Kind::parse(b"k", &[0xff]).is_err());
    }
}
