//! A client-side ring as a participant of planned changes ([`Participant`]) against a real etcd:
//! it registers with the proxies' digests, routes writes to both owners while a next membership
//! exists, follows the cut-over, and fences only the keys that move while its path to etcd is
//! blackholed during a change. Skipped with a loud message when etcd is not installed and `CI` is
//! unset.

mod common;

use std::time::{Duration, Instant};

use shardring::compat::twemproxy::{Distribution, PlacementSpec};
use shardring::hash::TwemproxyHash;
use shardring::membership::Member;
use shardring_etcd::{
    admin, twemproxy_ketama, twemproxy_servers, EtcdSource, Participant, PoolRules, Registration,
};
use test_support::{etcd_available, Etcd, Relay};

const POOL: &str = "alpha";
const PATIENCE: Duration = Duration::from_secs(30);

fn source(url: &str) -> EtcdSource {
    common::test_source(url, POOL, true)
}

fn servers(range: std::ops::Range<u32>) -> Vec<Member> {
    range
        .map(|i| Member::new(format!("cache-{i}"), format!("127.0.0.1:{}", 21000 + i), 1).unwrap())
        .collect()
}

/// The proxies' digest of `members` under nutcracker's default rules, computed independently of
/// the participant.
fn digest(members: &[Member]) -> String {
    let servers = twemproxy_servers(members).unwrap();
    PlacementSpec {
        servers: &servers,
        hash: TwemproxyHash::Fnv1a64,
        hash_tag: None,
        distribution: Distribution::Ketama,
    }
    .digest()
}

fn owner(members: &[Member], key: &str) -> String {
    let ring = twemproxy_ketama(members, TwemproxyHash::Fnv1a64, None).unwrap();
    let name = ring.lookup(key).unwrap().name().to_string();
    members
        .iter()
        .find(|m| m.name() == name || m.addr() == name)
        .map(|m| m.addr().to_string())
        .unwrap()
}

/// Polls `read` until `ok` holds of it (a backstop of [`PATIENCE`]).
async fn wait_for<T: std::fmt::Debug, F: std::future::Future<Output = T>>(
    what: &str,
    mut read: impl FnMut() -> F,
    ok: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = read().await;
        if ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: still {v:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn registered(source: &EtcdSource, id: &str) -> Option<Registration> {
    admin::list_proxies(source)
        .await
        .ok()?
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, r)| r)
}

fn keys() -> Vec<String> {
    (0..400).map(|i| format!("user:{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_registers_the_proxies_digests_and_writes_to_both_owners_during_a_change() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let admin_source = source(&etcd.url());
    let (now, next) = (servers(0..4), servers(0..3));
    admin::publish(&admin_source, &now).await.unwrap();
    let p = Participant::start(&admin_source, "app-1", PoolRules::default())
        .await
        .unwrap();
    let r = wait_for(
        "registered",
        || registered(&admin_source, "app-1"),
        |r| r.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(
        (r.current.as_str(), r.next.as_deref()),
        (digest(&now).as_str(), None)
    );
    let roster = admin::list_roster(&admin_source).await.unwrap();
    assert!(roster.iter().any(|(id, _)| id == "app-1"), "{roster:?}");
    for k in keys() {
        let view = p.view();
        let route = view.route(k.as_bytes()).unwrap().unwrap();
        assert_eq!(route.owner.addr(), owner(&now, &k), "{k}");
        assert_eq!(route.next, None);
    }

    // A next membership: the writes of the keys that move go to both owners, reads stay.
    admin::publish_next(&admin_source, &next).await.unwrap();
    wait_for(
        "dual-writes",
        || registered(&admin_source, "app-1"),
        |r| r.as_ref().and_then(|r| r.next.clone()) == Some(digest(&next)),
    )
    .await;
    let view = p.view();
    let mut moved = 0;
    for k in keys() {
        let route = view.route(k.as_bytes()).unwrap().unwrap();
        assert_eq!(route.owner.addr(), owner(&now, &k), "{k}: reads stay");
        let (a, b) = (owner(&now, &k), owner(&next, &k));
        if a == b {
            assert_eq!(route.next, None, "{k}");
        } else {
            moved += 1;
            assert_eq!(route.next.map(|m| m.addr().to_string()), Some(b), "{k}");
            assert_eq!(route.writes().count(), 2);
        }
    }
    assert!(moved > 40, "about a quarter of the keys move: {moved}");
    assert!(!view.fenced());

    // The cut-over swaps them: the new owner reads, the old one is still written.
    admin::cut_over(&admin_source, None).await.unwrap();
    wait_for(
        "cut over",
        || registered(&admin_source, "app-1"),
        |r| r.as_ref().map(|r| r.current.clone()) == Some(digest(&next)),
    )
    .await;
    let view = p.view();
    for k in keys() {
        let route = view.route(k.as_bytes()).unwrap().unwrap();
        assert_eq!(route.owner.addr(), owner(&next, &k), "{k}");
        let old = owner(&now, &k);
        assert_eq!(
            route.next.map(|m| m.addr().to_string()),
            (old != owner(&next, &k)).then_some(old)
        );
    }
    admin::drop_next(&admin_source).await.unwrap();
    wait_for(
        "finished",
        || registered(&admin_source, "app-1"),
        |r| r.as_ref().is_some_and(|r| r.next.is_none()),
    )
    .await;

    // A clean stop leaves the roster.
    p.stop().await;
    let roster = admin::list_roster(&admin_source).await.unwrap();
    assert!(roster.is_empty(), "{roster:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_cut_off_fences_only_during_a_change_and_only_the_keys_that_move() {
    if !etcd_available() {
        return;
    }
    let etcd = Etcd::start();
    let admin_source = source(&etcd.url());
    let (now, next) = (servers(0..4), servers(0..3));
    admin::publish(&admin_source, &now).await.unwrap();
    let relay = Relay::start(format!("127.0.0.1:{}", etcd.client_port)).await;
    let p = Participant::start(&source(&relay.url()), "app-2", PoolRules::default())
        .await
        .unwrap();
    wait_for(
        "registered",
        || registered(&admin_source, "app-2"),
        |r| r.is_some(),
    )
    .await;

    // Cut off with no change under way: longer than the fence time, nothing is fenced.
    relay.blackhole();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let view = p.view();
    assert!(!view.fenced());
    assert!(keys().iter().all(|k| view.route(k.as_bytes()).is_ok()));
    assert!(
        p.unconfirmed_for().is_some(),
        "unconfirmed, yet serving all"
    );
    relay.restore();
    wait_for("renewed", || async { p.unconfirmed_for() }, Option::is_none).await;

    // During a change: fenced after 60 % of the lease, only the keys that move.
    admin::publish_next(&admin_source, &next).await.unwrap();
    wait_for(
        "dual-writes",
        || registered(&admin_source, "app-2"),
        |r| r.as_ref().and_then(|r| r.next.clone()).is_some(),
    )
    .await;
    let cut = Instant::now();
    relay.blackhole();
    wait_for("fenced", || async { p.view().fenced() }, |f| *f).await;
    let fenced_after = cut.elapsed();
    let view = p.view();
    let (mut refused, mut served) = (0, 0);
    for k in keys() {
        let moves = owner(&now, &k) != owner(&next, &k);
        match view.route(k.as_bytes()) {
            Err(e) => {
                assert!(moves, "{k} does not move, yet: {e}");
                assert!(e.to_string().contains("fenced"), "{e}");
                refused += 1;
            }
            Ok(route) => {
                assert!(!moves, "{k} moves, yet served: {route:?}");
                served += 1;
            }
        }
    }
    assert!(
        refused > 0 && served > refused,
        "{refused} refused, {served} served"
    );
    assert_eq!(
        p.stats().fenced.load(std::sync::atomic::Ordering::Relaxed),
        refused
    );
    relay.restore();
    let healed = Instant::now();
    wait_for("confirmed", || async { p.view().fenced() }, |f| !f).await;
    eprintln!(
        "fenced {fenced_after:?} after the cut, {refused} keys of {} refused, served again {:?} after the heal",
        keys().len(),
        healed.elapsed()
    );
    assert!(fenced_after >= Duration::from_secs(5), "{fenced_after:?}");
    p.stop().await;
}
