//! Proves that `locate` and `locate_many` allocate nothing for every algorithm: a counting global allocator wraps the
//! system one, and the count must not move across many lookups, on every hash, before and after a
//! membership change (memento and anchor take another path once a node is removed).

use shardring::algo::{build, Algorithm, AlgorithmOptions};
use shardring::{HashFunction, Node};

use crate::support::allocations;

#[test]
fn algorithm_lookups_do_not_allocate() {
    let keys: Vec<Vec<u8>> = (0..500)
        .map(|i| format!("user:{i}:profile").into_bytes())
        .collect();
    let nodes: Vec<Node> = (0..50)
        .map(|i| Node::new(format!("10.0.0.{i}:11211")).unwrap())
        .collect();
    for &hash in HashFunction::ALL {
        let mut options = AlgorithmOptions::default();
        options.hash = hash;
        for &algorithm in Algorithm::ALL {
            let mut placement = build(algorithm, &nodes, &options).unwrap();
            let slices: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let mut owners = vec![None; slices.len()];
            for round in 0..2 {
                let before = allocations();
                let mut found = 0usize;
                for key in &keys {
                    found += usize::from(placement.locate(key).is_some());
                    found += usize::from(placement.lookup(key).is_some());
                }
                placement.locate_many(&slices, &mut owners);
                found += owners.iter().filter(|o| o.is_some()).count();
                let after = allocations();
                assert_eq!(found, 3 * keys.len());
                assert_eq!(
                    after, before,
                    "{algorithm} with {hash} allocated (round {round})"
                );
                if round == 0 {
                    placement.remove("10.0.0.17:11211").unwrap();
                }
            }
        }
    }
}
