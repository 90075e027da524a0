//! The RESP request decoder on arbitrary bytes, delivered in arbitrary pieces: it must never panic, never
//! buffer past its limits, hand out argument ranges inside their frame, and decode the same requests
//! however the input is split (a refusal that closes drops whatever was buffered, so only its kind counts).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use shardring_proxy::protocol::redis::{command, Decoded, Limits, RequestCodec, RequestError};
use tokio_util::codec::Decoder;

fn decode_all(codec: &mut RequestCodec, buf: &mut BytesMut, out: &mut Vec<Decoded>) {
    while let Some(d) = codec.decode(buf).expect("decode never fails") {
        let d = match d {
            Decoded::Request(r) => {
                assert!(!r.args.is_empty());
                for a in &r.args {
                    assert!(a.end <= r.frame.len());
                }
                // Routing any request never panics and never closes.
                let _ = command::route(&r);
                Decoded::Request(r)
            }
            Decoded::Refused(e) if e.close => Decoded::Refused(RequestError { consumed: 0, ..e }),
            d => d,
        };
        out.push(d);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // Small limits so the fuzzer reaches them.
    let limits = Limits {
        max_bulk_len: 64,
        max_args: 16,
        max_request_len: 512,
        max_inline_len: 128,
    };
    let (cuts, input) = data.split_at(1);
    let step = usize::from(cuts[0]).max(1);

    let mut whole = RequestCodec::new(limits);
    let mut buf = BytesMut::from(input);
    let mut expect = Vec::new();
    decode_all(&mut whole, &mut buf, &mut expect);

    let mut pieces = RequestCodec::new(limits);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for chunk in input.chunks(step) {
        buf.extend_from_slice(chunk);
        decode_all(&mut pieces, &mut buf, &mut got);
        // What is left is never more than one request's worth plus the last chunk.
        assert!(buf.len() <= limits.max_request_len + step);
    }
    assert_eq!(expect, got);
});
