//! The etcd flags (`--etcd`, `--etcd-prefix`, `--etcd-fallback`, `--allow-empty`): take every pool's
//! servers from etcd instead of the file ([`EtcdMembership`]).

use shardring_etcd::layout::{normalise_prefix, DEFAULT_PREFIX};

use super::EtcdMembership;

/// Where the pools' servers come from. [`Default`]: none given, the file's servers.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct MembershipFlags {
    /// Take every pool's servers from etcd (comma-separated endpoints) instead of the file; the file
    /// still gives each pool's listen address and settings. See `shardring members`.
    #[arg(long, value_name = "URL[,URL...]")]
    pub etcd: Option<String>,
    /// The key prefix the pools' keys live under. Its `--help` text is given whole, since it names
    /// keys with `<...>` placeholders that would read as HTML here.
    #[arg(
        long,
        value_name = "P",
        default_value = DEFAULT_PREFIX,
        requires = "etcd",
        value_parser = parse_prefix,
        help = "The etcd key prefix: a pool's servers are <P><pool>/servers/<name> = \
                host:port[:weight] (a trailing / is added when missing)"
    )]
    pub etcd_prefix: String,
    /// When etcd cannot be read at start, start from the file's servers (and keep retrying).
    #[arg(long, requires = "etcd")]
    pub etcd_fallback: bool,
    /// Apply a pool with no servers in etcd instead of refusing it (by default the servers are kept).
    #[arg(long, requires = "etcd")]
    pub allow_empty: bool,
}

impl Default for MembershipFlags {
    fn default() -> MembershipFlags {
        MembershipFlags {
            etcd: None,
            etcd_prefix: DEFAULT_PREFIX.to_owned(),
            etcd_fallback: false,
            allow_empty: false,
        }
    }
}

impl MembershipFlags {
    /// The membership the flags ask for: `None` without `--etcd` (the file's servers).
    pub fn membership(&self) -> Option<EtcdMembership> {
        self.etcd.as_ref().map(|urls| {
            EtcdMembership::new(urls.split(',').map(str::trim))
                .prefix(self.etcd_prefix.as_str())
                .fallback(self.etcd_fallback)
                .allow_empty(self.allow_empty)
        })
    }
}

/// `--etcd-prefix` (and the `shardring members` and `migrate` flag of the same name): a trailing `/`
/// added when missing, so a pool's name never runs into the prefix.
///
/// # Errors
/// An empty prefix.
pub fn parse_prefix(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("an empty prefix; the default is /shardring/".into());
    }
    Ok(normalise_prefix(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_prefix_gets_its_trailing_slash() {
        assert_eq!(parse_prefix("/shardring/").unwrap(), "/shardring/");
        assert_eq!(parse_prefix("none").unwrap(), "none/");
        assert!(parse_prefix("").is_err());
    }
}
