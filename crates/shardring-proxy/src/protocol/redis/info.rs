//! The proxy's own `INFO`: its facts under Redis's field names where they exist, as the text and
//! the reply both a plain `INFO` (`local.rs`) and `INFO keyspace` summed over the servers
//! (`features/span/info.rs`) are made of. A file of its own so that neither reaches into the
//! other's imports.

use bytes::{BufMut, BytesMut};

use super::request::put_header;
use super::settings::Settings;
use super::Flavor;
use crate::protocol::route::Placer;
use crate::protocol::Answer;

/// The version the proxy reports as its server's (`HELLO`, `INFO`): clients enable features by it, and
/// the proxy forwards to Redis 7 servers.
pub(crate) const REDIS_VERSION: &str = "7.0.0";

/// `INFO`: the proxy's own facts, under Redis's field names where they exist; the keyspace section
/// says which servers the pool has (`INFO keyspace` sums theirs: `features/span/info.rs`).
pub(crate) fn info(flavor: Flavor, settings: &Settings, ctx: &Placer<'_>) -> Answer {
    let mut text = info_text(ctx);
    text.push_str(&format!(
        "# db:{} servers:{} live:{}\r\n",
        settings.db,
        ctx.servers(),
        ctx.live_servers().len()
    ));
    text_reply(flavor, &text)
}

/// The text of the proxy's `INFO`, up to its keyspace section's header: the section's lines follow.
pub(crate) fn info_text(ctx: &Placer<'_>) -> String {
    let st = ctx.stats;
    format!(
        "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\nproxy:{}\r\n\
         process_id:{}\r\nuptime_in_seconds:{}\r\n\r\n# Clients\r\nconnected_clients:{}\r\n\r\n\
         # Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\r\n\
         # Keyspace\r\n",
        crate::version::NAME_VERSION,
        std::process::id(),
        ctx.started.elapsed().as_secs(),
        st.client_connections.get(),
        st.total_connections.get(),
        st.requests.get(),
    )
}

/// `text` as Redis sends `INFO`'s answer: a bulk string in RESP2, a verbatim string in RESP3.
pub(crate) fn text_reply(flavor: Flavor, text: &str) -> Answer {
    let mut out = BytesMut::with_capacity(text.len() + 16);
    match flavor {
        Flavor::Resp2 => {
            put_header(&mut out, b'$', text.len());
            out.put_slice(text.as_bytes());
            out.put_slice(b"\r\n");
        }
        // Redis 7 answers INFO with a verbatim string in RESP3.
        Flavor::Resp3 => {
            put_header(&mut out, b'=', text.len() + 4);
            out.put_slice(b"txt:");
            out.put_slice(text.as_bytes());
            out.put_slice(b"\r\n");
        }
    }
    Answer::Bytes(out.freeze())
}
