//! twemproxy's YAML configuration (nutcracker 0.5.0), read with every problem reported at once.
//!
//! A file is a mapping of pool names to pools; a pool is a mapping of the keys below to single values,
//! except `servers`, a list. Defaults are nutcracker's:
//!
//! | key | value | default |
//! |---|---|---|
//! | `listen` | `host:port`, or `/socket/path [octal permissions]` | required |
//! | `hash` | one of the twelve [`TwemproxyHash`] names | `fnv1a_64` |
//! | `hash_tag` | two characters, e.g. `"{}"` | none |
//! | `distribution` | `ketama`, `modula`, `random` | `ketama` |
//! | `timeout` | milliseconds | none (wait forever) |
//! | `backlog` | listen backlog | 512 |
//! | `client_connections` | number | 0 (see below) |
//! | `redis` | `true` / `false` | `false` |
//! | `redis_auth` | password (only with `redis: true`) | none |
//! | `redis_db` | number | 0 |
//! | `preconnect` | `true` / `false` | `false` |
//! | `auto_eject_hosts` | `true` / `false` | `false` |
//! | `server_connections` | number, not 0 | 1 |
//! | `server_retry_timeout` | milliseconds | 30000 |
//! | `server_failure_limit` | number | 2 |
//! | `tcpkeepalive` | `true` / `false` | `false` |
//! | `servers` | list of `host:port:weight [name]` or `/socket/path:weight [name]` | required |
//!
//! Where nutcracker 0.5.0 differs from its own README, this reader follows the program: `reuseport` is
//! not a key of 0.5.0 (it came later) and is refused as unknown; `client_connections` is read but 0.5.0
//! overwrites it with 0 (no limit) whatever the file says, which [`Pool::effective_client_connections`]
//! reports; numbers are plain decimal digits only (no sign, no `1e3`); booleans are exactly `true` or
//! `false`. As nutcracker does, it refuses anchors, aliases, tags, flow collections (`[...]`, `{...}`),
//! explicit documents (`---`), more than one document, empty values, unknown and repeated keys, pools
//! without `listen` or servers, two servers with the same name (the string nutcracker hashes), two pools
//! with the same name or listen address. Unlike nutcracker, which stops at the first problem, it reports
//! them all with their lines; and it does not resolve host names (nutcracker resolves `listen` at start).
//!
//! ```
//! use shardring::compat::twemproxy_config::Config;
//!
//! let config = Config::parse("alpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1 cache-b\n")?;
//! let pool = &config.pools[0];
//! assert_eq!(pool.server_retry_timeout, 30_000);
//! let placement = pool.placement()?;
//! let server = placement.lookup(b"user:42").unwrap();
//! assert!(server.name() == "127.0.0.1:11211" || server.name() == "cache-b");
//!
//! let err = Config::parse("alpha:\n  listen: nowhere\n  hash: sha1\n  colour: blue\n").unwrap_err();
//! assert_eq!(err.to_string().lines().count(), 5); // a summary, then four problems
//! # Ok::<(), shardring::Error>(())
//! ```

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::Marker;

use super::twemproxy::{self, nc_atoi, Distribution, TwemproxyServer};
use crate::hash::TwemproxyHash;
use crate::{ConfigProblem, Error, Placement};

/// A parsed configuration: its pools in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The pools, in the order of the file.
    pub pools: Vec<Pool>,
}

/// Where a pool listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// `host:port` (the host is not resolved here).
    Tcp {
        /// The host or address as written.
        host: String,
        /// The port.
        port: u16,
    },
    /// A unix socket path, with the permissions to give it (0 when not given).
    Unix {
        /// The socket path.
        path: String,
        /// Octal permissions, at most 0777.
        permissions: u32,
    },
}

/// One pool of a twemproxy configuration, with nutcracker's defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The pool's name (its key in the file).
    pub name: String,
    /// The line the pool starts on.
    pub line: usize,
    /// `listen`.
    pub listen: Listen,
    /// `listen` as the file writes it: nutcracker compares these strings to find two pools on one
    /// address (so `127.0.0.1:022121` and `127.0.0.1:22121` are different to it).
    pub listen_as_written: String,
    /// `hash` (default `fnv1a_64`).
    pub hash: TwemproxyHash,
    /// `hash_tag` (default none).
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution` (default `ketama`).
    pub distribution: Distribution,
    /// `timeout` in milliseconds (default none: wait forever).
    pub timeout: Option<u32>,
    /// `backlog` (default 512).
    pub backlog: u32,
    /// `client_connections` as written (default 0); nutcracker 0.5.0 ignores it.
    pub client_connections: u32,
    /// `redis` (default false: memcached).
    pub redis: bool,
    /// `redis_auth` (default none).
    pub redis_auth: Option<String>,
    /// `redis_db` (default 0).
    pub redis_db: u32,
    /// `preconnect` (default false).
    pub preconnect: bool,
    /// `auto_eject_hosts` (default false).
    pub auto_eject_hosts: bool,
    /// `server_connections` (default 1).
    pub server_connections: u32,
    /// `server_retry_timeout` in milliseconds (default 30000).
    pub server_retry_timeout: u32,
    /// `server_failure_limit` (default 2).
    pub server_failure_limit: u32,
    /// `tcpkeepalive` (default false).
    pub tcpkeepalive: bool,
    /// `servers`, in file order.
    pub servers: Vec<TwemproxyServer>,
}

impl Pool {
    /// The client connection limit nutcracker 0.5.0 applies: always 0 (none), whatever the file says.
    pub fn effective_client_connections(&self) -> u32 {
        0
    }

    /// The pool's placement: where nutcracker sends each key (names: the server's name, else
    /// `host:port`).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for `distribution: random`; [`Error::DuplicateNode`] when two servers
    /// would be reported under the same name.
    pub fn placement(&self) -> Result<Box<dyn Placement>, Error> {
        twemproxy::placement(&self.servers, self.hash, self.hash_tag, self.distribution)
    }
}

/// A YAML node with the line it starts on.
#[derive(Debug)]
enum Yaml {
    Scalar(String, usize),
    Seq(Vec<Yaml>, usize),
    Map(Vec<(Yaml, Yaml)>, usize),
    /// Something refused (alias); its problem is already recorded.
    Refused(usize),
}

impl Yaml {
    fn line(&self) -> usize {
        match self {
            Yaml::Scalar(_, l) | Yaml::Seq(_, l) | Yaml::Map(_, l) | Yaml::Refused(l) => *l,
        }
    }
}

struct Reader<'a> {
    text: &'a str,
    parser: Parser<std::str::Chars<'a>>,
    problems: Vec<ConfigProblem>,
}

impl Reader<'_> {
    fn problem(&mut self, line: usize, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(ConfigProblem {
            line,
            key: key.into(),
            message: message.into(),
        });
    }

    fn next(&mut self) -> Result<(Event, Marker), ConfigProblem> {
        self.parser.next_token().map_err(|e| ConfigProblem {
            line: e.marker().line(),
            key: String::new(),
            message: format!("YAML syntax error: {}", e.info()),
        })
    }

    /// The character at a marker, to tell flow collections (`[`, `{`) from block ones.
    fn char_at(&self, mark: &Marker) -> Option<char> {
        self.text
            .lines()
            .nth(mark.line().checked_sub(1)?)?
            .chars()
            .nth(mark.col())
    }

    fn check_collection(&mut self, mark: &Marker, anchor: usize, has_tag: bool) {
        if matches!(self.char_at(mark), Some('[' | '{')) {
            self.problem(
                mark.line(),
                "",
                "flow collections ([...], {...}) are not accepted",
            );
        }
        self.check_anchor_tag(mark.line(), anchor, has_tag);
    }

    fn check_anchor_tag(&mut self, line: usize, anchor: usize, has_tag: bool) {
        if anchor > 0 {
            self.problem(line, "", "anchors are not accepted");
        }
        if has_tag {
            self.problem(line, "", "tags are not accepted");
        }
    }

    /// Reads one node whose first event is `first`, nested `depth` deep.
    fn node(&mut self, first: (Event, Marker), depth: usize) -> Result<Yaml, ConfigProblem> {
        let (event, mark) = first;
        let line = mark.line();
        // nutcracker allows two levels (pool, key) plus the servers list; stop long before the stack
        // could be at risk from a hostile file.
        if depth > MAX_DEPTH {
            return Err(ConfigProblem {
                line,
                key: String::new(),
                message: format!("nested deeper than {MAX_DEPTH} levels"),
            });
        }
        match event {
            Event::Scalar(value, _, anchor, tag) => {
                self.check_anchor_tag(line, anchor, tag.is_some());
                Ok(Yaml::Scalar(value, line))
            }
            Event::Alias(_) => {
                self.problem(line, "", "aliases are not accepted");
                Ok(Yaml::Refused(line))
            }
            Event::SequenceStart(anchor, tag) => {
                self.check_collection(&mark, anchor, tag.is_some());
                let mut items = Vec::new();
                loop {
                    let next = self.next()?;
                    if next.0 == Event::SequenceEnd {
                        return Ok(Yaml::Seq(items, line));
                    }
                    items.push(self.node(next, depth + 1)?);
                }
            }
            Event::MappingStart(anchor, tag) => {
                self.check_collection(&mark, anchor, tag.is_some());
                let mut entries = Vec::new();
                loop {
                    let next = self.next()?;
                    if next.0 == Event::MappingEnd {
                        return Ok(Yaml::Map(entries, line));
                    }
                    let key = self.node(next, depth + 1)?;
                    let next = self.next()?;
                    let value = self.node(next, depth + 1)?;
                    entries.push((key, value));
                }
            }
            other => Err(ConfigProblem {
                line,
                key: String::new(),
                message: format!("unexpected YAML event {other:?}"),
            }),
        }
    }

    /// Reads the whole stream: the root node of its one document.
    fn document(&mut self) -> Result<Option<Yaml>, ConfigProblem> {
        let mut root = None;
        let mut documents = 0;
        loop {
            let (event, mark) = self.next()?;
            match event {
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                Event::StreamEnd => break,
                Event::DocumentStart => {
                    documents += 1;
                    if documents == 2 {
                        self.problem(mark.line(), "", "must contain only 1 document");
                    }
                }
                other => {
                    let node = self.node((other, mark), 0)?;
                    if root.is_none() {
                        root = Some(node);
                    }
                }
            }
        }
        Ok(root)
    }
}

/// How deep the reader follows nested collections before giving up on the file.
const MAX_DEPTH: usize = 16;

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

impl Config {
    /// Parses a configuration file's text.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] listing every problem found, each with its line and `POOL.KEY`. A YAML
    /// syntax error stops the reading where it is, so problems after it are not seen.
    pub fn parse(text: &str) -> Result<Config, Error> {
        let mut reader = Reader {
            text,
            parser: Parser::new_from_str(text),
            problems: Vec::new(),
        };
        for (i, line) in text.lines().enumerate() {
            if line == "---" || line.starts_with("--- ") || line == "..." || line.starts_with('%') {
                reader.problem(
                    i + 1,
                    "",
                    "document markers and directives (---, ..., %) are not accepted",
                );
            }
        }
        let root = match reader.document() {
            Ok(root) => root,
            Err(p) => {
                reader.problems.push(p);
                None
            }
        };
        let mut pools = Vec::new();
        match root {
            None => {
                if reader.problems.is_empty() {
                    reader.problem(0, "", "has no pools");
                }
            }
            Some(Yaml::Map(entries, _)) => {
                for (key, value) in entries {
                    let Yaml::Scalar(name, line) = key else {
                        reader.problem(key.line(), "", "a pool name must be a plain string");
                        continue;
                    };
                    if let Some(pool) = read_pool(&mut reader, name, line, value) {
                        pools.push(pool);
                    }
                }
                if pools.is_empty() && reader.problems.is_empty() {
                    reader.problem(0, "", "has no pools");
                }
            }
            Some(other) => reader.problem(
                other.line(),
                "",
                "the file must be a mapping of pool names to pools",
            ),
        }
        // Pool-level duplicates, reported on the later pool.
        for (i, pool) in pools.iter().enumerate() {
            for earlier in &pools[..i] {
                if earlier.name == pool.name {
                    reader.problems.push(ConfigProblem {
                        line: pool.line,
                        key: pool.name.clone(),
                        message: format!("has the same name as the pool on line {}", earlier.line),
                    });
                }
                if earlier.listen_as_written == pool.listen_as_written {
                    reader.problems.push(ConfigProblem {
                        line: pool.line,
                        key: format!("{}.listen", pool.name),
                        message: format!(
                            "pools '{}' and '{}' have the same listen address",
                            earlier.name, pool.name
                        ),
                    });
                }
            }
        }
        if reader.problems.is_empty() {
            Ok(Config { pools })
        } else {
            let mut problems = reader.problems;
            problems.sort_by_key(|p| p.line);
            Err(Error::InvalidConfig { problems })
        }
    }

    /// The pool named `name`, or the only pool when `name` is `None`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] when there is no such pool, or several and no name was given.
    pub fn pool(&self, name: Option<&str>) -> Result<&Pool, Error> {
        let names = || {
            self.pools
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => {
                self.pools
                    .iter()
                    .find(|p| p.name == n)
                    .ok_or_else(|| Error::InvalidSetting {
                        setting: "pool",
                        reason: format!("no pool named {n:?}; pools: {}", names()),
                    })
            }
            None if self.pools.len() == 1 => Ok(&self.pools[0]),
            None => Err(Error::InvalidSetting {
                setting: "pool",
                reason: format!(
                    "the configuration has several pools; name one of: {}",
                    names()
                ),
            }),
        }
    }
}

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

fn read_pool(reader: &mut Reader<'_>, name: String, line: usize, value: Yaml) -> Option<Pool> {
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
            match value {
                Yaml::Seq(items, _) => {
                    let mut servers = Vec::new();
                    for item in items {
                        match item {
                            Yaml::Scalar(s, l) if s.is_empty() => {
                                reader.problem(l, full.clone(), "a server must not be empty")
                            }
                            Yaml::Scalar(s, l) => match s.parse::<TwemproxyServer>() {
                                Ok(server) => servers.push((server, l)),
                                Err(message) => {
                                    reader.problem(l, full.clone(), format!("{s:?} {message}"))
                                }
                            },
                            Yaml::Refused(_) => {}
                            other => reader.problem(
                                other.line(),
                                full.clone(),
                                "a server must be a single string",
                            ),
                        }
                    }
                    seen.servers = Some(servers);
                }
                Yaml::Refused(_) => {}
                other => reader.problem(
                    other.line(),
                    full,
                    "must be a list of \"host:port:weight [name]\"",
                ),
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
        let bad = |reader: &mut Reader<'_>, message: String| {
            reader.problem(value_line, full.clone(), message)
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

    // Pool-level checks (nutcracker's conf_validate_pool / conf_validate_server).
    if seen.listen.is_none() && !first_line.contains_key("listen") {
        reader.problem(line, name.clone(), "directive \"listen:\" is missing");
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
        reader.problem(line, name.clone(), "pool has no servers");
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
    let (listen, listen_as_written) = seen.listen.clone()?;
    if reader.problems.len() != ok_before {
        return None;
    }
    let number = |k: &str, default: u32| seen.numbers.get(k).copied().unwrap_or(default);
    let flag = |k: &str| seen.bools.get(k).copied().unwrap_or(false);
    Some(Pool {
        name,
        line,
        listen,
        listen_as_written,
        hash: seen.hash.unwrap_or_default(),
        hash_tag: seen.hash_tag,
        distribution: seen.distribution.unwrap_or_default(),
        timeout: seen.numbers.get("timeout").copied(),
        backlog: number("backlog", 512),
        client_connections: number("client_connections", 0),
        redis,
        redis_auth: seen.redis_auth,
        redis_db: number("redis_db", 0),
        preconnect: flag("preconnect"),
        auto_eject_hosts: flag("auto_eject_hosts"),
        server_connections: number("server_connections", 1),
        server_retry_timeout: number("server_retry_timeout", 30_000),
        server_failure_limit: number("server_failure_limit", 2),
        tcpkeepalive: flag("tcpkeepalive"),
        servers: servers.into_iter().map(|(s, _)| s).collect(),
    })
}

/// nutcracker's `conf_set_listen`: `host:port` split at the last `:`, or `/path [permissions]`.
fn parse_listen(value: &str) -> Result<Listen, &'static str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<ConfigProblem> {
        match Config::parse(text) {
            Err(Error::InvalidConfig { problems }) => problems,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c =
            Config::parse("p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n")
                .unwrap();
        let p = &c.pools[0];
        assert_eq!(p.hash, TwemproxyHash::Fnv1a64);
        assert_eq!(p.distribution, Distribution::Ketama);
        assert_eq!((p.timeout, p.backlog, p.server_connections), (None, 512, 1));
        assert_eq!(
            (p.server_retry_timeout, p.server_failure_limit),
            (30_000, 2)
        );
        assert!(!p.redis && !p.preconnect && !p.auto_eject_hosts && !p.tcpkeepalive);
        assert_eq!(p.line, 1);
    }

    #[test]
    fn every_problem_at_once_with_lines() {
        let text = "\
alpha:
  listen: 127.0.0.1
  hash: sha1
  hash_tag: \"{\"
  distribution: round_robin
  timeout: -1
  redis: yes
  reuseport: true
  servers:
   - 127.0.0.1:11211:0
   - 127.0.0.1:11212:1
   - 127.0.0.1:11212:1
beta:
  servers:
   - 127.0.0.1:11211:1
  hash: md5
  hash: crc32
";
        let ps = problems(text);
        let lines: Vec<usize> = ps.iter().map(|p| p.line).collect();
        assert_eq!(lines, vec![2, 3, 4, 5, 6, 7, 8, 10, 12, 13, 17], "{ps:#?}");
        assert!(ps[6].message.contains("\"reuseport\" is unknown"));
        assert_eq!(ps[6].key, "alpha.reuseport");
        assert!(ps[9].key == "beta" && ps[9].message.contains("listen"));
        let err = Config::parse(text).unwrap_err().to_string();
        assert!(err.starts_with("11 problems"), "{err}");
    }

    #[test]
    fn refuses_what_nutcracker_refuses() {
        for text in [
            "---\np:\n  listen: 127.0.0.1:1\n  servers:\n   - a:1:1\n",
            "p:\n  listen: 127.0.0.1:1\n  servers: [a:1:1]\n",
            "p: &x\n  listen: 127.0.0.1:1\n  servers:\n   - a:1:1\n",
            "p:\n  listen: 127.0.0.1:1\n  hash:\n  servers:\n   - a:1:1\n",
            "p:\n  listen: 127.0.0.1:1\n  servers_x:\n   - a:1:1\n",
            "p:\n  listen: 127.0.0.1:1\n  server_connections: 0\n  servers:\n   - a:1:1\n",
            "p:\n  listen: 127.0.0.1:1\n  redis_auth: pw\n  servers:\n   - a:1:1\n",
            "p:\n  listen: 127.0.0.1:1\n  servers:\n   - a:1:1 x\n   - b:2:1 x\n",
            "p:\n  listen: 127.0.0.1:1\n",
            "p:\n  listen: /tmp/s 1000\n  servers:\n   - a:1:1\n",
            "p:\n  listen: /tmp/s -1\n  servers:\n   - a:1:1\n",
            "",
            "p:\n  listen: 127.0.0.1:1\n  servers:\n   - a:1:1\nq:\n  listen: 127.0.0.1:1\n  servers:\n   - a:1:1\n",
            "p: [\n",
            &"[".repeat(100_000),
            &format!("p:\n  listen: {}", "{a: ".repeat(50_000)),
        ] {
            assert!(Config::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn reads_every_key() {
        let text = "\
p:
  listen: /tmp/nc.sock 0755
  hash: murmur
  hash_tag: \"{}\"
  distribution: modula
  timeout: 400
  backlog: 1024
  client_connections: 100
  redis: true
  redis_auth: secret
  redis_db: 3
  preconnect: true
  auto_eject_hosts: true
  server_connections: 2
  server_retry_timeout: 2000
  server_failure_limit: 5
  tcpkeepalive: true
  servers:
   - 127.0.0.1:6379:1 r1
   - /tmp/redis.sock:2
";
        let p = Config::parse(text).unwrap().pools.remove(0);
        assert_eq!(
            p.listen,
            Listen::Unix {
                path: "/tmp/nc.sock".into(),
                permissions: 0o755
            }
        );
        assert_eq!((p.hash, p.hash_tag), (TwemproxyHash::Murmur, Some(*b"{}")));
        assert_eq!(p.distribution, Distribution::Modula);
        assert_eq!(
            (p.timeout, p.backlog, p.client_connections),
            (Some(400), 1024, 100)
        );
        assert_eq!(p.effective_client_connections(), 0);
        assert!(p.redis && p.preconnect && p.auto_eject_hosts && p.tcpkeepalive);
        assert_eq!((p.redis_auth.as_deref(), p.redis_db), (Some("secret"), 3));
        assert_eq!(
            (
                p.server_connections,
                p.server_retry_timeout,
                p.server_failure_limit
            ),
            (2, 2000, 5)
        );
        assert_eq!(p.servers.len(), 2);
        assert_eq!(p.servers[1].identity(), "/tmp/redis.sock:");
        assert!(p.placement().is_ok());
    }
}
