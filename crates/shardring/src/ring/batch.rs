//! Batched lookups: placing many keys at once so that their cache misses overlap instead of queueing.
//!
//! A lookup is a key hash, then two dependent loads: the index entry of the hash's bucket, then the
//! bucket's first point. When the ring is larger than the CPU caches (160,000 points and their index
//! are 1.8 MiB at 1000 nodes; the keys of a real workload stream through the caches as well), each of
//! those loads is a cache miss, and a loop of single lookups waits for them about one key at a time.
//! [`Ring::lookup_many`] walks the keys in passes instead, [`BATCH`] keys (a chunk) at a time: hash
//! every key of a chunk and ask the cache for its index entry, then read every entry and ask for its
//! point, then search. The passes are skewed: one step runs the first pass on chunk `c`, the second on
//! chunk `c - 1` and the third on `c - 2`, so a line asked for in one pass has a whole step (all
//! passes over three chunks) to arrive before it is read. Without the skew, every pass waited at its
//! first key for the line asked for at the start of the pass before, a full memory latency per pass
//! when the ring is larger than the last-level cache. With a line table (`ring/lines.rs`) there are
//! two passes over chunks of [`LINE_BATCH`] keys: hash and ask for each key's line, then read the
//! lines, which answer nearly every key (the rest search the points one at a time). Placement is
//! exactly [`Ring::lookup_index`]'s.

use super::lines::LineTable;
use super::prefetch::prefetch_item;
use super::{PointScheme, Ring};
use crate::hash::HashFunction;

/// Keys per chunk. A step of the skewed passes keeps two or three chunks' lines in flight, enough
/// to cover memory latency (a core tracks a few dozen outstanding lines), and the chunks' hashes and
/// bucket starts stay on the stack in L1. 32 rather than 16: faster a key at 10,000 nodes × 160 points
/// over the bench crate's cold pool, and the same within noise at 1000 nodes (BENCHMARKS.md,
/// "lookup-floors", chunk sizes).
pub(crate) const BATCH: usize = 32;

/// Keys per chunk through a line table. Its two passes ask for one line a key, so smaller chunks
/// keep too few lines in flight: chunks of 8 and 16 were slower than 32 at 10,000 nodes, and chunks of
/// 64 no better than 32 (BENCHMARKS.md, "lookup-floors", chunk sizes).
const LINE_BATCH: usize = 32;

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
            (PointScheme::Plain, HashFunction::Xxh3) => self.place_batches(keys, out, &Xxh3),
            (PointScheme::Plain, HashFunction::Crc32) => self.place_batches(keys, out, &Crc32),
            _ => self.place_batches(keys, out, &AnyScheme(self)),
        }
    }

    /// For every `i`, `out[i]` is the index into [`nodes`](Ring::nodes) of the owner of ring position
    /// `positions[i]` (as [`lookup_hash`](Ring::lookup_hash) finds it), `None` on an empty ring:
    /// [`lookup_many`](Ring::lookup_many) for keys already hashed with
    /// [`key_position`](Ring::key_position), so that `lookup_positions` of the keys' positions places
    /// them exactly as `lookup_many` of the keys. For a caller that can read its keys only at certain
    /// times: the Python package hashes each key while it holds the GIL, as it reads the key object,
    /// and searches the ring for a whole batch of positions without it. Never allocates.
    ///
    /// When the slices differ in length, only the first `min(positions.len(), out.len())` positions are
    /// placed and the rest of `out` is left as it was.
    ///
    /// ```
    /// use shardring::Ring;
    ///
    /// let ring = Ring::builder().nodes(["a", "b", "c"]).build()?;
    /// let keys = ["user:1", "user:2", "user:3"];
    /// let positions: Vec<u32> = keys.iter().map(|k| ring.key_position(k)).collect();
    /// let (mut by_position, mut by_key) = ([None; 3], [None; 3]);
    /// ring.lookup_positions(&positions, &mut by_position);
    /// ring.lookup_many(&keys, &mut by_key);
    /// assert_eq!(by_position, by_key);
    /// # Ok::<(), shardring::Error>(())
    /// ```
    pub fn lookup_positions(&self, positions: &[u32], out: &mut [Option<usize>]) {
        let n = positions.len().min(out.len());
        let (positions, out) = (&positions[..n], &mut out[..n]);
        if self.points.is_empty() {
            out.fill(None);
            return;
        }
        self.place_batches(positions, out, &Given);
    }

    /// [`lookup_many`](Ring::lookup_many) on a non-empty ring whose keys hash with `hash`.
    #[inline(always)]
    fn place_batches<K>(&self, keys: &[K], out: &mut [Option<usize>], hash: &impl Position<K>) {
        if let Some(lines) = &self.lines {
            return self.place_with_lines(lines, keys, out, hash);
        }
        if !self.index.counts() {
            // A binary search's loads depend on each other: nothing to start early. A crowded index
            // (never seen with a shipped hash) binary-searches its buckets, so the passes below, which
            // count a bucket's points, do not apply.
            for (key, out) in keys.iter().zip(out) {
                *out = self
                    .point_at(hash.of(key))
                    .map(|i| self.points[i].node as usize);
            }
            return;
        }
        self.place_with_index(keys, out, hash)
    }

    /// Places the keys through the index alone, in three passes a chunk of [`BATCH`] keys goes
    /// through one after the other, each pass on a later chunk than the next pass (see the module
    /// docs): hash and ask for the index entry; read it and ask for the bucket's first point; count
    /// the bucket's points below the hash.
    #[inline(always)]
    fn place_with_index<K>(&self, keys: &[K], out: &mut [Option<usize>], hash: &impl Position<K>) {
        const PASSES: usize = 3;
        let mut hashes = [[0u32; BATCH]; PASSES];
        let mut starts = [[0u32; BATCH]; PASSES];
        let chunks = keys.len().div_ceil(BATCH);
        for step in 0..chunks + PASSES - 1 {
            // Pass 1 on chunk `step`: hash, and ask for each key's index entry while the next keys hash.
            if let Some(keys) = chunk::<_, BATCH>(keys, step) {
                hash_chunk(keys, &mut hashes[step % PASSES], hash, |h| {
                    self.index.prefetch_bucket(h)
                });
            }
            // Pass 2 on the chunk before: read the entries (arrived while pass 1 hashed a chunk), and
            // ask for each bucket's first point.
            if let Some(c) = step.checked_sub(1) {
                if let Some(keys) = chunk::<_, BATCH>(keys, c) {
                    let (hashes, starts) = (&hashes[c % PASSES], &mut starts[c % PASSES]);
                    for (start, &h) in starts.iter_mut().zip(hashes).take(keys.len()) {
                        *start = self.start_and_ask_for_point(h);
                    }
                }
            }
            // Pass 3 on the chunk before that: count each bucket's points below the hash, without a
            // branch on their positions, as single lookups do (`TopBitsIndex::search_counting` says
            // why).
            if let Some(c) = step.checked_sub(2) {
                if let Some(out) = chunk_mut::<_, BATCH>(out, c) {
                    let (hashes, starts) = (&hashes[c % PASSES], &starts[c % PASSES]);
                    for ((out, &start), &h) in out.iter_mut().zip(starts).zip(hashes) {
                        *out = Some(self.node_counted_from(start as usize, h) as usize);
                    }
                }
            }
        }
    }

    /// Places the keys through the line table, in two passes a chunk of [`LINE_BATCH`] keys goes
    /// through one after the other, the first pass a chunk ahead of the second: hash and ask for each
    /// key's line; read the line. A key its line does not answer searches the points.
    #[inline(always)]
    fn place_with_lines<K>(
        &self,
        lines: &LineTable,
        keys: &[K],
        out: &mut [Option<usize>],
        hash: &impl Position<K>,
    ) {
        let mut hashes = [[0u32; LINE_BATCH]; 2];
        let chunks = keys.len().div_ceil(LINE_BATCH);
        for step in 0..=chunks {
            if let Some(keys) = chunk::<_, LINE_BATCH>(keys, step) {
                hash_chunk(keys, &mut hashes[step % 2], hash, |h| lines.prefetch(h));
            }
            if let Some(c) = step.checked_sub(1) {
                if let Some(out) = chunk_mut::<_, LINE_BATCH>(out, c) {
                    for (out, &h) in out.iter_mut().zip(&hashes[c % 2]) {
                        *out = match lines.node(h) {
                            Some(node) => Some(node as usize),
                            None => self.node_at_other(h).map(|node| node as usize),
                        };
                    }
                }
            }
        }
    }

    /// The second pass for one key: the start of `hash`'s bucket, read from the index entry asked for
    /// in the first pass, after asking for the bucket's first point.
    #[inline(always)]
    fn start_and_ask_for_point(&self, hash: u32) -> u32 {
        let start = self.index.bucket_start(hash);
        prefetch_item(&self.points, start);
        start as u32
    }
}

/// Pass 1 over one chunk: each key's hash into `hashes`, and `ask` for the line it will need. Out of
/// line, so that the hash is inlined into this small loop rather than left a call in the passes'
/// large function.
#[inline(never)]
fn hash_chunk<K, const N: usize>(
    keys: &[K],
    hashes: &mut [u32; N],
    hash: &impl Position<K>,
    ask: impl Fn(u32),
) {
    for (h, key) in hashes.iter_mut().zip(keys) {
        *h = hash.of(key);
        ask(*h);
    }
}

/// A key's ring position, as the passes compute it (or take it, for [`Ring::lookup_positions`]): a
/// trait whose methods are forced inline rather than a closure, which LLVM kept out of line in the
/// passes of an earlier lookup table (a call per key; `perf report` over a loop of `lookup_many`
/// showed it as a `lookup_many::{{closure}}` symbol).
trait Position<K> {
    /// The ring position of `key`.
    fn of(&self, key: &K) -> u32;
}

/// xxh3 keys on a plain ring.
struct Xxh3;

impl<K: AsRef<[u8]>> Position<K> for Xxh3 {
    #[inline(always)]
    fn of(&self, key: &K) -> u32 {
        crate::hash::xxh3_64(key.as_ref()) as u32
    }
}

/// CRC-32 keys on a plain ring, hashed for throughput (`hash::crc32_throughput`: tables for short
/// keys, the same values).
struct Crc32;

impl<K: AsRef<[u8]>> Position<K> for Crc32 {
    #[inline(always)]
    fn of(&self, key: &K) -> u32 {
        crate::hash::crc32_throughput(key.as_ref())
    }
}

/// Any hash and scheme, through [`Ring::key_position`].
struct AnyScheme<'a>(&'a Ring);

impl<K: AsRef<[u8]>> Position<K> for AnyScheme<'_> {
    #[inline(always)]
    fn of(&self, key: &K) -> u32 {
        self.0.key_position(key.as_ref())
    }
}

/// Positions given by the caller ([`Ring::lookup_positions`]): already hashed, whatever the scheme.
struct Given;

impl Position<u32> for Given {
    #[inline(always)]
    fn of(&self, position: &u32) -> u32 {
        *position
    }
}

/// Chunk `c` of `N` items of `items` (the last may be shorter); `None` past the end.
#[inline(always)]
fn chunk<T, const N: usize>(items: &[T], c: usize) -> Option<&[T]> {
    Some(&items[chunk_range::<N>(items.len(), c)?])
}

/// [`chunk`], mutable.
#[inline(always)]
fn chunk_mut<T, const N: usize>(items: &mut [T], c: usize) -> Option<&mut [T]> {
    let range = chunk_range::<N>(items.len(), c)?;
    Some(&mut items[range])
}

/// Where chunk `c` of `N` items of `len` lies; `None` when it holds none.
#[inline(always)]
fn chunk_range<const N: usize>(len: usize, c: usize) -> Option<std::ops::Range<usize>> {
    let from = c.checked_mul(N).filter(|&from| from < len)?;
    Some(from..len.min(from + N))
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
            0..(5 * BATCH + 3),
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
        /// Every hash, weights, colliding points (CRC-32 and few vnodes), index and line table on and
        /// off.
        #[test]
        fn lookup_many_equals_lookup_index(names in names_strategy(), vnodes in 1u32..40,
                                           weights in proptest::collection::vec(1u32..4, 12),
                                           hash in proptest::sample::select(HashFunction::ALL.to_vec()),
                                           index in any::<bool>(), lines in any::<bool>(),
                                           keys in keys_strategy()) {
            let mut builder = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index)
                .line_table(lines);
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

        /// Keys hashed first (`key_position`) and placed by position land where `lookup_many` of the
        /// keys puts them: every hash and compatibility scheme (hash tags, the programs' key rules),
        /// index and line table on and off, weights and colliding points.
        #[test]
        fn lookup_positions_of_key_positions_equals_lookup_many(
            names in names_strategy(), vnodes in 1u32..40,
            weights in proptest::collection::vec(1u32..4, 12),
            hash in proptest::sample::select(HashFunction::ALL.to_vec()),
            index in any::<bool>(), lines in any::<bool>(), keys in keys_strategy()) {
            let mut builder = Ring::builder().vnodes(vnodes).hash(hash).lookup_index(index)
                .line_table(lines);
            for (name, &w) in names.iter().zip(&weights) {
                builder = builder.node(name.clone(), f64::from(w) / 2.0);
            }
            let servers: Vec<(String, f64)> = names.iter().zip(&weights)
                .map(|(n, &w)| (format!("{n}:11211"), f64::from(w))).collect();
            let servers: Vec<(&str, f64)> = servers.iter().map(|(n, w)| (n.as_str(), *w)).collect();
            let unweighted: Vec<(&str, f64)> = servers.iter().map(|&(n, _)| (n, 1.0)).collect();
            let mut rings = vec![builder.build().unwrap()];
            for &mode in CompatMode::ALL {
                // A mode without weights (groupcache) refuses weighted nodes: it is checked unweighted.
                let ring = mode.build(&servers, None).or_else(|_| mode.build(&unweighted, None));
                rings.push(ring.unwrap());
            }
            for ring in &rings {
                let positions: Vec<u32> = keys.iter().map(|k| ring.key_position(k)).collect();
                let mut by_position = vec![Some(usize::MAX); keys.len()];
                ring.lookup_positions(&positions, &mut by_position);
                let mut by_key = vec![None; keys.len()];
                ring.lookup_many(&keys, &mut by_key);
                prop_assert_eq!(&by_position, &by_key);
            }
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
        let mut out = [Some(3); 40];
        ring.lookup_positions(&[7; 40], &mut out);
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
        // By position, the same.
        let positions: Vec<u32> = keys.iter().map(|k| ring.key_position(k)).collect();
        let mut short = [None; 7];
        ring.lookup_positions(&positions, &mut short);
        assert_eq!(short.as_slice(), &long[..7]);
        let mut long = vec![Some(99); keys.len() + 9];
        ring.lookup_positions(&positions, &mut long);
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
