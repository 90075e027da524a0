//! The session's unit tests.

use super::*;
use crate::config::PoolConfig;
use crate::protocol::memcache::Memcache;
use crate::protocol::redis::Redis;

/// The memory a session's task holds for its whole life, idle or not: its future (the session
/// and the state of its loop). BENCHMARKS.md, "proxy: memory per client connection".
async fn session_size<P: Protocol>(redis: bool) -> usize {
    let mut config = PoolConfig::new("alpha", "127.0.0.1:0", &["127.0.0.1:1:1"]).expect("a pool");
    if redis {
        config.protocol = crate::config::ProtocolConfig::Redis(Default::default());
    }
    let handle = tokio::runtime::Handle::current();
    let pool = Arc::new(Pool::<P>::new(config, vec![handle]).expect("a pool"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let _peer = tokio::net::TcpStream::connect(listener.local_addr().expect("its address"))
        .await
        .expect("connected");
    let (client, _) = listener.accept().await.expect("accepted");
    let admission = Arc::new(crate::admission::Admission::new(1, 10));
    let permit = admission.turn(0).await.expect("a permit");
    let admitted = admission.admit(0, permit);
    let drain = Arc::new(Drain::default());
    let session = serve_client(ClientStream::Tcp(client), pool, 0, drain, admitted);
    std::mem::size_of_val(&session)
}

#[tokio::test]
async fn a_session_future_is_small() {
    for (name, size) in [
        ("memcached", session_size::<Memcache>(false).await),
        ("redis", session_size::<Redis>(true).await),
    ] {
        println!("{name} session future: {size} bytes");
        // tokio rounds a task up to a multiple of 128 bytes: past this bound, a session's task
        // takes the next step (BENCHMARKS.md, "proxy: memory per client connection").
        assert!(size <= 512, "a {name} session's future is {size} bytes");
    }
}
