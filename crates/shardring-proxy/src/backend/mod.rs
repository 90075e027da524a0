//! Servers: each one's connection pool ([`pool`]), health ([`health`]) and connections ([`stream`]).

pub(crate) mod health;
pub(crate) mod pool;
pub(crate) mod stream;

pub(crate) use self::health::{EjectPolicy, ServerHealth};
pub(crate) use self::pool::{Backend, BackendSettings, Route};
