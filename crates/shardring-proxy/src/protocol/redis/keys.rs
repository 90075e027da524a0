//! Where a command's keys are among its arguments: as the command table describes it ([`Keys`]), and as
//! found in one request ([`KeyArgs`]).

use super::parse_redis_int;
use super::request::Request;

/// Where a command's keys are among its arguments (the command name is argument 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No keys.
    None,
    /// Keys at `first`, `first + step`, … up to `last`; a negative `last` counts from the end (−1 is the
    /// last argument).
    Range {
        /// The first key's index.
        first: u8,
        /// The last key's index; negative from the end.
        last: i8,
        /// The distance between keys (2 for `MSET k v k v`).
        step: u8,
    },
    /// A count of keys at `at`, then that many keys (`EVAL script numkeys key…`, `ZUNION numkeys key…`).
    NumKeys {
        /// The count's index.
        at: u8,
    },
    /// A destination key at 1, a count at 2, then that many keys (`ZUNIONSTORE dest numkeys key…`).
    DestNumKeys,
    /// The first half of the arguments after `STREAMS` (`XREAD`; `XREADGROUP` when `group`, whose
    /// `GROUP g c` and `NOACK` may come before it).
    Streams {
        /// `XREADGROUP`'s options are allowed.
        group: bool,
    },
    /// The key at 1, and the argument after each `STORE` or `STOREDIST` (`SORT`, `GEORADIUS`).
    KeyAndStore,
}

/// Where a request's keys are among its arguments (their indexes).
///
/// Most commands' keys are evenly spaced (`GET k`: argument 1; `MSET k v k v`: every other one from 1), so
/// they are kept as a range, without allocating for each request; the rest are listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyArgs {
    /// `from`, `from + step`, … up to `to` (inclusive); none when `from > to`.
    Every {
        /// The first key's index.
        from: usize,
        /// The last index a key may be at.
        to: usize,
        /// The distance between keys (at least 1).
        step: usize,
    },
    /// These indexes, in request order.
    Listed(Vec<usize>),
}

impl KeyArgs {
    /// The keys' indexes, in request order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let (every, listed) = match *self {
            KeyArgs::Every { from, to, step } => (Some((from..=to).step_by(step.max(1))), &[][..]),
            KeyArgs::Listed(ref v) => (None, &v[..]),
        };
        every.into_iter().flatten().chain(listed.iter().copied())
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        match self {
            KeyArgs::Every { from, to, .. } => from > to,
            KeyArgs::Listed(v) => v.is_empty(),
        }
    }
}

fn eq_ignore_case(arg: &[u8], word: &[u8]) -> bool {
    arg.eq_ignore_ascii_case(word)
}

/// The keys of `req` where `keys` says they are: `Some(indexes)`, or `None` when the arguments that say where the keys
/// are are malformed (Redis then answers with an error of its own, without touching data).
pub(crate) fn find_keys(req: &Request, keys: Keys) -> Option<KeyArgs> {
    let argc = req.argc();
    match keys {
        Keys::None => Some(KeyArgs::Listed(Vec::new())),
        Keys::Range { first, last, step } => {
            let first = usize::from(first);
            let last = if last < 0 {
                argc.checked_sub(last.unsigned_abs() as usize)?
            } else {
                (last as usize).min(argc.saturating_sub(1))
            };
            if first > last {
                return Some(KeyArgs::Listed(Vec::new()));
            }
            if step == 2 && !(last - first + 1).is_multiple_of(2) {
                // `MSET k v k`: Redis answers `wrong number of arguments`; so does [`route`].
                return None;
            }
            Some(KeyArgs::Every {
                from: first,
                to: last,
                step: usize::from(step),
            })
        }
        // `at + 1` is at least 1, so `from - 1` is an empty range's end when there are no keys.
        Keys::NumKeys { at } => numkeys(req, usize::from(at)).map(|n| {
            let from = usize::from(at) + 1;
            KeyArgs::Every {
                from,
                to: from + n - 1,
                step: 1,
            }
        }),
        Keys::DestNumKeys => numkeys(req, 2).map(|n| {
            let mut keys = vec![1];
            keys.extend(3..3 + n);
            KeyArgs::Listed(keys)
        }),
        Keys::Streams { group } => {
            let mut i = 1;
            while i < argc {
                let a = req.arg(i)?;
                if eq_ignore_case(a, b"streams") {
                    let rest = argc - i - 1;
                    if rest == 0 || !rest.is_multiple_of(2) {
                        return None;
                    }
                    return Some(KeyArgs::Every {
                        from: i + 1,
                        to: i + rest / 2,
                        step: 1,
                    });
                }
                if eq_ignore_case(a, b"count") || eq_ignore_case(a, b"block") {
                    i += 2;
                } else if group && eq_ignore_case(a, b"group") {
                    i += 3;
                } else if group && eq_ignore_case(a, b"noack") {
                    i += 1;
                } else {
                    return None;
                }
            }
            None
        }
        Keys::KeyAndStore => {
            let mut keys = vec![1];
            let mut i = 2;
            while i + 1 < argc {
                let a = req.arg(i)?;
                if eq_ignore_case(a, b"store") || eq_ignore_case(a, b"storedist") {
                    keys.push(i + 1);
                    i += 1;
                }
                i += 1;
            }
            Some(KeyArgs::Listed(keys))
        }
    }
}

/// The count at `at` when it is a number of keys Redis would accept from the arguments there are.
fn numkeys(req: &Request, at: usize) -> Option<usize> {
    let n = parse_redis_int(req.arg(at)?)?;
    let n = usize::try_from(n).ok()?;
    (n < req.argc() - at).then_some(n)
}

/// Whether `XREAD`/`XREADGROUP` asks to block (an option before `STREAMS`).
pub(crate) fn blocks(req: &Request) -> bool {
    req.arg_slices()
        .skip(1)
        .take_while(|a| !eq_ignore_case(a, b"streams"))
        .any(|a| eq_ignore_case(a, b"block"))
}

#[cfg(test)]
mod tests {
    use super::KeyArgs;

    #[test]
    fn key_args_list_their_indexes_in_order_and_an_empty_range_lists_none() {
        let every = |from, to, step| KeyArgs::Every { from, to, step };
        assert_eq!(every(1, 1, 1).iter().collect::<Vec<_>>(), [1]);
        assert_eq!(every(1, 6, 2).iter().collect::<Vec<_>>(), [1, 3, 5]);
        assert!(every(3, 2, 1).is_empty());
        assert_eq!(every(3, 2, 1).iter().count(), 0);
        let listed = KeyArgs::Listed(vec![1, 3, 4]);
        assert_eq!(listed.iter().collect::<Vec<_>>(), [1, 3, 4]);
        assert!(!listed.is_empty());
        assert!(KeyArgs::Listed(Vec::new()).is_empty());
    }
}
