//! `shardring.Ring`: a placement of keys on named nodes, shared by every Python thread.
//!
//! The built placement lives in an [`ArcSwap`]: a lookup loads the current one without a lock (and
//! keeps it while the GIL is released for a large batch), a membership change builds the next one
//! beside it and publishes it whole, so no lookup ever sees half a change and no change waits for
//! lookups. The copy-on-write costs a copy of the placement per change; lookups outnumber changes.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use shardring::algo::{Algorithm, AlgorithmOptions};
use shardring::compat::CompatMode;
use shardring::ring::{TemplateDigest, TieRule};
use shardring::{HashFunction, Node, Placement};

use crate::errors::{empty_ring, value_error};
use crate::keys::{self, Held};
use crate::recipe::{Placed, Recipe, TemplateSettings};

/// Batches (chunks of a batch, for a large one) of at least this many keys are placed with the GIL
/// released, so other Python threads run meanwhile. Smaller ones keep it: releasing and taking it back costs more than placing a few keys,
/// and taking it back may wait for another thread's turn.
const DETACH_MIN_KEYS: usize = 1024;

/// Keys placed per call into the library of a batch: enough that the library overlaps their cache
/// misses and the GIL is taken back rarely, few enough that the chunk's buffers (20 bytes a key on
/// a point ring, the keys' bytes and 40 bytes a key on the others) stay in the CPU's caches and are
/// reused from chunk to chunk.
const CHUNK_KEYS: usize = 16_384;

/// One published state of a ring.
#[derive(Debug)]
struct State {
    /// The placement keys are looked up in.
    placed: Placed,
    /// How to make the next state.
    recipe: Recipe,
    /// Each node's name as a Python `str`, by node index: a lookup returns a new reference to one of
    /// these instead of making a string.
    names: Vec<Py<PyString>>,
}

impl State {
    fn new(py: Python<'_>, placed: Placed, recipe: Recipe) -> State {
        let names = placed
            .placement()
            .nodes()
            .iter()
            .map(|n| PyString::new(py, n.name()).unbind())
            .collect();
        State {
            placed,
            recipe,
            names,
        }
    }

    fn placement(&self) -> &dyn Placement {
        self.placed.placement()
    }

    fn ring(&self, what: &str) -> PyResult<&shardring::Ring> {
        self.placed.ring().ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what} is a point ring's: {} places keys without points on a circle",
                self.placement().algorithm()
            ))
        })
    }
}

/// A consistent-hash placement of keys on named nodes: the library's ring (by default), another
/// algorithm by name, or a program's ring byte for byte (`compat=`).
///
/// Keys are `str` (placed by their UTF-8 bytes) or `bytes`. Lookups are safe from any number of
/// threads while membership changes; a change is seen whole or not at all.
#[pyclass(frozen, module = "shardring")]
pub struct Ring {
    /// The current state, replaced whole by every change.
    state: ArcSwap<State>,
    /// Serialises changes, so that two at once cannot lose one.
    writer: Mutex<()>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("state", &self.state.load())
            .finish()
    }
}

impl Ring {
    /// A ring of the recipe's placement over `nodes`.
    pub(crate) fn build(py: Python<'_>, recipe: Recipe, nodes: &[Node]) -> PyResult<Ring> {
        let placed = recipe.build(nodes).map_err(value_error)?;
        Ok(Ring {
            state: ArcSwap::from_pointee(State::new(py, placed, recipe)),
            writer: Mutex::new(()),
        })
    }

    /// Applies a membership change to a copy of the current state and publishes it; on error the
    /// ring is unchanged.
    fn change(
        &self,
        py: Python<'_>,
        in_place: impl FnOnce(&mut Placed) -> Result<(), shardring::Error>,
        in_list: impl FnOnce(&mut Recipe) -> Result<(), shardring::Error>,
    ) -> PyResult<()> {
        let _writing = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.state.load_full();
        let mut recipe = current.recipe.clone();
        let placed = if recipe.changes_in_place() {
            let mut placed = current.placed.clone();
            in_place(&mut placed).map_err(value_error)?;
            placed
        } else {
            in_list(&mut recipe).map_err(value_error)?;
            recipe.build(&[]).map_err(value_error)?
        };
        self.state.store(Arc::new(State::new(py, placed, recipe)));
        Ok(())
    }
}

/// The nodes argument: a mapping of names to weights, or an iterable of names and `(name, weight)`
/// pairs.
fn parse_nodes(nodes: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, f64)>> {
    let Some(nodes) = nodes else {
        return Ok(Vec::new());
    };
    if nodes.is_instance_of::<PyString>() || nodes.is_instance_of::<PyBytes>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "nodes must be a list of names, of (name, weight) pairs, or a dict of names to weights, not one string",
        ));
    }
    let mut list = Vec::new();
    if let Ok(dict) = nodes.cast::<PyDict>() {
        for (name, weight) in dict.iter() {
            list.push((name.extract::<String>()?, weight.extract::<f64>()?));
        }
        return Ok(list);
    }
    for item in nodes.try_iter()? {
        let item = item?;
        if let Ok(name) = item.cast::<PyString>() {
            list.push((name.to_cow()?.into_owned(), 1.0));
        } else if let Ok(pair) = item.cast::<PyTuple>() {
            let (name, weight): (String, f64) = pair.extract()?;
            list.push((name, weight));
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "a node is a name (str) or a (name, weight) pair, not {}",
                item.get_type().name()?
            )));
        }
    }
    Ok(list)
}

/// `Node`s of the library, each checked (empty name, bad weight).
fn library_nodes(list: &[(String, f64)]) -> PyResult<Vec<Node>> {
    list.iter()
        .map(|(n, w)| Node::weighted(n.as_str(), *w).map_err(value_error))
        .collect()
}

fn parse<T: std::str::FromStr<Err = shardring::Error>>(text: &str) -> PyResult<T> {
    text.parse::<T>().map_err(value_error)
}

#[pymethods]
impl Ring {
    /// A ring over `nodes`.
    ///
    /// `nodes` is a dict of names to weights, or a list of names (weight 1) and `(name, weight)`
    /// pairs. Without `compat`, `algorithm` picks the placement (`ring`, `jump`, `jumpback`,
    /// `rendezvous`, `maglev`, `multiprobe`, `anchor`, `memento`), `hash` the key hash (`xxh3` by
    /// default) and `vnodes` the ring's points per node of weight 1 (160). With `compat`, the ring
    /// is a program's, byte for byte (the modes of `shardring lookup --compat`), `hash` is named as
    /// that program names it and `vnodes` is its points setting where it has one; `compat="template"`
    /// takes `template`, `digest` and `ties`.
    ///
    /// Raises `ValueError` for an unknown algorithm, mode or hash, a weight that is not greater than
    /// 0, a duplicate node or a setting out of range.
    #[new]
    #[pyo3(signature = (nodes=None, *, hash=None, vnodes=None, algorithm=None, compat=None, template=None, digest=None, ties=None, line_table=false))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn new(
        py: Python<'_>,
        nodes: Option<&Bound<'_, PyAny>>,
        hash: Option<&str>,
        vnodes: Option<u32>,
        algorithm: Option<&str>,
        compat: Option<&str>,
        template: Option<String>,
        digest: Option<&str>,
        ties: Option<&str>,
        line_table: bool,
    ) -> PyResult<Ring> {
        let list = parse_nodes(nodes)?;
        let template_only = |what: &str| {
            PyValueError::new_err(format!("{what} describes a ring of compat=\"template\""))
        };
        let Some(mode) = compat else {
            if template.is_some() {
                return Err(template_only("template"));
            }
            if digest.is_some() {
                return Err(template_only("digest"));
            }
            if ties.is_some() {
                return Err(template_only("ties"));
            }
            let algorithm: Algorithm = parse(algorithm.unwrap_or("ring"))?;
            let mut options = AlgorithmOptions::default();
            options.hash = parse::<HashFunction>(hash.unwrap_or("xxh3"))?;
            if let Some(v) = vnodes {
                options.vnodes = v;
            }
            if line_table && algorithm != Algorithm::Ring {
                return Err(PyValueError::new_err(format!(
                    "line_table is for the ring, not {}",
                    algorithm.name()
                )));
            }
            options.line_table = line_table;
            let nodes = library_nodes(&list)?;
            return Ring::build(py, Recipe::Algorithm { algorithm, options }, &nodes);
        };
        if algorithm.is_some() {
            return Err(PyValueError::new_err(
                "compat and algorithm are exclusive: a compatibility mode is its program's ring",
            ));
        }
        if line_table {
            return Err(PyValueError::new_err(
                "line_table is for the ring, not compat",
            ));
        }
        library_nodes(&list)?;
        let recipe = if mode.trim().eq_ignore_ascii_case("template") {
            let Some(template) = template else {
                return Err(PyValueError::new_err(
                    "compat=\"template\" needs template=, e.g. template=\"{name}&&{i}\", digest=\"md5x4le\"",
                ));
            };
            Recipe::Template {
                settings: TemplateSettings {
                    template,
                    digest: digest.map(parse::<TemplateDigest>).transpose()?,
                    ties: ties.map(parse::<TieRule>).transpose()?,
                    hash: hash.map(parse::<HashFunction>).transpose()?,
                    vnodes,
                },
                nodes: list,
            }
        } else {
            if template.is_some() {
                return Err(template_only("template"));
            }
            if digest.is_some() || ties.is_some() {
                return Err(template_only("digest and ties"));
            }
            Recipe::Compat {
                mode: parse::<CompatMode>(mode)?,
                hash: hash.map(str::to_string),
                vnodes,
                nodes: list,
            }
        };
        Ring::build(py, recipe, &[])
    }

    /// The ring of one pool of a twemproxy (nutcracker) YAML file: its servers, hash, hash_tag,
    /// distribution (ketama or modula) and weights, placing every key where nutcracker does. Nodes
    /// are the servers' names, else `host:port`.
    ///
    /// `pool` names the pool; it may be left out when the file has only one. Raises
    /// `shardring.ConfigError` listing every problem of a bad file (each with its line), `OSError`
    /// when the file cannot be read, `ValueError` for `distribution: random`.
    #[staticmethod]
    #[pyo3(signature = (path, pool=None))]
    fn from_twemproxy(
        py: Python<'_>,
        path: std::path::PathBuf,
        pool: Option<&str>,
    ) -> PyResult<Ring> {
        Ring::build(py, crate::pool_file::read(py, &path, pool)?.recipe(), &[])
    }

    /// The ring of twemproxy server lines (`host:port:weight [name]` or `/socket:weight [name]`,
    /// as under a pool's `servers:`), with the pool's `hash`, `hash_tag` (two characters, e.g.
    /// `"{}"`) and `distribution`: what a YAML pool of those settings places.
    #[staticmethod]
    #[pyo3(signature = (servers, *, hash="fnv1a_64", hash_tag=None, distribution="ketama"))]
    fn from_twemproxy_servers(
        py: Python<'_>,
        servers: Vec<String>,
        hash: &str,
        hash_tag: Option<&str>,
        distribution: &str,
    ) -> PyResult<Ring> {
        let recipe = crate::pool_file::from_servers(&servers, hash, hash_tag, distribution)?;
        Ring::build(py, recipe, &[])
    }

    /// The ring of a twemproxy pool whose servers are `members`, `(name, address, weight)` as
    /// etcd holds them under `<prefix><pool>/servers/` (the proxy's membership layout): a member
    /// whose name is its address is an unnamed server, placed as nutcracker places one.
    #[staticmethod]
    #[pyo3(signature = (members, *, hash="fnv1a_64", hash_tag=None, distribution="ketama"))]
    fn from_members(
        py: Python<'_>,
        members: Vec<(String, String, u32)>,
        hash: &str,
        hash_tag: Option<&str>,
        distribution: &str,
    ) -> PyResult<Ring> {
        let recipe = crate::pool_file::from_members(members, hash, hash_tag, distribution)?;
        Ring::build(py, recipe, &[])
    }

    /// The node that owns `key` (`str` or `bytes`). Raises `EmptyRingError` on a ring without
    /// nodes, `TypeError` for a key of another type.
    fn lookup(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyString>> {
        let key = Held::new(key.clone())?;
        let state = self.state.load();
        match state.placement().locate(key.bytes()?) {
            Some(i) => Ok(state.names[i].clone_ref(py)),
            None => Err(empty_ring()),
        }
    }

    /// The owners of many keys, in order: `lookup` of each, placed in batches through the
    /// library's batched lookups (which overlap the keys' cache misses). Each key is read (and on a
    /// point ring hashed) with the GIL held; the GIL is released while a large batch is placed. `keys`
    /// is any iterable of `str` and `bytes`; a `list` or `tuple` is read by index.
    fn lookup_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut batch = keys::Batch::new(keys)?;
        let state = self.state.load_full();
        let hint = batch.len_hint();
        let mut owners: Vec<u32> = Vec::with_capacity(hint);
        // Keys a chunk: no more than the batch when its length is known, so that a call with a few
        // keys does not allocate (and page in) a whole chunk's buffers. A list that grows meanwhile is
        // read in chunks of this size all the same.
        let room = if hint == 0 {
            CHUNK_KEYS
        } else {
            hint.min(CHUNK_KEYS)
        };
        // One chunk's answers, reused from chunk to chunk.
        let mut chunk: Vec<Option<usize>> = vec![None; room];
        match state.placed.ring() {
            Some(ring) => {
                // A point ring hashes each key as it is read, while the GIL is held and the key's
                // object is in the cache; the chunk's positions, 4 bytes a key, are searched in the
                // ring after. Nothing of a key is kept but its position, so the search needs no GIL.
                let mut positions: Vec<u32> = Vec::with_capacity(room);
                loop {
                    positions.clear();
                    batch.next_chunk(room, |key| positions.push(ring.key_position(key)))?;
                    if positions.is_empty() {
                        break;
                    }
                    let chunk = &mut chunk[..positions.len()];
                    if positions.len() >= DETACH_MIN_KEYS {
                        py.detach(|| ring.lookup_positions(&positions, chunk));
                    } else {
                        ring.lookup_positions(&positions, chunk);
                    }
                    collect_owners(chunk, &mut owners)?;
                }
            }
            None => {
                // The other placements hash inside `locate_many`: the chunk's keys are copied back to
                // back into `arena`, each ending where `ends` says, so that each key object is let go
                // while its cache line is at hand, and the chunk can be placed without the GIL whatever
                // other threads do to the keys meanwhile. The buffers are reused from chunk to chunk,
                // so a large batch does not page in fresh memory for every key.
                let mut arena: Vec<u8> = Vec::with_capacity(room * 32);
                let mut ends: Vec<usize> = Vec::with_capacity(room);
                loop {
                    arena.clear();
                    ends.clear();
                    batch.next_chunk(room, |key| {
                        arena.extend_from_slice(key);
                        ends.push(arena.len());
                    })?;
                    if ends.is_empty() {
                        break;
                    }
                    let mut start = 0;
                    let slices: Vec<&[u8]> = ends
                        .iter()
                        .map(|&end| {
                            let key = &arena[start..end];
                            start = end;
                            key
                        })
                        .collect();
                    let chunk = &mut chunk[..slices.len()];
                    let placement = state.placement();
                    if slices.len() >= DETACH_MIN_KEYS {
                        py.detach(|| placement.locate_many(&slices, chunk));
                    } else {
                        placement.locate_many(&slices, chunk);
                    }
                    collect_owners(chunk, &mut owners)?;
                }
            }
        }
        PyList::new(py, owners.iter().map(|&i| state.names[i as usize].bind(py)))
    }

    /// Up to `n` distinct nodes for `key`, the owner first (fewer when the ring has fewer nodes):
    /// where its replicas go, and where it goes when its owner is gone.
    fn replicas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: usize,
    ) -> PyResult<Vec<Py<PyString>>> {
        if n == 0 {
            return Err(PyValueError::new_err("n must be at least 1"));
        }
        let key = Held::new(key.clone())?;
        let state = self.state.load();
        let mut found = Vec::with_capacity(n.min(state.names.len()));
        state.placement().replicas_into(key.bytes()?, n, &mut found);
        if found.is_empty() {
            return Err(empty_ring());
        }
        Ok(found
            .iter()
            .map(|&i| state.names[i].clone_ref(py))
            .collect())
    }

    /// Adds the node `name` of `weight`; only keys that now belong to it move (in a compatibility
    /// mode: as the program places keys over the new list). Raises `ValueError` for a duplicate
    /// name or a bad weight.
    #[pyo3(signature = (name, weight=1.0))]
    fn add(&self, py: Python<'_>, name: &str, weight: f64) -> PyResult<()> {
        self.change(
            py,
            |placed| {
                let node = Node::weighted(name, weight)?;
                match placed {
                    Placed::Ring(r) => r.add_node(node),
                    Placed::Other(p) => p.add(node),
                }
            },
            |recipe| {
                Node::weighted(name, weight)?;
                recipe.add_member(name, weight)
            },
        )
    }

    /// Removes the node `name`; only its keys move. Raises `ValueError` when there is no such node.
    fn remove(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.change(
            py,
            |placed| {
                match placed {
                    Placed::Ring(r) => r.remove(name),
                    Placed::Other(p) => p.remove(name),
                }
                .map(drop)
            },
            |recipe| recipe.remove_member(name),
        )
    }

    /// Changes the weight of the node `name`. On the library's ring, raising it only moves keys to
    /// the node and lowering it only away; an algorithm without weights refuses any weight but 1.
    fn set_weight(&self, py: Python<'_>, name: &str, weight: f64) -> PyResult<()> {
        self.change(
            py,
            |placed| match placed {
                Placed::Ring(r) => r.set_weight(name, weight),
                Placed::Other(p) => {
                    let node = p
                        .nodes()
                        .iter()
                        .find(|n| n.name() == name)
                        .ok_or_else(|| shardring::Error::UnknownNode {
                            node: name.to_string(),
                        })?
                        .reweighted(weight)?;
                    p.remove(name)?;
                    p.add(node)
                }
            },
            |recipe| recipe.reweight_member(name, weight),
        )
    }

    /// The nodes and their weights.
    #[getter]
    fn nodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.state.load();
        let dict = PyDict::new(py);
        for (node, name) in state.placement().nodes().iter().zip(&state.names) {
            dict.set_item(name.bind(py), node.weight())?;
        }
        Ok(dict)
    }

    /// The placement's algorithm: `ring` for the library's ring and every program's ring, else
    /// its name (`jump`, `maglev`, …, `modula`).
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.state.load().placement().algorithm()
    }

    /// Each node's share of the circle (the fraction of all key hashes it owns); they sum to 1.
    /// A point ring's only.
    fn shares<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.state.load();
        let ring = state.ring("shares")?;
        let dict = PyDict::new(py);
        for (node, share) in ring.shares() {
            dict.set_item(node.name(), share)?;
        }
        Ok(dict)
    }

    /// Every point of the circle in ring order: `(position, node)`. A point ring's only.
    fn points(&self) -> PyResult<Vec<(u32, String)>> {
        let state = self.state.load();
        let ring = state.ring("points")?;
        Ok(ring
            .points()
            .map(|(p, n)| (p, n.name().to_string()))
            .collect())
    }

    /// The migration plan from this ring to `other`: every range of key hashes whose owner
    /// changes, in hash order. Both should hash keys alike (the same algorithm or mode). Point
    /// rings only.
    fn diff(&self, other: &Ring) -> PyResult<Vec<Migration>> {
        let from = self.state.load();
        let to = other.state.load();
        let plan = from.ring("diff")?.migration_to(to.ring("diff")?);
        Ok(plan
            .into_iter()
            .map(|m| Migration {
                first: m.first,
                last: m.last,
                old: m.from,
                new: m.to,
            })
            .collect())
    }

    fn __len__(&self) -> usize {
        self.state.load().names.len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.state
            .load()
            .placement()
            .nodes()
            .iter()
            .any(|n| n.name() == name)
    }

    fn __repr__(&self) -> String {
        let state = self.state.load();
        format!(
            "Ring({}, nodes={})",
            state.recipe.describe(),
            state.names.len()
        )
    }
}

/// A range of key hashes, `first..=last`, that `old` owns before a change and `new` after it
/// (`None`: no node, the ring was or becomes empty). Keys hashing into it move.
#[pyclass(frozen, module = "shardring", eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The first hash of the range.
    #[pyo3(get)]
    first: u32,
    /// The last hash of the range (inclusive).
    #[pyo3(get)]
    last: u32,
    /// The owner before the change.
    #[pyo3(get)]
    old: Option<String>,
    /// The owner after the change.
    #[pyo3(get)]
    new: Option<String>,
}

#[pymethods]
impl Migration {
    fn __repr__(&self) -> String {
        format!(
            "Migration(first={}, last={}, old={}, new={})",
            self.first,
            self.last,
            py_repr(&self.old),
            py_repr(&self.new)
        )
    }
}

/// Appends a chunk's owners to `owners`; `EmptyRingError` when the ring has no nodes.
fn collect_owners(chunk: &[Option<usize>], owners: &mut Vec<u32>) -> PyResult<()> {
    for owner in chunk {
        // Node indices fit in u32: the library numbers nodes in 32 bits.
        owners.push(owner.ok_or_else(empty_ring)? as u32);
    }
    Ok(())
}

/// `'name'` or `None`, as Python prints them.
fn py_repr(s: &Option<String>) -> String {
    s.as_deref()
        .map_or_else(|| "None".to_string(), crate::quote)
}
