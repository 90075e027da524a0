//! Inline commands (`PING\r\n`, what people type into `telnet`): split into arguments exactly as Redis's
//! `sdssplitargs` does, so a quoted or escaped argument means what it means to Redis.

/// Whether C's `isspace` holds: the separators skipped between arguments.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline line (without its line end) into arguments; `None` for unbalanced quotes, which
/// Redis answers `Protocol error: unbalanced quotes in request`.
///
/// Redis's rules: arguments are separated by white space; `"…"` takes the escapes `\n \r \t \b \a \\ \"`
/// and `\xHH`, any other escaped byte standing for itself; `'…'` takes only `\'`; a quote may start in
/// the middle of an argument (`a"b c"` is `ab c`), and a closing quote must be followed by white space or
/// the end of the line. Redis reads the line as a C string, so a NUL byte ends it.
pub(crate) fn split_inline(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let line = match memchr::memchr(0, line) {
        Some(nul) => &line[..nul],
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let c = at(p);
            if in_double {
                if c == b'\\' && at(p + 1) == b'x' {
                    if let (Some(h), Some(l)) = (hex(at(p + 2)), hex(at(p + 3))) {
                        current.push(h * 16 + l);
                        p += 4;
                        continue;
                    }
                }
                if c == b'\\' && at(p + 1) != 0 {
                    current.push(match at(p + 1) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    p += 2;
                    continue;
                }
                if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                }
                if c == 0 {
                    return None;
                }
                current.push(c);
                p += 1;
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    current.push(b'\'');
                    p += 2;
                    continue;
                }
                if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                }
                if c == 0 {
                    return None;
                }
                current.push(c);
                p += 1;
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => break,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => current.push(c),
                }
                p += 1;
            }
        }
        args.push(current);
    }
}

#[cfg(test)]
mod tests {
    use super::split_inline;

    fn split(line: &str) -> Option<Vec<String>> {
        split_inline(line.as_bytes()).map(|v| {
            v.into_iter()
                .map(|a| String::from_utf8_lossy(&a).into_owned())
                .collect()
        })
    }

    #[test]
    fn inline_lines_split_as_redis_splits_them() {
        assert_eq!(split("PING"), Some(vec!["PING".into()]));
        assert_eq!(
            split("  set  k   v "),
            Some(vec!["set".into(), "k".into(), "v".into()])
        );
        assert_eq!(split(""), Some(vec![]));
        assert_eq!(split(" \t "), Some(vec![]));
        assert_eq!(
            split(r#"set k "hello world""#),
            Some(vec!["set".into(), "k".into(), "hello world".into()])
        );
        assert_eq!(
            split(r#"echo "a\x41\n\"b""#),
            Some(vec!["echo".into(), "aA\n\"b".into()])
        );
        assert_eq!(
            split(r"echo 'it\'s'"),
            Some(vec!["echo".into(), "it's".into()])
        );
        assert_eq!(
            split(r#"echo 'a\nb'"#),
            Some(vec!["echo".into(), r"a\nb".into()])
        );
        // A quote may open mid-argument; `\xZZ` is not an escape, so `\x` stands for `x`.
        assert_eq!(
            split(r#"echo a"b c""#),
            Some(vec!["echo".into(), "ab c".into()])
        );
        assert_eq!(
            split(r#"echo "\xZZ""#),
            Some(vec!["echo".into(), "xZZ".into()])
        );
        assert_eq!(split("echo \"\""), Some(vec!["echo".into(), String::new()]));
    }

    #[test]
    fn unbalanced_quotes_are_refused() {
        for bad in [
            r#"echo "abc"#,
            "echo 'abc",
            r#"echo "a"b"#,
            "echo 'a'b",
            r#"echo "a\"#,
        ] {
            assert_eq!(split(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_nul_byte_ends_the_line_as_in_c() {
        assert_eq!(
            split_inline(b"echo a\0b c"),
            Some(vec![b"echo".to_vec(), b"a".to_vec()])
        );
        assert_eq!(split_inline(b"echo \"a\0b\""), None);
    }
}
