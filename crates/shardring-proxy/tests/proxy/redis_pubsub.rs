//! Redis pools' publish/subscribe against real redis-server backends on free 127.0.0.1 ports: a
//! channel on the server its name hashes to, patterns on every server, Redis's words and counts.
//! Skipped outside CI when redis-server is missing.

use std::time::{Duration, Instant};

use crate::common::{Client, RunningProxy};
use crate::redis_common::{cmds, direct, pool, read_replies};
use shardring_proxy::protocol::redis::Request;
use test_support::redis::{redises, resp, RedisServer};

/// Sends each command as its own write (as a client typing them would), then reads what comes back
/// for `wait`.
async fn session(c: &mut Client, commands: &[&[&str]], wait: Duration) -> Vec<u8> {
    for args in commands {
        c.send(&Request::from_args(args).frame).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    read_for(c, wait).await
}

/// Whatever arrives within `wait`.
async fn read_for(c: &mut Client, wait: Duration) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    let mut chunk = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, c.stream.read(&mut chunk)).await {
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
        let mut on = None;
        for (i, l) in listeners.iter_mut().enumerate() {
            if !read_for(l, Duration::from_millis(50)).await.is_empty() {
                on = Some(i);
            }
        }
        let on = on.expect("one server had the message");
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
    let confirmed = session(
        &mut sub,
        &[&["SUBSCRIBE", a, b]],
        Duration::from_millis(200),
    )
    .await;
    let text = String::from_utf8_lossy(&confirmed).into_owned();
    // The client's own counts, whichever server confirmed first.
    assert!(
        text.contains(&format!("$9\r\nsubscribe\r\n${}\r\n{a}\r\n", a.len())),
        "{text}"
    );
    assert!(text.contains(":1\r\n") && text.contains(":2\r\n"), "{text}");
    let mut psub = proxy.client().await;
    let confirmed = session(
        &mut psub,
        &[&["PSUBSCRIBE", "ch*"]],
        Duration::from_millis(200),
    )
    .await;
    // One confirmation, though every server confirmed it.
    assert_eq!(confirmed, b"*3\r\n$10\r\npsubscribe\r\n$3\r\nch*\r\n:1\r\n");
    let mut publisher = proxy.client().await;
    for ch in [a, b] {
        // Its subscriber and the pattern's, both on the channel's server.
        assert_eq!(
            cmds(&mut publisher, &["PUBLISH", ch, "hello"]).await,
            ":2\r\n"
        );
    }
    assert_eq!(
        cmds(&mut publisher, &["PUBLISH", "other", "x"]).await,
        ":0\r\n"
    );
    let got = read_for(&mut sub, Duration::from_millis(200)).await;
    // Each message as Redis pushes it: an array of bulk strings, as a command is written.
    let want: String = [a, b]
        .iter()
        .map(|ch| resp(&["message", ch, "hello"]))
        .collect();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let got = read_for(&mut psub, Duration::from_millis(200)).await;
    let want: String = [a, b]
        .iter()
        .map(|ch| resp(&["pmessage", "ch*", ch, "hello"]))
        .collect();
    assert_eq!(String::from_utf8_lossy(&got), want);
    // The messages of one channel arrive in the order they were published.
    for i in 0..500 {
        publisher
            .send(&Request::from_args(&["PUBLISH", a, &i.to_string()]).frame)
            .await;
    }
    read_replies(&mut publisher, 500).await;
    let got = read_for(&mut sub, Duration::from_millis(500)).await;
    let want: String = (0..500)
        .map(|i| resp(&["message", a, &i.to_string()]))
        .collect();
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
        let wait = Duration::from_millis(300);
        let mut via = proxy.client().await;
        let mut straight = direct(&reference[0]).await;
        let got = session(&mut via, commands, wait).await;
        let want = session(&mut straight, commands, wait).await;
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
    let confirmed = session(
        &mut sub,
        &[&["SUBSCRIBE", "news"]],
        Duration::from_millis(200),
    )
    .await;
    assert_eq!(confirmed, b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n");
    servers[0].kill();
    sub.expect_closed().await;
    proxy.stop().await;
}
