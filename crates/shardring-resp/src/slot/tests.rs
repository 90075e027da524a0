//! The slot function against the specification's vectors, `cluster.c`'s hash-tag edge cases, a
//! bit-by-bit CRC16 and a naive hash-tag oracle, and the slots a real cluster node gave (the golden
//! file).

use proptest::prelude::*;

use super::*;

/// CRC-16/XMODEM one bit at a time, straight from the definition: the oracle of the table.
fn crc16_bitwise(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// `keyHashSlot` of `cluster.c` transcribed with indices, as the C reads: the oracle of the slot.
fn key_slot_naive(key: &[u8]) -> u16 {
    let len = key.len();
    let mut s = 0;
    while s < len && key[s] != b'{' {
        s += 1;
    }
    if s == len {
        return crc16_bitwise(key) & 0x3FFF;
    }
    let mut e = s + 1;
    while e < len && key[e] != b'}' {
        e += 1;
    }
    if e == len || e == s + 1 {
        return crc16_bitwise(key) & 0x3FFF;
    }
    crc16_bitwise(&key[s + 1..e]) & 0x3FFF
}

#[test]
fn the_check_value_of_the_specification_is_0x31c3() {
    assert_eq!(crc16(b"123456789"), 0x31C3);
    assert_eq!(crc16_bitwise(b"123456789"), 0x31C3);
    assert_eq!(key_slot(b"123456789"), 0x31C3 & 0x3FFF);
}

#[test]
fn the_empty_input_has_checksum_and_slot_zero() {
    assert_eq!(crc16(b""), 0);
    assert_eq!(key_slot(b""), 0);
}

#[test]
fn the_table_is_the_bitwise_checksum_of_each_byte() {
    for b in 0..=255u8 {
        assert_eq!(crc16(&[b]), crc16_bitwise(&[b]), "byte {b}");
    }
}

#[test]
fn hash_tags_follow_cluster_c() {
    // (key, the bytes hashed)
    let cases: &[(&[u8], &[u8])] = &[
        // The specification's examples.
        (b"{user1000}.following", b"user1000"),
        (b"{user1000}.followers", b"user1000"),
        (b"foo{}{bar}", b"foo{}{bar}"), // the first tag is empty: the whole key
        (b"foo{{bar}}zap", b"{bar"),    // from the first `{` to the first `}` after it
        (b"foo{bar}{zap}", b"bar"),     // only the first tag counts
        // Edge shapes.
        (b"", b""),
        (b"{", b"{"),
        (b"}", b"}"),
        (b"{}", b"{}"),
        (b"}{", b"}{"),
        (b"}a{b}", b"b"), // a `}` before the first `{` is not a closer
        (b"{a", b"{a"),
        (b"a}", b"a}"),
        (b"{{}}", b"{"),
        (b"{}}", b"{}}"),
        (b"x{\x00}y", b"\x00"),
        (b"{\xff\xfe}", b"\xff\xfe"),
    ];
    for &(key, hashed) in cases {
        assert_eq!(hash_tag(key), hashed, "{:?}", String::from_utf8_lossy(key));
        assert_eq!(key_slot(key), crc16(hashed) & 0x3FFF);
        assert_eq!(key_slot(key), key_slot_naive(key));
    }
    assert_eq!(
        key_slot(b"{user1000}.following"),
        key_slot(b"{user1000}.followers")
    );
    assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
}

/// `testdata/cluster-keyslot/keyslots.tsv`: `HEXKEY<TAB>slot` from `CLUSTER KEYSLOT` of a real
/// redis-server (see the README beside it).
#[test]
fn every_key_is_in_the_slot_a_real_cluster_node_gives() {
    let text = include_str!("../../../../testdata/cluster-keyslot/keyslots.tsv");
    let mut checked = 0;
    let mut bad = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (hex, slot) = line.split_once('\t').expect("HEXKEY<TAB>slot");
        let key: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let want: u16 = slot.parse().expect("a slot");
        if key_slot(&key) != want {
            bad.push(format!("{hex} want {want} got {}", key_slot(&key)));
        }
        checked += 1;
    }
    assert!(
        bad.is_empty(),
        "{} of {checked} differ: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    assert!(checked >= 2000, "only {checked} keys in the golden file");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The table-driven checksum is the bitwise one, for any bytes.
    #[test]
    fn the_table_checksum_is_the_bitwise_one(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(crc16(&bytes), crc16_bitwise(&bytes));
    }

    /// Any key, braces likely, gets `cluster.c`'s slot, always below 16384.
    #[test]
    fn any_key_gets_the_slot_of_cluster_c(
        key in proptest::collection::vec(
            prop_oneof![Just(b'{'), Just(b'}'), Just(b'a'), any::<u8>()],
            0..40,
        )
    ) {
        let slot = key_slot(&key);
        prop_assert!(slot < SLOT_COUNT);
        prop_assert_eq!(slot, key_slot_naive(&key));
    }

    /// Keys that share a non-empty tag share a slot, whatever surrounds the tag.
    #[test]
    fn a_shared_tag_means_a_shared_slot(
        tag in proptest::collection::vec(any::<u8>().prop_filter("no }", |b| *b != b'}'), 1..16),
        pre in proptest::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 0..8),
        post in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let key = [&pre[..], b"{", &tag[..], b"}", &post[..]].concat();
        prop_assert_eq!(key_slot(&key), key_slot(&tag));
    }
}
