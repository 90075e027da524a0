//! Placements that reproduce other programs: `--config nutcracker.yml`, `--compat MODE`, and
//! `--compat template` with the flags that describe an article-style ring.

use std::path::Path;

use anyhow::{bail, Context, Result};
use shardring::compat::CompatMode;
use shardring::ring::{TemplateDigest, TemplateRingBuilder, TieRule};
use shardring::{HashFunction, Node, Placement, Ring};
use shardring_config::{ConfigErrors, ProxyConfig};

/// The `--compat` flags of `shardring lookup`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CompatArgs {
    /// Reproduce another program's ring byte for byte: twemproxy, libmemcached,
    /// libmemcached-weighted, libmemcached-spy, libmemcached-spy-weighted, libketama, uhashring, nginx,
    /// spymemcached, spymemcached-weighted, groupcache; or `template` (see --template). --hash then
    /// takes that program's hash names (twemproxy: one_at_a_time, md5, crc16, crc32, crc32a, fnv1_64,
    /// fnv1a_64, fnv1_32, fnv1a_32, hsieh, murmur, jenkins; libmemcached: default, md5, crc, fnv1_64,
    /// fnv1a_64, fnv1_32, fnv1a_32, murmur, jenkins, murmur3; spymemcached: KETAMA_HASH, NATIVE_HASH,
    /// FNV1_32_HASH, FNV1A_32_HASH, FNV1_64_HASH, FNV1A_64_HASH, CRC_HASH) and defaults to the
    /// program's own. spymemcached nodes are the text Java prints for each InetSocketAddress
    /// (`/10.0.0.1:11211`, `cache1/10.0.0.1:11211`; the leading `/` may be left out); a weight other
    /// than 1 means a weights map (spymemcached-weighted: one even for equal weights). --vnodes sets
    /// groupcache's replicas (50 by default) and spymemcached's node repetitions (160).
    #[arg(long, value_name = "MODE", conflicts_with = "algo")]
    pub compat: Option<String>,
    /// With --compat template: the point-name template, with `{name}` (the node) and `{i}` (the point
    /// or digest number from 0); `{{`/`}}` are literal braces. E.g. `{name}&&{i}` (the Java
    /// ketama of articles: add --digest md5x4le --vnodes 160), `{name}-{i}`, `{i}{name}`.
    #[arg(long, value_name = "TEMPLATE", requires = "compat")]
    pub template: Option<String>,
    /// With --compat template: how a point name becomes positions: md5x4le (four little-endian
    /// words of its MD5, the default), md5x4be, or a hash name (xxh3, crc32, fnv1a-32, ...: one point
    /// per name). Keys use --hash: md5 by default after an MD5 split, else this hash.
    #[arg(long, value_name = "DIGEST", requires = "template")]
    pub digest: Option<String>,
    /// With --compat template: which node keeps a point two nodes share: last (added later, what
    /// Java's TreeMap.put and Go's map do; the default) or first.
    #[arg(long, value_name = "RULE", requires = "template")]
    pub ties: Option<String>,
    /// With --compat template: where a key whose hash is past the last point goes: first-point (the
    /// owner of the first point, round the circle: Dubbo's ConsistentHashLoadBalance, `firstEntry()`;
    /// the default) or first-listed (the first node of --nodes, whatever its points: the rings whose
    /// `selectNode` falls back to `nodes[0]` / `nodes.getFirst()` when `ceilingEntry` finds nothing,
    /// as the background's Java ring does).
    #[arg(long, value_name = "RULE", requires = "template")]
    pub past_last: Option<String>,
}

/// `--past-last`: who owns the arc past a ring's last point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PastLast {
    /// The first point's owner (the circle closes).
    FirstPoint,
    /// The first node of the input list.
    FirstListed,
}

impl PastLast {
    fn parse(text: &str) -> Result<PastLast> {
        match text.trim().to_ascii_lowercase().as_str() {
            "first-point" => Ok(PastLast::FirstPoint),
            "first-listed" => Ok(PastLast::FirstListed),
            _ => bail!("--past-last {text:?}: expected first-point or first-listed"),
        }
    }
}

/// A ring whose keys past the last point go to the first-listed node instead of round the circle
/// (`--past-last first-listed`). Every other key is the ring's.
#[derive(Debug, Clone)]
struct FirstListed {
    ring: Ring,
    /// The node names in list order (the first one present is the first-listed).
    order: Vec<String>,
    /// The first-listed node's index in the ring's nodes.
    first: usize,
    /// The ring's last point: keys at positions above it are past it.
    last_point: u32,
}

impl FirstListed {
    fn new(ring: Ring, order: Vec<String>) -> FirstListed {
        let mut placed = FirstListed {
            ring,
            order,
            first: 0,
            last_point: u32::MAX,
        };
        placed.refresh();
        placed
    }

    /// After a change: where the first-listed node is now, and the last point.
    fn refresh(&mut self) {
        let nodes = self.ring.nodes();
        self.first = self
            .order
            .iter()
            .find_map(|name| nodes.iter().position(|n| n.name() == name))
            .unwrap_or(0);
        self.last_point = self.ring.points().map(|(p, _)| p).max().unwrap_or(u32::MAX);
    }

    fn past_last(&self, key: &[u8]) -> bool {
        !self.ring.is_empty() && self.ring.key_position(key) > self.last_point
    }
}

impl Placement for FirstListed {
    fn algorithm(&self) -> &'static str {
        "ring"
    }

    fn nodes(&self) -> &[Node] {
        self.ring.nodes()
    }

    fn locate(&self, key: &[u8]) -> Option<usize> {
        if self.past_last(key) {
            Some(self.first)
        } else {
            self.ring.lookup_index(key)
        }
    }

    fn replicas_into(&self, key: &[u8], count: usize, out: &mut Vec<usize>) {
        self.ring.replicas_into(key, count, out);
        if self.past_last(key) && out.first() != Some(&self.first) {
            out.retain(|&i| i != self.first);
            out.insert(0, self.first);
            out.truncate(count);
        }
    }

    fn add(&mut self, node: Node) -> Result<(), shardring::Error> {
        let name = node.name().to_owned();
        self.ring.add_node(node)?;
        self.order.push(name);
        self.refresh();
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<Node, shardring::Error> {
        let node = self.ring.remove(name)?;
        self.order.retain(|n| n != name);
        self.refresh();
        Ok(node)
    }

    fn memory_bytes(&self) -> usize {
        self.ring.memory_bytes()
    }

    fn clone_box(&self) -> Box<dyn Placement> {
        Box::new(self.clone())
    }
}

/// The placement of one pool of a twemproxy configuration file.
///
/// A file with problems is an error listing every one of them (with its line), so the user fixes the
/// file in one go.
pub fn from_config(path: &Path, pool: Option<&str>) -> Result<Box<dyn Placement>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // The reader alone (not the proxy's own checks): a redis pool is placed like any other.
    let config = ProxyConfig {
        pools: shardring_config::read_pools(&text).map_err(|e| config_problems(path, &e))?,
    };
    let pool = config.pool(pool).map_err(|e| config_problems(path, &e))?;
    pool.placement()
        .with_context(|| format!("{}: pool {}", path.display(), pool.name))
}

/// Reads and checks a twemproxy configuration file as the proxy runs it (an unreadable file is a
/// problem like any other).
pub fn load_config(path: &Path) -> Result<ProxyConfig, ConfigErrors> {
    ProxyConfig::from_yaml(&read_config(path)?)
}

/// The text of the configuration file at `path`, or why it cannot be read (as a config problem).
pub fn read_config(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        let mut errors = ConfigErrors::default();
        errors.push("", format!("cannot read {}: {e}", path.display()));
        errors
    })
}

/// A configuration file's problems, every one on its own line (with its line in the file).
pub fn config_problems(path: &Path, e: &ConfigErrors) -> anyhow::Error {
    anyhow::anyhow!(
        "configuration file {} has {} problem{}:\n  {}",
        path.display(),
        e.problems.len(),
        if e.problems.len() == 1 { "" } else { "s" },
        e.problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  ")
    )
}

/// The ring of `nodes` as `args` describe it: a program's (`--compat MODE`, with its key hash `hash`
/// named as the program names it, or its default, and its points-per-node setting `vnodes` where it
/// has one) or a template ring.
pub fn from_args(
    args: &CompatArgs,
    nodes: &[Node],
    hash: Option<&str>,
    vnodes: Option<u32>,
) -> Result<Box<dyn Placement>> {
    let rule = args.past_last.as_deref().map(PastLast::parse).transpose()?;
    let ring = ring_from_args(
        &CompatArgs {
            past_last: None,
            ..args.clone()
        },
        nodes,
        hash,
        vnodes,
    )?;
    match rule {
        Some(PastLast::FirstListed) => Ok(Box::new(FirstListed::new(
            ring,
            nodes.iter().map(|n| n.name().to_owned()).collect(),
        ))),
        _ => Ok(Box::new(ring)),
    }
}

/// As [`from_args`], as the ring itself.
pub fn ring_from_args(
    args: &CompatArgs,
    nodes: &[Node],
    hash: Option<&str>,
    vnodes: Option<u32>,
) -> Result<Ring> {
    let mode = args.compat.as_deref().unwrap_or_default();
    if mode.trim().eq_ignore_ascii_case("template") {
        return template_ring(args, nodes, hash, vnodes).context("--compat template");
    }
    if args.template.is_some() {
        bail!("--template describes a ring of --compat template, not of --compat {mode}");
    }
    if args.past_last.is_some() {
        bail!("--past-last is a rule of shardring lookup's --compat template rings");
    }
    let mode: CompatMode = mode.parse()?;
    if mode.to_string().starts_with("spymemcached") {
        warn_unresolved_hosts(nodes);
    }
    let list: Vec<(&str, f64)> = nodes.iter().map(|n| (n.name(), n.weight())).collect();
    mode.build_with_vnodes(&list, hash, vnodes)
        .with_context(|| format!("--compat {mode}"))
}

/// As [`ring_from_args`] for a bare `--compat MODE` with the program's default points (for
/// `shardring ring`).
pub fn ring_from_nodes(mode: &str, nodes: &[Node], hash: Option<&str>) -> Result<Ring> {
    let args = CompatArgs {
        compat: Some(mode.to_string()),
        ..CompatArgs::default()
    };
    ring_from_args(&args, nodes, hash, None)
}

/// spymemcached places a node by the text Java prints for its `InetSocketAddress`, which for a host
/// name depends on the JDK and on whether the name was resolved; a node written `cache-a:11211` is
/// placed as JDKs before 14 print an unresolved address. Each such node is named on stderr with the
/// forms to use instead.
fn warn_unresolved_hosts(nodes: &[Node]) {
    for node in nodes {
        let text = node.name();
        if text.contains('/') {
            continue;
        }
        let host = text.rsplit_once(':').map_or(text, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.parse::<std::net::IpAddr>().is_ok() {
            continue;
        }
        let port = text.rsplit_once(':').map_or("11211", |(_, p)| p);
        eprintln!(
            "shardring: spymemcached node {text:?} has a host name and no '/': it is placed as JDKs \
             before 14 print an unresolved address ({text}); JDK 14 and later print \
             {host}/<unresolved>:{port}, and {host}/10.0.0.1:{port} once resolved: give the node as \
             your clients' JVM prints it"
        );
    }
}

fn template_ring(
    args: &CompatArgs,
    nodes: &[Node],
    hash: Option<&str>,
    vnodes: Option<u32>,
) -> Result<Ring> {
    let Some(template) = &args.template else {
        bail!("needs --template (a flag of shardring lookup), e.g. --template '{{name}}&&{{i}}' --digest md5x4le");
    };
    let mut b = TemplateRingBuilder::new(template.as_str());
    if let Some(d) = &args.digest {
        b = b.digest(d.parse::<TemplateDigest>()?);
    }
    if let Some(t) = &args.ties {
        b = b.ties(t.parse::<TieRule>()?);
    }
    if let Some(h) = hash {
        b = b.hash(h.parse::<HashFunction>()?);
    }
    if let Some(v) = vnodes {
        b = b.vnodes(v);
    }
    Ok(nodes
        .iter()
        .fold(b, |b, n| b.node(n.name(), n.weight()))
        .build()?)
}
