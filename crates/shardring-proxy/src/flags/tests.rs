//! The flags as a command line gives them, and applied to a file's pools: what each sets on which
//! pools, and what is refused.

use std::path::PathBuf;

use clap::Parser;

use super::*;
use crate::config::{Limits, MemcacheRemedies, RedisLimits};

/// A memcached pool `mc` (two servers) and a redis pool `rd` (one).
const TWO_POOLS: &str =
    "mc:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:2:1\n   - 127.0.0.1:5:1\n\
     rd:\n  listen: 127.0.0.1:3\n  redis: true\n  servers:\n   - 127.0.0.1:4:1\n";

/// The flags of a command line that gives only what `set` sets.
fn flags(set: impl FnOnce(&mut ProxyFlags)) -> ProxyFlags {
    let mut flags = ProxyFlags::default();
    set(&mut flags);
    flags
}

/// [`TWO_POOLS`] with `flags` applied.
fn overridden(flags: &ProxyFlags) -> Result<ProxyConfig, ConfigErrors> {
    flags.apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
}

/// A command line of the proxy's flags alone, as clap reads them.
#[derive(clap::Parser)]
struct Line {
    #[command(flatten)]
    flags: ProxyFlags,
}

/// The flags of the command line `words`.
fn parsed(words: &[&str]) -> ProxyFlags {
    Line::try_parse_from(["proxy"].iter().chain(words))
        .unwrap()
        .flags
}

#[test]
fn flags_left_out_mean_what_the_groups_default_to() {
    assert_eq!(parsed(&[]), ProxyFlags::default());
}

#[test]
fn every_flag_reaches_its_group() {
    let flags = parsed(&[
        "--metrics-addr",
        "127.0.0.1:9000",
        "--threads",
        "3",
        "--max-value-size",
        "2k",
        "--max-request-size",
        "8k",
        "--multiget-all-or-nothing",
        "--health-check-interval",
        "250",
        "--etcd",
        "http://127.0.0.1:2379",
        "--etcd-prefix",
        "/elsewhere",
        "--etcd-fallback",
        "--allow-empty",
        "--hot-keys",
        "10",
        "--hot-keys-window",
        "2000",
        "--hot-cache-ttl",
        "50",
        "--hot-cache-size",
        "64k",
        "--replicas",
        "2",
        "--replicas",
        "mc=3",
        "--replica-read-miss",
        "--gutter",
        "127.0.0.1:9,127.0.0.1:10:2",
        "--gutter-ttl",
        "30",
        "--warmup-window",
        "500",
        "--redis-user",
        "app",
        "--redis-user",
        "rd=ops",
        "--redis-dedicated-connections",
        "8",
        "--redis-keys-limit",
        "5000",
        "--tls-cert",
        "/etc/tls/proxy.pem",
        "--tls-key",
        "mc=/etc/tls/mc.key",
        "--tls-client-ca",
        "/etc/tls/clients=ca.pem",
        "--server-tls",
        "--server-tls=rd",
        "--server-ca",
        "rd=/etc/tls/servers.pem",
        "--server-cert",
        "/etc/tls/me.pem",
        "--server-key",
        "/etc/tls/me.key",
        "--server-tls-insecure=mc",
        "--sentinel",
        "rd=127.0.0.1:26379,10.0.0.2:26379",
        "--sentinel-auth",
        "rd=s3cret",
        "--redis-partial-reads=rd",
        "--circuit-breakers=rd",
        "--outlier-slow",
        "rd=50",
    ]);
    assert_eq!(
        flags,
        ProxyFlags {
            metrics: MetricsFlags {
                metrics_addr: Some("127.0.0.1:9000".into()),
            },
            workers: WorkerFlags { threads: Some(3) },
            limits: LimitFlags {
                max_value_size: Some(2048),
                max_request_size: Some(8192),
            },
            memcache: MemcacheFlags {
                multiget_all_or_nothing: true,
            },
            health: HealthCheckFlags {
                health_check_interval: 250,
            },
            rate_limits: RateLimitFlags::default(),
            split: SplitFlags::default(),
            breakers: BreakerFlags {
                circuit_breakers: vec![Some("rd".into())],
                outlier_slow: vec![(Some("rd".into()), 50)],
                ..BreakerFlags::default()
            },
            #[cfg(feature = "etcd")]
            membership: MembershipFlags {
                etcd: Some("http://127.0.0.1:2379".into()),
                // A trailing / is added.
                etcd_prefix: "/elsewhere/".into(),
                etcd_fallback: true,
                allow_empty: true,
            },
            hot_keys: HotKeyFlags {
                hot_keys: Some(10),
                hot_keys_window: 2000,
                hot_cache_ttl: Some(50),
                hot_cache_size: Some(64 << 10),
            },
            remedies: RemedyFlags {
                replicas: vec![(None, 2), (Some("mc".into()), 3)],
                replica_read_miss: true,
                gutter: vec![
                    "127.0.0.1:9:1".parse().unwrap(),
                    "127.0.0.1:10:2".parse().unwrap()
                ],
                gutter_ttl: 30,
                warmup_window: Some(500),
            },
            redis: RedisFlags {
                redis_user: vec![(None, "app".into()), (Some("rd".into()), "ops".into())],
                redis_dedicated_connections: Some(8),
                redis_partial_reads: vec![Some("rd".into())],
                redis_keys_limit: Some(5000),
            },
            tls: TlsFlags {
                tls_cert: vec![(None, "/etc/tls/proxy.pem".into())],
                tls_key: vec![(Some("mc".into()), "/etc/tls/mc.key".into())],
                // A path with `=` in it is a path, not POOL=PATH.
                tls_client_ca: vec![(None, "/etc/tls/clients=ca.pem".into())],
                server_tls: vec![None, Some("rd".into())],
                server_ca: vec![(Some("rd".into()), "/etc/tls/servers.pem".into())],
                server_cert: vec![(None, "/etc/tls/me.pem".into())],
                server_key: vec![(None, "/etc/tls/me.key".into())],
                server_tls_insecure: vec![Some("mc".into())],
            },
            sentinel: SentinelFlags {
                sentinel: vec![(
                    Some("rd".into()),
                    vec!["127.0.0.1:26379".into(), "10.0.0.2:26379".into()]
                )],
                sentinel_auth: vec![(Some("rd".into()), "s3cret".into())],
            },
            cluster: ClusterFlags::default(),
        }
    );
}

#[test]
fn a_cluster_pool_takes_its_servers_as_seeds_and_refuses_what_a_cluster_cannot_do() {
    let flags = parsed(&[
        "--redis-cluster=rd",
        "--redis-cluster-refresh",
        "500",
        "--redis-cluster-reads",
        "prefer-replica",
    ]);
    let config = overridden(&flags).unwrap();
    let cluster = config.pools[1].cluster().expect("rd is a cluster pool");
    assert_eq!(cluster.reads, crate::config::ReadPolicy::PreferReplica);
    assert!(Line::try_parse_from(["proxy", "--redis-cluster-reads", "replicas"]).is_err());
    assert_eq!(cluster.seeds, ["127.0.0.1:4"]);
    assert_eq!(cluster.refresh, std::time::Duration::from_millis(500));
    assert!(
        cluster.slots.is_none(),
        "no map until the cluster gives one"
    );
    assert!(config.pools[0].cluster().is_none());
    // Bare, every redis pool; a memcached pool named is refused.
    let bare = overridden(&parsed(&["--redis-cluster"])).unwrap();
    assert!(bare.pools[1].cluster().is_some());
    let text =
        |e: ConfigErrors| -> Vec<String> { e.problems.iter().map(ToString::to_string).collect() };
    assert_eq!(
        text(overridden(&parsed(&["--redis-cluster=mc"])).unwrap_err()),
        ["mc: --redis-cluster: redis pools only, and this is a memcached pool"]
    );
    let refused = flags.apply(
        ProxyConfig::from_yaml(&TWO_POOLS.replace(
            "redis: true\n",
            "redis: true\n  redis_db: 2\n  hash_tag: \"ab\"\n",
        ))
        .unwrap(),
    );
    let problems = text(refused.unwrap_err());
    assert!(
        problems
            .iter()
            .any(|p| p.contains("redis_db: 2: a Redis Cluster has database 0 only")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("hash_tag")),
        "{problems:?}"
    );
    let both = flags.apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap());
    assert!(both.is_ok());
    let with_sentinel = parsed(&["--redis-cluster=rd", "--sentinel", "rd=127.0.0.1:26379"]);
    assert!(text(overridden(&with_sentinel).unwrap_err())
        .iter()
        .any(|p| p.contains("--sentinel and --redis-cluster")));
}

#[test]
fn without_flags_every_pool_keeps_the_files_settings_and_the_defaults() {
    let config = overridden(&ProxyFlags::default()).unwrap();
    assert_eq!(config, ProxyConfig::from_yaml(TWO_POOLS).unwrap());
}

#[test]
fn size_flags_set_both_protocols_limits() {
    let defaults = overridden(&ProxyFlags::default()).unwrap();
    let (mc, rd) = (&defaults.pools[0], &defaults.pools[1]);
    assert_eq!(mc.memcache().unwrap().limits, Limits::default());
    assert_eq!(rd.redis().unwrap().limits, RedisLimits::default());
    let set = overridden(&flags(|f| {
        f.limits.max_value_size = Some(2048);
        f.limits.max_request_size = Some(8192);
    }))
    .unwrap();
    let (mc, rd) = (&set.pools[0], &set.pools[1]);
    // The value limit is both protocols' (memcached's value, Redis's argument).
    let limits = mc.memcache().unwrap().limits;
    assert_eq!(limits.max_value_len, 2048);
    // Given explicitly, it is the limit: the servers are not asked theirs.
    assert!(!limits.value_len_from_servers);
    let limits = rd.redis().unwrap().limits;
    assert_eq!(limits.max_bulk_len, 2048);
    assert_eq!(limits.max_request_len, 8192);
}

#[test]
fn remedy_flags_reach_memcached_pools_and_leave_redis_pools_alone() {
    let flags = flags(|f| {
        f.remedies.replicas = vec![(None, 1)];
        f.remedies.warmup_window = Some(500);
        f.remedies.gutter = vec!["127.0.0.1:9:1".parse().unwrap()];
        f.hot_keys.hot_keys = Some(10);
    });
    let config = overridden(&flags).unwrap();
    let (mc, rd) = (&config.pools[0], &config.pools[1]);
    assert!(!mc.is_redis() && rd.is_redis());
    let r = mc.memcache_remedies();
    assert!(r.warmup_window.is_some() && r.gutter.is_some() && mc.hot_keys().is_some());
    assert_eq!(rd.memcache_remedies(), &MemcacheRemedies::default());
    assert_eq!(rd.replicas(), 1);
    // Hot keys are both protocols'.
    assert_eq!(rd.hot_keys(), mc.hot_keys());
    assert!(rd.hot_keys().is_some());
    assert_eq!(
        flags.unused(&config),
        [
            "--replicas, --warmup-window, --gutter apply to memcached pools only, \
              not to redis pool \"rd\""
        ]
    );
}

#[test]
fn a_redis_pool_takes_the_replica_count_that_names_it_and_no_pool_of_the_file_is_an_error() {
    for (pool, problem) in [
        (
            "rd",
            "rd: replicas must be between 1 and the number of servers (1), not 2",
        ),
        ("nope", "--replicas names no pool of the file: \"nope\""),
    ] {
        let flags = flags(|f| f.remedies.replicas = vec![(Some(pool.to_owned()), 2)]);
        let errors = overridden(&flags).unwrap_err();
        let text: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
        assert_eq!(text, [problem]);
    }
    let one = flags(|f| f.remedies.replicas = vec![(Some("rd".to_owned()), 1), (None, 2)]);
    let config = overridden(&one).unwrap();
    assert_eq!(config.pools[1].replicas(), 1);
    // The plain count is the memcached pools'.
    assert_eq!(config.pools[0].replicas(), 2);
    let three = TWO_POOLS.replace(
        "   - 127.0.0.1:4:1\n",
        "   - 127.0.0.1:4:1\n   - 127.0.0.1:6:1\n",
    );
    let flags = flags(|f| f.remedies.replicas = vec![(Some("rd".to_owned()), 2)]);
    let config = flags
        .apply(ProxyConfig::from_yaml(&three).unwrap())
        .unwrap();
    assert_eq!(config.pools[1].replicas(), 2);
}

#[test]
fn redis_flags_reach_redis_pools_and_a_user_needs_a_password() {
    let with_user = flags(|f| {
        f.redis.redis_user = vec![(None, "app".into())];
        f.redis.redis_dedicated_connections = Some(8);
        f.redis.redis_keys_limit = Some(5000);
    });
    // The file's redis pool has no redis_auth: a user without a password is refused.
    let errors = overridden(&with_user).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("rd: redis user \"app\" needs a password: set redis_auth in the pool"),
        "{errors}"
    );
    let with_auth = TWO_POOLS.replace("redis: true\n", "redis: true\n  redis_auth: s3cret\n");
    let config = with_user
        .apply(ProxyConfig::from_yaml(&with_auth).unwrap())
        .unwrap();
    let rd = config.pools[1].redis().unwrap();
    assert_eq!(rd.user.as_deref(), Some("app"));
    assert_eq!(rd.dedicated_connections, 8);
    assert_eq!(rd.keys_limit, 5000);
    for (pool, problem) in [
        (
            "mc",
            "mc: redis user: redis pools only, and this is a memcached pool",
        ),
        ("nope", "--redis-user names no pool of the file: \"nope\""),
    ] {
        let flags = flags(|f| f.redis.redis_user = vec![(Some(pool.to_owned()), "app".into())]);
        let errors = flags
            .apply(ProxyConfig::from_yaml(&with_auth).unwrap())
            .unwrap_err();
        let text: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
        assert_eq!(text, [problem]);
    }
}

#[test]
fn partial_reads_are_off_unless_asked_for_and_for_redis_pools_only() {
    let config = ProxyFlags::default()
        .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
        .unwrap();
    assert!(!config.pools[1].redis().unwrap().partial_reads);
    for switch in [None, Some("rd".to_owned())] {
        let flags = flags(|f| f.redis.redis_partial_reads = vec![switch]);
        let config = flags
            .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
            .unwrap();
        assert!(config.pools[1].redis().unwrap().partial_reads);
    }
    for (pool, problem) in [
        (
            "mc",
            "mc: --redis-partial-reads: redis pools only, and this is a memcached pool",
        ),
        (
            "nope",
            "--redis-partial-reads names no pool of the file: \"nope\"",
        ),
    ] {
        let flags = flags(|f| f.redis.redis_partial_reads = vec![Some(pool.to_owned())]);
        let errors = flags
            .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
            .unwrap_err();
        let text: Vec<String> = errors.problems.iter().map(ToString::to_string).collect();
        assert_eq!(text, [problem]);
    }
}

#[test]
fn a_pools_own_replica_count_wins_over_the_plain_one_and_is_checked_like_the_files() {
    let own = flags(|f| f.remedies.replicas = vec![(Some("mc".to_owned()), 2), (None, 1)]);
    assert_eq!(overridden(&own).unwrap().pools[0].replicas(), 2);
    // More replicas than servers is refused as the file's settings are (`-t` says so).
    let too_many = flags(|f| f.remedies.replicas = vec![(None, 3)]);
    let errors = overridden(&too_many).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("mc: replicas must be between 1 and the number of servers (2), not 3"),
        "{errors}"
    );
}

/// A certificate for 127.0.0.1 and its key, self-signed, as PEM files in `dir`; a second key
/// that matches nothing beside them.
fn certificate_files(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let paths = (dir.join("c.pem"), dir.join("c.key"), dir.join("other.key"));
    std::fs::write(&paths.0, cert.pem()).unwrap();
    std::fs::write(&paths.1, key.serialize_pem()).unwrap();
    std::fs::write(
        &paths.2,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    paths
}

#[test]
fn tls_flags_reach_the_pools_they_name_and_their_files_are_checked() {
    let dir = std::env::temp_dir().join(format!("shardring-flags-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key, other_key) = certificate_files(&dir);
    let both_sides = flags(|f| {
        f.tls.tls_cert = vec![(None, cert.clone())];
        f.tls.tls_key = vec![(None, key.clone())];
        f.tls.server_tls = vec![Some("rd".into())];
        f.tls.server_ca = vec![(Some("rd".into()), cert.clone())];
    });
    let config = overridden(&both_sides).unwrap();
    let (mc, rd) = (&config.pools[0], &config.pools[1]);
    assert_eq!(mc.tls.as_ref().map(|t| &t.cert), Some(&cert));
    assert_eq!(rd.tls.as_ref().map(|t| &t.key), Some(&key));
    assert_eq!(mc.server_tls, None);
    assert_eq!(
        rd.server_tls.as_ref().and_then(|t| t.ca.as_ref()),
        Some(&cert)
    );

    let missing = dir.join("missing.pem");
    for (flags, problem) in [
        (
            flags(|f| f.tls.tls_cert = vec![(None, cert.clone())]),
            "--tls-cert and --tls-key go together",
        ),
        (
            flags(|f| f.tls.tls_client_ca = vec![(None, cert.clone())]),
            "--tls-client-ca needs --tls-cert and --tls-key",
        ),
        (
            flags(|f| f.tls.server_ca = vec![(None, cert.clone())]),
            "need --server-tls",
        ),
        (
            flags(|f| f.tls.server_tls = vec![Some("nope".into())]),
            "--server-tls names no pool of the file: \"nope\"",
        ),
        (
            flags(|f| {
                f.tls.server_tls = vec![None];
                f.tls.server_tls_insecure = vec![None];
                f.tls.server_ca = vec![(None, cert.clone())];
            }),
            "--server-ca would not be used",
        ),
        (
            flags(|f| {
                f.tls.tls_cert = vec![(None, cert.clone())];
                f.tls.tls_key = vec![(None, other_key.clone())];
            }),
            "the key does not match the certificate",
        ),
        (
            flags(|f| {
                f.tls.server_tls = vec![None];
                f.tls.server_ca = vec![(None, missing.clone())];
            }),
            "missing.pem: No such file",
        ),
    ] {
        let errors = overridden(&flags).unwrap_err().to_string();
        assert!(errors.contains(problem), "{problem}: {errors}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sentinel_flags_need_a_redis_pool_whose_servers_are_named_for_their_groups() {
    let sentinels = vec!["127.0.0.1:26379".to_owned()];
    let with_sentinels = flags(|f| {
        f.sentinel.sentinel = vec![(Some("rd".into()), sentinels.clone())];
        f.sentinel.sentinel_auth = vec![(Some("rd".into()), "s3cret".into())];
    });
    // TWO_POOLS's redis server line has no name: it cannot be a master group.
    let errors = overridden(&with_sentinels).unwrap_err().to_string();
    assert!(
        errors.contains("every server line needs a name"),
        "{errors}"
    );
    let named = TWO_POOLS.replace("   - 127.0.0.1:4:1\n", "   - 127.0.0.1:4:1 cache-a\n");
    let config = with_sentinels
        .apply(ProxyConfig::from_yaml(&named).unwrap())
        .unwrap();
    let sentinel = config.pools[1].redis().unwrap().sentinel.clone().unwrap();
    assert_eq!(sentinel.addrs, sentinels);
    assert_eq!(sentinel.password.as_deref(), Some("s3cret"));
    for (flags, problem) in [
        (
            flags(|f| f.sentinel.sentinel = vec![(Some("mc".into()), sentinels.clone())]),
            "--sentinel: redis pools only",
        ),
        (
            flags(|f| f.sentinel.sentinel_auth = vec![(None, "s3cret".into())]),
            "--sentinel-auth needs --sentinel",
        ),
        (
            flags(|f| f.sentinel.sentinel = vec![(Some("nope".into()), sentinels.clone())]),
            "--sentinel names no pool of the file",
        ),
    ] {
        let errors = flags
            .apply(ProxyConfig::from_yaml(&named).unwrap())
            .unwrap_err()
            .to_string();
        assert!(errors.contains(problem), "{problem}: {errors}");
    }
}

#[test]
fn split_keys_are_read_from_their_file_for_memcached_pools_and_every_problem_is_named() {
    let dir = test_support::TempDir::new("flags-split");
    let good = dir.path().join("split");
    std::fs::write(&good, "# launch\nwrite a\nread b%20c\n").unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "write a\nsplit b\n").unwrap();
    let line = |copies: &str, file: &std::path::Path| {
        parsed(&[
            "--hot-key-split",
            copies,
            "--hot-key-split-keys",
            file.to_str().unwrap(),
        ])
    };
    // Named: the memcached pool splits, the redis pool (one server) is left alone.
    let named = line("mc=2", &good);
    let config = named
        .apply(ProxyConfig::from_yaml(TWO_POOLS).unwrap())
        .unwrap();
    let split = config.pools[0].remedies.split.as_ref().unwrap();
    assert_eq!(split.copies, 2);
    assert_eq!(
        split.keys.keys().cloned().collect::<Vec<_>>(),
        [b"a".to_vec(), b"b c".to_vec()]
    );
    assert!(config.pools[1].remedies.split.is_none());
    // A bad line, a missing file, more copies than servers, a redis pool named: each refused.
    let cases = [
        (
            line("2", &bad),
            "line 2: \"split\" is not a phase (write or read)",
        ),
        (line("2", &dir.path().join("none")), "--hot-key-split-keys"),
        (
            line("3", &good),
            "a split key's copies must be between 2 and the number of servers (2), not 3",
        ),
        (
            line("rd=2", &good),
            "rd: a split key's copies must be between 2 and the number of servers (1), not 2",
        ),
    ];
    for (flags, problem) in cases {
        let errors = overridden(&flags).unwrap_err();
        assert!(errors.to_string().contains(problem), "{errors}");
    }
    // With replicas, a split key's copies follow its replica set: they must fit the pool.
    let replicated = parsed(&[
        "--replicas",
        "mc=2",
        "--hot-key-split",
        "mc=2",
        "--hot-key-split-keys",
        good.to_str().unwrap(),
    ]);
    let errors = overridden(&replicated).unwrap_err().to_string();
    assert!(
        errors.contains("mc: a key split over 2 in a pool of 2 replicas is on 3 servers (its replicas, then the copies after them), and the pool has 2"),
        "{errors}"
    );
}
