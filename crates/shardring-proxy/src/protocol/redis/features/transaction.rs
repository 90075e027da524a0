//! Transactions and blocking commands: what a client inside `MULTI`, `WATCH` or a blocking command
//! gets, on servers whose connections the proxy shares among many clients.
//!
//! - `MULTI` is answered by the proxy, and the commands after it are checked and queued here
//!   (`+QUEUED`), not sent. `EXEC` sends `MULTI`, the queued commands and `EXEC` to their server as
//!   one frame, and answers with the server's reply to `EXEC`. One frame is written whole on a
//!   connection before the next request is, so no other client's command falls inside the
//!   transaction, and a transaction without `WATCH` needs no connection of its own. A queued command
//!   whose keys are on another server than the transaction's, or that the proxy refuses, is answered
//!   with its error and the transaction is discarded (`EXEC` answers `-EXECABORT`, as Redis does
//!   after a command it could not queue): nothing of it runs.
//! - `WATCH` pins the client to its keys' server on a connection of its own (the session opens it,
//!   `Protocol::pinned`): a watch belongs to a server connection, and `EXEC` must come on the same
//!   one. The client's requests to that server take it until `EXEC`, `DISCARD` or `UNWATCH` end the
//!   watch; then the connection is closed, which drops whatever the server still holds for it.
//! - A blocking command (`BLPOP`, `XREAD … BLOCK`, …) goes on a connection of the client's own too,
//!   held until the client sends something else, so a worker that loops on `BLPOP` keeps one
//!   connection. Its reply has no timeout: the client's own timeout argument bounds the wait.
//!
//! What Redis does inside `MULTI` is kept where it can be: `MULTI` nested and `WATCH` inside `MULTI`
//! are errors that leave the transaction as it was; `PING` and `ECHO` are queued and answered in
//! `EXEC`'s reply; a blocking command is queued (inside a transaction, Redis does not block).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::hot_keys::HotKeys;
use crate::protocol::redis::command::{self, Local, Route, Routed, Txn, CROSSSLOT};
use crate::protocol::redis::finish::Finish;
use crate::protocol::redis::reply::Resp;
use crate::protocol::redis::request::Request;
use crate::protocol::redis::settings::Settings;
use crate::protocol::route::Placer;
use crate::protocol::Answer;

/// `EXEC` when the transaction was discarded, in Redis's words.
const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";

/// What a transaction's command comes to (the planner makes it a step).
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Answered here.
    Answer(Answer),
    /// Answered here, then the client is closed (`QUIT` inside `MULTI`).
    Close(Answer),
    /// Sent to one server (`None`: no server is live for its keys), on the client's connection of
    /// its own when it is pinned there.
    Send {
        /// The server.
        server: Option<usize>,
        /// The bytes sent.
        frame: Bytes,
        /// How its reply is framed.
        kind: Resp,
        /// How its reply becomes the answer.
        finish: Finish,
    },
}

/// What a transaction keeps in the client's state (the client state implements it, so this file
/// needs nothing else of it and the state may hold a [`Transaction`] without a circle).
pub(crate) trait InTransaction {
    /// The client's transaction state, if it has one.
    fn transaction(&self) -> Option<&Transaction>;
    /// The same, to change.
    fn transaction_mut(&mut self) -> Option<&mut Transaction>;
    /// The client's transaction state, made when it has none.
    fn transaction_or_new(&mut self) -> &mut Transaction;
    /// Drops the client's transaction state.
    fn end_transaction(&mut self);
    /// Whether the client authenticated (`AUTH`, `HELLO … AUTH`).
    fn authenticated(&self) -> bool;
}

/// What a client in a transaction, a watch or a blocking command holds; boxed in the client's state,
/// as most clients never have one.
#[derive(Debug, Default)]
pub(crate) struct Transaction {
    /// The server whose requests from this client take a connection of its own.
    pub(crate) pinned: Option<usize>,
    /// The pin ends at the client's next request (after a blocking command, or an `EXEC` that ended
    /// a watch: the request itself goes on the pinned connection).
    release_next: bool,
    /// `WATCH` is on, on the pinned server.
    watching: bool,
    /// Inside `MULTI`: what is queued.
    queue: Option<Queue>,
}

/// The commands queued since `MULTI`.
#[derive(Debug, Default)]
struct Queue {
    /// Their frames, back to back.
    frames: BytesMut,
    /// How many.
    count: u32,
    /// The server of their keys, once a queued command has keys.
    server: Option<usize>,
    /// A command was refused: `EXEC` discards the transaction.
    refused: bool,
    /// The keys of the queued writes, when the pool caches hot keys: `EXEC` invalidates them.
    written: Vec<Bytes>,
    /// A queued write has a key whose owner a planned change moves: `EXEC` refuses the transaction
    /// (see [`MOVING`]).
    moves: bool,
}

/// A transaction or a blocking command is not dual-written (it runs on one server, on the client's
/// own connection), so one that writes a key a planned change moves would be lost at the cut-over
/// (or, for a blocking pop, come back with the copy): refused while the change is under way, in
/// Redis Cluster's word for "retry" (`-TRYAGAIN`, which cluster clients retry). Keys that do not
/// move are served as usual.
const MOVING: &[u8] = b"-TRYAGAIN a planned membership change moves a key this command writes; retry once it is over\r\n";

/// Whether the change under way moves one of `keys` (argument positions of `req`) off `server`.
fn moves(req: &Request, keys: &[usize], server: Option<usize>, ctx: &Placer<'_>) -> bool {
    ctx.changing()
        && keys.iter().any(|&k| {
            ctx.next_owner(req.arg(k).unwrap_or_default(), server)
                .is_some()
        })
}

impl Transaction {
    /// Inside `MULTI`: commands are being queued.
    pub(crate) fn queueing(&self) -> bool {
        self.queue.is_some()
    }

    /// Nothing held: the client's state can drop it.
    fn is_idle(&self) -> bool {
        self.pinned.is_none() && !self.watching && self.queue.is_none()
    }

    /// Forgets the pin (the session could not give a connection of its own); a watch needs one.
    pub(crate) fn unpin(&mut self) {
        self.pinned = None;
        self.release_next = false;
        self.watching = false;
    }
}

/// What the plan does with a request, given the client's transaction state: `Some(step)` when the
/// transaction decides it, `None` to plan it as usual. Called first for every request; a client
/// without transaction state and a request that is not a transaction's command costs a branch.
pub(crate) fn plan(
    settings: &Settings,
    hot: Option<&Arc<HotKeys>>,
    req: &Request,
    routed: &Result<Routed, Bytes>,
    client: &mut impl InTransaction,
    ctx: &Placer<'_>,
) -> Option<Outcome> {
    if let Some(t) = client.transaction_mut() {
        if t.release_next {
            t.release_next = false;
            if !t.watching {
                t.pinned = None;
            }
        }
        if t.is_idle() {
            client.end_transaction();
        }
    }
    let queueing = client.transaction().is_some_and(|t| t.queue.is_some());
    if queueing {
        return Some(queue(settings, hot, req, routed, client, ctx));
    }
    let routed = routed.as_ref().ok()?;
    match &routed.route {
        Route::Transaction(txn, keys) => Some(outside(*txn, req, keys, client, ctx)),
        Route::Block(keys) => Some(block(
            req,
            keys,
            super::replicas::is_write(routed.spec),
            client,
            ctx,
        )),
        _ => None,
    }
}

/// The one server all of `keys` live on: `Ok(None)` when no server is live for one of them,
/// `Err(())` when they are on different servers.
fn server_of(
    req: &Request,
    keys: impl Iterator<Item = usize>,
    ctx: &Placer<'_>,
) -> Result<Option<usize>, ()> {
    let mut owner = None;
    for k in keys {
        match (owner, ctx.server_for(req.arg(k).unwrap_or_default())) {
            (_, None) => return Ok(None),
            (None, s) => owner = s,
            (Some(o), Some(s)) if o != s => return Err(()),
            _ => {}
        }
    }
    Ok(owner)
}

fn fixed(reply: &'static [u8]) -> Outcome {
    Outcome::Answer(Answer::fixed(reply))
}

/// A transaction command outside `MULTI`.
fn outside(
    txn: Txn,
    req: &Request,
    keys: &command::KeyArgs,
    client: &mut impl InTransaction,
    ctx: &Placer<'_>,
) -> Outcome {
    match txn {
        Txn::Multi => {
            let t = client.transaction_or_new();
            t.queue = Some(Queue {
                server: t.pinned.filter(|_| t.watching),
                ..Queue::default()
            });
            fixed(b"+OK\r\n")
        }
        Txn::Exec => fixed(b"-ERR EXEC without MULTI\r\n"),
        Txn::Discard => fixed(b"-ERR DISCARD without MULTI\r\n"),
        Txn::Unwatch => {
            // Closing the watch's connection drops the watch on the server.
            if let Some(t) = client.transaction_mut() {
                if t.watching {
                    t.unpin();
                }
            }
            fixed(b"+OK\r\n")
        }
        Txn::Watch => {
            let server = match server_of(req, keys.iter(), ctx) {
                Err(()) => return fixed(CROSSSLOT),
                Ok(None) => {
                    return Outcome::Send {
                        server: None,
                        frame: req.frame.clone(),
                        kind: Resp::Reply,
                        finish: Finish::Plain,
                    }
                }
                Ok(Some(s)) => s,
            };
            let Some(t) = pin_to(client, server) else {
                return fixed(CROSSSLOT);
            };
            t.watching = true;
            t.release_next = false;
            Outcome::Send {
                server: Some(server),
                frame: req.frame.clone(),
                kind: Resp::Reply,
                finish: Finish::Plain,
            }
        }
    }
}

/// The client's transaction state, pinned to `server`; `None` when a watch holds it to another
/// server (the command is then refused with `CROSSSLOT`).
fn pin_to(client: &mut impl InTransaction, server: usize) -> Option<&mut Transaction> {
    let t = client.transaction_or_new();
    if t.watching && t.pinned != Some(server) {
        return None;
    }
    t.pinned = Some(server);
    Some(t)
}

/// A blocking command outside `MULTI`: to its keys' server, on a connection of the client's own
/// (`write`: it changes them, as `BLPOP` does; refused while a planned change moves one).
fn block(
    req: &Request,
    keys: &command::KeyArgs,
    write: bool,
    client: &mut impl InTransaction,
    ctx: &Placer<'_>,
) -> Outcome {
    let server = match server_of(req, keys.iter(), ctx) {
        Err(()) => return fixed(CROSSSLOT),
        Ok(s) => s,
    };
    if let Some(server) = server {
        let keys: Vec<usize> = keys.iter().collect();
        if write && moves(req, &keys, Some(server), ctx) {
            return fixed(MOVING);
        }
        if write && super::split::any_split(req, keys.iter().copied(), ctx) {
            return fixed(super::split::IN_TRANSACTION);
        }
        let Some(t) = pin_to(client, server) else {
            return fixed(CROSSSLOT);
        };
        t.release_next = !t.watching;
        ctx.stats.blocking_requests.inc();
    }
    Outcome::Send {
        server,
        frame: req.frame.clone(),
        kind: Resp::Unbounded,
        finish: Finish::Plain,
    }
}

/// A request inside `MULTI`.
fn queue(
    settings: &Settings,
    hot: Option<&Arc<HotKeys>>,
    req: &Request,
    routed: &Result<Routed, Bytes>,
    client: &mut impl InTransaction,
    ctx: &Placer<'_>,
) -> Outcome {
    let authenticated = settings.auth.is_none() || client.authenticated();
    let Some(t) = client.transaction_mut() else {
        return fixed(b"-ERR EXEC without MULTI\r\n");
    };
    let refuse = |t: &mut Transaction, reply: Bytes| {
        if let Some(q) = t.queue.as_mut() {
            q.refused = true;
        }
        Outcome::Answer(Answer::Bytes(reply))
    };
    let routed = match routed {
        Ok(r) => r,
        // Unknown, wrong arity, refused: Redis answers the error and discards the transaction.
        Err(reply) => return refuse(t, reply.clone()),
    };
    if !authenticated && !matches!(routed.route, Route::Local(Local::Auth | Local::Hello)) {
        return refuse(
            t,
            Bytes::from_static(crate::protocol::redis::command::NOAUTH),
        );
    }
    let keys: Vec<usize> = match &routed.route {
        Route::Transaction(Txn::Multi, _) => {
            return fixed(b"-ERR MULTI calls can not be nested\r\n")
        }
        Route::Transaction(Txn::Watch, _) => {
            return fixed(b"-ERR WATCH inside MULTI is not allowed\r\n")
        }
        Route::Transaction(Txn::Discard, _) => {
            t.queue = None;
            // DISCARD ends a watch too: its connection is closed.
            if t.watching {
                t.unpin();
            }
            return fixed(b"+OK\r\n");
        }
        Route::Transaction(Txn::Exec, _) => return exec(hot, t, ctx),
        Route::Transaction(Txn::Unwatch, _) | Route::AnyServer => Vec::new(),
        Route::Local(Local::Ping | Local::Echo) => Vec::new(),
        Route::Local(Local::Quit) => return Outcome::Close(Answer::fixed(b"+OK\r\n")),
        Route::Keys(keys) | Route::Block(keys) => keys.iter().collect(),
        Route::Split { keys, .. } => keys.clone(),
        Route::Local(_) | Route::PubSub(_) | Route::Span(_) => {
            let reply = format!(
                "-ERR {} inside MULTI is not supported by the proxy\r\n",
                routed.spec.name.to_ascii_uppercase()
            );
            return refuse(t, Bytes::from(reply));
        }
    };
    let Some(q) = t.queue.as_mut() else {
        return fixed(b"-ERR EXEC without MULTI\r\n");
    };
    if hot.is_some() && super::replicas::is_write(routed.spec) {
        q.written.extend(
            keys.iter()
                .map(|&k| Bytes::copy_from_slice(req.arg(k).unwrap_or_default())),
        );
    }
    if super::replicas::is_write(routed.spec)
        && super::split::any_split(req, keys.iter().copied(), ctx)
    {
        return refuse(t, Bytes::from_static(super::split::IN_TRANSACTION));
    }
    let keys_of_write = keys.clone();
    match server_of(req, keys.into_iter(), ctx) {
        Err(()) => {
            q.refused = true;
            return fixed(CROSSSLOT);
        }
        Ok(Some(s)) => match q.server {
            Some(o) if o != s => {
                q.refused = true;
                return fixed(CROSSSLOT);
            }
            _ => q.server = Some(s),
        },
        // No live server for the key: EXEC will say so.
        Ok(None) => {}
    }
    if super::replicas::is_write(routed.spec) && moves(req, &keys_of_write, q.server, ctx) {
        q.moves = true;
    }
    if q.frames.len() + req.frame.len() > settings.limits.max_request_len {
        q.refused = true;
        return Outcome::Answer(Answer::Bytes(Bytes::from(format!(
            "-ERR the transaction is over the proxy's limit of {} bytes\r\n",
            settings.limits.max_request_len
        ))));
    }
    q.frames.put_slice(&req.frame);
    q.count += 1;
    fixed(b"+QUEUED\r\n")
}

/// `EXEC`: the queued commands to their server, between `MULTI` and `EXEC`, in one frame.
fn exec(hot: Option<&Arc<HotKeys>>, t: &mut Transaction, ctx: &Placer<'_>) -> Outcome {
    let Some(q) = t.queue.take() else {
        return fixed(b"-ERR EXEC without MULTI\r\n");
    };
    let watching = t.watching;
    if watching {
        // EXEC ends the watch; it goes on the watch's connection, closed after it.
        t.watching = false;
        t.release_next = true;
    }
    if q.refused || q.moves {
        ctx.stats.transactions_aborted.inc();
        if watching {
            t.unpin();
        }
        return fixed(if q.refused { EXECABORT } else { MOVING });
    }
    let server = match (t.pinned.filter(|_| watching), q.server) {
        (Some(p), _) => Some(p),
        (None, Some(s)) => Some(s),
        // Keyless (`MULTI`, `PING`, `EXEC`): any server answers alike.
        (None, None) => ctx.live_servers().first().copied(),
    };
    let mut frame = BytesMut::with_capacity(q.frames.len() + 32);
    frame.put_slice(b"*1\r\n$5\r\nMULTI\r\n");
    frame.put_slice(&q.frames);
    frame.put_slice(b"*1\r\n$4\r\nEXEC\r\n");
    ctx.stats.transactions.inc();
    let replies = q.count + 2;
    // The hot keys the transaction writes are invalidated again when its reply comes.
    let invalidate = hot.and_then(|hot| super::hot_keys::invalidate_all(hot, q.written));
    let finish = match invalidate {
        Some(invalidate) => Finish::Invalidate(Box::new((invalidate, Finish::Exec(replies)))),
        None => Finish::Exec(replies),
    };
    Outcome::Send {
        server,
        frame: frame.freeze(),
        kind: Resp::Replies(replies),
        finish,
    }
}
