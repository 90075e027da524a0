//! Rings described by a template: the article-style rings teams write themselves.
//!
//! Most in-house consistent hashing is a few lines copied from an article: give each node `V` names made
//! from a pattern (`"10.0.0.1:11211&&" + i`, `i + name`, `"SHARD-" + i + "-NODE-" + name`), hash each
//! name (MD5 cut into four 32-bit words, or one 32-bit hash), keep the points in a sorted map, and send a
//! key to the first point at or after its hash, wrapping to the first point past the last. Such a ring is
//! described completely by four choices, so it needs no code here:
//!
//! - the **template** of a point name: text with `{name}` (the node's [identity](crate::Node::identity),
//!   its name unless set apart) and `{i}` (the point number in decimal, from 0); `{{` and `}}` stand for
//!   literal braces. Both placeholders are required (without `{name}` every node would land on the same
//!   points, without `{i}` every point of a node on one);
//! - the **digest**: [`Md5x4Le`](TemplateDigest::Md5x4Le) (each MD5 digest gives four points, its four
//!   little-endian words: ketama's split, and Dubbo's), [`Md5x4Be`](TemplateDigest::Md5x4Be) (the same
//!   words read big-endian), or [`Hash`](TemplateDigest::Hash) (one point per name, any of the library's
//!   hashes);
//! - the number of **points** per node: `V × weight` rounded (at least 1); with an MD5 split, `V / 4`
//!   digests (rounded down, at least one) as the article code's `for (i = 0; i < V / 4; i++)` loop has it,
//!   numbered `0..V/4` — the number in the name counts digests, not points;
//! - who wins when two nodes' points **collide**: [`TieRule::LastAdded`] (the default: Java's
//!   `TreeMap.put` and Go's `map` overwrite) or [`TieRule::FirstAdded`] (C++'s `map::insert`, a stable sort
//!   that keeps the first).
//!
//! Keys are hashed with the ring's key hash: by default MD5's first little-endian word under an MD5
//! split, else the digest's own hash. A node's points depend on nothing but its own name and weight, so
//! membership changes move only the keys they must.
//!
//! ```
//! use shardring::ring::{TemplateDigest, TemplateRingBuilder};
//!
//! // The Java ketama of the background: MD5("<node>&&<i>"), 4 points a digest, 160 points a node.
//! let ring = TemplateRingBuilder::new("{name}&&{i}")
//!     .digest(TemplateDigest::Md5x4Le)
//!     .vnodes(160)
//!     .node("10.0.0.1:20880", 1.0)
//!     .node("10.0.0.2:20880", 1.0)
//!     .build()?;
//! assert_eq!(ring.point_count(), 320);
//! # Ok::<(), shardring::Error>(())
//! ```

use std::fmt;
use std::str::FromStr;

use super::{PointScheme, Ring, DEFAULT_VNODES};
use crate::hash::{md5_digest, HashFunction, KeyHash};
use crate::Error;

/// The longest template, in bytes. Kept inline so that the scheme stays `Copy`; article templates are a
/// handful of bytes.
pub const MAX_TEMPLATE_LEN: usize = 64;

/// A parsed point-name template (see the [module docs](self)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PointTemplate {
    /// The template's text, as written (placeholders and doubled braces included).
    text: [u8; MAX_TEMPLATE_LEN],
    /// How many bytes of `text` are used.
    len: u8,
}

/// One piece of a template.
enum Piece<'a> {
    /// Text copied as it is.
    Literal(&'a [u8]),
    /// `{name}`.
    Name,
    /// `{i}`.
    Index,
}

impl PointTemplate {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] (setting `template`) for a template longer than [`MAX_TEMPLATE_LEN`]
    /// bytes, without `{name}` or `{i}`, or with a brace that is neither a placeholder nor doubled.
    pub fn parse(text: &str) -> Result<PointTemplate, Error> {
        let bad = |reason: String| Error::InvalidSetting {
            setting: "template",
            reason: format!("{text:?}: {reason}"),
        };
        if text.len() > MAX_TEMPLATE_LEN {
            return Err(bad(format!("longer than {MAX_TEMPLATE_LEN} bytes")));
        }
        let mut buf = [0u8; MAX_TEMPLATE_LEN];
        buf[..text.len()].copy_from_slice(text.as_bytes());
        let template = PointTemplate {
            text: buf,
            len: text.len() as u8,
        };
        let (mut names, mut indices, mut stray) = (0, 0, None);
        template.pieces(|piece| match piece {
            Ok(Piece::Name) => names += 1,
            Ok(Piece::Index) => indices += 1,
            Ok(Piece::Literal(_)) => {}
            Err(at) => {
                stray.get_or_insert(at);
            }
        });
        if let Some(at) = stray {
            return Err(bad(format!(
                "a brace at byte {at} that is not {{name}}, {{i}}, {{{{ or }}}}"
            )));
        }
        if names == 0 {
            return Err(bad("no {name}: every node would get the same points".into()));
        }
        if indices == 0 {
            return Err(bad("no {i}: all of a node's points would be one".into()));
        }
        Ok(template)
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        // Built from a `&str` cut at its end: always UTF-8.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or_default()
    }

    /// Calls `f` with each piece in order, or with `Err(byte offset)` for a stray brace.
    fn pieces<'a>(&'a self, mut f: impl FnMut(Result<Piece<'a>, usize>)) {
        let t = &self.text[..usize::from(self.len)];
        let mut start = 0;
        let mut at = 0;
        while at < t.len() {
            let rest = &t[at..];
            let (piece, skip) = if rest.starts_with(b"{name}") {
                (Some(Piece::Name), 6)
            } else if rest.starts_with(b"{i}") {
                (Some(Piece::Index), 3)
            } else if rest.starts_with(b"{{") || rest.starts_with(b"}}") {
                (Some(Piece::Literal(&rest[..1])), 2)
            } else if rest[0] == b'{' || rest[0] == b'}' {
                f(Err(at));
                (None, 1)
            } else {
                at += 1;
                continue;
            };
            if start < at {
                f(Ok(Piece::Literal(&t[start..at])));
            }
            if let Some(piece) = piece {
                f(Ok(piece));
            }
            at += skip;
            start = at;
        }
        if start < t.len() {
            f(Ok(Piece::Literal(&t[start..])));
        }
    }

    /// Writes the name of point (or digest) `i` of the node with identity `name` into `out`, replacing
    /// what was there.
    pub fn render_into(&self, name: &str, i: u64, out: &mut Vec<u8>) {
        out.clear();
        self.pieces(|piece| match piece {
            Ok(Piece::Literal(text)) => out.extend_from_slice(text),
            Ok(Piece::Name) => out.extend_from_slice(name.as_bytes()),
            Ok(Piece::Index) => out.extend_from_slice(i.to_string().as_bytes()),
            // Refused by `parse`.
            Err(_) => {}
        });
    }

    /// The name of point (or digest) `i` of the node with identity `name`.
    pub fn render(&self, name: &str, i: u64) -> String {
        let mut out = Vec::new();
        self.render_into(name, i, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl fmt::Debug for PointTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PointTemplate")
            .field(&self.as_str())
            .finish()
    }
}

impl fmt::Display for PointTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PointTemplate {
    type Err = Error;

    fn from_str(s: &str) -> Result<PointTemplate, Error> {
        PointTemplate::parse(s)
    }
}

/// How a point name becomes positions on the circle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TemplateDigest {
    /// MD5 of the name; its 16 bytes are four points, each four bytes read little-endian
    /// (`(d[3+4h] << 24) | (d[2+4h] << 16) | (d[1+4h] << 8) | d[4h]`, the ketama split). Named `md5x4le`.
    Md5x4Le,
    /// MD5 of the name, four points read big-endian. Named `md5x4be`.
    Md5x4Be,
    /// One point per name: the hash's 32-bit value. Named as the hash is (`crc32`, `fnv1a-32`, …).
    Hash(HashFunction),
}

impl TemplateDigest {
    /// How many names (digests or hashes) a node of `points` wanted points gets.
    fn names_for(self, points: u64) -> u64 {
        match self {
            TemplateDigest::Md5x4Le | TemplateDigest::Md5x4Be => (points / 4).max(1),
            TemplateDigest::Hash(_) => points,
        }
    }

    /// Points per name.
    fn points_per_name(self) -> u64 {
        match self {
            TemplateDigest::Md5x4Le | TemplateDigest::Md5x4Be => 4,
            TemplateDigest::Hash(_) => 1,
        }
    }

    /// The key hash that goes with it unless told otherwise: MD5's first little-endian word for the MD5
    /// splits, else the same hash.
    pub fn default_key_hash(self) -> HashFunction {
        match self {
            TemplateDigest::Md5x4Le | TemplateDigest::Md5x4Be => HashFunction::Md5,
            TemplateDigest::Hash(h) => h,
        }
    }

    /// Its name, as [`from_str`](TemplateDigest::from_str) takes it.
    pub fn name(self) -> &'static str {
        match self {
            TemplateDigest::Md5x4Le => "md5x4le",
            TemplateDigest::Md5x4Be => "md5x4be",
            TemplateDigest::Hash(h) => h.name(),
        }
    }
}

impl fmt::Display for TemplateDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TemplateDigest {
    type Err = Error;

    /// `md5x4le`, `md5x4be`, or any [`HashFunction`] name for one point per name.
    fn from_str(s: &str) -> Result<TemplateDigest, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "md5x4le" | "md5x4" => Ok(TemplateDigest::Md5x4Le),
            "md5x4be" => Ok(TemplateDigest::Md5x4Be),
            _ => s
                .parse::<HashFunction>()
                .map(TemplateDigest::Hash)
                .map_err(|e| match e {
                    Error::UnknownHash { name, known } => Error::UnknownHash {
                        name,
                        known: format!("md5x4le, md5x4be, {known}"),
                    },
                    other => other,
                }),
        }
    }
}

/// Which node keeps a position that two nodes' points share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TieRule {
    /// The node added last (configuration order, then each [`Ring::add`]): what a map that overwrites
    /// does — Java's `TreeMap.put`, Go's `map[k] = v`, Python's `dict`. The default.
    #[default]
    LastAdded,
    /// The node added first: a map that keeps the first entry (C++ `std::map::insert`, Java's
    /// `putIfAbsent`), or a stable sort whose first of equal points wins.
    FirstAdded,
}

impl FromStr for TieRule {
    type Err = Error;

    /// `last` or `first`.
    fn from_str(s: &str) -> Result<TieRule, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "last" | "last-added" => Ok(TieRule::LastAdded),
            "first" | "first-added" => Ok(TieRule::FirstAdded),
            _ => Err(Error::InvalidSetting {
                setting: "ties",
                reason: format!("{s:?}: expected last or first"),
            }),
        }
    }
}

/// The template scheme: [`PointScheme::Template`]'s settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TemplateScheme {
    /// The point-name template.
    pub template: PointTemplate,
    /// How names become positions.
    pub digest: TemplateDigest,
    /// Who keeps a shared position.
    pub ties: TieRule,
}

impl TemplateScheme {
    /// The points of a node that wants `points` (vnodes × weight, rounded).
    pub(crate) fn point_count(self, points: u64) -> u64 {
        self.digest.names_for(points) * self.digest.points_per_name()
    }

    /// Appends the first `count` positions of the node with identity `identity`.
    pub(crate) fn positions(self, identity: &str, count: u64, out: &mut Vec<u32>) {
        let per = self.digest.points_per_name();
        let mut name = Vec::with_capacity(MAX_TEMPLATE_LEN + identity.len() + 20);
        for i in 0..count.div_ceil(per) {
            self.template.render_into(identity, i, &mut name);
            let left = (count - i * per).min(per) as usize;
            match self.digest {
                TemplateDigest::Md5x4Le => {
                    let d = md5_digest(&name);
                    out.extend(
                        d.chunks_exact(4)
                            .take(left)
                            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                    );
                }
                TemplateDigest::Md5x4Be => {
                    let d = md5_digest(&name);
                    out.extend(
                        d.chunks_exact(4)
                            .take(left)
                            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]])),
                    );
                }
                TemplateDigest::Hash(h) => out.push(h.hash32(&name)),
            }
        }
    }
}

/// Builds a template ring (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct TemplateRingBuilder {
    /// The template as given; parsed at `build`.
    template: String,
    /// The digest.
    digest: TemplateDigest,
    /// The key hash, when not the digest's default.
    hash: Option<HashFunction>,
    /// Points per node of weight 1.
    vnodes: u32,
    /// The tie rule.
    ties: TieRule,
    /// (name, weight) in configuration order.
    nodes: Vec<(String, f64)>,
}

impl TemplateRingBuilder {
    /// A builder for point names made from `template` (`"{name}&&{i}"`, `"{i}{name}"`, …).
    pub fn new(template: impl Into<String>) -> TemplateRingBuilder {
        TemplateRingBuilder {
            template: template.into(),
            digest: TemplateDigest::Md5x4Le,
            hash: None,
            vnodes: DEFAULT_VNODES,
            ties: TieRule::default(),
            nodes: Vec::new(),
        }
    }

    /// How each point name becomes positions. By default, this is [`TemplateDigest::Md5x4Le`].
    pub fn digest(mut self, digest: TemplateDigest) -> TemplateRingBuilder {
        self.digest = digest;
        self
    }

    /// The key hash. By default, this is the digest's [`default_key_hash`](TemplateDigest::default_key_hash).
    pub fn hash(mut self, hash: HashFunction) -> TemplateRingBuilder {
        self.hash = Some(hash);
        self
    }

    /// Points per node of weight 1 (the article code's "virtual nodes"). By default, this is 160.
    pub fn vnodes(mut self, vnodes: u32) -> TemplateRingBuilder {
        self.vnodes = vnodes;
        self
    }

    /// Who keeps a shared position. By default, this is [`TieRule::LastAdded`].
    pub fn ties(mut self, ties: TieRule) -> TemplateRingBuilder {
        self.ties = ties;
        self
    }

    /// Adds a node; configuration order is the order of these calls.
    pub fn node(mut self, name: impl Into<String>, weight: f64) -> TemplateRingBuilder {
        self.nodes.push((name.into(), weight));
        self
    }

    /// Builds the ring.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a bad template or vnodes 0, and the errors of
    /// [`RingBuilder::build`](super::RingBuilder::build) (weights, duplicates, empty names).
    pub fn build(self) -> Result<Ring, Error> {
        let template = PointTemplate::parse(&self.template)?;
        let scheme = PointScheme::Template(TemplateScheme {
            template,
            digest: self.digest,
            ties: self.ties,
        });
        self.nodes
            .into_iter()
            .fold(
                Ring::builder()
                    .point_scheme(scheme)
                    .vnodes(self.vnodes)
                    .hash(self.hash.unwrap_or(self.digest.default_key_hash())),
                |b, (name, weight)| b.node(name, weight),
            )
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_and_refuse() {
        let t = PointTemplate::parse("{name}&&{i}").unwrap();
        assert_eq!(t.render("10.0.0.1:80", 7), "10.0.0.1:80&&7");
        let t = PointTemplate::parse("{i}{name}").unwrap();
        assert_eq!(t.render("a", 12), "12a");
        let t = PointTemplate::parse("SHARD-{i}-NODE-{name}").unwrap();
        assert_eq!(t.render("n1", 0), "SHARD-0-NODE-n1");
        let t = PointTemplate::parse("{{{name}}}#{i}").unwrap();
        assert_eq!(t.render("x", 3), "{x}#3");
        // A name with braces of its own is inserted as it is.
        assert_eq!(t.render("{i}", 1), "{{i}}#1");
        for bad in [
            "{name}",
            "{i}",
            "{name}{j}{i}",
            "{name}-{i}}",
            "{nam}{i}",
            "",
        ] {
            assert!(PointTemplate::parse(bad).is_err(), "{bad}");
        }
        assert!(PointTemplate::parse(&format!("{{name}}{{i}}{}", "x".repeat(60))).is_err());
    }

    #[test]
    fn md5_split_takes_four_words_a_digest() {
        let scheme = TemplateScheme {
            template: PointTemplate::parse("{name}&&{i}").unwrap(),
            digest: TemplateDigest::Md5x4Le,
            ties: TieRule::LastAdded,
        };
        assert_eq!(scheme.point_count(160), 160);
        assert_eq!(scheme.point_count(162), 160);
        assert_eq!(scheme.point_count(2), 4);
        let mut out = Vec::new();
        scheme.positions("n", 8, &mut out);
        let d0 = md5_digest(b"n&&0");
        let d1 = md5_digest(b"n&&1");
        let word = |d: &[u8; 16], h: usize| {
            u32::from(d[3 + h * 4]) << 24
                | u32::from(d[2 + h * 4]) << 16
                | u32::from(d[1 + h * 4]) << 8
                | u32::from(d[h * 4])
        };
        let want: Vec<u32> = (0..4)
            .map(|h| word(&d0, h))
            .chain((0..4).map(|h| word(&d1, h)))
            .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn digests_parse() {
        assert_eq!(
            "md5x4le".parse::<TemplateDigest>().unwrap(),
            TemplateDigest::Md5x4Le
        );
        assert_eq!(
            "crc32".parse::<TemplateDigest>().unwrap(),
            TemplateDigest::Hash(HashFunction::Crc32)
        );
        let err = "sha1".parse::<TemplateDigest>().unwrap_err().to_string();
        assert!(err.contains("md5x4le"), "{err}");
    }
}
