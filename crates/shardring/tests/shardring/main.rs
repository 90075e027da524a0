//! The library's integration tests, one test binary: each file here is a module, so the crate is linked
//! once rather than once per file. A test keeps its name under its module's, so `cargo test -p shardring
//! <part of a name>` still finds it, and `cargo test -p shardring --test shardring <module>::` runs one
//! file's tests.
//!
//! The binary's global allocator counts allocations per thread (`support`); the no-allocation tests read
//! their own thread's count, so the other tests running beside them do not disturb it.

mod support;

mod algo_lookup_does_not_allocate;
mod compat_groupcache;
mod compat_libmemcached;
mod compat_lookup_does_not_allocate;
mod compat_membership;
mod compat_nginx;
mod compat_no_panics;
mod compat_spymemcached;
mod compat_template;
mod compat_twemproxy;
mod compat_uhashring;
mod lookup_does_not_allocate;
