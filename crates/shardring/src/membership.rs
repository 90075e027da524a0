//! Membership as whole snapshots: what a config store (etcd, a file, a health checker) says a pool's
//! members are at one revision, and a [`Follower`] that makes a [`SharedRing`] follow a stream of them.
//!
//! # Why snapshots, not events
//! A source could hand over "add c", "remove a" events and let the follower patch its ring. Then one lost
//! or repeated event leaves a wrong ring forever, and two followers that saw different event histories
//! disagree about where keys live. A snapshot is the whole member set at a revision: the follower builds
//! its ring from it alone, so a ring depends on nothing but the members, and a source that reconnects,
//! resyncs or repeats itself cannot make it wrong.
//!
//! # What a follower guarantees
//! - **Atomic**: each accepted snapshot becomes one new placement, published in one store; readers see
//!   the whole old member set or the whole new one.
//! - **Nothing for nothing**: a snapshot with the same members as the current one builds nothing and
//!   publishes nothing (sources repeat themselves after a reconnect).
//! - **Never backwards**: a snapshot older than the one applied is refused ([`MembershipError::Stale`]).
//! - **Never empty by accident**: a snapshot with no members is refused ([`MembershipError::Empty`]) unless
//!   the follower was built with [`Follower::allow_empty`], so one bad delete does not empty a cache
//!   cluster.
//! - **A failed build changes nothing**: the old ring stays and the error says why.
//!
//! This module does no I/O; the etcd source lives in the `shardring-etcd` crate.
//!
//! ```
//! use std::sync::Arc;
//! use shardring::membership::{Applied, Follower, Member, MembershipSnapshot};
//! use shardring::{shared::SharedRing, Ring};
//!
//! let shared = Arc::new(SharedRing::new(Ring::default()));
//! let mut follower = Follower::new(Arc::clone(&shared), |members: &[Member]| {
//!     members
//!         .iter()
//!         .fold(Ring::builder(), |b, m| b.node(m.name(), f64::from(m.weight())))
//!         .build()
//! });
//! let snapshot = MembershipSnapshot::new(7, vec![
//!     Member::new("cache-a", "10.0.0.1:11211", 1)?,
//!     Member::new("cache-b", "10.0.0.2:11211", 2)?,
//! ])?;
//! assert!(matches!(follower.apply(snapshot.clone())?, Applied::Published { revision: 7, .. }));
//! // The same members again (a reconnect, a repeated read): nothing is built.
//! let again = MembershipSnapshot::new(9, snapshot.members().to_vec())?;
//! assert_eq!(follower.apply(again)?, Applied::Unchanged { revision: 9 });
//! assert_eq!(shared.generation(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use crate::compat::twemproxy::TwemproxyServer;
use crate::shared::SharedRing;
use crate::{Error, Node, Placement};

/// One member of a pool: its name (what lookups report and what its points are derived from), the
/// address clients connect to, and its weight.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// Unique within a snapshot, never empty. Snapshots keep members sorted by it.
    name: String,
    /// Where the server listens: `host:port`, or a unix socket path. Never empty.
    addr: String,
    /// The relative share of keys, at least 1 (an integer, as twemproxy's weights are).
    weight: u32,
}

impl Member {
    /// A member.
    ///
    /// # Errors
    /// [`MembershipError::InvalidMember`] when the name or the address is empty or the weight is 0.
    pub fn new(
        name: impl Into<String>,
        addr: impl Into<String>,
        weight: u32,
    ) -> Result<Member, MembershipError> {
        let (name, addr) = (name.into(), addr.into());
        let problem = if name.is_empty() {
            Some("the name is empty")
        } else if addr.is_empty() {
            Some("the address is empty")
        } else if weight == 0 {
            Some("the weight is 0")
        } else {
            None
        };
        match problem {
            Some(reason) => Err(MembershipError::InvalidMember {
                name,
                reason: reason.to_string(),
            }),
            None => Ok(Member { name, addr, weight }),
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address clients connect to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The weight (at least 1).
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Whether the member has a name of its own, as opposed to being named by its address (how a
    /// twemproxy server without a name is published).
    pub fn is_named(&self) -> bool {
        self.name != self.addr
    }

    /// A node named after the member, with its weight, whose points derive from its name.
    ///
    /// # Errors
    /// None in practice (the name is non-empty and the weight positive); the `Result` is [`Node`]'s.
    pub fn to_node(&self) -> Result<Node, Error> {
        Node::weighted(self.name.clone(), f64::from(self.weight))
    }

    /// The twemproxy server line this member stands for: unnamed when its name is its address (so it is
    /// placed exactly as nutcracker places an unnamed server, port 11211 left out of its points), named
    /// otherwise. An address that starts with `/` is a unix socket.
    ///
    /// # Errors
    /// [`MembershipError::InvalidMember`] when the address is not `host:port` with a port from 1 to 65535
    /// (or a socket path).
    pub fn to_twemproxy(&self) -> Result<TwemproxyServer, MembershipError> {
        let bad = |reason: String| MembershipError::InvalidMember {
            name: self.name.clone(),
            reason,
        };
        let (host, port) = if self.addr.starts_with('/') {
            (self.addr.clone(), 0)
        } else {
            let (host, port) = self
                .addr
                .rsplit_once(':')
                .ok_or_else(|| bad(format!("address {:?} is not host:port", self.addr)))?;
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0 && !port.starts_with('+'))
                .ok_or_else(|| bad(format!("address {:?} has no valid port", self.addr)))?;
            let host = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            if host.is_empty() || host.contains(char::is_whitespace) {
                return Err(bad(format!("address {:?} has no valid host", self.addr)));
            }
            (host.to_string(), port)
        };
        Ok(TwemproxyServer {
            host,
            port,
            weight: self.weight,
            name: self.is_named().then(|| self.name.clone()),
        })
    }

    /// The member a twemproxy server line is published as: its name, else its `host:port` (its socket
    /// path for a unix socket), its address and its weight.
    ///
    /// # Errors
    /// [`MembershipError::InvalidMember`] for weight 0.
    pub fn from_twemproxy(server: &TwemproxyServer) -> Result<Member, MembershipError> {
        let addr = server.address();
        let name = server.name.clone().unwrap_or_else(|| addr.clone());
        Member::new(name, addr, server.weight)
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}:{}", self.name, self.addr, self.weight)
    }
}

/// A pool's whole member set at one revision of its source.
///
/// Members are kept sorted by name, so two snapshots with the same members compare equal whatever order
/// their source listed them in; names are unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipSnapshot {
    /// The source's revision (etcd's `mod_revision` of the read); a follower never goes backwards.
    revision: u64,
    /// The members, sorted by name.
    members: Vec<Member>,
}

impl MembershipSnapshot {
    /// The members at `revision`, in any order.
    ///
    /// # Errors
    /// [`MembershipError::DuplicateMember`] when two members have the same name.
    pub fn new(
        revision: u64,
        mut members: Vec<Member>,
    ) -> Result<MembershipSnapshot, MembershipError> {
        members.sort();
        if let Some(w) = members.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(MembershipError::DuplicateMember {
                name: w[0].name.clone(),
            });
        }
        Ok(MembershipSnapshot { revision, members })
    }

    /// The revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The members, sorted by name.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The member named `name`.
    pub fn get(&self, name: &str) -> Option<&Member> {
        self.members
            .binary_search_by(|m| m.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.members[i])
    }

    /// Whether `other` has exactly the same members (revisions aside).
    pub fn same_members(&self, other: &MembershipSnapshot) -> bool {
        self.members == other.members
    }
}

/// What [`Follower::apply`] did with a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// A new placement was built and published.
    Published {
        /// The snapshot's revision.
        revision: u64,
        /// The [`SharedRing`] generation it was published as.
        generation: u64,
    },
    /// The members equal the current ones: nothing was built (the revision is still recorded).
    Unchanged {
        /// The snapshot's revision.
        revision: u64,
    },
}

/// Why a member, a snapshot or its application was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// A member description is unusable.
    #[error("member {name:?}: {reason}")]
    InvalidMember {
        /// The member's name (possibly empty, when that is the problem).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two members of one snapshot have the same name.
    #[error("member {name:?} appears twice")]
    DuplicateMember {
        /// The repeated name.
        name: String,
    },
    /// The snapshot has no members and the follower does not allow an empty pool; the old ring is kept.
    #[error(
        "the snapshot at revision {revision} has no members; refused (the current ring is kept)"
    )]
    Empty {
        /// The refused snapshot's revision.
        revision: u64,
    },
    /// The snapshot is older than the one already applied.
    #[error("the snapshot at revision {revision} is older than the applied revision {current}")]
    Stale {
        /// The refused snapshot's revision.
        revision: u64,
        /// The revision already applied.
        current: u64,
    },
    /// The placement could not be built from the members; the old ring is kept.
    #[error("cannot build a placement from the snapshot at revision {revision}")]
    Build {
        /// The snapshot's revision.
        revision: u64,
        /// What the placement's constructor said.
        #[source]
        source: Error,
    },
}

/// Makes a [`SharedRing`] (of any placement) follow a stream of [`MembershipSnapshot`]s: each accepted
/// snapshot is built into a new placement by the `build` function and published in one atomic swap.
///
/// The follower remembers the members it last applied, so it should be the only writer of its
/// [`SharedRing`] (another writer's changes would be replaced by the next snapshot that differs).
pub struct Follower<P, B> {
    /// Where placements are published.
    shared: Arc<SharedRing<P>>,
    /// Members → placement: the one place where a pool's algorithm, hash and vnodes are chosen.
    build: B,
    /// The snapshot applied last (or the initial one), to compare against and never go behind.
    current: Option<MembershipSnapshot>,
    /// Whether a snapshot with no members may be applied.
    allow_empty: bool,
}

impl<P: fmt::Debug, B> fmt::Debug for Follower<P, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Follower")
            .field("shared", &self.shared)
            .field("current", &self.current)
            .field("allow_empty", &self.allow_empty)
            .finish_non_exhaustive()
    }
}

impl<P, B> Follower<P, B>
where
    P: Placement,
    B: FnMut(&[Member]) -> Result<P, Error>,
{
    /// A follower publishing into `shared`, building each placement with `build`. It has applied nothing
    /// yet, so the first snapshot (with members) is always built. By default empty snapshots are refused.
    pub fn new(shared: Arc<SharedRing<P>>, build: B) -> Follower<P, B> {
        Follower {
            shared,
            build,
            current: None,
            allow_empty: false,
        }
    }

    /// Whether a snapshot with no members may be applied (publishing an empty placement). By default,
    /// this is `false`: such a snapshot is refused with [`MembershipError::Empty`] and the ring kept.
    pub fn allow_empty(mut self, yes: bool) -> Follower<P, B> {
        self.allow_empty = yes;
        self
    }

    /// Records `snapshot` as what the shared ring already holds (e.g. the ring was built from the same
    /// members at start), so an equal snapshot later builds nothing.
    pub fn assume_current(mut self, snapshot: MembershipSnapshot) -> Follower<P, B> {
        self.current = Some(snapshot);
        self
    }

    /// The shared ring this follower publishes into.
    pub fn shared(&self) -> &Arc<SharedRing<P>> {
        &self.shared
    }

    /// The snapshot applied last (or assumed current), if any.
    pub fn current(&self) -> Option<&MembershipSnapshot> {
        self.current.as_ref()
    }

    /// Applies one snapshot: refuses it if it is older than the current one or empty (unless allowed);
    /// builds nothing if its members equal the current ones; otherwise builds a placement from it and
    /// publishes that as one new generation.
    ///
    /// # Errors
    /// [`MembershipError::Stale`], [`MembershipError::Empty`] or [`MembershipError::Build`]; in every case
    /// nothing is published and the current snapshot stays.
    pub fn apply(&mut self, snapshot: MembershipSnapshot) -> Result<Applied, MembershipError> {
        let revision = snapshot.revision;
        if let Some(current) = &self.current {
            if revision < current.revision {
                return Err(MembershipError::Stale {
                    revision,
                    current: current.revision,
                });
            }
            if current.same_members(&snapshot) {
                self.current = Some(snapshot);
                return Ok(Applied::Unchanged { revision });
            }
        }
        if snapshot.is_empty() && !self.allow_empty {
            return Err(MembershipError::Empty { revision });
        }
        // Build under the writer lock, so that the build and the publication are one change with no other
        // writer in between; readers keep using the current snapshot meanwhile.
        let writer = self.shared.writer();
        let placement = (self.build)(&snapshot.members)
            .map_err(|source| MembershipError::Build { revision, source })?;
        let generation = writer.publish(placement);
        self.current = Some(snapshot);
        Ok(Applied::Published {
            revision,
            generation,
        })
    }

    /// Applies every snapshot of `snapshots` in order (e.g. the receiving end of a channel a source
    /// thread sends into), reporting each outcome to `outcome`. Returns when the stream ends.
    pub fn follow(
        &mut self,
        snapshots: impl IntoIterator<Item = MembershipSnapshot>,
        mut outcome: impl FnMut(&Result<Applied, MembershipError>),
    ) {
        for snapshot in snapshots {
            let result = self.apply(snapshot);
            outcome(&result);
        }
    }
}

#[cfg(test)]
mod tests;
