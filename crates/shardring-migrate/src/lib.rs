//! The engines behind `shardring migrate`: before a pool's ring changes, copy each key whose owner
//! changes from its server now to its server next, while the proxies dual-write (every write of such
//! a key goes to both owners), so nothing written during the copy is lost at the cut-over.
//!
//! One [`Job`] is one source server: its keys are enumerated, the [`Route`] says which of them move
//! and where, and the protocol's engine copies them without ever overwriting a newer value or
//! reviving a deleted key:
//!
//! - [`memcache`]: `lru_crawler metadump` to enumerate (rescanned until a pass finds no new key that
//!   moves), `mg` to read value, flags, TTL and CAS, an add on the target (never over a value a dual
//!   write put there), then the source's CAS read again and a key that changed copied again by CAS.
//! - [`redis`]: `SCAN` over the pool's database, `DUMP`/`RESTORE … REPLACE` in pipelined batches
//!   (or `MIGRATE … COPY REPLACE KEYS …`), then a verify pass comparing each key's value (its dump,
//!   or a canonical digest where the dumps differ) and TTL on both sides, copying again what
//!   differs, until a pass finds nothing different.
//!
//! Nothing here decides placement or talks to proxies: the command (`shardring migrate`) builds the
//! route from the library's placement, checks the proxies and does the cut-over.

use std::sync::Arc;
use std::time::Duration;

mod dial;
pub mod endpoint;
pub mod error;
pub mod memcache;
pub mod progress;
pub mod rate;
pub mod redis;

pub use endpoint::Endpoint;
pub use error::MigrateError;
pub use progress::{Progress, Report};
pub use rate::RateLimit;

/// How long after the copy's own write of a key (a copy, a replace, an unlink or delete) the read
/// that checks it may begin: longer than a proxy's dual write takes to reach its second server.
///
/// A proxy sends a dual write to both owners at once, and they apply it at different moments. A
/// check that reads the source before the source applies it can find nothing changed, then the
/// source changes. Say the target missed the write (an `incr` found no copy there yet, or our
/// `RESTORE … REPLACE` erased it): the source is then one write ahead for good, and the cut-over
/// loses that write. The two halves go out in one pipelined round trip, so they land within that
/// round trip of each other plus whatever holds the source (a `MIGRATE` batch holds it ~250 µs:
/// BENCHMARKS.md, "migrate (redis): where the servers' time goes"); 200 ms leaves room for a
/// loaded machine's scheduling delays (the test that lost a write under CPU load passed 22 runs
/// of 22 with it). The keys waiting it out are parked, not waited for, so a run ends one `SETTLE`
/// later than without it.
pub const SETTLE: Duration = Duration::from_millis(200);

/// Where a key found on the source goes next: the index of its target in [`Job::targets`], or `None`
/// when it stays (its owner does not change, or the source is not its owner now: a stray copy).
pub type Route = Arc<dyn Fn(&[u8]) -> Option<usize> + Send + Sync>;

/// The keys to move from one source server.
#[derive(Clone)]
pub struct Job {
    /// The server the keys are on now.
    pub source: Endpoint,
    /// The servers they go to, indexed by [`Job::route`].
    pub targets: Vec<Endpoint>,
    /// Which keys move, and where.
    pub route: Route,
    /// The copy's pace (shared by every job of one run), or none: as fast as the servers go.
    pub rate: Option<Arc<RateLimit>>,
    /// The running tallies (shared by every job of one run, for the progress bar).
    pub progress: Arc<Progress>,
    /// Keys per pipelined batch (one round trip per batch and server).
    pub batch: usize,
    /// How long one batch's round trip may take before the job fails.
    pub timeout: Duration,
}

impl Job {
    /// A job from `source` to `targets` along `route`: no rate limit, fresh tallies, batches of 100
    /// keys, a 10 s timeout per round trip.
    pub fn new(source: Endpoint, targets: Vec<Endpoint>, route: Route) -> Job {
        Job {
            source,
            targets,
            route,
            rate: None,
            progress: Arc::new(Progress::default()),
            batch: 100,
            timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("source", &self.source)
            .field("targets", &self.targets)
            .field("batch", &self.batch)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What a survey found on one source: how many of its keys move to each target, and their bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    /// Keys seen on the source.
    pub keys: u64,
    /// For each target (by index), the keys that move there.
    pub moving: Vec<u64>,
    /// For each target (by index), the bytes of the keys that move there (values as the server
    /// counts them: memcached's item size, Redis's `MEMORY USAGE`).
    pub moving_bytes: Vec<u64>,
}
