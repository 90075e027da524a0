//! What a reload changes in one pool, for the log line that says so: servers added, removed,
//! re-weighted or moved to another address, and each other setting whose value differs.
//!
//! Servers are matched by the name a lookup reports ([`TwemproxyServer::display_name`]: the name
//! after the weight, else `host:port`), the spelling every log line about a server uses.

use std::collections::HashMap;
use std::fmt;

use shardring::compat::twemproxy::TwemproxyServer;

use super::PoolConfig;

/// The differences between two versions of one pool's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolChanges {
    /// Servers in the new version only, by name.
    pub added: Vec<String>,
    /// Servers in the old version only, by name.
    pub removed: Vec<String>,
    /// Servers in both whose weight changed: `name old→new`.
    pub reweighted: Vec<String>,
    /// Servers in both whose address changed: `name old→new`.
    pub readdressed: Vec<String>,
    /// Every other setting that changed: `setting old→new`.
    pub settings: Vec<String>,
}

impl PoolChanges {
    /// What changed from `old` to `new`.
    pub fn between<'a>(old: &'a PoolConfig, new: &'a PoolConfig) -> PoolChanges {
        let mut out = PoolChanges::default();
        // The first server of a name, as a lookup finds it.
        let by_name = |list: &'a [TwemproxyServer]| {
            let mut names: HashMap<String, &'a TwemproxyServer> = HashMap::new();
            for s in list {
                names.entry(s.display_name()).or_insert(s);
            }
            names
        };
        let (before, after) = (by_name(&old.servers), by_name(&new.servers));
        // In the files' order, so the log reads as the files do.
        for s in &new.servers {
            let name = s.display_name();
            match before.get(&name) {
                None => out.added.push(name),
                Some(o) => {
                    if o.weight != s.weight {
                        out.reweighted
                            .push(format!("{name} {}\u{2192}{}", o.weight, s.weight));
                    }
                    if (o.host.as_str(), o.port) != (s.host.as_str(), s.port) {
                        out.readdressed.push(format!(
                            "{name} {}\u{2192}{}",
                            address(o),
                            address(s)
                        ));
                    }
                }
            }
        }
        for o in &old.servers {
            let name = o.display_name();
            if !after.contains_key(&name) {
                out.removed.push(name);
            }
        }
        let mut setting = |name: &str, old: String, new: String| {
            if old != new {
                out.settings.push(format!("{name} {old}\u{2192}{new}"));
            }
        };
        // Settings shown as their `Debug` form, each under its YAML key (the field's name).
        macro_rules! debug_settings {
            ($($field:ident),*) => {
                $(setting(stringify!($field), format!("{:?}", old.$field), format!("{:?}", new.$field));)*
            };
        }
        setting("listen", old.listen.to_string(), new.listen.to_string());
        debug_settings!(hash);
        setting("hash_tag", tag(old.hash_tag), tag(new.hash_tag));
        setting(
            "distribution",
            old.distribution.to_string(),
            new.distribution.to_string(),
        );
        debug_settings!(
            timeout,
            backlog,
            client_connections,
            preconnect,
            auto_eject_hosts,
            server_connections,
            server_retry_timeout,
            server_failure_limit,
            tcpkeepalive,
            health_check_interval,
            breakers,
            rate_limits
        );
        if old.protocol != new.protocol {
            // The protocol's own settings (redis_auth, redis_db, limits, remedies) as one entry: their
            // values may be secrets (redis_auth), so they are named, not printed.
            out.settings
                .push("the protocol's settings (redis_auth, redis_db, limits or remedies)".into());
        }
        out
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.reweighted.is_empty()
            && self.readdressed.is_empty()
            && self.settings.is_empty()
    }
}

impl fmt::Display for PoolChanges {
    /// `servers added [a, b]; removed [c]; re-weighted [d 1→2]; settings changed [timeout …]`, or
    /// `nothing changed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing changed");
        }
        let parts = [
            ("servers added", &self.added),
            ("servers removed", &self.removed),
            ("servers re-weighted", &self.reweighted),
            ("servers moved", &self.readdressed),
            ("settings changed", &self.settings),
        ];
        let mut first = true;
        for (what, list) in parts {
            if list.is_empty() {
                continue;
            }
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{what} [{}]", list.join(", "))?;
        }
        Ok(())
    }
}

fn address(s: &TwemproxyServer) -> String {
    if s.port == 0 {
        s.host.clone()
    } else {
        format!("{}:{}", s.host, s.port)
    }
}

fn tag(t: Option<[u8; 2]>) -> String {
    t.map_or_else(
        || "none".into(),
        |t| String::from_utf8_lossy(&t).into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(servers: &[&str]) -> PoolConfig {
        PoolConfig::new("alpha", "127.0.0.1:22121", servers).unwrap()
    }

    #[test]
    fn servers_are_matched_by_name_and_each_change_is_named() {
        let old = pool(&["127.0.0.1:1:1 a", "127.0.0.1:2:1 b", "127.0.0.1:3:1"]);
        let mut new = pool(&["127.0.0.1:1:2 a", "127.0.0.1:9:1 b", "127.0.0.1:4:1"]);
        new.timeout = Some(std::time::Duration::from_millis(400));
        let c = PoolChanges::between(&old, &new);
        assert_eq!(c.added, ["127.0.0.1:4"]);
        assert_eq!(c.removed, ["127.0.0.1:3"]);
        assert_eq!(c.reweighted, ["a 1\u{2192}2"]);
        assert_eq!(c.readdressed, ["b 127.0.0.1:2\u{2192}127.0.0.1:9"]);
        assert_eq!(c.settings, ["timeout None\u{2192}Some(400ms)"]);
        assert_eq!(
            c.to_string(),
            "servers added [127.0.0.1:4]; servers removed [127.0.0.1:3]; servers re-weighted \
             [a 1\u{2192}2]; servers moved [b 127.0.0.1:2\u{2192}127.0.0.1:9]; settings changed \
             [timeout None\u{2192}Some(400ms)]"
        );
    }

    #[test]
    fn an_equal_config_changes_nothing() {
        let c = PoolChanges::between(&pool(&["127.0.0.1:1:1"]), &pool(&["127.0.0.1:1:1"]));
        assert!(c.is_empty());
        assert_eq!(c.to_string(), "nothing changed");
    }
}
