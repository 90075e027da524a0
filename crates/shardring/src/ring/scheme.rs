//! How a node becomes points on the circle, and (for the compatibility schemes) how a key becomes a
//! position.

use std::cmp::Ordering;
use std::ops::Range;

use super::template::{TemplateScheme, TieRule};
use crate::hash::{md5_digest, HashFunction, JavaHash, KeyHash, Xxh3Numbered};
use crate::Node;

/// The rule that turns a node into its positions on the 32-bit circle.
///
/// [`Plain`](PointScheme::Plain) is the library's own. The others reproduce, byte for byte, the continuum
/// of a named program; build rings with them through [`crate::compat`], which also sets the node
/// identities, key hash and settings the program uses. Every variant is deterministic.
///
/// Under the compatibility schemes a node's number of points depends on the total weight and the number of
/// nodes (that is how those programs work), so adding, removing or re-weighting a node recomputes every
/// node's points, and keys may move between nodes that did not change — exactly as they do in the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PointScheme {
    /// The library's own scheme. A node of weight `w` gets `max(1, round(vnodes × w))` points; point `i`
    /// (counting from 0) sits at `hash32("{name}-{i}")`, with the ring's key hash and `i` in decimal.
    ///
    /// A node's points depend on nothing but its own name and weight, so adding, removing or re-weighting
    /// one node never moves another node's points; and since point `i` does not depend on the count,
    /// raising a node's weight keeps its old points and adds new ones (keys only move *to* it).
    Plain,
    /// twemproxy's (nutcracker 0.5.0) `distribution: ketama`.
    ///
    /// A server of weight `w` out of a total `W` over `n` servers gets
    /// `floor(w/W × 160/4 × n) × 4` points, computed in single-precision floats as nutcracker does (so
    /// equal weights can give 156 points rather than 160); for `i` from 0, the MD5 digest of
    /// `"{identity}-{i}"` (cut to 272 bytes) gives four points, its four little-endian words. A key is
    /// hashed with the ring's hash after the `hash_tag` is applied: when the key holds the tag's first
    /// character, then the second later on, with at least one byte between them, only those bytes are
    /// hashed. An empty key is position 0. Ties between equal points go to the server whose identity is
    /// shorter, then byte-wise smaller (nutcracker sorts its servers that way).
    Twemproxy {
        /// The two characters of the pool's `hash_tag`, if it has one.
        hash_tag: Option<[u8; 2]>,
    },
    /// libmemcached 1.1 `MEMCACHED_BEHAVIOR_KETAMA` (distribution `CONSISTENT_KETAMA`, not weighted):
    /// 100 points per server whatever its weight; point `i` is the ring's key hash of `"{identity}-{i}"`
    /// (libmemcached hashes points with its key hash, `one_at_a_time` unless told otherwise). In all four
    /// libmemcached schemes, of equal points the server added first wins.
    Libmemcached,
    /// libmemcached 1.1 `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`: the point count of
    /// [`Twemproxy`](PointScheme::Twemproxy) (single-precision, 160 per server of average weight) and
    /// four MD5 words of `"{identity}-{i}"` per count of four.
    LibmemcachedWeighted,
    /// libmemcached 1.1 `MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY` without weighting: as
    /// [`Libmemcached`](PointScheme::Libmemcached), with the identity `"/{host}:{port}"`.
    LibmemcachedSpy,
    /// `MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY` after `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`: as
    /// [`LibmemcachedWeighted`](PointScheme::LibmemcachedWeighted) with the identity `"/{host}:{port}"`.
    /// libmemcached means this to match Java's spymemcached (its source comment gives spymemcached's
    /// format as `hostname/ip:port-index`, or `/ip:port-index` without a host name); proven here against
    /// libmemcached. Real spymemcached 2.12 strips the `/` and differs in more: see
    /// [`Spymemcached`](PointScheme::Spymemcached).
    LibmemcachedSpyWeighted,
    /// The original last.fm libketama: a server with `m` of the total memory `M` over `n` servers gets
    /// `floorf(m/M × 40 × n)` MD5 digests of `"{identity}-{k}"`, four points each. Keys are C strings:
    /// hashing stops at the first NUL byte. Of equal points, the server listed first wins.
    Libketama,
    /// uhashring's ketama mode (`HashRing(hash_fn="ketama")`): `(vnodes × n × w) // W` digests per node in
    /// integer arithmetic (vnodes 40 by default), four points each, as libketama; but a key goes to the
    /// first point strictly *after* its MD5 (Python's `bisect_right`), not at or after it. Of equal
    /// points, the node added last wins (a dict entry overwritten).
    Uhashring,
    /// nginx's `hash KEY consistent`: a server of weight `w` gets `160 × w` points; the identity (the
    /// server as written in the upstream block) is split into host and port at the last `:` followed only
    /// by digits; point `j` is CRC-32 of `host NUL port` followed by point `j-1` as four little-endian
    /// bytes (0 for the first). Keys are hashed with CRC-32. Of equal points, the server configured first
    /// keeps the point.
    Nginx,
    /// spymemcached 2.12's `KetamaNodeLocator` (Java). The identity is the node's
    /// `InetSocketAddress.toString()` text, from which the key format makes the node key (see
    /// [`SpymemcachedKeyFormat`]); point names are `"{key}-{i}"`. Unweighted with `KETAMA_HASH` keys: `vnodes / 4` MD5
    /// digests (node repetitions, 160 by default), four little-endian words each; unweighted with any
    /// other key hash: `vnodes` points, that hash of each name. Weighted (a weights map was given):
    /// [`Twemproxy`](PointScheme::Twemproxy)'s single-precision count with `vnodes` in place of 160,
    /// always MD5 points whatever the key hash. Keys use the ring's hash, a
    /// [`HashFunction::Java`]. Of equal points the node listed last wins (`TreeMap.put` overwrites).
    Spymemcached {
        /// Whether spymemcached was given a weights map (then even equal weights take the weighted
        /// count).
        weighted: bool,
        /// `KetamaNodeKeyFormatter.Format`: how a node's address becomes its key.
        key_format: SpymemcachedKeyFormat,
    },
    /// A ring described by a point-name template, a digest split and a tie rule
    /// ([`ring::template`](super::template)); groupcache's `consistenthash` is one (`{i}{name}`, CRC-32).
    Template(TemplateScheme),
}

/// What a scheme may look at when it places a node's points.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SchemeInput {
    /// Points per node of weight 1.
    pub vnodes: u32,
    /// The ring's key hash.
    pub hash: HashFunction,
    /// How many nodes the ring has (compatibility schemes scale by it).
    pub node_count: usize,
    /// The sum of all weights (compatibility schemes divide by it).
    pub total_weight: f64,
}

/// twemproxy cuts a point name to this many bytes (`KETAMA_MAX_HOSTLEN - 1`).
const TWEMPROXY_MAX_POINT_NAME: usize = 272;

impl PointScheme {
    /// Whether a node's points depend on the other nodes, so that membership changes rebuild the ring.
    pub(crate) fn is_global(self) -> bool {
        !matches!(
            self,
            PointScheme::Plain
                | PointScheme::Libmemcached
                | PointScheme::LibmemcachedSpy
                | PointScheme::Nginx
                | PointScheme::Template(_)
                | PointScheme::Spymemcached {
                    weighted: false,
                    ..
                }
        )
    }

    /// A short name for the scheme, as the CLI's `--compat` spells it (`plain` for the library's own).
    pub fn name(self) -> &'static str {
        match self {
            PointScheme::Plain => "plain",
            PointScheme::Twemproxy { .. } => "twemproxy",
            PointScheme::Libmemcached => "libmemcached",
            PointScheme::LibmemcachedWeighted => "libmemcached-weighted",
            PointScheme::LibmemcachedSpy => "libmemcached-spy",
            PointScheme::LibmemcachedSpyWeighted => "libmemcached-spy-weighted",
            PointScheme::Libketama => "libketama",
            PointScheme::Uhashring => "uhashring",
            PointScheme::Nginx => "nginx",
            PointScheme::Spymemcached {
                weighted: false, ..
            } => "spymemcached",
            PointScheme::Spymemcached { weighted: true, .. } => "spymemcached-weighted",
            PointScheme::Template(_) => "template",
        }
    }

    /// The ring position of `key` under this scheme with key hash `hash`.
    #[inline]
    pub(crate) fn key_position(&self, hash: HashFunction, key: &[u8]) -> u32 {
        match *self {
            PointScheme::Twemproxy { hash_tag } => {
                let key = match hash_tag {
                    Some(tag) => twemproxy_hash_tag(key, tag),
                    None => key,
                };
                if key.is_empty() {
                    0
                } else {
                    hash.hash32(key)
                }
            }
            PointScheme::Libketama => {
                let end = key.iter().position(|&b| b == 0).unwrap_or(key.len());
                hash.hash32(&key[..end])
            }
            // bisect_right finds the first point > h, which is the first point >= h + 1; h = u32::MAX
            // wraps to 0 and so to the first point, where bisect_right's wrap also lands.
            PointScheme::Uhashring => hash.hash32(key).wrapping_add(1),
            _ => hash.hash32(key),
        }
    }

    /// How many points `node` gets.
    pub(crate) fn point_count(self, node: &Node, input: SchemeInput) -> u64 {
        let n = input.node_count.max(1);
        match self {
            PointScheme::Plain => {
                let wanted = (f64::from(input.vnodes) * node.weight()).round();
                // `as` saturates for floats beyond u64's range; the caller checks the limit.
                (wanted as u64).max(1)
            }
            PointScheme::Twemproxy { .. } => ketama_weighted_count(node, input, 160),
            PointScheme::Spymemcached { weighted: true, .. } => {
                // spymemcached: the same float expression with getNodeRepetitions() for 160, then
                // (int)(Math.floor(...) * 4) points, of which pointerPerServer / 4 digests are made.
                ketama_weighted_count(node, input, input.vnodes)
            }
            PointScheme::Spymemcached {
                weighted: false, ..
            } => match input.hash {
                HashFunction::Java(JavaHash::Ketama) => u64::from(input.vnodes / 4) * 4,
                _ => u64::from(input.vnodes),
            },
            PointScheme::Template(t) => {
                let wanted = (f64::from(input.vnodes) * node.weight()).round();
                t.point_count((wanted as u64).max(1))
            }
            PointScheme::LibmemcachedWeighted | PointScheme::LibmemcachedSpyWeighted => {
                // floor((float)(pct * 160 / 4 * (float)live + 0.0000000001F)) * 4   (all in float)
                let pct = node.weight() as f32 / input.total_weight as f32;
                let t = pct * 160.0f32 / 4.0f32 * (n as f32) + 0.000_000_000_1f32;
                (f64::from(t).floor() as u64) * 4
            }
            PointScheme::Libmemcached | PointScheme::LibmemcachedSpy => 100,
            PointScheme::Libketama => {
                // float pct = (float)memory / (float)total; floorf(pct * 40.0 * (float)n)  (the * in double)
                let pct = node.weight() as f32 / input.total_weight as f32;
                let v = (f64::from(pct) * 40.0 * f64::from(n as f32)) as f32;
                (v.floor() as u64) * 4
            }
            PointScheme::Uhashring => {
                let (w, total) = (node.weight(), input.total_weight);
                let product = f64::from(input.vnodes) * n as f64 * w;
                let digests = if w.fract() == 0.0 && total.fract() == 0.0 && product < 2f64.powi(53)
                {
                    // Python ints: exact floor division.
                    (product as u64) / (total as u64).max(1)
                } else {
                    (product / total).floor() as u64
                };
                digests * 4
            }
            PointScheme::Nginx => (node.weight() * 160.0) as u64,
        }
    }

    /// Appends `count` positions of `node` to `out`.
    pub(crate) fn positions(self, node: &Node, count: u64, input: SchemeInput, out: &mut Vec<u32>) {
        match self {
            PointScheme::Plain => self.for_each_position(node, count, input, |p| out.push(p)),
            PointScheme::Twemproxy { .. } => {
                md5_quads(node.identity(), count, Some(TWEMPROXY_MAX_POINT_NAME), out)
            }
            PointScheme::LibmemcachedWeighted
            | PointScheme::LibmemcachedSpyWeighted
            | PointScheme::Libketama
            | PointScheme::Uhashring => md5_quads(node.identity(), count, None, out),
            PointScheme::Libmemcached | PointScheme::LibmemcachedSpy => {
                for i in 0..count {
                    let name = format!("{}-{i}", node.identity());
                    out.push(input.hash.hash32(name.as_bytes()));
                }
            }
            PointScheme::Spymemcached {
                weighted,
                key_format,
            } => {
                let key = key_format.node_key(node.identity());
                let key = key.as_ref();
                if weighted || input.hash == HashFunction::Java(JavaHash::Ketama) {
                    md5_quads(key, count, None, out);
                } else {
                    for i in 0..count {
                        let name = format!("{key}-{i}");
                        out.push(input.hash.hash32(name.as_bytes()));
                    }
                }
            }
            PointScheme::Template(t) => t.positions(node.identity(), count, out),
            PointScheme::Nginx => {
                let (host, port) = nginx_host_port(node.identity().as_bytes());
                let mut base = crc32fast::Hasher::new();
                base.update(host);
                base.update(&[0]);
                base.update(port);
                let mut prev = 0u32;
                for _ in 0..count {
                    let mut h = base.clone();
                    h.update(&prev.to_le_bytes());
                    prev = h.finalize();
                    out.push(prev);
                }
            }
        }
    }

    /// Calls `f` with each of the `count` positions of `node`, in point order (what
    /// [`positions`](PointScheme::positions) appends).
    #[inline]
    pub(crate) fn for_each_position(
        self,
        node: &Node,
        count: u64,
        input: SchemeInput,
        f: impl FnMut(u32),
    ) {
        match self {
            PointScheme::Plain => match input.hash {
                // The default hash hashes whole runs of point names at once.
                HashFunction::Xxh3 => plain_xxh3(node.name(), count, f),
                other => plain(node.name(), 0..count, |key| other.hash32(key), f),
            },
            // The compatibility schemes build rings of a few thousand points: no fast path.
            _ => {
                let mut out = Vec::with_capacity(count as usize);
                self.positions(node, count, input, &mut out);
                out.into_iter().for_each(f);
            }
        }
    }

    /// The order of two nodes whose points sit at the same position: the first one wins the tie.
    pub(crate) fn tie_order(self, a: &Node, b: &Node) -> Ordering {
        match self {
            // nutcracker sorts its servers by (length, bytes) of their identity and builds the continuum
            // in that order; glibc's qsort is a stable merge sort, so that order survives among equals.
            PointScheme::Twemproxy { .. } => a
                .identity()
                .len()
                .cmp(&b.identity().len())
                .then_with(|| a.identity().cmp(b.identity())),
            // libmemcached, libketama and nginx sort their points with glibc's stable qsort (nginx then
            // keeps the first of equal points): the server configured first wins.
            PointScheme::Libmemcached
            | PointScheme::LibmemcachedWeighted
            | PointScheme::LibmemcachedSpy
            | PointScheme::LibmemcachedSpyWeighted
            | PointScheme::Libketama
            | PointScheme::Nginx => a.rank().cmp(&b.rank()).then_with(|| a.name().cmp(b.name())),
            // uhashring maps each point to a node in a dict, spymemcached in a TreeMap (`put`
            // overwrites), so the node added last overwrites the others.
            PointScheme::Uhashring | PointScheme::Spymemcached { .. } => {
                b.rank().cmp(&a.rank()).then_with(|| a.name().cmp(b.name()))
            }
            PointScheme::Template(t) => match t.ties {
                TieRule::LastAdded => b.rank().cmp(&a.rank()).then_with(|| a.name().cmp(b.name())),
                TieRule::FirstAdded => a.rank().cmp(&b.rank()).then_with(|| a.name().cmp(b.name())),
            },
            PointScheme::Plain => a.name().cmp(b.name()),
        }
    }
}

/// The ketama weighted point count of twemproxy, libmemcached's predecessor code and spymemcached, with
/// `reps` points for a server of average weight:
/// `float pct = (float)w / (float)W; floorf((float)(pct * reps / 4 * (float)n + 0.0000000001)) * 4`
/// (the `+` in double precision, everything else in single).
fn ketama_weighted_count(node: &Node, input: SchemeInput, reps: u32) -> u64 {
    let n = input.node_count.max(1);
    let pct = node.weight() as f32 / input.total_weight as f32;
    let t = pct * reps as f32 / 4.0f32 * (n as f32);
    let v = ((f64::from(t) + 0.000_000_000_1) as f32).floor();
    (v as u64) * 4
}

/// spymemcached's `KetamaNodeKeyFormatter.Format`: how a node's `InetSocketAddress` becomes the key
/// its point names start with. The node's identity is the address as Java prints it
/// (`hostname/address:port`, the host name empty for an address given as a literal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SpymemcachedKeyFormat {
    /// `SPYMEMCACHED`, the default: `String.valueOf(address)` less one leading `/`
    /// (`10.0.0.1:11211`, `cache1/10.0.0.1:11211`).
    #[default]
    Spymemcached,
    /// `LIBMEMCACHED`: `address.getHostName()`, then `:port` unless the port is 11211 — libmemcached's
    /// own point names. `getHostName()` is the host name when there is one; for an address given as a
    /// literal Java asks reverse DNS, and this format assumes the lookup fails (the address itself,
    /// IPv6 without brackets), so name such servers by host name to be sure.
    Libmemcached,
}

impl SpymemcachedKeyFormat {
    /// The node key of the address text `identity`.
    pub fn node_key(self, identity: &str) -> std::borrow::Cow<'_, str> {
        match self {
            SpymemcachedKeyFormat::Spymemcached => {
                std::borrow::Cow::Borrowed(identity.strip_prefix('/').unwrap_or(identity))
            }
            SpymemcachedKeyFormat::Libmemcached => {
                let (host, port) = match identity.rsplit_once(':') {
                    Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty() => {
                        (h, p)
                    }
                    _ => (identity, ""),
                };
                let host = match host.split_once('/') {
                    Some((name, _)) if !name.is_empty() => name,
                    Some((_, addr)) => addr.trim_start_matches('[').trim_end_matches(']'),
                    None => host,
                };
                if port.is_empty() || port == "11211" {
                    std::borrow::Cow::Borrowed(host)
                } else {
                    std::borrow::Cow::Owned(format!("{host}:{port}"))
                }
            }
        }
    }
}

/// Point names formatted per batch before any of them is hashed.
const BATCH: usize = 64;

/// The plain scheme's positions under XXH3 ([`plain`] with `xxh3_64`): each run of point numbers
/// with the same number of digits is hashed by [`Xxh3Numbered`] when it can (names of 17 to 128 bytes),
/// the rest by [`plain`].
#[inline(always)]
fn plain_xxh3(name: &str, count: u64, mut f: impl FnMut(u32)) {
    let mut prefix = Vec::with_capacity(name.len() + 1);
    prefix.extend_from_slice(name.as_bytes());
    prefix.push(b'-');
    let numbered = Xxh3Numbered::new(&prefix);
    let mut start = 0u64;
    let mut digits = 1u32;
    while start < count {
        let end = 10u64.checked_pow(digits).map_or(count, |e| e.min(count));
        if !numbered.run(digits, start..end, |h| f(h as u32)) {
            plain(
                name,
                start..end,
                |key| crate::hash::xxh3_64(key) as u32,
                &mut f,
            );
        }
        start = end;
        digits += 1;
    }
}

/// The plain scheme's positions: `hash("{name}-{i}")` for `i` in `numbers`.
///
/// The names of a batch of points are written first and hashed after: hashing a name right after
/// writing its last digits makes the hash's 8-byte loads wait for those byte stores (a failed
/// store-to-load forward), which used to cost more than the hash itself.
#[inline(always)]
fn plain(name: &str, numbers: Range<u64>, hash: impl Fn(&[u8]) -> u32, mut f: impl FnMut(u32)) {
    let prefix = name.len() + 1;
    let stride = prefix + 20;
    let count = numbers.end.saturating_sub(numbers.start);
    let slots = (count as usize).clamp(1, BATCH);
    let mut buf = vec![0u8; slots * stride];
    for slot in buf.chunks_exact_mut(stride) {
        slot[..name.len()].copy_from_slice(name.as_bytes());
        slot[name.len()] = b'-';
    }
    let mut lens = [0usize; BATCH];
    let mut i = numbers.start;
    while i < numbers.end {
        let n = ((numbers.end - i) as usize).min(slots);
        for (k, len) in lens[..n].iter_mut().enumerate() {
            let slot = &mut buf[k * stride..(k + 1) * stride];
            *len = prefix + write_decimal(&mut slot[prefix..], i + k as u64);
        }
        for (k, &len) in lens[..n].iter().enumerate() {
            f(hash(&buf[k * stride..k * stride + len]));
        }
        i += n as u64;
    }
}

/// "00", "01", … "99": two digits per lookup.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `n` in decimal at the start of `out` (at least 20 bytes) and returns its length. Point
/// numbers are almost always below 1000, which take one branch and at most two stores.
#[inline]
fn write_decimal(out: &mut [u8], n: u64) -> usize {
    let pair = |k: u64| {
        let k = 2 * k as usize;
        [PAIRS[k], PAIRS[k + 1]]
    };
    if n < 10 {
        out[0] = b'0' + n as u8;
        1
    } else if n < 100 {
        out[..2].copy_from_slice(&pair(n));
        2
    } else if n < 1000 {
        out[0] = b'0' + (n / 100) as u8;
        out[1..3].copy_from_slice(&pair(n % 100));
        3
    } else {
        let mut len = 1;
        let mut rest = n / 10;
        while rest > 0 {
            len += 1;
            rest /= 10;
        }
        let mut n = n;
        for d in out[..len].iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        len
    }
}

/// `count` points from MD5 digests of `"{identity}-{i}"`, four little-endian words a digest.
fn md5_quads(identity: &str, count: u64, max_len: Option<usize>, out: &mut Vec<u32>) {
    for i in 0..count.div_ceil(4) {
        let name = format!("{identity}-{i}");
        let bytes = name.as_bytes();
        let bytes = match max_len {
            Some(max) if bytes.len() > max => &bytes[..max],
            _ => bytes,
        };
        let d = md5_digest(bytes);
        let left = (count - i * 4).min(4) as usize;
        for w in d.chunks_exact(4).take(left) {
            out.push(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        }
    }
}

/// twemproxy's hash tag rule: the bytes strictly between the first `tag[0]` and the next `tag[1]` after
/// it, when there is at least one; else the whole key.
pub(crate) fn twemproxy_hash_tag(key: &[u8], tag: [u8; 2]) -> &[u8] {
    if let Some(start) = key.iter().position(|&b| b == tag[0]) {
        if let Some(len) = key[start + 1..].iter().position(|&b| b == tag[1]) {
            if len > 0 {
                return &key[start + 1..start + 1 + len];
            }
        }
    }
    key
}

/// nginx's split of an upstream server name into host and port: `unix:PATH` has no port; otherwise the
/// port is the digits after the last `:` when only digits follow it.
fn nginx_host_port(server: &[u8]) -> (&[u8], &[u8]) {
    if server.len() >= 5 && server[..5].eq_ignore_ascii_case(b"unix:") {
        return (&server[5..], &[]);
    }
    for (j, &c) in server.iter().rev().enumerate() {
        if c == b':' {
            let colon = server.len() - j - 1;
            return (&server[..colon], &server[colon + 1..]);
        }
        if !c.is_ascii_digit() {
            break;
        }
    }
    (server, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tag_shapes() {
        let t = [b'{', b'}'];
        assert_eq!(twemproxy_hash_tag(b"{a}b", t), b"a");
        assert_eq!(twemproxy_hash_tag(b"a{}b", t), b"a{}b");
        assert_eq!(twemproxy_hash_tag(b"}a{", t), b"}a{");
        assert_eq!(twemproxy_hash_tag(b"x{ab}{cd}", t), b"ab");
        assert_eq!(twemproxy_hash_tag(b"{{a}", t), b"{a");
        assert_eq!(twemproxy_hash_tag(b"", t), b"");
        // A tag whose two characters are the same.
        assert_eq!(twemproxy_hash_tag(b"a$bc$d", [b'$', b'$']), b"bc");
    }

    #[test]
    fn nginx_split() {
        assert_eq!(
            nginx_host_port(b"127.0.0.1:8080"),
            (&b"127.0.0.1"[..], &b"8080"[..])
        );
        assert_eq!(
            nginx_host_port(b"example.com"),
            (&b"example.com"[..], &b""[..])
        );
        assert_eq!(nginx_host_port(b"[::1]:80"), (&b"[::1]"[..], &b"80"[..]));
        assert_eq!(nginx_host_port(b"unix:/tmp/s"), (&b"/tmp/s"[..], &b""[..]));
    }

    #[test]
    fn decimal_suffixes_format_like_display() {
        let mut out = [0u8; 20];
        for n in (0..100_000u64).chain([u64::MAX, 10_000_000_000]) {
            let len = write_decimal(&mut out, n);
            assert_eq!(&out[..len], n.to_string().as_bytes());
        }
    }

    #[test]
    fn batches_give_every_point_in_order() {
        // Names whose point names are shorter than 17 bytes, cross 17 bytes (or 128) as the
        // numbers grow a digit, or are longer than 128 bytes: every path of `plain_xxh3`.
        let long = "x".repeat(124);
        let longer = "y".repeat(200);
        let names = [
            "a",
            "cache-7",
            "10.0.0.1:11211",
            "10.0.0.1:112",
            &long,
            &longer,
        ];
        for hash in [HashFunction::Crc32, HashFunction::Xxh3] {
            let input = SchemeInput {
                vnodes: 1,
                hash,
                node_count: 1,
                total_weight: 1.0,
            };
            for name in names {
                let node = Node::new(name).unwrap();
                for count in [0u64, 1, 9, 10, 11, 63, 64, 65, 99, 100, 101, 200, 1001] {
                    let mut got = Vec::new();
                    PointScheme::Plain.positions(&node, count, input, &mut got);
                    let want: Vec<u32> = (0..count)
                        .map(|i| hash.hash32(format!("{name}-{i}").as_bytes()))
                        .collect();
                    assert_eq!(got, want, "{hash:?} {name} {count}");
                }
            }
        }
    }
}
