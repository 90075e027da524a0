# A Redis Cluster for the scripts (sourced, not run; needs scripts/lib/ports.sh sourced first, `$work`
# and the `pids` array set): start_redis_cluster MASTERS REPLICAS starts MASTERS*(1+REPLICAS)
# `redis-server --cluster-enabled yes` nodes on free ports, joins them with `redis-cli --cluster
# create`, waits for `cluster_state:ok` on every node, and sets `cluster_nodes` (host:port each).
# Extra redis-server arguments for every node: CLUSTER_NODE_ARGS.

# A cluster node's bus listens on its port + 10000: the port must be at most 55535.
node_port() { local p; while :; do p=$(free_port); [ "$p" -le 55535 ] && { echo "$p"; return; }; done; }

start_redis_cluster() {
    local masters=$1 replicas=$2 count p ok n
    count=$((masters * (1 + replicas)))
    cluster_nodes=()
    for _ in $(seq "$count"); do
        p=$(node_port)
        # shellcheck disable=SC2086
        redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --cluster-enabled yes \
            --cluster-node-timeout 2000 --cluster-config-file "$work/nodes-$p.conf" --dir "$work" \
            ${CLUSTER_NODE_ARGS:-} >"$work/node-$p.log" 2>&1 &
        pids+=($!)
        wait_port "$p"
        cluster_nodes+=("127.0.0.1:$p")
    done
    redis-cli --cluster create "${cluster_nodes[@]}" --cluster-replicas "$replicas" --cluster-yes \
        >"$work/create.log" 2>&1 || { cat "$work/create.log" >&2; return 1; }
    for _ in $(seq 300); do
        ok=1
        for n in "${cluster_nodes[@]}"; do
            redis-cli -h 127.0.0.1 -p "${n##*:}" cluster info | grep -q 'cluster_state:ok' || ok=0
        done
        [ "$ok" = 1 ] && return 0
        sleep 0.1
    done
    echo "the cluster did not settle" >&2
    cat "$work/create.log" >&2
    return 1
}
