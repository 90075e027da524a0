# Shared by scripts/bench-proxy and scripts/proxy-syscalls (sourced, not run): the servers, the pool file
# and the proxies every proxy measurement starts the same way. Callers define `work` (a scratch folder)
# and `pids` (an array of what to stop on exit) before sourcing.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing on port $1" >&2; cat "$work"/*.log >&2 2>/dev/null; exit 1; }

# start_servers memcache|redis: 4 servers of that kind on free ports. Sets `servers` (the pool's
# `servers:` lines), `redis_key` (the pool's `redis: true` line, or nothing), `prefix` (memload's op
# prefix: `redis-` or nothing), and `m1_port`/`m1_pid` (the first server, for the no-proxy runs).
start_servers() {
    servers=""; redis_key=""; prefix=""
    if [ "$1" = redis ]; then redis_key=$'  redis: true\n'; prefix=redis-; fi
    local i p
    for i in 1 2 3 4; do
        p=$(free_port)
        if [ "$1" = redis ]; then
            redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
        else
            memcached -l 127.0.0.1 -p "$p" -U 0 -m 256 -t 1 -u root >/dev/null 2>&1 &
        fi
        pids+=($!)
        [ "$i" = 1 ] && { m1_port=$p; m1_pid=$!; }
        wait_port "$p"
        servers+="   - 127.0.0.1:$p:1"$'\n'
    done
}

# pool_yml PORT FILE: the one pool every proxy serves, listening on PORT.
pool_yml() { printf 'alpha:\n  listen: 127.0.0.1:%s\n%s  hash: fnv1a_64\n  distribution: ketama\n  servers:\n%s' "$1" "$redis_key" "$servers" > "$2"; }

# start_proxy NAME nutcracker | start_proxy NAME BINARY [FLAGS...]: that proxy over the pool on a free
# port, waited for. Sets `proxy_port` and `proxy_pid`.
start_proxy() {
    local name=$1 bin=$2; shift 2
    proxy_port=$(free_port)
    pool_yml "$proxy_port" "$work/$name.yml"
    if [ "$bin" = nutcracker ]; then
        nutcracker -c "$work/$name.yml" -s "$(free_port)" -a 127.0.0.1 -o "$work/$name.log" &
    else
        RUST_LOG=warn "$bin" proxy "$@" --config "$work/$name.yml" --stats-port "$(free_port)" 2>"$work/$name.log" &
    fi
    proxy_pid=$!; pids+=($proxy_pid)
    wait_port "$proxy_port"
}

# stop_from N: stops what was started since `pids` had N entries.
stop_from() {
    local p
    for p in "${pids[@]:$1}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=("${pids[@]:0:$1}")
}
