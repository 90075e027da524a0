//! A real Redis Cluster for tests: `redis-server --cluster-enabled yes` nodes on free 127.0.0.1 ports,
//! joined by `redis-cli --cluster create`, with the faults a cluster proxy must survive (a node killed,
//! a node paused) and the cluster's own view of who serves a slot.
//!
//! [`RedisCluster::start`] returns only once the cluster is whole: every node says `cluster_state:ok`
//! with all 16384 slots served and knows every other node, and every replica has synced with its
//! master (a replica that never synced refuses to fail over, so a test that kills a master right after
//! start would wait in vain).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis::RedisServer;
use crate::resp_conn::{Reply, RespConn};
use crate::{free_port, skip_missing, TempDir};

/// How many hash slots a cluster has.
const SLOTS: usize = 16384;

/// How long `redis-cli --cluster create` and the cluster's settling may take before the start panics:
/// the nodes' handshakes and replicas' first syncs take a few seconds on an idle machine.
const SETTLE: Duration = Duration::from_secs(30);

/// The node timeout: how long a node must be unreachable before the others count it as failed.
/// Redis's default (15 s) would make every failover test slow; 2 s keeps a failover near 3-5 s.
const NODE_TIMEOUT_MS: &str = "2000";

/// What a node is in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Serves slots.
    Master,
    /// Replicates a master, and takes its slots over when it fails.
    Replica,
}

/// One node of a [`RedisCluster`].
#[derive(Debug)]
pub struct ClusterNode {
    /// `127.0.0.1:port`: how clients and [`RedisCluster`]'s methods name the node (plain TCP).
    pub addr: String,
    /// `127.0.0.1:tls-port` of a cluster started with [`RedisCluster::start_tls`].
    pub tls_addr: Option<String>,
    /// Its process id (it stays set after a kill, to name the node in messages).
    pub pid: u32,
    /// Its role when the cluster started (a failover changes it: [`RedisCluster::role`] asks the node).
    pub role: Role,
    /// The redis-server process: killed, paused and resumed through it, and killed on drop.
    server: RedisServer,
    /// Its log file, shown when the cluster does not settle.
    log: PathBuf,
    /// Whether it was killed: a killed node is no longer asked anything.
    killed: bool,
    /// Whether it is paused: a paused node would make every question wait out a timeout.
    paused: bool,
}

/// The certificate files of a TLS cluster ([`RedisCluster::start_tls`]).
#[derive(Debug, Clone)]
pub struct ClusterTls {
    /// Each node's certificate (valid for 127.0.0.1), also its client certificate on the bus.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The CA that signed it.
    pub ca: PathBuf,
}

/// A running Redis Cluster; every node is killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, masters first in the order `redis-cli --cluster create` was given them.
    nodes: Vec<ClusterNode>,
    /// The extra redis-server arguments every node was started with (a node added later gets them).
    extra: Vec<String>,
    /// The nodes' password, when `extra` sets one (`--requirepass`): every question to a node, and
    /// redis-cli, authenticate with it.
    password: Option<String>,
    /// The TLS files, for a cluster whose nodes also listen with TLS and speak it on the cluster
    /// bus and to their replicas.
    tls: Option<ClusterTls>,
    /// The nodes' directories (nodes.conf, logs), removed on drop after the nodes are killed (fields
    /// drop in order).
    _dir: TempDir,
}

impl RedisCluster {
    /// `masters` masters (at least 3, as `redis-cli --cluster create` requires), each with
    /// `replicas_per_master` replicas, settled (see the [module docs](self)). `None`, with a message,
    /// when redis-server or redis-cli is not installed (outside CI). Panics with the nodes' logs when
    /// the cluster does not settle within 30 s.
    pub fn start(masters: usize, replicas_per_master: usize) -> Option<RedisCluster> {
        RedisCluster::start_with(masters, replicas_per_master, &[])
    }

    /// [`RedisCluster::start`] with extra redis-server arguments for every node (for instance
    /// `--cluster-require-full-coverage no`, so that the slots of live masters stay served while a
    /// failed master's replica is not yet promoted).
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        extra: &[&str],
    ) -> Option<RedisCluster> {
        RedisCluster::start_inner(masters, replicas_per_master, extra, None)
    }

    /// [`RedisCluster::start`] whose nodes also listen with TLS (`--tls-port`, clients not asked for
    /// certificates) and use it between themselves (`--tls-cluster yes`, `--tls-replication yes`):
    /// `redis-cli --cluster create` is given the TLS addresses. This type's own questions go to the
    /// plain ports; [`RedisCluster::tls_seeds`] are the addresses a TLS client starts from.
    pub fn start_tls(
        masters: usize,
        replicas_per_master: usize,
        tls: &ClusterTls,
    ) -> Option<RedisCluster> {
        RedisCluster::start_inner(masters, replicas_per_master, &[], Some(tls.clone()))
    }

    fn start_inner(
        masters: usize,
        replicas_per_master: usize,
        extra: &[&str],
        tls: Option<ClusterTls>,
    ) -> Option<RedisCluster> {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters, not {masters}"
        );
        if let Err(e) = Command::new("redis-cli").arg("--version").output() {
            skip_missing("redis-cli", &e);
            return None;
        }
        let dir = TempDir::new("redis-cluster");
        let count = masters * (1 + replicas_per_master);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(start_node(&dir, extra, tls.as_ref())?);
        }
        let password = extra
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra.get(i + 1))
            .map(|p| (*p).to_owned());
        let extra = extra.iter().map(|s| (*s).to_owned()).collect();
        let mut cluster = RedisCluster {
            nodes,
            extra,
            password,
            tls,
            _dir: dir,
        };
        cluster.create(replicas_per_master);
        cluster.settle(masters, replicas_per_master);
        Some(cluster)
    }

    /// Starts one more node and joins it to the cluster as a master without slots (`redis-cli
    /// --cluster add-node`), returning once every live node knows it and says the cluster is whole
    /// (`cluster_state:ok`: until the new node has heard the slot map by gossip it answers
    /// `CLUSTERDOWN`, which fails a reshard onto it, as seen on a loaded machine); gives its address.
    /// Panics with the logs when it does not join within 30 s.
    pub fn add_master(&mut self) -> String {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let node = start_node(&self._dir, &extra, self.tls.as_ref())
            .expect("redis-server started the others");
        let addr = node.addr.clone();
        let (new, seed) = (
            cli_addr(&node),
            self.live().next().map(cli_addr).expect("a live node"),
        );
        self.nodes.push(node);
        let out = Command::new("redis-cli")
            .args(self.cli_tls())
            .args(["--cluster", "add-node", &new, &seed])
            .args(self.cli_auth())
            .output()
            .expect("redis-cli runs");
        if !out.status.success() {
            panic!(
                "redis-cli --cluster add-node failed: {}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
        }
        let deadline = Instant::now() + SETTLE;
        let count = self.nodes.iter().filter(|n| !n.killed).count();
        loop {
            let known = self.live().all(|n| {
                self.conn(&n.addr)
                    .and_then(|mut c| c.call_str(&["CLUSTER", "INFO"]))
                    .ok()
                    .and_then(|r| r.text())
                    .is_some_and(|info| {
                        let said = |line: &str| info.lines().any(|l| l.trim() == line);
                        said(&format!("cluster_known_nodes:{count}")) && said("cluster_state:ok")
                    })
            });
            if known {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "{addr} did not join within {SETTLE:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The nodes' password (`--requirepass` among the extra arguments), if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// A connection to the node at `addr`, authenticated when the nodes have a password.
    fn conn(&self, addr: &str) -> std::io::Result<RespConn> {
        let mut c = RespConn::connect(addr)?;
        if let Some(password) = &self.password {
            if let Reply::Error(e) = c.call_str(&["AUTH", password])? {
                return Err(std::io::Error::other(format!("AUTH at {addr}: {e}")));
            }
        }
        Ok(c)
    }

    /// redis-cli's arguments for the nodes' password (`-a PASSWORD`), if any.
    fn cli_auth(&self) -> Vec<String> {
        self.password
            .iter()
            .flat_map(|p| ["-a".to_owned(), p.clone(), "--no-auth-warning".to_owned()])
            .collect()
    }

    /// redis-cli's TLS arguments, for a TLS cluster.
    fn cli_tls(&self) -> Vec<String> {
        self.tls
            .iter()
            .flat_map(|t| {
                [
                    "--tls".to_owned(),
                    "--cacert".to_owned(),
                    t.ca.display().to_string(),
                ]
            })
            .collect()
    }

    /// Every node's TLS address, for a cluster started with [`RedisCluster::start_tls`] (else
    /// none).
    pub fn tls_seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|n| n.tls_addr.clone())
            .collect()
    }

    /// Every node.
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// Every node's address: the seeds a cluster client starts from.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// Kills the node at `addr` (SIGKILL; its data is gone: nothing is saved). Its replica, if it was
    /// a master with one, is promoted after the node timeout and an election.
    pub fn kill(&mut self, addr: &str) {
        let node = self.node_mut(addr);
        node.server.kill();
        node.killed = true;
    }

    /// Pauses the node at `addr` (SIGSTOP): its connections stay open and nothing is answered. Paused
    /// longer than the node timeout (2 s), a master is failed over as a killed one is.
    pub fn pause(&mut self, addr: &str) {
        let node = self.node_mut(addr);
        node.server.pause();
        node.paused = true;
    }

    /// Resumes a paused node (SIGCONT). A master failed over meanwhile comes back as a replica of its
    /// promoted one.
    pub fn resume(&mut self, addr: &str) {
        let node = self.node_mut(addr);
        node.server.resume();
        node.paused = false;
    }

    /// The address of the master serving `slot`, as the first live node that answers `CLUSTER SLOTS`
    /// sees it; `None` when no live node answers or none names a master for the slot (a failed master
    /// whose replica is not yet promoted is still named: see [`RedisCluster::role`]).
    pub fn master_of_slot(&self, slot: u16) -> Option<String> {
        self.slot_map()?.get(usize::from(slot))?.clone()
    }

    /// Every slot's master (`None` for a slot no master serves), from one `CLUSTER SLOTS` of the first
    /// live node that answers: the whole map at the cost of one question, where
    /// [`RedisCluster::master_of_slot`] for each slot would ask 16384. `None` when no live node answers.
    pub fn slot_map(&self) -> Option<Vec<Option<String>>> {
        self.live().find_map(|n| {
            let reply = self
                .conn(&n.addr)
                .and_then(|mut c| c.call_str(&["CLUSTER", "SLOTS"]))
                .ok()?;
            slot_map(&reply)
        })
    }

    /// The role the node at `addr` gives itself now (`ROLE`); `None` when it does not answer (killed,
    /// paused).
    pub fn role(&self, addr: &str) -> Option<Role> {
        if self.node(addr).killed || self.node(addr).paused {
            return None;
        }
        let reply = self
            .conn(addr)
            .and_then(|mut c| c.call_str(&["ROLE"]))
            .ok()?;
        match reply {
            Reply::Array(items) => match items.first().and_then(Reply::text).as_deref() {
                Some("master") => Some(Role::Master),
                Some("slave") => Some(Role::Replica),
                _ => None,
            },
            _ => None,
        }
    }

    /// The nodes neither killed nor paused.
    fn live(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|n| !n.killed && !n.paused)
    }

    /// The node at `addr`; panics naming it when the cluster has none there.
    fn node(&self, addr: &str) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.addr == addr)
            .unwrap_or_else(|| panic!("no node of the cluster at {addr}"))
    }

    /// [`RedisCluster::node`], mutable.
    fn node_mut(&mut self, addr: &str) -> &mut ClusterNode {
        self.nodes
            .iter_mut()
            .find(|n| n.addr == addr)
            .unwrap_or_else(|| panic!("no node of the cluster at {addr}"))
    }

    /// Runs `redis-cli --cluster create` over every node; panics with its output and the logs when it
    /// fails.
    fn create(&self, replicas_per_master: usize) {
        let out = Command::new("redis-cli")
            .args(self.cli_tls())
            .arg("--cluster")
            .arg("create")
            .args(self.nodes.iter().map(cli_addr))
            .args([
                "--cluster-replicas",
                &replicas_per_master.to_string(),
                "--cluster-yes",
            ])
            .args(self.cli_auth())
            .output()
            .expect("redis-cli runs (it answered --version)");
        if !out.status.success() {
            panic!(
                "redis-cli --cluster create failed ({}):\n{}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
        }
    }

    /// Waits until the cluster is whole (see the [module docs](self)), then records each node's role;
    /// panics after [`SETTLE`] naming what is missing, with the logs.
    fn settle(&mut self, masters: usize, replicas_per_master: usize) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let missing = self.not_settled(masters * (1 + replicas_per_master));
            let Some(missing) = missing else { break };
            if Instant::now() > deadline {
                panic!(
                    "the cluster did not settle within {SETTLE:?}: {missing}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut replicas = 0;
        let roles: Vec<Option<String>> = self
            .nodes
            .iter()
            .map(|node| {
                let reply = self
                    .conn(&node.addr)
                    .and_then(|mut c| c.call_str(&["ROLE"]));
                match reply.ok().as_ref() {
                    Some(Reply::Array(items)) => items.first().and_then(Reply::text),
                    _ => None,
                }
            })
            .collect();
        for (node, role) in self.nodes.iter_mut().zip(roles) {
            node.role = if role.as_deref() == Some("slave") {
                replicas += 1;
                Role::Replica
            } else {
                Role::Master
            };
        }
        assert_eq!(
            replicas,
            masters * replicas_per_master,
            "replicas after create"
        );
    }

    /// What keeps the cluster from being whole, or `None` when it is.
    fn not_settled(&self, count: usize) -> Option<String> {
        for node in &self.nodes {
            let info = match self
                .conn(&node.addr)
                .and_then(|mut c| c.call_str(&["CLUSTER", "INFO"]))
            {
                Ok(reply) => reply.text().unwrap_or_default(),
                Err(e) => return Some(format!("{} does not answer: {e}", node.addr)),
            };
            for want in [
                "cluster_state:ok".to_string(),
                format!("cluster_slots_ok:{SLOTS}"),
                format!("cluster_known_nodes:{count}"),
            ] {
                if !info.lines().any(|l| l.trim() == want) {
                    return Some(format!("{} has no {want}", node.addr));
                }
            }
            let replication = self
                .conn(&node.addr)
                .and_then(|mut c| c.call_str(&["INFO", "replication"]))
                .ok()
                .and_then(|r| r.text())
                .unwrap_or_default();
            if replication.contains("role:slave") && !replication.contains("master_link_status:up")
            {
                return Some(format!("{} has not synced with its master", node.addr));
            }
        }
        None
    }

    /// Every node's log, for a failure message (a failover that does not happen, a cluster that
    /// does not settle).
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(&n.log).unwrap_or_else(|e| e.to_string());
                format!("--- {} (pid {}) log:\n{log}", n.addr, n.pid)
            })
            .collect()
    }
}

/// The address redis-cli joins a node by: its TLS one in a TLS cluster (the bus listens 10000 above
/// the port the cluster uses).
fn cli_addr(node: &ClusterNode) -> String {
    node.tls_addr.clone().unwrap_or_else(|| node.addr.clone())
}

/// Starts one cluster node on a free port (trying five) with its own directory for nodes.conf and its
/// log, and a TLS port beside it with `tls`; `None` when redis-server is not installed (outside CI).
fn start_node(dir: &TempDir, extra: &[&str], tls: Option<&ClusterTls>) -> Option<ClusterNode> {
    for _ in 0..5 {
        let port = free_port();
        let tls_port = tls.map(|_| free_port().to_string());
        let tls_files: Vec<String> = tls
            .map(|t| {
                [&t.cert, &t.key, &t.ca]
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let node_dir = dir.path().join(port.to_string());
        std::fs::create_dir_all(&node_dir).expect("a node directory");
        let conf = node_dir.join("nodes.conf");
        let log = node_dir.join("redis.log");
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            conf.to_str().expect("a UTF-8 temporary directory"),
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
            "--dir",
            node_dir.to_str().expect("a UTF-8 temporary directory"),
            "--logfile",
            log.to_str().expect("a UTF-8 temporary directory"),
        ];
        args.extend_from_slice(extra);
        if let (Some(tls_port), [cert, key, ca]) = (&tls_port, tls_files.as_slice()) {
            args.extend_from_slice(&[
                "--tls-port",
                tls_port,
                "--tls-cert-file",
                cert,
                "--tls-key-file",
                key,
                "--tls-ca-cert-file",
                ca,
                "--tls-auth-clients",
                "no",
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
            ]);
        }
        match RedisServer::start_on(port, &args) {
            Ok(Some(server)) => {
                return Some(ClusterNode {
                    tls_addr: tls_port.map(|p| format!("127.0.0.1:{p}")),
                    addr: server.addr.clone(),
                    pid: server.pid().expect("a started server has a pid"),
                    role: Role::Master,
                    server,
                    log,
                    killed: false,
                    paused: false,
                })
            }
            Ok(None) => continue,
            Err(e) => {
                skip_missing("redis-server", &e);
                return None;
            }
        }
    }
    panic!("a cluster node did not start on any of 5 free ports");
}

/// Each slot's master in a `CLUSTER SLOTS` reply, whose entries are `[start, end, [ip, port, id, ...],
/// replicas...]`, the master first; `None` when the reply is not that (an error, a node not yet in a
/// cluster).
fn slot_map(reply: &Reply) -> Option<Vec<Option<String>>> {
    let Reply::Array(ranges) = reply else {
        return None;
    };
    let mut map = vec![None; SLOTS];
    for range in ranges {
        let Reply::Array(fields) = range else {
            return None;
        };
        let [Reply::Integer(start), Reply::Integer(end), Reply::Array(master), ..] =
            fields.as_slice()
        else {
            return None;
        };
        let [ip, Reply::Integer(port), ..] = master.as_slice() else {
            return None;
        };
        let addr = format!("{}:{port}", ip.text()?);
        let start = usize::try_from(*start).ok()?;
        let end = usize::try_from(*end).ok()?;
        for slot in map.get_mut(start..=end)? {
            *slot = Some(addr.clone());
        }
    }
    Some(map)
}
