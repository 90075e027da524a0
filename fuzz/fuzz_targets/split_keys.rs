//! The split keys' file reader (`--hot-key-split-keys`) on arbitrary text: it must never panic, and
//! every file it accepts must read back as the same keys from the text it writes (what `shardring
//! split` rewrites the file with), with the same digest.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_proxy::config::SplitConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(split) = SplitConfig::parse(3, text) else {
        return;
    };
    let again = SplitConfig::parse(3, &split.text()).expect("the written text reads back");
    assert_eq!(again, split);
    assert_eq!(again.digest(), split.digest());
});
