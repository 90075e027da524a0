//! The migration without etcd, in the proxies' YAML files: the change they describe (the pool now in
//! the proxies' files, next in the `--to` file), the cut-over (the new servers written into the
//! proxies' files, the old ones into the `--to` file with the cut-over [`Mark`]), and the end of
//! the change (the `--to` file given the new servers, its mark removed).
//!
//! Only one pool's `servers:` list changes in each file: everything else of it (its listen line,
//! comments, other pools) is kept byte for byte, and the file is replaced atomically (written beside
//! it, then renamed over it), so a proxy reloading at any moment reads the old file or the new one,
//! never half of one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use shardring::compat::twemproxy::TwemproxyServer;
use shardring_config::{PoolConfig, ProxyConfig};

use super::mark::{Mark, Step};
use super::plan::Change;
use super::Stage;

/// The change the files describe for `now`'s pool (`now`: the first of `configs`), and whether it
/// was already cut over. Only the placement comes from the `--to` file (`to`): its servers, hash,
/// hash tag and distribution.
///
/// After a cut-over the files read "now the new servers, next the old ones", which is also what a
/// change back would look like: the `--to` file's [`Mark`] tells them apart. A mark that matches
/// the files (the `--to` file lists the servers it was cut over from, each proxy's file those or
/// the ones it was cut over to) makes the change the one it records, resumed; one that does not is
/// refused before anything is touched.
///
/// # Errors
/// When a file cannot be read, the proxies' files disagree (no mark), the mark does not match the
/// files, or the change is not one to migrate ([`Change::new`]).
pub(super) fn change(
    configs: &[PathBuf],
    to: &Path,
    now: PoolConfig,
    all_keys: bool,
) -> Result<(Change, Stage)> {
    let pool = now.name.clone();
    let text = std::fs::read_to_string(to).with_context(|| format!("reading {}", to.display()))?;
    let target = super::pool_in(to, Some(&pool))?;
    let mut next = now.clone();
    (next.servers, next.hash, next.hash_tag, next.distribution) = (
        target.servers.clone(),
        target.hash,
        target.hash_tag,
        target.distribution,
    );
    if let Some(redis) = next.redis_mut() {
        // The kind too: a `--to` file that marks the pool a Redis Cluster moves it onto one.
        redis.cluster = target.cluster().cloned();
    }
    let mark = Mark::find(&text, &pool).with_context(|| {
        format!(
            "{}: its cut-over mark of pool {pool} (left by a migration stopped after its \
             cut-over) cannot be read; nothing was changed",
            to.display()
        )
    })?;
    // `base` with `servers`, a Redis Cluster's seeds when `cluster`.
    let with = |base: &PoolConfig, servers: &[TwemproxyServer], cluster: bool| {
        let mut p = base.clone();
        p.set_servers(servers.to_vec(), cluster);
        p
    };
    let digest = |p: &PoolConfig| p.membership().digest();
    let mark = match mark {
        Some(m) if m.step == Step::Deleting => {
            // A finished change whose moved keys are still to be deleted: the run, while the
            // files still describe that change's end (nothing planned since).
            let old = with(&now, &m.servers, m.cluster);
            let ends_there = m.is_change(&old, &next)
                && configs.iter().all(|path| {
                    super::pool_in(path, Some(&pool)).is_ok_and(|p| digest(&p) == m.to)
                });
            if ends_there {
                eprintln!("{}", m.resuming_deletion(&format!("in {}", to.display())));
                return Ok((Change::new(old, next, all_keys)?, Stage::Deleting));
            }
            eprintln!(
                "{}",
                m.giving_up_deletion(&format!(
                    "a new change is planned in {} (its cut-over drops the record)",
                    to.display()
                ))
            );
            None
        }
        other => other,
    };
    let Some(mark) = mark else {
        super::agree(configs, &now)?;
        return Ok((Change::new(now, next, all_keys)?, Stage::Fresh));
    };
    // The change the mark records: from the `--to` file's servers, to the mark's.
    let (old, new) = (
        with(&now, &target.servers, target.cluster().is_some()),
        with(&next, &mark.servers, mark.cluster),
    );
    let mut problems = Vec::new();
    if digest(&old) != mark.from {
        problems.push(format!(
            "{} lists servers placed as {}, not {} (the placement cut over from)",
            to.display(),
            digest(&old),
            mark.from
        ));
    }
    if digest(&new) != mark.to {
        problems.push(format!(
            "the mark's servers are placed as {}, not {}",
            digest(&new),
            mark.to
        ));
    }
    for path in configs {
        let p = super::pool_in(path, Some(&pool))?;
        let d = digest(&p);
        let (was, is) = (old.cluster().is_some(), new.cluster().is_some());
        if d != digest(&with(&p, &old.servers, was)) && d != digest(&with(&p, &new.servers, is)) {
            problems.push(format!(
                "{} places the pool as {d}, neither the placement cut over from nor the one cut \
                 over to",
                path.display()
            ));
        }
    }
    if !problems.is_empty() {
        bail!(
            "{}: pool {pool} was cut over from {} to {} (its mark says), but the files no longer \
             match that change: {}; nothing was changed. Finish that migration with the files it \
             left, or, if they were changed on purpose since, remove the mark line from {} first",
            to.display(),
            mark.from,
            mark.to,
            problems.join("; "),
            to.display()
        );
    }
    eprintln!(
        "shardring: pool {pool} was cut over in the files (from {} to {}, marked in {}) and its \
         change not finished: resuming it (every proxy must serve the new membership; then the old \
         one is dropped)",
        mark.from,
        mark.to,
        to.display()
    );
    Ok((Change::new(old, new, all_keys)?, Stage::CutOver))
}

/// The cut-over: the `--to` file gets the old servers (the pool's next ones from now on: proxies
/// that switched keep writing to them while others have not) and the [`Mark`] that says so, then
/// each proxy's file the new servers. Every file's new text is made and read back before any file
/// is written; a file that already has it is left alone (a resumed change writes again only what
/// a run stopped between the writes did not).
///
/// The `--to` file goes first: until the proxies' files are written, it holds the only record of
/// the new servers (in its mark), and a proxy that starts or reloads meanwhile takes them from there
/// ([`Mark::apply`]): both files still list the old servers.
///
/// # Errors
/// When a file cannot be read, rewritten or replaced.
pub(super) fn cut_over(configs: &[PathBuf], to: &Path, change: &Change) -> Result<()> {
    let pool = &change.now.name;
    let mark = Mark::cut_over(change);
    let mut writes = vec![(to.to_path_buf(), {
        let text = rewritten(to, pool, &change.now)?;
        mark.put(&text)
    })];
    for path in configs {
        writes.push((path.clone(), rewritten(path, pool, &change.next)?));
    }
    for (path, text) in &writes {
        if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
            install(path, text)?;
        }
    }
    let names: Vec<String> = configs.iter().map(|p| p.display().to_string()).collect();
    eprintln!(
        "shardring: cut over in the files: {} serve placement {} (the new servers), {} has the old \
         ones ({}) as next, and the mark",
        names.join(", "),
        mark.to,
        to.display(),
        mark.from
    );
    Ok(())
}

/// The end of the change: the `--to` file gets the new servers (the proxies' next membership is
/// their current one: no more dual writes) and loses the cut-over mark, in one replacement; with
/// `delete`, a mark of the deletion still to do takes its place.
///
/// # Errors
/// When the file cannot be read, rewritten or replaced.
pub(super) fn drop_next(to: &Path, change: &Change, delete: bool) -> Result<()> {
    let pool = &change.now.name;
    let text = rewritten(to, pool, &change.next)?;
    let text = if delete {
        Mark::deleting(change).put(&text)
    } else {
        Mark::without(&text, pool)
    };
    install(to, &text)
}

/// The moved keys are deleted: the `--to` file loses the mark of the deletion.
///
/// # Errors
/// When the file cannot be read or replaced.
pub(super) fn deleted(to: &Path, pool: &str) -> Result<()> {
    let text = std::fs::read_to_string(to).with_context(|| format!("reading {}", to.display()))?;
    let without = Mark::without(&text, pool);
    if without != text {
        install(to, &without)?;
    }
    Ok(())
}

/// The file at `path` with pool `pool`'s servers replaced by `with`'s, and its line marked as a
/// Redis Cluster's exactly when `with` is one (`# shardring: redis-cluster`): a change onto a
/// cluster makes the proxies' files say so at the cut-over.
fn rewritten(path: &Path, pool: &str, with: &PoolConfig) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let text = replace_servers(&text, pool, &with.servers)
        .with_context(|| format!("rewriting {}", path.display()))?;
    let cluster = with.cluster().is_some();
    let marked = shardring_config::with_cluster_mark(&text, pool, cluster)
        .with_context(|| format!("{}: no line starts pool {pool:?}", path.display()))?;
    let read = ProxyConfig::from_yaml(&marked).map_err(|e| {
        anyhow::anyhow!(
            "{}: the rewritten file does not read back: {e}",
            path.display()
        )
    })?;
    if read
        .pools
        .iter()
        .find(|p| p.name == pool)
        .map(|p| p.cluster().is_some())
        != Some(cluster)
    {
        bail!(
            "{}: the rewritten file does not read back as the pool's kind",
            path.display()
        );
    }
    Ok(marked)
}

/// `text` with pool `pool`'s `servers:` items replaced by `servers` (same indentation as the old
/// items). Checked by reading the result back: the pool must have exactly `servers`.
///
/// # Errors
/// When the file has no such pool, or no `servers:` list under it in block style, or the result
/// does not read back as expected.
fn replace_servers(text: &str, pool: &str, servers: &[TwemproxyServer]) -> Result<String> {
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
fn install(path: &Path, text: &str) -> Result<()> {
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
