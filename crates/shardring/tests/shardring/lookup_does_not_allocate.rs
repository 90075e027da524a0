//! Proves the lookup path allocates nothing: a counting global allocator wraps the system one, and the
//! count must not move across many lookups (with and without the index, with the line table, on every
//! hash), single and batched.

use shardring::{HashFunction, Placement, Ring};

use crate::support::allocations;

#[test]
fn lookups_do_not_allocate() {
    let keys: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("user:{i}:profile").into_bytes())
        .collect();
    for &hash in HashFunction::ALL {
        for (index, lines) in [(true, false), (false, false), (true, true)] {
            let ring = Ring::builder()
                .hash(hash)
                .lookup_index(index)
                .line_table(lines)
                .nodes((0..50).map(|i| format!("10.0.0.{i}:11211")))
                .build()
                .unwrap();
            let placement: &dyn Placement = &ring;
            let slices: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let mut owners = vec![None; slices.len()];
            let before = allocations();
            let mut found = 0usize;
            for _ in 0..20 {
                for key in &keys {
                    found += usize::from(ring.lookup(key).is_some());
                    found += usize::from(placement.locate(key).is_some());
                    // Up to 8 replicas are remembered inline.
                    found += ring.replicas(key).take(3).count();
                }
                ring.lookup_many(&slices, &mut owners);
                found += owners.iter().filter(|o| o.is_some()).count();
                placement.locate_many(&slices, &mut owners);
                found += owners.iter().filter(|o| o.is_some()).count();
            }
            let after = allocations();
            assert_eq!(found, 20 * 1000 * 7);
            assert_eq!(
                after, before,
                "{hash} (index {index}, line table {lines}) allocated during lookups"
            );
        }
    }
}
