//! The commands the proxy answers itself: the handshakes real clients send (`HELLO`, `AUTH`, `SELECT`,
//! `CLIENT SETNAME/SETINFO`), and the probes they make at connect (`COMMAND`, `INFO`, `CONFIG GET`).
//!
//! Errors are Redis 7's words where Redis has them, and nutcracker's for `AUTH` (a drop-in replacement
//! keeps what its clients may match on).

use bytes::{BufMut, BytesMut};

use super::client_state::ClientState;
use super::command::{self, wrong_arity, Local, Spec, TABLE};
use super::request::{put_header, put_int, Request};
use super::settings::Settings;
use super::{parse_redis_int, Flavor};
use crate::protocol::route::Placer;
use crate::protocol::Answer;

pub(crate) use super::command::NOAUTH;

use super::info::{info, REDIS_VERSION};

fn done(out: BytesMut) -> Answer {
    Answer::Bytes(out.freeze())
}

fn fixed(reply: &'static [u8]) -> Answer {
    Answer::fixed(reply)
}

fn error(text: &str) -> Answer {
    let mut out = BytesMut::with_capacity(text.len() + 3);
    out.put_u8(b'-');
    out.put_slice(text.as_bytes());
    out.put_slice(b"\r\n");
    done(out)
}

fn put_bulk(out: &mut BytesMut, data: &[u8]) {
    put_header(out, b'$', data.len());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// A map header: `%n` in RESP3, `*2n` (a flat list of pairs) in RESP2.
fn put_map(out: &mut BytesMut, flavor: Flavor, pairs: usize) {
    match flavor {
        Flavor::Resp2 => put_header(out, b'*', pairs * 2),
        Flavor::Resp3 => put_header(out, b'%', pairs),
    }
}

fn put_integer(out: &mut BytesMut, n: i64) {
    out.put_u8(b':');
    put_int(out, n);
    out.put_slice(b"\r\n");
}

fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

/// Answers a command the table marks local.
pub(crate) fn answer(
    local: Local,
    req: &Request,
    s: &mut ClientState,
    settings: &Settings,
    ctx: &Placer<'_>,
) -> Answer {
    let argc = req.argc();
    let arg = |i: usize| req.arg(i).unwrap_or_default();
    match local {
        Local::Ping => match argc {
            1 => fixed(b"+PONG\r\n"),
            2 => {
                let mut out = BytesMut::new();
                put_bulk(&mut out, arg(1));
                done(out)
            }
            _ => Answer::Bytes(wrong_arity("ping")),
        },
        Local::Echo => {
            let mut out = BytesMut::new();
            put_bulk(&mut out, arg(1));
            done(out)
        }
        // The planner closes the connection after it.
        Local::Quit => fixed(b"+OK\r\n"),
        Local::Select => match parse_redis_int(arg(1)) {
            None => error("ERR value is not an integer or out of range"),
            Some(db) if db == i64::from(settings.db) => fixed(b"+OK\r\n"),
            Some(_) => error(&format!(
                "ERR SELECT is not supported by the proxy: this pool serves db {} (redis_db)",
                settings.db
            )),
        },
        Local::Auth => {
            if argc > 3 {
                return error("ERR syntax error");
            }
            let (user, pass) = if argc == 3 {
                (Some(arg(1)), arg(2))
            } else {
                (None, arg(1))
            };
            match check_auth(settings, user, pass) {
                Ok(()) => {
                    s.authenticated = true;
                    fixed(b"+OK\r\n")
                }
                Err(e) => fixed(e),
            }
        }
        Local::Hello => hello(req, s, settings),
        Local::Reset => {
            s.flavor = Flavor::Resp2;
            s.set_name(None);
            s.authenticated = false;
            fixed(b"+RESET\r\n")
        }
        Local::Client => client(req, s, settings),
        Local::Command => command_info(req, s.flavor),
        Local::Info => info(s.flavor, settings, ctx),
        Local::Config => config(req, s.flavor),
    }
}

/// The answers to `AUTH`: nutcracker's when no password is set and for a wrong password in the
/// one-argument form, Redis 6's `WRONGPASS` in the form that names a user. The proxy holds one
/// credential per pool: `redis_auth`, under the pool's user (`--redis-user`) or Redis's `default`
/// (what a client that knows only the password names); any other user is refused.
fn check_auth(settings: &Settings, user: Option<&[u8]>, pass: &[u8]) -> Result<(), &'static [u8]> {
    let Some(expected) = &settings.auth else {
        return Err(b"-ERR Client sent AUTH, but no password is set\r\n");
    };
    let pass_ok = pass == expected.as_bytes();
    match user {
        None if pass_ok => Ok(()),
        None => Err(b"-ERR invalid password\r\n"),
        Some(u)
            if pass_ok
                && (u == b"default" || Some(u) == settings.user.as_deref().map(str::as_bytes)) =>
        {
            Ok(())
        }
        Some(_) => Err(b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`, as Redis 7 checks it; the reply is in the new
/// version.
fn hello(req: &Request, s: &mut ClientState, settings: &Settings) -> Answer {
    let arg = |i: usize| req.arg(i).unwrap_or_default();
    let mut flavor = s.flavor;
    if req.argc() >= 2 {
        match parse_redis_int(arg(1)) {
            None => return error("ERR Protocol version is not an integer or out of range"),
            Some(2) => flavor = Flavor::Resp2,
            Some(3) => flavor = Flavor::Resp3,
            Some(_) => return error("NOPROTO unsupported protocol version"),
        }
    }
    let mut i = 2;
    let mut name = None;
    let mut auth = None;
    while i < req.argc() {
        let opt = arg(i);
        let more = req.argc() - i - 1;
        if opt.eq_ignore_ascii_case(b"auth") && more >= 2 {
            auth = Some((arg(i + 1), arg(i + 2)));
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"setname") && more >= 1 {
            name = Some(arg(i + 1));
            i += 2;
        } else {
            return error(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(opt)
            ));
        }
    }
    if let Some((user, pass)) = auth {
        if let Err(e) = check_auth(settings, Some(user), pass) {
            return fixed(e);
        }
        s.authenticated = true;
    }
    if settings.auth.is_some() && !s.authenticated {
        return fixed(NOAUTH);
    }
    if let Some(name) = name {
        if !valid_name(name) {
            return error(BAD_NAME);
        }
        s.set_name((!name.is_empty()).then(|| name.into()));
    }
    s.flavor = flavor;
    let mut out = BytesMut::with_capacity(160);
    put_map(&mut out, flavor, 7);
    for (k, v) in [("server", "redis"), ("version", REDIS_VERSION)] {
        put_bulk(&mut out, k.as_bytes());
        put_bulk(&mut out, v.as_bytes());
    }
    put_bulk(&mut out, b"proto");
    put_integer(&mut out, if flavor == Flavor::Resp3 { 3 } else { 2 });
    put_bulk(&mut out, b"id");
    put_integer(&mut out, s.id as i64);
    for (k, v) in [("mode", "standalone"), ("role", "master")] {
        put_bulk(&mut out, k.as_bytes());
        put_bulk(&mut out, v.as_bytes());
    }
    put_bulk(&mut out, b"modules");
    put_header(&mut out, b'*', 0);
    done(out)
}

const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

/// Redis's rule for client names: printable ASCII without spaces.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

/// `CLIENT` subcommands: the ones clients send at connect are answered, the rest refused by name.
fn client(req: &Request, s: &mut ClientState, settings: &Settings) -> Answer {
    let arg = |i: usize| req.arg(i).unwrap_or_default();
    let sub = arg(1).to_ascii_lowercase();
    let argc = req.argc();
    let arity = |n: usize, name: &str| -> Option<Answer> {
        (argc != n).then(|| Answer::Bytes(wrong_arity(&format!("client|{name}"))))
    };
    match &sub[..] {
        b"setname" => {
            if let Some(e) = arity(3, "setname") {
                return e;
            }
            if !valid_name(arg(2)) {
                return error(BAD_NAME);
            }
            s.set_name((!arg(2).is_empty()).then(|| arg(2).into()));
            fixed(b"+OK\r\n")
        }
        b"getname" => {
            if let Some(e) = arity(2, "getname") {
                return e;
            }
            let mut out = BytesMut::new();
            match s.name() {
                Some(n) => put_bulk(&mut out, n),
                None => out.put_slice(s.flavor.null()),
            }
            done(out)
        }
        b"id" => {
            if let Some(e) = arity(2, "id") {
                return e;
            }
            let mut out = BytesMut::new();
            put_integer(&mut out, s.id as i64);
            done(out)
        }
        b"setinfo" => {
            if let Some(e) = arity(4, "setinfo") {
                return e;
            }
            let attr = arg(2).to_ascii_lowercase();
            if attr == b"lib-name" || attr == b"lib-ver" {
                fixed(b"+OK\r\n")
            } else {
                error(&format!(
                    "ERR Unrecognized option '{}'",
                    String::from_utf8_lossy(arg(2))
                ))
            }
        }
        b"info" => {
            if let Some(e) = arity(2, "info") {
                return e;
            }
            let name = s.name().map(String::from_utf8_lossy).unwrap_or_default();
            let text = format!(
                "id={} name={name} db={} resp={}\n",
                s.id,
                settings.db,
                if s.flavor == Flavor::Resp3 { 3 } else { 2 }
            );
            let mut out = BytesMut::new();
            put_bulk(&mut out, text.as_bytes());
            done(out)
        }
        b"list" | b"kill" | b"pause" | b"unpause" | b"tracking" | b"trackinginfo" | b"caching"
        | b"reply" | b"getredir" | b"unblock" | b"no-evict" | b"no-touch" | b"help" => error(
            &format!("ERR CLIENT {} is not supported by the proxy", upper(&sub)),
        ),
        _ => error(&format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&arg(1)[..arg(1).len().min(128)])
        )),
    }
}

/// One `COMMAND INFO` entry: name, arity, flags (none), first key, last key, step.
fn put_command(out: &mut BytesMut, spec: &Spec) {
    let (first, last, step) = match spec.keys {
        command::Keys::None => (0, 0, 0),
        command::Keys::Range { first, last, step } => {
            (i64::from(first), i64::from(last), i64::from(step))
        }
        _ => (1, 1, 1),
    };
    put_header(out, b'*', 6);
    put_bulk(out, spec.name.as_bytes());
    put_integer(out, i64::from(spec.arity));
    put_header(out, b'*', 0);
    put_integer(out, first);
    put_integer(out, last);
    put_integer(out, step);
}

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND DOCS`: the proxy's table.
fn command_info(req: &Request, flavor: Flavor) -> Answer {
    let sub = req.arg(1).map(<[u8]>::to_ascii_lowercase);
    let mut out = BytesMut::new();
    match sub.as_deref() {
        None => {
            put_header(&mut out, b'*', TABLE.len());
            for spec in TABLE {
                put_command(&mut out, spec);
            }
        }
        Some(b"count") => put_integer(&mut out, TABLE.len() as i64),
        Some(b"info") => {
            put_header(&mut out, b'*', req.argc() - 2);
            for name in req.arg_slices().skip(2) {
                match command::lookup(name) {
                    Some(spec) => put_command(&mut out, spec),
                    None => out.put_slice(flavor.null()),
                }
            }
        }
        // Docs are the servers' business; an empty answer lets clients go on.
        Some(b"docs") => put_map(&mut out, flavor, 0),
        Some(_) => {
            return error(&format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(req.arg(1).unwrap_or_default())
            ))
        }
    }
    done(out)
}

/// `CONFIG GET` of what clients probe at connect (redis-benchmark asks `save` and `appendonly`): the
/// proxy keeps nothing itself, so persistence reads as off; other parameters are left out, as Redis
/// leaves out unknown ones. Other `CONFIG` subcommands go to each server directly.
fn config(req: &Request, flavor: Flavor) -> Answer {
    let sub = req.arg(1).unwrap_or_default().to_ascii_lowercase();
    if sub != b"get" {
        return error(&format!(
            "ERR CONFIG {} is not supported by the proxy: configure each server directly",
            upper(&sub)
        ));
    }
    if req.argc() < 3 {
        return Answer::Bytes(wrong_arity("config|get"));
    }
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for p in req.arg_slices().skip(2) {
        let p = p.to_ascii_lowercase();
        for (name, value) in [("save", ""), ("appendonly", "no"), ("databases", "16")] {
            if p == name.as_bytes() && !pairs.iter().any(|(n, _)| *n == name) {
                pairs.push((name, value));
            }
        }
    }
    let mut out = BytesMut::new();
    put_map(&mut out, flavor, pairs.len());
    for (k, v) in pairs {
        put_bulk(&mut out, k.as_bytes());
        put_bulk(&mut out, v.as_bytes());
    }
    done(out)
}
