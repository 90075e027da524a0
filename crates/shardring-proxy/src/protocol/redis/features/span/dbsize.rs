//! `DBSIZE` across the servers: every server holding keys is asked, and the answer is the sum of
//! their counts. A server that cannot answer fails the command with its error naming it: a sum
//! without its keys would be a wrong count that looks right (a pool with a server ejected would
//! seem to have lost a quarter of its keys).

use bytes::Bytes;

use super::{got, parse_u64, Got};
use crate::protocol::redis::merge::failure;
use crate::protocol::PartReply;

/// The answer to `DBSIZE` from every server's reply: `:<sum>`, or the first failure.
pub(super) fn merge(replies: &[PartReply<'_>]) -> Bytes {
    let mut sum: u64 = 0;
    for reply in replies {
        match got(reply) {
            Got::Reply(bytes) => {
                let count = bytes
                    .strip_prefix(b":")
                    .and_then(|b| b.strip_suffix(b"\r\n"))
                    .and_then(parse_u64);
                let Some(count) = count else {
                    return failure(&format!(
                        "unexpected reply from server {} to DBSIZE",
                        reply.server
                    ));
                };
                sum = sum.saturating_add(count);
            }
            Got::Error(e) => return e,
        }
    }
    Bytes::from(format!(":{sum}\r\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BackendError;

    fn part(
        server: &'static str,
        reply: Result<&'static [u8], BackendError>,
    ) -> PartReply<'static> {
        PartReply {
            server,
            reply: reply.map(Bytes::from_static),
        }
    }

    #[test]
    fn counts_add_up_and_a_failed_server_fails_the_count_naming_it() {
        let ok = [part("a:1", Ok(b":3\r\n")), part("b:2", Ok(b":4\r\n"))];
        assert_eq!(&merge(&ok)[..], b":7\r\n");
        let down = [
            part("a:1", Ok(b":3\r\n")),
            part("b:2", Err(BackendError::NoServer)),
        ];
        let answer = String::from_utf8(merge(&down).to_vec()).unwrap();
        assert!(
            answer.starts_with('-') && answer.contains("b:2"),
            "{answer}"
        );
        let odd = [part("a:1", Ok(b"+OK\r\n"))];
        let answer = String::from_utf8(merge(&odd).to_vec()).unwrap();
        assert!(
            answer.contains("unexpected reply from server a:1"),
            "{answer}"
        );
    }
}
