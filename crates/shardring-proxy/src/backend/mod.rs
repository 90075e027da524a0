//! Servers: each one's connection pool ([`pool`]) and health ([`health`]).

pub mod health;
pub mod pool;

pub use self::health::{EjectPolicy, ServerHealth};
pub use self::pool::{Backend, BackendSettings, Reply};
