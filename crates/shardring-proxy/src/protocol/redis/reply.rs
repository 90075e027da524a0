//! What a request waits for from its server, and the reply framer of one server connection.
//!
//! Where one reply ends is `shardring-resp`'s [`ReplyFramer`] (every RESP2 and RESP3 type, within
//! [`ReplyLimits`](shardring_resp::ReplyLimits)); this file is the proxy's side of the seam: how many
//! replies a request's answer is ([`Resp`]) and the scanner that frames them on a server connection
//! ([`RespScanner`], the protocol's [`ReplyScanner`]).

use bytes::Bytes;
use shardring_resp::ReplyFramer;

use crate::protocol::{FrameError, ReplyScanner};

/// How many replies a request's answer is, and whether it waits under the pool's `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resp {
    /// One reply (it frames itself).
    Reply,
    /// This many replies back to back (a transaction: `MULTI`, each queued command, `EXEC`).
    Replies(u32),
    /// One reply that may take as long as the client asked (a blocking command): no timeout.
    Unbounded,
}

/// The last of a run of `replies` replies, as a connection framed it ([`Resp::Replies`]): a
/// transaction's answer (`EXEC`'s reply), a request's own behind `ASKING`.
pub(super) fn last_reply(run: Bytes, replies: u32) -> Bytes {
    let mut framer = ReplyFramer::default();
    let mut start = 0;
    for _ in 1..replies {
        match framer.frame(&run[start..]) {
            Ok(Some(f)) => start += f.len,
            // The connection framed the whole run already; it cannot come apart here.
            _ => break,
        }
    }
    run.slice(start..)
}

/// The reply framer of one server connection; resumes a long reply where the last read left off,
/// and a run of replies ([`Resp::Replies`]) after the ones already whole.
#[derive(Debug, Default)]
pub(crate) struct RespScanner {
    /// Frames the reply being read.
    framer: ReplyFramer,
    /// Of a run of replies: how many are whole, and their bytes.
    whole: (u32, usize),
}

impl ReplyScanner for RespScanner {
    type Kind = Resp;

    // Inlined into the connection's reply loop, as the framer alone was: a call per reply otherwise.
    #[inline(always)]
    fn frame(
        &mut self,
        buf: &[u8],
        kind: Resp,
        _max_value_len: usize,
    ) -> Result<Option<usize>, FrameError> {
        let Resp::Replies(wanted) = kind else {
            // One reply, the common case: framed as it comes.
            return self
                .framer
                .frame(buf)
                .map(|f| f.map(|f| f.len))
                .map_err(|e| FrameError { reason: e.reason });
        };
        let wanted = wanted.max(1);
        loop {
            let (count, len) = self.whole;
            let rest = buf.get(len..).unwrap_or_default();
            let framed = self
                .framer
                .frame(rest)
                .map_err(|e| FrameError { reason: e.reason })?;
            let Some(f) = framed else {
                return Ok(None);
            };
            if count + 1 == wanted {
                self.whole = (0, 0);
                return Ok(Some(len + f.len));
            }
            self.whole = (count + 1, len + f.len);
        }
    }

    fn reset(&mut self) {
        self.framer.reset();
        self.whole = (0, 0);
    }
}
