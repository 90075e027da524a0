//! Template rings: the background's article-style Java ketama (testdata/template, made by
//! scripts/regen-golden/template.py running `ConsistentHashLoadBalance.java`) for every key, and every
//! template shape against a naive `BTreeMap` model of such code.

use test_support::golden;

use std::collections::BTreeMap;

use proptest::prelude::*;
use shardring::hash::{md5_digest, md5_u32, KeyHash};
use shardring::ring::{PointTemplate, TemplateDigest, TemplateRingBuilder, TieRule};
use shardring::{HashFunction, Ring};

fn article_ring(g: &golden::Golden) -> Ring {
    let vnodes: u32 = g.header["vnodes"].parse().unwrap();
    g.header["nodes"]
        .split(' ')
        .filter(|n| *n != g.header["removed"])
        .fold(
            TemplateRingBuilder::new("{name}&&{i}")
                .digest(TemplateDigest::Md5x4Le)
                .vnodes(vnodes),
            |b, n| b.node(n, 1.0),
        )
        .build()
        .unwrap()
}

/// The constructor and `select` of the article code, with removals (`removeNode` is right when no
/// two nodes share a point, as in these configurations), and past the last point the first.
#[test]
fn template_ring_matches_the_article_java_ketama() {
    let mut total = 0;
    for path in golden::files("template") {
        let g = golden::read(&path);
        if !g.header["added"].is_empty() {
            continue;
        }
        let ring = article_ring(&g);
        total += golden::check(&g, |k| ring.lookup(k).unwrap().name().to_string());
    }
    assert!(total > 4000, "{total}");
}

/// `addNode`'s bug, modelled: the added node's points are MD5("<node>&&0")'s four words, put last
/// (so it wins ties). The template ring of the constructor plus those four points is what Java does.
#[test]
fn add_node_bug_gives_the_added_node_four_points() {
    let g = golden::read(&golden::testdata("template").join("md5x4le-160-5-added-bug.tsv"));
    let base = article_ring(&g);
    let added = g.header["added"].as_str();
    let mut points: BTreeMap<u32, String> = base
        .points()
        .map(|(p, n)| (p, n.name().to_string()))
        .collect();
    let d = md5_digest(format!("{added}&&0").as_bytes());
    for w in d.chunks_exact(4) {
        points.insert(
            u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
            added.to_string(),
        );
    }
    assert_eq!(points.len(), 5 * 160 + 4);
    golden::check(&g, |k| {
        let h = md5_u32(k);
        let (_, n) = points.range(h..).next().or(points.iter().next()).unwrap();
        n.clone()
    });
    // A correct addNode would have given it 160 points and about a sixth of the keys.
    let fixed = article_ring(&g);
    let mut fixed = fixed;
    fixed.add(added, 1.0).unwrap();
    let would = g
        .rows
        .iter()
        .filter(|(k, _)| fixed.lookup(k).unwrap().name() == added)
        .count();
    let did = g.rows.iter().filter(|(_, n)| n == added).count();
    assert!(would > 5 * did.max(1), "would {would}, did {did}");
}

/// The article code as a model: a sorted map from position to node, filled node by node (`put` that
/// overwrites, or keeps the first), looked up with ceiling-or-first.
fn model(
    template: &str,
    digest: TemplateDigest,
    key_hash: HashFunction,
    ties: TieRule,
    vnodes: u32,
    nodes: &[String],
    keys: &[Vec<u8>],
) -> Vec<String> {
    let t = PointTemplate::parse(template).unwrap();
    let mut map: BTreeMap<u32, String> = BTreeMap::new();
    for node in nodes {
        let mut put = |p: u32| {
            if ties == TieRule::LastAdded || !map.contains_key(&p) {
                map.insert(p, node.clone());
            }
        };
        match digest {
            TemplateDigest::Md5x4Le | TemplateDigest::Md5x4Be => {
                for i in 0..(vnodes / 4).max(1) {
                    let d = md5_digest(t.render(node, u64::from(i)).as_bytes());
                    for w in d.chunks_exact(4) {
                        let w = [w[0], w[1], w[2], w[3]];
                        put(if digest == TemplateDigest::Md5x4Le {
                            u32::from_le_bytes(w)
                        } else {
                            u32::from_be_bytes(w)
                        });
                    }
                }
            }
            TemplateDigest::Hash(h) => {
                for i in 0..vnodes {
                    put(h.hash32(t.render(node, u64::from(i)).as_bytes()));
                }
            }
            _ => unreachable!(),
        }
    }
    keys.iter()
        .map(|k| {
            let h = key_hash.hash32(k);
            map.range(h..)
                .next()
                .or(map.iter().next())
                .unwrap()
                .1
                .clone()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any template, digest and tie rule gives what the naive sorted-map code gives, for every key;
    /// the 15-bit `crc32` digest makes ties common.
    #[test]
    fn template_rings_equal_the_sorted_map_model(
        template in prop::sample::select(vec!["{name}&&{i}", "{name}-{i}", "{i}{name}",
                                              "SHARD-{i}-NODE-{name}", "{name}#{i}{name}"]),
        digest in prop::sample::select(vec![TemplateDigest::Md5x4Le, TemplateDigest::Md5x4Be,
                                            TemplateDigest::Hash(HashFunction::Crc32),
                                            TemplateDigest::Hash(HashFunction::Fnv1a32),
                                            TemplateDigest::Hash(HashFunction::Twemproxy(
                                                shardring::hash::TwemproxyHash::Crc16))]),
        ties in prop::sample::select(vec![TieRule::LastAdded, TieRule::FirstAdded]),
        vnodes in 1u32..200,
        count in 1usize..12,
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 1..200),
    ) {
        let nodes: Vec<String> = (0..count).map(|i| format!("node-{i}")).collect();
        let key_hash = digest.default_key_hash();
        let ring = nodes
            .iter()
            .fold(
                TemplateRingBuilder::new(template).digest(digest).ties(ties).vnodes(vnodes),
                |b, n| b.node(n.clone(), 1.0),
            )
            .build()
            .unwrap();
        let want = model(template, digest, key_hash, ties, vnodes, &nodes, &keys);
        for (k, w) in keys.iter().zip(&want) {
            prop_assert_eq!(ring.lookup(k).unwrap().name(), w.as_str());
        }
    }
}

proptest! {
    /// Any template text, digest name, tie rule name and node names give a ring or an error, never a
    /// panic; a ring built finds every key.
    #[test]
    fn any_template_input_builds_or_errs(
        template in "[{}a-z&#-]{0,12}|\\{name\\}.{0,6}\\{i\\}.{0,4}|.{0,70}",
        digest in "md5x4le|md5x4be|crc32|fnv1a-32|xxh3|twemproxy:crc16|[a-z0-9]{0,6}",
        ties in "last|first|[a-z]{0,5}",
        names in prop::collection::vec(".{0,10}", 0..6),
        vnodes in 0u32..300,
        key in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let (Ok(d), Ok(t)) = (digest.parse::<TemplateDigest>(), ties.parse::<TieRule>()) else {
            return Ok(());
        };
        let built = names
            .iter()
            .fold(
                TemplateRingBuilder::new(template.clone()).digest(d).ties(t).vnodes(vnodes),
                |b, n| b.node(n.clone(), 1.0),
            )
            .build();
        if let Ok(ring) = built {
            prop_assert!(PointTemplate::parse(&template).is_ok());
            prop_assert_eq!(ring.lookup(&key).is_some(), !names.is_empty());
        }
    }
}
