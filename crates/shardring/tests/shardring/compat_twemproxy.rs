//! nutcracker 0.5.0 goldens (testdata/twemproxy, made by scripts/regen-golden/twemproxy.py): every key of
//! every pool must land on the server where nutcracker put it.

use test_support::golden;

use shardring::compat::twemproxy::{placement, Distribution, TwemproxyServer};
use shardring::hash::TwemproxyHash;

/// The pool settings from one of the golden `.yml` files, read line by line (the files are simple, and
/// this keeps the check independent of the configuration reader, which has its own test below).
struct Pool {
    hash: TwemproxyHash,
    distribution: Distribution,
    hash_tag: Option<[u8; 2]>,
    servers: Vec<TwemproxyServer>,
}

fn read_pool(text: &str) -> Pool {
    let mut pool = Pool {
        hash: TwemproxyHash::default(),
        distribution: Distribution::Ketama,
        hash_tag: None,
        servers: Vec::new(),
    };
    for line in text.lines() {
        let line = line.trim();
        if let Some(server) = line.strip_prefix("- ") {
            pool.servers.push(server.parse().unwrap());
        } else if let Some(h) = line.strip_prefix("hash: ") {
            pool.hash = h.parse().unwrap();
        } else if let Some(d) = line.strip_prefix("distribution: ") {
            pool.distribution = d.parse().unwrap();
        } else if let Some(t) = line.strip_prefix("hash_tag: ") {
            let t = t.trim_matches('"').as_bytes();
            pool.hash_tag = Some([t[0], t[1]]);
        }
    }
    pool
}

#[test]
fn placements_match_nutcracker() {
    let mut total = 0;
    let mut files = 0;
    for path in golden::files("twemproxy") {
        let g = golden::read(&path);
        let yml = std::fs::read_to_string(path.with_extension("yml")).unwrap();
        let pool = read_pool(&yml);
        let mut p = placement(&pool.servers, pool.hash, pool.hash_tag, pool.distribution).unwrap();
        // An ejected server (auto_eject_hosts) is out of nutcracker's continuum until it is retried.
        if let Some(ejected) = g.header.get("ejected") {
            p.remove(ejected).unwrap();
        }
        total += golden::check(&g, |k| p.lookup(k).unwrap().name().to_string());
        files += 1;
    }
    assert!(files >= 20 && total > 15_000, "{files} files, {total} keys");
}
