# Sourced by scripts/bench-migrate and scripts/migrate-server-time (not run): the keys a migration
# benchmark moves, stored through the proxy so each is on its owner, and the CPU its processes use.

# cpu PID...: the CPU seconds (user and system) those processes have used, summed (0 for one gone).
cpu() {
    local p total=0
    for p in "$@"; do
        [ -r "/proc/$p/stat" ] || continue
        # utime and stime, fields 14 and 15 (after the command's parenthesised name).
        total=$((total + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')))
    done
    python3 -c "print($total / $(getconf CLK_TCK))"
}

# fill PORT PROTO: KEYS keys of VALUE bytes through the proxy on PORT, pipelined (memload's names).
fill() {
    python3 - "$1" "$2" "$KEYS" "$VALUE" <<'PY'
import socket, sys
port, proto, n, vlen = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port)); v = b"v" * vlen
for start in range(0, n, 2000):
    batch = []
    for i in range(start, min(n, start + 2000)):
        k = b"memload:%08d" % i
        if proto == "redis":
            batch.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, vlen, v))
        else:
            batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, vlen, v))
    s.sendall(b"".join(batch))
    if proto == "redis":
        want, got = len(batch) * 5, b""
        while len(got) < want:
            got += s.recv(1 << 20)
s.sendall(b"mn\r\n" if proto != "redis" else b"*1\r\n$4\r\nPING\r\n")
end = b"MN\r\n" if proto != "redis" else b"+PONG\r\n"
got = b""
while not got.endswith(end):
    got += s.recv(1 << 16)
PY
}
