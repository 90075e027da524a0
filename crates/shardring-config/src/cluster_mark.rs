//! The mark that makes a pool of a file a Redis Cluster pool: a comment on the pool's own line,
//!
//! ```yaml
//! cache:   # shardring: redis-cluster
//!   listen: 127.0.0.1:22121
//!   redis: true
//!   servers:
//!    - 127.0.0.1:7000:1
//! ```
//!
//! Why a comment: nutcracker refuses every key it does not know, and a pool's kind must travel
//! with its servers. `shardring migrate` moves a ketama pool onto a cluster by rewriting the
//! proxies' files (the seeds become the pool's servers), and a flag given when a proxy started
//! cannot change at that moment; the file the proxy reloads must say that its servers are now a
//! cluster's seeds. `--redis-cluster=POOL` stays the same switch for a pool whose file has no mark.

use crate::problem::ConfigErrors;
use crate::{ClusterConfig, PoolConfig, ProtocolConfig};

/// The mark, after the `#`.
const MARK: &str = "shardring: redis-cluster";

/// The pool a line names when it starts one (`NAME:` at the start of the line, quoted or not), and
/// the comment after it, if any.
fn pool_line(line: &str) -> Option<(&str, Option<&str>)> {
    if line.starts_with([' ', '\t', '#', '-']) {
        return None;
    }
    let (head, comment) = match line.split_once('#') {
        Some((h, c)) => (h, Some(c.trim())),
        None => (line, None),
    };
    let name = head.trim_end().strip_suffix(':')?;
    Some((name.trim_matches(|c| c == '"' || c == '\''), comment))
}

/// The pools `text` marks as clusters, with the 1-based lines of their marks.
pub fn marked_pools(text: &str) -> Vec<(String, usize)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| match pool_line(l) {
            Some((name, Some(c))) if c == MARK => Some((name.to_owned(), i + 1)),
            _ => None,
        })
        .collect()
}

/// Makes each pool `text` marks a cluster pool, its servers the seeds: a problem for a mark on a
/// memcached pool.
pub(crate) fn apply(text: &str, pools: &mut [PoolConfig], errors: &mut ConfigErrors) {
    for (name, line) in marked_pools(text) {
        let Some(pool) = pools.iter_mut().find(|p| p.name == name) else {
            continue;
        };
        let seeds = pool.servers.iter().map(|s| s.address()).collect();
        match &mut pool.protocol {
            ProtocolConfig::Redis(r) => {
                r.cluster.get_or_insert_with(|| ClusterConfig::new(seeds));
            }
            ProtocolConfig::Memcache(_) => errors.push(
                &name,
                format!("line {line}: `# {MARK}` marks redis pools only (redis: true)"),
            ),
        }
    }
}

/// `text` with pool `pool`'s line marked as a cluster's (`cluster`) or not: the comment that line
/// had is replaced; every other line is kept byte for byte. `None` when no line starts the pool.
pub fn with_mark(text: &str, pool: &str, cluster: bool) -> Option<String> {
    let mut out = String::with_capacity(text.len() + MARK.len() + 4);
    let mut found = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        match pool_line(body) {
            Some((name, comment)) if name == pool && !found => {
                found = true;
                if (comment == Some(MARK)) == cluster {
                    // Already so: the line is kept byte for byte.
                    out.push_str(line);
                    continue;
                }
                let head = body.split_once('#').map_or(body, |(h, _)| h).trim_end();
                out.push_str(head);
                match (cluster, comment) {
                    (true, _) => out.push_str(&format!("  # {MARK}")),
                    (false, Some(c)) if c != MARK => out.push_str(&format!("  # {c}")),
                    (false, _) => {}
                }
                out.push_str(&line[body.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# pools\ncache:  # shardring: redis-cluster\n  listen: 127.0.0.1:22121\n  redis: true\n  servers:\n   - 127.0.0.1:7000:1\n\"other\": # the old one\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11211:1\n";

    #[test]
    fn a_marked_redis_pool_is_a_cluster_of_its_servers_and_the_others_are_not() {
        assert_eq!(marked_pools(FILE), [("cache".to_owned(), 2)]);
        let config = crate::ProxyConfig::from_yaml(FILE).unwrap();
        let cluster = config.pools[0].cluster().expect("a cluster pool");
        assert_eq!(cluster.seeds, ["127.0.0.1:7000"]);
        assert!(config.pools[1].cluster().is_none());
    }

    #[test]
    fn a_mark_on_a_memcached_pool_is_refused_with_its_line() {
        let text = FILE.replace(
            "\"other\": # the old one",
            "other: # shardring: redis-cluster",
        );
        let e = crate::ProxyConfig::from_yaml(&text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 7") && e.contains("redis pools only"),
            "{e}"
        );
    }

    #[test]
    fn a_next_cluster_refuses_now_what_the_cut_over_would_refuse() {
        let now = |extra: &str| {
            crate::ProxyConfig::from_yaml(&format!(
                "cache:\n  listen: 127.0.0.1:22121\n  redis: true\n{extra}  servers:\n   - 127.0.0.1:6379:1\n"
            ))
            .unwrap()
        };
        let next = crate::ProxyConfig::from_yaml(
            "cache:  # shardring: redis-cluster\n  listen: 127.0.0.1:1\n  redis: true\n  servers:\n   - 127.0.0.1:7000:1\n",
        )
        .unwrap();
        let planned =
            |c: crate::ProxyConfig| c.with_next(&next).and_then(|c| c.validate().map(|()| c));
        let ok = planned(now("  hash_tag: \"{}\"\n")).unwrap();
        assert!(ok.pools[0].next.as_ref().unwrap().cluster.is_some());
        for (extra, says) in [
            ("  hash_tag: \"<>\"\n", "hash_tag"),
            ("  redis_db: 3\n", "redis_db"),
        ] {
            let e = planned(now(extra)).unwrap_err().to_string();
            assert!(
                e.contains("the next membership is a Redis Cluster") && e.contains(says),
                "{e}"
            );
        }
        let mut replicated = now("");
        replicated.pools[0].remedies.replicas = 2;
        let e = planned(replicated).unwrap_err().to_string();
        assert!(e.contains("--replicas"), "{e}");
    }

    #[test]
    fn marking_and_unmarking_change_only_the_pools_line() {
        let off = with_mark(FILE, "cache", false).unwrap();
        assert!(off.starts_with("# pools\ncache:\n  listen"), "{off}");
        assert!(marked_pools(&off).is_empty());
        assert_eq!(with_mark(&off, "cache", true).unwrap(), FILE);
        let other = with_mark(FILE, "other", true).unwrap();
        assert!(
            other.contains("\"other\":  # shardring: redis-cluster\n"),
            "{other}"
        );
        let back = with_mark(&other, "other", false).unwrap();
        assert!(back.contains("\"other\":\n  listen"), "{back}");
        assert!(with_mark(FILE, "gamma", true).is_none());
        assert_eq!(
            with_mark(FILE, "other", false).unwrap(),
            FILE,
            "an unmarked line is kept as it is"
        );
        // CRLF files keep their line ends.
        let crlf = FILE.replace('\n', "\r\n");
        assert_eq!(
            with_mark(&with_mark(&crlf, "cache", false).unwrap(), "cache", true).unwrap(),
            crlf
        );
    }
}
