//! What the proxy remembers about one Redis client connection between its requests.

use std::sync::atomic::{AtomicU64, Ordering};

use super::features::pubsub::{Subscriber, Subscriptions};
use super::features::transaction::{InTransaction, Transaction};
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
    /// `CLIENT ID`'s number.
    pub id: u64,
    /// What few clients have, boxed, so an idle client's state stays small (a session's memory is
    /// mostly its future: `session.rs`).
    pub rare: Option<Box<Rare>>,
}

/// The state of a client that named itself, is in a transaction or subscribed.
#[derive(Debug, Default)]
pub(crate) struct Rare {
    /// `CLIENT SETNAME`'s name.
    pub(crate) name: Option<Box<[u8]>>,
    /// Inside `MULTI`, `WATCH` or a blocking command: what that holds (`features/transaction.rs`).
    pub(crate) transaction: Option<Transaction>,
    /// A subscriber's subscriptions (`features/pubsub.rs`).
    pub(crate) pubsub: Option<Subscriptions>,
}

impl ClientState {
    /// The rare state, if the client has any.
    pub(crate) fn rare(&self) -> Option<&Rare> {
        self.rare.as_deref()
    }

    /// The rare state, made when the client has none.
    pub(crate) fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The server the client's requests take a connection of its own to (inside `WATCH`, after a
    /// blocking command), if any.
    pub(crate) fn pinned(&self) -> Option<usize> {
        self.rare()?.transaction.as_ref()?.pinned
    }

    /// The client's name (`CLIENT SETNAME`).
    pub(crate) fn name(&self) -> Option<&[u8]> {
        self.rare()?.name.as_deref()
    }

    /// Names the client, or forgets its name.
    pub(crate) fn set_name(&mut self, name: Option<Box<[u8]>>) {
        if name.is_some() || self.rare.is_some() {
            self.rare_mut().name = name;
        }
        self.tidy();
    }

    /// Drops the rare state once nothing is in it.
    pub(crate) fn tidy(&mut self) {
        if self
            .rare()
            .is_some_and(|r| r.name.is_none() && r.transaction.is_none() && r.pubsub.is_none())
        {
            self.rare = None;
        }
    }
}

impl InTransaction for ClientState {
    fn transaction(&self) -> Option<&Transaction> {
        self.rare()?.transaction.as_ref()
    }

    fn transaction_mut(&mut self) -> Option<&mut Transaction> {
        self.rare.as_deref_mut()?.transaction.as_mut()
    }

    fn transaction_or_new(&mut self) -> &mut Transaction {
        self.rare_mut()
            .transaction
            .get_or_insert_with(Default::default)
    }

    fn end_transaction(&mut self) {
        if let Some(r) = self.rare.as_deref_mut() {
            r.transaction = None;
        }
        self.tidy();
    }

    fn authenticated(&self) -> bool {
        self.authenticated
    }
}

impl Subscriber for ClientState {
    fn flavor(&self) -> Flavor {
        self.flavor
    }

    fn subscriptions(&self) -> Option<&Subscriptions> {
        self.rare()?.pubsub.as_ref()
    }

    fn subscriptions_mut(&mut self) -> Option<&mut Subscriptions> {
        self.rare.as_deref_mut()?.pubsub.as_mut()
    }

    fn subscriptions_or_new(&mut self) -> &mut Subscriptions {
        self.rare_mut().pubsub.get_or_insert_with(Default::default)
    }

    fn take_subscriptions(&mut self) -> Option<Subscriptions> {
        self.rare.as_deref_mut()?.pubsub.take()
    }
}

impl Default for ClientState {
    fn default() -> ClientState {
        ClientState {
            flavor: Flavor::Resp2,
            authenticated: false,
            // Relaxed: a unique number is all that is asked; nothing is published through it.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rare: None,
        }
    }
}
