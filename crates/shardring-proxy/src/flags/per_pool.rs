//! The per-pool forms of a flag: `--flag VALUE` for every pool and `--flag POOL=VALUE` for one (repeat
//! the flag for several pools; a pool's own value wins over the plain one, and a later flag over an
//! earlier one), and the switches `--flag` (every pool) and `--flag=POOL`. A group keeps such a flag
//! as given, `Vec<(Option<String>, T)>` (`None`: every pool) or `Vec<Option<String>>`, and looks each
//! pool up here when it applies itself.

use std::path::PathBuf;

use crate::config::{ConfigErrors, PoolConfig};

/// `POOL=VALUE` → (the pool, the value); anything else is a value for every pool. A pool's name has
/// no `/`, so a path with `=` in it (`/etc/tls/a=b.pem`) stays a path.
pub(crate) fn pool_prefixed(text: &str) -> (Option<String>, &str) {
    match text.split_once('=') {
        Some((pool, value)) if !pool.is_empty() && !pool.contains('/') => {
            (Some(pool.to_owned()), value)
        }
        _ => (None, text),
    }
}

/// `PATH` or `POOL=PATH` → (pool, path).
pub(crate) fn parse_pool_path(text: &str) -> Result<(Option<String>, PathBuf), String> {
    let (pool, path) = pool_prefixed(text);
    if path.is_empty() {
        return Err(format!("no path in {text:?} (PATH or POOL=PATH)"));
    }
    Ok((pool, PathBuf::from(path)))
}

/// `N` or `POOL=N` → (pool, N), N a whole number from `min` to `max` (`what` names it in the error).
pub(crate) fn parse_pool_number(
    text: &str,
    what: &str,
    min: u64,
    max: u64,
) -> Result<(Option<String>, u64), String> {
    let (pool, number) = pool_prefixed(text);
    match number.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok((pool, n)),
        _ => Err(format!(
            "not {what} from {min} to {max}: {text:?} (N or POOL=N)"
        )),
    }
}

/// A switch's value: empty (given bare) → every pool, else the pool's name.
pub(crate) fn parse_pool_switch(text: &str) -> Result<Option<String>, String> {
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// The value `pool`'s own flags (`POOL=VALUE`) give it: the last one.
pub(crate) fn own<'a, T>(values: &'a [(Option<String>, T)], pool: &str) -> Option<&'a T> {
    values
        .iter()
        .rev()
        .find(|(p, _)| p.as_deref() == Some(pool))
        .map(|(_, v)| v)
}

/// The value a per-pool flag gives `pool`: its own (the last `POOL=` one), else the last plain one.
pub(crate) fn for_pool<'a, T>(values: &'a [(Option<String>, T)], pool: &str) -> Option<&'a T> {
    own(values, pool).or_else(|| {
        values
            .iter()
            .rev()
            .find(|(p, _)| p.is_none())
            .map(|(_, v)| v)
    })
}

/// Whether a switch given as `--flag` (every pool) or `--flag=POOL` is on for `pool`.
pub(crate) fn switched_on(switches: &[Option<String>], pool: &str) -> bool {
    switches
        .iter()
        .any(|p| p.as_deref().is_none_or(|p| p == pool))
}

/// The pools a per-pool flag names.
pub(crate) fn named<T>(values: &[(Option<String>, T)]) -> impl Iterator<Item = &str> {
    values.iter().filter_map(|(p, _)| p.as_deref())
}

/// The pools a switch names.
pub(crate) fn switches_named(switches: &[Option<String>]) -> impl Iterator<Item = &str> {
    switches.iter().flatten().map(String::as_str)
}

/// Refuses, as `flag`'s problems, each of `names` that is not a pool of `pools`.
pub(crate) fn refuse_unknown<'a>(
    flag: &str,
    names: impl IntoIterator<Item = &'a str>,
    pools: &[PoolConfig],
    errors: &mut ConfigErrors,
) {
    for name in names {
        if !pools.iter().any(|p| p.name == name) {
            errors.push("", format!("{flag} names no pool of the file: {name:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pools_own_value_wins_over_the_plain_one_and_a_later_flag_over_an_earlier_one() {
        let values = [
            (None, 1),
            (Some("a".to_owned()), 2),
            (None, 3),
            (Some("a".to_owned()), 4),
        ];
        assert_eq!(for_pool(&values, "a"), Some(&4));
        assert_eq!(for_pool(&values, "b"), Some(&3));
        assert_eq!(own(&values, "b"), None);
        assert_eq!(for_pool::<u8>(&[], "a"), None);
    }

    #[test]
    fn a_path_with_an_equals_sign_is_a_path_not_a_pool() {
        assert_eq!(
            parse_pool_path("/etc/tls/a=b.pem"),
            Ok((None, "/etc/tls/a=b.pem".into()))
        );
        assert_eq!(
            parse_pool_path("mc=/etc/tls/mc.key"),
            Ok((Some("mc".into()), "/etc/tls/mc.key".into()))
        );
        assert!(parse_pool_path("mc=").is_err());
    }

    #[test]
    fn a_number_names_a_pool_or_every_pool() {
        let parse = |t| parse_pool_number(t, "a count", 1, 10);
        assert_eq!(parse("3"), Ok((None, 3)));
        assert_eq!(parse("mc=10"), Ok((Some("mc".into()), 10)));
        for bad in ["0", "11", "x", "mc=", "mc=-1", ""] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bare_switch_is_every_pools() {
        let switches = [None, Some("rd".to_owned())];
        assert!(switched_on(&switches[..1], "mc"));
        assert!(!switched_on(&switches[1..], "mc"));
        assert!(switched_on(&switches[1..], "rd"));
        assert_eq!(switches_named(&switches).collect::<Vec<_>>(), ["rd"]);
    }
}
