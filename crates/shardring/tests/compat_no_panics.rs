//! Hostile input never panics: the configuration reader, server lines, and the compatibility builders
//! answer with an error instead.

use proptest::prelude::*;
use shardring::compat::twemproxy::TwemproxyServer;
use shardring::compat::CompatMode;

const VALID: &str = "alpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  hash_tag: \"{}\"\n  distribution: ketama\n  timeout: 400\n  redis: false\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:2 b\n";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn config_reader_never_panics(text in "\\PC{0,200}") {
        let _ = shardring::compat::twemproxy_config::Config::parse(&text);
    }

    #[test]
    fn mutated_configs_never_panic(at in 0usize..VALID.len(), cut in 0usize..20, insert in "[ :\\-\\[\\]{}&*!|>'\"#%@`\\t\\n0-9a-z]{0,8}") {
        let mut text = VALID.to_string();
        let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let end = (at + cut).min(text.len());
        let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        text.replace_range(at..end, &insert);
        if let Ok(config) = shardring::compat::twemproxy_config::Config::parse(&text) {
            for pool in &config.pools {
                if let Ok(p) = pool.placement() {
                    let _ = p.lookup(b"key");
                }
            }
        }
    }

    #[test]
    fn server_lines_never_panic(line in "\\PC{0,60}") {
        if let Ok(s) = line.parse::<TwemproxyServer>() {
            prop_assert!(s.weight >= 1);
            let _ = (s.identity(), s.display_name());
        }
    }

    #[test]
    fn compat_builders_never_panic(mode in 0usize..8, nodes in proptest::collection::vec(("[a-z0-9.:]{0,12}", -2.0f64..5.0), 0..6),
                                   hash in proptest::option::of("[a-z0-9_:]{0,10}"), key in proptest::collection::vec(any::<u8>(), 0..40)) {
        let list: Vec<(&str, f64)> = nodes.iter().map(|(n, w)| (n.as_str(), w.round())).collect();
        if let Ok(ring) = CompatMode::ALL[mode].build(&list, hash.as_deref()) {
            let _ = ring.lookup(&key);
            let _ = ring.replicas(&key).count();
        }
    }
}
