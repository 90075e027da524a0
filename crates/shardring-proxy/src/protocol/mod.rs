//! Wire protocols. Pure parsers only: no I/O here.

pub mod memcache;
pub mod redis;
