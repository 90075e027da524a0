//! Differential tests of the request scanner against `redis-protocol`, a maintained RESP2/RESP3 codec:
//! requests it encodes scan to the same arguments, and requests we encode decode in it to the same
//! arguments. The reply framer's are in `shardring-resp` (`src/oracle_tests.rs`), with the framer.

use proptest::prelude::*;
use redis_protocol::resp2::types::{OwnedFrame as Resp2, Resp2Frame as _};

use super::*;

fn encode2(frame: &Resp2) -> Vec<u8> {
    let mut buf = vec![0u8; frame.encode_len(false)];
    let n = redis_protocol::resp2::encode::encode(&mut buf, frame, false).expect("encodes");
    buf.truncate(n);
    buf
}

fn blob() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Requests encoded by the oracle (arrays of bulk strings) scan to the same arguments; requests we
    /// encode decode in the oracle to the same arguments.
    #[test]
    fn requests_agree_with_the_oracle(args in proptest::collection::vec(blob(), 1..12)) {
        let theirs = encode2(&Resp2::Array(args.iter().cloned().map(Resp2::BulkString).collect()));
        let Ok(Some(Scanned::Array { len, args: got })) = RequestScanner::default().scan(&theirs) else {
            panic!("{theirs:?}")
        };
        prop_assert_eq!(len, theirs.len());
        let got: Vec<Vec<u8>> = got.iter().map(|r| theirs[r.clone()].to_vec()).collect();
        prop_assert_eq!(&got, &args);
        let ours = Request::from_args(&args).frame;
        prop_assert_eq!(&ours[..], &theirs[..]);
        let (frame, n) = redis_protocol::resp2::decode::decode(&ours).unwrap().unwrap();
        prop_assert_eq!(n, ours.len());
        prop_assert_eq!(frame, Resp2::Array(args.into_iter().map(Resp2::BulkString).collect()));
    }
}
