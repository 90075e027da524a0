//! Which keys of a memcached request count against the pool's rate limits
//! ([`crate::rate_limit`]), and how a refusal is answered: `SERVER_ERROR rate limited: …`, nothing
//! for a `noreply` command (the client reads no reply to it, and the stream stays in step).

use super::super::request::{Command, Request};
use crate::protocol::route::Placer;
use crate::protocol::Answer;

/// The answer to `req` when it is over a rate limit; `None` when it may go on. The proxy's own
/// answers (`version`, `stats`, `mn`, …) are never limited, nor a piece of a streamed multi-get
/// line before its last (an error there would fall amid the line's values).
#[cold]
pub(in crate::protocol::memcache) fn refused(req: &Request, ctx: &Placer<'_>) -> Option<Answer> {
    let (admitted, silent) = match &req.command {
        Command::Get { more: true, .. } => return None,
        Command::Get { keys, .. } => (ctx.admit(keys.iter().map(|k| req.bytes(k))), false),
        Command::Keyed { key, noreply } => {
            (req.with_routing_key(key, |k| ctx.admit([k])), *noreply)
        }
        Command::Meta { key, .. } => (req.with_routing_key(key, |k| ctx.admit([k])), false),
        Command::FlushAll { noreply } => (ctx.admit([]), *noreply),
        _ => return None,
    };
    let refusal = admitted.err()?;
    Some(if silent {
        Answer::Nothing
    } else {
        Answer::Failed(refusal)
    })
}
