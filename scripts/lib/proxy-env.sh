# Shared by scripts/bench-proxy, scripts/proxy-syscalls, the migration benchmarks and the README's
# migrate walkthrough (sourced, not run): the servers, the pool file and the proxies every proxy
# measurement starts the same way. Callers define `work` (a scratch folder) and `pids` (an array of
# what to stop on exit) before sourcing.

# shellcheck source=scripts/lib/ports.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ports.sh"

# start_servers memcache|redis: 4 servers of that kind on free ports. Sets `servers` (the pool's
# `servers:` lines), `redis_key` (the pool's `redis: true` line, or nothing), `prefix` (memload's op
# prefix: `redis-` or nothing), and `m1_port`/`m1_pid` (the first server, for the no-proxy runs).
# With `tls_dir` set (make_certs), each server also listens for TLS on a second port (memcached -Z
# with its plain port `notls:`, redis-server --tls-port): `tls_servers` are those lines, `m1_tls_port`
# the first server's.
start_servers() {
    servers=""; tls_servers=""; redis_key=""; prefix=""
    if [ "$1" = redis ]; then redis_key=$'  redis: true\n'; prefix=redis-; fi
    local i p t=""
    for i in 1 2 3 4; do
        p=$(free_port)
        [ -n "${tls_dir:-}" ] && t=$(free_port)
        if [ "$1" = redis ] && [ -n "$t" ]; then
            redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --tls-port "$t" \
                --tls-cert-file "$tls_dir/server.pem" --tls-key-file "$tls_dir/server.key" \
                --tls-ca-cert-file "$tls_dir/ca.pem" --tls-auth-clients no >/dev/null 2>&1 &
        elif [ "$1" = redis ]; then
            redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
        elif [ -n "$t" ]; then
            memcached -Z -o "ssl_chain_cert=$tls_dir/server.pem,ssl_key=$tls_dir/server.key" \
                -l "notls:127.0.0.1:$p,127.0.0.1:$t" -U 0 -m 256 -t 1 -u root >/dev/null 2>&1 &
        else
            memcached -l 127.0.0.1 -p "$p" -U 0 -m 256 -t 1 -u root >/dev/null 2>&1 &
        fi
        pids+=($!)
        [ "$i" = 1 ] && { m1_port=$p; m1_pid=$!; m1_tls_port=$t; }
        wait_port "$p"
        servers+="   - 127.0.0.1:$p:1"$'\n'
        if [ -n "$t" ]; then wait_port "$t"; tls_servers+="   - 127.0.0.1:$t:1"$'\n'; fi
    done
}

# make_certs DIR: a CA and a certificate for 127.0.0.1 it signs (openssl, P-256), for the TLS runs.
# Sets `tls_dir`.
make_certs() {
    tls_dir=$1; mkdir -p "$tls_dir"
    (cd "$tls_dir" &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
            -out ca.pem -days 2 -subj "/CN=shardring bench CA" &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
            -out server.csr -subj "/CN=127.0.0.1" &&
        printf 'subjectAltName=IP:127.0.0.1\n' > ext &&
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
            -days 2 -extfile ext) >/dev/null 2>&1
}

# pool_yml PORT FILE: the one pool every proxy serves, listening on PORT (its servers' TLS ports
# when `pool_servers` says so: `pool_servers=$tls_servers start_proxy …`).
pool_yml() { printf 'alpha:\n  listen: 127.0.0.1:%s\n%s  hash: fnv1a_64\n  distribution: ketama\n  servers:\n%s' "$1" "$redis_key" "${pool_servers:-$servers}" > "$2"; }

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
