//! Following failovers: one `+switch-master` subscription per Sentinel, a resolver that re-reads every
//! group after each (re)connect and periodically, and one place that decides what is a change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shardring_resp::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::conn::Conn;
use super::{host_port, refused, SentinelStats, Sentinels, FIRST_RETRY};
use crate::error::{SentinelCause, SentinelError, SentinelFailure};

/// What a watch knows of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Known {
    /// The master last reported.
    master: String,
    /// The Sentinels' configuration epoch of that master (a lower bound after a `+switch-master`,
    /// which carries none): an answer from an older epoch is a Sentinel that has not caught up, and
    /// is ignored.
    epoch: u64,
}

/// What the tasks of one watch share.
struct Watch<F> {
    /// The groups asked about; a message about any other is ignored.
    groups: Vec<String>,
    /// What is known of each group: a change is a master different from this one.
    known: Mutex<HashMap<String, Known>>,
    /// The caller's callback.
    on_change: F,
    /// Wakes the resolver: a Sentinel (re)connected, and what it announced while the subscription was
    /// down is only seen by asking; or a switch was announced, and its epoch is only learnt by asking.
    resolve_now: Notify,
}

impl<F: Fn(&str, &str)> Watch<F> {
    fn new(groups: Vec<String>, on_change: F) -> Watch<F> {
        Watch {
            groups,
            known: Mutex::new(HashMap::new()),
            on_change,
            resolve_now: Notify::new(),
        }
    }

    /// A resolve's answer: `master` at configuration `epoch`, the newest any Sentinel had. Reported
    /// unless it is the master known already or older than it (a lagging Sentinel must not undo a
    /// switch another one announced).
    fn resolved(&self, stats: &SentinelStats, group: &str, master: &str, epoch: u64) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match known.get_mut(group) {
            Some(k) if epoch < k.epoch => {
                tracing::debug!(
                    group,
                    master,
                    epoch,
                    known = k.epoch,
                    "ignoring an older epoch's master"
                );
            }
            Some(k) if k.master == master => k.epoch = epoch,
            _ => self.change(&mut known, stats, group, master, epoch, "resolve"),
        }
    }

    /// A `+switch-master` from the Sentinel `by`: reported unless it is the master known already
    /// (every Sentinel announces each failover). A failover raises the epoch, so the one known is
    /// raised by one until a resolve learns the real one. `true` when it was a change.
    fn switched(&self, stats: &SentinelStats, group: &str, master: &str, by: &str) -> bool {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = match known.get(group) {
            Some(k) if k.master == master => return false,
            Some(k) => k.epoch.saturating_add(1),
            None => 0,
        };
        self.change(&mut known, stats, group, master, epoch, by);
        true
    }

    /// Records and reports a new master. The lock is held across the callback, so calls never overlap
    /// and their order is the order of the changes.
    fn change(
        &self,
        known: &mut HashMap<String, Known>,
        stats: &SentinelStats,
        group: &str,
        master: &str,
        epoch: u64,
        by: &str,
    ) {
        let before = known.insert(
            group.to_string(),
            Known {
                master: master.to_string(),
                epoch,
            },
        );
        match before {
            Some(old) => {
                stats.switched();
                tracing::warn!(group, from = %old.master, to = %master, epoch, by, "master group's master changed");
            }
            None => tracing::info!(group, master, epoch, by, "master group's master found"),
        }
        (self.on_change)(group, master);
    }
}

impl Sentinels {
    /// Follows `groups`' masters until `stop` is cancelled, calling `on_change(group, master)` with
    /// each group's first address and then whenever it differs from the last one reported (several
    /// Sentinels announce each failover; it is reported once). Calls never overlap; `on_change` must
    /// not block (it runs on the watch's task).
    ///
    /// Every group is resolved at once, then again after every (re)connect of a subscription (a
    /// switch announced while it was down is still seen), after every switch, and every
    /// [`Sentinels::refresh`]. A resolve asks every Sentinel (`SENTINEL MASTER`) and takes the master
    /// of the newest configuration epoch, and one older than the epoch already known is ignored: a
    /// Sentinel that has not caught up with a failover cannot move a group back to its old master.
    /// On every Sentinel it can reach, the watch keeps a connection
    /// subscribed to `+switch-master` (whose message is `<group> <old-ip> <old-port> <new-ip>
    /// <new-port>`); a lost one is reconnected with a back-off from 100 ms up to
    /// [`Sentinels::retry_max`]. A group whose master cannot be had keeps its last address (and counts
    /// in [`super::SentinelStats::resolve_errors`]). Messages about other groups are ignored.
    ///
    /// Returns at once when there are no groups or no Sentinels. Runs on the caller's task (spawn it);
    /// cancelling `stop` closes every connection.
    pub async fn watch(
        self: Arc<Self>,
        groups: Vec<String>,
        on_change: impl Fn(&str, &str) + Send + Sync + 'static,
        stop: CancellationToken,
    ) {
        if groups.is_empty() {
            return;
        }
        if self.addrs.is_empty() {
            tracing::error!(?groups, "no Sentinels to follow the master groups with");
            return;
        }
        let watch = Watch::new(groups, on_change);
        let followers = self.addrs.iter().map(|addr| self.follow(addr, &watch));
        let all = futures_util::future::join(
            self.resolver(&watch),
            futures_util::future::join_all(followers),
        );
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = all => {}
        }
    }

    /// Resolves every group now, and again whenever woken or every refresh interval.
    async fn resolver<F: Fn(&str, &str)>(&self, watch: &Watch<F>) {
        let groups: Vec<&str> = watch.groups.iter().map(String::as_str).collect();
        loop {
            for (group, answer) in groups.iter().zip(self.latest(&groups).await) {
                match answer {
                    Ok((master, epoch)) => watch.resolved(&self.stats, group, &master, epoch),
                    Err(e) => {
                        self.stats.resolve_failed();
                        tracing::warn!(group, error = %e, "cannot resolve the master group's master; its last address stays");
                    }
                }
            }
            tokio::select! {
                _ = watch.resolve_now.notified() => {}
                _ = tokio::time::sleep(self.refresh) => {}
            }
        }
    }

    /// Each of `groups`' masters at the newest configuration epoch any Sentinel has: every Sentinel is
    /// asked at once (`SENTINEL MASTER`), so one that missed a failover, or sits on the wrong side of a
    /// partition, cannot name the old master over the others.
    pub(crate) async fn latest(
        &self,
        groups: &[&str],
    ) -> Vec<Result<(String, u64), SentinelError>> {
        let answers = futures_util::future::join_all(
            self.addrs
                .iter()
                .map(|addr| self.ask(addr, "master", groups, master_state)),
        )
        .await;
        let mut out = Vec::with_capacity(groups.len());
        for (i, group) in groups.iter().enumerate() {
            let mut newest: Option<(String, u64)> = None;
            let mut failures = Vec::new();
            for (addr, answer) in self.addrs.iter().zip(&answers) {
                let cause = match answer.as_ref().map(|each| each.get(i)) {
                    Ok(Some(Ok((master, epoch)))) => {
                        if newest.as_ref().is_none_or(|(_, e)| epoch > e) {
                            newest = Some((master.clone(), *epoch));
                        }
                        continue;
                    }
                    Ok(Some(Err(cause))) | Err(cause) => cause.clone(),
                    Ok(None) => SentinelCause::Malformed("fewer answers than questions".into()),
                };
                failures.push(SentinelFailure {
                    addr: addr.clone(),
                    cause,
                });
            }
            out.push(newest.ok_or_else(|| SentinelError::Unresolved {
                group: (*group).to_string(),
                failures,
            }));
        }
        out
    }

    /// Keeps a subscription on the Sentinel at `addr`, reconnecting with back-off; never returns.
    async fn follow<F: Fn(&str, &str)>(&self, addr: &str, watch: &Watch<F>) {
        let mut wait = FIRST_RETRY;
        loop {
            match self.subscribe(addr).await {
                Ok(conn) => {
                    let _counted = self.stats.subscribed();
                    tracing::info!(sentinel = addr, "subscribed to +switch-master");
                    wait = FIRST_RETRY;
                    watch.resolve_now.notify_one();
                    let cause = self.listen(addr, conn, watch).await;
                    tracing::warn!(sentinel = addr, %cause, "lost the Sentinel's subscription; reconnecting");
                }
                Err(cause) => {
                    tracing::warn!(sentinel = addr, %cause, retry_in = ?wait, "cannot subscribe to the Sentinel");
                }
            }
            tokio::time::sleep(wait).await;
            wait = wait.saturating_mul(2).min(self.retry_max.max(FIRST_RETRY));
        }
    }

    /// Reads the subscription's messages until it fails; returns why. A connection silent for the
    /// refresh interval is sent a `PING`, and is lost when nothing comes back within the timeout.
    async fn listen<F: Fn(&str, &str)>(
        &self,
        addr: &str,
        mut conn: Conn,
        watch: &Watch<F>,
    ) -> SentinelCause {
        let mut pinged = false;
        loop {
            let patience: Duration = if pinged { self.timeout } else { self.refresh };
            match tokio::time::timeout(patience, conn.read()).await {
                Err(_) if pinged => return SentinelCause::Timeout,
                Err(_) => {
                    if let Err(cause) = conn.send(&[&["PING"]]).await {
                        return cause;
                    }
                    pinged = true;
                }
                Ok(Err(cause)) => return cause,
                Ok(Ok(value)) => {
                    pinged = false;
                    if let Err(cause) = self.on_message(addr, value, watch) {
                        return cause;
                    }
                }
            }
        }
    }

    /// Acts on one frame of a subscription: a `+switch-master` message reports the new master; the
    /// others are logged or ignored. An error reply ends the subscription.
    fn on_message<F: Fn(&str, &str)>(
        &self,
        addr: &str,
        value: Value,
        watch: &Watch<F>,
    ) -> Result<(), SentinelCause> {
        let parts = match value {
            Value::Array(parts) => parts,
            Value::Error(e) => return Err(SentinelCause::Refused(e)),
            other => {
                tracing::debug!(sentinel = addr, ?other, "ignoring an unexpected frame");
                return Ok(());
            }
        };
        let (Some(Some("message")), Some(Some(channel)), Some(Some(payload))) = (
            parts.first().map(Value::text),
            parts.get(1).map(Value::text),
            parts.get(2).map(Value::text),
        ) else {
            // Confirmations and PING's answer.
            return Ok(());
        };
        match channel {
            "+switch-master" => match switch_master(payload) {
                Some((group, master)) if watch.groups.iter().any(|g| g == group) => {
                    if watch.switched(&self.stats, group, &master, addr) {
                        // Learn the new epoch, so a lagging Sentinel's answer cannot undo the switch.
                        watch.resolve_now.notify_one();
                    }
                }
                Some((group, _)) => {
                    tracing::debug!(sentinel = addr, group, "ignoring a switch of another group");
                }
                None => {
                    tracing::warn!(
                        sentinel = addr,
                        payload,
                        "ignoring a malformed +switch-master"
                    );
                }
            },
            "+odown" | "-odown" => {
                // `master <group> <ip> <port> …`: only masters of the watched groups are worth a line.
                let mut words = payload.split(' ');
                if let (Some("master"), Some(group)) = (words.next(), words.next()) {
                    if watch.groups.iter().any(|g| g == group) {
                        let down = channel == "+odown";
                        tracing::warn!(
                            sentinel = addr,
                            group,
                            down,
                            "the master group's master is {}",
                            if down { "objectively down" } else { "back up" }
                        );
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The group and new master's `host:port` of a `+switch-master` payload, `<group> <old-ip> <old-port>
/// <new-ip> <new-port>`; `None` when it is not that shape.
fn switch_master(payload: &str) -> Option<(&str, String)> {
    let mut words = payload.rsplitn(5, ' ');
    let (new_port, new_ip, _old_port, _old_ip, group) = (
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
    );
    if group.is_empty() {
        return None;
    }
    Some((group, host_port(new_ip, new_port).ok()?))
}

/// `SENTINEL MASTER`'s reply, a flat array of field names and values: the master's `ip`, `port` and
/// `config-epoch`.
fn master_state(reply: Value) -> Result<(String, u64), SentinelCause> {
    let fields = match reply {
        Value::Array(fields) => fields,
        Value::Error(e) => return Err(refused(e)),
        Value::Null => return Err(SentinelCause::UnknownGroup),
        other => {
            return Err(SentinelCause::Malformed(format!(
                "{other:?} where a master's state was expected"
            )))
        }
    };
    let field = |name: &str| {
        fields
            .chunks_exact(2)
            .find(|pair| pair[0].text() == Some(name))
            .and_then(|pair| pair[1].text())
            .ok_or_else(|| SentinelCause::Malformed(format!("a master's state without {name}")))
    };
    let master = host_port(field("ip")?, field("port")?)
        .map_err(|why| SentinelCause::Malformed(format!("{why} in the master's address")))?;
    let epoch = field("config-epoch")?
        .parse()
        .map_err(|_| SentinelCause::Malformed("a config-epoch that is not a number".into()))?;
    Ok((master, epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a recording watch's callback was called with, one `group master` line a call.
    type Calls = Arc<Mutex<Vec<String>>>;

    /// A watch recording its calls.
    fn recording() -> (Watch<impl Fn(&str, &str)>, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&calls);
        let watch = Watch::new(vec!["g1".to_string()], move |group: &str, master: &str| {
            recorded.lock().unwrap().push(format!("{group} {master}"));
        });
        (watch, calls)
    }

    #[test]
    fn a_switch_announced_by_every_sentinel_is_reported_once() {
        let stats = SentinelStats::default();
        let (watch, calls) = recording();
        watch.resolved(&stats, "g1", "10.0.0.1:6379", 3);
        watch.resolved(&stats, "g1", "10.0.0.1:6379", 3);
        assert!(watch.switched(&stats, "g1", "10.0.0.2:6379", "s1"));
        assert!(!watch.switched(&stats, "g1", "10.0.0.2:6379", "s2"));
        assert!(!watch.switched(&stats, "g1", "10.0.0.2:6379", "s3"));
        watch.resolved(&stats, "g1", "10.0.0.2:6379", 4);
        assert_eq!(
            *calls.lock().unwrap(),
            ["g1 10.0.0.1:6379", "g1 10.0.0.2:6379"]
        );
        assert_eq!(stats.switches(), 1);
    }

    #[test]
    fn a_lagging_sentinels_older_epoch_does_not_undo_a_switch() {
        let stats = SentinelStats::default();
        let (watch, calls) = recording();
        watch.resolved(&stats, "g1", "10.0.0.1:6379", 3);
        // Announced by the Sentinel that led the failover; a resolve then hears only from one that
        // has not caught up yet (epoch 3, the old master).
        watch.switched(&stats, "g1", "10.0.0.2:6379", "s1");
        watch.resolved(&stats, "g1", "10.0.0.1:6379", 3);
        // A later failover, back to the first server, learnt by a resolve: a change.
        watch.resolved(&stats, "g1", "10.0.0.2:6379", 4);
        watch.resolved(&stats, "g1", "10.0.0.1:6379", 5);
        assert_eq!(
            *calls.lock().unwrap(),
            ["g1 10.0.0.1:6379", "g1 10.0.0.2:6379", "g1 10.0.0.1:6379"]
        );
        assert_eq!(stats.switches(), 2);
    }

    #[test]
    fn a_masters_state_gives_its_address_and_epoch() {
        let bulk = |s: &str| Value::Bulk(s.as_bytes().to_vec());
        let fields = |pairs: &[&str]| Value::Array(pairs.iter().map(|s| bulk(s)).collect());
        assert_eq!(
            master_state(fields(&[
                "name",
                "g1",
                "ip",
                "127.0.0.1",
                "port",
                "6380",
                "config-epoch",
                "7"
            ])),
            Ok(("127.0.0.1:6380".to_string(), 7))
        );
        assert_eq!(
            master_state(Value::Error("ERR No such master with that name".into())),
            Err(SentinelCause::UnknownGroup)
        );
        for bad in [
            fields(&["ip", "127.0.0.1", "port", "6380"]),
            fields(&["ip", "127.0.0.1", "port", "x", "config-epoch", "1"]),
            fields(&["ip", "127.0.0.1", "port", "1", "config-epoch", "-1"]),
            fields(&["ip"]),
            Value::Integer(1),
        ] {
            assert!(
                matches!(master_state(bad.clone()), Err(SentinelCause::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_switch_master_payload_names_the_group_and_its_new_master() {
        assert_eq!(
            switch_master("g1 127.0.0.1 6379 127.0.0.1 6380"),
            Some(("g1", "127.0.0.1:6380".to_string()))
        );
        assert_eq!(
            switch_master("g1 ::1 6379 ::1 6380"),
            Some(("g1", "[::1]:6380".to_string()))
        );
        for bad in [
            "",
            "g1",
            "g1 1.2.3.4 1 1.2.3.5",
            " 1.2.3.4 1 1.2.3.5 2",
            "g1 a 1 b 0",
            "g1 a 1 b x",
        ] {
            assert_eq!(switch_master(bad), None, "{bad:?}");
        }
    }
}
