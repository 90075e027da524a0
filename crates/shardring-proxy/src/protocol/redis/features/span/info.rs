//! `INFO` with the keyspace section (`INFO keyspace`, `INFO all`, `INFO everything`, or a list of
//! sections naming `keyspace`): every server is asked `INFO keyspace` and its `db` lines are summed
//! (`db0:keys=…,expires=…,avg_ttl=…`), each field added up over the servers but `avg_ttl`, which is
//! the servers' averages weighted by their `expires` (the keys it is the average over). The other
//! sections are the proxy's own, as a plain `INFO` answers them; `INFO keyspace` alone answers the
//! keyspace section alone, as Redis does. A plain `INFO` (and any request without the keyspace
//! section) is answered by the proxy alone, as before: it sends nothing to the servers.
//!
//! A server that fails fails the whole answer, naming it: a sum without it would be a wrong one.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{every, got, string_content, Got, Spanning};
use crate::protocol::redis::features::replicas::Next;
use crate::protocol::redis::info;
use crate::protocol::redis::merge::failure;
use crate::protocol::redis::request::Request;
use crate::protocol::redis::settings::Settings;
use crate::protocol::redis::Flavor;
use crate::protocol::route::Placer;
use crate::protocol::{Answer, PartReply};

/// What every server is asked.
const INFO_KEYSPACE: &[u8] = b"*2\r\n$4\r\nINFO\r\n$8\r\nkeyspace\r\n";

/// An `INFO` between its round and its answer.
#[derive(Debug)]
pub(crate) struct Summing {
    /// The proxy's sections up to the keyspace section's header; `None` for `INFO keyspace` alone.
    pub(super) before: Option<String>,
    /// The client's protocol: a bulk string in RESP2, a verbatim string in RESP3.
    pub(super) flavor: Flavor,
}

/// The proxy's `INFO`, or every server's keyspace when the request asks for that section.
pub(super) fn plan(
    req: &Request,
    flavor: Flavor,
    settings: &Settings,
    ctx: &Placer<'_>,
) -> Next<Spanning> {
    let sections: Vec<Vec<u8>> = req
        .arg_slices()
        .skip(1)
        .map(<[u8]>::to_ascii_lowercase)
        .collect();
    let wants = |s: &[u8]| matches!(s, b"keyspace" | b"all" | b"everything");
    if !sections.iter().any(|s| wants(s)) || settings.span.servers == 0 {
        return Next::Answer(info::info(flavor, settings, ctx));
    }
    let before = if sections.iter().all(|s| s == b"keyspace") {
        None
    } else {
        Some(info::info_text(ctx))
    };
    Next::Send(
        every(settings.span.servers, &Bytes::from_static(INFO_KEYSPACE)),
        Spanning::Info(Summing { before, flavor }),
    )
}

/// The answer from every server's `INFO keyspace`.
pub(super) fn merge(summing: Summing, replies: &[PartReply<'_>]) -> Answer {
    let mut dbs: BTreeMap<u64, Db> = BTreeMap::new();
    for reply in replies {
        let bytes = match got(reply) {
            Got::Reply(bytes) => bytes,
            Got::Error(e) => return Answer::Bytes(e),
        };
        let Some(text) = string_content(bytes) else {
            return Answer::Bytes(failure(&format!(
                "unexpected reply from server {} to INFO keyspace",
                reply.server
            )));
        };
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some((db, fields)) = db_line(line) {
                dbs.entry(db).or_default().add(&fields);
            }
        }
    }
    let mut text = summing
        .before
        .unwrap_or_else(|| "# Keyspace\r\n".to_owned());
    for (db, sum) in &dbs {
        text.push_str(&format!("db{db}:{}\r\n", sum.line()));
    }
    info::text_reply(summing.flavor, &text)
}

/// `db<n>:<field>=<value>,…` as its number and fields; fields whose value is not a whole number
/// are left out (none are, in Redis 7).
fn db_line(line: &[u8]) -> Option<(u64, Vec<(String, u64)>)> {
    let line = std::str::from_utf8(line).ok()?;
    let (name, fields) = line.split_once(':')?;
    let db = name.strip_prefix("db")?.parse().ok()?;
    let fields = fields
        .split(',')
        .filter_map(|f| {
            let (k, v) = f.split_once('=')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect();
    Some((db, fields))
}

/// One database's fields, summed over the servers, in the order the first server gave them.
#[derive(Debug, Default)]
struct Db {
    /// Each field's sum (`avg_ttl`'s is of each server's average times its `expires`).
    fields: Vec<(String, u128)>,
}

impl Db {
    /// Adds a server's fields.
    fn add(&mut self, fields: &[(String, u64)]) {
        let expires = fields
            .iter()
            .find(|(k, _)| k == "expires")
            .map_or(0, |(_, v)| *v);
        for (k, v) in fields {
            let v = if k == "avg_ttl" {
                u128::from(*v) * u128::from(expires)
            } else {
                u128::from(*v)
            };
            match self.fields.iter_mut().find(|(name, _)| name == k) {
                Some((_, sum)) => *sum = sum.saturating_add(v),
                None => self.fields.push((k.clone(), v)),
            }
        }
    }

    /// `keys=…,expires=…,avg_ttl=…`.
    fn line(&self) -> String {
        let expires = self
            .fields
            .iter()
            .find(|(k, _)| k == "expires")
            .map_or(0, |(_, v)| *v);
        self.fields
            .iter()
            .map(|(k, v)| {
                let v = match (k.as_str(), expires) {
                    ("avg_ttl", 0) => 0,
                    ("avg_ttl", e) => v / e,
                    _ => *v,
                };
                format!("{k}={v}")
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}
