//! `shardring migrate`'s own parser on arbitrary bytes: a `lru_crawler metadump` line (URL-encoded keys
//! included). No panic. (Its Redis replies are read by `shardring-resp`, fuzzed by `redis_reply`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_migrate::memcache::metadump::{parse_line, url_decode};

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n') {
        let _ = parse_line(line);
        let _ = url_decode(line);
    }
});
