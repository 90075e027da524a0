//! Every benchmarked implementation answers sensibly: owners are members, spreads are roughly even,
//! replicas are distinct and start with the owner, and the peers that hash like us agree with our
//! equivalents where they should.

use shardring::HashFunction;
use shardring_bench::peers::{self};
use shardring_bench::{key_pool, node_names, ours, Pool, Subject, HOT_POOL as POOL};

const NODES: usize = 50;

/// Checks `subject` over the 16-byte pool: every owner in `0..NODES` (after `map`), every node owns
/// some keys, and no node owns more than 4× its fair share.
fn check_spread(name: &str, subject: &impl Subject, map: impl Fn(usize) -> usize) {
    let pool = key_pool(Pool::Hot, 16);
    let mut counts = vec![0usize; NODES];
    for i in 0..POOL {
        let owner = map(subject.locate(pool.key(i)));
        assert!(owner < NODES, "{name}: owner {owner} out of range");
        counts[owner] += 1;
    }
    let fair = POOL / NODES;
    let max = *counts.iter().max().unwrap();
    assert!(max < 4 * fair, "{name}: max {max} vs fair {fair}");
    assert!(counts.iter().all(|&c| c > 0), "{name}: a node owns no keys");
}

fn check_replicas(name: &str, subject: &impl Subject, first_is_owner: bool) {
    let pool = key_pool(Pool::Hot, 16);
    let mut out = Vec::new();
    for i in 0..256 {
        if !subject.replicas(pool.key(i), 3, &mut out) {
            return;
        }
        assert_eq!(out.len(), 3, "{name}");
        assert!(
            out[0] != out[1] && out[1] != out[2] && out[0] != out[2],
            "{name}: {out:?}"
        );
        if first_is_owner {
            assert_eq!(out[0], subject.locate(pool.key(i)), "{name}");
        }
    }
}

/// `subject`'s batch API (if it has one) places the cold pool's first keys as `locate` does.
fn check_batch(name: &str, subject: &impl Subject) {
    let pool = key_pool(Pool::Cold, 16);
    let keys: Vec<&'static [u8]> = (0..1000).map(|i| pool.key(i * 2003)).collect();
    let mut out = vec![None; keys.len()];
    if !subject.locate_many(&keys, &mut out) {
        return;
    }
    for (key, got) in keys.iter().zip(out) {
        assert_eq!(got, Some(subject.locate(key)), "{name}");
    }
}

#[test]
fn the_hot_pool_is_the_start_of_the_cold_pool() {
    for len in [16, 64] {
        let (hot, cold) = (key_pool(Pool::Hot, len), key_pool(Pool::Cold, len));
        assert_eq!((hot.len(), cold.len()), (4096, 1 << 21));
        assert_eq!(hot.key(4095), cold.key(4095));
        assert_eq!(hot.key(4096), cold.key(0));
        assert_ne!(cold.key(4096), cold.key(0));
        assert_eq!(cold.key(1 << 21).len(), len);
    }
}

#[test]
fn every_subject_answers_sensibly() {
    let names = node_names(NODES);
    let index_of = |id: usize| id;
    for (hash, index) in [
        (HashFunction::Xxh3, true),
        (HashFunction::Xxh3, false),
        (HashFunction::Crc32, true),
    ] {
        let ring = ours::ring(names, hash, index);
        check_spread("ring", &ring, index_of);
        check_replicas("ring", &ring, true);
        check_batch("ring", &ring);
    }
    let ring = ours::ring_with_lines(names);
    check_spread("ring with a line table", &ring, index_of);
    check_replicas("ring with a line table", &ring, true);
    check_batch("ring with a line table", &ring);
    let members = ours::nodes(names);
    for algorithm in ours::algorithms() {
        let p = ours::build(algorithm, &members);
        check_spread(algorithm.name(), &p, index_of);
        check_replicas(algorithm.name(), &p, true);
        check_batch(algorithm.name(), &p);
    }
    // pingora answers with addresses 10.0.0.i:11211: the last octet is the index.
    let pingora = peers::Pingora::build(&peers::Pingora::buckets(names));
    check_spread("pingora", &pingora, |id| (id >> 16) & 0xff);
    check_replicas("pingora", &pingora, true);
    let hashring = peers::HashRing::build(names);
    check_spread("hashring", &hashring, index_of);
    check_spread("conhash", &peers::ConHash::build(names), index_of);
    let chr = peers::ConsistentHashRing::build(names);
    check_spread("consistent_hash_ring", &chr, index_of);
    check_replicas("consistent_hash_ring", &chr, true);
    let mpc = peers::MpcHash::build(names);
    check_spread("mpchash", &mpc, index_of);
    check_replicas("mpchash", &mpc, false);
    check_spread("jumphash", &peers::JumpHash::build(NODES), index_of);
    let maglev = peers::MaglevPeer::build(names, peers::MaglevPeer::table_size(NODES));
    check_spread("maglev", &maglev, index_of);
    check_spread("anchorhash", &peers::AnchorPeer::build(NODES), index_of);
    let rv = peers::RendezvousPeer::build(names);
    check_spread("rendezvous_hash", &rv, index_of);
    check_replicas("rendezvous_hash", &rv, true);

    // Alike where the configuration allows it to be identical: jumphash with xxh3 is our jump.
    let jump = ours::build(shardring::algo::Algorithm::Jump, &members);
    let peer_jump = peers::JumpHash::build(NODES);
    let pool = key_pool(Pool::Hot, 16);
    let same = (0..POOL)
        .filter(|&i| jump.locate(pool.key(i)) == peer_jump.locate(pool.key(i)))
        .count();
    eprintln!("jump vs jumphash: {same}/{POOL} keys on the same bucket");
}
