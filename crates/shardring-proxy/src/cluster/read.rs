//! A cluster's slot map read outside any pool, from its seeds: what `shardring migrate` places keys
//! by when it moves a pool onto a cluster (the proxy's own pools follow theirs: [`super::follow`]).

/// A Redis Cluster's masters and the slots each serves, as read by [`slot_map`].
#[derive(Debug, Clone)]
pub struct SlotMap {
    /// Every master's `host:port`: those that serve slots, sorted, then those that serve none.
    pub masters: Vec<String>,
    /// Which master (index in `masters`) serves each slot.
    pub slots: crate::config::SlotTable,
}

/// The slot map of the cluster `seeds` (`host:port`) belong to, as the seed that answers with the
/// most slots served gives it (`CLUSTER SHARDS`, `CLUSTER SLOTS` on older servers), over plain
/// TCP, with `AUTH [user] password` when `auth` is given, each seed within `timeout`: what
/// `shardring migrate` places keys by when it moves a pool onto a cluster.
///
/// # Errors
/// Why no seed gave a map (the last seed's reason).
pub async fn slot_map(
    seeds: &[String],
    auth: Option<(Option<String>, String)>,
    timeout: std::time::Duration,
) -> Result<SlotMap, String> {
    let access = super::node::NodeAccess {
        connect: crate::sentinel::follow::connector(None),
        ports: super::map::Ports::Plain,
        auth,
        timeout,
    };
    let mut best: Option<super::map::ClusterMap> = None;
    let mut last_error = String::from("no seed node given");
    for seed in seeds {
        match access.slot_map(seed).await {
            Ok(m) if best.as_ref().is_none_or(|b| m.served() > b.served()) => best = Some(m),
            Ok(_) => {}
            Err(e) => last_error = format!("{seed}: {e}"),
        }
    }
    let map = best.ok_or(last_error)?;
    let masters_only = super::map::ClusterMap {
        replicas: Vec::new(),
        ..map
    };
    Ok(SlotMap {
        slots: masters_only.table(),
        masters: masters_only.masters,
    })
}
