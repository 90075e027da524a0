//! Which keys of a Redis request count against the pool's rate limits ([`crate::rate_limit`]):
//! every key a command names, for commands sent to servers (the proxy's own answers, `PING`,
//! `AUTH`, `HELLO`…, are never limited). A refusal is the whole request's answer,
//! `-ERR rate limited: …`, never an error inside a multi-key reply's array.

use crate::error::BackendError;
use crate::protocol::redis::command::Route;
use crate::protocol::redis::Request;
use crate::protocol::route::Placer;

/// Whether `req`, routed by `route`, may go on.
#[cold]
pub(crate) fn admit(req: &Request, route: &Route, ctx: &Placer<'_>) -> Result<(), BackendError> {
    match route {
        Route::Local(_) => Ok(()),
        Route::Keys(keys) => ctx.admit(keys.iter().map(|k| req.arg(k).unwrap_or_default())),
        Route::Split { keys, .. } => {
            ctx.admit(keys.iter().map(|&k| req.arg(k).unwrap_or_default()))
        }
        _ => ctx.admit([]),
    }
}
