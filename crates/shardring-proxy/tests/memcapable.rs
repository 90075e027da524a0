//! An independent client's verdict: libmemcached's protocol conformance checker (`memccapable -a`, from
//! Debian's libmemcached-tools) runs its 27 text-protocol tests against the proxy, as it would against a
//! memcached server. It is written against memcached 1.6's behaviour, so every test passing means a client
//! cannot tell the proxy from a server on these commands.

mod common;

use std::process::Command;

use common::{memcacheds, pool_config, RunningProxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libmemcached_memcapable_passes_every_text_protocol_test() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let (host, port) = proxy.addr.rsplit_once(':').expect("host:port");
    let (host, port) = (host.to_owned(), port.to_owned());
    let run = tokio::task::spawn_blocking(move || {
        Command::new("memccapable")
            .args(["-h", &host, "-p", &port, "-a", "-t", "5"])
            .output()
    })
    .await
    .expect("the checker's thread");
    let output = match run {
        Ok(output) => output,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: memccapable not runnable here ({e}); .ci/run installs libmemcached-tools");
            proxy.stop().await;
            return;
        }
        Err(e) => panic!("memccapable must be installed in CI: {e}"),
    };
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && report.contains("All tests passed"),
        "memccapable -a:\n{report}"
    );
    // Every one of its tests ran (a checker that skipped them would pass too).
    assert_eq!(report.matches("[pass]").count(), 27, "{report}");
    proxy.stop().await;
}
