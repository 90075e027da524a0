//! The twemproxy YAML reader on arbitrary text: it must never panic, and every pool it accepts must
//! build a placement (or refuse with an error) and answer lookups.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_proxy::config::read_pools;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(pools) = read_pools(text) else {
        return;
    };
    for pool in &pools {
        if let Ok(placement) = pool.placement() {
            let _ = placement.lookup(b"fuzz-key");
            let _ = placement.lookup(b"");
        }
    }
});
