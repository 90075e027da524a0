//! How memcached pools speak to their servers ([`Dialect`]): `version` as the health probe, no
//! handshake, `stats settings` as the introduction that tells each server's item size limit, and
//! memcached's error lines.

use std::sync::Arc;

use bytes::Bytes;

use super::plan::Memcache;
use super::response::{is_error_reply, item_size_max, ResponseKind, ResponseScanner};
use crate::protocol::{Dialect, ServerFacts};

impl Dialect for Memcache {
    type ReplyKind = ResponseKind;

    type ReplyScanner = ResponseScanner;

    fn introductions(&self) -> Vec<(Bytes, ResponseKind)> {
        if self.settings.limits.value_len_from_servers {
            vec![(
                Bytes::from_static(b"stats settings\r\n"),
                ResponseKind::Stats,
            )]
        } else {
            Vec::new()
        }
    }

    fn introduced(reply: &[u8], facts: &ServerFacts) {
        if let Some(len) = item_size_max(reply) {
            facts.set_max_value_len(len);
        }
    }

    fn attach_facts(&mut self, facts: Vec<Arc<ServerFacts>>) {
        if self.settings.limits.value_len_from_servers {
            self.servers = Some(facts.into());
        }
    }

    fn probe_request(&self) -> &'static [u8] {
        b"version\r\n"
    }

    fn probe_answered(reply: &[u8]) -> Option<bool> {
        if reply.ends_with(b"\r\n") || reply.len() >= 128 {
            Some(reply.starts_with(b"VERSION "))
        } else {
            None
        }
    }

    fn is_error_reply(reply: &[u8]) -> bool {
        is_error_reply(reply)
    }
}
