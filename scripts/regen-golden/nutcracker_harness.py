"""Runs memcached servers and nutcracker on 127.0.0.1 and finds where nutcracker put each key.

Shared by scripts/regen-golden/twemproxy.py (the goldens) and scripts/live-nutcracker (the CI check).
Every process started here is a child of this Python process and is killed by Harness.close().
"""
import os
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_listening(port, proc, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process for port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class Conn:
    """A blocking memcached text-protocol connection."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def close(self):
        self.sock.close()

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def cmd(self, data):
        self.sock.sendall(data)
        return self.line()

    def get_many(self, keys):
        """The subset of `keys` this server holds."""
        self.sock.sendall(b"get " + b" ".join(keys) + b"\r\n")
        found = set()
        while True:
            line = self.line()
            if line == b"END":
                return found
            if not line.startswith(b"VALUE "):
                raise RuntimeError(f"unexpected reply {line!r}")
            parts = line.split(b" ")
            found.add(parts[1])
            self.exact(int(parts[3]) + 2)


def resp(*parts):
    """One RESP (redis) command."""
    out = b"*%d\r\n" % len(parts)
    for p in parts:
        out += b"$%d\r\n%s\r\n" % (len(p), p)
    return out


class RedisConn(Conn):
    """A blocking RESP connection; replies are read as single lines (enough for OK, integers, errors)."""

    def command(self, *parts):
        self.sock.sendall(resp(*parts))
        return self.line()

    def exists_many(self, keys):
        """The subset of `keys` this server holds (one pipelined EXISTS per key)."""
        self.sock.sendall(b"".join(resp(b"EXISTS", k) for k in keys))
        return {k for k in keys if self.line() == b":1"}


class Harness:
    def __init__(self):
        self.procs = []
        self.memcached = {}  # port -> Popen
        self.redis = {}  # port -> Popen
        self.tmp = tempfile.mkdtemp(prefix="shardring-nc-")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()

    def start_memcached(self, port):
        if port in self.memcached:
            return
        if not port_is_free(port):
            raise RuntimeError(f"port {port} is taken")
        p = subprocess.Popen(["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "16",
                              "-t", "1", "-u", "nobody"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        wait_listening(port, p)
        self.memcached[port] = p

    def start_redis(self, port):
        if port in self.redis:
            return
        if not port_is_free(port):
            raise RuntimeError(f"port {port} is taken")
        p = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                              "--appendonly", "no", "--daemonize", "no", "--dir", self.tmp],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        wait_listening(port, p)
        self.redis[port] = p

    def flush_all(self):
        for port in self.memcached:
            c = Conn(port)
            assert c.cmd(b"flush_all\r\n") == b"OK"
            c.close()
        for port in self.redis:
            c = RedisConn(port)
            assert c.command(b"FLUSHALL") == b"+OK"
            c.close()

    def stop_memcached(self, port):
        p = self.memcached.pop(port)
        p.kill()
        p.wait()

    def run_pool(self, yaml_text, listen_port, keys, backends, redis=False, before=None):
        """Starts nutcracker with `yaml_text`, sets every key through it, and returns
        ({key: backend port}, [keys nutcracker refused]). `backends` are the ports of the pool; with
        `redis`, the pool speaks RESP to redis servers. `before(listen_port)` runs once nutcracker
        listens, before any key is stored."""
        self.flush_all()
        conf = os.path.join(self.tmp, f"pool-{listen_port}.yml")
        with open(conf, "w") as f:
            f.write(yaml_text)
        stats = free_port()
        log = os.path.join(self.tmp, f"nutcracker-{listen_port}.log")
        p = subprocess.Popen(["nutcracker", "-c", conf, "-s", str(stats), "-a", "127.0.0.1", "-o", log],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        try:
            wait_listening(listen_port, p)
            if before is not None:
                before(listen_port)
            refused = []
            make = RedisConn if redis else Conn
            c = make(listen_port)
            for k in keys:
                try:
                    if redis:
                        reply = c.command(b"SET", k, b"x")
                    else:
                        reply = c.cmd(b"set " + k + b" 0 0 1\r\nx\r\n")
                except (ConnectionError, socket.timeout):
                    reply = b"<closed>"
                if reply not in (b"STORED", b"+OK"):
                    refused.append(k)
                    c.close()
                    c = make(listen_port)
            c.close()
            where = {}
            wanted = [k for k in keys if k not in set(refused)]
            for port in backends:
                b = make(port)
                for i in range(0, len(wanted), 20):
                    batch = wanted[i:i + 20]
                    for k in (b.exists_many(batch) if redis else b.get_many(batch)):
                        if k in where:
                            raise RuntimeError(f"key {k!r} on two servers")
                        where[k] = port
                b.close()
            missing = [k for k in wanted if k not in where]
            if missing:
                raise RuntimeError(f"{len(missing)} keys stored but found on no backend, e.g. {missing[0]!r}")
            return where, refused
        finally:
            p.kill()
            p.wait()
            self.procs.remove(p)
