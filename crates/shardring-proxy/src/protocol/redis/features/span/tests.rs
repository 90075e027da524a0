//! The merges of the commands across servers, on replies as redis-server 7 writes them.

use bytes::Bytes;

use super::*;
use crate::config::PoolConfig;
use crate::protocol::redis::command::{self, Route};

fn ok(bytes: &'static [u8]) -> Reply {
    Ok(Bytes::from_static(bytes))
}

type Reply = Result<Bytes, BackendError>;

fn replies<'a>(rs: Vec<Reply>, names: &'a [&'a str]) -> Vec<PartReply<'a>> {
    rs.into_iter()
        .zip(names)
        .map(|(reply, server)| PartReply { reply, server })
        .collect()
}

const NAMES: &[&str] = &["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"];

fn settings(servers: usize) -> Settings {
    let lines: Vec<String> = (0..servers)
        .map(|i| format!("10.0.0.{}:6379:1", i + 1))
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut config = PoolConfig::new("rd", "127.0.0.1:0", &lines).unwrap();
    config.protocol = crate::config::ProtocolConfig::Redis(Default::default());
    Settings::from_pool(&config)
}

fn text(answer: Next<Spanning>) -> String {
    match answer {
        Next::Answer(Answer::Bytes(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("not an answer: {other:?}"),
    }
}

#[test]
fn the_table_sends_the_keyspace_commands_across_servers() {
    for (args, span) in [
        (&["SCAN", "0"][..], Span::Scan),
        (&["keys", "*"], Span::Keys),
        (&["RANDOMKEY"], Span::RandomKey),
        (&["FLUSHDB"], Span::Flush),
        (&["FLUSHALL", "ASYNC"], Span::Flush),
        (&["INFO", "keyspace"], Span::Info),
    ] {
        let req = Request::from_args(args);
        assert_eq!(command::route(&req).unwrap().route, Route::Span(span));
    }
}

#[test]
fn the_scope_is_the_files_servers_and_its_digest_follows_their_addresses_and_db() {
    let three = settings(3).span;
    assert_eq!(three.servers, 3);
    assert_eq!(three.keys_limit, 1_000_000);
    assert_eq!(settings(3).span, three, "the same list, the same digest");
    assert_ne!(settings(4).span.membership, three.membership);
}

#[test]
fn scan_sends_the_cursors_server_its_own_cursor_and_the_options() {
    let s = settings(3);
    let req = Request::from_args(&["SCAN", "0", "MATCH", "a*", "COUNT", "5", "TYPE", "hash"]);
    let Next::Send(sends, Spanning::Scan(_)) = scan::plan(&req, &s) else {
        panic!()
    };
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].0, 0);
    assert_eq!(
        sends[0].1,
        Request::from_args(&["SCAN", "0", "MATCH", "a*", "COUNT", "5", "TYPE", "hash"]).frame
    );
    let at = cursor::Position {
        server: 2,
        cursor: 40,
    };
    let c = cursor::encode(at, 3, s.span.membership)
        .unwrap()
        .to_string();
    let Next::Send(sends, _) = scan::plan(&Request::from_args(&["SCAN", &c]), &s) else {
        panic!()
    };
    assert_eq!(
        (sends[0].0, &sends[0].1),
        (2, &Request::from_args(&["SCAN", "40"]).frame)
    );
    for bad in ["abc", "-1", "18446744073709551616", "1.0", ""] {
        assert_eq!(
            text(scan::plan(&Request::from_args(&["SCAN", bad]), &s)),
            "-ERR invalid cursor\r\n",
            "{bad:?}"
        );
    }
    let other = cursor::encode(at, 3, s.span.membership ^ 0x80)
        .unwrap()
        .to_string();
    assert!(text(scan::plan(&Request::from_args(&["SCAN", &other]), &s))
        .starts_with("-ERR invalid cursor: the pool's servers changed"));
}

/// The state after a first `SCAN <cursor>` to a pool of three.
fn scanning(cursor: &str) -> (Spanning, u64) {
    let s = settings(3);
    let Next::Send(_, state) = scan::plan(&Request::from_args(&["SCAN", cursor]), &s) else {
        panic!()
    };
    (state, s.span.membership)
}

fn scan_reply(cursor: &str, keys: &[&str]) -> Reply {
    let mut out = format!("*2\r\n${}\r\n{cursor}\r\n*{}\r\n", cursor.len(), keys.len());
    for k in keys {
        out.push_str(&format!("${}\r\n{k}\r\n", k.len()));
    }
    Ok(Bytes::from(out))
}

#[test]
fn a_scan_page_carries_the_servers_cursor_then_moves_to_the_next_server_then_ends() {
    let (state, digest) = scanning("0");
    // Server 0 has more: the cursor names server 0 at its cursor 17.
    let answer = text(advance(
        state,
        replies(vec![scan_reply("17", &["a", "b"])], NAMES),
    ));
    let want = cursor::encode(
        cursor::Position {
            server: 0,
            cursor: 17,
        },
        3,
        digest,
    )
    .unwrap()
    .to_string();
    assert_eq!(
        answer,
        format!(
            "*2\r\n${}\r\n{want}\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            want.len()
        )
    );
    // Server 0 is done with keys: the cursor names server 1 from its start.
    let (state, _) = scanning(&want);
    let answer = text(advance(
        state,
        replies(vec![scan_reply("0", &["c"])], NAMES),
    ));
    let next = cursor::encode(
        cursor::Position {
            server: 1,
            cursor: 0,
        },
        3,
        digest,
    )
    .unwrap()
    .to_string();
    assert!(
        answer.starts_with(&format!("*2\r\n${}\r\n{next}\r\n*1\r\n", next.len())),
        "{answer}"
    );
    // Server 1 is done and empty: server 2 is asked in the same request; it ends the scan.
    let (state, _) = scanning(&next);
    let Next::Send(sends, state) = advance(state, replies(vec![scan_reply("0", &[])], NAMES))
    else {
        panic!("the next server's round")
    };
    assert_eq!(
        (sends[0].0, &sends[0].1),
        (2, &Request::from_args(&["SCAN", "0"]).frame)
    );
    assert_eq!(
        text(advance(
            state,
            replies(vec![scan_reply("0", &["z"])], NAMES)
        )),
        "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nz\r\n"
    );
}

#[test]
fn a_scan_passes_a_servers_error_naming_it_and_refuses_a_reply_it_cannot_read() {
    let (state, _) = scanning("0");
    assert_eq!(
        text(advance(
            state,
            replies(vec![ok(b"-ERR syntax error\r\n")], NAMES)
        )),
        "-ERR syntax error (server 10.0.0.1:6379)\r\n"
    );
    let (state, _) = scanning("0");
    assert!(text(advance(state, replies(vec![ok(b":1\r\n")], NAMES)))
        .starts_with("-ERR unexpected reply from server 10.0.0.1:6379 to SCAN"));
    let (state, _) = scanning("0");
    assert!(text(advance(
        state,
        replies(vec![Err(BackendError::NoServer)], NAMES)
    ))
    .starts_with("-ERR no server available (server 10.0.0.1:6379)"));
}

#[test]
fn keys_concatenates_every_servers_array_under_the_limit() {
    let rs = || {
        vec![
            ok(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ok(b"*0\r\n"),
            ok(b"*1\r\n$1\r\nc\r\n"),
        ]
    };
    let listing = |limit, replicated| keys::Listing {
        limit,
        replicated,
        limits: Default::default(),
    };
    assert_eq!(
        &keys::merge(&listing(3, false), &replies(rs(), NAMES))[..],
        b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(
        &keys::merge(&listing(2, false), &replies(rs(), NAMES))[..],
        &b"-ERR KEYS would answer 3 keys, over this pool's limit of 2 (--redis-keys-limit): use SCAN\r\n"[..]
    );
    let failed = vec![ok(b"*0\r\n"), ok(b"-LOADING busy\r\n"), ok(b"*0\r\n")];
    assert_eq!(
        &keys::merge(&listing(3, false), &replies(failed, NAMES))[..],
        b"-LOADING busy (server 10.0.0.2:6379)\r\n"
    );
    // With replicas, each key's copies are left out.
    let copies = vec![
        ok(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
        ok(b"*2\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        ok(b"*2\r\n$1\r\nc\r\n$1\r\na\r\n"),
    ];
    assert_eq!(
        &keys::merge(&listing(6, true), &replies(copies, NAMES))[..],
        b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
}

#[test]
fn randomkey_picks_among_non_empty_servers_and_is_nil_only_when_all_are_empty() {
    let rs = || vec![ok(b"$-1\r\n"), ok(b"$1\r\nx\r\n"), ok(b"$1\r\ny\r\n")];
    assert_eq!(&random::merge(&replies(rs(), NAMES), 0)[..], b"$1\r\nx\r\n");
    assert_eq!(&random::merge(&replies(rs(), NAMES), 1)[..], b"$1\r\ny\r\n");
    let empty = vec![ok(b"_\r\n"), ok(b"_\r\n"), ok(b"_\r\n")];
    assert_eq!(&random::merge(&replies(empty, NAMES), 7)[..], b"_\r\n");
    // A failed server with the others empty: its error, never a nil that says the pool is empty.
    let failed = vec![ok(b"$-1\r\n"), Err(BackendError::NoServer), ok(b"$-1\r\n")];
    assert!(random::merge(&replies(failed, NAMES), 0).starts_with(b"-ERR no server available"));
    let one = vec![
        ok(b"$-1\r\n"),
        Err(BackendError::NoServer),
        ok(b"$1\r\nk\r\n"),
    ];
    assert_eq!(&random::merge(&replies(one, NAMES), 5)[..], b"$1\r\nk\r\n");
}

#[test]
fn a_flush_is_ok_only_when_every_server_says_so_and_its_error_says_how_far_it_went() {
    let flushing = || flush::Flushing {
        name: "FLUSHALL",
        hot: None,
    };
    let all = vec![ok(b"+OK\r\n"), ok(b"+OK\r\n"), ok(b"+OK\r\n")];
    assert_eq!(
        &flush::merge(&flushing(), &replies(all, NAMES))[..],
        b"+OK\r\n"
    );
    let one_down = vec![
        ok(b"+OK\r\n"),
        ok(b"-NOPERM no\r\n"),
        Err(BackendError::NoServer),
    ];
    assert_eq!(
        &flush::merge(&flushing(), &replies(one_down, NAMES))[..],
        &b"-NOPERM no (server 10.0.0.2:6379); FLUSHALL flushed 1 of 3 servers\r\n"[..]
    );
}

/// A bulk (`$`) or verbatim (`=`) string of `text`.
fn info_reply(kind: &str, text: &str) -> Bytes {
    Bytes::from(format!("{kind}{}\r\n{text}\r\n", text.len()))
}

#[test]
fn info_keyspace_sums_the_db_lines_and_weights_the_average_ttl_by_expires() {
    let summing = |before: Option<&str>, flavor| info::Summing {
        before: before.map(str::to_owned),
        flavor,
    };
    let rs = || {
        vec![
            Ok(info_reply(
                "$",
                "# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=1000\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n\r\n",
            )),
            Ok(info_reply("$", "# Keyspace\r\n\r\n")),
            Ok(info_reply(
                "$",
                "# Keyspace\r\ndb0:keys=5,expires=6,avg_ttl=3000\r\n\r\n",
            )),
        ]
    };
    let Answer::Bytes(b) = info::merge(summing(None, Flavor::Resp2), &replies(rs(), NAMES)) else {
        panic!()
    };
    let want =
        "# Keyspace\r\ndb0:keys=15,expires=8,avg_ttl=2500\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n";
    assert_eq!(
        String::from_utf8_lossy(&b),
        format!("${}\r\n{want}\r\n", want.len())
    );
    // RESP3: servers answer verbatim strings, and so does the proxy.
    let rs3 = vec![
        Ok(info_reply(
            "=",
            "txt:# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n\r\n",
        )),
        Ok(info_reply(
            "=",
            "txt:# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=9\r\n\r\n",
        )),
    ];
    let Answer::Bytes(b) = info::merge(
        summing(Some("# Server\r\n\r\n# Keyspace\r\n"), Flavor::Resp3),
        &replies(rs3, NAMES),
    ) else {
        panic!()
    };
    let want = "txt:# Server\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=9\r\n";
    assert_eq!(
        String::from_utf8_lossy(&b),
        format!("={}\r\n{want}\r\n", want.len())
    );
    let failed = vec![
        Ok(info_reply("$", "# Keyspace\r\n\r\n")),
        Err(BackendError::NoServer),
    ];
    let Answer::Bytes(b) = info::merge(summing(None, Flavor::Resp2), &replies(failed, NAMES))
    else {
        panic!()
    };
    assert!(b.starts_with(b"-ERR no server available (server 10.0.0.2:6379)"));
}

#[test]
fn the_reply_readers_take_only_well_formed_replies() {
    assert_eq!(array_header(b"*3\r\n"), Some((3, 4)));
    assert_eq!(array_header(b"*-1\r\n"), None);
    assert_eq!(array_header(b"*3\n"), None);
    assert_eq!(array_header(b"$3\r\n"), None);
    assert_eq!(string_content(b"$2\r\nab\r\n"), Some(&b"ab"[..]));
    assert_eq!(string_content(b"=6\r\ntxt:ab\r\n"), Some(&b"ab"[..]));
    assert_eq!(string_content(b"$9\r\nab\r\n"), None);
    assert_eq!(string_content(b"$-1\r\n"), None);
    assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(parse_u64(b"18446744073709551616"), None);
    assert_eq!(parse_u64(b"-1"), None);
}
