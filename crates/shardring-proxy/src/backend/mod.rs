//! Servers: each one's connection pool ([`pool`]), health ([`health`]) and connections ([`stream`]).

pub mod health;
pub mod pool;
pub mod stream;

pub use self::health::{EjectPolicy, ServerHealth};
pub use self::pool::{Backend, BackendSettings};
