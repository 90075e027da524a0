//! The RESP reply framer and reader (`shardring-resp`, which the proxy and `shardring migrate` share) on
//! arbitrary bytes: no panic, lengths within the input, a framing resumed across growing prefixes (as a
//! server connection reads) agreeing with a fresh one, the elements of a framed aggregate tiling it, a
//! framed reply read into a value of the same length (or refused for its meaning, never for its
//! framing), and MGET merges of whatever was framed never panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardring_proxy::protocol::redis::merge::{
    merge_all_ok, merge_sum, merge_values, Part, PartialReads,
};
use shardring_proxy::protocol::redis::{elements, reply_len, ReplyFramer, ReplyLimits};
use shardring_resp::Value;

fuzz_target!(|data: &[u8]| {
    let limits = ReplyLimits {
        max_bulk_len: 256,
        max_depth: 8,
        max_reply_len: 4096,
        max_line_len: 64,
    };
    let whole = reply_len(data, limits);
    if let Ok(Some(len)) = whole {
        assert!(len > 0 && len <= data.len());
        let reply = &data[..len];
        // Framed whole, it reads whole: reading refuses only what framing leaves to the client.
        match Value::read(data, limits) {
            Ok(read) => assert_eq!(read.map(|(_, n)| n), Some(len)),
            Err(e) => assert!(
                [
                    "bad double",
                    "verbatim string without its format",
                    "a map key without its value"
                ]
                .contains(&e.reason),
                "{e}"
            ),
        }
        if let Some(values) = elements(reply, limits) {
            let mut at = None;
            for v in &values {
                assert!(v.start < v.end && v.end <= len);
                assert!(at.is_none_or(|end| end == v.start));
                at = Some(v.end);
            }
            let held: Vec<usize> = (0..values.len()).collect();
            for partial in [PartialReads::Refused, PartialReads::Answered] {
                let parts = [(&held[..], Part::Reply(reply))];
                let _ = merge_values(values.len(), &parts, limits, partial);
            }
        }
        let _ = merge_sum(&[Part::Reply(reply), Part::Failed("x")]);
        let _ = merge_all_ok(&[Part::Reply(reply)]);
    }
    let mut framer = ReplyFramer::new(limits);
    let step = data.first().map_or(1, |&b| usize::from(b % 16) + 1);
    let mut cut = 0;
    loop {
        cut = (cut + step).min(data.len());
        let resumed = framer.frame(&data[..cut]);
        assert!(framer.framed() <= cut);
        match resumed {
            Ok(None) if cut < data.len() => continue,
            // A resumed framer can meet an error at a prefix; a fresh one on that prefix does too.
            Err(_) => assert!(reply_len(&data[..cut], limits).is_err()),
            other => assert_eq!(
                other.map(|o| o.map(|f| f.len)),
                reply_len(&data[..cut], limits)
            ),
        }
        break;
    }
});
