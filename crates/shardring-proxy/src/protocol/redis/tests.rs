use super::command::{self, Action, KeyArgs, Local, Merge, Route, Txn};
use super::merge::{self, Part, PartialReads};
use super::*;
use bytes::BytesMut;
use proptest::prelude::*;
use tokio_util::codec::Decoder;

fn scan(input: &[u8]) -> Result<Option<Scanned>, RequestError> {
    RequestScanner::new(Limits::default()).scan(input)
}

fn decode_all(codec: &mut RequestCodec, buf: &mut BytesMut) -> Vec<Decoded> {
    let mut out = Vec::new();
    while let Some(d) = codec.decode(buf).unwrap() {
        out.push(d);
    }
    out
}

fn args_of(d: &Decoded) -> Vec<Vec<u8>> {
    match d {
        Decoded::Request(r) => r.arg_slices().map(<[u8]>::to_vec).collect(),
        Decoded::Refused(e) => panic!("refused: {e:?}"),
    }
}

fn req(args: &[&str]) -> Request {
    Request::from_args(args)
}

const VALID: &[&[u8]] = &[
    b"*1\r\n$4\r\nPING\r\n",
    b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n",
    b"*2\r\n$4\r\nECHO\r\n$10\r\n\0\x01\x02\r\n\r\n\xff\xfe\x80\r\n",
    b"PING\r\n",
    b"PING\n",
    b"set k \"hello world\"\r\n",
];

/// The scanner fed `input` a byte at a time: only its states, never its one-pass reading of a
/// whole request (which needs the request's bytes all in at the start).
fn scan_bytewise(limits: Limits, input: &[u8]) -> Result<Option<Scanned>, RequestError> {
    let mut scanner = RequestScanner::new(limits);
    for end in 1..input.len() {
        match scanner.scan(&input[..end]) {
            Ok(None) => {}
            done => return done,
        }
    }
    scanner.scan(input)
}

/// RESP-like pieces: headers with numbers of every form Redis accepts or refuses, CRLF, data.
fn resp_pieces() -> impl Strategy<Value = Vec<u8>> {
    let number = prop_oneof![
        (0u64..20).prop_map(|n| n.to_string()),
        (0u64..2_000_000_000).prop_map(|n| n.to_string()),
        Just("-1".to_string()),
        Just("007".to_string()),
        Just("".to_string()),
        Just("1x".to_string()),
    ];
    let piece = prop_oneof![
        number
            .clone()
            .prop_map(|n| format!("*{n}\r\n").into_bytes()),
        number.prop_map(|n| format!("${n}\r\n").into_bytes()),
        proptest::collection::vec(prop_oneof![Just(b'x'), Just(b'\r'), Just(b'\n')], 0..6),
        Just(b"\r\n".to_vec()),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|p| p.concat())
}

/// Arrays of bulk strings as a client writes them, with now and then a number written as Redis
/// refuses it (a leading zero, one off), and the input cut short or run on.
fn resp_arrays() -> impl Strategy<Value = Vec<u8>> {
    let written = |n: usize, how: u8| match how {
        0 => format!("0{n}"),
        1 => (n + 1).to_string(),
        _ => n.to_string(),
    };
    (
        proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..12), 0u8..12),
            1..6,
        ),
        0u8..12,
        0usize..3,
        any::<bool>(),
    )
        .prop_map(move |(args, how, cut, more)| {
            let mut out = format!("*{}\r\n", written(args.len(), how)).into_bytes();
            for (data, how) in args {
                out.extend(format!("${}\r\n", written(data.len(), how)).bytes());
                out.extend(data);
                out.extend(b"\r\n");
            }
            out.truncate(out.len() - cut.min(out.len()));
            if more {
                out.extend(b"*1\r\n$4\r\nPING\r\n");
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A request whose bytes are all in reads as the states read it a byte at a time: the same
    /// request, the same refusal (kind, bytes dropped, close) or the same wait, whatever the limits.
    #[test]
    fn a_whole_request_reads_as_the_states_read_it(
        input in prop_oneof![
            resp_pieces(),
            resp_arrays(),
            proptest::sample::select(VALID.to_vec()).prop_map(<[u8]>::to_vec),
        ],
        max_bulk_len in prop_oneof![0usize..8, Just(512 << 20)],
        max_args in prop_oneof![0usize..5, Just(1 << 20)],
        max_request_len in prop_oneof![0usize..64, Just(1 << 30)],
        max_inline_len in prop_oneof![0usize..4, Just(64 << 10)],
    ) {
        let limits = Limits { max_bulk_len, max_args, max_request_len, max_inline_len };
        // A refusal that closes drops all that was buffered, however much that was.
        let outcome = |r: Result<Option<Scanned>, RequestError>| {
            r.map_err(|e| (e.kind, e.close, (!e.close).then_some(e.consumed)))
        };
        let whole = RequestScanner::new(limits).scan(&input);
        prop_assert_eq!(outcome(whole), outcome(scan_bytewise(limits, &input)));
    }
}

#[test]
fn every_valid_request_scans_whole_and_every_prefix_is_incomplete() {
    for input in VALID {
        let got = scan(input)
            .unwrap()
            .unwrap_or_else(|| panic!("{input:?} incomplete"));
        let len = match got {
            Scanned::Array { len, .. } | Scanned::Inline { len, .. } => len,
        };
        assert_eq!(len, input.len(), "{:?}", String::from_utf8_lossy(input));
        for cut in 0..input.len() {
            assert_eq!(scan(&input[..cut]), Ok(None), "{input:?} cut at {cut}");
        }
    }
}

#[test]
fn arguments_are_ranges_of_the_frame_and_binary_safe() {
    let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n";
    let Ok(Some(Scanned::Array { len, args })) = scan(input) else {
        panic!()
    };
    assert_eq!(len, input.len());
    let got: Vec<&[u8]> = args.iter().map(|r| &input[r.clone()]).collect();
    assert_eq!(got, [&b"SET"[..], b"k", b"a\r\nb"]);
}

#[test]
fn inline_commands_become_the_resp_array_a_server_is_sent() {
    let mut codec = RequestCodec::default();
    let mut buf = BytesMut::from(&b"PING\r\n\r\n  \r\nset k \"a b\"\nGET k\r\n"[..]);
    let got = decode_all(&mut codec, &mut buf);
    assert_eq!(got.len(), 3, "blank lines are swallowed: {got:?}");
    let Decoded::Request(ping) = &got[0] else {
        panic!()
    };
    assert_eq!(&ping.frame[..], b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(args_of(&got[1]), [&b"set"[..], b"k", b"a b"]);
    assert_eq!(args_of(&got[2]), [&b"GET"[..], b"k"]);
    assert!(buf.is_empty());
}

#[test]
fn empty_arrays_get_no_reply_as_in_redis() {
    let mut codec = RequestCodec::default();
    let mut buf = BytesMut::from(&b"*0\r\n*-1\r\n*-7\r\n*1\r\n$4\r\nPING\r\n"[..]);
    let got = decode_all(&mut codec, &mut buf);
    assert_eq!(got.len(), 1);
    assert_eq!(args_of(&got[0]), [b"PING"]);
}

/// Every malformed input: its error, its reply, and whether the stream goes on.
#[test]
fn refusals_say_what_to_reply_and_how_to_resync() {
    use RequestErrorKind as E;
    let cases: &[(&[u8], E, &str, bool)] = &[
        (
            b"*x\r\n",
            E::InvalidMultibulkLength,
            "-ERR Protocol error: invalid multibulk length\r\n",
            true,
        ),
        (
            b"*01\r\n",
            E::InvalidMultibulkLength,
            "-ERR Protocol error: invalid multibulk length\r\n",
            true,
        ),
        (
            b"*2147483648\r\n",
            E::InvalidMultibulkLength,
            "-ERR Protocol error: invalid multibulk length\r\n",
            true,
        ),
        (
            b"*1\r\n+PING\r\n",
            E::ExpectedBulk(b'+'),
            "-ERR Protocol error: expected '$', got '+'\r\n",
            true,
        ),
        (
            b"*1\r\n*1\r\n$4\r\nPING\r\n",
            E::ExpectedBulk(b'*'),
            "-ERR Protocol error: expected '$', got '*'\r\n",
            true,
        ),
        (
            b"*1\r\n\x01",
            E::ExpectedBulk(1),
            "-ERR Protocol error: expected '$', got '\\x01'\r\n",
            true,
        ),
        (
            b"*1\r\n$-1\r\n",
            E::InvalidBulkLength,
            "-ERR Protocol error: invalid bulk length\r\n",
            true,
        ),
        (
            b"*1\r\n$abc\r\n",
            E::InvalidBulkLength,
            "-ERR Protocol error: invalid bulk length\r\n",
            true,
        ),
        (
            b"*1\r\n$4\r\nPINGxx",
            E::ExpectedCrlf,
            "-ERR Protocol error: expected '\\r\\n'\r\n",
            true,
        ),
        (
            b"*1\r\n$4\rxPING\r\n",
            E::ExpectedCrlf,
            "-ERR Protocol error: expected '\\r\\n'\r\n",
            true,
        ),
        (
            b"*1\r\n$536870913\r\n",
            E::BulkTooLong {
                len: 536870913,
                limit: 512 << 20,
            },
            "-ERR Protocol error: bulk length 536870913 over the proxy's limit of 536870912\r\n",
            true,
        ),
        (
            b"*1048577\r\n",
            E::TooManyArgs {
                count: 1048577,
                limit: 1 << 20,
            },
            "-ERR Protocol error: 1048577 arguments, over the proxy's limit of 1048576\r\n",
            true,
        ),
        (
            b"echo \"abc\r\nPING\r\n",
            E::UnbalancedQuotes,
            "-ERR Protocol error: unbalanced quotes in request\r\n",
            false,
        ),
    ];
    for (input, kind, reply, close) in cases {
        let err = scan(input).unwrap_err();
        assert_eq!(&err.kind, kind, "{:?}", String::from_utf8_lossy(input));
        assert_eq!(&err.kind.reply()[..], reply.as_bytes(), "{kind:?}");
        assert_eq!(err.close, *close, "{kind:?}");
        if !close {
            assert_eq!(err.consumed, 11, "only the bad line is dropped");
        }
    }
    // The stream goes on after unbalanced quotes, and stops after anything that closes.
    let mut codec = RequestCodec::default();
    let mut buf = BytesMut::from(&b"echo \"abc\r\nPING\r\n*1\r\n$x\r\nPING\r\n"[..]);
    let got = decode_all(&mut codec, &mut buf);
    assert_eq!(got.len(), 3);
    assert!(matches!(&got[0], Decoded::Refused(e) if !e.close));
    assert_eq!(args_of(&got[1]), [b"PING"]);
    assert!(matches!(&got[2], Decoded::Refused(e) if e.close));
    assert!(buf.is_empty());
}

#[test]
fn limits_refuse_before_buffering() {
    let limits = Limits {
        max_bulk_len: 100,
        max_args: 4,
        max_request_len: 64,
        max_inline_len: 16,
    };
    let mut s = RequestScanner::new(limits);
    // The header alone shows the bulk cannot fit: refused with 14 bytes read, not 64.
    let e = s.scan(b"*2\r\n$3\r\nGET\r\n$60\r\n").unwrap_err();
    assert_eq!(e.kind, RequestErrorKind::RequestTooLong { limit: 64 });
    assert!(e.close);
    let e = s.scan(b"*3\r\n$101\r\n").unwrap_err();
    assert_eq!(
        e.kind,
        RequestErrorKind::BulkTooLong {
            len: 101,
            limit: 100
        }
    );
    // 11 arguments of at least 6 bytes each cannot fit in 64 bytes.
    assert_eq!(
        s.scan(b"*11\r\n").unwrap_err().kind,
        RequestErrorKind::TooManyArgs {
            count: 11,
            limit: 4
        }
    );
    assert_eq!(
        s.scan(b"GET aaaaaaaaaaaaaaaaaaa").unwrap_err().kind,
        RequestErrorKind::InlineTooLong
    );
    assert_eq!(
        s.scan(b"*1\r\n$0000000000000000000000").unwrap_err().kind,
        RequestErrorKind::BulkHeaderTooLong
    );
    assert_eq!(
        s.scan(b"*00000000000000000000").unwrap_err().kind,
        RequestErrorKind::MultibulkHeaderTooLong
    );
}

#[test]
fn a_10000_key_mget_in_many_reads_is_scanned_once() {
    let keys: Vec<String> = (0..10_000).map(|i| format!("key:{i}")).collect();
    let mut args = vec!["MGET".to_string()];
    args.extend(keys.iter().cloned());
    let frame = Request::from_args(&args).frame;
    let mut s = RequestScanner::default();
    let mut last = 0;
    for end in (1..frame.len()).step_by(997) {
        assert_eq!(s.scan(&frame[..end]), Ok(None));
        // Everything but the partial argument at the end is behind the scanner: the next call starts there.
        assert!(s.scanned() + 32 >= end, "{} of {end}", s.scanned());
        assert!(s.scanned() >= last);
        last = s.scanned();
    }
    let Ok(Some(Scanned::Array { len, args: got })) = s.scan(&frame) else {
        panic!()
    };
    assert_eq!(len, frame.len());
    assert_eq!(got.len(), 10_001);
    assert_eq!(&frame[got[10_000].clone()], b"key:9999");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Valid requests and garbage, in pieces: the decoder gives the same items however the input is split.
    #[test]
    fn any_input_decodes_the_same_however_it_is_split(
        pieces in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..24),
                proptest::sample::select(VALID.to_vec()).prop_map(<[u8]>::to_vec),
            ],
            0..8,
        ),
        step in 1usize..17,
    ) {
        let input: Vec<u8> = pieces.concat();
        let mut whole = RequestCodec::default();
        let mut buf = BytesMut::from(&input[..]);
        let expect = decode_all(&mut whole, &mut buf);
        let mut split = RequestCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for chunk in input.chunks(step) {
            buf.extend_from_slice(chunk);
            got.extend(decode_all(&mut split, &mut buf));
        }
        // A refusal that closes drops whatever was buffered, which depends on the reads.
        let same = |d: Decoded| match d {
            Decoded::Refused(e) if e.close => Decoded::Refused(RequestError { consumed: 0, ..e }),
            d => d,
        };
        let expect: Vec<Decoded> = expect.into_iter().map(same).collect();
        let got: Vec<Decoded> = got.into_iter().map(same).collect();
        prop_assert_eq!(expect, got);
    }

    /// A request built from any arguments scans back to them.
    #[test]
    fn requests_round_trip(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..10)) {
        let frame = Request::from_args(&args).frame;
        let Ok(Some(Scanned::Array { len, args: got })) = scan(&frame) else {
            panic!("{frame:?}")
        };
        prop_assert_eq!(len, frame.len());
        let got: Vec<Vec<u8>> = got.iter().map(|r| frame[r.clone()].to_vec()).collect();
        prop_assert_eq!(got, args);
    }
}

// The command table.

#[test]
fn the_table_is_sorted_lower_case_and_unique() {
    for pair in command::TABLE.windows(2) {
        assert!(
            pair[0].name < pair[1].name,
            "{} before {}",
            pair[0].name,
            pair[1].name
        );
    }
    for spec in command::TABLE {
        assert_eq!(spec.name, spec.name.to_ascii_lowercase());
        assert!(spec.arity != 0);
        assert_eq!(
            command::lookup(spec.name.to_ascii_uppercase().as_bytes()),
            Some(spec)
        );
    }
}

/// What `command::index_of` must answer: the first table entry whose name equals `name` ignoring case.
fn index_of_naively(name: &[u8]) -> Option<usize> {
    command::TABLE
        .iter()
        .position(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

#[test]
fn every_table_name_packs_without_loss() {
    for spec in command::TABLE {
        assert!(spec.name.len() <= 24, "{} is past MAX_NAME", spec.name);
        assert!(!spec.name.as_bytes().contains(&0), "{}", spec.name);
        assert_eq!(
            command::index_of(spec.name.as_bytes()),
            index_of_naively(spec.name.as_bytes())
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any bytes, any case, a table name with a byte changed, added or dropped, or longer than any
    /// name: the packed search finds what a linear scan finds.
    #[test]
    fn command_lookup_agrees_with_a_linear_scan(
        pick in 0..command::TABLE.len(),
        edit in 0u8..5,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        upper in any::<u64>(),
        noise in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut name = command::TABLE[pick].name.as_bytes().to_vec();
        match edit {
            0 => {}
            1 => { let i = at.index(name.len()); name[i] = byte; }
            2 => name.insert(at.index(name.len() + 1), byte),
            3 => { name.remove(at.index(name.len())); }
            _ => name = noise,
        }
        for (i, b) in name.iter_mut().enumerate() {
            if upper >> (i % 64) & 1 == 1 {
                *b = b.to_ascii_uppercase();
            }
        }
        prop_assert_eq!(command::index_of(&name), index_of_naively(&name));
    }
}

/// twemproxy 0.5.0's commands (its `src/nc_message.h`), every one supported here.
const TWEMPROXY: &str = "APPEND AUTH BITCOUNT BITFIELD BITPOS COMMAND COPY DECR DECRBY DEL DUMP EVAL EVALSHA EXISTS \
EXPIRE EXPIREAT GEOADD GEODIST GEOHASH GEOPOS GEORADIUS GEORADIUSBYMEMBER GEOSEARCH GEOSEARCHSTORE GET GETBIT GETDEL \
GETEX GETRANGE GETSET HDEL HEXISTS HGET HGETALL HINCRBY HINCRBYFLOAT HKEYS HLEN HMGET HMSET HRANDFIELD HSCAN HSET HSETNX \
HSTRLEN HVALS INCR INCRBY INCRBYFLOAT LINDEX LINSERT LLEN LMOVE LOLWUT LPOP LPOS LPUSH LPUSHX LRANGE LREM LSET LTRIM MGET \
MOVE MSET PERSIST PEXPIRE PEXPIREAT PFADD PFCOUNT PFMERGE PING PSETEX PTTL QUIT RESTORE RPOP RPOPLPUSH RPUSH RPUSHX SADD \
SCARD SDIFF SDIFFSTORE SELECT SET SETBIT SETEX SETNX SETRANGE SINTER SINTERSTORE SISMEMBER SMEMBERS SMISMEMBER SMOVE SORT \
SPOP SRANDMEMBER SREM SSCAN STRLEN SUNION SUNIONSTORE TOUCH TTL TYPE UNLINK ZADD ZCARD ZCOUNT ZDIFF ZDIFFSTORE ZINCRBY \
ZINTER ZINTERSTORE ZLEXCOUNT ZMSCORE ZPOPMAX ZPOPMIN ZRANDMEMBER ZRANGE ZRANGEBYLEX ZRANGEBYSCORE ZRANGESTORE ZRANK ZREM \
ZREMRANGEBYLEX ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREVRANGE ZREVRANGEBYLEX ZREVRANGEBYSCORE ZREVRANK ZSCAN ZSCORE ZUNION \
ZUNIONSTORE";

#[test]
fn every_twemproxy_command_is_supported() {
    let names: Vec<&str> = TWEMPROXY.split_whitespace().collect();
    assert_eq!(names.len(), 138, "137 commands and SELECT");
    for name in names {
        let spec = command::lookup(name.as_bytes()).unwrap_or_else(|| panic!("{name} missing"));
        assert!(!matches!(spec.action, Action::Refuse(_)), "{name} refused");
    }
    assert!(command::TABLE.len() >= 200, "{}", command::TABLE.len());
}

#[test]
fn unknown_commands_and_wrong_arity_get_redis_7_words() {
    let unknown = |args: &[&str]| command::route(&req(args)).unwrap_err();
    assert_eq!(
        &unknown(&["foo", "a", "b"])[..],
        b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"
    );
    assert_eq!(
        &unknown(&["FOO"])[..],
        b"-ERR unknown command 'FOO', with args beginning with: \r\n"
    );
    // Arguments are listed while they take under 128 bytes, each cut to what is left; CR/LF become spaces.
    let long = "x".repeat(200);
    assert_eq!(
        unknown(&["foo", &long, "b"]),
        format!(
            "-ERR unknown command 'foo', with args beginning with: '{}' \r\n",
            "x".repeat(128)
        )
    );
    assert_eq!(
        unknown(&[
            "foo",
            &"y".repeat(100),
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "c"
        ]),
        format!(
            "-ERR unknown command 'foo', with args beginning with: '{}' '{}' \r\n",
            "y".repeat(100),
            "abcdefghijklmnopqrstuvwxy"
        )
    );
    assert_eq!(
        &unknown(&["fo\r\no", "a\nb"])[..],
        b"-ERR unknown command 'fo  o', with args beginning with: 'a b' \r\n"
    );
    let arity = |args: &[&str]| command::route(&req(args)).unwrap_err();
    assert_eq!(
        &arity(&["GET"])[..],
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        &arity(&["get", "a", "b"])[..],
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        &arity(&["SET", "k"])[..],
        b"-ERR wrong number of arguments for 'set' command\r\n"
    );
    assert_eq!(
        &arity(&["mset", "a", "1", "b"])[..],
        b"-ERR wrong number of arguments for 'mset' command\r\n"
    );
}

#[test]
fn redis_7_options_pass_and_keys_are_found() {
    let keys = |args: &[&str]| -> Vec<String> {
        let r = req(args);
        let indexes: Vec<usize> = match command::route(&r).unwrap().route {
            Route::Keys(k) => k.iter().collect(),
            Route::Split { keys, .. } => keys,
            other => panic!("{other:?}"),
        };
        indexes
            .iter()
            .map(|&i| String::from_utf8(r.arg(i).unwrap().to_vec()).unwrap())
            .collect()
    };
    assert_eq!(keys(&["EXPIRE", "k", "10", "NX"]), ["k"]);
    assert_eq!(keys(&["SET", "k", "v", "GET"]), ["k"]);
    assert_eq!(keys(&["set", "k", "v", "EX", "10", "NX", "GET"]), ["k"]);
    assert_eq!(keys(&["MGET", "a", "b", "a"]), ["a", "b", "a"]);
    assert_eq!(keys(&["MSET", "a", "1", "b", "2"]), ["a", "b"]);
    assert_eq!(
        keys(&["EVAL", "return 1", "2", "x", "y", "arg"]),
        ["x", "y"]
    );
    assert_eq!(
        keys(&["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"]),
        ["d", "a", "b"]
    );
    assert_eq!(keys(&["ZUNION", "2", "a", "b"]), ["a", "b"]);
    assert_eq!(keys(&["LMPOP", "2", "a", "b", "LEFT"]), ["a", "b"]);
    assert_eq!(
        keys(&["XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "0"]),
        ["s1", "s2"]
    );
    assert_eq!(
        keys(&["XREADGROUP", "GROUP", "streams", "c", "STREAMS", "s1", ">"]),
        ["s1"]
    );
    assert_eq!(
        keys(&["SORT", "k", "BY", "w_*", "STORE", "dst"]),
        ["k", "dst"]
    );
    assert_eq!(
        keys(&["GEORADIUS", "g", "0", "0", "1", "km", "STOREDIST", "d"]),
        ["g", "d"]
    );
    assert_eq!(keys(&["BITOP", "AND", "d", "a", "b"]), ["d", "a", "b"]);
    assert_eq!(keys(&["OBJECT", "ENCODING", "k"]), ["k"]);
    assert_eq!(keys(&["RPOPLPUSH", "a", "b"]), ["a", "b"]);
}

#[test]
fn each_command_class_gets_its_route() {
    let route = |args: &[&str]| command::route(&req(args));
    assert!(matches!(
        route(&["mget", "a", "b"]).unwrap().route,
        Route::Split {
            merge: Merge::Values,
            step: 1,
            ..
        }
    ));
    assert!(matches!(
        route(&["MSET", "a", "1"]).unwrap().route,
        Route::Split {
            merge: Merge::AllOk,
            step: 2,
            ..
        }
    ));
    for sum in ["DEL", "UNLINK", "TOUCH", "EXISTS"] {
        assert!(matches!(
            route(&[sum, "a"]).unwrap().route,
            Route::Split {
                merge: Merge::Sum,
                ..
            }
        ));
    }
    assert_eq!(
        route(&["DBSIZE"]).unwrap().route,
        Route::Span(crate::protocol::redis::command::Span::DbSize)
    );
    assert_eq!(route(&["ping"]).unwrap().route, Route::Local(Local::Ping));
    assert_eq!(
        route(&["HELLO", "3"]).unwrap().route,
        Route::Local(Local::Hello)
    );
    assert_eq!(
        route(&["CLIENT", "SETINFO", "lib-name", "x"])
            .unwrap()
            .route,
        Route::Local(Local::Client)
    );
    // Blocking commands go to their keys' server (on a connection of the client's own), the
    // transaction's commands to `transaction.rs`.
    let block = |args: &[&str]| route(args).unwrap().route;
    // Keys at `from..=to`, one after the other.
    let every = |from, to| KeyArgs::Every { from, to, step: 1 };
    assert_eq!(block(&["BLPOP", "a", "b", "0"]), Route::Block(every(1, 2)));
    assert_eq!(
        block(&["BLMPOP", "0", "2", "a", "b", "LEFT"]),
        Route::Block(every(3, 4))
    );
    assert_eq!(
        block(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]),
        Route::Block(every(4, 4))
    );
    assert!(matches!(
        block(&["XREAD", "STREAMS", "s", "$"]),
        Route::Keys(_)
    ));
    assert_eq!(block(&["BLMPOP", "0", "9", "a", "LEFT"]), Route::AnyServer);
    for (args, txn) in [
        (&["MULTI"][..], Txn::Multi),
        (&["exec"], Txn::Exec),
        (&["DISCARD"], Txn::Discard),
        (&["UNWATCH"], Txn::Unwatch),
    ] {
        assert!(matches!(route(args).unwrap().route, Route::Transaction(t, _) if t == txn));
    }
    assert_eq!(
        route(&["WATCH", "a", "b"]).unwrap().route,
        Route::Transaction(Txn::Watch, every(1, 2))
    );
    // Malformed key arguments go to any server, whose own error answers; keyless scripts are refused.
    assert_eq!(
        route(&["EVAL", "return 1", "x"]).unwrap().route,
        Route::AnyServer
    );
    assert_eq!(
        route(&["EVAL", "return 1", "3", "a"]).unwrap().route,
        Route::AnyServer
    );
    assert_eq!(route(&["OBJECT", "HELP"]).unwrap().route, Route::AnyServer);
    assert_eq!(
        &route(&["EVAL", "return 1", "0"]).unwrap_err()[..],
        &b"-ERR EVAL is not supported by the proxy: a script without keys cannot be placed: pass the keys it uses\r\n"[..]
    );
    for refused in [
        &["SWAPDB", "0", "1"][..],
        &["PUBSUB", "CHANNELS"],
        &["CLUSTER", "INFO"],
    ] {
        let e = route(refused).unwrap_err();
        let text = String::from_utf8_lossy(&e);
        assert!(
            text.starts_with(&format!(
                "-ERR {} is not supported by the proxy: ",
                refused[0]
            )),
            "{text}"
        );
        assert!(text.ends_with("\r\n") && !text[..text.len() - 2].contains(['\r', '\n']));
    }
}

// Splits and merges.

#[test]
fn mget_splits_by_server_and_merges_in_request_order() {
    let r = req(&["MGET", "a", "b", "c", "d"]);
    let Route::Split { keys, step, .. } = command::route(&r).unwrap().route else {
        panic!()
    };
    // a, c on server 0; b, d on server 1.
    let subs = merge::split(&r, &keys, step, |k| {
        (usize::from(k == b"b" || k == b"d"), 0)
    });
    assert_eq!(subs.len(), 2);
    assert_eq!(
        &subs[0].frame[..],
        b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nc\r\n"
    );
    assert_eq!(subs[0].keys.as_slice(), [0, 2]);
    assert_eq!(
        &subs[1].frame[..],
        b"*3\r\n$4\r\nMGET\r\n$1\r\nb\r\n$1\r\nd\r\n"
    );
    let limits = ReplyLimits::default();
    let merged = merge::merge_values(
        4,
        &[
            (&subs[0].keys, Part::Reply(b"*2\r\n$2\r\nva\r\n$-1\r\n")),
            (
                &subs[1].keys,
                Part::Reply(b"*2\r\n$2\r\nvb\r\n$2\r\nvd\r\n"),
            ),
        ],
        limits,
        PartialReads::Answered,
    );
    assert_eq!(
        &merged[..],
        b"*4\r\n$2\r\nva\r\n$2\r\nvb\r\n$-1\r\n$2\r\nvd\r\n"
    );
    // RESP3 nulls pass through as the server sent them.
    let merged = merge::merge_values(
        4,
        &[
            (&subs[0].keys, Part::Reply(b"*2\r\n_\r\n_\r\n")),
            (&subs[1].keys, Part::Reply(b"*2\r\n$2\r\nvb\r\n_\r\n")),
        ],
        limits,
        PartialReads::Answered,
    );
    assert_eq!(&merged[..], b"*4\r\n_\r\n$2\r\nvb\r\n_\r\n_\r\n");
    // A dead server costs its keys only: an error element each, never a nil.
    let merged = merge::merge_values(
        4,
        &[
            (
                &subs[0].keys,
                Part::Reply(b"*2\r\n$2\r\nva\r\n$2\r\nvc\r\n"),
            ),
            (
                &subs[1].keys,
                Part::Failed("server 127.0.0.1:6380 timed out"),
            ),
        ],
        limits,
        PartialReads::Answered,
    );
    assert_eq!(
        &merged[..],
        &b"*4\r\n$2\r\nva\r\n-ERR server 127.0.0.1:6380 timed out\r\n$2\r\nvc\r\n-ERR server 127.0.0.1:6380 timed out\r\n"[..]
    );
    // A server's error for its whole part (`-LOADING`) stands for each of its keys.
    let merged = merge::merge_values(
        4,
        &[
            (
                &subs[0].keys,
                Part::Reply(b"-LOADING Redis is loading the dataset in memory\r\n"),
            ),
            (
                &subs[1].keys,
                Part::Reply(b"*2\r\n$2\r\nvb\r\n$2\r\nvd\r\n"),
            ),
        ],
        limits,
        PartialReads::Answered,
    );
    assert_eq!(
        &merged[..],
        &b"*4\r\n-LOADING Redis is loading the dataset in memory\r\n$2\r\nvb\r\n-LOADING Redis is loading the dataset in memory\r\n$2\r\nvd\r\n"[..]
    );
}

#[test]
fn a_split_read_with_a_failed_part_is_one_error_unless_partial_reads_are_asked_for() {
    let both = |a: &'static [u8], b: Part<'static>| {
        let held: [&[usize]; 2] = [&[0, 2], &[1, 3]];
        merge::merge_values(
            4,
            &[(held[0], Part::Reply(a)), (held[1], b)],
            ReplyLimits::default(),
            PartialReads::Refused,
        )
    };
    let values: &[u8] = b"*2\r\n$2\r\nva\r\n$2\r\nvc\r\n";
    // Whole: the values in request order, as with partial reads.
    assert_eq!(
        &both(values, Part::Reply(b"*2\r\n$2\r\nvb\r\n$-1\r\n"))[..],
        b"*4\r\n$2\r\nva\r\n$2\r\nvb\r\n$2\r\nvc\r\n$-1\r\n"
    );
    // A server that did not answer: one error naming it, never an array.
    assert_eq!(
        &both(
            values,
            Part::Failed("cannot connect to 127.0.0.1:6380: Connection refused")
        )[..],
        b"-ERR cannot connect to 127.0.0.1:6380: Connection refused\r\n"
    );
    // A server's error for its part, and a reply that is not its part's values, alike.
    assert_eq!(
        &both(values, Part::Reply(b"-LOADING Redis is loading\r\n"))[..],
        b"-LOADING Redis is loading\r\n"
    );
    assert_eq!(
        &both(values, Part::Reply(b"*1\r\n$2\r\nvb\r\n"))[..],
        b"-ERR unexpected reply from server to MGET\r\n"
    );
    assert_eq!(
        &both(b"+OK\r\n", Part::Reply(b"*2\r\n$2\r\nvb\r\n$-1\r\n"))[..],
        b"-ERR unexpected reply from server to MGET\r\n"
    );
}

#[test]
fn one_server_gets_the_request_as_it_came_and_mset_keeps_values_with_keys() {
    let r = req(&["mget", "a", "b"]);
    let subs = merge::split(&r, &[1, 2], 1, |_| (3, 0));
    assert_eq!(subs.len(), 1);
    assert_eq!((subs[0].server, &subs[0].frame), (3, &r.frame));
    let r = req(&["MSET", "a", "1", "b", "2", "c", "3"]);
    let subs = merge::split(&r, &[1, 3, 5], 2, |k| (usize::from(k == b"b"), 0));
    assert_eq!(
        &subs[0].frame[..],
        b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nc\r\n$1\r\n3\r\n"
    );
    assert_eq!(
        &subs[1].frame[..],
        b"*3\r\n$4\r\nMSET\r\n$1\r\nb\r\n$1\r\n2\r\n"
    );
}

proptest! {
    /// Each part of a split request is the command with its keys and values encoded afresh (the
    /// oracle), whatever the arguments hold (CR, LF, `$`, lengths of every digit count), decoded
    /// from a client's bytes or made by the proxy, with keys whose values the request lacks too.
    #[test]
    fn a_split_part_is_its_arguments_encoded_again(
        args in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..4),
                proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'$'), any::<u8>()], 0..120),
            ],
            1..12,
        ),
        step in 1usize..3,
        servers in proptest::collection::vec(0usize..3, 12),
        decoded in any::<bool>(),
    ) {
        let mut all = vec![b"MSET".to_vec()];
        all.extend(args);
        let made = Request::from_args(&all);
        let r = if decoded {
            let mut codec = RequestCodec::default();
            let mut buf = BytesMut::from(&made.frame[..]);
            match codec.decode(&mut buf).unwrap() {
                Some(Decoded::Request(r)) => r,
                other => panic!("{other:?}"),
            }
        } else {
            made
        };
        // Keys every `step` arguments; the last may lack its values.
        let keys: Vec<usize> = (1..all.len()).step_by(step).collect();
        let server_of = |k: &[u8]| (servers[k.len() % servers.len()], 0);
        for sub in merge::split(&r, &keys, step, server_of) {
            let mut expect = vec![all[0].clone()];
            for &p in &sub.keys {
                for j in 0..step {
                    expect.push(all.get(keys[p] + j).cloned().unwrap_or_default());
                }
            }
            let whole = sub.frame == r.frame;
            prop_assert!(whole || sub.frame == Request::from_args(&expect).frame, "{:?}", sub);
        }
    }
}

#[test]
fn ok_and_sum_merges_report_failures() {
    assert_eq!(
        &merge::merge_all_ok(&[Part::Reply(b"+OK\r\n"), Part::Reply(b"+OK\r\n")])[..],
        b"+OK\r\n"
    );
    assert_eq!(
        &merge::merge_all_ok(&[Part::Reply(b"+OK\r\n"), Part::Failed("connection refused")])[..],
        b"-ERR connection refused\r\n"
    );
    assert_eq!(
        &merge::merge_all_ok(&[
            Part::Reply(b"-OOM command not allowed\r\n"),
            Part::Reply(b"+OK\r\n")
        ])[..],
        b"-OOM command not allowed\r\n"
    );
    assert_eq!(
        &merge::merge_sum(&[
            Part::Reply(b":2\r\n"),
            Part::Reply(b":0\r\n"),
            Part::Reply(b":5\r\n")
        ])[..],
        b":7\r\n"
    );
    assert_eq!(
        &merge::merge_sum(&[Part::Reply(b":2\r\n"), Part::Failed("timed\r\nout")])[..],
        b"-ERR timed  out\r\n"
    );
    assert_eq!(
        &merge::merge_sum(&[Part::Reply(b"+x\r\n")])[..],
        b"-ERR unexpected reply from server to a counting command\r\n"
    );
    assert_eq!(Flavor::Resp2.null(), b"$-1\r\n");
    assert_eq!(Flavor::Resp3.null(), b"_\r\n");
}

// Hash tags.

/// Redis Cluster's rule, written from its documentation: the bytes between the first `{` and the next `}`
/// after it, when there are any; else the whole key.
fn cluster_hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[test]
fn hash_tags_follow_redis_clusters_rule() {
    for (key, tag) in [
        (&b"{user1000}.following"[..], &b"user1000"[..]),
        (b"foo{}{bar}", b"foo{}{bar}"),
        (b"foo{{bar}}zap", b"{bar"),
        (b"foo{bar}{zap}", b"bar"),
        (b"{}", b"{}"),
        (b"}{a}", b"a"),
        (b"{a", b"{a"),
    ] {
        assert_eq!(
            cluster_hash_tag(key),
            tag,
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

proptest! {
    /// The library's twemproxy placement (nutcracker's `hash_tag: "{}"` code) hashes the same bytes as
    /// Redis Cluster's rule, for every hash: keys placed through nutcracker are found here.
    #[test]
    fn the_librarys_twemproxy_hash_tag_is_redis_clusters(
        key in proptest::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), Just(b'a'), any::<u8>()], 0..12),
    ) {
        use shardring::compat::twemproxy::key_hash;
        use shardring::hash::TwemproxyHash;
        for hash in [TwemproxyHash::Fnv1a64, TwemproxyHash::Murmur, TwemproxyHash::Md5, TwemproxyHash::Crc32a] {
            prop_assert_eq!(
                key_hash(&key, hash, Some(*b"{}")),
                key_hash(cluster_hash_tag(&key), hash, None)
            );
        }
    }
}

// A transaction's run of replies.

#[test]
fn a_run_of_replies_frames_whole_across_any_split_and_answers_with_the_last() {
    use super::reply::{Resp, RespScanner};
    use crate::protocol::{Protocol, ReplyScanner};
    let replies: [&[u8]; 5] = [
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"-ERR wrong\r\n",
        b"+QUEUED\r\n",
        b"*3\r\n:1\r\n$5\r\nhello\r\n*2\r\n$-1\r\n%1\r\n+a\r\n:2\r\n",
    ];
    let run: Vec<u8> = replies.concat();
    let after = b"+PONG\r\n";
    let mut wire = run.clone();
    wire.extend_from_slice(after);
    for split in 0..=wire.len() {
        let mut scanner = RespScanner::default();
        let kind = Resp::Replies(5);
        let first = scanner.frame(&wire[..split], kind, 0).unwrap();
        let len = match first {
            Some(len) => len,
            None => scanner
                .frame(&wire, kind, 0)
                .unwrap()
                .expect("the whole run is there"),
        };
        assert_eq!(len, run.len(), "split at {split}");
        assert!(split >= run.len() || first.is_none());
        scanner.reset();
        assert_eq!(
            scanner.frame(&wire[len..], Resp::Reply, 0).unwrap(),
            Some(after.len())
        );
    }
    let answer = Redis::finish(
        super::finish::Finish::Exec(5),
        Ok(bytes::Bytes::from(run.clone())),
    );
    let crate::protocol::Answer::Bytes(last) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(&last[..], replies[4]);
}

#[test]
fn a_fenced_key_is_tryagain_which_cluster_clients_retry() {
    let mut out = BytesMut::new();
    <Redis as crate::protocol::Protocol>::encode_failure(
        &crate::error::BackendError::Fenced {
            unconfirmed_ms: 6000,
        },
        &mut out,
    );
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("-TRYAGAIN fenced: "), "{text}");
    assert!(
        text.ends_with("\r\n") && text.matches("\r\n").count() == 1,
        "{text}"
    );
    out.clear();
    <Redis as crate::protocol::Protocol>::encode_failure(
        &crate::error::BackendError::NoServer,
        &mut out,
    );
    assert_eq!(&out[..], b"-ERR no server available\r\n");
}
