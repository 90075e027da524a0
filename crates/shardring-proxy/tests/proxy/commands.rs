//! Every command through the proxy to real memcached servers.

use crate::common::{self, pool_config, Client, RunningProxy};
use test_support::{memcacheds, Memcached};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_retrieval_and_arithmetic() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    c.check(b"set a 5 0 3\r\nabc\r\n", b"STORED\r\n").await;
    c.check(b"get a\r\n", b"VALUE a 5 3\r\nabc\r\nEND\r\n")
        .await;
    c.check(b"add a 0 0 1\r\nx\r\n", b"NOT_STORED\r\n").await;
    c.check(b"add b 0 0 1\r\nx\r\n", b"STORED\r\n").await;
    c.check(b"replace nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n")
        .await;
    c.check(b"replace b 0 0 2\r\nyy\r\n", b"STORED\r\n").await;
    c.check(b"append b 0 0 1\r\nz\r\n", b"STORED\r\n").await;
    c.check(b"prepend b 0 0 1\r\nw\r\n", b"STORED\r\n").await;
    c.check(b"get b\r\n", b"VALUE b 0 4\r\nwyyz\r\nEND\r\n")
        .await;
    // gets: read the CAS, then cas with it and with a stale one.
    c.send(b"gets b\r\n").await;
    let line = c.read_line().await;
    let cas: u64 = line.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(c.read_n(b"wyyz\r\nEND\r\n".len()).await, b"wyyz\r\nEND\r\n");
    c.check(
        format!("cas b 0 0 1 {}\r\nq\r\n", cas + 1000).as_bytes(),
        b"EXISTS\r\n",
    )
    .await;
    c.check(
        format!("cas b 0 0 1 {cas}\r\nq\r\n").as_bytes(),
        b"STORED\r\n",
    )
    .await;
    c.check(b"cas nope 0 0 1 1\r\nq\r\n", b"NOT_FOUND\r\n")
        .await;
    c.check(b"set n 0 0 2\r\n10\r\n", b"STORED\r\n").await;
    c.check(b"incr n 5\r\n", b"15\r\n").await;
    c.check(b"decr n 20\r\n", b"0\r\n").await;
    c.check(b"incr nope 1\r\n", b"NOT_FOUND\r\n").await;
    c.check(
        b"incr a 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    )
    .await;
    c.check(b"touch a 100\r\n", b"TOUCHED\r\n").await;
    c.check(b"touch nope 100\r\n", b"NOT_FOUND\r\n").await;
    c.check(b"gat 100 a\r\n", b"VALUE a 5 3\r\nabc\r\nEND\r\n")
        .await;
    c.send(b"gats 100 a\r\n").await;
    assert!(c.read_line().await.starts_with("VALUE a 5 3 "));
    assert_eq!(c.read_n(b"abc\r\nEND\r\n".len()).await, b"abc\r\nEND\r\n");
    c.check(b"delete a\r\n", b"DELETED\r\n").await;
    c.check(b"delete a\r\n", b"NOT_FOUND\r\n").await;
    c.check(b"delete b 0\r\n", b"DELETED\r\n").await;
    c.check(b"get a b\r\n", b"END\r\n").await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noreply_is_honoured_and_the_stream_stays_in_step() {
    let servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    c.send(b"set k 0 0 1 noreply\r\n1\r\nincr k 4 noreply\r\ntouch k 10 noreply\r\nadd k 0 0 1 noreply\r\nx\r\n")
        .await;
    c.check(b"get k\r\n", b"VALUE k 0 1\r\n5\r\nEND\r\n").await;
    c.send(b"delete k noreply\r\nflush_all noreply\r\nverbosity 1 noreply\r\n")
        .await;
    c.check(b"get k\r\n", b"END\r\n").await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_commands_pass_flags_through() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    c.check(b"ms mk 2 T0 F7\r\nhi\r\n", b"HD\r\n").await;
    c.check(b"mg mk v f\r\n", b"VA 2 f7\r\nhi\r\n").await;
    c.check(b"mg mk k v Oabc\r\n", b"VA 2 kmk Oabc\r\nhi\r\n")
        .await;
    c.check(b"mg missing v\r\n", b"EN\r\n").await;
    c.check(b"mg mk s\r\n", b"HD s2\r\n").await;
    // Quiet mode: misses and HD are hidden; mn ends the batch in order.
    c.check(
        b"mg missing v q\r\nms mk 1 q\r\nx\r\nmg mk v q\r\nmn\r\n",
        b"VA 1\r\nx\r\nMN\r\n",
    )
    .await;
    c.check(b"ms cnt 1\r\n5\r\n", b"HD\r\n").await;
    c.check(b"ma cnt v\r\n", b"VA 1\r\n6\r\n").await;
    c.check(b"ma cnt MD D2 v\r\n", b"VA 1\r\n4\r\n").await;
    c.check(b"ma nope\r\n", b"NF\r\n").await;
    c.check(b"md cnt\r\n", b"HD\r\n").await;
    c.check(b"md cnt\r\n", b"NF\r\n").await;
    // A quiet delete of a missing key is still answered `NF`, as memcached 1.6 answers it.
    c.check(b"md cnt q\r\nmn\r\n", b"NF\r\nMN\r\n").await;
    // `me` is routed by key like the others; `mn` ignores extra tokens as memcached 1.6 does.
    c.send(b"me mk\r\n").await;
    assert!(c.read_line().await.starts_with("ME mk "));
    c.check(b"me nothing-here\r\n", b"EN\r\n").await;
    c.check(b"mn extra\r\n", b"MN\r\n").await;
    c.check(b"mg !!! b v\r\n", b"CLIENT_ERROR error decoding key\r\n")
        .await;
    proxy.stop().await;
}

/// With the `b` flag the key token is base64 and the server stores the decoded bytes, so the proxy must
/// place it by the decoded key: what `set` stored under `key-N` is found by `mg <base64(key-N)> b`, on
/// whichever server owns `key-N`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_base64_keys_are_routed_by_their_decoded_bytes() {
    use base64::Engine as _;
    let servers = memcacheds(4);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    for i in 0..40 {
        let key = format!("key-{i}");
        c.check(
            format!("set {key} 0 0 1\r\n{}\r\n", i % 10).as_bytes(),
            b"STORED\r\n",
        )
        .await;
        let encoded = base64::engine::general_purpose::STANDARD.encode(&key);
        c.check(
            format!("mg {encoded} b v\r\n").as_bytes(),
            format!("VA 1\r\n{}\r\n", i % 10).as_bytes(),
        )
        .await;
        // And the other way: written with `ms … b`, read with a classic `get`.
        let other = format!("other-{i}");
        let encoded = base64::engine::general_purpose::STANDARD.encode(&other);
        c.check(format!("ms {encoded} 2 b\r\nok\r\n").as_bytes(), b"HD\r\n")
            .await;
        c.check(
            format!("get {other}\r\n").as_bytes(),
            format!("VALUE {other} 0 2\r\nok\r\nEND\r\n").as_bytes(),
        )
        .await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_commands() {
    let servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    c.send(b"version\r\n").await;
    assert!(c
        .read_line()
        .await
        .starts_with("VERSION 1.6.0 shardring-proxy-"));
    c.check(b"verbosity 1\r\n", b"OK\r\n").await;
    c.check(b"set f 0 0 1\r\n1\r\n", b"STORED\r\n").await;
    c.check(b"flush_all\r\n", b"OK\r\n").await;
    c.check(b"get f\r\n", b"END\r\n").await;
    c.check(b"flush_all 0\r\n", b"OK\r\n").await;
    c.send(b"stats\r\n").await;
    let mut lines = Vec::new();
    loop {
        let l = c.read_line().await;
        if l == "END\r\n" {
            break;
        }
        assert!(l.starts_with("STAT "), "{l:?}");
        lines.push(l);
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("STAT curr_connections 1")),
        "{lines:?}"
    );
    c.check(b"stats items\r\n", b"END\r\n").await;
    c.check(b"stats detail dump\r\n", b"END\r\n").await;
    c.check(b"stats detail on\r\n", b"OK\r\n").await;
    c.check(b"stats reset\r\n", b"RESET\r\n").await;
    c.check(b"stats noreply\r\n", b"ERROR\r\n").await;
    c.check(b"stats bogus\r\n", b"ERROR\r\n").await;
    // memcached 1.6: `verbosity … noreply` is silent, `version` and `quit` ignore extra tokens.
    c.send(b"verbosity noreply\r\nverbosity 1 noreply\r\nversion extra tokens\r\n")
        .await;
    assert!(c
        .read_line()
        .await
        .starts_with("VERSION 1.6.0 shardring-proxy-"));
    // memcached 1.6 answers a command with too few tokens ERROR.
    c.check(b"verbosity\r\n", b"ERROR\r\n").await;
    c.send(b"quit now\r\n").await;
    c.expect_closed().await;
    let mut c = proxy.client().await;
    c.send(b"quit\r\n").await;
    c.expect_closed().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_get_across_servers_keeps_the_clients_order() {
    let servers = memcacheds(4);
    let mut config = pool_config(&servers);
    // twemproxy's fnv1a_64 (the default) keeps sequential keys like key1, key2… close together on the
    // ring, so with it these 60 keys would mostly share one server; md5 spreads them.
    config.hash = shardring_proxy::config::TwemproxyHash::Md5;
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let mut get = String::from("get");
    let mut expect = String::new();
    for i in 0..60 {
        if i % 3 != 0 {
            c.check(
                format!("set key{i} {i} 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes(),
                b"STORED\r\n",
            )
            .await;
            expect.push_str(&format!(
                "VALUE key{i} {i} {}\r\nv{i}\r\n",
                format!("v{i}").len()
            ));
        }
        get.push_str(&format!(" key{i}"));
    }
    // A repeated key is answered twice, as memcached does.
    get.push_str(" key1\r\n");
    expect.push_str("VALUE key1 1 2\r\nv1\r\nEND\r\n");
    c.check(get.as_bytes(), expect.as_bytes()).await;
    // The keys really are spread over every server.
    let views = proxy.proxy.views();
    let used = views[0]
        .servers
        .iter()
        .filter(|s| s.requests.get() > 0)
        .count();
    assert_eq!(used, 4);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    let mut req = Vec::new();
    let mut expect = Vec::new();
    for i in 0..500 {
        req.extend_from_slice(
            format!("set p{i} 0 0 {}\r\n{i}\r\n", i.to_string().len()).as_bytes(),
        );
        expect.extend_from_slice(b"STORED\r\n");
    }
    for i in 0..500 {
        req.extend_from_slice(format!("get p{i} p{}\r\n", (i + 1) % 500).as_bytes());
        let j = (i + 1) % 500;
        expect.extend_from_slice(
            format!(
                "VALUE p{i} 0 {}\r\n{i}\r\nVALUE p{j} 0 {}\r\n{j}\r\nEND\r\n",
                i.to_string().len(),
                j.to_string().len()
            )
            .as_bytes(),
        );
    }
    // Write and read concurrently so neither side's buffers fill up.
    let (mut rd, mut wr) = c.stream.split();
    let write = async {
        use tokio::io::AsyncWriteExt;
        wr.write_all(&req).await.unwrap();
    };
    let read = async {
        use tokio::io::AsyncReadExt;
        let mut got = vec![0u8; expect.len()];
        tokio::time::timeout(common::IO_TIMEOUT, rd.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        got
    };
    let ((), got) = tokio::join!(write, read);
    assert!(got == expect, "pipelined replies out of order");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_with_crlf_binary_bytes_and_at_the_size_limit() {
    let servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.memcache_mut().unwrap().limits.max_value_len = 512 * 1024;
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let tricky: Vec<u8> = b"a\r\nEND\r\nVALUE x 0 1\r\n\0\xff\xfe".to_vec();
    let mut req = format!("set bin 1 0 {}\r\n", tricky.len()).into_bytes();
    req.extend_from_slice(&tricky);
    req.extend_from_slice(b"\r\n");
    c.check(&req, b"STORED\r\n").await;
    let mut expect = format!("VALUE bin 1 {}\r\n", tricky.len()).into_bytes();
    expect.extend_from_slice(&tricky);
    expect.extend_from_slice(b"\r\nEND\r\n");
    c.check(b"get bin\r\n", &expect).await;
    // Exactly at the limit: stored and read back whole.
    let big: Vec<u8> = (0..512 * 1024).map(|i| (i * 7 % 256) as u8).collect();
    let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    c.check(&req, b"STORED\r\n").await;
    let mut expect = format!("VALUE big 0 {}\r\n", big.len()).into_bytes();
    expect.extend_from_slice(&big);
    expect.extend_from_slice(b"\r\nEND\r\n");
    c.check(
        b"get big bin\r\n",
        &[
            &expect[..expect.len() - 5],
            &format!("VALUE bin 1 {}\r\n", tricky.len()).into_bytes()[..],
            &tricky[..],
            b"\r\nEND\r\n",
        ]
        .concat(),
    )
    .await;
    // One byte over: refused, its data skipped, and the connection goes on.
    let mut req = format!("set big2 0 0 {}\r\n", big.len() + 1).into_bytes();
    req.extend_from_slice(&vec![b'z'; big.len() + 1]);
    req.extend_from_slice(b"\r\n");
    c.check(&req, b"SERVER_ERROR object too large for cache\r\n")
        .await;
    c.check(b"get big2\r\n", b"END\r\n").await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_errors_and_the_connection_goes_on() {
    let servers = memcacheds(2);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    c.check(b"bogus\r\n", b"ERROR\r\n").await;
    // An empty line and a get without keys: ERROR, as memcached 1.6 answers them.
    c.check(b"\r\n", b"ERROR\r\n").await;
    c.check(b"get\r\n", b"ERROR\r\n").await;
    c.check(
        b"incr k x\r\n",
        b"CLIENT_ERROR invalid numeric delta argument\r\n",
    )
    .await;
    let long = "k".repeat(251);
    c.check(
        format!("get {long}\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\n",
    )
    .await;
    // A storage command with a bad key has its data block skipped: the next command is understood.
    c.check(
        format!("set {long} 0 0 3\r\nabc\r\nget x\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\nEND\r\n",
    )
    .await;
    let ok = "k".repeat(250);
    c.check(format!("set {ok} 0 0 1\r\n1\r\n").as_bytes(), b"STORED\r\n")
        .await;
    c.check(
        format!("get {ok}\r\n").as_bytes(),
        format!("VALUE {ok} 0 1\r\n1\r\nEND\r\n").as_bytes(),
    )
    .await;
    c.check(
        b"set x 0 0 zz\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    )
    .await;
    // An extra last token that is not noreply is ignored, as memcached 1.6 ignores it.
    c.check(b"set maybe 0 0 1 maybe\r\n1\r\n", b"STORED\r\n")
        .await;
    c.check(
        b"touch x soon\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    )
    .await;
    // A data block of the wrong length cannot be resynchronised: reply, then close.
    c.send(b"set x 0 0 2\r\nabcdef\r\n").await;
    assert_eq!(c.read_line().await, "CLIENT_ERROR bad data chunk\r\n");
    c.expect_closed().await;
    // So can a line that never ends.
    let mut c2 = proxy.client().await;
    c2.send(&vec![b'a'; 70 * 1024]).await;
    assert_eq!(c2.read_line().await, "CLIENT_ERROR line too long\r\n");
    c2.expect_closed().await;
    // Other clients were never disturbed.
    let mut c3: Client = proxy.client().await;
    c3.check(b"get x\r\n", b"END\r\n").await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_can_listen_on_a_unix_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let servers = memcacheds(1);
    let path =
        std::env::temp_dir().join(format!("shardring-proxy-test-{}.sock", std::process::id()));
    let mut config = pool_config(&servers);
    config.listen =
        shardring_proxy::config::parse_listen(&format!("{} 0600", path.display())).unwrap();
    let proxy = RunningProxy::start(config).await;
    let mode = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    s.write_all(b"set u 0 0 1\r\n1\r\nget u\r\n").await.unwrap();
    let expect = b"STORED\r\nVALUE u 0 1\r\n1\r\nEND\r\n";
    let mut got = vec![0u8; expect.len()];
    tokio::time::timeout(common::IO_TIMEOUT, s.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got[..], expect);
    proxy.stop().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_connections_per_server_keep_each_clients_order() {
    let servers = memcacheds(2);
    let mut config = pool_config(&servers);
    config.server_connections = 4;
    config.preconnect = true;
    let proxy = RunningProxy::start(config).await;
    let mut clients = Vec::new();
    for c in 0..6 {
        let mut client = proxy.client().await;
        clients.push(tokio::spawn(async move {
            // set then get of the same key, pipelined: the get must see the set.
            let mut req = Vec::new();
            let mut expect = Vec::new();
            for i in 0..200 {
                let v = format!("{c}-{i}");
                req.extend_from_slice(
                    format!("set sc{c} 0 0 {}\r\n{v}\r\nget sc{c}\r\n", v.len()).as_bytes(),
                );
                expect.extend_from_slice(
                    format!("STORED\r\nVALUE sc{c} 0 {}\r\n{v}\r\nEND\r\n", v.len()).as_bytes(),
                );
            }
            client.check(&req, &expect).await;
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let conns: u64 = proxy.proxy.views()[0]
        .servers
        .iter()
        .map(|s| s.server_connections.get())
        .sum();
    let workers = proxy.proxy.workers() as u64;
    assert_eq!(conns, 8 * workers, "preconnect opens every connection");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connections_caps_clients() {
    let servers = memcacheds(1);
    let mut config = pool_config(&servers);
    config.client_connections = 2;
    let proxy = RunningProxy::start(config).await;
    let mut a = proxy.client().await;
    let mut b = proxy.client().await;
    a.check(b"version\r\n", b"VERSION 1.6.0 shardring-proxy-")
        .await;
    let _ = a.read_line().await;
    b.check(b"mn\r\n", b"MN\r\n").await;
    // The third is not served while two are open...
    let mut c = proxy.client().await;
    c.send(b"mn\r\n").await;
    let mut buf = [0u8; 4];
    let early = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        tokio::io::AsyncReadExt::read(&mut c.stream, &mut buf),
    )
    .await;
    assert!(
        early.is_err(),
        "a third client was served past client_connections: 2"
    );
    // ...and is once one of them leaves.
    drop(a);
    assert_eq!(c.read_n(4).await, b"MN\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_gat_and_gats_split_across_servers_too() {
    let servers = memcacheds(3);
    let mut config = pool_config(&servers);
    config.hash = shardring_proxy::config::TwemproxyHash::Md5;
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..40).map(|i| format!("sp{i}")).collect();
    for k in &keys {
        c.check(
            format!(
                "set {k} 3 0 2\r\n{}\r\n",
                &k[2..].to_string().repeat(2)[..2]
            )
            .as_bytes(),
            b"STORED\r\n",
        )
        .await;
    }
    for cmd in ["gets", "gat 100", "gats 100"] {
        c.send(format!("{cmd} {} missing\r\n", keys.join(" ")).as_bytes())
            .await;
        for k in &keys {
            let line = c.read_line().await;
            let prefix = format!("VALUE {k} 3 2");
            assert!(line.starts_with(&prefix), "{cmd}: {line:?}");
            let with_cas = cmd != "gat 100";
            assert_eq!(
                line.trim_end().split(' ').count(),
                if with_cas { 5 } else { 4 },
                "{cmd}: {line:?}"
            );
            let _ = c.read_line().await;
        }
        assert_eq!(c.read_line().await, "END\r\n");
    }
    let used = proxy.proxy.views()[0]
        .servers
        .iter()
        .filter(|s| s.requests.get() > 0)
        .count();
    assert_eq!(used, 3);
    proxy.stop().await;
}

/// twemproxy's `servers:` take unix-socket paths (`/path:weight [name]`); so does the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_servers_serve_like_tcp_ones() {
    let servers = vec![
        Memcached::start_unix(),
        Memcached::start(),
        Memcached::start_unix(),
    ];
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    let keys: Vec<String> = (0..60).map(|i| format!("{i}:unix-key")).collect();
    for k in &keys {
        c.check(format!("set {k} 0 0 2\r\nok\r\n").as_bytes(), b"STORED\r\n")
            .await;
    }
    let mut expect = String::new();
    for k in &keys {
        expect.push_str(&format!("VALUE {k} 0 2\r\nok\r\nEND\r\n"));
    }
    let mut gets = String::new();
    for k in &keys {
        gets.push_str(&format!("get {k}\r\n"));
    }
    c.check(gets.as_bytes(), expect.as_bytes()).await;
    c.send(format!("get {}\r\n", keys.join(" ")).as_bytes())
        .await;
    let mut values = 0;
    loop {
        let line = c.read_line().await;
        if line == "END\r\n" {
            break;
        }
        assert!(line.starts_with("VALUE "), "{line:?}");
        assert_eq!(c.read_line().await, "ok\r\n");
        values += 1;
    }
    assert_eq!(values, keys.len());
    // Every server, unix or TCP, took keys.
    let views = proxy.proxy.views();
    assert!(
        views[0].servers.iter().all(|s| s.requests.get() > 0),
        "{:?}",
        views[0]
            .servers
            .iter()
            .map(|s| s.requests.get())
            .collect::<Vec<_>>()
    );
    proxy.stop().await;
}
