//! The request decoder on arbitrary bytes, delivered in arbitrary pieces: it must never panic, never
//! buffer past its limit, and decode the same requests however the input is split.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use shardring_proxy::protocol::memcache::{
    Command, Decoded, Limits, RequestCodec, RequestErrorKind,
};
use tokio_util::codec::Decoder;

fn decode_all(codec: &mut RequestCodec, buf: &mut BytesMut, out: &mut Vec<Decoded>) {
    while let Some(d) = codec.decode(buf).expect("decode never fails") {
        if let Decoded::Request(r) = &d {
            // Every range a request hands out lies inside its frame.
            if let shardring_proxy::protocol::memcache::Command::Get { keys, .. } = &r.command {
                for k in keys {
                    assert!(k.end <= r.frame.len() && !k.is_empty());
                }
            }
            // Meta keys (base64 ones decoded) route by bytes that fit a key.
            if let shardring_proxy::protocol::memcache::Command::Meta { key, .. } = &r.command {
                assert!(r.with_routing_key(key, <[u8]>::len) <= 250);
            }
            let _ = r.to_forward();
        }
        out.push(d);
    }
}

/// The requests a client made: a streamed retrieval line's pieces merged back into one (kind, keys).
fn logical(items: &[Decoded]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for d in items {
        if let Decoded::Request(r) = d {
            if let Command::Get { kind, keys, more, .. } = &r.command {
                let keys: Vec<String> = keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(r.bytes(k)).into_owned())
                    .collect();
                match out.last_mut() {
                    Some(last) if open => {
                        for k in keys {
                            last.push(' ');
                            last.push_str(&k);
                        }
                    }
                    _ => out.push(format!("{kind:?} {}", keys.join(" "))),
                }
                open = *more;
                continue;
            }
        }
        open = false;
        out.push(format!("{d:?}"));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // Small limits so the fuzzer reaches them.
    let limits = Limits {
        max_key_len: 250,
        max_value_len: 64,
        value_len_from_servers: false,
        max_line_len: 300,
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
        assert!(buf.len() <= limits.max_request_len() + step);
    }
    let upto = |v: &[Decoded]| {
        v.iter()
            .position(|d| {
                matches!(d, Decoded::Refused(e) if e.kind == RequestErrorKind::LineTooLong)
            })
            .unwrap_or(v.len())
    };
    let n = upto(&expect).min(upto(&got));
    // A retrieval line past the line limit is streamed in pieces that depend on how it arrived: compare
    // what was asked (each line's keys in order), not the pieces.
    assert_eq!(logical(&expect[..n]), logical(&got[..n]));
});
