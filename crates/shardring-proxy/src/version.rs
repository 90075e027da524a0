//! The proxy's name and version (`shardring-proxy-0.1.0`): made in one place, for the memcached
//! `version` reply, Redis's `INFO`, `stats`, the stats JSON and `-V`; a module of its own, so the
//! protocols and the metrics need nothing from the crate's root.

/// The name and version as a literal, for `concat!` (the memcached `version` reply is one).
macro_rules! name_version {
    () => {
        concat!("shardring-proxy-", env!("CARGO_PKG_VERSION"))
    };
}
pub(crate) use name_version;

/// The proxy's name and version, as `stats`, the stats JSON and the `version` reply show it.
pub const NAME_VERSION: &str = name_version!();
