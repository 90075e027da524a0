//! The keys of a twemproxy pool: each read and checked as nutcracker 0.5.0 does, defaults filled in.

use std::time::Duration;

use shardring::compat::twemproxy::{self, nc_atoi, Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;

use super::yaml::{Reader, Yaml};
use super::{Listen, PoolConfig, ProtocolConfig, RedisConfig};

/// The keys nutcracker 0.5.0 knows, in its order.
const KEYS: &[&str] = &[
    "listen",
    "hash",
    "hash_tag",
    "distribution",
    "timeout",
    "backlog",
    "client_connections",
    "redis",
    "tcpkeepalive",
    "redis_auth",
    "redis_db",
    "preconnect",
    "auto_eject_hosts",
    "server_connections",
    "server_retry_timeout",
    "server_failure_limit",
    "servers",
];

/// The values of a pool as read, before defaults.
#[derive(Default)]
struct Seen {
    listen: Option<(Listen, String)>,
    hash: Option<TwemproxyHash>,
    hash_tag: Option<[u8; 2]>,
    distribution: Option<Distribution>,
    numbers: std::collections::HashMap<&'static str, u32>,
    bools: std::collections::HashMap<&'static str, bool>,
    redis_auth: Option<String>,
    servers: Option<Vec<(TwemproxyServer, usize)>>,
}

/// Reads one pool's mapping; `None` when it has problems (recorded in `reader`). Returns the pool and
/// its `listen` as written (nutcracker compares those strings to find two pools on one address, so
/// `127.0.0.1:022121` and `127.0.0.1:22121` differ to it).
pub(super) fn read_pool(
    reader: &mut Reader<'_>,
    name: String,
    line: usize,
    value: Yaml,
) -> Option<(PoolConfig, String)> {
    let entries = match value {
        Yaml::Map(entries, _) => entries,
        Yaml::Scalar(v, l) if v.is_empty() => {
            reader.problem(
                l,
                name,
                "a pool must be a mapping of keys to values, not empty",
            );
            return None;
        }
        other => {
            reader.problem(
                other.line(),
                name,
                "a pool must be a mapping of keys to values",
            );
            return None;
        }
    };
    let mut seen = Seen::default();
    let mut first_line: std::collections::HashMap<String, usize> = Default::default();
    let ok_before = reader.problems.len();
    for (key, value) in entries {
        let Yaml::Scalar(key, key_line) = key else {
            reader.problem(key.line(), name.clone(), "a key must be a plain string");
            continue;
        };
        let full = format!("{name}.{key}");
        let Some(&known) = KEYS.iter().find(|k| **k == key) else {
            reader.problem(
                key_line,
                full,
                format!("directive \"{key}\" is unknown; known: {}", KEYS.join(", ")),
            );
            continue;
        };
        if let Some(first) = first_line.get(known) {
            reader.problem(
                key_line,
                full,
                format!("is a duplicate (first on line {first})"),
            );
            continue;
        }
        first_line.insert(known.to_string(), key_line);
        if known == "servers" {
            if let Some(servers) = read_servers(reader, &full, value) {
                seen.servers = Some(servers);
            }
            continue;
        }
        let (value, value_line) = match value {
            Yaml::Scalar(v, l) => (v, l),
            Yaml::Refused(_) => continue,
            other => {
                reader.problem(other.line(), full, "must be a single value");
                continue;
            }
        };
        if value.is_empty() {
            reader.problem(value_line, full, "has an empty value");
            continue;
        }
        read_value(reader, &mut seen, known, value, value_line, &full);
    }

    let servers = check_pool(reader, &name, line, &mut seen, &first_line, ok_before);
    let (listen, listen_as_written) = seen.listen.clone()?;
    if reader.problems.len() != ok_before {
        return None;
    }
    Some((build(name, line, listen, servers, seen), listen_as_written))
}

/// A pool's `servers:` list; `None` when it is not a list (recorded in `reader`). Each server with
/// its line.
fn read_servers(
    reader: &mut Reader<'_>,
    full: &str,
    value: Yaml,
) -> Option<Vec<(TwemproxyServer, usize)>> {
    match value {
        Yaml::Seq(items, _) => {
            let mut servers = Vec::new();
            for item in items {
                match item {
                    Yaml::Scalar(s, l) if s.is_empty() => {
                        reader.problem(l, full.to_owned(), "a server must not be empty")
                    }
                    Yaml::Scalar(s, l) => match s.parse::<TwemproxyServer>() {
                        Ok(server) => servers.push((server, l)),
                        Err(message) => {
                            reader.problem(l, full.to_owned(), format!("{s:?} {message}"))
                        }
                    },
                    Yaml::Refused(_) => {}
                    other => reader.problem(
                        other.line(),
                        full.to_owned(),
                        "a server must be a single string",
                    ),
                }
            }
            Some(servers)
        }
        Yaml::Refused(_) => None,
        other => {
            reader.problem(
                other.line(),
                full.to_owned(),
                "must be a list of \"host:port:weight [name]\"",
            );
            None
        }
    }
}

/// One scalar key of a pool (`known`, written `value` on `value_line`), into `seen`; a value it
/// cannot take is recorded in `reader`.
fn read_value(
    reader: &mut Reader<'_>,
    seen: &mut Seen,
    known: &'static str,
    value: String,
    value_line: usize,
    full: &str,
) {
    let bad = |reader: &mut Reader<'_>, message: String| {
        reader.problem(value_line, full.to_owned(), message)
    };
    match known {
        "listen" => match parse_listen(&value) {
            Ok(l) => seen.listen = Some((l, value.clone())),
            Err(m) => bad(reader, format!("{value:?} {m}")),
        },
        "hash" => match value.parse::<TwemproxyHash>() {
            Ok(h) if !value.starts_with("twemproxy:") => seen.hash = Some(h),
            _ => bad(
                reader,
                format!(
                    "{value:?} is not a valid hash; known: {}",
                    TwemproxyHash::known_names()
                ),
            ),
        },
        "hash_tag" => match twemproxy::hash_tag(&value) {
            Ok(t) => seen.hash_tag = Some(t),
            Err(_) => bad(
                reader,
                format!("{value:?} is not a valid hash tag string with two characters"),
            ),
        },
        "distribution" => match value.parse::<Distribution>() {
            Ok(d) => seen.distribution = Some(d),
            Err(_) => bad(
                reader,
                format!("{value:?} is not a valid distribution (ketama, modula, random)"),
            ),
        },
        "redis_auth" => seen.redis_auth = Some(value),
        "redis" | "tcpkeepalive" | "preconnect" | "auto_eject_hosts" => match value.as_str() {
            "true" => {
                seen.bools.insert(known, true);
            }
            "false" => {
                seen.bools.insert(known, false);
            }
            _ => bad(reader, format!("{value:?} is not \"true\" or \"false\"")),
        },
        _ => match nc_atoi(&value) {
            Some(n) => {
                seen.numbers.insert(known, n as u32);
            }
            None => bad(reader, format!("{value:?} is not a number")),
        },
    }
}

/// nutcracker's pool-level checks (`conf_validate_pool`, `conf_validate_server`): a listen address,
/// servers, no two with one identity, `redis_auth` only on a redis pool. The servers, with their
/// lines (the problems are recorded in `reader`).
fn check_pool(
    reader: &mut Reader<'_>,
    name: &str,
    line: usize,
    seen: &mut Seen,
    first_line: &std::collections::HashMap<String, usize>,
    ok_before: usize,
) -> Vec<(TwemproxyServer, usize)> {
    if seen.listen.is_none() && !first_line.contains_key("listen") {
        reader.problem(line, name.to_owned(), "directive \"listen:\" is missing");
    }
    if seen.numbers.get("server_connections") == Some(&0) {
        reader.problem(
            first_line["server_connections"],
            format!("{name}.server_connections"),
            "directive \"server_connections:\" cannot be 0",
        );
    }
    let redis = seen.bools.get("redis").copied().unwrap_or(false);
    if !redis && seen.redis_auth.is_some() {
        reader.problem(
            first_line["redis_auth"],
            format!("{name}.redis_auth"),
            "directive \"redis_auth:\" is only valid for a redis pool",
        );
    }
    let servers = seen.servers.take().unwrap_or_default();
    if servers.is_empty() && !first_line.contains_key("servers") {
        reader.problem(line, name.to_owned(), "pool has no servers");
    } else if servers.is_empty() && reader.problems.len() == ok_before {
        reader.problem(
            first_line["servers"],
            format!("{name}.servers"),
            "pool has no servers",
        );
    }
    for (i, (s, l)) in servers.iter().enumerate() {
        for (earlier, el) in &servers[..i] {
            if earlier.identity() == s.identity() {
                reader.problem(
                    *l,
                    format!("{name}.servers"),
                    format!(
                        "has servers with same name '{}' (also on line {el})",
                        s.identity()
                    ),
                );
            } else if earlier.display_name() == s.display_name() {
                reader.problem(
                    *l,
                    format!("{name}.servers"),
                    format!(
                        "servers on lines {el} and {l} would both be reported as '{}'; nutcracker \
                         accepts this, shardring cannot tell them apart (name one of them)",
                        s.display_name()
                    ),
                );
            }
        }
    }
    servers
}

/// The pool read, every default resolved (only `seen`'s keys differ from them).
fn build(
    name: String,
    line: usize,
    listen: Listen,
    servers: Vec<(TwemproxyServer, usize)>,
    seen: Seen,
) -> PoolConfig {
    let redis = seen.bools.get("redis").copied().unwrap_or(false);
    let number = |k: &str, default: u32| seen.numbers.get(k).copied().unwrap_or(default);
    let flag = |k: &str| seen.bools.get(k).copied().unwrap_or(false);
    let ms = |n: u32| Duration::from_millis(u64::from(n));
    let defaults = PoolConfig::with_defaults(
        name,
        line,
        listen,
        servers.into_iter().map(|(s, _)| s).collect(),
    );
    // `redis` picks the protocol, and only a redis pool keeps `redis_auth` and `redis_db`
    // (nutcracker reads `redis_db` in a memcached pool too, and uses it for nothing).
    let protocol = if redis {
        ProtocolConfig::Redis(RedisConfig {
            auth: seen.redis_auth,
            db: number("redis_db", RedisConfig::default().db),
            ..RedisConfig::default()
        })
    } else {
        defaults.protocol.clone()
    };
    PoolConfig {
        hash: seen.hash.unwrap_or(defaults.hash),
        hash_tag: seen.hash_tag,
        distribution: seen.distribution.unwrap_or(defaults.distribution),
        timeout: seen.numbers.get("timeout").copied().map(ms),
        backlog: number("backlog", defaults.backlog),
        client_connections: number("client_connections", defaults.client_connections),
        protocol,
        preconnect: flag("preconnect"),
        auto_eject_hosts: flag("auto_eject_hosts"),
        server_connections: number("server_connections", defaults.server_connections),
        server_retry_timeout: seen
            .numbers
            .get("server_retry_timeout")
            .copied()
            .map_or(defaults.server_retry_timeout, ms),
        server_failure_limit: number("server_failure_limit", defaults.server_failure_limit),
        tcpkeepalive: flag("tcpkeepalive"),
        ..defaults
    }
}

/// nutcracker's `conf_set_listen`: `host:port` split at the last `:`, or `/path [permissions]`.
pub fn parse_listen(value: &str) -> Result<Listen, &'static str> {
    if value.starts_with('/') {
        return match value.rsplit_once(' ') {
            None => Ok(Listen::Unix {
                path: value.to_string(),
                permissions: 0,
            }),
            Some((path, perm)) => match strtol_octal(perm) {
                Some(p) if (0..=0o777).contains(&p) => Ok(Listen::Unix {
                    path: path.to_string(),
                    permissions: p as u32,
                }),
                _ => Err(
                    "has an invalid file permission in \"socket_path permission\" format string",
                ),
            },
        };
    }
    let (host, port) = value
        .rsplit_once(':')
        .ok_or("has an invalid \"hostname:port\" format string")?;
    match nc_atoi(port) {
        Some(p) if (1..=65535).contains(&p) => Ok(Listen::Tcp {
            host: host.to_string(),
            port: p as u16,
        }),
        _ => Err("has an invalid port in \"hostname:port\" format string"),
    }
}

/// C's `strtol(s, NULL, 8)` as nutcracker uses it for socket permissions: leading spaces, a sign, then
/// the octal digits there are (none gives 0, so `abc` is permissions 0); `None` on overflow.
fn strtol_octal(s: &str) -> Option<i64> {
    let s = s.trim_start();
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut value: i64 = 0;
    for b in digits.bytes().take_while(|b| (b'0'..=b'7').contains(b)) {
        value = value.checked_mul(8)?.checked_add(i64::from(b - b'0'))?;
    }
    Some(if negative { -value } else { value })
}
