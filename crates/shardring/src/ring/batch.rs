//! Batched lookups: placing many keys at once so that their cache misses overlap instead of queueing.
//!
//! A lookup is a key hash, then two dependent loads: the index entry of the hash's bucket, then the
//! bucket's first point. When the ring is larger than the CPU caches (160,000 points and their index
//! are 1.8 MiB at 1000 nodes; the keys of a real workload stream through the caches as well), each of
//! those loads is a cache miss, and a loop of single lookups waits for them about one key at a time.
//! [`Ring::lookup_many`] walks a batch in passes instead: hash every key and ask the cache for its
//! index entry, then read every entry and ask for its point, then search, by which time the lines have
//! arrived. Placement is exactly [`Ring::lookup_index`]'s.

use super::prefetch::prefetch;
use super::{PointScheme, Ring};
use crate::hash::HashFunction;

/// Keys per pass. Enough misses in flight to cover memory latency (a core tracks a few dozen outstanding
/// lines), few enough that the pass's hashes and bucket starts (128 bytes) stay on the stack in L1.
pub(crate) const BATCH: usize = 16;

/// Keys per pass with an answer table. A key then waits for one line, not two, but twice the keys
/// (32) measured no faster: 6.65 ns a key against 6.01 at 1000 nodes over the cold pool (a one-off
/// loop, best of 5).
const TABLE_BATCH: usize = BATCH;

impl Ring {
    /// For every `i`, `out[i] = self.lookup_index(keys[i])`: the index into [`nodes`](Ring::nodes) of
    /// each key's owner, `None` on an empty ring. Faster than calling
    /// [`lookup_index`](Ring::lookup_index) in a loop when the ring does not fit the CPU caches (see the
    /// module docs). Never allocates.
    ///
    /// When the slices differ in length, only the first `min(keys.len(), out.len())` keys are placed and
    /// the rest of `out` is left as it was.
    ///
    /// ```
    /// use shardring::Ring;
    ///
    /// let ring = Ring::builder().nodes(["a", "b", "c"]).build()?;
    /// let keys = ["user:1", "user:2", "user:3"];
    /// let mut owners = [None; 3];
    /// ring.lookup_many(&keys, &mut owners);
    /// for (key, owner) in keys.iter().zip(owners) {
    ///     assert_eq!(owner, ring.lookup_index(key));
    /// }
    /// # Ok::<(), shardring::Error>(())
    /// ```
    pub fn lookup_many<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut [Option<usize>]) {
        let n = keys.len().min(out.len());
        let (keys, out) = (&keys[..n], &mut out[..n]);
        if self.points.is_empty() {
            out.fill(None);
            return;
        }
        // One dispatch per call, so each pass below hashes with a direct (inlined) call.
        match (self.scheme, self.hash) {
            (PointScheme::Plain, HashFunction::Xxh3) => {
                self.place_batches(keys, out, |k| crate::hash::xxh3_64(k) as u32)
            }
            (PointScheme::Plain, HashFunction::Crc32) => {
                self.place_batches(keys, out, crate::hash::crc32)
            }
            _ => self.place_batches(keys, out, |k| self.key_position(k)),
        }
    }

    /// [`lookup_many`](Ring::lookup_many) on a non-empty ring whose keys hash with `hash`.
    #[inline(always)]
    fn place_batches<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        out: &mut [Option<usize>],
        hash: impl Fn(&[u8]) -> u32,
    ) {
        if !self.index.is_built() {
            // A binary search's loads depend on each other: nothing to start early.
            for (key, out) in keys.iter().zip(out) {
                let h = hash(key.as_ref());
                let i = self.points.partition_point(|p| p.position < h);
                *out = Some(self.points[self.wrap(i)].node as usize);
            }
            return;
        }
        if let Some(answers) = &self.answers {
            let mut hashes = [0u32; TABLE_BATCH];
            // The keys of a pass the table does not answer (about 7% at 1000 nodes), and where
            // their searches start.
            let mut rest = [0u8; TABLE_BATCH];
            let mut starts = [0u32; TABLE_BATCH];
            for (keys, out) in keys.chunks(TABLE_BATCH).zip(out.chunks_mut(TABLE_BATCH)) {
                let hashes = &mut hashes[..keys.len()];
                // Pass 1: hash, and ask for each key's table entry while the next keys hash.
                for (h, key) in hashes.iter_mut().zip(keys) {
                    *h = hash(key.as_ref());
                    answers.prefetch(*h);
                }
                // Pass 2: read the entries; ask for the index entries of the keys they do not
                // answer.
                let mut unanswered = 0;
                for (j, (out, &h)) in out.iter_mut().zip(hashes.iter()).enumerate() {
                    *out = answers.node(h).map(|node| node as usize);
                    if out.is_none() {
                        self.index.prefetch_bucket(h);
                        rest[unanswered] = j as u8;
                        unanswered += 1;
                    }
                }
                // Passes 3 and 4, for those keys only: as the passes 2 and 3 below.
                for (&j, start) in rest[..unanswered].iter().zip(starts.iter_mut()) {
                    let i = self.index.bucket_start(hashes[j as usize]);
                    if let Some(point) = self.points.get(i) {
                        prefetch(point);
                    }
                    *start = i as u32;
                }
                for (&j, &start) in rest[..unanswered].iter().zip(starts.iter()) {
                    let h = hashes[j as usize];
                    let i = self
                        .index
                        .search_counting_from(&self.points, start as usize, h);
                    out[j as usize] = Some(self.points[self.wrap(i)].node as usize);
                }
            }
            return;
        }
        let mut hashes = [0u32; BATCH];
        let mut starts = [0u32; BATCH];
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let hashes = &mut hashes[..keys.len()];
            let starts = &mut starts[..keys.len()];
            // Pass 1: hash, and ask for each key's index entry while the next keys hash.
            for (h, key) in hashes.iter_mut().zip(keys) {
                *h = hash(key.as_ref());
                self.index.prefetch_bucket(*h);
            }
            // Pass 2: read the entries (arrived, or on their way together), and ask for each bucket's
            // first point.
            for (start, &h) in starts.iter_mut().zip(hashes.iter()) {
                let i = self.index.bucket_start(h);
                if let Some(point) = self.points.get(i) {
                    prefetch(point);
                }
                *start = i as u32;
            }
            // Pass 3: count each bucket's points below the hash, without a branch on their positions
            // (see `TopBitsIndex::search_counting`). A single xxh3 lookup searches with a branch,
            // which wins while the points are cached; here a mispredicted branch on a point that has
            // just arrived would also throw away the loads of the keys after it, and counting is much
            // faster: 5.3 ns a key against 9.0 at 1000 nodes over the bench crate's cold pool, 4.6 against
            // 4.3 over the hot one (a one-off loop over the pools, best of 5; the criterion figures are in
            // BENCHMARKS.md). The prefetches of passes 1 and 2 take it from 6.2 ns to 5.3.
            for ((out, &start), &h) in out.iter_mut().zip(starts.iter()).zip(hashes.iter()) {
                let i = self
                    .index
                    .search_counting_from(&self.points, start as usize, h);
                *out = Some(self.points[self.wrap(i)].node as usize);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::BATCH;
    use crate::compat::twemproxy::{self, Distribution, TwemproxyServer};
    use crate::compat::CompatMode;
    use crate::hash::{HashFunction, TwemproxyHash};
    use crate::{Placement, Ring};

    /// Keys of any bytes, in batches that end mid-pass, on a pass boundary, and past several passes.
    fn keys_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..24),
            0..(3 * BATCH + 3),
        )
    }

    fn names_strategy() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::btree_set("[a-z0-9.]{1,10}", 1..12)
            .prop_map(|set| set.into_iter().collect::<Vec<_>>())
    }

    /// `placement.locate_many` of `keys` against `locate` of each key, key by key.
    fn check(placement: &dyn Placement, keys: &[Vec<u8>]) -> Result<(), TestCaseError> {
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let mut many = vec![Some(usize::MAX); keys.len()];
        placement.locate_many(&keys, &mut many);
        let single: Vec<Option<usize>> = keys.iter().map(|k| placement.locate(k)).collect();
        prop_assert_eq!(many, single, "{}", placement.algorithm());
        Ok(())
    }

    proptest! {
        /// Every hash, weights, colliding points (CRC-32 and few vnodes), index on and off.
        #[test]
        fn lookup_many_equals_lookup_index(names in names_strategy(), vnodes in 1u32..40,
                                           weights in proptest::collection::vec(1u32..4, 12),
                                           hash in proptest::sample::select(HashFunction::ALL.to_vec()),
                                           index in any::<bool>(), keys in keys_strategy()) {
            let mut builder = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index);
            for (name, &w) in names.iter().zip(&weights) {
                builder = builder.node(name.clone(), f64::from(w) / 2.0);
            }
            let ring = builder.build().unwrap();
            let mut many = vec![None; keys.len()];
            ring.lookup_many(&keys, &mut many);
            let single: Vec<Option<usize>> = keys.iter().map(|k| ring.lookup_index(k)).collect();
            prop_assert_eq!(&many, &single);
            check(&ring, &keys)?;
        }

        /// Every compatibility mode, with every key hash its program offers for twemproxy.
        #[test]
        fn locate_many_equals_locate_in_every_compat_mode(names in names_strategy(),
                                                          weights in proptest::collection::vec(1u32..4, 12),
                                                          keys in keys_strategy()) {
            let servers: Vec<(String, f64)> = names.iter().zip(&weights)
                .map(|(n, &w)| (format!("{n}:11211"), f64::from(w))).collect();
            let servers: Vec<(&str, f64)> = servers.iter().map(|(n, w)| (n.as_str(), *w)).collect();
            let unweighted: Vec<(&str, f64)> = servers.iter().map(|&(n, _)| (n, 1.0)).collect();
            for &mode in CompatMode::ALL {
                // A mode without weights (groupcache) refuses weighted nodes: it is checked unweighted.
                let placement = mode.build(&servers, None).or_else(|_| mode.build(&unweighted, None));
                check(&placement.unwrap(), &keys)?;
            }
        }

        /// nutcracker's placements as the proxy builds them (`compat::twemproxy::placement`): hash tags
        /// applied before the hash, every twemproxy hash, ketama and modula.
        #[test]
        fn twemproxy_placements_place_batches_like_single_keys(
            names in names_strategy(), weights in proptest::collection::vec(1u32..4, 12),
            hash in proptest::sample::select(TwemproxyHash::ALL.to_vec()),
            tag in proptest::option::of(proptest::sample::select(vec![*b"{}", *b"::", *b"ab"])),
            keys in keys_strategy()) {
            let servers: Vec<TwemproxyServer> = names.iter().zip(&weights).enumerate()
                .map(|(i, (n, &w))| TwemproxyServer {
                    host: format!("10.0.0.{i}"),
                    port: 11211,
                    weight: w,
                    name: (i % 2 == 0).then(|| n.clone()),
                })
                .collect();
            for distribution in [Distribution::Ketama, Distribution::Modula] {
                let placement = twemproxy::placement(&servers, hash, tag, distribution).unwrap();
                check(placement.as_ref(), &keys)?;
            }
        }
    }

    #[test]
    fn an_empty_ring_places_every_key_nowhere() {
        let ring = Ring::new();
        let mut out = [Some(3); 40];
        ring.lookup_many(&[b"a"; 40], &mut out);
        assert_eq!(out, [None; 40]);
    }

    #[test]
    fn slices_of_different_lengths_place_the_shorter_count() {
        let ring = Ring::builder().nodes(["a", "b", "c"]).build().unwrap();
        let keys: Vec<String> = (0..(BATCH + 5)).map(|i| format!("key:{i}")).collect();
        // More keys than room: the first `out.len()` keys.
        let mut short = [None; 7];
        ring.lookup_many(&keys, &mut short);
        for (key, got) in keys.iter().zip(short) {
            assert_eq!(got, ring.lookup_index(key));
        }
        // More room than keys: the rest of `out` untouched.
        let mut long = vec![Some(99); keys.len() + 9];
        ring.lookup_many(&keys, &mut long);
        for (key, got) in keys.iter().zip(&long) {
            assert_eq!(*got, ring.lookup_index(key));
        }
        assert!(long[keys.len()..].iter().all(|&o| o == Some(99)));
        // The trait's default (a loop) does the same.
        let jump = crate::algo::Jump::new(ring.nodes(), HashFunction::Xxh3).unwrap();
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let mut long = vec![Some(99); keys.len() + 2];
        jump.locate_many(&keys, &mut long);
        assert!(long[keys.len()..].iter().all(|&o| o == Some(99)));
        assert_eq!(long[0], jump.locate(keys[0]));
    }
}
