//! `shardring migrate`'s own parsers on arbitrary bytes: a `lru_crawler metadump` line (URL-encoded
//! keys included) and a RESP2 reply. No panic; a reply parsed from a prefix is the one parsed from the
//! whole, and any shorter prefix of it is incomplete.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_migrate::memcache::metadump::{parse_line, url_decode};
use shardring_migrate::redis::resp::parse;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n') {
        let _ = parse_line(line);
        let _ = url_decode(line);
    }
    if let Ok(Some((reply, used))) = parse(data) {
        assert!(used > 0 && used <= data.len());
        // Any shorter prefix is a reply still coming, never another reply or an error.
        for cut in [0, used / 2, used - 1] {
            assert!(matches!(parse(&data[..cut]), Ok(None)), "prefix {cut} of {used}");
        }
        assert_eq!(parse(&data[..used]).ok().flatten(), Some((reply, used)));
    }
});
