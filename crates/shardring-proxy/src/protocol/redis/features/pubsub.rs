//! Publish/subscribe over many servers: a channel lives on the server its name hashes to (as a key
//! does, hash tags included), so `PUBLISH` goes to that server alone, and its subscribers subscribe
//! there; a pattern may match channels on any server, so `PSUBSCRIBE` subscribes on every server.
//!
//! A subscriber's commands go on its subscription connections (one per server it subscribes on,
//! opened by the session: `backend/subscription.rs`), and what those servers send back reaches the
//! client as it comes ([`pushed`]): messages as the server framed them, in the server's order, and
//! confirmations with the client's own count (the server only knows the subscriptions made there).
//! A pattern is confirmed once, when the last server has confirmed it, and so is its end. In RESP2, a
//! client with subscriptions may send only what Redis allows then; in RESP3 anything goes, pushes
//! arriving between the answers.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::{BufMut, Bytes, BytesMut};
use shardring_resp::{elements, ReplyLimits};

use crate::error::BackendError;
use crate::protocol::redis::command::{Local, Route, Routed, Sub};
use crate::protocol::redis::request::{put_header, put_int, Request};
use crate::protocol::redis::Flavor;
use crate::protocol::route::Placer;
use crate::protocol::Answer;

/// Names grouped by the server each goes to, in the order the servers first appear.
type ByServer<'n> = Vec<(usize, Vec<&'n [u8]>)>;

/// Which kind of subscription a confirmation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// A channel's.
    Channel,
    /// A shard channel's.
    Shard,
    /// A pattern's.
    Pattern,
}

/// One client's subscriptions; boxed in its state, as most clients never subscribe.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    /// Channels, each with the server it is subscribed on.
    channels: HashMap<Box<[u8]>, usize>,
    /// Shard channels, the same.
    shard: HashMap<Box<[u8]>, usize>,
    /// Patterns (subscribed on every server of `servers`).
    patterns: HashSet<Box<[u8]>>,
    /// Confirmations still to come, by kind, whether of a subscription's end, and name: how many.
    awaiting: HashMap<(Kind, bool, Box<[u8]>), usize>,
    /// The servers with a subscription connection, where patterns are.
    servers: BTreeSet<usize>,
}

impl Subscriptions {
    /// Whether the client is subscribed (or about to be): in RESP2, it may then send only what
    /// Redis allows a subscriber.
    fn active(&self) -> bool {
        !self.channels.is_empty()
            || !self.shard.is_empty()
            || !self.patterns.is_empty()
            || !self.awaiting.is_empty()
    }

    /// The count a confirmation of `kind` carries: Redis counts channels and patterns together, shard
    /// channels apart.
    fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.shard.len(),
            Kind::Channel | Kind::Pattern => self.channels.len() + self.patterns.len(),
        }
    }

    fn expect(&mut self, kind: Kind, ending: bool, name: &[u8], n: usize) {
        *self
            .awaiting
            .entry((kind, ending, name.into()))
            .or_default() += n;
    }

    /// One confirmation in: whether it was the last awaited.
    fn confirmed(&mut self, kind: Kind, ending: bool, name: &[u8]) -> bool {
        let key = (kind, ending, Box::<[u8]>::from(name));
        match self.awaiting.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                self.awaiting.remove(&key);
                true
            }
            None => true,
        }
    }
}

/// What pub/sub keeps in the client's state (the client state implements it, so this file needs
/// nothing else of it and the state may hold [`Subscriptions`] without a circle).
pub(crate) trait Subscriber {
    /// The RESP version `HELLO` chose: RESP3 confirmations are pushes.
    fn flavor(&self) -> Flavor;
    /// The client's subscriptions, if it has any.
    fn subscriptions(&self) -> Option<&Subscriptions>;
    /// The same, to change.
    fn subscriptions_mut(&mut self) -> Option<&mut Subscriptions>;
    /// The client's subscriptions, made when it has none.
    fn subscriptions_or_new(&mut self) -> &mut Subscriptions;
    /// Takes the client's subscriptions away (`RESET`).
    fn take_subscriptions(&mut self) -> Option<Subscriptions>;
}

/// Whether the client holds subscriptions, or awaits the confirmation of one or of its end.
pub(crate) fn subscribed(client: &impl Subscriber) -> bool {
    client.subscriptions().is_some_and(Subscriptions::active)
}

/// Forgets the subscriptions of a client that holds none any more (its subscription connections are
/// closing): a later `SUBSCRIBE` starts anew.
pub(crate) fn forget(client: &mut impl Subscriber) {
    if !subscribed(client) {
        client.take_subscriptions();
    }
}

/// Whether `routed` is a subscriber's command, or the client has subscriptions (its requests are
/// then checked here).
pub(crate) fn concerns(routed: &Result<Routed, Bytes>, client: &impl Subscriber) -> bool {
    client.subscriptions().is_some()
        || matches!(
            routed,
            Ok(Routed {
                route: Route::PubSub(_),
                ..
            })
        )
}

/// What the plan does with a request of a subscriber, or a subscriber's command: frames for the
/// subscription connections, or an answer; `None` to plan it as usual.
pub(crate) fn plan(
    req: &Request,
    routed: &Result<Routed, Bytes>,
    client: &mut impl Subscriber,
    ctx: &Placer<'_>,
) -> Option<Sends> {
    let flavor = client.flavor();
    let subscribed = client.subscriptions().is_some_and(Subscriptions::active);
    let route = routed.as_ref().ok().map(|r| &r.route);
    if let Some(Route::PubSub(sub)) = route {
        let subs = client.subscriptions_or_new();
        return Some(command(*sub, req, subs, flavor, ctx));
    }
    if !subscribed || flavor == Flavor::Resp3 {
        return None;
    }
    // RESP2 in subscribed mode: Redis's rule and words.
    match route {
        Some(Route::Local(Local::Ping)) => {
            let mut out = BytesMut::new();
            put_header(&mut out, b'*', 2);
            put_bulk(&mut out, b"pong");
            put_bulk(&mut out, req.arg(1).unwrap_or_default());
            Some(Err(Answer::Bytes(out.freeze())))
        }
        Some(Route::Local(Local::Quit | Local::Reset)) => None,
        // An unknown command's error is the same in any mode.
        None => None,
        Some(_) => Some(Err(Answer::Bytes(Bytes::from(format!(
            "-ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
            String::from_utf8_lossy(req.arg(0).unwrap_or_default()).to_ascii_lowercase()
        ))))),
    }
}

fn put_bulk(out: &mut BytesMut, data: &[u8]) {
    put_header(out, b'$', data.len());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// A confirmation as Redis writes it: `[kind, name, count]`, a push in RESP3.
fn confirmation(flavor: Flavor, kind: &[u8], name: Option<&[u8]>, count: usize) -> BytesMut {
    let mut out = BytesMut::with_capacity(32 + name.map_or(0, <[u8]>::len));
    put_header(
        &mut out,
        if flavor == Flavor::Resp3 { b'>' } else { b'*' },
        3,
    );
    put_bulk(&mut out, kind);
    match name {
        Some(n) => put_bulk(&mut out, n),
        None => out.put_slice(flavor.null()),
    }
    out.put_u8(b':');
    put_int(&mut out, count as i64);
    out.put_slice(b"\r\n");
    out
}

/// `SUBSCRIBE` and the rest: the frames to send on which servers' subscription connections.
fn command(
    sub: Sub,
    req: &Request,
    subs: &mut Subscriptions,
    flavor: Flavor,
    ctx: &Placer<'_>,
) -> Sends {
    let args: Vec<&[u8]> = req.arg_slices().skip(1).collect();
    if matches!(sub, Sub::Subscribe | Sub::SSubscribe | Sub::PSubscribe) {
        ctx.stats.subscriptions.add(args.len() as u64);
    }
    let sends = match sub {
        Sub::Subscribe => channels(Kind::Channel, req, &args, subs, ctx),
        Sub::SSubscribe => channels(Kind::Shard, req, &args, subs, ctx),
        Sub::PSubscribe => patterns(req, &args, subs, ctx),
        Sub::Unsubscribe => leave_channels(Kind::Channel, req, &args, subs, flavor, ctx),
        Sub::SUnsubscribe => leave_channels(Kind::Shard, req, &args, subs, flavor, ctx),
        Sub::PUnsubscribe => leave_patterns(req, &args, subs, flavor),
    };
    if let Ok(sends) = &sends {
        subs.servers.extend(sends.iter().map(|(s, _)| *s));
    }
    sends
}

/// What a subscription command sends, on which servers (the client's answer being the
/// confirmations the servers push); or the answer, when it sends nothing.
pub(crate) type Sends = Result<Vec<(usize, Bytes)>, Answer>;

/// Which server each named channel goes to: where it is subscribed, else where it hashes; `None`
/// when one has no live server.
fn by_server<'n>(
    names: &[&'n [u8]],
    held: &HashMap<Box<[u8]>, usize>,
    ctx: &Placer<'_>,
) -> Option<ByServer<'n>> {
    let mut out: ByServer<'n> = Vec::new();
    for &n in names {
        let server = held.get(n).copied().or_else(|| ctx.server_for(n))?;
        match out.iter_mut().find(|(s, _)| *s == server) {
            Some((_, v)) => v.push(n),
            None => out.push((server, vec![n])),
        }
    }
    Some(out)
}

/// The request's command (`req`'s first word) for each server with the names it holds there.
fn frames(req: &Request, groups: ByServer<'_>) -> Vec<(usize, Bytes)> {
    let name = req.arg(0).unwrap_or_default();
    groups
        .into_iter()
        .map(|(server, names)| {
            let mut a: Vec<&[u8]> = vec![name];
            a.extend(names);
            (server, Request::from_args(&a).frame)
        })
        .collect()
}

/// The channels (or shard channels) a subscriber holds, by name: the server of each.
fn held(subs: &Subscriptions, kind: Kind) -> &HashMap<Box<[u8]>, usize> {
    if kind == Kind::Channel {
        &subs.channels
    } else {
        &subs.shard
    }
}

/// `SUBSCRIBE` / `SSUBSCRIBE`: each channel on its server.
fn channels(
    kind: Kind,
    req: &Request,
    args: &[&[u8]],
    subs: &mut Subscriptions,
    ctx: &Placer<'_>,
) -> Sends {
    let groups =
        by_server(args, held(subs, kind), ctx).ok_or(Answer::Failed(BackendError::NoServer))?;
    for n in args {
        subs.expect(kind, false, n, 1);
    }
    Ok(frames(req, groups))
}

/// `PSUBSCRIBE`: on every live server (a pattern matches channels anywhere).
fn patterns(req: &Request, args: &[&[u8]], subs: &mut Subscriptions, ctx: &Placer<'_>) -> Sends {
    let servers = ctx.live_servers();
    if servers.is_empty() {
        return Err(Answer::Failed(BackendError::NoServer));
    }
    for n in args {
        subs.expect(Kind::Pattern, false, n, servers.len());
    }
    Ok(servers.iter().map(|&s| (s, req.frame.clone())).collect())
}

/// `UNSUBSCRIBE` / `SUNSUBSCRIBE`: each channel on the server that holds it; without names, every
/// channel, each server sent the command without names (it ends all it holds).
fn leave_channels(
    kind: Kind,
    req: &Request,
    args: &[&[u8]],
    subs: &mut Subscriptions,
    flavor: Flavor,
    ctx: &Placer<'_>,
) -> Sends {
    let word: &[u8] = if kind == Kind::Channel {
        b"unsubscribe"
    } else {
        b"sunsubscribe"
    };
    let every: Vec<Box<[u8]>> = if args.is_empty() {
        held(subs, kind).keys().cloned().collect()
    } else {
        Vec::new()
    };
    let names: Vec<&[u8]> = if args.is_empty() {
        every.iter().map(|n| &n[..]).collect()
    } else {
        args.to_vec()
    };
    if names.is_empty() {
        let none = confirmation(flavor, word, None, subs.count(kind));
        return Err(Answer::Bytes(none.freeze()));
    }
    let groups =
        by_server(&names, held(subs, kind), ctx).ok_or(Answer::Failed(BackendError::NoServer))?;
    for (_, names) in &groups {
        for n in names {
            subs.expect(kind, true, n, 1);
        }
    }
    Ok(if args.is_empty() {
        groups
            .into_iter()
            .map(|(s, _)| (s, req.frame.clone()))
            .collect()
    } else {
        frames(req, groups)
    })
}

/// `PUNSUBSCRIBE`: on every server the client subscribed on; answered here when it subscribed
/// nowhere (Redis's answers, one per pattern, or one with none).
fn leave_patterns(
    req: &Request,
    args: &[&[u8]],
    subs: &mut Subscriptions,
    flavor: Flavor,
) -> Sends {
    let servers: Vec<usize> = subs.servers.iter().copied().collect();
    let names: Vec<Box<[u8]>> = if args.is_empty() {
        subs.patterns.iter().cloned().collect()
    } else {
        args.iter().map(|&a| a.into()).collect()
    };
    if servers.is_empty() || names.is_empty() {
        let mut out = BytesMut::new();
        if names.is_empty() {
            out.extend_from_slice(&confirmation(
                flavor,
                b"punsubscribe",
                None,
                subs.count(Kind::Pattern),
            ));
        }
        for n in &names {
            subs.patterns.remove(n);
            out.extend_from_slice(&confirmation(
                flavor,
                b"punsubscribe",
                Some(n),
                subs.count(Kind::Pattern),
            ));
        }
        return Err(Answer::Bytes(out.freeze()));
    }
    for n in &names {
        subs.expect(Kind::Pattern, true, n, servers.len());
    }
    Ok(servers.iter().map(|&s| (s, req.frame.clone())).collect())
}

/// The text of a bulk or simple string element; `None` for a null or anything else.
fn text(element: &[u8]) -> Option<&[u8]> {
    match element.first()? {
        b'$' => {
            let start = memchr::memchr(b'\n', element)? + 1;
            element.get(start..element.len().checked_sub(2)?)
        }
        b'+' => element.get(1..element.len().checked_sub(2)?),
        _ => None,
    }
}

/// What the client gets for a frame its subscription connection to `server` brought: messages as
/// they are; confirmations with the client's own count, a pattern's once; nothing for a client
/// without subscriptions (one that sent `RESET`).
pub(crate) fn pushed(client: &mut impl Subscriber, server: usize, frame: Bytes) -> Option<Bytes> {
    let flavor = client.flavor();
    let subs = client.subscriptions_mut()?;
    let Some(parts) = elements(&frame, ReplyLimits::default()) else {
        return Some(frame);
    };
    let kind_word = parts.first().and_then(|r| text(&frame[r.clone()]))?;
    let (kind, ending) = match kind_word {
        b"subscribe" => (Kind::Channel, false),
        b"unsubscribe" => (Kind::Channel, true),
        b"ssubscribe" => (Kind::Shard, false),
        b"sunsubscribe" => (Kind::Shard, true),
        b"psubscribe" => (Kind::Pattern, false),
        b"punsubscribe" => (Kind::Pattern, true),
        _ => return Some(frame),
    };
    let Some(name) = parts.get(1).and_then(|r| text(&frame[r.clone()])) else {
        // A server without subscriptions of this kind answered an `UNSUBSCRIBE` without names: the
        // client's answer comes from the servers that had some.
        return None;
    };
    if !subs.confirmed(kind, ending, name) {
        return None;
    }
    let name: Box<[u8]> = name.into();
    match (kind, ending) {
        (Kind::Channel, false) => {
            subs.channels.insert(name.clone(), server);
        }
        (Kind::Shard, false) => {
            subs.shard.insert(name.clone(), server);
        }
        (Kind::Pattern, false) => {
            subs.patterns.insert(name.clone());
        }
        (Kind::Channel, true) => {
            subs.channels.remove(&name);
        }
        (Kind::Shard, true) => {
            subs.shard.remove(&name);
        }
        (Kind::Pattern, true) => {
            subs.patterns.remove(&name);
        }
    }
    let count = subs.count(kind);
    Some(confirmation(flavor, kind_word, Some(&name), count).freeze())
}

/// `RESET` of a subscriber: its subscriptions end (what its servers still send is dropped), and the
/// frames that end them on every server it subscribed on.
pub(crate) fn reset(client: &mut impl Subscriber) -> Vec<(usize, Bytes)> {
    let Some(subs) = client.take_subscriptions() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for &server in &subs.servers {
        for word in ["UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE"] {
            out.push((server, Request::from_args(&[word]).frame));
        }
    }
    out
}
