//! groupcache's `consistenthash` (Go, `github.com/golang/groupcache/consistenthash`), the ring most Go
//! code copies.
//!
//! `Map.Add(keys...)` gives each node `replicas` points, `crc32.ChecksumIEEE([]byte(strconv.Itoa(i) +
//! key))` for `i` in `0..replicas` (the number *before* the name, no separator), appends them to one
//! slice, and `sort.Ints` it; `Get` hashes the key with the same CRC-32, takes the first point `>=`
//! it (`sort.Search`) and wraps to the first past the last. Here that is a template ring (`{i}{name}`,
//! one CRC-32 point per name, [`TieRule::LastAdded`]).
//!
//! Its tie behaviour, reproduced: the points are also keys of a `map[int]string`, and `Add` writes
//! `hashMap[hash] = key`, so when two nodes hash to the same point **the node added later owns it** —
//! the slice keeps both copies, but both lead to the map's one entry. Insertion order matters there and
//! only there (a collision of two CRC-32 points; `testdata/groupcache/ties.tsv` has a real one). Also
//! `Itoa(i) + name` can spell the same string for two nodes (`"1"+"1x"` is `"11"+"x"`): such nodes
//! share every such point, with the same rule.
//!
//! Go details that do not show here: keys are Go strings, raw bytes (no UTF-8 decoding), so any byte
//! key works; an empty map's `Get` returns `""` where the ring returns `None`. Not reproducible: the
//! points are Go `int`s, which on 32-bit platforms turns hashes of 2³¹ and above negative and changes
//! the sort order — this mode is what groupcache does on 64-bit platforms. `Add`ing a name twice gives
//! it its points twice in groupcache; here it is a [`Error::DuplicateNode`]. A custom `Hash` function
//! (`New(replicas, fn)`) is not modelled; the version pinned is Debian's
//! `golang-github-golang-groupcache-dev` 0.0~git20200121.8c9f03a, and that file has not changed since.
//!
//! Proven on `testdata/groupcache/` (made by `scripts/regen-golden/groupcache.py`, a Go program built
//! against that package).

use crate::hash::HashFunction;
use crate::ring::{TemplateDigest, TemplateRingBuilder, TieRule};
use crate::{Error, Ring};

/// The replicas groupcache's `HTTPPool` uses (`defaultReplicas`), the mode's default.
pub const DEFAULT_REPLICAS: u32 = 50;

/// The point template: the point number, then the node name.
pub const TEMPLATE: &str = "{i}{name}";

/// The ring of `consistenthash.New(replicas, nil)` after `Add(nodes...)`, in that order.
///
/// ```
/// let ring = shardring::compat::groupcache::ring(&["10.0.0.1:8080", "10.0.0.2:8080"], 50)?;
/// assert_eq!(ring.point_count(), 100);
/// # Ok::<(), shardring::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidSetting`] for 0 replicas, [`Error::DuplicateNode`], [`Error::EmptyName`].
pub fn ring(nodes: &[&str], replicas: u32) -> Result<Ring, Error> {
    if replicas == 0 {
        return Err(Error::InvalidSetting {
            setting: "vnodes",
            reason: "groupcache needs at least 1 replica (with 0 every Get returns \"\")".into(),
        });
    }
    nodes
        .iter()
        .fold(
            TemplateRingBuilder::new(TEMPLATE)
                .digest(TemplateDigest::Hash(HashFunction::Crc32))
                .hash(HashFunction::Crc32)
                .ties(TieRule::LastAdded)
                .vnodes(replicas),
            |b, &name| b.node(name, 1.0),
        )
        .build()
}
