//! The `shardring` command's integration tests, one test binary: each file here is a module, so the
//! test harness and its dependencies are linked once rather than once per file. A test keeps its name
//! under its module's, so `cargo test -p shardring-cli <part of a name>` still finds it, and
//! `cargo test -p shardring-cli --test cli <module>::` runs one file's tests.

mod client_memory;
mod compat;
mod compat_java_go;
mod contract;
mod cut_off;
mod cut_off_files;
mod cut_off_load;
mod descriptors;
mod fatal_signals;
mod install;
mod members;
mod migrate;
mod migrate_fleet;
mod migrate_redis;
mod migrate_roster;
mod operator;
mod proxy;
mod reload_burst;
mod simulate;
mod split;
mod support;
