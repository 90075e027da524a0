//! The reply framer against every reply type, malformed replies, its limits and any split of its input;
//! replies read into values.

use proptest::prelude::*;

use super::*;

fn frame_len(input: &[u8]) -> Result<Option<usize>, ReplyError> {
    reply_len(input, ReplyLimits::default())
}

const REPLIES: &[&[u8]] = &[
    b"+OK\r\n",
    b"-ERR unknown command 'x', with args beginning with: \r\n",
    b":-12\r\n",
    b"$5\r\nhello\r\n",
    b"$0\r\n\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b"*0\r\n",
    b"*3\r\n$1\r\na\r\n$-1\r\n:1\r\n",
    b"*2\r\n*1\r\n+a\r\n*0\r\n",
    b"_\r\n",
    b"#t\r\n",
    b",3.14\r\n",
    b",-inf\r\n",
    b"(3492890328409238509324850943850943825024385\r\n",
    b"!21\r\nSYNTAX invalid syntax\r\n",
    b"=15\r\ntxt:Some string\r\n",
    b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n",
    b"~3\r\n:1\r\n:2\r\n:3\r\n",
    b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n",
    b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.19\r\n$1\r\nb\r\n,0.05\r\n*2\r\n:2039123\r\n:9543892\r\n",
    b"*2\r\n|1\r\n+ttl\r\n:3600\r\n+value\r\n:7\r\n",
    b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n",
    b"*?\r\n:1\r\n:2\r\n:3\r\n.\r\n",
    b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n",
    b"~?\r\n.\r\n",
    b"*2\r\n*?\r\n$?\r\n;1\r\na\r\n;0\r\n.\r\n_\r\n",
];

#[test]
fn every_reply_type_frames_whole_and_every_prefix_is_incomplete() {
    for reply in REPLIES {
        assert_eq!(
            frame_len(reply),
            Ok(Some(reply.len())),
            "{:?}",
            String::from_utf8_lossy(reply)
        );
        // Followed by another reply, only the first is taken.
        let two = [*reply, b"+NEXT\r\n"].concat();
        assert_eq!(frame_len(&two), Ok(Some(reply.len())));
        for cut in 0..reply.len() {
            assert_eq!(frame_len(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
        }
    }
}

#[test]
fn malformed_replies_are_refused() {
    for bad in [
        &b"?\r\n"[..],
        b":1x\r\n",
        b"$-2\r\n",
        b"$3\r\nabcd\r\n",
        b"*-2\r\n",
        b"%-1\r\n",
        b"_x\r\n",
        b"#x\r\n",
        b",\r\n",
        b"(1.5\r\n",
        b"=2\r\nab\r\n",
        b".\r\n",
        b"*1\r\n.\r\n",
        b"$?\r\n;x\r\n",
        b"$?\r\n+a\r\n",
        b"+a\rb\r\n",
    ] {
        assert!(
            frame_len(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn reply_limits_hold() {
    let limits = ReplyLimits {
        max_bulk_len: 10,
        max_depth: 3,
        max_reply_len: 100,
        max_line_len: 8,
    };
    let f = |b: &[u8]| reply_len(b, limits);
    assert_eq!(f(b"*1\r\n*1\r\n*1\r\n:1\r\n"), Ok(Some(16)));
    assert_eq!(
        f(b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").unwrap_err().reason,
        "nested too deep"
    );
    assert_eq!(f(b"$11\r\n").unwrap_err().reason, "bulk too long");
    assert_eq!(f(b"*40\r\n").unwrap_err().reason, "reply too large");
    assert_eq!(f(b"+123456789").unwrap_err().reason, "line too long");
    let deep = "*1\r\n".repeat(100_000);
    assert!(reply_len(deep.as_bytes(), ReplyLimits::default()).is_err());
}

#[test]
fn a_large_reply_in_many_reads_is_framed_once_and_push_is_told_apart() {
    let mut reply = b"*10000\r\n".to_vec();
    for i in 0..10_000 {
        reply.extend_from_slice(format!("$6\r\nv{i:05}\r\n").as_bytes());
    }
    let mut framer = ReplyFramer::default();
    for end in (1..reply.len()).step_by(1009) {
        assert_eq!(framer.frame(&reply[..end]), Ok(None));
        assert!(framer.framed() + 16 >= end);
    }
    assert_eq!(
        framer.frame(&reply),
        Ok(Some(Framed {
            len: reply.len(),
            kind: b'*'
        }))
    );
    let push = framer
        .frame(b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n")
        .unwrap()
        .unwrap();
    assert!(push.is_push() && !push.is_error());
    assert!(framer.frame(b"-ERR x\r\n").unwrap().unwrap().is_error());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Framed in pieces (resumed) or whole, any input gives the same answer.
    #[test]
    fn replies_frame_the_same_however_they_are_split(
        pieces in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..12),
                proptest::sample::select(REPLIES.to_vec()).prop_map(<[u8]>::to_vec),
            ],
            1..6,
        ),
        step in 1usize..9,
    ) {
        let input: Vec<u8> = pieces.concat();
        let whole = frame_len(&input);
        let mut framer = ReplyFramer::default();
        let mut end = 0;
        let resumed = loop {
            end = (end + step).min(input.len());
            match framer.frame(&input[..end]) {
                Ok(None) if end < input.len() => continue,
                other => break other.map(|o| o.map(|f| f.len)),
            }
        };
        match (&whole, &resumed) {
            // A resumed framer may see an error earlier, at a prefix; the whole one then sees it too.
            (Err(_), Err(_)) => {}
            _ => prop_assert_eq!(whole, resumed),
        }
    }
}

// Replies read into values.

fn value(input: &[u8]) -> Value {
    let (value, used) = Value::read(input, ReplyLimits::default()).unwrap().unwrap();
    assert_eq!(used, input.len(), "{:?}", String::from_utf8_lossy(input));
    value
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

#[test]
fn every_resp2_reply_reads_into_its_value() {
    assert_eq!(value(b"+OK\r\n"), Value::Simple(b"OK".to_vec()));
    assert_eq!(value(b"-ERR no\r\n"), Value::Error("ERR no".into()));
    assert_eq!(value(b":-12\r\n"), Value::Integer(-12));
    assert_eq!(value(b"$5\r\na\r\nbc\r\n"), bulk("a\r\nbc"));
    assert_eq!(value(b"$0\r\n\r\n"), bulk(""));
    assert_eq!(value(b"$-1\r\n"), Value::Null);
    assert_eq!(value(b"*-1\r\n"), Value::Null);
    assert_eq!(value(b"*0\r\n"), Value::Array(vec![]));
    assert_eq!(
        value(b"*2\r\n$1\r\n0\r\n*3\r\n:1\r\n$-1\r\n*1\r\n+x\r\n"),
        Value::Array(vec![
            bulk("0"),
            Value::Array(vec![
                Value::Integer(1),
                Value::Null,
                Value::Array(vec![Value::Simple(b"x".to_vec())])
            ])
        ])
    );
}

#[test]
fn every_resp3_reply_reads_into_its_value() {
    let simple = |s: &str| Value::Simple(s.as_bytes().to_vec());
    assert_eq!(value(b"_\r\n"), Value::Null);
    assert_eq!(value(b"#t\r\n"), Value::Boolean(true));
    assert_eq!(value(b"#f\r\n"), Value::Boolean(false));
    assert_eq!(value(b",2.5\r\n"), Value::Double(2.5));
    assert_eq!(value(b",-inf\r\n"), Value::Double(f64::NEG_INFINITY));
    assert!(matches!(value(b",nan\r\n"), Value::Double(d) if d.is_nan()));
    assert_eq!(
        value(b"(-3492890328409238509324850943850943825024385\r\n"),
        Value::BigNumber("-3492890328409238509324850943850943825024385".into())
    );
    assert_eq!(
        value(b"!21\r\nSYNTAX invalid syntax\r\n"),
        Value::Error("SYNTAX invalid syntax".into())
    );
    assert_eq!(
        value(b"=15\r\ntxt:Some string\r\n"),
        Value::Verbatim {
            format: *b"txt",
            text: b"Some string".to_vec()
        }
    );
    assert_eq!(
        value(b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n"),
        Value::Map(vec![
            (simple("first"), Value::Integer(1)),
            (simple("second"), Value::Integer(2))
        ])
    );
    assert_eq!(
        value(b"~3\r\n:1\r\n:2\r\n:3\r\n"),
        Value::Set(vec![
            Value::Integer(1),
            Value::Integer(2),
            Value::Integer(3)
        ])
    );
    assert_eq!(
        value(b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n"),
        Value::Push(vec![simple("message"), simple("chan"), bulk("hi")])
    );
    assert_eq!(
        value(b"*2\r\n|1\r\n+ttl\r\n:3600\r\n+value\r\n:7\r\n"),
        Value::Array(vec![
            Value::Attributed {
                attributes: vec![(simple("ttl"), Value::Integer(3600))],
                value: Box::new(simple("value"))
            },
            Value::Integer(7)
        ])
    );
    assert_eq!(
        value(b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n"),
        bulk("Hello word")
    );
    assert_eq!(
        value(b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n"),
        Value::Map(vec![
            (simple("a"), Value::Integer(1)),
            (simple("b"), Value::Integer(2))
        ])
    );
    assert_eq!(
        value(b"*2\r\n*?\r\n$?\r\n;1\r\na\r\n;0\r\n.\r\n_\r\n"),
        Value::Array(vec![Value::Array(vec![bulk("a")]), Value::Null])
    );
    assert_eq!(value(b"~?\r\n.\r\n"), Value::Set(vec![]));
}

#[test]
fn text_is_a_strings_utf8_and_nothing_else() {
    assert_eq!(value(b"+OK\r\n").text(), Some("OK"));
    assert_eq!(value(b"$4\r\n6379\r\n").text(), Some("6379"));
    assert_eq!(value(b"$2\r\n\xff\xfe\r\n").text(), None);
    assert_eq!(value(b"+\xc3\r\n").text(), None);
    assert_eq!(value(b":1\r\n").text(), None);
    assert_eq!(value(b"-ERR x\r\n").text(), None);
    assert_eq!(value(b"$-1\r\n").text(), None);
}

/// Every reply the framer frames whole reads into a value of the same length, except where reading
/// checks what framing leaves to the client.
#[test]
fn every_framed_reply_reads_whole() {
    for reply in REPLIES {
        let (_, len) = Value::read(reply, ReplyLimits::default()).unwrap().unwrap();
        assert_eq!(len, reply.len(), "{:?}", String::from_utf8_lossy(reply));
    }
}

#[test]
fn what_framing_leaves_to_the_client_is_checked_when_read() {
    for (bad, why) in [
        (&b",x\r\n"[..], "bad double"),
        (b"=4\r\ntxt!\r\n", "verbatim string without its format"),
        (b"%?\r\n+a\r\n.\r\n", "a map key without its value"),
    ] {
        assert_eq!(reply_len(bad, ReplyLimits::default()), Ok(Some(bad.len())));
        assert_eq!(
            Value::read(bad, ReplyLimits::default()).unwrap_err().reason,
            why
        );
    }
}

#[test]
fn a_pipeline_reads_reply_after_reply() {
    let buf = b"+OK\r\n:1\r\n$1\r\nv\r\n";
    let mut reader = ReplyReader::default();
    let mut at = 0;
    let mut got = Vec::new();
    while let Some((value, len)) = reader.read(&buf[at..]).unwrap() {
        got.push(value);
        at += len;
    }
    assert_eq!(at, buf.len());
    assert_eq!(
        got,
        [Value::Simple(b"OK".to_vec()), Value::Integer(1), bulk("v")]
    );
}

#[test]
fn malformed_replies_are_errors_when_read() {
    for bad in [
        &b"?x\r\n"[..],
        b":abc\r\n",
        b"$abc\r\n",
        b"$3\r\nabcd\r\n",
        b"*x\r\n",
        b"$99999999999999999999\r\n",
        b"$9223372036854775807\r\n",
        b"*9223372036854775807\r\n",
        b"\r\n\r\n",
    ] {
        assert!(
            Value::read(bad, ReplyLimits::default()).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let limits = ReplyLimits {
        max_depth: 32,
        ..ReplyLimits::default()
    };
    let deep = "*1\r\n".repeat(33);
    assert!(Value::read(deep.as_bytes(), limits).is_err());
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap deterministic fuzz: every byte string from a small alphabet up to length 6.
    fn walk(buf: &mut Vec<u8>, alphabet: &[u8], left: usize) {
        let _ = Value::read(buf, ReplyLimits::default());
        if left == 0 {
            return;
        }
        for &b in alphabet {
            buf.push(b);
            walk(buf, alphabet, left - 1);
            buf.pop();
        }
    }
    walk(&mut Vec::new(), b"*$%?;:.+1\r\n0", 6);
}

/// Why reading may refuse a reply the framer framed: what framing leaves to the client.
const MEANING: [&str; 3] = [
    "bad double",
    "verbatim string without its format",
    "a map key without its value",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Whatever the framer frames reads into a value of the same length, or is refused for its meaning,
    /// never for its framing.
    #[test]
    fn what_is_framed_reads_whole(
        pieces in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(
                    prop_oneof![Just(b'*'), Just(b'$'), Just(b'%'), Just(b'|'), Just(b'?'), Just(b'.'),
                        Just(b';'), Just(b'='), Just(b','), Just(b'\r'), Just(b'\n'), Just(b'1'), any::<u8>()],
                    0..12,
                ),
                proptest::sample::select(REPLIES.to_vec()).prop_map(<[u8]>::to_vec),
            ],
            1..6,
        ),
    ) {
        let input: Vec<u8> = pieces.concat();
        if let Ok(Some(len)) = frame_len(&input) {
            match Value::read(&input, ReplyLimits::default()) {
                Ok(read) => prop_assert_eq!(read.map(|(_, n)| n), Some(len)),
                Err(e) => prop_assert!(MEANING.contains(&e.reason), "{}", e),
            }
        }
    }

    /// A run of replies read in pieces (resumed) reads the same values as each read whole.
    #[test]
    fn replies_read_the_same_however_they_are_split(
        picks in proptest::collection::vec(proptest::sample::select(REPLIES.to_vec()), 1..6),
        step in 1usize..9,
    ) {
        let input: Vec<u8> = picks.concat();
        let mut reader = ReplyReader::default();
        let (mut start, mut end) = (0, 0);
        let mut got = Vec::new();
        while start < input.len() {
            end = (end + step).min(input.len());
            if let Some((value, len)) = reader.read(&input[start..end]).unwrap() {
                got.push(value);
                start += len;
                end = start;
            }
        }
        let want: Vec<Value> = picks.iter().map(|r| value(r)).collect();
        prop_assert_eq!(got, want);
    }
}
