//! # shardring-etcd
//!
//! A pool's servers from etcd, as whole [`MembershipSnapshot`](shardring::membership::MembershipSnapshot)s
//! that a [`Follower`](shardring::membership::Follower) applies to a
//! [`SharedRing`](shardring::shared::SharedRing) atomically. An operator (or a health checker, or the
//! servers themselves under a lease) changes the member list once in etcd, and every proxy and every
//! client that embeds the ring rebuilds the same ring from it, so they all agree where a key lives.
//!
//! - [`layout`]: the key layout, a contract: `<prefix><pool>/servers/<name>` = `host:port[:weight]`,
//!   beside it the planned membership `<prefix><pool>/next/<name>` and the proxies' registrations
//!   `<prefix><pool>/proxies/<id>`.
//! - [`EtcdSource`] ([`source`]): one range at a revision, then a watch from that revision + 1; one snapshot per etcd
//!   revision or per debounced burst; reconnects with back-off, resumes from the last revision,
//!   resyncs after a compaction.
//! - [`follow()`]: the loop that applies a source's snapshots to a follower, and
//!   [`twemproxy_ketama`], the placement that puts keys exactly where the proxy does.
//! - [`participant`]: a client-side ring that takes part in planned changes as a proxy does
//!   ([`Participant`]: registered, dual-writing, fenced), on [`take_part`] and the library's
//!   [`Fence`], which the proxy runs too.
//! - [`admin`]: publish a pool, add, remove and re-weight one server (what `shardring members` runs);
//!   publish a next membership, cut over to it and drop it, register a proxy under a lease and list
//!   the registered ones (what `shardring migrate` and the proxy run).
//!
//! ## Why etcd-client (gRPC)
//! It is the maintained etcd v3 client for tokio (watch streams, leases, transactions), and watches are
//! what this crate is about: a gRPC watch stream delivers every event once, in order, with compaction
//! reported, which the JSON gateway's chunked long-poll only imitates. The price is a build-time `protoc`
//! (Debian: `protobuf-compiler` and `libprotobuf-dev`).
//!
//! ## Example: a client that routes keys itself
//! ```no_run
//! use std::sync::Arc;
//! use shardring::{hash::TwemproxyHash, membership::Follower, shared::SharedRing, Ring};
//! use shardring_etcd::{follow, twemproxy_ketama, EtcdSource, FollowStats};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let source = EtcdSource::builder(&["http://127.0.0.1:2379"], "alpha").build();
//! let first = source.read().await?; // a clear error when etcd is not there
//! let build = |m: &[_]| twemproxy_ketama(m, TwemproxyHash::Fnv1a64, None);
//! let shared = Arc::new(SharedRing::new(build(first.snapshot.members())?));
//! let mut follower = Follower::new(Arc::clone(&shared), build).assume_current(first.snapshot);
//! let stats = Arc::new(FollowStats::default());
//! let stop = tokio_util::sync::CancellationToken::new();
//! let reader = Arc::clone(&shared);
//! tokio::spawn(async move { follow(&source, &mut follower, &stats, stop).await });
//! // Anywhere, any thread, lock-free:
//! let server = reader.load().lookup("user:42").map(|n| n.name().to_string());
//! # Ok(()) }
//! ```

pub mod admin;
mod error;
mod follow;
pub mod kind;
pub mod layout;
pub mod participant;
pub mod source;
pub mod take_part;

pub use crate::error::{error_chain, ClientError, EtcdError, MalformedValue};
pub use crate::follow::{follow, twemproxy_ketama, twemproxy_servers, FollowStats};
pub use crate::kind::{Kind, Kinds};
pub use crate::layout::Registration;
pub use crate::participant::{Fenced, Participant, ParticipantStats, PoolRules, Route, View};
pub use crate::source::{EtcdSource, EtcdSourceBuilder, PoolRead, Update};
pub use shardring::fence::Fence;
