//! The value limit is the servers' own: with default flags the proxy refuses no value its memcached
//! servers store (they say their `item_size_max` when a connection opens), a value over it gets
//! memcached's own answer, and `--max-value-size` still overrides.

use std::time::Duration;

use crate::common::{pool_config, Client, RunningProxy};
use test_support::Memcached;
use tokio::io::AsyncReadExt;

/// Everything `addr` answers to `input` followed by `mn`, up to the `MN`.
async fn exchange(c: &mut Client, input: &[u8]) -> Vec<u8> {
    let mut all = input.to_vec();
    all.extend_from_slice(b"mn\r\n");
    c.send(&all).await;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(b"MN\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), c.stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn set(key: &str, len: usize, noreply: bool) -> Vec<u8> {
    let noreply = if noreply { " noreply" } else { "" };
    let mut req = format!("set {key} 0 0 {len}{noreply}\r\n").into_bytes();
    req.extend(std::iter::repeat_n(b'v', len));
    req.extend_from_slice(b"\r\n");
    req
}

#[tokio::test]
async fn with_default_flags_a_value_the_servers_store_is_stored_and_a_larger_one_gets_memcacheds_reply(
) {
    let servers: Vec<Memcached> = (0..3)
        .map(|_| Memcached::start_with(&["-I", "2m"]))
        .collect();
    // One server answers directly; the proxy is in front of the other two.
    let proxy = RunningProxy::start(pool_config(&servers[1..])).await;
    let mut c = proxy.client().await;
    let mut direct = Client::connect(&servers[0].addr).await;

    // 1.5 MB, over the 1 MiB the proxy used to refuse: stored, and read back whole.
    let len = 1_500_000;
    assert_eq!(
        exchange(&mut c, &set("big", len, false)).await,
        b"STORED\r\nMN\r\n"
    );
    c.send(b"get big\r\n").await;
    let mut want = format!("VALUE big 0 {len}\r\n").into_bytes();
    want.extend(std::iter::repeat_n(b'v', len));
    want.extend_from_slice(b"\r\nEND\r\n");
    assert!(c.read_n(want.len()).await == want, "get big");

    // Over the servers' limit (2 MiB with its item header, and well over it), with and without
    // noreply: memcached's own bytes, and the stream stays in step.
    let pool = &proxy.proxy.views()[0].pool;
    for len in [2 << 20, 2_500_000, 3 << 20] {
        for noreply in [false, true] {
            let input = set("huge", len, noreply);
            let want = exchange(&mut direct, &input).await;
            assert_eq!(
                exchange(&mut c, &input).await,
                want,
                "a {len}-byte set, noreply {noreply}"
            );
        }
    }
    // Once every server has said its limit (a request to each opens its connection), a value over
    // it is refused without being sent (the bytes are the same either way).
    for key in (0..32).map(|i| format!("{i}-any")) {
        exchange(&mut c, format!("get {key}\r\n").as_bytes()).await;
    }
    let refused = pool.client_errors.get();
    let input = set("huge", 3 << 20, false);
    assert_eq!(
        exchange(&mut c, &input).await,
        exchange(&mut direct, &input).await
    );
    assert_eq!(pool.client_errors.get(), refused + 1);
    // Nothing stored under the refused key; the stored value is intact.
    let both = exchange(&mut c, b"get huge big\r\n").await;
    assert!(both.starts_with(format!("VALUE big 0 {len}\r\n", len = 1_500_000).as_bytes()));
    assert!(both.ends_with(b"\r\nEND\r\nMN\r\n"));
    proxy.stop().await;
}

#[tokio::test]
async fn an_explicit_max_value_size_is_the_limit_whatever_the_servers_say() {
    let servers: Vec<Memcached> = (0..1)
        .map(|_| Memcached::start_with(&["-I", "2m"]))
        .collect();
    let mut config = pool_config(&servers);
    config.memcache_mut().unwrap().limits.max_value_len = 1000;
    config.memcache_mut().unwrap().limits.value_len_from_servers = false;
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    assert_eq!(
        exchange(&mut c, &set("k", 1001, false)).await,
        b"SERVER_ERROR object too large for cache\r\nMN\r\n"
    );
    assert_eq!(exchange(&mut c, &set("k", 1001, true)).await, b"MN\r\n");
    assert_eq!(
        exchange(&mut c, &set("k", 1000, false)).await,
        b"STORED\r\nMN\r\n"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn servers_of_different_item_sizes_each_store_what_they_can_and_refuse_in_their_own_words() {
    let small = Memcached::start_with(&["-I", "1m"]);
    let large = Memcached::start_with(&["-I", "2m"]);
    let mut on_small = Client::connect(&small.addr).await;
    let mut on_large = Client::connect(&large.addr).await;
    let servers = [small, large];
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let mut c = proxy.client().await;
    // Teach the proxy both servers' limits: a request to each opens its connection.
    for key in (0..32).map(|i| format!("{i}-big")) {
        exchange(&mut c, format!("get {key}\r\n").as_bytes()).await;
    }
    // 1.5 MB: the `-I 2m` server stores it, the `-I 1m` one refuses it itself (and the proxy, which
    // takes the larger limit, lets it through to say so).
    let len = 1_500_000;
    let refused = exchange(&mut on_small, &set("probe", len, false)).await;
    assert!(refused.starts_with(b"SERVER_ERROR "), "{refused:?}");
    let (mut stored, mut refused_by_small) = (0, 0);
    // Keys that differ in their first byte: twemproxy's fnv1a_64 keeps only the low 32 bits of its
    // 64-bit prime, so keys that differ only at the end hash close together and share a server.
    for key in (0..32).map(|i| format!("{i}-big")) {
        let answer = exchange(&mut c, &set(&key, len, false)).await;
        let held_by_large = exchange(&mut on_large, format!("mg {key}\r\n").as_bytes()).await;
        if held_by_large == b"HD\r\nMN\r\n" {
            assert_eq!(answer, b"STORED\r\nMN\r\n", "{key} on the 2m server");
            stored += 1;
        } else {
            assert_eq!(
                answer, refused,
                "{key} on the 1m server: memcached's own words"
            );
            refused_by_small += 1;
        }
    }
    assert!(
        stored > 0 && refused_by_small > 0,
        "{stored} stored, {refused_by_small} refused"
    );
    // Over both servers' limits: refused by the proxy, in the same words.
    let over = set("huge", 3 << 20, false);
    assert_eq!(
        exchange(&mut c, &over).await,
        exchange(&mut on_large, &over).await
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_server_paused_while_its_first_connection_opens_still_tells_its_limit_later() {
    // The introduction (`stats settings`) times out while the server is stopped: the proxy asks
    // again on a connection a few seconds later instead of never learning the 2 MiB limit (and
    // sending every value over it, to be refused by the server, for the proxy's life).
    let server = Memcached::start_with(&["-I", "2m"]);
    let mut config = pool_config(std::slice::from_ref(&server));
    config.timeout = Some(Duration::from_millis(300));
    server.pause();
    let proxy = RunningProxy::start(config).await;
    let mut c = proxy.client().await;
    c.send(b"get k\r\n").await;
    let line = c.read_line().await;
    assert!(line.starts_with("SERVER_ERROR"), "{line}");
    server.resume();
    // The retry period (`INTRODUCTIONS_RETRY`, 5 s), then a new connection asks again.
    tokio::time::sleep(Duration::from_millis(5_300)).await;
    let mut c = proxy.client().await;
    let mut answer = Vec::new();
    for _ in 0..3 {
        answer = exchange(&mut c, b"get k\r\n").await;
        if answer == b"END\r\nMN\r\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(String::from_utf8_lossy(&answer), "END\r\nMN\r\n");
    // The limit is known: a value over it is refused without being sent.
    let pool = &proxy.proxy.views()[0].pool;
    let refused = pool.client_errors.get();
    let reply = exchange(&mut c, &set("huge", 3 << 20, false)).await;
    assert!(reply.starts_with(b"SERVER_ERROR"), "{reply:?}");
    assert_eq!(
        pool.client_errors.get(),
        refused + 1,
        "refused by the proxy"
    );
    proxy.stop().await;
}
