//! nginx goldens (testdata/nginx, made by scripts/regen-golden/nginx.py with Debian's nginx 1.22.1):
//! every key must go to the upstream server nginx's `hash $arg_key consistent` chose.

use test_support::golden;

use shardring::compat::nginx;

#[test]
fn placements_match_nginx() {
    let mut total = 0;
    let mut files = 0;
    for path in golden::files("nginx") {
        let g = golden::read(&path);
        let servers: Vec<(String, u32)> = g.header["servers"]
            .split(' ')
            .map(|s| {
                let (addr, w) = s.rsplit_once('=').unwrap();
                (addr.to_string(), w.parse().unwrap())
            })
            .collect();
        let refs: Vec<(&str, u32)> = servers.iter().map(|(a, w)| (a.as_str(), *w)).collect();
        let ring = nginx::ring(&refs).unwrap();
        total += golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
        files += 1;
    }
    assert!(files >= 6 && total > 3000, "{files} files, {total} keys");
}
