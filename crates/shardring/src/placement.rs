//! The one trait every placement algorithm implements, so analysis, simulation, the CLI and the proxy take
//! any of them.

use std::fmt;

use crate::{Error, Node, Ring};

/// A way of placing keys on named nodes: the ring, jump, rendezvous, maglev, multi-probe, anchor…
///
/// Node indices are positions in [`nodes`](Placement::nodes) and are only meaningful for one state of the
/// placement: membership changes may renumber nodes. Compare nodes across changes by name.
pub trait Placement: Send + Sync + fmt::Debug {
    /// The algorithm's short name (`ring`, `jump`, …), as the CLI's `--algo` takes it.
    fn algorithm(&self) -> &'static str;

    /// The members. Indices returned by [`locate`](Placement::locate) index this slice.
    fn nodes(&self) -> &[Node];

    /// The index of the node that owns `key`, or `None` when there are no nodes. Must not allocate.
    fn locate(&self, key: &[u8]) -> Option<usize>;

    /// Clears `out` and fills it with up to `count` distinct node indices for `key`, the first equal to
    /// [`locate`](Placement::locate)'s answer. Fewer when there are fewer nodes.
    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>);

    /// Places a batch of keys: `out[i] = self.locate(keys[i])` for every `i`. When the slices differ
    /// in length, only the first `min(keys.len(), out.len())` keys are placed and the rest of `out` is
    /// left as it was. Must not allocate.
    ///
    /// The default calls [`locate`](Placement::locate) for each key. The ring overrides it with
    /// [`Ring::lookup_many`], which overlaps the keys' cache misses (several times faster per key when
    /// the ring does not fit the CPU caches), so callers that hold several keys at once (a multi-get,
    /// a file of keys, an analysis over millions) should place them with this.
    fn locate_many(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        for (key, out) in keys.iter().zip(out) {
            *out = self.locate(key);
        }
    }

    /// Adds a member.
    ///
    /// # Errors
    /// [`Error::DuplicateNode`], [`Error::TooManyPoints`], or [`Error::Unsupported`] (e.g. weights on an
    /// algorithm without them). On error the placement is unchanged.
    fn add(&mut self, node: Node) -> Result<(), Error>;

    /// Removes the member named `name` and returns it.
    ///
    /// # Errors
    /// [`Error::UnknownNode`]. On error the placement is unchanged.
    fn remove(&mut self, name: &str) -> Result<Node, Error>;

    /// Heap bytes of the lookup structures (points, tables), not counting node names.
    fn memory_bytes(&self) -> usize;

    /// A boxed copy, for before/after comparisons.
    fn clone_box(&self) -> Box<dyn Placement>;

    /// The node that owns `key`.
    fn lookup(&self, key: &[u8]) -> Option<&Node> {
        self.locate(key).map(|i| &self.nodes()[i])
    }
}

impl Clone for Box<dyn Placement> {
    fn clone(&self) -> Box<dyn Placement> {
        self.clone_box()
    }
}

impl Placement for Ring {
    fn algorithm(&self) -> &'static str {
        "ring"
    }

    fn nodes(&self) -> &[Node] {
        Ring::nodes(self)
    }

    #[inline]
    fn locate(&self, key: &[u8]) -> Option<usize> {
        self.lookup_index(key)
    }

    fn locate_many(&self, keys: &[&[u8]], out: &mut [Option<usize>]) {
        self.lookup_many(keys, out);
    }

    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        out.clear();
        let mut walk = self.replicas(key);
        while out.len() < count {
            match walk.next_index() {
                Some(i) => out.push(i),
                None => break,
            }
        }
    }

    fn add(&mut self, node: Node) -> Result<(), Error> {
        self.add_node(node)
    }

    fn remove(&mut self, name: &str) -> Result<Node, Error> {
        Ring::remove(self, name)
    }

    fn memory_bytes(&self) -> usize {
        Ring::memory_bytes(self)
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}
