//! Redis pools' publish/subscribe against real redis-server backends on free 127.0.0.1 ports: a
//! channel on the server its name hashes to, patterns on every server, Redis's words and counts.
//! Skipped outside CI when redis-server is missing.

use std::time::{Duration, Instant};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmds, direct, pool, read_replies};
use shardring_proxy::protocol::redis::Request;
use test_support::redis::{redises, resp, RedisServer};

/// How long a test waits for what it expects (a loaded machine can be slow); what arrives after a
/// test has what it expected is then read for [`GRACE`] more, so an extra frame still fails it.
const PATIENCE: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_millis(100);

/// Sends each command as its own write (as a client typing them would).
async fn send_each(c: &mut Client, commands: &[&[&str]]) {
    for args in commands {
        c.send(&Request::from_args(args).frame).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// What arrives until `want` bytes are in (or [`PATIENCE`] runs out), then for [`GRACE`] more.
async fn read_until(c: &mut Client, want: usize) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut chunk = vec![0u8; 65536];
    while out.len() < want {
        match tokio::time::timeout_at(deadline, c.stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&chunk[..n]),
            _ => return out,
        }
    }
    out.extend(read_for(c, GRACE).await);
    out
}

/// What arrives until the stream falls quiet: the first bytes within [`PATIENCE`], then until
/// nothing came for 300 ms (for replies whose length the test cannot know, as `HELLO`'s).
async fn read_until_quiet(c: &mut Client) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut chunk = vec![0u8; 65536];
    let mut out = Vec::new();
    if let Ok(Ok(n)) = tokio::time::timeout(PATIENCE, c.stream.read(&mut chunk)).await {
        out.extend_from_slice(&chunk[..n]);
        if n > 0 {
            out.extend(read_for(c, Duration::from_millis(300)).await);
        }
    }
    out
}

/// Whatever arrives until nothing came for `wait`.
async fn read_for(c: &mut Client, wait: Duration) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout(wait, c.stream.read(&mut chunk)).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    out
}

/// Names of channels that hash to different servers, found by publishing through the proxy to a
/// subscriber on each server directly.
async fn channels_apart(proxy: &RunningProxy, servers: &[RedisServer], n: usize) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    for i in 0..400u64 {
        let ch = format!("ch{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40);
        let mut listeners = Vec::new();
        for s in servers {
            let mut l = direct(s).await;
            l.send(&Request::from_args(&["SUBSCRIBE", &ch]).frame).await;
            read_replies(&mut l, 1).await;
            listeners.push(l);
        }
        let mut p = proxy.client().await;
        assert_eq!(cmds(&mut p, &["PUBLISH", &ch, "x"]).await, ":1\r\n");
        let want = resp(&["message", &ch, "x"]).len();
        let deadline = Instant::now() + PATIENCE;
        let mut on = None;
        while on.is_none() && Instant::now() < deadline {
            for (i, l) in listeners.iter_mut().enumerate() {
                if !read_for(l, Duration::from_millis(10)).await.is_empty() {
                    on = Some(i);
                    break;
                }
            }
        }
        let on = on.expect("one server had the message");
        for l in &mut listeners {
            assert!(
                read_for(l, Duration::from_millis(10)).await.len() < want,
                "two servers had it"
            );
        }
        if !found.iter().any(|(s, _)| *s == on) {
            found.push((on, ch));
        }
        if found.len() == n {
            return found.into_iter().map(|(_, c)| c).collect();
        }
    }
    panic!("400 channels on fewer than {n} servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_lives_on_its_server_and_a_pattern_on_every_server() {
    let Some(servers) = redises(3, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let chans = channels_apart(&proxy, &servers, 2).await;
    let (a, b) = (&chans[0], &chans[1]);
    let mut sub = proxy.client().await;
    send_each(&mut sub, &[&["SUBSCRIBE", a, b]]).await;
    // Each `*3 subscribe <name> :<count>`: the array of two bulk strings and a 4-byte count.
    let want = resp(&["subscribe", a]).len() + resp(&["subscribe", b]).len() + 8;
    let confirmed = read_until(&mut sub, want).await;
    let text = String::from_utf8_lossy(&confirmed).into_owned();
    // The client's own counts, whichever server confirmed first.
    assert!(
        text.contains(&format!("$9\r\nsubscribe\r\n${}\r\n{a}\r\n", a.len())),
        "{text}"
    );
    assert!(text.contains(":1\r\n") && text.contains(":2\r\n"), "{text}");
    let mut psub = proxy.client().await;
    send_each(&mut psub, &[&["PSUBSCRIBE", "ch*"]]).await;
    // One confirmation, though every server confirmed it.
    let want = b"*3\r\n$10\r\npsubscribe\r\n$3\r\nch*\r\n:1\r\n";
    assert_eq!(read_until(&mut psub, want.len()).await, want);
    let mut publisher = proxy.client().await;
    // Messages from two servers have no order a client can rely on (nor has Redis Cluster): the
    // second channel is published to only once the first's messages arrived.
    for ch in [a, b] {
        // Its subscriber and the pattern's, both on the channel's server.
        assert_eq!(
            cmds(&mut publisher, &["PUBLISH", ch, "hello"]).await,
            ":2\r\n"
        );
        // Each message as Redis pushes it: an array of bulk strings, as a command is written.
        let want = resp(&["message", ch, "hello"]);
        let got = read_until(&mut sub, want.len()).await;
        assert_eq!(String::from_utf8_lossy(&got), want);
        let want = resp(&["pmessage", "ch*", ch, "hello"]);
        let got = read_until(&mut psub, want.len()).await;
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
    assert_eq!(
        cmds(&mut publisher, &["PUBLISH", "other", "x"]).await,
        ":0\r\n"
    );
    // The messages of one channel arrive in the order they were published.
    for i in 0..500 {
        publisher
            .send(&Request::from_args(&["PUBLISH", a, &i.to_string()]).frame)
            .await;
    }
    read_replies(&mut publisher, 500).await;
    let want: String = (0..500)
        .map(|i| resp(&["message", a, &i.to_string()]))
        .collect();
    let got = read_until(&mut sub, want.len()).await;
    assert!(got == want.as_bytes(), "500 messages in order");
    let views = proxy.proxy.views();
    let own: u64 = views[0]
        .servers
        .iter()
        .map(|s| s.dedicated_connections.get())
        .sum();
    // The channel subscriber on two servers, the pattern subscriber on all three.
    assert_eq!(own, 5);
    drop((sub, psub));
    let deadline = Instant::now() + Duration::from_secs(5);
    while views[0]
        .servers
        .iter()
        .map(|s| s.dedicated_connections.get())
        .sum::<u64>()
        > 0
    {
        assert!(
            Instant::now() < deadline,
            "subscription connections left open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_gets_redis_own_bytes_in_resp2_and_resp3() {
    let Some(servers) = redises(2, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let chans = channels_apart(&proxy, &servers, 2).await;
    let (a, b) = (chans[0].as_str(), chans[1].as_str());
    let Some(reference) = redises(1, &[]) else {
        return;
    };
    // Unsubscribing names one at a time: without names, Redis's own order is its dict's.
    let resp2: &[&[&str]] = &[
        &["SUBSCRIBE", a],
        &["SUBSCRIBE", b],
        &["PING"],
        &["PING", "hi"],
        &["GET", "x"],
        &["PSUBSCRIBE", "p*"],
        &["UNSUBSCRIBE", a],
        &["UNSUBSCRIBE", b],
        &["UNSUBSCRIBE"],
        &["PUNSUBSCRIBE"],
        &["PUNSUBSCRIBE"],
        &["GET", "x"],
        &["PING"],
    ];
    let resp3: &[&[&str]] = &[
        &["HELLO", "3"],
        &["SUBSCRIBE", a],
        &["GET", "x"],
        &["PING"],
        &["SSUBSCRIBE", b],
        &["SUNSUBSCRIBE"],
        // One name a command: names on different servers are confirmed as each server answers.
        &["UNSUBSCRIBE", "never"],
        &["UNSUBSCRIBE", a],
        &["RESET"],
        &["GET", "x"],
    ];
    for commands in [resp2, resp3] {
        let mut via = proxy.client().await;
        let mut straight = direct(&reference[0]).await;
        send_each(&mut via, commands).await;
        let got = read_until_quiet(&mut via).await;
        send_each(&mut straight, commands).await;
        let want = read_until_quiet(&mut straight).await;
        let (got, want) = (
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
        );
        // HELLO's reply names the server's version and the connection's id: compared from `proto`.
        let from = |s: &str| s[s.find(">3").or(s.find("*3")).unwrap_or(0)..].to_owned();
        assert_eq!(from(&got), from(&want));
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_whose_server_dies_is_closed_as_redis_would() {
    let Some(mut servers) = redises(1, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut sub = proxy.client().await;
    send_each(&mut sub, &[&["SUBSCRIBE", "news"]]).await;
    let want = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    assert_eq!(read_until(&mut sub, want.len()).await, want);
    servers[0].kill();
    sub.expect_closed().await;
    proxy.stop().await;
}

/// The connections `server` has open (its `CLIENT LIST`, this probe's own left out).
async fn connections(server: &RedisServer) -> usize {
    let mut probe = direct(server).await;
    let list = cmds(&mut probe, &["CLIENT", "LIST"]).await;
    list.lines().filter(|l| l.contains("addr=")).count() - 1
}

/// Waits until `server` has `want` connections open; their count then.
async fn connections_settle(server: &RedisServer, want: usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = connections(server).await;
        if now == want || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_leaves_every_channel_is_served_as_before_and_its_connection_closes() {
    let Some(servers) = redises(1, &[]) else {
        return;
    };
    let proxy = RunningProxy::start(pool(&servers, "")).await;
    let mut c = proxy.client().await;
    // The shared connections, opened by a first request.
    assert_eq!(cmds(&mut c, &["SET", "k", "v"]).await, "+OK\r\n");
    let shared = connections(&servers[0]).await;
    send_each(&mut c, &[&["SUBSCRIBE", "news"]]).await;
    let want = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    assert_eq!(read_until(&mut c, want.len()).await, want);
    assert_eq!(
        connections(&servers[0]).await,
        shared + 1,
        "a subscription connection"
    );
    send_each(&mut c, &[&["UNSUBSCRIBE"]]).await;
    let want = b"*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:0\r\n";
    assert_eq!(read_until(&mut c, want.len()).await, want);
    // No longer a subscriber: anything goes, pipelined, and its subscription connection is closed.
    let mut both = Request::from_args(&["GET", "k"]).frame.to_vec();
    both.extend_from_slice(&Request::from_args(&["DEL", "k"]).frame);
    c.send(&both).await;
    assert_eq!(read_until(&mut c, 11).await, b"$1\r\nv\r\n:1\r\n");
    assert_eq!(connections_settle(&servers[0], shared).await, shared);
    // And it may subscribe again.
    send_each(&mut c, &[&["SUBSCRIBE", "news"]]).await;
    let want = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    assert_eq!(read_until(&mut c, want.len()).await, want);
    let mut publisher = proxy.client().await;
    assert_eq!(
        cmds(&mut publisher, &["PUBLISH", "news", "hi"]).await,
        ":1\r\n"
    );
    let want = b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n";
    assert_eq!(read_until(&mut c, want.len()).await, want);
    proxy.stop().await;
}
