"""Fixtures of the Python package's tests: the repository's golden files, and real memcached,
nutcracker and etcd servers on free 127.0.0.1 ports (as crates/test-support starts them for the Rust
tests), each stopped when its test ends."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTDATA = REPO / "testdata"


class Golden:
    """A golden file: its ``# name: value`` header and its ``(key, node)`` rows (keys in hex)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: Dict[str, str] = {}
        self.rows: List[Tuple[bytes, str]] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                name, sep, value = line[2:].partition(": ")
                if sep or line.endswith(":"):
                    self.header.setdefault(name.rstrip(":"), value)
                continue
            if not line:
                continue
            key, node = line.split("\t")
            self.rows.append((bytes.fromhex(key), node))

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.header.get(name, default)

    def keys(self) -> List[bytes]:
        return [k for k, _ in self.rows]

    def nodes(self) -> List[str]:
        return [n for _, n in self.rows]


def goldens(mode: str) -> List[Path]:
    return sorted((TESTDATA / mode).glob("*.tsv"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: Optional[subprocess.Popen] = None, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")
            time.sleep(0.02)


def need(program: str) -> str:
    """The program's path; a skip outside CI when it is missing (CI installs it: .ci/run)."""
    path = shutil.which(program) or (f"/usr/sbin/{program}" if os.path.exists(f"/usr/sbin/{program}") else None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{program} must be installed in CI")
        pytest.skip(f"{program} is not installed")
    return path


class Servers:
    """Child processes, each stopped (and waited for) at the end."""

    def __init__(self) -> None:
        self.procs: List[subprocess.Popen] = []
        self.dir = Path(tempfile.mkdtemp(prefix="shardring-py-"))

    def start(self, args: List[str], port: int) -> subprocess.Popen:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        wait_listening(port, proc)
        return proc

    def memcached(self) -> int:
        port = free_port()
        self.start([need("memcached"), "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "16", "-t", "1", "-u", "root"], port)
        return port

    def nutcracker(self, config: str, listen_port: int) -> None:
        conf = self.dir / f"nutcracker-{listen_port}.yml"
        conf.write_text(config)
        args = [need("nutcracker"), "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1",
                "-o", str(self.dir / f"nutcracker-{listen_port}.log")]
        self.start(args, listen_port)

    def etcd(self) -> str:
        return self.etcd_server().url

    def etcd_server(self) -> "EtcdServer":
        """An etcd that can be killed and started again on the same ports and data."""
        client, peer = free_port(), free_port()
        data = self.dir / f"etcd-{client}"
        args = [need("etcd"), "--data-dir", str(data), "--name", "py",
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"py=http://127.0.0.1:{peer}"]
        return EtcdServer(self, args, client)

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class EtcdServer:
    """One etcd of a :class:`Servers`, on the same ports and data dir across restarts."""

    def __init__(self, servers: Servers, args: List[str], port: int) -> None:
        self._servers = servers
        self._args = args
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: Optional[subprocess.Popen] = servers.start(args, port)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing flushed, no goodbye to anyone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        """Starts it again over the data it had."""
        self.kill()
        self.proc = self._servers.start(self._args, self.port)


@pytest.fixture
def servers() -> Iterator[Servers]:
    s = Servers()
    try:
        yield s
    finally:
        s.stop()


def shardring_cli() -> str:
    """The CLI the Rust tests check (`cargo build -p shardring-cli`, which scripts/test.d/python runs)."""
    for profile in ("debug", "release"):
        path = REPO / "target" / profile / "shardring"
        if path.exists():
            return str(path)
    if os.environ.get("CI"):
        pytest.fail("target/debug/shardring must be built in CI")
    pytest.skip("the shardring CLI is not built (cargo build -p shardring-cli)")
