//! Replies read off a connection into values, one after the other.

use crate::error::ReplyError;
use crate::framer::ReplyFramer;
use crate::limits::ReplyLimits;
use crate::value::Value;

/// Reads a connection's replies into [`Value`]s: frames each as its bytes arrive, resuming where the
/// last read left off (a large reply in many reads is framed once), and reads it into a value once it
/// is whole.
///
/// [`ReplyLimits::max_depth`] also bounds how deep reading a value recurses: keep it in the hundreds.
#[derive(Debug, Clone, Default)]
pub struct ReplyReader {
    /// Finds where the current reply ends, and checks it against the limits before it is read.
    framer: ReplyFramer,
}

impl ReplyReader {
    /// A reader enforcing `limits`.
    pub fn new(limits: ReplyLimits) -> ReplyReader {
        ReplyReader {
            framer: ReplyFramer::new(limits),
        }
    }

    /// Reads the first reply of `buf`, carrying on from the previous call.
    ///
    /// Returns `Ok(None)` when `buf` does not yet hold the whole reply, `Ok(Some((value, len)))` for a
    /// whole one (`buf[..len]`; the caller drops those bytes and the reader starts afresh).
    ///
    /// `buf` must be the input of the previous call with bytes appended, until `Some` or `Err`, as for
    /// [`ReplyFramer::frame`].
    ///
    /// # Errors
    /// A [`ReplyError`] when the bytes are not RESP, pass the limits or do not read as a value (a
    /// double that is not a number, say); the reader is reset.
    pub fn read(&mut self, buf: &[u8]) -> Result<Option<(Value, usize)>, ReplyError> {
        let Some(framed) = self.framer.frame(buf)? else {
            return Ok(None);
        };
        let value = Value::from_framed(&buf[..framed.len])?;
        Ok(Some((value, framed.len)))
    }

    /// Forgets the current reply.
    pub fn reset(&mut self) {
        self.framer.reset();
    }
}

/// Reading a reply already in memory, beside the reader that does it (so `value.rs` needs nothing
/// of this file).
impl Value {
    /// Reads the first whole reply of `buf` (a fresh [`ReplyReader`]; for replies already in memory).
    ///
    /// Returns `Ok(None)` when `buf` holds only the start of one, `Ok(Some((value, len)))` for a whole
    /// one (`buf[..len]`).
    ///
    /// # Errors
    /// See [`ReplyReader::read`].
    pub fn read(buf: &[u8], limits: ReplyLimits) -> Result<Option<(Value, usize)>, ReplyError> {
        ReplyReader::new(limits).read(buf)
    }
}
