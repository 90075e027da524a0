//! The cut-over without etcd: the `servers:` list of one pool rewritten in the proxies' YAML files,
//! everything else of each file (its listen line, comments, other pools) kept byte for byte, and the
//! file replaced atomically (written beside it, then renamed over it), so a proxy reloading at any
//! moment reads the old file or the new one, never half of one.

use std::path::Path;

use anyhow::{bail, Context, Result};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring_config::ProxyConfig;

/// `text` with pool `pool`'s `servers:` items replaced by `servers` (same indentation as the old
/// items). Checked by reading the result back: the pool must have exactly `servers`.
///
/// # Errors
/// When the file has no such pool, or no `servers:` list under it in block style, or the result
/// does not read back as expected.
pub(super) fn replace_servers(
    text: &str,
    pool: &str,
    servers: &[TwemproxyServer],
) -> Result<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let is_content = |l: &str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    };
    let pool_line = lines
        .iter()
        .position(|l| {
            indent(l) == 0 && {
                let head = l.split('#').next().unwrap_or("").trim_end();
                let name = head.strip_suffix(':').unwrap_or("");
                name.trim_matches(|c| c == '"' || c == '\'') == pool
            }
        })
        .with_context(|| format!("no pool {pool:?} at the start of a line"))?;
    let pool_end = (pool_line + 1..lines.len())
        .find(|&i| is_content(lines[i]) && indent(lines[i]) == 0)
        .unwrap_or(lines.len());
    let servers_line = (pool_line + 1..pool_end)
        .find(|&i| lines[i].split('#').next().unwrap_or("").trim() == "servers:")
        .with_context(|| format!("pool {pool:?} has no `servers:` line (a block list)"))?;
    let key_indent = indent(lines[servers_line]);
    let mut end = servers_line + 1;
    let mut item_indent = None;
    while end < pool_end {
        let l = lines[end];
        if is_content(l) {
            if indent(l) < key_indent
                || (indent(l) == key_indent && !l.trim_start().starts_with('-'))
            {
                break;
            }
            if l.trim_start().starts_with('-') {
                item_indent.get_or_insert(indent(l));
            }
        }
        end += 1;
    }
    // Trailing blank or comment lines belong to what follows.
    while end > servers_line + 1 && !is_content(lines[end - 1]) {
        end -= 1;
    }
    let pad = " ".repeat(item_indent.unwrap_or(key_indent + 2));
    let newline = if lines[servers_line].ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let mut out = String::with_capacity(text.len());
    for l in &lines[..=servers_line] {
        out.push_str(l);
    }
    if !lines[servers_line].ends_with('\n') {
        out.push_str(newline);
    }
    for s in servers {
        out.push_str(&format!("{pad}- {s}{newline}"));
    }
    for l in &lines[end..] {
        out.push_str(l);
    }
    let read = ProxyConfig::from_yaml(&out)
        .map_err(|e| anyhow::anyhow!("the rewritten file does not read back: {e}"))?;
    match read.pools.iter().find(|p| p.name == pool) {
        Some(p) if p.servers == servers => Ok(out),
        _ => bail!("the rewritten file does not read back with the new servers"),
    }
}

/// Replaces the file at `path` with `text`: written to a file beside it (same directory, so the
/// rename is atomic), flushed, its permissions copied, then renamed over it.
///
/// # Errors
/// When the file cannot be written or renamed.
pub(super) fn install(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file", path.display()))?;
    let tmp = dir
        .unwrap_or_else(|| Path::new("."))
        .join(format!(".{}.shardring-migrate", name.to_string_lossy()));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("flushing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("replacing {} with {}", path.display(), tmp.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(s: &str) -> TwemproxyServer {
        let p = shardring_config::PoolConfig::new("p", "127.0.0.1:1", &[s]).unwrap();
        p.servers[0].clone()
    }

    const FILE: &str = "# the cache\nalpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1 b  # the second\n\n  # tuning\n  timeout: 400\nbeta:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11211:1\n";

    #[test]
    fn only_the_pools_server_items_change() {
        let new = [server("127.0.0.1:11213:2 c"), server("127.0.0.1:11211:1")];
        let out = replace_servers(FILE, "alpha", &new).unwrap();
        assert_eq!(
            out,
            "# the cache\nalpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  servers:\n   - 127.0.0.1:11213:2 c\n   - 127.0.0.1:11211:1\n\n  # tuning\n  timeout: 400\nbeta:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11211:1\n"
        );
        let beta = replace_servers(FILE, "beta", &new[..1]).unwrap();
        assert!(
            beta.ends_with("  servers:\n   - 127.0.0.1:11213:2 c\n"),
            "{beta}"
        );
        assert!(beta.contains("   - 127.0.0.1:11212:1 b  # the second\n"));
    }

    #[test]
    fn a_missing_pool_or_list_is_an_error_not_a_guess() {
        let new = [server("127.0.0.1:11213:1")];
        assert!(replace_servers(FILE, "gamma", &new).is_err());
        let flow = "alpha:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:11211:1]\n";
        assert!(replace_servers(flow, "alpha", &new).is_err());
    }

    #[test]
    fn install_replaces_the_file_whole() {
        let dir = std::env::temp_dir().join(format!("shardring-install-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nutcracker.yml");
        std::fs::write(&path, "old").unwrap();
        install(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no file left beside it"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
