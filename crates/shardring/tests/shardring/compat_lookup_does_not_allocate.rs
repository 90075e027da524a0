//! The compatibility rings keep the library's promise that a lookup never allocates: hash tags, the
//! twemproxy and libhashkit hashes, uhashring's shifted position and libketama's NUL cut all work on
//! borrowed slices.

use shardring::compat::twemproxy::{placement, Distribution, TwemproxyServer};
use shardring::compat::CompatMode;
use shardring::hash::{JavaHash, TwemproxyHash};
use shardring::ring::TemplateRingBuilder;
use shardring::Placement;

use crate::support::allocations;

fn assert_no_allocation(what: &str, p: &dyn Placement, keys: &[Vec<u8>]) {
    let slices: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let mut owners = vec![None; slices.len()];
    let before = allocations();
    let mut found = 0usize;
    for key in keys {
        found += usize::from(p.lookup(key).is_some());
    }
    p.locate_many(&slices, &mut owners);
    found += owners.iter().filter(|o| o.is_some()).count();
    let after = allocations();
    assert_eq!(found, 2 * keys.len(), "{what}");
    assert_eq!(after, before, "{what} allocated during lookups");
}

#[test]
fn compat_lookups_do_not_allocate() {
    let keys: Vec<Vec<u8>> = (0..2000)
        .map(|i| format!("{{user{}}}:{i}:\u{e9}", i % 7).into_bytes())
        .chain([Vec::new(), b"a\0b".to_vec(), b"\xff\xe0\x80x".to_vec()])
        .collect();
    let nodes: Vec<String> = (0..20)
        .map(|i| format!("10.0.0.{i}:1121{}", i % 3))
        .collect();
    let list: Vec<(&str, f64)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), 1.0 + (i % 3) as f64))
        .collect();
    let unweighted: Vec<(&str, f64)> = list.iter().map(|&(n, _)| (n, 1.0)).collect();
    for &mode in CompatMode::ALL {
        // groupcache has no weights.
        let list = if mode == CompatMode::Groupcache {
            &unweighted
        } else {
            &list
        };
        let ring = mode.build(list, None).unwrap();
        assert_no_allocation(mode.name(), &ring, &keys);
    }
    // spymemcached's Java hashes decode UTF-8 (malformed bytes too) as they hash.
    for &hash in JavaHash::ALL {
        for mode in [CompatMode::Spymemcached, CompatMode::SpymemcachedWeighted] {
            let ring = mode.build(&list, Some(hash.name())).unwrap();
            assert_no_allocation(&format!("{mode} {hash}"), &ring, &keys);
        }
    }
    let template = TemplateRingBuilder::new("{name}&&{i}")
        .node("a", 1.0)
        .node("b", 2.0)
        .build()
        .unwrap();
    assert_no_allocation("template", &template, &keys);
    let servers: Vec<TwemproxyServer> = nodes
        .iter()
        .map(|n| format!("{n}:2").parse().unwrap())
        .collect();
    for &hash in TwemproxyHash::ALL {
        for distribution in [Distribution::Ketama, Distribution::Modula] {
            let p = placement(&servers, hash, Some(*b"{}"), distribution).unwrap();
            assert_no_allocation(&format!("twemproxy {hash} {distribution}"), &*p, &keys);
        }
    }
}
