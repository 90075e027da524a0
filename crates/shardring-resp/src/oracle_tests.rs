//! Differential tests against `redis-protocol`, a maintained RESP2/RESP3 codec: what it encodes, the
//! framer frames whole and the reader reads back to the same value, and on any bytes both accept, they
//! agree on the length.
//!
//! Where they may differ, by design: the oracle does not check the `\r\n` after bulk data (it takes any
//! two bytes), and reads numbers with Rust's `parse` (`+5`, `007`), both of which Redis never sends and
//! which we refuse; it does not frame streamed aggregates whole; and it checks meaning we leave to the
//! client (doubles, verbatim formats, UTF-8 errors, what may be a map key). So the comparison on arbitrary
//! bytes is one way: whatever we frame, the RESP3 or the RESP2 oracle frames with the same length.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use redis_protocol::resp2::types::{OwnedFrame as Resp2, Resp2Frame as _};
use redis_protocol::resp3::types::{OwnedFrame as Resp3, Resp3Frame as _, VerbatimStringFormat};

use super::*;

fn encode2(frame: &Resp2) -> Vec<u8> {
    let mut buf = vec![0u8; frame.encode_len(false)];
    let n = redis_protocol::resp2::encode::encode(&mut buf, frame, false).expect("encodes");
    buf.truncate(n);
    buf
}

fn encode3(frame: &Resp3) -> Vec<u8> {
    let mut buf = vec![0u8; frame.encode_len(false)];
    let n =
        redis_protocol::resp3::encode::complete::encode(&mut buf, frame, false).expect("encodes");
    buf.truncate(n);
    buf
}

fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no line end", |c| *c != b'\r' && *c != b'\n'),
        0..12,
    )
}

fn blob() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..24)
}

fn resp2_frame() -> impl Strategy<Value = Resp2> {
    let leaf = prop_oneof![
        line_bytes().prop_map(Resp2::SimpleString),
        line_bytes()
            .prop_map(|b| Resp2::Error(String::from_utf8_lossy(&b).replace(['\r', '\n'], ""))),
        any::<i64>().prop_map(Resp2::Integer),
        blob().prop_map(Resp2::BulkString),
        Just(Resp2::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Resp2::Array)
    })
}

fn resp3_frame() -> impl Strategy<Value = Resp3> {
    let leaf = prop_oneof![
        blob().prop_map(|data| Resp3::BlobString {
            data,
            attributes: None
        }),
        blob().prop_map(|data| Resp3::BlobError {
            data,
            attributes: None
        }),
        line_bytes().prop_map(|data| Resp3::SimpleString {
            data,
            attributes: None
        }),
        line_bytes().prop_map(|b| Resp3::SimpleError {
            data: String::from_utf8_lossy(&b).replace(['\r', '\n'], ""),
            attributes: None
        }),
        any::<bool>().prop_map(|data| Resp3::Boolean {
            data,
            attributes: None
        }),
        Just(Resp3::Null),
        any::<i64>().prop_map(|data| Resp3::Number {
            data,
            attributes: None
        }),
        (-1e12f64..1e12).prop_map(|data| Resp3::Double {
            data,
            attributes: None
        }),
        "-?[1-9][0-9]{0,40}".prop_map(|s| Resp3::BigNumber {
            data: s.into_bytes(),
            attributes: None
        }),
        (blob(), any::<bool>()).prop_map(|(data, md)| Resp3::VerbatimString {
            data,
            format: if md {
                VerbatimStringFormat::Markdown
            } else {
                VerbatimStringFormat::Text
            },
            attributes: None
        }),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(|data| Resp3::Array {
                data,
                attributes: None
            }),
            proptest::collection::vec(inner.clone(), 0..5).prop_map(|data| Resp3::Push {
                data,
                attributes: None
            }),
            // Distinct keys and members: blob strings numbered, so the hashed collections keep them all.
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|values| Resp3::Map {
                data: values
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (
                        Resp3::BlobString {
                            data: format!("k{i}").into_bytes(),
                            attributes: None
                        },
                        v
                    ))
                    .collect::<HashMap<_, _>>(),
                attributes: None
            }),
            (0usize..4).prop_map(|n| Resp3::Set {
                data: (0..n)
                    .map(|i| Resp3::Number {
                        data: i as i64,
                        attributes: None
                    })
                    .collect::<HashSet<_>>(),
                attributes: None
            }),
            // A value with an attribute before it (`|1 … value`).
            (inner.clone(), inner).prop_map(|(value, attr)| Resp3::Array {
                data: vec![value],
                attributes: Some(
                    [(
                        Resp3::SimpleString {
                            data: b"meta".to_vec(),
                            attributes: None
                        },
                        attr
                    )]
                    .into_iter()
                    .collect()
                )
            }),
        ]
    })
}

fn our_reply_len(input: &[u8]) -> Result<Option<usize>, ReplyError> {
    reply_len(input, ReplyLimits::default())
}

fn our_value(input: &[u8]) -> Result<Option<(Value, usize)>, ReplyError> {
    Value::read(input, ReplyLimits::default())
}

/// The value a RESP2 frame is read into.
fn resp2_value(frame: &Resp2) -> Value {
    match frame {
        Resp2::SimpleString(s) => Value::Simple(s.clone()),
        Resp2::Error(e) => Value::Error(e.clone()),
        Resp2::Integer(n) => Value::Integer(*n),
        Resp2::BulkString(b) => Value::Bulk(b.clone()),
        Resp2::Array(values) => Value::Array(values.iter().map(resp2_value).collect()),
        Resp2::Null => Value::Null,
    }
}

/// The value a RESP3 frame is read into. Its maps, sets and attributes are walked in the order they
/// were encoded in (the same hashed collections, iterated again).
fn resp3_value(frame: &Resp3) -> Value {
    let pairs = |map: &redis_protocol::resp3::types::FrameMap<Resp3, Resp3>| {
        map.iter()
            .map(|(k, v)| (resp3_value(k), resp3_value(v)))
            .collect()
    };
    let value = match frame {
        Resp3::BlobString { data, .. } => Value::Bulk(data.clone()),
        Resp3::BlobError { data, .. } => Value::Error(String::from_utf8_lossy(data).into_owned()),
        Resp3::SimpleString { data, .. } => Value::Simple(data.clone()),
        Resp3::SimpleError { data, .. } => Value::Error(data.clone()),
        Resp3::Boolean { data, .. } => Value::Boolean(*data),
        Resp3::Null => Value::Null,
        Resp3::Number { data, .. } => Value::Integer(*data),
        Resp3::Double { data, .. } => Value::Double(*data),
        Resp3::BigNumber { data, .. } => {
            Value::BigNumber(String::from_utf8_lossy(data).into_owned())
        }
        Resp3::VerbatimString { data, format, .. } => Value::Verbatim {
            format: match format {
                VerbatimStringFormat::Text => *b"txt",
                VerbatimStringFormat::Markdown => *b"mkd",
            },
            text: data.clone(),
        },
        Resp3::Array { data, .. } => Value::Array(data.iter().map(resp3_value).collect()),
        Resp3::Map { data, .. } => Value::Map(pairs(data)),
        Resp3::Set { data, .. } => Value::Set(data.iter().map(resp3_value).collect()),
        Resp3::Push { data, .. } => Value::Push(data.iter().map(resp3_value).collect()),
        other => panic!("not generated: {other:?}"),
    };
    match frame.attributes() {
        Some(attributes) => Value::Attributed {
            attributes: pairs(attributes),
            value: Box::new(value),
        },
        None => value,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Every RESP2 reply the oracle encodes, we frame whole and read into the value it encoded; every
    /// strict prefix is incomplete.
    #[test]
    fn resp2_replies_agree_with_the_oracle(frame in resp2_frame()) {
        let bytes = encode2(&frame);
        prop_assert_eq!(our_reply_len(&bytes), Ok(Some(bytes.len())));
        let cut = bytes.len() / 2;
        prop_assert_eq!(our_reply_len(&bytes[..cut]), Ok(None));
        prop_assert_eq!(our_value(&bytes), Ok(Some((resp2_value(&frame), bytes.len()))));
    }

    /// Every RESP3 reply the oracle encodes (attributes, maps, sets, pushes, doubles, big numbers,
    /// verbatim strings included), we frame whole, alone or followed by another, and read into the value
    /// it encoded.
    #[test]
    fn resp3_replies_agree_with_the_oracle(frame in resp3_frame(), cut in any::<prop::sample::Index>()) {
        let bytes = encode3(&frame);
        prop_assert_eq!(our_reply_len(&bytes), Ok(Some(bytes.len())));
        let (back, n) = redis_protocol::resp3::decode::complete::decode(&bytes).unwrap().unwrap();
        prop_assert_eq!(n, bytes.len());
        prop_assert_eq!(back.kind(), frame.kind());
        prop_assert_eq!(our_value(&bytes), Ok(Some((resp3_value(&frame), bytes.len()))));
        let two = [&bytes[..], b"+NEXT\r\n"].concat();
        prop_assert_eq!(our_reply_len(&two), Ok(Some(bytes.len())));
        let cut = cut.index(bytes.len());
        prop_assert_eq!(our_reply_len(&bytes[..cut]), Ok(None));
    }
}

proptest! {
    // A fixed seed: the oracle refuses some well-framed replies for their meaning (listed below, by its
    // error words); a new such refusal met by a random seed would fail CI for the oracle's sake. Soak
    // with more cases and other seeds by hand (`rng_seed`), and list what is found.
    #![proptest_config(ProptestConfig {
        cases: 4000,
        rng_seed: proptest::test_runner::RngSeed::Fixed(12),
        ..ProptestConfig::default()
    })]

    /// On mutated encodings and garbage: whatever we frame, the oracle decodes to the same length.
    #[test]
    fn what_we_frame_the_oracle_frames_the_same(
        frame in resp3_frame(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        garbage in proptest::collection::vec(
            prop_oneof![Just(b'*'), Just(b'$'), Just(b'%'), Just(b'|'), Just(b'\r'), Just(b'\n'), Just(b'1'), Just(b'-'), any::<u8>()],
            0..24,
        ),
    ) {
        let mut bytes = encode3(&frame);
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        for input in [&bytes[..], &garbage[..]] {
            if let Ok(Some(len)) = our_reply_len(input) {
                let theirs = redis_protocol::resp3::decode::complete::decode(input);
                let streamed = input[..len].windows(2).any(|w| w[1] == b'?' && b"$*%~>".contains(&w[0]));
                // The oracle's doubles must parse as f64 and its verbatim formats be txt/mkd; we leave
                // the contents of those to the client.
                let loose = input[..len].iter().any(|&c| c == b',' || c == b'=');
                // The oracle also checks meaning, not framing: errors in UTF-8 (Redis does not promise
                // that), no attribute before a null, and only strings and numbers as set members and map
                // keys (RESP3 allows any value), no attribute inside an attribute. Framing is what we
                // compare.
                let meaning = matches!(&theirs, Err(e) if ["utf-8", "attribute", "hash key"]
                    .iter()
                    .any(|why| e.details().contains(why)));
                // We frame the union of RESP2 and RESP3 (`*-1` is RESP2's null array): either oracle will do.
                let resp2 = redis_protocol::resp2::decode::decode(input);
                if !streamed && !loose && !meaning {
                    prop_assert!(
                        matches!(theirs, Ok(Some((_, n))) if n == len)
                            || matches!(resp2, Ok(Some((_, n))) if n == len),
                        "{:?}: ours {len}, theirs {theirs:?} / {resp2:?}", String::from_utf8_lossy(input)
                    );
                }
            }
        }
    }
}
