"""shardring.pymemcache.Client as a participant of a pool in etcd, against a real etcd, real
memcached servers and the real `shardring` CLI (its `proxy`, `members` and `migrate`): it registers
with the proxy's digests and survives an outage of etcd, dual-writes while a next membership is
published, takes part in a whole `shardring migrate` under a versioned load without a stale read or a
lost write, and, cut off from etcd during the change (through a relay that blackholes silently), holds
the migration up, refuses only the keys that move, and lets it finish once healed.

The load and its checker are the Rust cut-off suite's (crates/shardring-cli/tests/cli/cut_off.rs,
crates/test-support/src/history.rs): each key has one writer that writes versions 1, 2, 3... through
the participants in turn; a read older than a write acknowledged before it began is stale, and the
final reads show any acknowledged write that was lost.
"""

from __future__ import annotations

import base64
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple

import pytest
from pymemcache.client.base import Client as Direct

from conftest import EtcdServer, Servers, free_port, shardring_cli
from history import History
from relay import Relay
from shardring import placement_digest
from shardring._gateway import Gateway, b64
from shardring.pymemcache import Client, FencedError

POOL = "alpha"
#: The keys the load writes and reads.
KEYS = 48
#: Keys written before the change and never touched by the load (they give the copy its length).
FILLER = 600


def key(i: int) -> str:
    """The load's key ``i``, spread over the ring (keys that differ only in their last bytes may all
    land on one server under fnv1a_64, as in nutcracker)."""
    return f"{((i + 1) * 0x9E3779B97F4A7C15) & (2**64 - 1):016x}:cut-off"


def pool_yaml(listen: int, ports: List[int]) -> str:
    servers = "".join(f"   - 127.0.0.1:{p}:1\n" for p in ports)
    return (f"{POOL}:\n  listen: 127.0.0.1:{listen}\n  hash: fnv1a_64\n  distribution: ketama\n"
            f"  timeout: 2000\n  servers:\n{servers}")


def wait(condition: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def port_of(node: str) -> int:
    return int(node.rsplit(":", 1)[1])


def holds(port: int, k: str) -> Optional[bytes]:
    """The value a server holds under ``k``, asked directly."""
    direct = Direct(("127.0.0.1", port), connect_timeout=2, timeout=2)
    try:
        return direct.get(k)
    finally:
        direct.close()


class World:
    """A real etcd, four memcached servers, the pool now (all four, published) and next (the first
    three) as YAML files, and the CLI."""

    def __init__(self, servers: Servers) -> None:
        self.servers = servers
        self.ports = [servers.memcached() for _ in range(4)]
        self.etcd: EtcdServer = servers.etcd_server()
        self.url = self.etcd.url
        self.now_file = servers.dir / "now.yml"
        self.now_file.write_text(pool_yaml(free_port(), self.ports))
        self.next_file = servers.dir / "next.yml"
        self.next_file.write_text(pool_yaml(free_port(), self.ports[:3]))
        # Publishing succeeds once etcd answers.
        wait(lambda: self.cli("members", "--etcd", self.url, "--pool", POOL, "-c", str(self.now_file),
                              "publish").returncode == 0, "etcd to take the pool")
        self.clients: List[Client] = []

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([shardring_cli(), *args], capture_output=True, text=True, timeout=60)

    def members(self, *args: str) -> str:
        out = self.cli("members", "--etcd", self.url, "--pool", POOL, *args)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def publish_next(self) -> None:
        self.members("-c", str(self.next_file), "publish", "--next")

    def participants(self) -> Dict[str, Tuple[str, Dict[str, str]]]:
        """The roster: id -> (live|absent, registration fields)."""
        out = {}
        for line in self.members("participants").splitlines():
            pid, state, value = line.split("\t")
            out[pid] = (state, dict(f.split("=", 1) for f in value.split()))
        return out

    def client(self, participant_id: str, url: Optional[str] = None, **kwargs: object) -> Client:
        c = Client(self.now_file, etcd=url or self.url, participant_id=participant_id, use_pooling=True,
                   default_noreply=False, connect_timeout=2, timeout=2, **kwargs)
        self.clients.append(c)
        return c

    def proxy(self) -> str:
        """A `shardring proxy --etcd` over the pool: its participant id."""
        listen = free_port()
        conf = self.servers.dir / f"proxy-{listen}.yml"
        conf.write_text(pool_yaml(listen, self.ports))
        self.servers.start([shardring_cli(), "proxy", "-c", str(conf), "--etcd", self.url,
                            "-s", str(free_port()), "-o", str(self.servers.dir / f"proxy-{listen}.log")],
                           listen)
        suffix = f"-127.0.0.1:{listen}"
        wait(lambda: any(p.endswith(suffix) for p in self.participants()), "the proxy to register")
        return next(p for p in self.participants() if p.endswith(suffix))

    def moved(self) -> Set[int]:
        """The load's keys whose owner differs between the four servers and the three."""
        def owners(path: Path) -> List[str]:
            out = self.cli("lookup", "--config", str(path), *[key(k) for k in range(KEYS)])
            assert out.returncode == 0, out.stderr
            return [line.split("\t")[1] for line in out.stdout.splitlines()]
        before, after = owners(self.now_file), owners(self.next_file)
        return {k for k in range(KEYS) if before[k] != after[k]}

    def migrate(self, *extra: str, rate: int = 150,
                on_line: Callable[[str], None] = lambda _: None) -> Tuple[int, str, float]:
        """Runs `shardring migrate --etcd` (by default at a rate that makes the copy last a second or
        so), calling ``on_line`` with each line it writes to stderr: exit status, stderr, seconds."""
        began = time.monotonic()
        child = subprocess.Popen(
            [shardring_cli(), "migrate", "--etcd", self.url, "--pool", POOL, "--nice", "0", "--rate", str(rate),
             "-c", str(self.now_file), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert child.stderr is not None
        lines = []
        for line in child.stderr:
            on_line(line)
            lines.append(line)
        return child.wait(timeout=60), "".join(lines), time.monotonic() - began

    def fill(self, via: Client) -> None:
        assert via.set_many({f"filler:{i}": b"v1" for i in range(FILLER)}) == []
        assert via.set_many({key(k): b"v1" for k in range(KEYS)}) == []

    def close(self) -> None:
        for c in self.clients:
            c.close()


@pytest.fixture
def world(servers: Servers) -> Iterator[World]:
    w = World(servers)
    yield w
    w.close()


class Load:
    """One writer per client (each owns every n-th key, and sends each write through the clients in
    turn), one reader per client; everything recorded."""

    def __init__(self, history: History, clients: List[Client]) -> None:
        self._stop = threading.Event()
        self._threads = []
        n = len(clients)
        for w in range(n):
            self._threads.append(threading.Thread(target=self._write, args=(history, clients, w), daemon=True))
        for p, c in enumerate(clients):
            self._threads.append(threading.Thread(target=self._read, args=(history, c, p), daemon=True))
        for t in self._threads:
            t.start()

    def _write(self, history: History, clients: List[Client], w: int) -> None:
        versions = [1] * KEYS
        turn = 0
        while not self._stop.is_set():
            for k in range(w, KEYS, len(clients)):
                versions[k] += 1
                p = turn % len(clients)
                turn += 1
                start = history.now()
                try:
                    stored = clients[p].set(key(k), f"v{versions[k]}".encode())
                    outcome, detail = ("written", None) if stored else ("error", f"not stored: {stored!r}")
                except FencedError as e:
                    outcome, detail = "fenced", str(e)
                except Exception as e:  # noqa: BLE001 (every failure is recorded)
                    outcome, detail = "error", repr(e)
                history.record(p, k, versions[k], start, outcome, detail)
            time.sleep(0.005)

    def _read(self, history: History, client: Client, p: int) -> None:
        k = p
        while not self._stop.is_set():
            k = (k + 7) % KEYS
            history.record(p, k, None, *read(history, client, k))
            time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


def read(history: History, client: Client, k: int) -> Tuple[float, str, object]:
    start = history.now()
    try:
        value = client.get(key(k))
        return start, "read", 0 if value is None else int(value.decode().lstrip("v"))
    except FencedError as e:
        return start, "fenced", str(e)
    except Exception as e:  # noqa: BLE001
        return start, "error", repr(e)


def finish(history: History, load: Load, clients: List[Client], name: str, moved: Set[int],
           fenced: List[int]) -> None:
    """Ends the load, reads every key through every client (the final phase: a lost write shows as a
    stale read there), checks the history and prints its table."""
    load.stop()
    history.phase("final")
    for p, c in enumerate(clients):
        for k in range(KEYS):
            start, outcome, detail = read(history, c, k)
            assert outcome == "read", f"final read of {key(k)} through client {p}: {detail}"
            history.record(p, k, None, start, outcome, detail)
    report = history.check()
    phases = ", ".join(f"{n} at {t:.1f} s" for t, n in history.phases())
    print(f"\n{name}: {phases}\n{report}")
    assert report.violations() == (0, 0), f"stale reads, lost writes:\n{report}"
    reads = sum(t.reads for t in report.tallies.values())
    assert reads > 200, f"the load ran:\n{report}"
    assert report.fenced_keys <= moved, f"only keys that move are fenced: {report.fenced_keys} of {moved}"
    for p in range(len(clients)):
        if p in fenced:
            assert report.fenced(p) > 0, f"client {p} fenced the keys that move:\n{report}"
        else:
            assert report.fenced(p) == 0, f"client {p} was never cut off:\n{report}"


def roster_value(url: str, pid: str) -> str:
    """``roster/<pid>`` as etcd holds it."""
    reply = Gateway(url).post("/v3/kv/range", {"key": b64(f"/shardring/{POOL}/roster/{pid}".encode())})
    kvs = reply.get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else ""


def test_a_client_registers_with_the_proxys_digests_and_again_after_etcd_comes_back(world: World) -> None:
    proxy = world.proxy()
    client = world.client("py-one", etcd_ttl=3)
    wait(lambda: world.participants().get("py-one", ("",))[0] == "live", "the client to register")
    roster = world.participants()
    (p_state, p_value), (c_state, c_value) = roster[proxy], roster["py-one"]
    assert (p_state, c_state) == ("live", "live")
    # What the proxy reports for the same pool, to the byte.
    assert c_value["current"] == p_value["current"] and c_value["next"] == p_value["next"] == "-", roster
    assert c_value["current"] == placement_digest(
        [f"127.0.0.1:{p}:1" for p in world.ports], hash="fnv1a_64", distribution="ketama")
    assert c_value["next_revision"] == "0" and int(c_value["current_revision"]) > 0
    assert roster_value(world.url, "py-one").endswith(f" instance={client.participant.instance}"), \
        "the roster's entry says which process wrote it"
    lease = client.participant.lease

    # etcd down for longer than the lease: the client keeps serving (no change is planned, so
    # nothing is fenced) and is registered again once etcd is back.
    world.etcd.kill()
    down = time.monotonic()
    while time.monotonic() - down < 7:
        assert client.set("during-the-outage", b"1") and client.get("during-the-outage") == b"1"
        time.sleep(0.5)
    world.etcd.restart()
    wait(lambda: world.participants().get("py-one", ("",))[0] == "live", "the client to be live again")
    assert world.participants()["py-one"][1]["current"] == p_value["current"]

    # A lease gone (revoked here: an expiry while etcd could not be reached, as etcd sees it):
    # registered again under a new one, with the same value.
    lease = client.participant.lease
    Gateway(world.url).revoke(lease)
    wait(lambda: client.participant.lease != lease and world.participants().get("py-one", ("",))[0] == "live",
         "the client to register under a new lease")

    # A clean stop leaves the roster; the proxy stays.
    client.close()
    world.clients.remove(client)
    assert list(world.participants()) == [proxy]


def test_the_default_participant_id_is_a_slot_a_restarted_process_takes_again(world: World) -> None:
    first = Client(world.now_file, etcd=world.url)
    second = Client(world.now_file, etcd=world.url)
    ids = [first.participant.id, second.participant.id]
    assert ids[0].endswith("-py0") and ids[1].endswith("-py1"), ids
    first.close()
    again = Client(world.now_file, etcd=world.url)
    assert again.participant.id == ids[0], "the slot given back is taken again"
    again.close()
    second.close()
    assert world.participants() == {}


def test_a_restarted_client_answers_for_its_predecessors_roster_entry(world: World) -> None:
    crashed = world.client("py-crash", etcd_ttl=2)
    crashed.participant.abandon()  # as a process killed: no clean stop
    wait(lambda: world.participants()["py-crash"][0] == "absent", "its lease to lapse")
    restarted = world.client("py-crash", etcd_ttl=2)
    wait(lambda: world.participants()["py-crash"][0] == "live", "the restarted client to register")
    assert roster_value(world.url, "py-crash").endswith(f" instance={restarted.participant.instance}")
    # The predecessor's clean stop, late, leaves its successor's entry alone.
    crashed.close()
    world.clients.remove(crashed)
    assert world.participants()["py-crash"][0] == "live"


def test_a_next_membership_makes_the_client_dual_write_and_register_it(world: World) -> None:
    proxy = world.proxy()
    client = world.client("py-one")
    world.publish_next()
    wait(lambda: all(v[1]["next"] != "-" for v in world.participants().values()), "both to register the next")
    roster = world.participants()
    assert roster["py-one"][1]["current"] == roster[proxy][1]["current"]
    assert roster["py-one"][1]["next"] == roster[proxy][1]["next"], roster
    assert roster["py-one"][1]["next"] == placement_digest(
        [f"127.0.0.1:{p}:1" for p in world.ports[:3]], hash="fnv1a_64", distribution="ketama")
    assert client.next_ring is not None and len(client.next_ring) == 3

    keys = [key(i) for i in range(400)]
    moving = [k for k in keys if client.next_server_for(k) is not None]
    staying = [k for k in keys if client.next_server_for(k) is None]
    assert moving and staying
    k, s = moving[0], staying[0]
    now, nxt = port_of(client.server_for(k)), port_of(client.next_server_for(k) or "")
    # A write of a key that moves lands on both owners; one of a key that stays, on its owner only.
    assert client.set(k, b"one")
    assert (holds(now, k), holds(nxt, k)) == (b"one", b"one")
    assert client.set(s, b"stays")
    assert [p for p in world.ports if holds(p, s) is not None] == [port_of(client.server_for(s))]
    # Reads stay on the owner now.
    Direct(("127.0.0.1", nxt)).set(k, b"other", noreply=False)
    assert client.get(k) == b"one"
    # cas: the owner now's token, then the value set on the owner next.
    _, token = client.gets(k)
    assert client.cas(k, b"two", token) is True
    assert (holds(now, k), holds(nxt, k)) == (b"two", b"two")
    assert client.cas(k, b"three", token) is False
    assert holds(nxt, k) == b"two", "a cas the owner now refused goes nowhere else"
    # The many-key writes too.
    assert client.set_many({m: b"many" for m in moving[:20]}) == []
    assert all(holds(port_of(client.next_server_for(m) or ""), m) == b"many" for m in moving[:20])
    assert client.delete_many(moving[:20])
    assert all(holds(port_of(client.next_server_for(m) or ""), m) is None for m in moving[:20])
    assert (client.dual_writes, client.dual_write_failures) == (1 + 1 + 20 + 20, 0)
    # A write its owner next did not take is not acknowledged: raised, as the proxy answers it
    # (once the key is copied nothing would bring it there, and the cut-over would lose it).
    victim = moving[1]
    gone = port_of(client.next_server_for(victim) or "")
    proc = next(p for p in world.servers.procs if str(gone) in p.args)
    proc.kill()
    proc.wait()
    with pytest.raises(Exception):
        client.set(victim, b"not acknowledged")
    assert client.dual_write_failures == 1


def test_a_migration_under_load_from_two_clients_loses_nothing(world: World) -> None:
    moved = world.moved()
    clients = [world.client("py-a"), world.client("py-b")]
    world.fill(clients[0])
    history = History()
    load = Load(history, clients)
    time.sleep(0.5)
    history.phase("next")
    world.publish_next()
    history.phase("migrate")
    # A slow copy (about 3 s), so that the load runs through every step.
    status, stderr, took = world.migrate("--confirm-timeout", "30", rate=50)
    print(f"\nmigrate exited {status} after {took:.1f} s")
    assert status == 0, stderr
    assert "every participant (2) dual-writes" in stderr, stderr
    time.sleep(0.3)
    finish(history, load, clients, "a migration from four servers to three", moved, fenced=[])
    for c in clients:
        assert len(c.ring) == 3 and c.next_ring is None
        assert c.participant.registration.next is None
        assert c.dual_writes > 0 and c.dual_write_failures == 0
    assert world.participants()["py-a"][1]["current"] == placement_digest(
        [f"127.0.0.1:{p}:1" for p in world.ports[:3]], hash="fnv1a_64", distribution="ketama")


def test_a_client_cut_off_during_the_change_holds_it_up_and_fences_only_the_keys_that_move(
    world: World,
) -> None:
    moved = world.moved()
    relay = Relay(world.etcd.port)
    try:
        clients = [world.client("py-a", etcd_ttl=4), world.client("py-b", url=relay.url, etcd_ttl=4)]
        world.fill(clients[0])
        history = History()
        load = Load(history, clients)
        time.sleep(0.5)
        world.publish_next()
        probes: Dict[str, object] = {}
        cut_at: List[float] = []
        lease = clients[1].participant.lease

        def probe() -> None:
            # Past the fence time (60 % of the 4 s lease) without a renewal: only keys that move are
            # refused by the cut-off client.
            time.sleep(3.5)
            b = clients[1]
            m = next(k for k in sorted(moved))
            s = next(k for k in range(KEYS) if k not in moved)
            try:
                b.get(key(m))
                probes["moving"] = "served"
            except FencedError as e:
                probes["moving"] = e
            try:
                probes["staying"] = b.get(key(s))
            except Exception as e:  # noqa: BLE001
                probes["staying"] = e

        def cut(line: str) -> None:
            if "copying" in line and not cut_at:
                cut_at.append(time.monotonic())
                history.phase("cut off")
                relay.blackhole()
                threading.Thread(target=probe, daemon=True).start()

        status, first, took = world.migrate("--confirm-timeout", "8", on_line=cut)
        print(f"\nthe first migrate exited {status} after {took:.1f} s "
              f"({time.monotonic() - cut_at[0]:.1f} s after the cut)")
        print(first.strip())
        assert cut_at, first
        assert status != 0 and "py-b" in first, f"never 0 while a participant has not acknowledged:\n{first}"
        assert isinstance(probes.get("moving"), FencedError), probes
        assert "fenced" in str(probes["moving"]) and "try again" in str(probes["moving"])
        assert isinstance(probes.get("staying"), bytes), probes

        history.phase("healed")
        relay.restore()
        healed = time.monotonic()
        wait(lambda: world.participants().get("py-b", ("",))[0] == "live", "the cut-off client to register again")
        print(f"registered again {time.monotonic() - healed:.1f} s after healing")
        assert clients[1].participant.lease != lease, "its lease lapsed: a new one"
        status, second, took = world.migrate("--confirm-timeout", "30")
        print(f"the second migrate exited {status} after {took:.1f} s:\n{second.strip()}")
        assert status == 0, second
        assert ("cut over in etcd" in first) == ("resuming" in second), second
        time.sleep(0.5)
        finish(history, load, clients, "a client cut off during the copy", moved, fenced=[1])
        report = history.check()
        span = report.fenced_span(1)
        print(f"client 1 fenced {report.fenced(1)} requests, from {span[0]:.1f} s to {span[1]:.1f} s "
              f"({clients[1].fenced} refusals counted by the client)")
        for c in clients:
            assert len(c.ring) == 3 and c.next_ring is None
    finally:
        relay.close()
