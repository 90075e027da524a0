//! uhashring goldens (testdata/uhashring, made by scripts/regen-golden/uhashring_golden.py with uhashring
//! from PyPI), for the uhashring mode and, where the two programs agree, the libketama mode.

use test_support::golden;

use shardring::compat::libketama::{libketama_ring, uhashring_ring};
use shardring::hash::md5_u32;
use shardring::Ring;

fn nodes(g: &golden::Golden) -> Vec<(String, u64)> {
    g.header["nodes"]
        .split(' ')
        .map(|nw| {
            let (n, w) = nw.rsplit_once('=').unwrap();
            (n.to_string(), w.parse().unwrap())
        })
        .collect()
}

fn as_refs(nodes: &[(String, u64)]) -> Vec<(&str, u64)> {
    nodes.iter().map(|(n, w)| (n.as_str(), *w)).collect()
}

#[test]
fn uhashring_mode_matches_uhashring() {
    let mut total = 0;
    for path in golden::files("uhashring") {
        let g = golden::read(&path);
        let vnodes: u32 = g.header["vnodes"].parse().unwrap();
        let all = nodes(&g);
        let ring = uhashring_ring(&as_refs(&all), vnodes).unwrap();
        total += golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
    assert!(total > 5000, "{total}");
}

/// The same points (as multisets: the two programs order tied points differently).
fn same_points(a: &Ring, b: &Ring) -> bool {
    let set = |r: &Ring| {
        let mut v: Vec<(u32, String)> =
            r.points().map(|(p, n)| (p, n.name().to_string())).collect();
        v.sort();
        v
    };
    set(a) == set(b)
}

/// Positions held by more than one node: there libketama (first listed wins) and uhashring (last added
/// wins) part ways by design.
fn tied_positions(r: &Ring) -> Vec<u32> {
    let points: Vec<(u32, &str)> = r.points().map(|(p, n)| (p, n.name())).collect();
    let mut tied: Vec<u32> = points
        .windows(2)
        .filter(|w| w[0].0 == w[1].0 && w[0].1 != w[1].1)
        .map(|w| w[0].0)
        .collect();
    tied.dedup();
    tied
}
/// libketama gives the same continuum as uhashring at vnodes 40 whenever its single-precision digest
/// count equals uhashring's integer one; then every key whose MD5 is not exactly a point (and has no
/// NUL byte) lands on the same server.
#[test]
fn libketama_mode_matches_uhashring_where_they_agree() {
    let mut compared = 0;
    let mut configs = 0;
    for path in golden::files("uhashring") {
        let g = golden::read(&path);
        if g.header["vnodes"] != "40" {
            continue;
        }
        let all = nodes(&g);
        let lk = libketama_ring(&as_refs(&all)).unwrap();
        let uh = uhashring_ring(&as_refs(&all), 40).unwrap();
        assert!(
            same_points(&lk, &uh),
            "{}: digest counts differ between libketama and uhashring",
            path.display()
        );
        configs += 1;
        let positions: Vec<u32> = lk.points().map(|(p, _)| p).collect();
        let tied = tied_positions(&lk);
        for (key, want) in &g.rows {
            let h = md5_u32(key);
            let at = positions.partition_point(|&p| p < h);
            let owner_position = positions.get(at).copied().unwrap_or(positions[0]);
            if key.contains(&0)
                || positions.binary_search(&h).is_ok()
                || tied.contains(&owner_position)
            {
                continue;
            }
            assert_eq!(lk.lookup(key).unwrap().name(), want, "{}", golden::hex(key));
            compared += 1;
        }
    }
    assert!(configs >= 7 && compared > 4000, "{configs} {compared}");
}

/// A model of the search in libketama's `ketama_get_server` (same steps): it must give the first point at or
/// after the hash, wrapping — which is what the library's ring does.
fn ketama_get_server(points: &[u32], h: u32) -> usize {
    let n = points.len() as i64;
    let (mut lowp, mut highp) = (0i64, n);
    loop {
        let midp = (lowp + highp) / 2;
        if midp == n {
            return 0;
        }
        let midval = points[midp as usize];
        let midval1 = if midp == 0 {
            0
        } else {
            points[midp as usize - 1]
        };
        if h <= midval && h > midval1 {
            return midp as usize;
        }
        if midval < h {
            lowp = midp + 1;
        } else {
            highp = midp - 1;
        }
        if lowp > highp {
            return 0;
        }
    }
}

#[test]
fn libketama_search_is_lower_bound_with_wrap() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..2000 {
        let n = 1 + (next() % 50) as usize;
        // Small ranges force duplicates and hashes equal to points.
        let range = if round % 2 == 0 {
            64
        } else {
            u64::from(u32::MAX) + 1
        };
        let mut points: Vec<u32> = (0..n).map(|_| (next() % range) as u32).collect();
        points.sort_unstable();
        for _ in 0..50 {
            let h = (next() % range) as u32;
            let want = points.partition_point(|&p| p < h);
            let want = if want == n { 0 } else { want };
            assert_eq!(
                points[ketama_get_server(&points, h)],
                points[want],
                "{points:?} {h}"
            );
        }
        for h in [0, u32::MAX, points[0], points[n - 1]] {
            let want = points.partition_point(|&p| p < h);
            let want = if want == n { 0 } else { want };
            assert_eq!(
                points[ketama_get_server(&points, h)],
                points[want],
                "{points:?} {h}"
            );
        }
    }
}

#[test]
fn libketama_and_uhashring_differ_on_a_key_exactly_at_a_point() {
    // Take a point of the ring and feed its value as the key hash: libketama takes that point's node,
    // uhashring the next point's.
    let nodes = [("a", 1), ("b", 1), ("c", 1)];
    let lk = libketama_ring(&nodes).unwrap();
    let uh = uhashring_ring(&nodes, 40).unwrap();
    let points: Vec<(u32, String)> = lk
        .points()
        .map(|(p, n)| (p, n.name().to_string()))
        .collect();
    let i = points
        .windows(2)
        .position(|w| w[0].1 != w[1].1)
        .expect("two neighbours on different nodes");
    let (h, owner) = (points[i].0, &points[i].1);
    assert_eq!(lk.lookup_hash(h).unwrap().name(), owner);
    // uhashring's key position is the hash plus one.
    assert_eq!(
        uh.lookup_hash(h.wrapping_add(1)).unwrap().name(),
        points[i + 1].1
    );
}

#[test]
fn sixty_one_equal_servers_is_where_the_digest_counts_part() {
    // floorf(1/61 (float) × 40.0 × 61) = 39 in libketama, (40 × 61 × 1) // 61 = 40 in uhashring; for
    // every other count of equal servers from 1 to 100 they agree.
    for n in 1..=100u32 {
        let names: Vec<String> = (0..n)
            .map(|i| format!("10.0.{}.{}:11211", i / 100, i % 100))
            .collect();
        let nodes: Vec<(&str, u64)> = names.iter().map(|s| (s.as_str(), 1)).collect();
        let lk = libketama_ring(&nodes).unwrap().point_count();
        let uh = uhashring_ring(&nodes, 40).unwrap().point_count();
        if n == 61 {
            assert_eq!((lk, uh), (61 * 156, 61 * 160));
        } else {
            assert_eq!(lk, uh, "{n} servers");
        }
    }
}

#[test]
fn on_a_shared_point_libketama_takes_the_first_listed_and_uhashring_the_last_added() {
    let g = golden::read(&golden::testdata("uhashring").join("ties400.tsv"));
    let all = nodes(&g);
    let lk = libketama_ring(&as_refs(&all)).unwrap();
    let uh = uhashring_ring(&as_refs(&all), 40).unwrap();
    // The first 8 keys land on the point u0-85 and u0-286 share; u0-85 was added last.
    for (key, want) in &g.rows[..8] {
        assert_eq!(want, "u0-85");
        assert_eq!(uh.lookup(key).unwrap().name(), "u0-85");
        assert_eq!(lk.lookup(key).unwrap().name(), "u0-286");
    }
}
