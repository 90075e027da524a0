//! What the proxy remembers about one Redis client connection between its requests.

use std::sync::atomic::{AtomicU64, Ordering};

use super::transaction::Transaction;
use super::Flavor;

/// Numbers client connections for `CLIENT ID` (Redis numbers them from 1).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One client connection's state.
#[derive(Debug)]
pub(crate) struct ClientState {
    /// The RESP version `HELLO` chose: RESP3 clients are served over RESP3 server connections.
    pub flavor: Flavor,
    /// The client authenticated (`AUTH` or `HELLO … AUTH`) against the pool's `redis_auth`.
    pub authenticated: bool,
    /// `CLIENT SETNAME`'s name.
    pub name: Option<Box<[u8]>>,
    /// `CLIENT ID`'s number.
    pub id: u64,
    /// Inside `MULTI`, `WATCH` or a blocking command: what that holds (`transaction.rs`).
    pub transaction: Option<Box<Transaction>>,
}

impl Default for ClientState {
    fn default() -> ClientState {
        ClientState {
            flavor: Flavor::Resp2,
            authenticated: false,
            name: None,
            // Relaxed: a unique number is all that is asked; nothing is published through it.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            transaction: None,
        }
    }
}
