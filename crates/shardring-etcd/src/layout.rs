//! The key layout in etcd: a **contract** that `shardring members`, `shardring migrate`, the proxy,
//! embedded clients and the tests rely on.
//!
//! One key per server, and beside them a pool's planned membership and its proxies' registrations:
//!
//! ```text
//! <prefix><pool>/servers/<name>  =  host:port[:weight]
//! <prefix><pool>/next/<name>     =  host:port[:weight]
//! <prefix><pool>/proxies/<id>    =  current=<digest> next=<digest|-> current_revision=<n> next_revision=<n>
//! <prefix><pool>/kind            =  redis-cluster        (no key: a ring)
//! <prefix><pool>/next-kind       =  redis-cluster        (no key: a ring)
//! ```
//!
//! - `<prefix>` is `/shardring/` unless told otherwise ([`DEFAULT_PREFIX`]); a prefix given without a
//!   trailing `/` gets one ([`normalise_prefix`]): `/cache` means `/cache/`, never `/cachealpha/…`.
//!   Every key of a pool is under `<prefix><pool>/` ([`PoolKeys::pool_prefix`]), which no other pool's
//!   keys start with (pool `a`'s `/shardring/a/` is not a prefix of pool `ab`'s keys).
//! - `<name>` is the server's name from the YAML file, or `host:port` for a server without one. A
//!   member whose name equals its address is an *unnamed* server and is placed exactly as nutcracker
//!   places an unnamed server (port 11211 left out of its points; see
//!   [`Member::to_twemproxy`](shardring::membership::Member::to_twemproxy)). So a pool published from a
//!   YAML file keeps every key where it was.
//! - The value is `host:port`, optionally followed by `:weight` (weight 1 when left out). An IPv6
//!   address is written in brackets (`[::1]:11211:2`); a unix socket is its path (`/run/mc.sock[:weight]`).
//!   Surrounding whitespace (a trailing newline from `etcdctl put`) is ignored.
//!
//! Anything else is a [`MalformedValue`]: that server is skipped and the problem reported, the rest of the
//! pool still applies.
//!
//! ## The next membership (`next/`)
//! The pool's *next* servers, in the same format as `servers/`: a planned change of the ring. No key
//! under `next/` means no change is planned. While a next membership differs from the current one, every
//! proxy of the pool dual-writes each key whose owner changes (to its current and its next owner), so that
//! `shardring migrate` can copy the keys and then *cut over*: one transaction that swaps `servers/` and
//! `next/` (the old servers become the next, so proxies that switched first still write to the owners
//! that proxies not yet switched read from), after which dropping `next/` ends the change. A follower
//! built [`with_next`](crate::EtcdSourceBuilder::with_next) ranges and watches the whole
//! `<prefix><pool>/` prefix, so current and next change together, at one revision.
//!
//! ## The kind of a member set (`kind`, `next-kind`)
//! `<prefix><pool>/kind` says what `servers/` is, `<prefix><pool>/next-kind` what `next/` is
//! ([`Kind`](crate::kind::Kind)): `redis-cluster` when the servers are a Redis Cluster's seed nodes
//! (its slot map places the keys), `ring` or no key for a ring over the servers (every pool
//! published before kinds existed). A cut-over swaps them with the member sets, in the same
//! transaction; dropping `next/` drops `next-kind`. Only a source that follows the next membership
//! ([`with_next`](crate::EtcdSourceBuilder::with_next)) reads them, and a participant that cannot
//! place a cluster's keys does not claim to serve one (see [`Participant`](crate::Participant)).
//! Any other value is a [`MalformedValue`], and the set is then taken for one nobody can place.
//!
//! ## Proxy registrations (`proxies/`)
//! Each proxy of the pool writes `proxies/<id>` under a lease (it vanishes when the proxy stops keeping
//! the lease alive): which current and next membership it serves, as space-separated `field=value`
//! pairs ([`Registration`], [`format_registration`], [`parse_registration`]):
//!
//! - `current=<digest>`: the digest of the current membership it serves (an opaque string the proxy
//!   computes: no spaces, no `=`; e.g. hex).
//! - `next=<digest>` or `next=-`: the digest of the next membership it dual-writes to, or `-` for none.
//! - `current_revision=<n>`, `next_revision=<n>`: the etcd revisions at which it read them (0 for none).
//!
//! Fields may come in any order; unknown fields are ignored (so later versions can add some); a missing
//! field, a token that is not `field=value`, or a revision that is not a number is a [`MalformedValue`].
//!
//! ## The roster (`roster/`)
//! A lease vanishes with silence, and silence is not agreement: a proxy cut off from etcd, paused or
//! killed loses its `proxies/<id>` key while it may still be serving what it last knew. So each
//! registration is also written, in the same transaction and without a lease, to `roster/<id>` (the
//! same fields, plus `instance=<…>`, which process wrote it). `shardring migrate` waits for every
//! participant of the roster: one whose `proxies/<id>` is gone blocks each step until it is back, or
//! until an operator removes it (`shardring members forget`, refused while its lease is alive). A
//! participant that stops cleanly takes its own entry out (only the entry its own process wrote).

use shardring::membership::Member;

use crate::error::MalformedValue;

/// The prefix under which pools live unless `--etcd-prefix` says otherwise.
pub const DEFAULT_PREFIX: &str = "/shardring/";

/// The weight of a server whose value has none.
pub const DEFAULT_WEIGHT: u32 = 1;

/// Where one pool's keys live: `<prefix><pool>/servers/`, `<prefix><pool>/next/`,
/// `<prefix><pool>/proxies/`, `<prefix><pool>/roster/`, `<prefix><pool>/cut-over`,
/// `<prefix><pool>/kind`, `<prefix><pool>/next-kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKeys {
    /// `<prefix><pool>/`: every key of the pool starts with it.
    pool: String,
    /// The key prefix every server key of the pool starts with.
    servers: String,
    /// The key prefix every next-membership key of the pool starts with.
    next: String,
    /// The key prefix every proxy registration of the pool starts with.
    proxies: String,
    /// The key prefix of the roster: every participant that registered and has not left.
    roster: String,
    /// The key that says a cut-over was made and its change not finished: `next/` holds the
    /// membership that was current before it.
    cut_over: String,
    /// The key that says the moved keys of a finished change are still to be deleted from their
    /// old servers (`shardring migrate --delete-moved` did not finish).
    delete_moved: String,
    /// The key that says what `servers/` is (a ring, or a Redis Cluster's seeds).
    kind: String,
    /// The key that says what `next/` is.
    next_kind: String,
}

/// Which of a pool's member sets a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberSet {
    /// `servers/`: the current membership.
    Current,
    /// `next/`: the planned one.
    Next,
}

/// `prefix` with a trailing `/` (added when missing), so that a pool's name never runs into it.
pub fn normalise_prefix(prefix: &str) -> String {
    if prefix.ends_with('/') {
        prefix.to_owned()
    } else {
        format!("{prefix}/")
    }
}

impl PoolKeys {
    /// The keys of `pool` under `prefix` (e.g. [`DEFAULT_PREFIX`]; [`normalise_prefix`]d).
    pub fn new(prefix: &str, pool: &str) -> PoolKeys {
        let base = format!("{}{pool}/", normalise_prefix(prefix));
        PoolKeys {
            servers: format!("{base}servers/"),
            next: format!("{base}next/"),
            proxies: format!("{base}proxies/"),
            roster: format!("{base}roster/"),
            cut_over: format!("{base}cut-over"),
            delete_moved: format!("{base}delete-moved"),
            kind: format!("{base}kind"),
            next_kind: format!("{base}next-kind"),
            pool: base,
        }
    }

    /// `<prefix><pool>/`: every key of the pool (servers, next, proxies) is under it.
    pub fn pool_prefix(&self) -> &str {
        &self.pool
    }

    /// `<prefix><pool>/next/`: the next membership's keys.
    pub fn next_prefix(&self) -> &str {
        &self.next
    }

    /// The key of the next membership's server named `name`.
    pub fn next_key(&self, name: &str) -> String {
        format!("{}{name}", self.next)
    }

    /// `<prefix><pool>/proxies/`: the proxies' registrations.
    pub fn proxies_prefix(&self) -> &str {
        &self.proxies
    }

    /// The key of the registration of the proxy `id`.
    pub fn proxy_key(&self, id: &str) -> String {
        format!("{}{id}", self.proxies)
    }

    /// The next membership's server name a key stands for (as [`name_of`](PoolKeys::name_of) for
    /// `servers/`).
    pub fn next_name_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.next.as_str())
            .filter(|name| !name.is_empty())
    }

    /// `<prefix><pool>/roster/`: the participants seen, whose entries outlive their leases.
    pub fn roster_prefix(&self) -> &str {
        &self.roster
    }

    /// `<prefix><pool>/cut-over`: present from a cut-over until its change is finished (the next
    /// membership dropped), so that a migration that stopped in between is resumed, not reversed.
    pub fn cut_over_key(&self) -> &str {
        &self.cut_over
    }

    /// `<prefix><pool>/delete-moved`: present from the end of a change whose moved keys are to be
    /// deleted from their old servers until they are, so that a deletion that failed is done again
    /// by a rerun. Its value is the migration's own record of the change (opaque here).
    pub fn delete_moved_key(&self) -> &str {
        &self.delete_moved
    }

    /// `<prefix><pool>/kind` (for `servers/`) or `<prefix><pool>/next-kind` (for `next/`): what the
    /// member set is ([`Kind`](crate::kind::Kind)); no key means a ring.
    pub fn kind_key(&self, set: MemberSet) -> &str {
        match set {
            MemberSet::Current => &self.kind,
            MemberSet::Next => &self.next_kind,
        }
    }

    /// Which member set's kind `key` is, `None` for any other key.
    pub fn kind_of(&self, key: &[u8]) -> Option<MemberSet> {
        [MemberSet::Current, MemberSet::Next]
            .into_iter()
            .find(|set| key == self.kind_key(*set).as_bytes())
    }

    /// The roster key of the participant `id`.
    pub fn roster_key(&self, id: &str) -> String {
        format!("{}{id}", self.roster)
    }

    /// The participant id a roster key stands for.
    pub fn roster_id_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.roster.as_str())
            .filter(|id| !id.is_empty())
    }

    /// The proxy id a registration key stands for.
    pub fn proxy_id_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.proxies.as_str())
            .filter(|id| !id.is_empty())
    }

    /// Which member set a key is in, and the server name it stands for; `None` for any other key
    /// (registrations, keys of other pools, the prefixes themselves).
    pub fn member_of<'k>(&self, key: &'k str) -> Option<(MemberSet, &'k str)> {
        self.name_of(key)
            .map(|n| (MemberSet::Current, n))
            .or_else(|| self.next_name_of(key).map(|n| (MemberSet::Next, n)))
    }

    /// Reads one key and value of the next membership into a member (as [`parse`](PoolKeys::parse)
    /// for `servers/`).
    ///
    /// # Errors
    /// A [`MalformedValue`] saying what is wrong.
    pub fn parse_next(&self, key: &[u8], value: &[u8]) -> Result<Member, MalformedValue> {
        self.parse_in(MemberSet::Next, key, value)
    }

    /// `<prefix><pool>/servers/`: range and watch this prefix.
    pub fn servers_prefix(&self) -> &str {
        &self.servers
    }

    /// The key of the server named `name`.
    pub fn server_key(&self, name: &str) -> String {
        format!("{}{name}", self.servers)
    }

    /// The server name a key stands for, or `None` when the key is not one of this pool's server keys
    /// (or names nobody: the prefix itself).
    pub fn name_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(self.servers.as_str())
            .filter(|name| !name.is_empty())
    }

    /// Reads one key and value into a member.
    ///
    /// # Errors
    /// A [`MalformedValue`] saying what is wrong: a key that is not UTF-8 or not under this pool, or a
    /// value that is not `host:port[:weight]`.
    pub fn parse(&self, key: &[u8], value: &[u8]) -> Result<Member, MalformedValue> {
        self.parse_in(MemberSet::Current, key, value)
    }

    fn parse_in(&self, set: MemberSet, key: &[u8], value: &[u8]) -> Result<Member, MalformedValue> {
        let malformed = |reason: &str| MalformedValue {
            key: String::from_utf8_lossy(key).into_owned(),
            value: String::from_utf8_lossy(value).into_owned(),
            reason: reason.to_string(),
        };
        let key_text = std::str::from_utf8(key).map_err(|_| malformed("the key is not UTF-8"))?;
        let name = match set {
            MemberSet::Current => self
                .name_of(key_text)
                .ok_or_else(|| malformed("the key is not <prefix><pool>/servers/<name>"))?,
            MemberSet::Next => self
                .next_name_of(key_text)
                .ok_or_else(|| malformed("the key is not <prefix><pool>/next/<name>"))?,
        };
        let text = std::str::from_utf8(value).map_err(|_| malformed("the value is not UTF-8"))?;
        let (addr, weight) = parse_value(text).map_err(|reason| malformed(&reason))?;
        Member::new(name, addr, weight).map_err(|e| malformed(&e.to_string()))
    }
}

/// The value of a member's key: `host:port` or `host:port:weight` (the weight left out when it is 1).
pub fn format_value(member: &Member) -> String {
    if member.weight() == DEFAULT_WEIGHT {
        member.addr().to_string()
    } else {
        format!("{}:{}", member.addr(), member.weight())
    }
}

/// Splits `host:port[:weight]` into the address (`host:port`, brackets kept for IPv6) and the weight.
///
/// # Errors
/// Why the value is not one.
pub fn parse_value(value: &str) -> Result<(String, u32), String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("the value is empty (expected host:port[:weight])".into());
    }
    if value.starts_with('/') {
        // A unix socket: the path, then perhaps `:weight`.
        return match value.rsplit_once(':') {
            Some((path, w)) if w.bytes().all(|b| b.is_ascii_digit()) => {
                Ok((path.to_string(), parse_weight(w)?))
            }
            _ => Ok((value.to_string(), DEFAULT_WEIGHT)),
        };
    }
    let (host, rest) = if let Some(v6) = value.strip_prefix('[') {
        let (inner, rest) = v6
            .split_once(']')
            .ok_or("an IPv6 address lacks its closing bracket")?;
        let rest = rest
            .strip_prefix(':')
            .ok_or("expected :port after the IPv6 address")?;
        (format!("[{inner}]"), rest)
    } else {
        let (host, rest) = value.split_once(':').ok_or("expected host:port[:weight]")?;
        (host.to_string(), rest)
    };
    if host.is_empty() || host == "[]" || host.contains(|c: char| c.is_whitespace()) {
        return Err("the host is empty or contains spaces".into());
    }
    let (port, weight) = match rest.split_once(':') {
        Some((port, weight)) => (port, parse_weight(weight)?),
        None => (rest, DEFAULT_WEIGHT),
    };
    let port_ok = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    if !port_ok {
        return Err(format!("the port {port:?} is not a number from 1 to 65535"));
    }
    Ok((format!("{host}:{port}"), weight))
}

/// What a proxy records under `proxies/<id>`: which memberships it serves. See the
/// [module docs](self#proxy-registrations-proxies).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Registration {
    /// The digest of the current membership the proxy serves (opaque, computed by the proxy; no
    /// whitespace, no `=`, not `-`).
    pub current: String,
    /// The digest of the next membership the proxy dual-writes to, `None` when it serves none.
    pub next: Option<String>,
    /// The etcd revision at which the proxy read its current membership.
    pub current_revision: i64,
    /// The etcd revision at which the proxy read its next membership (0 when there is none).
    pub next_revision: i64,
}

impl Registration {
    /// Why this registration cannot be written so that it reads back the same: a digest that is
    /// empty, `-` (for `current`), or contains whitespace or `=`.
    ///
    /// # Errors
    /// The reason, in words.
    pub fn check(&self) -> Result<(), String> {
        let digest_ok =
            |d: &str| !d.is_empty() && !d.contains(|c: char| c.is_whitespace() || c == '=');
        if !digest_ok(&self.current) || self.current == "-" {
            return Err(format!(
                "the current digest {:?} is empty, \"-\", or contains whitespace or '='",
                self.current
            ));
        }
        if let Some(next) = &self.next {
            if !digest_ok(next) || next == "-" {
                return Err(format!(
                    "the next digest {next:?} is empty, \"-\", or contains whitespace or '='"
                ));
            }
        }
        Ok(())
    }
}

/// The value of a proxy's registration key:
/// `current=<digest> next=<digest|-> current_revision=<n> next_revision=<n>`.
pub fn format_registration(registration: &Registration) -> String {
    format!(
        "current={} next={} current_revision={} next_revision={}",
        registration.current,
        registration.next.as_deref().unwrap_or("-"),
        registration.current_revision,
        registration.next_revision
    )
}

/// Reads a proxy's registration value (unknown fields ignored, any order, surrounding whitespace ignored).
///
/// # Errors
/// A [`MalformedValue`] (with `key`) when the value is not UTF-8, a token is not `field=value`, a field
/// is missing or given twice, a digest is empty, or a revision is not a number.
pub fn parse_registration(key: &[u8], value: &[u8]) -> Result<Registration, MalformedValue> {
    let malformed = |reason: String| MalformedValue {
        key: String::from_utf8_lossy(key).into_owned(),
        value: String::from_utf8_lossy(value).into_owned(),
        reason,
    };
    let text =
        std::str::from_utf8(value).map_err(|_| malformed("the value is not UTF-8".into()))?;
    let (mut current, mut next, mut current_revision, mut next_revision) = (None, None, None, None);
    for token in text.split_whitespace() {
        let (field, v) = token
            .split_once('=')
            .ok_or_else(|| malformed(format!("{token:?} is not field=value")))?;
        let slot = match field {
            "current" => &mut current,
            "next" => &mut next,
            "current_revision" => &mut current_revision,
            "next_revision" => &mut next_revision,
            _ => continue,
        };
        if slot.replace(v).is_some() {
            return Err(malformed(format!("the field {field} is given twice")));
        }
    }
    fn field<'v>(
        slot: Option<&'v str>,
        name: &str,
        malformed: &impl Fn(String) -> MalformedValue,
    ) -> Result<&'v str, MalformedValue> {
        slot.filter(|v| !v.is_empty())
            .ok_or_else(|| malformed(format!("the field {name} is missing or empty")))
    }
    let revision = |slot: Option<&str>, name: &str| {
        let v = field(slot, name, &malformed)?;
        v.parse::<i64>()
            .ok()
            .filter(|r| *r >= 0 && v.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| malformed(format!("{name}={v} is not a revision (a whole number)")))
    };
    let current = field(current, "current", &malformed)?;
    if current == "-" {
        return Err(malformed(
            "current=- (a proxy always serves a current membership)".into(),
        ));
    }
    let next = field(next, "next", &malformed)?;
    Ok(Registration {
        current: current.to_owned(),
        next: (next != "-").then(|| next.to_owned()),
        current_revision: revision(current_revision, "current_revision")?,
        next_revision: revision(next_revision, "next_revision")?,
    })
}

fn parse_weight(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        // twemproxy reads weights into an int; keep to what it could read.
        Ok(w) if w >= 1 && w <= i32::MAX as u32 && text.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(w)
        }
        _ => Err(format!(
            "the weight {text:?} is not a whole number from 1 to {}",
            i32::MAX
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_with_and_without_weights() {
        assert_eq!(
            parse_value("10.0.0.1:11211"),
            Ok(("10.0.0.1:11211".into(), 1))
        );
        assert_eq!(
            parse_value("cache-a.local:11212:3\n"),
            Ok(("cache-a.local:11212".into(), 3))
        );
        assert_eq!(parse_value("[::1]:11211:2"), Ok(("[::1]:11211".into(), 2)));
        assert_eq!(parse_value("/run/mc.sock"), Ok(("/run/mc.sock".into(), 1)));
        assert_eq!(
            parse_value("/run/mc.sock:4"),
            Ok(("/run/mc.sock".into(), 4))
        );
    }

    #[test]
    fn malformed_values_say_why() {
        for bad in [
            "",
            "   ",
            "host",
            "host:",
            ":11211",
            "host:0",
            "host:65536",
            "host:port",
            "host:11211:0",
            "host:11211:-1",
            "host:11211:+2",
            "host:11211:2:3",
            "host:11211:99999999999",
            "ho st:11211",
            "[::1:11211",
            "[::1]11211",
            "[]:11211",
            "::1:11211",
        ] {
            assert!(parse_value(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_name_their_servers() {
        let keys = PoolKeys::new(DEFAULT_PREFIX, "alpha");
        assert_eq!(keys.servers_prefix(), "/shardring/alpha/servers/");
        for without_slash in ["/shardring", "none"] {
            let keys = PoolKeys::new(without_slash, "alpha");
            assert_eq!(
                keys.servers_prefix(),
                format!("{without_slash}/alpha/servers/")
            );
        }
        assert_eq!(
            keys.server_key("cache-a"),
            "/shardring/alpha/servers/cache-a"
        );
        assert_eq!(
            keys.name_of("/shardring/alpha/servers/cache-a"),
            Some("cache-a")
        );
        assert_eq!(keys.name_of("/shardring/alpha/servers/"), None);
        assert_eq!(keys.name_of("/shardring/beta/servers/x"), None);
        let m = keys
            .parse(
                b"/shardring/alpha/servers/10.0.0.1:11211",
                b"10.0.0.1:11211",
            )
            .unwrap();
        assert!(!m.is_named());
        assert_eq!(format_value(&m), "10.0.0.1:11211");
        let m = keys
            .parse(b"/shardring/alpha/servers/cache-b", b"10.0.0.2:11211:2")
            .unwrap();
        assert!(m.is_named());
        assert_eq!(format_value(&m), "10.0.0.2:11211:2");
        let bad = keys
            .parse(b"/shardring/alpha/servers/c", b"nope")
            .unwrap_err();
        assert_eq!(bad.key, "/shardring/alpha/servers/c");
        assert!(keys.parse(b"/shardring/alpha/servers/c", &[0xff]).is_err());
    }

    #[test]
    fn a_pools_prefixes_never_match_another_pools_keys() {
        let a = PoolKeys::new("/shardring", "a");
        let ab = PoolKeys::new(DEFAULT_PREFIX, "ab");
        assert_eq!(a.pool_prefix(), "/shardring/a/");
        assert_eq!(a.next_prefix(), "/shardring/a/next/");
        assert_eq!(a.proxies_prefix(), "/shardring/a/proxies/");
        assert_eq!(a.next_key("c-1"), "/shardring/a/next/c-1");
        assert_eq!(a.proxy_key("p1"), "/shardring/a/proxies/p1");
        for key in [ab.server_key("x"), ab.next_key("x"), ab.proxy_key("x")] {
            assert!(!key.starts_with(a.pool_prefix()), "{key}");
            assert!(!key.starts_with(a.servers_prefix()), "{key}");
            assert_eq!(a.member_of(&key), None, "{key}");
            assert_eq!(a.proxy_id_of(&key), None, "{key}");
        }
        assert_eq!(
            a.member_of("/shardring/a/servers/x"),
            Some((MemberSet::Current, "x"))
        );
        assert_eq!(
            a.member_of("/shardring/a/next/x"),
            Some((MemberSet::Next, "x"))
        );
        assert_eq!(a.member_of("/shardring/a/next/"), None);
        assert_eq!(a.member_of("/shardring/a/proxies/p"), None);
        assert_eq!(a.proxy_id_of("/shardring/a/proxies/p"), Some("p"));
        let m = a
            .parse_next(b"/shardring/a/next/c", b"10.0.0.1:11211:2")
            .unwrap();
        assert_eq!((m.name(), m.weight()), ("c", 2));
        assert!(a
            .parse_next(b"/shardring/a/servers/c", b"10.0.0.1:11211")
            .is_err());
        assert!(a.parse(b"/shardring/a/next/c", b"10.0.0.1:11211").is_err());
    }

    #[test]
    fn registrations_round_trip_and_ignore_unknown_fields() {
        let r = Registration {
            current: "ab12".into(),
            next: Some("cd34".into()),
            current_revision: 7,
            next_revision: 9,
        };
        let text = format_registration(&r);
        assert_eq!(
            text,
            "current=ab12 next=cd34 current_revision=7 next_revision=9"
        );
        assert_eq!(parse_registration(b"k", text.as_bytes()), Ok(r.clone()));
        let none = Registration {
            next: None,
            next_revision: 0,
            ..r
        };
        assert_eq!(
            format_registration(&none),
            "current=ab12 next=- current_revision=7 next_revision=0"
        );
        assert_eq!(
            parse_registration(
                b"k",
                b" next_revision=0 future=yes current_revision=7 next=- current=ab12\n"
            ),
            Ok(none)
        );
    }

    #[test]
    fn malformed_registrations_say_why() {
        for bad in [
            "",
            "current=a next=- current_revision=1",
            "current=a next=- current_revision=x next_revision=0",
            "current=a next=- current_revision=-1 next_revision=0",
            "current=a next=- current_revision=+1 next_revision=0",
            "current= next=- current_revision=1 next_revision=0",
            "current=- next=- current_revision=1 next_revision=0",
            "current=a next= current_revision=1 next_revision=0",
            "current=a next=- current_revision=1 next_revision=0 stray",
            "current=a current=b next=- current_revision=1 next_revision=0",
        ] {
            let err = parse_registration(b"/p/a/proxies/x", bad.as_bytes()).unwrap_err();
            assert_eq!(err.key, "/p/a/proxies/x");
            assert_eq!(err.value, bad);
        }
        assert!(parse_registration(b"k", &[0xff]).is_err());
        let spaced = Registration {
            current: "a b".into(),
            ..Registration::default()
        };
        assert!(spaced.check().is_err());
        assert!(Registration::default().check().is_err());
        let ok = Registration {
            current: "a".into(),
            next: Some("b".into()),
            ..Registration::default()
        };
        assert!(ok.check().is_ok());
    }

    proptest::proptest! {
        #[test]
        fn values_round_trip(host in "[a-z][a-z0-9.-]{0,20}", port in 1u16.., weight in 1u32..1000) {
            let member = Member::new("m", format!("{host}:{port}"), weight).unwrap();
            let (addr, w) = parse_value(&format_value(&member)).unwrap();
            proptest::prop_assert_eq!((addr.as_str(), w), (member.addr(), weight));
        }

        #[test]
        fn any_value_parses_or_is_refused_without_panicking(value in ".{0,40}") {
            let _ = parse_value(&value);
            let _ = parse_registration(b"k", value.as_bytes());
        }

        #[test]
        fn checked_registrations_round_trip(
            current in "[0-9a-f]{1,16}",
            next in proptest::option::of("[0-9a-z_.:-]{2,16}"),
            current_revision in 0i64..,
            next_revision in 0i64..,
        ) {
            let r = Registration { current, next, current_revision, next_revision };
            proptest::prop_assert!(r.check().is_ok());
            proptest::prop_assert_eq!(parse_registration(b"k", format_registration(&r).as_bytes()), Ok(r));
        }
    }
}
