//! Hostile input never panics: server lines and the compatibility builders answer with an error
//! instead (the configuration reader's own test is in the proxy crate).

use proptest::prelude::*;
use shardring::compat::twemproxy::TwemproxyServer;
use shardring::compat::CompatMode;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

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
