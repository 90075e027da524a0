#!/usr/bin/env python3
"""Regenerates testdata/twemproxy-config/: which configuration files nutcracker 0.5.0 accepts.

Writes every case below to <case>.yml and records `nutcracker --test-conf -c <case>.yml`'s verdict
(exit status 0: ok, else invalid) in verdicts.tsv. shardring's reader must agree on every case.
Needs: apt-get install -y nutcracker. Usage: scripts/regen-golden/twemproxy_config.py (repo root).
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "testdata", "twemproxy-config")

OK_POOL = "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n"
CASES = {
    "minimal": OK_POOL,
    "every-key": """p:
  listen: 127.0.0.1:22121
  hash: murmur
  hash_tag: "{}"
  distribution: modula
  timeout: 400
  backlog: 1024
  client_connections: 100
  redis: true
  redis_auth: secret
  redis_db: 3
  preconnect: true
  auto_eject_hosts: true
  server_connections: 2
  server_retry_timeout: 2000
  server_failure_limit: 5
  tcpkeepalive: true
  servers:
   - 127.0.0.1:6379:1 r1
   - 127.0.0.1:6380:2
""",
    "two-pools": OK_POOL + "q:\n  listen: 127.0.0.1:22122\n  servers:\n   - 127.0.0.1:11212:1 named\n",
    "unix-listen": "p:\n  listen: /tmp/shardring-nc.sock 0666\n  servers:\n   - 127.0.0.1:11211:1\n",
    "unix-listen-garbage-permissions": "p:\n  listen: /tmp/shardring-nc.sock abc\n  servers:\n   - 127.0.0.1:11211:1\n",
    "unix-listen-bad-permissions": "p:\n  listen: /tmp/shardring-nc.sock 1000\n  servers:\n   - 127.0.0.1:11211:1\n",
    "unix-server": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - /tmp/mc.sock:1\n",
    "ipv6-server": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - ::1:11211:1\n",
    "quoted-values": "p:\n  listen: '127.0.0.1:22121'\n  hash: \"md5\"\n  servers:\n   - \"127.0.0.1:11211:1 a\"\n",
    "comments": "# a comment\np: # pool\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1 # x\n",
    "same-host-different-port": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1\n",
    # refused
    "unknown-key": OK_POOL + "  colour: blue\n",
    "reuseport": OK_POOL + "  reuseport: true\n",
    "duplicate-key": OK_POOL + "  hash: md5\n  hash: crc32\n",
    "bad-hash": OK_POOL + "  hash: sha1\n",
    "bad-hash-case": OK_POOL + "  hash: MD5\n",
    "bad-distribution": OK_POOL + "  distribution: round_robin\n",
    "bad-hash-tag": OK_POOL + "  hash_tag: \"{\"\n",
    "bad-bool": OK_POOL + "  redis: yes\n",
    "negative-number": OK_POOL + "  timeout: -1\n",
    "signed-number": OK_POOL + "  timeout: +5\n",
    "zero-server-connections": OK_POOL + "  server_connections: 0\n",
    "redis-auth-without-redis": OK_POOL + "  redis_auth: pw\n",
    "empty-value": OK_POOL + "  hash:\n",
    "no-listen": "p:\n  servers:\n   - 127.0.0.1:11211:1\n",
    "bad-listen-port": "p:\n  listen: 127.0.0.1:70000\n  servers:\n   - 127.0.0.1:11211:1\n",
    "listen-without-port": "p:\n  listen: 127.0.0.1\n  servers:\n   - 127.0.0.1:11211:1\n",
    "no-servers": "p:\n  listen: 127.0.0.1:22121\n",
    "empty-servers": "p:\n  listen: 127.0.0.1:22121\n  servers:\n",
    "zero-weight": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:0\n",
    "no-weight": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211\n",
    "bad-port": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:0:1\n",
    "two-names": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1 a b\n",
    "duplicate-server": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11211:2\n",
    "duplicate-server-name": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1 x\n   - 127.0.0.1:11212:1 x\n",
    "name-equals-11211-identity": "p:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1 127.0.0.1\n",
    "duplicate-pool": OK_POOL + OK_POOL.replace("22121", "22122"),
    "duplicate-listen": OK_POOL + OK_POOL.replace("p:", "q:"),
    "same-listen-spelt-differently": OK_POOL + OK_POOL.replace("p:", "q:").replace("22121", "022121"),
    "flow-sequence": "p:\n  listen: 127.0.0.1:22121\n  servers: [127.0.0.1:11211:1]\n",
    "flow-mapping": "p: {listen: 127.0.0.1:22121}\n",
    "anchor": "p: &a\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n",
    "document-start": "---\n" + OK_POOL,
    "two-documents": OK_POOL + "---\n" + OK_POOL.replace("p:", "q:").replace("22121", "22122"),
    "nested-mapping": "p:\n  listen: 127.0.0.1:22121\n  hash:\n    a: b\n  servers:\n   - 127.0.0.1:11211:1\n",
    "scalar-root": "just a string\n",
    "empty-file": "",
    "yaml-syntax-error": "p:\n  listen: 127.0.0.1:22121\n   servers: [\n",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = []
    for name, text in CASES.items():
        path = os.path.join(OUT, name + ".yml")
        with open(path, "w") as f:
            f.write(text)
        res = subprocess.run(["nutcracker", "--test-conf", "-c", path], capture_output=True, text=True)
        verdict = "ok" if res.returncode == 0 else "invalid"
        rows.append(f"{name}\t{verdict}\n")
        print(f"{name}: {verdict}")
    with open(os.path.join(OUT, "verdicts.tsv"), "w") as f:
        f.write("# case<TAB>verdict of `nutcracker --test-conf` (nutcracker 0.5.0)\n")
        f.writelines(rows)


if __name__ == "__main__":
    main()
