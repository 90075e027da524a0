//! Servers: each one's connection pool ([`pool`]), health ([`health`]), connections ([`stream`]), the
//! queue of requests to a connection ([`queue`]) and where replies go ([`reply`]).

pub(crate) mod health;
pub(crate) mod pool;
pub(crate) mod queue;
pub(crate) mod reply;
pub(crate) mod stream;

pub(crate) use self::health::{EjectPolicy, ServerHealth};
pub(crate) use self::pool::{Backend, BackendSettings, Route};
pub(crate) use self::reply::{ReplyQueue, ReplyTo};
