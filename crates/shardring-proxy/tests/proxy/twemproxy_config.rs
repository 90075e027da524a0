//! The twemproxy YAML reader against nutcracker itself: the files `nutcracker --test-conf` accepts and
//! refuses (testdata/twemproxy-config), the placements of the goldens' configs (testdata/twemproxy),
//! and hostile input that must never panic.

use proptest::prelude::*;
use shardring_proxy::config::{read_pools, ConfigErrors};
use test_support::golden;

const VALID: &str = "alpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  hash_tag: \"{}\"\n  distribution: ketama\n  timeout: 400\n  redis: false\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:2 b\n";

#[test]
fn placements_from_the_config_reader_match_nutcracker() {
    let mut total = 0;
    for path in golden::files("twemproxy") {
        let g = golden::read(&path);
        let yml = std::fs::read_to_string(path.with_extension("yml")).unwrap();
        let pools = read_pools(&yml).unwrap();
        let mut p = pools[0].placement().unwrap();
        if let Some(ejected) = g.header.get("ejected") {
            p.remove(ejected).unwrap();
        }
        total += golden::check(&g, |k| p.lookup(k).unwrap().name().to_string());
    }
    assert!(total > 15_000);
}

/// testdata/twemproxy-config: the reader accepts exactly the files `nutcracker --test-conf` accepts
/// (scripts/regen-golden/twemproxy_config.py), and every refusal names at least one line.
#[test]
fn config_reader_agrees_with_nutcracker_test_conf() {
    let dir = golden::testdata("twemproxy-config");
    let verdicts = std::fs::read_to_string(dir.join("verdicts.tsv")).unwrap();
    let mut cases = 0;
    for line in verdicts.lines().filter(|l| !l.starts_with('#')) {
        let (case, verdict) = line.split_once('\t').unwrap();
        let text = std::fs::read_to_string(dir.join(format!("{case}.yml"))).unwrap();
        let ours = read_pools(&text);
        match (verdict, &ours) {
            ("ok", Ok(_)) => {}
            ("invalid", Err(ConfigErrors { problems })) => {
                assert!(!problems.is_empty(), "{case}");
                if !text.is_empty() {
                    assert!(problems.iter().any(|p| p.line > 0), "{case}: {problems:?}");
                }
            }
            _ => panic!("{case}: nutcracker says {verdict}, the reader says {ours:?}"),
        }
        cases += 1;
    }
    assert!(cases >= 40, "{cases}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn config_reader_never_panics(text in "\\PC{0,200}") {
        let _ = read_pools(&text);
    }

    #[test]
    fn mutated_configs_never_panic(at in 0usize..VALID.len(), cut in 0usize..20, insert in "[ :\\-\\[\\]{}&*!|>'\"#%@`\\t\\n0-9a-z]{0,8}") {
        let mut text = VALID.to_string();
        let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let end = (at + cut).min(text.len());
        let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        text.replace_range(at..end, &insert);
        if let Ok(config) = read_pools(&text) {
            for pool in &config {
                if let Ok(p) = pool.placement() {
                    let _ = p.lookup(b"key");
                }
            }
        }
    }
}
