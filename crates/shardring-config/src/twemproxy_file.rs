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
//! overwrites it with 0 (no limit) whatever the file says, which [`PoolConfig::nutcracker_client_connections`]
//! reports; numbers are plain decimal digits only (no sign, no `1e3`); booleans are exactly `true` or
//! `false`. As nutcracker does, it refuses anchors, aliases, tags, flow collections (`[...]`, `{...}`),
//! explicit documents (`---`), more than one document, empty values, unknown and repeated keys, pools
//! without `listen` or servers, two servers with the same name (the string nutcracker hashes), two pools
//! with the same name or listen address. Unlike nutcracker, which stops at the first problem, it reports
//! them all with their lines; and it does not resolve host names (nutcracker resolves `listen` at start).
//!
//! ```
//! use shardring_config::read_pools;
//!
//! let pools = read_pools("alpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1 cache-b\n")?;
//! let pool = &pools[0];
//! assert_eq!(pool.server_retry_timeout, std::time::Duration::from_secs(30));
//! let placement = pool.placement().unwrap();
//! let server = placement.lookup(b"user:42").unwrap();
//! assert!(server.name() == "127.0.0.1:11211" || server.name() == "cache-b");
//!
//! let err = read_pools("alpha:\n  listen: nowhere\n  hash: sha1\n  colour: blue\n").unwrap_err();
//! assert_eq!(err.problems.len(), 4);
//! # Ok::<(), shardring_config::ConfigErrors>(())
//! ```

use super::problem::{ConfigErrors, ConfigProblem};
use super::twemproxy_keys::read_pool;
use super::yaml::{Reader, Yaml};
use super::PoolConfig;

/// Reads a twemproxy configuration file's text: its pools in file order, with nutcracker's defaults and
/// this proxy's defaults for the proxy-only settings. No proxy-only checks are made here (see
/// [`super::ProxyConfig::from_yaml`]).
///
/// # Errors
/// Every problem found, each with its line and `POOL.KEY`. A YAML syntax error stops the reading where
/// it is, so problems after it are not seen.
pub fn read_pools(text: &str) -> Result<Vec<PoolConfig>, ConfigErrors> {
    let mut reader = Reader::new(text);
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
    for (i, (pool, listen_as_written)) in pools.iter().enumerate() {
        let pool = (pool, listen_as_written);
        for earlier in &pools[..i] {
            if earlier.0.name == pool.0.name {
                reader.problems.push(ConfigProblem {
                    line: pool.0.line,
                    key: pool.0.name.clone(),
                    message: format!("has the same name as the pool on line {}", earlier.0.line),
                });
            }
            if earlier.1 == *pool.1 {
                reader.problems.push(ConfigProblem {
                    line: pool.0.line,
                    key: format!("{}.listen", pool.0.name),
                    message: format!(
                        "pools '{}' and '{}' have the same listen address",
                        earlier.0.name, pool.0.name
                    ),
                });
            }
        }
    }
    if reader.problems.is_empty() {
        Ok(pools.into_iter().map(|(p, _)| p).collect())
    } else {
        let mut problems = reader.problems;
        problems.sort_by_key(|p| p.line);
        Err(ConfigErrors { problems })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Distribution, Listen, TwemproxyHash};

    fn problems(text: &str) -> Vec<ConfigProblem> {
        match read_pools(text) {
            Err(ConfigErrors { problems }) => problems,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = read_pools("p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n")
            .unwrap();
        let p = &c[0];
        assert_eq!(p.hash, TwemproxyHash::Fnv1a64);
        assert_eq!(p.distribution, Distribution::Ketama);
        assert_eq!((p.timeout, p.backlog, p.server_connections), (None, 512, 1));
        assert_eq!(
            (p.server_retry_timeout, p.server_failure_limit),
            (Duration::from_secs(30), 2)
        );
        assert!(!p.is_redis() && !p.preconnect && !p.auto_eject_hosts && !p.tcpkeepalive);
        assert_eq!(p.memcache(), Some(&crate::MemcacheConfig::default()));
        assert_eq!(p.line, 1);
    }

    #[test]
    fn redis_picks_the_protocol_and_a_memcached_pool_keeps_nothing_of_redis_db() {
        // nutcracker reads `redis_db` in any pool and uses it only in a redis one.
        let text =
            "p:\n  listen: 127.0.0.1:22121\n  redis_db: 3\n  servers:\n   - 127.0.0.1:11211:1\n";
        let p = read_pools(text).unwrap().remove(0);
        assert_eq!(p.protocol, crate::ProtocolConfig::default());
        let text = text.replace("  redis_db", "  redis: true\n  redis_db");
        let p = read_pools(&text).unwrap().remove(0);
        assert_eq!(p.redis().map(|r| r.db), Some(3));
        assert!(p.memcache().is_none());
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
        assert_eq!(read_pools(text).unwrap_err().problems.len(), 11);
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
            assert!(read_pools(text).is_err(), "{text}");
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
        let p = read_pools(text).unwrap().remove(0);
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
            (Some(Duration::from_millis(400)), 1024, 100)
        );
        assert_eq!(p.nutcracker_client_connections(), 0);
        assert!(p.is_redis() && p.preconnect && p.auto_eject_hosts && p.tcpkeepalive);
        let r = p.redis().unwrap();
        assert_eq!((r.auth.as_deref(), r.db), (Some("secret"), 3));
        assert_eq!(r.limits, crate::RedisLimits::default());
        assert_eq!(
            (
                p.server_connections,
                p.server_retry_timeout,
                p.server_failure_limit
            ),
            (2, Duration::from_secs(2), 5)
        );
        assert_eq!(p.servers.len(), 2);
        assert_eq!(p.servers[1].identity(), "/tmp/redis.sock:");
        assert!(p.placement().is_ok());
    }
}
