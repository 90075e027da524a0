use super::*;
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tokio_util::codec::Decoder;

/// Parses with memcached's default item size as the value limit (what the servers report by default).
fn parse(input: &[u8]) -> Result<Option<Parsed>, RequestError> {
    let limits = Limits {
        max_value_len: 1 << 20,
        ..Limits::default()
    };
    parse_request(input, &limits)
}

fn decode_all(codec: &mut RequestCodec, buf: &mut BytesMut) -> Vec<Decoded> {
    let mut out = Vec::new();
    while let Some(d) = codec.decode(buf).unwrap() {
        out.push(d);
    }
    out
}

/// What a client asked, whatever pieces the codec streamed a long retrieval line in: the pieces of one
/// line merged back into one request (their keys in order), other items as they are.
#[derive(Debug, PartialEq)]
enum Logical {
    Get(GetKind, Option<Vec<u8>>, Vec<Vec<u8>>),
    Other(Decoded),
}

fn logical(items: Vec<Decoded>) -> Vec<Logical> {
    let mut out: Vec<Logical> = Vec::new();
    let mut open = false;
    for d in items {
        if let Decoded::Request(r) = &d {
            if let Command::Get {
                kind,
                exptime,
                keys,
                more,
            } = &r.command
            {
                let keys: Vec<Vec<u8>> = keys.iter().map(|k| r.bytes(k).to_vec()).collect();
                match out.last_mut() {
                    Some(Logical::Get(_, _, so_far)) if open => so_far.extend(keys),
                    _ => out.push(Logical::Get(
                        *kind,
                        exptime.as_ref().map(|e| r.bytes(e).to_vec()),
                        keys,
                    )),
                }
                open = *more;
                continue;
            }
        }
        open = false;
        out.push(Logical::Other(d));
    }
    out
}

const VALID: &[&[u8]] = &[
    b"get a\r\n",
    b"get a b c\r\n",
    b"gets a b\r\n",
    b"gat 10 a b\r\n",
    b"gats -1 a\r\n",
    b"set k 1 2 3\r\nabc\r\n",
    b"set k 1 2 3 noreply\r\nabc\r\n",
    b"cas k 0 0 1 99\r\nx\r\n",
    b"append k 0 0 0\r\n\r\n",
    b"delete k\r\n",
    b"delete k 0 noreply\r\n",
    b"incr k 1\r\n",
    b"decr k 18446744073709551615 noreply\r\n",
    b"touch k 5\r\n",
    b"mg k v f t\r\n",
    b"ms k 2 T0 q\r\nhi\r\n",
    b"md k q\r\n",
    b"ma k MD D3\r\n",
    b"mn\r\n",
    b"version\r\n",
    b"quit\r\n",
    b"verbosity 1\r\n",
    b"flush_all\r\n",
    b"flush_all 10 noreply\r\n",
    b"stats\r\n",
    b"stats slabs\r\n",
    b"stats reset\r\n",
    b"stats detail on\r\n",
    b"me k\r\n",
    b"mg aGVsbG8= b v\r\n",
    b"ms aGVsbG8= 2 b\r\nhi\r\n",
    b"version extra\r\n",
    b"verbosity noreply\r\n",
    b"get a\n",
];

#[test]
fn base64_meta_keys_route_by_their_decoded_bytes() {
    let mut codec = RequestCodec::new(Limits::default());
    let mut buf =
        BytesMut::from(&b"mg aGVsbG8= b v\r\nmg aGVsbG8= v\r\nms aGk= 1 b T0\r\nx\r\n"[..]);
    let keys: Vec<Vec<u8>> = decode_all(&mut codec, &mut buf)
        .into_iter()
        .map(|d| match d {
            Decoded::Request(r) => {
                let Command::Meta { key, .. } = &r.command else {
                    panic!("{r:?}")
                };
                r.with_routing_key(key, <[u8]>::to_vec)
            }
            Decoded::Refused(e) => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(keys, [&b"hello"[..], b"aGVsbG8=", b"hi"]);
    for bad in [&b"mg !!!! b\r\n"[..], b"md a b\r\n", b"ms *= 1 b\r\nx\r\n"] {
        let e = parse(bad).unwrap_err();
        assert_eq!(
            e.kind,
            RequestErrorKind::BadBase64Key,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // A refused `ms` skips its data block, so `x` is not read as a command.
    assert_eq!(parse(b"ms *= 1 b\r\nx\r\n").unwrap_err().skip, 3);
    // A key over the limit is too long, whatever its encoding.
    let long = format!("mg {} b v\r\n", "QUFB".repeat(70));
    assert_eq!(
        parse(long.as_bytes()).unwrap_err().kind,
        RequestErrorKind::KeyTooLong
    );
}

#[test]
fn stats_requests_are_told_apart_as_memcached_does() {
    let stats = |line: &[u8]| parse(line).map(|p| p.unwrap().command);
    assert_eq!(stats(b"stats\r\n"), Ok(Command::Stats(StatsRequest::Proxy)));
    assert_eq!(
        stats(b"stats reset\r\n"),
        Ok(Command::Stats(StatsRequest::Reset))
    );
    assert_eq!(
        stats(b"stats detail off\r\n"),
        Ok(Command::Stats(StatsRequest::Toggle))
    );
    for per_server in [
        &b"stats items\r\n"[..],
        b"stats detail dump\r\n",
        b"stats cachedump 1 2\r\n",
    ] {
        assert_eq!(
            stats(per_server),
            Ok(Command::Stats(StatsRequest::PerServer))
        );
    }
    for refused in [
        &b"stats noreply\r\n"[..],
        b"stats bogus\r\n",
        b"stats reset now\r\n",
    ] {
        assert_eq!(
            stats(refused).unwrap_err().kind,
            RequestErrorKind::UnknownCommand
        );
    }
}

#[test]
fn every_valid_request_parses_whole_and_every_prefix_is_incomplete() {
    for req in VALID {
        let p = parse(req)
            .unwrap()
            .unwrap_or_else(|| panic!("{req:?} incomplete"));
        assert_eq!(p.len, req.len(), "{:?}", String::from_utf8_lossy(req));
        for cut in 0..req.len() {
            assert_eq!(
                parse(&req[..cut]),
                Ok(None),
                "{:?} cut at {cut}",
                String::from_utf8_lossy(req)
            );
        }
    }
}

#[test]
fn keys_flags_and_stripped_tokens() {
    let input = b"get a bb ccc\r\n";
    let p = parse(input).unwrap().unwrap();
    let Command::Get { keys, kind, .. } = &p.command else {
        panic!()
    };
    assert_eq!(*kind, GetKind::Get);
    let keys: Vec<&[u8]> = keys.iter().map(|r| &input[r.clone()]).collect();
    assert_eq!(keys, [&b"a"[..], b"bb", b"ccc"]);

    let input = b"set k 1 2 3 noreply\r\nabc\r\n";
    let p = parse(input).unwrap().unwrap();
    let req = Request {
        frame: Bytes::from_static(input),
        command: p.command,
        strip: p.strip,
    };
    assert_eq!(&req.to_forward()[..], b"set k 1 2 3\r\nabc\r\n");
    assert!(matches!(req.command, Command::Keyed { noreply: true, .. }));

    let input = b"mg k v q Oxy\r\n";
    let p = parse(input).unwrap().unwrap();
    let req = Request {
        frame: Bytes::from_static(input),
        command: p.command,
        strip: p.strip,
    };
    assert_eq!(&req.to_forward()[..], b"mg k v Oxy\r\n");
    assert!(matches!(
        req.command,
        Command::Meta {
            quiet: true,
            kind: MetaKind::Get,
            ..
        }
    ));

    // A value holding \r\n and END is data, not protocol.
    let input = b"set k 0 0 7\r\nEND\r\n\r\n\r\n";
    assert_eq!(parse(input).unwrap().unwrap().len, input.len());
}

#[test]
fn refusals_say_how_to_resync() {
    use RequestErrorKind as E;
    let e = parse(b"nope\r\nget a\r\n").unwrap_err();
    assert_eq!(
        (e.kind, e.consumed, e.skip, e.close),
        (E::UnknownCommand, 6, 0, false)
    );
    let long = format!("set {} 0 0 3\r\nabc\r\n", "k".repeat(251));
    let e = parse(long.as_bytes()).unwrap_err();
    assert_eq!((e.kind, e.skip, e.close), (E::KeyTooLong, 5, false));
    let e = parse(b"set k 0 0 2000000\r\n").unwrap_err();
    assert_eq!((e.kind, e.skip), (E::ValueTooLarge, 2_000_002));
    let e = parse(b"set k 0 0 1\r\nab\r\n").unwrap_err();
    assert_eq!((e.kind, e.close), (E::BadDataChunk, true));
    let e = parse(b"incr k -1\r\n").unwrap_err();
    assert_eq!(e.kind, E::InvalidDelta);
    let e = parse(b"incr k 18446744073709551616\r\n").unwrap_err();
    assert_eq!(e.kind, E::InvalidDelta);
    let e = parse(&[b'x'; 70_000]).unwrap_err();
    assert_eq!((e.kind, e.close), (E::LineTooLong, true));
    // memcached 1.6's answers: an empty line is `ERROR`, a delete time other than 0 its usage line.
    assert_eq!(parse(b"   \r\n").unwrap_err().kind, E::UnknownCommand);
    assert_eq!(parse(b"delete k 5\r\n").unwrap_err().kind, E::DeleteUsage);
}

/// What memcached 1.6.18 sends for each refused line (checked against a live server): nothing when
/// the command takes `noreply` and its last token is `noreply`, once its token count is right.
#[test]
fn a_refused_noreply_command_gets_no_reply_as_from_memcached() {
    let long_key = "k".repeat(251);
    let silent = [
        "set k 0 0 abc noreply\r\n".to_owned(),
        "set k 0 0 noreply\r\n".to_owned(),
        "set k 0 0 -1 noreply\r\n".to_owned(),
        "set k x 0 1 noreply\r\n".to_owned(),
        "cas k 0 0 1 x noreply\r\n".to_owned(),
        format!("set {long_key} 0 0 1 noreply\r\n"),
        "set k 0 0 2000000 noreply\r\n".to_owned(),
        "set k 0 0 1 noreply\r\nxyz\r\n".to_owned(),
        "delete k 1 noreply\r\n".to_owned(),
        format!("delete {long_key} noreply\r\n"),
        "incr k x noreply\r\n".to_owned(),
        "incr k noreply\r\n".to_owned(),
        format!("decr {long_key} 1 noreply\r\n"),
        "touch k x noreply\r\n".to_owned(),
        format!("touch {long_key} 0 noreply\r\n"),
        "flush_all x noreply\r\n".to_owned(),
        // Over the line limit: closed, and silently.
        format!("set {} 0 0 1 noreply\r\n", "k".repeat(70_000)),
    ];
    for line in &silent {
        let e = parse(line.as_bytes()).unwrap_err();
        assert!(e.noreply && e.reply().is_empty(), "{line:?}: {e:?}");
    }
    let answered = [
        // A token too many or too few: memcached's `ERROR`, noreply or not.
        ("set k 0 0 1 2 noreply\r\n".to_owned(), &b"ERROR\r\n"[..]),
        ("delete k 0 0 noreply\r\n".to_owned(), b"ERROR\r\n"),
        ("foo noreply\r\n".to_owned(), b"ERROR\r\n"),
        ("flush_all 1 2 noreply\r\n".to_owned(), b"ERROR\r\n"),
        // `noreply` not last.
        (
            "flush_all noreply 1\r\n".to_owned(),
            b"CLIENT_ERROR invalid exptime argument\r\n",
        ),
        // Retrieval and meta commands have no `noreply`; a too-long key is a format error.
        (
            format!("get {long_key}\r\n"),
            b"CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "gat x k noreply\r\n".to_owned(),
            b"CLIENT_ERROR invalid exptime argument\r\n",
        ),
        (
            format!("md {long_key} q\r\n"),
            b"CLIENT_ERROR bad command line format\r\n",
        ),
        (
            format!("set {long_key} 0 0 1\r\n"),
            b"CLIENT_ERROR bad command line format\r\n",
        ),
    ];
    for (line, reply) in &answered {
        let e = parse(line.as_bytes()).unwrap_err();
        assert_eq!(e.reply(), *reply, "{line:?}");
    }
}

#[test]
fn a_binary_protocol_request_is_refused_at_its_first_byte_and_closes() {
    let mut codec = RequestCodec::new(Limits::default());
    // A binary `get` header, cut short: nothing more is waited for.
    let mut buf = BytesMut::from(&[0x80u8, 0x00, 0x00, 0x01][..]);
    let out = decode_all(&mut codec, &mut buf);
    assert!(
        matches!(
            &out[..],
            [Decoded::Refused(e @ RequestError {
                kind: RequestErrorKind::BinaryProtocol,
                close: true,
                ..
            })] if e.reply().is_empty()
        ),
        "{out:?}"
    );
    assert!(buf.is_empty());
}

#[test]
fn quiet_meta_commands_hide_what_memcached_hides() {
    use MetaKind as M;
    let hidden = |kind: MetaKind, status: &[u8]| kind.quiet_hides(status);
    assert!(hidden(M::Get, b"EN") && !hidden(M::Get, b"HD") && !hidden(M::Get, b"VA"));
    assert!(hidden(M::Set, b"HD") && !hidden(M::Set, b"NS") && !hidden(M::Set, b"EX"));
    assert!(hidden(M::Delete, b"HD") && !hidden(M::Delete, b"NF") && !hidden(M::Delete, b"EX"));
    assert!(hidden(M::Arithmetic, b"HD") && hidden(M::Arithmetic, b"VA"));
    assert!(!hidden(M::Arithmetic, b"NF") && !hidden(M::Arithmetic, b"EX"));
    assert!(!hidden(M::Debug, b"EN") && !hidden(M::Debug, b"ME"));
}

#[test]
fn the_codec_skips_a_refused_value_as_it_arrives() {
    let limits = Limits {
        max_value_len: 4,
        ..Limits::default()
    };
    let mut codec = RequestCodec::new(limits);
    let mut buf = BytesMut::from(&b"set k 0 0 10\r\n0123"[..]);
    let out = decode_all(&mut codec, &mut buf);
    assert!(matches!(
        &out[..],
        [Decoded::Refused(RequestError {
            kind: RequestErrorKind::ValueTooLarge,
            ..
        })]
    ));
    assert!(buf.is_empty());
    buf.extend_from_slice(b"456789\r\nget a\r\n");
    let out = decode_all(&mut codec, &mut buf);
    assert!(
        matches!(
            &out[..],
            [Decoded::Request(Request {
                command: Command::Get { .. },
                ..
            })]
        ),
        "{out:?}"
    );
}

/// A `stats settings` reply, as memcached 1.6.18 started with `-I 2m` begins it.
const STATS_SETTINGS: &[u8] = b"STAT maxbytes 67108864\r\nSTAT maxconns 1024\r\n\
STAT item_size_max 2097152\r\nSTAT slab_chunk_max 524288\r\nEND\r\n";

#[test]
fn a_stats_reply_is_framed_to_its_end_and_gives_the_item_size() {
    let mut reply = STATS_SETTINGS.to_vec();
    reply.extend_from_slice(b"STORED\r\n");
    let len = STATS_SETTINGS.len();
    assert_eq!(
        parse_response(&reply, ResponseKind::Stats, 10),
        Ok(Some(len))
    );
    for cut in 0..len {
        assert_eq!(
            parse_response(&reply[..cut], ResponseKind::Stats, 10),
            Ok(None)
        );
    }
    assert_eq!(
        parse_response(b"ERROR\r\n", ResponseKind::Stats, 10),
        Ok(Some(7))
    );
    // A server that does not know `stats settings` and answers one line stays in step.
    assert_eq!(
        parse_response(b"OK\r\nEND\r\n", ResponseKind::Stats, 10),
        Ok(Some(4))
    );
    assert!(parse_response(b"STAT a 1\r\nVALUE\r\n", ResponseKind::Stats, 10).is_err());
    assert_eq!(item_size_max(STATS_SETTINGS), Some(2 << 20));
    assert_eq!(item_size_max(b"ERROR\r\n"), None);
    assert_eq!(item_size_max(b"STAT item_size_max x\r\nEND\r\n"), None);
}

#[test]
fn the_value_limit_is_the_largest_any_server_reported_within_the_ceiling() {
    use crate::protocol::ServerFacts;
    let facts: Vec<std::sync::Arc<ServerFacts>> = (0..3).map(|_| Default::default()).collect();
    let limits = Limits {
        max_value_len: 4 << 20,
        ..Limits::default()
    };
    let servers: std::sync::Arc<[_]> = facts.clone().into();
    // A new connection's decoder each time (a refusal leaves one skipping the value's bytes).
    let decode = |input: &[u8]| {
        let mut codec = RequestCodec::with_server_limits(limits, servers.clone());
        decode_all(&mut codec, &mut BytesMut::from(input))
    };
    let too_large = |out: Vec<Decoded>| {
        matches!(
            &out[..],
            [Decoded::Refused(RequestError {
                kind: RequestErrorKind::ValueTooLarge,
                ..
            })]
        )
    };
    // No server has said yet: the ceiling.
    assert!(!too_large(decode(b"set k 0 0 3000000\r\n")));
    assert!(too_large(decode(b"set k 0 0 5000000\r\n")));
    // Servers of 2 MiB and 1 MiB: only what neither stores is refused here; a value between the two
    // goes to its server, which answers for itself. Not before the third has said too: it may store
    // anything up to the ceiling.
    facts[0].set_max_value_len(2 << 20);
    facts[1].set_max_value_len(1 << 20);
    assert!(!too_large(decode(b"set k 0 0 3000000\r\n")));
    facts[2].set_max_value_len(1 << 20);
    assert!(too_large(decode(b"set k 0 0 3000000\r\n")));
    assert!(!too_large(decode(b"set k 0 0 1048577\r\n")));
    assert!(!too_large(decode(b"set k 0 0 2097152\r\n")));
    assert!(too_large(decode(b"set k 0 0 2097153\r\n")));
    // A server restarted with a larger item size raises the pool's limit, never past the ceiling.
    facts[1].set_max_value_len(64 << 20);
    assert!(!too_large(decode(b"set k 0 0 2097153\r\n")));
    assert!(!too_large(decode(b"set k 0 0 4194304\r\n")));
    assert!(too_large(decode(b"set k 0 0 4194305\r\n")));
    // And one restarted with a smaller one lowers it again.
    facts[1].set_max_value_len(1 << 20);
    assert!(too_large(decode(b"set k 0 0 2097153\r\n")));
    let codec = RequestCodec::with_server_limits(limits, servers.clone());
    assert_eq!(codec.max_request_len(), limits.max_request_len());
}

#[test]
fn responses_are_framed_by_kind() {
    let v = b"VALUE a 0 5\r\nEND\r\n\r\nVALUE b 1 1 77\r\nx\r\nEND\r\nSTORED\r\n";
    let len = parse_response(v, ResponseKind::Values, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(&v[len..], b"STORED\r\n");
    let blocks: Vec<_> = ValueBlocks::new(&v[..len])
        .map(|(k, _)| k.to_vec())
        .collect();
    assert_eq!(blocks, [b"a".to_vec(), b"b".to_vec()]);
    for cut in 0..len {
        assert_eq!(
            parse_response(&v[..cut], ResponseKind::Values, 1 << 20),
            Ok(None)
        );
    }
    assert_eq!(
        parse_response(b"SERVER_ERROR oom\r\n", ResponseKind::Values, 10),
        Ok(Some(18))
    );
    assert_eq!(
        parse_response(b"VA 2 f1\r\nhi\r\nHD\r\n", ResponseKind::Meta, 10),
        Ok(Some(13))
    );
    assert_eq!(
        parse_response(b"HD\r\n", ResponseKind::Meta, 10),
        Ok(Some(4))
    );
    assert!(parse_response(b"VALUE a 0 5\r\n", ResponseKind::Values, 4).is_err());
    assert!(parse_response(b"garbage\r\n", ResponseKind::Values, 4).is_err());
}

#[test]
fn resumed_value_scans_agree_with_whole_scans() {
    let mut reply = Vec::new();
    for i in 0..50 {
        reply.extend_from_slice(format!("VALUE k{i} 0 {}\r\n", i % 7).as_bytes());
        reply.extend_from_slice(&vec![b'\n'; i % 7]);
        reply.extend_from_slice(b"\r\n");
    }
    reply.extend_from_slice(b"END\r\n");
    let mut resume = 0;
    for cut in 0..=reply.len() {
        let whole = parse_response(&reply[..cut], ResponseKind::Values, 64);
        let resumed = parse_response_from(&reply[..cut], ResponseKind::Values, 64, &mut resume);
        assert_eq!(whole, resumed, "cut {cut}");
        assert!(resume <= cut);
    }
    assert_eq!(
        parse_response(&reply, ResponseKind::Values, 64),
        Ok(Some(reply.len()))
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any input, cut anywhere: no panic, and the same requests as when it arrives at once.
    #[test]
    fn any_input_decodes_the_same_however_it_is_split(
        pieces in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                proptest::sample::select(VALID.to_vec()).prop_map(<[u8]>::to_vec),
                Just(b"set k 0 0 3\r\n".to_vec()),
                Just(b" noreply\r\n".to_vec()),
            ],
            0..12,
        ),
        cut in any::<usize>(),
    ) {
        let input: Vec<u8> = pieces.concat();
        let limits = Limits { max_line_len: 64, max_value_len: 16, ..Limits::default() };
        let mut whole = RequestCodec::new(limits);
        let mut buf = BytesMut::from(&input[..]);
        let expect = decode_all(&mut whole, &mut buf);

        let cut = if input.is_empty() { 0 } else { cut % input.len() };
        let mut split = RequestCodec::new(limits);
        let mut buf = BytesMut::from(&input[..cut]);
        let mut got = decode_all(&mut split, &mut buf);
        buf.extend_from_slice(&input[cut..]);
        got.extend(decode_all(&mut split, &mut buf));
        // A line-too-long refusal depends on how much was buffered when it was noticed; everything
        // before it must agree.
        let upto = |v: &[Decoded]| v.iter().position(|d| matches!(d, Decoded::Refused(RequestError { kind: RequestErrorKind::LineTooLong, .. }))).unwrap_or(v.len());
        let (e, g) = (upto(&expect), upto(&got));
        prop_assert_eq!(logical(expect[..e.min(g)].to_vec()), logical(got[..e.min(g)].to_vec()));
    }

    /// A retrieval line of any length, arriving in any pieces, is streamed through as requests whose keys,
    /// in order, are the line's keys; the next line is read in step; the buffer stays within the limits.
    #[test]
    fn long_retrieval_lines_stream_through_in_order(
        keys in proptest::collection::vec("[a-z0-9]{1,20}", 1..200),
        touch in any::<bool>(),
        steps in proptest::collection::vec(1usize..97, 1..20),
    ) {
        let limits = Limits { max_line_len: 64, max_value_len: 16, ..Limits::default() };
        let head = if touch { "gat 10" } else { "get" };
        let input = format!("{head} {}\r\nversion\r\n", keys.join(" "));
        let mut codec = RequestCodec::new(limits);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        for &step in steps.iter().cycle() {
            if at >= input.len() {
                break;
            }
            let end = (at + step).min(input.len());
            buf.extend_from_slice(&input.as_bytes()[at..end]);
            at = end;
            got.extend(decode_all(&mut codec, &mut buf));
            prop_assert!(buf.len() <= limits.max_request_len() + 97);
        }
        let got = logical(got);
        prop_assert_eq!(got.len(), 2, "{:?}", got);
        let want_kind = if touch { GetKind::Gat } else { GetKind::Get };
        let want_exptime = touch.then(|| b"10".to_vec());
        let want_keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        prop_assert_eq!(&got[0], &Logical::Get(want_kind, want_exptime, want_keys));
        prop_assert!(matches!(&got[1], Logical::Other(Decoded::Request(r)) if r.command == Command::Version));
    }

    #[test]
    fn the_response_framer_never_panics(input in proptest::collection::vec(any::<u8>(), 0..200)) {
        for kind in [ResponseKind::Line, ResponseKind::Values, ResponseKind::Meta, ResponseKind::Stats] {
            if let Ok(Some(len)) = parse_response(&input, kind, 64) {
                prop_assert!(len <= input.len());
                let _ = ValueBlocks::new(&input[..len]).count();
            }
        }
    }
}
