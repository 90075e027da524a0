//! The reply framer and the VALUE block walker on arbitrary bytes: no panic, lengths within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_proxy::protocol::memcache::{parse_response, ResponseKind, ValueBlocks};

fuzz_target!(|data: &[u8]| {
    for kind in [ResponseKind::Line, ResponseKind::Values, ResponseKind::Meta] {
        if let Ok(Some(len)) = parse_response(data, kind, 1024) {
            assert!(len <= data.len());
            for (key, block) in ValueBlocks::new(&data[..len]) {
                assert!(!key.is_empty() && block.len() <= len);
            }
        }
    }
});
