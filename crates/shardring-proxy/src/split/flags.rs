//! The split keys' flags (`--hot-key-split`, `--hot-key-split-keys`): how many servers hold a split
//! key, and the file that says which keys are split and in which phase, for each pool.

use std::path::PathBuf;

use crate::config::{ConfigErrors, PoolConfig, SplitConfig};
use crate::flags::per_pool::{
    for_pool, named, own, parse_pool_number, parse_pool_path, refuse_unknown,
};
use crate::flags::ApplyToPools;

/// The split keys. [`Default`]: none given, no key split.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
#[command(next_help_heading = "Split keys")]
pub struct SplitFlags {
    /// Keep each key that --hot-key-split-keys lists on S servers (its owner and the ring's next
    /// distinct servers; the file may give a key its own number) and spread its reads over them:
    /// one hot key then loads S servers, not one. Writes go to the owner, then delete the other
    /// copies, which the next reads fill from the owner (with its flags and TTL, never over a newer
    /// write). memcached and redis pools (a redis key's reads spread for `GET`).
    #[arg(long, value_name = "[POOL=]S", requires = "hot_key_split_keys",
          value_parser = |t: &str| parse_pool_number(t, "a number of servers", 2, 64))]
    pub hot_key_split: Vec<(Option<String>, u64)>,
    /// The split keys: a file of lines `write KEY [N]` (writes keep the copies fresh, reads stay on
    /// the owner) or `read KEY [N]` (reads spread too), N the key's servers, `%XX` for a byte a key
    /// cannot show. Read again on every reload. Every proxy of the pool must list a key `write`
    /// before any lists it `read`, and `write` again before any leaves it out or changes its N
    /// (`shardring split` does this; the stats' split_digest says what each proxy serves).
    #[arg(long, value_name = "[POOL=]FILE", requires = "hot_key_split", value_parser = parse_pool_path)]
    pub hot_key_split_keys: Vec<(Option<String>, PathBuf)>,
}

impl ApplyToPools for SplitFlags {
    /// Every pool given both flags (for every pool, or naming it) reads its file.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for pool in pools.iter_mut() {
            pool.remedies.split = None;
            let copies = for_pool(&self.hot_key_split, &pool.name);
            let file = for_pool(&self.hot_key_split_keys, &pool.name);
            let (copies, file) = match (copies, file) {
                (Some(c), Some(f)) => (*c, f),
                (None, None) => continue,
                (Some(_), None) => {
                    errors.push(
                        &pool.name,
                        "--hot-key-split needs --hot-key-split-keys FILE for this pool".into(),
                    );
                    continue;
                }
                // A file given for every pool splits only the pools given a number of servers.
                (None, Some(_)) if own(&self.hot_key_split_keys, &pool.name).is_none() => continue,
                (None, Some(_)) => {
                    errors.push(
                        &pool.name,
                        "--hot-key-split-keys needs --hot-key-split S for this pool".into(),
                    );
                    continue;
                }
            };
            let text = match std::fs::read_to_string(file) {
                Ok(text) => text,
                Err(e) => {
                    errors.push(
                        &pool.name,
                        format!("--hot-key-split-keys {}: {e}", file.display()),
                    );
                    continue;
                }
            };
            match SplitConfig::parse(usize::try_from(copies).unwrap_or(usize::MAX), &text) {
                Ok(split) => pool.remedies.split = Some(split),
                Err(problems) => {
                    for p in problems {
                        errors.push(
                            &pool.name,
                            format!("--hot-key-split-keys {}: {p}", file.display()),
                        );
                    }
                }
            }
        }
        refuse_unknown(
            "--hot-key-split",
            named(&self.hot_key_split),
            pools,
            &mut errors,
        );
        refuse_unknown(
            "--hot-key-split-keys",
            named(&self.hot_key_split_keys),
            pools,
            &mut errors,
        );
        errors.into_result()
    }
}
