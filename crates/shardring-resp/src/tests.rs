//! The reply framer against every reply type, malformed replies, its limits and any split of its input.

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

