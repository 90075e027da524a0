#!/usr/bin/env python3
"""Regenerates testdata/nginx/: where nginx (Debian 12's nginx 1.22.1) sends each key with
`hash $arg_key consistent`.

Runs one nginx (not daemonized, child of this script, 127.0.0.1 only) that serves, on ports 32001-32040,
backends answering "$server_port $arg_key", and per configuration a front server proxying to an upstream
block `hash $arg_key consistent` over some of them. Each key is sent raw in the query string
(`GET /?key=KEY`); $arg_key is the raw bytes, not URL-decoded. A key is kept only if the backend saw
exactly those bytes (keys with `&`, `#`, `%`-escapes nginx treats specially, … are dropped and counted).

Writes <config>.tsv: `# servers: 127.0.0.1:PORT=WEIGHT ...` (the upstream block, in order), `# dropped:`,
then HEXKEY<TAB>127.0.0.1:PORT.

Needs: apt-get install -y nginx. Usage: scripts/regen-golden/nginx.py   (from the repository root)
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "regen-golden"))
from keys import keys  # noqa: E402
from nutcracker_harness import free_port, port_is_free, wait_listening  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "nginx")

EQUAL3 = [(32001 + i, 1) for i in range(3)]
UNEQUAL = [(32001, 1), (32002, 2), (32003, 3), (32004, 5)]
MANY40 = [(32001 + i, 1 + i % 4) for i in range(40)]
REMOVED = [s for i, s in enumerate(MANY40) if i != 17]
EQUAL40 = [(32001 + i, 1) for i in range(40)]
CONFIGS = [("equal3", EQUAL3), ("unequal", UNEQUAL), ("many40", MANY40), ("many40-removed17", REMOVED),
           ("equal40", EQUAL40), ("one-server", [(32001, 1)])]

# Ties: among 127.0.0.1:20801..21200 (weight 1), 127.0.0.1:20893 and 127.0.0.1:20954 share a point.
# nginx sorts points with a stable qsort and keeps the first of equal ones, so the server listed first
# owns it; 20954 is listed first here (byte order would pick 20893).
TIE_PORTS = [20954] + [p for p in range(20801, 21201) if p != 20954]
CONFIGS.append(("ties400", [(p, 1) for p in TIE_PORTS]))


def tie_keys():
    """Keys whose CRC-32 lands on the arc that ends at the shared point of 20893 and 20954."""
    points = {}
    for port in TIE_PORTS:
        base = b"127.0.0.1\0" + str(port).encode()
        prev = 0
        for _ in range(160):
            prev = zlib.crc32(base + struct.pack("<I", prev)) & 0xFFFFFFFF
            points.setdefault(prev, set()).add(port)
    tie = next(p for p, owners in points.items() if owners == {20893, 20954})
    low = max(p for p in points if p < tie)
    keys, j = [], 0
    while len(keys) < 8:
        k = f"tie-key-{j}".encode()
        if low < (zlib.crc32(k) & 0xFFFFFFFF) <= tie:
            keys.append(k)
        j += 1
    return keys


def request(port, key):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /?key=" + key + b" HTTP/1.0\r\nHost: golden\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return None, None
    port_s, _, seen = body.partition(b" ")
    return int(port_s), seen


def main():
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="shardring-nginx-")
    backends = sorted({p for _, servers in CONFIGS for p, _ in servers})
    for p in backends:
        if not port_is_free(p):
            raise SystemExit(f"port {p} is taken")
    fronts = {name: free_port() for name, _ in CONFIGS}
    conf = [f"pid {tmp}/nginx.pid;", f"error_log {tmp}/error.log;", "worker_processes 1;",
            "events { worker_connections 4096; }", "http {", f"  access_log off;",
            f"  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;",
            f"  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;"]
    for p in backends:
        conf.append(f"  server {{ listen 127.0.0.1:{p}; location / {{ return 200 \"$server_port $arg_key\"; }} }}")
    for name, servers in CONFIGS:
        conf.append(f"  upstream u_{name.replace('-', '_')} {{ hash $arg_key consistent;")
        for p, w in servers:
            conf.append(f"    server 127.0.0.1:{p} weight={w};")
        conf.append("  }")
        conf.append(f"  server {{ listen 127.0.0.1:{fronts[name]}; location / {{ "
                    f"proxy_pass http://u_{name.replace('-', '_')}; }} }}")
    conf.append("}")
    path = os.path.join(tmp, "nginx.conf")
    with open(path, "w") as f:
        f.write("\n".join(conf) + "\n")
    proc = subprocess.Popen(["nginx", "-p", tmp, "-c", path, "-g", "daemon off; user nobody nogroup;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for p in list(fronts.values()) + backends:
            wait_listening(p, proc)
        # No empty key: nginx sends it to round robin, not to the ring (not reproducible).
        ks = keys()
        for name, servers in CONFIGS:
            rows, dropped = [], 0
            for k in (tie_keys() + ks if name == "ties400" else ks):
                port, seen = request(fronts[name], k)
                if port is None or seen != k:
                    dropped += 1
                    continue
                rows.append(f"{k.hex()}\t127.0.0.1:{port}\n")
            with open(os.path.join(OUT, name + ".tsv"), "w") as f:
                f.write("# servers: " + " ".join(f"127.0.0.1:{p}={w}" for p, w in servers) + "\n")
                f.write(f"# dropped: {dropped}\n")
                f.writelines(rows)
            print(f"{name}: {len(rows)} keys, {dropped} dropped")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
