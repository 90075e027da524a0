//! How a Python `Ring` is made, and made again after a membership change.
//!
//! The library's own ring and the other algorithms change in place through
//! [`Placement::add`]/[`Placement::remove`] (and [`Ring::set_weight`]), as a Rust program would. The
//! compatibility modes are rebuilt from their member list instead: the programs they reproduce
//! rebuild their whole continuum on every change, and a node of theirs is more than a name (twemproxy
//! leaves port 11211 out of what it hashes, libmemcached's SPY mode hashes `/host:port`), which only
//! their builders know. Every placement itself is the library's: nothing here computes a point.

use shardring::algo::{self, Algorithm, AlgorithmOptions};
use shardring::compat::twemproxy::{self, Distribution, TwemproxyServer};
use shardring::compat::{libketama, CompatMode};
use shardring::hash::TwemproxyHash;
use shardring::ring::{TemplateDigest, TemplateRingBuilder, TieRule};
use shardring::{Error, HashFunction, Node, Placement, Ring};

/// A built placement: the library's [`Ring`] kept as itself (shares, points and migration plans are
/// the ring's), anything else behind the [`Placement`] trait.
#[derive(Debug, Clone)]
pub(crate) enum Placed {
    /// A point ring: the library's own, or a program's.
    Ring(Ring),
    /// jump, rendezvous, maglev, …, or twemproxy's `modula`.
    Other(Box<dyn Placement>),
}

impl Placed {
    /// The placement, whichever it is.
    pub(crate) fn placement(&self) -> &dyn Placement {
        match self {
            Placed::Ring(r) => r,
            Placed::Other(p) => p.as_ref(),
        }
    }

    /// The ring, when it is one.
    pub(crate) fn ring(&self) -> Option<&Ring> {
        match self {
            Placed::Ring(r) => Some(r),
            Placed::Other(_) => None,
        }
    }
}

/// The settings of a template ring (`compat="template"`), as `shardring lookup --template` takes them.
#[derive(Debug, Clone)]
pub(crate) struct TemplateSettings {
    /// The point-name template, e.g. `{name}&&{i}`.
    pub(crate) template: String,
    /// How a point name becomes positions (`None`: the builder's default, md5x4le).
    pub(crate) digest: Option<TemplateDigest>,
    /// Which node keeps a point two share (`None`: the builder's default, last added).
    pub(crate) ties: Option<TieRule>,
    /// The key hash (`None`: the digest's).
    pub(crate) hash: Option<HashFunction>,
    /// Points per node (`None`: the builder's default).
    pub(crate) vnodes: Option<u32>,
}

/// What a ring is and how to make it again.
#[derive(Debug, Clone)]
pub(crate) enum Recipe {
    /// One of the library's algorithms; membership changes in place.
    Algorithm {
        /// Which.
        algorithm: Algorithm,
        /// Its settings (hash, vnodes, line table).
        options: AlgorithmOptions,
    },
    /// A program's ring (`CompatMode`), rebuilt from `nodes` after every change.
    Compat {
        /// The program.
        mode: CompatMode,
        /// The key hash as the program names it (`None`: the program's default).
        hash: Option<String>,
        /// The program's points-per-node setting, where it has one.
        vnodes: Option<u32>,
        /// The members in configuration order (the programs break ties by it).
        nodes: Vec<(String, f64)>,
    },
    /// A template ring, rebuilt from `nodes` after every change.
    Template {
        /// How the ring is described.
        settings: TemplateSettings,
        /// The members in configuration order.
        nodes: Vec<(String, f64)>,
    },
    /// A twemproxy pool (from its YAML, or its server lines), rebuilt from `servers` after every
    /// change as nutcracker rebuilds its continuum.
    Twemproxy {
        /// `hash`.
        hash: TwemproxyHash,
        /// `hash_tag`.
        hash_tag: Option<[u8; 2]>,
        /// `distribution` (ketama or modula; random places nothing reproducibly).
        distribution: Distribution,
        /// `servers`, in file order.
        servers: Vec<TwemproxyServer>,
    },
}

impl Recipe {
    /// Builds the placement of `nodes` (for an algorithm; the other recipes hold their members).
    ///
    /// # Errors
    /// The library's.
    pub(crate) fn build(&self, nodes: &[Node]) -> Result<Placed, Error> {
        match self {
            Recipe::Algorithm {
                algorithm: Algorithm::Ring,
                options,
            } => {
                let builder = Ring::builder()
                    .hash(options.hash)
                    .vnodes(options.vnodes)
                    .line_table(options.line_table);
                let ring = nodes
                    .iter()
                    .fold(builder, |b, n| b.node(n.name(), n.weight()))
                    .build()?;
                Ok(Placed::Ring(ring))
            }
            Recipe::Algorithm { algorithm, options } => {
                Ok(Placed::Other(algo::build(*algorithm, nodes, options)?))
            }
            Recipe::Compat {
                mode,
                hash,
                vnodes,
                nodes,
            } => {
                let list: Vec<(&str, f64)> = nodes.iter().map(|(n, w)| (n.as_str(), *w)).collect();
                let ring = match (mode, vnodes) {
                    // uhashring's ketama mode takes `vnodes` (its constructor's argument), which the
                    // CLI's --compat uhashring leaves at 40.
                    (CompatMode::Uhashring, Some(v)) => {
                        let weights = whole_weights("uhashring", &list)?;
                        let refs: Vec<(&str, u64)> =
                            weights.iter().map(|(n, w)| (*n, u64::from(*w))).collect();
                        libketama::uhashring_ring(&refs, *v)?
                    }
                    _ => mode.build_with_vnodes(&list, hash.as_deref(), *vnodes)?,
                };
                Ok(Placed::Ring(ring))
            }
            Recipe::Template { settings, nodes } => {
                let mut b = TemplateRingBuilder::new(settings.template.as_str());
                if let Some(d) = settings.digest {
                    b = b.digest(d);
                }
                if let Some(t) = settings.ties {
                    b = b.ties(t);
                }
                if let Some(h) = settings.hash {
                    b = b.hash(h);
                }
                if let Some(v) = settings.vnodes {
                    b = b.vnodes(v);
                }
                let ring = nodes.iter().fold(b, |b, (n, w)| b.node(n, *w)).build()?;
                Ok(Placed::Ring(ring))
            }
            Recipe::Twemproxy {
                hash,
                hash_tag,
                distribution,
                servers,
            } => match distribution {
                // The ring itself (not boxed), so that shares and diffs work on it.
                Distribution::Ketama => Ok(Placed::Ring(twemproxy::ketama_ring(
                    servers, *hash, *hash_tag,
                )?)),
                _ => Ok(Placed::Other(twemproxy::placement(
                    servers,
                    *hash,
                    *hash_tag,
                    *distribution,
                )?)),
            },
        }
    }

    /// Whether membership changes go through the placement in place (else: the member list, then a
    /// rebuild).
    pub(crate) fn changes_in_place(&self) -> bool {
        matches!(self, Recipe::Algorithm { .. })
    }

    /// Adds a member to the list of a rebuilt recipe. A twemproxy member is named as nutcracker
    /// names it: `host:port` (an unnamed server) or a name of its own (a named server, hashed by its
    /// name alone, so its address does not matter to placement).
    ///
    /// # Errors
    /// [`Error::DuplicateNode`]; for twemproxy, a weight that is not a whole number.
    pub(crate) fn add_member(&mut self, name: &str, weight: f64) -> Result<(), Error> {
        if self.member_weight(name).is_some() {
            return Err(Error::DuplicateNode {
                node: name.to_string(),
            });
        }
        match self {
            Recipe::Algorithm { .. } => unreachable!("algorithms change in place"),
            Recipe::Compat { nodes, .. } | Recipe::Template { nodes, .. } => {
                nodes.push((name.to_string(), weight));
            }
            Recipe::Twemproxy { servers, .. } => servers.push(twemproxy_server(name, weight)?),
        }
        Ok(())
    }

    /// Removes a member from the list of a rebuilt recipe.
    ///
    /// # Errors
    /// [`Error::UnknownNode`].
    pub(crate) fn remove_member(&mut self, name: &str) -> Result<(), Error> {
        let unknown = || Error::UnknownNode {
            node: name.to_string(),
        };
        match self {
            Recipe::Algorithm { .. } => unreachable!("algorithms change in place"),
            Recipe::Compat { nodes, .. } | Recipe::Template { nodes, .. } => {
                let i = nodes
                    .iter()
                    .position(|(n, _)| n == name)
                    .ok_or_else(unknown)?;
                nodes.remove(i);
            }
            Recipe::Twemproxy { servers, .. } => {
                let i = servers
                    .iter()
                    .position(|s| s.display_name() == name)
                    .ok_or_else(unknown)?;
                servers.remove(i);
            }
        }
        Ok(())
    }

    /// Changes a member's weight in the list of a rebuilt recipe (its place in the order kept).
    ///
    /// # Errors
    /// [`Error::UnknownNode`], [`Error::InvalidWeight`]; for twemproxy, a weight that is not a whole
    /// number.
    pub(crate) fn reweight_member(&mut self, name: &str, weight: f64) -> Result<(), Error> {
        Node::weighted(name, weight)?;
        let unknown = || Error::UnknownNode {
            node: name.to_string(),
        };
        match self {
            Recipe::Algorithm { .. } => unreachable!("algorithms change in place"),
            Recipe::Compat { nodes, .. } | Recipe::Template { nodes, .. } => {
                let member = nodes
                    .iter_mut()
                    .find(|(n, _)| n == name)
                    .ok_or_else(unknown)?;
                member.1 = weight;
            }
            Recipe::Twemproxy { servers, .. } => {
                let weight = whole_weights("twemproxy", &[(name, weight)])?[0].1;
                let server = servers
                    .iter_mut()
                    .find(|s| s.display_name() == name)
                    .ok_or_else(unknown)?;
                server.weight = weight;
            }
        }
        Ok(())
    }

    /// The weight of the member `name` of a rebuilt recipe.
    fn member_weight(&self, name: &str) -> Option<f64> {
        match self {
            Recipe::Algorithm { .. } => None,
            Recipe::Compat { nodes, .. } | Recipe::Template { nodes, .. } => {
                nodes.iter().find(|(n, _)| n == name).map(|(_, w)| *w)
            }
            Recipe::Twemproxy { servers, .. } => servers
                .iter()
                .find(|s| s.display_name() == name)
                .map(|s| f64::from(s.weight)),
        }
    }

    /// A short description for `repr()`: `algorithm='ring', hash='xxh3'`, `compat='twemproxy'`.
    pub(crate) fn describe(&self) -> String {
        let q = crate::quote;
        match self {
            Recipe::Algorithm { algorithm, options } => format!(
                "algorithm={}, hash={}",
                q(algorithm.name()),
                q(options.hash.name())
            ),
            Recipe::Compat { mode, hash, .. } => match hash {
                Some(h) => format!("compat={}, hash={}", q(mode.name()), q(h)),
                None => format!("compat={}", q(mode.name())),
            },
            Recipe::Template { settings, .. } => {
                format!("compat='template', template={}", q(&settings.template))
            }
            Recipe::Twemproxy {
                hash, distribution, ..
            } => format!(
                "compat='twemproxy', hash={}, distribution={}",
                q(hash.name()),
                q(distribution.name())
            ),
        }
    }
}

/// A twemproxy server from a Python node name: `host:port` is an unnamed server (nutcracker's
/// `host:port:weight`), anything else a named one.
fn twemproxy_server(name: &str, weight: f64) -> Result<TwemproxyServer, Error> {
    let weight = whole_weights("twemproxy", &[(name, weight)])?[0].1;
    let unnamed = format!("{name}:{weight}").parse::<TwemproxyServer>();
    match unnamed {
        Ok(server) if !name.contains(' ') && server.display_name() == name => Ok(server),
        // Named servers are hashed by their name alone: the address is not part of placement.
        _ => Ok(TwemproxyServer {
            host: String::new(),
            port: 0,
            weight,
            name: Some(name.to_string()),
        }),
    }
}

/// The weights as the programs take them: whole numbers from 1, the library's message otherwise.
fn whole_weights<'a>(
    program: &str,
    nodes: &[(&'a str, f64)],
) -> Result<Vec<(&'a str, u32)>, Error> {
    nodes
        .iter()
        .map(|&(name, w)| {
            Node::weighted(name, w)?;
            if w.fract() != 0.0 || w > f64::from(u32::MAX) {
                return Err(Error::InvalidSetting {
                    setting: "weight",
                    reason: format!(
                        "node {name:?} has weight {w}: {program} takes whole-number weights from 1 to {}",
                        u32::MAX
                    ),
                });
            }
            Ok((name, w as u32))
        })
        .collect()
}
