//! TLS on both sides of a pool, against real servers: memcached with `-Z` and redis-server with
//! `--tls-port`, behind TLS and plain listeners, with certificates made here (rcgen) in a temp dir.
//! Each refusal (no client certificate on a mutual-TLS listener, a server certificate from an unknown
//! CA, for another name, or expired, plaintext sent to a TLS listener) is checked for its cause and
//! its count, and a reload with renewed files for what new and old clients see.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use shardring_proxy::config::{ListenerTls, PoolConfig, ServerTlsConfig};
use shardring_proxy::ProxyConfig;
use test_support::{wait_listening, Memcached, RedisServer, TempDir};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::common::{Client, RunningProxy, IO_TIMEOUT};

/// A CA and the certificates it (or another CA) signs, written as PEM files in a temp dir.
pub struct Pki {
    pub dir: TempDir,
    ca: Issuer<'static, KeyPair>,
    /// The CA certificate's file.
    pub ca_pem: PathBuf,
}

/// A certificate and its key, as files.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = TempDir::new(&format!("tls-{name}"));
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("shardring test CA {name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, cert.pem()).unwrap();
        Pki {
            ca: Issuer::new(params, key),
            dir,
            ca_pem,
        }
    }

    /// A certificate for `names` (host names or IP addresses), valid now unless `expired`, written
    /// as `file.pem` and `file.key`.
    pub fn leaf(&self, file: &str, names: &[&str], expired: bool) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, file.to_owned());
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let leaf = Leaf {
            cert: self.dir.path().join(format!("{file}.pem")),
            key: self.dir.path().join(format!("{file}.key")),
        };
        std::fs::write(&leaf.cert, cert.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }
}

/// A memcached speaking TLS only (`-Z`) with `leaf`.
fn tls_memcached(leaf: &Leaf) -> Memcached {
    Memcached::start_with(&[
        "-Z",
        "-o",
        &format!(
            "ssl_chain_cert={},ssl_key={}",
            leaf.cert.display(),
            leaf.key.display()
        ),
    ])
}

/// A redis-server with a TLS port beside its plain one (clients not asked for certificates); the
/// TLS port's address is returned with it.
fn tls_redis(leaf: &Leaf, ca: &Path) -> Option<(RedisServer, String)> {
    let port = test_support::free_port().to_string();
    let server = RedisServer::start(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        leaf.cert.to_str().unwrap(),
        "--tls-key-file",
        leaf.key.to_str().unwrap(),
        "--tls-ca-cert-file",
        ca.to_str().unwrap(),
        "--tls-auth-clients",
        "no",
    ])?;
    let addr = format!("127.0.0.1:{port}");
    wait_listening(&addr);
    Some((server, addr))
}

/// A pool `name` over `servers` (`host:port:1` lines) with TLS to them checked against `ca`.
fn pool_to_tls_servers(name: &str, servers: &[&str], ca: &Path, redis: bool) -> PoolConfig {
    let lines: Vec<String> = servers.iter().map(|s| format!("{s}:1")).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    // A port of its own: two pools of one proxy cannot share `127.0.0.1:0`.
    let listen = format!("127.0.0.1:{}", test_support::free_port());
    let mut pool = PoolConfig::new(name, &listen, &refs).unwrap();
    if redis {
        pool.protocol = shardring_proxy::config::ProtocolConfig::Redis(Default::default());
    }
    pool.server_tls = Some(ServerTlsConfig {
        ca: Some(ca.to_owned()),
        ..ServerTlsConfig::default()
    });
    pool
}

/// A TLS client trusting `ca`, with `identity` as its certificate when given.
fn connector(ca: &Path, identity: Option<&Leaf>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&leaf.cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(&leaf.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    connector: &TlsConnector,
    addr: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    tokio::time::timeout(IO_TIMEOUT, connector.connect(name, tcp))
        .await
        .expect("a handshake in time")
}

/// Sends `req` and reads until the reply ends with `end` (or the connection closes).
async fn exchange(s: &mut (impl AsyncRead + AsyncWrite + Unpin), req: &[u8], end: &[u8]) -> String {
    s.write_all(req).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(IO_TIMEOUT, s.read(&mut buf))
            .await
            .expect("a reply in time")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The memcached session every side is compared on: a set with flags and TTL, a get, an append, an
/// incr, a multi-get, a delete.
async fn memcached_session(s: &mut (impl AsyncRead + AsyncWrite + Unpin)) -> Vec<String> {
    let mut out = Vec::new();
    for (req, end) in [
        (&b"set tls:a 5 0 3\r\nabc\r\n"[..], &b"\r\n"[..]),
        (b"append tls:a 0 0 2\r\nde\r\n", b"\r\n"),
        (b"get tls:a\r\n", b"END\r\n"),
        (b"set tls:n 0 0 1\r\n7\r\n", b"\r\n"),
        (b"incr tls:n 5\r\n", b"\r\n"),
        (b"get tls:a tls:n tls:none\r\n", b"END\r\n"),
        (b"delete tls:a\r\n", b"\r\n"),
        (b"get tls:a\r\n", b"END\r\n"),
    ] {
        out.push(exchange(s, req, end).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_over_tls_behind_tls_and_plain_listeners_answers_as_the_server_does() {
    let pki = Pki::new("mc");
    let server_leaf = pki.leaf("server", &["127.0.0.1"], false);
    let proxy_leaf = pki.leaf("proxy", &["127.0.0.1"], false);
    let servers = [tls_memcached(&server_leaf), tls_memcached(&server_leaf)];
    let addrs: Vec<&str> = servers.iter().map(|m| m.addr.as_str()).collect();
    let mut tls_pool = pool_to_tls_servers("tls", &addrs, &pki.ca_pem, false);
    tls_pool.tls = Some(ListenerTls {
        cert: proxy_leaf.cert.clone(),
        key: proxy_leaf.key.clone(),
        client_ca: None,
    });
    let plain_pool = pool_to_tls_servers("plain", &addrs, &pki.ca_pem, false);
    let proxy = RunningProxy::start_pools(vec![tls_pool, plain_pool]).await;
    let connector = connector(&pki.ca_pem, None);

    // Straight at one server, over TLS: what the proxy's answers must equal.
    let mut direct = tls_connect(&connector, &servers[0].addr).await.unwrap();
    let want = memcached_session(&mut direct).await;
    assert_eq!(want[2], "VALUE tls:a 5 5\r\nabcde\r\nEND\r\n");

    let mut through_tls = tls_connect(&connector, &proxy.addrs[0]).await.unwrap();
    assert_eq!(memcached_session(&mut through_tls).await, want);
    let mut through_plain = Client::connect(&proxy.addrs[1]).await;
    assert_eq!(memcached_session(&mut through_plain.stream).await, want);
    for view in proxy.proxy.views() {
        assert_eq!(view.pool.client_tls_handshake_errors.get(), 0);
        for s in &view.servers {
            assert_eq!(s.tls_handshake_errors.get(), 0, "{}", s.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_behind_a_tls_listener_answers_as_the_server_does() {
    let pki = Pki::new("redis");
    let server_leaf = pki.leaf("server", &["127.0.0.1"], false);
    let proxy_leaf = pki.leaf("proxy", &["127.0.0.1"], false);
    let Some((_a, a)) = tls_redis(&server_leaf, &pki.ca_pem) else {
        return;
    };
    let Some((_b, b)) = tls_redis(&server_leaf, &pki.ca_pem) else {
        return;
    };
    let mut pool = pool_to_tls_servers("alpha", &[&a, &b], &pki.ca_pem, true);
    pool.tls = Some(ListenerTls {
        cert: proxy_leaf.cert.clone(),
        key: proxy_leaf.key.clone(),
        client_ca: None,
    });
    let proxy = RunningProxy::start_pools(vec![pool]).await;
    let connector = connector(&pki.ca_pem, None);
    let session = [
        &b"*3\r\n$3\r\nSET\r\n$5\r\ntls:k\r\n$2\r\nv1\r\n"[..],
        b"*2\r\n$4\r\nINCR\r\n$5\r\ntls:n\r\n",
        b"*4\r\n$5\r\nRPUSH\r\n$5\r\ntls:l\r\n$1\r\na\r\n$1\r\nb\r\n",
        b"*2\r\n$3\r\nGET\r\n$5\r\ntls:k\r\n",
    ];
    let run = |addr: String| {
        let connector = connector.clone();
        async move {
            let mut s = tls_connect(&connector, &addr).await.unwrap();
            let mut out = Vec::new();
            for req in session {
                out.push(exchange(&mut s, req, b"\r\n").await);
            }
            let _ = exchange(&mut s, b"*2\r\n$3\r\nDEL\r\n$5\r\ntls:n\r\n", b"\r\n").await;
            let _ = exchange(&mut s, b"*2\r\n$3\r\nDEL\r\n$5\r\ntls:l\r\n", b"\r\n").await;
            out
        }
    };
    let want = run(a.clone()).await;
    assert_eq!(want, ["+OK\r\n", ":1\r\n", ":2\r\n", "$2\r\nv1\r\n"]);
    assert_eq!(run(proxy.addr.clone()).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutual_tls_listener_refuses_a_client_without_a_certificate_before_any_command() {
    let pki = Pki::new("mtls");
    let proxy_leaf = pki.leaf("proxy", &["127.0.0.1"], false);
    let client_leaf = pki.leaf("client", &["client.test"], false);
    let server = Memcached::start();
    let mut pool = PoolConfig::new("alpha", "127.0.0.1:0", &[&server.server_spec()]).unwrap();
    pool.tls = Some(ListenerTls {
        cert: proxy_leaf.cert.clone(),
        key: proxy_leaf.key.clone(),
        client_ca: Some(pki.ca_pem.clone()),
    });
    let proxy = RunningProxy::start_pools(vec![pool]).await;

    // Without a certificate: TLS 1.3 finishes the client's side of the handshake before the server
    // checks it, so the refusal shows on the first read; the command is never answered.
    let anonymous = connector(&pki.ca_pem, None);
    if let Ok(mut s) = tls_connect(&anonymous, &proxy.addr).await {
        let _ = s.write_all(b"set mtls:k 0 0 1\r\nx\r\n").await;
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(IO_TIMEOUT, s.read(&mut buf))
            .await
            .expect("refused in time");
        assert!(
            matches!(read, Err(_) | Ok(0)),
            "answered: {:?}",
            read.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
        );
    }
    let stats = &proxy.proxy.views()[0].pool;
    test_support::wait_until("the refusal counted", Duration::from_secs(5), || {
        stats.client_tls_handshake_errors.get() == 1
    })
    .await;
    // Nothing reached the server.
    let mut direct = Client::connect(&server.addr).await;
    direct.check(b"get mtls:k\r\n", b"END\r\n").await;

    // With one: served.
    let known = connector(&pki.ca_pem, Some(&client_leaf));
    let mut s = tls_connect(&known, &proxy.addr).await.unwrap();
    assert_eq!(
        exchange(&mut s, b"set mtls:k 0 0 1\r\nx\r\n", b"\r\n").await,
        "STORED\r\n"
    );

    // A certificate from another CA: refused too.
    let other = Pki::new("mtls-other");
    let stranger = other.leaf("stranger", &["client.test"], false);
    let foreign = connector(&pki.ca_pem, Some(&stranger));
    if let Ok(mut s) = tls_connect(&foreign, &proxy.addr).await {
        let _ = s.write_all(b"get mtls:k\r\n").await;
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(IO_TIMEOUT, s.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(read, Err(_) | Ok(0)), "a stranger was answered");
    }
    test_support::wait_until("the second refusal counted", Duration::from_secs(5), || {
        stats.client_tls_handshake_errors.get() == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_sent_to_a_tls_listener_is_closed_and_never_answered() {
    let pki = Pki::new("plain");
    let proxy_leaf = pki.leaf("proxy", &["127.0.0.1"], false);
    let server = Memcached::start();
    let mut pool = PoolConfig::new("alpha", "127.0.0.1:0", &[&server.server_spec()]).unwrap();
    pool.tls = Some(ListenerTls {
        cert: proxy_leaf.cert.clone(),
        key: proxy_leaf.key.clone(),
        client_ca: None,
    });
    let proxy = RunningProxy::start_pools(vec![pool]).await;
    let mut c = Client::connect(&proxy.addr).await;
    c.send(b"version\r\nset plain:k 0 0 1\r\nx\r\n").await;
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(IO_TIMEOUT, c.stream.read(&mut buf))
            .await
            .expect("closed in time")
        {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    // At most a TLS alert record (content type 21), never a memcached answer.
    assert!(got.is_empty() || got[0] == 21, "answered: {got:?}");
    assert_eq!(
        proxy.proxy.views()[0]
            .pool
            .client_tls_handshake_errors
            .get(),
        1
    );
    let mut direct = Client::connect(&server.addr).await;
    direct.check(b"get plain:k\r\n", b"END\r\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_that_does_not_check_out_is_refused_with_its_cause() {
    let pki = Pki::new("bad");
    let stranger_ca = Pki::new("bad-stranger");
    let cases = [
        (
            stranger_ca.leaf("unknown-ca", &["127.0.0.1"], false),
            "unknown CA",
        ),
        (
            pki.leaf("other-name", &["cache.example"], false),
            "not valid for this name",
        ),
        (pki.leaf("expired", &["127.0.0.1"], true), "expired"),
    ];
    for (leaf, cause) in &cases {
        let server = tls_memcached(leaf);
        let pool = pool_to_tls_servers("alpha", &[&server.addr], &pki.ca_pem, false);
        let proxy = RunningProxy::start_pools(vec![pool]).await;
        let mut c = proxy.client().await;
        c.send(b"get bad:k\r\n").await;
        let line = c.read_line().await;
        assert!(
            line.starts_with("SERVER_ERROR") && line.contains(cause),
            "{cause}: {line}"
        );
        let server_stats = &proxy.proxy.views()[0].servers[0];
        assert!(server_stats.tls_handshake_errors.get() >= 1, "{cause}");
        // Within the hold-off, a second request fails at once with the same cause and no new
        // handshake.
        let before = server_stats.tls_handshake_errors.get();
        c.send(b"get bad:k\r\n").await;
        let again = c.read_line().await;
        assert!(again.contains(cause), "{cause}: {again}");
        assert_eq!(server_stats.tls_handshake_errors.get(), before, "{cause}");
        proxy.stop().await;
    }
}

/// The serial of the certificate a TLS listener shows.
async fn served_certificate(connector: &TlsConnector, addr: &str) -> Vec<u8> {
    let s = tls_connect(connector, addr).await.unwrap();
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_a_renewed_certificate_to_new_clients_and_keeps_old_ones() {
    let pki = Pki::new("renew");
    let first = pki.leaf("first", &["127.0.0.1"], false);
    let server = Memcached::start();
    let listener_files = ListenerTls {
        cert: pki.dir.path().join("live.pem"),
        key: pki.dir.path().join("live.key"),
        client_ca: None,
    };
    std::fs::copy(&first.cert, &listener_files.cert).unwrap();
    std::fs::copy(&first.key, &listener_files.key).unwrap();
    let mut pool = PoolConfig::new("alpha", "127.0.0.1:0", &[&server.server_spec()]).unwrap();
    pool.tls = Some(listener_files.clone());
    let proxy = RunningProxy::start_pools(vec![pool.clone()]).await;
    let connector = connector(&pki.ca_pem, None);
    let before = served_certificate(&connector, &proxy.addr).await;
    let mut old = tls_connect(&connector, &proxy.addr).await.unwrap();
    assert_eq!(
        exchange(&mut old, b"set renew:k 0 0 1\r\nx\r\n", b"\r\n").await,
        "STORED\r\n"
    );

    // Renewed in place (same paths), then the reload a SIGHUP makes.
    let second = pki.leaf("second", &["127.0.0.1"], false);
    std::fs::copy(&second.cert, &listener_files.cert).unwrap();
    std::fs::copy(&second.key, &listener_files.key).unwrap();
    proxy
        .proxy
        .reload(ProxyConfig {
            pools: vec![pool.clone()],
        })
        .expect("the renewed certificate is taken");
    let after = served_certificate(&connector, &proxy.addr).await;
    assert_ne!(before, after, "new clients get the renewed certificate");
    assert_eq!(
        exchange(&mut old, b"get renew:k\r\n", b"END\r\n").await,
        "VALUE renew:k 0 1\r\nx\r\nEND\r\n",
        "an established client stays up"
    );

    // A broken renewal is refused, and the last good certificate stays.
    std::fs::write(&listener_files.cert, "not a certificate").unwrap();
    let refused = proxy.proxy.reload(ProxyConfig { pools: vec![pool] });
    let why = refused
        .expect_err("a broken certificate is refused")
        .to_string();
    assert!(why.contains("live.pem"), "{why}");
    assert_eq!(served_certificate(&connector, &proxy.addr).await, after);
    // A reload that changes no TLS setting (a membership change, a Sentinel's failover) reads no
    // file, so the broken one does not hold it up.
    let served = &proxy.proxy.pools()[0];
    served
        .reload(served.config())
        .expect("a reload without TLS changes reads no certificate");
    assert_eq!(served_certificate(&connector, &proxy.addr).await, after);
}
