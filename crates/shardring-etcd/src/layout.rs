//! The key layout in etcd: a **contract** that `shardring members`, the proxy, embedded clients and the
//! tests rely on.
//!
//! One key per server:
//!
//! ```text
//! <prefix><pool>/servers/<name>  =  host:port[:weight]
//! ```
//!
//! - `<prefix>` is `/shardring/` unless told otherwise ([`DEFAULT_PREFIX`]); a prefix given without a
//!   trailing `/` gets one ([`normalise_prefix`]): `/cache` means `/cache/`, never `/cachealpha/…`.
//! - `<name>` is the server's name from the YAML file, or `host:port` for a server without one. A
//!   member whose name equals its address is an *unnamed* server and is placed exactly as nutcracker
//!   places an unnamed server (port 11211 left out of its points; see
//!   [`Member::to_twemproxy`](shardring::membership::Member::to_twemproxy)). So a pool published from a
//!   YAML file keeps every key where it was.
//! - The value is `host:port`, optionally followed by `:weight` (weight 1 when left out). An IPv6
//!   address is written in brackets (`[::1]:11211:2`); a unix socket is its path (`/run/mc.sock[:weight]`).
//!   Surrounding whitespace (a trailing newline from `etcdctl put`) is ignored.
//!
//! Anything else is a [`MalformedValue`]: that server is skipped and the problem reported, the rest of the
//! pool still applies.

use shardring::membership::Member;

use crate::error::MalformedValue;

/// The prefix under which pools live unless `--etcd-prefix` says otherwise.
pub const DEFAULT_PREFIX: &str = "/shardring/";

/// The weight of a server whose value has none.
pub const DEFAULT_WEIGHT: u32 = 1;

/// Where one pool's servers live: `<prefix><pool>/servers/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKeys {
    /// The key prefix every server key of the pool starts with.
    servers: String,
}

/// `prefix` with a trailing `/` (added when missing), so that a pool's name never runs into it.
pub fn normalise_prefix(prefix: &str) -> String {
    if prefix.ends_with('/') {
        prefix.to_owned()
    } else {
        format!("{prefix}/")
    }
}

impl PoolKeys {
    /// The keys of `pool` under `prefix` (e.g. [`DEFAULT_PREFIX`]; [`normalise_prefix`]d).
    pub fn new(prefix: &str, pool: &str) -> PoolKeys {
        PoolKeys {
            servers: format!("{}{pool}/servers/", normalise_prefix(prefix)),
        }
    }

    /// `<prefix><pool>/servers/`: range and watch this prefix.
    pub fn servers_prefix(&self) -> &str {
        &self.servers
    }

    /// The key of the server named `name`.
    pub fn server_key(&self, name: &str) -> String {
        format!("{}{name}", self.servers)
    }

    /// The server name a key stands for, or `None` when the key is not one of this pool's server keys
    /// (or names nobody: the prefix itself).
    pub fn name_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.servers.as_str())
            .filter(|name| !name.is_empty())
    }

    /// Reads one key and value into a member.
    ///
    /// # Errors
    /// A [`MalformedValue`] saying what is wrong: a key that is not UTF-8 or not under this pool, or a
    /// value that is not `host:port[:weight]`.
    pub fn parse(&self, key: &[u8], value: &[u8]) -> Result<Member, MalformedValue> {
        let malformed = |reason: &str| MalformedValue {
            key: String::from_utf8_lossy(key).into_owned(),
            value: String::from_utf8_lossy(value).into_owned(),
            reason: reason.to_string(),
        };
        let key_text = std::str::from_utf8(key).map_err(|_| malformed("the key is not UTF-8"))?;
        let name = self
            .name_of(key_text)
            .ok_or_else(|| malformed("the key is not <prefix><pool>/servers/<name>"))?;
        let text = std::str::from_utf8(value).map_err(|_| malformed("the value is not UTF-8"))?;
        let (addr, weight) = parse_value(text).map_err(|reason| malformed(&reason))?;
        Member::new(name, addr, weight).map_err(|e| malformed(&e.to_string()))
    }
}

/// The value of a member's key: `host:port` or `host:port:weight` (the weight left out when it is 1).
pub fn format_value(member: &Member) -> String {
    if member.weight() == DEFAULT_WEIGHT {
        member.addr().to_string()
    } else {
        format!("{}:{}", member.addr(), member.weight())
    }
}

/// Splits `host:port[:weight]` into the address (`host:port`, brackets kept for IPv6) and the weight.
///
/// # Errors
/// Why the value is not one.
pub fn parse_value(value: &str) -> Result<(String, u32), String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("the value is empty (expected host:port[:weight])".into());
    }
    if value.starts_with('/') {
        // A unix socket: the path, then perhaps `:weight`.
        return match value.rsplit_once(':') {
            Some((path, w)) if w.bytes().all(|b| b.is_ascii_digit()) => {
                Ok((path.to_string(), parse_weight(w)?))
            }
            _ => Ok((value.to_string(), DEFAULT_WEIGHT)),
        };
    }
    let (host, rest) = if let Some(v6) = value.strip_prefix('[') {
        let (inner, rest) = v6
            .split_once(']')
            .ok_or("an IPv6 address lacks its closing bracket")?;
        let rest = rest
            .strip_prefix(':')
            .ok_or("expected :port after the IPv6 address")?;
        (format!("[{inner}]"), rest)
    } else {
        let (host, rest) = value.split_once(':').ok_or("expected host:port[:weight]")?;
        (host.to_string(), rest)
    };
    if host.is_empty() || host == "[]" || host.contains(|c: char| c.is_whitespace()) {
        return Err("the host is empty or contains spaces".into());
    }
    let (port, weight) = match rest.split_once(':') {
        Some((port, weight)) => (port, parse_weight(weight)?),
        None => (rest, DEFAULT_WEIGHT),
    };
    let port_ok = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    if !port_ok {
        return Err(format!("the port {port:?} is not a number from 1 to 65535"));
    }
    Ok((format!("{host}:{port}"), weight))
}

fn parse_weight(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        // twemproxy reads weights into an int; keep to what it could read.
        Ok(w) if w >= 1 && w <= i32::MAX as u32 && text.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(w)
        }
        _ => Err(format!(
            "the weight {text:?} is not a whole number from 1 to {}",
            i32::MAX
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_with_and_without_weights() {
        assert_eq!(
            parse_value("10.0.0.1:11211"),
            Ok(("10.0.0.1:11211".into(), 1))
        );
        assert_eq!(
            parse_value("cache-a.local:11212:3\n"),
            Ok(("cache-a.local:11212".into(), 3))
        );
        assert_eq!(parse_value("[::1]:11211:2"), Ok(("[::1]:11211".into(), 2)));
        assert_eq!(parse_value("/run/mc.sock"), Ok(("/run/mc.sock".into(), 1)));
        assert_eq!(
            parse_value("/run/mc.sock:4"),
            Ok(("/run/mc.sock".into(), 4))
        );
    }

    #[test]
    fn malformed_values_say_why() {
        for bad in [
            "",
            "   ",
            "host",
            "host:",
            ":11211",
            "host:0",
            "host:65536",
            "host:port",
            "host:11211:0",
            "host:11211:-1",
            "host:11211:+2",
            "host:11211:2:3",
            "host:11211:99999999999",
            "ho st:11211",
            "[::1:11211",
            "[::1]11211",
            "[]:11211",
            "::1:11211",
        ] {
            assert!(parse_value(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_name_their_servers() {
        let keys = PoolKeys::new(DEFAULT_PREFIX, "alpha");
        assert_eq!(keys.servers_prefix(), "/shardring/alpha/servers/");
        for without_slash in ["/shardring", "none"] {
            let keys = PoolKeys::new(without_slash, "alpha");
            assert_eq!(
                keys.servers_prefix(),
                format!("{without_slash}/alpha/servers/")
            );
        }
        assert_eq!(
            keys.server_key("cache-a"),
            "/shardring/alpha/servers/cache-a"
        );
        assert_eq!(
            keys.name_of("/shardring/alpha/servers/cache-a"),
            Some("cache-a")
        );
        assert_eq!(keys.name_of("/shardring/alpha/servers/"), None);
        assert_eq!(keys.name_of("/shardring/beta/servers/x"), None);
        let m = keys
            .parse(
                b"/shardring/alpha/servers/10.0.0.1:11211",
                b"10.0.0.1:11211",
            )
            .unwrap();
        assert!(!m.is_named());
        assert_eq!(format_value(&m), "10.0.0.1:11211");
        let m = keys
            .parse(b"/shardring/alpha/servers/cache-b", b"10.0.0.2:11211:2")
            .unwrap();
        assert!(m.is_named());
        assert_eq!(format_value(&m), "10.0.0.2:11211:2");
        let bad = keys
            .parse(b"/shardring/alpha/servers/c", b"nope")
            .unwrap_err();
        assert_eq!(bad.key, "/shardring/alpha/servers/c");
        assert!(keys.parse(b"/shardring/alpha/servers/c", &[0xff]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn values_round_trip(host in "[a-z][a-z0-9.-]{0,20}", port in 1u16.., weight in 1u32..1000) {
            let member = Member::new("m", format!("{host}:{port}"), weight).unwrap();
            let (addr, w) = parse_value(&format_value(&member)).unwrap();
            proptest::prop_assert_eq!((addr.as_str(), w), (member.addr(), weight));
        }

        #[test]
        fn any_value_parses_or_is_refused_without_panicking(value in ".{0,40}") {
            let _ = parse_value(&value);
        }
    }
}
