//! Independent clients' verdict, from Debian's libmemcached-tools (`.ci/run` installs them): the protocol
//! conformance checker `memccapable -a` runs its 27 text-protocol tests against the proxy as it would
//! against a memcached server (they are written against memcached 1.6's behaviour, so every test passing
//! means a client cannot tell the proxy from a server on these commands), and the command-line tools copy,
//! read, touch, remove and ping through it.

use std::process::{Command, Output};

use crate::common::{pool_config, RunningProxy};
use test_support::memcacheds;

/// Runs a libmemcached tool off the runtime's threads; `None` (the test skips) when it is not installed
/// outside CI.
async fn tool(program: &'static str, args: Vec<String>) -> Option<Output> {
    let run = tokio::task::spawn_blocking(move || Command::new(program).args(&args).output())
        .await
        .expect("the tool's thread");
    match run {
        Ok(output) => Some(output),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "skipping: {program} not runnable here ({e}); .ci/run installs libmemcached-tools"
            );
            None
        }
        Err(e) => panic!("{program} must be installed in CI: {e}"),
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libmemcached_memcapable_passes_every_text_protocol_test() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let (host, port) = proxy.addr.rsplit_once(':').expect("host:port");
    let args = ["-h", host, "-p", port, "-a", "-t", "5"]
        .map(String::from)
        .to_vec();
    let Some(output) = tool("memccapable", args).await else {
        proxy.stop().await;
        return;
    };
    let report = text(&output);
    assert!(
        output.status.success() && report.contains("All tests passed"),
        "memccapable -a:\n{report}"
    );
    // Every one of its tests ran (a checker that skipped them would pass too).
    assert_eq!(report.matches("[pass]").count(), 27, "{report}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libmemcached_command_line_tools_work_through_the_proxy() {
    let servers = memcacheds(3);
    let proxy = RunningProxy::start(pool_config(&servers)).await;
    let servers_arg = format!("--servers={}", proxy.addr);
    let dir = std::env::temp_dir().join(format!("shardring-memc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for i in 0..12 {
        let path = dir.join(format!("file-{i}.txt"));
        std::fs::write(&path, format!("contents of file {i}\r\nwith a CRLF inside")).unwrap();
        files.push(path);
    }
    let mut args = vec![servers_arg.clone()];
    args.extend(files.iter().map(|p| p.display().to_string()));
    let Some(out) = tool("memccp", args).await else {
        proxy.stop().await;
        return;
    };
    assert!(out.status.success(), "memccp: {}", text(&out));
    // memccp stores each file under its base name; memccat prints them back.
    for i in 0..12 {
        let key = format!("file-{i}.txt");
        let out = tool("memccat", vec![servers_arg.clone(), key.clone()])
            .await
            .unwrap();
        assert!(out.status.success(), "memccat {key}: {}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            format!("contents of file {i}\r\nwith a CRLF inside")
        );
    }
    for (program, extra) in [
        ("memcping", vec![]),
        ("memcexist", vec!["file-3.txt"]),
        ("memctouch", vec!["--expire=300", "file-3.txt"]),
        ("memcrm", vec!["file-3.txt"]),
        ("memcstat", vec![]),
    ] {
        let mut args = vec![servers_arg.clone()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = tool(program, args).await.unwrap();
        assert!(out.status.success(), "{program}: {}", text(&out));
    }
    let out = tool("memcexist", vec![servers_arg.clone(), "file-3.txt".into()])
        .await
        .unwrap();
    assert!(!out.status.success(), "removed, so memcexist fails");
    let _ = std::fs::remove_dir_all(&dir);
    proxy.stop().await;
}
