//! Servers: each one's connections ([`connections`]), health ([`health`]) and circuit breaker
//! ([`breaker`]), and how often it is probed
//! ([`flags`]), sockets ([`stream`]), the queue of requests to a connection ([`queue`]) and where
//! replies go ([`reply`]).

pub(crate) mod breaker;
pub(crate) mod connections;
pub(crate) mod flags;
pub(crate) mod health;
pub(crate) mod queue;
pub(crate) mod reply;
pub(crate) mod stream;
pub(crate) mod subscription;

pub(crate) use self::connections::{Backend, BackendSettings, ConnectionRoute, OwnConnection};
pub(crate) use self::health::{EjectPolicy, ServerHealth};
pub(crate) use self::reply::{ReplyQueue, ReplyTo};
