"""A TCP relay that can blackhole a participant's path to etcd silently (as crates/test-support's
``Relay`` does for the Rust suite): while blackholed nothing passes either way, yet no connection is
closed and new ones are accepted and left hanging, as in a partition that drops packets. Restored,
what was held back passes too."""

from __future__ import annotations

import select
import socket
import threading
from typing import List


class Relay:
    """Relays ``127.0.0.1:<port>`` to ``target_port`` on 127.0.0.1 until :meth:`close`."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        #: Set while bytes pass.
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: what a client is pointed at."""
        return f"http://127.0.0.1:{self.port}"

    def blackhole(self) -> None:
        """Stops passing anything, silently."""
        self._open.clear()

    def restore(self) -> None:
        """Passes bytes again."""
        self._open.set()

    def close(self) -> None:
        """Stops relaying and closes every socket."""
        self._closed.set()
        self._open.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass

    def _keep(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.append(s)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            self._keep(inbound)
            threading.Thread(target=self._relay, args=(inbound,), daemon=True).start()

    def _relay(self, inbound: socket.socket) -> None:
        self._open.wait()  # a connection made while blackholed hangs until restored
        try:
            outbound = socket.create_connection(("127.0.0.1", self._target))
        except OSError:
            inbound.close()
            return
        self._keep(outbound)
        done = threading.Event()
        for src, dst in ((inbound, outbound), (outbound, inbound)):
            threading.Thread(target=self._pump, args=(src, dst, done), daemon=True).start()
        done.wait()
        for s in (inbound, outbound):
            try:
                s.close()
            except OSError:
                pass

    def _pump(self, src: socket.socket, dst: socket.socket, done: threading.Event) -> None:
        try:
            while not done.is_set() and not self._closed.is_set():
                self._open.wait()
                ready, _, _ = select.select([src], [], [], 0.2)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                self._open.wait()  # read just as the blackhole began: held back until restored
                dst.sendall(data)
        except OSError:
            pass
        done.set()
