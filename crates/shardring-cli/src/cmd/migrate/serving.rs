//! What a proxy serves, as `shardring migrate` compares it with what it wants at each step: the
//! digests of its current and next membership, and, where a proxy's stats show them, what they are
//! digests of, so that a proxy that lags is told apart from one that serves something else.

use shardring_config::PoolConfig;

/// The placements a proxy serves, as digests.
#[derive(Debug, Clone, Default)]
pub(super) struct Serving {
    /// The current membership's.
    pub current: String,
    /// The next membership's (the current one's when it has none).
    pub next: String,
    /// What `current` is the digest of (`PlacementSpec::canonical_text`: the servers and rules),
    /// when known: a proxy's stats show it; etcd registrations carry only the digests.
    pub current_text: Option<String>,
    /// What `next` is the digest of, when known.
    pub next_text: Option<String>,
}

impl Serving {
    /// What `pool` serves as current now and `next` next, with their texts.
    pub fn of(current: &PoolConfig, next: &PoolConfig) -> Serving {
        let (c, n) = (current.membership(), next.membership());
        Serving {
            current: c.digest(),
            next: n.digest(),
            current_text: Some(c.canonical_text()),
            next_text: Some(n.canonical_text()),
        }
    }

    /// Whether both digests are `wanted`'s: the same placements, whatever the texts' spelling.
    pub fn serves(&self, wanted: &Serving) -> bool {
        self.current == wanted.current && self.next == wanted.next
    }

    /// Why this is not `wanted`, per membership: which of the migration's placements it serves
    /// instead (`known`: digest and what to call it), else the servers and rules that differ when
    /// both texts are known, else that the placement is unknown.
    pub fn lag(&self, wanted: &Serving, known: &[(&str, &str)]) -> String {
        let mut out = Vec::new();
        for (what, have, want, have_text, want_text) in [
            (
                "current",
                &self.current,
                &wanted.current,
                &self.current_text,
                &wanted.current_text,
            ),
            (
                "next",
                &self.next,
                &wanted.next,
                &self.next_text,
                &wanted.next_text,
            ),
        ] {
            if have == want {
                continue;
            }
            let why = if let Some((_, name)) = known.iter().find(|(d, _)| d == have) {
                format!("the {name} membership")
            } else if let (Some(h), Some(w)) = (have_text, want_text) {
                let diff = shardring_config::placement_differences(w, h);
                format!(
                    "a placement that differs from the wanted one: {}",
                    diff.join(", ")
                )
            } else {
                "a placement this migration does not know (its servers are not reported here)"
                    .to_owned()
            };
            let hint = if what == "next"
                && want_text
                    .as_deref()
                    .is_some_and(|t| t.ends_with("redis-cluster\n"))
            {
                " (a proxy dual-writes to a Redis Cluster, and says so, only once it has read the \
                 cluster's slot map from the seeds: can it reach them?)"
            } else {
                ""
            };
            out.push(format!("its {what} membership ({have}) is {why}{hint}"));
        }
        out.join("; ")
    }
}

impl std::fmt::Display for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "current {} next {}", self.current, self.next)
    }
}
