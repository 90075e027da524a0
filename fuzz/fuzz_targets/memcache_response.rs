//! The reply framer and the VALUE block walker on arbitrary bytes: no panic, lengths within the input,
//! and a scan resumed across growing prefixes (as a server connection reads) agrees with a whole scan.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_proxy::protocol::memcache::{
    parse_response, parse_response_from, ResponseKind, ValueBlocks,
};

fuzz_target!(|data: &[u8]| {
    for kind in [
        ResponseKind::Line,
        ResponseKind::Values,
        ResponseKind::Meta,
        ResponseKind::Stats,
    ] {
        let whole = parse_response(data, kind, 1024);
        if let Ok(Some(len)) = whole {
            assert!(len <= data.len());
            for (key, block) in ValueBlocks::new(&data[..len]) {
                assert!(!key.is_empty() && block.len() <= len);
            }
        }
        let mut resume = 0;
        let step = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
        let mut cut = 0;
        loop {
            cut = (cut + step).min(data.len());
            let resumed = parse_response_from(&data[..cut], kind, 1024, &mut resume);
            assert!(resume <= cut);
            if resumed != Ok(None) || cut == data.len() {
                // The resumed scan of this prefix agrees with a scan from the start.
                assert_eq!(resumed, parse_response(&data[..cut], kind, 1024));
                break;
            }
        }
    }
});
